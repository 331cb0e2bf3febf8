"""The one real-time helper of the robot-side loops (deploy's control loop, calibration sessions).

- `sleep_until(deadline)`: sleep to an absolute deadline (never sleep-after-work: the period
  does not grow by the work time). `wait_until(deadline, spin_s)`: the same, but the last `spin_s`
  busy-waits: a wake-up from sleep is late by up to ~0.2 ms beside busy processes on this VM, a spin
  by microseconds (deploy writes each LowCmd this way, after work started SEND_LEAD_S early).
- `enter(priority)` / `leave(section)` (or the context manager `realtime(priority)`): the
  calling thread gets SCHED_FIFO `priority` when permitted; the process's other threads that run
  at normal priority (DDS listener threads, which take the GIL for every LowState) get
  SCHED_FIFO `priority - 1`, so none is preempted while holding the GIL (priority inversion);
  GIL switch interval 0.5 ms (default 5 ms); the garbage collector's long-lived objects frozen.
  Best effort: without permission scheduling stays normal and the description says so.
  `leave` restores all of it.
- `boost_process(pid, priority)`: SCHED_FIFO for every thread of another process (the sim bridge
  standing in for the robot's real-time firmware).
- `pin_process(cpus, pid)`: CPU affinity for every thread of a process (deploy's `--cpus`: the loop on
  cores nothing else uses keeps its caches warm between ticks; on the robot, cores kept free with isolcpus).
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import sys
import threading
import time
from typing import Callable, Iterator

GIL_SWITCH_INTERVAL_S = 0.0005


def sleep_until(deadline: float, clock: Callable[[], float] = time.monotonic) -> float:
    """Sleep until `clock()` reaches `deadline` (no sleep when it has passed); returns clock()."""
    now = clock()
    if deadline > now:
        time.sleep(deadline - now)
        now = clock()
    return now


def wait_until(deadline: float, spin_s: float, clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> float:
    """Sleep until `spin_s` before `deadline`, then busy-wait for it; returns clock() (>= deadline)."""
    now = clock()
    if deadline - spin_s > now:
        sleep(deadline - spin_s - now)
        now = clock()
    while now < deadline:
        now = clock()
    return now


@dataclasses.dataclass
class RealtimeSection:
    """What `enter` changed, for `leave` to restore. `scheduling` describes the calling thread's."""

    scheduling: str
    saved: tuple | None
    boosted: list[int]
    switch_interval: float


def _get_scheduling() -> tuple | None:
    try:
        return os.sched_getscheduler(0), os.sched_getparam(0)
    except (AttributeError, OSError):
        return None


def _set_scheduling(saved: tuple | None) -> None:
    if saved is not None:
        try:
            os.sched_setscheduler(0, saved[0], saved[1])
        except OSError:
            pass


def _boost_other_threads(priority: int) -> list[int]:
    """SCHED_FIFO `priority` for this process's threads at normal priority, except the caller's."""
    me, done = threading.get_native_id(), []
    try:
        for tid in (int(t) for t in os.listdir(f"/proc/{os.getpid()}/task")):
            try:
                if tid != me and os.sched_getscheduler(tid) == os.SCHED_OTHER:
                    os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(priority))
                    done.append(tid)
            except OSError:
                pass
    except (OSError, AttributeError):
        pass
    return done


def _unboost_threads(tids: list[int]) -> None:
    for tid in tids:
        try:
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
        except OSError:
            pass


def _fifo_self(priority: int) -> str:
    if priority <= 0 or not hasattr(os, "sched_setscheduler"):
        return "normal"
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        return f"SCHED_FIFO {priority}"
    except (PermissionError, OSError, AttributeError):
        return "normal (no permission for SCHED_FIFO)"


def enter(priority: int) -> RealtimeSection:
    """Start a real-time section on the calling thread (see the module docstring)."""
    gc.collect()
    gc.freeze()  # long-lived objects out of the collector's way: shorter pauses during the loop
    saved = _get_scheduling()
    boosted = _boost_other_threads(priority - 1) if priority > 1 and hasattr(os, "sched_setscheduler") else []
    scheduling = _fifo_self(priority)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    return RealtimeSection(scheduling, saved, boosted, switch)


def leave(section: RealtimeSection) -> None:
    """Undo `enter`: collector, switch interval, this thread's scheduling, the other threads'."""
    gc.unfreeze()
    sys.setswitchinterval(section.switch_interval)
    _set_scheduling(section.saved)
    _unboost_threads(section.boosted)


@contextlib.contextmanager
def realtime(priority: int) -> Iterator[str]:
    """`enter(priority)` ... `leave`; yields the scheduling description."""
    section = enter(priority)
    try:
        yield section.scheduling
    finally:
        leave(section)


def boost_process(pid: int, priority: int) -> str:
    """SCHED_FIFO for every thread of process `pid` (the sim bridge: it stands in for the robot, whose
    firmware is real time; on a shared machine a starved bridge stops publishing LowState and the stale
    watchdog rightly trips). Best effort: returns what was done."""
    if priority <= 0 or not hasattr(os, "sched_setscheduler"):
        return "normal"
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        for tid in tids:
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(priority))
        return f"SCHED_FIFO {priority} ({len(tids)} threads)"
    except (PermissionError, OSError, ValueError):
        return "normal (no permission for SCHED_FIFO)"


def parse_cpus(text: str) -> frozenset[int]:
    """"1" or "2,3" or "2-3" -> {cores}; ValueError naming the cores this process may use."""
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    cpus: set[int] = set()
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise ValueError(f"--cpus {text!r}: expected core numbers like 1 or 2,3 or 2-3") from None
    if not cpus or not cpus <= allowed:
        raise ValueError(f"--cpus {text!r}: this process may run on cores {sorted(allowed)}; choose among them")
    return frozenset(cpus)


def pin_process(cpus: frozenset[int], pid: int = 0) -> str:
    """Affinity `cpus` for every thread of process `pid` (0: this one; threads started later inherit it).
    Returns what was done."""
    if not hasattr(os, "sched_setaffinity"):
        return "not pinned (no sched_setaffinity here)"
    pid = pid or os.getpid()
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = [pid]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass
    return f"cores {','.join(map(str, sorted(cpus)))}"
