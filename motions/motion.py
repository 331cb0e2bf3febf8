"""The motion types: `Motion` (a reference trajectory at the control rate) and `MotionError`.

Invariant: every array of a `Motion` built by this package is read-only and has T rows,
T = round(duration / dt) + 1 (t = 0 to `duration` inclusive).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from robots import g1


class MotionError(ValueError):
    """A motion is unknown or its file is malformed; the message names the file and field."""


def field_error(path, field: str, msg: str) -> MotionError:
    """The one error format: "<file>: <field>: <what is wrong and the fix>"."""
    return MotionError(f"{path}: {field}: {msg}")


@dataclasses.dataclass(frozen=True, eq=False)
class Motion:
    """A reference trajectory at `dt` from t = 0 to `duration` inclusive (T = round(duration/dt) + 1).

    Arrays are read-only. World frame: x forward, z up. Keyframe motions keep the pelvis upright
    (identity orientation, unless a keyframe sets pelvis_pitch: then `ref_base_quat` pitches about y) and at
    y = 0; imported clips (motions.clips) carry `ref_base_quat` and y.
    """

    name: str
    duration: float  # s
    ref_q: np.ndarray  # (T, 29) joint positions, motor order, within joint limits
    ref_height: np.ndarray  # (T,) pelvis height, m
    ref_foot_height: np.ndarray  # (T, 2) sole height above the home stance, left/right, m
    reward_weights: dict[str, float]
    dt: float = g1.CONTROL_DT
    ref_dq: np.ndarray | None = None  # (T, 29) joint velocities (central differences), rad/s
    ref_base_pos: np.ndarray | None = None  # (T, 3) pelvis position, world
    ref_base_lin_vel: np.ndarray | None = None  # (T, 3) pelvis velocity, world (analytic)
    ref_foot_pos: np.ndarray | None = None  # (T, 2, 3) sole reference point (under the ankle axis), world
    contact: np.ndarray | None = None  # (T, 2) bool, foot on the ground
    flight_mask: np.ndarray | None = None  # (T,) bool, both feet airborne
    description: str = ""
    source: str = ""  # the YAML file
    flight_windows: tuple[tuple[float, float], ...] = ()  # (take-off, touch-down) times, s
    takeoff_heights: tuple[float, ...] = ()  # pelvis height at each take-off, m
    takeoff_vz: tuple[float, ...] = ()  # vertical pelvis velocity at each take-off, m/s
    ref_base_quat: np.ndarray | None = None  # (T, 4) pelvis orientation w, x, y, z (imported clips); None = upright
    source_fps: float | None = None  # frame rate of the source file (imported clips); None = keyframes
    source_frames: int | None = None  # frames in the source file (imported clips)

    @property
    def num_steps(self) -> int:
        return int(self.ref_q.shape[0])

    @property
    def times(self) -> np.ndarray:
        return np.arange(self.num_steps) * self.dt

    @property
    def ref_base_vel_z(self) -> np.ndarray:
        return self.ref_base_lin_vel[:, 2]

    def takeoff_velocity(self) -> float:
        """Vertical pelvis velocity at the first take-off (m/s); 0 if the motion has no flight."""
        return self.takeoff_vz[0] if self.takeoff_vz else 0.0
