"""Every committed policy evaluated twice by `make eval` (20 randomised episodes, seed 0, no video): on the deploy
loop's tick (the estimator on simulated sensors, the safety gate on every command: eval's default) and on the
simulator's true state with its targets straight to the drives (`--true-state`), side by side.

    python -m experiments.eval_inputs [--motions jump stand] [--episodes 20]     (make eval-inputs)

writes results/eval_inputs.json; `render_eval_inputs_table` renders the table of docs/evaluation.md.
"""
from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

from eval.config import EvalConfig
from eval.evaluate import evaluate
from experiments.policy_cards import committed_motions
from experiments.runs_common import save_row
from policies.artifact import POLICY_ROOT, PolicySpec, load_artifact

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "results" / "eval_inputs.json"
KEYS = ("falls", "stood_at_end", "tilt_tripped", "episodes")


def _is_tracking(motion: str) -> bool:
    spec: PolicySpec = load_artifact(POLICY_ROOT / motion).spec
    return spec.tracking is not None


def measure(motion: str, episodes: int, seed: int) -> dict:
    row = {}
    for name, true_state in (("tick", False), ("true_state", True)):
        cfg = EvalConfig(episodes=episodes, seed=seed, video=False, true_state=true_state)
        s, out = evaluate(motion, cfg, None, REPO / "runs" / "eval")
        row[name] = {**{k: s.get(k) for k in KEYS}, "tracking_error_cm": s.get("tracking_error_cm"),
                     "peak_torque_ratio_legs_max": ((s.get("peak_torque_ratio") or {}).get("legs") or {}).get("max"),
                     "eval": str((out / "eval.json").relative_to(REPO))}
    return row


def render_eval_inputs_table(results: dict) -> str:
    def f(v, fmt="{:.1f}"):
        return "-" if v is None else fmt.format(v)

    rows = ["| motion | falls: tick / true state | safety tilt trips (tick) | stood: tick / true state | tracking cm: "
            "tick / true state | peak leg torque / limit: tick / true state |", "|---|---|---|---|---|---|"]
    for m, r in sorted(results["rows"].items()):
        a, b = r["tick"], r["true_state"]
        n = a["episodes"]
        rows.append(f"| {m} | {a['falls']}/{n} / {b['falls']}/{n} | {a['tilt_tripped']} | {a['stood_at_end']} / "
                    f"{b['stood_at_end']} | {f(a['tracking_error_cm'])} / {f(b['tracking_error_cm'])} | "
                    f"{f(a['peak_torque_ratio_legs_max'], '{:.2f}')} / {f(b['peak_torque_ratio_legs_max'], '{:.2f}')} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.eval_inputs", description=__doc__.splitlines()[0])
    ap.add_argument("--motions", nargs="*", default=None, help="default: every committed motion policy")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    motions = args.motions or [m for m in committed_motions() if not _is_tracking(m)]
    results = {"rows": {}}
    for m in motions:
        print(f"{m}: eval on the tick and on the true state ...", flush=True)
        results = save_row(RESULTS, m, {**measure(m, args.episodes, args.seed), "date": dt.date.today().isoformat()},
                           __doc__)
    print(render_eval_inputs_table(results))
    print(RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
