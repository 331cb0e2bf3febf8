"""The calibration FILE format (`calibration/<robot-id>.yaml`): load, validate, read.

What deploy and training read from it, and nothing else: IMU biases (`imu.gyro_bias`,
`imu.accel_bias`), joint offsets (`joints.offsets`), the domain-randomisation centre
(`domain_randomization_centre`, `latency.action_delay_s`), robot id and date. Writing and fitting
stay in calibration/ (calibration.store), which imports this module; deploy reads calibration
files only through it. numpy + yaml + pydantic; no I/O beyond reading the file.

Invariant: `load` returns the parsed mapping only if every key this module knows has the right
shape (vectors finite, 3 or 29 values in motor order), schema_version is SCHEMA_VERSION and robot
is ROBOT; otherwise it raises CalibrationFileError naming the file, the key and the fix. Unknown
keys (reports, fits, raw logs) pass through untouched.
"""
from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Annotated, Any, Mapping

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from robots import g1

SCHEMA_VERSION = 1
ROBOT = "g1_29dof_rev1"
CALIBRATION_DIR = Path(__file__).resolve().parents[1] / "calibration"
PARAMS = ("armature_scale", "damping", "frictionloss_scale", "kp_scale")
NOMINAL = {"armature_scale": 1.0, "damping": 0.0, "frictionloss_scale": 1.0, "kp_scale": 1.0}


class CalibrationFileError(ValueError):
    """A calibration YAML that cannot be used; the message names the file and the problem."""


def path_for(robot_id: str) -> Path:
    return CALIBRATION_DIR / f"{robot_id}.yaml"


def _finite_vector(n: int, what: str):
    def check(v: Any) -> Any:
        if v is not None:
            try:
                ok = np.shape(v) == (n,) and bool(np.all(np.isfinite(np.asarray(v, float))))
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(f"must be {n} finite numbers{what}, got {v!r}")
        return v
    return BeforeValidator(check)


Vec3 = Annotated[Any, _finite_vector(3, "")]
PerMotor = Annotated[Any, _finite_vector(g1.NUM_MOTORS, " (motor order)")]


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Imu(_Section):
    gyro_bias: Vec3 = None
    accel_bias: Vec3 = None


class _Joints(_Section):
    offsets: PerMotor = None


class _Centre(_Section):
    armature_scale: PerMotor = None
    damping: PerMotor = None
    frictionloss_scale: PerMotor = None
    kp_scale: PerMotor = None


class _CalibrationFile(_Section):
    schema_version: Any = None
    robot: Any = None
    robot_id: str | None = None
    date: str | _dt.datetime | _dt.date | None = None
    imu: _Imu | None = None
    joints: _Joints | None = None
    domain_randomization_centre: _Centre | None = None


def _describe(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"])
        parts.append(f"{loc} {err['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)


def validate(calib: Any, source: str = "calibration") -> dict:
    """Check a parsed calibration mapping (see the module invariant); returns it."""
    if not isinstance(calib, dict):
        raise CalibrationFileError(f"{source}: expected a mapping at the top level")
    if calib.get("schema_version") != SCHEMA_VERSION:
        raise CalibrationFileError(f"{source}: schema_version {calib.get('schema_version')!r}, this code reads "
                                   f"{SCHEMA_VERSION} (re-run `make calibrate` to write a current file)")
    if calib.get("robot") != ROBOT:
        raise CalibrationFileError(f"{source}: calibration of {calib.get('robot')!r}, not {ROBOT}")
    try:
        _CalibrationFile.model_validate(calib)
    except ValidationError as e:
        raise CalibrationFileError(f"{source}: {_describe(e)} (fix the key or re-run `make calibrate`)") from None
    return calib


def load(path_or_id: str | os.PathLike) -> dict:
    """Parse and check a calibration YAML (a path, or a robot id under calibration/)."""
    import yaml

    p = Path(path_or_id)
    if not p.suffix and not p.exists():
        p = path_for(str(path_or_id))
    if not p.is_file():
        raise CalibrationFileError(f"calibration file {p} does not exist: run `make calibrate ROBOT=...` first")
    try:
        calib = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise CalibrationFileError(f"{p}: not valid YAML: {e}") from e
    validate(calib, str(p))
    calib["_path"] = str(p)
    return calib


def joint_offsets(calib: Mapping) -> np.ndarray:
    """(29,) rad in motor order; deploy corrects measured joints as q - offsets (zeros if none)."""
    v = (calib.get("joints") or {}).get("offsets")
    return np.zeros(g1.NUM_MOTORS) if v is None else np.asarray(v, float)


def dr_centre(calib: Mapping) -> dict:
    """Centre of domain randomisation, per motor (29,): armature_scale, damping (Nm s/rad added),
    frictionloss_scale, kp_scale; plus action_delay_s (0 when latency was not measured)."""
    c = calib.get("domain_randomization_centre") or {}
    out = {k: np.asarray(c.get(k, np.full(g1.NUM_MOTORS, NOMINAL[k])), float) for k in PARAMS}
    out["action_delay_s"] = float((calib.get("latency") or {}).get("action_delay_s", 0.0))
    return out
