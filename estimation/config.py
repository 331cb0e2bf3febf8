"""The estimator's configuration (noise densities, thresholds, calibration biases) and its output types.
Split from estimation/estimator.py, which holds the filter itself (its arithmetic: estimation/kernel.py)."""
from __future__ import annotations

import dataclasses
from typing import Mapping, NamedTuple, Sequence

import numpy as np

from robots.physics import GRAVITY


@dataclasses.dataclass(frozen=True)
class EstimatorConfig:
    """Noise parameters and thresholds. Densities are per sqrt(Hz) so one config works at
    any call rate (the loop may call at 50 Hz or 500 Hz); per-sample stds are of one reading."""

    # Process noise.
    accel_noise: float = 0.08  # m/s^2/sqrt(Hz): velocity random walk (bias drift, attitude error)
    accel_sample_noise: float = 1.0  # m/s^2 per sample (noise, vibration): adds (this * dt)^2
    base_pos_noise: float = 0.002  # m/sqrt(Hz): position random walk of the IMU point
    stance_foot_noise: float = 0.01  # m/sqrt(Hz): a stance foot slips this much
    swing_foot_noise: float = 10.0  # m/sqrt(Hz): a swing foot is free
    # Measurement noise (per sample).
    gyro_noise: float = 0.02  # rad/s
    joint_pos_noise: float = 0.002  # rad
    joint_vel_noise: float = 0.1  # rad/s
    kin_pos_noise: float = 0.005  # m: leg kinematics model error (foot position)
    kin_vel_noise: float = 0.1  # m/s: stance foot not perfectly still (rolling, slip)
    foot_height_noise: float = 0.005  # m: ground flatness / sole model
    touchdown_settle_s: float = 0.03  # s after touchdown during which the foot is trusted less
    touchdown_noise_scale: float = 10.0  # velocity noise multiplier during that time
    # Contact detection.
    use_torque_contact: bool = True  # use tau_est (when given) for per-foot ground force
    contact_force_on: float = 80.0  # N vertical ground force to declare contact
    contact_force_off: float = 40.0  # N below which the foot is in the air
    contact_force_full: float = 150.0  # N: below, the stance velocity noise grows ~ 1/force
    contact_height_on: float = 0.015  # m above the lower foot: kinematic contact
    contact_height_off: float = 0.03  # m
    contact_max_height: float = 0.08  # m: a sole estimated higher than this is in the air
    contact_point_sharpness: float = 0.003  # m: sole points within ~this of the lowest carry the contact
    stance_gate: float = 25.0  # chi^2 (3 dof) of a stance foot's velocity innovation; above: foot moving
    stance_gate_max_s: float = 0.05  # s of rejections after which a stance foot is trusted again
    contact_speed_on: float = 0.2  # m/s: an unloaded foot at the ground moving slower than this stands
    contact_speed_off: float = 0.5  # m/s
    flight_accel_on: float = 3.0  # m/s^2: specific force below -> free fall (flight)
    flight_accel_off: float = 6.0  # m/s^2: above -> back on the ground
    max_flight_s: float = 1.0  # longer without contact is not a jump (hanging, held):
    hang_vel_noise: float = 0.5  # m/s: ... then a weak zero-velocity update bounds the drift
    # Bad input.
    imu_frozen_samples: int = 5  # this many bit-identical IMU samples in a row = frozen
    max_accel: float = 16 * GRAVITY  # m/s^2, beyond: out of range (IMU saturates)
    max_gyro: float = 35.0  # rad/s
    quat_norm_tol: float = 0.1  # |(|q| - 1)| beyond this: not a rotation
    max_dt: float = 0.05  # s; longer gaps are flagged and integrated as max_dt
    # IMU bias from calibration (IMU frame), subtracted from every sample.
    gyro_bias: Sequence[float] = (0.0, 0.0, 0.0)  # rad/s
    accel_bias: Sequence[float] = (0.0, 0.0, 0.0)  # m/s^2
    # Initial uncertainty.
    init_height_std: float = 0.02  # m
    init_vel_std: float = 0.1  # m/s

    def __post_init__(self):
        for name in ("gyro_bias", "accel_bias"):
            v = tuple(float(x) for x in np.asarray(getattr(self, name), dtype=float).reshape(-1))
            if len(v) != 3 or not all(np.isfinite(v)):
                raise ValueError(f"EstimatorConfig.{name} must be 3 finite numbers, got {getattr(self, name)!r}")
            object.__setattr__(self, name, v)
        if self.contact_force_off > self.contact_force_on:
            raise ValueError("contact_force_off must be <= contact_force_on (hysteresis)")
        if self.contact_height_on > self.contact_height_off:
            raise ValueError("contact_height_on must be <= contact_height_off (hysteresis)")
        if self.flight_accel_on > self.flight_accel_off:
            raise ValueError("flight_accel_on must be <= flight_accel_off (hysteresis)")
        if self.imu_frozen_samples < 2:
            raise ValueError("imu_frozen_samples must be >= 2")

    @classmethod
    def from_calibration(cls, calib: Mapping | None, **overrides) -> "EstimatorConfig":
        """IMU biases from a calibration mapping (the parsed calibration YAML): keys
        `gyro_bias` / `accel_bias` at the top level or under `imu`. Missing keys keep zero."""
        kw = {}
        if calib:
            src = calib.get("imu", calib) if isinstance(calib.get("imu", None), Mapping) else calib
            for key in ("gyro_bias", "accel_bias"):
                if src.get(key) is not None:
                    kw[key] = src[key]
        kw.update(overrides)
        return cls(**kw)


class EstimatorFlags(NamedTuple):
    """What was wrong with the inputs of this tick (safety/ and the log read these)."""

    imu_nan: bool = False  # NaN/inf in quat, gyro or accel: sample rejected, state held
    imu_frozen: bool = False  # IMU bit-identical for imu_frozen_samples: state held
    imu_out_of_range: bool = False  # saturated / non-unit quaternion: sample rejected
    joints_nan: bool = False  # NaN/inf in leg q or dq: kinematic updates skipped
    tau_nan: bool = False  # NaN/inf in tau_est: kinematic contact used instead
    dt_gap: bool = False  # time step <= 0 or > max_dt
    flight: bool = False  # no foot in contact
    initialized: bool = True  # False until the first good IMU + joint sample
    imu_bad_s: float = 0.0  # seconds since the last accepted IMU sample

    @property
    def imu_rejected(self) -> bool:
        return self.imu_nan or self.imu_frozen or self.imu_out_of_range

    @property
    def inputs_rejected(self) -> bool:
        return self.imu_rejected or self.joints_nan or self.tau_nan


class Estimate(NamedTuple):
    t: float
    quat: np.ndarray  # (4,) w, x, y, z: pelvis IMU orientation (last good sample)
    gyro: np.ndarray  # (3,) rad/s, bias-corrected, pelvis IMU frame
    base_lin_vel: np.ndarray  # (3,) m/s, pelvis origin velocity in the pelvis frame
    base_lin_vel_world: np.ndarray  # (3,) m/s, world frame (yaw as the IMU reports it)
    base_height: float  # m, pelvis origin above the ground
    base_pos: np.ndarray  # (3,) m, pelvis origin in the world (x, y drift: odometry)
    foot_contact: np.ndarray  # (2,) bool, left, right
    foot_force: np.ndarray  # (2,) N, estimated vertical ground force (nan without tau_est)
    flags: EstimatorFlags
