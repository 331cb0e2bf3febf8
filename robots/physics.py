"""Physics facts every room shares: gravity, the drives' PD law, orientation helpers, the fall
criterion. Pure functions; each takes the array module `xp` (numpy by default) so the training
env can call them on jax arrays without this package importing jax.

Invariants (tests/test_robot_physics.py): `pd_torque` is the drive law of
Unitree's hg LowCmd (motor_cmd q, dq, tau, kp, kd), `tau_ff + kp (q* - q) + kd (dq* - dq)`, clipped to +-tau_max
when given; `upright_cos(q) == -projected_gravity(q)[..., 2]` for any non-zero norm;
`fallen` is the one fall criterion of training termination, evaluation and the deploy summary.
"""
from __future__ import annotations

import math

import numpy as np

GRAVITY = 9.81  # m/s^2

# The one fall criterion: pelvis below FALL_HEIGHT_M, or its z axis tilted more than FALL_TILT_RAD
# from the world vertical. Standing is 0.785 m and 0 rad; the deploy loop's safety trip (46 deg) is
# a separate, stricter limit that ends a run in damping before a fall.
FALL_HEIGHT_M = 0.4
FALL_TILT_RAD = 1.0  # 57.3 deg


def pd_torque(q_target, q, dq, kp, kd, dq_target=0.0, tau_ff=0.0, tau_max=None, xp=np):
    """Drive torque tau_ff + kp (q* - q) + kd (dq* - dq), clipped to +-tau_max when it is given."""
    tau = tau_ff + kp * (q_target - q) + kd * (dq_target - dq)
    return tau if tau_max is None else xp.clip(tau, -tau_max, tau_max)


def torque_speed_bounds(dq, tau_max, v_lim, tau_peak=None, xp=np):
    """(lo, hi) torque a drive can give at joint speed dq: the seed's linear torque-speed envelope,
    hi = clip(tau_peak (1 - dq / v_lim), 0, tau_max), lo = clip(tau_peak (-1 - dq / v_lim), -tau_max, 0) (tau_peak
    defaults to tau_max): full torque at rest, none in the direction of motion at v_lim, braking always."""
    peak = tau_max if tau_peak is None else tau_peak
    return (xp.clip(peak * (-1.0 - dq / v_lim), -tau_max, 0.0), xp.clip(peak * (1.0 - dq / v_lim), 0.0, tau_max))


def quat_mul(a, b, xp=np):
    """Hamilton product a * b of w, x, y, z quaternions: the rotation b, then a (a turns b in the world frame)."""
    aw, ax, ay, az = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    bw, bx, by, bz = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return xp.stack([aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw], -1)


def quat_rotate_inverse(quat, v, xp=np):
    """Rotate world vector v into the frame of unit quaternion quat (w, x, y, z)."""
    w = quat[..., :1]
    u = quat[..., 1:4]
    t = 2.0 * xp.cross(u, v)
    return v - w * t + xp.cross(u, t)


def projected_gravity(quat, xp=np):
    """The gravity unit vector (0, 0, -1) in the frame of quat (w, x, y, z)."""
    g = xp.zeros(quat.shape[:-1] + (3,), dtype=quat.dtype) + xp.asarray([0.0, 0.0, -1.0], dtype=quat.dtype)
    return quat_rotate_inverse(quat, g, xp)


def upright_cos(quat, xp=np):
    """Cosine of the tilt: the world z component of the body z axis, = -projected_gravity(quat)[..., 2],
    for w, x, y, z quaternions of any non-zero norm (closed form, cheap enough for a 500 Hz check)."""
    x, y = quat[..., 1], quat[..., 2]
    return 1.0 - 2.0 * (x * x + y * y) / xp.sum(quat * quat, axis=-1)


def tilt_angle(quat) -> float:
    """Angle (rad) between the body z axis and the world vertical, from one w, x, y, z quaternion;
    nan for a zero or non-finite quaternion (scalar math: this runs at 500 Hz)."""
    w, x, y, z = (float(v) for v in quat)
    n2 = w * w + x * x + y * y + z * z
    if not math.isfinite(n2) or n2 < 1e-12:
        return float("nan")
    return math.acos(min(1.0, max(-1.0, 1.0 - 2.0 * (x * x + y * y) / n2)))


def quat_to_rpy(quat) -> np.ndarray:
    """Roll, pitch, yaw (ZYX Euler, rad) of a w, x, y, z quaternion, as the IMU reports rpy."""
    w, x, y, z = (float(v) for v in quat)
    roll = math.atan2(2.0 * (w * x + y * z), 1.0 - 2.0 * (x * x + y * y))
    pitch = math.asin(max(-1.0, min(1.0, 2.0 * (w * y - z * x))))
    yaw = math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
    return np.array([roll, pitch, yaw])


def fallen(base_height, quat, xp=np, ref_height=None, ref_tilt=None):
    """The one fall criterion (batched): pelvis below FALL_HEIGHT_M or tilt beyond FALL_TILT_RAD. Tracking a
    reference that itself goes lower or bends further (a box lift bends the pelvis 66 deg), the bounds follow it:
    below ref_height - REFERENCE_HEIGHT_MARGIN_M, tilted beyond ref_tilt + REFERENCE_TILT_MARGIN_RAD (the
    reference's pelvis at the same instant)."""
    h_min, tilt_max = FALL_HEIGHT_M, FALL_TILT_RAD
    if ref_height is not None:
        h_min = xp.minimum(h_min, ref_height - REFERENCE_HEIGHT_MARGIN_M)
    if ref_tilt is not None:
        tilt_max = xp.maximum(tilt_max, ref_tilt + REFERENCE_TILT_MARGIN_RAD)
    return (base_height < h_min) | (upright_cos(quat, xp) < xp.cos(tilt_max))


# how far a tracking run may go below / tilt beyond its reference's pelvis before it counts as fallen (the anchor
# height bound of BeyondMimic's terminations, 0.25 m; 20 deg of tilt), and the safety gate's tilt allowance above it
REFERENCE_HEIGHT_MARGIN_M = 0.25
REFERENCE_TILT_MARGIN_RAD = math.radians(20.0)

FALL_DEFINITION = f"pelvis below {FALL_HEIGHT_M} m or tilted more than {math.degrees(FALL_TILT_RAD):.1f} deg"
FALL_DEFINITION_TRACKING = (f"{FALL_DEFINITION}, or, where the reference's pelvis is lower or tilted more, more than "
                            f"{REFERENCE_HEIGHT_MARGIN_M} m below it or {math.degrees(REFERENCE_TILT_MARGIN_RAD):.0f} "
                            "deg beyond its tilt")
