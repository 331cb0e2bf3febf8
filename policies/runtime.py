"""The one policy runtime: what turns a robot state into a joint target for an exported artifact.
The deploy loop (deploy/loop.py) and the sim-to-sim evaluation (eval/) both run `PolicyRuntime`;
the MJX training env assembles its observation inputs through `observation_inputs` on jax arrays.
No DDS, no clock, no jax: the caller passes the array module `xp` to the pure functions.

Invariants (tests/test_deploy_units.py, tests/test_runtime_parity.py):
- policy step k of a motion of `duration` s observes phase clip(k * control_dt / duration, 0, 1)
  and the reference rows k+1..k+K (`policies.observation.reference_window`, clamped at the end);
  the motion has round(duration / control_dt) steps; `last_action` is zero at step 0.
- target = default_joint_pos + action_scale * action (`policies.action`), before any safety.
- HOLD after a motion: from the last policy target to the default pose, linearly over
  hold_blend_s (reached at t_in_hold >= hold_blend_s; at once when hold_blend_s <= 0).
- the ONNX session is single-threaded and sequential (a small MLP: threads only add wake-up latency).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import onnxruntime as ort

from policies.action import action_to_joint_target
from policies.artifact import INPUT_NAME, OUTPUT_NAME, Artifact, ArtifactError
from policies.observation import ObsInputs, build_observation, reference_window
from robots import g1

HOLD_BLEND_S = 0.5  # s: HOLD's blend from the last policy target back to the default pose


def motion_steps(duration: float, control_dt: float) -> int:
    """Number of policy steps of a motion."""
    return int(round(duration / control_dt))


def motion_phase(step, control_dt: float, duration: float, xp=np):
    """Motion time / duration at policy step `step`, clipped to [0, 1] (int or traced int step)."""
    return xp.clip(step * control_dt / duration, 0.0, 1.0)


def observation_inputs(step, ref_q, ref_height, control_dt: float, duration: float, *, gyro, quat, q, dq,
                       last_action, base_lin_vel, base_height, xp=np) -> ObsInputs:
    """The observation inputs of policy step `step`: the state as given, the motion phase (in q's
    dtype) and the reference window after `step`. ref_q (T, 29), ref_height (T,) at control_dt."""
    ref_q_w, ref_h_w = reference_window(ref_q, ref_height, step, xp=xp)
    phase = xp.asarray(motion_phase(step, control_dt, duration, xp), dtype=q.dtype)
    return ObsInputs(gyro=gyro, quat=quat, q=q, dq=dq, last_action=last_action, base_lin_vel=base_lin_vel,
                     base_height=base_height, phase=phase, ref_q=ref_q_w, ref_height=ref_h_w)


def hold_blend(from_target, default_q, t_in_hold: float, blend_s: float = HOLD_BLEND_S, xp=np):
    """HOLD's target t_in_hold seconds into HOLD: from `from_target` to `default_q` over blend_s."""
    a = min(1.0, t_in_hold / blend_s) if blend_s > 0 else 1.0
    return from_target + a * (xp.asarray(default_q) - from_target)


def make_session(onnx_bytes: bytes, threads: int = 1) -> ort.InferenceSession:
    """The artifact's ONNX session; ArtifactError when onnxruntime cannot load it."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    try:
        return ort.InferenceSession(onnx_bytes, sess_options=so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime raises several types
        raise ArtifactError(f"onnxruntime cannot load the policy: {e}") from e


class PolicyOutput(NamedTuple):
    step: int
    phase: float
    obs: np.ndarray  # (n_obs,) float32
    action: np.ndarray  # (29,) raw network output (may be non-finite: the caller's safety trips on it)
    target: np.ndarray  # (29,) joint targets before safety


class PolicyRuntime:
    """Runs one artifact's motion from step 0 to n_steps; `step` once per policy tick with the
    measured (or simulated) state and the base estimate, `hold_target` in the HOLD after it."""

    def __init__(self, art: Artifact, threads: int = 1, hold_blend_s: float = HOLD_BLEND_S) -> None:
        spec = art.spec
        self.art = art
        self.session = make_session(art.onnx_bytes, threads)
        self.terms = spec.observation
        self.n_obs = spec.n_obs
        self.control_dt = spec.control_dt
        self.duration = spec.motion.duration
        self.n_steps = motion_steps(self.duration, self.control_dt)
        self.action_scale = spec.action_scale
        self.default_q = np.asarray(spec.default_joint_pos, float)
        self.ref_q = np.asarray(art.ref_q, float)
        self.ref_height = np.asarray(art.ref_height, float)
        self.hold_blend_s = hold_blend_s
        self.reset()
        # one warm-up inference so the first real tick does not pay for lazy initialisation
        self.session.run([OUTPUT_NAME], {INPUT_NAME: np.zeros((1, self.n_obs), np.float32)})

    def reset(self) -> None:
        """Start of a motion: no previous action."""
        self.last_action = np.zeros(g1.NUM_MOTORS)

    def done(self, step: int) -> bool:
        return step >= self.n_steps

    def phase(self, step: int) -> float:
        return float(motion_phase(step, self.control_dt, self.duration))

    def observe(self, step: int, q, dq, gyro, quat, base_lin_vel, base_height) -> np.ndarray:
        inputs = observation_inputs(
            step, self.ref_q, self.ref_height, self.control_dt, self.duration,
            gyro=np.asarray(gyro, float), quat=np.asarray(quat, float), q=np.asarray(q, float),
            dq=np.asarray(dq, float), last_action=self.last_action, base_lin_vel=np.asarray(base_lin_vel, float),
            base_height=np.asarray(base_height, float))
        return build_observation(self.terms, inputs).astype(np.float32)

    def infer(self, obs: np.ndarray) -> np.ndarray:
        out = self.session.run([OUTPUT_NAME], {INPUT_NAME: obs.reshape(1, -1)})[0]
        return np.asarray(out, float).reshape(-1)

    def step(self, step: int, q, dq, gyro, quat, base_lin_vel, base_height) -> PolicyOutput:
        obs = self.observe(step, q, dq, gyro, quat, base_lin_vel, base_height)
        action = self.infer(obs)
        if action.shape != (g1.NUM_MOTORS,):
            raise ArtifactError(f"policy returned {action.shape[0]} actions, expected {g1.NUM_MOTORS}")
        target = action_to_joint_target(action, self.action_scale, self.default_q)
        self.last_action = action
        return PolicyOutput(step, self.phase(step), obs, action, target)

    def hold_target(self, from_target, t_in_hold: float) -> np.ndarray:
        return hold_blend(from_target, self.default_q, t_in_hold, self.hold_blend_s)
