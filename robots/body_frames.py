"""Pose of any G1 body in the pelvis frame from the joint angles: forward kinematics on the model the
bridge simulates (robots/model.py), the one source of the G1's link geometry.

The free joint is held at the identity, so MuJoCo's world frame is the pelvis frame. The torso anchor of
whole-body-tracking policies (`torso_link`) is the pelvis rotated through the three waist joints: with the
pelvis orientation from the IMU, `pelvis_rot @ rot_in_pelvis` is the torso's orientation in the world.
"""
from __future__ import annotations

import functools

import mujoco
import numpy as np

from robots import model as robot_model

WAIST_JOINTS = ("waist_yaw_joint", "waist_roll_joint", "waist_pitch_joint")


@functools.lru_cache(maxsize=1)
def g1_model() -> mujoco.MjModel:
    """The bridge's G1 model, built once per process (read only here)."""
    return robot_model.build_bridge_model()


def g1_body_names() -> tuple[str, ...]:
    m = g1_model()
    return tuple(m.body(i).name for i in range(1, m.nbody))


class BodyFrames:
    """Pelvis-frame pose of the named bodies from joint positions (motor order); one mj_kinematics per call."""

    def __init__(self, model: mujoco.MjModel | None = None):
        self.model = model if model is not None else g1_model()
        self.data = mujoco.MjData(self.model)
        self.data.qpos[:] = 0.0
        self.data.qpos[3] = 1.0  # free joint at the identity
        self._qadr = robot_model.motor_qpos_adr(self.model)
        self.names = tuple(self.model.body(i).name for i in range(1, self.model.nbody))

    def body_id(self, name: str) -> int:
        """MuJoCo id of a G1 body; ValueError naming the G1's bodies otherwise."""
        if name not in self.names:
            raise ValueError(f"the G1 has no body {name!r} (its bodies: {', '.join(self.names)})")
        return self.model.body(name).id

    def pose_in_pelvis(self, body: int | str, q) -> tuple[np.ndarray, np.ndarray]:
        """(position (3,), rotation matrix (3, 3)) of `body` in the pelvis frame at joint positions q."""
        b = self.body_id(body) if isinstance(body, str) else body
        self.data.qpos[self._qadr] = q
        mujoco.mj_kinematics(self.model, self.data)
        return self.data.xpos[b].copy(), self.data.xmat[b].reshape(3, 3).copy()


def quat_to_mat(quat) -> np.ndarray:
    """Rotation matrix of a w, x, y, z quaternion (normalised first)."""
    m = np.empty(9)
    q = np.asarray(quat, float)
    mujoco.mju_quat2Mat(m, q / np.linalg.norm(q))
    return m.reshape(3, 3)


def mat_to_quat(rot) -> np.ndarray:
    """w, x, y, z quaternion of a rotation matrix (w >= 0)."""
    q = np.empty(4)
    mujoco.mju_mat2Quat(q, np.ascontiguousarray(rot, float).reshape(-1))
    return q if q[0] >= 0 else -q


def yaw_of(rot) -> float:
    """Heading (rad) of a rotation matrix: the angle of its x axis projected on the ground (ZYX yaw)."""
    return float(np.arctan2(rot[1, 0], rot[0, 0]))


def rot_z(yaw: float) -> np.ndarray:
    c, s = np.cos(yaw), np.sin(yaw)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


__all__ = ["BodyFrames", "g1_model", "g1_body_names", "WAIST_JOINTS", "quat_to_mat", "mat_to_quat", "yaw_of", "rot_z"]
