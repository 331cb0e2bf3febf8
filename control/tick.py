"""The policy tick: the state estimator, the policy runtime and the safety gate, composed once.

    tick = PolicyTick(Estimator(), PolicyRuntime(art), SafetyMonitor())
    tick.start(q, quat, t)                                  # entering POLICY: the filter at rest, rate limits from q
    est = tick.sense(t, q, dq, quat, gyro, acc, tau_est)    # every LowState (500 Hz): the estimate
    out = tick.act(step, q, dq, quat)                       # every policy step (50 Hz): runtime on the estimate
    cmd = tick.gate(now, q, dq, quat, out.target, ...)      # every command (500 Hz): the safety gate's command

The deploy loop calls the three stages at their own times (the estimator on each new LowState, the policy ahead of
its deadline, the gate at the deadline with the freshest state), the compute benchmark back to back, and eval on the
bridge model's simulated sensors (`eval.closed_loop`). What the stages exchange is defined here only: the runtime
observes the measured joints and IMU orientation, and the estimator's gyro, base velocity, height and position;
in POLICY the gate clamps against the policy's own gains (`gains`), in the other states against robots/g1.py's.
"""
from __future__ import annotations

import numpy as np

from estimation.config import Estimate
from estimation.estimator import Estimator
from policies.runtime import PolicyOutput, PolicyRuntime
from robots import g1
from safety import SafetyMonitor
from safety.limits import Command


class PolicyTick:
    def __init__(self, estimator: Estimator, runtime: PolicyRuntime, monitor: SafetyMonitor):
        self.estimator, self.runtime, self.monitor = estimator, runtime, monitor
        rt = runtime
        # a policy's own gains are sent in POLICY; None: robots/g1.py's (the gate's default)
        self.gains = None if (np.array_equal(rt.kp, g1.KP) and np.array_equal(rt.kd, g1.KD)) else (rt.kp, rt.kd)
        self.estimate: Estimate | None = None

    def start(self, q, quat, t: float) -> Estimate:
        """Entering POLICY: the estimator at rest from the measured pose (ValueError on a non-finite one)."""
        self.estimate = self.estimator.reset(q, quat, t)
        return self.estimate

    def sense(self, t: float, q, dq, quat, gyro, acc, tau_est) -> Estimate:
        """One LowState into the estimator; the estimate the next `act` observes."""
        self.estimate = self.estimator.update(t, q, dq, quat, gyro, acc, tau_est)
        return self.estimate

    def act(self, step: int, q, dq, quat, command=None, estimate: Estimate | None = None) -> PolicyOutput:
        """The policy step `step` on the measured joints and orientation and the estimate (default: the latest)."""
        est = self.estimate if estimate is None else estimate
        if est is None:
            raise RuntimeError("PolicyTick.act before any estimate: call start() on entering POLICY")
        return self.runtime.step(step, q, dq, est.gyro, quat, est.base_lin_vel, est.base_height, command=command,
                                 base_pos=est.base_pos)

    def gate(self, now: float, q, dq, quat, proposed, rx_time: float | None, tick: int | None,
             lateness: float = 0.0, policy: bool = True) -> Command:
        """The safety gate's command for `proposed` targets (None: zero torque); `policy`: clamp against the
        policy's gains (POLICY), else robots/g1.py's (STAND_UP, HOLD). In POLICY a tracking policy's reference
        raises the tilt trip while its own pelvis bends (safety.limits.tilt_limit)."""
        tr = self.runtime.tracking if policy else None
        return self.monitor.step(now, q, dq, quat, proposed, rx_time=rx_time, tick=tick, lateness=lateness,
                                 gains=self.gains if policy else None,
                                 reference_tilt=None if tr is None else tr.reference_tilt)


__all__ = ["PolicyTick"]
