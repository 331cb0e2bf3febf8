"""What a calibration routine records: every LowState and every LowCmd it sent, on the robot clock.

Time base: the robot's `LowState.tick` (ms). Every command records `ref_tick`, the tick of the
newest LowState it was computed from, so command and state share one clock on the robot and on
the bridge, in lockstep and in real time, and no host/robot clock mapping is needed:
- latency (calibration.latency) = tick of the first state showing a command's effect - ref_tick;
- the actuator fit (calibration.sysid) applies command k from robot time ref_tick_k + action_delay.

Saved as `<name>.npz` under runs/calibration/<stamp>/ (the YAML points there).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import NamedTuple

import numpy as np

from robots import g1
from robots.run_files import json_default


class State(NamedTuple):
    """One LowState, as the calibration routines use it."""

    tick: int  # ms, robot clock
    q: np.ndarray
    dq: np.ndarray
    tau: np.ndarray  # tau_est
    quat: np.ndarray  # w, x, y, z (IMU)
    gyro: np.ndarray
    acc: np.ndarray
    rx_time: float  # host time.monotonic() when received (information only)


class CalibrationError(RuntimeError):
    """A routine refuses: its input cannot support a fit. The message says why and what to do."""


STATE_FIELDS = {"tick": (), "q": (g1.NUM_MOTORS,), "dq": (g1.NUM_MOTORS,), "tau": (g1.NUM_MOTORS,),
                "quat": (4,), "gyro": (3,), "acc": (3,), "rx_time": ()}
CMD_FIELDS = {"ref_tick": (), "q": (g1.NUM_MOTORS,), "kp": (g1.NUM_MOTORS,), "kd": (g1.NUM_MOTORS,),
              "proposed": (g1.NUM_MOTORS,), "tx_time": ()}


@dataclasses.dataclass
class RunLog:
    """States (s_*) and commands (c_*) of one routine. Arrays are float64 (ticks as float ms)."""

    name: str
    states: dict[str, np.ndarray]
    cmds: dict[str, np.ndarray]
    meta: dict = dataclasses.field(default_factory=dict)

    # ------------------------------------------------------------------ construction
    @classmethod
    def empty(cls, name: str, **meta) -> "RunLog":
        return cls(name, {k: np.zeros((0, *s)) for k, s in STATE_FIELDS.items()},
                   {k: np.zeros((0, *s)) for k, s in CMD_FIELDS.items()}, dict(meta))

    @classmethod
    def from_rows(cls, name: str, states: list[State], cmds: list[dict], **meta) -> "RunLog":
        st = {k: np.array([getattr(s, k) for s in states], dtype=float).reshape(len(states), *shape)
              for k, shape in STATE_FIELDS.items()}
        cm = {k: np.array([c[k] for c in cmds], dtype=float).reshape(len(cmds), *shape)
              for k, shape in CMD_FIELDS.items()}
        return cls(name, st, cm, dict(meta))

    # ------------------------------------------------------------------ views
    @property
    def n_states(self) -> int:
        return len(self.states["tick"])

    @property
    def n_cmds(self) -> int:
        return len(self.cmds["ref_tick"])

    @property
    def t(self) -> np.ndarray:
        """State times (s, robot clock)."""
        return self.states["tick"] * 1e-3

    @property
    def duration(self) -> float:
        return float(self.t[-1] - self.t[0]) if self.n_states > 1 else 0.0

    @property
    def state_period(self) -> float:
        """Median spacing of LowStates (s); g1.LOWSTATE_DT when unknown."""
        if self.n_states < 3:
            return g1.LOWSTATE_DT
        return float(np.median(np.diff(self.t)))

    def state_slice(self, t0: float, t1: float) -> "RunLog":
        """States with t0 <= t < t1 (robot clock s) and the commands computed from them."""
        ts, tc = self.t, self.cmds["ref_tick"] * 1e-3
        ms, mc = (ts >= t0) & (ts < t1), (tc >= t0) & (tc < t1)
        return RunLog(self.name, {k: v[ms] for k, v in self.states.items()},
                      {k: v[mc] for k, v in self.cmds.items()}, dict(self.meta))

    # ------------------------------------------------------------------ checks shared by the fits
    def require(self, min_duration: float, min_states: int, what: str) -> None:
        """Refuse a log that is too short, has non-finite values, or runs backwards / has gaps."""
        if self.n_states < min_states or self.duration < min_duration:
            raise CalibrationError(
                f"{what}: log too short ({self.n_states} states over {self.duration:.2f} s; need at least "
                f"{min_states} states over {min_duration:.2f} s). Run the routine longer (--duration) or check "
                "that LowState arrives at 500 Hz.")
        for k in ("q", "dq", "quat", "gyro", "acc"):
            if not np.isfinite(self.states[k]).all():
                raise CalibrationError(f"{what}: non-finite values in the logged {k}; check the robot's sensors")
        dt = np.diff(self.states["tick"])
        if (dt <= 0).any():
            raise CalibrationError(f"{what}: LowState ticks do not increase ({int((dt <= 0).sum())} times): "
                                   "a restarted robot or mixed logs")
        gap = float(np.mean(dt > 2.5 * np.median(dt)))
        if gap > 0.05:
            raise CalibrationError(f"{what}: {gap:.0%} of LowStates missing (gaps in the tick sequence); "
                                   "the link drops samples: fix the network before calibrating")

    # ------------------------------------------------------------------ files
    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {f"s_{k}": v for k, v in self.states.items()}
        arrays.update({f"c_{k}": v for k, v in self.cmds.items()})
        np.savez_compressed(path, name=self.name, meta=json.dumps(self.meta, default=json_default), **arrays)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "RunLog":
        with np.load(path, allow_pickle=False) as z:
            st = {k[2:]: z[k] for k in z.files if k.startswith("s_")}
            cm = {k[2:]: z[k] for k in z.files if k.startswith("c_")}
            return cls(str(z["name"]), st, cm, json.loads(str(z["meta"])))
