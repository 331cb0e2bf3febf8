"""Watchdogs, the e-stop latch and the monitor that every command passes through.

No I/O and no clock of its own: the caller passes `now` (monotonic seconds), the receive time
and tick of the latest LowState, and how late the control loop woke up. Once anything trips,
the latch holds and every later command is the damping command until the process restarts.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from robots import g1
from safety.limits import (_Z, Command, Limits, Trip, checked_command, clamp_joint_limits, damping_command,
                           frozen_gains, tilt_limit)

try:  # the per-tick arithmetic compiled (safety/kernel.py); without numba every tick takes checked_command
    from safety import kernel as _kernel
except ImportError:  # pragma: no cover - numba is in both locks
    _kernel = None


_SHAPE = (g1.NUM_MOTORS,)
_kernel_loaded = False
_F64 = np.dtype(np.float64)
if _kernel is not None:
    _U_Q, _U_DQ, _U_PROP, _U_PREV, _U_QUAT = _kernel.U_Q, _kernel.U_DQ, _kernel.U_PROP, _kernel.U_PREV, _kernel.U_QUAT


@dataclasses.dataclass(frozen=True)
class WatchdogConfig:
    # The robot publishes LowState at 500 Hz; 50 missing samples = 100 ms without feedback is a fault
    # (not scheduler noise: the loop tolerates that), and ~5 policy periods of blind control.
    stale_s: float = 0.1  # LowState older than this -> trip
    tick_stall_s: float = 0.1  # LowState.tick unchanged for this long -> trip (robot-side freeze)
    max_lateness_s: float = 0.1  # loop woke this far behind its deadline -> trip (robot uncommanded)


class EStopLatch:
    """Set once, never cleared (until the process restarts)."""

    def __init__(self) -> None:
        self.trip: Trip | None = None
        self.time: float | None = None

    @property
    def latched(self) -> bool:
        return self.trip is not None

    def set(self, trip: Trip, now: float) -> bool:
        """Latch `trip`; returns True only the first time."""
        if self.trip is not None:
            return False
        self.trip, self.time = trip, float(now)
        return True


class StaleStateWatchdog:
    """Trips when the latest LowState is too old or the robot's tick stops advancing."""

    def __init__(self, stale_s: float, tick_stall_s: float) -> None:
        self.stale_s, self.tick_stall_s = stale_s, tick_stall_s
        self._tick: int | None = None
        self._tick_changed_at: float | None = None

    def check(self, now: float, rx_time: float | None, tick: int | None) -> Trip | None:
        if rx_time is None:
            return Trip("stale_state", "no LowState received")
        age = now - rx_time
        if age > self.stale_s:
            return Trip("stale_state", f"latest LowState is {age * 1e3:.0f} ms old (limit {self.stale_s * 1e3:.0f} ms)")
        if tick is not None:
            if tick != self._tick:
                self._tick, self._tick_changed_at = tick, now
            elif now - self._tick_changed_at > self.tick_stall_s:
                return Trip("stale_state", f"LowState.tick stuck at {tick} for "
                                           f"{(now - self._tick_changed_at) * 1e3:.0f} ms")
        return None


class DeadlineWatchdog:
    """Counts missed deadlines (woke more than one period late); trips when far behind."""

    def __init__(self, period: float, max_lateness_s: float) -> None:
        self.period, self.max_lateness_s = period, max_lateness_s
        self.misses = 0

    def check(self, lateness: float) -> Trip | None:
        if lateness > self.period:
            self.misses += 1
        if lateness > self.max_lateness_s:
            return Trip("deadline", f"control loop {lateness * 1e3:.0f} ms behind its deadline "
                                    f"(limit {self.max_lateness_s * 1e3:.0f} ms)")
        return None


class SafetyMonitor:
    """The one gate between the controller and the motors.

    step(...) -> Command: damping once latched; zero torque when no targets are proposed; otherwise
    the proposed targets projected onto the admissible set (safety.limits.safe_target). Every trip
    is recorded in `events` as {time, kind, detail}. The usual tick (float64 29-vectors, kp > 0, nothing
    trips) runs as one compiled call (safety/kernel.py, equal to checked_command bit for bit); every
    other tick runs checked_command itself."""

    def __init__(self, limits: Limits | None = None, watchdog: WatchdogConfig = WatchdogConfig(),
                 period: float = g1.COMMAND_DT, t0: float = 0.0) -> None:
        self.limits = limits or Limits.default(command_dt=period)
        self.cfg = watchdog
        self.latch = EStopLatch()
        self.stale = StaleStateWatchdog(watchdog.stale_s, watchdog.tick_stall_s)
        self.deadline = DeadlineWatchdog(period, watchdog.max_lateness_s)
        self.events: list[dict] = []
        self.prev_target: np.ndarray | None = None
        self.t0 = t0  # event times are reported relative to this
        self._damping = damping_command(self.limits.damping_kd)
        self._gains_in = self._gains = None  # the last `gains` passed to step and its frozen_gains()
        self._zeros = np.zeros(g1.NUM_MOTORS)
        self._lim = None  # the kernel's limit rows for the gains in use (None: that tick takes checked_command)
        if _kernel is not None:
            self._u = np.zeros(_kernel.U_N)
            self._set_gains(None)
            SafetyMonitor.load_kernel()

    @staticmethod
    def load_kernel() -> None:
        """Compile (or load from numba's cache, ~0.3 s) the monitor's kernel once per process; the deploy loop
        calls it at construction, before its run: a monitor made at the run's start then costs nothing."""
        global _kernel_loaded
        if _kernel is not None and not _kernel_loaded:
            _kernel.safety_tick(np.zeros(_kernel.U_N), np.ones((_kernel.L_N, _kernel.NM)), 0.0, False,
                                np.empty(_kernel.NM))
            _kernel_loaded = True

    def _set_gains(self, gains) -> None:
        self._gains_in, self._gains = gains, None if gains is None else frozen_gains(gains)
        self._lim = None
        if _kernel is None or isinstance(self._gains, Trip):
            return
        self._kp, self._kd = (self.limits.kp, self.limits.kd) if self._gains is None else self._gains
        if self._kp.shape == self._kd.shape == _SHAPE == self.limits.q_min.shape and bool(np.all(self._kp > 0)):
            self._lim = _kernel.limit_rows(self.limits, self._kp, self._kd)

    @property
    def latched(self) -> bool:
        return self.latch.latched

    def trip(self, kind: str, detail: str, now: float) -> None:
        if self.latch.set(Trip(kind, detail), now):
            self.events.append({"time": round(float(now - self.t0), 6), "kind": kind, "detail": detail})

    def reset_target(self, q: np.ndarray) -> None:
        """Start rate limiting from the measured pose (entering a position-controlled state)."""
        q = np.asarray(q, float)
        self.prev_target = clamp_joint_limits(q if np.all(np.isfinite(q)) else np.zeros_like(q), self.limits)

    def damping(self) -> Command:
        return self._damping

    def step(self, now: float, q, dq, quat, proposed, rx_time: float | None, tick: int | None,
             lateness: float = 0.0, check_tilt: bool = True, gains=None, reference_tilt: float | None = None) -> Command:
        """`gains` = (kp, kd) of the command (a policy's own gains); None = limits.kp/kd. `reference_tilt`: a tracking
        reference's pelvis tilt now (rad), which raises the tilt trip (safety.limits.tilt_limit)."""
        if self.latched:
            return self._damping
        trip = self.stale.check(now, rx_time, tick) or self.deadline.check(lateness)
        if trip is None:
            if proposed is not None and self.prev_target is None:
                self.reset_target(q)
            prev = self.prev_target if self.prev_target is not None else self._zeros
            if gains is not self._gains_in:  # validated once per gains object; the copies are what is sent
                self._set_gains(gains)
            tilt_max = self.limits.tilt_max if reference_tilt is None else tilt_limit(self.limits, reference_tilt)
            if self._lim is not None and type(proposed) is np.ndarray and type(q) is np.ndarray \
                    and type(dq) is np.ndarray and q.dtype is _F64 and dq.dtype is _F64 and proposed.dtype is _F64 \
                    and q.shape == dq.shape == proposed.shape == _SHAPE and np.shape(quat) == (4,):
                u = self._u  # the usual tick in one compiled call; anything else below, by checked_command
                u[_U_Q:_U_DQ], u[_U_DQ:_U_PROP], u[_U_PROP:_U_PREV], u[_U_PREV:_U_QUAT], u[_U_QUAT:] = \
                    q, dq, proposed, prev, quat
                target = np.empty(g1.NUM_MOTORS)
                if _kernel.safety_tick(u, self._lim, tilt_max, check_tilt, target) == _kernel.OK:
                    self.prev_target = target
                    return Command(target, _Z, _Z, self._kp, self._kd, "position")
            out = checked_command(np.asarray(q, float), np.asarray(dq, float), np.asarray(quat, float),
                                  proposed, prev, self.limits, check_tilt, self._gains, tilt_max)
            if isinstance(out, Command):
                if out.kind == "position":
                    self.prev_target = out.q
                else:
                    self.prev_target = None
                return out
            trip = out
        self.trip(trip.kind, trip.detail, now)
        return self._damping


__all__ = ["WatchdogConfig", "EStopLatch", "StaleStateWatchdog", "DeadlineWatchdog", "SafetyMonitor"]
