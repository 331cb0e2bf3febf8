"""ONNX policy runner: artifact -> observation (policies.observation, the one builder) -> ONNX
-> joint targets (policies.action). No DDS, no clock: the loop calls `step(...)` once per policy
tick with the measured state and the estimate.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import onnxruntime as ort

from policies.action import action_to_joint_target
from policies.artifact import INPUT_NAME, OUTPUT_NAME, Artifact, ArtifactError
from policies.observation import ObsInputs, build_observation, reference_window
from robots import g1


class PolicyOutput(NamedTuple):
    step: int
    phase: float
    obs: np.ndarray  # (n_obs,) float32
    action: np.ndarray  # (29,) raw network output (may be non-finite: safety trips on it)
    target: np.ndarray  # (29,) joint targets before safety


def make_session(onnx_bytes: bytes, threads: int = 1) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads  # small MLP: threads only add wake-up latency on a busy CPU
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    try:
        return ort.InferenceSession(onnx_bytes, sess_options=so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime raises several types
        raise ArtifactError(f"onnxruntime cannot load the policy: {e}") from e


@dataclasses.dataclass
class PolicyRunner:
    """Runs one artifact's motion from step 0 to n_steps (motion.duration / control_dt)."""

    art: Artifact
    threads: int = 1

    def __post_init__(self) -> None:
        spec = self.art.spec
        self.session = make_session(self.art.onnx_bytes, self.threads)
        self.terms = spec.observation
        self.n_obs = spec.n_obs
        self.control_dt = spec.control_dt
        self.duration = spec.motion.duration
        self.n_steps = int(round(self.duration / self.control_dt))
        self.action_scale = spec.action_scale
        self.default_q = np.asarray(spec.default_joint_pos, float)
        self.ref_q = np.asarray(self.art.ref_q, float)
        self.ref_height = np.asarray(self.art.ref_height, float)
        self.reset()
        # one warm-up inference so the first real tick does not pay for lazy initialisation
        self.session.run([OUTPUT_NAME], {INPUT_NAME: np.zeros((1, self.n_obs), np.float32)})

    def reset(self) -> None:
        self.last_action = np.zeros(g1.NUM_MOTORS)

    def done(self, step: int) -> bool:
        return step >= self.n_steps

    def phase(self, step: int) -> float:
        return float(min(max(step * self.control_dt / self.duration, 0.0), 1.0))

    def observe(self, step: int, q, dq, gyro, quat, base_lin_vel, base_height) -> np.ndarray:
        ref_q, ref_h = reference_window(self.ref_q, self.ref_height, step)
        inputs = ObsInputs(
            gyro=np.asarray(gyro, float), quat=np.asarray(quat, float), q=np.asarray(q, float),
            dq=np.asarray(dq, float), last_action=self.last_action, base_lin_vel=np.asarray(base_lin_vel, float),
            base_height=np.asarray(base_height, float), phase=np.asarray(self.phase(step)), ref_q=ref_q,
            ref_height=ref_h,
        )
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
