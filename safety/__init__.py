"""Safety layer: pure limit functions, watchdogs, e-stop latch, damping command. No I/O; imports
only numpy and robots (the PD law and tilt come from robots.physics), and numba for the monitor's
compiled usual tick (safety/kernel.py: the pure functions' arithmetic, tested against them).

    from safety import SafetyMonitor, Limits
    mon = SafetyMonitor(Limits.default())
    cmd = mon.step(now, q, dq, quat, proposed_targets, rx_time, tick, lateness)  # -> Command
"""
from safety.limits import (Command, Limits, Trip, all_finite, check_command, clamp_joint_limits, damping_command,
                           implied_torque, rate_interval, safe_target, soft_limits, tilt_limit, torque_interval,
                           zero_torque_command)
from safety.monitor import DeadlineWatchdog, EStopLatch, SafetyMonitor, StaleStateWatchdog, WatchdogConfig

__all__ = [
    "Command", "Limits", "Trip", "all_finite", "check_command", "clamp_joint_limits", "damping_command",
    "implied_torque", "rate_interval", "safe_target", "soft_limits", "tilt_limit", "torque_interval",
    "zero_torque_command",
    "DeadlineWatchdog", "EStopLatch", "SafetyMonitor", "StaleStateWatchdog", "WatchdogConfig",
]
