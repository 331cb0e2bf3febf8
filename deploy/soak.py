"""Soak: the deploy loop against the sim bridge in real time for many minutes (`make soak MINUTES=60`).

The deploy CLI runs as its own process (as on the robot: `--robot sim --no-bridge --no-auto`) against a
bridge started here; this process is the operator: a scripted remote over the bridge's virtual remote
(Start, then A again and again: the motion, HOLD, the motion, ...) and pushes on the pelvis every
`push_every_s`, alternating in direction. The robot stays on the bridge's elastic band (PD-only HOLD on
the bridge model is not statically stable, README "Deploy"): a soak measures the software (memory,
timing, log), not balance. It samples the deploy process's RSS and the log's size while it runs, and
reads the per-minute timing from the streamed log afterwards. Writes runs/soak/<stamp>/soak.json:

  rss_mb [[t, MB], ...] while the loop runs, rss_growth_after_warmup_mb (max RSS after warm-up - RSS at
  warm-up), rss_after_loop_mb (the summary reading the log back, after the loop),
  per_minute [{minute, ticks, deadline_misses (woke > 1 period late), stream_period_error_p99, work_ms_p50,
  max_lowstate_gap_ms, ...}], stalls (loop wake-ups and LowState gaps over 40 ms, and how many coincide:
  both processes stalled at once is the host),
  log_bytes, log_mb_per_min, log_dropped_chunks, motions (run by the loop), a_presses, damping_at_s (loop time of
  the first DAMPING, or null), pushes, final_state, safety_events, deploy summary

Ctrl-C (SIGINT) ends a soak early: the loop damps and writes its summary, and soak.json reports what ran
(`interrupted: true`, `minutes` = the time it ran, `minutes_requested`); exit code 130.

    python -m deploy.soak --minutes 60 [--motion stand] [--push-every-s 15] [--out runs/soak]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from comm import dds
from deploy.log import read_log
from robots import g1
from robots.run_files import stamped_dir

REPO = Path(__file__).resolve().parents[1]
SOAK_DIR = REPO / "runs" / "soak"
WARMUP_S = 30.0  # RSS growth is measured from here (imports, DDS discovery, first chunks, caches filled)
BRIDGE_PRIORITY = 5  # as deploy.cli: the bridge stands in for the robot's real-time firmware
STAND_UP_S = 2.5


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def lowstate_arrivals(t: np.ndarray, state_tick: np.ndarray) -> np.ndarray:
    """Loop times of the ticks at which a new LowState (a new robot tick counter) was first seen."""
    return t[np.flatnonzero(np.diff(state_tick) != 0) + 1] if len(t) > 1 else t[:0]


def stalls(t: np.ndarray, lateness: np.ndarray, state_tick: np.ndarray, over_s: float = 0.04,
           window_s: float = 0.2) -> dict:
    """Whose stall was it? Loop wake-ups more than `over_s` late and gaps between LowState arrivals longer than
    `over_s`, and how many of each have one of the other within `window_s`. The loop and the bridge (or the
    robot) are separate processes; both stalling at once is the host's doing (here: this VM), one alone is that
    process's (or its link's)."""
    arr = lowstate_arrivals(t, state_tick)
    gaps = np.diff(arr)
    gap_end = arr[1:][gaps > over_s]
    gap_start = gap_end - gaps[gaps > over_s]
    late = t[lateness > over_s]
    near_gap = [bool(np.any((gap_end > x - window_s) & (gap_start < x + window_s))) for x in late]
    near_late = [bool(np.any((late > a - window_s) & (late < b + window_s))) for a, b in zip(gap_start, gap_end)]
    return {"over_ms": over_s * 1e3, "window_ms": window_s * 1e3,
            "loop_late": int(len(late)), "loop_late_with_lowstate_gap": int(sum(near_gap)),
            "lowstate_gaps": int(len(gap_end)), "lowstate_gaps_with_loop_late": int(sum(near_late)),
            "max_lowstate_gap_ms": float(gaps.max() * 1e3) if gaps.size else None,
            "lowstate_gaps_over_100ms": int(np.sum(gaps > 0.1))}


def per_minute(t: np.ndarray, sent: np.ndarray, lateness: np.ndarray, work_ms: np.ndarray | None = None,
               period: float = g1.COMMAND_DT, state_tick: np.ndarray | None = None) -> list[dict]:
    """Per minute of run time: ticks, deadline misses (woke more than one period late, as safety's
    DeadlineWatchdog counts), |send interval - period| / period p50 / p99, worst lateness, and the loop's
    own work per tick (wake to command sent, ms) p50 / p99, and with `state_tick` (LowState's tick counter per
    loop tick) the longest gap between LowState arrivals (ms; the stale-state watchdog trips at 100). Misses
    count what the host did to the process (a shared machine's stalls); the work median is what a slowdown of
    the software itself would grow."""
    out = []
    if len(t) == 0:
        return out
    arr = lowstate_arrivals(t, state_tick) if state_tick is not None else None
    err = np.abs(np.diff(sent) - period) / period
    minute = (t // 60).astype(int)
    for m in range(int(minute.max()) + 1):
        sel = np.flatnonzero(minute == m)
        if sel.size == 0:
            continue
        e = err[sel[sel < len(err)]]
        out.append({"minute": m, "ticks": int(sel.size), "complete": bool(t[sel[-1]] - t[sel[0]] > 59.0),
                    "deadline_misses": int(np.sum(lateness[sel] > period)),
                    "stream_period_error_p50": float(np.percentile(e, 50)) if e.size else None,
                    "stream_period_error_p99": float(np.percentile(e, 99)) if e.size else None,
                    "max_lateness_ms": float(np.max(lateness[sel]) * 1e3)})
        if work_ms is not None:
            w = work_ms[sel][np.isfinite(work_ms[sel])]
            out[-1]["work_ms_p50"] = float(np.percentile(w, 50)) if w.size else None
            out[-1]["work_ms_p99"] = float(np.percentile(w, 99)) if w.size else None
        if arr is not None:  # a gap belongs to the minute it ends in
            gaps = np.diff(arr)[(arr[1:] // 60).astype(int) == m]
            out[-1]["max_lowstate_gap_ms"] = float(gaps.max() * 1e3) if gaps.size else None
    return out


def rss_growth(samples: list[tuple[float, float]], warmup_s: float) -> float | None:
    """Max RSS after warm-up minus the first sample at or after warm-up (MB)."""
    after = [mb for t, mb in samples if t >= warmup_s]
    return float(max(after) - after[0]) if after else None


class Operator(threading.Thread):
    """The scripted remote and the pushes, on the bridge's SimClient, until `stop` is set."""

    def __init__(self, sim, motion_s: float, hold_s: float, push_every_s: float, push_n: float, t0: float) -> None:
        super().__init__(name="soak-operator", daemon=True)
        self.sim, self.motion_s, self.hold_s = sim, motion_s, hold_s
        self.push_every_s, self.push_n, self.t0 = push_every_s, push_n, t0
        self.stop = threading.Event()
        self.motions = self.pushes = 0
        self.error: str | None = None

    def run(self) -> None:
        try:
            self.sim.press("Start", hold_s=0.2)
            next_a = time.monotonic() + STAND_UP_S + self.hold_s
            next_push = time.monotonic() + STAND_UP_S + 1.0
            while not self.stop.wait(0.05):
                now = time.monotonic()
                if now >= next_a:  # HOLD -> POLICY; the motion ends in HOLD by itself
                    self.sim.press("A", hold_s=0.2)
                    self.motions += 1
                    next_a = now + self.motion_s + self.hold_s
                if self.push_every_s > 0 and now >= next_push:
                    sign = 1.0 if self.pushes % 2 == 0 else -1.0
                    fx, fy = (sign * self.push_n, 0.0) if self.pushes % 4 < 2 else (0.0, sign * self.push_n)
                    self.sim.push((fx, fy, 0.0), 0.2, wait=False)
                    self.pushes += 1
                    next_push = now + self.push_every_s
        except Exception as e:  # noqa: BLE001 - reported in soak.json
            self.error = f"{type(e).__name__}: {e}"


def run(minutes: float, motion: str = "stand", push_every_s: float = 15.0, push_n: float = 40.0,
        hold_s: float = 2.0, domain: int | None = None, out_root: Path | str | None = None,
        sample_s: float = 2.0, warmup_s: float = WARMUP_S, echo=print) -> dict:
    from comm.sim_msgs import SimClient
    from comm.sim_process import launch_bridge_process
    from deploy.realtime import boost_process
    from policies.artifact import load_artifact

    domain = int(domain if domain is not None else 100 + (os.getpid() + 30) % 116)
    out_dir = stamped_dir(out_root or SOAK_DIR)
    policy_dir = REPO / "policies" / "g1" / motion
    motion_s = load_artifact(policy_dir).spec.motion.duration
    run_s = minutes * 60.0
    with launch_bridge_process(["--gt-decimation", "50"], domain=domain) as bridge:
        echo(f"[soak] bridge on domain {domain}: {boost_process(bridge.proc.pid, BRIDGE_PRIORITY)}")
        dds.init_dds(domain, dds.SIM_INTERFACE)
        sim = SimClient(domain, timeout=10.0)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        # --no-ground-truth: as on the robot (the bridge's truth would be held in the loop's memory)
        cmd = [sys.executable, "-u", "-m", "deploy.cli", "--robot", "sim", "--no-bridge", "--no-auto",
               "--no-ground-truth", "--domain", str(domain), "--policy-dir", str(policy_dir), "--run-root",
               str(out_dir), "--max-run-s", f"{run_s:g}", "--quiet"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                cwd=str(REPO), stdin=subprocess.DEVNULL)
        t_start = time.monotonic()
        samples: list[tuple[float, float]] = []  # (s since the loop started, MB), while the loop runs
        post: list[tuple[float, float]] = []  # after it: the summary reads the log back (not the loop's memory)
        log_sizes: list[tuple[float, int]] = []
        op = None
        interrupted = None
        try:
            while proc.poll() is None and time.monotonic() - t_start < 60:  # the loop's log exists: it runs
                if list(out_dir.glob("*/log.mcap")):
                    break
                time.sleep(0.05)
            t0 = time.monotonic()
            op = Operator(sim, motion_s, hold_s, push_every_s, push_n, t0)
            op.start()
            next_echo = t0 + 60
            try:
                _sample(proc, op, t0, run_s, sample_s, out_dir, samples, post, log_sizes, next_echo, echo)
            except KeyboardInterrupt:  # Ctrl-C: the loop damps and writes its summary; the soak reports what ran
                interrupted = time.monotonic() - t0
                echo(f"[soak] interrupted after {interrupted / 60:.1f} min: stopping the loop, then the summary")
                for _ in range(2):  # deploy's first Ctrl-C latches DAMPING, the second stops the loop
                    if proc.poll() is None:
                        proc.send_signal(signal.SIGINT)
                        time.sleep(1.0)
            out, err = proc.communicate(timeout=60)
        finally:
            if op is not None:
                op.stop.set()
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=10)
            sim.close()
    summary_line = [ln for ln in out.splitlines() if ln.startswith("summary: ")]
    if not summary_line:
        raise RuntimeError(f"soak: the deploy run did not finish (exit {proc.returncode}):\n{out}\n{err[-3000:]}")
    s = json.loads(Path(summary_line[0][len("summary: "):]).read_text())
    log = read_log(s["run_dir"], {"tick": ["t", "sent", "lateness", "work_ms", "tick"]})
    pm = per_minute(log["t"], log["sent"], log["lateness"], log["work_ms"], state_tick=log["tick"])
    soak_min = minutes if interrupted is None else interrupted / 60
    soak = {
        "minutes": round(soak_min, 2), "minutes_requested": minutes,
        "interrupted": interrupted is not None, "motion": motion, "domain": domain, "exit_code": proc.returncode,
        "final_state": s["final_state"], "safety_events": s["safety_events"], "states_visited": s["states_visited"],
        # motions the loop ran (HOLD -> POLICY), not the A presses: after a trip the presses go on, the loop damps
        "motions": motions_run(s), "a_presses": op.motions if op else 0, "damping_at_s": damping_at(s),
        "pushes": op.pushes if op else 0, "operator_error": op.error if op else None,
        "push_n": push_n, "push_every_s": push_every_s,
        "ticks": s["ticks"], "deadline_misses": s["deadline_misses"],
        "stream_period_error_p50": s["stream_period_error_p50"], "stream_period_error_p99": s["stream_period_error_p99"],
        "compute_ms_p50": s["compute_ms_p50"], "compute_ms_p99": s["compute_ms_p99"],
        "compute_cpu_ms_p99": s["compute_cpu_ms_p99"], "scheduling": s.get("scheduling"),
        "warmup_s": warmup_s, "rss_growth_after_warmup_mb": rss_growth(samples, warmup_s),
        "rss_start_mb": samples[0][1] if samples else None, "rss_end_mb": samples[-1][1] if samples else None,
        "rss_max_mb": max(mb for _, mb in samples) if samples else None,
        "rss_after_loop_mb": max(mb for _, mb in post) if post else None,
        "log_bytes": s.get("log_bytes"), "log_mb_per_min": (s.get("log_bytes") or 0) / 1e6 / max(soak_min, 1e-9),
        "log_chunks": s.get("log_chunks"), "log_dropped_chunks": s.get("log_dropped_chunks"),
        "stalls": stalls(log["t"], log["lateness"], log["tick"]), "per_minute": pm, "rss_mb": samples,
        "log_size_bytes": log_sizes[:: max(1, len(log_sizes) // 400)],
        "deploy_summary": str(Path(s["run_dir"]) / "summary.json"),
    }
    path = out_dir / "soak.json"
    path.write_text(json.dumps(soak, indent=1) + "\n")
    soak["path"] = str(path)
    return soak


def motions_run(summary: dict) -> int:
    """How many motions the loop started (HOLD -> POLICY transitions in its summary)."""
    return sum(1 for tr in summary.get("transitions", []) if tr["from"] == "HOLD" and tr["to"] == "POLICY")


def damping_at(summary: dict) -> float | None:
    """Loop time (s) of the first transition to DAMPING, None when it never damped."""
    return next((tr["time"] for tr in summary.get("transitions", []) if tr["to"] == "DAMPING"), None)


def _sample(proc, op, t0, run_s, sample_s, out_dir, samples, post, log_sizes, next_echo, echo) -> None:
    """RSS and log size every sample_s while the deploy process runs (a progress line a minute)."""
    while proc.poll() is None:
        t = time.monotonic() - t0
        mb = rss_mb(proc.pid)
        if mb is not None:
            (samples if t < run_s - 0.5 else post).append((round(t, 2), round(mb, 2)))
        logs = list(out_dir.glob("*/log.mcap"))
        if logs:
            log_sizes.append((round(t, 2), logs[0].stat().st_size))
        if time.monotonic() >= next_echo:
            echo(f"[soak] {t / 60:5.1f} min: RSS {mb:.1f} MB, log {log_sizes[-1][1] / 1e6:.1f} MB, "
                 f"A presses {op.motions}, pushes {op.pushes}")
            next_echo += 60
        time.sleep(sample_s)


def _mb(x: float | None, digits: int = 1) -> str:
    return "n/a (shorter than the warm-up)" if x is None else f"{x:.{digits}f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--motion", default="stand", help="policies/g1/<motion>, run again and again")
    p.add_argument("--push-every-s", type=float, default=15.0)
    p.add_argument("--push-n", type=float, default=40.0, help="push force (N, 0.2 s)")
    p.add_argument("--domain", type=int, default=None)
    p.add_argument("--out", default=None, help="parent of <stamp>/soak.json (default runs/soak)")
    p.add_argument("--results", default=None, help="also write the soak summary here (e.g. results/soak_60min.json)")
    a = p.parse_args(argv)
    # a soak started from a non-interactive shell's background job inherits SIGINT ignored (POSIX), and Python
    # then leaves it ignored: `kill -INT` would not end it. Ctrl-C must, however it was started.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    s = run(a.minutes, a.motion, a.push_every_s, a.push_n, domain=a.domain, out_root=a.out)
    if a.results:
        Path(a.results).parent.mkdir(parents=True, exist_ok=True)
        Path(a.results).write_text(Path(s["path"]).read_text())
    for m in (m for m in s["per_minute"] if m["complete"]):
        print(f"  minute {m['minute']:3d}: ticks {m['ticks']:6d}  misses {m['deadline_misses']:3d}  "
              f"period error p99 {m['stream_period_error_p99']:.3f}  max lateness {m['max_lateness_ms']:.2f} ms  "
              f"work p50/p99 {m['work_ms_p50']:.3f}/{m['work_ms_p99']:.3f} ms  "
              f"LowState gap max {m.get('max_lowstate_gap_ms') or 0:.1f} ms")
    st = s["stalls"]
    print(f"[soak] stalls over {st['over_ms']:g} ms: loop {st['loop_late']} ({st['loop_late_with_lowstate_gap']} with a "
          f"LowState gap within {st['window_ms']:g} ms: the host, not the loop), LowState gaps {st['lowstate_gaps']} "
          f"({st['lowstate_gaps_with_loop_late']} with the loop late too; longest {st['max_lowstate_gap_ms'] or 0:.1f} "
          f"ms, {st['lowstate_gaps_over_100ms']} over the 100 ms stale limit)")
    if s["damping_at_s"] is not None:
        ev = s["safety_events"][0] if s["safety_events"] else {}
        print(f"[soak] the loop went to DAMPING at {s['damping_at_s']:.1f} s ({ev.get('kind', 'no safety event')}: "
              f"{ev.get('detail', '')}); the {s['a_presses']} A presses after it ran no motion")
    print(f"[soak] {s['minutes']:g} min, {s['motions']} motions run, {s['pushes']} pushes: final {s['final_state']}, "
          f"safety events {len(s['safety_events'])}; RSS {_mb(s['rss_start_mb'])} -> {_mb(s['rss_end_mb'])} MB "
          f"(growth after {s['warmup_s']:g} s warm-up {_mb(s['rss_growth_after_warmup_mb'], 2)} MB); log "
          f"{s['log_bytes'] / 1e6:.1f} MB ({s['log_mb_per_min']:.2f} MB/min, {s['log_dropped_chunks']} chunks dropped)")
    print(f"soak: {s['path']}")
    if s["interrupted"]:
        return 130
    return 0 if s["final_state"] != "DAMPING" and not s["safety_events"] else 1


# The hour-long soaks kept in results/ (`make soak MINUTES=60 ARGS="--results results/<name>.json"`).
SOAK_RESULTS = ("soak_60min", "soak_60min_quiet", "soak_60min_quiet2")


def render_soak_hours_table(results: dict) -> str:
    """One row per soak.json ({results/<name>.json: soak.json}): how it ended and the software's figures."""
    head = ["soak (results file)", "minutes", "final state", "safety events", "ticks", "RSS growth after warm-up",
            "log", "compute p50 / p99", "stream period error p99", "deadline misses"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for stem in SOAK_RESULTS:
        s = results[f"results/{stem}.json"]
        events = ", ".join(f"{e['kind']} at {e['time']:.0f} s" for e in s["safety_events"]) or "0"
        lines.append("| " + " | ".join([
            f"`results/{stem}.json`", f"{s['minutes']:.1f}", s["final_state"], events, f"{s['ticks']:,}".replace(",", " "),
            f"{s['rss_growth_after_warmup_mb']:.2f} MB", f"{s['log_mb_per_min']:.2f} MB/min, {s['log_dropped_chunks']} dropped",
            f"{s['compute_ms_p50']:.3f} / {s['compute_ms_p99']:.3f} ms", f"{s['stream_period_error_p99']:.3f}",
            str(s["deadline_misses"])]) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
