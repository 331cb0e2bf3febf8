"""What lies between the robot and its controller, and what pushes it: delay lines, random drops, CRC corruption,
sensor noise and the schedule of external pushes.

Pure helpers around one numpy Generator owned by the caller (the sim bridge, an eval episode): every random draw is
made here, in the order the caller makes them, so a run with a given seed is reproducible (the bridge's lockstep
runs are bit-identical). A helper makes no draw when its probability / std is zero.
"""
from __future__ import annotations

import collections
from typing import Any, Sequence

import numpy as np

from plant.config import NoiseConfig, Push

EPS = 1e-9  # plant-clock comparisons: times are sums of dt


def happens(probability: float, rng: np.random.Generator) -> bool:
    """A Bernoulli draw (none when the probability is 0)."""
    return probability > 0 and rng.random() < probability


def delay_s(latency_ms: float, jitter_ms: float, rng: np.random.Generator) -> float:
    """A message's delay: latency_ms plus a uniform draw in [0, jitter_ms] (none when jitter_ms is 0), in s."""
    return (latency_ms + (rng.uniform(0.0, jitter_ms) if jitter_ms > 0 else 0.0)) * 1e-3


def corrupt_crc(rec: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A copy of a LowState record whose crc is xor-ed with a random non-zero word (always wrong)."""
    rec = rec.copy()
    rec["crc"] = int(rec["crc"]) ^ int(rng.integers(1, 2**32))
    return rec


def noisy_sensors(q: np.ndarray, dq: np.ndarray, gyro: np.ndarray, acc: np.ndarray, noise: NoiseConfig,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(q, dq, gyro, acc) with the configured white noise and constant biases added."""
    if noise.joint_pos_std > 0:
        q = q + rng.normal(0.0, noise.joint_pos_std, q.shape)
    if noise.joint_vel_std > 0:
        dq = dq + rng.normal(0.0, noise.joint_vel_std, dq.shape)
    gyro = gyro + np.asarray(noise.gyro_bias)
    acc = acc + np.asarray(noise.accel_bias)
    if noise.gyro_std > 0:
        gyro = gyro + rng.normal(0.0, noise.gyro_std, 3)
    if noise.accel_std > 0:
        acc = acc + rng.normal(0.0, noise.accel_std, 3)
    return q, dq, gyro, acc


class DelayLine:
    """FIFO of items released at a due time, in the order pushed: an item due before the one pushed ahead
    of it waits for that one (one path with a queue: jitter delays, never reorders)."""

    def __init__(self) -> None:
        self._q: collections.deque = collections.deque()

    def push(self, due: float, item: Any) -> None:
        if self._q and due < self._q[-1][0]:
            due = self._q[-1][0]
        self._q.append((due, item))

    def pop_due(self, now: float) -> list[Any]:
        out = []
        while self._q and self._q[0][0] <= now + EPS:
            out.append(self._q.popleft()[1])
        return out

    def clear(self) -> None:
        self._q.clear()

    def __len__(self) -> int:
        return len(self._q)


class PushSchedule:
    """Pushes on the pelvis: scheduled ones (config) start at their time, others start now; each
    lasts its duration (at least one physics step). `force(now)` is the sum of the active ones."""

    def __init__(self, scheduled: Sequence[Push] = ()):
        self._pending = sorted(scheduled, key=lambda p: p.time)
        self._active: list[tuple[float, np.ndarray]] = []  # (end clock, force)

    def add(self, now: float, force: Sequence[float], duration: float, dt: float) -> None:
        self._active.append((now + max(duration, dt), np.asarray(force, dtype=float)))

    def start_due(self, now: float, dt: float) -> None:
        while self._pending and self._pending[0].time <= now + EPS:
            p = self._pending.pop(0)
            self.add(now, p.force, p.duration, dt)

    def schedule(self, push: Push) -> None:
        """One more push at push.time."""
        self._pending = sorted([*self._pending, push], key=lambda p: p.time)

    def clear_active(self) -> None:
        self._active.clear()

    def clear(self) -> None:
        """Drop the active pushes and those still to come."""
        self._active.clear()
        self._pending.clear()

    def force(self, now: float) -> np.ndarray:
        """Sum of the pushes still active at `now` (ended ones are dropped)."""
        total = np.zeros(3)
        if self._active:
            self._active = [(end, f) for end, f in self._active if end > now + EPS]
            for _, f in self._active:
                total += f
        return total
