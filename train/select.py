"""Checkpoint selection by a held-out evaluation (`make train ... ARGS="--select-every 100"`).

A motion's training return is not its success: a toe jump run fell 18/20 in `make eval` at
iteration 475, 0/20 at 825 and 14/20 at 1025 while its reward rose, and the forward jump's fell 20/20 at 900 and
0/20 at its end. So every `every` iterations the training exports its policy to run/select/it<N>/<motion>/ and
starts `python -m eval` on it in a subprocess (C MuJoCo and onnxruntime, no jax; it runs while the training
goes on, on whichever core is free), with eval seed SEED, not `make eval`'s 0: the figures reported for the
exported policy are then not the ones it was chosen by. At the end the final policy is evaluated too, the best
candidate by `rank` (fewest falls, then most standing at the end, then the latest mean time of the falls, then
the lowest tracking error; a tie goes to the later iteration: among policies that all fall, as a tracking policy
early in its training does from standing, the one that stays up longest) is exported to the usual place, and
run/select/select.json lists every candidate. `python -m train.select RUN` ranks a finished run's candidates again.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import jax
import numpy as np

from train.export import REPO, repo_relative

SEED = 1000  # the selection's eval seed: `make eval` reports on seed 0
RULE = "fewest falls, then most standing at the end, then the latest mean fall, then lowest tracking error; ties: later"


def rank(row: dict) -> tuple:
    """The sort key of an evaluated candidate (lower is better); a failed evaluation ranks last."""
    if row.get("falls") is None:
        return (float("inf"), 0, 0.0, float("inf"), -row["iteration"])
    err = row["tracking_error_cm"]
    later = row.get("mean_fell_at_s") or 0.0
    return (row["falls"], -row["stood_at_end"], -later, err if err == err else float("inf"), -row["iteration"])


def best(rows: list[dict]) -> dict:
    return min(rows, key=rank)


@dataclass
class Selector:
    """Exports and evaluates candidates during a run; `finish` picks the best."""
    run_dir: Path
    motion: str
    episodes: int = 20
    seed: int = SEED
    rows: list[dict] = field(default_factory=list)
    params: dict = field(default_factory=dict)  # iteration -> (actor, obs_norm) on the host
    _running: list = field(default_factory=list)  # (row, Popen, log file)

    @property
    def root(self) -> Path:
        return self.run_dir / "select"

    def candidate(self, iteration: int, actor, obs_norm, export) -> None:
        """Export (`export(actor, obs_norm, out_dir)`) and start its evaluation; returns at once."""
        self._reap(wait=True)  # one evaluation at a time: they are ~20 s, candidates minutes apart
        host = jax.device_get((actor, obs_norm))
        self.params[iteration] = host
        art_root = self.root / f"it{iteration}"
        export(*host, art_root / self.motion)
        cmd = [sys.executable, "-m", "eval", "--motion", self.motion, "--artifacts", str(art_root), "--episodes",
               str(self.episodes), "--seed", str(self.seed), "--no-video", "--out", str(self.root / "eval")]
        log = open(art_root / "eval.log", "w")
        # no preexec_fn: that forks the multithreaded JAX process (vfork/exec without it), so the training's CPU pin
        # is lifted from the evaluation once it runs
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=dict(os.environ, MPLBACKEND="Agg"))
        try:
            os.sched_setaffinity(proc.pid, range(os.cpu_count() or 1))
        except OSError:  # already exited, or not allowed: it keeps the training's affinity
            pass
        self._running.append(({"iteration": iteration, "artifact": repo_relative(art_root / self.motion)}, proc, log))

    def poll(self) -> None:
        """Record (and print) the evaluations that have finished; returns at once."""
        self._reap(wait=False)

    def _reap(self, wait: bool) -> None:
        for entry in list(self._running):
            row, proc, log = entry
            if proc.poll() is None and not wait:
                continue
            code = proc.wait()
            log.close()
            self._running.remove(entry)
            self.rows.append(row | self._figures(Path(log.name), code))
            r = self.rows[-1]
            print(f"select: iteration {r['iteration']}: " + (
                f"{r['falls']}/{r['episodes']} falls, {r['stood_at_end']} standing, tracking {r['tracking_error_cm']:.1f} cm"
                if r.get("falls") is not None else f"evaluation failed ({r['error']})"), flush=True)

    @staticmethod
    def _figures(log: Path, code: int) -> dict:
        lines = log.read_text().strip().splitlines()
        if code != 0 or not lines or not lines[-1].endswith("eval.json"):
            return {"falls": None, "error": f"python -m eval exited {code}; see {log}"}
        return figures(Path(lines[-1]))

    def finish(self, iteration: int, actor, obs_norm, export) -> tuple[dict, tuple]:
        """Evaluates the final policy (unless it already is a candidate), waits for every evaluation, writes
        select/select.json and returns (best row, its (actor, obs_norm))."""
        if iteration not in self.params:
            self.candidate(iteration, actor, obs_norm, export)
        self._reap(wait=True)
        pick = best(self.rows)
        out = {"rule": RULE,
               "eval_seed": self.seed, "episodes": self.episodes, "selected_iteration": pick["iteration"],
               "candidates": sorted(self.rows, key=lambda r: r["iteration"])}
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "select.json").write_text(json.dumps(out, indent=1, default=_plain))
        return pick, self.params[pick["iteration"]]


def figures(eval_json: Path) -> dict:
    """A candidate's figures from its eval.json."""
    ev = json.loads(Path(eval_json).read_text())
    keep = ("episodes", "falls", "stood_at_end", "tracking_error_cm", "apex_foot_clearance_m", "flight_time_s",
            "pelvis_apex_rise_m", "forward_displacement_m")
    figs = {k: ev.get(k) for k in keep}
    if figs["tracking_error_cm"] is None and ev.get("tracking"):  # tracking policies: body-position error
        figs["tracking_error_cm"] = ev["tracking"].get("body_pos_err_cm")
    if figs["tracking_error_cm"] is None:
        figs["tracking_error_cm"] = float("nan")
    fell = [e["fell_at_s"] for e in ev.get("per_episode", []) if e.get("fell")]
    figs["mean_fell_at_s"] = float(np.mean(fell)) if fell else None  # s into the episode; None: none fell
    return figs | {"eval_json": repo_relative(eval_json)}


def _plain(v):
    return v.tolist() if isinstance(v, np.ndarray) else float(v)


def found(root: Path) -> dict:
    """The selection record of a run that stopped before writing select.json (killed, out of memory): its
    exported candidates select/it<N>/<motion>/ and the eval.json files under select/eval/ that name them."""
    evals = {}
    for ev in sorted(root.glob("eval/*/*/eval.json")):
        policy = Path(json.loads(ev.read_text()).get("policy", ""))
        evals[policy.parent.name] = ev  # select/it<N>/<motion>: it<N>
    cands = []
    for d in sorted(root.glob("it*/*/policy.yaml")):
        it = d.parent.parent.name
        if it[2:].isdigit():
            cands.append({"iteration": int(it[2:]), "artifact": repo_relative(d.parent),
                          "eval_json": repo_relative(evals[it]) if it in evals else None})
    if not cands:
        raise FileNotFoundError(f"{root}: no select/select.json and no exported candidates (trained without "
                                "--select-every)")
    return {"eval_seed": SEED, "candidates": sorted(cands, key=lambda r: r["iteration"])}


def reselect(run_dir: Path) -> dict:
    """A run's selection again by the current `rank`, from its candidates' eval.json files (no evaluation):
    rewrites select/select.json and returns it. The chosen candidate's artifact is the one its `artifact` names
    (select/it<N>/<motion>). A run that stopped before writing select.json has its candidates found (`found`)."""
    root = Path(run_dir) / "select"
    old = json.loads((root / "select.json").read_text()) if (root / "select.json").is_file() else found(root)
    rows = []
    for r in old["candidates"]:
        ev = r.get("eval_json")
        keep = {k: r[k] for k in ("iteration", "artifact")}
        if ev:
            keep |= figures(Path(ev) if Path(ev).is_absolute() else REPO / ev)
        else:
            keep |= {"falls": None, "error": r.get("error", "no evaluation")}
        rows.append(keep)
    pick = best(rows)
    out = old | {"rule": RULE, "selected_iteration": pick["iteration"], "candidates": rows}
    (root / "select.json").write_text(json.dumps(out, indent=1, default=_plain))
    return out


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m train.select", description="Re-rank a finished run's selection "
                                 "candidates by the current rule (their evaluations as they are; nothing re-run).")
    ap.add_argument("run", help="the run folder runs/<motion>/<stamp>")
    args = ap.parse_args(argv)
    try:
        out = reselect(Path(args.run))
    except FileNotFoundError as e:
        print(f"error: {e}")
        return 2
    pick = next(r for r in out["candidates"] if r["iteration"] == out["selected_iteration"])
    for r in out["candidates"]:
        if r.get("falls") is None:
            print(f"iteration {r['iteration']}: {r.get('error')}")
            continue
        fell = "-" if r["mean_fell_at_s"] is None else f"{r['mean_fell_at_s']:.2f} s"
        print(f"iteration {r['iteration']}: {r['falls']}/{r['episodes']} falls (mean at {fell}), {r['stood_at_end']} "
              f"standing, tracking {r['tracking_error_cm']:.1f} cm")
    print(f"selected iteration {pick['iteration']}: {pick['artifact']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
