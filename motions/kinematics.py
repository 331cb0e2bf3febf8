"""Sagittal leg geometry of the G1, measured from robots.model, and the planar two-link leg IK.

Invariant: the hip-pitch, knee and ankle-pitch axes are parallel to y at q = 0 (checked when
the geometry is measured), so the leg is a planar chain in (x, z) and the sole stays flat when
q_hip + q_knee + q_ankle = 0.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from motions.motion import MotionError

IK_JOINTS = ("hip_pitch", "knee", "ankle_pitch")  # set by IK, not by keyframes


@dataclasses.dataclass(frozen=True)
class LegGeometry:
    """Sagittal-plane (x, z) leg geometry of one leg, pelvis frame, measured from the model."""

    hip: np.ndarray  # hip-pitch axis position relative to the pelvis at q = 0
    thigh: np.ndarray  # knee axis - hip axis at q = 0
    shank: np.ndarray  # ankle-pitch axis - knee axis at q = 0
    ankle_height: float  # ankle-pitch axis above the floor in the home keyframe stance
    home_ankle_x: float  # ankle-pitch axis x relative to the pelvis in the home pose
    home_ankle_y: float  # ankle-pitch axis y relative to the pelvis in the home pose
    sole_below_ankle: float  # ankle axis - lowest sole-sphere bottom (flat foot), m
    sole_home_gap: float  # lowest sole-sphere bottom above the floor in the home keyframe, m
    toe: tuple[float, float]  # (x, z) of the front sole spheres' centres relative to the ankle axis at q = 0, m


@functools.lru_cache(maxsize=1)
def leg_geometry() -> tuple[LegGeometry, LegGeometry]:
    """(left, right) leg geometry from robots.model's bridge model (the MJCF in use)."""
    import mujoco

    from robots import model as M

    m = M.build_bridge_model()
    d = mujoco.MjData(m)
    out = []
    for side, spheres in zip(("left", "right"), M.sole_spheres(m).tolist()):
        jids = [m.joint(f"{side}_{j}_joint").id for j in IK_JOINTS]
        d.qpos[:] = 0
        d.qpos[3] = 1.0
        mujoco.mj_kinematics(m, d)
        for j in jids:
            if not np.allclose(d.xaxis[j], [0, 1, 0], atol=1e-6):
                raise MotionError(f"{m.joint(j).name} axis {d.xaxis[j]} is not the y axis; planar leg IK needs parallel pitch axes")
        hip, knee, ankle = (d.xanchor[j][[0, 2]].copy() for j in jids)
        sole0 = min(d.geom_xpos[g][2] - m.geom_size[g][0] for g in spheres)
        front = max(spheres, key=lambda g: d.geom_xpos[g][0])
        toe = (float(d.geom_xpos[front][0] - ankle[0]), float(d.geom_xpos[front][2] - ankle[1]))
        mujoco.mj_resetDataKeyframe(m, d, m.key("home").id)
        mujoco.mj_kinematics(m, d)
        a_home = d.xanchor[jids[2]]
        sole_home = min(d.geom_xpos[g][2] - m.geom_size[g][0] for g in spheres)
        out.append(LegGeometry(
            hip=hip, thigh=knee - hip, shank=ankle - knee,
            ankle_height=float(a_home[2]), home_ankle_x=float(a_home[0] - d.qpos[0]),
            home_ankle_y=float(a_home[1] - d.qpos[1]),
            sole_below_ankle=float(ankle[1] - sole0), sole_home_gap=float(sole_home), toe=toe,
        ))
    return out[0], out[1]


def leg_ik(geo: LegGeometry, ankle_rel_pelvis_x, ankle_rel_pelvis_z, pelvis_pitch=0.0):
    """Planar IK: ankle-pitch axis position relative to the pelvis (world x, z) -> (hip, knee, ankle) pitch,
    for a pelvis pitched by `pelvis_pitch` about +y (0: upright).
    Rotation about +y by theta acts on w = x + i z as w * exp(-i theta); the world vector in the pelvis
    frame is w * exp(+i pitch). With w = hip->ankle (pelvis frame), w = exp(-i q_hip) (a + exp(-i q_knee) b),
    a = thigh, b = shank; the foot is flat on the floor when pitch + q_hip + q_knee + q_ankle = 0 (flat at
    q = 0, pitch = 0). Returns arrays and the reach ratio |hip->ankle| / (|a| + |b|) (NaN angles where
    unreachable).
    """
    a = complex(*geo.thigh)
    b = complex(*geo.shank)
    pitch = np.asarray(pelvis_pitch, float)
    d = (np.asarray(ankle_rel_pelvis_x) + 1j * np.asarray(ankle_rel_pelvis_z)) * np.exp(1j * pitch) \
        - (geo.hip[0] + 1j * geo.hip[1])
    la, lb = abs(a), abs(b)
    c = (np.abs(d) ** 2 - la**2 - lb**2) / (2 * la * lb)
    phi = np.angle(b) - np.angle(a)
    with np.errstate(invalid="ignore"):
        knee = phi + np.arccos(c)
    w = a + np.exp(-1j * knee) * b
    hip = np.angle(w) - np.angle(d)
    hip = (hip + np.pi) % (2 * np.pi) - np.pi
    ankle = -(hip + knee) - pitch
    return hip, knee, ankle, np.abs(d) / (la + lb)
