"""Domain-randomisation ranges, defined once: training (the wide default and the cpu preset's
milder set) and sim-to-sim evaluation draw their physics parameters from these. Uniform [lo, hi].

Where each is used: `train.domain_rand.DomainRandConfig` (training; plus latency and velocity
pushes), `eval` (C MuJoCo; plus a force push). Evaluation is deliberately narrower than training:
a policy must pass inside the range it was trained on.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ParamRanges:
    friction: tuple[float, float]  # sliding friction of foot and floor geoms
    mass_scale: tuple[float, float]  # per link; mass and inertia scaled together
    kp_scale: tuple[float, float]  # per motor
    kd_scale: tuple[float, float]  # per motor

    def __post_init__(self):
        for f in dataclasses.fields(self):
            lo, hi = getattr(self, f.name)
            if not (0.0 <= lo <= hi):
                raise ValueError(f"randomisation range {f.name}={lo, hi}: need 0 <= lo <= hi")


# The wide default of DomainRandConfig (not used by a preset today; kept as the reference set).
TRAINING = ParamRanges(friction=(0.4, 1.0), mass_scale=(0.9, 1.1), kp_scale=(0.9, 1.1), kd_scale=(0.9, 1.1))
# The cpu preset: with TRAINING the untrained jump fell in nearly every training episode.
TRAINING_CPU = ParamRanges(friction=(0.5, 1.0), mass_scale=(0.93, 1.07), kp_scale=(0.95, 1.05), kd_scale=(0.95, 1.05))
# `make eval`: inside TRAINING_CPU.
EVALUATION = ParamRanges(friction=(0.5, 1.0), mass_scale=(0.95, 1.05), kp_scale=(0.97, 1.03), kd_scale=(0.97, 1.03))
