"""Does the host freeze? One probe process per core, pinned, at SCHED_FIFO 1 (below the deploy loop's 10 and the
bridge's 5, above everything at normal priority), each sleeping 1 ms again and again and recording every wake-up
more than 10 ms after its sleep should have ended (a stall's length is that lateness). A stall seen on every core
at the same time is the machine's (a VM whose vCPUs the hypervisor does not run), not any process's: that
separates the loop's deadline misses and stale-state trips on this VM from faults of the software (README, Robot
computer: the quiet hour).

    python -m bench.host_stalls --seconds 600 [--out results/host_stalls.json]    (make bench runs 20 s)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

SLEEP_S = 0.001
RECORD_OVER_S = 0.010
PRIORITY = 1


def probe(core: int, seconds: float) -> dict:
    """In this process: pin to `core`, SCHED_FIFO 1 when allowed, sleep 1 ms in a loop for `seconds`; the stalls
    as [start, length] in CLOCK_MONOTONIC seconds."""
    from deploy.realtime import boost_process

    os.sched_setaffinity(0, {core})
    sched = boost_process(os.getpid(), PRIORITY)  # this process has one thread
    stalls, n = [], 0
    mono = time.monotonic
    end = mono() + seconds
    t = mono()
    while t < end:
        time.sleep(SLEEP_S)
        t1 = mono()
        if t1 - t - SLEEP_S > RECORD_OVER_S:  # woke more than 10 ms after the sleep should have ended
            stalls.append([t, t1 - t - SLEEP_S])
        t, n = t1, n + 1
    return {"core": core, "scheduling": sched, "wakeups": n, "stalls": stalls}


def coincident(a: list, b: list, slack_s: float = 0.005) -> int:
    """How many of a's stalls overlap one of b's (intervals [start, start + length], `slack_s` either side)."""
    return sum(any(s0 - slack_s < s1 + l1 and s1 - slack_s < s0 + l0 for s1, l1 in b) for s0, l0 in a)


def measure(seconds: float, cores: list[int] | None = None) -> dict:
    cores = cores if cores is not None else sorted(os.sched_getaffinity(0))
    procs = [subprocess.Popen([sys.executable, "-m", "bench.host_stalls", "--worker", str(c), "--seconds",
                               f"{seconds:g}"], stdout=subprocess.PIPE, text=True,
                              cwd=str(Path(__file__).resolve().parents[1])) for c in cores]
    per = [json.loads(p.communicate(timeout=seconds + 60)[0]) for p in procs]
    out = {"seconds": seconds, "cores": cores, "scheduling": per[0]["scheduling"],
           "record_over_ms": RECORD_OVER_S * 1e3, "by_length": [], "per_core": []}
    for over_ms in (10, 40, 100):
        big = [[s for s in p["stalls"] if s[1] * 1e3 > over_ms] for p in per]
        row = {"over_ms": over_ms, "stalls_per_core": [len(b) for b in big]}
        if len(per) > 1:  # the first core's stalls that every other core shared
            row["on_every_core"] = sum(all(coincident([s], b) for b in big[1:]) for s in big[0])
        out["by_length"].append(row)
    for p in per:
        lengths = [s[1] for s in p["stalls"]]
        out["per_core"].append({"core": p["core"], "wakeups": p["wakeups"], "stalls_over_10ms": len(lengths),
                                "max_stall_ms": max(lengths) * 1e3 if lengths else 0.0})
    return out


def run() -> dict:
    """`make bench`'s 20-s probe (flat keys)."""
    m = measure(20.0)
    flat = {"host_probe_s": m["seconds"], "host_probe_scheduling": m["scheduling"],
            "host_max_stall_ms": max(c["max_stall_ms"] for c in m["per_core"])}
    for row in m["by_length"]:
        flat[f"host_stalls_over_{row['over_ms']}ms_per_core"] = row["stalls_per_core"]
        if "on_every_core" in row:
            flat[f"host_stalls_over_{row['over_ms']}ms_on_every_core"] = row["on_every_core"]
    return flat


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help="also write the JSON here")
    a = p.parse_args(argv)
    if a.seconds <= 0:
        p.error("--seconds must be > 0")
    if a.worker is not None:
        print(json.dumps(probe(a.worker, a.seconds)))
        return 0
    m = measure(a.seconds)
    for row in m["by_length"]:
        print(f"stalls over {row['over_ms']:3d} ms per core {row['stalls_per_core']}"
              + (f", on every core at once {row['on_every_core']}" if "on_every_core" in row else ""))
    print(json.dumps(m["per_core"]))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(m, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
