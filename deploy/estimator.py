"""State estimator for the deploy loop: base orientation, linear velocity and height, and
foot contact of the G1 from LowState (IMU + joint encoders [+ joint torque estimates]).

- Orientation is the IMU's own quaternion (the robot reports it; pelvis IMU site).
- Forward kinematics of the feet relative to the pelvis comes from the same MuJoCo model
  the bridge simulates (`deploy/kinematics.py`).
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


Pure numpy + mujoco; no jax (deploy rule). Cost (issue 16): the 3-vectors and 3x3 blocks are Python
floats and only the 12-state covariance and the two 6x6 force solves are numpy, because at 500 Hz
beside other processes each numpy call runs from a cold cache (~5 us, vs ~0.1 us per float operation).
"""
from __future__ import annotations

import math

import mujoco
import numpy as np

from deploy.estimator_config import (Estimate, EstimatorConfig, EstimatorFlags, Rows, cross3, measurement_layout,
                                     mul_rt3, mul_v3, quad3, quat_to_rows, rot_sym3)
from deploy.kinematics import G1LegKinematics
from robots import g1
from robots.physics import GRAVITY

try:  # the LAPACK gesv gufunc np.linalg.solve wraps: same result, without ~15 us of argument checks per call
    from numpy.linalg import _umath_linalg as _ul

    def _solve(a, b):
        return _ul.solve(a, b, signature="dd->d")
except (ImportError, AttributeError):  # pragma: no cover - another numpy layout
    _solve = np.linalg.solve

_NLEG = 12  # motors 0..11 are the two legs (g1.LEG_L, g1.LEG_R)
assert g1.LEG_L == slice(0, 6) and g1.LEG_R == slice(6, 12)
_NX = 12
_EYE3 = np.eye(3)
_EPS6 = 1e-6 * np.eye(6)  # damping of the foot-force normal equations (straight-knee singularity)
_F_DT = [3, 4 + _NX, 5 + 2 * _NX]  # flat indices of dp/dv in the (12, 12) transition matrix
_DIAG = [(_NX + 1) * k for k in range(_NX)]
_H_HANG = np.zeros((3, _NX))
_H_HANG[:, 3:6] = _EYE3


class Estimator:
    """`reset(q, quat)` then `update(t, ...)` every tick; each update returns an Estimate.

    `update` before `reset` initialises from the first good sample (standing assumed:
    the lower foot on the ground)."""

    def __init__(self, config: EstimatorConfig = EstimatorConfig(), model: mujoco.MjModel | None = None):
        self.config = config
        self.kin = G1LegKinematics(model)
        c = config
        self._gb, self._ab = list(c.gyro_bias), list(c.accel_bias)
        self._imu_pos = self.kin.imu_pos  # IMU point in the pelvis frame
        self._imu_rot = self.kin.imu_rot  # IMU axes in the pelvis frame
        self._imu_identity = bool(np.allclose(self._imu_rot, _EYE3, atol=1e-9))
        self._imu_pos_l = self._imu_pos.tolist()
        self._imu_rot_l = tuple(self._imu_rot.ravel().tolist())
        self._sole_r = self.kin.sole_radius
        # per tick the filter reads the kinematics' MjData directly (deploy/kinematics.py's indices; the
        # Jacobian columns axis x (foot - anchor) as G1LegKinematics computes them)
        kin = self.kin
        self._qadr = kin._qadr
        qa = np.asarray(kin._qadr)
        self._qpos = kin._qpos[int(qa[0]):int(qa[-1]) + 1] if np.array_equal(qa, np.arange(qa[0], qa[0] + qa.size)) else None
        self._feet = Rows(kin._site_xpos, kin._foot_site)
        self._axes = Rows(kin._xaxis, kin._leg_jnt)
        self._anchors = Rows(kin._xanchor, kin._leg_jnt)
        self._soles = Rows(kin._geom_xpos, kin._sole_geom)
        self._n_sole = kin._sole_geom.shape[1]
        self._layout = {s: measurement_layout(s) for s in ((False, False), (False, True), (True, False), (True, True))}
        self._rm = {s: np.zeros((lay.m, lay.m)) for s, lay in self._layout.items()}  # off-block zeros stay
        self._F, self._Q = np.eye(_NX), np.zeros((_NX, _NX))  # process model: p += v dt; diagonal noise
        self._flags = {}  # the few flag combinations of a good IMU sample, built once (immutable)
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
        self._contact = [True, True]
        self._flight = False
        self._contact_t0 = [0.0, 0.0]
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
        R = self._pelvis_rot(quat_to_rows(*quat.tolist()))
        feet, soles = self._kinematics(q)[0::3]
        lowest, cpt, self._w = self._contact_points(feet, soles, R)
        x = np.zeros(_NX)
        x[2] = -min(lowest)
        for i in range(2):  # contact points relative to the IMU point, world axes
            x[6 + 3 * i:9 + 3 * i] = x[0:3] + np.array(mul_v3(R, [a - b for a, b in zip(cpt[i], self._imu_pos_l)]))
        self.x = x
        P = np.zeros(_NX)
        P[0:2] = 1e-6
        P[2] = c.init_height_std**2
        P[3:6] = c.init_vel_std**2
        P[6:] = c.init_height_std**2
        self.P = np.diag(P)
        self._contact = [lo - min(lowest) < c.contact_height_on for lo in lowest]
        self._contact_t0 = [t - 1.0, t - 1.0]
        self._t_prev = t
        self._t_good = t
        self._fresh = True
        self._initialized = True
        self._last = self._output(t, quat.tolist(), (0.0, 0.0, 0.0), R, EstimatorFlags(), (math.nan, math.nan))
        return self._last

    # ---------------------------------------------------------------- helpers
    def _pelvis_rot(self, R_imu) -> tuple:
        return R_imu if self._imu_identity else mul_rt3(R_imu, self._imu_rot_l)

    def _kinematics(self, q):
        """Foot sites (2, 3), joint axes and anchors (12, 3), sole sphere centres (2 * S, 3): pelvis frame lists."""
        if self._qpos is not None:
            self._qpos[:] = q
        else:
            self.kin._qpos[self._qadr] = q
        mujoco.mj_kinematics(self.kin.model, self.kin.data)
        return self._feet.get(), self._axes.get(), self._anchors.get(), self._soles.get()

    def _contact_points(self, feet, soles, R):
        """Per foot: the lowest sole point's world z relative to the IMU point, the contact point in the
        pelvis frame and its weights over the sole spheres (lists).

        The contact point is a soft-min over the sole spheres: the centre of the sole when
        the foot is flat, the toe (or heel) edge when it rolls, so it is a material point
        of the foot that does not move while the foot stands."""
        R20, R21, R22 = R[6], R[7], R[8]
        i0, i1, i2 = self._imu_pos_l
        sharp, sr, n = self.config.contact_point_sharpness, self._sole_r, self._n_sole
        lowest, cpts, ws = [], [], []
        exp = math.exp
        for i in range(2):
            sph = soles[n * i:n * i + n]
            z = [(s0 - i0) * R20 + (s1 - i1) * R21 + (s2 - i2) * R22 for s0, s1, s2 in sph]
            zmin = min(z)
            w = [exp((zmin - zk) / sharp) for zk in z]
            tot = sum(w)
            w = [wk / tot for wk in w]
            c0 = c1 = c2 = 0.0
            for wk, (s0, s1, s2) in zip(w, sph):
                c0 += wk * s0
                c1 += wk * s1
                c2 += wk * s2
            # bottom of the spheres (the material point that touches the floor: a sphere rolling
            # at 20 rad/s moves its centre by 0.1 m/s)
            cpts.append((c0 - sr * R20, c1 - sr * R21, c2 - sr * R22))
            lowest.append(zmin - sr)
            ws.append(w)
        return lowest, cpts, ws

    def _output(self, t, quat, omega_imu, R, flags, force) -> Estimate:
        omega_p = omega_imu if self._imu_identity else mul_v3(self._imu_rot_l, omega_imu)
        # pelvis origin relative to the IMU point: -r_imu; v_pelvis = v_imu + w x (-R r_imu)
        p0, p1, p2, v0, v1, v2 = self.x[0:6].tolist()
        wr = cross3(omega_p, self._imu_pos_l)
        vb = [R[k] * v0 + R[3 + k] * v1 + R[6 + k] * v2 - wr[k] for k in range(3)]  # R^T v - w x r
        vw = mul_v3(R, vb)
        rp = mul_v3(R, self._imu_pos_l)
        a = np.array([*quat, *omega_imu, *vb, *vw, p0 - rp[0], p1 - rp[1], p2 - rp[2], *force])
        return Estimate(t=float(t), quat=a[0:4], gyro=a[4:7], base_lin_vel=a[7:10], base_lin_vel_world=a[10:13],
                        base_height=float(a[15]), base_pos=a[13:16], foot_contact=np.array(self._contact),
                        foot_force=a[16:18], flags=flags)

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
            dql = dq.tolist()
            joints_ok = math.isfinite(sum(q[:_NLEG].tolist()) + sum(dql[:_NLEG]))
        taul = None
        tau_nan = False
        if tau_est is not None and c.use_torque_contact:
            tau = np.asarray(tau_est, dtype=float)
            taul = tau.tolist() if tau.shape == (g1.NUM_MOTORS,) else None
            if taul is None or not math.isfinite(sum(taul[:_NLEG])):
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
            self._missed += dt
            return self._held(t, EstimatorFlags(
                imu_nan=imu_nan, imu_frozen=frozen, imu_out_of_range=out_of_range,
                joints_nan=not joints_ok, tau_nan=tau_nan, dt_gap=dt_gap,
                flight=not (self._contact[0] or self._contact[1]), imu_bad_s=t - self._t_good,
            ))

        self._t_good = t
        qw, qx, qy, qz = imu[0] / qn, imu[1] / qn, imu[2] / qn, imu[3] / qn
        gb, ab = self._gb, self._ab
        omega = (imu[4] - gb[0], imu[5] - gb[1], imu[6] - gb[2])  # IMU frame
        f_imu = (imu[7] - ab[0], imu[8] - ab[1], imu[9] - ab[2])  # specific force, IMU frame
        R_imu = quat_to_rows(qw, qx, qy, qz)
        if self._imu_identity:
            R, omega_p = R_imu, omega
        else:
            R, omega_p = mul_rt3(R_imu, self._imu_rot_l), mul_v3(self._imu_rot_l, omega)

        # --- predict
        P = self.P
        xl = self.x.tolist()
        a0, a1, a2 = mul_v3(R_imu, f_imu)
        a2 -= GRAVITY
        h = 0.5 * dt * dt
        xl[0], xl[1], xl[2] = xl[0] + (xl[3] * dt + h * a0), xl[1] + (xl[4] * dt + h * a1), xl[2] + (xl[5] * dt + h * a2)
        xl[3], xl[4], xl[5] = xl[3] + a0 * dt, xl[4] + a1 * dt, xl[5] + a2 * dt
        qp = c.base_pos_noise**2 * dt
        qv = c.accel_noise**2 * (dt + self._missed) + (c.accel_sample_noise * dt) ** 2
        self._missed = 0.0
        s = [(c.stance_foot_noise if self._contact[i] else c.swing_foot_noise) for i in range(2)]
        sl, sr = s[0] * s[0] * dt, s[1] * s[1] * dt
        F, Q = self._F, self._Q
        F.put(_F_DT, dt)
        Q.put(_DIAG, (qp, qp, qp, qv, qv, qv, sl, sl, sl, sr, sr, sr))
        P = F @ P @ F.T
        P += Q
        self.P = P

        # --- leg kinematics: contact points, and the IMU-point velocity each foot implies
        force = (math.nan, math.nan)
        was = self._contact
        if joints_ok:
            feet, axes, anchors, soles = self._kinematics(q)
            lowest, cpt, w = self._contact_points(feet, soles, R)
            n = self._n_sole
            ip = self._imu_pos_l
            rw, zv, Rpos, Rv, nu, speed, G = [], [], [], [], [], [], []
            jp2, kp2 = c.joint_pos_noise**2, c.kin_pos_noise**2
            jv2, g2, kv2 = c.joint_vel_noise**2, c.gyro_noise**2, c.kin_vel_noise**2
            v_prior = xl[3:6]
            for i in range(2):
                f0, f1, f2 = feet[i]
                # the contact point moved on the sole (heel -> flat -> toe): move the foot state with
                # it, so the state stays the world position of the point that carries the load
                d0 = d1 = d2 = 0.0
                for wn, wo, (s0, s1, s2) in zip(w[i], self._w[i], soles[n * i:n * i + n]):
                    dw = wn - wo
                    d0 += dw * (s0 - f0)
                    d1 += dw * (s1 - f1)
                    d2 += dw * (s2 - f2)
                dx = mul_v3(R, (d0, d1, d2))
                xl[6 + 3 * i] += dx[0]
                xl[7 + 3 * i] += dx[1]
                xl[8 + 3 * i] += dx[2]
                # the leg's Jacobian columns (axis x (foot - anchor), the axis), its velocity terms and J J^T
                vp0 = vp1 = vp2 = om0 = om1 = om2 = 0.0
                m00 = m01 = m02 = m11 = m12 = m22 = 0.0
                for j in range(6 * i, 6 * i + 6):
                    e0, e1, e2 = axes[j]
                    p0, p1, p2 = anchors[j]
                    r0, r1, r2 = f0 - p0, f1 - p1, f2 - p2
                    c0, c1, c2 = e1 * r2 - e2 * r1, e2 * r0 - e0 * r2, e0 * r1 - e1 * r0
                    d = dql[j]
                    vp0 += c0 * d
                    vp1 += c1 * d
                    vp2 += c2 * d
                    om0 += e0 * d
                    om1 += e1 * d
                    om2 += e2 * d
                    m00 += c0 * c0
                    m01 += c0 * c1
                    m02 += c0 * c2
                    m11 += c1 * c1
                    m12 += c1 * c2
                    m22 += c2 * c2
                    G.append([c0, c1, c2, e0, e1, e2])
                # a standing foot's contact point c does not move:
                #   0 = v + R (w x r + J dq + (Jr dq) x (c - site))
                cp = cpt[i]
                r = (cp[0] - ip[0], cp[1] - ip[1], cp[2] - ip[2])  # contact point - IMU point, pelvis frame
                vr = cross3((om0, om1, om2), (cp[0] - f0, cp[1] - f1, cp[2] - f2))
                u = cross3(omega_p, r)
                z = mul_v3(R, (u[0] + vp0 + vr[0], u[1] + vp1 + vr[1], u[2] + vp2 + vr[2]))
                z = (-z[0], -z[1], -z[2])
                q_ = mul_v3(R, r)  # world axes
                JJ = rot_sym3(R, (m00, m01, m02, m11, m12, m22))  # R J J^T R^T
                # noise: joint velocities through J, gyro through the lever arm (cov of w x r =
                # sigma^2 (|r|^2 I - r r^T)), and the foot's own motion (rolling, slip)
                r2 = q_[0] * q_[0] + q_[1] * q_[1] + q_[2] * q_[2]
                diag = g2 * r2 + kv2
                x0, x1, x2 = q_
                j00, j01, j02, _, j11, j12, _, _, j22 = JJ
                o01, o02, o12 = jv2 * j01 - g2 * (x0 * x1), jv2 * j02 - g2 * (x0 * x2), jv2 * j12 - g2 * (x1 * x2)
                rv = [jv2 * j00 - g2 * (x0 * x0) + diag, o01, o02, o01, jv2 * j11 - g2 * (x1 * x1) + diag, o12,
                      o02, o12, jv2 * j22 - g2 * (x2 * x2) + diag]
                p01, p02, p12 = jp2 * j01, jp2 * j02, jp2 * j12
                rp = [jp2 * j00 + kp2, p01, p02, p01, jp2 * j11 + kp2, p12, p02, p12, jp2 * j22 + kp2]
                nu_i = (z[0] - v_prior[0], z[1] - v_prior[1], z[2] - v_prior[2])  # minus the foot's velocity
                rw.append(q_)
                zv.append(z)
                Rpos.append(rp)
                Rv.append(rv)
                nu.append(nu_i)
                speed.append(math.sqrt(nu_i[0] * nu_i[0] + nu_i[1] * nu_i[1] + nu_i[2] * nu_i[2]))

            # --- contact: a foot stands if it is loaded (joint torques) or, unloaded or without
            # torques, if it is at the ground (within cm of the lower foot) and not moving, and
            # the body is not in free fall; never when the filter puts it well above the ground
            fs = math.sqrt(f_imu[0] * f_imu[0] + f_imu[1] * f_imu[1] + f_imu[2] * f_imu[2])
            self._flight = fs < (c.flight_accel_off if self._flight else c.flight_accel_on)
            low = min(lowest)
            on = [(lowest[i] - low < (c.contact_height_off if was[i] else c.contact_height_on))
                  and (speed[i] < (c.contact_speed_off if was[i] else c.contact_speed_on)) for i in range(2)]
            if self._flight:
                on = [False, False]
            if taul is not None:
                force = self._foot_force(G, taul, R)
                on = [on[i] or force[i] > (c.contact_force_off if was[i] else c.contact_force_on) for i in range(2)]
            on = [on[i] and xl[2] + lowest[i] < c.contact_max_height for i in range(2)]

            Pvv = [e for row in P[3:6, 3:6].tolist() for e in row]
            for i in range(2):
                if not on[i]:
                    self._gated_since[i] = None
                    continue
                # consistency gate: a "stance" foot whose velocity disagrees with the filter is
                # sliding (touchdown with tangential speed) or not loaded: no measurement
                gate = quad3([a + b for a, b in zip(Pvv, Rv[i])], nu[i])
                # less trust at touchdown and in a lightly loaded foot (lift-off, toe roll)
                scale = 1.0
                if t - self._contact_t0[i] < c.touchdown_settle_s or not was[i]:
                    scale = c.touchdown_noise_scale
                if taul is not None:
                    scale = max(scale, min(c.contact_force_full / max(float(force[i]), 1.0), c.touchdown_noise_scale))
                if scale > 1.0:
                    extra = (scale * scale - 1.0) * kv2
                    Rv[i][0] += extra
                    Rv[i][4] += extra
                    Rv[i][8] += extra
                if gate > c.stance_gate:
                    if self._gated_since[i] is None:
                        self._gated_since[i] = t
                    if t - self._gated_since[i] < c.stance_gate_max_s:
                        on[i] = False
                else:
                    self._gated_since[i] = None
        else:  # no kinematics: keep the last contact state, no leg measurement
            on = list(was)
        for i in range(2):
            if on[i] and not was[i]:
                self._contact_t0[i] = t
        self._contact = on
        if on[0] or on[1]:
            self._no_contact_t0 = None
        elif self._no_contact_t0 is None:
            self._no_contact_t0 = t
        if joints_ok:
            self._w = w
            self._kf_legs(xl, rw, zv, lowest, Rpos, Rv, (on[0], on[1]))
        else:
            self.x = np.array(xl)
        if self._no_contact_t0 is not None and t - self._no_contact_t0 > c.max_flight_s:
            self._kf_update(_H_HANG, np.zeros(3), c.hang_vel_noise**2 * _EYE3)

        key = (not joints_ok, tau_nan, dt_gap, not (on[0] or on[1]))
        flags = self._flags.get(key)
        if flags is None:
            flags = self._flags[key] = EstimatorFlags(joints_nan=key[0], tau_nan=key[1], dt_gap=key[2], flight=key[3])
        self._last = self._output(t, (qw, qx, qy, qz), omega, R, flags, force)
        return self._last

    def _foot_force(self, G, taul, R) -> tuple:
        """Vertical ground force on each foot (N, world z) from the leg joint torques:
        static balance tau + J^T W = 0 over the six leg joints (leg weight ignored).
        G: per leg joint the Jacobian column [d foot_pos; d foot_rot] (12 x 6, pelvis frame)."""
        Jt = np.array((G[0:6], G[6:12]))  # J^T per leg
        # W = -J^-T tau, damped against the straight-knee singularity.
        A = Jt @ Jt.mT
        A += _EPS6
        y = _solve(A, np.array(((taul[0:6],), (taul[6:12],))).mT).tolist()
        out = []
        for i in range(2):  # W = -(J y)[:3], its world z
            w0 = w1 = w2 = 0.0
            for g, (yj,) in zip(G[6 * i:6 * i + 6], y[i]):
                w0 -= g[0] * yj
                w1 -= g[1] * yj
                w2 -= g[2] * yj
            out.append(w0 * R[6] + w1 * R[7] + w2 * R[8])
        return tuple(out)

    def _kf_legs(self, xl, rw, zv, lowest, Rpos, Rv, stance) -> None:
        """Kalman update with both feet's relative positions and, per stance foot, its velocity and
        contact point height; the innovation in Python (H is a selection), the rest on the covariance."""
        lay = self._layout[stance]
        innov, vals = [], Rpos[0] + Rpos[1]
        for i in range(2):
            f = 6 + 3 * i
            innov += [rw[i][0] - (xl[f] - xl[0]), rw[i][1] - (xl[f + 1] - xl[1]), rw[i][2] - (xl[f + 2] - xl[2])]
        for i in range(2):
            if stance[i]:
                z = zv[i]
                # velocity, and the contact point height above the ground
                innov += [z[0] - xl[3], z[1] - xl[4], z[2] - xl[5], (rw[i][2] - lowest[i]) - xl[8 + 3 * i]]
                vals += Rv[i]
                vals.append(self.config.foot_height_noise**2)
        Rm = self._rm[stance]
        Rm.put(lay.r_index, vals)
        P = self.P
        PHt = P @ lay.Ht
        S = lay.H @ PHt
        S += Rm
        Kt = _solve(S, PHt.T)  # K^T
        x = np.dot(innov, Kt)
        x += xl
        self.x = x
        P -= PHt @ Kt
        P += P.T
        P *= 0.5

    def _kf_update(self, H, z, Rm):
        x, P = self.x, self.P
        PHt = P @ H.T
        S = H @ PHt + Rm
        K = _solve(S, PHt.T).T
        x += K @ (z - H @ x)
        P -= K @ PHt.T
        P += P.T
        P *= 0.5
