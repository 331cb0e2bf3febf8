"""Differentiable G1 imitation environment on MuJoCo MJX.

Pure functions over an explicit state: `reset(rng) -> EnvState`, `step(state, action) ->
EnvState`, both for ONE environment (batch them with `jax.vmap`; `reset_batch` does it).
Everything is jit/vmap-able and differentiable (`jax.grad` through `step` w.r.t. the action
and the incoming state).

- Control at 1 / control_dt (50 Hz) with `substeps` physics steps (4 -> 200 Hz). At every
  substep the PD runs exactly as on the robot's drives:
  robots.physics.pd_torque (tau = kp (q* - q) - kd dq, clipped to +-TORQUE_LIMIT),
  q* = action_to_joint_target(action), kp/kd = g1.KP/g1.KD times the environment's randomised scales.
- Foot-floor contact (`EnvConfig.contact`): "mjx", MJX's constraint contact whose one knob is the
  solref time constant (`EnvConfig.stiffness`, robots/model.py); or "sigmoid", the seed paper's
  sigmoid-activated compliant contact (train/contact.py, knob kappa in 1/m), applied as generalised
  forces with MJX's own foot contact switched off; it needs a 300 Hz substep (substeps = 6). The
  knob of either lives in the per-environment `EnvParams` (train/domain_rand.py), so it can be
  changed without recompiling.
- Observations come from the one builder in policies/observation.py: base_lin_vel in the
  pelvis frame and pelvis height from the true state, optionally noised.
- Reward (train/rewards.py) against the reference row of the time reached after the step.
- done = fall (robots.physics.fallen, the one fall criterion, or a non-finite state; optionally
  a pelvis height too far from the reference) or end of motion; truncated = end of motion.
  `step` does NOT auto-reset: train/rollout.py does (stop_gradient through the reset).
- `task = "tracking"` (train/tracking.py): the clip's anchor and key bodies are the target (BeyondMimic's
  reward kernels and terminations, from a forward kinematics pass on the state after the step), the
  observation adds `motion_anchor_ori_b`, every reset starts at a frame drawn by the adaptive sampler in the
  reference's state there, and an episode is a window of the clip (truncated at `state.end_step`).
- Link positions (foot heights) come from the last substep's forward pass, i.e. they lag the
  returned qpos by one physics substep (5 ms); qpos/qvel-derived quantities are exact.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from policies import observation as O
from policies import runtime as PR
from policies.action import ACTION_SCALE, action_to_joint_target
from robots import g1
from robots import model as M
from robots import physics as P
from train import contact as C
from train import domain_rand as DR
from train import impulse as I
from train import rewards as R
from train import tracking as TR

# Uniform observation noise half-widths, multiplied by EnvConfig.obs_noise.
OBS_NOISE = {
    "gyro": 0.2,  # rad/s
    "quat": 0.05,  # per quaternion component, renormalised (~3 deg of tilt)
    "q": 0.01,  # rad
    "dq": 1.5,  # rad/s
    "base_lin_vel": 0.1,  # m/s (the estimator's error on the robot)
    "base_height": 0.02,  # m
}


class Motion(Protocol):
    name: str
    ref_q: Any  # (T, 29) reference joint positions at control_dt, from t = 0
    ref_height: Any  # (T,) reference pelvis height
    ref_foot_height: Any  # (T, 2) reference lowest foot-sphere bottom above the floor, left/right
    reward_weights: dict
    duration: float


CONTACT_MODELS = ("mjx", "sigmoid", "impulse")
TASKS = ("imitation", "tracking")


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    stiffness: str | float = "stiff"  # robots.model.STIFFNESS_TIMECONST name or a solref timeconst (s)
    # CONTACT_MODELS: "mjx" (MJX constraint contact, knob `stiffness`), "sigmoid" (train/contact.py) or
    # "impulse" (the seed's velocity-level impulse solve, train/impulse.py)
    contact: str = "mjx"
    kappa: float = 300.0  # 1/m, sharpness of the "sigmoid" / "impulse" contact's gate (the seed's k: 50 / 100 / 300)
    impulse_mode: str = "soft"  # train.impulse.MODES: soft (gated), hard, mixed (hard forward, soft gradient)
    impulse_iterations: int = 10  # Gauss-Seidel sweeps of the impulse contact
    impulse_relaxation: str = "seed"  # train.impulse.RELAXATIONS (why "seed": train/impulse.py ImpulseParams)
    impulse_warm_start: bool = True  # contact impulses start from the last substep's (train/impulse.py)
    contact_law: str = "softplus"  # train.contact.LAWS
    contact_stiffness: float = 2.0e4  # N/m per foot sphere ("sigmoid")
    contact_damping: float = 60.0  # N s/m per foot sphere ("sigmoid")
    substeps: int = 4  # physics steps per control step
    control_dt: float = g1.CONTROL_DT
    action_scale: float = ACTION_SCALE
    obs_noise: float = 1.0  # multiplier of OBS_NOISE; 0 switches noise off
    obs_terms: tuple[str, ...] = tuple(O.MOTION_OBS_TERMS)  # the observation layout, in order
    max_height_error: float | None = None  # m, |h - h*| beyond it also ends the episode (None: off)
    # probability that a reset starts at a random reference frame (its pose and velocity) instead of
    # frame 0 (reference state initialisation): the late parts of a long clip, or a landing, get trained
    # before the policy survives the way there. 0: every episode starts at frame 0
    random_start: float = 0.0
    random_start_margin_s: float = 0.5  # random starts leave at least this much of the motion
    stiff_force: float = 400.0  # N per foot sphere: the `stiff_contact` metric (BCG has its own tau)
    foot_friction: float = 0.6  # nominal, used when domain randomisation is off
    domain_rand: DR.DomainRandConfig = DR.DomainRandConfig()
    mjcf: str | None = None
    # a calibration YAML (robots/calibration.py): the training model takes its armature, damping and
    # friction loss (train/calibrated.py; `make train CALIB=...`)
    calibration: str | None = None
    # TASKS: "imitation" (train/rewards.py) or "tracking" (train/tracking.py: whole-body tracking of a clip; the
    # observation gains motion_anchor_ori_b, derived here)
    task: str = "imitation"
    tracking: TR.TrackingConfig = TR.TrackingConfig()

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"unknown env.task {self.task!r}; use one of {TASKS}")
        if self.task == "tracking" and "motion_anchor_ori_b" not in self.obs_terms:
            object.__setattr__(self, "obs_terms", tuple(self.obs_terms) + ("motion_anchor_ori_b",))
        if self.contact not in CONTACT_MODELS:
            raise ValueError(f"unknown env.contact {self.contact!r}; use one of {CONTACT_MODELS}")
        if not (math.isfinite(self.kappa) and self.kappa > 0):
            raise ValueError(f"env.kappa={self.kappa}: the contact gate's sharpness must be finite and > 0 (1/m), "
                             "e.g. 50, 100 or 300")
        if not (isinstance(self.substeps, int) and self.substeps >= 1):
            raise ValueError(f"env.substeps={self.substeps}: use an integer >= 1")
        if self.contact == "impulse":
            try:
                self.impulse_params().validate()
            except ValueError as e:
                raise ValueError(f"env.contact=impulse: {e} (env.impulse_mode / impulse_iterations / "
                                 f"impulse_relaxation / kappa)") from None
            if self.physics_dt > I.MAX_SUBSTEP + 1e-12:
                raise ValueError(
                    f"env.contact=impulse at substep {self.physics_dt * 1e3:.2f} ms: the PD-held G1 does not stand "
                    f"above {I.MAX_SUBSTEP * 1e3:.1f} ms (train/impulse.py MAX_SUBSTEP); use env.substeps >= "
                    f"{math.ceil(self.control_dt / I.MAX_SUBSTEP - 1e-9)} at control_dt {self.control_dt} s")
        if not 0.0 <= self.random_start <= 1.0:
            raise ValueError(f"env.random_start={self.random_start} is a probability: use a value in [0, 1]")
        if self.contact == "sigmoid":
            try:
                self.contact_params().validate(self.physics_dt)
            except ValueError as e:
                raise ValueError(f"env.contact=sigmoid: {e} (the sigmoid contact needs env.substeps >= "
                                 f"{math.ceil(self.control_dt / C.SUBSTEP - 1e-9)} at control_dt {self.control_dt} s)") from None

    def impulse_params(self) -> I.ImpulseParams:
        """Nominal parameters of the "impulse" contact (per env, kappa and friction come from EnvParams)."""
        return I.ImpulseParams(kappa=float(self.kappa), friction=float(self.foot_friction), mode=self.impulse_mode,
                               iterations=self.impulse_iterations, relaxation=self.impulse_relaxation,
                               warm_start=self.impulse_warm_start)

    @property
    def physics_dt(self) -> float:
        return self.control_dt / self.substeps

    def contact_params(self) -> C.ContactParams:
        """Nominal parameters of the "sigmoid" contact (per env, friction and kappa come from EnvParams)."""
        return C.ContactParams(kappa=float(self.kappa), stiffness=float(self.contact_stiffness),
                               damping=float(self.contact_damping), friction=float(self.foot_friction),
                               law=self.contact_law)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class EnvState:
    """One environment's state (a pytree; a batch carries a leading env axis on every leaf)."""

    data: mjx.Data
    step: jax.Array  # int32, control steps since reset
    last_action: jax.Array  # (29,) the action of the previous step (raw policy output)
    obs: jax.Array  # (obs_size,) observation of this state
    reward: jax.Array  # () reward of the step that led here
    done: jax.Array  # () bool: fell or end of motion
    truncated: jax.Array  # () bool: end of motion
    metrics: dict  # str -> () per-env scalars
    contact_force: jax.Array  # (8,) max normal force (N) per foot sphere over the last step's substeps
    dr: DR.EnvParams  # physics parameters of this environment
    rng: jax.Array  # key for observation noise and pushes
    end_step: jax.Array  # int32: the step at which the episode is truncated (the end of its window)
    start_counts: jax.Array  # (n_bins,) the adaptive sampler's failure counts (the same in every env of a batch)

    def replace(self, **kw) -> "EnvState":
        return dataclasses.replace(self, **kw)


def stiff_contact(contact_force: jax.Array, sphere_foot: np.ndarray, tau: float | jax.Array):
    """The stiff-contact detector: per foot, is any sphere's normal force above tau?

    contact_force: (..., 8) per-sphere normal force; returns (stiff_env (...,), stiff_feet (..., 2)).
    """
    above = contact_force > tau
    feet = jnp.stack([jnp.any(above[..., sphere_foot == f], axis=-1) for f in (0, 1)], axis=-1)
    return jnp.any(feet, axis=-1), feet


class G1Env:
    action_size = g1.NUM_MOTORS

    def __init__(self, cfg: EnvConfig = EnvConfig(), motion: Motion | None = None,
                 mj_model: mujoco.MjModel | None = None):
        """`mj_model`: optional prebuilt training model (e.g. with calibrated or test-modified
        parameters) instead of building it from cfg; it must be the feet-only G1 of robots/model.py."""
        if motion is None:
            raise ValueError("G1Env needs a motion (the motions package), e.g. motions.load_motion('jump')")
        self.cfg = cfg
        self.motion = motion
        ref_q = np.asarray(motion.ref_q, dtype=float)
        ref_h = np.asarray(motion.ref_height, dtype=float)
        ref_f = np.asarray(motion.ref_foot_height, dtype=float)
        T = ref_q.shape[0]
        if ref_q.shape != (T, g1.NUM_MOTORS) or ref_h.shape != (T,) or ref_f.shape != (T, 2) or T < 2:
            raise ValueError(
                f"motion {motion.name!r}: expected ref_q (T, 29), ref_height (T,), ref_foot_height (T, 2) "
                f"with T >= 2, got {ref_q.shape}, {ref_h.shape}, {ref_f.shape}"
            )
        self.episode_length = T - 1  # control steps from frame 0 to the last frame
        # Optional references (the motions package provides them); derived when absent.
        ref_dq = getattr(motion, "ref_dq", None)
        ref_dq = np.gradient(ref_q, cfg.control_dt, axis=0) if ref_dq is None else np.asarray(ref_dq, float)
        ref_v = getattr(motion, "ref_base_lin_vel", None)
        if ref_v is None:
            ref_v = np.zeros((T, 3))
            ref_v[:, 2] = np.gradient(ref_h, cfg.control_dt)
        ref_c = getattr(motion, "contact", None)
        ref_c = ref_f < 0.01 if ref_c is None else np.asarray(ref_c, bool)
        # the reference pelvis's tilt (imported clips lean and roll; keyframe motions are level: (0, 0, -1))
        ref_quat = getattr(motion, "ref_base_quat", None)
        ref_g = np.tile([0.0, 0.0, -1.0], (T, 1)) if ref_quat is None else \
            P.projected_gravity(np.asarray(ref_quat, float) / np.linalg.norm(ref_quat, axis=1, keepdims=True))
        self.reward_weights = R.resolve_weights(getattr(motion, "reward_weights", None))
        self.duration = float(getattr(motion, "duration", self.episode_length * cfg.control_dt))

        # Model: feet-only G1, contact stiffness from the config.
        self.timeconst = M.contact_timeconst(cfg.stiffness)
        # the impulse contact replaces MJX's foot contact: its solref only has to pass the builder's check
        tc = max(self.timeconst, 2 * cfg.physics_dt) if cfg.contact == "impulse" else self.timeconst
        mcfg = M.TrainModelConfig(stiffness=tc, timestep=cfg.physics_dt,
                                  foot_friction=cfg.foot_friction, mjcf=cfg.mjcf)
        m = M.build_training_model(mcfg) if mj_model is None else mj_model
        if cfg.calibration is not None and mj_model is None:
            from train.calibrated import calibrated_model

            m = calibrated_model(m, cfg.calibration, cfg.mjcf)
        floor = m.geom("floor").id
        self.sphere_geoms = M.sole_spheres(m).ravel()
        self.sigmoid = cfg.contact == "sigmoid"
        if self.sigmoid:  # the JAX contact replaces MJX's foot-floor contact, never adds to it
            m = C.disable_foot_contact(m, self.sphere_geoms)
            self._contact_params = cfg.contact_params()
        self.impulse = cfg.contact == "impulse"
        self.friction_dofs = self.frictionloss = None
        if self.impulse:  # foot contact and the joints' dry friction are solved by train/impulse.py
            m, self.friction_dofs, self.frictionloss = I.without_frictionloss(C.disable_foot_contact(m, self.sphere_geoms))
            self._impulse_params = cfg.impulse_params()
        self.mj_model = m
        self.mx = mjx.put_model(m)
        self.qadr = M.motor_qpos_adr(m)
        self.dadr = M.motor_dof_adr(m)
        self.leg_qadr = (self.qadr[g1.LEG_L], self.qadr[g1.LEG_R])
        self.leg_dadr = (self.dadr[g1.LEG_L], self.dadr[g1.LEG_R])
        self.foot_site = np.array([m.site(n).id for n in g1.FOOT_SITES])
        self.foot_body = np.array([m.body(n).id for n in g1.FOOT_BODIES])

        # Initial state: reference frame 0, pelvis lowered/raised so the lowest foot sphere
        # touches the floor, zero velocity.
        d = mujoco.MjData(m)
        d.qpos[:] = 0.0
        d.qpos[2] = ref_h[0]
        d.qpos[3] = 1.0
        d.qpos[self.qadr] = ref_q[0]
        mujoco.mj_forward(m, d)
        self.sphere_radius = m.geom_size[self.sphere_geoms, 0].copy()
        bottom = d.geom_xpos[self.sphere_geoms, 2] - self.sphere_radius
        d.qpos[2] -= bottom.min()
        mujoco.mj_forward(m, d)
        self.init_qpos = d.qpos.copy()
        # integer leaves in jax's default int type (int64 under jax_enable_x64, as mjx.step returns them)
        self.init_data = jax.tree.map(
            lambda x: x.astype(jnp.asarray(0).dtype) if jnp.issubdtype(x.dtype, jnp.integer) else x, mjx.put_data(m, d))
        if self.impulse:  # the impulse step's warm start (joint friction torques, contact forces)
            self.init_data = self.init_data.replace(userdata=jnp.zeros(
                I.warm_start_size(self.sphere_geoms, self.friction_dofs), self.init_data.qpos.dtype))
        foot_of_body = {int(b): i for i, b in enumerate(self.foot_body)}
        self.sphere_foot = np.array([foot_of_body[int(m.geom_bodyid[g])] for g in self.sphere_geoms])
        start_qpos, start_qvel, ref_qpos, ref_qvel = self._reference_states(m, motion, ref_q, ref_h, ref_dq, ref_c,
                                                                            cfg.control_dt)
        # the frames a random start may pick: at least random_start_margin_s of the motion left
        self.num_start_frames = max(1, self.episode_length - int(round(cfg.random_start_margin_s / cfg.control_dt)))
        self.contact_geoms = np.concatenate([[floor], self.sphere_geoms])

        self.sphere_efc_rows = None if (self.sigmoid or self.impulse) else self._sphere_efc_rows()
        self.num_spheres = len(self.sphere_geoms)

        fdt = jnp.asarray(0.0).dtype
        self._ref_q = jnp.asarray(ref_q, fdt)
        self._ref_h = jnp.asarray(ref_h, fdt)
        self._ref_f = jnp.asarray(ref_f, fdt)
        self._ref_dq = jnp.asarray(ref_dq, fdt)
        self._ref_v = jnp.asarray(ref_v, fdt)
        self._ref_c = jnp.asarray(ref_c)
        self._ref_g = jnp.asarray(ref_g, fdt)
        # the action that commands exactly the reference target at each frame (the `residual` reward)
        self._ref_action = jnp.asarray((ref_q - np.asarray(g1.DEFAULT_JOINT_POS)) / cfg.action_scale, fdt)
        self._start_qpos = jnp.asarray(start_qpos, fdt)
        self._start_qvel = jnp.asarray(start_qvel, fdt)
        self._kp = jnp.asarray(g1.KP, fdt)
        self._kd = jnp.asarray(g1.KD, fdt)
        self._lim = jnp.asarray(g1.TORQUE_LIMIT, fdt)
        self._q_min, self._q_max = jnp.asarray(g1.JOINT_POS_MIN, fdt), jnp.asarray(g1.JOINT_POS_MAX, fdt)
        self._nominal = DR.nominal_params(m.nbody, cfg.foot_friction, self.timeconst, cfg.kappa,
                                          kp_centre=cfg.domain_rand.kp_centre)
        self.obs_specs = O.term_specs(tuple(cfg.obs_terms))
        self.observation_size = O.obs_size(self.obs_specs)
        self._metric_zeros = None
        self.tracking = cfg.task == "tracking"
        self._observes_anchor = "motion_anchor_ori_b" in cfg.obs_terms
        self.n_bins = 1
        if self.tracking or self._observes_anchor:
            self._setup_tracking(m, ref_qpos, ref_qvel, T)

    def _setup_tracking(self, m, ref_qpos, ref_qvel, T):
        """The reference's key bodies per frame (C MuJoCo forward kinematics of the reference states: world
        position, rotation, velocity at the body origin), the anchor's rotation chain, the sampler's bins."""
        tc = self.cfg.tracking
        names = {m.body(i).name for i in range(m.nbody)}
        missing = [b for b in (tc.anchor_body, *tc.bodies) if b not in names]
        if missing:
            raise ValueError(f"env.tracking: the G1 has no bodies {missing} (its bodies: {sorted(names - {'world'})})")
        bodies = list(tc.bodies) if tc.anchor_body in tc.bodies else list(tc.bodies) + [tc.anchor_body]
        self.track_body = np.array([m.body(b).id for b in bodies])
        self.track_root = np.asarray(m.body_rootid[self.track_body])
        self.anchor = bodies.index(tc.anchor_body)
        self.end_effectors = np.array([bodies.index(b) for b in tc.end_effectors], int)
        d = mujoco.MjData(m)
        pos, rot = np.zeros((T, len(bodies), 3)), np.zeros((T, len(bodies), 3, 3))
        lin, ang = np.zeros((T, len(bodies), 3)), np.zeros((T, len(bodies), 3))
        com, feet = np.zeros((T, 3)), np.zeros((T, 2, 3))
        for k in range(T):
            d.qpos[:], d.qvel[:] = ref_qpos[k], ref_qvel[k]
            mujoco.mj_forward(m, d)
            pos[k], rot[k] = d.xpos[self.track_body], d.xmat[self.track_body].reshape(-1, 3, 3)
            lin[k], ang[k] = TR.origin_velocity(d.cvel[self.track_body], pos[k], d.subtree_com[self.track_root], xp=np)
            com[k] = d.subtree_com[0]
            feet[k] = self.foot_centers(d, xp=np)
        fdt = jnp.asarray(0.0).dtype
        self._ref_com, self._ref_feet = jnp.asarray(com, fdt), jnp.asarray(feet, fdt)
        self._ref_body_pos, self._ref_body_rot = jnp.asarray(pos, fdt), jnp.asarray(rot, fdt)
        self._ref_body_lin, self._ref_body_ang = jnp.asarray(lin, fdt), jnp.asarray(ang, fdt)
        self.anchor_chain = TR.chain_of(m, tc.anchor_body, self.qadr)
        self.window_steps = max(1, int(round(tc.window_s / self.cfg.control_dt)))
        self.per_bin = TR.frames_per_bin(self.cfg.control_dt, tc.bin_s)
        self.n_bins = TR.num_bins(T, self.cfg.control_dt, tc.bin_s) if self.tracking else 1
        self.track_weights = tc.weight_map()
        if self.tracking:  # every reset starts in the reference's own state (frame 0 too)
            self._start_qpos = jnp.asarray(ref_qpos, fdt)
            self._start_qvel = jnp.asarray(ref_qvel, fdt)

    def robot_anchor_rot(self, quat, q):
        """The robot anchor's rotation in the world from the pelvis quaternion and the joints."""
        return TR.quat_to_mat(quat) @ TR.rot_in_pelvis(self.anchor_chain, q)

    def body_kinematics(self, data: mjx.Data):
        """(pos, rot, lin_vel, ang_vel) of the tracked bodies, world frame, from data's forward kinematics and
        com velocities (cvel: rotation then translation at the subtree com of the body's root)."""
        b = self.track_body
        lin, ang = TR.origin_velocity(data.cvel[b], data.xpos[b], data.subtree_com[self.track_root])
        return data.xpos[b], data.xmat[b], lin, ang

    # ------------------------------------------------------------------ helpers
    def _reference_states(self, m, motion, ref_q, ref_h, ref_dq, ref_c, dt):
        """(T, nq), (T, nv) twice: the reset states of random starts, then the reference's own states (frame 0
        too: the reset states replace it by the standing start at rest).

        Pelvis x, y and orientation from the reference when it has them (upright at x = y = 0 otherwise),
        joints and their velocities, the pelvis's linear velocity (world) and its angular velocity (body
        frame, mj_differentiatePos of neighbouring frames). In a frame with a foot on the floor the pelvis
        is shifted so the lowest foot sphere touches the floor, as frame 0's start is; in a flight frame
        it keeps the reference's height plus frame 0's shift (the sole model's offset)."""
        T = ref_q.shape[0]
        pos = getattr(motion, "ref_base_pos", None)
        quat = getattr(motion, "ref_base_quat", None)
        vel = getattr(motion, "ref_base_lin_vel", None)
        qpos = np.zeros((T, m.nq))
        qpos[:, 0:2] = 0.0 if pos is None else np.asarray(pos, float)[:, 0:2] - np.asarray(pos, float)[0, 0:2]
        qpos[:, 2] = ref_h
        qpos[:, 3:7] = [1.0, 0.0, 0.0, 0.0] if quat is None else \
            np.asarray(quat, float) / np.linalg.norm(quat, axis=1, keepdims=True)
        qpos[:, self.qadr] = ref_q
        d = mujoco.MjData(m)
        shift = np.zeros(T)
        for k in range(T):
            d.qpos[:] = qpos[k]
            mujoco.mj_kinematics(m, d)
            shift[k] = (d.geom_xpos[self.sphere_geoms, 2] - self.sphere_radius).min()
        stance = np.asarray(ref_c, bool).any(axis=1)
        qpos[:, 2] -= np.where(stance, shift, shift[0])
        qvel = np.zeros((T, m.nv))
        for k in range(T):
            a, b = max(k - 1, 0), min(k + 1, T - 1)
            mujoco.mj_differentiatePos(m, qvel[k], (b - a) * dt, qpos[a], qpos[b])
        if vel is not None:
            qvel[:, 0:3] = np.asarray(vel, float)
        qvel[:, self.dadr] = ref_dq
        ref_qpos, ref_qvel = qpos.copy(), qvel.copy()  # the reference's own states (the tracking task starts there)
        qvel[0] = 0.0  # frame 0 is the standing start (zero velocity) whatever the reference's first difference
        qpos[0] = self.init_qpos
        return qpos, qvel, ref_qpos, ref_qvel

    def _sphere_efc_rows(self) -> np.ndarray:
        """(8, 4) constraint rows of the spheres' floor contacts: MJX keeps a fixed contact list (floor x
        each sphere), each condim-3 pyramid = 4 rows ("mjx" contact only)."""
        con = jax.jit(mjx.collision)(self.mx, self.init_data)._impl.contact
        con_geom = np.asarray(con.geom)
        adr = np.asarray(con.efc_address)
        dim = np.asarray(con.dim)
        rows = []
        for g in self.sphere_geoms:
            (ci,) = np.nonzero((con_geom == g).any(axis=1))
            if len(ci) != 1 or dim[ci[0]] != 3 or adr[ci[0]] < 0:
                raise RuntimeError(f"unexpected MJX contact layout for sphere geom {g}: contacts {ci}, dim {dim}")
            rows.append(adr[ci[0]] + np.arange(4))
        return np.array(rows)

    def sphere_forces(self, data: mjx.Data) -> jax.Array:
        """(8,) normal force of each foot sphere's floor contact in the last substep (N)."""
        return data._impl.efc_force[self.sphere_efc_rows].sum(-1)

    def foot_centers(self, data, xp=jnp):
        """(2, 3) left/right: the mean of each foot's sole-sphere centres, world (data: MJX's, or C MuJoCo's
        with xp=np)."""
        c = data.geom_xpos[self.sphere_geoms]
        return xp.stack([c[self.sphere_foot == f].mean(0) for f in (0, 1)])

    def foot_heights(self, data: mjx.Data) -> jax.Array:
        """(2,) lowest sphere bottom above the floor per foot (left, right), from data's kinematics."""
        bottom = data.geom_xpos[self.sphere_geoms, 2] - self.sphere_radius
        return jnp.stack([bottom[self.sphere_foot == f].min() for f in (0, 1)])

    def model_for(self, p: DR.EnvParams) -> mjx.Model:
        return DR.apply_to_model(self.mx, p, self.contact_geoms)

    def observe(self, state: EnvState) -> jax.Array:
        """Observation of `state` (noise drawn from a key derived from state.rng)."""
        cfg = self.cfg
        qpos, qvel = state.data.qpos, state.data.qvel
        quat = qpos[3:7]
        gyro = qvel[3:6]  # free joint angular velocity is in the pelvis frame
        lin = P.quat_rotate_inverse(quat, qvel[0:3], xp=jnp)
        q, dq, h = qpos[self.qadr], qvel[self.dadr], qpos[2]
        if cfg.obs_noise > 0:
            k = jax.random.split(jax.random.fold_in(state.rng, 7), 6)
            u = lambda key, x, name: x + cfg.obs_noise * OBS_NOISE[name] * jax.random.uniform(  # noqa: E731
                key, jnp.shape(x), x.dtype, -1.0, 1.0)
            gyro, q, dq, lin, h = (u(k[0], gyro, "gyro"), u(k[1], q, "q"), u(k[2], dq, "dq"),
                                   u(k[3], lin, "base_lin_vel"), u(k[4], h, "base_height"))
            quat = u(k[5], quat, "quat")
            quat = quat / jnp.linalg.norm(quat)
        # phase and reference window: the deploy/eval runtime's definitions, on jax arrays
        anchor = None
        if self._observes_anchor:  # the reference frame of this step, as policies.tracking reads it
            ref_rot = self._ref_body_rot[jnp.minimum(state.step, self.episode_length), self.anchor]
            anchor = TR.anchor_ori_b(self.robot_anchor_rot(quat, q), ref_rot)
        inputs = PR.observation_inputs(state.step, self._ref_q, self._ref_h, cfg.control_dt, self.duration,
                                       gyro=gyro, quat=quat, q=q, dq=dq, last_action=state.last_action,
                                       base_lin_vel=lin, base_height=h, anchor_ori_b=anchor, xp=jnp)
        return O.build_observation(self.obs_specs, inputs, xp=jnp)

    def fell(self, data: mjx.Data, step: jax.Array) -> jax.Array:
        """Termination by falling: robots.physics.fallen (the one criterion), a non-finite state
        (or, if configured, pelvis height too far from the reference)."""
        cfg = self.cfg
        qpos, qvel = data.qpos, data.qvel
        h = qpos[2]
        finite = jnp.all(jnp.isfinite(qpos)) & jnp.all(jnp.isfinite(qvel))
        out = P.fallen(h, qpos[3:7], xp=jnp) | ~finite
        if cfg.max_height_error is not None:
            out = out | (jnp.abs(h - self._ref_h[jnp.minimum(step, self.episode_length)]) > cfg.max_height_error)
        if self.tracking:  # data's kinematics are the state's (step runs them after the substeps)
            i = jnp.minimum(step, self.episode_length)
            pos, rot, _, _ = self.body_kinematics(data)
            out = out | TR.tracking_failed(self.anchor, self.end_effectors, pos, rot, self._ref_body_pos[i],
                                           self._ref_body_rot[i], cfg.tracking)
        return out

    def _evaluate(self, data, step, action, last_action, torque_sq, contact_force):
        """Reward, fall flag and metrics of the state reached at control step `step`."""
        cfg = self.cfg
        i = jnp.minimum(step, self.episode_length)
        qpos, qvel = data.qpos, data.qvel
        q, h = qpos[self.qadr], qpos[2]
        grav = P.projected_gravity(qpos[3:7], xp=jnp)
        feet = self.foot_heights(data)
        in_contact = jnp.stack([jnp.any(contact_force[self.sphere_foot == f] > R.CONTACT_FORCE) for f in (0, 1)])
        fell = self.fell(data, step)
        x = R.RewardInputs(q=q, ref_q=self._ref_q[i], dq=qvel[self.dadr], ref_dq=self._ref_dq[i],
                           base_height=h, ref_height=self._ref_h[i], base_lin_vel=qvel[0:3],
                           ref_base_lin_vel=self._ref_v[i], gravity=grav, ref_gravity=self._ref_g[i], foot_height=feet,
                           ref_foot_height=self._ref_f[i], foot_contact=in_contact, ref_contact=self._ref_c[i],
                           fell=fell, action=action, last_action=last_action,
                           ref_action=self._ref_action[i], torque_sq=torque_sq)
        terms = R.reward_terms(x)
        finite = jnp.all(jnp.isfinite(qpos)) & jnp.all(jnp.isfinite(qvel))
        reward = jnp.where(finite, R.total_reward(terms, self.reward_weights), 0.0)
        if self.tracking:
            pos, rot, lin, ang = self.body_kinematics(data)
            tx = TR.TrackingInputs(anchor=self.anchor, body_pos=pos, body_rot=rot, body_lin_vel=lin, body_ang_vel=ang,
                                   ref_body_pos=self._ref_body_pos[i], ref_body_rot=self._ref_body_rot[i],
                                   ref_body_lin_vel=self._ref_body_lin[i], ref_body_ang_vel=self._ref_body_ang[i],
                                   q=q, ref_q=self._ref_q[i], action=action, last_action=last_action,
                                   ref_action=self._ref_action[i], torque_sq=torque_sq, fell=fell,
                                   com=data.subtree_com[0], foot_center=self.foot_centers(data),
                                   ref_contact=self._ref_c[i], ref_com=self._ref_com[i],
                                   ref_foot_center=self._ref_feet[i])
            track = TR.reward_terms(tx, cfg.tracking)
            reward = jnp.where(finite, TR.total_reward(track, self.track_weights), 0.0)
            terms = {**terms, **{f"track_{k}": v for k, v in track.items()}}
        stiff, _ = stiff_contact(contact_force, self.sphere_foot, cfg.stiff_force)
        metrics = {
            "joint_pos_err": jnp.sqrt(jnp.mean((q - self._ref_q[i]) ** 2)),  # rad RMS over joints
            "base_height": h,
            "base_height_err": jnp.abs(h - self._ref_h[i]),
            "foot_height_left": feet[0],
            "foot_height_right": feet[1],
            "foot_height_err": jnp.mean(jnp.abs(feet - self._ref_f[i])),
            "contact_force_max": contact_force.max(),
            "stiff_contact": stiff.astype(qpos.dtype),
            "fell": fell.astype(qpos.dtype),
            **{f"r_{k}": v for k, v in terms.items()},
        }
        if self.tracking:
            metrics["anchor_pos_err"] = jnp.linalg.norm(pos[self.anchor] - self._ref_body_pos[i, self.anchor])
            metrics["anchor_ori_err"] = jnp.sqrt(TR.rot_err_sq(rot[self.anchor], self._ref_body_rot[i, self.anchor]))
            metrics["com_support_err"] = jnp.sqrt(TR.com_support_sq(tx.com, tx.foot_center, tx.ref_contact) + 1e-12)
            metrics["com_feet_err"] = jnp.sqrt(TR.com_feet_sq(tx.com, tx.foot_center, tx.ref_com, tx.ref_foot_center,
                                                              tx.ref_contact) + 1e-12)
        return reward, fell, metrics

    # ------------------------------------------------------------------ API
    def reset(self, rng: jax.Array, start_counts: jax.Array | None = None, frame: jax.Array | None = None) -> EnvState:
        """Reference frame 0, feet on the floor, zero velocity, freshly sampled EnvParams; with probability
        cfg.random_start a uniformly drawn frame of the first num_start_frames instead (its reference state,
        the previous action = the action commanding that frame's reference). The tracking task: a frame drawn
        from the adaptive sampler's probabilities for `start_counts` (n_bins,) (None: no failures yet, uniform),
        in the reference's state there (with cfg.tracking.start_noise: perturbed, train/tracking.py
        perturb_start, then lifted so no foot sphere is below the floor), the episode ending at the end of its
        window; `frame` (tracking only): that frame instead of a drawn one, in the reference's own state."""
        if frame is not None and not self.tracking:
            raise ValueError("reset(frame=...) starts a tracking episode at a frame; this env's task is not tracking")
        k_dr, k_state = jax.random.split(rng)  # as before random starts: random_start = 0 resets are unchanged
        dr = DR.sample_params(k_dr, self.cfg.domain_rand, self._nominal)
        fdt = self._kp.dtype
        zeros_a = jnp.zeros(g1.NUM_MOTORS, fdt)
        data = self.init_data
        step = jnp.int32(0)
        last_action = zeros_a
        counts = jnp.zeros(self.n_bins, fdt) if start_counts is None else start_counts
        end_step = jnp.int32(self.episode_length)
        if self.tracking:
            tc = self.cfg.tracking
            probs = TR.start_probabilities(counts, tc.kernel_size, tc.kernel_lambda, tc.uniform_floor)
            step = TR.sample_start(jax.random.fold_in(rng, 2), probs, self.per_bin, self.episode_length + 1) \
                if frame is None else jnp.asarray(frame, jnp.int32)
            data = data.replace(qpos=self._start_qpos[step], qvel=self._start_qvel[step])
            if frame is None and tc.start_noise > 0:
                qpos, qvel = TR.perturb_start(jax.random.fold_in(rng, 3), data.qpos, data.qvel, tc.start_noise,
                                              self.qadr, self._q_min, self._q_max)
                bottom = self._kinematics(self.mx, data.replace(qpos=qpos)).geom_xpos[self.sphere_geoms, 2]
                lift = jnp.maximum(0.0, -(bottom - self.sphere_radius).min())  # no foot sphere below the floor
                data = data.replace(qpos=qpos.at[2].add(lift), qvel=qvel)
            data = self._kinematics(self.mx, data)
            last_action = self._ref_action[step]
            end_step = TR.window_end(step, self.episode_length + 1, self.window_steps)
        elif self.cfg.random_start > 0:
            k_start, k_frame = jax.random.split(jax.random.fold_in(rng, 1))
            pick = jax.random.uniform(k_start) < self.cfg.random_start
            step = jnp.where(pick, jax.random.randint(k_frame, (), 0, self.num_start_frames), 0).astype(jnp.int32)
            data = data.replace(qpos=self._start_qpos[step], qvel=self._start_qvel[step])
            last_action = jnp.where(step > 0, self._ref_action[step], zeros_a)
        force = jnp.zeros(self.num_spheres, fdt)
        _, _, metrics = self._evaluate(data, step, zeros_a, zeros_a, jnp.zeros((), fdt), force)
        state = EnvState(
            data=data, step=step, last_action=last_action, obs=jnp.zeros(self.observation_size, fdt),
            reward=jnp.zeros((), fdt), done=jnp.asarray(False), truncated=jnp.asarray(False),
            metrics=jax.tree.map(jnp.zeros_like, metrics), contact_force=force, dr=dr, rng=k_state,
            end_step=end_step, start_counts=counts,
        )
        return state.replace(obs=self.observe(state))

    def reset_batch(self, rng: jax.Array, num_envs: int) -> EnvState:
        return jax.vmap(self.reset)(jax.random.split(rng, num_envs))

    def reset_done(self, state: EnvState, keys: jax.Array) -> EnvState:
        """A batch (leading env axis) with its done envs replaced by fresh resets (stop_gradient); keys (N, 2).
        The tracking task first adds this step's failures (done and not truncated, at the frame reached) to the
        sampler's counts (train/tracking.py update_counts), which every env then carries."""
        counts = state.start_counts[0]
        if self.tracking:
            failed = state.done & ~state.truncated
            counts = jax.lax.stop_gradient(TR.update_counts(counts, state.step, failed, self.per_bin,
                                                            self.cfg.tracking.count_alpha))
        rst = jax.lax.stop_gradient(jax.vmap(self.reset, in_axes=(0, None))(keys, counts))
        out = jax.tree.map(lambda a, b: jnp.where(jnp.reshape(state.done, state.done.shape + (1,) * (a.ndim - 1)), a, b),
                           rst, state)
        return out.replace(start_counts=jnp.broadcast_to(counts, state.start_counts.shape))

    @staticmethod
    def _kinematics(mx: mjx.Model, data: mjx.Data) -> mjx.Data:
        """data's body poses and velocities (xpos, xmat, cvel, subtree_com) for its qpos / qvel."""
        return mjx.com_vel(mx, mjx.com_pos(mx, mjx.kinematics(mx, data)))

    def step(self, state: EnvState, action: jax.Array) -> EnvState:
        cfg = self.cfg
        p = state.dr
        mx = self.model_for(p)
        rng, k_push = jax.random.split(state.rng)
        applied = jnp.where(p.latency, state.last_action, action)
        q_target = action_to_joint_target(applied, cfg.action_scale, xp=jnp)
        kp, kd, lim = self._kp * p.kp_scale, self._kd * p.kd_scale, self._lim
        data = state.data.replace(qvel=DR.maybe_push(k_push, state.data.qvel, p))

        if self.sigmoid:
            cp = dataclasses.replace(self._contact_params, kappa=p.contact_kappa, friction=p.friction)
        if self.impulse:
            ip = dataclasses.replace(self._impulse_params, kappa=p.contact_kappa, friction=p.friction)

            def drives(q, v):
                return P.pd_torque(q_target, q[self.qadr], v[self.dadr], kp, kd, tau_max=lim, xp=jnp)

        def substep(d, _):
            if self.impulse:  # the drives act at the step's midpoint (train/impulse.py)
                d, imp = I.step(mx, d, self.sphere_geoms, ip, drives, self.friction_dofs, self.frictionloss)
                return d, (imp[:, 2] / cfg.physics_dt, jnp.sum(d.ctrl ** 2))
            tau = P.pd_torque(q_target, d.qpos[self.qadr], d.qvel[self.dadr], kp, kd, tau_max=lim, xp=jnp)
            if self.sigmoid:
                d, f = C.step(mx, d.replace(ctrl=tau), self.sphere_geoms, cp)
                return d, (f[:, 2], jnp.sum(tau ** 2))
            d = mjx.step(mx, d.replace(ctrl=tau))
            return d, (self.sphere_forces(d), jnp.sum(tau ** 2))

        data, (forces, tau_sq) = jax.lax.scan(substep, data, None, length=cfg.substeps)
        if self.tracking:
            data = self._kinematics(mx, data)
        contact_force = forces.max(0)
        step = state.step + 1
        reward, fell, metrics = self._evaluate(data, step, action, state.last_action, tau_sq.mean(), contact_force)
        truncated = step >= state.end_step
        new = state.replace(data=data, step=step, last_action=action, reward=reward, done=fell | truncated,
                            truncated=truncated, metrics=metrics, contact_force=contact_force, rng=rng)
        return new.replace(obs=self.observe(new))
