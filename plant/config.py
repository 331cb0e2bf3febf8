"""Configuration of the plant: frozen dataclasses, the one source of every default (the sim bridge's CLI builds its
argparse defaults from these fields). Times are on the plant clock (physics steps x dt since start, monotonic across
resets).
"""
from __future__ import annotations

import dataclasses

from robots import g1
from robots.model import BridgeModelConfig


@dataclasses.dataclass(frozen=True)
class Push:
    """External force (N, world frame) on the pelvis CoM from `time` (plant clock, s)."""

    time: float
    force: tuple[float, float, float]
    duration: float = 0.1


@dataclasses.dataclass(frozen=True)
class BandConfig:
    enabled: bool = True  # engaged at start-up and after every reset
    release_after: float | None = None  # s of plant clock; None: only when told
    height: float = g1.DEFAULT_BASE_HEIGHT  # pelvis anchor height (m)
    stiffness: float = 5000.0  # N/m: ~6.5 cm sag carrying the whole 33 kg robot
    damping: float = 600.0  # N s/m (~0.75 of critical for 33 kg)
    rot_stiffness: float = 500.0  # N m/rad, keeps the pelvis upright (yaw free)
    rot_damping: float = 60.0  # N m s/rad


@dataclasses.dataclass(frozen=True)
class NoiseConfig:
    """Sensor noise on what the robot publishes (ground truth stays exact)."""

    gyro_std: float = 0.0  # rad/s
    accel_std: float = 0.0  # m/s^2
    joint_pos_std: float = 0.0  # rad
    joint_vel_std: float = 0.0  # rad/s
    gyro_bias: tuple[float, float, float] = (0.0, 0.0, 0.0)
    accel_bias: tuple[float, float, float] = (0.0, 0.0, 0.0)


@dataclasses.dataclass(frozen=True)
class PlantConfig:
    model: BridgeModelConfig = BridgeModelConfig()
    band: BandConfig = BandConfig()
    pushes: tuple[Push, ...] = ()
    # the drives' torque bounded by robots.physics.torque_speed_bounds (robots/g1.py's torque and velocity limits)
    # instead of the constant torque limit
    torque_speed_envelope: bool = False
