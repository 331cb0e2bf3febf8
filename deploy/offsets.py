"""Joint (encoder zero) offsets from a calibration, applied where LowState enters the control loop.

The loop works in the joint frame the policy, the estimator and safety/ know: q = q_encoder - offset
(robots.calibration.joint_offsets). Every LowState the loop reads goes through `state()`, so the
estimator input, the observation's joint_pos, the stand-up start pose and the safety checks all see the
corrected q; every position command leaves through `command()`, which puts its targets back into the
drive's (encoder) frame: q_cmd = target + offset. Damping and zero-torque commands (kp = 0, q = 0) go
out unchanged. Without offsets (all zero) both are the identity, returning the objects they were given.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from deploy.link import StateSample
from robots import g1
from safety import Command


class JointOffsets:
    def __init__(self, offsets=()) -> None:
        off = np.zeros(g1.NUM_MOTORS) if offsets is None or len(offsets) == 0 else np.asarray(offsets, float)
        if off.shape != (g1.NUM_MOTORS,) or not np.all(np.isfinite(off)):
            raise ValueError(f"joint offsets must be {g1.NUM_MOTORS} finite numbers (motor order), got {offsets!r}")
        self.offsets = off
        self.active = bool(np.any(off != 0))
        self._raw, self._out = None, None

    def state(self, s: StateSample | None) -> StateSample | None:
        """The sample with q - offset (one copy per new sample)."""
        if not self.active or s is None:
            return s
        if s is not self._raw:  # the link returns the same object until a new sample arrives
            self._out = StateSample(dataclasses.replace(s.state, q=s.state.q - self.offsets), s.rx_time, s.seq)
            self._raw = s
        return self._out

    def command(self, cmd: Command) -> Command:
        """A position command's targets in the encoder frame (target + offset); others unchanged."""
        if not self.active or cmd.kind != "position":
            return cmd
        return cmd._replace(q=cmd.q + self.offsets)

    def describe(self) -> str:
        if not self.active:
            return "none"
        nz = np.flatnonzero(self.offsets)
        return ", ".join(f"{g1.JOINT_NAMES[i]} {self.offsets[i]:+.4f}" for i in nz[:6]) + (" ..." if len(nz) > 6 else "")
