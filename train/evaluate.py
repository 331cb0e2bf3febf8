"""Sim-to-sim evaluation of an exported policy artifact in C MuJoCo (`make eval MOTION=<m>`).

The artifact `policies/g1/<motion>/` runs in onnxruntime at 50 Hz on the bridge model
(robots.model.build_bridge_model: full collisions, MuJoCo's default contact at 1 kHz) with the
drives' PD at 1 kHz (tau = kp (q* - q) - kd dq at the artifact's gains, clipped to the motor
limits). Observations are built only by policies.observation.build_observation from the true
state (pelvis gyro, orientation, joints, pelvis-frame linear velocity, pelvis height over the
flat floor), with the same step/phase/reference-window convention as deploy's policy runner.
Each episode starts standing in the home keyframe, runs the motion (duration / control_dt
policy steps), then HOLDs like deploy (blend from the last target to the default pose over
0.5 s) for `hold_s`, under domain randomisation seeded per episode (floor/foot friction, body
masses, kp/kd scale, one small push).

Metrics per episode:
- fell: pelvis below 0.4 m or tilted more than 60 deg at any time (the episode stops there).
- apex_foot_clearance_m: min over both feet of the max sole height (lowest foot-sphere bottom)
  during the reference flight window(s) +-0.1 s; null for motions without flight.
- landing_impact_bw: peak total robot-floor normal force (10 ms moving average) / body weight, from
  0.1 s before the last reference touch-down to 0.5 s after (no flight: after a 0.2 s settle).
- tracking_error_cm: mean over policy steps and 5 key bodies (pelvis, both ankle-roll links =
  feet, both wrist-yaw links = hands) of the world-frame distance between the simulated body
  and the reference body, the reference given by FK of (reference pelvis position, upright, ref_q).
- penetration_mm: max penetration depth of any robot-floor contact.
- stood_at_end: not fallen, pelvis within 5 cm of 0.785 m, tilt < 10 deg, speed < 0.2 m/s at the end.

Writes runs/eval/<motion>/<stamp>/eval.json (episodes, falls, apex_foot_clearance_m {mean, min},
tracking_error_cm, penetration_mm, ... and per_episode), eval.png and, if offscreen rendering
works (MUJOCO_GL=osmesa or egl), episode0.gif. The return code is 0 even with falls.

    python -m train.evaluate --motion jump [--episodes 20] [--seed 0] [--no-video]
"""
from __future__ import annotations

import argparse
import ctypes.util
import dataclasses
import datetime as _dt
import json
import os
import sys
import time
from pathlib import Path

if "MUJOCO_GL" not in os.environ:  # before mujoco is imported: offscreen rendering for the video
    os.environ["MUJOCO_GL"] = "osmesa" if ctypes.util.find_library("OSMesa") else "egl"

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from policies import artifact as A  # noqa: E402
from policies.action import action_to_joint_target  # noqa: E402
from policies.observation import ObsInputs, build_observation, quat_rotate_inverse, reference_window  # noqa: E402
from robots import g1  # noqa: E402
from robots import model as RM  # noqa: E402

EVAL_ROOT = Path(__file__).resolve().parent.parent / "runs" / "eval"
KEY_BODIES = ("pelvis", "left_ankle_roll_link", "right_ankle_roll_link", "left_wrist_yaw_link", "right_wrist_yaw_link")


class EvalError(ValueError):
    """Evaluation cannot run (unknown motion, bad artifact); the message says what exists."""


@dataclasses.dataclass(frozen=True)
class DRConfig:
    enabled: bool = True
    friction: tuple[float, float] = (0.5, 1.0)  # sliding friction of every geom (floor and robot)
    mass_scale: tuple[float, float] = (0.95, 1.05)  # per body (inertia scaled alike)
    kp_scale: tuple[float, float] = (0.97, 1.03)  # per joint
    kd_scale: tuple[float, float] = (0.97, 1.03)
    push_force_n: tuple[float, float] = (0.0, 40.0)  # horizontal, on the pelvis, random direction
    push_duration_s: float = 0.1  # 40 N x 0.1 s = 4 N s ~ 0.12 m/s on 33 kg
    pushes: int = 1


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    episodes: int = 20
    seed: int = 0
    hold_s: float = 1.5  # after the motion, HOLD like deploy
    hold_blend_s: float = 0.5
    duration_s: float | None = None  # truncate the motion (tests)
    fall_height_m: float = 0.4
    fall_tilt_deg: float = 60.0
    flight_margin_s: float = 0.1
    dr: DRConfig = DRConfig()
    video: bool = True
    video_fps: float = 10.0
    video_size: tuple[int, int] = (320, 240)


# ----------------------------------------------------------------------------- set-up

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


def _reference_motion(art: A.Artifact):
    """The train.motions Motion for the artifact's reference (flight windows, pelvis x), if it matches."""
    try:
        from train.motions import MotionError, load_motion

        m = load_motion(art.spec.motion.name)
    except (ImportError, MotionError, OSError):
        return None
    if m.ref_q.shape != art.ref_q.shape or not np.allclose(m.ref_q, art.ref_q, atol=1e-5):
        print(f"notice: motions/{art.spec.motion.name}.yaml differs from the artifact's reference; "
              "using the artifact's reference without flight windows / pelvis x")
        return None
    return m


class _Sim:
    """The bridge model with per-episode randomisation and the measurement helpers."""

    def __init__(self):
        self.m = RM.build_bridge_model()
        self.d = mujoco.MjData(self.m)
        m = self.m
        self.qadr, self.dadr = RM.motor_qpos_adr(m), RM.motor_dof_adr(m)
        self.floor = m.geom("floor").id
        self.pelvis = m.body(g1.BASE_BODY).id
        feet = [m.body(n).id for n in g1.FOOT_BODIES]
        sph = mujoco.mjtGeom.mjGEOM_SPHERE
        self.soles = [np.array([g for g in range(m.ngeom) if m.geom_bodyid[g] == b and m.geom_type[g] == sph])
                      for b in feet]
        self.key_bodies = np.array([m.body(n).id for n in KEY_BODIES])
        try:
            s = m.sensor("imu-pelvis-angular-velocity")
            self.gyro_adr = slice(int(m.sensor_adr[s.id]), int(m.sensor_adr[s.id]) + 3)
        except KeyError:
            self.gyro_adr = None
        self.nominal = dict(friction=m.geom_friction.copy(), mass=m.body_mass.copy(), inertia=m.body_inertia.copy())
        self.home = m.key("home").id
        self.weight = float(m.body_subtreemass[0]) * 9.81
        self._force = np.zeros(6)

    def randomise(self, rng: np.random.Generator, dr: DRConfig) -> dict:
        m, nom = self.m, self.nominal
        m.geom_friction[:] = nom["friction"]
        m.body_mass[:] = nom["mass"]
        m.body_inertia[:] = nom["inertia"]
        kp_s = np.ones(g1.NUM_MOTORS)
        kd_s = np.ones(g1.NUM_MOTORS)
        info = {}
        if dr.enabled:
            mu = rng.uniform(*dr.friction)
            m.geom_friction[:, 0] = mu
            s = rng.uniform(*dr.mass_scale, size=m.nbody)
            s[0] = 1.0
            m.body_mass[:] = nom["mass"] * s
            m.body_inertia[:] = nom["inertia"] * s[:, None]
            kp_s = rng.uniform(*dr.kp_scale, size=g1.NUM_MOTORS)
            kd_s = rng.uniform(*dr.kd_scale, size=g1.NUM_MOTORS)
            info = {"friction": float(mu), "mass_kg": float((nom["mass"] * s).sum())}
        mujoco.mj_setConst(self.m, self.d)
        return {"kp_scale": kp_s, "kd_scale": kd_s, **info}

    def reset(self):
        mujoco.mj_resetDataKeyframe(self.m, self.d, self.home)
        mujoco.mj_forward(self.m, self.d)

    def state(self):
        d = self.d
        quat = d.qpos[3:7].copy()
        gyro = d.sensordata[self.gyro_adr].copy() if self.gyro_adr is not None else d.qvel[3:6].copy()
        vel_b = quat_rotate_inverse(quat, d.qvel[0:3].copy())
        return d.qpos[self.qadr].copy(), d.qvel[self.dadr].copy(), gyro, quat, vel_b, float(d.qpos[2])

    def sole_heights(self) -> np.ndarray:
        d, m = self.d, self.m
        return np.array([np.min(d.geom_xpos[s, 2] - m.geom_size[s, 0]) for s in self.soles])

    def floor_contacts(self) -> tuple[float, float]:
        """(max penetration m, total normal force N) over robot-floor contacts now."""
        d = self.d
        n = d.ncon
        if n == 0:
            return 0.0, 0.0
        c = d.contact
        on_floor = (c.geom1[:n] == self.floor) | (c.geom2[:n] == self.floor)
        if not on_floor.any():
            return 0.0, 0.0
        pen = float(max(0.0, -np.min(c.dist[:n][on_floor])))
        fz = 0.0
        for i in np.flatnonzero(on_floor):
            mujoco.mj_contactForce(self.m, d, int(i), self._force)
            fz += self._force[0]
        return pen, fz


def _tilt_deg(quat) -> float:
    w, x, y, z = quat
    zz = 1 - 2 * (x * x + y * y)  # R[2, 2]: world z of the pelvis z axis
    return float(np.degrees(np.arccos(np.clip(zz, -1, 1))))


def reference_key_positions(sim: _Sim, ref_q: np.ndarray, ref_base_pos: np.ndarray) -> np.ndarray:
    """(T, 5, 3) world positions of KEY_BODIES for the reference (pelvis upright at ref_base_pos)."""
    d = mujoco.MjData(sim.m)
    out = np.zeros((ref_q.shape[0], len(KEY_BODIES), 3))
    for k in range(ref_q.shape[0]):
        d.qpos[:] = 0
        d.qpos[:3] = ref_base_pos[k]
        d.qpos[3] = 1.0
        d.qpos[sim.qadr] = ref_q[k]
        mujoco.mj_kinematics(sim.m, d)
        out[k] = d.xpos[sim.key_bodies]
    return out


# ----------------------------------------------------------------------------- episodes

def _make_session(onnx_bytes: bytes):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(onnx_bytes, sess_options=so, providers=["CPUExecutionProvider"])


def run_episode(sim: _Sim, art: A.Artifact, session, cfg: EvalConfig, ep: int, ref_key: np.ndarray,
                flights: tuple, renderer=None) -> dict:
    spec = art.spec
    rng = np.random.default_rng([cfg.seed, ep])
    dr = sim.randomise(rng, cfg.dr)
    sim.reset()
    m, d = sim.m, sim.d
    kp = np.asarray(spec.kp) * dr["kp_scale"]
    kd = np.asarray(spec.kd) * dr["kd_scale"]
    tau_max = g1.TORQUE_LIMIT
    default_q = np.asarray(spec.default_joint_pos)
    ref_q = np.asarray(art.ref_q, float)
    ref_h = np.asarray(art.ref_height, float)
    duration = spec.motion.duration
    n_policy = int(round((cfg.duration_s or duration) / spec.control_dt))
    n_policy = min(n_policy, int(round(duration / spec.control_dt)))
    n_hold = int(round(cfg.hold_s / spec.control_dt))
    decim = int(round(spec.control_dt / m.opt.timestep))
    # one small push at a random time, random horizontal direction
    pushes = []
    if cfg.dr.enabled:
        for _ in range(cfg.dr.pushes):
            t_p = rng.uniform(0.2, max(0.3, (n_policy + n_hold) * spec.control_dt - 0.5))
            ang = rng.uniform(0, 2 * np.pi)
            f = rng.uniform(*cfg.dr.push_force_n)
            pushes.append((t_p, t_p + cfg.dr.push_duration_s, np.array([f * np.cos(ang), f * np.sin(ang), 0.0])))
    last_action = np.zeros(g1.NUM_MOTORS)
    target = default_q.copy()
    hold_from = target
    fell, fell_t = False, None
    pen_max, force_hist, force_t = 0.0, [], []
    sole_max_in_flight = np.full(2, -np.inf)
    track = []
    log = {"t": [], "pelvis_z": [], "sole": []}
    frames = []
    next_frame_t = 0.0
    for k in range(n_policy + n_hold):
        t = k * spec.control_dt
        q, dq, gyro, quat, vel_b, z = sim.state()
        log["t"].append(t)
        log["pelvis_z"].append(z)
        log["sole"].append(sim.sole_heights())
        tilt = _tilt_deg(quat)
        if z < cfg.fall_height_m or tilt > cfg.fall_tilt_deg:
            fell, fell_t = True, t
            break
        if k < n_policy:
            track.append(np.linalg.norm(d.xpos[sim.key_bodies] - ref_key[min(k, len(ref_key) - 1)], axis=1).mean())
            rq, rh = reference_window(ref_q, ref_h, k)
            inputs = ObsInputs(gyro=gyro, quat=quat, q=q, dq=dq, last_action=last_action, base_lin_vel=vel_b,
                               base_height=np.asarray(z), phase=np.asarray(min(max(t / duration, 0.0), 1.0)),
                               ref_q=rq, ref_height=rh)
            obs = build_observation(spec.observation, inputs).astype(np.float32)
            action = np.asarray(session.run([A.OUTPUT_NAME], {A.INPUT_NAME: obs[None]})[0], float).reshape(-1)
            if not np.all(np.isfinite(action)):
                raise EvalError(f"episode {ep}: the policy returned non-finite actions at step {k}")
            target = action_to_joint_target(action, spec.action_scale, default_q)
            last_action = action
            hold_from = target
        else:  # HOLD: blend from the last policy target to the default pose, as deploy does
            a = min(1.0, (k - n_policy + 1) * spec.control_dt / cfg.hold_blend_s)
            target = hold_from + a * (default_q - hold_from)
        in_flight = any(t0 - cfg.flight_margin_s <= t <= t1 + cfg.flight_margin_s for t0, t1 in flights)
        for s in range(decim):
            ts = t + s * m.opt.timestep
            q_now, dq_now = d.qpos[sim.qadr], d.qvel[sim.dadr]
            d.ctrl[:] = np.clip(kp * (target - q_now) - kd * dq_now, -tau_max, tau_max)
            d.xfrc_applied[sim.pelvis, :3] = 0.0
            for t0, t1, f in pushes:
                if t0 <= ts < t1:
                    d.xfrc_applied[sim.pelvis, :3] += f
            mujoco.mj_step(m, d)
            pen, fz = sim.floor_contacts()
            pen_max = max(pen_max, pen)
            force_hist.append(fz)
            force_t.append(ts)
            if in_flight:
                sole_max_in_flight = np.maximum(sole_max_in_flight, sim.sole_heights())
        if renderer is not None and t >= next_frame_t:
            frames.append(_render(renderer, sim))
            next_frame_t += 1.0 / cfg.video_fps
    d.xfrc_applied[:] = 0
    q, dq, gyro, quat, vel_b, z = sim.state()
    f, ft = np.asarray(force_hist), np.asarray(force_t)
    win = max(1, int(round(0.01 / m.opt.timestep)))
    # landing: from just before the (last) touch-down to 0.5 s after; no flight: after the 0.2 s settle
    sel = ((ft >= flights[-1][1] - cfg.flight_margin_s) & (ft <= flights[-1][1] + 0.5)) if flights else ft >= 0.2
    f = f[sel]
    impact = float(np.convolve(f, np.ones(win) / win, mode="valid").max()) / sim.weight if f.size >= win else None
    stood = (not fell) and abs(z - g1.DEFAULT_BASE_HEIGHT) < 0.05 and _tilt_deg(quat) < 10 and np.linalg.norm(vel_b) < 0.2
    return {
        "episode": ep, "fell": bool(fell), "fell_at_s": fell_t,
        "apex_foot_clearance_m": float(sole_max_in_flight.min()) if flights and np.isfinite(sole_max_in_flight).all() else None,
        "landing_impact_bw": impact,
        "tracking_error_cm": float(np.mean(track) * 100) if track else None,
        "penetration_mm": pen_max * 1000,
        "stood_at_end": bool(stood),
        "final_pelvis_height_m": z,
        "dr": {k: (v if not isinstance(v, np.ndarray) else [round(float(x), 4) for x in v]) for k, v in dr.items()},
        "log": {k: np.asarray(v) for k, v in log.items()},
        "frames": frames,
    }


def _render(renderer, sim: _Sim):
    cam = mujoco.MjvCamera()
    cam.type = mujoco.mjtCamera.mjCAMERA_FREE
    cam.lookat[:] = [sim.d.qpos[0], sim.d.qpos[1], 0.6]
    cam.distance, cam.azimuth, cam.elevation = 2.6, 120.0, -12.0
    renderer.update_scene(sim.d, camera=cam)
    return renderer.render().copy()


def _open_renderer(sim: _Sim, cfg: EvalConfig):
    try:
        return mujoco.Renderer(sim.m, cfg.video_size[1], cfg.video_size[0])
    except Exception as e:  # noqa: BLE001 - no GL backend here
        print(f"notice: no offscreen renderer (MUJOCO_GL={os.environ.get('MUJOCO_GL')}: {e}); skipping the video. "
              "On Debian/Ubuntu: apt-get install -y libosmesa6 and MUJOCO_GL=osmesa")
        return None


def _summary_stats(vals):
    v = [x for x in vals if x is not None]
    return {"mean": float(np.mean(v)), "min": float(np.min(v)), "max": float(np.max(v))} if v else None


def evaluate(motion: str, cfg: EvalConfig = EvalConfig(), artifact_root: Path | None = None,
             out_root: Path = EVAL_ROOT, progress: bool = True) -> tuple[dict, Path]:
    """Run the evaluation; returns (eval.json content, output folder)."""
    art = resolve_artifact(motion, artifact_root)
    ref_motion = _reference_motion(art)
    sim = _Sim()
    T = art.ref_q.shape[0]
    base = ref_motion.ref_base_pos if ref_motion is not None else np.stack(
        [np.zeros(T), np.zeros(T), np.asarray(art.ref_height, float)], 1)
    ref_key = reference_key_positions(sim, np.asarray(art.ref_q, float), base)
    flights = ref_motion.flight_windows if ref_motion is not None else ()
    session = _make_session(art.onnx_bytes)
    out = Path(out_root) / motion / _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    out.mkdir(parents=True, exist_ok=True)
    renderer = _open_renderer(sim, cfg) if cfg.video else None
    results, t_eps = [], []
    try:
        from tqdm import tqdm

        it = tqdm(range(cfg.episodes), desc=f"eval {motion}", unit="ep", disable=not progress, file=sys.stdout)
        for ep in it:
            t0 = time.perf_counter()
            r = run_episode(sim, art, session, cfg, ep, ref_key, flights, renderer if ep == 0 else None)
            t_eps.append(time.perf_counter() - t0)
            results.append(r)
            it.set_postfix(falls=sum(x["fell"] for x in results))
    finally:
        if renderer is not None:
            renderer.close()
    video = None
    if results and results[0]["frames"]:
        video = _write_gif(results[0]["frames"], out / "episode0.gif", cfg.video_fps)
    plot = _plot(results, art, ref_motion, out / "eval.png")
    clear = _summary_stats([r["apex_foot_clearance_m"] for r in results])
    track = _summary_stats([r["tracking_error_cm"] for r in results])
    pen = _summary_stats([r["penetration_mm"] for r in results])
    impact = _summary_stats([r["landing_impact_bw"] for r in results])
    summary = {
        "motion": motion,
        "artifact": str(art.path),
        "artifact_provenance": art.spec.provenance,
        "episodes": len(results),
        "falls": int(sum(r["fell"] for r in results)),
        "stood_at_end": int(sum(r["stood_at_end"] for r in results)),
        "apex_foot_clearance_m": None if clear is None else {"mean": clear["mean"], "min": clear["min"]},
        "tracking_error_cm": None if track is None else track["mean"],
        "tracking_error_cm_max": None if track is None else track["max"],
        "penetration_mm": None if pen is None else pen["max"],
        "penetration_mm_mean": None if pen is None else pen["mean"],
        "landing_impact_bw": None if impact is None else {"mean": impact["mean"], "max": impact["max"]},
        "seconds_per_episode": float(np.mean(t_eps)) if t_eps else None,
        "config": _jsonable(dataclasses.asdict(cfg)),
        "definitions": {
            "fell": f"pelvis < {cfg.fall_height_m} m or tilt > {cfg.fall_tilt_deg} deg",
            "apex_foot_clearance_m": "min over feet of max sole height (lowest foot sphere) in the reference flight "
                                     f"window(s) +-{cfg.flight_margin_s} s",
            "tracking_error_cm": "mean over policy steps and 5 key bodies (pelvis, feet, hands) of world-frame distance "
                                 "to FK of the reference (reference pelvis position, upright, ref_q); mean over episodes",
            "penetration_mm": "max over episodes of the deepest robot-floor contact",
            "landing_impact_bw": "peak total robot-floor normal force (10 ms mean) / body weight, from 0.1 s before "
                                 "the last reference touch-down to 0.5 s after (no flight: after a 0.2 s settle)",
            "stood_at_end": "episodes ending upright at 0.785 +- 0.05 m, still (< 0.2 m/s), not fallen",
        },
        "plot": str(plot),
        "video": str(video) if video else None,
        "per_episode": [{k: v for k, v in r.items() if k not in ("log", "frames")} for r in results],
    }
    (out / "eval.json").write_text(json.dumps(_jsonable(summary), indent=2))
    return summary, out


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x


def _write_gif(frames, path: Path, fps: float) -> Path | None:
    try:
        from PIL import Image

        imgs = [Image.fromarray(f) for f in frames]
        imgs[0].save(path, save_all=True, append_images=imgs[1:], duration=int(1000 / fps), loop=0)
        return path
    except Exception as e:  # noqa: BLE001
        print(f"notice: could not write the video ({e})")
        return None


def _plot(results, art, ref_motion, path: Path) -> Path:
    import matplotlib

    matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for r in results:
        lg = r["log"]
        c = "C3" if r["fell"] else "C0"
        a1.plot(lg["t"], lg["pelvis_z"], c, lw=0.7, alpha=0.5)
        if len(lg["sole"]):
            a2.plot(lg["t"], lg["sole"][:, 0], "C0", lw=0.7, alpha=0.5)
            a2.plot(lg["t"], lg["sole"][:, 1], "C1", lw=0.7, alpha=0.5)
    tr = np.arange(art.ref_q.shape[0]) * art.spec.control_dt
    a1.plot(tr, art.ref_height, "k--", lw=1.5, label="reference")
    if ref_motion is not None:
        a2.plot(tr, ref_motion.ref_foot_height[:, 0], "k--", lw=1.5, label="reference")
        for t0, t1 in ref_motion.flight_windows:
            for a in (a1, a2):
                a.axvspan(t0, t1, color="0.85", zorder=0)
    a1.set_ylabel("pelvis height (m)")
    a2.set_ylabel("sole height (m)\nleft C0, right C1")
    a2.set_xlabel("t (s)")
    a1.legend()
    falls = sum(r["fell"] for r in results)
    a1.set_title(f"{art.spec.motion.name}: {len(results)} episodes, {falls} falls (red)")
    for a in (a1, a2):
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def format_table(summary: dict) -> str:
    def f(v, scale=1.0, fmt="{:.1f}"):
        return "-" if v is None else fmt.format(v * scale)

    rows = [f"{'ep':>3} {'fell':>5} {'clear cm':>9} {'impact BW':>10} {'track cm':>9} {'pen mm':>7} {'stood':>6}"]
    for r in summary["per_episode"]:
        rows.append(f"{r['episode']:>3} {str(r['fell']):>5} {f(r['apex_foot_clearance_m'], 100):>9} "
                    f"{f(r['landing_impact_bw'], fmt='{:.2f}'):>10} {f(r['tracking_error_cm']):>9} "
                    f"{f(r['penetration_mm']):>7} {str(r['stood_at_end']):>6}")
    c = summary["apex_foot_clearance_m"]
    rows.append(
        f"{summary['motion']}: {summary['episodes']} episodes, falls {summary['falls']}, stood at end "
        f"{summary['stood_at_end']}/{summary['episodes']}, apex foot clearance "
        + ("n/a (no flight)" if c is None else f"mean {c['mean'] * 100:.1f} cm / min {c['min'] * 100:.1f} cm")
        + f", tracking error {f(summary['tracking_error_cm'])} cm, penetration max {f(summary['penetration_mm'])} mm, "
        f"{summary['seconds_per_episode']:.1f} s/episode")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m train.evaluate", description="Sim-to-sim evaluation in C MuJoCo")
    ap.add_argument("--motion", required=True)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-dr", action="store_true", help="no domain randomisation or pushes")
    ap.add_argument("--no-video", action="store_true")
    ap.add_argument("--hold", type=float, default=EvalConfig.hold_s, help="seconds of HOLD after the motion")
    ap.add_argument("--artifacts", help="artifact root (default policies/g1)")
    ap.add_argument("--out", default=str(EVAL_ROOT), help="output root (default runs/eval)")
    args = ap.parse_args(argv)
    cfg = EvalConfig(episodes=args.episodes, seed=args.seed, video=not args.no_video, hold_s=args.hold,
                     dr=DRConfig(enabled=not args.no_dr))
    try:
        summary, out = evaluate(args.motion, cfg, Path(args.artifacts) if args.artifacts else None, Path(args.out))
    except EvalError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_table(summary))
    if summary["video"] is None and cfg.video:
        print("notice: no video written")
    print(out / "eval.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
