"""The landing of motions/jump_swing.yaml, searched: keyframes after the take-off whose reference a floor can carry.

    make landing-search                      # writes results/landing_search.json
    python -m experiments.landing_search --start level --evals 3000

What a landing reference needs (motions.balance, motions.momentum): after touch-down, the CoP its momentum needs
inside the feet, and no jump in the angular momentum about the COM across touch-down (no floor force gives one
in a frame; legs flexing under a level pelvis carry ~-9 N m s nose-up). The search varies 18 numbers (the
take-off and touch-down upper body, the touch-down feet and pelvis, and a catch, a recovery and a stand keyframe
after it: times, heights, pelvis x and pitch, waist and shoulders) and minimises, with scipy's Powell (bounds):

    sum over landing frames of (max(0, 2 cm - CoP margin) / 1 cm)^2
  + 0.05 * the same for the push-off's CoP below 0 (the push-off is not the target; it weighs a little)
  + sum over frames 0.3 s after touch-down of (max(0, 3 cm - COM margin) / 1 cm)^2
  + (L_y after - before touch-down, N m s)^2
  + 10 * max(0, |free pitch drift in flight| - 2 deg)^2 + 1e5 * max(0, 0.94 m - pelvis apex)^2
  + 100 * max(0, peak stance force / weight - F_MAX)^2

A keyframe set the library refuses (joint or ankle limits, leg reach, the floor pulling) costs 1e6. The committed
keyframes came from a staged run (Nelder-Mead on 12 numbers with a level pelvis, then this objective with the
pelvis pitch from `--start level`, F_MAX 3.5); `--start committed` polishes the committed ones (a local optimum
stays put). The JSON has the before (`level`: the same keyframes with a level pelvis) and after figures.
"""
from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import numpy as np
import yaml

from motions.balance import balance
from motions.library import MOTIONS_DIR
from motions.momentum import flight_consistency, motion_angmom
from motions.motion import MotionError
from motions.reference import build_motion
from motions.schema import parse_motion
from robots.physics import GRAVITY

MOTION = MOTIONS_DIR / "jump_swing.yaml"
OUT = Path("results/landing_search.json")
# name, lower, upper: keyframe numbers after the crouch (keyframes[3:] of jump_swing.yaml)
PARAMS = [("waist_takeoff", -0.52, 0.52), ("shoulder_takeoff", -2.5, 1.0), ("waist_touchdown", -0.52, 0.52),
          ("shoulder_touchdown", -1.5, 2.0), ("foot_x_touchdown", -0.15, 0.1), ("pelvis_x_touchdown", -0.25, 0.05),
          ("pitch_touchdown", -0.3, 0.6), ("catch_after_s", 0.12, 0.5), ("catch_height", 0.45, 0.72),
          ("catch_pelvis_behind_feet", -0.2, 0.02), ("catch_pitch", -0.2, 0.8), ("catch_waist", -0.52, 0.52),
          ("catch_shoulder", -1.5, 2.0), ("recover_after_s", 0.2, 1.2), ("recover_height", 0.5, 0.78),
          ("recover_pitch", -0.2, 0.7), ("recover_waist", -0.52, 0.52), ("stand_after_s", 0.3, 1.5)]
NAMES = [p[0] for p in PARAMS]
F_MAX = 3.5


def _r(v) -> float:
    return float(round(float(v), 4))


def keyframes_of(raw: dict) -> np.ndarray:
    """The 18 numbers of a jump_swing-shaped file (take-off at keyframes[3], touch-down, catch, recover, stand)."""
    to, td, c, r, s = raw["keyframes"][3:8]
    j = lambda k, n: k.get("joints", {}).get(n, 0.0)  # noqa: E731
    return np.array([j(to, "waist_pitch"), j(to, "shoulder_pitch"), j(td, "waist_pitch"), j(td, "shoulder_pitch"),
                     td["foot_x"], td["pelvis_x"], td.get("pelvis_pitch", 0.0), c["t"] - td["t"], c["pelvis_height"],
                     c["pelvis_x"] - td["foot_x"], c.get("pelvis_pitch", 0.0), j(c, "waist_pitch"),
                     j(c, "shoulder_pitch"), r["t"] - c["t"], r["pelvis_height"], r.get("pelvis_pitch", 0.0),
                     j(r, "waist_pitch"), s["t"] - r["t"]])


def file_of(p: np.ndarray, base: dict) -> dict:
    d = dict(zip(NAMES, p))
    raw = copy.deepcopy(base)
    k = raw["keyframes"]
    k[3]["joints"] = {"shoulder_pitch": _r(d["shoulder_takeoff"]), "waist_pitch": _r(d["waist_takeoff"])}
    td = k[4]
    td.update(pelvis_x=_r(d["pelvis_x_touchdown"]), foot_x=_r(d["foot_x_touchdown"]),
              pelvis_pitch=_r(d["pitch_touchdown"]),
              joints={"shoulder_pitch": _r(d["shoulder_touchdown"]), "waist_pitch": _r(d["waist_touchdown"])})
    fx = d["foot_x_touchdown"]
    tc = _r(td["t"] + d["catch_after_s"])
    tr = _r(tc + d["recover_after_s"])
    ts = _r(tr + d["stand_after_s"])
    k[5:] = [{"t": tc, "pelvis_height": _r(d["catch_height"]), "pelvis_x": _r(fx + d["catch_pelvis_behind_feet"]),
              "pelvis_pitch": _r(d["catch_pitch"]),
              "joints": {"shoulder_pitch": _r(d["catch_shoulder"]), "waist_pitch": _r(d["catch_waist"])}},
             {"t": tr, "pelvis_height": _r(d["recover_height"]), "pelvis_x": _r(fx + d["catch_pelvis_behind_feet"] / 2),
              "pelvis_pitch": _r(d["recover_pitch"]), "joints": {"waist_pitch": _r(d["recover_waist"])}},
             {"t": ts, "pelvis_height": 0.785, "pelvis_x": _r(fx)}]
    raw["duration"] = _r(ts + 1.0)
    return raw


def built(path: Path, raw: dict):
    """The library's reference of one keyframe file (checked under `path`'s name), or None when it refuses it."""
    try:
        meta, keys = parse_motion(path, raw)
        return build_motion(path, meta, keys)
    except MotionError:
        return None


def jump_figures(m, push_from: float) -> tuple[dict, dict]:
    """The terms of a one-flight jump's objective (push-off from `push_from` s to take-off; landing after
    touch-down) and its balance (motions.balance.balance)."""
    b, (f,) = balance(m), flight_consistency(m)
    t0, t1 = m.flight_windows[0]
    t = m.times
    land, push = b["checked"] & (t > t1), b["checked"] & (t < t0) & (t > push_from)
    L, _ = motion_angmom(m)
    k = int(round(t1 / m.dt))
    az = np.gradient(np.gradient(b["com"][:, 2], m.dt), m.dt)
    return {"landing_cop_margin_min_m": float(np.min(b["cop_margin"][land])),
            "pushoff_cop_margin_min_m": float(np.min(b["cop_margin"][push])),
            "com_margin_min_after_landing_m": float(np.nanmin(b["com_margin"][t > t1 + 0.3])),
            "angmom_jump_at_touchdown_Nms": float(L[k + 1, 1] - L[k - 1, 1]),
            "free_pitch_drift_deg": float(f["free_pitch_drift_deg"]), "pelvis_apex_m": float(m.ref_height.max()),
            "min_pelvis_after_touchdown_m": float(m.ref_height[t > t1].min()),
            "peak_stance_force_body_weights": float((az[~m.flight_mask].max() + GRAVITY) / GRAVITY),
            "_land": b["cop_margin"][land], "_push": b["cop_margin"][push], "_com": b["com_margin"][t > t1 + 0.3]}, b


def figures(raw: dict) -> dict | None:
    """The objective's terms of one keyframe file, or None when the library refuses it."""
    m = built(MOTION, raw)
    return None if m is None else jump_figures(m, 1.0)[0]


def cost(fig: dict | None) -> float:
    if fig is None:
        return 1e6
    sq = lambda v: float(np.nansum(np.maximum(v, 0.0) ** 2))  # noqa: E731
    return (sq((0.02 - fig["_land"]) * 100) + 0.05 * sq(-fig["_push"] * 100) + sq((0.03 - fig["_com"]) * 100)
            + fig["angmom_jump_at_touchdown_Nms"] ** 2 + 10 * max(abs(fig["free_pitch_drift_deg"]) - 2, 0) ** 2
            + 1e5 * max(0.94 - fig["pelvis_apex_m"], 0) ** 2
            + 100 * max(fig["peak_stance_force_body_weights"] - F_MAX, 0) ** 2)


def public(fig: dict | None) -> dict | None:
    return None if fig is None else {k: round(v, 4) for k, v in fig.items() if not k.startswith("_")}


def powell(objective, x0: np.ndarray, params: list, evals: int, desc: str) -> dict:
    """scipy's Powell with the bounds of `params` ((name, lower, upper, ...) rows) from x0, at most `evals`
    evaluations, with a progress bar; returns {"p", "cost", "evaluations"} of the best point seen."""
    from scipy.optimize import minimize
    from tqdm import tqdm

    lo, hi = np.array([p[1] for p in params]), np.array([p[2] for p in params])
    bar = tqdm(total=evals, desc=desc, unit="eval")
    best = {"cost": np.inf, "p": x0}

    def scored(p):
        c = objective(p)
        bar.update(1)
        if c < best["cost"]:
            best.update(cost=c, p=p.copy())
            bar.set_postfix(cost=f"{c:.2f}")
        return c

    minimize(scored, np.clip(x0, lo, hi), method="Powell", bounds=list(zip(lo, hi)),
             options={"maxfev": evals, "xtol": 1e-3, "ftol": 1e-4})
    bar.close()
    return {**best, "evaluations": bar.n}


def powell_rounds(objective, x0: np.ndarray, params: list, evals: int, rounds: int, desc: str) -> dict:
    """`powell` restarted `rounds` times from the best point so far (Powell stops in local optima of these
    objectives); "evaluations" is the total."""
    best, n = {"p": x0}, 0
    for r in range(rounds):
        best = powell(objective, best["p"], params, evals, f"{desc} {r + 1}/{rounds}")
        n += best["evaluations"]
    return {**best, "evaluations": n}


def write_results(out: dict, path: Path, motion_file: Path | None = None, raw: dict | None = None) -> int:
    """A search's JSON (and, when asked, its best keyframes as a motion file); prints the start and best figures."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    if motion_file is not None:
        motion_file.write_text(yaml.safe_dump(raw, sort_keys=False, width=110))
    for k in ("start_figures", "best"):
        print(f"{k}: {out[k]}")
    print(path)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--start", choices=("committed", "level"), default="committed",
                    help="start from the committed keyframes, or from them with a level pelvis")
    ap.add_argument("--evals", type=int, default=600, help="objective evaluations (~0.3 s each)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    base = yaml.safe_load(MOTION.read_text())
    level = copy.deepcopy(base)
    for k in level["keyframes"]:
        k.pop("pelvis_pitch", None)
    x0 = keyframes_of(base if args.start == "committed" else level)
    best = powell(lambda p: cost(figures(file_of(p, base))), x0, PARAMS, args.evals, "landing search")
    out = {"motion": str(MOTION), "start": args.start, "evaluations": best["evaluations"], "f_max_body_weights": F_MAX,
           "level_pelvis": public(figures(level)), "committed": public(figures(base)),
           "committed_cost": cost(figures(base)), "best_cost": best["cost"],
           "best": public(figures(file_of(best["p"], base))), "best_keyframes": dict(zip(NAMES, map(_r, best["p"])))}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))
    for k in ("level_pelvis", "committed", "best"):
        print(f"{k}: {out[k]}")
    print(args.out)
    return 0


# The searches' results files (make landing-search, forward-jump-search, forward-jump-far, toe-jump-search) and the
# reference each one's best keyframes became.
SEARCHES = (("landing_search", "jump_swing (landing)"), ("toe_jump_search", "jump"),
            ("forward_jump_search_tau", "forward_jump_toes"), ("forward_jump_search_far", "forward_jump"))


def _cell(fig: dict, key: str, scale: float, fmt: str, unit: str) -> str:
    return "-" if fig.get(key) is None else f"{fig[key] * scale:{fmt}}{unit}"


def render_reference_searches_table(results: dict) -> str:
    """The best keyframes of each reference search, by the searches' shared figures ({results/<name>.json: JSON})."""
    head = ["search (results file)", "reference", "flight", "travel", "pelvis apex", "landing CoP margin",
            "push-off CoP margin", "L_y jump at touch-down", "free pitch drift", "waist / arms torque", "evaluations"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for stem, reference in SEARCHES:
        r = results[f"results/{stem}.json"]
        b = r["best"]
        tau = (f"{b['waist_torque_ratio']:.2f} / {b['arms_torque_ratio']:.2f}" if "waist_torque_ratio" in b else "-")
        lines.append("| " + " | ".join([
            f"`results/{stem}.json`", reference, _cell(b, "flight_s", 1, ".2f", " s"), _cell(b, "travel_m", 100, ".1f", " cm"),
            _cell(b, "pelvis_apex_m", 1, ".3f", " m"), _cell(b, "landing_cop_margin_min_m", 100, "+.1f", " cm"),
            _cell(b, "pushoff_cop_margin_min_m", 100, "+.1f", " cm"), _cell(b, "angmom_jump_at_touchdown_Nms", 1, "+.1f", " N m s"),
            _cell(b, "free_pitch_drift_deg", 1, "+.1f", " deg"), tau, str(r["evaluations"])]) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
