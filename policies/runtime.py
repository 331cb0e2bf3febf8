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
- backend "auto" (the default: deploy, eval) runs the artifact's graph compiled (policies.mlp_kernel) when
  `lower` accepts it and it agrees with the ONNX session within COMPILED_TOL on COMPILED_CHECKS observations
  (the zero observation and random ones) at load, else the session; `backend` / `backend_reason` say which
  and why. "onnxruntime" always runs the session; "compiled" raises ArtifactError naming why it cannot.

Adapted (third-party) artifacts (spec.format != "native", policies.adapters) run the same class:
- the observation is built here from policies.observation.RUNTIME_TERMS in the policy's joint order:
  each term raw -> clip -> times its scale(s) -> its history stack (oldest first; filled with zeros
  or, IsaacLab's way, with the first frame) -> concatenated in the artifact's order;
- target[motor_index] = action_offset + action_scales * clip(action), the rest of the motors (none for
  a 29-joint policy) at the default pose; last_action is the raw output;
- velocity policies observe the command given to `step` (clipped to the artifact's command ranges) and,
  with gait_period > 0, holosoma's two-foot gait phase (starts at [0, pi], advances 2 pi dt / period
  before each observation, both feet at pi while the command is ~0); tracking policies get the policy
  step on their time_step input and end after their clip; their reference (the graph's `joint_pos` /
  `joint_vel` / anchor pose outputs at each time step) is read from the graph at load and observed through
  policies.tracking (the step's reference, the anchor relative to it, aligned to the robot at step 0).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import onnxruntime as ort

from policies.action import action_to_joint_target
from policies.artifact import Artifact, ArtifactError
from policies.observation import ObservationBuffer, ObsInputs, build_observation, reference_window
from policies.tracking import TrackingError, TrackingTerms, read_reference, reference_from_states
from robots import g1
from robots.physics import projected_gravity

HOLD_BLEND_S = 0.5  # s: HOLD's blend from the last policy target back to the default pose
BACKENDS = ("auto", "onnxruntime", "compiled")
COMPILED_TOL = 1e-5  # max |compiled - onnxruntime| / max(1, max |onnxruntime|) per observation of the load check
COMPILED_CHECKS = 64  # random observations of the load check (and the zero observation)


def motion_steps(duration: float, control_dt: float) -> int:
    """Number of policy steps of a motion."""
    return int(round(duration / control_dt))


def motion_phase(step, control_dt: float, duration: float, xp=np):
    """Motion time / duration at policy step `step`, clipped to [0, 1] (int or traced int step)."""
    return xp.clip(step * control_dt / duration, 0.0, 1.0)


def observation_inputs(step, ref_q, ref_height, control_dt: float, duration: float, *, gyro, quat, q, dq,
                       last_action, base_lin_vel, base_height, anchor_ori_b=None, xp=np) -> ObsInputs:
    """The observation inputs of policy step `step`: the state as given, the motion phase (in q's
    dtype) and the reference window after `step`. ref_q (T, 29), ref_height (T,) at control_dt;
    anchor_ori_b: the tracking term's input (policies.tracking), when the layout has it."""
    ref_q_w, ref_h_w = reference_window(ref_q, ref_height, step, xp=xp)
    phase = xp.asarray(motion_phase(step, control_dt, duration, xp), dtype=q.dtype)
    return ObsInputs(gyro=gyro, quat=quat, q=q, dq=dq, last_action=last_action, base_lin_vel=base_lin_vel,
                     base_height=base_height, phase=phase, ref_q=ref_q_w, ref_height=ref_h_w,
                     anchor_ori_b=anchor_ori_b)


def hold_blend(from_target, default_q, t_in_hold: float, blend_s: float = HOLD_BLEND_S, xp=np):
    """HOLD's target t_in_hold seconds into HOLD: from `from_target` to `default_q` over blend_s."""
    a = min(1.0, t_in_hold / blend_s) if blend_s > 0 else 1.0
    return from_target + a * (xp.asarray(default_q) - from_target)


def make_session(onnx_bytes: bytes, threads: int = 1, fixed_dims: dict[str, int] | None = None) -> ort.InferenceSession:
    """The artifact's ONNX session; ArtifactError when onnxruntime cannot load it. `fixed_dims` pins
    symbolic input dimensions (name -> size): the graph's shape arithmetic is then folded at load."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    for name, size in (fixed_dims or {}).items():
        so.add_free_dimension_override_by_name(name, size)
    try:
        return ort.InferenceSession(onnx_bytes, sess_options=so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime raises several types
        raise ArtifactError(f"onnxruntime cannot load the policy: {e}") from e


def _fixed_dims(session: ort.InferenceSession, feed: dict[str, np.ndarray]) -> dict[str, int]:
    """Symbolic input dimension -> the size `feed` gives it; {} when a name would get two sizes."""
    dims: dict[str, int] = {}
    for i in session.get_inputs():
        if i.name not in feed:
            continue
        for d, n in zip(i.shape, feed[i.name].shape):
            if isinstance(d, str) and d:
                if dims.setdefault(d, n) != n:
                    return {}
    return dims


def compile_policy(session: ort.InferenceSession, onnx_bytes: bytes, feed: dict[str, np.ndarray], output: str,
                   n_steps: int = 0):
    """(program, reason): the artifact's graph compiled for these input shapes and checked against `session`
    (policies.mlp_kernel; the zero observation and COMPILED_CHECKS random ones, a time_step input at random
    steps 0..n_steps), or (None, why not) in one line."""
    try:
        from policies import mlp_kernel
    except ImportError as e:  # numba missing: an incomplete install
        return None, f"the compiled backend cannot be imported ({e})"
    try:
        prog = mlp_kernel.lower(onnx_bytes, {k: v.shape for k, v in feed.items()}, output)
    except mlp_kernel.Unsupported as e:
        return None, f"graph not compiled: {e}"
    except Exception as e:  # noqa: BLE001 - never worse than the session
        return None, f"graph not compiled ({type(e).__name__}: {e})"
    main = max(feed, key=lambda k: feed[k].size)
    rng = np.random.default_rng(0)
    worst = 0.0
    for k in range(COMPILED_CHECKS + 1):
        x = {name: np.zeros(v.shape, np.float32) for name, v in feed.items()}
        if k:
            x[main][...] = rng.normal(0.0, (0.1, 1.0, 3.0)[k % 3], x[main].shape)
            for name in x:
                if name != main:
                    x[name][...] = rng.integers(0, max(n_steps, 1) + 1, x[name].shape)
        want = session.run([output], x)[0].reshape(-1)
        worst = max(worst, mlp_kernel.max_rel_diff(prog(x), want))
    if not worst <= COMPILED_TOL:
        return None, (f"the compiled graph differs from onnxruntime by {worst:.1e} (relative) on its load check "
                      f"(tolerance {COMPILED_TOL:.0e})")
    return prog, (f"{prog.n_nodes} graph nodes run compiled, within {worst:.1e} of onnxruntime over "
                  f"{COMPILED_CHECKS + 1} observations")


class PolicyOutput(NamedTuple):
    step: int
    phase: float
    obs: np.ndarray  # (n_obs,) float32
    action: np.ndarray  # (29,) raw network output (may be non-finite: the caller's safety trips on it)
    target: np.ndarray  # (29,) joint targets before safety


class PolicyRuntime:
    """Runs one artifact from step 0 to n_steps; `step` once per policy tick with the measured (or
    simulated) state, the base estimate and (velocity policies) the command; `hold_target` in the HOLD
    after it. `run_s` sets how long a velocity policy runs (it has no motion of its own)."""

    def __init__(self, art: Artifact, threads: int = 1, hold_blend_s: float = HOLD_BLEND_S,
                 run_s: float | None = None, backend: str = "auto") -> None:
        if backend not in BACKENDS:
            raise ArtifactError(f"unknown policy backend {backend!r} (one of {', '.join(BACKENDS)})")
        spec = art.spec
        self.art = art
        self.spec = spec
        self.native = spec.format == "native"
        self.kind = spec.kind
        self.session = make_session(art.onnx_bytes, threads)
        self.terms = spec.observation
        self.n_obs = spec.n_obs
        self.control_dt = spec.control_dt
        self.duration = float(run_s) if spec.kind == "velocity" else spec.motion.duration
        if spec.kind == "velocity" and not (run_s and run_s > 0):
            raise ArtifactError("a velocity policy needs a run length: PolicyRuntime(art, run_s=...) "
                                "(deploy: the --velocity schedule or --policy-s)")
        self.n_steps = motion_steps(self.duration, self.control_dt)
        self.action_scale = spec.action_scale
        self.default_q = np.asarray(spec.default_joint_pos, float)
        self.kp = np.asarray(spec.kp, float)
        self.kd = np.asarray(spec.kd, float)
        self.ref_q = np.asarray(art.ref_q, float)
        self.ref_height = np.asarray(art.ref_height, float)
        self.hold_blend_s = hold_blend_s
        self.mi = spec.motor_index
        n = len(self.mi)
        self.scales = np.asarray(spec.action_scales or [spec.action_scale] * n, float)
        self.offset = (np.asarray(spec.action_offset, float) if spec.action_offset else self.default_q[self.mi])
        self.clip = spec.action_clip
        self._in, self._out = spec.input_name, spec.output_name
        self._feed = {self._in: np.zeros((1, self.n_obs), np.float32)}
        if spec.time_step_input:
            self._feed[spec.time_step_input] = np.zeros((1, 1), np.float32)
        self._x32 = self._feed[self._in][0]  # the input row the observation is written into
        self._outs = [self._out]
        dims = _fixed_dims(self.session, self._feed)
        if dims:  # this runtime only ever feeds these shapes (batch 1)
            self.session = make_session(art.onnx_bytes, threads, dims)
        self.tracking: TrackingTerms | None = None
        self._base_pos = None
        if spec.tracking is not None:  # the reference: the graph's own outputs at every time step of the clip,
            try:  # or (native) the forward kinematics of reference.npz's states
                if spec.tracking.source == "reference":
                    ref = reference_from_states(art.ref_q, art.ref_base_pos, art.ref_base_quat, spec.control_dt,
                                                spec.tracking.anchor_body)
                else:
                    ref = read_reference(self.session, spec.tracking, self._feed, spec.time_step_input,
                                         self.n_steps + 1, len(spec.motor_index))
                self.tracking = TrackingTerms(spec.tracking, ref, spec.motor_index)
            except (TrackingError, ValueError) as e:
                raise ArtifactError(f"{art.path}: tracking reference rejected: {e}") from e
        self._lo, self._hi = np.full(3, -np.inf), np.full(3, np.inf)
        for j, name in enumerate(("lin_vel_x", "lin_vel_y", "ang_vel_z")):
            r = spec.command_range(name)
            if r is not None:
                self._lo[j], self._hi[j] = r
        if not self.native:  # per-term history buffers, (history, size) each, and their slice of obs
            self._hist = [np.zeros((t.history, t.size)) for t in self.terms]
            self._scale = [np.asarray(t.scales, float) if t.scales is not None else t.scale for t in self.terms]
            offs = np.cumsum([0] + [t.size * t.history for t in self.terms])
            self._slices = [slice(int(a), int(b)) for a, b in zip(offs[:-1], offs[1:])]
        self._phases = [float(motion_phase(k, self.control_dt, self.duration)) for k in range(self.n_steps + 1)]
        self._obs_buf = None
        if self.native and ObservationBuffer.supported(self.terms):
            zeros = np.zeros(g1.NUM_MOTORS)
            self._obs_buf = ObservationBuffer(self.terms, lambda k: observation_inputs(
                k, self.ref_q, self.ref_height, self.control_dt, self.duration, gyro=np.zeros(3),
                quat=np.array([1.0, 0, 0, 0]), q=zeros, dq=zeros, last_action=zeros, base_lin_vel=np.zeros(3),
                base_height=np.asarray(0.0)), self.n_steps)
        self.reset()
        # one warm-up inference so the first real tick does not pay for lazy initialisation
        out = self.session.run([self._out], self._feed)[0]
        self._io = self._y32 = self._prog = None
        self.backend, self.backend_reason = "onnxruntime", "requested"
        if backend != "onnxruntime":
            self._prog, self.backend_reason = compile_policy(self.session, art.onnx_bytes, self._feed, self._out,
                                                            self.n_steps)
            if self._prog is None and backend == "compiled":
                raise ArtifactError(f"the compiled policy backend cannot run this artifact: {self.backend_reason}")
        self._native = None
        if self._prog is not None:  # the observation is written into the program's input row itself
            self.backend = "compiled"
            self._feed = {name: self._prog.inputs[name] for name in self._feed}
            self._x32 = self._feed[self._in][0]
            cls = type(self)  # (a subclass that overrides a stage keeps the stages)
            plain = all(getattr(cls, m) is getattr(PolicyRuntime, m) for m in ("_observe", "infer", "action_target"))
            if plain and self._obs_buf is not None and not spec.time_step_input and spec.gait_period <= 0:
                # the whole native tick in one call
                from policies.mlp_kernel import NativeTick, Unsupported

                try:
                    self._native = NativeTick(self._prog, self._obs_buf, self._in, self.default_q,
                                              self.action_scale)
                except Unsupported:
                    self._native = None
        elif out.dtype == np.float32:  # bound once: no feed / output conversion per tick (~50 us less, cold)
            self._y32 = np.zeros(out.shape, np.float32)
            self._io = self.session.io_binding()
            for name, arr in self._feed.items():
                self._io.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(arr))  # shares arr's memory
            self._io.bind_output(self._out, "cpu", 0, np.float32, list(out.shape), self._y32.ctypes.data)
            self.session.run_with_iobinding(self._io)
        self.reset()

    def reset(self) -> None:
        """Start of a motion: no previous action, no history, gait phase at its start."""
        self.last_action = np.zeros(len(self.spec.motor_index))
        self.command = np.zeros(3)
        self.gait_phase = np.array([0.0, np.pi])
        self._standing = False
        self._frames = 0
        self._time_step = 0
        if getattr(self, "tracking", None) is not None:
            self.tracking.reset()
        for h in getattr(self, "_hist", ()):
            h[:] = 0.0

    def done(self, step: int) -> bool:
        return step >= self.n_steps

    def phase(self, step: int) -> float:
        if 0 <= step <= self.n_steps:
            return self._phases[step]
        return float(motion_phase(step, self.control_dt, self.duration))

    def set_command(self, command) -> np.ndarray:
        """Velocity command (lin_vel_x, lin_vel_y, ang_vel_z), clipped to the artifact's ranges."""
        if command is not None:
            np.clip(np.asarray(command, float), self._lo, self._hi, out=self.command)
        return self.command

    def _advance_gait(self) -> None:
        if self.spec.gait_period <= 0:
            return
        p = self.gait_phase + 2 * np.pi * self.control_dt / self.spec.gait_period
        self.gait_phase = np.fmod(p + np.pi, 2 * np.pi) - np.pi
        if np.linalg.norm(self.command[:2]) < 0.01 and abs(self.command[2]) < 0.01:
            self.gait_phase[:] = np.pi  # standing: both feet at the same phase
            self._standing = True
        elif self._standing:
            self.gait_phase = np.array([0.0, np.pi])
            self._standing = False

    def _raw_term(self, name: str, q, dq, gyro, quat, base_lin_vel, base_height):
        mi = self.mi
        if name == "base_ang_vel":
            return gyro
        if name == "projected_gravity":
            return projected_gravity(quat)
        if name == "joint_pos_rel":
            return q[mi] - self.default_q[mi]
        if name == "joint_vel_rel":
            return dq[mi]
        if name == "last_action":
            return self.last_action
        if name == "velocity_command":
            return self.command
        if name == "velocity_command_xy":
            return self.command[:2]
        if name == "velocity_command_yaw":
            return self.command[2:]
        if name == "gait_phase_sin":
            return np.sin(self.gait_phase)
        if name == "gait_phase_cos":
            return np.cos(self.gait_phase)
        if name == "base_lin_vel":
            return base_lin_vel
        if name == "base_height":
            return np.asarray(base_height, float).reshape(1) - g1.DEFAULT_BASE_HEIGHT
        if name == "motion_command":
            return self.tracking.command
        if name == "motion_anchor_ori_b":
            return self.tracking.anchor_ori_b
        if name == "motion_anchor_pos_b":
            return self.tracking.anchor_pos_b
        raise ArtifactError(f"observation term {name!r} is not built by this runtime")  # validated before

    def observe(self, step: int, q, dq, gyro, quat, base_lin_vel, base_height) -> np.ndarray:
        return self._observe(step, q, dq, gyro, quat, base_lin_vel, base_height).copy()

    def _observe(self, step, q, dq, gyro, quat, base_lin_vel, base_height) -> np.ndarray:
        """The float32 observation; on the fast path the session's input row itself (observe copies it)."""
        if self._obs_buf is not None:
            self._obs_buf.fill(self._x32, step, gyro, np.asarray(quat, float).tolist(), q, dq, self.last_action,
                               base_lin_vel, base_height)
            return self._x32
        q, dq = np.asarray(q, float), np.asarray(dq, float)
        if self.native:
            anchor = None
            if self.tracking is not None:
                self.tracking.update(step, q, np.asarray(quat, float), self._base_pos)
                anchor = self.tracking.anchor_ori_b
            inputs = observation_inputs(
                step, self.ref_q, self.ref_height, self.control_dt, self.duration,
                gyro=np.asarray(gyro, float), quat=np.asarray(quat, float), q=q, dq=dq,
                last_action=self.last_action, base_lin_vel=np.asarray(base_lin_vel, float),
                base_height=np.asarray(base_height, float), anchor_ori_b=anchor)
            return build_observation(self.terms, inputs).astype(np.float32)
        obs = np.empty(self.n_obs, np.float32)
        first = self._frames == 0
        if self.tracking is not None:
            self.tracking.update(step, q, np.asarray(quat, float), self._base_pos)
        for t, h, sc, sl in zip(self.terms, self._hist, self._scale, self._slices):
            v = self._raw_term(t.name, q, dq, np.asarray(gyro, float), np.asarray(quat, float),
                               np.asarray(base_lin_vel, float), base_height)
            if t.clip is not None:
                v = np.clip(v, t.clip[0], t.clip[1])
            if h.shape[0] > 1:
                h[:-1] = h[1:]  # oldest first
            h[-1] = v * sc
            if first and self.spec.history_fill == "first":
                h[:] = h[-1]
            obs[sl] = h.reshape(-1)
        self._frames += 1
        return obs

    def infer(self, obs: np.ndarray) -> np.ndarray:
        """The network's raw output; a time_step input gets the step being run (set by `step`)."""
        if obs is not self._x32:
            self._x32[:] = obs
        if self.spec.time_step_input:
            self._feed[self.spec.time_step_input][0, 0] = self._time_step
        if self._prog is not None:
            return self._prog.run().astype(float)
        if self._io is not None:
            self.session.run_with_iobinding(self._io)
            return self._y32.reshape(-1).astype(float)
        out = self.session.run(self._outs, self._feed)[0]
        return out.reshape(-1).astype(float)

    def action_target(self, action: np.ndarray) -> np.ndarray:
        """Joint targets (motor order) of a raw policy output (policy order)."""
        if self.native:
            return action_to_joint_target(action, self.action_scale, self.default_q)
        a = np.clip(action, -self.clip, self.clip) if self.clip is not None else action
        target = self.default_q.copy()
        target[self.mi] = self.offset + self.scales * a
        return target

    def step(self, step: int, q, dq, gyro, quat, base_lin_vel, base_height, command=None,
             base_pos=None) -> PolicyOutput:
        """One policy step. base_pos: the pelvis' estimated world position (tracking policies with an anchor
        position term; None reads as the origin)."""
        self._base_pos = base_pos
        nt = self._native
        if nt is not None and 0 <= step <= nt.n_steps and command is None:
            # observation, network and target in one compiled call: the same numbers as the path below
            # (tests/test_policy_kernel.py); the outputs are copies, the caller's to keep
            np.concatenate((gyro, quat, q, dq, self.last_action, base_lin_vel, (base_height,)), out=nt.stage)
            nt.run(step)
            self._time_step = step
            action = nt.action.copy()
            self.last_action = action
            return PolicyOutput(step, self._phases[step], nt.obs.copy(), action, nt.target.copy())
        self.set_command(command)
        self._advance_gait()
        obs = self._observe(step, q, dq, gyro, quat, base_lin_vel, base_height)
        self._time_step = step
        action = self.infer(obs)
        if action.shape != (len(self.mi),):
            raise ArtifactError(f"policy returned {action.shape[0]} actions, expected {len(self.mi)}")
        target = self.action_target(action)
        self.last_action = action
        return PolicyOutput(step, self.phase(step), obs.copy() if obs is self._x32 else obs, action, target)

    def hold_target(self, from_target, t_in_hold: float) -> np.ndarray:
        return hold_blend(from_target, self.default_q, t_in_hold, self.hold_blend_s)
