"""The table of every policy artifact (`make motion-table`): for each folder
<artifacts>/<motion>/ with policy.onnx + policy.yaml (default policies/g1/), one after another, each a
subprocess:

  eval      python -m eval --motion <m> --episodes 20 --seed 0 --no-video [--artifacts DIR]
            (C MuJoCo, randomised episodes) -> falls, stood, apex foot clearance, pelvis apex rise, flight,
            forward displacement, tracking, peak |tau| / limit per joint group
  dry run   python -m deploy.cli --robot sim --policy-dir <artifacts>/<m> (what `make deploy ROBOT=sim
            MOTION=<m>` runs: the sim bridge, stand-up, the motion, HOLD; real time) on DDS domain --domain
            -> final state, safety events, the bridge's ground-truth flight time and pelvis apex; a run ended
            by a host stall (a deadline / stale_state safety event: the machine, not the robot) is repeated,
            as experiments/calibration_loop.py does (experiments.runs_common)
  provenance the artifact's policy.yaml: algorithm, iterations, preset, contact model and its knob,
            training wall time (wall_time_s), calibration

and writes results/motions.json after every step, then prints the markdown table. A finished step is
kept while its inputs are unchanged (eval: the policy ONNX's sha256, episodes, seed, the eval flags;
dry run: the ONNX's sha256 and the dry-run command; a host-stalled dry run is redone), so a second run
after a new motion was trained and exported runs only that motion:

    python -m experiments.motion_table [--motions jump,jump_high] [--force] [--artifacts DIR]
        [--episodes 20] [--seed 0] [--domain 180] [--skip-dry-run] [--dry-run-attempts 3] [--table-only]

A folder is evaluated when its policy.yaml describes a motion (kind "motion", a reference of positive
duration: the zero-policy `stand` has one, 4 s of the default pose); velocity policies and incomplete
folders are listed under "skipped" (a name given with --motions that cannot be evaluated is an error).
Never imports jax: eval and deploy are jax-free; training is the lead's step.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from experiments.runs_common import keep_row, onnx_file_sha, rel, repeat_dry_run, run_logged

REPO = Path(__file__).resolve().parents[1]
RESULTS_PATH = REPO / "results" / "motions.json"
OUT = REPO / "runs" / "motion_table"
ARTIFACTS = REPO / "policies" / "g1"
DOMAIN = 180  # away from the default 1, the soak's ~211 and calibration-loop's 171-172
STANDING_HEIGHT_M = 0.785  # robots.g1.DEFAULT_BASE_HEIGHT, eval's pelvis_apex_rise_m reference
EVAL_FLAGS = ("--no-video",)  # what eval runs with besides --episodes / --seed (part of the eval inputs)
WRITTEN_BY = "make motion-table (python -m experiments.motion_table)"
ADD_COMMAND = "make motion-table ARGS=\"--motions <name>\""


class TableError(RuntimeError):
    """A step that cannot run or failed; the message says which and what to do."""


# ---------------------------------------------------------------------------------------------- pure parts
def skip_reason(spec: Mapping | None, folder_files: Sequence[str]) -> str | None:
    """None when the artifact folder has a motion eval can run, else why it is skipped. `spec`: the parsed
    policy.yaml (None when absent), `folder_files`: the names in the folder."""
    missing = [n for n in ("policy.onnx", "policy.yaml", "reference.npz") if n not in folder_files]
    if missing:
        return f"{', '.join(missing)} missing (re-export it: make export RUN=runs/<motion>/<stamp>)"
    spec = spec or {}
    kind = spec.get("kind", "motion")
    if kind != "motion":
        return f"a {kind} policy (no motion reference to evaluate; eval runs native motion artifacts)"
    if spec.get("tracking"):
        return "a tracking policy (its table: make tracking, results/tracking.json)"
    dur = (spec.get("motion") or {}).get("duration")
    if not dur or float(dur) <= 0:
        return f"no motion to evaluate (motion duration {dur!r})"
    return None


def eval_inputs(onnx_sha: str, episodes: int, seed: int) -> dict:
    """What makes an eval row current."""
    return {"policy_onnx_sha256": onnx_sha, "episodes": int(episodes), "seed": int(seed), "flags": list(EVAL_FLAGS)}


def dry_run_inputs(onnx_sha: str, bridge_args: str = "") -> dict:
    """What makes a dry-run row current (the DDS domain is not: it changes nothing the robot does)."""
    return {"policy_onnx_sha256": onnx_sha, "command": "deploy.cli --robot sim (real time)", "bridge_args": bridge_args}


def contact_of(prov: Mapping) -> tuple[str | None, str | None]:
    """(contact model, its knob) from provenance: train.export.contact_provenance's keys; artifacts exported
    before `contact` was recorded trained on MJX's contact and carry only `stiffness`."""
    contact = prov.get("contact")
    if contact is None and prov.get("stiffness") is not None:
        contact = "mjx"
    if contact == "sigmoid":
        return contact, None if prov.get("kappa") is None else f"k = {float(prov['kappa']):g}"
    if contact == "mjx":
        return contact, None if prov.get("stiffness") is None else f"stiffness {prov['stiffness']}"
    return contact, None


def provenance_row(prov: Mapping | None) -> dict:
    """The provenance a row keeps: algorithm, iterations, preset, seed, contact and knob, training time."""
    prov = prov or {}
    contact, knob = contact_of(prov)
    calib = prov.get("calibration") or None
    return {"algorithm": prov.get("algorithm"), "iterations": prov.get("iterations"), "preset": prov.get("preset"),
            "seed": prov.get("seed"), "contact": contact, "contact_knob": knob, "substeps": prov.get("substeps"),
            "training_wall_time_s": prov.get("wall_time_s"), "calibration": calib and calib.get("robot_id"),
            "git_commit": prov.get("git_commit"), "date": prov.get("date"), "run": prov.get("run")}


def _scaled(d: Mapping | None, scale: float, keys: Sequence[str], nd: int = 3) -> dict | None:
    if not d:
        return None
    return {k: round(float(d[k]) * scale, nd) for k in keys if d.get(k) is not None} or None


def eval_metrics(ev: Mapping) -> dict:
    """The numbers a row keeps from an eval.json (lengths in cm, times in s, torque as |tau| / limit)."""
    tau = ev.get("peak_torque_ratio") or {}
    return {
        "episodes": ev["episodes"], "falls": ev["falls"], "stood_at_end": ev.get("stood_at_end"),
        "apex_clearance_cm": _scaled(ev.get("apex_foot_clearance_m"), 100, ("mean", "min")),
        "pelvis_apex_rise_cm": _scaled(ev.get("pelvis_apex_rise_m"), 100, ("mean", "min")),
        "flight_time_s": _scaled(ev.get("flight_time_s"), 1, ("mean", "min"), 4),
        "forward_displacement_cm": _scaled(ev.get("forward_displacement_m"), 100, ("mean", "min", "max")),
        "tracking_error_cm": ev.get("tracking_error_cm"), "tracking_error_cm_max": ev.get("tracking_error_cm_max"),
        "peak_torque_ratio": {g: round(float(v["max"]), 3) for g, v in tau.items() if v and v.get("max") is not None}
        or None,
        "landing_impact_bw": ev.get("landing_impact_bw"), "penetration_mm": ev.get("penetration_mm"),
        "seconds_per_episode": ev.get("seconds_per_episode"),
    }


def build_row(motion: str, policy_dir: str, onnx_sha: str, prov: Mapping | None, ev: Mapping | None = None,
              dry: Mapping | None = None) -> dict:
    """One results row: the artifact, its provenance, the eval numbers (from eval.json) and the dry run's."""
    return {"motion": motion, "policy_dir": policy_dir, "policy_onnx_sha256": onnx_sha,
            "provenance": provenance_row(prov), "eval": None if ev is None else eval_metrics(ev),
            "dry_run": None if dry is None else dict(dry)}


def _num(x: float, nd: int) -> str:
    s = f"{float(x):.{nd}f}"
    return s[1:] if s.startswith("-") and float(s) == 0 else s  # no "-0.0"


def _pair(d: Mapping | None, unit: str, nd: int = 1, keys=("mean", "min")) -> str:
    if not d or any(d.get(k) is None for k in keys):
        return "-"
    return " / ".join(_num(d[k], nd) for k in keys) + f" {unit}"


def _duration(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s / 60:.1f} min" if s >= 60 else f"{s:.0f} s"


def _algorithm(p: Mapping) -> str:
    out = str(p.get("algorithm") or "-")
    extra = [f"{p['iterations']} it"] if p.get("iterations") else []
    if p.get("preset"):
        extra.append(f"{p['preset']} preset")
    if p.get("calibration"):
        extra.append(f"calibration {p['calibration']}")
    return out + (f" ({', '.join(extra)})" if extra else "")


def _contact(p: Mapping) -> str:
    if not p.get("contact"):
        return "-"
    return str(p["contact"]) + (f", {p['contact_knob']}" if p.get("contact_knob") else "")


def _events(d: Mapping) -> str:
    n = int(d.get("safety_events") or 0)
    s = str(n) + (f" ({', '.join(d.get('safety_event_kinds') or [])})" if n else "")
    retries = len(d.get("host_stall_attempts") or [])
    if d.get("host_stalled"):
        s += f", host stall after {retries} attempts"
    elif retries:
        s += f" (after {retries} host-stall rerun{'s' if retries > 1 else ''})"
    return s


COLUMNS = ("motion", "falls", "stood", "apex foot clearance mean / min", "pelvis apex rise mean / min",
           "flight mean / min", "forward displacement mean / min", "tracking", "peak torque ratio (legs / waist / arms)",
           "training time", "algorithm", "contact", "dry run: final state", "dry run: safety events",
           "dry run: gt flight", "dry run: gt apex")


def table_cells(row: Mapping) -> list[str]:
    """The markdown cells of one row ('-' where a figure is absent)."""
    e, p, d = row.get("eval") or {}, row.get("provenance") or {}, row.get("dry_run") or {}
    n = e.get("episodes")
    tau = e.get("peak_torque_ratio") or {}
    fwd = _pair(e.get("forward_displacement_cm"), "cm")
    if fwd == "-" and e and e.get("falls") == n:
        fwd = "- (all fell)"
    apex = d.get("gt_apex_pelvis_m")
    return [
        str(row["motion"]),
        f"{e['falls']}/{n}" if e else "-",
        f"{e['stood_at_end']}/{n}" if e and e.get("stood_at_end") is not None else "-",
        _pair(e.get("apex_clearance_cm"), "cm") if e else "-",
        _pair(e.get("pelvis_apex_rise_cm"), "cm") if e else "-",
        _pair(e.get("flight_time_s"), "s", 2) if e else "-",
        fwd if e else "-",
        f"{e['tracking_error_cm']:.1f} cm" if e and e.get("tracking_error_cm") is not None else "-",
        " / ".join(f"{tau[g]:.2f}" for g in ("legs", "waist", "arms") if g in tau) or "-",
        _duration(p.get("training_wall_time_s")),
        _algorithm(p),
        _contact(p),
        str(d.get("final_state") or "-") if d else "-",
        _events(d) if d else "-",
        f"{d['gt_flight_s']:.2f} s" if d and d.get("gt_flight_s") is not None else "-",
        (f"{apex:.3f} m ({'+' if apex >= STANDING_HEIGHT_M else ''}{_num((apex - STANDING_HEIGHT_M) * 100, 1)} cm)"
         if d and apex is not None else "-"),
    ]


def markdown_table(rows: Sequence[Mapping]) -> str:
    """The table of every row, markdown, one line per motion."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(table_cells(r)) + " |" for r in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- artifacts
def _spec(d: Path) -> dict | None:
    import yaml

    try:
        return yaml.safe_load((d / "policy.yaml").read_text()) if (d / "policy.yaml").is_file() else None
    except yaml.YAMLError as e:
        raise TableError(f"{rel(d / 'policy.yaml')} does not parse: {e}") from e


def discover(root: Path, wanted: Sequence[str] | None) -> tuple[list[tuple[str, Path]], list[dict]]:
    """([(motion, folder)] to run, [skipped {motion, reason}]). A name in `wanted` that is not a folder of
    root, or that cannot be evaluated, is a TableError."""
    root = Path(root)
    if not root.is_dir():
        raise TableError(f"artifact root {rel(root)} is not a folder")
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    folders = [p for p in folders if {"policy.onnx", "policy.yaml"} & {f.name for f in p.iterdir()}]
    names = [p.name for p in folders]
    if wanted:
        unknown = [m for m in wanted if m not in names]
        if unknown:
            raise TableError(f"unknown motion(s) {', '.join(unknown)}: no {rel(root)}/<motion>/policy.yaml; policy folders "
                             f"there: {', '.join(names) or 'none'} (train one with `make train MOTION=<name>`, export "
                             "it with `make export RUN=runs/<motion>/<stamp>`)")
        folders = [p for p in folders if p.name in wanted]
    run, skipped = [], []
    for p in folders:
        why = skip_reason(_spec(p), [f.name for f in p.iterdir()])
        if why is None:
            run.append((p.name, p))
        elif wanted:
            raise TableError(f"{rel(p)}: {why}")
        else:
            skipped.append({"motion": p.name, "policy_dir": rel(p), "reason": why})
    return run, skipped


# ---------------------------------------------------------------------------------------------- steps
def _run(cmd: list[str], log: Path, ok=(0,)) -> int:
    return run_logged(cmd, log, ok, TableError)


def run_eval(motion: str, root: Path, episodes: int, seed: int) -> tuple[dict, str]:
    """(eval.json, its path) of `python -m eval --motion <m> --episodes N --seed S --no-video`."""
    out = OUT / "eval"
    cmd = [sys.executable, "-m", "eval", "--motion", motion, "--episodes", str(episodes), "--seed", str(seed),
           *EVAL_FLAGS, "--artifacts", str(root), "--out", str(out)]
    before = set((out / motion).glob("*/eval.json"))
    _run(cmd, out / f"{motion}.log")
    new = sorted(set((out / motion).glob("*/eval.json")) - before)
    if not new:
        raise TableError(f"eval wrote no eval.json under {rel(out / motion)}; see {rel(out / f'{motion}.log')}")
    return json.loads(new[-1].read_text()), rel(new[-1])


def run_dry(motion: str, policy_dir: Path, domain: int, attempts: int) -> dict:
    out = OUT / "deploy" / motion
    cmd = [sys.executable, "-m", "deploy.cli", "--robot", "sim", "--policy-dir", str(policy_dir), "--domain", str(domain),
           "--run-root", str(out), "--no-plot", "--quiet"]
    return repeat_dry_run(cmd, out, attempts, _run, TableError)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _save(doc: dict) -> None:
    RESULTS_PATH.parent.mkdir(exist_ok=True)
    tmp = RESULTS_PATH.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=float) + "\n")
    tmp.replace(RESULTS_PATH)


def _load() -> dict:
    if not RESULTS_PATH.exists():
        return {}
    try:
        return json.loads(RESULTS_PATH.read_text())
    except json.JSONDecodeError as e:
        raise TableError(f"{rel(RESULTS_PATH)} does not parse ({e}); move it away or rerun with --force") from e


# ---------------------------------------------------------------------------------------------- driver
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.motion_table", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--motions", default="", help="comma-separated motion folders (default: every one)")
    ap.add_argument("--artifacts", default=str(ARTIFACTS), help="artifact root holding <motion>/ (default policies/g1)")
    ap.add_argument("--force", action="store_true", help="redo every step of the selected motions")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--domain", type=int, default=DOMAIN, help="DDS domain of the dry runs (default %(default)s)")
    ap.add_argument("--skip-dry-run", action="store_true", help="no dry runs (real time, ~1 min each)")
    ap.add_argument("--dry-run-attempts", type=int, default=3,
                    help="runs of a dry run that ends on a host stall (deadline, stale_state safety event)")
    ap.add_argument("--table-only", action="store_true", help="print the table of results/motions.json, run nothing")
    a = ap.parse_args(argv)
    try:
        return _main(a)
    except TableError as e:
        print(f"motion-table: error: {e}", file=sys.stderr, flush=True)
        return 1


def _main(a) -> int:
    t_all = time.time()
    old = _load()
    if a.table_only:
        print(markdown_table(old.get("rows") or []))
        return 0
    root = Path(a.artifacts).resolve()
    wanted = [m.strip() for m in a.motions.split(",") if m.strip()] or None
    plan, skipped = discover(root, wanted)
    if not plan:
        raise TableError(f"no evaluable policy folder in {rel(root)} (skipped: "
                         + ("; ".join(f"{s['motion']}: {s['reason']}" for s in skipped) or "none") + ")")
    rows = {r["motion"]: r for r in old.get("rows") or []}
    for m, r in list(rows.items()):  # a row whose artifact is gone is dropped
        if not (REPO / r.get("policy_dir", "") / "policy.yaml").is_file():
            print(f"motion-table: dropping row {m}: {r.get('policy_dir')}/policy.yaml no longer exists", flush=True)
            rows.pop(m)
    old_skipped = [s for s in old.get("skipped") or [] if wanted and s["motion"] not in wanted]
    meta = {"written_by": WRITTEN_BY,
            "eval_command": f"python -m eval --motion <m> --episodes {a.episodes} --seed {a.seed} {' '.join(EVAL_FLAGS)}",
            "dry_run_command": "python -m deploy.cli --robot sim --policy-dir <artifacts>/<m> (make deploy ROBOT=sim "
                               "MOTION=<m>; real time, on a shared 2-core machine)",
            "add_motion_command": ADD_COMMAND,
            "notes": ["lengths in cm, times in s; peak_torque_ratio: max over episodes of |PD torque demanded| / motor "
                      "limit per joint group (> 1: the drive saturated); gt_*: the sim bridge's ground truth after the "
                      "band's release (gt apex: highest pelvis height; standing is 0.785 m)",
                      "eval's flight_time_s and pelvis_apex_rise_m include the episode's first physics steps: the robot "
                      "is placed a hair above the floor and drops for ~13 ms (the zero-policy stand reads flight 0.013 s "
                      "and apex rise -0.00001 m in every episode), so a flight below ~0.02 s is no jump",
                      "a row's eval / dry_run is kept while its inputs are unchanged; a host-stalled dry run is redone"]}
    n_steps = len(plan) * (1 if a.skip_dry_run else 2)
    k = 0

    def progress(motion: str, what: str) -> None:
        nonlocal k
        k += 1
        print(f"[motion-table {k}/{n_steps}] {motion}: {what}", flush=True)

    def save() -> None:
        order = sorted(rows)
        _save({**meta, "rows": [rows[m] for m in order], "skipped": old_skipped + skipped})

    for motion, d in plan:
        sha = onnx_file_sha(d)
        spec = _spec(d) or {}
        prev = rows.get(motion) or {}
        row = build_row(motion, rel(d), sha, spec.get("provenance"))
        row["eval"], row["dry_run"] = prev.get("eval"), prev.get("dry_run")
        row["wall_s"] = dict(prev.get("wall_s") or {})
        # (a) eval
        inp = eval_inputs(sha, a.episodes, a.seed)
        if keep_row(row["eval"], inp) and not a.force:
            progress(motion, f"eval kept from {rel(RESULTS_PATH)} (same ONNX sha256 {sha[:12]}, episodes, seed)")
        else:
            progress(motion, f"eval, {a.episodes} episodes, seed {a.seed} ({rel(d)}, ONNX sha256 {sha[:12]})")
            t0 = time.time()
            ev, path = run_eval(motion, root, a.episodes, a.seed)
            wall = round(time.time() - t0, 1)
            row["eval"] = {**eval_metrics(ev), "eval_json": path, "inputs": inp, "wall_s": wall, "date": _now()}
            row["wall_s"]["eval"] = wall
            rows[motion] = row
            save()
            print("    " + ", ".join(f"{c} {v}" for c, v in zip(COLUMNS[1:10], table_cells(row)[1:10])) + f" ({wall:.0f} s)",
                  flush=True)
        rows[motion] = row
        save()
        # (b) dry run
        if a.skip_dry_run:
            continue
        inp = dry_run_inputs(sha)
        if keep_row(row["dry_run"], inp) and not a.force:
            progress(motion, f"dry run kept from {rel(RESULTS_PATH)}")
            continue
        progress(motion, f"dry run against the sim bridge, real time, DDS domain {a.domain} (~1 min)")
        t0 = time.time()
        res = run_dry(motion, d, a.domain, a.dry_run_attempts)
        wall = round(time.time() - t0, 1)
        row["dry_run"] = {**res, "inputs": inp, "wall_s": wall, "date": _now()}
        row["wall_s"]["dry_run"] = wall
        save()
        dr = row["dry_run"]
        print(f"    final {dr['final_state']}, safety events {_events(dr)}, gt flight {dr['gt_flight_s']} s, "
              f"gt apex {dr['gt_apex_pelvis_m']} m ({wall:.0f} s)", flush=True)
    save()
    for s in skipped:
        print(f"motion-table: skipped {s['motion']}: {s['reason']}", flush=True)
    print(markdown_table([rows[m] for m in sorted(rows)]))
    stalled = [m for m, r in rows.items() if (r.get("dry_run") or {}).get("host_stalled")]
    if stalled:
        print(f"motion-table: dry run of {', '.join(stalled)} ended on a host stall every attempt; rerun to redo it",
              flush=True)
    print(f"motion-table: {rel(RESULTS_PATH)} ({len(rows)} rows; {time.time() - t_all:.0f} s). "
          f"A new motion: {ADD_COMMAND}", flush=True)
    return 0


def render_motions_table(results: dict) -> str:
    """The table of results/motions.json (make motion-table)."""
    return markdown_table(results["rows"])


HEADLINE = ("motion", "falls", "stood", "apex foot clearance mean / min", "pelvis apex rise mean / min",
            "flight mean / min", "forward displacement mean / min", "dry run: final state", "dry run: safety events")


def render_motions_headline_table(results: dict) -> str:
    """The README's columns of results/motions.json: what each committed policy does in eval and on the bridge."""
    keep = [COLUMNS.index(c) for c in HEADLINE]
    lines = ["| " + " | ".join(HEADLINE) + " |", "|" + "---|" * len(HEADLINE)]
    lines += ["| " + " | ".join(table_cells(r)[i] for i in keep) + " |" for r in results["rows"]]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
