"""Any policy the runtime loads (`make eval POLICY=<onnx or folder>`: a third-party file through
policies.adapters, or a native artifact folder) evaluated in C MuJoCo on the bridge model, with the
episode rules of eval.episode (home keyframe, the drives' PD at the artifact's gains x the episode's
kp/kd scale clipped to the motor limits at 1 kHz, the episode's randomisation and push, the one fall
criterion (robots.physics.fallen; for a tracking policy bounded by its reference's pelvis where that goes lower or
bends further: FALL_DEFINITION_TRACKING), then the runtime's HOLD blend for hold_s at robots/g1.py's gains, as deploy sends in HOLD):

- tracking policies run their clip (or --duration s of it) and are measured against their own
  reference (policies.tracking: joint RMS in rad, anchor orientation error in rad, and, where the reference
  has the anchor's position, the body-position error in cm over the 14 key bodies relative to the anchor;
  over the episode and its worst second); `start_frame` starts them in the reference's state at that
  frame (eval.sim.reference_start), the policy at that step, so two policies of one clip compare on
  the same segment;
- velocity policies run --duration s (default 10) at a zero command.

Writes runs/eval/<policy name>/<stamp>/eval.json: episodes, falls, stood_at_end, tracking (means over
episodes of the per-episode figures), policy (format, kind, source), config, per_episode.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from eval.config import EVAL_ROOT, EvalConfig, EvalError
from eval.episode import STOOD_HEIGHT_TOL_M, STOOD_SPEED_MPS, STOOD_TILT_DEG, draw_pushes
from eval.closed_loop import ClosedLoop
from eval.sim import BodyTracker, EvalSim, reference_qpos, reference_start
from eval.video import open_video, write_gif, write_strip
from policies.adapters import load_policy
from policies.artifact import Artifact, ArtifactError
from policies.runtime import PolicyRuntime
from policies.tracking import tracking_summary
from robots import g1
from robots.body_frames import mat_to_quat, quat_to_mat
from robots.physics import (FALL_DEFINITION, FALL_DEFINITION_TRACKING, FALL_HEIGHT_M, FALL_TILT_RAD, fallen,
                             tilt_angle)
from robots.run_files import jsonable, stamped_dir

VELOCITY_RUN_S = 10.0
TRACK_KEYS = ("joint_rms_rad", "joint_rms_worst_s_rad", "anchor_ori_err_rad", "anchor_ori_err_worst_s_rad",
              "body_pos_err_cm", "body_pos_err_worst_s_cm")


def reference_bounds(tracking, step: int) -> dict:
    """A run's fall bounds at `step`: its tracking reference's (TrackingTerms.bounds); none for other policies."""
    return {} if tracking is None else tracking.bounds(step)


def ghost_qpos(sim: EvalSim, tracking, k: int) -> np.ndarray:
    """The tracking reference's state at frame k where the runtime placed it (turned and moved to the robot at the
    clip's first step): the video's ghost."""
    qpos = reference_qpos(sim, tracking.ref, k, tracking.kin, tracking.anchor)
    qpos[0:3] = tracking.align @ qpos[0:3] + tracking.origin
    qpos[3:7] = mat_to_quat(tracking.align @ quat_to_mat(qpos[3:7]))
    return qpos


def start_episode(sim: EvalSim, runtime: PolicyRuntime, start_frame: int | None) -> int:
    """Reset the simulator and the runtime for an episode: the home keyframe, or a tracking policy's reference
    state at `start_frame` (--start-frame); returns the first reference frame."""
    tr = runtime.tracking
    k0 = 0
    if start_frame is not None:
        if tr is None or not tr.needs_anchor:
            raise EvalError("--start-frame starts a tracking policy in its reference's state: this policy has no "
                            "tracking reference with an anchor")
        k0 = int(start_frame)
        if not 0 <= k0 < tr.ref.frames - 1:
            raise EvalError(f"--start-frame {k0} is outside the clip's frames 0..{tr.ref.frames - 2}")
        sim.reset_to(*reference_start(sim, tr.ref, k0, runtime.control_dt, tr.kin, tr.anchor))
    else:
        sim.reset()
    runtime.reset()
    return k0


def run_policy_episode(sim: EvalSim, runtime: PolicyRuntime, cfg: EvalConfig, ep: int, video=None,
                       loop: ClosedLoop | None = None) -> dict:
    spec = runtime.spec
    rng = np.random.default_rng([cfg.seed, ep])
    dr = sim.randomise(rng, cfg.dr)
    tr_ = runtime.tracking
    k0 = start_episode(sim, runtime, cfg.start_frame)
    loop = loop or ClosedLoop(sim, runtime, cfg.true_state)
    loop.start(dr["kp_scale"], dr["kd_scale"])
    bodies = BodyTracker(sim, tr_.ref, tr_.spec.anchor_body) if tr_ is not None and tr_.needs_anchor and \
        tr_.ref.anchor_pos is not None else None
    m, d = sim.m, sim.d
    # the policy's own gains in POLICY, robots/g1.py's in HOLD: what deploy sends (deploy.loop)
    gains = [(np.asarray(a) * dr["kp_scale"], np.asarray(b) * dr["kd_scale"]) for a, b in
             ((spec.kp, spec.kd), (g1.KP, g1.KD))]
    dt = runtime.control_dt
    n_policy = min(int(round((cfg.duration_s or runtime.duration) / dt)), runtime.n_steps - k0)
    n_hold = int(round(cfg.hold_s / dt))
    decim = int(round(dt / m.opt.timestep))
    for push in draw_pushes(rng, cfg, (n_policy + n_hold) * dt):
        sim.push(*push)
    target = hold_from = runtime.default_q.copy()
    command = np.zeros(3) if runtime.kind == "velocity" else None
    fell, fell_t = False, None
    next_frame_t = 0.0
    t_log, jsq, aerr, berr = [], [], [], []
    n_run = 0
    z, quat, vel_b = float(d.qpos[2]), d.qpos[3:7].copy(), np.zeros(3)
    for k in range(n_policy + n_hold):
        t = k * dt
        q, dq, gyro, quat, vel_b, z = sim.state()
        if fallen(z, quat, **reference_bounds(tr_, k0 + k)):
            fell, fell_t = True, t
            break
        if k < n_policy:
            out = loop.act(k0 + k, command=command)
            if not np.all(np.isfinite(out.action)):
                raise EvalError(f"episode {ep}: the policy returned non-finite actions at step {k}")
            target = hold_from = out.target
            n_run += 1
            if runtime.tracking is not None:
                t_log.append(t)
                jsq.append(float(np.mean(runtime.tracking.joint_error ** 2)))
                aerr.append(runtime.tracking.anchor_ori_error if runtime.tracking.needs_anchor else np.nan)
                berr.append(bodies.error(k0 + k) if bodies is not None else np.nan)
        else:
            target = runtime.hold_target(hold_from, (k - n_policy + 1) * dt)
        kp, kd = gains[k >= n_policy]
        for s in range(decim):
            ts = t + s * m.opt.timestep
            sim.drive(*loop.command(ts, target, kp, kd, policy=k < n_policy), ts)
            sim.step()
        if video is not None and t + dt >= next_frame_t - 1e-9:  # the state after step k's physics
            video.capture(sim, t + dt, k0 + k + 1, ghost_qpos(sim, tr_, k0 + min(k + 1, n_policy)))
            next_frame_t += 1.0 / cfg.video_fps
    if not fell:
        _, _, _, quat, vel_b, z = sim.state()
    stood = (not fell) and abs(z - g1.DEFAULT_BASE_HEIGHT) < STOOD_HEIGHT_TOL_M \
        and math.degrees(tilt_angle(quat)) < STOOD_TILT_DEG and float(np.linalg.norm(vel_b)) < STOOD_SPEED_MPS
    tr = None
    if runtime.tracking is not None:
        tr = tracking_summary(t_log, jsq, aerr, runtime.tracking.ref.frames, k0 + len(t_log), body_err=berr)
        tr["start_frame"] = k0
    return {"episode": ep, "fell": bool(fell), "fell_at_s": fell_t, "stood_at_end": bool(stood),
            "safety_events": loop.events, "tilt_tripped": any(e["kind"] == "tilt" for e in loop.events),
            "final_pelvis_height_m": float(z), "policy_s": round(n_run * dt, 3),
            "tracking": tr, "dr": {k: (v if not isinstance(v, np.ndarray) else [round(float(x), 4) for x in v])
                                   for k, v in dr.items()}}


def load(policy: str | Path) -> Artifact:
    try:
        return load_policy(policy)
    except ArtifactError as e:
        raise EvalError(str(e)) from e


def evaluate_policy(policy: str | Path, cfg: EvalConfig = EvalConfig(), out_root: Path = EVAL_ROOT,
                    bridge=None) -> tuple[dict, Path]:
    """Evaluate one policy file or folder; returns (eval.json content, output folder)."""
    art = load(policy)
    run_s = (cfg.duration_s or VELOCITY_RUN_S) if art.spec.kind == "velocity" else None
    try:
        runtime = PolicyRuntime(art, hold_blend_s=cfg.hold_blend_s, run_s=run_s)
    except ArtifactError as e:
        raise EvalError(str(e)) from e
    sim = EvalSim(bridge)
    name = art.spec.motion.name
    out = stamped_dir(Path(out_root) / name, precise=True, exist_ok=True)
    video = None
    if cfg.video and runtime.tracking is not None and runtime.tracking.needs_anchor \
            and runtime.tracking.ref.anchor_pos is not None:
        video = open_video(sim, cfg.video_size)
    try:
        loop = ClosedLoop(sim, runtime, cfg.true_state)
        eps = [run_policy_episode(sim, runtime, cfg, ep, video if ep == 0 else None, loop) for ep in range(cfg.episodes)]
    finally:
        if video is not None:
            video.close()
    files = {}
    if video is not None and video.frames:
        files["video"] = write_gif(video.frames, out / "episode0.gif", cfg.video_fps)
        end = video.times[-1]
        keys = [(f"{tk:.1f} s", tk) for tk in np.linspace(video.times[0], end, 6)]
        files["video_keyframes"] = write_strip(video.frames, video.times, keys, out / "episode0_keyframes.png")
    trk = [e["tracking"] for e in eps if e["tracking"]]
    summary = {
        "policy": str(policy), "motion": name,
        "policy_info": {"format": art.spec.format, "kind": art.spec.kind, "source": art.spec.source,
                        "backend": runtime.backend},
        "episodes": len(eps), "falls": int(sum(e["fell"] for e in eps)),
        "stood_at_end": int(sum(e["stood_at_end"] for e in eps)),
        "tilt_tripped": int(sum(e["tilt_tripped"] for e in eps)),
        "policy_input": "true state" if cfg.true_state else "estimator + safety gate",
        "policy_s": float(np.mean([e["policy_s"] for e in eps])) if eps else None,
        "tracking": {k: (float(np.mean([t[k] for t in trk])) if trk[0].get(k) is not None else None)
                     for k in TRACK_KEYS} if trk else None,
        "config": jsonable({**dataclasses.asdict(cfg), "fall_height_m": FALL_HEIGHT_M,
                            "fall_tilt_deg": math.degrees(FALL_TILT_RAD),
                            "fall_definition": FALL_DEFINITION_TRACKING if runtime.tracking is not None
                            else FALL_DEFINITION}, finite=True),
        "per_episode": eps,
        **{k: str(v) if v else None for k, v in files.items()},
    }
    if bridge is not None:
        summary["bridge"] = bridge.record()
    (out / "eval.json").write_text(json.dumps(jsonable(summary, finite=True), indent=2))
    return summary, out


def format_policy_table(summary: dict) -> str:
    def f(v, fmt="{:.3f}"):
        return "-" if v is None else fmt.format(v)

    rows = [f"{'ep':>3} {'fell':>5} {'at s':>6} {'policy s':>9} {'joint rms':>10} {'worst s':>8} {'anchor':>7} "
            f"{'worst s':>8} {'body cm':>8} {'stood':>6}"]
    for e in summary["per_episode"]:
        t = e["tracking"] or {}
        rows.append(f"{e['episode']:>3} {str(e['fell']):>5} {f(e['fell_at_s'], '{:.1f}'):>6} {e['policy_s']:>9.1f} "
                    f"{f(t.get('joint_rms_rad')):>10} {f(t.get('joint_rms_worst_s_rad')):>8} "
                    f"{f(t.get('anchor_ori_err_rad')):>7} {f(t.get('anchor_ori_err_worst_s_rad')):>8} "
                    f"{f(t.get('body_pos_err_cm'), '{:.1f}'):>8} {str(e['stood_at_end']):>6}")
    rows.append(f"falls {summary['falls']}/{summary['episodes']}, stood at end {summary['stood_at_end']}; "
                f"{summary['policy_info']['format']} {summary['policy_info']['kind']} policy on the "
                f"{summary['policy_input']} (tracking in rad and cm against the policy's own reference)")
    return "\n".join(rows)
