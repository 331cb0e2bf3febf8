"""Keyframes -> a physically consistent reference trajectory at the control rate.

How the trajectory is made (sampled at `dt`, g1.CONTROL_DT by default, from t = 0 to `duration`
inclusive):
- Pelvis height and x between stance keyframes: quintic Hermite (C2) with zero velocity and
  acceleration at the keyframes, except next to a flight, where they take the ballistic
  values, so height is C2 through take-off and touch-down.
- Flight from (t0, h0, x0) to (t1, h1, x1), T = t1 - t0: h = h0 + v0 tau - g tau^2 / 2 with
  v0 = (h1 - h0) / T + g T / 2 (= sqrt(2 g apex_rise) when h1 = h0), x linear in time.
  The soles follow f = c * 64 s^3 (1 - s)^3 (s = tau / T, c = apex_foot_clearance): C2 with
  stance at both ends (zero velocity and acceleration at take-off and touch-down), c at mid-flight.
  The feet's x moves from the old to the new stance with a quintic smoothstep.
- Legs (hip pitch, knee, ankle pitch) by planar two-link IK (motions.kinematics) from the
  ankle-pitch axis position relative to the hip-pitch axis; ankle pitch keeps the sole flat. The
  feet's sole height 0 is the home-keyframe stance (the sole spheres are 0.8 mm above the floor
  there), so a standing frame at 0.785 m is exactly g1.DEFAULT_JOINT_POS.
- Other joints: default + PCHIP (monotone, C1) interpolation of the keyframe offsets.
`build_motion` checks joint limits, joint velocity limits, leg reach and that the floor never
has to pull the feet, and names the file and the time of the first violation.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from motions.kinematics import leg_geometry, leg_ik
from motions.motion import Motion, field_error
from motions.schema import Keyframe, MotionMeta
from robots import g1
from robots.physics import GRAVITY


def _quintic(p0, v0, a0, p1, v1, a1, T, tau):
    """Quintic Hermite on [0, T] with position/velocity/acceleration at both ends -> (p, v, a)."""
    tau = np.asarray(tau, float)
    c0, c1, c2 = p0, v0, a0 / 2
    M = np.array([[T**3, T**4, T**5], [3 * T**2, 4 * T**3, 5 * T**4], [6 * T, 12 * T**2, 20 * T**3]])
    rhs = np.array([p1 - (c0 + c1 * T + c2 * T**2), v1 - (c1 + 2 * c2 * T), a1 - 2 * c2])
    c3, c4, c5 = np.linalg.solve(M, rhs)
    p = c0 + c1 * tau + c2 * tau**2 + c3 * tau**3 + c4 * tau**4 + c5 * tau**5
    v = c1 + 2 * c2 * tau + 3 * c3 * tau**2 + 4 * c4 * tau**3 + 5 * c5 * tau**4
    a = 2 * c2 + 6 * c3 * tau + 12 * c4 * tau**2 + 20 * c5 * tau**3
    return p, v, a


def _smootherstep(s):
    s = np.clip(s, 0.0, 1.0)
    return s**3 * (10 - 15 * s + 6 * s**2)


def base_and_feet(keys: list[Keyframe], times: np.ndarray):
    """Pelvis (h, vz, x, vx) and feet (height, x) at `times`, plus the flight mask."""
    n = len(times)
    h, vz, az, x, vx = (np.zeros(n) for _ in range(5))
    fh, fx = np.zeros(n), np.zeros(n)
    flight = np.zeros(n, bool)
    # boundary velocities at keyframes: 0, or the ballistic value next to a flight
    bvz = [[0.0, 0.0] for _ in keys]  # (vz, az) at each keyframe
    bvx = [0.0 for _ in keys]
    for i, k in enumerate(keys[:-1]):
        if k.flight:
            k1 = keys[i + 1]
            T = k1.t - k.t
            v0 = (k1.h - k.h) / T + GRAVITY * T / 2
            bvz[i] = [v0, -GRAVITY]
            bvz[i + 1] = [v0 - GRAVITY * T, -GRAVITY]
            bvx[i] = bvx[i + 1] = (k1.x - k.x) / T
    for j, t in enumerate(times):
        i = int(np.searchsorted([k.t for k in keys], t, side="right") - 1)
        k = keys[i]
        if i == len(keys) - 1:  # hold the last keyframe
            h[j], x[j], fx[j] = k.h, k.x, k.foot_x
            continue
        k1 = keys[i + 1]
        T, tau = k1.t - k.t, t - k.t
        if k.flight:
            v0 = bvz[i][0]
            h[j] = k.h + v0 * tau - GRAVITY * tau**2 / 2
            vz[j] = v0 - GRAVITY * tau
            az[j] = -GRAVITY
            x[j] = k.x + bvx[i] * tau
            vx[j] = bvx[i]
            s = tau / T
            fh[j] = k.clearance * 64 * s**3 * (1 - s) ** 3
            fx[j] = k.foot_x + (k1.foot_x - k.foot_x) * _smootherstep(s)
            flight[j] = 0 < tau  # touch-down frame (tau = T) belongs to the next stance segment
        else:
            h[j], vz[j], az[j] = _quintic(k.h, bvz[i][0], bvz[i][1], k1.h, bvz[i + 1][0], bvz[i + 1][1], T, tau)
            x[j], vx[j], _ = _quintic(k.x, bvx[i], 0.0, k1.x, bvx[i + 1], 0.0, T, tau)
            fx[j] = k.foot_x
    return h, vz, az, x, vx, fh, fx, flight


def build_motion(path: Path, meta: MotionMeta, keys: list[Keyframe], dt: float = g1.CONTROL_DT) -> Motion:
    """Sample the keyframes at `dt` from 0 to meta.duration inclusive; a MotionError names `path` and
    the first time a limit (reach, joint range, joint speed, floor pull) is violated."""
    T = int(round(meta.duration / dt)) + 1
    times = np.arange(T) * dt
    h, vz, az, x, vx, fh, fx, flight = base_and_feet(keys, times)
    pull = np.flatnonzero(~flight & (az < -GRAVITY - 1e-6))
    if pull.size:
        j = int(pull[0])
        raise field_error(path, "keyframes", f"the pelvis accelerates down at {-az[j]:.1f} m/s^2 > g at t = {times[j]:.2f} s "
                         "while standing: the floor would have to pull the feet; lengthen that segment")
    # other joints: default + PCHIP of keyframe offsets, held after the last keyframe
    kt = np.array([k.t for k in keys])
    ko = np.stack([k.offsets for k in keys])
    if len(keys) >= 2:
        from scipy.interpolate import PchipInterpolator

        offsets = PchipInterpolator(kt, ko, axis=0, extrapolate=False)(np.minimum(times, kt[-1]))
    else:
        offsets = np.repeat(ko, T, axis=0)
    q = g1.DEFAULT_JOINT_POS + offsets
    geos = leg_geometry()
    foot_pos = np.zeros((T, 2, 3))
    for side, geo in enumerate(geos):
        ankle_world_x = fx + geo.home_ankle_x
        ankle_world_z = fh + geo.ankle_height
        hip, knee, ankle, reach = leg_ik(geo, ankle_world_x - x, ankle_world_z - h)
        bad = np.flatnonzero(~np.isfinite(knee) | (reach > 1.0))
        if bad.size:
            j = int(bad[0])
            raise field_error(path, "keyframes", f"the {('left', 'right')[side]} leg cannot reach the foot at t = "
                             f"{times[j]:.2f} s (pelvis {h[j]:.3f} m, foot {fh[j]:.3f} m: needs {reach[j]:.1%} of the "
                             "straight leg); lower pelvis_height or the foot")
        base = 6 * side
        q[:, base + 0], q[:, base + 3], q[:, base + 4] = hip, knee, ankle
        foot_pos[:, side, 0] = ankle_world_x
        foot_pos[:, side, 1] = geo.home_ankle_y
        foot_pos[:, side, 2] = fh
    lo, hi = g1.JOINT_POS_MIN, g1.JOINT_POS_MAX
    viol = (q < lo - 1e-9) | (q > hi + 1e-9)
    if viol.any():
        j, m = map(int, np.argwhere(viol)[0])
        raise field_error(path, "keyframes", f"{g1.JOINT_NAMES[m]} = {q[j, m]:.3f} rad at t = {times[j]:.2f} s is outside its "
                         f"limits [{lo[m]:.3f}, {hi[m]:.3f}]; make the motion less deep or change the joint offsets")
    dq = np.gradient(q, dt, axis=0)
    fast = np.abs(dq) > g1.VELOCITY_LIMIT
    if fast.any():
        j, m = map(int, np.argwhere(fast)[0])
        raise field_error(path, "keyframes", f"{g1.JOINT_NAMES[m]} moves at {dq[j, m]:.1f} rad/s at t = {times[j]:.2f} s, "
                         f"above its limit {g1.VELOCITY_LIMIT[m]} rad/s; slow the motion down")
    contact = np.repeat(~flight[:, None], 2, axis=1)
    fl = [(k, keys[i + 1]) for i, k in enumerate(keys[:-1]) if k.flight]
    windows = tuple((k.t, k1.t) for k, k1 in fl)
    v0s = tuple((k1.h - k.h) / (k1.t - k.t) + GRAVITY * (k1.t - k.t) / 2 for k, k1 in fl)
    arrays = dict(
        ref_q=q, ref_height=h, ref_foot_height=np.stack([fh, fh], 1), ref_dq=dq,
        ref_base_pos=np.stack([x, np.zeros(T), h], 1), ref_base_lin_vel=np.stack([vx, np.zeros(T), vz], 1),
        ref_foot_pos=foot_pos, contact=contact, flight_mask=flight,
    )
    for v in arrays.values():
        v.setflags(write=False)
    return Motion(name=meta.name, duration=meta.duration, reward_weights=dict(meta.reward_weights), dt=dt,
                  description=meta.description, source=str(path), flight_windows=windows,
                  takeoff_heights=tuple(k.h for k, _ in fl), takeoff_vz=v0s, **arrays)
