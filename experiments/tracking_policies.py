"""holosoma-inference 0.1.3's two G1 whole-body-tracking dance models (PPO, FastSAC) through the real deploy
loop on the sim bridge (`make deploy ROBOT=sim POLICY=<file> ARGS="--max-run-s S"`), one after another:
falls, final state, safety events and the tracking error against the graph's own reference (joint RMS,
anchor orientation error; over the run and its worst second) from each run's summary.json.

    python -m experiments.tracking_policies [--max-run-s 70]    (make tracking-policies)

writes results/tracking_policies.json; `render_tracking_policies_table` renders it for docs/tracking_policies.md.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from experiments import holosoma_models
from policies.adapters import load_policy
from policies.adapters.holosoma import BUILT_IN_WBT
from robots.physics import tilt_angle

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "results" / "tracking_policies.json"
# eval rows of each model with one holosoma setting changed by a sidecar (policies.adapters.holosoma)
# (a variant is run where it changes the action scale the adapter chose for the file)
VARIANTS = {"uniform_action_scale_1": {"action_scales_by_effort_limit_over_p_gain": False, "policy_action_scale": 1.0},
            "effort_rule": {"action_scales_by_effort_limit_over_p_gain": True, "policy_action_scale": 1.0}}


def run_deploy(policy: Path, max_run_s: float) -> dict:
    """One `make deploy ROBOT=sim POLICY=...` run; its summary.json (or why there is none)."""
    cmd = ["make", "-s", "deploy", "ROBOT=sim", f"POLICY={policy}", f"ARGS=--max-run-s {max_run_s:g} --no-plot --quiet"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=max_run_s + 600)
    lines = [ln for ln in r.stdout.splitlines() if ln.strip().endswith("summary.json")]
    path = Path(lines[-1].split()[-1]) if lines else None
    if path is None or not path.is_file():
        return {"error": f"exit {r.returncode}: {(r.stderr or r.stdout).strip()[-400:]}", "command": " ".join(cmd)}
    s = json.loads(path.read_text())
    tr = s.get("tracking") or {}
    return {"command": " ".join(cmd), "exit": r.returncode, "summary": str(path.relative_to(REPO)),
            "fell": s["fell"], "final_state": s["final_state"], "states_visited": s["states_visited"],
            "safety_events": [f"{e['kind']}: {e['detail']}"[:160] for e in s["safety_events"]],
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
    return head + "\n".join(rows) + "\n" + ("\n".join(ext) + "\n" if len(ext) > 3 else "")


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
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    redo = tuple(x for x in a.redo.split(",") if x)
    unknown = [x for x in redo if x not in PARTS]
    if unknown:
        ap.error(f"--redo: unknown parts {unknown} (of {', '.join(PARTS)})")
    keep = json.loads(Path(a.out).read_text()) if Path(a.out).is_file() else None
    try:
        res = run(a.max_run_s, a.eval_s, keep, redo, tuple(a.models.split(",")))
    except holosoma_models.DownloadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    print(render_tracking_policies_table(res))
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
