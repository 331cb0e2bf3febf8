"""State estimator against ground truth in C MuJoCo, and its cost per call.

`simulate(scenario)` runs the bridge model (robots/model.py, 1 kHz, torque motors, PD at
g1.KP/g1.KD computed outside the model as the drives do), reads the pelvis IMU from the
model's own sensors (`imu-pelvis-angular-velocity`, `imu-pelvis-linear-acceleration`,
orientation = pelvis quaternion x IMU site), adds sensor noise and a constant IMU bias
(known to the estimator, as calibration would give it), feeds the estimator at
`rate_hz`, and returns estimate and ground truth side by side.

Scenarios (the robot has no balance policy here, so pushes, stepping and jumps use a
"spotter": a torque on the pelvis that holds it upright, like a hand on the robot's back.
It adds no force, so the centre-of-mass motion and all contacts are physical):
  stand  PD holds the default pose, 3 s.
  push   spotter on; 100-120 N pushes of 0.2 s in four directions.
  step   spotter on; marching in place (alternate foot lifts of ~8 cm) at ~1 Hz.
  jump   spotter on; crouch, extend with feed-forward torque (take-off), flight
         (~0.2 s), landing and settling.

`run()` is the `make bench` entry: RMSEs per scenario and the estimator's p50/p99 cost per
call at 50 Hz and 500 Hz, back to back and (`*_after_sleep`) each after 1.5 ms idle, as in the loop.
"""
from __future__ import annotations

import dataclasses
import time

import mujoco
import numpy as np

from estimation.estimator import Estimator, EstimatorConfig
from robots import g1
from robots import model as robot_model

SCENARIOS = ("stand", "push", "step", "jump")
SETTLE_S = 0.5  # the first 0.5 s (robot settling on its feet, filter converging) is not scored


@dataclasses.dataclass(frozen=True)
class SensorNoise:
    """Per-sample Gaussian noise (std) and constant IMU bias added to the simulated sensors."""

    gyro: float = 0.02  # rad/s
    accel: float = 0.15  # m/s^2
    quat: float = 0.003  # rad, small random rotation of the reported orientation
    quat_tilt: float = 0.01  # rad, constant roll/pitch error of the IMU's attitude (unknown to the estimator)
    q: float = 0.001  # rad
    dq: float = 0.05  # rad/s
    tau: float = 1.0  # Nm
    gyro_bias: tuple = (0.01, -0.008, 0.005)  # rad/s
    accel_bias: tuple = (0.05, -0.04, 0.08)  # m/s^2


NOISE_OFF = SensorNoise(0, 0, 0, 0, 0, 0, 0, (0, 0, 0), (0, 0, 0))


def _leg_pose(hip_pitch: float, knee: float, ankle_pitch: float) -> np.ndarray:
    q = g1.DEFAULT_JOINT_POS.copy()
    for s in (0, 6):
        q[s + 0], q[s + 3], q[s + 4] = hip_pitch, knee, ankle_pitch
    return q


def _lift_pose(side: int, lift: float):
    """Default pose with one leg lifted: side 0 = left, 1 = right; lift in [0, 1]."""
    q = g1.DEFAULT_JOINT_POS.copy()
    s = 6 * side
    q[s + 0] += -0.5 * lift
    q[s + 3] += 0.9 * lift
    q[s + 4] += -0.4 * lift
    return q


_CROUCH = _leg_pose(-0.8, 1.6, -0.8)
_EXTEND = _leg_pose(0.0, 0.0, 0.2)
_LAND = _leg_pose(-0.3, 0.6, -0.3)
_JUMP = dict(crouch=(0.5, 1.0), push=(1.2, 1.45), land_blend=0.1, stand=(2.0, 2.5))


def _blend(a, b, s):
    s = min(max(s, 0.0), 1.0)
    return (1 - s) * a + s * b


def _targets(scenario: str, t: float):
    """(joint targets, feed-forward torque, external pelvis force (3,), spotter on)."""
    q0 = g1.DEFAULT_JOINT_POS
    ff = np.zeros(g1.NUM_MOTORS)
    force = np.zeros(3)
    if scenario == "stand":
        return q0, ff, force, False
    if scenario == "push":
        for t0, f in ((1.0, (0, 100, 0)), (1.8, (120, 0, 0)), (2.6, (0, -100, 0)), (3.4, (-120, 0, 0))):
            if t0 <= t < t0 + 0.2:
                force = np.array(f, dtype=float)
        return q0, ff, force, True
    if scenario == "step":
        if t < 0.8:
            return q0, ff, force, True
        period = 0.9  # one foot lift per 0.45 s
        ph = ((t - 0.8) % period) / period
        side = 0 if ph < 0.5 else 1
        lift = np.sin(np.pi * (ph % 0.5) / 0.5) ** 2
        return _lift_pose(side, lift), ff, force, True
    if scenario == "jump":  # ~0.3 s flight, ~20 cm foot clearance, 2 m/s take-off
        j = _JUMP
        if t < j["push"][0]:
            return _blend(q0, _CROUCH, (t - j["crouch"][0]) / (j["crouch"][1] - j["crouch"][0])), ff, force, True
        if t < j["push"][1]:  # take-off: extend with full feed-forward torque
            for s in (0, 6):
                ff[s + 0], ff[s + 3], ff[s + 4] = -88.0, 139.0, -50.0
            return _EXTEND, ff, force, True
        if t < j["stand"][0]:  # flight and landing: legs to a soft landing pose
            return _blend(_EXTEND, _LAND, (t - j["push"][1]) / j["land_blend"]), ff, force, True
        return _blend(_LAND, q0, (t - j["stand"][0]) / (j["stand"][1] - j["stand"][0])), ff, force, True
    raise ValueError(f"unknown scenario {scenario!r}; known: {SCENARIOS}")


def _rot_error(quat):
    """Rotation vector of the pelvis orientation (world frame)."""
    v = np.zeros(3)
    mujoco.mju_quat2Vel(v, np.asarray(quat, dtype=float), 1.0)
    R = np.zeros(9)
    mujoco.mju_quat2Mat(R, quat)
    return R.reshape(3, 3) @ v


def simulate(
    scenario: str = "stand",
    duration: float | None = None,
    noise: SensorNoise = SensorNoise(),
    rate_hz: float = 500.0,
    seed: int = 0,
    use_tau: bool = True,
    config: EstimatorConfig | None = None,
    estimator: Estimator | None = None,
    model: mujoco.MjModel | None = None,
    inject=None,
) -> dict:
    """Run one scenario; returns arrays over estimator ticks (truth `*_true`, estimate `*_est`).

    `inject(k, sample) -> sample` may corrupt the k-th estimator input (a dict with q, dq,
    quat, gyro, accel, tau) to test bad-input handling."""
    duration = duration or {"stand": 3.0, "push": 4.0, "step": 4.0, "jump": 3.0}[scenario]
    m = model or robot_model.build_bridge_model()
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, m.key("home").id)
    qa, da = robot_model.motor_qpos_adr(m), robot_model.motor_dof_adr(m)
    pel = m.body(g1.BASE_BODY).id
    gyro_adr = m.sensor_adr[m.sensor("imu-pelvis-angular-velocity").id]
    acc_adr = m.sensor_adr[m.sensor("imu-pelvis-linear-acceleration").id]
    site_quat = m.site_quat[m.site(g1.IMU_SITE).id].copy()
    foot_geoms = [set(np.flatnonzero(m.geom_bodyid == m.body(b).id)) for b in g1.FOOT_BODIES]
    floor = m.geom("floor").id
    rng = np.random.default_rng(seed)
    tilt = np.zeros(4)
    mujoco.mju_axisAngle2Quat(tilt, np.array([0.6, 0.8, 0.0]), noise.quat_tilt)
    if config is None:
        config = EstimatorConfig(gyro_bias=noise.gyro_bias, accel_bias=noise.accel_bias)
    est = estimator or Estimator(config, model=m)
    stride = max(1, int(round(1.0 / (rate_hz * m.opt.timestep))))
    n_steps = int(round(duration / m.opt.timestep))
    rec = {k: [] for k in (
        "t", "vel_true", "vel_est", "velw_true", "velw_est", "height_true", "height_est",
        "contact_true", "contact_est", "cost_s", "flags")}
    qtmp = np.zeros(4)
    k = 0
    for i in range(n_steps):
        t = i * m.opt.timestep
        tgt, ff, force, spotter = _targets(scenario, t)
        q, dq = d.qpos[qa], d.qvel[da]
        d.ctrl[:] = g1.KP * (tgt - q) - g1.KD * dq + ff
        d.xfrc_applied[pel, :3] = force
        if spotter:
            w_world = d.xmat[pel].reshape(3, 3) @ d.qvel[3:6]
            d.xfrc_applied[pel, 3:] = -1500.0 * _rot_error(d.qpos[3:7]) - 150.0 * w_world
        else:
            d.xfrc_applied[pel, 3:] = 0.0
        qpos, qvel = d.qpos.copy(), d.qvel.copy()  # the state the sensors below are computed at
        mujoco.mj_step(m, d)
        if i % stride:
            continue
        gyro = d.sensordata[gyro_adr:gyro_adr + 3] + noise.gyro_bias + noise.gyro * rng.standard_normal(3)
        accel = d.sensordata[acc_adr:acc_adr + 3] + noise.accel_bias + noise.accel * rng.standard_normal(3)
        mujoco.mju_mulQuat(qtmp, qpos[3:7], site_quat)
        if noise.quat_tilt:
            mujoco.mju_mulQuat(qtmp, tilt, qtmp.copy())  # world-frame attitude error
        quat = qtmp.copy()
        if noise.quat:
            dqn = np.zeros(4)
            axis = rng.standard_normal(3)
            mujoco.mju_axisAngle2Quat(dqn, axis / np.linalg.norm(axis), noise.quat * rng.standard_normal())
            mujoco.mju_mulQuat(quat, qtmp, dqn)
        tau = np.clip(d.ctrl, -g1.TORQUE_LIMIT, g1.TORQUE_LIMIT) + noise.tau * rng.standard_normal(g1.NUM_MOTORS)
        sample = dict(
            q=qpos[qa] + noise.q * rng.standard_normal(g1.NUM_MOTORS),
            dq=qvel[da] + noise.dq * rng.standard_normal(g1.NUM_MOTORS),
            quat=quat, gyro=gyro, accel=accel, tau=tau if use_tau else None,
        )
        if inject is not None:
            sample = inject(k, sample)
        if k == 0 and estimator is None:
            est.reset(sample["q"], sample["quat"], t)
        t0 = time.perf_counter()
        e = est.update(t, sample["q"], sample["dq"], sample["quat"], sample["gyro"], sample["accel"], sample["tau"])
        rec["cost_s"].append(time.perf_counter() - t0)
        R = np.zeros(9)
        mujoco.mju_quat2Mat(R, qpos[3:7])
        v_world = qvel[0:3]
        in_contact = [False, False]
        for c in d.contact[: d.ncon]:
            for j in range(2):
                if (c.geom1 == floor and c.geom2 in foot_geoms[j]) or (c.geom2 == floor and c.geom1 in foot_geoms[j]):
                    in_contact[j] = True
        rec["t"].append(t)
        rec["vel_true"].append(R.reshape(3, 3).T @ v_world)
        rec["vel_est"].append(e.base_lin_vel)
        rec["velw_true"].append(v_world.copy())
        rec["velw_est"].append(e.base_lin_vel_world)
        rec["height_true"].append(qpos[2])
        rec["height_est"].append(e.base_height)
        rec["contact_true"].append(in_contact)
        rec["contact_est"].append(e.foot_contact)
        rec["flags"].append(e.flags)
        k += 1
    out = {key: (np.asarray(v) if key != "flags" else v) for key, v in rec.items()}
    out["min_height"] = float(np.min(out["height_true"]))
    return out


def metrics(r: dict, settle_s: float = SETTLE_S) -> dict:
    """RMSE of base velocity (3D norm, pelvis frame) and height after `settle_s`."""
    sel = r["t"] >= settle_s
    ev = r["vel_est"][sel] - r["vel_true"][sel]
    eh = r["height_est"][sel] - r["height_true"][sel]
    ct, ce = r["contact_true"][sel], r["contact_est"][sel]
    flight = ~ct.any(axis=1)
    out = {
        "vel_rmse": float(np.sqrt(np.mean(np.sum(ev**2, axis=1)))),
        "vel_rmse_xyz": [float(x) for x in np.sqrt(np.mean(ev**2, axis=0))],
        "height_rmse": float(np.sqrt(np.mean(eh**2))),
        "vel_max_err": float(np.max(np.linalg.norm(ev, axis=1))),
        "height_max_err": float(np.max(np.abs(eh))),
        "contact_accuracy": float(np.mean(ct == ce)),
        "flight_s": float(np.sum(flight) * np.median(np.diff(r["t"]))),
        "vel_true_rms": float(np.sqrt(np.mean(np.sum(r["vel_true"][sel] ** 2, axis=1)))),
        "height_true_range": float(np.ptp(r["height_true"][sel])),
    }
    if flight.any():
        out["vel_rmse_flight"] = float(np.sqrt(np.mean(np.sum(ev[flight] ** 2, axis=1))))
        out["height_rmse_flight"] = float(np.sqrt(np.mean(eh[flight] ** 2)))
        # landing: 0.3 s from the first touchdown after the longest flight phase
        t = r["t"][sel]
        land = (t > t[flight][-1]) & (t <= t[flight][-1] + 0.3)
        out["vel_rmse_landing"] = float(np.sqrt(np.mean(np.sum(ev[land] ** 2, axis=1))))
        out["height_rmse_landing"] = float(np.sqrt(np.mean(eh[land] ** 2)))
    return out


def cost_per_call(rate_hz: float, n: int = 2000, seed: int = 0, sleep_s: float = 0.0) -> dict:
    """Wall time of Estimator.update on recorded standing/stepping inputs (both feet and one foot).
    `sleep_s` > 0 sleeps that long before each call, as the deploy loop does between command ticks: what
    runs on the core meanwhile (another process) evicts the caches, and the call starts cold."""
    r_inputs = []
    m = robot_model.build_bridge_model()

    def grab(k, s):
        r_inputs.append(s)
        return s

    simulate("step", duration=max(2.0, n / rate_hz), rate_hz=rate_hz, seed=seed, model=m, inject=grab)
    est = Estimator(EstimatorConfig(), model=m)
    est.reset(r_inputs[0]["q"], r_inputs[0]["quat"], 0.0)
    wall, cpu = [], []
    for k, s in enumerate(r_inputs[:n]):
        if sleep_s:
            time.sleep(sleep_s)
        t0, c0 = time.perf_counter(), time.thread_time()
        est.update(k / rate_hz, s["q"], s["dq"], s["quat"], s["gyro"], s["accel"], s["tau"])
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - t0)
    w, c = np.asarray(wall) * 1e3, np.asarray(cpu) * 1e3
    return {
        "p50_ms": float(np.percentile(w, 50)), "p99_ms": float(np.percentile(w, 99)), "max_ms": float(w.max()),
        # CPU time of the calling thread: what the call costs without other processes preempting it
        "cpu_p50_ms": float(np.percentile(c, 50)), "cpu_p99_ms": float(np.percentile(c, 99)),
        "calls": len(w),
    }


def run() -> dict:
    """RMSE against ground truth per scenario (500 Hz with joint torques; 50 Hz; no torques)
    and the cost per call (wall and thread CPU time, p50/p99) at 500 Hz and 50 Hz."""
    out = {}
    m = robot_model.build_bridge_model()
    for sc in SCENARIOS:
        r = simulate(sc, model=m)
        mt = metrics(r)
        for key in ("vel_rmse", "height_rmse", "contact_accuracy", "vel_rmse_flight", "height_rmse_flight",
                    "vel_rmse_landing", "height_rmse_landing"):
            if key in mt:
                out[f"estimator_{sc}_{key}"] = mt[key]
        out[f"estimator_{sc}_fell"] = bool(r["min_height"] < 0.5)
    for sc in ("push", "jump"):
        mt = metrics(simulate(sc, model=m, rate_hz=50.0))
        out[f"estimator_{sc}_vel_rmse_50hz"] = mt["vel_rmse"]
        out[f"estimator_{sc}_height_rmse_50hz"] = mt["height_rmse"]
        mt = metrics(simulate(sc, model=m, use_tau=False))
        out[f"estimator_{sc}_vel_rmse_no_tau"] = mt["vel_rmse"]
        out[f"estimator_{sc}_height_rmse_no_tau"] = mt["height_rmse"]
    for rate in (500.0, 50.0):
        c = cost_per_call(rate, n=1000 if rate > 100 else 200)
        for key in ("p50_ms", "p99_ms", "cpu_p50_ms", "cpu_p99_ms"):
            out[f"estimator_cost_{key}_{int(rate)}hz"] = c[key]
    c = cost_per_call(500.0, n=1000, sleep_s=0.0015)  # as in the loop: ~1.5 ms idle before each update
    for key in ("p50_ms", "p99_ms"):
        out[f"estimator_cost_{key}_after_sleep"] = c[key]
    return out


ACCURACY_ROWS = (("stand", "standing"), ("push", "pushed"), ("step", "stepping"), ("jump", "jump, whole run"))


def render_estimator_table(results: dict) -> str:
    """Accuracy against MuJoCo ground truth per scenario (results/estimator.json, make estimator-accuracy)."""
    lines = ["| scenario | base velocity RMSE | base height RMSE | at 50 Hz (velocity) | without joint torques (velocity) |",
             "|---|---|---|---|---|"]
    for sc, label in ACCURACY_ROWS:
        at50, no_tau = results.get(f"estimator_{sc}_vel_rmse_50hz"), results.get(f"estimator_{sc}_vel_rmse_no_tau")
        lines.append(f"| {label} | {results[f'estimator_{sc}_vel_rmse']:.3f} m/s | "
                     f"{1e3 * results[f'estimator_{sc}_height_rmse']:.1f} mm | "
                     f"{'-' if at50 is None else f'{at50:.3f} m/s'} | {'-' if no_tau is None else f'{no_tau:.3f} m/s'} |")
    for phase in ("flight", "landing"):
        lines.append(f"| jump: {phase} | {results[f'estimator_jump_vel_rmse_{phase}']:.3f} m/s | "
                     f"{1e3 * results[f'estimator_jump_height_rmse_{phase}']:.1f} mm | - | - |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    from pathlib import Path

    p = argparse.ArgumentParser(description="estimator accuracy against ground truth and cost per call")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON here (e.g. results/estimator.json)")
    a = p.parse_args(argv)
    res = run()
    text = json.dumps(res, indent=1, sort_keys=True)
    print(text)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
