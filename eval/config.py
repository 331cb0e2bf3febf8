"""Evaluation settings. The physics ranges come from robots.randomization.EVALUATION (defined once,
inside the training ranges); the push and the episode schedule are eval's own."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from policies.runtime import HOLD_BLEND_S
from robots.randomization import EVALUATION

EVAL_ROOT = Path(__file__).resolve().parent.parent / "runs" / "eval"
# the bodies whose world positions the tracking error compares with the reference
KEY_BODIES = ("pelvis", "left_ankle_roll_link", "right_ankle_roll_link", "left_wrist_yaw_link", "right_wrist_yaw_link")


class EvalError(ValueError):
    """Evaluation cannot run (unknown motion, bad artifact); the message says what exists."""


@dataclasses.dataclass(frozen=True)
class DRConfig:
    enabled: bool = True
    friction: tuple[float, float] = EVALUATION.friction  # sliding friction of every geom (floor and robot)
    mass_scale: tuple[float, float] = EVALUATION.mass_scale  # per body (inertia scaled alike)
    kp_scale: tuple[float, float] = EVALUATION.kp_scale  # per joint
    kd_scale: tuple[float, float] = EVALUATION.kd_scale
    push_force_n: tuple[float, float] = (0.0, 40.0)  # horizontal, on the pelvis, random direction
    push_duration_s: float = 0.1  # 40 N x 0.1 s = 4 N s ~ 0.12 m/s on 33 kg
    pushes: int = 1


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    episodes: int = 20
    seed: int = 0
    hold_s: float = 1.5  # after the motion, HOLD like deploy
    hold_blend_s: float = HOLD_BLEND_S
    duration_s: float | None = None  # truncate the motion (tests)
    # tracking policies: start in the reference's own state at this frame, the policy at this step (None: standing,
    # step 0)
    start_frame: int | None = None
    # the policy on the simulator's true state, targets straight to the drives (diagnosis); default: the deploy
    # loop's tick, estimator on simulated sensors and the safety gate on every command (eval.closed_loop)
    true_state: bool = False
    flight_margin_s: float = 0.1
    dr: DRConfig = DRConfig()
    video: bool = True
    video_fps: float = 25.0  # >= 25 to see a 0.3 s flight (eval.video)
    video_size: tuple[int, int] = (640, 480)
