"""holosoma-inference 0.1.3's two G1 whole-body-tracking dance models (PPO, FastSAC) through the real deploy
loop on the sim bridge (`make deploy ROBOT=sim POLICY=<file> ARGS="--max-run-s S"`), one after another:
falls, final state, safety events and the tracking error against the graph's own reference (joint RMS,
anchor orientation error; over the run and its worst second) from each run's summary.json.

    python -m experiments.tracking_policies [--max-run-s 70]    (make tracking-policies)
    python -m experiments.tracking_policies --diagnose-fastsac [--runs 5]

writes results/tracking_policies.json; `render_tracking_policies_table` renders it for docs/tracking_policies.md.

--diagnose-fastsac (key `fastsac_diagnosis`): the FastSAC model's pelvis tilt (robots.physics.tilt_angle, the
safety monitor's function, of the quaternion the runtime observes: the pelvis body in eval, the pelvis IMU
on the bridge) at every policy step, against the safety monitor's trip (safety.limits.TILT_LIMIT): in C
MuJoCo eval (no randomisation; nominal, then with command / state delays), in `--runs` deploy runs on the
sim bridge (read back from each run's log.mcap) and in the graph's reference (the extracted clip's root);
and PPO's eval tilt for comparison.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from experiments import holosoma_models
from experiments.runs_common import host_stalled, rerun_host_stalls
from policies.adapters import load_policy
from policies.adapters.holosoma import BUILT_IN_WBT
from robots.physics import tilt_angle
from safety.limits import TILT_LIMIT

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "results" / "tracking_policies.json"
# eval rows of each model with one holosoma setting changed by a sidecar (policies.adapters.holosoma)
# (a variant is run where it changes the action scale the adapter chose for the file)
VARIANTS = {"uniform_action_scale_1": {"action_scales_by_effort_limit_over_p_gain": False, "policy_action_scale": 1.0},
            "effort_rule": {"action_scales_by_effort_limit_over_p_gain": True, "policy_action_scale": 1.0}}


def run_deploy(policy: Path, max_run_s: float, attempts: int = 3) -> dict:
    """`make deploy ROBOT=sim POLICY=...` until a run is not ended by a host stall (runs_common.rerun_host_stalls),
    at most `attempts` runs; the last run's summary.json figures (or why there is none), `host_stalled` and the
    summaries of the stalled runs before it."""
    res, stalls = rerun_host_stalls(lambda: _deploy_once(policy, max_run_s), attempts)
    return {**res, "stalled_attempts": [s["summary"] for s in stalls if s["summary"] != res.get("summary")]}


def _deploy_once(policy: Path, max_run_s: float) -> tuple[dict | None, Path | None, dict]:
    cmd = ["make", "-s", "deploy", "ROBOT=sim", f"POLICY={policy}", f"ARGS=--max-run-s {max_run_s:g} --no-plot --quiet"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=max_run_s + 600)
    lines = [ln for ln in r.stdout.splitlines() if ln.strip().endswith("summary.json")]
    path = Path(lines[-1].split()[-1]) if lines else None
    if path is None or not path.is_file():
        return None, None, {"error": f"exit {r.returncode}: {(r.stderr or r.stdout).strip()[-400:]}",
                            "command": " ".join(cmd)}
    s = json.loads(path.read_text())
    tr = s.get("tracking") or {}
    return s, path, {"command": " ".join(cmd), "exit": r.returncode, "summary": str(path.relative_to(REPO)),
                     "fell": s["fell"], "final_state": s["final_state"], "states_visited": s["states_visited"],
                     "safety_events": [f"{e['kind']}: {e['detail']}"[:160] for e in s["safety_events"]],
                     "host_stalled": host_stalled(s),
                     "deadline_misses": s["deadline_misses"], "compute_ms_p99": s["compute_ms_p99"],
                     "policy_s": round(tr.get("policy_steps", 0) * 0.02, 2), "backend": s["policy"]["backend"],
                     "source": s["policy"]["source"], "tracking": tr}


def run_eval(policy: Path, duration_s: float) -> dict:
    """One `make eval POLICY=...` episode (no randomisation, no push; duration_s 0: the whole clip, then
    HOLD): its eval.json figures."""
    dur = f" --duration {duration_s:g}" if duration_s > 0 else ""
    cmd = ["make", "-s", "eval", f"POLICY={policy}", f"ARGS=--episodes 1{dur} --no-dr --no-video"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=3600)
    lines = [ln for ln in r.stdout.splitlines() if ln.strip().endswith("eval.json")]
    if r.returncode != 0 or not lines:
        return {"error": f"exit {r.returncode}: {(r.stderr or r.stdout).strip()[-400:]}", "command": " ".join(cmd)}
    s = json.loads(Path(lines[-1].strip()).read_text())
    e = s["per_episode"][0]
    return {"command": " ".join(cmd), "fell": e["fell"], "fell_at_s": e["fell_at_s"], "policy_s": e["policy_s"],
            "stood_at_end": e["stood_at_end"], "tracking": e["tracking"]}


def extract_row(policy: Path, name: str) -> dict:
    """`python -m motions extract` of the model's clip into .cache/holosoma/clips/, then its preview's figures."""
    out = holosoma_models.CACHE / "clips" / (Path(name).stem + ".npz")
    cmd = [sys.executable, "-m", "motions", "extract", str(policy), str(out), "--preview"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        return {"error": f"exit {r.returncode}: {(r.stderr or r.stdout).strip()[-400:]}"}
    from motions.library import load_motion, summary

    m = load_motion(str(out))
    s = summary(m)
    d = np.load(out)
    root = d["joint_pos"]
    tilt = np.degrees([tilt_angle(q) for q in root[:, 3:7]])
    return {"max_pelvis_tilt_deg": float(tilt.max()), "max_pelvis_tilt_at_s": float(np.argmax(tilt) / d["fps"][0]),
            "command": "python -m motions extract <onnx> <npz> --preview", "frames": int(root.shape[0]),
            "duration_s": s["duration_s"], "min_pelvis_height_m": s["min_pelvis_height_m"],
            "max_pelvis_height_m": s["max_pelvis_height_m"], "start_pelvis_height_m": float(root[0, 2]),
            "flight_time_s": s["flight_time_s"]}


PARTS = ("deploy", "eval", "variants", "extract")


def variant_file(f: Path, name: str, label: str) -> Path:
    """A copy of the model beside a holosoma sidecar (the built-in WBT config with VARIANTS[label] changed)."""
    d = holosoma_models.CACHE / "variants" / label
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / f, d / name)
    (d / "holosoma.yaml").write_text(yaml.safe_dump({**BUILT_IN_WBT, **VARIANTS[label]}))
    return (d / name).relative_to(REPO)


def run(max_run_s: float, eval_s: float, keep: dict | None = None, redo=PARTS,
        models=holosoma_models.WBT_MODELS) -> dict:
    """The deploy, eval, sidecar-variant (deploy and eval) and extraction rows of both models; rows of `keep`
    (an earlier results file) are kept for the parts not in `redo` and for the models not in `models`."""
    root = holosoma_models.models_dir()
    rows = {}
    for name in holosoma_models.WBT_MODELS:
        f = root / holosoma_models.WBT / name
        f = f.relative_to(REPO) if f.is_relative_to(REPO) else f
        old = (keep or {}).get("models", {}).get(name, {})
        if name not in models and old:
            rows[name] = old
            continue
        row = rows[name] = {k: v for k, v in old.items() if k in ("eval", "variants", "extract")}
        if "deploy" in redo or not old:
            print(f"[tracking] {name}: make deploy ROBOT=sim for {max_run_s:g} s", flush=True)
            row.update(run_deploy(f, max_run_s))
        else:
            row.update({k: v for k, v in old.items() if k not in ("eval", "variants", "extract", "eval_variants")})
        if "eval" in redo or "eval" not in row:
            print(f"[tracking] {name}: make eval", flush=True)
            row["eval"] = run_eval(f, eval_s)
        if "variants" in redo or "variants" not in row:
            row["variants"] = {}
            base = load_policy(REPO / f).spec.action_scales
            for label, side in VARIANTS.items():  # the same file with one holosoma setting changed by a sidecar
                v = variant_file(f, name, label)
                if load_policy(REPO / v).spec.action_scales == base:
                    continue
                print(f"[tracking] {name}: {label}: make deploy ROBOT=sim, make eval", flush=True)
                row["variants"][label] = {"sidecar": side, "deploy": run_deploy(v, max_run_s),
                                          "eval": run_eval(v, eval_s)}
        if "extract" in redo or "extract" not in row:
            row["extract"] = extract_row(f, name)
        print(f"[tracking] {name}: {json.dumps({k: row.get(k) for k in ('fell', 'final_state', 'policy_s')})}",
              flush=True)
    return {"eval_s": eval_s, "what": "holosoma-inference 0.1.3 G1 whole-body-tracking dance models on the sim bridge through the deploy "
                    "loop (make deploy ROBOT=sim POLICY=...); tracking error against the graph's own reference",
            "max_run_s": max_run_s, "models": rows}


# -- the FastSAC diagnosis (--diagnose-fastsac): pelvis tilt at every policy step against the safety trip
TRIP_DEG = math.degrees(TILT_LIMIT)  # the safety monitor's tilt trip (deg)
CONTROL_DT = 0.02  # s: one policy step of both dance models (50 Hz)
WINDOW_S = (30.0, 35.0)  # s in POLICY: the span before the table's bridge trip (34.8 s)
DIVERGE_DEG = 5.0  # a bridge run's tilt "leaves" eval's when they differ by more than this at one step
EVAL_DELAYS_MS = ((1.0, 0.0), (2.0, 0.0), (4.0, 0.0), (0.0, 1.0), (0.0, 2.0), (2.0, 2.0))  # (command, state)


def tilt_deg(quats) -> np.ndarray:
    """Tilt (deg) of each w, x, y, z quaternion row: robots.physics.tilt_angle, as the safety monitor computes it."""
    return np.degrees([tilt_angle(q) for q in np.asarray(quats, float)])


def sample_at(t_rows, x_rows, t_query) -> np.ndarray:
    """x at each query time from rows logged at the ascending times t_rows: the latest row at or before the
    query (the first row for a query before it)."""
    i = np.searchsorted(np.asarray(t_rows, float), np.asarray(t_query, float), side="right") - 1
    return np.asarray(x_rows)[np.clip(i, 0, len(t_rows) - 1)]


def peak(t, x, t0: float = -math.inf, t1: float = math.inf) -> tuple[float, float] | None:
    """(max of x over samples with t0 <= t < t1, its first time); None without samples there."""
    t, x = np.asarray(t, float), np.asarray(x, float)
    m = (t >= t0) & (t < t1)
    if not m.any():
        return None
    i = int(np.argmax(np.where(m, x, -np.inf)))
    return float(x[i]), float(t[i])


def first_over(t, x, limit: float) -> float | None:
    """The first t where x > limit; None if never."""
    i = np.flatnonzero(np.asarray(x, float) > limit)
    return float(np.asarray(t, float)[i[0]]) if len(i) else None


def first_divergence(t, a, b, tol: float) -> float | None:
    """The first t (over the steps both traces have) where |a - b| > tol; None if never."""
    n = min(len(t), len(a), len(b))
    return first_over(np.asarray(t)[:n], np.abs(np.asarray(a, float)[:n] - np.asarray(b, float)[:n]), tol)


def tilt_figures(t, tilt, ref_tilt) -> dict:
    """Max tilt (deg) and when, margin to the trip, the max over WINDOW_S, the first step past the trip, and the
    reference's tilt at the step of the max (ref_tilt: the reference's tilt at the same steps)."""
    mx, at = peak(t, tilt)
    w = peak(t, tilt, *WINDOW_S)
    rw = peak(t[:len(ref_tilt)], ref_tilt[:len(t)], *WINDOW_S)
    k = int(round(at / CONTROL_DT))
    return {"policy_s": round(float(t[-1]) + CONTROL_DT, 2), "max_tilt_deg": round(mx, 2), "max_tilt_at_s": round(at, 2),
            "margin_deg": round(TRIP_DEG - mx, 2),
            "reference_tilt_at_max_deg": round(float(ref_tilt[min(k, len(ref_tilt) - 1)]), 2),
            "window_max_tilt_deg": None if w is None else round(w[0], 2),
            "window_max_at_s": None if w is None else round(w[1], 2),
            "window_reference_max_deg": None if rw is None else round(rw[0], 2),
            "first_over_trip_s": first_over(t, tilt, TRIP_DEG)}


class _TiltRecorder:
    """A PolicyRuntime that records, at every policy step, the tilt of the quaternion it observes and the
    anchor orientation error of the step (everything else is the runtime's)."""

    def __init__(self, runtime):
        self.runtime, self.steps, self.tilt, self.anchor_err = runtime, [], [], []

    def __getattr__(self, name):
        return getattr(self.runtime, name)

    def step(self, step, q, dq, gyro, quat, *args, **kw):
        out = self.runtime.step(step, q, dq, gyro, quat, *args, **kw)
        self.steps.append(step)
        self.tilt.append(math.degrees(tilt_angle(quat)))
        self.anchor_err.append(math.degrees(self.runtime.tracking.anchor_ori_error))
        return out


def eval_tilt_trace(policy: Path, cmd_delay_ms: float = 0.0, state_delay_ms: float = 0.0) -> dict:
    """One C MuJoCo eval episode (eval.policy_eval.run_policy_episode: no randomisation, no push, the whole
    clip then HOLD) with the given command / state delays: the episode's figures and, per policy step,
    t (s), tilt (deg), anchor orientation error (deg)."""
    from eval.bridge_setup import BridgeSetup
    from eval.config import DRConfig, EvalConfig
    from eval.policy_eval import load, run_policy_episode
    from eval.sim import EvalSim
    from policies.runtime import PolicyRuntime

    cfg = EvalConfig(episodes=1, dr=DRConfig(enabled=False), video=False)
    rec = _TiltRecorder(PolicyRuntime(load(policy), hold_blend_s=cfg.hold_blend_s))
    setup = BridgeSetup(cmd_delay_s=cmd_delay_ms * 1e-3, state_delay_s=state_delay_ms * 1e-3)
    ep = run_policy_episode(EvalSim(setup), rec, cfg, 0)
    return {"fell": ep["fell"], "fell_at_s": ep["fell_at_s"], "t": np.asarray(rec.steps) * CONTROL_DT,
            "tilt": np.asarray(rec.tilt), "anchor_err": np.asarray(rec.anchor_err)}


def deploy_tilt_trace(run_dir: Path) -> dict:
    """A deploy run's pelvis tilt from its log.mcap: at every 2 ms tick in POLICY and the first tick after it
    (the one whose state the monitor tripped on; t from POLICY's first tick), and sampled at each policy step
    (the latest tick at or before it; t = step x CONTROL_DT)."""
    from deploy.log import read_log

    log = read_log(run_dir, fields={"tick": ["t", "state", "quat"], "policy": ["t", "step"]})
    i = np.flatnonzero(log["state"] == list(log["state_names"]).index("POLICY"))
    ticks = slice(i[0], min(i[-1] + 2, len(log["t"])))
    tilt = tilt_deg(log["quat"])
    return {"tick_t": log["t"][ticks] - log["t"][i[0]], "tick_tilt": tilt[ticks], "t": log["pol_step"] * CONTROL_DT,
            "tilt": sample_at(log["t"], tilt, log["pol_t"])}


def reference_tilt(policy: Path, name: str) -> np.ndarray:
    """The graph's reference pelvis tilt (deg) at every frame (= policy step): `python -m motions extract`'s root."""
    out = holosoma_models.CACHE / "clips" / (Path(name).stem + ".npz")
    if not out.is_file():
        from motions.tracking_onnx import extract

        extract(REPO / policy, out)
    return tilt_deg(np.load(out)["joint_pos"][:, 3:7])


def diagnose_fastsac(runs: int, max_run_s: float) -> dict:
    """Pelvis tilt of the FastSAC dance against the safety trip: eval (nominal and delayed), `runs` deploy runs on
    the sim bridge (time-aligned with nominal eval by policy step), the reference; PPO's eval for comparison."""
    root = holosoma_models.models_dir()
    files = {}
    for name in holosoma_models.WBT_MODELS:
        f = root / holosoma_models.WBT / name
        files[name] = f.relative_to(REPO) if f.is_relative_to(REPO) else f
    fs = "fastsac_g1_29dof_dancing.onnx"
    ref = {n: reference_tilt(f, n) for n, f in files.items()}
    r_mx, r_at = peak(np.arange(len(ref[fs])) * CONTROL_DT, ref[fs])
    out = {"command": f"python -m experiments.tracking_policies --diagnose-fastsac --runs {runs} --max-run-s {max_run_s:g}",
           "trip_deg": round(TRIP_DEG, 2), "window_s": list(WINDOW_S), "diverge_deg": DIVERGE_DEG,
           "reference": {"max_tilt_deg": round(r_mx, 2), "max_tilt_at_s": round(r_at, 2),
                         "window_max_tilt_deg": round(peak(np.arange(len(ref[fs])) * CONTROL_DT, ref[fs], *WINDOW_S)[0], 2)}}
    print(f"[diagnose] {fs}: make eval (C MuJoCo, nominal)", flush=True)
    ev = eval_tilt_trace(files[fs])
    a_mx, a_at = peak(ev["t"], ev["anchor_err"])
    out["eval"] = {"fell": ev["fell"], "fell_at_s": ev["fell_at_s"], **tilt_figures(ev["t"], ev["tilt"], ref[fs]),
                   "anchor_ori_err_max_deg": round(a_mx, 2), "anchor_ori_err_max_at_s": round(a_at, 2)}
    out["eval_delayed"] = []
    for cmd_ms, state_ms in EVAL_DELAYS_MS:
        print(f"[diagnose] {fs}: eval with command delay {cmd_ms:g} ms, state delay {state_ms:g} ms", flush=True)
        d = eval_tilt_trace(files[fs], cmd_ms, state_ms)
        out["eval_delayed"].append({"cmd_delay_ms": cmd_ms, "state_delay_ms": state_ms, "fell": d["fell"],
                                    "fell_at_s": d["fell_at_s"], **tilt_figures(d["t"], d["tilt"], ref[fs]),
                                    "diverges_from_eval_s": first_divergence(d["t"], d["tilt"], ev["tilt"], DIVERGE_DEG)})
    out["deploy"] = []
    for i in range(runs):
        print(f"[diagnose] {fs}: make deploy ROBOT=sim for {max_run_s:g} s ({i + 1}/{runs})", flush=True)
        r = run_deploy(files[fs], max_run_s)
        if "error" in r:
            out["deploy"].append(r)
            continue
        tr = deploy_tilt_trace(REPO / Path(r["summary"]).parent)
        tick = peak(tr["tick_t"], tr["tick_tilt"])
        over = first_over(tr["tick_t"], tr["tick_tilt"], TRIP_DEG)
        out["deploy"].append({"summary": r["summary"], "fell": r["fell"], "final_state": r["final_state"],
                              "safety_events": r["safety_events"], "deadline_misses": r["deadline_misses"],
                              **tilt_figures(tr["t"], tr["tilt"], ref[fs]),
                              "tick_max_tilt_deg": round(tick[0], 2), "tick_max_tilt_at_s": round(tick[1], 3),
                              "tick_first_over_trip_s": None if over is None else round(over, 3),
                              "tilt_at_start_deg": round(float(tr["tilt"][0]), 2),
                              "anchor_ori_err_worst_s_rad": r["tracking"].get("anchor_ori_err_worst_s_rad"),
                              "anchor_ori_err_worst_s_at": r["tracking"].get("anchor_ori_err_worst_s_at"),
                              "diverges_from_eval_s": first_divergence(tr["t"], tr["tilt"], ev["tilt"], DIVERGE_DEG)})
    out["eval_tilt_at_start_deg"] = round(float(ev["tilt"][0]), 2)
    ppo = "ppo_g1_29dof_dancing.onnx"
    print(f"[diagnose] {ppo}: make eval (C MuJoCo, nominal)", flush=True)
    pe = eval_tilt_trace(files[ppo])
    out["ppo_eval"] = {"fell": pe["fell"], "fell_at_s": pe["fell_at_s"], **tilt_figures(pe["t"], pe["tilt"], ref[ppo])}
    return out


def _fell(r: dict) -> str:
    if not r["fell"]:
        return "no"
    return f"yes ({r['fell_at_s']:.1f})" if r.get("fell_at_s") is not None else "yes"


def _f(x, fmt="{:.3f}"):
    return "-" if x is None else fmt.format(x)


def render_tracking_policies_table(results: dict) -> str:
    """Markdown table of results/tracking_policies.json."""
    head = ("| model | run | s in POLICY | fell (at s) | final state | joint RMS (rad) | worst second | anchor ori. err (rad) "
            "| worst second | safety events |\n|---|---|---|---|---|---|---|---|---|---|\n")
    rows = []
    for name, r in results["models"].items():
        rows += _rows(name, "make deploy ROBOT=sim", r)
        if "eval" in r:
            e = r["eval"]
            rows += _rows(name, "make eval (C MuJoCo)", _eval_row(e))
        for label, v in r.get("variants", {}).items():
            rows += _rows(name, f"make deploy ROBOT=sim, sidecar {label}", v["deploy"])
            rows += _rows(name, f"make eval, sidecar {label}", _eval_row(v["eval"]))
    ext = ["", "| model | `python -m motions extract`: frames | s | pelvis at start (m) | pelvis min - max (m) "
           "| reference's max pelvis tilt |", "|---|---|---|---|---|---|"]
    for name, r in results["models"].items():
        e = r.get("extract")
        if e and "error" not in e:
            ext.append(f"| {name} | {e['frames']} | {e['duration_s']:.2f} | {e['start_pelvis_height_m']:.3f} | "
                       f"{e['min_pelvis_height_m']:.3f} - {e['max_pelvis_height_m']:.3f} | "
                       f"{e['max_pelvis_tilt_deg']:.1f} deg at {e['max_pelvis_tilt_at_s']:.1f} s |")
        elif e:
            ext.append(f"| {name} | failed: {e['error'][:120]} | | | |")
    diag = render_diagnosis(results["fastsac_diagnosis"]) if "fastsac_diagnosis" in results else ""
    return head + "\n".join(rows) + "\n" + ("\n".join(ext) + "\n" if len(ext) > 3 else "") + diag


def render_diagnosis(d: dict) -> str:
    """The --diagnose-fastsac rows: pelvis tilt per run against the safety trip."""
    lo, hi = d["window_s"]
    out = ["", f"| pelvis tilt (trip {d['trip_deg']:.1f} deg) | s in POLICY | fell (at s) | max tilt (deg, at s) "
           f"| margin to trip (deg) | max over {lo:g}-{hi:g} s | first past trip (s) "
           f"| leaves nominal eval's tilt by > {d['diverge_deg']:g} deg (s) |", "|---|---|---|---|---|---|---|---|"]

    def row(how, r, fell="-", diverge="-"):  # a deploy run's max and first pass: over its 2 ms ticks
        w = "-" if r.get("window_max_tilt_deg") is None else f"{r['window_max_tilt_deg']:.1f}"
        over = r.get("tick_first_over_trip_s", r.get("first_over_trip_s"))
        mx, at = r.get("tick_max_tilt_deg", r["max_tilt_deg"]), r.get("tick_max_tilt_at_s", r["max_tilt_at_s"])
        out.append(f"| {how} | {r['policy_s']:.1f} | {fell} | {mx:.1f} (at {at:.1f}) | {d['trip_deg'] - mx:.1f} | {w} "
                   f"| {_f(over, '{:.1f}')} | {diverge} |")

    ref = d["reference"]
    out.append(f"| FastSAC reference (the graph's clip) | - | - | {ref['max_tilt_deg']:.1f} (at {ref['max_tilt_at_s']:.1f}) "
               f"| {d['trip_deg'] - ref['max_tilt_deg']:.1f} | {ref['window_max_tilt_deg']:.1f} | - | - |")
    row("FastSAC make eval (C MuJoCo, no DR)", d["eval"], _fell(d["eval"]))
    for e in d["eval_delayed"]:
        row(f"FastSAC eval, command delay {e['cmd_delay_ms']:g} ms, state delay {e['state_delay_ms']:g} ms", e,
            _fell(e), _f(e["diverges_from_eval_s"], "{:.1f}"))
    for i, r in enumerate(d["deploy"], 1):
        if "error" in r:
            out.append(f"| FastSAC make deploy ROBOT=sim, run {i} | did not run: {r['error'][:100]} | | | | | | |")
            continue
        row(f"FastSAC make deploy ROBOT=sim, run {i}", r, "yes" if r["fell"] else "no",
            _f(r["diverges_from_eval_s"], "{:.1f}"))
    row("PPO make eval (C MuJoCo, no DR)", d["ppo_eval"], _fell(d["ppo_eval"]))
    return "\n".join(out) + "\n"


def _eval_row(e: dict) -> dict:
    if "error" in e:
        return e
    return {**e, "safety_events": [], "final_state": "fell" if e["fell"] else "HOLD"}


def _rows(name: str, how: str, r: dict) -> list[str]:
    if "error" in r:
        return [f"| {name} | {how} | - | - | did not run: {r['error'][:120]} | | | | | |"]
    t = r["tracking"]
    return [f"| {name} | {how} | {r['policy_s']:.1f} | {_fell(r)} | {r['final_state']} | "
                    f"{_f(t.get('joint_rms_rad'))} | {_f(t.get('joint_rms_worst_s_rad'))} "
                    f"(at {_f(t.get('joint_rms_worst_s_at'), '{:.0f}')} s) | {_f(t.get('anchor_ori_err_rad'))} | "
                    f"{_f(t.get('anchor_ori_err_worst_s_rad'))} (at {_f(t.get('anchor_ori_err_worst_s_at'), '{:.0f}')} s) "
                    f"| {'; '.join(r['safety_events']) or 'none'} |"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.tracking_policies", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-run-s", type=float, default=70.0, help="deploy run length (POLICY starts ~4 s in)")
    ap.add_argument("--eval-s", type=float, default=0.0,
                    help="make eval POLICY=...: seconds of the clip (default 0: the whole clip, then HOLD)")
    ap.add_argument("--redo", default=",".join(PARTS),
                    help=f"parts to run again ({', '.join(PARTS)}); the others are kept from --out when there")
    ap.add_argument("--models", default=",".join(holosoma_models.WBT_MODELS),
                    help="models to run (the others' rows are kept from --out)")
    ap.add_argument("--diagnose-fastsac", action="store_true",
                    help="only the FastSAC tilt diagnosis (key fastsac_diagnosis; the rest of --out is kept)")
    ap.add_argument("--runs", type=int, default=5, help="--diagnose-fastsac: deploy runs on the sim bridge")
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    redo = tuple(x for x in a.redo.split(",") if x)
    unknown = [x for x in redo if x not in PARTS]
    if unknown:
        ap.error(f"--redo: unknown parts {unknown} (of {', '.join(PARTS)})")
    keep = json.loads(Path(a.out).read_text()) if Path(a.out).is_file() else None
    try:
        if a.diagnose_fastsac:
            if keep is None:
                ap.error(f"--diagnose-fastsac adds its key to {a.out}: run the table first")
            res = {**keep, "fastsac_diagnosis": diagnose_fastsac(a.runs, a.max_run_s)}
        else:
            res = run(a.max_run_s, a.eval_s, keep, redo, tuple(a.models.split(",")))
            if keep and "fastsac_diagnosis" in keep:
                res["fastsac_diagnosis"] = keep["fastsac_diagnosis"]
    except holosoma_models.DownloadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    print(render_tracking_policies_table(res))
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
