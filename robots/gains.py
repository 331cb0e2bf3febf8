"""Per-joint PD gain bounds: what an artifact (ours or a third party's) may ask the G1's drives for.

Every policy brings its own gains (ours 100-200 Nm/rad on the legs, holosoma's ~28-99, Unitree's
rl_lab configs 40-200); deploy sends the artifact's gains and refuses gains outside

    0 < kp <= KP_MAX = TORQUE_LIMIT / KP_FULL_TORQUE_ERROR      (Nm/rad)
    0 <= kd <= KD_MAX = TORQUE_LIMIT / KD_FULL_TORQUE_VELOCITY  (Nm s/rad)

Why these: past KP_MAX a position error of 0.05 rad (2.9 deg, the size of one policy step's target
change) already asks for the motor's full torque, and past KD_MAX a joint moving at 0.25 rad/s (a
slow arm motion) does; gains above them make the drive a torque-saturated switch on ordinary
tracking errors and sensor noise (1 mrad encoder noise x kp, 0.05 rad/s velocity noise x kd), which
no published G1 configuration approaches (the largest ratio to these bounds among ours, rl_gym,
unitree_rl_lab and holosoma is 0.5: rl_lab's kd 10 on the 5 Nm wrists; tests/test_adapters.py).
kp = 0 is refused (a position policy with a limp joint is an export error); kd = 0 is allowed.
"""
from __future__ import annotations

import numpy as np

from robots import g1

KP_FULL_TORQUE_ERROR = 0.05  # rad: position error at which kp = KP_MAX reaches the motor's torque limit
KD_FULL_TORQUE_VELOCITY = 0.25  # rad/s: joint speed at which kd = KD_MAX reaches the torque limit

KP_MAX = g1.TORQUE_LIMIT / KP_FULL_TORQUE_ERROR
KD_MAX = g1.TORQUE_LIMIT / KD_FULL_TORQUE_VELOCITY


def gain_errors(kp, kd, key_kp: str = "kp", key_kd: str = "kd") -> list[str]:
    """Every violation of the bounds, one message per key naming the joint and the bound ([] = valid).
    kp, kd in motor order (29)."""
    errs = []
    for key, v, lo_open, hi in ((key_kp, kp, True, KP_MAX), (key_kd, kd, False, KD_MAX)):
        v = np.asarray(v, dtype=float)
        if v.shape != (g1.NUM_MOTORS,):
            errs.append(f"{key} has {v.size} entries, the G1 has {g1.NUM_MOTORS} motors")
            continue
        bad = ~np.isfinite(v) | (v > hi) | ((v <= 0) if lo_open else (v < 0))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            low = "0 <" if lo_open else "0 <="
            errs.append(f"{key} of {g1.JOINT_NAMES[i]} is {v[i]:g}, outside {low} {'kp' if lo_open else 'kd'} <= {hi[i]:g} "
                        f"({int(bad.sum())} joints out of bounds; bounds in robots/gains.py: torque limit "
                        f"{g1.TORQUE_LIMIT[i]:g} Nm / {KP_FULL_TORQUE_ERROR if lo_open else KD_FULL_TORQUE_VELOCITY:g})")
    return errs
