"""IMU bias and gravity alignment at standstill (robot standing, or hanging still on its support).

At rest the gyroscope measures its bias and the accelerometer the specific force of gravity,
+g along the world vertical, expressed in the IMU frame. With the IMU's own attitude quaternion
R (world <- IMU):
    gyro_bias  = mean(gyro)
    accel_bias = mean(acc - R^T [0, 0, g])
    tilt misalignment = angle between mean(acc) and R^T [0, 0, g] (how far the measured gravity
                        direction is from the attitude's)
Uncertainty: the standard error of each mean by batch means (10 consecutive blocks; slow sway
on the support is not independent noise), at least the white-noise value std / sqrt(n).

Limitation (robot): the G1's IMU computes its quaternion from its own accelerometer, so the
horizontal accelerometer bias is partly absorbed into that attitude; one pose then measures
the bias along gravity well and the horizontal components poorly. The bridge's quaternion is
exact, so all three components are observable there.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from calibration.runlog import CalibrationError, RunLog
from robots.physics import GRAVITY


@dataclasses.dataclass(frozen=True)
class ImuConfig:
    min_duration: float = 1.0  # s
    max_gyro_std: float = 0.05  # rad/s about the mean: more is motion, not standstill
    max_accel_std: float = 0.5  # m/s^2
    max_joint_motion: float = 0.01  # rad std of any joint
    max_gravity_error: float = 1.5  # m/s^2: |mean acc| this far from g = not at rest / wrong units
    quat_norm_tol: float = 0.05
    max_gyro_bias_std: float = 0.002  # rad/s: a bias known worse than this is not worth writing down
    max_accel_bias_std: float = 0.01  # m/s^2


@dataclasses.dataclass(frozen=True)
class ImuCalibration:
    gyro_bias: np.ndarray
    gyro_bias_std: np.ndarray
    accel_bias: np.ndarray
    accel_bias_std: np.ndarray
    gravity_imu: np.ndarray  # mean predicted gravity direction (unit) in the IMU frame
    tilt_misalignment_rad: float
    gravity_magnitude: float  # |mean acc|, m/s^2
    gyro_noise: np.ndarray  # per-axis std about the mean
    accel_noise: np.ndarray
    samples: int
    duration: float

    def summary(self) -> dict:
        r = lambda a, n=6: [round(float(x), n) for x in a]  # noqa: E731
        return {"gyro_bias": r(self.gyro_bias), "gyro_bias_std": r(self.gyro_bias_std, 7),
                "accel_bias": r(self.accel_bias), "accel_bias_std": r(self.accel_bias_std, 7),
                "gravity_direction_imu": r(self.gravity_imu), "tilt_misalignment_rad": round(self.tilt_misalignment_rad, 6),
                "gravity_magnitude": round(self.gravity_magnitude, 5), "gyro_noise_std": r(self.gyro_noise),
                "accel_noise_std": r(self.accel_noise), "samples": self.samples, "duration_s": round(self.duration, 3)}


def _rotate_to_imu(quat: np.ndarray, v_world: np.ndarray) -> np.ndarray:
    """R(q)^T v for each w, x, y, z quaternion row."""
    q = quat / np.linalg.norm(quat, axis=1, keepdims=True)
    w, x, y, z = q.T
    # rows of R (world <- imu); R^T v = columns dotted with v
    r = np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
    ], 1)  # (n, 3, 3)
    return np.einsum("nij,i->nj", r, v_world)


def standard_error(x: np.ndarray, blocks: int = 10) -> np.ndarray:
    """Standard error of the column means: batch means over `blocks` consecutive blocks, and at
    least std / sqrt(n) (white noise)."""
    n = len(x) // blocks * blocks
    means = x[:n].reshape(blocks, -1, *x.shape[1:]).mean(axis=1)
    return np.maximum(means.std(axis=0, ddof=1) / np.sqrt(blocks), x.std(axis=0) / np.sqrt(len(x)))


def fit_imu(log: RunLog, cfg: ImuConfig = ImuConfig()) -> ImuCalibration:
    what = "IMU calibration"
    log.require(cfg.min_duration, int(cfg.min_duration / 0.002 * 0.8), what)
    gyro, acc, quat, q = (log.states[k] for k in ("gyro", "acc", "quat", "q"))
    qn = np.linalg.norm(quat, axis=1)
    if np.abs(qn - 1).max() > cfg.quat_norm_tol:
        raise CalibrationError(f"{what}: IMU quaternion norm {qn.min():.3f}..{qn.max():.3f} is not 1: not a w,x,y,z "
                               "unit quaternion (IMU not initialised?)")
    g_std, a_std, j_std = gyro.std(axis=0), acc.std(axis=0), q.std(axis=0)
    if g_std.max() > cfg.max_gyro_std or a_std.max() > cfg.max_accel_std or j_std.max() > cfg.max_joint_motion:
        raise CalibrationError(
            f"{what}: the robot is not still (gyro std {g_std.max():.3f} rad/s, limit {cfg.max_gyro_std}; accel std "
            f"{a_std.max():.3f} m/s^2, limit {cfg.max_accel_std}; joint std {j_std.max():.4f} rad, limit "
            f"{cfg.max_joint_motion}): let it settle on its support and hold still, then repeat")
    acc_mean = acc.mean(axis=0)
    mag = float(np.linalg.norm(acc_mean))
    if abs(mag - GRAVITY) > cfg.max_gravity_error:
        raise CalibrationError(f"{what}: mean specific force {mag:.2f} m/s^2 is not gravity ({GRAVITY}): robot "
                               "accelerating, or the accelerometer is not in m/s^2")
    g_imu = _rotate_to_imu(quat, np.array([0.0, 0.0, GRAVITY]))
    gyro_bias = gyro.mean(axis=0)
    d_acc = acc - g_imu
    accel_bias = d_acc.mean(axis=0)
    g_dir = g_imu.mean(axis=0)
    g_dir /= np.linalg.norm(g_dir)
    cosang = float(np.dot(acc_mean / mag, g_dir))
    gyro_bias_std = standard_error(gyro)
    accel_bias_std = standard_error(d_acc)
    if gyro_bias_std.max() > cfg.max_gyro_bias_std or accel_bias_std.max() > cfg.max_accel_bias_std:
        raise CalibrationError(
            f"{what}: log too noisy or too short for a bias: standard error gyro {gyro_bias_std.max():.4f} rad/s "
            f"(limit {cfg.max_gyro_bias_std}), accel {accel_bias_std.max():.4f} m/s^2 (limit {cfg.max_accel_bias_std}) "
            f"from {log.n_states} samples; record longer (--still-s) with the robot still")
    return ImuCalibration(
        gyro_bias=gyro_bias, gyro_bias_std=gyro_bias_std, accel_bias=accel_bias,
        accel_bias_std=accel_bias_std, gravity_imu=g_dir,
        tilt_misalignment_rad=float(np.arccos(np.clip(cosang, -1, 1))), gravity_magnitude=mag,
        gyro_noise=g_std, accel_noise=a_std, samples=log.n_states, duration=log.duration,
    )
