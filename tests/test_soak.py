"""A 2-minute soak (`make soak MINUTES=2`): the deploy CLI against the sim bridge in real time, a scripted
remote running the stand motion again and again, pushes every 15 s. Memory after warm-up stays flat
(< 10 MB growth; the in-memory log of before grew ~1 MB/s = 90 MB here), the loop's own work per tick does
not grow from the first minute to the second, deadline misses stay a small fraction of the ticks, the
streamed log lost nothing.

Why the work median and not the miss count for "no growing misses": a miss is a wake-up more than a period
late, which on a shared 2-core CI machine is mostly what the host does to the process. Measured on CI
(stop 20): 89 misses in minute 0, 632 in minute 1, with 1250 of that minute's 30000 ticks never run (2.5 s
of the process not scheduled), at SCHED_FIFO; on this machine's 1 h soak minute 51 had 344 while a job on
the same core ended, the others 0-35 (results/soak_60min.json). A slowdown of the software itself (a
growing list, a leak the GC walks) raises the median of the loop's own work (wake to command sent), which
host stalls barely move."""
import json

import pytest

from deploy import soak
from robots import g1



def test_per_minute_hand_values():
    import numpy as np

    t = np.array([0.0, 0.002, 0.004, 60.0, 60.003])
    sent = t.copy()
    late = np.array([0.0, 0.003, 0.0, 0.0, 0.0025])  # two woke > 1 period (2 ms) late
    work = np.array([0.2, 0.4, 0.3, 0.5, np.nan])  # a tick cut by the end of the log has no work time
    pm = soak.per_minute(t, sent, late, work)
    assert [m["ticks"] for m in pm] == [3, 2] and [m["deadline_misses"] for m in pm] == [1, 1]
    assert abs(pm[0]["work_ms_p50"] - 0.3) < 1e-12 and pm[1]["work_ms_p50"] == pm[1]["work_ms_p99"] == 0.5
    # send intervals 2, 2, (59.996), 3 ms -> errors 0, 0, ..., 0.5 of the period
    assert pm[0]["stream_period_error_p50"] == 0.0 and abs(pm[1]["stream_period_error_p99"] - 0.5) < 1e-9
    assert soak.rss_growth([(0, 100.0), (30, 120.0), (60, 125.0), (90, 121.0)], 30) == 5.0


def test_stalls_hand_values():
    import numpy as np

    # 2 ms loop ticks over 2 s; LowState arrives every tick except a 60 ms gap ending at 0.300 s (which the loop, late
    # by 50 ms at 0.300 s, shares: the host) and a 120 ms gap ending at 0.800 s that the loop does not share
    t = np.round(np.arange(0, 2.0, 0.002), 6)
    state = np.arange(t.size)
    state[(t > 0.240) & (t < 0.300)] = state[t == 0.240][0]
    state[(t > 0.680) & (t < 0.800)] = state[t == 0.680][0]
    late = np.zeros(t.size)
    late[t == 0.300] = 0.050
    late[t == 1.500] = 0.045  # alone: no gap within 0.2 s
    st = soak.stalls(t, late, state)
    assert st["loop_late"] == 2 and st["loop_late_with_lowstate_gap"] == 1
    assert st["lowstate_gaps"] == 2 and st["lowstate_gaps_with_loop_late"] == 1, st
    assert abs(st["max_lowstate_gap_ms"] - 120.0) < 1e-6 and st["lowstate_gaps_over_100ms"] == 1
    pm = soak.per_minute(t, t, late, state_tick=state)
    assert abs(pm[0]["max_lowstate_gap_ms"] - 120.0) < 1e-6


def test_motions_are_counted_from_the_loops_transitions():
    # results/soak_60min_quiet.json's transitions: a stale_state trip at 56 s, then 59 min of damping and presses
    tr = [dict(time=0.0004, **{"from": "PASSIVE", "to": "STAND_UP"}), dict(time=2.5, **{"from": "STAND_UP", "to": "HOLD"}),
          dict(time=4.49, **{"from": "HOLD", "to": "POLICY"}), dict(time=8.49, **{"from": "POLICY", "to": "HOLD"}),
          dict(time=10.5, **{"from": "HOLD", "to": "POLICY"}), dict(time=55.96, **{"from": "POLICY", "to": "DAMPING"})]
    assert soak.motions_run({"transitions": tr}) == 2 and soak.damping_at({"transitions": tr}) == 55.96
    assert soak.motions_run({"transitions": tr[:4]}) == 1 and soak.damping_at({"transitions": tr[:4]}) is None
    assert soak.motions_run({}) == 0


@pytest.mark.dds
@pytest.mark.realtime
@pytest.mark.soak
def test_two_minute_soak(tmp_path, dds_domain):
    # the soak's SimClient lives in this process: it must use the process's one DDS domain (conftest)
    s = soak.run(2.0, domain=dds_domain, out_root=tmp_path, echo=print)
    assert json.loads(open(s["path"]).read())["per_minute"] == s["per_minute"]
    assert s["operator_error"] is None and s["exit_code"] == 0, s
    assert s["final_state"] != "DAMPING" and s["safety_events"] == [], s["safety_events"]
    assert s["damping_at_s"] is None and s["a_presses"] - 1 <= s["motions"] <= s["a_presses"], s
    assert s["motions"] >= 15 and s["pushes"] >= 7  # 6 s per cycle (4 s stand + 2 s HOLD), a push every 15 s
    assert s["log_dropped_chunks"] == 0 and s["log_bytes"] > 0
    full = [m for m in s["per_minute"] if m["complete"]]
    # Bounds a loaded shared 2-core machine cannot break; the figures themselves are printed below and are what
    # `make soak` records (results/soak_60min*.json). CI has lost 1250 of a minute's 30000 ticks (the process not
    # scheduled for 2.5 s) and missed 2.2 % of the deadlines of its worst minute; a stopped stream sends ~0 ticks.
    assert len(full) == 2 and all(m["ticks"] > 0.5 * 60 / g1.COMMAND_DT for m in full)
    assert full[1]["work_ms_p50"] <= 3.0 * full[0]["work_ms_p50"] + 0.05, full  # the software does not slow down
    assert all(m["deadline_misses"] < 0.5 * m["ticks"] for m in full), full
    assert s["rss_growth_after_warmup_mb"] < 10.0, s["rss_mb"]
    print(f"soak 2 min: RSS {s['rss_start_mb']:.1f} -> {s['rss_end_mb']:.1f} MB (growth after warm-up "
          f"{s['rss_growth_after_warmup_mb']:.2f} MB), misses per minute {[m['deadline_misses'] for m in full]}, "
          f"work p50 per minute {[round(m['work_ms_p50'], 3) for m in full]} ms, "
          f"period error p99 per minute {[round(m['stream_period_error_p99'], 3) for m in full]}, "
          f"log {s['log_bytes'] / 1e6:.1f} MB")


@pytest.mark.dds
@pytest.mark.realtime
@pytest.mark.soak
def test_stream_holds_under_two_busy_processes(tmp_path, fresh_domain):
    """Two spinning processes (one per core of this machine) beside the jump dry run: at SCHED_FIFO the
    500 Hz stream holds and no stale-state trip: the run ends in HOLD. The bounds separate the loop at
    SCHED_FIFO from one that lost it, not one machine's jitter from another's (that figure is bench.deploy's):
    measured here with the same two busy processes, SCHED_FIFO gives period error p99 0.11-0.19 and 0-6
    deadline misses of ~4500 ticks (CI: 0.44 and 2), SCHED_OTHER (cap_sys_nice dropped) p99 2.0-2.7 and
    105-112 misses. A FIFO thread that does nothing but sleep to 2 ms deadlines still wakes up to 3.9 ms
    late a few times in 10 s on this VM beside two busy processes."""
    import os

    from bench.deploy import contention_run
    from tests.test_deploy_support import run_cli, summary_of

    if os.geteuid() != 0:
        pytest.skip("SCHED_FIFO needs root (or rtprio limits) here")
    got = {}

    def dry_run():
        r = run_cli("--robot", "sim", "--motion", "hop", "--domain", fresh_domain, "--run-root", tmp_path, "--no-plot",
                    timeout=180)
        got["s"] = summary_of(r.stdout)
        return got["s"]

    out = contention_run(dry_run)
    s = got["s"]
    print(f"contention: stream period error p50/p99 {s['stream_period_error_p50']:.3f}/"
          f"{s['stream_period_error_p99']:.3f}, misses {s['deadline_misses']}, {s['scheduling']}")
    assert s["scheduling"].startswith("SCHED_FIFO")
    assert s["safety_events"] == [] and s["final_state"] == "HOLD", s["safety_events"]
    # The stream's figures are bench.deploy's (`make bench` prints them side by side with SCHED_OTHER); here only
    # what a loaded machine cannot break: the loop ran its ticks (a lost stream would trip stale_state above).
    assert out["deploy_contention_deadline_misses"] < 0.5 * s["ticks"], out


@pytest.mark.dds
@pytest.mark.realtime
def test_ctrl_c_ends_a_soak_with_a_partial_summary(tmp_path, fresh_domain):
    """SIGINT to `python -m deploy.soak` (an operator's Ctrl-C, or a shared machine's job control): the loop
    damps and writes its summary, soak.json says what ran (interrupted, minutes run), exit code 130."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    # its own session: a failed run is killed with its bridge and deploy children (no orphan on its domain)
    p = subprocess.Popen([sys.executable, "-m", "deploy.soak", "--minutes", "10", "--domain", str(fresh_domain),
                          "--out", str(tmp_path)],
                         cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not list(tmp_path.glob("*/*/log.mcap")):
            time.sleep(0.5)
        time.sleep(15)
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
        import os

        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert p.returncode == 130, out[-3000:]
    s = json.loads(next(tmp_path.glob("*/soak.json")).read_text())
    assert s["interrupted"] and s["minutes_requested"] == 10 and 0.2 < s["minutes"] < 1.5, s["minutes"]
    assert s["ticks"] > 0.2 * 60 / g1.COMMAND_DT and s["log_bytes"] > 0 and s["log_dropped_chunks"] == 0
    assert s["final_state"] == "DAMPING"  # Ctrl-C latches damping before the loop stops
