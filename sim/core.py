"""The bridge's message pipeline without DDS: LowCmd inbox -> drops/latency -> validation ->
physics; controls and the virtual remote; LowState capture -> noise -> latency -> pause/drop/CRC
corruption -> wire bytes.

`BridgeCore` is driven step by step (`advance`, `lockstep_command`) by sim.node's loops, by
calibration's in-process bridge and by tests; the same bytes go in and out as over DDS.
Threading: `submit_lowcmd` / `submit_control` only append to inboxes (safe from DDS listener
threads); everything else touches the simulation and runs with `lock` held by the caller, except
`lockstep_command`, which takes it.
"""
from __future__ import annotations

import collections
import math
import threading
from typing import Any, Callable, Sequence

import numpy as np

from comm import sim_msgs
from comm.hg import check_lowcmd, lowstate_cdr, lowstate_record
from robots.physics import quat_to_rpy
from sim.config import BridgeConfig
from plant.faults import DelayLine, corrupt_crc, delay_s, happens, noisy_sensors
from plant.robot import Plant
from sim.remote import VirtualRemote

COUNTERS = (
    "cmd_received", "cmd_accepted", "cmd_rejected_crc", "cmd_rejected_mode_machine",
    "cmd_rejected_mode_pr", "cmd_rejected_nonfinite", "cmd_rejected_malformed", "cmd_dropped", "state_published",
    "state_dropped", "state_paused", "state_crc_corrupted", "overruns", "control_rejected",
)


class BridgeCore:
    """Pipeline state around one `plant.robot.Plant` (set `sim` before stepping; sim.node builds it)."""

    def __init__(self, cfg: BridgeConfig = BridgeConfig(), log: Callable[[str], None] | None = None):
        if cfg.steps_per_cmd < 1 or cfg.gt_decimation < 1:
            raise ValueError("steps_per_cmd and gt_decimation must be >= 1")
        self.cfg = cfg
        self._log = log or ((lambda s: print(s, flush=True)) if cfg.verbose else (lambda s: None))
        self.lock = threading.Lock()  # the physics lock: the plant is touched only under it
        self.sim: Plant | None = None
        self.counters = dict.fromkeys(COUNTERS, 0)
        self._cmd_inbox: collections.deque = collections.deque(maxlen=1024)
        self._cmd_event = threading.Event()
        self._ctl_inbox: collections.deque = collections.deque(maxlen=1024)
        self._rng = np.random.default_rng(cfg.seed)
        self._remote = VirtualRemote(cfg.remote_script)
        self._cmd_delay = DelayLine()
        self._state_delay = DelayLine()
        self._paused_until: float | None = None
        self._control_seq = 0
        self._remote_seq = 0
        self._status_due = False
        self._last_state_payload: bytes | None = None
        self._n_states = 0

    @property
    def control_seq(self) -> int:
        """seq of the last rt/sim/control message applied."""
        return self._control_seq

    @property
    def remote_seq(self) -> int:
        """seq of the last rt/sim/remote message applied."""
        return self._remote_seq

    # -- inboxes (any thread): store only, never touch the simulation
    def submit_lowcmd(self, msg: Any) -> None:
        """A received LowCmd_ (raw payload or object) into the inbox; validated by the physics thread."""
        self._cmd_inbox.append(msg)
        self._cmd_event.set()

    def submit_control(self, kind: str, msg: Any) -> None:
        """A SimControl_ (kind "control") or SimRemote_ (kind "remote"), applied before the next step."""
        self._ctl_inbox.append((kind, msg))
        self._cmd_event.set()

    # -- physics thread (lock held by the caller)
    def pump_commands(self, received: Sequence[Any]) -> None:
        """Count, drop (cmd_drop) and delay (cmd_latency_ms) received LowCmds; apply the due ones that
        pass the robot's checks (comm.hg.check_lowcmd), count the rejected ones by reason."""
        sim, f, c = self.sim, self.cfg.faults, self.counters
        for msg in received:
            c["cmd_received"] += 1
            if happens(f.cmd_drop, self._rng):
                c["cmd_dropped"] += 1
                continue
            self._cmd_delay.push(sim.clock + delay_s(f.cmd_latency_ms, f.jitter_ms, self._rng), msg)
        for msg in self._cmd_delay.pop_due(sim.clock):
            arrays, reason = check_lowcmd(msg)
            if reason is None:
                c["cmd_accepted"] += 1
                sim.set_command(arrays)
            else:
                c[f"cmd_rejected_{reason}"] += 1

    def apply_controls(self) -> None:
        sim = self.sim
        while self._ctl_inbox:
            kind, msg = self._ctl_inbox.popleft()
            self._status_due = True
            if kind == "remote":
                self._remote.set(sim.clock, int(msg.buttons), float(msg.hold_s), lx=msg.lx, rx=msg.rx,
                                 ry=msg.ry, l2=msg.l2, ly=msg.ly)
                self._remote_seq = int(msg.seq)
                continue
            op, v = msg.op, [float(x) for x in msg.value]
            if op == sim_msgs.OP_RESET:
                sim.reset()
                self._cmd_delay.clear()
                self._state_delay.clear()
            elif op == sim_msgs.OP_PUSH:
                sim.push(v[:3], v[3] if v[3] > 0 else 0.1)
            elif op == sim_msgs.OP_BAND:
                sim.set_band(v[0] > 0.5)
            elif op == sim_msgs.OP_PAUSE_STATE:
                self._paused_until = sim.clock + v[0] if v[0] > 0 else math.inf
            elif op == sim_msgs.OP_RESUME_STATE:
                self._paused_until = None
            else:
                self.counters["control_rejected"] += 1
                self._log(f"sim bridge: warning: unknown control op {op!r} ignored")
            self._control_seq = int(msg.seq)

    def capture_state(self) -> np.ndarray:
        """LowState record of the current instant, with sensor noise (the CRC is filled)."""
        s = self.sim.sensor_state()
        q, dq, gyro, acc = noisy_sensors(s.q, s.dq, s.gyro, s.acc, self.cfg.noise, self._rng)
        return lowstate_record(s.tick, q, dq, s.tau, s.quat, gyro, acc, quat_to_rpy(s.quat), ddq=s.ddq,
                               remote=self._remote.encode())

    def lockstep_command(self, msg: Any) -> list[tuple[list[bytes], Any]]:
        """Lockstep for one received LowCmd_ (raw payload or object; rejected ones count too):
        `steps_per_cmd` physics steps, a LowState after the last. Takes the lock; returns what each
        step left to publish ([(LowState payloads, ground truth or None)]), published by the caller."""
        n = self.cfg.steps_per_cmd
        with self.lock:
            self.pump_commands([msg])
            return [self.advance(publish_state=i == n - 1, drain_inbox=False) for i in range(n)]

    def advance(self, publish_state: bool, drain_inbox: bool = True) -> tuple[list[bytes], Any]:
        """One physics step (lock held by the caller); returns (LowState payloads now due, ground truth
        or None) to publish after it."""
        sim = self.sim
        received = []
        while drain_inbox and self._cmd_inbox:
            received.append(self._cmd_inbox.popleft())
        self.pump_commands(received)
        if self._ctl_inbox:
            self.apply_controls()
        self._remote.update(sim.clock)
        sim.step()
        states: list[bytes] = []
        gt = None
        if publish_state:
            self._n_states += 1
            f = self.cfg.faults
            self._state_delay.push(sim.clock + delay_s(f.state_latency_ms, f.jitter_ms, self._rng), self.capture_state())
            if self._n_states % self.cfg.gt_decimation == 0:
                gt = sim.ground_truth()
        for rec in self._state_delay.pop_due(sim.clock):
            payload = self.finish_state(rec)
            if payload is not None:
                states.append(payload)
        return states, gt

    def finish_state(self, rec: np.ndarray) -> bytes | None:
        """Apply pause, drop and CRC corruption to a due LowState; its wire bytes or None."""
        f, c, clock = self.cfg.faults, self.counters, self.sim.clock
        if self._paused_until is not None:
            if clock < self._paused_until - 1e-9:
                c["state_paused"] += 1
                return None
            self._paused_until = None
        if happens(f.state_drop, self._rng):
            c["state_dropped"] += 1
            return None
        if happens(f.crc_corrupt, self._rng):
            rec = corrupt_crc(rec, self._rng)
            c["state_crc_corrupted"] += 1
        payload = lowstate_cdr(rec)
        self._last_state_payload = payload
        return payload
