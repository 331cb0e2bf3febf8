"""The estimator's per-tick arithmetic, compiled with numba: estimation/estimator.py validates the
sample, runs mj_kinematics and calls `tick`, which does the rest of the update in one call (prediction, contact
points, leg Jacobians, foot forces, contact decisions, the Kalman updates, the output vector) in place on arrays
the Estimator owns. The same operations as the Python-float version it replaced, in the same order where the
order is visible (tests/test_deploy_compute_estimator.py checks it tick by tick against the original filter).

Arguments: two buffers the Estimator owns (so the kernel is only ever called with one set of types and never
compiles inside a tick; the Estimator calls it once at construction), the MjData arrays mj_kinematics fills, and
the tick's scalars: few arguments, because each costs the call ~0.5 us from a cold cache.
  buf (float64): x (12) [p, v, f_L, f_R] of the IMU point and the feet's contact points; P (12, 12); st: filter
      memory (the ST_* indices); out: the estimate (quat (unit), gyro (bias-corrected, IMU frame), base velocity
      (pelvis frame), base velocity (world), base position, foot force (nan without torques)); cfg:
      EstimatorConfig as numbers (`config_vector`); u: this tick's input (quat (raw), gyro, accel, leg dq (12),
      leg tau (12)); the IMU's position and axes in the pelvis frame, whether those are the identity; w (2, S):
      the feet's contact-point weights over their S sole spheres at the previous tick. `views` names them.
  ibuf (int64): S, the foot sites (2), the leg joints (2, 6), the sole spheres' geoms (2, S).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from robots.compiled import njit
from robots.physics import GRAVITY


# cfg indices
(C_POS_N, C_ACC_N, C_ACC_S, C_STANCE, C_SWING, C_GYRO_N, C_JP, C_JV, C_KINP, C_KINV, C_FH, C_TD_S, C_TD_K,
 C_F_ON, C_F_OFF, C_F_FULL, C_H_ON, C_H_OFF, C_H_MAX, C_SHARP, C_GATE, C_GATE_S, C_V_ON, C_V_OFF, C_FL_ON,
 C_FL_OFF, C_FLIGHT_S, C_HANG, C_SOLE_R, C_INIT_H, C_INIT_V, C_GB, _, _, C_AB, _, _, CFG_N) = range(38)
# st indices: contact (1/0) per foot, in flight (1/0), touch-down time per foot, start of no contact, start of
# the stance gate's rejections per foot (nan: none), IMU time missed since the last prediction
ST_C, ST_FLIGHT, ST_T0, ST_NOC, ST_GATED, ST_MISSED, ST_N = 0, 2, 3, 5, 6, 8, 9
# u indices
U_QUAT, U_GYRO, U_ACC, U_DQ, U_TAU, U_N = 0, 4, 7, 10, 22, 34
# out indices
O_QUAT, O_GYRO, O_VB, O_VW, O_POS, O_FORCE, OUT_N = 0, 4, 7, 10, 13, 16, 18
NX = 12
# buf offsets (w last: its size depends on the model)
B_X = 0
B_P = B_X + NX
B_ST = B_P + NX * NX
B_OUT = B_ST + ST_N
B_CFG = B_OUT + OUT_N
B_U = B_CFG + CFG_N
B_IMU_POS = B_U + U_N
B_IMU_ROT = B_IMU_POS + 3
B_IDENT = B_IMU_ROT + 9
B_W = B_IDENT + 1
EPS6 = 1e-6  # damping of the foot-force normal equations (straight-knee singularity)


def config_vector(c, sole_radius: float) -> np.ndarray:
    v = [c.base_pos_noise, c.accel_noise, c.accel_sample_noise, c.stance_foot_noise, c.swing_foot_noise,
         c.gyro_noise, c.joint_pos_noise, c.joint_vel_noise, c.kin_pos_noise, c.kin_vel_noise, c.foot_height_noise,
         c.touchdown_settle_s, c.touchdown_noise_scale, c.contact_force_on, c.contact_force_off,
         c.contact_force_full, c.contact_height_on, c.contact_height_off, c.contact_max_height,
         c.contact_point_sharpness, c.stance_gate, c.stance_gate_max_s, c.contact_speed_on, c.contact_speed_off,
         c.flight_accel_on, c.flight_accel_off, c.max_flight_s, c.hang_vel_noise, sole_radius, c.init_height_std,
         c.init_vel_std, *c.gyro_bias, *c.accel_bias]
    assert len(v) == CFG_N
    return np.array(v, dtype=float)


class Views(NamedTuple):
    """Named views into the buffers (see the module docstring)."""

    x: np.ndarray
    P: np.ndarray
    st: np.ndarray
    out: np.ndarray
    u: np.ndarray
    w: np.ndarray


def pack(cfg: np.ndarray, imu_pos, imu_rot, identity: bool, foot_site, leg_jnt, sole_geom) -> tuple[np.ndarray, np.ndarray]:
    """(buf, ibuf) for one estimator, state zero."""
    n = np.shape(sole_geom)[1]
    buf = np.zeros(B_W + 2 * n)
    buf[B_CFG:B_CFG + CFG_N] = cfg
    buf[B_IMU_POS:B_IMU_POS + 3] = np.ravel(imu_pos)
    buf[B_IMU_ROT:B_IMU_ROT + 9] = np.ravel(imu_rot)
    buf[B_IDENT] = 1.0 if identity else 0.0
    ibuf = np.concatenate([[n], np.ravel(foot_site), np.ravel(leg_jnt), np.ravel(sole_geom)]).astype(np.int64)
    return buf, ibuf


def views(buf: np.ndarray) -> Views:
    n = (buf.size - B_W) // 2
    return Views(buf[B_X:B_X + NX], buf[B_P:B_P + NX * NX].reshape(NX, NX), buf[B_ST:B_ST + ST_N],
                 buf[B_OUT:B_OUT + OUT_N], buf[B_U:B_U + U_N], buf[B_W:B_W + 2 * n].reshape(2, n))


# ---------------------------------------------------------------------- small pieces


@njit
def quat_rows(w, x, y, z, R):
    """R (3, 3) = the rotation matrix of a unit quaternion."""
    R[0, 0], R[0, 1], R[0, 2] = 1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)
    R[1, 0], R[1, 1], R[1, 2] = 2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)
    R[2, 0], R[2, 1], R[2, 2] = 2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)


@njit
def pelvis_rot(R_imu, imu_rot, identity, R):
    """R = R_imu imu_rot^T (the pelvis axes in the world)."""
    if identity:
        R[:] = R_imu
        return
    for i in range(3):
        for j in range(3):
            R[i, j] = R_imu[i, 0] * imu_rot[j, 0] + R_imu[i, 1] * imu_rot[j, 1] + R_imu[i, 2] * imu_rot[j, 2]


@njit
def solve(A, B):
    """A^-1 B (A (m, m), B (m, n)) by Gaussian elimination with partial pivoting, on copies."""
    m, n = B.shape
    A = A.copy()
    X = B.copy()
    for k in range(m):
        p = k
        for r in range(k + 1, m):
            if abs(A[r, k]) > abs(A[p, k]):
                p = r
        if p != k:
            for c in range(m):
                A[k, c], A[p, c] = A[p, c], A[k, c]
            for c in range(n):
                X[k, c], X[p, c] = X[p, c], X[k, c]
        piv = A[k, k]
        for r in range(k + 1, m):
            f = A[r, k] / piv
            if f != 0.0:
                for c in range(k + 1, m):
                    A[r, c] -= f * A[k, c]
                for c in range(n):
                    X[r, c] -= f * X[k, c]
    for k in range(m - 1, -1, -1):
        for c in range(n):
            s = X[k, c]
            for j in range(k + 1, m):
                s -= A[k, j] * X[j, c]
            X[k, c] = s / A[k, k]
    return X


@njit
def kf_update(x, P, plus, minus, innov, Rm):
    """Kalman update with a selection measurement: row r of H is +1 at column plus[r] and -1 at minus[r]
    (none where minus[r] < 0); innov = z - H x, Rm its noise. x and P in place, P symmetrised."""
    m = plus.shape[0]
    PHt = np.empty((NX, m))
    for k in range(NX):
        for r in range(m):
            v = P[k, plus[r]]
            if minus[r] >= 0:
                v = v - P[k, minus[r]]
            PHt[k, r] = v
    S = np.empty((m, m))
    for r in range(m):
        for s in range(m):
            v = PHt[plus[r], s]
            if minus[r] >= 0:
                v = v - PHt[minus[r], s]
            S[r, s] = v + Rm[r, s]
    Kt = solve(S, PHt.T.copy())  # K^T (m, 12)
    for j in range(NX):
        acc = 0.0
        for r in range(m):
            acc += innov[r] * Kt[r, j]
        x[j] += acc
    for k in range(NX):
        for j in range(NX):
            acc = 0.0
            for r in range(m):
                acc += PHt[k, r] * Kt[r, j]
            P[k, j] -= acc
    for k in range(NX):
        for j in range(k + 1, NX):
            v = (P[k, j] + P[j, k]) * 0.5
            P[k, j] = v
            P[j, k] = v


@njit
def contact_points(geom_xpos, sole_geom, R, imu_pos, sharp, sr, lowest, cpt, w):
    """Per foot: the lowest sole point's world z relative to the IMU point (lowest), the contact point in the
    pelvis frame (cpt) and its weights over the sole spheres (w): a soft-min over the spheres, the sole centre
    when the foot is flat, the toe or heel edge when it rolls, at the sphere bottoms (the material point that
    touches the floor and stays still while the foot stands)."""
    n = sole_geom.shape[1]
    for i in range(2):
        zmin = math.inf
        for k in range(n):
            g = sole_geom[i, k]
            z = (geom_xpos[g, 0] - imu_pos[0]) * R[2, 0] + (geom_xpos[g, 1] - imu_pos[1]) * R[2, 1] \
                + (geom_xpos[g, 2] - imu_pos[2]) * R[2, 2]
            w[i, k] = z
            zmin = min(zmin, z)
        tot = 0.0
        for k in range(n):
            w[i, k] = math.exp((zmin - w[i, k]) / sharp)
            tot += w[i, k]
        c0 = c1 = c2 = 0.0
        for k in range(n):
            w[i, k] = w[i, k] / tot
            g = sole_geom[i, k]
            c0 += w[i, k] * geom_xpos[g, 0]
            c1 += w[i, k] * geom_xpos[g, 1]
            c2 += w[i, k] * geom_xpos[g, 2]
        cpt[i, 0], cpt[i, 1], cpt[i, 2] = c0 - sr * R[2, 0], c1 - sr * R[2, 1], c2 - sr * R[2, 2]
        lowest[i] = zmin - sr


@njit
def output(out, x, R, u, qn, omega, force, imu_rot, imu_pos, identity):
    """The estimate: the unit quaternion, the IMU-frame gyro, the pelvis origin's velocity (pelvis and world
    axes: v_pelvis = v_imu + w x (-R r_imu)) and position, the foot forces."""
    for k in range(4):
        out[O_QUAT + k] = u[U_QUAT + k] / qn
    o0, o1, o2 = omega[0], omega[1], omega[2]
    if not identity:
        o0, o1, o2 = (imu_rot[0, 0] * omega[0] + imu_rot[0, 1] * omega[1] + imu_rot[0, 2] * omega[2],
                      imu_rot[1, 0] * omega[0] + imu_rot[1, 1] * omega[1] + imu_rot[1, 2] * omega[2],
                      imu_rot[2, 0] * omega[0] + imu_rot[2, 1] * omega[1] + imu_rot[2, 2] * omega[2])
    i0, i1, i2 = imu_pos[0], imu_pos[1], imu_pos[2]
    wr = (o1 * i2 - o2 * i1, o2 * i0 - o0 * i2, o0 * i1 - o1 * i0)
    for k in range(3):
        out[O_GYRO + k] = omega[k]
        out[O_VB + k] = R[0, k] * x[3] + R[1, k] * x[4] + R[2, k] * x[5] - wr[k]
    for k in range(3):
        out[O_VW + k] = R[k, 0] * out[O_VB] + R[k, 1] * out[O_VB + 1] + R[k, 2] * out[O_VB + 2]
        out[O_POS + k] = x[k] - (R[k, 0] * i0 + R[k, 1] * i1 + R[k, 2] * i2)
    out[O_FORCE], out[O_FORCE + 1] = force[0], force[1]


@njit
def foot_force(G, u, R, force):
    """Vertical ground force on each foot (N, world z) from the leg joint torques: static balance
    tau + J^T W = 0 over the six leg joints (leg weight ignored), W = -J^-T tau damped against the straight-knee
    singularity. G (12, 6): per leg joint its Jacobian column [d foot_pos; d foot_rot] (pelvis frame)."""
    A = np.empty((6, 6))
    b = np.empty((6, 1))
    for i in range(2):
        for a in range(6):
            for c in range(6):
                acc = 0.0
                for k in range(6):
                    acc += G[6 * i + a, k] * G[6 * i + c, k]
                A[a, c] = acc
            A[a, a] += EPS6
            b[a, 0] = u[U_TAU + 6 * i + a]
        y = solve(A, b)
        w0 = w1 = w2 = 0.0
        for j in range(6):
            g = 6 * i + j
            w0 -= G[g, 0] * y[j, 0]
            w1 -= G[g, 1] * y[j, 0]
            w2 -= G[g, 2] * y[j, 0]
        force[i] = w0 * R[2, 0] + w1 * R[2, 1] + w2 * R[2, 2]


@njit
def quad3(S, v):
    """v^T S^-1 v for a symmetric positive definite 3x3 S (adjugate); inf when S is not positive definite."""
    a, b, c, d, e, f = S[0, 0], S[0, 1], S[0, 2], S[1, 1], S[1, 2], S[2, 2]
    x, y, z = v[0], v[1], v[2]
    A, B, C = d * f - e * e, c * e - b * f, b * e - c * d
    D, E, F = a * f - c * c, b * c - a * e, a * d - b * b
    det = a * A + b * B + c * C
    if det <= 0.0:
        return math.inf
    return (A * x * x + D * y * y + F * z * z + 2.0 * (B * x * y + C * x * z + E * y * z)) / det


# ---------------------------------------------------------------------- reset and one tick


@njit
def _reset(x, P, w, st, out, cfg, t, u, qn, imu_rot, imu_pos, identity, geom_xpos, sole_geom):
    R_imu, R = np.empty((3, 3)), np.empty((3, 3))
    quat_rows(u[0] / qn, u[1] / qn, u[2] / qn, u[3] / qn, R_imu)
    pelvis_rot(R_imu, imu_rot, identity, R)
    lowest, cpt = np.empty(2), np.empty((2, 3))
    contact_points(geom_xpos, sole_geom, R, imu_pos, cfg[C_SHARP], cfg[C_SOLE_R], lowest, cpt, w)
    low = min(lowest[0], lowest[1])
    x[:] = 0.0
    x[2] = -low
    for i in range(2):  # contact points relative to the IMU point, world axes
        for k in range(3):
            x[6 + 3 * i + k] = x[k] + (R[k, 0] * (cpt[i, 0] - imu_pos[0]) + R[k, 1] * (cpt[i, 1] - imu_pos[1])
                                       + R[k, 2] * (cpt[i, 2] - imu_pos[2]))
    P[:] = 0.0
    h2, v2 = cfg[C_INIT_H] ** 2, cfg[C_INIT_V] ** 2
    for k in range(NX):
        P[k, k] = 1e-6 if k < 2 else (h2 if k == 2 or k >= 6 else v2)
    for i in range(2):
        st[ST_C + i] = 1.0 if lowest[i] - low < cfg[C_H_ON] else 0.0
        st[ST_T0 + i] = t - 1.0
        st[ST_GATED + i] = math.nan
    st[ST_FLIGHT], st[ST_NOC], st[ST_MISSED] = 0.0, math.nan, 0.0
    output(out, x, R, u, qn, np.zeros(3), np.full(2, math.nan), imu_rot, imu_pos, identity)


@njit
def _tick(x, P, w_prev, st, out, cfg, t, dt, u, qn, joints_ok, has_tau, imu_rot, imu_pos, identity,
          site_xpos, xaxis, xanchor, geom_xpos, foot_site, leg_jnt, sole_geom):
    # --- the IMU sample: unit quaternion, bias-corrected rates and specific force (IMU frame)
    R_imu, R = np.empty((3, 3)), np.empty((3, 3))
    quat_rows(u[0] / qn, u[1] / qn, u[2] / qn, u[3] / qn, R_imu)
    pelvis_rot(R_imu, imu_rot, identity, R)
    omega = np.empty(3)
    f_imu = np.empty(3)
    for k in range(3):
        omega[k] = u[U_GYRO + k] - cfg[C_GB + k]
        f_imu[k] = u[U_ACC + k] - cfg[C_AB + k]
    if identity:
        op0, op1, op2 = omega[0], omega[1], omega[2]
    else:
        op0 = imu_rot[0, 0] * omega[0] + imu_rot[0, 1] * omega[1] + imu_rot[0, 2] * omega[2]
        op1 = imu_rot[1, 0] * omega[0] + imu_rot[1, 1] * omega[1] + imu_rot[1, 2] * omega[2]
        op2 = imu_rot[2, 0] * omega[0] + imu_rot[2, 1] * omega[1] + imu_rot[2, 2] * omega[2]

    # --- predict: p += v dt + a dt^2/2, v += a dt; feet fixed
    a = np.empty(3)
    for k in range(3):
        a[k] = R_imu[k, 0] * f_imu[0] + R_imu[k, 1] * f_imu[1] + R_imu[k, 2] * f_imu[2]
    a[2] -= GRAVITY
    h = 0.5 * dt * dt
    for k in range(3):
        x[k] = x[k] + (x[3 + k] * dt + h * a[k])
    for k in range(3):
        x[3 + k] = x[3 + k] + a[k] * dt
    qp = cfg[C_POS_N] ** 2 * dt
    qv = cfg[C_ACC_N] ** 2 * (dt + st[ST_MISSED]) + (cfg[C_ACC_S] * dt) ** 2
    st[ST_MISSED] = 0.0
    was0, was1 = st[ST_C] != 0.0, st[ST_C + 1] != 0.0
    s0 = cfg[C_STANCE] if was0 else cfg[C_SWING]
    s1 = cfg[C_STANCE] if was1 else cfg[C_SWING]
    sl, sr = s0 * s0 * dt, s1 * s1 * dt
    # P = F P F^T + Q with F = I + dt (dp/dv)
    for k in range(3):
        for j in range(NX):
            P[k, j] = P[k, j] + dt * P[3 + k, j]
    for j in range(3):
        for k in range(NX):
            P[k, j] = P[k, j] + dt * P[k, 3 + j]
    for k in range(NX):
        P[k, k] += qp if k < 3 else (qv if k < 6 else (sl if k < 9 else sr))

    # --- leg kinematics: contact points, and the IMU-point velocity each foot implies
    force = np.full(2, math.nan)
    on = np.zeros(2, np.bool_)
    was = np.array((was0, was1))
    n = sole_geom.shape[1]
    lowest, cpt, w = np.empty(2), np.empty((2, 3)), np.empty((2, n))
    rw, zv, nu = np.empty((2, 3)), np.empty((2, 3)), np.empty((2, 3))
    Rpos, Rv = np.empty((2, 3, 3)), np.empty((2, 3, 3))
    G, speed, JJ, Mr = np.empty((12, 6)), np.empty(2), np.empty((3, 3)), np.empty((3, 3))
    if joints_ok:
        contact_points(geom_xpos, sole_geom, R, imu_pos, cfg[C_SHARP], cfg[C_SOLE_R], lowest, cpt, w)
        jp2, kp2 = cfg[C_JP] ** 2, cfg[C_KINP] ** 2
        jv2, g2, kv2 = cfg[C_JV] ** 2, cfg[C_GYRO_N] ** 2, cfg[C_KINV] ** 2
        v_prior = (x[3], x[4], x[5])
        for i in range(2):
            fs = foot_site[i]
            f0, f1, f2 = site_xpos[fs, 0], site_xpos[fs, 1], site_xpos[fs, 2]
            # the contact point moved on the sole (heel -> flat -> toe): move the foot state with it, so the
            # state stays the world position of the point that carries the load
            d0 = d1 = d2 = 0.0
            for k in range(n):
                g = sole_geom[i, k]
                dw = w[i, k] - w_prev[i, k]
                d0 += dw * (geom_xpos[g, 0] - f0)
                d1 += dw * (geom_xpos[g, 1] - f1)
                d2 += dw * (geom_xpos[g, 2] - f2)
            for k in range(3):
                x[6 + 3 * i + k] += R[k, 0] * d0 + R[k, 1] * d1 + R[k, 2] * d2
            # the leg's Jacobian columns (axis x (foot - anchor), the axis), its velocity terms and J J^T
            vp0 = vp1 = vp2 = om0 = om1 = om2 = 0.0
            m00 = m01 = m02 = m11 = m12 = m22 = 0.0
            for jj in range(6):
                jn = leg_jnt[i, jj]
                e0, e1, e2 = xaxis[jn, 0], xaxis[jn, 1], xaxis[jn, 2]
                r0, r1, r2 = f0 - xanchor[jn, 0], f1 - xanchor[jn, 1], f2 - xanchor[jn, 2]
                c0, c1, c2 = e1 * r2 - e2 * r1, e2 * r0 - e0 * r2, e0 * r1 - e1 * r0
                d = u[U_DQ + 6 * i + jj]
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
                row = 6 * i + jj
                G[row, 0], G[row, 1], G[row, 2], G[row, 3], G[row, 4], G[row, 5] = c0, c1, c2, e0, e1, e2
            # a standing foot's contact point c does not move: 0 = v + R (w x r + J dq + (Jr dq) x (c - site))
            r0, r1, r2 = cpt[i, 0] - imu_pos[0], cpt[i, 1] - imu_pos[1], cpt[i, 2] - imu_pos[2]
            k0, k1, k2 = cpt[i, 0] - f0, cpt[i, 1] - f1, cpt[i, 2] - f2
            vr0, vr1, vr2 = om1 * k2 - om2 * k1, om2 * k0 - om0 * k2, om0 * k1 - om1 * k0
            u0, u1, u2 = op1 * r2 - op2 * r1, op2 * r0 - op0 * r2, op0 * r1 - op1 * r0
            b0, b1, b2 = u0 + vp0 + vr0, u1 + vp1 + vr1, u2 + vp2 + vr2
            for k in range(3):
                zv[i, k] = -(R[k, 0] * b0 + R[k, 1] * b1 + R[k, 2] * b2)
                rw[i, k] = R[k, 0] * r0 + R[k, 1] * r1 + R[k, 2] * r2  # world axes
            # R J J^T R^T, rows of R M first
            for k in range(3):
                Mr[k, 0] = R[k, 0] * m00 + R[k, 1] * m01 + R[k, 2] * m02
                Mr[k, 1] = R[k, 0] * m01 + R[k, 1] * m11 + R[k, 2] * m12
                Mr[k, 2] = R[k, 0] * m02 + R[k, 1] * m12 + R[k, 2] * m22
            for k in range(3):
                for j in range(k, 3):
                    JJ[k, j] = Mr[k, 0] * R[j, 0] + Mr[k, 1] * R[j, 1] + Mr[k, 2] * R[j, 2]
                    JJ[j, k] = JJ[k, j]
            # noise: joint velocities through J, gyro through the lever arm (cov of w x r =
            # sigma^2 (|r|^2 I - r r^T)), and the foot's own motion (rolling, slip)
            q0, q1, q2 = rw[i, 0], rw[i, 1], rw[i, 2]
            diag = g2 * (q0 * q0 + q1 * q1 + q2 * q2) + kv2
            qs = (q0, q1, q2)
            for k in range(3):
                for j in range(3):
                    if k == j:
                        Rv[i, k, j] = jv2 * JJ[k, k] - g2 * (qs[k] * qs[k]) + diag
                        Rpos[i, k, j] = jp2 * JJ[k, k] + kp2
                    else:
                        Rv[i, k, j] = jv2 * JJ[k, j] - g2 * (qs[min(k, j)] * qs[max(k, j)])
                        Rpos[i, k, j] = jp2 * JJ[k, j]
            for k in range(3):
                nu[i, k] = zv[i, k] - v_prior[k]  # minus the foot's velocity
            speed[i] = math.sqrt(nu[i, 0] * nu[i, 0] + nu[i, 1] * nu[i, 1] + nu[i, 2] * nu[i, 2])

        # --- contact: a foot stands if it is loaded (joint torques) or, unloaded or without torques, if it is
        # at the ground (within cm of the lower foot) and not moving, and the body is not in free fall; never
        # when the filter puts it well above the ground
        fsp = math.sqrt(f_imu[0] * f_imu[0] + f_imu[1] * f_imu[1] + f_imu[2] * f_imu[2])
        flight = fsp < (cfg[C_FL_OFF] if st[ST_FLIGHT] != 0.0 else cfg[C_FL_ON])
        st[ST_FLIGHT] = 1.0 if flight else 0.0
        low = min(lowest[0], lowest[1])
        for i in range(2):
            on[i] = (lowest[i] - low < (cfg[C_H_OFF] if was[i] else cfg[C_H_ON])) \
                and (speed[i] < (cfg[C_V_OFF] if was[i] else cfg[C_V_ON]))
            if flight:
                on[i] = False
        if has_tau:
            foot_force(G, u, R, force)
            for i in range(2):
                on[i] = on[i] or force[i] > (cfg[C_F_OFF] if was[i] else cfg[C_F_ON])
        for i in range(2):
            on[i] = on[i] and x[2] + lowest[i] < cfg[C_H_MAX]

        Sg = np.empty((3, 3))
        for i in range(2):
            if not on[i]:
                st[ST_GATED + i] = math.nan
                continue
            # consistency gate: a "stance" foot whose velocity disagrees with the filter is sliding (touchdown
            # with tangential speed) or not loaded: no measurement
            for k in range(3):
                for j in range(3):
                    Sg[k, j] = P[3 + k, 3 + j] + Rv[i, k, j]
            gate = quad3(Sg, nu[i])
            # less trust at touchdown and in a lightly loaded foot (lift-off, toe roll)
            scale = 1.0
            if t - st[ST_T0 + i] < cfg[C_TD_S] or not was[i]:
                scale = cfg[C_TD_K]
            if has_tau:
                scale = max(scale, min(cfg[C_F_FULL] / max(force[i], 1.0), cfg[C_TD_K]))
            if scale > 1.0:
                extra = (scale * scale - 1.0) * kv2
                for k in range(3):
                    Rv[i, k, k] += extra
            if gate > cfg[C_GATE]:
                if math.isnan(st[ST_GATED + i]):
                    st[ST_GATED + i] = t
                if t - st[ST_GATED + i] < cfg[C_GATE_S]:
                    on[i] = False
            else:
                st[ST_GATED + i] = math.nan
    else:  # no kinematics: keep the last contact state, no leg measurement
        on[0], on[1] = was0, was1
    for i in range(2):
        if on[i] and not was[i]:
            st[ST_T0 + i] = t
        st[ST_C + i] = 1.0 if on[i] else 0.0
    if on[0] or on[1]:
        st[ST_NOC] = math.nan
    elif math.isnan(st[ST_NOC]):
        st[ST_NOC] = t
    if joints_ok:
        w_prev[:] = w
        # both feet's position relative to the IMU point, then per stance foot its velocity and contact
        # point height above the ground
        m = 6 + 4 * (int(on[0]) + int(on[1]))
        plus, minus = np.empty(m, np.int64), np.empty(m, np.int64)
        innov, Rm = np.empty(m), np.zeros((m, m))
        for i in range(2):
            for k in range(3):
                r = 3 * i + k
                plus[r], minus[r] = 6 + 3 * i + k, k
                innov[r] = rw[i, k] - (x[6 + 3 * i + k] - x[k])
                for j in range(3):
                    Rm[r, 3 * i + j] = Rpos[i, k, j]
        r = 6
        for i in range(2):
            if not on[i]:
                continue
            for k in range(3):
                plus[r + k], minus[r + k] = 3 + k, -1
                innov[r + k] = zv[i, k] - x[3 + k]
                for j in range(3):
                    Rm[r + k, r + j] = Rv[i, k, j]
            plus[r + 3], minus[r + 3] = 8 + 3 * i, -1
            innov[r + 3] = (rw[i, 2] - lowest[i]) - x[8 + 3 * i]
            Rm[r + 3, r + 3] = cfg[C_FH] ** 2
            r += 4
        kf_update(x, P, plus, minus, innov, Rm)
    if not math.isnan(st[ST_NOC]) and t - st[ST_NOC] > cfg[C_FLIGHT_S]:
        # longer without contact is not a jump (hanging, held): a weak zero-velocity update bounds the drift
        hang = cfg[C_HANG] ** 2
        Rh = np.zeros((3, 3))
        for k in range(3):
            Rh[k, k] = hang
        kf_update(x, P, np.arange(3, 6), np.full(3, -1), np.array((0.0 - x[3], 0.0 - x[4], 0.0 - x[5])), Rh)
    output(out, x, R, u, qn, omega, force, imu_rot, imu_pos, identity)
    return on[0], on[1]


# ---------------------------------------------------------------------- entry points (the buffers unpacked)


@njit
def _unpack(buf, ibuf):
    n = ibuf[0]
    return (buf[B_X:B_X + NX], buf[B_P:B_P + NX * NX].reshape((NX, NX)), buf[B_W:B_W + 2 * n].reshape((2, n)),
            buf[B_ST:B_ST + ST_N], buf[B_OUT:B_OUT + OUT_N], buf[B_CFG:B_CFG + CFG_N], buf[B_U:B_U + U_N],
            buf[B_IMU_ROT:B_IMU_ROT + 9].reshape((3, 3)), buf[B_IMU_POS:B_IMU_POS + 3], buf[B_IDENT] != 0.0,
            ibuf[1:3], ibuf[3:15].reshape((2, 6)), ibuf[15:15 + 2 * n].reshape((2, n)))


@njit
def reset(buf, ibuf, geom_xpos, t, qn):
    """At rest with the lower foot on the ground at height 0 (mj_kinematics already run at the sample's q)."""
    x, P, w, st, out, cfg, u, imu_rot, imu_pos, identity, _, _, sole_geom = _unpack(buf, ibuf)
    _reset(x, P, w, st, out, cfg, t, u, qn, imu_rot, imu_pos, identity, geom_xpos, sole_geom)


@njit
def tick(buf, ibuf, site_xpos, xaxis, xanchor, geom_xpos, t, dt, qn, joints_ok, has_tau):
    """One update on a good IMU sample (mj_kinematics already run at q when joints_ok). Returns the contact per
    foot and the base height."""
    x, P, w, st, out, cfg, u, imu_rot, imu_pos, identity, foot_site, leg_jnt, sole_geom = _unpack(buf, ibuf)
    on0, on1 = _tick(x, P, w, st, out, cfg, t, dt, u, qn, joints_ok, has_tau, imu_rot, imu_pos, identity,
                     site_xpos, xaxis, xanchor, geom_xpos, foot_site, leg_jnt, sole_geom)
    return on0, on1, out[O_POS + 2]
