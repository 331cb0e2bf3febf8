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
    # (..., 6) the reference anchor's orientation in the robot anchor's frame (policies.tracking: R_robot^T R_ref,
    # two columns row by row); only the tracking term reads it
    anchor_ori_b: Any = None


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
    "motion_anchor_ori_b": TermDef(
        6, 1.0, lambda s, xp: s.anchor_ori_b,
        "reference anchor orientation in the robot anchor's frame at the step: 2 matrix columns (policies.tracking)"),
}

# The layout motion policies are trained with. The estimator provides base_lin_vel and base_height.
MOTION_OBS_TERMS: tuple[str, ...] = (
    "base_ang_vel", "projected_gravity", "joint_pos", "joint_vel", "last_action",
    "base_lin_vel", "base_height", "motion_phase", "ref_joint_pos", "ref_base_height",
)
# The whole-body tracking task's layout: the motion layout and the anchor's orientation relative to the reference.
TRACKING_OBS_TERMS: tuple[str, ...] = MOTION_OBS_TERMS + ("motion_anchor_ori_b",)


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
    # whole-body tracking (policies.tracking): the reference the graph outputs at the step, and the anchor
    "motion_command": (2 * g1.NUM_MOTORS, "reference joint positions (rad) then velocities (rad/s) at the step"),
    "motion_anchor_ori_b": (6, "reference anchor orientation in the robot anchor's frame: 2 matrix columns"),
    "motion_anchor_pos_b": (3, "reference anchor position in the robot anchor's frame, m (estimated)"),
}
TRACKING_TERMS = frozenset({"motion_command", "motion_anchor_ori_b", "motion_anchor_pos_b"})


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


# ---------------------------------------------------------------------- numpy fast path (deploy, eval)

# Terms that depend on the policy step only (the motion phase and the reference window): tabulated per step.
STEP_TERMS = frozenset({"motion_phase", "ref_joint_pos", "ref_base_height"})
# Terms that are one ObsInputs field minus a constant: (field, offset).
_AFFINE_TERMS = {
    "base_ang_vel": ("gyro", 0.0), "joint_pos": ("q", _DEFAULT_Q), "joint_vel": ("dq", 0.0),
    "last_action": ("last_action", 0.0), "base_lin_vel": ("base_lin_vel", 0.0),
    "base_height": ("base_height", g1.DEFAULT_BASE_HEIGHT),
}


def projected_gravity_scalar(w: float, x: float, y: float, z: float) -> tuple[float, float, float]:
    """robots.physics.projected_gravity of one quaternion in Python floats: the same IEEE operations in
    the same order (quat_rotate_inverse of g = (0, 0, -1), np.cross written out), so bit-identical."""
    g0, g1_, g2 = 0.0, 0.0, -1.0
    t0 = 2.0 * (y * g2 - z * g1_)
    t1 = 2.0 * (z * g0 - x * g2)
    t2 = 2.0 * (x * g1_ - y * g0)
    return (g0 - w * t0 + (y * t2 - z * t1), g1_ - w * t1 + (z * t0 - x * t2), g2 - w * t2 + (x * t1 - y * t0))


class ObservationBuffer:
    """`build_observation(...).astype(float32)` for one numpy state, written into a given float32 row: the
    state terms concatenated into a preallocated float64 buffer, then (v - offset) * scale in place, the
    step terms (phase, reference window) precomputed for steps 0..n_steps by the term functions themselves.
    The same values bit for bit (tests/test_deploy_compute.py). `supported(specs)`: every term has a fast
    form and the state terms come first; `step_inputs(step)` gives the ObsInputs the step rows are built from."""

    @staticmethod
    def supported(specs: Sequence[ObsTermSpec]) -> bool:
        plain = all(s.history == 1 and s.clip is None and s.scales is None
                    and (s.name in STEP_TERMS or s.name in _AFFINE_TERMS or s.name == "projected_gravity")
                    for s in specs)
        kinds = [s.name in STEP_TERMS for s in specs]
        return plain and kinds == sorted(kinds)  # state terms, then step terms

    def __init__(self, specs: Sequence[ObsTermSpec], step_inputs: Callable[[int], ObsInputs], n_steps: int):
        self.specs = tuple(specs)
        self.step_inputs = step_inputs
        state = [s for s in self.specs if s.name not in STEP_TERMS]
        self._step_specs = [s for s in self.specs if s.name in STEP_TERMS]
        self.n_state = obs_size(state)
        self._fields = tuple("quat" if s.name == "projected_gravity" else _AFFINE_TERMS[s.name][0] for s in state)
        self._buf = np.zeros(self.n_state)
        self._offset = np.concatenate([np.broadcast_to(_AFFINE_TERMS.get(s.name, (None, 0.0))[1], (s.size,))
                                       for s in state]) if state else np.zeros(0)
        self._scale = np.concatenate([np.full(s.size, float(s.scale)) for s in state]) if state else np.zeros(0)
        self.n_steps = n_steps
        self._table = np.array([self._step_row(k) for k in range(n_steps + 1)], np.float32)

    def _step_row(self, step: int) -> np.ndarray:
        inputs = self.step_inputs(step)
        parts = [TERMS[s.name].fn(inputs, np) * s.scale for s in self._step_specs]
        return np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)

    def fill(self, out: np.ndarray, step: int, gyro, quat, q, dq, last_action, base_lin_vel, base_height) -> None:
        """out[:] = the observation of `step` (out: float32, (n_obs,)); quat as 4 floats."""
        src = {"gyro": gyro, "quat": projected_gravity_scalar(*quat), "q": q, "dq": dq, "last_action": last_action,
               "base_lin_vel": base_lin_vel, "base_height": (base_height,)}
        buf = self._buf
        np.concatenate([src[f] for f in self._fields], out=buf)
        buf -= self._offset  # (v - offset) * scale: build_observation's operations, element by element,
        np.multiply(buf, self._scale, out=out[:self.n_state])  # in float64, rounded to float32 as astype does
        out[self.n_state:] = self._table[step] if 0 <= step <= self.n_steps else self._step_row(step)
