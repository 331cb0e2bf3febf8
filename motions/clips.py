"""Imported motion clips (npz, csv) -> the same `Motion` the keyframe YAML files produce.

    from motions.clips import load_clip
    m = load_clip("path/to/clip.npz")        # or .csv (LAFAN-retargeted, 30 Hz)

What happens to a clip (motions.clip_files reads it into w, x, y, z quaternions and motor order):
1. Checks, each a MotionError naming the file and, where it applies, the frame and joint: the
   table's shape (23 vs 29 DoF), empty or one-frame clips, non-finite values, missing fps,
   non-unit quaternions, quaternions that look like the other component order (the pelvis would
   be lying down in the file's order and upright in the other; a yaw-only quaternion read in the
   wrong order is a 180 deg turn about an axis tilted from z by the yaw, so a clip heading within
   ~60 deg of +-x cannot be told apart this way), joints beyond their limits by more
   than `limit_tol` (within it they are clipped to the limits), feet that never come within
   `touch_tol` of the floor.
2. Resampling to the control grid (50 Hz) from t = 0 to the last frame: positions and joints
   linearly, the root quaternion by slerp.
3. Alignment to the robot's start: the first frame's heading (yaw) is turned to +x and its x, y
   moved to 0.
4. Forward kinematics of the soles on robots.model's bridge model (the same sole spheres the
   keyframe motions and eval use): the root is raised or lowered so the first frame's lowest sole
   stands where the home keyframe's does, and any later frame whose lowest sole would be below
   that is lifted (the feet are kept above the floor). Sole heights are reported above the home
   stance, as for keyframe motions.
5. References: joint and pelvis velocities by central differences, foot contact = sole within
   CONTACT_HEIGHT_M of the stance height, flight = both feet off, flight windows = (last stance
   frame, first stance frame after) as for keyframe motions.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np

from motions.clip_files import RawClip, read_clip_file
from motions.motion import Motion, MotionError
from robots import g1
from robots.physics import quat_mul

CONTACT_HEIGHT_M = 0.005  # a sole within this of the home stance height is on the floor
QUAT_NORM_TOL = 1e-3
LIMIT_TOL_RAD = 0.05  # joints beyond their limits by less than this are clipped, more is an error
LIFT_TOL_M = 1e-4  # soles this little below the home stance (0.8 mm above the floor) stay as they are
TOUCH_TOL_M = 0.05  # a clip whose lowest sole never comes this close to the floor is refused
# Reward weights of an imported clip (train/rewards.py's terms); keyframe motions set their own.
CLIP_REWARD_WEIGHTS = {
    "joint_pos": 1.0, "joint_vel": 0.1, "base_height": 1.0, "base_lin_vel": 0.5, "base_orientation": 0.5,
    "foot_height": 1.0, "foot_contact": 0.5, "action_rate": -0.01, "residual": -0.2, "torque": -1.0e-5,
    "alive": 0.5, "fall": -10.0,
}


def _err(path, msg: str) -> MotionError:
    return MotionError(f"{path}: {msg}")


def tilt_deg(quat_wxyz: np.ndarray) -> np.ndarray:
    """Angle between the body z axis and world z, per row (w, x, y, z)."""
    x, y = quat_wxyz[..., 1], quat_wxyz[..., 2]
    n2 = np.sum(quat_wxyz**2, axis=-1)
    return np.degrees(np.arccos(np.clip(1 - 2 * (x**2 + y**2) / n2, -1, 1)))


def check_quaternions(raw: RawClip) -> None:
    q = raw.root_quat
    n = np.linalg.norm(q, axis=1)
    bad = np.flatnonzero(np.abs(n - 1) > QUAT_NORM_TOL)
    if bad.size:
        f = int(bad[0])
        raise _err(raw.path, f"frame {f}: root quaternion {np.round(q[f], 4).tolist()} has norm {n[f]:.4f}, not 1 "
                   f"({bad.size} frames); normalise it, or check the columns (root x, y, z then the quaternion)")
    csv = raw.path.suffix == ".csv"
    other = q[:, [1, 2, 3, 0]] if csv else q[:, [3, 0, 1, 2]]  # the file's columns read in the other order
    here, there = float(np.median(tilt_deg(q))), float(np.median(tilt_deg(other)))
    if here > 60 and there < 30:
        order, wrong = ("x, y, z, w", "w, x, y, z") if csv else ("w, x, y, z", "x, y, z, w")
        raise _err(raw.path, f"the root quaternion looks like {wrong} order: read as {order} (this format's order) "
                   f"the pelvis is tilted {here:.0f} deg (median over frames), read as {wrong} {there:.0f} deg; "
                   f"reorder the quaternion columns to {order}")


def check_joint_limits(raw: RawClip, tol: float) -> np.ndarray:
    """The joints clipped to their limits; beyond them by more than `tol` is an error naming frame and joint."""
    lo, hi = g1.JOINT_POS_MIN, g1.JOINT_POS_MAX
    over = np.maximum(lo - raw.joints, raw.joints - hi)
    if (over > tol).any():
        f, j = map(int, np.argwhere(over > tol)[0])
        raise _err(raw.path, f"frame {f}: {g1.JOINT_NAMES[j]} = {raw.joints[f, j]:.3f} rad is beyond its limits "
                   f"[{lo[j]:.3f}, {hi[j]:.3f}] by {over[f, j]:.3f} rad (tolerance {tol} rad; "
                   f"{int((over > tol).any(axis=1).sum())} frames); retarget to the G1's joint limits "
                   "(robots/g1.py) or check the joint order")
    return np.clip(raw.joints, lo, hi)


def slerp(q0: np.ndarray, q1: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Row-wise spherical interpolation of unit quaternions (shortest arc)."""
    dot = np.sum(q0 * q1, axis=1)
    q1 = np.where(dot[:, None] < 0, -q1, q1)
    dot = np.abs(dot)
    th = np.arccos(np.clip(dot, -1, 1))
    small = th < 1e-6
    sin = np.where(small, 1.0, np.sin(th))
    a = np.where(small, 1 - s, np.sin((1 - s) * th) / sin)
    b = np.where(small, s, np.sin(s * th) / sin)
    out = a[:, None] * q0 + b[:, None] * q1
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def resample(raw: RawClip, joints: np.ndarray, dt: float):
    """(times, root_pos, root_quat, joints) on the grid k * dt from 0 to the last frame."""
    n = raw.root_pos.shape[0]
    dur = (n - 1) / raw.fps
    T = int(np.floor(dur / dt + 1e-6)) + 1
    t = np.arange(T) * dt
    u = np.minimum(t * raw.fps, n - 1)
    i0 = np.minimum(np.floor(u).astype(int), n - 2)
    s = u - i0
    lin = lambda a: a[i0] * (1 - s)[:, None] + a[i0 + 1] * s[:, None]  # noqa: E731
    q = raw.root_quat / np.linalg.norm(raw.root_quat, axis=1, keepdims=True)
    return t, lin(raw.root_pos), slerp(q[i0], q[i0 + 1], s), lin(joints)


def yaw_of(q: np.ndarray) -> float:
    w, x, y, z = q
    return float(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))


def align_start(pos: np.ndarray, quat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Turn the first frame's heading to +x and move its x, y to 0 (z unchanged)."""
    yaw = yaw_of(quat[0])
    c, s = np.cos(-yaw), np.sin(-yaw)
    rel = pos - [pos[0, 0], pos[0, 1], 0.0]
    out = np.stack([c * rel[:, 0] - s * rel[:, 1], s * rel[:, 0] + c * rel[:, 1], rel[:, 2]], 1)
    qz = np.array([np.cos(-yaw / 2), 0, 0, np.sin(-yaw / 2)])
    qa = quat_mul(np.broadcast_to(qz, quat.shape), quat)
    qa = np.where(qa[:, :1] < 0, -qa, qa)  # w >= 0 (the same rotation)
    return out, qa


@functools.lru_cache(maxsize=1)
def _fk_model():
    import mujoco

    from robots import model as RM

    m = RM.build_bridge_model()
    soles = list(RM.sole_spheres(m))
    ankles = [m.joint(f"{s}_ankle_pitch_joint").id for s in ("left", "right")]
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, m.key("home").id)
    mujoco.mj_kinematics(m, d)
    gap = float(min(np.min(d.geom_xpos[s, 2] - m.geom_size[s, 0]) for s in soles))
    return m, RM.motor_qpos_adr(m), soles, ankles, gap


def sole_heights_and_ankles(pos: np.ndarray, quat: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(T, 2) lowest sole-sphere bottom z per foot and (T, 2, 3) ankle-pitch axis positions, world, by FK."""
    import mujoco

    m, qadr, soles, ankles, _ = _fk_model()
    d = mujoco.MjData(m)
    T = pos.shape[0]
    h, anc = np.zeros((T, 2)), np.zeros((T, 2, 3))
    for k in range(T):
        d.qpos[:3], d.qpos[3:7], d.qpos[qadr] = pos[k], quat[k], q[k]
        mujoco.mj_kinematics(m, d)
        for f in range(2):
            h[k, f] = np.min(d.geom_xpos[soles[f], 2] - m.geom_size[soles[f], 0])
            anc[k, f] = d.xanchor[ankles[f]]
    return h, anc


def sole_home_gap() -> float:
    """Lowest sole-sphere bottom above the floor in the home keyframe (the stance height, m)."""
    return _fk_model()[4]


def flight_windows(flight: np.ndarray, t: np.ndarray) -> tuple[tuple[float, float], ...]:
    """(last stance time before, first stance time after) of each run of flight frames."""
    out, k, T = [], 0, len(flight)
    while k < T:
        if flight[k]:
            j = k
            while j + 1 < T and flight[j + 1]:
                j += 1
            out.append((round(float(t[max(k - 1, 0)]), 9), round(float(t[min(j + 1, T - 1)]), 9)))
            k = j + 1
        else:
            k += 1
    return tuple(out)


def clip_to_motion(raw: RawClip, dt: float = g1.CONTROL_DT, name: str | None = None,
                   limit_tol: float = LIMIT_TOL_RAD, touch_tol: float = TOUCH_TOL_M) -> Motion:
    check_quaternions(raw)
    joints = check_joint_limits(raw, limit_tol)
    raw_soles, _ = sole_heights_and_ankles(raw.root_pos, raw.root_quat / np.linalg.norm(raw.root_quat, axis=1,
                                                                                        keepdims=True), joints)
    low = raw_soles.min(axis=1)
    if low.min() > touch_tol:
        f = int(np.argmin(low))
        raise _err(raw.path, f"the feet never touch the floor: the lowest sole is {low[f]:.3f} m above it (frame {f}); "
                   f"a clip must stand on the floor (z = 0) at least once within {touch_tol} m: check the root "
                   "height column and its units (m)")
    t, pos, quat, q = resample(raw, joints, dt)
    pos, quat = align_start(pos, quat)
    gap = sole_home_gap()
    soles, _ = sole_heights_and_ankles(pos, quat, q)
    pos[:, 2] += gap - soles[0].min()  # the first frame stands where the home keyframe stands
    soles += gap - soles[0].min()
    lift = gap - soles.min(axis=1)  # no later frame below the home stance (by more than LIFT_TOL_M)
    lift = np.where(lift > LIFT_TOL_M, lift, 0.0)
    pos[:, 2] += lift
    soles, anc = sole_heights_and_ankles(pos, quat, q)
    foot_h = np.maximum(soles - gap, 0.0)
    contact = foot_h < CONTACT_HEIGHT_M
    flight = ~contact.any(axis=1)
    windows = flight_windows(flight, t)
    vel = np.gradient(pos, dt, axis=0)
    i0 = [int(round(w[0] / dt)) for w in windows]
    foot_pos = anc.copy()
    foot_pos[..., 2] = foot_h
    arrays = dict(ref_q=q, ref_height=pos[:, 2].copy(), ref_foot_height=foot_h, ref_dq=np.gradient(q, dt, axis=0),
                  ref_base_pos=pos, ref_base_lin_vel=vel, ref_foot_pos=foot_pos, contact=contact, flight_mask=flight,
                  ref_base_quat=quat)
    for v in arrays.values():
        v.setflags(write=False)
    return Motion(
        name=name or raw.path.stem, duration=round(float(t[-1]), 9), reward_weights=dict(CLIP_REWARD_WEIGHTS), dt=dt,
        description=(f"imported clip {raw.path.name}: {raw.root_pos.shape[0]} frames at {raw.fps:g} Hz, joints "
                     f"{raw.joint_order}; {int((lift > 0).sum())} frames lifted above the floor (at most "
                     f"{lift.max() * 1000:.1f} mm)"),
        source=str(raw.path), flight_windows=windows, takeoff_heights=tuple(float(pos[i, 2]) for i in i0),
        takeoff_vz=tuple(float(vel[i, 2]) for i in i0), source_fps=raw.fps, source_frames=int(raw.root_pos.shape[0]),
        **arrays)


def load_clip(path: str | os.PathLike, dt: float = g1.CONTROL_DT, fps: float | None = None,
              name: str | None = None) -> Motion:
    """The Motion of the clip file `path` (.npz or .csv; `fps` overrides the csv's 30 Hz)."""
    return clip_to_motion(read_clip_file(Path(path), fps), dt, name)
