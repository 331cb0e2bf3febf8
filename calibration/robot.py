"""The robot as the calibration routines see it: send a LowCmd, receive every LowState.

- `DDSRobot`: the deploy DDS link (`deploy.link.Link`: pre-flight checks, LowCmd writer with CRC
  and mode_machine) plus a recorder that keeps every LowState (the deploy link keeps only the
  newest). Works against the real G1 (domain 0, real time) and the sim bridge (lockstep or real
  time).
- `InProcessBridge`: the sim bridge's own lockstep step (`sim.core.BridgeCore`'s public pipeline,
  as bench/bridge.py uses it) without DDS: the same bytes in and out, for unit tests and
  offline experiments. Not a fake: the same physics, noise, latency and band as the bridge process.

Both expose: `lockstep`, `mode_machine`, `latest`, `send(cmd)`, `wait_states(after_tick, timeout)`,
`close()`.
"""
from __future__ import annotations

import collections
import dataclasses
import threading
import time
from typing import Any

from calibration.runlog import CalibrationError, State
from comm import dds_compat, hg
from deploy.link import LowCmdBuilder, parse_lowstate
from robots import g1
from safety import Command


def _state_of(st: hg.LowStateArrays, rx_time: float) -> State:
    return State(int(st.tick), st.q, st.dq, st.tau_est, st.quat, st.gyro, st.acc, float(rx_time))


class DDSRobot:
    """The robot (or a bridge) over DDS. Opening runs deploy's pre-flight checks: LowState within
    `state_timeout`, mode_machine 5 (29-DoF rev 1.0), finite values, no other rt/lowcmd publisher."""

    def __init__(self, domain: int, interface: str | None, lockstep: bool = False,
                 state_timeout: float = 5.0, listen_s: float = 0.5) -> None:
        from cyclonedds.core import Listener
        from cyclonedds.qos import Policy, Qos
        from cyclonedds.sub import DataReader

        from deploy import preflight

        self.lockstep = lockstep
        self._cv = threading.Condition()
        self._raw: collections.deque = collections.deque(maxlen=20000)
        self.crc_errors = 0
        try:
            self.link = preflight.open_link(domain, interface)
        except preflight.PreflightError as e:
            raise CalibrationError(str(e)) from e
        qos = Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(256))
        self._reader = DataReader(self.link.participant, self.link.state_topic, qos,
                                  Listener(on_data_available=self._on_state))
        try:
            first = preflight.run_preflight(self.link, state_timeout, listen_s)
        except preflight.PreflightError as e:
            self.close()
            raise CalibrationError(f"pre-flight: {e}") from e
        self.mode_machine = int(first.state.mode_machine)
        self.link.stop_listening_lowcmd()
        self.link.open_writer()
        self.latest: State = _state_of(first.state, first.rx_time)

    def _on_state(self, reader: Any) -> None:
        payloads = dds_compat.take_raw_payloads(reader, 256)
        if payloads:
            now = time.monotonic()
            with self._cv:
                self._raw.extend((p, now) for p in payloads)
                self._cv.notify_all()

    def _parse(self, items) -> list[State]:
        out = []
        for payload, rx in items:
            try:
                st = parse_lowstate(payload)
            except ValueError:
                continue
            if not st.crc_ok:
                self.crc_errors += 1
                continue
            out.append(_state_of(st, rx))
        return out

    def wait_states(self, after_tick: int | None, timeout: float) -> list[State]:
        """Every received LowState newer than `after_tick`, waiting up to `timeout` s for the first."""
        end = time.monotonic() + timeout
        out: list[State] = []
        while True:
            with self._cv:
                if not self._raw:
                    self._cv.wait(max(0.0, end - time.monotonic()))
                items = list(self._raw)
                self._raw.clear()
            out += [s for s in self._parse(items) if after_tick is None or s.tick > after_tick]
            if out or time.monotonic() >= end:
                break
        out.sort(key=lambda s: s.tick)
        if out:
            self.latest = out[-1]
        return out

    def send(self, cmd: Command) -> float:
        return self.link.send(cmd, self.mode_machine)

    def close(self) -> None:
        r, self._reader = getattr(self, "_reader", None), None
        if r is not None:
            dds_compat.delete_entity(r)
        if getattr(self, "link", None) is not None:
            self.link.close()


class InProcessBridge:
    """The sim bridge in this process, lockstep, no DDS (see the module docstring)."""

    lockstep = True

    def __init__(self, cfg=None) -> None:
        from sim.config import BandConfig, BridgeConfig
        from sim.core import BridgeCore
        from plant.robot import Plant

        if cfg is None:
            cfg = BridgeConfig(band=BandConfig(height=1.05))
        self.cfg = dataclasses.replace(cfg, lockstep=True, verbose=False)
        self.bridge = BridgeCore(self.cfg, log=lambda s: None)
        self.bridge.sim = self.sim = Plant(self.cfg.plant())
        self.mode_machine = g1.MODE_MACHINE_29DOF_REV1
        self._builder = LowCmdBuilder()
        self._queue: list[State] = []
        payload = self.bridge.finish_state(self.bridge.capture_state())
        self.latest = _state_of(parse_lowstate(payload), 0.0)
        self.commands_sent = 0

    def send(self, cmd: Command) -> float:
        rec = self._builder.build(cmd, self.mode_machine)
        payload = hg.lowcmd_cdr(rec)
        for states, _gt in self.bridge.lockstep_command(payload):
            for p in states:
                self._queue.append(_state_of(parse_lowstate(p), time.monotonic()))
        self.commands_sent += 1
        return time.monotonic()

    def wait_states(self, after_tick: int | None, timeout: float) -> list[State]:
        out = [s for s in self._queue if after_tick is None or s.tick > after_tick]
        self._queue.clear()
        if out:
            self.latest = out[-1]
        return out

    def close(self) -> None:
        pass

