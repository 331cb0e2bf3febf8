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
import subprocess
import sys
from pathlib import Path

from experiments import holosoma_models

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "results" / "tracking_policies.json"


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


def run(max_run_s: float) -> dict:
    root = holosoma_models.models_dir()
    rows = {}
    for name in holosoma_models.WBT_MODELS:
        f = root / holosoma_models.WBT / name
        print(f"[tracking] {name}: make deploy ROBOT=sim for {max_run_s:g} s", flush=True)
        rows[name] = run_deploy(f.relative_to(REPO) if f.is_relative_to(REPO) else f, max_run_s)
        print(f"[tracking] {name}: {json.dumps({k: rows[name].get(k) for k in ('fell', 'final_state', 'policy_s')})}",
              flush=True)
    return {"what": "holosoma-inference 0.1.3 G1 whole-body-tracking dance models on the sim bridge through the deploy "
                    "loop (make deploy ROBOT=sim POLICY=...); tracking error against the graph's own reference",
            "max_run_s": max_run_s, "models": rows}


def _f(x, fmt="{:.3f}"):
    return "-" if x is None else fmt.format(x)


def render_tracking_policies_table(results: dict) -> str:
    """Markdown table of results/tracking_policies.json."""
    head = ("| model | s in POLICY | fell | final state | joint RMS (rad) | worst second | anchor ori. err (rad) "
            "| worst second | safety events |\n|---|---|---|---|---|---|---|---|---|\n")
    rows = []
    for name, r in results["models"].items():
        if "error" in r:
            rows.append(f"| {name} | - | - | did not run: {r['error'][:120]} | | | | | |")
            continue
        t = r["tracking"]
        rows.append(f"| {name} | {r['policy_s']:.1f} | {'yes' if r['fell'] else 'no'} | {r['final_state']} | "
                    f"{_f(t.get('joint_rms_rad'))} | {_f(t.get('joint_rms_worst_s_rad'))} "
                    f"(at {_f(t.get('joint_rms_worst_s_at'), '{:.0f}')} s) | {_f(t.get('anchor_ori_err_rad'))} | "
                    f"{_f(t.get('anchor_ori_err_worst_s_rad'))} (at {_f(t.get('anchor_ori_err_worst_s_at'), '{:.0f}')} s) "
                    f"| {'; '.join(r['safety_events']) or 'none'} |")
    return head + "\n".join(rows) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.tracking_policies", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-run-s", type=float, default=70.0, help="deploy run length (POLICY starts ~4 s in)")
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    try:
        res = run(a.max_run_s)
    except holosoma_models.DownloadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    print(render_tracking_policies_table(res))
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
