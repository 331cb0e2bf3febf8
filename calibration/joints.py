"""Joint zero/offset check against a held pose.

The robot (hanging) holds a known pose with PD. Where it settles is predicted by the same model
the actuator fit uses (calibration.sysid.ReplayModel, the pelvis at its logged mean attitude):
the static equilibrium kp (q* - q) = g(q) (Newton on the 29 joints), so the gravity sag of every
joint is accounted for. What remains is compared with a tolerance that includes the friction
dead band (a joint may stop anywhere within frictionloss / kp of equilibrium):

    residual_j  = mean measured q_j - predicted q_j
    flagged     = |residual_j| > tolerance + frictionloss_j / kp_j  (+ 3 standard errors)

A flagged joint points at an encoder zero offset, a wrong gain, a blocked joint or a model that
misses a load. Note: a drive servoes to its own encoder, so a pure encoder zero offset moves the
real joint, not the reading; it shows here only through the gravity torque it changes. Offsets
from an external reference (a calibration jig) can be entered in the YAML by hand
(`joints.offsets`); the loaders treat both alike.
"""
from __future__ import annotations

import dataclasses

import mujoco
import numpy as np

from calibration.imu import standard_error
from calibration.runlog import CalibrationError, RunLog
from calibration.sysid import ReplayModel, _mean_quat, joint_params
from robots import g1


@dataclasses.dataclass(frozen=True)
class JointCheckConfig:
    tolerance: float = 0.02  # rad beyond the friction band
    settle_fraction: float = 0.5  # use the last half of the hold
    max_motion: float = 0.005  # rad std over the window: more = not settled
    min_duration: float = 0.5


@dataclasses.dataclass(frozen=True)
class JointCheck:
    target: np.ndarray
    measured: np.ndarray
    predicted: np.ndarray
    residual: np.ndarray
    residual_std: np.ndarray
    tolerance: np.ndarray
    flagged: tuple

    @property
    def offsets(self) -> np.ndarray:
        """Residuals of flagged joints, zero elsewhere (what a consumer subtracts from measured q)."""
        out = np.zeros(g1.NUM_MOTORS)
        idx = [g1.JOINT_NAMES.index(n) for n in self.flagged]
        out[idx] = self.residual[idx]
        return out

    def summary(self) -> dict:
        r = lambda a, n=5: [round(float(x), n) for x in a]  # noqa: E731
        return {"pose": r(self.target, 4), "measured": r(self.measured), "predicted": r(self.predicted),
                "residual": r(self.residual), "residual_std": r(self.residual_std, 6), "tolerance": r(self.tolerance),
                "flagged": list(self.flagged), "offsets": r(self.offsets)}


def equilibrium(replay: ReplayModel, target: np.ndarray, kp: np.ndarray, pelvis_quat=(1.0, 0.0, 0.0, 0.0),
                params: dict | None = None, iters: int = 8) -> np.ndarray:
    """q with kp_scale kp (target - q) = gravity torque(q), pelvis held at `pelvis_quat` (Newton)."""
    jp = params or joint_params({})
    m = replay.variant(jp)
    d = mujoco.MjData(m)
    k = kp * jp["kp_scale"]
    qa, da = replay.qadr, replay.dadr

    def resid(q):
        d.qpos[:4] = pelvis_quat
        d.qpos[qa] = q
        d.qvel[:] = 0.0
        mujoco.mj_forward(m, d)
        return k * (target - q) - d.qfrc_bias[da]

    q = np.array(target, float)
    for _ in range(iters):
        f = resid(q)
        if np.abs(f).max() < 1e-9:
            break
        J = np.empty((len(q), len(q)))
        h = 1e-6
        for i in range(len(q)):
            dq = q.copy()
            dq[i] += h
            J[:, i] = (resid(dq) - f) / h
        q = q - np.linalg.solve(J, f)
    return q


def check_joints(log: RunLog, target: np.ndarray, replay: ReplayModel | None = None,
                 cfg: JointCheckConfig = JointCheckConfig(), params: dict | None = None) -> JointCheck:
    what = "joint offset check"
    log.require(cfg.min_duration, int(cfg.min_duration / 0.002 * 0.8), what)
    n = log.n_states
    win = slice(int(n * (1 - cfg.settle_fraction)), n)
    q = log.states["q"][win]
    motion = q.std(axis=0)
    if motion.max() > cfg.max_motion:
        j = int(np.argmax(motion))
        raise CalibrationError(f"{what}: the robot has not settled ({g1.JOINT_NAMES[j]} moves {motion[j]:.4f} rad std "
                               f"> {cfg.max_motion}); hold longer (--still-s, --settle-s) with the robot hanging still")
    kp = log.cmds["kp"][-1]
    replay = replay or ReplayModel(log.meta.get("mjcf"))
    pelvis, _ = replay.pelvis_attitude(_mean_quat(log.states["quat"][win])[None], np.zeros((1, 3)))
    jp = params or joint_params({})
    pred = equilibrium(replay, np.asarray(target, float), kp, pelvis[0], jp)
    meas = q.mean(axis=0)
    resid = meas - pred
    sem = standard_error(q)
    fl = replay.variant(jp).dof_frictionloss[replay.dadr]
    tol = cfg.tolerance + fl / np.maximum(kp * jp["kp_scale"], 1e-9) + 3 * sem
    flagged = tuple(g1.JOINT_NAMES[j] for j in np.flatnonzero(np.abs(resid) > tol))
    return JointCheck(np.asarray(target, float), meas, pred, resid, sem, tol, flagged)
