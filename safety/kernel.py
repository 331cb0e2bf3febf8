"""SafetyMonitor's per-tick arithmetic in one numba call: the checks and the projection of
safety.limits.checked_command for the usual case (29-motor float arrays, every kp > 0, a finite previous
target), the same IEEE operations in the same order as limits.safe_target's two-row path, element by element.
safety.limits stays the source of truth: the kernel answers only "position command, this target" or "not the usual
case" (SLOW: a trip or a non-finite previous target); then the monitor calls checked_command itself
(tests/test_safety_kernel.py holds the kernel to checked_command, bit for bit).

Buffers (float64, owned by the monitor, so the kernel only ever sees one set of types and compiles at the
monitor's construction, from numba's on-disk cache):
  u (4 * 29 + 4): q, dq, proposed, prev, quat;   lim (8, 29): q_min, q_max, -max_step, +max_step, -torque,
  +torque, kp, kd (limits._step2 / _tau2's rows: the very numbers safe_target adds);   out (29): the target.
"""
from __future__ import annotations

import math

import numpy as np

from robots.compiled import njit

NM = 29
U_Q, U_DQ, U_PROP, U_PREV, U_QUAT, U_N = 0, NM, 2 * NM, 3 * NM, 4 * NM, 4 * NM + 4
L_QMIN, L_QMAX, L_STEP_LO, L_STEP_HI, L_TAU_LO, L_TAU_HI, L_KP, L_KD, L_N = range(9)
OK, SLOW = 0, 1  # SLOW: not the usual case (a trip, or a non-finite previous target): ask checked_command


@njit
def _max(a, b):  # np.maximum on finite values: a >= b ? a : b
    return a if a >= b else b


@njit
def _min(a, b):  # np.minimum on finite values: a <= b ? a : b
    return a if a <= b else b


@njit
def safety_tick(u, lim, tilt_max, check_tilt, out):
    """OK with out = the safe target, or SLOW (non-finite state, zero-norm or tilted quaternion, non-finite
    proposal or previous target: the monitor asks checked_command what to do)."""
    for i in range(U_PROP):  # q, dq
        if not math.isfinite(u[i]):
            return SLOW
    for i in range(U_QUAT, U_N):
        if not math.isfinite(u[i]):
            return SLOW
    if check_tilt:
        w, x, y, z = u[U_QUAT], u[U_QUAT + 1], u[U_QUAT + 2], u[U_QUAT + 3]
        n2 = w * w + x * x + y * y + z * z
        if not math.isfinite(n2) or n2 < 1e-12:
            return SLOW
        if math.acos(min(1.0, max(-1.0, 1.0 - 2.0 * (x * x + y * y) / n2))) > tilt_max:
            return SLOW
    for i in range(U_PROP, U_QUAT):  # proposed, prev
        if not math.isfinite(u[i]):
            return SLOW
    for i in range(NM):
        q_min, q_max = lim[L_QMIN, i], lim[L_QMAX, i]
        prev = _min(_max(u[U_PREV + i], q_min), q_max)
        f_lo = _min(_max(prev + lim[L_STEP_LO, i], q_min), q_max)
        f_hi = _min(_max(prev + lim[L_STEP_HI, i], q_min), q_max)
        c = lim[L_KD, i] * u[U_DQ + i]
        t_lo = (c + lim[L_TAU_LO, i]) / lim[L_KP, i]
        t_hi = (c + lim[L_TAU_HI, i]) / lim[L_KP, i]
        t_lo += u[U_Q + i]
        t_hi += u[U_Q + i]
        lo = _max(f_lo, t_lo)
        hi = _min(f_hi, t_hi)
        if lo > hi:  # T lies entirely on one side of F: F's end nearest to it
            lo = f_lo if t_hi < f_lo else f_hi
            hi = lo
        out[i] = _min(_max(u[U_PROP + i], lo), hi)
    return OK


def limit_rows(limits, kp, kd) -> np.ndarray:
    """lim for `limits` with the gains sent (kp > 0 everywhere)."""
    lim = np.empty((L_N, NM))
    lim[L_QMIN], lim[L_QMAX] = limits.q_min, limits.q_max
    lim[L_STEP_LO], lim[L_STEP_HI] = limits._step2
    lim[L_TAU_LO], lim[L_TAU_HI] = limits._tau2
    lim[L_KP], lim[L_KD] = kp, kd
    return lim
