"""The forward jump (motions/forward_jump.yaml), searched: a take-off rolling onto the toes, a COM-ballistic flight
with the upper body carrying the angular momentum, and a landing a floor can carry.

    make forward-jump-search                 # writes results/forward_jump_search.json
    python -m experiments.forward_jump_search --evals 3000 --start draft

The same physics as `make landing-search` (experiments/landing_search.py; motions.balance, motions.momentum), for
a jump that travels: `ballistic: com`, `flight_feet: follow`, `heel_lift` at take-off, risen over the push-off's
last `heel_rise_s` (with flat soles the pelvis travelling over the feet needs more ankle dorsiflexion than the
G1's 50 deg), `pelvis_pitch` in the crouch, at take-off and on landing. 30 numbers (crouch, take-off, flight,
touch-down, a catch, a recovery and a stand) are varied with scipy's Powell (bounds) to minimise

    sum over landing frames of (max(0, 2 cm - CoP margin) / 1 cm)^2
  + sum over the descent into the crouch (1.0 s to the crouch keyframe, feet flat) of
      (max(0, -CoP margin) / 1 cm)^2 + (max(0, 3 cm - COM margin) / 1 cm)^2
  + 0.05 * the push-off's (crouch to take-off) CoP below 0 (on the toes the support is their line: any distance
      from it counts)
  + sum over frames 0.3 s after touch-down of (max(0, 3 cm - COM margin) / 1 cm)^2
  + (L_y after - before touch-down, N m s)^2
  + 10 * max(0, |free pitch drift in flight| - 2 deg)^2
  + 1e4 * max(0, 0.45 m - pelvis travel from the standing start to the landed stand)^2
  + 100 * max(0, peak stance force / weight - 3.5)^2

A keyframe set the library refuses (joint or ankle limits, leg reach, the floor pulling) costs 1e6. `--start
draft` (default) starts from DRAFT below (hand-written: the first keyframes of this shape the library accepted);
`--start toe` from motions/jump.yaml (experiments/toe_jump_search.py: the same shape, no travel) sent 0.25 m
forward (TOE_START); `--start <file>` from a file `--write` wrote. `--tau-max F` adds
1000 * max(0, peak upper-body |tau| / limit - F)^2 (motions.torques, inverse dynamics), which the terms above do
not price; `--rounds` restarts Powell from the best point:

    python -m experiments.forward_jump_search --start toe --tau-max 0.75 --rounds 7 \
        --out results/forward_jump_search_tau.json  # motions/forward_jump_toes.yaml

What it found (results/forward_jump_search.json): a
flight consistent in both momenta that travels 0.42 m, but Powell stops in a local optimum whose landing still
needs the CoP 5.5 cm outside the feet and a -6.6 N m s jump of the angular momentum at touch-down, whose push-off
(heels rising over its last 0.09 s, the pelvis leaning back 0.2 rad at take-off) needs the CoP 48 cm behind the
feet, and whose COM comes within 1.1 cm of the heels in the descent; motions/forward_jump.yaml stays the earlier
(flat-footed) reference.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import yaml

from experiments.landing_search import built, jump_figures, powell_rounds, write_results
from motions.library import MOTIONS_DIR
from motions.schema import follow_rise
from motions.torques import upper_torque_ratio

MOTION = MOTIONS_DIR / "forward_jump.yaml"  # the name the files are checked under (not read)
OUT = Path("results/forward_jump_search.json")
CLEARANCE = 0.15  # m, the soles at mid-flight (bar: >= 10 cm at apex), or 5 mm above what `follow` gives
TRAVEL_MIN = 0.45  # m, pelvis travel stand to stand (bar: >= 40 cm)
F_MAX = 3.5  # body weights
T_CROUCH, T_TAKEOFF = 1.6, 1.85
# name, lower, upper, draft value
PARAMS = [
    ("crouch_height", 0.55, 0.70, 0.60), ("crouch_x", -0.14, 0.02, -0.06), ("crouch_pitch", -0.1, 0.7, 0.35),
    ("crouch_shoulder", -1.0, 1.5, 0.8), ("crouch_waist", -0.3, 0.52, 0.2),
    ("takeoff_height", 0.66, 0.77, 0.74), ("takeoff_x", -0.08, 0.12, 0.02), ("takeoff_pitch", -0.2, 0.6, 0.25),
    ("takeoff_heel", 0.0, 0.7, 0.5), ("takeoff_heel_rise_s", 0.06, 0.25, 0.15),
    ("takeoff_shoulder", -2.5, 1.0, -1.46), ("takeoff_waist", -0.52, 0.52, -0.386),
    ("flight_s", 0.28, 0.42, 0.36), ("travel", 0.25, 0.55, 0.34), ("touchdown_height", 0.64, 0.77, 0.74),
    ("foot_ahead_touchdown", -0.1, 0.2, 0.04), ("touchdown_pitch", -0.3, 0.6, 0.1),
    ("touchdown_shoulder", -1.5, 2.0, 1.36), ("touchdown_waist", -0.52, 0.52, 0.4),
    ("catch_after_s", 0.12, 0.5, 0.19), ("catch_height", 0.45, 0.72, 0.66),
    ("catch_pelvis_behind_feet", -0.2, 0.05, -0.04), ("catch_pitch", -0.2, 0.8, 0.45),
    ("catch_waist", -0.52, 0.52, 0.3), ("catch_shoulder", -1.5, 2.0, 0.5),
    ("recover_after_s", 0.2, 1.2, 0.5), ("recover_height", 0.5, 0.78, 0.76), ("recover_pitch", -0.2, 0.7, 0.2),
    ("recover_waist", -0.52, 0.52, 0.1), ("stand_after_s", 0.3, 1.5, 1.1),
]
NAMES = [p[0] for p in PARAMS]
DRAFT = np.array([p[3] for p in PARAMS])
TOE_START = {"travel": 0.25, "foot_ahead_touchdown": 0.05, "takeoff_x": 0.1, "takeoff_pitch": 0.0}
REWARDS = {"joint_pos": 1.0, "joint_vel": 0.1, "base_height": 1.0, "base_lin_vel": 0.5, "base_orientation": 0.5,
           "foot_height": 3.0, "foot_contact": 0.5, "action_rate": -0.01, "residual": -0.2, "torque": -1.0e-5,
           "alive": 0.5, "fall": -10.0}


def _r(v) -> float:
    return float(round(float(v), 4))


def file_of(p: np.ndarray, description: str = "", clearance: float = CLEARANCE) -> dict:
    d = {k: _r(v) for k, v in zip(NAMES, p)}
    t_td = _r(T_TAKEOFF + d["flight_s"])
    x_td = _r(d["takeoff_x"] + d["travel"])
    fx = _r(x_td + d["foot_ahead_touchdown"])
    tc = _r(t_td + d["catch_after_s"])
    tr = _r(tc + d["recover_after_s"])
    ts = _r(tr + d["stand_after_s"])
    j = lambda s, w: {"shoulder_pitch": d[s], "waist_pitch": d[w]}  # noqa: E731
    keys = [
        {"t": 0.0, "pelvis_height": 0.785}, {"t": 1.0, "pelvis_height": 0.785},
        {"t": T_CROUCH, "pelvis_height": d["crouch_height"], "pelvis_x": d["crouch_x"],
         "pelvis_pitch": d["crouch_pitch"], "joints": j("crouch_shoulder", "crouch_waist")},
        {"t": T_TAKEOFF, "pelvis_height": d["takeoff_height"], "pelvis_x": d["takeoff_x"],
         "pelvis_pitch": d["takeoff_pitch"], "heel_lift": d["takeoff_heel"], "heel_rise_s": d["takeoff_heel_rise_s"],
         "phase": "flight",
         "apex_foot_clearance": _r(max(clearance, follow_rise(d["flight_s"]) + 0.005)), "flight_feet": "follow",
         "joints": j("takeoff_shoulder", "takeoff_waist")},
        {"t": t_td, "pelvis_height": d["touchdown_height"], "pelvis_x": x_td, "foot_x": fx,
         "pelvis_pitch": d["touchdown_pitch"], "joints": j("touchdown_shoulder", "touchdown_waist")},
        {"t": tc, "pelvis_height": d["catch_height"], "pelvis_x": _r(fx + d["catch_pelvis_behind_feet"]),
         "pelvis_pitch": d["catch_pitch"], "joints": j("catch_shoulder", "catch_waist")},
        {"t": tr, "pelvis_height": d["recover_height"], "pelvis_x": _r(fx + d["catch_pelvis_behind_feet"] / 2),
         "pelvis_pitch": d["recover_pitch"], "joints": {"waist_pitch": d["recover_waist"]}},
        {"t": ts, "pelvis_height": 0.785, "pelvis_x": fx},
    ]
    return {"name": "forward_jump", "description": description, "duration": _r(ts + 1.0), "ballistic": "com",
            "keyframes": keys, "reward_weights": dict(REWARDS)}


def params_of(raw: dict) -> np.ndarray:
    """The 30 numbers of a file that file_of wrote."""
    k = raw["keyframes"]
    c, to, td, ca, r, s = k[2:8]
    j = lambda kf, n: kf.get("joints", {}).get(n, 0.0)  # noqa: E731
    return np.array([
        c["pelvis_height"], c["pelvis_x"], c.get("pelvis_pitch", 0.0), j(c, "shoulder_pitch"), j(c, "waist_pitch"),
        to["pelvis_height"], to["pelvis_x"], to.get("pelvis_pitch", 0.0), to.get("heel_lift", 0.0),
        to.get("heel_rise_s", 0.0), j(to, "shoulder_pitch"), j(to, "waist_pitch"), td["t"] - to["t"],
        td["pelvis_x"] - to["pelvis_x"],
        td["pelvis_height"], td["foot_x"] - td["pelvis_x"], td.get("pelvis_pitch", 0.0), j(td, "shoulder_pitch"),
        j(td, "waist_pitch"), ca["t"] - td["t"], ca["pelvis_height"], ca["pelvis_x"] - td["foot_x"],
        ca.get("pelvis_pitch", 0.0), j(ca, "waist_pitch"), j(ca, "shoulder_pitch"), r["t"] - ca["t"],
        r["pelvis_height"], r.get("pelvis_pitch", 0.0), j(r, "waist_pitch"), s["t"] - r["t"]])


def start_from_toe_jump() -> np.ndarray:
    """motions/jump.yaml's numbers with TOE_START's travel, touch-down feet and take-off (the first such
    variant the library accepts, scanned by hand)."""
    v = dict(zip(NAMES, params_of(yaml.safe_load((MOTIONS_DIR / "jump.yaml").read_text())))) | TOE_START
    return np.array([v[n] for n in NAMES])


def with_set(x: np.ndarray, assignments: list[str]) -> np.ndarray:
    """x with `name=value` assignments applied (names from PARAMS, values inside their bounds)."""
    x, bounds = x.copy(), {n: (lo, hi) for n, lo, hi, _ in PARAMS}
    for a in assignments:
        name, sep, value = a.partition("=")
        if not sep or name not in bounds:
            raise SystemExit(f"--set {a!r}: expected NAME=VALUE with NAME one of {', '.join(NAMES)}")
        v = float(value)
        if not bounds[name][0] <= v <= bounds[name][1]:
            raise SystemExit(f"--set {a!r}: {name} must lie in [{bounds[name][0]}, {bounds[name][1]}]")
        x[NAMES.index(name)] = v
    return x


def figures(raw: dict) -> dict | None:
    """The objective's terms of one keyframe file, or None when the library refuses it."""
    m = built(MOTION, raw)
    if m is None:
        return None
    fig, b = jump_figures(m, T_CROUCH)
    t0, t1 = m.flight_windows[0]
    descent = b["checked"] & (m.times > 1.0) & (m.times <= T_CROUCH)
    return {**fig, "descent_cop_margin_min_m": float(np.min(b["cop_margin"][descent])),
            "descent_com_margin_min_m": float(np.min(b["com_margin"][descent])),
            "travel_m": float(m.ref_base_pos[-1, 0] - m.ref_base_pos[0, 0]), "flight_s": float(t1 - t0),
            **{f"{k}_torque_ratio": v for k, v in upper_torque_ratio(m).items() if k in ("waist", "arms")},
            "apex_foot_clearance_m": float(m.ref_foot_height[m.flight_mask].max(axis=0).min()),
            "_descent_cop": b["cop_margin"][descent], "_descent_com": b["com_margin"][descent]}


def cost(fig: dict | None, tau_max: float | None = None, travel_min: float = TRAVEL_MIN) -> float:
    """The objective above; with tau_max, + 1000 * max(0, peak upper-body |tau| / limit - tau_max)^2 (inverse
    dynamics, motions.torques: what the motors can give, which the objective above does not price)."""
    if fig is None:
        return 1e6
    over = 0.0 if tau_max is None else max(fig["waist_torque_ratio"], fig["arms_torque_ratio"]) - tau_max
    sq = lambda v: float(np.nansum(np.maximum(v, 0.0) ** 2))  # noqa: E731
    return (sq((0.02 - fig["_land"]) * 100) + 0.05 * sq(-fig["_push"] * 100) + sq((0.03 - fig["_com"]) * 100)
            + sq(-fig["_descent_cop"] * 100) + sq((0.03 - fig["_descent_com"]) * 100)
            + fig["angmom_jump_at_touchdown_Nms"] ** 2 + 10 * max(abs(fig["free_pitch_drift_deg"]) - 2, 0) ** 2
            + 1e4 * max(travel_min - fig["travel_m"], 0) ** 2
            + 100 * max(fig["peak_stance_force_body_weights"] - F_MAX, 0) ** 2 + 1000 * max(over, 0) ** 2)


def public(fig: dict | None) -> dict | None:
    return None if fig is None else {k: round(v, 4) for k, v in fig.items() if not k.startswith("_")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--start", default="draft", help="draft | toe | a motion file that --write wrote")
    ap.add_argument("--evals", type=int, default=3000, help="at most this many objective evaluations (~0.3 s each)")
    ap.add_argument("--tau-max", type=float, default=None,
                    help="price the upper body's torque above this fraction of the limits (default: not priced)")
    ap.add_argument("--rounds", type=int, default=1, help="Powell restarts from the best point")
    ap.add_argument("--travel-min", type=float, default=TRAVEL_MIN, help="m, the travel below which the cost rises")
    ap.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE",
                    help="start with these of the 30 numbers changed (a start across a wall the library refuses)")
    ap.add_argument("--travel-steps", type=float, nargs="*", default=[], metavar="M",
                    help="before the rounds, for each flight travel M (m, the `travel` number): set it and search "
                         "the rest for --step-rounds rounds of --step-evals (a continuation across the ankle wall)")
    ap.add_argument("--step-rounds", type=int, default=2)
    ap.add_argument("--step-evals", type=int, default=800)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--write", type=Path, default=None, help="also write the best keyframes as a motion file here")
    args = ap.parse_args(argv)
    if args.start in ("draft", "toe"):
        x0 = DRAFT if args.start == "draft" else start_from_toe_jump()
    else:
        x0 = params_of(yaml.safe_load(Path(args.start).read_text()))
    x0 = with_set(x0, args.set)
    objective = lambda p: cost(figures(file_of(p)), args.tau_max, args.travel_min)  # noqa: E731
    x, steps, n_steps = x0, [], 0
    for travel in args.travel_steps:
        step = powell_rounds(objective, with_set(x, [f"travel={travel}"]), PARAMS, args.step_evals, args.step_rounds,
                             f"travel {travel} m")
        x, n_steps = params_of(file_of(step["p"])), n_steps + step["evaluations"]  # as a written file holds them
        steps.append({"travel": travel, "cost": step["cost"], "evaluations": step["evaluations"],
                      "figures": public(figures(file_of(x)))})
    best = powell_rounds(objective, x, PARAMS, args.evals, args.rounds, "forward jump search")
    start = figures(file_of(x0))
    out = {"motion": str(MOTION), "start": args.start, "set": args.set, "travel_steps": steps,
           "evaluations": n_steps + best["evaluations"], "rounds": args.rounds,
           "tau_max": args.tau_max, "f_max_body_weights": F_MAX, "travel_min_m": args.travel_min,
           "clearance_m": CLEARANCE, "start_figures": public(start),
           "start_cost": cost(start, args.tau_max, args.travel_min),
           "best_cost": best["cost"], "best": public(figures(file_of(best["p"]))),
           "best_keyframes": dict(zip(NAMES, map(_r, best["p"])))}
    return write_results(out, args.out, args.write, file_of(best["p"], "(forward_jump_search)"))


if __name__ == "__main__":
    raise SystemExit(main())
