"""The calibration sequence on a robot (DDS or in-process bridge), then the fits.

    plan = Plan(groups=("legs", "arms"))
    logs = record(robot, plan)                 # stand up, standstill, latency steps, excitations
    result = analyse(logs, plan, out_dir)      # fits, plots; refusals collected, not raised
    store.write(result.calibration(robot_id, ...), "calibration/<id>.yaml")

Sequence (the robot hangs on its gantry / the bridge's elastic band, feet clear of the floor):
 1. blend from the measured pose to `excitation.hang_pose()` (stand_s), hold (settle_s)
 2. hold still (still_s): IMU bias and gravity alignment, joint offset check
 3. square wave on `latency_joint` (0 / +0.06 rad steps): command -> state latency
 4. per group: multisine excitation around the pose (legs: right leg = -left leg in joint
    space, so the hip reactions on the pelvis cancel), then a short hold
 5. damping (as deploy ends)
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Callable

import numpy as np

from calibration import excitation as ex
from calibration import report
from calibration.imu import ImuConfig, fit_imu
from calibration.joints import JointCheckConfig, check_joints
from calibration.latency import LatencyConfig, estimate_latency
from calibration.runlog import CalibrationError, RunLog
from calibration.session import Session, SessionConfig
from calibration.store import centre_from_fits
from calibration.sysid import ActuatorParams, FitConfig, ReplayModel, fit_group
from robots import g1

# legs excited as mirror images: right = MIRROR * left offsets (hip pitch/knee/ankle pitch in
# antiphase, roll/yaw mirrored): the reactions on a hanging pelvis cancel (the fit's fixed-pelvis model
# then holds: residual ~2 mrad instead of ~10 mrad with independent legs on the bridge's band)
LEG_MIRROR = (-1.0,) * 6
ARM_MIRROR = (-1.0,) * 7


@dataclasses.dataclass(frozen=True)
class Plan:
    groups: tuple[str, ...] = ("legs", "waist", "arms")
    stand_s: float = 1.5
    settle_s: float = 1.5
    still_s: float = 3.0
    latency_joint: str = "left_ankle_pitch_joint"
    latency_edges: int = 16
    excitation_s: float = 6.0
    excitation_amplitude: float = 0.3
    hold_between_s: float = 0.5
    seed: int = 0
    mirror: bool = True  # legs/arms: right side mirrors the left (see LEG_MIRROR)
    clearance: float = 0.03  # m between links of different limbs along the planned excitation


def excitation_for(group: str, plan: Plan) -> ex.Multisine:
    mirror = None
    if plan.mirror and group == "legs":
        mirror = LEG_MIRROR
    elif plan.mirror and group == "arms":
        mirror = ARM_MIRROR
    return ex.group_excitation(group, ex.hang_pose(), duration=plan.excitation_s, max_amplitude=plan.excitation_amplitude,
                               seed=plan.seed, mirror=mirror, clearance=plan.clearance)


def record(robot, plan: Plan = Plan(), echo: Callable[[str], None] = print,
           session_cfg: SessionConfig = SessionConfig()) -> dict[str, RunLog]:
    """Run the sequence; returns the logs by routine. Raises CalibrationAborted after a safety trip
    (the robot was sent damping)."""
    s = Session(robot, session_cfg, echo=echo)
    pose = ex.hang_pose()
    logs: dict[str, RunLog] = {}
    try:
        echo(f"calibration: blend to the hanging pose ({plan.stand_s} s) and settle ({plan.settle_s} s)")
        logs["stand"] = s.blend("stand", pose, plan.stand_s, hold=plan.settle_s)
        echo(f"calibration: standstill {plan.still_s} s (IMU, joint offsets)")
        logs["still"] = s.hold("still", pose, plan.still_s, pose=pose.tolist())
        j = g1.JOINT_NAMES.index(plan.latency_joint)
        sq = ex.SquareWave(j, pose, n_edges=plan.latency_edges, seed=plan.seed)
        echo(f"calibration: latency steps on {plan.latency_joint} ({sq.duration:.1f} s)")
        logs["latency"] = s.run("latency", sq, sq.duration, joint=j)
        s.hold("hold", pose, plan.hold_between_s)
        for g in plan.groups:
            exc = excitation_for(g, plan)
            echo(f"calibration: excite {g} ({plan.excitation_s} s, peak {np.round(exc.amplitude, 2).tolist()} rad)")
            logs[f"excite_{g}"] = s.run(f"excite_{g}", exc, exc.duration, group=g)
            s.hold("hold", pose, plan.hold_between_s)
    finally:
        try:
            s.finish()
        except Exception:  # noqa: BLE001 - the routine's own error is the one to report
            pass
    return logs


@dataclasses.dataclass
class Analysis:
    imu: object = None
    joints: object = None
    latency: object = None
    fits: dict = dataclasses.field(default_factory=dict)
    refused: dict = dataclasses.field(default_factory=dict)
    reports: dict = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    def calibration(self, robot_id: str, **extra) -> dict:
        out: dict = {"robot_id": robot_id, **extra}
        if self.imu is not None:
            out["imu"] = self.imu.summary()
        if self.latency is not None:
            out["latency"] = self.latency.summary()
        if self.joints is not None:
            out["joints"] = self.joints.summary()
        if self.fits:
            summaries = {g: f.summary() for g, f in self.fits.items()}
            out["actuators"] = summaries
            centre = centre_from_fits(summaries)
            out["domain_randomization_centre"] = {**{k: [round(float(x), 6) for x in v] for k, v in centre.items()},
                                                  "action_delay_s": out.get("latency", {}).get("action_delay_s", 0.0)}
        out["reports"] = dict(self.reports)
        out["refused"] = dict(self.refused)
        return out


def analyse(logs: dict[str, RunLog], plan: Plan, out_dir: Path | None, echo: Callable[[str], None] = print,
            fit_cfg: FitConfig = FitConfig(), mjcf: str | None = None) -> Analysis:
    """Fit everything the logs support. A routine that refuses is recorded in `refused` (with its
    reason) and the others go on; the actuator fit of a group uses the groups fitted before it."""
    t0 = time.perf_counter()
    res = Analysis()
    replay = ReplayModel(mjcf)

    def attempt(name: str, fn):
        try:
            return fn()
        except CalibrationError as e:
            res.refused[name] = str(e)
            echo(f"calibration: {name} refused: {e}")
            return None

    if "still" in logs:
        res.imu = attempt("imu", lambda: fit_imu(logs["still"], ImuConfig()))
        pose = np.asarray(logs["still"].meta.get("pose", ex.hang_pose()), float)
        res.joints = attempt("joints", lambda: check_joints(logs["still"], pose, replay, JointCheckConfig()))
    if "latency" in logs:
        j = int(logs["latency"].meta.get("joint", g1.JOINT_NAMES.index(plan.latency_joint)))
        res.latency = attempt("latency", lambda: estimate_latency(logs["latency"], j, LatencyConfig()))
    delay = res.latency.action_delay_s if res.latency is not None else 0.0
    gyro_bias = res.imu.gyro_bias if res.imu is not None else np.zeros(3)
    done: dict[tuple, ActuatorParams] = {}
    for g in plan.groups:
        key = f"excite_{g}"
        if key not in logs:
            continue
        echo(f"calibration: fitting {g} (action delay {delay * 1e3:.1f} ms) ...")
        fit = attempt(f"actuators_{g}", lambda: fit_group(logs[key], g, delay, replay, others=done, cfg=fit_cfg,
                                                          gyro_bias=gyro_bias, echo=echo))
        if fit is not None:
            res.fits[g] = fit
            p = fit.params
            done[fit.joints] = ActuatorParams(*(getattr(p, k) if fit.identified[k] else getattr(ActuatorParams(), k)
                                                for k in ("armature_scale", "damping", "frictionloss_scale", "kp_scale")))
    if out_dir is not None:
        out_dir = Path(out_dir)
        try:
            if res.imu is not None:
                res.reports["imu"] = str(report.plot_imu(logs["still"], res.imu, out_dir / "imu.png"))
            if res.latency is not None:
                j = g1.JOINT_NAMES.index(res.latency.joint)
                res.reports["latency"] = str(report.plot_latency(logs["latency"], res.latency, j, out_dir / "latency.png"))
            if res.joints is not None:
                res.reports["joints"] = str(report.plot_joints(res.joints, out_dir / "joints.png"))
            for g, f in res.fits.items():
                res.reports[f"actuators_{g}"] = str(report.plot_fit(f, out_dir / f"fit_{g}.png"))
        except Exception as e:  # noqa: BLE001 - a plot must not cost the calibration
            echo(f"calibration: warning: plotting failed: {e}")
    res.seconds = time.perf_counter() - t0
    return res


__all__ = ["Plan", "record", "analyse", "Analysis", "excitation_for"]
