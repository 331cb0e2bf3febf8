"""Calibration YAML (`calibration/<robot-id>.yaml`): the writer and the fit-side views.

The file format (load, validate, joint offsets, DR centre) is robots/calibration.py, which deploy
and training read; this module writes files and maps fits onto it:

    calib = robots.calibration.load("sim")        # calibration/sim.yaml
    write(calib, path)                            # calibration: schema_version, robot, date added
    estimator_config(calib)                       # estimation.estimator.EstimatorConfig (IMU biases)
    centre_from_fits(fits)                        # per-motor DR centre from actuator fits
    apply_to_model(model, calib)                  # train/eval: MjModel (before mjx.put_model)

Format (schema_version 1; every value with its uncertainty where it has one):
    schema_version, robot_id, robot, date, mode, source, raw_logs (runs/calibration/<stamp>),
    imu:       gyro_bias, gyro_bias_std (rad/s, IMU frame), accel_bias, accel_bias_std (m/s^2),
               tilt_misalignment_rad, gravity_magnitude, noise stds, samples
    latency:   latency_s, latency_std_s, action_delay_s, per_edge_ms, ...
    joints:    pose, measured, predicted, residual, tolerance, flagged, offsets (29 each, rad)
    actuators: <group>: joints, armature_scale / damping / frictionloss_scale / kp_scale each
               {value, std, identified}, residual_rms_rad, ...
    domain_randomization_centre: per motor (29, motor order) armature_scale, damping (Nm s/rad added,
               robots/model.py extra_joint_damping semantics), frictionloss_scale, kp_scale; nominal
               (1, 0, 1, 1) where a parameter was not identified; action_delay_s
    reports:   plot paths; refused: {routine: reason} for routines that refused
"""
from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Mapping

import numpy as np

from robots import g1
from robots.calibration import NOMINAL, PARAMS, ROBOT, SCHEMA_VERSION, dr_centre, load
from robots.run_files import jsonable


def write(calib: Mapping, path: str | os.PathLike) -> Path:
    import yaml

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"schema_version": SCHEMA_VERSION, "robot": ROBOT,
            "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"), **jsonable(dict(calib))}
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text("# written by `make calibrate` (calibration/cli.py); format: robots/calibration.py\n"
                   + yaml.safe_dump(body, sort_keys=False, default_flow_style=None, width=120))
    tmp.replace(path)
    return path


# ----------------------------------------------------------------------------- consumers


def estimator_config(calib: Mapping | str | os.PathLike | None, **overrides):
    """estimation.estimator.EstimatorConfig with the IMU biases of a calibration (a mapping or a path)."""
    from estimation.estimator import EstimatorConfig

    if calib is not None and not isinstance(calib, Mapping):
        calib = load(calib)
    return EstimatorConfig.from_calibration(calib, **overrides)


def centre_from_fits(fits: Mapping[str, Mapping]) -> dict:
    """Per-motor DR centre from per-group fit summaries; unidentified parameters stay nominal."""
    out = {k: np.full(g1.NUM_MOTORS, NOMINAL[k]) for k in PARAMS}
    for fit in fits.values():
        idx = [g1.JOINT_NAMES.index(n) for n in fit["joints"]]
        for k in PARAMS:
            if fit[k]["identified"]:
                out[k][idx] = fit[k]["value"]
    return out


# the MjModel form lives in robots/ (eval and train may not import calibration/): re-exported here
from robots.calibration import apply_to_model  # noqa: E402,F401
