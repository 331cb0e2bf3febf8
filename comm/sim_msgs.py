"""Sim-only DDS topics of the sim bridge, and a small client to drive a running bridge.

The robot's own topics (rt/lowstate, rt/lowcmd) are in `comm.hg`. These four exist only in
simulation; the bridge (sim/) serves them, and deploy uses them (through this module, never
through sim/) for dry runs and evaluation, never for control:

| topic | type | direction | what |
|---|---|---|---|
| `rt/sim/remote` | SimRemote_ | client -> bridge | virtual wireless remote (buttons, sticks) |
| `rt/sim/control` | SimControl_ | client -> bridge | reset, push, band, pause/resume LowState |
| `rt/sim/ground_truth` | SimGroundTruth_ | bridge -> client | base pose/velocity, foot contacts, time |
| `rt/sim/status` | SimStatus_ | bridge -> client | counters (accepted/rejected commands, ...) at 10 Hz |

Control ops (`SimControl_.op`, arguments in `value`): "reset"; "push" (value[0:3] force N in
world frame on the pelvis, value[3] duration s, default 0.1); "band" (value[0] 1 engage, 0
release); "pause_state" (value[0] seconds, 0 = until "resume_state"); "resume_state".
Every message carries a `seq`; the bridge reports the last one it applied in
SimStatus_.control_seq / remote_seq, which `SimClient` uses to confirm delivery.

These are plain cyclonedds entities (reliable, keep-all readers that take every sample), not
unitree_sdk2py channels: the SDK's listener takes one sample per notification, which can leave
a burst of one-off control messages unread.
"""
# (no `from __future__ import annotations`: cyclonedds resolves IdlStruct field annotations at runtime)

import collections
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import cyclonedds.idl.types as types
from cyclonedds.idl import IdlStruct

from comm import dds, dds_compat
from comm.remote import button_mask

TOPIC_REMOTE = "rt/sim/remote"
TOPIC_CONTROL = "rt/sim/control"
TOPIC_GROUND_TRUTH = "rt/sim/ground_truth"
TOPIC_STATUS = "rt/sim/status"

OP_RESET = "reset"
OP_PUSH = "push"
OP_BAND = "band"
OP_PAUSE_STATE = "pause_state"
OP_RESUME_STATE = "resume_state"
CONTROL_OPS = (OP_RESET, OP_PUSH, OP_BAND, OP_PAUSE_STATE, OP_RESUME_STATE)


@dataclass
class SimRemote_(IdlStruct, typename="g1_bcg.sim.SimRemote_"):
    """Virtual remote. Sticks persist; buttons are held for hold_s seconds of sim time
    (0 = until the next SimRemote_)."""

    seq: types.uint32
    buttons: types.uint16
    lx: types.float32
    rx: types.float32
    ry: types.float32
    l2: types.float32
    ly: types.float32
    hold_s: types.float32


@dataclass
class SimControl_(IdlStruct, typename="g1_bcg.sim.SimControl_"):
    seq: types.uint32
    op: str
    value: types.array[types.float64, 6]


@dataclass
class SimGroundTruth_(IdlStruct, typename="g1_bcg.sim.SimGroundTruth_"):
    """Truth for evaluation only. Frames: world z up; body = pelvis frame."""

    tick: types.uint32  # LowState tick (ms) of the same physics instant
    sim_time: types.float64  # s since the last reset
    clock: types.float64  # s since the bridge started (monotonic across resets)
    pos: types.array[types.float64, 3]  # pelvis origin, world
    quat: types.array[types.float64, 4]  # pelvis orientation w, x, y, z
    lin_vel_world: types.array[types.float64, 3]
    lin_vel_body: types.array[types.float64, 3]
    ang_vel_world: types.array[types.float64, 3]
    ang_vel_body: types.array[types.float64, 3]
    foot_contact: types.array[types.uint8, 2]  # left, right: any foot geom touching the floor
    foot_height: types.array[types.float64, 2]  # z of the left_foot / right_foot sites
    band: types.uint8  # elastic band engaged
    resets: types.uint32


@dataclass
class SimStatus_(IdlStruct, typename="g1_bcg.sim.SimStatus_"):
    tick: types.uint32
    sim_time: types.float64
    clock: types.float64
    lockstep: types.uint8
    band: types.uint8
    paused: types.uint8
    commanded: types.uint8  # a valid LowCmd was applied since the last reset
    cmd_received: types.uint64
    cmd_accepted: types.uint64
    cmd_rejected_crc: types.uint64
    cmd_rejected_mode_machine: types.uint64
    cmd_rejected_mode_pr: types.uint64
    cmd_rejected_nonfinite: types.uint64
    cmd_rejected_malformed: types.uint64
    cmd_dropped: types.uint64
    state_published: types.uint64
    state_dropped: types.uint64
    state_paused: types.uint64
    state_crc_corrupted: types.uint64
    overruns: types.uint64
    resets: types.uint32
    control_seq: types.uint32
    remote_seq: types.uint32
    max_abs_tau: types.float64  # largest |motor torque| applied at the last physics step (Nm)
    real_time_factor: types.float64  # sim time / wall time since start
    # Real-time loop, wall seconds since start: waiting for the state lock, stepping the physics,
    # writing LowState/ground truth to DDS, sleeping to the next deadline (what a slow bridge did).
    loop_lock_s: types.float64
    loop_step_s: types.float64
    loop_publish_s: types.float64
    loop_sleep_s: types.float64


def _qos(keep_all: bool) -> Any:
    from cyclonedds.qos import Policy, Qos
    from cyclonedds.util import duration

    history = Policy.History.KeepAll if keep_all else Policy.History.KeepLast(1)
    return Qos(Policy.Reliability.Reliable(duration(seconds=1)), history)


class SimTopics:
    """The sim-only topics on the process's DDS participant (after comm.dds.init_dds)."""

    def __init__(self) -> None:
        from cyclonedds.topic import Topic

        self.participant = dds.dds_participant()
        self.topics = {
            TOPIC_REMOTE: Topic(self.participant, TOPIC_REMOTE, SimRemote_),
            TOPIC_CONTROL: Topic(self.participant, TOPIC_CONTROL, SimControl_),
            TOPIC_GROUND_TRUTH: Topic(self.participant, TOPIC_GROUND_TRUTH, SimGroundTruth_),
            TOPIC_STATUS: Topic(self.participant, TOPIC_STATUS, SimStatus_),
        }
        self._entities: list[Any] = []

    def writer(self, name: str, keep_all: bool = True) -> Any:
        from cyclonedds.pub import DataWriter

        w = DataWriter(self.participant, self.topics[name], _qos(keep_all))
        self._entities.append(w)
        return w

    def reader(self, name: str, on_sample: Callable[[Any], None], keep_all: bool = True) -> Any:
        """Reader whose listener hands every valid sample to on_sample (listener thread)."""
        from cyclonedds.core import Listener
        from cyclonedds.sub import DataReader

        def on_data_available(reader: Any) -> None:
            while True:
                samples = reader.take(N=64)
                for s in samples:
                    if dds_compat.is_valid_sample(s):
                        on_sample(s)
                if len(samples) < 64:
                    return

        r = DataReader(self.participant, self.topics[name], _qos(keep_all),
                       Listener(on_data_available=on_data_available))
        self._entities.append(r)
        return r

    def close(self) -> None:
        """Delete the readers and writers, then the topics, now (see dds_compat.close_channel)."""
        for e in self._entities:
            dds_compat.delete_entity(e)
        self._entities.clear()
        for t in self.topics.values():
            dds_compat.delete_entity(t)
        self.topics.clear()

    def topic(self, name: str, data_type: Any) -> Any:
        """Another topic on this participant, deleted with the others by close()."""
        from cyclonedds.topic import Topic

        t = self.topics[name] = Topic(self.participant, name, data_type)
        return t

    def own(self, entity: Any) -> Any:
        """Delete `entity` (a reader or writer made on one of these topics) with the others by close()."""
        self._entities.append(entity)
        return entity


def wait_matched(writer: Any, timeout: float) -> bool:
    """Wait until the writer has a matched reader (messages written before are lost)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if writer.get_matched_subscriptions():
            return True
        time.sleep(0.01)
    return bool(writer.get_matched_subscriptions())


class SimClientError(RuntimeError):
    pass


class SimClient:
    """Drive a running sim bridge: virtual remote, reset, pushes, band, stale-state pauses,
    and read its ground truth and status. Initialises DDS with `comm.dds.init_dds`.

        client = SimClient(domain=1)
        client.press("Start")            # returns once the bridge applied it
        client.release_band(); client.push((0, 60, 0), 0.2)
        gt = client.ground_truth()       # latest SimGroundTruth_
    """

    def __init__(self, domain: int = dds.SIM_DOMAIN, interface: str | None = dds.SIM_INTERFACE,
                 *, gt_history: int = 0, timeout: float = 5.0):
        dds.init_dds(domain, interface)
        self.timeout = timeout
        self._topics = SimTopics()
        self._lock = threading.Lock()
        self._gt: SimGroundTruth_ | None = None
        self._status: SimStatus_ | None = None
        self._status_cond = threading.Condition(self._lock)
        self.gt_history: collections.deque | None = collections.deque(maxlen=gt_history) if gt_history else None
        self._seq = int(time.time_ns() % 1_000_000) * 1000  # distinct from other clients' seqs
        self._remote_w = self._topics.writer(TOPIC_REMOTE)
        self._control_w = self._topics.writer(TOPIC_CONTROL)
        self._topics.reader(TOPIC_GROUND_TRUTH, self._on_gt, keep_all=gt_history > 0)
        self._topics.reader(TOPIC_STATUS, self._on_status, keep_all=False)

    # -- readers
    def _on_gt(self, s: SimGroundTruth_) -> None:
        with self._lock:
            self._gt = s
            if self.gt_history is not None:
                self.gt_history.append(s)

    def _on_status(self, s: SimStatus_) -> None:
        with self._status_cond:
            self._status = s
            self._status_cond.notify_all()

    def ground_truth(self) -> SimGroundTruth_ | None:
        with self._lock:
            return self._gt

    def status(self) -> SimStatus_ | None:
        with self._lock:
            return self._status

    def wait_status(self, predicate: Callable[[SimStatus_], bool], timeout: float | None = None) -> SimStatus_:
        end = time.monotonic() + (self.timeout if timeout is None else timeout)
        with self._status_cond:
            while True:
                if self._status is not None and predicate(self._status):
                    return self._status
                left = end - time.monotonic()
                if left <= 0:
                    raise SimClientError(f"sim bridge status did not satisfy the condition in time; last: {self._status}")
                self._status_cond.wait(left)

    def wait_ground_truth(self, timeout: float | None = None) -> SimGroundTruth_:
        end = time.monotonic() + (self.timeout if timeout is None else timeout)
        while time.monotonic() < end:
            gt = self.ground_truth()
            if gt is not None:
                return gt
            time.sleep(0.01)
        raise SimClientError("no ground truth from the sim bridge: is it running on this domain?")

    # -- writers
    def _next_seq(self) -> int:
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        return self._seq

    def _send(self, writer: Any, msg: Any, field: str, wait: bool) -> None:
        if not wait_matched(writer, self.timeout):
            raise SimClientError(f"no sim bridge subscribed to {writer.topic.name if hasattr(writer, 'topic') else 'sim topic'}")
        writer.write(msg)
        if wait:
            self.wait_status(lambda s: getattr(s, field) == msg.seq)

    def control(self, op: str, values: Iterable[float] = (), wait: bool = True) -> None:
        if op not in CONTROL_OPS:
            raise ValueError(f"unknown sim control op {op!r}; ops are {CONTROL_OPS}")
        v = [float(x) for x in values][:6]
        msg = SimControl_(self._next_seq(), op, v + [0.0] * (6 - len(v)))
        self._send(self._control_w, msg, "control_seq", wait)

    def reset(self, wait: bool = True) -> None:
        self.control(OP_RESET, wait=wait)

    def push(self, force: Iterable[float], duration: float = 0.1, wait: bool = True) -> None:
        f = [float(x) for x in force]
        if len(f) != 3:
            raise ValueError("push force needs 3 components (N, world frame)")
        self.control(OP_PUSH, f + [duration], wait=wait)

    def release_band(self, wait: bool = True) -> None:
        self.control(OP_BAND, [0.0], wait=wait)

    def engage_band(self, wait: bool = True) -> None:
        self.control(OP_BAND, [1.0], wait=wait)

    def pause_state(self, seconds: float = 0.0, wait: bool = True) -> None:
        """Stop LowState publishing for `seconds` of sim time (0: until resume_state)."""
        self.control(OP_PAUSE_STATE, [seconds], wait=wait)

    def resume_state(self, wait: bool = True) -> None:
        self.control(OP_RESUME_STATE, wait=wait)

    def set_remote(self, buttons: int = 0, lx: float = 0.0, rx: float = 0.0, ry: float = 0.0,
                   l2: float = 0.0, ly: float = 0.0, hold_s: float = 0.0, wait: bool = True) -> None:
        msg = SimRemote_(self._next_seq(), buttons, lx, rx, ry, l2, ly, hold_s)
        self._send(self._remote_w, msg, "remote_seq", wait)

    def press(self, *buttons: str, hold_s: float = 0.2, wait: bool = True, **sticks: float) -> None:
        """Press buttons by name for hold_s seconds of sim time: press("L2", "B")."""
        self.set_remote(button_mask(*buttons), hold_s=hold_s, wait=wait, **sticks)

    def close(self) -> None:
        self._topics.close()
