"""Is a reference's flight physically consistent? The whole robot's centre of mass must fly ballistically:
in the air no external horizontal force acts (COM horizontal velocity constant) and the vertical acceleration
is -g. A keyframe reference makes the PELVIS ballistic; arm swing and torso pitch during push-off and flight
move the COM relative to the pelvis, so the COM the reference implies can violate both, and a policy that
tracks it leaves the ground with momentum the reference does not plan for.

    python -m motions preview jump_high     # prints flight_com_* per flight window

A motion file with `ballistic: com` (motions.reference) solves the pelvis path so that this COM, not the
pelvis, is ballistic in flight (`com_positions` is the FK that solve uses).

COM by forward kinematics of the reference (root position and orientation, joints) on the bridge model.
"""
from __future__ import annotations

import mujoco
import numpy as np

from motions.motion import Motion
from robots.physics import GRAVITY


def com_positions(pos: np.ndarray, q: np.ndarray, quat: np.ndarray | None = None) -> np.ndarray:
    """(T, 3) whole-robot centre of mass (bridge model, mj_comPos subtree_com[0]) of root positions `pos`
    (T, 3), joints `q` (T, 29, motor order) and root orientations `quat` (T, 4, w x y z; None = upright)."""
    from motions.clips import _fk_model

    model, qadr = _fk_model()[:2]
    d = mujoco.MjData(model)
    T = len(pos)
    out = np.empty((T, 3))
    for i in range(T):
        d.qpos[:3] = pos[i]
        d.qpos[3:7] = (1.0, 0.0, 0.0, 0.0) if quat is None else quat[i]
        d.qpos[qadr] = q[i]
        mujoco.mj_kinematics(model, d)
        mujoco.mj_comPos(model, d)
        out[i] = d.subtree_com[0]
    return out


def com_trajectory(m: Motion) -> np.ndarray:
    """(T, 3) whole-robot centre of mass of the reference, world frame."""
    T = m.num_steps
    pos = m.ref_base_pos if m.ref_base_pos is not None else np.c_[np.zeros((T, 2)), m.ref_height]
    return com_positions(pos, m.ref_q, m.ref_base_quat)


def flight_consistency(m: Motion, com: np.ndarray | None = None) -> list[dict]:
    """Per flight window (take-off, touch-down): the COM's horizontal velocity at take-off and at touch-down
    (central differences one frame inside the window), its change (0 if ballistic), and the mean vertical
    acceleration over the window's interior (-g if ballistic)."""
    com = com_trajectory(m) if com is None else com
    v = np.gradient(com, m.dt, axis=0)
    a = np.gradient(v, m.dt, axis=0)
    out = []
    for t0, t1 in m.flight_windows:
        i0, i1 = int(round(t0 / m.dt)) + 1, int(round(t1 / m.dt)) - 1
        if i1 - i0 < 2:
            continue
        out.append({"window_s": (t0, t1), "com_vxy_takeoff": tuple(float(x) for x in v[i0, :2]),
                    "com_vxy_touchdown": tuple(float(x) for x in v[i1, :2]),
                    "com_dvxy": float(np.linalg.norm(v[i1, :2] - v[i0, :2])),
                    "com_az_mean": float(a[i0 + 1:i1, 2].mean()), "g": -GRAVITY})
    return out
