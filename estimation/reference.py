"""The estimator's filter in plain numpy, step by step: the reference the compiled update (estimation/estimator.py,
estimation/kernel.py) is checked against, on the bench's scenarios with sensor noise, at 500 and 50 Hz, with and
without joint torques and with bad samples injected (tests/test_deploy_compute_estimator.py): the same contact
decisions and flags at every tick and the same estimate to float rounding.

Read this file for the filter's arithmetic (estimation/estimator.py's docstring states the model): the IMU
prediction of p, v and the feet; the leg-kinematics measurement of both feet, stance feet's velocity and height;
the contact logic (load from the joint torques, hysteresis, chi^2 gate); the hang update after long flights; the
bad-sample handling. Not used by the deploy loop (its cost is ~10x the kernel's).
"""
from __future__ import annotations

import math

import mujoco
import numpy as np

from estimation.config import Estimate, EstimatorConfig, EstimatorFlags
from estimation.kinematics import G1LegKinematics
from robots import g1
from robots.physics import GRAVITY

try:  # the LAPACK gesv gufunc np.linalg.solve wraps: same result, without ~15 us of argument checks per call
    from numpy.linalg import _umath_linalg as _ul

    def _solve(a, b):
        return _ul.solve(a, b, signature="dd->d")
except (ImportError, AttributeError):  # pragma: no cover - another numpy layout
    _solve = np.linalg.solve


def _quat_to_mat(quat) -> np.ndarray:
    w, x, y, z = quat.tolist()
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])


def _cross(a, b) -> np.ndarray:
    a0, a1, a2 = a.tolist()
    b0, b1, b2 = b.tolist()
    return np.array([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0])


def _quad3(S, v) -> float:
    """v^T S^-1 v for a symmetric positive definite 3x3 S (adjugate; ~1 us, np.linalg ~7 us)."""
    (a, b, c), (_, d, e), (_, _, f) = S.tolist()
    x, y, z = v.tolist()
    A, B, C = d * f - e * e, c * e - b * f, b * e - c * d
    D, E, F = a * f - c * c, b * c - a * e, a * d - b * b
    det = a * A + b * B + c * C
    if det <= 0.0:
        return float("inf")
    return (A * x * x + D * y * y + F * z * z + 2.0 * (B * x * y + C * x * z + E * y * z)) / det


def _cross_rows(a, b) -> np.ndarray:
    """Row-wise cross product of (n, 3) arrays (np.cross costs ~50 us of Python overhead)."""
    return a[:, _I1] * b[:, _I2] - a[:, _I2] * b[:, _I1]


_I1, _I2 = np.array([1, 2, 0]), np.array([2, 0, 1])
_NLEG = 12  # motors 0..11 are the two legs (g1.LEG_L, g1.LEG_R)
assert g1.LEG_L == slice(0, 6) and g1.LEG_R == slice(6, 12)
_NX = 12
_P, _V = slice(0, 3), slice(3, 6)
_EYE3 = np.eye(3)
_EYE6 = np.eye(6)


def _measurement_matrix(stance: tuple[bool, bool]) -> np.ndarray:
    """H for: both feet relative position (6 rows), then per stance foot velocity (3) + height (1)."""
    n_st = sum(stance)
    H = np.zeros((6 + 4 * n_st, _NX))
    for i in range(2):
        H[3 * i:3 * i + 3, 0:3] = -_EYE3
        H[3 * i:3 * i + 3, 6 + 3 * i:9 + 3 * i] = _EYE3
    n = 6
    for i in range(2):
        if stance[i]:
            H[n:n + 3, 3:6] = _EYE3
            H[n + 3, 8 + 3 * i] = 1.0
            n += 4
    return H


_H = {(a, b): _measurement_matrix((a, b)) for a in (False, True) for b in (False, True)}
_H_HANG = np.zeros((3, _NX))
_H_HANG[:, 3:6] = _EYE3


class ReferenceEstimator:
    """The estimator in numpy, step by step (the compiled kernel's reference)."""

    def __init__(self, config: EstimatorConfig = EstimatorConfig(), model: mujoco.MjModel | None = None):
        self.config = config
        self.kin = G1LegKinematics(model)
        c = config
        self._gyro_bias = np.array(c.gyro_bias)
        self._accel_bias = np.array(c.accel_bias)
        self._g = np.array([0.0, 0.0, -GRAVITY])
        self._imu_pos = self.kin.imu_pos  # IMU point in the pelvis frame
        self._imu_rot = self.kin.imu_rot  # IMU axes in the pelvis frame
        self._imu_identity = bool(np.allclose(self._imu_rot, _EYE3, atol=1e-9))
        self._sole_r = self.kin.sole_radius
        self._initialized = False
        self._last: Estimate | None = None
        self._reset_io()

    # ------------------------------------------------------------------ state
    def _reset_io(self):
        self._prev_imu = None
        self._same_count = 0
        self._t_prev = None
        self._t_good = None
        self._missed = 0.0
        self._contact = np.array([True, True])
        self._flight = False
        self._contact_t0 = np.zeros(2)
        self._no_contact_t0 = None
        self._gated_since = [None, None]
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
        quat = quat / np.linalg.norm(quat)
        self._reset_io()
        c = self.config
        k = self.kin(q)
        R = self._pelvis_rot(quat)
        lowest, cpt, self._w = self._contact_points(k, R)
        rel = (cpt - self._imu_pos) @ R.T  # (2,3) contact points relative to the IMU point, world axes
        x = np.zeros(_NX)
        x[2] = -lowest.min()
        x[6:9] = x[0:3] + rel[0]
        x[9:12] = x[0:3] + rel[1]
        self.x = x
        P = np.zeros(_NX)
        P[0:2] = 1e-6
        P[2] = c.init_height_std**2
        P[3:6] = c.init_vel_std**2
        P[6:] = c.init_height_std**2
        self.P = np.diag(P)
        self._contact[:] = (lowest - lowest.min()) < c.contact_height_on
        self._contact_t0[:] = t - 1.0
        self._t_prev = t
        self._t_good = t
        self._fresh = True
        self._initialized = True
        self._last = self._output(t, quat, np.zeros(3), R, EstimatorFlags(), np.full(2, np.nan))
        return self._last

    # ---------------------------------------------------------------- helpers
    def _pelvis_rot(self, quat) -> np.ndarray:
        R_imu = _quat_to_mat(quat)  # IMU -> world
        return R_imu if self._imu_identity else R_imu @ self._imu_rot.T

    def _contact_points(self, k, R):
        """Per foot: the lowest sole point's world z relative to the IMU point (2,), the
        contact point (2, 3) in the pelvis frame and its weights over the sole spheres (2, S).

        The contact point is a soft-min over the sole spheres: the centre of the sole when
        the foot is flat, the toe (or heel) edge when it rolls, so it is a material point
        of the foot that does not move while the foot stands."""
        z = (k.sole_pos - self._imu_pos) @ R[2]  # (2, S)
        zmin = z.min(axis=1)
        w = np.exp((zmin[:, None] - z) / self.config.contact_point_sharpness)
        w /= w.sum(axis=1, keepdims=True)
        # bottom of the spheres (the material point that touches the floor: a sphere rolling
        # at 20 rad/s moves its centre by 0.1 m/s)
        cpt = (w[:, None, :] @ k.sole_pos)[:, 0] - self._sole_r * R[2]
        return zmin - self._sole_r, cpt, w

    def _foot_force(self, k, R, tau) -> np.ndarray:
        """Vertical ground force on each foot (N, world z) from the leg joint torques:
        static balance tau + J^T W = 0 over the six leg joints (leg weight ignored)."""
        J = np.concatenate([k.jac_pos, k.jac_rot], axis=1)  # (2, 6, 6) pelvis frame
        Jt = J.transpose(0, 2, 1)
        # W = -J^-T tau, damped against the straight-knee singularity.
        y = _solve(Jt @ J + 1e-6 * _EYE6, tau[:_NLEG].reshape(2, 6, 1))
        W = -(J @ y)[:, :3, 0]  # (2, 3) force on each foot, pelvis frame
        return W @ R[2]

    def _output(self, t, quat, omega_imu, R, flags, force) -> Estimate:
        omega_p = omega_imu if self._imu_identity else self._imu_rot @ omega_imu
        # pelvis origin relative to the IMU point: -r_imu; v_pelvis = v_imu + w x (-R r_imu)
        v_pel_body = R.T @ self.x[_V] - _cross(omega_p, self._imu_pos)
        v_pel = R @ v_pel_body
        p_pel = self.x[_P] - R @ self._imu_pos
        return Estimate(
            t=float(t), quat=quat, gyro=omega_imu, base_lin_vel=v_pel_body,
            base_lin_vel_world=v_pel, base_height=float(p_pel[2]), base_pos=p_pel,
            foot_contact=self._contact.copy(), foot_force=force, flags=flags,
        )

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

        # --- validate the IMU sample
        imu_nan = quat.shape != (4,) or gyro.shape != (3,) or accel.shape != (3,)
        imu_raw = None if imu_nan else np.concatenate((quat, gyro, accel))
        imu_nan = imu_nan or not math.isfinite(float(imu_raw.sum()))
        out_of_range = frozen = False
        qn = 1.0
        if not imu_nan:
            qn = math.sqrt(float(quat @ quat))
            out_of_range = bool(
                abs(qn - 1.0) > c.quat_norm_tol
                or float(np.abs(accel).max()) > c.max_accel or float(np.abs(gyro).max()) > c.max_gyro
            )
            # a repeated message (same time stamp) is stale, not frozen: only count new ticks
            if self._prev_imu is not None and (imu_raw == self._prev_imu).all():
                if self._t_prev is None or t > self._t_prev:
                    self._same_count += 1
            else:
                self._same_count = 0
            self._prev_imu = imu_raw
            frozen = self._same_count >= c.imu_frozen_samples - 1
        imu_ok = not (imu_nan or out_of_range or frozen)
        # (a sum is finite iff every term is, up to overflow near 1e308, which is garbage too)
        joints_ok = q.shape == dq.shape == (g1.NUM_MOTORS,) and math.isfinite(float(q[:_NLEG].sum() + dq[:_NLEG].sum()))
        tau = None
        tau_nan = False
        if tau_est is not None and c.use_torque_contact:
            tau = np.asarray(tau_est, dtype=float)
            if tau.shape != (g1.NUM_MOTORS,) or not math.isfinite(float(tau[:_NLEG].sum())):
                tau, tau_nan = None, True

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
            self._missed += dt
            return self._held(t, EstimatorFlags(
                imu_nan=imu_nan, imu_frozen=frozen, imu_out_of_range=out_of_range,
                joints_nan=not joints_ok, tau_nan=tau_nan, dt_gap=dt_gap,
                flight=not self._contact.any(), imu_bad_s=t - self._t_good,
            ))

        self._t_good = t
        quat = quat / qn
        omega = gyro - self._gyro_bias  # IMU frame
        f_imu = accel - self._accel_bias  # specific force, IMU frame
        R_imu = _quat_to_mat(quat)
        if self._imu_identity:
            R, omega_p = R_imu, omega
        else:
            R, omega_p = R_imu @ self._imu_rot.T, self._imu_rot @ omega

        # --- predict
        x, P = self.x, self.P
        a = R_imu @ f_imu + self._g
        x[_P] += x[_V] * dt + (0.5 * dt * dt) * a
        x[_V] += a * dt
        P[0:3, :] += dt * P[3:6, :]
        P[:, 0:3] += dt * P[:, 3:6]
        d = P.ravel()[:: _NX + 1]  # view of the diagonal
        d[0:3] += c.base_pos_noise**2 * dt
        d[3:6] += c.accel_noise**2 * (dt + self._missed) + (c.accel_sample_noise * dt) ** 2
        self._missed = 0.0
        for i in range(2):
            s = c.stance_foot_noise if self._contact[i] else c.swing_foot_noise
            d[6 + 3 * i: 9 + 3 * i] += s * s * dt

        # --- leg kinematics: contact points, and the IMU-point velocity each foot implies
        force = np.full(2, np.nan)
        if joints_ok:
            k = self.kin(q)
            lowest, cpt, w = self._contact_points(k, R)
            # the contact point moved on the sole (heel -> flat -> toe): move the foot state with
            # it, so the state stays the world position of the point that carries the load
            dw = w - self._w
            self._w = w
            x[6:9] += R @ (dw[0] @ (k.sole_pos[0] - k.foot_pos[0]))
            x[9:12] += R @ (dw[1] @ (k.sole_pos[1] - k.foot_pos[1]))
            r = cpt - self._imu_pos  # (2, 3) contact points relative to the IMU point, pelvis frame
            rw = r @ R.T  # world axes
            Jw = R @ k.jac_pos  # (2, 3, 6) world axes (site Jacobian: noise model only)
            JJt = Jw @ Jw.transpose(0, 2, 1)  # (2, 3, 3)
            # a standing foot's contact point c does not move:
            #   0 = v + R (w x r + J dq + (Jr dq) x (c - site))
            dq2 = dq[:_NLEG].reshape(2, 6, 1)
            v_rel = (k.jac_pos @ dq2)[:, :, 0] + _cross_rows((k.jac_rot @ dq2)[:, :, 0], cpt - k.foot_pos)
            w0, w1, w2 = omega_p.tolist()  # w x r_i for both feet: r @ [w]x^T
            zv = -((r @ np.array([[0.0, w2, -w1], [-w2, 0.0, w0], [w1, -w0, 0.0]]) + v_rel) @ R.T)  # (2, 3) world
            # noise: joint velocities through J, gyro through the lever arm (cov of w x r =
            # sigma^2 (|r|^2 I - r r^T)), and the foot's own motion (rolling, slip)
            r2 = (rw * rw).sum(axis=1)
            Rv = c.joint_vel_noise**2 * JJt - c.gyro_noise**2 * (rw[:, :, None] * rw[:, None, :])
            Rv += (c.gyro_noise**2 * r2 + c.kin_vel_noise**2)[:, None, None] * _EYE3
            nu = zv - x[_V]  # = minus the foot's world velocity under the prior
            foot_speed = np.sqrt((nu * nu).sum(axis=1))

            # --- contact: a foot stands if it is loaded (joint torques) or, unloaded or without
            # torques, if it is at the ground (within cm of the lower foot) and not moving, and
            # the body is not in free fall; never when the filter puts it well above the ground
            fs = math.sqrt(float(f_imu @ f_imu))
            self._flight = fs < (c.flight_accel_off if self._flight else c.flight_accel_on)
            rel = lowest - lowest.min()
            was = self._contact
            on = (
                np.where(was, rel < c.contact_height_off, rel < c.contact_height_on)
                & np.where(was, foot_speed < c.contact_speed_off, foot_speed < c.contact_speed_on)
            )
            if self._flight:
                on[:] = False
            if tau is not None:
                force = self._foot_force(k, R, tau)
                on |= np.where(was, force > c.contact_force_off, force > c.contact_force_on)
            on &= x[2] + lowest < c.contact_max_height

            for i in range(2):
                if not on[i]:
                    self._gated_since[i] = None
                    continue
                # consistency gate: a "stance" foot whose velocity disagrees with the filter is
                # sliding (touchdown with tangential speed) or not loaded: no measurement
                gate = _quad3(P[3:6, 3:6] + Rv[i], nu[i])
                # less trust at touchdown and in a lightly loaded foot (lift-off, toe roll)
                scale = 1.0
                if t - self._contact_t0[i] < c.touchdown_settle_s or not was[i]:
                    scale = c.touchdown_noise_scale
                if tau is not None:
                    scale = max(scale, min(c.contact_force_full / max(float(force[i]), 1.0), c.touchdown_noise_scale))
                if scale > 1.0:
                    Rv[i] += (scale * scale - 1.0) * c.kin_vel_noise**2 * _EYE3
                if gate > c.stance_gate:
                    if self._gated_since[i] is None:
                        self._gated_since[i] = t
                    if t - self._gated_since[i] < c.stance_gate_max_s:
                        on[i] = False
                else:
                    self._gated_since[i] = None
        else:  # no kinematics: keep the last contact state, no leg measurement
            on = self._contact.copy()
        self._contact_t0[on & ~self._contact] = t
        self._contact = on
        if on.any():
            self._no_contact_t0 = None
        elif self._no_contact_t0 is None:
            self._no_contact_t0 = t
        if joints_ok:
            stance = (bool(on[0]), bool(on[1]))
            H = _H[stance]
            m_dim = H.shape[0]
            z = np.empty(m_dim)
            Rm = np.zeros((m_dim, m_dim))
            kp2 = c.kin_pos_noise**2 * _EYE3
            z[0:6] = rw.ravel()
            Rm[0:3, 0:3] = c.joint_pos_noise**2 * JJt[0] + kp2
            Rm[3:6, 3:6] = c.joint_pos_noise**2 * JJt[1] + kp2
            n = 6
            for i in range(2):
                if not stance[i]:
                    continue
                z[n:n + 3] = zv[i]
                Rm[n:n + 3, n:n + 3] = Rv[i]
                z[n + 3] = rw[i, 2] - lowest[i]  # contact point height above the ground
                Rm[n + 3, n + 3] = c.foot_height_noise**2
                n += 4
            self._kf_update(H, z, Rm)
        if self._no_contact_t0 is not None and t - self._no_contact_t0 > c.max_flight_s:
            self._kf_update(_H_HANG, np.zeros(3), c.hang_vel_noise**2 * _EYE3)

        flags = EstimatorFlags(
            joints_nan=not joints_ok, tau_nan=tau_nan, dt_gap=dt_gap, flight=not on.any(),
        )
        self._last = self._output(t, quat, omega, R, flags, force)
        return self._last

    def _kf_update(self, H, z, Rm):
        x, P = self.x, self.P
        PHt = P @ H.T
        S = H @ PHt + Rm
        K = _solve(S, PHt.T).T
        x += K @ (z - H @ x)
        P -= K @ PHt.T
        P += P.T
        P *= 0.5
