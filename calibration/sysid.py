"""Actuator identification: armature, joint damping, friction loss and an effective kp scale per
joint group, from an excitation run on a hanging (gantry / elastic band) robot.

Model: the bridge model robots/model.py builds (`build_bridge_spec`: same MJCF, same joints,
torque motors, 1 kHz, same integrator), contacts off, the pelvis on a ball joint at its origin
instead of the free joint: the robot hangs, its pelvis barely translates, but it does rotate
(the legs' reactions yaw it on the band/gantry). The pelvis follows the logged IMU attitude and
rate (quaternion, bias-corrected gyro) through a stiff servo (`PELVIS_KP`, `PELVIS_KD`), so the
joints see the pelvis motion the robot had; gravity acts in the world frame. (Fixed pelvis
instead: ~3x the residual for the legs on the bridge's elastic band and damping off by ~40 %.)
The drive law is the robot's, computed outside the model exactly as the bridge does every
physics step: tau = clip(kp_scale kp (q* - q) - kd dq, +-torque limit).

Replay: the log is cut into segments (`segment_s`); each starts from the measured q, dq of all
29 joints and is simulated with the logged (post-safety) commands, command k acting from robot
time ref_tick_k + action_delay (calibration.latency). The residual is q_sim - q_meas of the
group's joints at every logged LowState, divided by each joint's motion (std), so every joint
counts alike. Parameters (shared by the group, the other joints at nominal or earlier fits):
  armature_scale      x the model's armature           (fitted as log)
  damping             Nm s/rad added to joint damping  (drive kd and joint damping both act as
                      -c dq: kd is taken as sent, the rest is joint damping)
  frictionloss_scale  x the model's friction loss      (fitted as log)
  kp_scale            x the sent kp                    (fitted as log)
fitted with scipy.optimize.least_squares (trf, bounds) on a forward-difference Jacobian whose
candidate models are simulated side by side.

Uncertainty: covariance s^2 (J^T J)^-1 at the optimum (s^2 = residual variance), inflated by
(1 + rho) / (1 - rho) with rho the lag-1 autocorrelation of the residuals (correlated residuals
carry less information than their count). A parameter whose relative std exceeds
`identify_rel_std` is reported but flagged `identified: false` (the loaders keep the nominal
value for it): e.g. the armature of joints whose links are far heavier than the rotor.

Refusals (CalibrationError with the reason): a log that is too short or has gaps, joints that do
not move, measurement noise too large for the motion, a fit that does not explain the log,
an effective kp that is not identifiable.
"""
from __future__ import annotations

import copy
import dataclasses
import time
from typing import Callable, Sequence

import mujoco
import numpy as np

from calibration.excitation import group_joints
from calibration.runlog import CalibrationError, RunLog
from robots import g1
from robots.model import BridgeModelConfig, build_bridge_spec, motor_dof_adr, motor_qpos_adr

PARAMS = ("armature_scale", "damping", "frictionloss_scale", "kp_scale")
LOG_PARAMS = (True, False, True, True)
LOWER = np.array([np.log(0.05), 0.0, np.log(0.02), np.log(0.3)])
START_DAMPING = 0.1  # Nm s/rad
# Replay servo that makes the pelvis follow the logged IMU attitude and rate:
#   torque = PELVIS_KP rotvec(q, q_logged) + PELVIS_KD (omega_logged - omega)
# The damping part is the ball joint's own dof damping (implicit in MuJoCo's implicitfast: stable
# even against the pelvis body alone, 0.01 kg m^2); a rotor-like PELVIS_ARMATURE keeps the explicit
# spring well inside its stability bound at 1 kHz.
PELVIS_KP = 5000.0  # Nm/rad
PELVIS_KD = 100.0  # Nm s/rad
PELVIS_ARMATURE = 0.05  # kg m^2
UPPER = np.array([np.log(20.0), 20.0, np.log(20.0), np.log(3.0)])


@dataclasses.dataclass(frozen=True)
class ActuatorParams:
    armature_scale: float = 1.0
    damping: float = 0.0  # Nm s/rad added to the model's joint damping
    frictionloss_scale: float = 1.0
    kp_scale: float = 1.0

    def as_x(self) -> np.ndarray:
        return np.array([np.log(self.armature_scale), self.damping, np.log(self.frictionloss_scale),
                         np.log(self.kp_scale)])

    @classmethod
    def from_x(cls, x: Sequence[float]) -> "ActuatorParams":
        return cls(float(np.exp(x[0])), float(x[1]), float(np.exp(x[2])), float(np.exp(x[3])))


@dataclasses.dataclass(frozen=True)
class FitConfig:
    segment_s: float = 0.5
    min_duration: float = 2.0  # s of excitation at least
    min_motion: float = 0.01  # rad: a group joint moving less (std) did not move
    max_noise_ratio: float = 0.05  # q noise std / motion std beyond this: too noisy
    max_residual_ratio: float = 0.25  # fit residual RMS / motion std beyond this: model does not explain the log
    identify_rel_std: float = 0.25  # relative std beyond this: parameter not identified
    max_kp_rel_std: float = 0.1  # the effective kp must be identified at least this well
    max_nfev: int = 30
    diff_step: float = 0.02  # forward-difference step in x (log params: 2 %)
    verbose: int = 0  # scipy least_squares verbosity


@dataclasses.dataclass
class Segments:
    """The log cut for replay: per segment initial state, per-physics-step commands, measured q."""

    q0: np.ndarray  # (nseg, 29)
    dq0: np.ndarray  # (nseg, 29)
    target: np.ndarray  # (nseg, nsteps, 29)
    kp: np.ndarray  # (nseg, nsteps, 29)
    kd: np.ndarray  # (nseg, nsteps, 29)
    meas_step: np.ndarray  # (S,) physics step after which the i-th measured state is taken
    q_meas: np.ndarray  # (nseg, S, 29)
    t_meas: np.ndarray  # (nseg, S) robot clock s
    base_quat: np.ndarray  # (nseg, nsteps + 1, 4) logged pelvis attitude (world <- pelvis) per step; [0] initial
    base_omega: np.ndarray  # (nseg, nsteps + 1, 3) logged pelvis angular velocity (pelvis frame)


@dataclasses.dataclass
class GroupFit:
    group: str
    joints: tuple[int, ...]
    params: ActuatorParams
    std: dict  # per parameter (in the parameter's own unit)
    identified: dict  # per parameter bool
    residual_rms: float  # rad, group joints, at the optimum
    residual_rms_nominal: float  # rad, with the nominal model
    motion_std: float  # rad, mean over the group's joints
    noise_std: float  # rad, estimated q measurement noise
    rho: float
    nfev: int
    seconds: float
    t: np.ndarray = dataclasses.field(repr=False, default=None)  # for the report plot
    q_meas: np.ndarray = dataclasses.field(repr=False, default=None)
    q_sim: np.ndarray = dataclasses.field(repr=False, default=None)
    q_nominal: np.ndarray = dataclasses.field(repr=False, default=None)

    def summary(self) -> dict:
        out = {"joints": [g1.JOINT_NAMES[j] for j in self.joints]}
        for k in PARAMS:
            out[k] = {"value": round(float(getattr(self.params, k)), 6), "std": round(float(self.std[k]), 6),
                      "identified": bool(self.identified[k])}
        out.update(residual_rms_rad=round(self.residual_rms, 6), residual_rms_nominal_rad=round(self.residual_rms_nominal, 6),
                   motion_std_rad=round(self.motion_std, 5), noise_std_rad=round(self.noise_std, 7),
                   residual_autocorrelation=round(self.rho, 4), evaluations=self.nfev,
                   fit_seconds=round(self.seconds, 1))
        return out


# ----------------------------------------------------------------------------- replay model


# The replay's (and the sim calibration bridge's, calibration.cli.SIM_SUPPORT_ARGS) contact setting: the MJCF's,
# no noslip. MuJoCo's noslip post-solver also hardens the joints' dry friction (frictionloss), which MJX (training)
# cannot: fitted on it, friction loss would mean something else, and the held pose settles where stiction stops it
# (measured: wrist pitch 6.5 mrad off the gravity-sag prediction, bound 5).
REPLAY_CONTACT = "mjcf"


class ReplayModel:
    """The bridge model with the pelvis fixed and contacts off; candidate parameter variants.

    Parameter semantics follow robots/model.py's builder (`BridgeModelConfig` armature_scale,
    extra_joint_damping, frictionloss_scale): how each compiled field responds to them is read off
    models the builder compiles here, so `damping` is exactly the builder's extra_joint_damping
    (viscous only, dof_damping: MJX ignores MuJoCo 4's polynomial terms, so the builder leaves them alone).

    The soft friction-loss constraint's regularisation scales with dof_invweight0, which MuJoCo
    computes at compile time from the floating robot's mass matrix (armature included); each
    variant takes it from the floating bridge model with the variant's armature (mj_setConst), so
    friction acts as in the model the bridge (and training) compile."""

    def __init__(self, mjcf: str | None = None) -> None:
        self.mjcf = mjcf
        self.model = base = self._compile(BridgeModelConfig(mjcf=mjcf))
        arm = self._compile(BridgeModelConfig(mjcf=mjcf, armature_scale=2.0))
        damp = self._compile(BridgeModelConfig(mjcf=mjcf, extra_joint_damping=1.0))
        fric = self._compile(BridgeModelConfig(mjcf=mjcf, frictionloss_scale=2.0))
        m = base
        from robots.model import build_bridge_model

        self.full = build_bridge_model(BridgeModelConfig(mjcf=mjcf, contact=REPLAY_CONTACT))  # floating, dof_invweight0
        self.full_dadr = motor_dof_adr(self.full)
        self._full_data = mujoco.MjData(self.full)
        self.qadr = motor_qpos_adr(m)
        self.dadr = motor_dof_adr(m)
        if not (np.array_equal(self.qadr, 4 + np.arange(g1.NUM_MOTORS)) and np.array_equal(self.dadr, 3 + np.arange(g1.NUM_MOTORS))):
            raise CalibrationError("replay model: expected the pelvis ball joint followed by the 29 motor joints")
        # field = base + (value - nominal) * response, per dof, for each builder parameter
        self.fields = {
            "armature_scale": {"dof_armature": (base.dof_armature.copy(), arm.dof_armature - base.dof_armature, 1.0)},
            "damping": {"dof_damping": (base.dof_damping.copy(), damp.dof_damping - base.dof_damping, 0.0),
                        "dof_dampingpoly": (base.dof_dampingpoly.copy(), damp.dof_dampingpoly - base.dof_dampingpoly, 0.0)},
            "frictionloss_scale": {"dof_frictionloss": (base.dof_frictionloss.copy(),
                                                        fric.dof_frictionloss - base.dof_frictionloss, 1.0)},
        }
        site = m.site(g1.IMU_SITE)
        if m.site_bodyid[site.id] != m.body(g1.BASE_BODY).id:
            raise CalibrationError(f"IMU site {g1.IMU_SITE!r} is not on the {g1.BASE_BODY!r} body")
        self.imu_in_pelvis = m.site_quat[site.id].copy()  # w, x, y, z (pelvis <- imu)

    @staticmethod
    def _compile(cfg: BridgeModelConfig) -> mujoco.MjModel:
        spec = build_bridge_spec(dataclasses.replace(cfg, contact=REPLAY_CONTACT))
        for j in list(spec.joints):
            if j.type == mujoco.mjtJoint.mjJNT_FREE:
                j.type = mujoco.mjtJoint.mjJNT_BALL  # the robot hangs: the pelvis rotates, does not translate
        for k in list(spec.keys):
            spec.delete(k)
        spec.option.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
        m = spec.compile()
        m.dof_damping[:3] = PELVIS_KD  # the pelvis servo's damping (see PELVIS_KD)
        m.dof_armature[:3] = PELVIS_ARMATURE
        return m

    def pelvis_attitude(self, imu_quat: np.ndarray, gyro: np.ndarray, gyro_bias=(0.0, 0.0, 0.0)):
        """Pelvis quaternions (world <- pelvis) and angular velocities (pelvis frame) from the IMU's
        (rows: w, x, y, z; rad/s in the IMU frame)."""
        inv = np.zeros(4)
        mujoco.mju_negQuat(inv, self.imu_in_pelvis)
        r = np.zeros(9)
        mujoco.mju_quat2Mat(r, self.imu_in_pelvis)
        quat = np.empty((len(imu_quat), 4))
        for i, qi in enumerate(np.asarray(imu_quat, float)):
            mujoco.mju_mulQuat(quat[i], qi / np.linalg.norm(qi), inv)
        omega = (np.asarray(gyro, float) - np.asarray(gyro_bias, float)) @ r.reshape(3, 3).T
        return quat, omega

    def variant(self, joint_params: dict[str, np.ndarray]) -> mujoco.MjModel:
        m = copy.copy(self.model)
        d = self.dadr
        for name, fields in self.fields.items():
            v = np.asarray(joint_params[name], float)
            for field, (base, resp, nominal) in fields.items():
                dv = (v - nominal).reshape(-1, *([1] * (resp.ndim - 1)))
                getattr(m, field)[d] = base[d] + dv * resp[d]
        full = copy.copy(self.full)
        full.dof_armature[self.full_dadr] = m.dof_armature[d]
        mujoco.mj_setConst(full, self._full_data)
        m.dof_invweight0[d] = full.dof_invweight0[self.full_dadr]
        return m


def joint_params(groups: dict[tuple[int, ...], ActuatorParams]) -> dict[str, np.ndarray]:
    """Per-joint arrays (29,) of every parameter from per-group values (others nominal)."""
    out = {"armature_scale": np.ones(g1.NUM_MOTORS), "damping": np.zeros(g1.NUM_MOTORS),
           "frictionloss_scale": np.ones(g1.NUM_MOTORS), "kp_scale": np.ones(g1.NUM_MOTORS)}
    for joints, p in groups.items():
        for k in PARAMS:
            out[k][list(joints)] = getattr(p, k)
    return out


def simulate(models: Sequence[mujoco.MjModel], kp_scales: Sequence[np.ndarray], seg: Segments) -> np.ndarray:
    """Joint q (K, nseg, S, 29) of every candidate model over every segment (models run side by side);
    the pelvis (ball joint) servoed to the logged attitude and rate."""
    K, (nseg, nsteps, _) = len(models), seg.target.shape
    datas = [mujoco.MjData(m) for m in models]
    out = np.empty((K, nseg, len(seg.meas_step), g1.NUM_MOTORS))
    lim = g1.TORQUE_LIMIT
    meas = np.full(nsteps, -1)
    meas[seg.meas_step] = np.arange(len(seg.meas_step))
    inv, dq, rv = np.zeros(4), np.zeros(4), np.zeros(3)
    J = slice(4, 4 + g1.NUM_MOTORS)
    V = slice(3, 3 + g1.NUM_MOTORS)
    # views into each MjData (stable buffers) and scratch arrays: the loop below allocates nothing
    qj = [d.qpos[J] for d in datas]
    vj = [d.qvel[V] for d in datas]
    qb = [d.qpos[:4] for d in datas]
    vb = [d.qvel[:3] for d in datas]  # written at segment starts only
    ctrl = [d.ctrl for d in datas]
    fb = [d.qfrc_applied[:3] for d in datas]
    tau, damp = np.empty(g1.NUM_MOTORS), np.empty(g1.NUM_MOTORS)
    step = mujoco.mj_step
    for s in range(nseg):
        for k, d in enumerate(datas):
            qb[k][:] = seg.base_quat[s, 0]
            vb[k][:] = seg.base_omega[s, 0]
            qj[k][:] = seg.q0[s]
            vj[k][:] = seg.dq0[s]
            d.qacc_warmstart[:] = 0.0
            d.time = 0.0
        tgt, kd, bq = seg.target[s], seg.kd[s], seg.base_quat[s]
        bwd = PELVIS_KD * seg.base_omega[s]
        kpk = [kp_scales[k] * seg.kp[s] for k in range(K)]
        for n in range(nsteps):
            for k in range(K):
                np.subtract(tgt[n], qj[k], out=tau)
                tau *= kpk[k][n]
                np.multiply(kd[n], vj[k], out=damp)
                tau -= damp
                np.clip(tau, -lim, lim, out=ctrl[k])
                mujoco.mju_negQuat(inv, qb[k])
                mujoco.mju_mulQuat(dq, inv, bq[n])
                if dq[0] < 0:  # q and -q are one attitude: take the short way
                    dq *= -1.0
                mujoco.mju_quat2Vel(rv, dq, 1.0)
                rv *= PELVIS_KP
                np.add(rv, bwd[n], out=fb[k])  # + KD omega_logged; -KD omega is the implicit dof damping
                step(models[k], datas[k])
            i = meas[n]
            if i >= 0:
                for k in range(K):
                    out[k, s, i] = qj[k]
    return out


# ----------------------------------------------------------------------------- log -> segments


def command_times(log: RunLog, command_dt: float = g1.COMMAND_DT) -> np.ndarray:
    """Robot-clock time (s) each command was sent: its ref tick, plus one command period for every
    earlier command computed from the same LowState (a missed state)."""
    ref = log.cmds["ref_tick"] * 1e-3
    dup = np.zeros(len(ref))
    for i in range(1, len(ref)):
        dup[i] = dup[i - 1] + 1 if ref[i] == ref[i - 1] else 0
    return ref + dup * command_dt


def make_segments(log: RunLog, action_delay: float, segment_s: float, replay: "ReplayModel",
                  gyro_bias=(0.0, 0.0, 0.0), dt: float = g1.BRIDGE_PHYSICS_DT) -> Segments:
    ticks = log.states["tick"].astype(np.int64)
    bquat, bomega = replay.pelvis_attitude(log.states["quat"], log.states["gyro"], gyro_bias)
    t_cmd = command_times(log) + action_delay
    period_ms = int(round(log.state_period * 1e3))
    S = max(2, int(round(segment_s / (period_ms * 1e-3))))
    dt_ms = dt * 1e3
    starts = []
    i = 0
    while i + S < len(ticks):
        if ticks[i + S] - ticks[i] == S * period_ms and t_cmd[0] <= ticks[i] * 1e-3:  # no gap, commands cover it
            starts.append(i)
            i += S
        else:
            i += 1
    if not starts:
        raise CalibrationError("excitation log has no gap-free stretch of one segment with commands")
    nsteps = int(round(S * period_ms / dt_ms))
    meas_step = np.arange(1, S + 1) * int(round(period_ms / dt_ms)) - 1
    nseg = len(starts)
    target = np.empty((nseg, nsteps, g1.NUM_MOTORS))
    kp = np.empty_like(target)
    kd = np.empty_like(target)
    q_meas = np.empty((nseg, S, g1.NUM_MOTORS))
    t_meas = np.empty((nseg, S))
    base_quat = np.empty((nseg, nsteps + 1, 4))
    base_omega = np.empty((nseg, nsteps + 1, 3))
    for s, i0 in enumerate(starts):
        t_steps = ticks[i0] * 1e-3 + np.arange(nsteps) * dt
        k = np.searchsorted(t_cmd, t_steps + 1e-7, side="right") - 1
        k = np.clip(k, 0, len(t_cmd) - 1)
        target[s], kp[s], kd[s] = log.cmds["q"][k], log.cmds["kp"][k], log.cmds["kd"][k]
        # pelvis targets: the attitude logged at the end of each step (the newest state at or after it)
        t_end = np.concatenate([[ticks[i0] * 1e-3], t_steps + dt])
        b = np.clip(np.searchsorted(ticks * 1e-3, t_end - 1e-7, side="left"), i0, len(ticks) - 1)
        base_quat[s], base_omega[s] = bquat[b], bomega[b]
        q_meas[s] = log.states["q"][i0 + 1:i0 + S + 1]
        t_meas[s] = ticks[i0 + 1:i0 + S + 1] * 1e-3
    q0 = log.states["q"][starts]
    dq0 = log.states["dq"][starts]
    return Segments(q0, dq0, target, kp, kd, meas_step, q_meas, t_meas, base_quat, base_omega)


def noise_std(q: np.ndarray) -> float:
    """Measurement noise of q (rad) from the 4th difference (white noise: var = 70 sigma^2; a smooth
    500 Hz trajectory contributes ~1e-5 rad)."""
    d4 = np.diff(q, 4, axis=0)
    mad = np.median(np.abs(d4 - np.median(d4, axis=0)), axis=0)
    return float(np.max(1.4826 * mad / np.sqrt(70.0)))


# ----------------------------------------------------------------------------- the fit


def fit_group(log: RunLog, group: str, action_delay: float = 0.0, replay: ReplayModel | None = None,
              others: dict[tuple[int, ...], ActuatorParams] | None = None, cfg: FitConfig = FitConfig(),
              gyro_bias=(0.0, 0.0, 0.0), echo: Callable[[str], None] = lambda s: None) -> GroupFit:
    from scipy.optimize import least_squares

    t_start = time.perf_counter()
    joints = group_joints(group)
    what = f"actuator fit ({group})"
    log.require(cfg.min_duration, int(cfg.min_duration / g1.LOWSTATE_DT * 0.8), what)
    q = log.states["q"][:, list(joints)]
    motion = q.std(axis=0)
    cmd_motion = log.cmds["q"][:, list(joints)].std(axis=0)
    still = motion < cfg.min_motion
    if still.all():
        raise CalibrationError(
            f"{what}: the robot did not move (joint motion std {motion.max():.4f} rad < {cfg.min_motion} rad, "
            f"commanded {cmd_motion.max():.3f} rad): are the motors enabled and the locomotion service released "
            "(debug mode)? Is the robot hanging free?")
    if still.any():
        bad = [f"{g1.JOINT_NAMES[j]} ({m:.4f} rad, commanded {c:.3f})" for j, m, c, s in zip(joints, motion, cmd_motion, still) if s]
        raise CalibrationError(f"{what}: joints did not move: {', '.join(bad)}; blocked, disabled or not excited")
    noise = noise_std(q)
    if noise > cfg.max_noise_ratio * motion.min():
        raise CalibrationError(
            f"{what}: log too noisy: q noise std ~{noise:.4f} rad is {noise / motion.min():.0%} of the smallest joint "
            f"motion ({motion.min():.3f} rad; limit {cfg.max_noise_ratio:.0%}); check encoders / filtering or "
            "excite with a larger amplitude")
    replay = replay or ReplayModel(log.meta.get("mjcf"))
    seg = make_segments(log, action_delay, cfg.segment_s, replay, gyro_bias)
    if len(seg.q0) < 2:
        raise CalibrationError(f"{what}: log too short: {len(seg.q0)} usable segment(s) of {cfg.segment_s} s; need 2")
    others = dict(others or {})
    scale = np.maximum(motion, 1e-3)
    jl = list(joints)

    def models_for(xs):
        ms, kps = [], []
        for x in xs:
            jp = joint_params({**others, joints: ActuatorParams.from_x(x)})
            ms.append(replay.variant(jp))
            kps.append(jp["kp_scale"])
        return ms, kps

    def residuals(qsim):
        return ((qsim[..., jl] - seg.q_meas[..., jl]) / scale).reshape(-1)

    cache: dict = {}
    nfev = [0]

    def fun(x):
        key = tuple(np.round(x, 12))
        if key not in cache:
            ms, kps = models_for([x])
            cache.clear()
            cache[key] = residuals(simulate(ms, kps, seg)[0])
            nfev[0] += 1
        return cache[key]

    def jac(x):
        f0 = fun(x)
        h = cfg.diff_step * np.where(np.array(LOG_PARAMS), 1.0, max(1.0, abs(x[1]) + 0.5))
        xs = []
        for i in range(len(x)):
            xi = x.copy()
            step = h[i] if x[i] + h[i] <= UPPER[i] else -h[i]
            xi[i] += step
            xs.append((xi, step))
        ms, kps = models_for([xi for xi, _ in xs])
        qs = simulate(ms, kps, seg)
        nfev[0] += len(xs)
        return np.stack([(residuals(qs[i]) - f0) / xs[i][1] for i in range(len(xs))], axis=1)

    r0 = fun(ActuatorParams().as_x())  # the nominal model, for the report
    x0 = ActuatorParams(damping=START_DAMPING).as_x()  # interior start (trf stalls on a bound)
    q_nominal = _unscale(r0, seg, jl, scale)
    res = least_squares(fun, x0, jac=jac, bounds=(LOWER, UPPER), method="trf", x_scale="jac",
                        max_nfev=cfg.max_nfev, xtol=1e-4, ftol=1e-6, verbose=cfg.verbose)
    x = res.x
    r = fun(x)
    J = jac(x)
    n, p = len(r), len(x)
    s2 = float(r @ r) / max(1, n - p)
    rr = r.reshape(seg.q_meas.shape[0], -1, len(jl))
    a, b = rr[:, 1:, :].reshape(-1), rr[:, :-1, :].reshape(-1)
    rho = float(np.clip(np.dot(a, b) / max(np.dot(b, b), 1e-30), 0.0, 0.999))
    inflate = (1 + rho) / (1 - rho)
    try:
        cov = np.linalg.pinv(J.T @ J) * s2 * inflate
    except np.linalg.LinAlgError:  # pragma: no cover
        cov = np.full((p, p), np.inf)
    sx = np.sqrt(np.maximum(np.diag(cov), 0.0))
    params = ActuatorParams.from_x(x)
    std, ident = {}, {}
    for i, k in enumerate(PARAMS):
        v = getattr(params, k)
        std[k] = float(v * sx[i]) if LOG_PARAMS[i] else float(sx[i])
        rel = std[k] / max(abs(v), 1e-9) if LOG_PARAMS[i] else std[k] / max(abs(v), 0.05)
        ident[k] = bool(rel <= cfg.identify_rel_std)
    res_rms = float(np.sqrt(np.mean((r * np.repeat(scale[None], len(r) // len(jl), 0).reshape(-1)) ** 2)))
    res_rms0 = float(np.sqrt(np.mean((r0 * np.repeat(scale[None], len(r0) // len(jl), 0).reshape(-1)) ** 2)))
    fit = GroupFit(group, tuple(joints), params, std, ident, res_rms, res_rms0, float(motion.mean()), noise, rho,
                   nfev[0], time.perf_counter() - t_start, t=seg.t_meas, q_meas=seg.q_meas[..., jl],
                   q_sim=_unscale(r, seg, jl, scale), q_nominal=q_nominal)
    echo(f"  {group}: " + ", ".join(f"{k} {getattr(params, k):.4g} +- {std[k]:.2g}" for k in PARAMS)
         + f"; residual {res_rms * 1e3:.2f} mrad (nominal {res_rms0 * 1e3:.2f}), {nfev[0]} sims, {fit.seconds:.0f} s")
    if res_rms > cfg.max_residual_ratio * float(motion.mean()):
        raise CalibrationError(
            f"{what}: the fitted model does not explain the log (residual {res_rms:.4f} rad = "
            f"{res_rms / motion.mean():.0%} of the motion; limit {cfg.max_residual_ratio:.0%}): noisy or inconsistent "
            "log, a robot touching something, or a model that differs beyond these parameters")
    if std["kp_scale"] / params.kp_scale > cfg.max_kp_rel_std:
        raise CalibrationError(
            f"{what}: effective kp not identifiable from this log (relative std {std['kp_scale'] / params.kp_scale:.0%} "
            f"> {cfg.max_kp_rel_std:.0%}): excite longer or with a larger amplitude")
    return fit


def _unscale(r: np.ndarray, seg: Segments, jl: list, scale: np.ndarray) -> np.ndarray:
    return seg.q_meas[..., jl] + r.reshape(seg.q_meas[..., jl].shape) * scale


def _mean_quat(quats: np.ndarray) -> np.ndarray:
    q = np.asarray(quats, float)
    q = q * np.sign(q @ q[0])[:, None]
    m = q.mean(axis=0)
    return m / np.linalg.norm(m)
