"""Whole-body tracking of clips: our policies (`make train MOTION=<clip>`, env.task = tracking) and, for the windows
of the dance (`dance`, `dance_in_limits`, `dance_calm`), holosoma-inference 0.1.3's PPO and FastSAC graphs of the
same retargeted dance, evaluated by the same `make eval` on the same segment: each starts in its reference's
state at the segment's first frame (eval.sim.reference_start; our clips begin with a lead-in from standing,
holosoma's graph runs the whole 131 s dance) and runs the segment's seconds with eval's randomisation and push
(no HOLD after: the segment ends mid-motion), measured against its own reference (the same clip). The survival
map (`survival_by_second`, docs/tracking_survival.png) starts short episodes at every second of the segment:
where a policy fails, each part of the clip on its own.
Our policies also run the whole clip as the robot runs it: from
standing at frame 0 through the lead-in, the segment and the lead-out, then the 1.5 s HOLD ("stood at end"),
in eval and in one real-time dry run on the sim bridge (`make deploy ROBOT=sim POLICY=...`).

    python -m experiments.tracking --clip dance --policy ours [--artifact DIR] [--episodes 20]   (make tracking ARGS=...)
    python -m experiments.tracking --clip dance --policy ppo | fastsac

Each call writes one row of results/tracking.json (key "<clip>/<policy>"): falls / episodes, body-position error (cm, the mean over policies.tracking.KEY_BODIES of |p - p~| with the reference relative to
the anchor, eval.sim.BodyTracker), joint RMS (rad), anchor orientation error (rad), and the training that made
the policy (samples = iterations x environments x steps per iteration, wall time) as its provenance or metadata
states it. `render_tracking_table` renders the table of docs/experiments.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import re
import textwrap
from pathlib import Path

import yaml

from eval.config import EvalConfig
from eval.policy_eval import evaluate_policy
from experiments.runs_common import save_row
from motions.sources import SOURCE_SUFFIX, read_source, wheel_member
from robots import g1
from train.bcg import BCGConfig
from train.config import preset
from train.tracking import DEFAULT_WEIGHTS, TrackingConfig

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "results" / "tracking.json"
HOLOSOMA = "holosoma-inference==0.1.3"
HOLOSOMA_WBT = {"ppo": "holosoma_inference/models/wbt/ppo_g1_29dof_dancing.onnx",
                "fastsac": "holosoma_inference/models/wbt/fastsac_g1_29dof_dancing.onnx"}
LABELS = {"ours": "ours", "ppo": "holosoma PPO", "fastsac": "holosoma FastSAC"}


def segment(clip: str) -> tuple[int, int, float]:
    """(our clip's first segment frame, the holosoma graph's, seconds) of a clip: a source file's window after
    its lead-in, or a committed clip from frame 0."""
    src = REPO / "motions" / f"{clip}{SOURCE_SUFFIX}"
    if src.is_file():
        s = read_source(src)
        lead = int(round(s.window.lead_in_s / g1.CONTROL_DT))
        return lead, s.window.start_frame, (s.window.frames - 1) * g1.CONTROL_DT
    from motions import load_motion

    return 0, 0, float(load_motion(clip).duration)


def of_holosomas_dance(clip: str) -> bool:
    """Whether the clip is a window of the dance baked into holosoma's graphs (its source names their wheel and
    one of them) as the graphs have it (no feet put down), so that the graphs run the same segment."""
    src = REPO / "motions" / f"{clip}{SOURCE_SUFFIX}"
    if not src.is_file():
        return False
    s = read_source(src)
    return s.package == HOLOSOMA and s.member in HOLOSOMA_WBT.values() and s.window.ground_feet_mm is None


def holosoma_training(path: Path) -> dict:
    """What the graph's metadata says of its training (holosoma's experiment_config)."""
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
    cfg = meta.get("experiment_config", "")

    def num(key):
        m = re.search(rf'"?{key}"?\s*[:=]\s*([0-9]+)', cfg)
        return int(m.group(1)) if m else None

    it, envs, steps = num("num_learning_iterations"), num("num_envs"), num("num_steps_per_env")
    if None in (it, envs, steps):
        return {"samples": None, "wall_min": None, "note": "not in the graph's metadata"}
    return {"samples": it * envs * steps, "wall_min": None,
            "note": f"configured: {it} iterations x {envs} envs x {steps} steps (experiment_config); wall time not stated"}


def changed_settings(cfg: dict) -> list[tuple[str, object]]:
    """(name, value) of what a run's config.yaml changed: tracking reward weights, other scalar tracking settings
    (window_s, sigmas, ...), SHAC settings (the horizon among them; the number of environments and of iterations
    left out) and the actor's hidden layers against its preset's."""
    tracking = cfg["env"].get("tracking") or {}
    out = [(k, v) for k, v in tracking.get("weights") or [] if v != DEFAULT_WEIGHTS.get(k)]
    default = dataclasses.asdict(TrackingConfig())
    out += [(k, v) for k, v in tracking.items() if k != "weights" and not isinstance(v, list) and v != default.get(k)]
    base = preset(cfg["preset"]).to_dict()
    out += [(k, v) for k, v in cfg["shac"].items() if k not in ("iterations", "num_envs") and v != base["shac"].get(k)]
    hidden = (cfg.get("actor") or {}).get("hidden")
    out += [("actor_hidden", hidden)] if hidden is not None and list(hidden) != list(base["actor"]["hidden"]) else []
    return out + contact_settings(cfg, base)


BUNDLE_SHAPE = ("branches", "horizon", "sigma_p", "sigma_v", "clamp_q", "clamp_v")


def contact_settings(cfg: dict, base: dict) -> list[tuple[str, object]]:
    """The impulse contact's gate and relaxation, and the bundle where it is not the preset's: "seed bundle" with
    its slot count where branches, window, offsets and clamps are those of BCGConfig.seed_settings (the committed
    jump's recipe), else each changed bundle setting."""
    env = cfg["env"]
    out = [("kappa", env["kappa"]), ("gate", env["impulse_mode"]), ("relaxation", env["impulse_relaxation"])] \
        if env.get("contact") == "impulse" else []
    bcg = cfg.get("bcg") or {}
    changed = {k: v for k, v in bcg.items() if v != base["bcg"].get(k)}
    if not changed or cfg.get("algo") != "bcg":
        return out
    seed = dataclasses.asdict(BCGConfig.seed_settings(1, 1.0))
    if all(bcg.get(k) == seed[k] for k in BUNDLE_SHAPE):
        return out + [("seed bundle, slots", bcg["max_bundled_envs"])]
    return out + [(f"bcg.{k}", v) for k, v in changed.items()]


def our_training(folder: Path) -> dict:
    prov = yaml.safe_load((folder / "policy.yaml").read_text())["provenance"]
    if prov.get("untrained"):  # train.export --zero-residual: no training of its own
        return {"samples": 0, "wall_min": 0, "label": "the reference on PD (zero residual, untrained)",
                "note": f"untrained: {prov['untrained']} (the actor of {prov.get('run')})"}
    run = REPO / prov.get("run", "")
    envs = steps = None
    suffix = ""
    if (run / "config.yaml").is_file():
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        envs, steps = cfg["shac"]["num_envs"], cfg["shac"]["horizon"]
        changed = changed_settings(cfg)
        suffix = "; " + ", ".join(f"{k} {v:g}" if isinstance(v, (int, float)) else f"{k} {v}" for k, v in changed) \
            if changed else ""
    it = int(prov["iterations"])
    wall = prov.get("wall_time_s")
    terms, ends = {}, {}
    if (run / "metrics.csv").is_file():  # the tracking reward's terms over the last 100 iterations (per env-step)
        import csv

        rows = list(csv.DictReader(open(run / "metrics.csv")))
        sessions = training_sessions_s(rows, it)
        wall = sum(sessions) if sessions else wall  # a resumed run's sessions added up
        if sessions and len(sessions) > 1:
            suffix += f"; resumed, {it} iterations"
        last = rows[-100:]
        terms = {k[len("r_track_"):]: round(sum(float(r[k]) for r in last) / len(last), 4)
                 for k in last[0] if k.startswith("r_track_")} if last else {}
        ends = termination_trend(rows)
    samples = _samples(it, cfg) if envs and steps else None
    warm = {}
    if prov.get("init_from"):  # a warm start: the run it started from counts as training too
        warm = warm_start_training(REPO / prov["init_from"], int(prov["init_from_iteration"]))
        samples = samples + warm["samples"] if samples is not None and warm["samples"] is not None else None
        wall = wall + warm["wall_s"] if wall and warm["wall_s"] else None
        suffix += f"; from {warm['motion']}'s run at iteration {warm['iterations']}"
    return {"samples": samples,
            "wall_min": round(wall / 60, 1) if wall else None, "reward_terms_last100": terms,
            "terminations_per_step": ends,
            "label": f"ours ({prov['algorithm']}, {prov.get('contact', '?')} contact{suffix})",
            "note": f"{prov['algorithm']}, {prov.get('contact', '?')} contact, {it} iterations"
                    + (f" x {envs} envs x {steps} steps" if envs and steps else "") + f", run {prov.get('run')}"
                    + (f", started from {prov['init_from']} ({warm['iterations']} iterations, {warm['samples']} "
                       "samples, counted in samples and wall time)" if warm else "")}


def training_sessions_s(rows: list[dict], iteration: int) -> list[float] | None:
    """The wall time (s) of each session of a run up to `iteration`, from its metrics.csv rows (`wall_s` counts from
    the start of a session: a resumed run, `--resume`, has more than one); None when the log does not reach it."""
    done, last, reached = [], 0.0, False
    for r in rows:
        if int(float(r["iteration"])) > iteration:
            break
        w = float(r["wall_s"])
        if w < last:  # a new session began
            done.append(last)
        last, reached = w, int(float(r["iteration"])) == iteration
    return done + [last] if reached else None


def warm_start_training(checkpoint: Path, iterations: int) -> dict:
    """What the run a warm start began from (`make train ARGS="--init-from RUN"`) had trained when its checkpoint
    was written: its motion, iterations, samples (iterations x envs x steps) and wall time (its metrics.csv at that
    iteration); None for what its run folder no longer holds."""
    import csv

    run = checkpoint.parent.parent  # <run>/checkpoints/<name>.npz
    cfg = yaml.safe_load((run / "config.yaml").read_text()) if (run / "config.yaml").is_file() else None
    wall = None
    if (run / "metrics.csv").is_file():
        sessions = training_sessions_s(list(csv.DictReader(open(run / "metrics.csv"))), iterations)
        wall = sum(sessions) if sessions else None
    return {"motion": cfg["motion"] if cfg else "?", "iterations": iterations, "wall_s": wall,
            "samples": _samples(iterations, cfg) if cfg else None}


def _samples(iterations: int, cfg: dict) -> int:
    """Environment steps a run's `iterations` took (its config.yaml as a dict): iterations x envs x steps."""
    return iterations * cfg["shac"]["num_envs"] * cfg["shac"]["horizon"]


def dry_run(path: Path, start_frame: int, seconds: float) -> dict:
    """The whole clip as `make deploy ROBOT=sim` runs it on the bridge (lead-in, the clip, lead-out, then HOLD),
    run again when a host stall ended it (tracking_policies.run_deploy)."""
    from experiments.tracking_policies import run_deploy

    dry = run_deploy(path, (start_frame * 2 + int(round(seconds / g1.CONTROL_DT))) * g1.CONTROL_DT + 10.0)
    return {k: dry.get(k) for k in ("fell", "final_state", "states_visited", "safety_events", "policy_s", "summary",
                                    "error", "host_stalled", "stalled_attempts")}


def measure(clip: str, policy: str, episodes: int, seed: int, artifact: Path | None = None,
            survival_episodes: int = 5) -> dict:
    ours_start, graph_start, seconds = segment(clip)
    if policy == "ours":
        path, start = (Path(artifact).resolve() if artifact else REPO / "policies" / "g1" / clip), ours_start
        training = our_training(path)
    else:
        path, start = wheel_member(HOLOSOMA, HOLOSOMA_WBT[policy]), graph_start
        training = holosoma_training(path)
    # the segment: falls and errors over its frames only (no HOLD: it ends mid-motion)
    cfg = EvalConfig(episodes=episodes, seed=seed, video=False, duration_s=seconds, start_frame=start, hold_s=0.0)
    summary, out = evaluate_policy(path, cfg, REPO / "runs" / "eval")
    tr = summary["tracking"] or {}
    whole = None
    if policy == "ours":  # the whole clip as the robot runs it: from standing, lead-in and lead-out, then HOLD
        w, w_out = evaluate_policy(path, EvalConfig(episodes=episodes, seed=seed), REPO / "runs" / "eval")
        whole = {"dry_run": dry_run(path, ours_start, seconds),
                 "falls": w["falls"], "episodes": w["episodes"], "stood_at_end": w["stood_at_end"],
                 "fell_at_s": [e["fell_at_s"] for e in w["per_episode"] if e["fell"]],
                 "body_pos_err_cm": (w["tracking"] or {}).get("body_pos_err_cm"),
                 "eval": str((w_out / "eval.json").relative_to(REPO)), "video": w.get("video"),
                 "video_keyframes": w.get("video_keyframes")}
    survival = survival_by_second(path, start, seconds, survival_episodes, seed) if survival_episodes else None
    return {"clip": clip, "policy": training.pop("label", LABELS[policy]), "source": str(path.relative_to(REPO)) if path.is_relative_to(REPO)
            else str(path), "start_frame": start, "seconds": seconds, "episodes": summary["episodes"],
            "falls": summary["falls"], "tilt_tripped": summary["tilt_tripped"], "policy_input": summary["policy_input"],
            "fell_at_s": [e["fell_at_s"] for e in summary["per_episode"] if e["fell"]],
            "mean_policy_s": summary["policy_s"], "whole_clip": whole,
            "body_pos_err_cm": tr.get("body_pos_err_cm"), "body_pos_err_worst_s_cm": tr.get("body_pos_err_worst_s_cm"),
            "joint_rms_rad": tr.get("joint_rms_rad"), "anchor_ori_err_rad": tr.get("anchor_ori_err_rad"),
            "eval_seed": seed, "eval": str((out / "eval.json").relative_to(REPO)), "training": training,
            "survival": survival, "date": dt.date.today().isoformat()}


SURVIVAL_WINDOW_S = TrackingConfig.window_s  # s: the tracking training's default episode window


def survival_by_second(path: Path, first_frame: int, seconds: float, episodes: int, seed: int,
                       window_s: float = SURVIVAL_WINDOW_S) -> list[dict]:
    """Where in a segment a policy fails, each part on its own: `episodes` episodes started in the reference's
    state at each whole second k of the segment, window_s long (the training's episode window,
    env.tracking.window_s), no HOLD after. A policy that falls 1 s into the segment from its start says nothing of
    the other 14 s; this map does."""
    out = []
    for k in range(int(seconds)):
        cfg = EvalConfig(episodes=episodes, seed=seed, video=False, duration_s=min(window_s, seconds - k),
                         start_frame=first_frame + int(round(k / g1.CONTROL_DT)), hold_s=0.0)
        summary, _ = evaluate_policy(path, cfg, REPO / "runs" / "eval")
        fell = [e["fell_at_s"] for e in summary["per_episode"] if e["fell"]]
        out.append({"start_s": k, "falls": summary["falls"], "episodes": summary["episodes"],
                    "fell_after_s": [round(t, 2) for t in fell], "mean_policy_s": round(summary["policy_s"], 3),
                    "body_pos_err_cm": (summary["tracking"] or {}).get("body_pos_err_cm")})
    return out


SURVIVAL_PANEL_IN = (13.0, 2.8)  # inches of one clip's panel, its legend beside it
SURVIVAL_DPI = 90


def survival_figure(results: dict, out: Path) -> Path | None:
    """The mean seconds each episode of a row's survival map ran before it fell (the window's length: none fell),
    per start second, one panel per clip."""
    rows = {k: r for k, r in results["rows"].items() if r.get("survival")}
    if not rows:
        return None
    import matplotlib.pyplot as plt

    clips = sorted({r["clip"] for r in rows.values()})
    w, h = SURVIVAL_PANEL_IN
    fig, axes = plt.subplots(len(clips), 1, figsize=(w, h * len(clips)), squeeze=False)
    for ax, clip in zip(axes[:, 0], clips):
        mine = [(k, r) for k, r in rows.items() if r["clip"] == clip]
        width = 0.8 / len(mine)
        for j, (key, r) in enumerate(mine):
            xs = [c["start_s"] + (j - (len(mine) - 1) / 2) * width for c in r["survival"]]
            ax.bar(xs, [c["mean_policy_s"] for c in r["survival"]], width, label=textwrap.fill(r["policy"], 60))
        ax.set_title(f"{clip}: episodes of {SURVIVAL_WINDOW_S:g} s started at each second of the segment", fontsize=9)
        ax.set_ylabel("mean s before a fall")
        ax.set_ylim(0, SURVIVAL_WINDOW_S * 1.05)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, labels wrapped
    axes[-1, 0].set_xlabel("start, s into the segment")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=SURVIVAL_DPI)
    plt.close(fig)
    return out


def survival_summary(row: dict) -> tuple[int, int, float] | None:
    """(falls, episodes, mean s before a fall or the window's end) over the survival map's full windows (those
    that start at least SURVIVAL_WINDOW_S before the segment's end); None without a map."""
    full = [s for s in row.get("survival") or [] if s["start_s"] + SURVIVAL_WINDOW_S <= row["seconds"] + 1e-9]
    if not full:
        return None
    return (sum(s["falls"] for s in full), sum(s["episodes"] for s in full),
            sum(s["mean_policy_s"] for s in full) / len(full))


def _f(v, fmt: str) -> str:
    return "-" if v is None else fmt.format(v)


def render_tracking_table(results: dict) -> str:
    rows = ["| clip | policy | policy input | segment (start frame, s) | falls (safety tilt trips) | body position error "
            f"cm (worst s) | joint RMS rad | anchor ori rad | {SURVIVAL_WINDOW_S:g} s from each second: falls, mean s | whole "
            "clip from standing: falls, stood at end; dry run | training samples | training wall min |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    order = {}
    for r in results["rows"].values():
        order.setdefault(r["clip"], len(order))
    for r in sorted(results["rows"].values(), key=lambda r: order[r["clip"]]):  # a clip's rows together
        t, w = r["training"], r.get("whole_clip")
        whole = "-"
        if w:
            d = w.get("dry_run") or {}
            ev = "; ".join(e.split(":")[0] for e in d.get("safety_events") or []) or "no safety events"
            whole = (f"{w['falls']}/{w['episodes']}, {w['stood_at_end']}/{w['episodes']}; dry run: "
                     f"{d.get('final_state', '-')} ({ev})")
        sv = survival_summary(r)
        surv = "-" if sv is None else f"{sv[0]}/{sv[1]}, {sv[2]:.2f}"
        rows.append(f"| {r['clip']} | {r['policy']} | {r.get('policy_input', 'true state')} | {r['start_frame']}, "
                    f"{r['seconds']:g} | {r['falls']}/{r['episodes']} ({r.get('tilt_tripped', '-')}) | "
                    f"{_f(r['body_pos_err_cm'], '{:.1f}')} ({_f(r['body_pos_err_worst_s_cm'], '{:.1f}')}) | "
                    f"{_f(r['joint_rms_rad'], '{:.3f}')} | {_f(r['anchor_ori_err_rad'], '{:.3f}')} | {surv} | {whole} | "
                    f"{_f(t['samples'], '{:.3g}')} | {_f(t['wall_min'], '{:.0f}')} |")
    return "\n".join(rows)


def render_tracking_summary(results: dict) -> str:
    """Per clip: the field's policies and, of ours, the rows of the recipe (the same policy label: seeds of one
    training) that runs furthest into the segment (the mean over its rows of the mean time each episode ran, ties
    by the lower mean body-position error), every seed's row, so that no seed is picked; the untrained baselines
    left out."""
    fields = {LABELS["ppo"], LABELS["fastsac"]}
    clips: dict[str, list[dict]] = {}
    for r in results["rows"].values():
        if r["training"].get("samples") != 0:  # 0: the untrained baseline (our_training)
            clips.setdefault(r["clip"], []).append(r)
    rows = ["| clip | policy | segment s | falls | mean s tracked | body position error cm | training samples | "
            "training wall min |", "|---|---|---|---|---|---|---|---|"]
    for clip, rs in clips.items():
        recipes: dict[str, list[dict]] = {}
        for r in rs:
            if r["policy"] not in fields:
                recipes.setdefault(r["policy"], []).append(r)
        best = max(recipes.values(), key=lambda g: (sum(r["mean_policy_s"] for r in g) / len(g),
                                                    -sum(r["body_pos_err_cm"] or 0.0 for r in g) / len(g)), default=[])
        for r in [r for r in rs if r["policy"] in fields] + best:
            t = r["training"]
            rows.append(f"| {clip} | {r['policy']} | {r['seconds']:g} | {r['falls']}/{r['episodes']} | "
                        f"{r['mean_policy_s']:.2f} | {_f(r['body_pos_err_cm'], '{:.1f}')} | "
                        f"{_f(t.get('samples'), '{:.3g}')} | {_f(t.get('wall_min'), '{:.0f}')} |")
    return "\n".join(rows)


def termination_trend(rows: list[dict], n: int = 100) -> dict:
    """The training's episode terminations per env-step (metrics.csv's done_frac) over its first and last n
    iterations and the mean episode that rate implies (1 / rate, control steps): whether more of the same
    training would carry a policy through the clip."""
    if len(rows) < 2 * n:
        return {}
    first, last = (sum(float(r["done_frac"]) for r in part) / n for part in (rows[:n], rows[-n:]))
    return {"first": round(first, 5), "last": round(last, 5), "iterations": len(rows),
            "steps_per_termination_last": round(1.0 / last, 1) if last > 0 else None}


def refresh_training(results: dict) -> dict:
    """Each of our rows' training facts recomputed from its artifact and run (no evaluation)."""
    for row in results["rows"].values():
        src = REPO / row["source"]
        if (src / "policy.yaml").is_file():  # our artifacts (holosoma's rows name their graph file)
            t = our_training(src)
            row["policy"] = t.pop("label")
            row["training"] = t
    return results


def docs_strips(results: dict) -> list[Path]:
    """docs/tracking_<clip>_<policy>.png (the experiments page shows them): the key-frame strip, with the
    reference's ghost, of each row's whole-clip run whose strip is on this machine."""
    from experiments.policy_cards import small_strip

    out = []
    for key, row in results["rows"].items():
        src = (row.get("whole_clip") or {}).get("video_keyframes")
        if src and Path(src).is_file():
            out.append(small_strip(Path(src), REPO / "docs" / f"tracking_{key.replace('/', '_')}.png"))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.tracking", description=__doc__.splitlines()[0])
    ap.add_argument("--clip", default="dance")
    ap.add_argument("--policy", default="ours", choices=list(LABELS))
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--artifact", type=Path, default=None,
                    help="--policy ours: an artifact folder other than policies/g1/<clip> (e.g. runs/policies/...)")
    ap.add_argument("--docs-strips", action="store_true",
                    help="only write docs/tracking_<clip>_<policy>.png from the key-frame strips of the rows' whole-clip "
                         "runs on this machine, and docs/tracking_survival.png (no evaluation)")
    ap.add_argument("--refresh-training", action="store_true",
                    help="only recompute our rows' training facts (samples, reward terms, terminations) from their runs")
    ap.add_argument("--name", default=None,
                    help="the row's key is <clip>/<name> (default: <clip>/<policy>), e.g. one per training of a clip")
    ap.add_argument("--survival-episodes", type=int, default=5,
                    help="episodes per start second of the survival map (survival_by_second); 0: none")
    ap.add_argument("--survival-only", action="store_true",
                    help="only add the survival map to the existing row <clip>/<name or policy> (no other evaluation)")
    ap.add_argument("--dry-run-only", action="store_true",
                    help="only redo the dry run on the bridge of our existing row <clip>/<name> (no other evaluation)")
    args = ap.parse_args(argv)
    key = f"{args.clip}/{args.name or args.policy}"
    if args.refresh_training:
        results = refresh_training(json.loads(RESULTS.read_text()))
        RESULTS.write_text(json.dumps(results, indent=2) + "\n")
        print(render_tracking_table(results))
        return 0
    if args.docs_strips:
        results = json.loads(RESULTS.read_text())
        for path in docs_strips(results):
            print(path)
        print(survival_figure(results, REPO / "docs" / "tracking_survival.png") or "")
        return 0
    if args.policy != "ours" and not of_holosomas_dance(args.clip):
        ap.error(f"holosoma's graphs track their own dance only: {args.clip} is not a window of it (e.g. --clip dance)")
    if args.survival_only or args.dry_run_only:
        results = json.loads(RESULTS.read_text())
        if key not in results["rows"]:
            ap.error(f"no row {key} in {RESULTS}: measure it first (without --survival-only / --dry-run-only)")
        row = results["rows"][key]
        if args.survival_only:
            row["survival"] = survival_by_second(REPO / row["source"], row["start_frame"], row["seconds"],
                                                 args.survival_episodes, args.seed)
        else:
            if not row.get("whole_clip"):
                ap.error(f"row {key} has no whole-clip run (the field's policies get no dry run here)")
            row["whole_clip"]["dry_run"] = dry_run(REPO / row["source"], row["start_frame"], row["seconds"])
    else:
        row = measure(args.clip, args.policy, args.episodes, args.seed, args.artifact, args.survival_episodes)
    results = save_row(RESULTS, key, row, __doc__)
    docs_strips(results)
    print(survival_figure(results, REPO / "docs" / "tracking_survival.png") or "")
    print(render_tracking_table(results))
    print(RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
