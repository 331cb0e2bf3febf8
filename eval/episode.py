"""One evaluation episode: the artifact's motion run by the deploy loop's tick (eval.closed_loop: estimator on
simulated sensors, policies.runtime.PolicyRuntime at 50 Hz, the safety gate on every 2 ms command; or the policy
on the true state with --true-state) on the randomised plant (plant.robot.Plant: the bridge model, the drives' PD
at the artifact's gains times the episode's kp/kd scale, clipped to the motor limits, at 1 kHz), then
the runtime's HOLD blend for hold_s.

Invariants: the episode is a pure function of (artifact, cfg, ep): its randomisation and push come
from np.random.default_rng([cfg.seed, ep]); it starts standing in the home keyframe with no previous
action; it stops at the first state robots.physics.fallen calls a fall.
"""
from __future__ import annotations

import mujoco
import numpy as np

from eval.closed_loop import ClosedLoop
from eval.config import EvalConfig, EvalError
from eval.measures import MotionMeter
from eval.sim import EvalSim
from eval.video import render_frame
from policies.runtime import PolicyRuntime
from robots import g1
from robots.physics import fallen, tilt_angle

# stood_at_end: upright at the default height, still
STOOD_HEIGHT_TOL_M = 0.05
STOOD_TILT_DEG = 10.0
STOOD_SPEED_MPS = 0.2


def draw_pushes(rng: np.random.Generator, cfg: EvalConfig, episode_s: float) -> list:
    """(t0, t1, force) horizontal pelvis pushes at random times and directions."""
    pushes = []
    if cfg.dr.enabled:
        for _ in range(cfg.dr.pushes):
            t_p = rng.uniform(0.2, max(0.3, episode_s - 0.5))
            ang = rng.uniform(0, 2 * np.pi)
            f = rng.uniform(*cfg.dr.push_force_n)
            pushes.append((t_p, t_p + cfg.dr.push_duration_s, np.array([f * np.cos(ang), f * np.sin(ang), 0.0])))
    return pushes


def run_episode(sim: EvalSim, runtime: PolicyRuntime, cfg: EvalConfig, ep: int, ref_key: np.ndarray,
                flights: tuple, renderer=None, loop: ClosedLoop | None = None) -> dict:
    spec = runtime.art.spec
    rng = np.random.default_rng([cfg.seed, ep])
    dr = sim.randomise(rng, cfg.dr)
    sim.reset()
    runtime.reset()
    loop = loop or ClosedLoop(sim, runtime, cfg.true_state)
    loop.start(dr["kp_scale"], dr["kd_scale"])
    m, d = sim.m, sim.d
    meter = MotionMeter(m, sim.floor, [m.body(n).id for n in g1.FOOT_BODIES], float(d.qpos[0]))
    kp = np.asarray(spec.kp) * dr["kp_scale"]
    kd = np.asarray(spec.kd) * dr["kd_scale"]
    dt = runtime.control_dt
    n_policy = min(int(round((cfg.duration_s or runtime.duration) / dt)), runtime.n_steps)
    n_hold = int(round(cfg.hold_s / dt))
    decim = int(round(dt / m.opt.timestep))
    for push in draw_pushes(rng, cfg, (n_policy + n_hold) * dt):
        sim.push(*push)
    target = runtime.default_q.copy()
    hold_from = target
    fell, fell_t = False, None
    pen_max, force_hist, force_t = 0.0, [], []
    load_pen = load = 0.0  # stance penetration: sums of force x penetration and of force
    sole_max_in_flight = np.full(2, -np.inf)
    track = []
    log = {"t": [], "pelvis_z": [], "sole": [], "action": [], "target": []}
    frames, frame_t = [], []
    next_frame_t = 0.0
    for k in range(n_policy + n_hold):
        t = k * dt
        q, dq, gyro, quat, vel_b, z = sim.state()
        log["t"].append(t)
        log["pelvis_z"].append(z)
        log["sole"].append(sim.sole_heights())
        if fallen(z, quat):
            fell, fell_t = True, t
            break
        if k < n_policy:
            track.append(np.linalg.norm(d.xpos[sim.key_bodies] - ref_key[min(k, len(ref_key) - 1)], axis=1).mean())
            out = loop.act(k)
            if not np.all(np.isfinite(out.action)):
                raise EvalError(f"episode {ep}: the policy returned non-finite actions at step {k}")
            target = hold_from = out.target
            log["action"].append(out.action)
            log["target"].append(out.target)
        else:  # HOLD, as deploy: the runtime's blend from the last policy target to the default pose
            target = runtime.hold_target(hold_from, (k - n_policy + 1) * dt)
        in_flight = any(t0 - cfg.flight_margin_s <= t <= t1 + cfg.flight_margin_s for t0, t1 in flights)
        for s in range(decim):
            ts = t + s * m.opt.timestep
            sim.drive(*loop.command(ts, target, kp, kd, policy=k < n_policy), ts)
            tau = sim.step()  # the torque the drives demanded (they apply it clipped to the motor limits)
            meter.step(d, tau, float(d.qpos[2]))
            pen, fz, fpen = sim.floor_contacts()
            pen_max = max(pen_max, pen)
            load_pen, load = load_pen + fpen, load + fz
            force_hist.append(fz)
            force_t.append(ts)
            if in_flight:
                sole_max_in_flight = np.maximum(sole_max_in_flight, sim.sole_heights())
        if renderer is not None and t >= next_frame_t - 1e-9:  # the state after step k's physics, at t + dt
            frames.append(render_frame(renderer, sim, k + 1))
            frame_t.append(t + dt)
            next_frame_t += 1.0 / cfg.video_fps
    q, dq, gyro, quat, vel_b, z = sim.state()
    f, ft = np.asarray(force_hist), np.asarray(force_t)
    win = max(1, int(round(0.01 / m.opt.timestep)))
    # landing: from just before the (last) touch-down to 0.5 s after; no flight: after the 0.2 s settle
    sel = ((ft >= flights[-1][1] - cfg.flight_margin_s) & (ft <= flights[-1][1] + 0.5)) if flights else ft >= 0.2
    f = f[sel]
    impact = float(np.convolve(f, np.ones(win) / win, mode="valid").max()) / sim.weight if f.size >= win else None
    stood = (not fell) and abs(z - g1.DEFAULT_BASE_HEIGHT) < STOOD_HEIGHT_TOL_M \
        and np.degrees(tilt_angle(quat)) < STOOD_TILT_DEG and np.linalg.norm(vel_b) < STOOD_SPEED_MPS
    return {
        "episode": ep, "fell": bool(fell), "fell_at_s": fell_t,
        "safety_events": loop.events, "tilt_tripped": any(e["kind"] == "tilt" for e in loop.events),
        "apex_foot_clearance_m": float(sole_max_in_flight.min()) if flights and np.isfinite(sole_max_in_flight).all() else None,
        "landing_impact_bw": impact,
        "tracking_error_cm": float(np.mean(track) * 100) if track else None,
        "penetration_mm": pen_max * 1000,
        "stance_penetration_mm": load_pen / load * 1000 if load > 0 else None,
        "stood_at_end": bool(stood),
        "final_pelvis_height_m": z,
        **meter.result(None if fell else float(d.qpos[0])),
        "dr": {k: (v if not isinstance(v, np.ndarray) else [round(float(x), 4) for x in v]) for k, v in dr.items()},
        "log": {k: np.asarray(v) for k, v in log.items()},
        "frames": frames,
        "frame_times": frame_t,
    }
