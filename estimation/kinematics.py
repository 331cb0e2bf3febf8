"""Leg forward kinematics of the G1 relative to the pelvis, from the same MuJoCo model
the bridge simulates (robots/model.py), for the state estimator.

The free joint is held at identity, so every position MuJoCo computes is in the pelvis
frame. One `mj_kinematics` call (~3 us in C) gives the foot sites, the foot sole points
(the collision spheres) and the joint axes/anchors; the translational and rotational
Jacobians of each foot with respect to its six leg joints are assembled from those axes
in numpy (hinge column = axis x (point - anchor)), which avoids mj_comPos + mj_jac and is
checked against `mj_jacSite` in tests/test_estimator.py.
"""
from __future__ import annotations

from typing import NamedTuple

import mujoco
import numpy as np

from robots import g1
from robots import model as robot_model


class LegKin(NamedTuple):
    """Kinematics of both feet in the pelvis frame (index 0 = left, 1 = right)."""

    foot_pos: np.ndarray  # (2, 3) foot site positions, m
    foot_rot: np.ndarray  # (2, 3, 3) foot site orientations (columns = foot axes)
    jac_pos: np.ndarray  # (2, 3, 6) d foot_pos / d q_leg
    jac_rot: np.ndarray  # (2, 3, 6) angular velocity of the foot / d dq_leg
    sole_pos: np.ndarray  # (2, S, 3) centres of the foot's collision spheres, m


class G1LegKinematics:
    """Forward kinematics of both legs from joint positions in motor order."""

    def __init__(self, model: mujoco.MjModel | None = None):
        self.model = model if model is not None else robot_model.build_bridge_model()
        m = self.model
        self.data = mujoco.MjData(m)
        d = self.data
        d.qpos[:] = 0.0
        free = [j for j in range(m.njnt) if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
        if len(free) != 1:
            raise ValueError("G1 model must have exactly one free joint (the pelvis)")
        fq = m.jnt_qposadr[free[0]]
        d.qpos[fq + 3] = 1.0  # identity quaternion: world frame == pelvis frame
        self._base_body = m.body(g1.BASE_BODY).id
        if m.jnt_bodyid[free[0]] != self._base_body:
            raise ValueError(f"the free joint is not on the {g1.BASE_BODY!r} body")
        self._qadr = robot_model.motor_qpos_adr(m)
        self._foot_site = np.array([m.site(s).id for s in g1.FOOT_SITES])
        self._leg_jnt = np.array(
            [[m.joint(g1.JOINT_NAMES[i]).id for i in range(sl.start, sl.stop)] for sl in (g1.LEG_L, g1.LEG_R)]
        )
        self._sole_geom = robot_model.sole_spheres(m)  # (2, S): the sole points (Menagerie: 4 per foot, r = 5 mm)
        self.sole_radius = float(m.geom_size[self._sole_geom[0, 0], 0])
        imu = m.site(g1.IMU_SITE).id
        if m.site_bodyid[imu] != self._base_body:
            raise ValueError(f"IMU site {g1.IMU_SITE!r} is not on the pelvis")
        # MjData array views, fetched once (each attribute access costs a pybind call)
        self._qpos, self._site_xpos, self._site_xmat = d.qpos, d.site_xpos, d.site_xmat
        self._xaxis, self._xanchor, self._geom_xpos = d.xaxis, d.xanchor, d.geom_xpos
        mujoco.mj_kinematics(m, d)
        self.imu_pos = d.site_xpos[imu].copy()  # IMU position in the pelvis frame
        self.imu_rot = d.site_xmat[imu].reshape(3, 3).copy()  # IMU axes in the pelvis frame

    def __call__(self, q: np.ndarray) -> LegKin:
        self._qpos[self._qadr] = q
        mujoco.mj_kinematics(self.model, self.data)
        foot_pos = self._site_xpos[self._foot_site]  # fancy indexing copies
        foot_rot = self._site_xmat[self._foot_site].reshape(2, 3, 3)
        axis = self._xaxis[self._leg_jnt]  # (2, 6, 3)
        anchor = self._xanchor[self._leg_jnt]  # (2, 6, 3)
        r = foot_pos[:, None, :] - anchor
        # axis x r, written out (np.cross costs ~100 us of Python overhead per call)
        jac_pos = np.empty((2, 3, 6))
        jac_pos[:, 0] = axis[..., 1] * r[..., 2] - axis[..., 2] * r[..., 1]
        jac_pos[:, 1] = axis[..., 2] * r[..., 0] - axis[..., 0] * r[..., 2]
        jac_pos[:, 2] = axis[..., 0] * r[..., 1] - axis[..., 1] * r[..., 0]
        jac_rot = axis.transpose(0, 2, 1)
        sole_pos = self._geom_xpos[self._sole_geom]
        return LegKin(foot_pos, foot_rot, jac_pos, jac_rot, sole_pos)
