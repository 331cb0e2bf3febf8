"""The jump trained on the seed's impulse contact: one row per training run in results/impulse_training.json.

A row is a finished `make train` run (runs/jump/<stamp>/, trained with --select-every): its config (algorithm,
contact, mode, kappa, preset, seed), the iterations it ran and its wall time, the candidate the selection picked
(eval seed 1000), the held-out evaluation of that exported policy in C MuJoCo (`python -m eval --true-state`, 20
randomised episodes, seed 0: falls, standing at the end, sole clearance, flight, tracking, penetration), and the selection's
falls/20 at every candidate (the learning curve a user cares about). `--plot` draws the training reward and the
candidates' falls of every row against iterations (docs/impulse_training.png).

    python -m experiments.impulse_training --run runs/jump/<stamp> --name bcg_soft300_s0 [--plot]
    python -m experiments.impulse_training --bundle-activity runs/jump/<stamp>   # how often its bundles fired
"""
from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from train.export import repo_relative

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results" / "impulse_training.json"
PLOT = REPO / "docs" / "impulse_training.png"
BCG_KEYS = ("branches", "horizon", "tau", "max_bundled_envs", "sigma_p", "sigma_v", "clamp_q", "clamp_v")


def _curve(run: Path) -> dict:
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    return {"iteration": [int(float(r["iteration"])) for r in rows], "reward": [float(r["reward"]) for r in rows],
            "wall_s": [float(r["wall_s"]) for r in rows]}


def evaluate(artifact: Path, out: Path, episodes: int = 20, seed: int = 0) -> dict:
    """`python -m eval` of the artifact folder (eval finds it as <root>/jump: a link in `out`)."""
    root = out / "artifacts"
    root.mkdir(parents=True, exist_ok=True)
    link = root / "jump"
    if not link.exists():
        link.symlink_to(Path(artifact).resolve())
    # on the true state, as every row of this table and the selection during training were measured
    cmd = [sys.executable, "-m", "eval", "--motion", "jump", "--artifacts", str(root), "--episodes",
           str(episodes), "--seed", str(seed), "--no-video", "--true-state", "--out", str(out)]
    subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return json.loads(max(out.rglob("eval.json"), key=lambda p: p.stat().st_mtime).read_text())


def bundle_activity(run: Path) -> dict:
    """How often a BCG run's bundles fired (metrics.csv: bundled_frac = bundled env-steps / env-steps per
    iteration) beside the largest sphere force per step, over the iterations it ran (finished or not)."""
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    b = np.array([float(r["bundled_frac"]) for r in rows])
    f = np.array([float(r["contact_force_max"]) for r in rows])
    return {"run": repo_relative(run), "algo": cfg["algo"], "bcg": {k: cfg["bcg"][k] for k in BCG_KEYS},
            "contact": cfg["env"]["contact"], "impulse_mode": cfg["env"].get("impulse_mode"),
            "iterations": len(rows), "bundled_frac_mean": float(b.mean()),
            "bundled_frac_p50_p99": [float(np.percentile(b, 50)), float(np.percentile(b, 99))],
            "bundle_budget_frac": min(1.0, (cfg["bcg"]["max_bundled_envs"] or 0) / cfg["shac"]["num_envs"]),
            "contact_force_max_mean_n": float(f.mean())}


EVAL_KEYS = ("episodes", "falls", "stood_at_end", "apex_foot_clearance_m", "flight_time_s", "pelvis_apex_rise_m",
             "tracking_error_cm", "stance_penetration_mm", "penetration_mm")


def row_of(run: Path, name: str, artifact: Path) -> dict:
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    sel = json.loads((run / "select" / "select.json").read_text())
    curve = _curve(run)
    ev = evaluate(artifact, run / "eval_seed0")
    env = cfg["env"]
    return {
        "name": name, "algo": cfg["algo"], "contact": env["contact"], "impulse_mode": env.get("impulse_mode"),
        "kappa": env["kappa"], "relaxation": env.get("impulse_relaxation"), "preset": cfg["preset"], "seed": cfg["seed"],
        "num_envs": cfg["shac"]["num_envs"], "horizon": cfg["shac"]["horizon"],
        "bcg": {k: cfg["bcg"][k] for k in BCG_KEYS} if cfg["algo"] == "bcg" else None,
        "bundled_frac_mean": bundle_activity(run)["bundled_frac_mean"] if cfg["algo"] == "bcg" else 0.0,
        "iterations_budget": cfg["shac"]["iterations"],
        "iterations_run": curve["iteration"][-1], "train_wall_s": curve["wall_s"][-1],
        "selected_iteration": sel["selected_iteration"],
        "selection": [{"iteration": c["iteration"], "falls": c.get("falls")} for c in sel["candidates"]],
        "eval_seed0": {k: ev[k] for k in EVAL_KEYS},
        "run": repo_relative(run), "artifact": repo_relative(artifact),
        "curve": {"iteration": curve["iteration"][::10], "reward": curve["reward"][::10]},
    }


def render_impulse_training_table(results: dict) -> str:
    """Markdown table of results/impulse_training.json."""
    lines = ["| run | algorithm | contact | kappa | relaxation | iterations (selected) | wall min | falls/20 | stood "
             "| soles cm | flight s | tracking cm | stance penetration mm |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        e = r["eval_seed0"]
        lines.append(
            f"| {r['name']} | {r['algo']} | {r['contact']} {r['impulse_mode'] or ''} | {r['kappa']:g} | {r.get('relaxation') or '-'} "
            f"| {r['iterations_run']} ({r['selected_iteration']}) | {r['train_wall_s'] / 60:.0f} | {e['falls']} "
            f"| {e['stood_at_end']} | {100 * e['apex_foot_clearance_m']['mean']:.1f} | {e['flight_time_s']['mean']:.2f} "
            f"| {e['tracking_error_cm']:.1f} | {e['stance_penetration_mm']:.2f} |")
    return "\n".join(lines)


def bundle_label(bcg: dict | None) -> str:
    """The bundle in a few words: trigger, branches B, window (control steps), slots; '-' for plain SHAC."""
    if not bcg:
        return "-"
    trig = f"{bcg['tau']:g} N" if bcg["tau"] >= 1 else "any impulse"
    return f"{trig}, B {bcg['branches']}, window {bcg['horizon']}, {bcg['max_bundled_envs']} slots"


def budget(row: dict) -> str:
    """The row's training budget: the iterations it was given (a time budget may have stopped it earlier); rows
    recorded without it, their wall time to the nearest 5 min."""
    if row.get("iterations_budget"):
        return f"{row['iterations_budget']} it"
    return f"{int(5 * round(row['train_wall_s'] / 300))} min"


def wall_min(rows: list[dict]) -> list[float]:
    return [r["train_wall_s"] / 60 for r in rows]


def summary_by_setting(results: dict) -> list[dict]:
    """Rows grouped by (algorithm, bundle, contact, mode, kappa, relaxation, budget): seeds, falls/20 per seed and
    their mean, standing, iterations and wall time."""
    groups: dict = {}
    for r in results["rows"]:
        key = (r["algo"], bundle_label(r.get("bcg")), r["contact"], r["impulse_mode"], r["kappa"], r.get("relaxation"),
               budget(r))
        groups.setdefault(key, []).append(r)
    out = []
    for (algo, bundle, contact, mode, kappa, relax, _), rows in sorted(groups.items(),
                                                                          key=lambda kv: min(wall_min(kv[1]))):
        falls = [r["eval_seed0"]["falls"] for r in rows]
        out.append({"algo": algo, "bundle": bundle, "contact": contact, "impulse_mode": mode, "kappa": kappa,
                    "relaxation": relax,
                    "seeds": [r["seed"] for r in rows], "falls": falls, "falls_mean": sum(falls) / len(falls),
                    "stood": [r["eval_seed0"]["stood_at_end"] for r in rows],
                    "iterations": [r["iterations_run"] for r in rows],
                    "wall_min": wall_min(rows)})
    return out


def render_bundle_activity_table(results: dict) -> str:
    """Markdown table of results/impulse_training.json's bundle_activity."""
    lines = ["| run | bundle (B, window, trigger, slots) | iterations | bundled env-steps mean (p50 / p99) | slot budget "
             "| largest sphere force per step, mean |", "|---|---|---|---|---|---|"]
    for a in results.get("bundle_activity", []):
        b = a["bcg"]
        trig = f"{b['tau']:g} N" if b["tau"] >= 1 else "any impulse"
        p50, p99 = a["bundled_frac_p50_p99"]
        lines.append(f"| {Path(a['run']).name} | {b['branches']}, {b['horizon']}, {trig}, {b['max_bundled_envs']} "
                     f"| {a['iterations']} | {100 * a['bundled_frac_mean']:.1f} % ({100 * p50:.1f} / {100 * p99:.1f} %) "
                     f"| {100 * a['bundle_budget_frac']:.1f} % | {a['contact_force_max_mean_n']:.0f} N |")
    return "\n".join(lines)


def render_impulse_training_summary(results: dict) -> str:
    """Markdown table: per setting, the seeds' falls/20 in C MuJoCo (eval seed 0)."""
    lines = ["| algorithm | bundle | contact | kappa | relaxation | seeds | falls/20 per seed | mean falls/20 "
             "| stood per seed | iterations per seed | wall min per seed |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for g in summary_by_setting(results):
        lines.append(
            f"| {g['algo']} | {g['bundle']} | {g['contact']} {g['impulse_mode'] or ''} | {g['kappa']:g} | {g['relaxation'] or '-'} "
            f"| {len(g['seeds'])} | {' / '.join(map(str, g['falls']))} | {g['falls_mean']:.1f} "
            f"| {' / '.join(map(str, g['stood']))} | {' / '.join(map(str, g['iterations']))} "
            f"| {' / '.join(f'{w:.0f}' for w in g['wall_min'])} |")
    return "\n".join(lines)


def plot(results: dict, path: Path = PLOT) -> None:
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for r in results["rows"]:
        ax1.plot(r["curve"]["iteration"], r["curve"]["reward"], label=r["name"])
        sel = [c for c in r["selection"] if c["falls"] is not None]
        ax2.plot([c["iteration"] for c in sel], [c["falls"] for c in sel], "o-", label=r["name"])
    ax1.set(xlabel="iteration", ylabel="training reward (mean per step)", title="training")
    ax2.set(xlabel="iteration", ylabel="falls / 20 (C MuJoCo, eval seed 1000)", title="selection evaluations", ylim=(-1, 21))
    ax1.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, help="a finished training run folder (trained with --select-every)")
    ap.add_argument("--name", help="the row's name")
    ap.add_argument("--artifact", type=Path, default=None, help="its exported policy folder (the --export-dir it was trained with)")
    ap.add_argument("--plot", action="store_true")
    ap.add_argument("--reevaluate", action="store_true",
                    help="evaluate every row's artifact again (rows whose artifact is gone keep their figures)")
    ap.add_argument("--bundle-activity", type=Path, default=None, metavar="RUN",
                    help="record how often a BCG run's bundles fired (finished or stopped) under bundle_activity")
    a = ap.parse_args(argv)
    res = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"motion": "jump", "rows": []}
    if a.bundle_activity:
        act = bundle_activity(a.bundle_activity)
        res["bundle_activity"] = [x for x in res.get("bundle_activity", []) if x["run"] != act["run"]] + [act]
        RESULTS.write_text(json.dumps(res, indent=1) + "\n")
        print(json.dumps(act))
    if a.run:
        if not a.name or a.artifact is None or not (a.run / "select" / "select.json").is_file():
            ap.error("--run needs --name, --artifact and a run trained with --select-every (its select/select.json)")
        row = row_of(a.run, a.name, a.artifact)
        res["rows"] = [r for r in res["rows"] if r["name"] != a.name] + [row]
        RESULTS.write_text(json.dumps(res, indent=1) + "\n")
        print(f"wrote {RESULTS}")
    if a.reevaluate:
        for r in res["rows"]:
            art, run = REPO / r["artifact"], REPO / r["run"]
            if not (art / "policy.yaml").is_file():
                print(f"{r['name']}: {r['artifact']} is gone; its figures stay as measured")
                continue
            ev = evaluate(art, run / "eval_seed0" if run.is_dir() else RESULTS.parent / "impulse_training" / r["name"])
            r["eval_seed0"] = {k: ev[k] for k in EVAL_KEYS}
            print(f"{r['name']}: {ev['falls']}/{ev['episodes']} falls, {ev['stood_at_end']} standing")
        RESULTS.write_text(json.dumps(res, indent=1) + "\n")
    if a.plot:
        plot(res)
        print(f"wrote {PLOT}")
    print(render_impulse_training_table(res))
    print()
    print(render_impulse_training_summary(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
