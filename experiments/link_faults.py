"""The real robot's path on a wire, and faults on that wire (`make link-faults`): results/link_faults.json.

Each row is one run of `make deploy ROBOT=g1 NET_IF=<veth> MOTION=stand` (the scripted confirmation --yes,
no --auto: the buttons come over LowState from the remote) in the user's network namespace of an
experiments.wire.Wire, against the sim bridge in the robot's namespace at 192.168.123.161 on DDS domain 0,
with the operator (experiments.wire_operator) at the robot: Start, the stand-up, the gantry's band released,
A. One second into POLICY the fault starts:

  loss N %      nftables drops each packet either way with probability N / 100, until the run ends
  burst T ms    every packet either way dropped for T ms (an nft set element with a kernel timeout)
  rate R        tc tbf caps both ends' egress at R, until the run ends
  down T s      `ip link set <user end> down`, T s later up again (the cable pulled and plugged back)
  delay D ms    the bridge delays LowState and LowCmd D ms each (its --state/--cmd-latency-ms), whole run
  jitter J ms   ... plus a uniform [0, J] ms each, kept in order (its --jitter-ms)

Per row: what the loop did (the motion completed and the run ended in HOLD: `kept policy`; a safety trip:
`damped`, with the trip and the time from the fault's start to the loop's damping, and to the first damping
command that reached the robot); the worst command the loop sent (deploy's log) against safety/'s limits:
joint targets inside the soft limits, per-tick target steps within the rate limit, gains within
robots/gains.py's bounds; and whether the link recovered after the fault: the deploy's LowState fresh again
(the age of its latest sample under the stale limit) and commands reaching the robot again, in the state the
state machine allows (DAMPING is latched until a restart; HOLD after the motion).

    python -m experiments.link_faults [--faults loss5,burst100,...] [--out results/link_faults.json]

Root only (network namespaces, nftables: apt-get install nftables). Rows already in --out are kept unless
named with --faults. About 25 s a row.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np

from comm.sim_process import READY_LINE
from experiments.runs_common import REPO, rel
from deploy.realtime import boost_process
from experiments.wire import Wire, stop_process

OUT = REPO / "results" / "link_faults.json"
FAULT_AT_S = 1.0  # after A: the fault starts this far into POLICY
RECOVER_WINDOW_S = 1.0  # after the fault: commands must reach the robot, and LowState the deploy, within this
MOTION = "stand"  # 4 s of POLICY
# the deploy's --max-run-s: from its clock's origin, Start ~0.3 s, HOLD 2.8 s, A ~4.1 s, the motion's end ~8.1 s;
# then 0.9 s in HOLD, plus a fault's duration. Measured: in one 12 s run the bridge's G1, off its band, tipped past
# the tilt limit 1.65 s into the HOLD after the motion, with no fault (the dry runs end 0.5 s after the motion)
RUN_S = 9.0
# the operator's process at the robot's end at SCHED_FIFO, above the bridge (5) and below the loop (10) and its DDS
# threads (9): it watches the wire (what reached the robot, when). Seen on this shared machine, with another
# session's bridge and loop on the same core: at normal priority it heard 8 LowCmds in 1 s; at 4 (below the
# bridges) its `policy` line did not come for 120 s
OPERATOR_PRIORITY = 6


@dataclasses.dataclass(frozen=True)
class Fault:
    name: str
    label: str
    kind: str  # none | loss | burst | rate | down | delay
    value: float = 0.0
    rate: str = ""
    jitter_ms: float = 0.0

    @property
    def duration_s(self) -> float | None:
        """How long the fault lasts (None: until the run ends)."""
        return {"burst": self.value, "down": self.value}.get(self.kind)

    def bridge_args(self) -> list[str]:
        if self.kind != "delay":
            return []
        d = f"{self.value:g}"
        return ["--state-latency-ms", d, "--cmd-latency-ms", d] + (["--jitter-ms", f"{self.jitter_ms:g}"]
                                                                   if self.jitter_ms else [])


FAULTS = [Fault("none", "no fault", "none")]
FAULTS += [Fault(f"loss{p}", f"random loss {p} %", "loss", p) for p in (1, 5, 20, 50)]
FAULTS += [Fault(f"burst{ms}", f"loss burst {ms} ms", "burst", ms / 1e3) for ms in (20, 100, 300)]
FAULTS += [Fault(f"rate{r}", f"bandwidth cap {r}bit/s", "rate", rate=f"{r}bit") for r in ("20m", "5m", "1m")]
FAULTS += [Fault(f"down{s:g}", f"link down {s:g} s", "down", s) for s in (0.1, 1.0, 10.0)]
FAULTS += [Fault(f"delay{ms}", f"delay {ms} ms each way", "delay", ms) for ms in (5, 20, 50)]
FAULTS += [Fault("jitter20", "delay 5 ms + jitter 0-20 ms each way", "delay", 5, jitter_ms=20)]
BY_NAME = {f.name: f for f in FAULTS}


def python() -> str:
    return str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv" / "bin" / "python").exists() else sys.executable


class Lines:
    """A process's stdout lines, read in a thread; wait_for(prefix) returns the first line with it."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.lines = proc, []
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, prefix: str, timeout: float) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for line in list(self.lines):
                if line.startswith(prefix):
                    return line
            if self.proc.poll() is not None and not self._t.is_alive():
                break
            time.sleep(0.01)
        raise RuntimeError(f"no {prefix!r} line within {timeout:g} s (exit {self.proc.poll()}):\n"
                           + "\n".join(self.lines[-30:]))

    def text(self) -> str:
        self._t.join(2.0)
        return "\n".join(self.lines)


def start_bridge(w: Wire, extra=()) -> tuple[subprocess.Popen, Lines]:
    """The sim bridge at the robot's end, at SCHED_FIFO as `make deploy ROBOT=sim` runs it (the robot's
    firmware is real time; at normal priority beside the loop's SCHED_FIFO on a loaded core its physics lags)."""
    from deploy.cli import BRIDGE_PRIORITY
    from deploy.realtime import boost_process

    p = w.popen(w.robot_ns, [python(), "-u", "-m", "sim", "--domain", "0", "--interface", w.robot_if, "--quiet",
                             "--gt-decimation", "5", *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    lines = Lines(p)
    lines.wait_for(READY_LINE, 90)
    boost_process(p.pid, BRIDGE_PRIORITY)
    return p, lines


def deploy_argv(w: Wire, run_root: Path, max_run_s: float, extra: str = "") -> list[str]:
    """What a user types on the robot's network: make deploy ROBOT=g1 NET_IF=<iface> (confirmation by flag)."""
    args = f"--yes --max-run-s {max_run_s:g} --run-root {run_root} --no-plot {extra}".strip()
    return ["make", "-s", "-C", str(REPO), "deploy", "ROBOT=g1", f"NET_IF={w.user_if}", f"MOTION={MOTION}",
            f"ARGS={args}"]


def wire_run(w: Wire, run_dir: Path, inject: Callable[[], tuple[float, float | None]] | None = None,
             max_run_s: float = RUN_S, deploy_extra: str = "", during: Callable[[float], None] | None = None) -> dict:
    """One deploy run on the wire with the operator at the robot (a bridge must be running). `inject()` is
    called FAULT_AT_S into POLICY and returns the fault's (start, end) in time.monotonic() (end None: to the
    run's end); `during(t_policy)` instead, for anything else done in POLICY. Returns the raw material:
    the deploy's exit code, output, summary and log, the operator's report, the fault window."""
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    op_json = run_dir / "operator.json"
    op = w.popen(w.robot_ns, [python(), "-u", "-m", "experiments.wire_operator", "--interface", w.robot_if,
                              "--out", op_json], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                 cwd=REPO, env=env)
    op_lines = Lines(op)
    op_lines.wait_for("ready", 60)
    boost_process(op.pid, OPERATOR_PRIORITY)
    dep = w.popen(w.user_ns, deploy_argv(w, run_dir, max_run_s, deploy_extra), stdout=subprocess.PIPE,
                  stderr=subprocess.STDOUT, text=True, cwd=REPO, env=env, stdin=subprocess.DEVNULL)
    dep_lines = Lines(dep)
    window = (None, None)
    try:
        try:
            t_policy = float(op_lines.wait_for("policy", 120).split()[1])
        except RuntimeError as e:
            stop_process(dep)
            raise RuntimeError(f"{e}\n--- the deploy's output:\n{dep_lines.text()[-3000:]}") from None
        if inject is not None:
            time.sleep(max(0.0, t_policy + FAULT_AT_S - time.monotonic()))
            window = inject()
        elif during is not None:
            during(t_policy)
        dep.wait(max_run_s + 60)
    finally:
        stop_process(dep)
        time.sleep(0.3)
        stop_process(op)
    out = dep_lines.text()
    summary_line = [ln for ln in out.splitlines() if ln.startswith("summary: ")]
    summary = json.loads(Path(summary_line[-1].split(" ", 1)[1]).read_text()) if summary_line else None
    return {"code": dep.returncode, "output": out, "summary": summary, "fault_window": window,
            "operator": json.loads(op_json.read_text()) if op_json.exists() else None,
            "operator_output": op_lines.text()}


def worst_command(run_dir: str | Path) -> dict:
    """The deploy log's commands against safety/'s limits (robots/g1.py's soft limits, rate limit, gain bounds):
    the least margin to the soft joint limits (rad; < 0: outside), the largest per-tick target step over the
    rate limit (position ticks after the first of each stretch), the largest kp / KP_MAX and kd / KD_MAX, and
    the largest implied torque / limit from the measured state; `within_limits` for the first three."""
    from deploy.log import read_log
    from robots.gains import KD_MAX, KP_MAX
    from safety import Limits
    from safety.limits import implied_torque

    log = read_log(run_dir, fields={"tick": ["state", "q", "dq", "cmd_q", "cmd_kp", "cmd_kd"]})
    lim = Limits.default()
    pos = np.all(log["cmd_kp"] > 0, axis=1)
    q, kp, kd = log["cmd_q"][pos], log["cmd_kp"][pos], log["cmd_kd"][pos]
    margin = float(np.min(np.minimum(q - lim.q_min, lim.q_max - q))) if len(q) else None
    idx = np.flatnonzero(pos)
    both = np.flatnonzero(np.diff(idx) == 1)  # consecutive position ticks
    steps = np.abs(log["cmd_q"][idx[both] + 1] - log["cmd_q"][idx[both]]) / lim.max_step
    tau = np.abs(implied_torque(q, log["q"][pos], log["dq"][pos], kp, kd)) / lim.torque if len(q) else np.zeros(0)
    kd_all = log["cmd_kd"]
    out = {"position_ticks": int(pos.sum()), "soft_limit_margin_rad": margin,
           "step_over_rate_limit_max": float(steps.max()) if steps.size else 0.0,
           "kp_over_max": float(np.max(kp / KP_MAX)) if len(q) else 0.0,
           "kd_over_max": float(np.max(kd_all / KD_MAX)) if len(kd_all) else 0.0,
           "torque_over_limit_max": float(tau.max()) if tau.size else 0.0,
           "finite": bool(np.all(np.isfinite(log["cmd_q"])) and np.all(np.isfinite(log["cmd_kp"]))
                          and np.all(np.isfinite(kd_all)))}
    out["within_limits"] = bool(out["finite"] and (margin is None or margin >= -1e-9)
                                and out["step_over_rate_limit_max"] <= 1 + 1e-6 and out["kp_over_max"] <= 1 + 1e-9
                                and out["kd_over_max"] <= 1 + 1e-9)
    return out


def analyse(fault: Fault, raw: dict) -> dict:
    """One results row from wire_run's raw material."""
    s, op = raw["summary"], raw["operator"] or {}
    row: dict = {"fault": fault.name, "label": fault.label, "exit_code": raw["code"]}
    if s is None:
        row["error"] = raw["output"][-2000:]
        return row
    t0 = s["t0_monotonic"]
    f0, f1 = raw["fault_window"]
    stream = op.get("stream", {})
    row["commanded_window_s"] = [None if f0 is None else round(f0 - t0, 4), None if f1 is None else round(f1 - t0, 4)]
    back = f1  # when the link was back: the harness's `ip link set up` and carrier; a burst's kernel timeout
    if fault.kind == "delay":  # the whole run: counted from POLICY's start
        f0 = op.get("events", {}).get("policy")
    elif fault.kind in ("burst", "down") and f0 is not None:
        # the nft / ip call starts the fault some ms after the harness's clock read (a process start: 20-190 ms
        # measured here): the outage as the robot's end saw it, the gap in the deploy's commands, is the window
        gap = next((g for g in stream.get("gaps_over_20ms", []) if f0 - 0.01 <= g[0] <= f1 + 0.5), None)
        row["window_from"] = ("the gap in the deploy's commands at the robot's end" if gap else
                              "the harness's call (no gap over 20 ms at the robot's end)")
        if gap:
            f0, f1 = gap[0], gap[0] + gap[1]
            if fault.kind == "burst":
                back = f1
    events = s["safety_events"]
    trip = events[0] if events else None
    damped = s["final_state"] == "DAMPING" or trip is not None
    motion_done = any(t["from"] == "POLICY" and t["to"] == "HOLD" for t in s["transitions"])
    row.update(final_state=s["final_state"], states_visited=s["states_visited"],
               loop="damped" if damped else ("kept policy" if motion_done else "held"),
               trip=(f"{trip['kind']}: {trip['detail']}" if trip else None), deadline_misses=s["deadline_misses"],
               fault_start_s=None if f0 is None else round(f0 - t0, 4),
               fault_s=None if (f0 is None or f1 is None) else round(f1 - f0, 4))
    if trip is not None and f0 is not None:
        row["loop_damping_after_s"] = round(trip["time"] - (f0 - t0), 4)
    changes = stream.get("changes", [])
    if damped and f0 is not None:
        d = next((t for t, k in changes if k == "damping" and t >= f0), None)
        row["robot_damping_after_s"] = None if d is None else round(d - f0, 4)
    row["robot_max_command_gap_s"] = stream.get("max_gap_s")
    row["robot_commands"] = stream.get("received")
    row["pelvis_min_m"] = op.get("pelvis_min_m")
    row["run_dir"] = s["run_dir"]
    if row["fault_start_s"] is not None:
        row["during_fault"] = lowstate_during(s["run_dir"], row["fault_start_s"], row["fault_s"])
    row["worst_command"] = worst_command(s["run_dir"])
    row["recovered"] = recovery(s["run_dir"], t0, back, stream)
    return row


def lowstate_during(run_dir: str | Path, start_s: float, duration_s: float | None) -> dict:
    """What the loop received while the fault lasted (its log; times on its clock; duration None: to the end):
    new LowState samples per second, and the largest age of its latest sample (rx_age, the stale watchdog's)."""
    from deploy.log import read_log

    log = read_log(run_dir, fields={"tick": ["t", "rx_age", "new"]})
    end = log["t"][-1] if duration_s is None else start_s + duration_s
    m = (log["t"] >= start_s) & (log["t"] <= end)
    span = float(log["t"][m][-1] - log["t"][m][0]) if m.sum() > 1 else 0.0
    return {"lowstate_hz": round(float(log["new"][m].sum()) / span, 1) if span > 0 else None,
            "rx_age_max_ms": round(float(log["rx_age"][m].max()) * 1e3, 1) if m.any() else None}


def recovery(run_dir: str, t0: float, fault_end: float | None, stream: dict) -> dict | None:
    """After a fault that ended: the first tick whose LowState is fresh again (rx_age under the stale limit)
    and whether the robot received commands within RECOVER_WINDOW_S (the operator's gaps)."""
    if fault_end is None:
        return None
    from deploy.log import read_log
    from safety import WatchdogConfig

    log = read_log(run_dir, fields={"tick": ["t", "rx_age"]})
    end = fault_end - t0
    fresh = np.flatnonzero((log["t"] >= end) & (log["rx_age"] < WatchdogConfig().stale_s))
    state_back = float(log["t"][fresh[0]] - end) if fresh.size else None
    last = stream.get("last")
    gaps = [g for g in stream.get("gaps_over_20ms", []) if g[0] <= fault_end <= g[0] + g[1] + 1e-3]
    cmd_back = (gaps[0][0] + gaps[0][1] - fault_end) if gaps else 0.0
    ok = (state_back is not None and state_back <= RECOVER_WINDOW_S and last is not None and last > fault_end
          and cmd_back <= RECOVER_WINDOW_S)
    return {"lowstate_fresh_after_s": None if state_back is None else round(state_back, 4),
            "commands_at_robot_after_s": round(max(0.0, cmd_back), 4), "ok": bool(ok)}


def inject_for(w: Wire, fault: Fault) -> Callable[[], tuple[float, float | None]] | None:
    if fault.kind in ("none", "delay"):
        return None
    if fault.kind in ("loss", "rate"):  # until the run ends
        def start() -> tuple[float, None]:
            t = time.monotonic()
            w.loss(fault.value) if fault.kind == "loss" else w.rate_limit(fault.rate)
            return t, None

        return start
    if fault.kind == "burst":
        def burst() -> tuple[float, float]:
            t = w.burst(fault.value)
            return t, t + fault.value

        return burst

    def down() -> tuple[float, float]:
        t = time.monotonic()
        w.link(False)
        time.sleep(max(0.0, t + fault.value - time.monotonic()))
        w.link(True)
        return t, time.monotonic()

    return down


def disturbed(row: dict) -> str | None:
    """Why a row's run did not test its fault, else None: it failed, or the loop was not in POLICY when the
    fault started. Seen on this shared machine: another session's real-time runs on the same core delayed the
    operator's Start by 8.5 s, and the run (--max-run-s from the deploy's start) ended in STAND_UP."""
    if "error" in row:
        return "error"
    if "POLICY" not in row["states_visited"]:
        return f"POLICY never entered (states {row['states_visited']})"
    return None


def run_faults(faults: list[Fault], run_root: Path, on_row: Callable[[list[dict]], None] = lambda rows: None,
               attempts: int = 2) -> list[dict]:
    rows = []
    with Wire() as w:
        bridge_args, bridge = None, None
        for f in faults:
            if f.bridge_args() != bridge_args:
                if bridge is not None:
                    stop_process(bridge)
                bridge, _ = start_bridge(w, f.bridge_args())
                bridge_args = f.bridge_args()
            t = time.monotonic()
            earlier: list[str] = []
            for attempt in range(1, attempts + 1):
                print(f"[link-faults] {f.name}: {f.label} (attempt {attempt})", flush=True)
                try:
                    raw = wire_run(w, run_root / f"{f.name}-{attempt}", inject_for(w, f),
                                   max_run_s=RUN_S + (f.duration_s or 0.0))
                    row = analyse(f, raw)
                except Exception as e:  # noqa: BLE001 - one failed row must not lose the others
                    row = {"fault": f.name, "label": f.label, "error": str(e)[-3000:]}
                w.clear_faults()
                row["attempts"] = attempt
                row["earlier_attempts"] = list(earlier)
                why = disturbed(row)
                if why is None:
                    break
                row["disturbed"] = why
                earlier.append(why if why != "error" else f"error: {row['error'][:300]}")
                print(f"[link-faults]   disturbed ({why}): again", flush=True)
            row["wall_s"] = round(time.monotonic() - t, 1)
            rows.append(row)
            on_row(rows)
            print(f"[link-faults]   {row.get('loop')} {row.get('trip') or ''} "
                  f"worst within limits: {row.get('worst_command', {}).get('within_limits')}", flush=True)
    return rows


def render_link_faults_table(results: dict) -> str:
    """Markdown: one row per fault."""
    head = ("| fault | lasted | LowState at the loop during it: rate, oldest | loop | trip | damping after (loop / at "
            "robot) | worst command: soft-limit margin, step / rate limit, kp / max | within limits | recovered "
            "after the fault |\n|---|---|---|---|---|---|---|---|---|")
    lines = [head]

    def ms(x):
        return "-" if x is None else f"{x * 1e3:.0f} ms"

    for r in results["rows"]:
        if "error" in r:
            lines.append(f"| {r['label']} | | | error | | | | | |")
            continue
        w = r["worst_command"]
        rec = r.get("recovered")
        rec_s = "-" if rec is None else (
            f"{'yes' if rec['ok'] else 'no'}: LowState fresh {ms(rec['lowstate_fresh_after_s'])}, commands at the "
            f"robot {ms(rec['commands_at_robot_after_s'])}; {r['final_state']}")
        if rec is None:
            rec_s = f"(fault to the end) {r['final_state']}"
        damp = "-" if r["loop"] != "damped" else f"{ms(r.get('loop_damping_after_s'))} / {ms(r.get('robot_damping_after_s'))}"
        trip = (r["trip"] or "-").split(":")[0]
        margin = "-" if w["soft_limit_margin_rad"] is None else f"{w['soft_limit_margin_rad']:.3f} rad"
        dur = "to the end" if r.get("fault_s") is None else f"{r['fault_s']:.3g} s"
        if r.get("window_from", "").startswith("the harness"):
            dur += " (as asked: no gap over 20 ms at the robot's end)"
        if r.get("fault_start_s") is None:
            dur = "-"
        d = r.get("during_fault") or {}
        during = "-" if not d else (f"{d['lowstate_hz']:.0f} Hz, {d['rx_age_max_ms']:.0f} ms"
                                    if d.get("lowstate_hz") is not None else f"none, {d['rx_age_max_ms']:.0f} ms")
        lines.append(f"| {r['label']} | {dur} | {during} | {r['loop']} | {trip} | {damp} | "
                     f"{margin}, {w['step_over_rate_limit_max']:.2f}, "
                     f"{w['kp_over_max']:.2f} | {'yes' if w['within_limits'] else 'NO'} | {rec_s} |")
    return "\n".join(lines)


def reanalyse(res: dict) -> dict:
    """The rows again from their runs' files (run_dir: the deploy's summary and log, the operator's report
    beside it) and the harness's commanded fault windows: a new analysis without new runs."""
    rows = []
    for r in res["rows"]:
        if "run_dir" not in r:
            rows.append(r)
            continue
        summary = json.loads((Path(r["run_dir"]) / "summary.json").read_text())
        t0 = summary["t0_monotonic"]
        w0, w1 = r.get("commanded_window_s") or [r["fault_start_s"], None if r["fault_s"] is None
                                                 else r["fault_start_s"] + r["fault_s"]]
        if BY_NAME[r["fault"]].kind == "delay":
            w0 = w1 = None
        raw = {"code": r["exit_code"], "output": "", "summary": summary,
               "fault_window": (None if w0 is None else w0 + t0, None if w1 is None else w1 + t0),
               "operator": json.loads((Path(r["run_dir"]).parent / "operator.json").read_text())}
        new = analyse(BY_NAME[r["fault"]], raw)
        rows.append({**new, **{k: r[k] for k in ("attempts", "earlier_attempts", "wall_s") if k in r}})
    return {**res, "rows": rows}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.link_faults", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--faults", default=",".join(BY_NAME), help=f"comma-separated, of: {', '.join(BY_NAME)}")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--run-root", default=None, help="where the runs go (default: a temporary folder)")
    p.add_argument("--reanalyse", action="store_true", help="recompute --out's rows from their runs' files")
    args = p.parse_args(argv)
    if args.reanalyse:
        res = reanalyse(json.loads(Path(args.out).read_text()))
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
        print(render_link_faults_table(res))
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up the namespaces on a kill too
    names = [n.strip() for n in args.faults.split(",") if n.strip()]
    bad = [n for n in names if n not in BY_NAME]
    if bad:
        p.error(f"unknown faults {bad}; known: {', '.join(BY_NAME)}")
    out = Path(args.out)
    old = json.loads(out.read_text()) if out.exists() else {"rows": []}
    kept = {r["fault"]: r for r in old.get("rows", []) if r["fault"] not in names}
    res: dict = {}

    def write(new: list[dict]) -> None:  # after every row: an interrupted table keeps what it measured
        by = {**kept, **{r["fault"]: r for r in new}}
        res.update(generated=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                   command="make link-faults", motion=MOTION, fault_at_s_into_policy=FAULT_AT_S,
                   rows=[by[f.name] for f in FAULTS if f.name in by])
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1) + "\n")

    with tempfile.TemporaryDirectory(prefix="link-faults-") as tmp:
        write(run_faults([BY_NAME[n] for n in names], Path(args.run_root or tmp), on_row=write))
    print(render_link_faults_table(res))
    print(f"wrote {rel(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
