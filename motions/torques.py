"""Can the motors make a reference's upper body move as it asks? Inverse dynamics of the waist and arms.

The floor touches only the feet, so for a joint whose subtree holds no foot (the waist and both arms) the
torque a reference needs is fixed by the reference's own motion: the inverse dynamics of the whole robot
(root included, contact disabled) gives it exactly whatever the floor does. The legs' torques depend on how
the contact forces split between the feet and are not computed here.

    python -m motions preview jump_swing     # prints the peak upper-body torque / limit

Velocities and accelerations by central differences of the reference (root: MuJoCo's free-joint velocity,
world-frame linear, local-frame angular).
"""
from __future__ import annotations

import mujoco
import numpy as np

from motions.clip_files import motion_root_quat
from motions.motion import Motion
from robots import g1

UPPER = np.arange(12, 29)  # motor order: 12 leg joints, then waist (3) and arms (2 x 7)


def upper_body_torque(m: Motion) -> np.ndarray:
    """(T, 17) torque (N m) the reference needs at the waist and arm joints (motor order 12..28), by
    mj_inverse on the bridge model with contact disabled."""
    from motions.clips import _fk_model
    from motions.momentum import reference_velocities
    from robots import model as RM

    model, qadr = _fk_model()[:2]
    dadr = RM.motor_dof_adr(model)
    pos, vel, w, dq = reference_velocities(m)
    quat = motion_root_quat(m)
    qvel = np.zeros((m.num_steps, model.nv))
    qvel[:, :3] = vel
    if w is not None:
        qvel[:, 3:6] = w
    qvel[:, dadr] = dq
    qacc = np.gradient(qvel, m.dt, axis=0)
    d = mujoco.MjData(model)
    flags = model.opt.disableflags
    model.opt.disableflags = flags | mujoco.mjtDisableBit.mjDSBL_CONTACT
    out = np.empty((m.num_steps, len(UPPER)))
    try:
        for i in range(m.num_steps):
            d.qpos[:3] = pos[i]
            d.qpos[3:7] = quat[i]
            d.qpos[qadr] = m.ref_q[i]
            d.qvel[:], d.qacc[:] = qvel[i], qacc[i]
            mujoco.mj_inverse(model, d)
            out[i] = d.qfrc_inverse[dadr[UPPER]]
    finally:
        model.opt.disableflags = flags
    return out


def upper_torque_ratio(m: Motion) -> dict:
    """Peak |tau| / limit of the waist and of the arms, and where the worst is (time, joint name)."""
    r = np.abs(upper_body_torque(m)) / g1.TORQUE_LIMIT[UPPER]
    k, j = np.unravel_index(np.argmax(r), r.shape)
    return {"waist": float(r[:, :3].max()), "arms": float(r[:, 3:].max()), "peak": float(r[k, j]),
            "peak_t_s": float(m.times[k]), "peak_joint": g1.JOINT_NAMES[UPPER[j]]}
