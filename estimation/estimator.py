"""State estimator for the deploy loop: base orientation, linear velocity and height, and
foot contact of the G1 from LowState (IMU + joint encoders [+ joint torque estimates]).

- Orientation is the IMU's own quaternion (the robot reports it; pelvis IMU site).
- Forward kinematics of the feet relative to the pelvis comes from the same MuJoCo model
  the bridge simulates (`estimation/kinematics.py`).
- A linear Kalman filter in the classic floating-base leg-odometry form (as in MIT
  Cheetah's linear state estimator): state x = [p, v, f_L, f_R] (12), the world position
  and velocity of the IMU point and the world positions of the two feet's contact points.
    process:      p += v dt + a dt^2/2,  v += a dt,  a = R (accel - accel_bias) + g
                  feet fixed; a stance foot drifts slowly, a swing foot is free.
    measurements: f_i - p = R r_i               (leg kinematics, both feet, always)
                  v = -R (w x r_i + v_i(q, dq)) (stance foot i: its contact point is still)
                  f_i,z = h_i                    (stance foot i stands on the ground z = 0;
                                                  h_i = contact point height above the
                                                  foot's lowest sole point)
  The contact point is a soft-min over the sole's collision spheres (sole centre when flat,
  toe/heel edge when the foot rolls) taken at the sphere bottoms, so it is the material point
  that really stays still; the foot state is re-anchored when it moves along the sole.
  The filter runs on the IMU point, so the accelerometer needs no lever-arm correction;
  the pelvis velocity and height are derived from it exactly (v_pelvis = v - w x R r_imu).
  With no foot in contact (flight) it integrates the IMU alone.
- Contact, per foot: loaded (vertical ground force from the joint torques, F = -J^-T tau over
  the six leg joints, leg weight ignored; hysteresis) or at the ground (within cm of the lower
  foot), not moving (< 0.2 m/s under the prior) and the body not in free fall (specific
  force > 3 m/s^2); never when the filter puts the sole > 8 cm above the ground. A stance
  foot whose implied velocity fails a chi^2 gate (a sliding touch-down) is left out for up
  to 50 ms; fresh and lightly loaded feet are trusted less.
- Bad input: NaN/inf, out-of-range or frozen (bit-identical for N new ticks) IMU data is
  flagged and the filter holds its last good state (no prediction, no update); NaN joint
  data skips the kinematic updates (IMU prediction only); NaN torques fall back to the
  kinematic contact. Safety reads `Estimate.flags`.
- Call it on every LowState (500 Hz). Called at 50 Hz it works, but the accelerometer is then
  sampled at 50 Hz (aliasing) and errors grow 2-3x (bench/estimator.py).


numpy + mujoco + numba; no jax (deploy rule). Cost: the update's arithmetic is one compiled call
(estimation/kernel.py) on arrays the estimator owns; Python validates the sample and runs mj_kinematics.
The kernel is compiled (or loaded from numba's cache) when the first Estimator is built, never inside a tick.
"""
from __future__ import annotations

import math

import mujoco
import numpy as np

from estimation import kernel as K
from estimation.config import Estimate, EstimatorConfig, EstimatorFlags
from estimation.kinematics import G1LegKinematics
from robots import g1
from robots.physics import GRAVITY

_NLEG = 12  # motors 0..11 are the two legs (g1.LEG_L, g1.LEG_R)
assert g1.LEG_L == slice(0, 6) and g1.LEG_R == slice(6, 12)
_NX = 12


def _frozen_contact(left: bool, right: bool) -> np.ndarray:
    a = np.array([left, right])
    a.setflags(write=False)
    return a


_CONTACT = {(a, b): _frozen_contact(a, b) for a in (False, True) for b in (False, True)}  # Estimate.foot_contact, shared


class Estimator:
    """`reset(q, quat)` then `update(t, ...)` every tick; each update returns an Estimate.

    `update` before `reset` initialises from the first good sample (standing assumed:
    the lower foot on the ground). `x` (12,) and `P` (12, 12) are the filter's state, updated in place."""

    def __init__(self, config: EstimatorConfig = EstimatorConfig(), model: mujoco.MjModel | None = None):
        self.config = config
        self.kin = kin = G1LegKinematics(model)
        identity = bool(np.allclose(kin.imu_rot, np.eye(3), atol=1e-9))  # IMU axes = pelvis axes
        qa = np.asarray(kin._qadr)
        self._qadr = kin._qadr
        self._qpos = kin._qpos[int(qa[0]):int(qa[-1]) + 1] if np.array_equal(qa, np.arange(qa[0], qa[0] + qa.size)) else None
        self._buf, self._ibuf = K.pack(K.config_vector(config, kin.sole_radius), kin.imu_pos, kin.imu_rot, identity,
                                       kin._foot_site, kin._leg_jnt, kin._sole_geom)
        v = K.views(self._buf)
        self.x, self.P = v.x, v.P
        self._st, self._u, self._out = v.st, v.u, v.out  # the kernel's filter memory, this tick's input and estimate
        # the MjData arrays mj_kinematics fills and the kernel reads
        self._mj = (kin._site_xpos, kin._xaxis, kin._xanchor, kin._geom_xpos)
        self._flags = {}  # the few flag combinations of a good IMU sample, built once (immutable)
        self._initialized = False
        self._last: Estimate | None = None
        self._reset_io()
        self._warm_up()

    def _warm_up(self) -> None:
        """Compile the kernels (or load them from numba's cache) now, on a copy of the state: never inside a tick."""
        buf = self._buf.copy()
        u = K.views(buf).u
        u[K.U_QUAT], u[K.U_ACC + 2] = 1.0, GRAVITY
        self._mj_kinematics(g1.DEFAULT_JOINT_POS)
        K.reset(buf, self._ibuf, self._mj[3], 0.0, 1.0)
        K.tick(buf, self._ibuf, *self._mj, 0.002, 0.002, 1.0, True, True)

    # ------------------------------------------------------------------ state
    def _reset_io(self):
        self._prev_imu = None
        self._same_count = 0
        self._t_prev = None
        self._t_good = None
        self._contact = [True, True]
        self._st[:] = 0.0
        self._st[K.ST_C:K.ST_C + 2] = 1.0
        self._st[K.ST_NOC] = math.nan
        self._st[K.ST_GATED:K.ST_GATED + 2] = math.nan
        self._fresh = False

    @property
    def initialized(self) -> bool:
        return self._initialized

    def reset(self, q, quat, t: float = 0.0) -> Estimate:
        """Start at rest with the lower foot on the ground at height 0."""
        q = np.asarray(q, dtype=float)
        quat = np.asarray(quat, dtype=float)
        if q.shape != (g1.NUM_MOTORS,) or quat.shape != (4,):
            raise ValueError(f"Estimator.reset needs q ({g1.NUM_MOTORS},) and quat (4,), got {q.shape}, {quat.shape}")
        if not (np.all(np.isfinite(q)) and np.all(np.isfinite(quat))) or np.linalg.norm(quat) < 0.5:
            raise ValueError("Estimator.reset needs finite joint positions and a unit quaternion")
        t = float(t)
        self._reset_io()
        self._mj_kinematics(q)
        u = self._u
        u[:] = 0.0
        u[K.U_QUAT:K.U_QUAT + 4] = quat
        K.reset(self._buf, self._ibuf, self._mj[3], t, float(np.linalg.norm(quat)))
        self._contact = [bool(self._st[K.ST_C]), bool(self._st[K.ST_C + 1])]
        self._t_prev = t
        self._t_good = t
        self._fresh = True
        self._initialized = True
        self._last = self._estimate(t, EstimatorFlags(), float(self._out[K.O_POS + 2]))
        return self._last

    # ---------------------------------------------------------------- helpers
    def _mj_kinematics(self, q) -> None:
        """Foot sites, joint axes and anchors, sole sphere centres at q, in the kinematics' MjData (pelvis frame)."""
        if self._qpos is not None:
            self._qpos[:] = q
        else:
            self.kin._qpos[self._qadr] = q
        mujoco.mj_kinematics(self.kin.model, self.kin.data)

    def _estimate(self, t: float, flags: EstimatorFlags, height: float) -> Estimate:
        a = self._out.copy()
        return Estimate(t=t, quat=a[K.O_QUAT:K.O_QUAT + 4], gyro=a[K.O_GYRO:K.O_GYRO + 3],
                        base_lin_vel=a[K.O_VB:K.O_VB + 3], base_lin_vel_world=a[K.O_VW:K.O_VW + 3],
                        base_height=height, base_pos=a[K.O_POS:K.O_POS + 3],
                        foot_contact=_CONTACT[self._contact[0], self._contact[1]], foot_force=a[K.O_FORCE:K.O_FORCE + 2],
                        flags=flags)

    def _held(self, t, flags: EstimatorFlags) -> Estimate:
        last = self._last
        if last is None:
            return Estimate(
                float(t), np.array([1.0, 0, 0, 0]), np.zeros(3), np.zeros(3), np.zeros(3),
                float("nan"), np.zeros(3), np.zeros(2, bool), np.full(2, np.nan), flags,
            )
        return last._replace(t=float(t), flags=flags)

    # ----------------------------------------------------------------- update
    def update(self, t, q, dq, quat, gyro, accel, tau_est=None) -> Estimate:
        """One tick. t: seconds (monotonic; LowState tick * 1e-3 works); q, dq: (29,) motor
        order; quat (w, x, y, z), gyro (rad/s), accel (m/s^2, specific force): the pelvis IMU
        as LowState reports it; tau_est: (29,) Nm or None."""
        c = self.config
        t = float(t)
        quat = np.asarray(quat, dtype=float)
        gyro = np.asarray(gyro, dtype=float)
        accel = np.asarray(accel, dtype=float)
        q = np.asarray(q, dtype=float)
        dq = np.asarray(dq, dtype=float)

        # --- validate the IMU sample (ten floats: w x y z, gyro, accel)
        imu_nan = quat.shape != (4,) or gyro.shape != (3,) or accel.shape != (3,)
        imu = None if imu_nan else quat.tolist() + gyro.tolist() + accel.tolist()
        # (a sum is finite iff every term is, up to overflow near 1e308, which is garbage too)
        imu_nan = imu_nan or not math.isfinite(sum(imu))
        out_of_range = frozen = False
        qn = 1.0
        if not imu_nan:
            qn = math.sqrt(imu[0] * imu[0] + imu[1] * imu[1] + imu[2] * imu[2] + imu[3] * imu[3])
            out_of_range = (abs(qn - 1.0) > c.quat_norm_tol or max(map(abs, imu[7:])) > c.max_accel
                            or max(map(abs, imu[4:7])) > c.max_gyro)
            # a repeated message (same time stamp) is stale, not frozen: only count new ticks
            if self._prev_imu is not None and imu == self._prev_imu:
                if self._t_prev is None or t > self._t_prev:
                    self._same_count += 1
            else:
                self._same_count = 0
            self._prev_imu = imu
            frozen = self._same_count >= c.imu_frozen_samples - 1
        imu_ok = not (imu_nan or out_of_range or frozen)
        joints_ok = q.shape == dq.shape == (g1.NUM_MOTORS,)
        if joints_ok:
            dql = dq.tolist()[:_NLEG]
            joints_ok = math.isfinite(sum(q[:_NLEG].tolist()) + sum(dql))
        taul = None
        tau_nan = False
        if tau_est is not None and c.use_torque_contact:
            tau = np.asarray(tau_est, dtype=float)
            taul = tau.tolist()[:_NLEG] if tau.shape == (g1.NUM_MOTORS,) else None
            if taul is None or not math.isfinite(sum(taul)):
                taul, tau_nan = None, True

        # --- initialise on the first good sample
        if not self._initialized:
            if imu_ok and joints_ok:
                self.reset(q, quat, t)
            else:
                return self._held(t, EstimatorFlags(
                    imu_nan=imu_nan, imu_frozen=frozen, imu_out_of_range=out_of_range,
                    joints_nan=not joints_ok, tau_nan=tau_nan, initialized=False))

        dt = t - self._t_prev
        dt_gap = (dt <= 0.0 or dt > c.max_dt) and not self._fresh  # (the reset's own sample is no gap)
        self._fresh = False
        dt = min(max(dt, 0.0), c.max_dt)
        if t > self._t_prev:
            self._t_prev = t

        if not imu_ok:  # hold the last good state; uncertainty grows when the IMU returns
            self._st[K.ST_MISSED] += dt
            return self._held(t, EstimatorFlags(
                imu_nan=imu_nan, imu_frozen=frozen, imu_out_of_range=out_of_range,
                joints_nan=not joints_ok, tau_nan=tau_nan, dt_gap=dt_gap,
                flight=not (self._contact[0] or self._contact[1]), imu_bad_s=t - self._t_good,
            ))

        self._t_good = t
        u = self._u
        u[K.U_QUAT:K.U_DQ] = imu
        if joints_ok:
            u[K.U_DQ:K.U_DQ + _NLEG] = dql
            self._mj_kinematics(q)
        has_tau = taul is not None
        if has_tau:
            u[K.U_TAU:K.U_TAU + _NLEG] = taul
        c0, c1, height = K.tick(self._buf, self._ibuf, *self._mj, t, float(dt), qn, joints_ok, has_tau)
        self._contact = [c0, c1]
        key = (not joints_ok, tau_nan, dt_gap, not (c0 or c1))
        flags = self._flags.get(key)
        if flags is None:
            flags = self._flags[key] = EstimatorFlags(joints_nan=key[0], tau_nan=key[1], dt_gap=key[2], flight=key[3])
        self._last = self._estimate(t, flags, height)
        return self._last
