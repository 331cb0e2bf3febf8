"""What eval runs between the policy and the drives: by default the deploy loop's tick (control.PolicyTick), the
state estimator on the bridge model's simulated sensors (encoders, the pelvis IMU's orientation, gyro and
accelerometer, the drives' torque) every 2 ms, the policy every 20 ms on its estimate, and the safety gate on every
2 ms command (rate and joint limits, the tilt trip, damping once tripped). `true_state=True` (`--true-state`) gives
the policy the simulator's true state and its targets straight to the drives instead, for diagnosis.

    loop = ClosedLoop(sim, runtime, true_state=False)
    loop.start(kp_scale, kd_scale)            # after sim.reset: the filter at rest, rate limits from the pose
    out = loop.act(step)                      # a policy step (50 Hz)
    target, kp, kd = loop.command(t, proposed, policy=True)    # every physics step; new values every 2 ms

The sensors are exact (the bridge adds noise on publication; eval does not), and the gate's staleness and deadline
watchdogs see a fresh state every tick (eval has no wire).
"""
from __future__ import annotations

import numpy as np

from control.tick import PolicyTick
from estimation.estimator import Estimator
from eval.sim import EvalSim
from policies.runtime import PolicyOutput, PolicyRuntime
from robots import g1
from safety import Limits, SafetyMonitor


class ClosedLoop:
    def __init__(self, sim: EvalSim, runtime: PolicyRuntime, true_state: bool = False):
        self.sim, self.runtime, self.true_state = sim, runtime, true_state
        self.estimator = None if true_state else Estimator(model=sim.m)
        self.tick: PolicyTick | None = None
        self._every = max(1, int(round(g1.COMMAND_DT / sim.m.opt.timestep)))  # physics steps per command
        self._n = 0
        self._cmd = None

    @property
    def events(self) -> list[dict]:
        """The safety monitor's trips of the episode ({time, kind, detail})."""
        return [] if self.tick is None else list(self.tick.monitor.events)

    def start(self, kp_scale=1.0, kd_scale=1.0) -> None:
        """A new episode from the simulator's current state; kp_scale, kd_scale: the episode's drive randomisation
        (per motor), applied to the gate's gains."""
        self._n, self._cmd = 0, None
        self._scale = (np.asarray(kp_scale, float), np.asarray(kd_scale, float))
        if self.true_state:
            return
        q, _, quat, _, _, _ = self.sim.sensors()
        monitor = SafetyMonitor(Limits.default(), period=g1.COMMAND_DT)
        self.tick = PolicyTick(self.estimator, self.runtime, monitor)
        self.tick.start(q, quat, 0.0)
        monitor.reset_target(q)

    def act(self, step: int, command=None) -> PolicyOutput:
        """The policy step `step`: on the estimate (default) or on the true state."""
        if self.true_state:
            q, dq, gyro, quat, vel_b, z = self.sim.state()
            return self.runtime.step(step, q, dq, gyro, quat, vel_b, z, command=command,
                                     base_pos=self.sim.d.qpos[0:3].copy())
        q, dq, quat, _, _, _ = self.sim.sensors()
        return self.tick.act(step, q, dq, quat, command=command)

    def command(self, t: float, proposed: np.ndarray, kp: np.ndarray, kd: np.ndarray,
                policy: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(target, kp, kd) for the drives at physics time t, called every physics step. True state: `proposed`
        at the caller's gains kp, kd. Else every 2 ms the estimator senses and the gate turns `proposed` into the
        command (its gains: the policy's in POLICY, robots/g1.py's otherwise; damping once tripped), times the
        episode's drive scales, held until the next."""
        if self.true_state:
            return proposed, kp, kd
        if self._n % self._every == 0 or self._cmd is None:
            q, dq, quat, gyro, acc, tau = self.sim.sensors()
            self.tick.sense(t, q, dq, quat, gyro, acc, tau)
            self._cmd = self.tick.gate(t, q, dq, quat, proposed, rx_time=t, tick=self._n, policy=policy)
        self._n += 1
        c = self._cmd
        return c.q, c.kp * self._scale[0], c.kd * self._scale[1]
