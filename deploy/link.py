"""DDS link to the robot (or the sim bridge): latest LowState in a lock-protected buffer with its
receive time, and a LowCmd writer (CRC filled, mode_machine copied from LowState, mode_pr 0,
motor mode 1 on the 29 motors).

DDS is initialised through unitree_sdk2py (`comm.dds.init_dds`, the process-wide
ChannelFactory) with the SDK's IDL types. Reading and writing use cyclonedds entities on that
factory's participant (`comm.dds.dds_participant()`: one participant per process) directly so the
wire bytes can be handled without cyclonedds' Python (de)serializer: a LowState_ is ~2 kB with 35
nested structs and costs ~0.5 ms to deserialize in Python, too much to do 500 times a second beside
the control loop. `hg.lowstate_record_from_cdr` and `hg.lowcmd_wire_sample` are
byte-exact with the SDK's encoding (tested by the bridge). Entities are deleted explicitly with
`dds_compat.delete_entity` (listener detached first), never left to the garbage collector.
"""
from __future__ import annotations

import threading
import time
from typing import Any, NamedTuple

import numpy as np

from comm import dds, dds_compat, hg
from comm.crc import struct_crc
from deploy import realtime
from robots import g1
from safety import Command

# send(at=...): the last this much of the wait before a timed write busy-waits (the loop's work starts
# deploy.loop.SEND_LEAD_S = 0.5 ms early, so a spin is at most that); measured, jump dry run beside two busy
# processes, 3 runs each: stream period error p99 0.068-0.115 writing right after the work, 0.093-0.107 sleeping
# to the deadline, 0.022-0.055 spinning to it
SEND_SPIN_S = 0.001


def parse_lowstate(payload: bytes) -> hg.LowStateArrays:
    """A raw rt/lowstate payload (XCDR1) as arrays; `crc_ok` tells whether its CRC holds.
    Raises ValueError for a payload that is no LowState_."""
    return hg.lowstate_arrays(hg.lowstate_record_from_cdr(payload))


class LowCmdBuilder:
    """A preallocated LowCmd_ record (hg.LOWCMD_DTYPE): per tick only q, dq, tau, kp, kd of the
    29 motors, mode_machine and the CRC change. Byte-identical to hg.lowcmd_record(...)."""

    def __init__(self) -> None:
        self.rec = hg.lowcmd_record(mode=hg.MOTOR_MODE_ENABLE, mode_pr=g1.MODE_PR)
        self._mc = self.rec["motor_cmd"]

    def build(self, cmd: Command, mode_machine: int) -> np.ndarray:
        n = g1.NUM_MOTORS
        mc = self._mc
        mc["q"][:n], mc["dq"][:n], mc["tau"][:n], mc["kp"][:n], mc["kd"][:n] = cmd.q, cmd.dq, cmd.tau, cmd.kp, cmd.kd
        self.rec["mode_machine"] = mode_machine
        self.rec["crc"] = struct_crc(self.rec)
        return self.rec


class LinkError(RuntimeError):
    """The link cannot be used as asked; the message says how to fix it."""


class StateSample(NamedTuple):
    state: hg.LowStateArrays
    rx_time: float  # time.monotonic() when the sample arrived
    seq: int  # count of accepted samples so far (changes when a new sample arrives)


class Link:
    """One per process. `latest()` is safe to call from the control thread at any rate."""

    def __init__(self, domain: int, interface: str | None) -> None:
        from cyclonedds.core import Listener
        from cyclonedds.qos import Policy, Qos
        from cyclonedds.sub import DataReader
        from cyclonedds.topic import Topic
        from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowCmd_, LowState_

        dds.init_dds(domain, interface)  # raises DDSInitError with the fix (interface list, ...)
        self.domain, self.interface = domain, interface
        self.participant = dds.dds_participant()
        self._state_topic = self._cmd_topic = None
        self._writer = self._reader = self._cmd_reader = None
        self._lock = threading.Lock()
        self._raw: bytes | None = None
        self._rx_time = 0.0
        self._seq = 0
        self.crc_errors = 0
        self.parse_errors = 0
        self._parsed: StateSample | None = None
        self._builder = LowCmdBuilder()
        self._cmd_seen = 0
        self._cmd_writers = 0  # other rt/lowcmd writers matched now (the reader's subscription-matched status)
        try:
            self._state_topic = Topic(self.participant, hg.TOPIC_LOWSTATE, LowState_)
            self._cmd_topic = Topic(self.participant, hg.TOPIC_LOWCMD, LowCmd_)
            qos = Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(1))
            self._reader = DataReader(self.participant, self._state_topic, qos,
                                      Listener(on_data_available=self._on_state))
            # A reader on rt/lowcmd that hears every other publisher, never our own writer (IgnoreLocal): pre-flight
            # refuses to start beside one, and the loop damps when one appears (`other_commanders`). Created now so
            # discovery has run by the time pre-flight looks.
            cmd_qos = Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(1), Policy.IgnoreLocal.Participant)
            self._cmd_reader = DataReader(self.participant, self._cmd_topic, cmd_qos,
                                          Listener(on_data_available=self._on_foreign_cmd,
                                                   on_subscription_matched=self._on_cmd_matched))
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ LowState
    @property
    def state_topic(self) -> Any:
        """The rt/lowstate Topic on this link's participant: put extra LowState readers on it (a
        second Topic of the same name on one participant is an error in cyclonedds)."""
        return self._state_topic

    def _on_state(self, reader: Any) -> None:
        payloads = dds_compat.take_raw_payloads(reader, 32)
        if not payloads:
            return
        now = time.monotonic()
        with self._lock:
            self._raw, self._rx_time = payloads[-1], now
            self._seq += len(payloads)

    def latest(self) -> StateSample | None:
        """The newest LowState with a valid CRC (parsed once per new sample), or None."""
        with self._lock:
            raw, rx, seq = self._raw, self._rx_time, self._seq
        if raw is None:
            return None
        if self._parsed is not None and self._parsed.seq == seq:
            return self._parsed
        try:
            st = parse_lowstate(raw)
        except ValueError:
            self.parse_errors += 1
            return self._parsed
        if not st.crc_ok:
            self.crc_errors += 1
            return self._parsed  # a corrupt sample is dropped; the watchdog sees the age grow
        self._parsed = StateSample(st, rx, seq)
        return self._parsed

    def wait_state(self, timeout: float) -> StateSample | None:
        end = time.monotonic() + timeout
        while True:
            s = self.latest()
            if s is not None or time.monotonic() >= end:
                return s
            time.sleep(0.005)

    def state_rate(self, window: float = 0.5) -> float:
        """LowState samples per second, counted over `window` seconds."""
        with self._lock:
            s0 = self._seq
        time.sleep(window)
        with self._lock:
            return (self._seq - s0) / window

    # ------------------------------------------------------------------ rt/lowcmd publishers
    def _on_foreign_cmd(self, reader: Any) -> None:
        self._cmd_seen += len(dds_compat.take_raw_payloads(reader, 32))

    def _on_cmd_matched(self, reader: Any, status: Any) -> None:
        self._cmd_writers = int(status.current_count)

    def other_lowcmd_publishers(self, listen_s: float = 0.3) -> tuple[int, int]:
        """(rt/lowcmd writers matched other than ours, their LowCmd samples heard in listen_s)."""
        seen0 = self._cmd_seen
        time.sleep(listen_s)
        return len(self._cmd_reader.get_matched_publications()), self._cmd_seen - seen0

    def other_commanders(self) -> tuple[int, int]:
        """(other rt/lowcmd writers matched now, their samples heard so far): two reads, cheap at any rate;
        (0, 0) after stop_listening_lowcmd."""
        if self._cmd_reader is None:
            return 0, 0
        return self._cmd_writers, self._cmd_seen

    def stop_listening_lowcmd(self) -> None:
        """After pre-flight: the rt/lowcmd reader would only hear our own commands."""
        r, self._cmd_reader = self._cmd_reader, None
        if r is not None:
            dds_compat.delete_entity(r)

    # ------------------------------------------------------------------ LowCmd
    def open_writer(self) -> None:
        """Create the rt/lowcmd writer (only after pre-flight: before this no command can leave)."""
        from cyclonedds.pub import DataWriter

        if self._writer is None:
            self._writer = DataWriter(self.participant, self._cmd_topic)

    def lowcmd_subscribers(self) -> int:
        return len(self._writer.get_matched_subscriptions()) if self._writer is not None else 0

    def send(self, cmd: Command, mode_machine: int, at: float | None = None) -> float:
        """Write one LowCmd (29 motors enabled, CRC filled); returns time.monotonic() after the write.
        `at` (time.monotonic): the sample is built now and written at that time (a busy wait for its last
        SEND_SPIN_S; at once if it has passed), so the stream's period carries neither the jitter of the work
        before it nor a sleep's wake-up."""
        if self._writer is None:
            raise LinkError("LowCmd writer not opened: pre-flight must pass first")
        sample = hg.lowcmd_wire_sample(self._builder.build(cmd, int(mode_machine)))
        if at is not None:
            realtime.wait_until(at, SEND_SPIN_S)
        self._writer.write(sample)
        return time.monotonic()

    def close(self) -> None:
        """Delete the writer and readers, then the topics, now (not at garbage collection, which
        may run in a DDS listener thread); the process's participant stays. Idempotent."""
        _delete_all(self, ("_writer", "_reader", "_cmd_reader", "_state_topic", "_cmd_topic"))


def _delete_all(owner: Any, names: tuple[str, ...]) -> None:
    """dds_compat.delete_entity on owner's attributes `names` (in order), each set to None first."""
    for name in names:
        ent = getattr(owner, name, None)
        setattr(owner, name, None)
        if ent is not None:
            try:
                dds_compat.delete_entity(ent)
            except Exception:  # noqa: BLE001 - best effort at shutdown
                pass


class LowCmdObserver:
    """Listens on rt/lowcmd (tests and benchmarks use it to prove what did or did not leave a loop):
    keeps recent commands and, cheaply, every change of command kind (position / damping / zero).
    Needs DDS initialised in this process (comm.dds.init_dds) on the loop's domain; its reader is
    on the process's participant (comm.dds.dds_participant)."""

    def __init__(self, domain: int, keep: int = 50000) -> None:
        import collections

        from cyclonedds.core import Listener
        from cyclonedds.qos import Policy, Qos
        from cyclonedds.sub import DataReader
        from cyclonedds.topic import Topic
        from cyclonedds.util import duration
        from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowCmd_

        self.participant = dds.dds_participant()
        if int(self.participant.domain_id) != domain:
            raise LinkError(f"LowCmdObserver on domain {domain}, but DDS is initialised in this process on "
                            f"domain {self.participant.domain_id} (one domain per process)")
        self._lock = threading.Lock()
        self.samples: collections.deque = collections.deque(maxlen=keep)  # (rx_time, record)
        self.changes: list[tuple[float, str]] = []  # (rx_time, kind) whenever the kind changes
        self.count = 0
        self.reader = None
        self._topic = Topic(self.participant, hg.TOPIC_LOWCMD, LowCmd_)
        try:
            qos = Qos(Policy.Reliability.Reliable(duration(seconds=1)), Policy.History.KeepLast(64))
            self.reader = DataReader(self.participant, self._topic, qos, Listener(on_data_available=self._on))
        except BaseException:
            self.close()
            raise

    def _on(self, reader: Any) -> None:
        now = time.monotonic()
        for raw in dds_compat.take_raw_payloads(reader, 64):
            try:
                rec = hg.lowcmd_record_from_cdr(raw)
            except ValueError:
                continue
            kind = record_kind(rec)
            with self._lock:
                self.samples.append((now, rec))
                self.count += 1
                if not self.changes or self.changes[-1][1] != kind:
                    self.changes.append((now, kind))

    def snapshot(self) -> list[tuple[float, np.ndarray]]:
        with self._lock:
            return list(self.samples)

    def first(self, kind: str, after: float) -> float | None:
        """rx time of the first command of `kind` received at or after `after` (None: not yet)."""
        with self._lock:
            changes = list(self.changes)
        for i, (t, k) in enumerate(changes):
            active_at_after = i + 1 == len(changes) or changes[i + 1][0] > after
            if k == kind and (t >= after or active_at_after):
                return max(t, after)
        return None

    def close(self) -> None:
        """Delete the reader, then its topic, now (see Link.close). Idempotent."""
        _delete_all(self, ("reader", "_topic"))


def record_kind(rec: np.ndarray) -> str:
    mc = rec["motor_cmd"][: g1.NUM_MOTORS]
    if np.all(mc["kp"] > 0):
        return "position"
    if np.all(mc["kp"] == 0):
        if np.all(mc["kd"] == 0):
            return "zero_torque"
        if np.all(mc["kd"] > 0):
            return "damping"
    return "other"
