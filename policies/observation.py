"""The one observation builder, used by the MJX training env (jax arrays) and the deploy
loop (numpy arrays). It takes the array module `xp` as an argument so this package never
imports jax. Every term is a pure function of `ObsInputs`; the artifact lists the terms
(name, size, scale) in order and both sides build the vector from that list. Orientation math
(projected gravity, quaternion rotation, tilt) is robots.physics'.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from robots import g1
from robots import physics

REF_LOOKAHEAD = 3  # reference observations for t+1..t+3 (as the BCG paper's G1 policies)


class ObsInputs(NamedTuple):
    """Robot state in the frames the robot reports. Leading batch dims are allowed."""

    gyro: Any  # (..., 3) rad/s, pelvis IMU frame
    quat: Any  # (..., 4) w, x, y, z: pelvis orientation in the world
    q: Any  # (..., 29) joint positions, motor order
    dq: Any  # (..., 29) joint velocities
    last_action: Any  # (..., 29) previous policy output (unscaled)
    base_lin_vel: Any  # (..., 3) m/s, pelvis frame (estimator on the robot)
    base_height: Any  # (...,) m, pelvis above ground (estimator on the robot)
    phase: Any  # (...,) motion time / motion duration, in [0, 1]
    ref_q: Any  # (..., REF_LOOKAHEAD, 29) reference joint positions at t+1..t+K
    ref_height: Any  # (..., REF_LOOKAHEAD) reference pelvis height at t+1..t+K


def _flat(x, xp):
    return xp.reshape(x, x.shape[:-2] + (x.shape[-2] * x.shape[-1],))


_DEFAULT_Q = g1.DEFAULT_JOINT_POS


@dataclasses.dataclass(frozen=True)
class TermDef:
    size: int
    scale: float
    fn: Callable[[ObsInputs, Any], Any]
    doc: str


TERMS: dict[str, TermDef] = {
    "base_ang_vel": TermDef(3, 0.25, lambda s, xp: s.gyro, "pelvis IMU gyroscope, rad/s"),
    "projected_gravity": TermDef(3, 1.0, lambda s, xp: physics.projected_gravity(s.quat, xp), "gravity unit vector in the pelvis frame"),
    "joint_pos": TermDef(29, 1.0, lambda s, xp: s.q - xp.asarray(_DEFAULT_Q, dtype=s.q.dtype), "q - default_joint_pos, rad"),
    "joint_vel": TermDef(29, 0.05, lambda s, xp: s.dq, "joint velocity, rad/s"),
    "last_action": TermDef(29, 1.0, lambda s, xp: s.last_action, "previous action"),
    "base_lin_vel": TermDef(3, 1.0, lambda s, xp: s.base_lin_vel, "pelvis linear velocity in the pelvis frame, m/s (estimated)"),
    "base_height": TermDef(1, 1.0, lambda s, xp: s.base_height[..., None] - g1.DEFAULT_BASE_HEIGHT, "pelvis height - default, m (estimated)"),
    "motion_phase": TermDef(
        2, 1.0, lambda s, xp: xp.stack([xp.sin(np.pi * s.phase), xp.cos(np.pi * s.phase)], axis=-1), "sin, cos of pi * phase"
    ),
    "ref_joint_pos": TermDef(
        29 * REF_LOOKAHEAD, 1.0,
        lambda s, xp: _flat(s.ref_q - xp.asarray(_DEFAULT_Q, dtype=s.ref_q.dtype), xp),
        "reference q - default at t+1..t+3, rad",
    ),
    "ref_base_height": TermDef(REF_LOOKAHEAD, 1.0, lambda s, xp: s.ref_height - g1.DEFAULT_BASE_HEIGHT, "reference pelvis height - default at t+1..t+3, m"),
}

# The layout motion policies are trained with. The estimator provides base_lin_vel and base_height.
MOTION_OBS_TERMS: tuple[str, ...] = (
    "base_ang_vel", "projected_gravity", "joint_pos", "joint_vel", "last_action",
    "base_lin_vel", "base_height", "motion_phase", "ref_joint_pos", "ref_base_height",
)


@dataclasses.dataclass(frozen=True)
class ObsTermSpec:
    """One observation term as the artifact lists it. Native artifacts use name/size/scale; adapted
    third-party ones may add a per-element scale, a clip (applied before the scale, as IsaacLab and
    mjlab do) and a history length (frames stacked term by term, oldest first)."""

    name: str
    size: int  # entries per frame
    scale: float
    history: int = 1
    clip: tuple[float, float] | None = None
    scales: tuple[float, ...] | None = None  # per-element scale (overrides `scale`)
    source: str = ""  # the term's name and key in the original file (for error messages)


def term_specs(names: Sequence[str] = MOTION_OBS_TERMS) -> tuple[ObsTermSpec, ...]:
    unknown = [n for n in names if n not in TERMS]
    if unknown:
        raise KeyError(f"unknown observation terms {unknown}; known: {list(TERMS)}")
    return tuple(ObsTermSpec(n, TERMS[n].size, TERMS[n].scale) for n in names)


def obs_size(specs: Sequence[ObsTermSpec]) -> int:
    return sum(s.size * s.history for s in specs)


# Terms the policy runtime builds for adapted (third-party) artifacts, numpy only, in the policy's joint
# order (policies.runtime.PolicyRuntime). name -> (entries per frame, what it is). Joint terms have
# NUM_MOTORS entries. The adapters map each format's term names onto these.
MAX_HISTORY = 50  # frames: the longest history stack the runtime builds (1 s at 50 Hz)
RUNTIME_TERMS: dict[str, tuple[int, str]] = {
    "base_ang_vel": (3, "pelvis IMU gyroscope, rad/s"),
    "projected_gravity": (3, "gravity unit vector in the pelvis frame"),
    "base_lin_vel": (3, "pelvis linear velocity in the pelvis frame, m/s (estimated)"),
    "base_height": (1, "pelvis height - robots/g1.py's default, m (estimated)"),
    "joint_pos_rel": (g1.NUM_MOTORS, "q - the artifact's default pose, policy joint order, rad"),
    "joint_vel_rel": (g1.NUM_MOTORS, "joint velocity, policy joint order, rad/s"),
    "last_action": (g1.NUM_MOTORS, "previous raw policy output, policy joint order"),
    "velocity_command": (3, "commanded lin_vel_x, lin_vel_y (m/s), ang_vel_z (rad/s)"),
    "velocity_command_xy": (2, "commanded lin_vel_x, lin_vel_y, m/s"),
    "velocity_command_yaw": (1, "commanded ang_vel_z, rad/s"),
    "gait_phase_sin": (2, "sin of the left/right gait phase (holosoma)"),
    "gait_phase_cos": (2, "cos of the left/right gait phase (holosoma)"),
}


def build_observation(specs: Sequence[ObsTermSpec], inputs: ObsInputs, xp=np):
    """Concatenate the terms in order, each times its scale. Works on numpy or jax arrays."""
    parts = []
    for spec in specs:
        term = TERMS[spec.name]
        v = term.fn(inputs, xp)
        if v.shape[-1] != spec.size:
            raise ValueError(f"observation term {spec.name}: size {v.shape[-1]} != spec size {spec.size}")
        parts.append(v * spec.scale)
    return xp.concatenate(parts, axis=-1)


def reference_window(ref_q, ref_height, step, xp=np):
    """Rows step+1..step+K of the reference (clamped at the end) -> (K, 29), (K,).

    ref_q: (T, 29) reference joint positions sampled at control_dt; ref_height: (T,).
    `step` is the index of the current control step (int or traced int).
    """
    T = ref_q.shape[0]
    idx = xp.clip(step + 1 + xp.arange(REF_LOOKAHEAD), 0, T - 1)
    return ref_q[idx], ref_height[idx]
