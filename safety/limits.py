"""Pure limit functions: what a joint command may be, given the robot's measured state.

No I/O, no clocks: every function maps arrays to arrays. The command the drives apply is
robots.physics.pd_torque, tau = tau_ff + kp (q* - q) + kd (dq* - dq), and this toolkit always
sends dq* = 0, tau_ff = 0, so the torque a target implies is
    tau = kp (q* - q) - kd dq        (`implied_torque`).
Tilt is robots.physics.tilt_angle (the IMU quaternion's angle from the vertical).

Invariants of `safe_target` (proved by tests/test_safety_properties.py with hypothesis), for
any finite proposal, any finite measured state and a previous target inside the soft limits:
  1. q* lies inside the soft joint limits;
  2. |q* - prev| <= max_step (the per-command-tick rate limit);
  3. |kp (q* - q) - kd dq| <= torque_limit whenever some target satisfies 1 and 2 as well
     (otherwise q* is the target satisfying 1 and 2 that implies the least torque; the drive
     saturates at its limit in that case, which only happens when the joint is already being
     driven into a limit by the world, e.g. moving faster than kd * |dq| > torque_limit).
Non-finite proposals or states are not repaired: `check_command` returns a Trip for them.
"""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np

from robots import g1
from robots.gains import KD_MAX, KP_MAX
from robots.physics import REFERENCE_TILT_MARGIN_RAD, pd_torque, tilt_angle

# Soft joint limits: 5 % of each joint's range inside the hard limits, at most 0.1 rad.
SOFT_LIMIT_FRACTION = 0.05
SOFT_LIMIT_MAX_MARGIN = 0.1  # rad
# Target rate limit: a target may not move faster than the joint itself can (motor table).
TARGET_RATE_LIMIT = g1.VELOCITY_LIMIT  # rad/s
# Fall detection: angle between the pelvis z axis and the world vertical.
TILT_LIMIT = 0.8  # rad (~46 deg); an upright G1 that is pushed past this does not recover
TILT_CEILING = math.radians(75.0)  # no tracking reference raises the tilt trip beyond this


def soft_limits(fraction: float = SOFT_LIMIT_FRACTION, max_margin: float = SOFT_LIMIT_MAX_MARGIN):
    span = g1.JOINT_POS_MAX - g1.JOINT_POS_MIN
    margin = np.minimum(fraction * span, max_margin)
    return g1.JOINT_POS_MIN + margin, g1.JOINT_POS_MAX - margin


@dataclasses.dataclass(frozen=True)
class Limits:
    """Everything the safety layer bounds, per motor (motor order). Defaults from robots/g1.py."""

    q_min: np.ndarray
    q_max: np.ndarray
    torque: np.ndarray  # Nm
    max_step: np.ndarray  # rad per command tick
    kp: np.ndarray
    kd: np.ndarray
    damping_kd: float = g1.DAMPING_KD
    tilt_max: float = TILT_LIMIT  # rad

    def __post_init__(self):
        # read-only float copies: commands share kp/kd without copying, and the derived bounds below stay valid
        for name in ("q_min", "q_max", "torque", "max_step", "kp", "kd"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))
        # (2, 29) [-x; +x] rows: both ends of the rate and torque intervals in one operation (safe_target)
        object.__setattr__(self, "_step2", _frozen(np.stack([-self.max_step, self.max_step]) + np.zeros(self.q_min.shape)))
        object.__setattr__(self, "_tau2", _frozen(np.stack([-self.torque, self.torque]) + np.zeros(self.q_min.shape)))
        object.__setattr__(self, "_kp_pos", bool(np.all(self.kp > 0)))

    @staticmethod
    def default(command_dt: float = g1.COMMAND_DT, kp=g1.KP, kd=g1.KD) -> "Limits":
        lo, hi = soft_limits()
        return Limits(q_min=lo, q_max=hi, torque=g1.TORQUE_LIMIT.astype(float).copy(),
                      max_step=TARGET_RATE_LIMIT * command_dt, kp=np.asarray(kp, float).copy(),
                      kd=np.asarray(kd, float).copy())


class Command(NamedTuple):
    """One motor command for the 29 motors (what goes into LowCmd)."""

    q: np.ndarray
    dq: np.ndarray
    tau: np.ndarray
    kp: np.ndarray
    kd: np.ndarray
    kind: str  # "position" | "damping" | "zero_torque"


class Trip(NamedTuple):
    """The safety layer refuses: the caller must send `damping_command()` and latch."""

    kind: str  # nonfinite_action | nonfinite_state | tilt | stale_state | deadline | estop | exception ...
    detail: str


def _frozen(a) -> np.ndarray:
    a = np.array(a, dtype=float)
    a.setflags(write=False)
    return a


_Z = _frozen(np.zeros(g1.NUM_MOTORS))  # dq* = tau_ff = 0 of every position command (shared: read-only)


def damping_command(kd: float = g1.DAMPING_KD) -> Command:
    """kp = 0, kd = DAMPING_KD, q = dq = tau = 0: the drive applies tau = -kd dq (dissipative)."""
    return Command(_Z.copy(), _Z.copy(), _Z.copy(), _Z.copy(), np.full(g1.NUM_MOTORS, float(kd)), "damping")


def zero_torque_command() -> Command:
    """kp = kd = 0, tau = 0: motors enabled but limp (Unitree's examples before Start)."""
    return Command(_Z.copy(), _Z.copy(), _Z.copy(), _Z.copy(), _Z.copy(), "zero_torque")


def tilt_limit(limits: Limits, reference_tilt: float | None = None) -> float:
    """The tilt trip's angle: limits.tilt_max; while a tracking policy's reference itself bends its pelvis (a box
    lift: 58-66 deg), that tilt + robots.physics.REFERENCE_TILT_MARGIN_RAD, never beyond TILT_CEILING. A
    non-finite reference tilt leaves limits.tilt_max."""
    if reference_tilt is None or not math.isfinite(reference_tilt):
        return limits.tilt_max
    return min(TILT_CEILING, max(limits.tilt_max, reference_tilt + REFERENCE_TILT_MARGIN_RAD))


def all_finite(*arrays) -> bool:
    for a in arrays:
        # fast path: a float sum is finite only if every term is (NaN/inf propagate); it is not finite on
        # overflow too, so that case (and anything but a 1-d float64 array) takes the exact test
        if type(a) is np.ndarray and a.dtype == _F64 and a.ndim == 1 and math.isfinite(sum(a.tolist())):
            continue
        if not np.isfinite(a).all():
            return False
    return True


_F64 = np.dtype(np.float64)


def clamp_joint_limits(q_target: np.ndarray, limits: Limits) -> np.ndarray:
    return np.clip(q_target, limits.q_min, limits.q_max)


def torque_interval(q: np.ndarray, dq: np.ndarray, kp: np.ndarray, kd: np.ndarray, tau_max: np.ndarray):
    """Targets q* with |kp (q* - q) - kd dq| <= tau_max: [q + (kd dq - tau_max)/kp, q + (kd dq + tau_max)/kp].

    For kp = 0 every target is admissible (the interval is the whole line)."""
    pos = kp > 0
    if pos.all():  # the usual case (every G1 gain is positive): no masking needed
        c = kd * dq
        return q + (c - tau_max) / kp, q + (c + tau_max) / kp
    kp_safe = np.where(pos, kp, 1.0)
    lo = np.where(pos, q + (kd * dq - tau_max) / kp_safe, -np.inf)
    hi = np.where(pos, q + (kd * dq + tau_max) / kp_safe, np.inf)
    return lo, hi


def implied_torque(q_target, q, dq, kp, kd):
    """The drive torque of a position command (dq* = 0, tau_ff = 0, before the drive's own clip)."""
    return pd_torque(q_target, q, dq, kp, kd)


def rate_interval(prev: np.ndarray, limits: Limits):
    return prev - limits.max_step, prev + limits.max_step


def safe_target(proposed: np.ndarray, q: np.ndarray, dq: np.ndarray, prev: np.ndarray, limits: Limits,
                kp: np.ndarray | None = None, kd: np.ndarray | None = None) -> np.ndarray:
    """The admissible target nearest to `proposed` (all inputs finite; prev inside the soft limits).

    Feasible set F = soft limits  n  [prev - max_step, prev + max_step]  (never empty).
    Torque set   T = torque_interval(q, dq).  If F n T is non-empty the result is the projection of
    `proposed` onto it; otherwise it is the point of F nearest to T (least implied torque)."""
    kp = limits.kp if kp is None else kp
    kd = limits.kd if kd is None else kd
    q_min, q_max = limits.q_min, limits.q_max
    prev = np.minimum(np.maximum(prev, q_min), q_max)  # defensive: F stays non-empty
    if (kp is limits.kp and limits._kp_pos) or (kp.shape == q_min.shape and bool((kp > 0).all())):
        # both ends at once on (2, n) rows [lo; hi], the same IEEE operations as the general path below:
        # prev + (-s) == prev - s, and max / min with the limits leave the other end unchanged
        f = np.minimum(np.maximum(prev + limits._step2, q_min), q_max)
        c = kd * dq
        t = (c + limits._tau2) / kp
        t += q
        lo = np.maximum(f[0], t[0])
        hi = np.minimum(f[1], t[1])
        t_lo, t_hi, f_lo, f_hi = t[0], t[1], f[0], f[1]
    else:
        f_lo = np.maximum(q_min, prev - limits.max_step)
        f_hi = np.minimum(q_max, prev + limits.max_step)
        t_lo, t_hi = torque_interval(q, dq, kp, kd, limits.torque)
        lo = np.maximum(f_lo, t_lo)
        hi = np.minimum(f_hi, t_hi)
    empty = lo > hi
    if empty.any():  # T lies entirely on one side of F -> take F's end nearest to it
        lo = np.where(empty, np.where(t_hi < f_lo, f_lo, f_hi), lo)
        hi = np.where(empty, lo, hi)
    return np.minimum(np.maximum(proposed, lo), hi)


def gains_ok(kp: np.ndarray, kd: np.ndarray) -> bool:
    """Gains the drives may be sent: robots/gains.py's bounds (0 < kp <= KP_MAX, 0 <= kd <= KD_MAX)."""
    return (kp.shape == (g1.NUM_MOTORS,) and kd.shape == (g1.NUM_MOTORS,) and all_finite(kp, kd)
            and bool(np.all((kp > 0) & (kp <= KP_MAX) & (kd >= 0) & (kd <= KD_MAX))))


def check_command(q: np.ndarray, dq: np.ndarray, quat: np.ndarray, proposed: np.ndarray | None,
                  prev: np.ndarray, limits: Limits, check_tilt: bool = True,
                  gains: tuple[np.ndarray, np.ndarray] | None = None) -> Command | Trip:
    """(measured state, proposed joint targets) -> a safe position command, or a Trip.

    `proposed=None` asks for no position command (PASSIVE): the state checks still run and the
    result is the zero-torque command. `gains` = (kp, kd) to send instead of limits.kp/kd (a policy
    artifact's gains): the torque bound uses exactly the gains sent, and gains outside robots/gains.py's
    bounds trip. Trips: non-finite state, non-finite proposal, tilt, bad gains.
    The command's dq, tau, kp and kd arrays are read-only (shared between commands)."""
    return checked_command(q, dq, quat, proposed, prev, limits, check_tilt,
                           None if gains is None else frozen_gains(gains))


def frozen_gains(gains: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray] | Trip:
    """Read-only float copies of (kp, kd), or the bad_gains Trip when they are outside robots/gains.py's bounds."""
    kp, kd = _frozen(gains[0]), _frozen(gains[1])
    if not gains_ok(kp, kd):
        return Trip("bad_gains", "PD gains outside robots/gains.py's bounds (or non-finite); pre-flight should "
                                 "have refused this artifact")
    return kp, kd


def checked_command(q: np.ndarray, dq: np.ndarray, quat: np.ndarray, proposed: np.ndarray | None,
                    prev: np.ndarray, limits: Limits, check_tilt: bool = True,
                    gains: tuple[np.ndarray, np.ndarray] | Trip | None = None,
                    tilt_max: float | None = None) -> Command | Trip:
    """check_command with `gains` already through `frozen_gains` (SafetyMonitor validates them once); `tilt_max`:
    the tilt trip's angle when not limits.tilt_max (tilt_limit of a tracking reference)."""
    tilt_max = limits.tilt_max if tilt_max is None else tilt_max
    if not all_finite(q, dq, quat):
        bad = [n for n, a in (("q", q), ("dq", dq), ("quat", quat)) if not all_finite(a)]
        return Trip("nonfinite_state", f"non-finite values in measured {', '.join(bad)}")
    if check_tilt:
        tilt = tilt_angle(quat.tolist() if type(quat) is np.ndarray else quat)
        if not math.isfinite(tilt):
            return Trip("nonfinite_state", "IMU quaternion has zero norm")
        if tilt > tilt_max:
            return Trip("tilt", f"pelvis tilted {np.degrees(tilt):.0f} deg > {np.degrees(tilt_max):.0f} deg")
    if proposed is None:
        return zero_torque_command()
    proposed = np.asarray(proposed, dtype=float)
    if proposed.shape != (g1.NUM_MOTORS,):
        return Trip("bad_action", f"proposed targets have shape {proposed.shape}, expected ({g1.NUM_MOTORS},)")
    if not all_finite(proposed):
        bad = np.flatnonzero(~np.isfinite(proposed))
        return Trip("nonfinite_action", f"non-finite joint targets for {len(bad)} motors "
                                        f"(first: {g1.JOINT_NAMES[bad[0]]}); the policy output NaN/inf")
    if isinstance(gains, Trip):
        return gains
    kp, kd = (limits.kp, limits.kd) if gains is None else gains
    if not all_finite(prev):
        prev = clamp_joint_limits(q, limits)  # cannot happen via the monitor; start from where we are
    target = safe_target(proposed, q, dq, prev, limits, kp, kd)
    return Command(target, _Z, _Z, kp, kd, "position")
