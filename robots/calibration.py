"""The calibration FILE format (`calibration/<robot-id>.yaml`): load, validate, read.

What deploy and training read from it, and nothing else: IMU biases (`imu.gyro_bias`,
`imu.accel_bias`), joint offsets (`joints.offsets`), the domain-randomisation centre
(`domain_randomization_centre`, `latency.action_delay_s`), robot id and date. Writing and fitting
stay in calibration/ (calibration.store), which imports this module; deploy reads calibration
files only through it. numpy + yaml + pydantic; no I/O beyond reading the file. Also here, for
eval and training (which may not import calibration/): `apply_to_model(mj_model, calib)` (the
calibrated armature / damping / friction loss on a compiled MjModel), `dr_centre`, `require`
(a parameter a command needs), `provenance` ({robot_id, date, sha256} for an artifact).

Invariant: `load` returns the parsed mapping only if every key this module knows has the right
shape (vectors finite, 3 or 29 values in motor order), schema_version is SCHEMA_VERSION and robot
is ROBOT; otherwise it raises CalibrationFileError naming the file, the key and the fix. Unknown
keys (reports, fits, raw logs) pass through untouched.
"""
from __future__ import annotations

import datetime as _dt
import functools
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


# Plausible ranges (inclusive): a value outside is a broken file or a broken robot, never a calibration.
RANGES = {
    "imu.gyro_bias": (-0.5, 0.5),  # rad/s
    "imu.accel_bias": (-2.0, 2.0),  # m/s^2
    "joints.offsets": (-0.2, 0.2),  # rad: an encoder zero further off is a mechanical fault (re-zero the joint)
    "latency.action_delay_s": (0.0, 0.1),
    "domain_randomization_centre.armature_scale": (0.2, 5.0),
    "domain_randomization_centre.damping": (0.0, 10.0),  # Nm s/rad added
    "domain_randomization_centre.frictionloss_scale": (0.0, 5.0),
    "domain_randomization_centre.kp_scale": (0.5, 1.5),
}


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
    for key, (lo, hi) in RANGES.items():
        v = _get(calib, key)
        if v is None:
            continue
        try:
            a = np.asarray(v, float)
        except (TypeError, ValueError):
            raise CalibrationFileError(f"{source}: {key} must be numbers, got {v!r}") from None
        if not np.all(np.isfinite(a)) or np.any(a < lo) or np.any(a > hi):
            bad = np.flatnonzero(~np.isfinite(a.ravel()) | (a.ravel() < lo) | (a.ravel() > hi))
            where = f"[{', '.join(str(i) for i in bad[:5])}]" if a.ndim else ""
            raise CalibrationFileError(f"{source}: {key}{where} = {a.ravel()[bad[:5]].tolist()} outside the plausible "
                                       f"range [{lo:g}, {hi:g}] (re-run `make calibrate`; fix the robot if it repeats)")
    return calib


def _get(calib: Mapping, key: str) -> Any:
    v: Any = calib
    for part in key.split("."):
        if not isinstance(v, Mapping):
            return None
        v = v.get(part)
    return v


def require(calib: Mapping, keys: tuple[str, ...], needed_by: str) -> None:
    """Raise CalibrationFileError naming the first dotted key of `keys` the calibration lacks."""
    for key in keys:
        if _get(calib, key) is None:
            raise CalibrationFileError(
                f"{calib.get('_path', 'calibration')}: lacks {key}, which {needed_by} needs (re-run `make calibrate` "
                f"with the routine that measures it, or add the key by hand)")


def file_sha256(path: str | os.PathLike) -> str:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def date_of(calib: Mapping) -> _dt.datetime | None:
    """The calibration's date as an aware datetime (naive ones read as UTC), None when absent."""
    d = calib.get("date")
    if d is None:
        return None
    if isinstance(d, _dt.date) and not isinstance(d, _dt.datetime):
        d = _dt.datetime(d.year, d.month, d.day)
    if isinstance(d, str):
        try:
            d = _dt.datetime.fromisoformat(d)
        except ValueError:
            raise CalibrationFileError(f"{calib.get('_path', 'calibration')}: date {d!r} is not ISO 8601 "
                                       "(e.g. 2026-11-30T13:33:37+00:00)") from None
    return d if d.tzinfo else d.replace(tzinfo=_dt.timezone.utc)


def provenance(calib: Mapping) -> dict:
    """{robot_id, date, sha256} of a loaded calibration: what an exported artifact records
    (`provenance["calibration"]`) and what deploy's pre-flight compares."""
    d = calib.get("date")
    return {"robot_id": calib.get("robot_id"), "date": d.isoformat() if hasattr(d, "isoformat") else d,
            "sha256": file_sha256(calib["_path"]) if calib.get("_path") else None}


def load(path_or_id: str | os.PathLike) -> dict:
    """Parse and check a calibration YAML (a path, or a robot id under calibration/)."""
    import yaml

    p = Path(path_or_id)
    if not p.suffix and not p.is_file():  # a bare id (e.g. "sim", also a folder here)
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


@functools.lru_cache(maxsize=4)
def _builder_response(mjcf: str | None) -> dict:
    """How robots/model.py's builder maps extra_joint_damping onto compiled fields, per motor."""
    from robots.model import BridgeModelConfig, build_bridge_model, motor_dof_adr

    m0 = build_bridge_model(BridgeModelConfig(mjcf=mjcf))
    m1 = build_bridge_model(BridgeModelConfig(mjcf=mjcf, extra_joint_damping=1.0))
    d = motor_dof_adr(m0)
    return {"dof_damping": (m1.dof_damping - m0.dof_damping)[d],
            "dof_dampingpoly": (m1.dof_dampingpoly - m0.dof_dampingpoly)[d]}


def apply_to_model(model, calib: Mapping, mjcf: str | None = None):
    """Set the motor joints' armature, damping and friction loss of a compiled MjModel (training or
    bridge model, before mjx.put_model) to the calibration's centre: armature and friction loss scaled,
    damping added exactly as robots/model.py's extra_joint_damping. Returns the model."""
    from robots.model import motor_dof_adr

    c = dr_centre(calib)
    d = motor_dof_adr(model)
    resp = _builder_response(mjcf)
    model.dof_armature[d] = model.dof_armature[d] * c["armature_scale"]
    model.dof_frictionloss[d] = model.dof_frictionloss[d] * c["frictionloss_scale"]
    model.dof_damping[d] = model.dof_damping[d] + c["damping"] * resp["dof_damping"]
    if hasattr(model, "dof_dampingpoly"):
        model.dof_dampingpoly[d] = model.dof_dampingpoly[d] + c["damping"][:, None] * resp["dof_dampingpoly"]
    return model
