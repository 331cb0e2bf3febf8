"""The sim-to-real proxy (`make calibration-loop`): calibrate a "robot" with hidden
perturbations, compare a nominal and a calibrated policy on it.

The robot is the sim bridge with the perturbations of `HIDDEN` (armature x1.5, friction loss x0.6, extra
joint damping 0.5 Nm s/rad, 6 ms command + 4 ms state latency, a gyro and an accelerometer bias); one
dict, turned into the sim bridge's flags (`bridge_flags`, for calibration and the dry runs) and into eval's
`--bridge-perturbation` string (`eval_perturbation`; eval has no IMU model, its policy observes the
simulator's state, so the IMU biases act in calibration and the dry runs only). Steps, one after another,
each a subprocess:

  calibrate   python -m calibration.cli --robot sim --robot-id sim_perturbed --bridge-args "<flags>"
              (lockstep: see LOCKSTEP_WHY) -> calibration/sim_perturbed.yaml
  recovery    the calibration's recovered values against the hidden truth (per parameter: truth,
              recovered, error %)
  eval        python -m eval --motion hop --episodes 20 [--bridge-perturbation "..."] for the nominal
              policy (--nominal-policy, default policies/g1/hop) and the calibrated one
              (--calibrated-policy DIR), on the perturbed bridge and, for reference, on the nominal one
  dry run     python -m deploy.cli --robot sim --bridge-args "<flags>" (make deploy ROBOT=sim with the
              hidden robot as the bridge deploy launches, real time): nominal policy without and with the
              calibration (IMU biases, joint offsets), calibrated policy with it; nominal policy on the
              nominal bridge for reference

and writes results/calibration_loop.json after every step. Finished steps are kept (a row is redone
only when its inputs changed: policy ONNX sha256, calibration sha256, bridge, episodes, seed; --force
redoes everything, --recalibrate the calibration), so an interrupted run continues where it stopped,
and once the calibrated policy exists a second run adds only its rows. Steps that need the calibrated
policy are skipped, with the command that trains it, while it does not exist.

    python -m experiments.calibration_loop [--calibrated-policy runs/calibration_loop/calibrated/hop]
        [--episodes 20] [--domain 171] [--skip-dry-run] [--force] [--recalibrate]

Never imports jax: calibration, eval, the bridge and deploy are jax-free; training is the lead's step
(`train_command`).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from experiments.runs_common import (HOST_STALL_KINDS, dry_run_row, host_stalled, keep_row, policy_sha,  # noqa: F401
                                     repeat_dry_run, run_logged)
from experiments.runs_common import rel as _rel

REPO = Path(__file__).resolve().parents[1]
RESULTS_PATH = REPO / "results" / "calibration_loop.json"
OUT = REPO / "runs" / "calibration_loop"
MOTION = "hop"
ROBOT_ID = "sim_perturbed"
CALIB_PATH = REPO / "calibration" / f"{ROBOT_ID}.yaml"
NOMINAL_POLICY = REPO / "policies" / "g1" / MOTION
CALIBRATED_POLICY = OUT / "calibrated" / MOTION  # the default --calibrated-policy (the lead's --export-dir)
DOMAIN = 171  # calibration on DOMAIN, dry runs on DOMAIN + 1 (away from the default 1 and other users)
WRITTEN_BY = "make calibration-loop (python -m experiments.calibration_loop)"

# The hidden robot. Keys: robots.model.BridgeModelConfig's knobs, sim.config.FaultConfig's latencies, the
# NoiseConfig biases (the same values tests/test_calibration_dds.py recovers).
HIDDEN: dict[str, Any] = {
    "armature_scale": 1.5,
    "frictionloss_scale": 0.6,
    "extra_joint_damping": 0.5,  # N m s/rad on every motor joint
    "cmd_latency_ms": 6.0,
    "state_latency_ms": 4.0,
    "gyro_bias": (0.03, -0.02, 0.025),  # rad/s, IMU frame
    "accel_bias": (0.2, -0.15, 0.1),  # m/s^2, IMU frame
}
# hidden key -> the sim bridge's flag (python -m sim --help)
BRIDGE_FLAGS = {
    "armature_scale": "--armature-scale",
    "damping_scale": "--damping-scale",
    "frictionloss_scale": "--frictionloss-scale",
    "extra_joint_damping": "--extra-joint-damping",
    "cmd_latency_ms": "--cmd-latency-ms",
    "state_latency_ms": "--state-latency-ms",
    "gyro_bias": "--gyro-bias",
    "accel_bias": "--accel-bias",
}
# what eval's --bridge-perturbation models (a subset of eval.bridge_setup.PERTURBATION_KEYS): no IMU there
EVAL_KEYS = ("armature_scale", "damping_scale", "frictionloss_scale", "extra_joint_damping", "cmd_latency_ms",
             "state_latency_ms")
STATE_PERIOD_S = 0.002  # the bridge's LowState period (500 Hz)
LOCKSTEP_WHY = (
    "lockstep: calibration.latency times, on the bridge clock (LowState ticks), the first state whose tau_est shows "
    "a target step after the state the command was computed from; in lockstep the bridge advances only on "
    "commands, so that is exactly state latency + command latency + one state period (4 + 6 + 2 = 12 ms; "
    "action delay = latency - one period = the injected 10 ms), with no host time in it. In real time the "
    "same routine adds the host's DDS and scheduling delay and its jitter (this 2-core machine runs a JAX "
    "training) and quantises to half a period, so it would not measure the hidden latency alone.")


class LoopError(RuntimeError):
    """A step that cannot run or failed; the message says which and what to do."""


# ---------------------------------------------------------------------------------------------- pure parts
def _fmt(v: Any) -> str:
    if isinstance(v, (tuple, list)):
        return ",".join(_fmt(x) for x in v)
    return repr(float(v)) if isinstance(v, (int, float)) else str(v)


def bridge_flags(hidden: Mapping[str, Any] = HIDDEN) -> list[str]:
    """The sim bridge's flags for the hidden robot, in HIDDEN's order."""
    out: list[str] = []
    for k, v in hidden.items():
        if k not in BRIDGE_FLAGS:
            raise LoopError(f"hidden parameter {k!r} has no sim bridge flag (known: {', '.join(BRIDGE_FLAGS)})")
        # a vector as --flag=X,Y,Z: a first component below zero must not read as an option
        out += [f"{BRIDGE_FLAGS[k]}={_fmt(v)}"] if isinstance(v, (tuple, list)) else [BRIDGE_FLAGS[k], _fmt(v)]
    return out


def eval_perturbation(hidden: Mapping[str, Any] = HIDDEN) -> str:
    """eval's --bridge-perturbation string for the hidden robot (the keys eval models)."""
    return ",".join(f"{k}={_fmt(v)}" for k, v in hidden.items() if k in EVAL_KEYS)


def truth(hidden: Mapping[str, Any] = HIDDEN) -> dict[str, Any]:
    """What a perfect calibration of the hidden robot reads, in the calibration file's terms."""
    if hidden.get("damping_scale", 1.0) != 1.0:
        raise LoopError("damping_scale != 1 has no truth in the calibration's terms (damping there is Nm s/rad "
                        "added to the model's); use extra_joint_damping")
    delay = (hidden.get("cmd_latency_ms", 0.0) + hidden.get("state_latency_ms", 0.0)) * 1e-3
    return {
        "imu.gyro_bias": tuple(hidden.get("gyro_bias", (0.0, 0.0, 0.0))),
        "imu.accel_bias": tuple(hidden.get("accel_bias", (0.0, 0.0, 0.0))),
        "latency.action_delay_s": delay,
        "latency.latency_s": delay + STATE_PERIOD_S,  # lockstep: + one state period
        "armature_scale": hidden.get("armature_scale", 1.0),
        "damping": hidden.get("extra_joint_damping", 0.0),
        "frictionloss_scale": hidden.get("frictionloss_scale", 1.0),
        "kp_scale": hidden.get("kp_scale", 1.0),
    }


def error_pct(true: float, got: float) -> float | None:
    """(recovered - truth) / |truth| in %; None for a zero truth (see abs_error)."""
    return None if true == 0 else round((got - true) / abs(true) * 100.0, 2)


def _entry(parameter: str, true: float, got: float, std: float | None = None, identified: bool | None = None,
           unit: str = "", group: str | None = None) -> dict:
    return {"parameter": parameter, "group": group, "unit": unit, "truth": true, "recovered": got, "std": std,
            "abs_error": round(got - true, 6), "error_pct": error_pct(true, got), "identified": identified}


def recovery_table(calib: Mapping, hidden: Mapping[str, Any] = HIDDEN) -> list[dict]:
    """One row per recovered quantity: IMU bias components, latency and action delay, per actuator group
    armature scale, damping, friction-loss scale, kp scale, and the largest joint offset (truth 0)."""
    t = truth(hidden)
    rows: list[dict] = []
    imu = calib.get("imu") or {}
    for key, unit in (("gyro_bias", "rad/s"), ("accel_bias", "m/s^2")):
        if key in imu:
            std = imu.get(f"{key}_std") or [None] * 3
            for i, axis in enumerate("xyz"):
                rows.append(_entry(f"{key}.{axis}", float(t[f"imu.{key}"][i]), float(imu[key][i]), std[i], None, unit))
    lat = calib.get("latency") or {}
    if "action_delay_s" in lat:
        rows.append(_entry("action_delay_ms", round(t["latency.action_delay_s"] * 1e3, 6),
                           round(float(lat["action_delay_s"]) * 1e3, 6), None, None, "ms"))
    if "latency_s" in lat:
        rows.append(_entry("latency_ms", round(t["latency.latency_s"] * 1e3, 6), round(float(lat["latency_s"]) * 1e3, 6),
                           round(float(lat.get("latency_std_s", 0.0)) * 1e3, 6), None, "ms"))
    units = {"armature_scale": "x", "damping": "Nm s/rad", "frictionloss_scale": "x", "kp_scale": "x"}
    for group, fit in (calib.get("actuators") or {}).items():
        for p, unit in units.items():
            if p in fit:
                f = fit[p]
                rows.append(_entry(p, float(t[p]), float(f["value"]), float(f["std"]), bool(f["identified"]), unit, group))
    offsets = (calib.get("joints") or {}).get("offsets")
    if offsets is not None:
        rows.append(_entry("joint_offset_max_abs", 0.0, float(max(abs(float(x)) for x in offsets)), None, None, "rad"))
    return rows


def calibration_matches(calib: Mapping, flags: Sequence[str]) -> tuple[bool, str]:
    """Was this calibration recorded on the bridge with exactly these hidden flags, in lockstep?"""
    src = calib.get("source") or {}
    args = shlex.split(str(src.get("bridge_args") or ""))
    from calibration.cli import SIM_BRIDGE_ARGS

    base = list(SIM_BRIDGE_ARGS)
    extra = args[len(base):] if args[:len(base)] == base else None
    if calib.get("mode") != "lockstep" or extra is None:
        return False, f"recorded in mode {calib.get('mode')!r} with bridge args {src.get('bridge_args')!r}"
    if extra != list(flags):
        return False, f"recorded with bridge args {' '.join(extra)!r}, the hidden robot is {' '.join(flags)!r}"
    return True, "recorded on the hidden robot in lockstep"


def policy_calibration(policy_dir: Path) -> dict | None:
    import yaml

    spec = yaml.safe_load((Path(policy_dir) / "policy.yaml").read_text()) or {}
    return (spec.get("provenance") or {}).get("calibration")


def eval_row(ev: Mapping) -> dict:
    """The numbers a results row keeps from an eval.json."""
    clear = ev.get("apex_foot_clearance_m") or {}
    flight = ev.get("flight_time_s") or {}
    return {"episodes": ev["episodes"], "falls": ev["falls"], "stood_at_end": ev.get("stood_at_end"),
            "tracking_error_cm": ev.get("tracking_error_cm"), "tracking_error_cm_max": ev.get("tracking_error_cm_max"),
            "apex_clearance_cm": {k: round(v * 100, 3) for k, v in clear.items()} or None,
            "flight_time_s": flight or None, "landing_impact_bw": ev.get("landing_impact_bw")}


def train_command(calibrated_dir: Path) -> str:
    """What the lead runs (JAX; never run here): the nominal jump's recipe (cpu preset, seed 0, 800 iterations)
    with the calibration."""
    return (f"python -m train.cli --motion {MOTION} --calibration {_rel(CALIB_PATH)} --export-dir {_rel(calibrated_dir)}")


# ---------------------------------------------------------------------------------------------- steps
def _run(cmd: list[str], log: Path, ok=(0,)) -> int:
    return run_logged(cmd, log, ok, LoopError)


def calibrate(domain: int) -> dict:
    flags = bridge_flags()
    cmd = [sys.executable, "-m", "calibration.cli", "--robot", "sim", "--robot-id", ROBOT_ID, "--domain", str(domain),
           "--out", str(CALIB_PATH), "--bridge-args", " ".join(flags)]
    rc = _run(cmd, OUT / "calibrate.log", ok=(0, 3))
    if rc == 3:
        print(f"  warning: a calibration routine refused (see `refused:` in {_rel(CALIB_PATH)})", flush=True)
    return {"exit_code": rc}


def _artifact_root(policy_dir: Path, label: str) -> Path:
    """eval finds artifacts as <root>/<motion>/: the folder itself when it is named <motion>, else a link."""
    policy_dir = Path(policy_dir).resolve()
    if policy_dir.name == MOTION:
        return policy_dir.parent
    root = OUT / "artifacts" / label
    root.mkdir(parents=True, exist_ok=True)
    link = root / MOTION
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(policy_dir, target_is_directory=True)
    return root


def run_eval(row_id: str, policy_dir: Path, label: str, perturbation: str | None, episodes: int, seed: int) -> dict:
    out = OUT / "eval" / row_id.replace("/", "_")
    cmd = [sys.executable, "-m", "eval", "--motion", MOTION, "--episodes", str(episodes), "--seed", str(seed),
           "--no-video", "--artifacts", str(_artifact_root(policy_dir, label)), "--out", str(out)]
    if perturbation:
        cmd += ["--bridge-perturbation", perturbation]
    _run(cmd, out / "eval.log")
    latest = sorted((out / MOTION).glob("*/eval.json"))[-1]
    ev = json.loads(latest.read_text())
    return {**eval_row(ev), "eval_json": _rel(latest)}


def run_dry(row_id: str, policy_dir: Path, flags: Sequence[str], calibration: Path | None, domain: int,
            attempts: int = 3) -> dict:
    out = OUT / "deploy" / row_id.replace("/", "_")
    cmd = [sys.executable, "-m", "deploy.cli", "--robot", "sim", "--policy-dir", str(policy_dir), "--domain", str(domain),
           "--run-root", str(out), "--no-plot", "--quiet"]
    if flags:
        cmd += ["--bridge-args", " ".join(flags)]
    if calibration is not None:
        cmd += ["--calibration", str(calibration)]
    return repeat_dry_run(cmd, out, attempts, _run, LoopError)


# ---------------------------------------------------------------------------------------------- driver
def plan_rows(nominal: Path, calibrated: Path, episodes: int, seed: int) -> list[dict]:
    """Every row of the experiment: id, what it runs and the inputs that make it current."""
    pert = eval_perturbation()
    flags = " ".join(bridge_flags())
    rows = []
    for who, pdir in (("nominal", nominal), ("calibrated", calibrated)):
        for bridge, p in (("perturbed", pert), ("nominal", None)):
            rows.append({"id": f"eval/{who}/{bridge}", "kind": "eval", "policy": who, "policy_dir": pdir, "bridge": bridge,
                         "perturbation": p, "episodes": episodes, "seed": seed})
    for who, pdir, bridge, calib in (("nominal", nominal, "perturbed", None), ("nominal", nominal, "perturbed", CALIB_PATH),
                                     ("calibrated", calibrated, "perturbed", CALIB_PATH), ("nominal", nominal, "nominal", None)):
        suffix = "+deploy_calibration" if calib is not None and who == "nominal" else ""
        rows.append({"id": f"dry_run/{who}{suffix}/{bridge}", "kind": "dry_run", "policy": who, "policy_dir": pdir,
                     "bridge": bridge, "bridge_args": flags if bridge == "perturbed" else "", "calibration": calib})
    return rows


def _inputs(row: Mapping, calib_sha: str | None) -> dict:
    inp = {"policy_onnx_sha256": policy_sha(row["policy_dir"]), "bridge": row["bridge"]}
    if row["kind"] == "eval":
        inp |= {"perturbation": row["perturbation"], "episodes": row["episodes"], "seed": row["seed"]}
    else:
        inp |= {"bridge_args": row["bridge_args"], "calibration_sha256": calib_sha if row["calibration"] else None}
    return inp


def _save(meta: dict, rows: dict[str, dict], order: list[str], skipped: list[dict]) -> None:
    RESULTS_PATH.parent.mkdir(exist_ok=True)
    out = {**meta, "rows": [rows[i] for i in order if i in rows], "skipped": skipped}
    tmp = RESULTS_PATH.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(out, indent=1, default=float) + "\n")
    tmp.replace(RESULTS_PATH)


def _check_calibrated_policy(d: Path, calib_sha: str, allow_mismatch: bool) -> str | None:
    """None if the calibrated policy can be used, else why its rows are skipped (or a LoopError)."""
    if not (d / "policy.yaml").is_file():
        return (f"no calibrated policy at {_rel(d)} yet (no policy.yaml); train it (JAX, the lead's step): "
                f"{train_command(d)}, then rerun `make calibration-loop ARGS=\"--calibrated-policy {_rel(d)}\"`")
    prov = policy_calibration(d)
    if not prov:
        raise LoopError(f"{_rel(d)} was not trained with a calibration (no provenance.calibration in policy.yaml): "
                        f"train it with {train_command(d)}")
    if prov.get("robot_id") != ROBOT_ID or (prov.get("sha256") != calib_sha and not allow_mismatch):
        raise LoopError(f"{_rel(d)} was trained with calibration {prov.get('robot_id')!r} sha256 {prov.get('sha256')}, "
                        f"but {_rel(CALIB_PATH)} is {ROBOT_ID!r} sha256 {calib_sha}: retrain ({train_command(d)}) "
                        "or pass --allow-calibration-mismatch")
    return None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.calibration_loop", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nominal-policy", default=str(NOMINAL_POLICY), help="artifact folder of the nominal policy")
    ap.add_argument("--calibrated-policy", default=str(CALIBRATED_POLICY),
                    help="artifact folder of the policy trained with calibration/sim_perturbed.yaml")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0, help="eval's seed (the same episodes for both policies)")
    ap.add_argument("--domain", type=int, default=DOMAIN, help="DDS domain of the calibration; dry runs use +1")
    ap.add_argument("--skip-dry-run", action="store_true", help="no dry runs (real time, ~1 min each)")
    ap.add_argument("--skip-eval", action="store_true")
    ap.add_argument("--dry-run-attempts", type=int, default=3,
                    help=f"runs of a dry run that ends on a host stall ({', '.join(HOST_STALL_KINDS)} safety event)")
    ap.add_argument("--redo", default="", help="comma-separated row ids (or prefixes, e.g. dry_run/) to redo")
    ap.add_argument("--recalibrate", action="store_true", help="redo the calibration (and every row that uses it)")
    ap.add_argument("--force", action="store_true", help="redo every step")
    ap.add_argument("--allow-calibration-mismatch", action="store_true",
                    help="use a calibrated policy trained with another version of calibration/sim_perturbed.yaml")
    a = ap.parse_args(argv)
    from eval.bridge_setup import parse_perturbation  # the string must be one eval accepts (EvalError otherwise)

    try:
        parse_perturbation(eval_perturbation())
        return _main(a)
    except LoopError as e:
        print(f"calibration-loop: error: {e}", file=sys.stderr, flush=True)
        return 1


def _main(a) -> int:
    from robots import calibration as C

    t_all = time.time()
    nominal, calibrated = Path(a.nominal_policy).resolve(), Path(a.calibrated_policy).resolve()
    if not (nominal / "policy.yaml").is_file():
        raise LoopError(f"--nominal-policy {nominal}: no policy.yaml there")
    old = json.loads(RESULTS_PATH.read_text()) if RESULTS_PATH.exists() and not a.force else {}
    step_wall = dict(old.get("step_wall_s") or {})
    flags = bridge_flags()
    n_steps = 2 + (0 if a.skip_eval else 4) + (0 if a.skip_dry_run else 4)
    k = 0

    def progress(name: str, what: str) -> None:
        nonlocal k
        k += 1
        print(f"[calibration-loop {k}/{n_steps}] {name}: {what}", flush=True)

    # (a) calibration
    need = a.force or a.recalibrate or not CALIB_PATH.exists()
    if not need:
        ok, why = calibration_matches(C.load(CALIB_PATH), flags)
        if not ok:
            raise LoopError(f"{_rel(CALIB_PATH)} is not of the hidden robot ({why}): rerun with --recalibrate")
    if need:
        progress("calibrate", f"the hidden robot, lockstep, domain {a.domain} (~3-10 min on this machine)")
        t0 = time.time()
        cal_run = calibrate(a.domain)
        step_wall["calibrate"] = round(time.time() - t0, 1)
    else:
        progress("calibrate", f"kept {_rel(CALIB_PATH)} (recorded on the hidden robot; --recalibrate redoes it)")
        cal_run = (old.get("calibration") or {}).get("run") or {}
    calib = C.load(CALIB_PATH)
    calib_sha = C.file_sha256(CALIB_PATH)
    # (b) recovery table (pure, always recomputed)
    progress("recovery", "recovered values against the hidden truth")
    recovery = recovery_table(calib, HIDDEN)
    for r in recovery:
        err = f"{r['error_pct']:+.1f} %" if r["error_pct"] is not None else f"abs {r['abs_error']:+.4g}"
        ident = "" if r["identified"] in (None, True) else "  (not identified)"
        print(f"    {(r['group'] or ''):6s} {r['parameter']:22s} truth {r['truth']:<9.4g} recovered {r['recovered']:<9.4g} {err}{ident}")
    meta = {
        "written_by": WRITTEN_BY, "motion": MOTION, "robot_id": ROBOT_ID,
        "hidden_truth": {k: list(v) if isinstance(v, tuple) else v for k, v in HIDDEN.items()},
        "bridge_flags": " ".join(flags), "eval_perturbation": eval_perturbation(),
        "notes": ["eval has no IMU model (its policy observes the simulator's state): the IMU biases act in the "
                  "calibration and the dry runs only", LOCKSTEP_WHY,
                  "dry runs: one real-time run each (python -m deploy.cli --robot sim --bridge-args <bridge_flags>), "
                  "on a shared 2-core machine"],
        "calibration": {"path": _rel(CALIB_PATH), "sha256": calib_sha, "date": calib.get("date"), "mode": calib.get("mode"),
                        "bridge_args": (calib.get("source") or {}).get("bridge_args"), "raw_logs": calib.get("raw_logs"),
                        "durations_s": calib.get("durations_s"), "refused": calib.get("refused") or {}, "run": cal_run},
        "recovery": recovery,
        "train_command": train_command(calibrated),
        "step_wall_s": step_wall,
    }
    rows = {} if a.force else {r["id"]: r for r in old.get("rows") or []}
    plan = plan_rows(nominal, calibrated, a.episodes, a.seed)
    order = [p["id"] for p in plan]
    skipped: list[dict] = []
    skip_calibrated = _check_calibrated_policy(calibrated, calib_sha, a.allow_calibration_mismatch)
    _save(meta, rows, order, skipped)
    for p in plan:
        if (p["kind"] == "eval" and a.skip_eval) or (p["kind"] == "dry_run" and a.skip_dry_run):
            continue
        if p["policy"] == "calibrated" and skip_calibrated:
            progress(p["id"], "skipped: " + skip_calibrated)
            skipped.append({"id": p["id"], "reason": skip_calibrated})
            rows.pop(p["id"], None)
            _save(meta, rows, order, skipped)
            continue
        inputs = _inputs(p, calib_sha)
        redo = any(p["id"].startswith(x) for x in filter(None, a.redo.split(",")))
        if keep_row(rows.get(p["id"]), inputs) and not redo:
            progress(p["id"], f"kept from {_rel(RESULTS_PATH)}")
            continue
        progress(p["id"], f"{p['policy']} policy ({_rel(p['policy_dir'])}) on the {p['bridge']} bridge")
        t0 = time.time()
        if p["kind"] == "eval":
            res = run_eval(p["id"], p["policy_dir"], p["policy"], p["perturbation"], p["episodes"], p["seed"])
        else:
            res = run_dry(p["id"], p["policy_dir"], flags if p["bridge"] == "perturbed" else [], p["calibration"],
                          a.domain + 1, a.dry_run_attempts)
        wall = round(time.time() - t0, 1)
        rows[p["id"]] = {"id": p["id"], "kind": p["kind"], "policy": p["policy"], "policy_dir": _rel(p["policy_dir"]),
                         "bridge": p["bridge"],
                         **({"deploy_calibration": _rel(p["calibration"]) if p["calibration"] else None}
                            if p["kind"] == "dry_run" else {}),
                         **res, "inputs": inputs, "wall_s": wall,
                         "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        step_wall[p["id"]] = wall
        _save(meta, rows, order, skipped)
        r = rows[p["id"]]
        if p["kind"] == "eval":
            c = r["apex_clearance_cm"] or {}
            print(f"    falls {r['falls']}/{r['episodes']}, tracking {r['tracking_error_cm']:.2f} cm, clearance "
                  f"{c.get('mean', float('nan')):.2f} / {c.get('min', float('nan')):.2f} cm ({wall:.0f} s)", flush=True)
        else:
            print(f"    final {r['final_state']}, fell {r['fell']}, safety events {r['safety_events']} "
                  f"{r['safety_event_kinds']}, gt apex {r['gt_apex_pelvis_m']}, flight {r['gt_flight_s']} s ({wall:.0f} s)",
                  flush=True)
    meta["step_wall_s"] = step_wall
    _save(meta, rows, order, skipped)
    print(f"calibration-loop: {_rel(RESULTS_PATH)} ({len(rows)} rows, {len(skipped)} skipped; {time.time() - t_all:.0f} s)",
          flush=True)
    if skipped:
        print(f"calibration-loop: next: {train_command(calibrated)}\n"
              f"  then: make calibration-loop ARGS=\"--calibrated-policy {_rel(calibrated)}\"", flush=True)
    return 0


def render_calibration_loop_table(results: dict) -> str:
    """The markdown table of results/calibration_loop.json: per policy and bridge, the eval row and the dry run."""
    rows = {r["id"]: r for r in results["rows"]}
    head = ["policy", "bridge", "eval falls", "stood", "tracking mean / max", "apex foot clearance mean / min",
            "landing impact mean / max", "dry run"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    keys = dict.fromkeys((r["policy"], r["bridge"]) for r in results["rows"])
    for policy, bridge in keys:
        ev, dry = rows.get(f"eval/{policy}/{bridge}"), rows.get(f"dry_run/{policy}/{bridge}")
        src = ev or dry
        cells = [f"{policy} (`{src['policy_dir']}`)" if policy in ("nominal", "calibrated") else policy, bridge]
        if ev:
            cells += [f"{ev['falls']}/{ev['episodes']}", f"{ev['stood_at_end']}/{ev['episodes']}",
                      f"{ev['tracking_error_cm']:.2f} / {ev['tracking_error_cm_max']:.2f} cm",
                      f"{ev['apex_clearance_cm']['mean']:.2f} / {ev['apex_clearance_cm']['min']:.2f} cm",
                      f"{ev['landing_impact_bw']['mean']:.2f} / {ev['landing_impact_bw']['max']:.2f} BW"]
        else:
            cells += ["-"] * 5
        if dry:
            rmse = dry.get("estimator_base_vel_rmse_mps")
            cells.append(f"{dry['final_state']}, {dry['safety_events']} events, flight {dry['gt_flight_s']:.2f} s"
                         + (f", estimator velocity RMSE {rmse:.3f} m/s" if rmse is not None else ""))
        else:
            cells.append("-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_calibration_recovery_table(results: dict) -> str:
    """What the calibration recovered of the hidden robot (results/calibration_loop.json `recovery`)."""
    lines = ["| parameter | group | truth | recovered (std) | error | identified |", "|---|---|---|---|---|---|"]
    for r in results["recovery"]:
        std = "" if r["std"] is None else f" ({r['std']:.3g})"
        err = "-" if r["error_pct"] is None else f"{r['error_pct']:+.2f} %"
        ident = {True: "yes", False: "**no**", None: "-"}[r["identified"]]
        lines.append(f"| {r['parameter']} | {r['group'] or '-'} | {r['truth']:.4g} {r['unit']} | {r['recovered']:.4g}{std} | "
                     f"{err} | {ident} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
