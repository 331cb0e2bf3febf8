"""Episodes -> runs/eval/<motion>/<stamp>/eval.json (+ eval.png, episode0.gif when a renderer works).

eval.json's keys are stable (docs/evaluation.md): episodes, falls, stood_at_end, apex_foot_clearance_m
{mean, min}, tracking_error_cm, penetration_mm, landing_impact_bw, flight_time_s {mean, min},
pelvis_apex_rise_m {mean, min}, forward_displacement_m {mean, min, max}, peak_torque_ratio
{legs, waist, arms: {mean, max}} (eval.measures), config, definitions, per_episode, ... The return code of the CLI is 0 even with falls.
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from eval import report
from eval.closed_loop import ClosedLoop
from eval.config import EVAL_ROOT, EvalConfig, EvalError
from eval.episode import run_episode
from eval.measures import motion_stats
from eval.sim import EvalSim, reference_key_positions
from eval.video import key_times, open_video, write_gif, write_strip
from motions import MotionError, load_motion
from policies import artifact as A
from policies.runtime import PolicyRuntime
from robots.physics import FALL_HEIGHT_M, FALL_TILT_RAD
from robots.run_files import jsonable, stamped_dir


def resolve_artifact(motion: str, root: Path | None = None) -> A.Artifact:
    root = Path(root) if root else A.POLICY_ROOT
    have = A.available_motions(root)
    if motion not in have:
        raise EvalError(f"no policy artifact for motion {motion!r} in {root}; available artifacts: {have} "
                        f"(train one with `make train MOTION={motion}` or export a run with `make export RUN=...`)")
    try:
        return A.load_artifact(root / motion)
    except A.ArtifactError as e:
        raise EvalError(str(e)) from e


def reference_motion(art: A.Artifact):
    """The motions-library Motion of the artifact's reference (flight windows, pelvis x), if it matches."""
    try:
        m = load_motion(art.spec.motion.name)
    except (MotionError, OSError):
        return None
    if m.ref_q.shape != art.ref_q.shape or not np.allclose(m.ref_q, art.ref_q, atol=1e-5):
        print(f"notice: motions/{art.spec.motion.name}.yaml differs from the artifact's reference; "
              "using the artifact's reference without flight windows / pelvis x")
        return None
    return m


def evaluate(motion: str, cfg: EvalConfig = EvalConfig(), artifact_root: Path | None = None,
             out_root: Path = EVAL_ROOT, progress: bool = True, bridge=None) -> tuple[dict, Path]:
    """Run the evaluation; returns (eval.json content, output folder). `bridge`: an
    eval.bridge_setup.BridgeSetup (calibrated model / hidden perturbations); None = the nominal bridge."""
    art = resolve_artifact(motion, artifact_root)
    ref_motion = reference_motion(art)
    sim = EvalSim(bridge)
    T = art.ref_q.shape[0]
    base = ref_motion.ref_base_pos if ref_motion is not None else np.stack(
        [np.zeros(T), np.zeros(T), np.asarray(art.ref_height, float)], 1)
    ref_key = reference_key_positions(sim, np.asarray(art.ref_q, float), base)
    flights = ref_motion.flight_windows if ref_motion is not None else ()
    runtime = PolicyRuntime(art, hold_blend_s=cfg.hold_blend_s)
    out = stamped_dir(Path(out_root) / motion, precise=True, exist_ok=True)
    quat = getattr(ref_motion, "ref_base_quat", None) if ref_motion is not None else None
    renderer = open_video(sim, cfg.video_size, np.asarray(art.ref_q, float), base, quat) if cfg.video else None
    results, t_eps = [], []
    loop = ClosedLoop(sim, runtime, cfg.true_state)
    try:
        from tqdm import tqdm

        it = tqdm(range(cfg.episodes), desc=f"eval {motion}", unit="ep", disable=not progress, file=sys.stdout)
        for ep in it:
            t0 = time.perf_counter()
            r = run_episode(sim, runtime, cfg, ep, ref_key, flights, renderer if ep == 0 else None, loop)
            t_eps.append(time.perf_counter() - t0)
            results.append(r)
            it.set_postfix(falls=sum(x["fell"] for x in results))
    finally:
        if renderer is not None:
            renderer.close()
    video = strip = None
    if results and results[0]["frames"]:
        video = write_gif(results[0]["frames"], out / "episode0.gif", cfg.video_fps)
        keys = key_times(np.asarray(art.ref_height, float), art.spec.control_dt, flights, runtime.duration)
        strip = write_strip(results[0]["frames"], results[0]["frame_times"], keys, out / "episode0_keyframes.png")
    plot = report.plot(results, art, ref_motion, out / "eval.png")
    clear = report.summary_stats([r["apex_foot_clearance_m"] for r in results])
    track = report.summary_stats([r["tracking_error_cm"] for r in results])
    pen = report.summary_stats([r["penetration_mm"] for r in results])
    stance_pen = report.summary_stats([r["stance_penetration_mm"] for r in results])
    impact = report.summary_stats([r["landing_impact_bw"] for r in results])
    summary = {
        "motion": motion,
        "artifact": str(art.path),
        "artifact_provenance": art.spec.provenance,
        "episodes": len(results),
        "falls": int(sum(r["fell"] for r in results)),
        "tilt_tripped": int(sum(r["tilt_tripped"] for r in results)),
        "policy_input": "true state" if cfg.true_state else "estimator + safety gate",
        "stood_at_end": int(sum(r["stood_at_end"] for r in results)),
        "apex_foot_clearance_m": None if clear is None else {"mean": clear["mean"], "min": clear["min"]},
        "tracking_error_cm": None if track is None else track["mean"],
        "tracking_error_cm_max": None if track is None else track["max"],
        "penetration_mm": None if pen is None else pen["max"],
        "penetration_mm_mean": None if pen is None else pen["mean"],
        "stance_penetration_mm": None if stance_pen is None else stance_pen["mean"],
        "landing_impact_bw": None if impact is None else {"mean": impact["mean"], "max": impact["max"]},
        **motion_stats(results),
        "seconds_per_episode": float(np.mean(t_eps)) if t_eps else None,
        # the fall criterion is robots.physics' one (not configurable here); recorded beside the settings
        "config": jsonable({**dataclasses.asdict(cfg), "fall_height_m": FALL_HEIGHT_M,
                            "fall_tilt_deg": math.degrees(FALL_TILT_RAD)}, finite=True),
        "definitions": report.definitions(cfg.flight_margin_s),
        "plot": str(plot),
        "video": str(video) if video else None,
        "video_keyframes": str(strip) if strip else None,
        "per_episode": [{k: v for k, v in r.items() if k not in ("log", "frames", "frame_times")} for r in results],
    }
    if bridge is not None:  # not the nominal bridge: which model (eval.bridge_setup)
        summary["bridge"] = bridge.record()
    (out / "eval.json").write_text(json.dumps(jsonable(summary, finite=True), indent=2))
    return summary, out
