"""Is a reference's flight physically consistent? The whole robot's centre of mass must fly ballistically:
in the air no external horizontal force acts (COM horizontal velocity constant) and the vertical acceleration
is -g. A keyframe reference makes the PELVIS ballistic; arm swing and torso pitch during push-off and flight
move the COM relative to the pelvis, so the COM the reference implies can violate both, and a policy that
tracks it leaves the ground with momentum the reference does not plan for.

    python -m motions preview jump_high     # prints flight_com_* per flight window

A motion file with `ballistic: com` (motions.reference) solves the pelvis path so that this COM, not the
pelvis, is ballistic in flight (`com_positions` is the FK that solve uses).

Angular momentum, the other half: in the air the whole robot's angular momentum about its COM is
constant. A reference that keeps the pelvis level while the legs tuck and the arms swing implies an
angular momentum that changes in flight (`centroidal_angmom`), which only an external torque could give:
a real robot's pelvis rotates instead. `flight_consistency` reports the pitch (y) component's range in
each flight and the pelvis pitch a free-flying robot making the same joint motion would drift by,
integral of (L_y(take-off) - L_y(t)) / I_yy(t) dt (I_yy: the whole robot's pitch inertia about its COM
at the frame's joints), from a level pelvis at take-off.

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


def _root_pos(m: Motion) -> np.ndarray:
    """(T, 3) the reference's root positions (keyframe motions without them: x = y = 0, z = ref_height)."""
    return m.ref_base_pos if m.ref_base_pos is not None else np.c_[np.zeros((m.num_steps, 2)), m.ref_height]


def com_trajectory(m: Motion) -> np.ndarray:
    """(T, 3) whole-robot centre of mass of the reference, world frame."""
    return com_positions(_root_pos(m), m.ref_q, m.ref_base_quat)


def _whole_robot_angmom(model: mujoco.MjModel, d: mujoco.MjData) -> np.ndarray:
    """Angular momentum of the whole robot about its COM at d's qpos and qvel (world frame)."""
    mujoco.mj_kinematics(model, d)
    mujoco.mj_comPos(model, d)
    mujoco.mj_comVel(model, d)
    mujoco.mj_subtreeVel(model, d)
    return d.subtree_angmom[1].copy()  # body 1: the pelvis, the root of the whole robot


def centroidal_angmom(pos: np.ndarray, quat: np.ndarray | None, q: np.ndarray, base_vel: np.ndarray,
                      base_angvel: np.ndarray | None, dq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(T, 3) whole-robot angular momentum about its COM (world frame, N m s; mj_subtreeVel of the root
    body) and (T,) pitch inertia I_yy about the COM (kg m^2: the momentum of a unit pitch rate with the
    joints still) of root positions, orientations (None = upright), joints, root linear velocity (world),
    root angular velocity (local frame, MuJoCo's free-joint convention; None = 0) and joint velocities."""
    from motions.clips import _fk_model
    from robots import model as RM

    model, qadr = _fk_model()[:2]
    dadr = RM.motor_dof_adr(model)
    d = mujoco.MjData(model)
    T = len(pos)
    L, iyy = np.empty((T, 3)), np.empty(T)
    for i in range(T):
        d.qpos[:3] = pos[i]
        d.qpos[3:7] = (1.0, 0.0, 0.0, 0.0) if quat is None else quat[i]
        d.qpos[qadr] = q[i]
        d.qvel[:] = 0.0
        d.qvel[:3] = base_vel[i]
        if base_angvel is not None:
            d.qvel[3:6] = base_angvel[i]
        d.qvel[dadr] = dq[i]
        L[i] = _whole_robot_angmom(model, d)
        d.qvel[:] = 0.0
        d.qvel[4] = 1.0  # a unit pitch rate of the root, joints still
        iyy[i] = _whole_robot_angmom(model, d)[1]
    return L, iyy


def _base_angvel(m: Motion) -> np.ndarray | None:
    """Local-frame angular velocity of the reference's root by central differences of its orientation
    (one-sided at the ends)."""
    if m.ref_base_quat is None:
        return None
    qs = np.asarray(m.ref_base_quat, float)
    out = np.zeros((len(qs), 3))
    for i in range(len(qs)):
        lo, hi = max(i - 1, 0), min(i + 1, len(qs) - 1)
        if hi > lo:
            mujoco.mju_subQuat(out[i], qs[hi], qs[lo])  # qs[hi] = qs[lo] * exp(v): v in qs[lo]'s local frame
            out[i] /= (hi - lo) * m.dt
    return out


def reference_velocities(m: Motion) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """A motion's root positions, root linear velocity (world), root angular velocity (local; None when
    upright) and joint velocities (central differences where the motion carries none)."""
    pos = _root_pos(m)
    vel = m.ref_base_lin_vel if m.ref_base_lin_vel is not None else np.gradient(pos, m.dt, axis=0)
    dq = m.ref_dq if m.ref_dq is not None else np.gradient(m.ref_q, m.dt, axis=0)
    return pos, vel, _base_angvel(m), dq


def motion_angmom(m: Motion) -> tuple[np.ndarray, np.ndarray]:
    """`centroidal_angmom` of a motion's reference."""
    pos, vel, w, dq = reference_velocities(m)
    return centroidal_angmom(pos, m.ref_base_quat, m.ref_q, vel, w, dq)


def free_pitch_drift(L_y: np.ndarray, iyy: np.ndarray, dt: float) -> float:
    """Pelvis pitch (rad) a free-flying robot gains over the samples (take-off first) when its joints make
    the motion that gave the reference's L_y with a level pelvis: trapezoid of (L_y[0] - L_y) / I_yy."""
    w = (L_y[0] - L_y) / iyy
    return float(np.sum(0.5 * (w[1:] + w[:-1])) * dt)


def flight_consistency(m: Motion, com: np.ndarray | None = None) -> list[dict]:
    """Per flight window (take-off, touch-down): the COM's horizontal velocity at take-off and at touch-down
    (central differences one frame inside the window), its change (0 if ballistic), the mean vertical
    acceleration over the window's interior (-g if ballistic), and the angular momentum's pitch component
    at take-off and its range over the window (0 if consistent) with the pelvis pitch drift it implies.
    `floating`: the COM falls at less than half of g (mean vertical acceleration above -g / 2): no flight but a
    reference whose feet float above the floor (a retargeting artifact; motions.windows.plant puts it down)."""
    com = com_trajectory(m) if com is None else com
    L, iyy = motion_angmom(m) if m.flight_windows else (None, None)
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
                    "com_az_mean": float(a[i0 + 1:i1, 2].mean()), "g": -GRAVITY,
                    "floating": bool(a[i0 + 1:i1, 2].mean() > -GRAVITY / 2),
                    "angmom_y_takeoff": float(L[i0 - 1, 1]),
                    "angmom_y_range": float(np.ptp(L[i0 - 1:i1 + 2, 1])),
                    "free_pitch_drift_deg": float(np.degrees(free_pitch_drift(L[i0 - 1:i1 + 2, 1], iyy[i0 - 1:i1 + 2],
                                                                              m.dt)))})
    return out
