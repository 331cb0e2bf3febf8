"""Can a robot stand on the floor the way a reference moves? Two checks per stance frame:

- the whole robot's COM, projected on the floor, inside the support polygon (the convex hull of the sole
  contact spheres of the feet in contact): the quasi-static condition;
- the centre of pressure (CoP) the reference's own momentum needs inside it. Newton-Euler about the COM c
  with the ground reaction F = M (c'' + g) acting at a floor point p: (p - c) x F = dL/dt (L: the whole
  robot's angular momentum about its COM, motions.momentum), so

      p_x = c_x - (dL_y/dt + c_z F_x) / F_z,      p_y = c_y + (dL_x/dt - c_z F_y) / F_z.

  The floor can only push with its pressure inside the feet. Where the required CoP leaves the support, no
  contact force tracks the reference: a tracking policy must depart from it there (or fall).

Margins are signed distances to the nearest edge line of the support polygon (m): positive inside (exact),
negative outside (the distance to that edge's line: a lower bound at corners). Frames next to a flight are
left out of the CoP check (their central differences straddle the touch-down's velocity jump), and so are the
first and last two frames (one-sided differences).

    python -m motions preview reach_twist    # prints both margins and where the CoP leaves the feet
"""
from __future__ import annotations

import mujoco
import numpy as np
from scipy.spatial import ConvexHull, QhullError

from motions.clip_files import motion_root_quat
from motions.motion import Motion
from robots.physics import GRAVITY

SOLE_ON_FLOOR_M = 0.005  # a sole sphere within this of its foot's lowest one supports (the others: heel lifted)
HOVER_M = (0.003, 0.02)  # a foot this high above the floor while the other stands: neither on the floor nor a step


def sole_points(pos: np.ndarray, quat: np.ndarray, q: np.ndarray) -> np.ndarray:
    """(T, 2, S, 3) centres of each foot's sole contact spheres by FK on the bridge model."""
    from motions.clips import _fk_model

    model, qadr, soles = _fk_model()[:3]
    d = mujoco.MjData(model)
    out = np.zeros((len(pos), 2, len(soles[0]), 3))
    for k in range(len(pos)):
        d.qpos[:3] = pos[k]
        d.qpos[3:7] = quat[k]
        d.qpos[qadr] = q[k]
        mujoco.mj_kinematics(model, d)
        for f in range(2):
            out[k, f] = d.geom_xpos[soles[f]]
    return out


def support_margin(points: np.ndarray, p: np.ndarray) -> float:
    """Signed distance of floor point `p` to the nearest edge line of the convex hull of `points` (m, > 0 inside).
    Points on a line (on the toes: the toe spheres of both feet side by side) support along a segment only: minus
    the distance to it."""
    try:
        eq = ConvexHull(points).equations  # n . x + offset <= 0 inside, |n| = 1
    except QhullError:
        along = points @ (points[-1] - points[0])
        a, b = points[np.argmin(along)], points[np.argmax(along)]
        u = np.clip(np.dot(p - a, b - a) / max(np.dot(b - a, b - a), 1e-300), 0.0, 1.0)
        return -float(np.linalg.norm(p - (a + u * (b - a))))
    return float(-np.max(eq[:, :2] @ p + eq[:, 2]))


def required_cop(com: np.ndarray, L: np.ndarray, mass: float, dt: float) -> np.ndarray:
    """(T, 2) floor CoP that gives the COM path `com` (T, 3) and angular momentum `L` (T, 3) about it."""
    acc = np.gradient(np.gradient(com, dt, axis=0), dt, axis=0)
    F = mass * (acc + np.array([0.0, 0.0, GRAVITY]))
    Ld = np.gradient(L, dt, axis=0)
    fz = np.where(F[:, 2] > 1e-9, F[:, 2], np.nan)  # no push (a floor-pull): no CoP
    return np.stack([com[:, 0] - (Ld[:, 1] + com[:, 2] * F[:, 0]) / fz,
                     com[:, 1] + (Ld[:, 0] - com[:, 2] * F[:, 1]) / fz], axis=1)


def balance(m: Motion) -> dict:
    """Per frame (T,): `com` (T, 3), `cop` (T, 2), `com_margin`, `cop_margin` (m; NaN where not checked), the
    `checked` stance mask of the CoP check, `support` (per frame the (n, 2) floor points whose convex hull is the
    support polygon; None in flight), and the worst of each margin with its time."""
    from motions.clips import _fk_model
    from motions.momentum import _root_pos, com_trajectory, motion_angmom

    model = _fk_model()[0]
    pos = _root_pos(m)
    com = com_trajectory(m)
    L, _ = motion_angmom(m)
    cop = required_cop(com, L, float(np.sum(model.body_mass)), m.dt)
    soles = sole_points(pos, motion_root_quat(m), m.ref_q)
    contact = m.contact if m.contact is not None else np.ones((m.num_steps, 2), bool)
    stance = contact.any(axis=1)
    near_flight = np.convolve((~stance).astype(int), np.ones(3, int), mode="same") > 0
    checked = stance & ~near_flight
    checked[:2] = checked[-2:] = False  # one-sided differences at the ends
    com_margin, cop_margin = np.full(m.num_steps, np.nan), np.full(m.num_steps, np.nan)
    support = [None] * m.num_steps
    for k in np.flatnonzero(stance):
        on = soles[k][contact[k]]  # (feet, S, 3): a foot's spheres on the floor (within 5 mm of its lowest; heel lift)
        pts = support[k] = on[on[..., 2] <= on[..., 2].min(axis=1, keepdims=True) + SOLE_ON_FLOOR_M][:, :2]
        com_margin[k] = support_margin(pts, com[k, :2])
        if checked[k]:
            cop_margin[k] = support_margin(pts, cop[k]) if np.all(np.isfinite(cop[k])) else -np.inf
    t = m.times
    out = {"com": com, "cop": cop, "com_margin": com_margin, "cop_margin": cop_margin, "checked": checked,
           "support": support}
    for key in ("com_margin", "cop_margin"):
        v = out[key]
        k = None if np.isnan(v).all() else int(np.nanargmin(v))
        out[f"min_{key}_m"] = float(v[k]) if k is not None else None
        out[f"min_{key}_t"] = float(t[k]) if k is not None else None
    return out


def hovering(sole_h: np.ndarray, low: float = HOVER_M[0], high: float = HOVER_M[1]) -> np.ndarray:
    """(T, 2) bool from (T, 2) lowest-sole heights (m, motions.clips.sole_heights_and_ankles): a foot `low` to
    `high` above the floor while the other is below `low`. Retargeting leaves standing feet like that; a robot
    that tracks such a pose closely carries its weight on the other foot alone."""
    h = np.asarray(sole_h, float)
    return (h >= low) & (h < high) & (h < low)[:, ::-1]


def outside_windows(margin: np.ndarray, t: np.ndarray) -> list[tuple[float, float]]:
    """(start, end) times of the runs of frames with margin < 0."""
    bad = np.nan_to_num(margin, nan=1.0) < 0
    edges = np.flatnonzero(np.diff(np.r_[0, bad.astype(int), 0]))
    return [(float(t[a]), float(t[b - 1])) for a, b in zip(edges[::2], edges[1::2])]
