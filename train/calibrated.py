"""Training for one calibrated robot (`make train ... CALIB=calibration/<id>.yaml`).

A calibration (robots/calibration.py) enters training in three places, each set once here:
- the training model: the motor joints' armature, damping and friction loss are the calibration's
  centre (`calibrated_model`, robots.calibration.apply_to_model, called by G1Env);
- domain randomisation is centred on it: kp scale = the calibrated per-motor kp_scale x the preset's
  U(lo, hi) range (`dr.kp_centre`), and the probability of a one-control-step action delay is
  action_delay_s / control_dt, so the mean randomised delay is the measured one (a calibration that
  measured no delay keeps the preset's probability: lockstep sessions measure 0, which says nothing
  about the robot);
- provenance: the artifact records the calibration's robot id, date and sha256 (`provenance`), which
  deploy's pre-flight compares with the calibration given at run time.

Everything is checked before any compile: a file that does not parse or lacks a key training needs
is refused naming the key and the fix (robots.calibration.CalibrationFileError).
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from robots import calibration as C

NEEDS = tuple(f"domain_randomization_centre.{k}" for k in C.PARAMS)


def load_for_training(path: str | Path) -> dict:
    calib = C.load(path)
    C.require(calib, NEEDS, "training (`make train CALIB=...`)")
    return calib


def overrides(path: str | Path, control_dt: float) -> dict:
    """{section: {field: value}} that a calibration sets; the user's `--set` overrides come after."""
    calib = load_for_training(path)
    centre = C.dr_centre(calib)
    out: dict = {"env": {"calibration": str(calib["_path"])},
                 "dr": {"kp_centre": tuple(float(x) for x in centre["kp_scale"])}}
    delay = centre["action_delay_s"]
    if delay > 0:
        out["dr"]["action_latency_prob"] = min(1.0, delay / control_dt)
    return out


def calibrated_model(model, path: str | Path, mjcf: str | None = None):
    """The training MjModel with the calibration's armature, damping and friction loss."""
    return C.apply_to_model(model, load_for_training(path), mjcf)


def provenance(cfg) -> dict:
    """{"calibration": {robot_id, date, sha256, path}} for a calibrated run's artifact, {} otherwise."""
    path = cfg.env.calibration
    if path is None:
        return {}
    calib: Mapping = C.load(path)
    return {"calibration": {**C.provenance(calib), "path": str(path)}}
