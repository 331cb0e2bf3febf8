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
  `flight_feet: follow` instead: the soles rise with the pelvis above the straight line from take-off to
  touch-down height (the legs keep their take-off shape, g T^2 / 8 at mid-flight), plus the s^3 (1 - s)^3
  tuck of the rest of the clearance; the feet keep their x relative to the pelvis, blended by smoothstep from
  the take-off to the touch-down offset. Legs that stop extending at take-off instead of tucking keep the
  angular momentum about the COM nearly constant in the air (motions.momentum); the soles leave the floor
  at the pelvis's take-off velocity (C0, as a real toe-off).
- Legs (hip pitch, knee, ankle pitch) by planar two-link IK (motions.kinematics) from the
  ankle-pitch axis position relative to the hip-pitch axis; ankle pitch keeps the sole flat. The
  feet's sole height 0 is the home-keyframe stance (the sole spheres are 0.8 mm above the floor
  there), so a standing frame at 0.785 m is exactly g1.DEFAULT_JOINT_POS.
- Other joints: default + PCHIP (monotone, C1) interpolation of the keyframe offsets.
- Pelvis pitch (`pelvis_pitch`, + leans forward; 0 when absent): PCHIP within each contact phase (a flight
  pitches at a constant rate; the rate may change at take-off and touch-down, where impacts change it);
  the legs are solved for the pitched pelvis and `Motion.ref_base_quat` carries it (None when level).
- Heel lift (`heel_lift`, rad, + heels up; 0 when absent): the feet pitch toes-down about their toe spheres'
  centres, interpolated as the pelvis pitch is (or, with `heel_rise_s`, risen over only the end of the segment
  into that keyframe); the ankle pitch takes it (the ankle axis rises by ~0.12 sin of
  it), the toe spheres stay at the sole height. A forward take-off rolls onto the toes (and a landing from
  them); with flat soles the pelvis travelling over the feet turns into ankle dorsiflexion beyond its limit.
`build_motion` checks joint limits, joint velocity limits, leg reach and that the floor never
has to pull the feet, and names the file and the time of the first violation.

`ballistic: com` in the file (default `pelvis`: all of the above, unchanged) makes the whole-robot centre
of mass (motions.momentum.com_positions: bridge-model FK, mj_comPos) ballistic instead of the pelvis:
- flight: COM x = x_a + vx tau with vx = (x1 - x0) / T of the keyframes; COM z the parabola with flight
  time T through the uncorrected reference's COM heights at take-off and touch-down. x_a = the previous
  keyframe's COM x + vx T_push / 2 after a push-off from a stance keyframe (no back swing).
- the stance segments next to a flight: COM x and z quintic Hermite from the outer keyframe's COM
  (position, velocity and acceleration of the uncorrected reference there, by one-sided differences) to
  the take-off state (vx, vz0, az = -g), and from the touch-down state to the next keyframe: C2 through
  take-off and touch-down.
- pelvis = desired COM - (COM - pelvis), a fixed point (the joints depend on the pelvis through the leg
  IK, feet fixed in the world) iterated to COM_TOL; a solve that does not converge is a MotionError on
  `ballistic`. Pelvis velocity = analytic COM velocity - central differences of the COM offset. The floor
  check is on the COM: its downward acceleration in stance is at most g.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from motions.kinematics import leg_geometry, leg_ik
from motions.motion import Motion, field_error
from motions.schema import Keyframe, MotionMeta, follow_rise
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


def smootherstep(s):
    """s^3 (10 - 15 s + 6 s^2) on s clipped to [0, 1]: 0 to 1 with zero velocity and acceleration at both ends."""
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
            if k.feet == "follow":  # legs at their take-off shape, plus the tuck that makes up the clearance
                rise = h[j] - (k.h + (k1.h - k.h) * s)
                fh[j] = rise + (k.clearance - follow_rise(T)) * 64 * s**3 * (1 - s) ** 3
                rel0, rel1 = k.foot_x - k.x, k1.foot_x - k1.x
                fx[j] = x[j] + rel0 + (rel1 - rel0) * smootherstep(s)
            else:
                fh[j] = k.clearance * 64 * s**3 * (1 - s) ** 3
                fx[j] = k.foot_x + (k1.foot_x - k.foot_x) * smootherstep(s)
            flight[j] = 0 < tau  # touch-down frame (tau = T) belongs to the next stance segment
        else:
            h[j], vz[j], az[j] = _quintic(k.h, bvz[i][0], bvz[i][1], k1.h, bvz[i + 1][0], bvz[i + 1][1], T, tau)
            x[j], vx[j], _ = _quintic(k.x, bvx[i], 0.0, k1.x, bvx[i + 1], 0.0, T, tau)
            fx[j] = k.foot_x
    return h, vz, az, x, vx, fh, fx, flight


def _offsets(keys: list[Keyframe], times: np.ndarray) -> np.ndarray:
    """(T, 29) joint offsets: PCHIP of the keyframe offsets, held after the last keyframe."""
    kt = np.array([k.t for k in keys])
    ko = np.stack([k.offsets for k in keys])
    if len(keys) >= 2:
        from scipy.interpolate import PchipInterpolator

        return PchipInterpolator(kt, ko, axis=0, extrapolate=False)(np.minimum(times, kt[-1]))
    return np.repeat(ko, len(times), axis=0)


def _pitch(keys: list[Keyframe], times: np.ndarray) -> np.ndarray:
    """(T,) pelvis pitch, rad: PCHIP of the keyframe pitches within each contact phase, held after the last
    keyframe. A flight is its own phase (two keyframes: a constant pitch rate in the air), so the pitch rate
    may change at take-off and touch-down as the impact and the toe-off change it; C1 everywhere else."""
    return _phase_pchip(keys, times, np.array([k.pitch for k in keys]))


def _heel(keys: list[Keyframe], times: np.ndarray) -> np.ndarray:
    """(T,) heel lift (the feet's pitch about their toe spheres), rad: interpolated as the pelvis pitch is, except
    into a keyframe with `heel_rise`: the previous keyframe's value held, then a smootherstep over the last
    heel_rise seconds before it."""
    out = _phase_pchip(keys, times, np.array([k.heel for k in keys]))
    for i, k in enumerate(keys):
        if k.heel_rise > 0:
            h0 = keys[i - 1].heel
            sel = (times > keys[i - 1].t) & (times <= k.t)
            out[sel] = h0 + (k.heel - h0) * smootherstep((times[sel] - (k.t - k.heel_rise)) / k.heel_rise)
    return out


def _phase_pchip(keys: list[Keyframe], times: np.ndarray, kp: np.ndarray) -> np.ndarray:
    kt = np.array([k.t for k in keys])
    out = np.full(len(times), kp[-1] if len(keys) else 0.0)
    if len(keys) < 2 or not np.any(kp != 0.0):
        return out
    from scipy.interpolate import PchipInterpolator

    cuts = sorted({0, len(keys) - 1} | {i for i, k in enumerate(keys[:-1]) if k.flight}
                  | {i + 1 for i, k in enumerate(keys[:-1]) if k.flight})
    for a, b in zip(cuts[:-1], cuts[1:]):  # phases [a, b] share their end keyframes
        sel = (times >= kt[a]) & (times <= kt[b])
        out[sel] = PchipInterpolator(kt[a:b + 1], kp[a:b + 1])(times[sel])
    return out


def pitch_quat(pitch: np.ndarray) -> np.ndarray | None:
    """(T, 4) w, x, y, z orientation of a pelvis pitched about y; None when level throughout (upright)."""
    if not np.any(pitch != 0.0):
        return None
    return np.stack([np.cos(pitch / 2), np.zeros_like(pitch), np.sin(pitch / 2), np.zeros_like(pitch)], axis=1)


def _root(x, h, pitch):
    """Root positions (T, 3) and orientations (or None) for com_positions."""
    return np.stack([x, np.zeros_like(x), h], 1), pitch_quat(pitch)


def _legs(path, times, x, h, fh, fx, q, pitch=0.0, heel=0.0) -> np.ndarray:
    """Leg IK into q's hip pitch, knee and ankle pitch (in place) for pelvis (x, h, pitch) and soles (fx, fh),
    the feet pitched toes-down by `heel` about their toe spheres' centres (so the toe spheres' bottoms stay at
    fh); returns the (T, 2, 3) sole reference points (under the ankle axis). A MotionError names `path` and the
    first unreachable time."""
    geos = leg_geometry()
    foot_pos = np.zeros((len(times), 2, 3))
    heel = np.asarray(heel, float)
    c, s = np.cos(heel), np.sin(heel)
    for side, geo in enumerate(geos):
        # the ankle axis = toe centre + R_y(heel) (ankle - toe centre) of the flat foot
        tx, tz = geo.toe
        dx, dz = tx - (tx * c + tz * s), tz + (tx * s - tz * c)  # exactly 0 without heel lift
        ankle_world_x = fx + geo.home_ankle_x + dx
        ankle_world_z = fh + geo.ankle_height + dz
        hip, knee, ankle, reach = leg_ik(geo, ankle_world_x - x, ankle_world_z - h, pitch)
        ankle = ankle + heel
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
        foot_pos[:, side, 2] = fh + dz
    return foot_pos


COM_TOL = 1e-9  # m: the ballistic-COM pelvis solve stops when the COM is this close to the planned one
COM_MAX_ITER = 60


def _com_ballistic(path, keys: list[Keyframe], times: np.ndarray, dt: float, base, fh, fx):
    """`ballistic: com`: the pelvis x and z solved so the whole-robot COM (motions.momentum.com_positions) is
    ballistic in each flight and a quintic Hermite in the stance segments next to it (see the module doc).
    Returns (x, vx, h, vz, com_az, corrected frames, sole heights, sole x); frames outside those segments keep the
    keyframe pelvis; `flight_feet: follow` soles move with the solved pelvis (its correction less the one
    interpolated between take-off and touch-down)."""
    from motions.momentum import com_positions

    h, vz, _, x, vx = (np.array(a, float) for a in base)
    kt = [k.t for k in keys]
    n = len(keys)

    def com0(ts):
        """(len(ts), 2) COM x, z of the uncorrected (keyframe-pelvis) reference at arbitrary times."""
        ts = np.asarray(ts, float)
        hh, _, _, xx, _, ffh, ffx, _ = base_and_feet(keys, ts)
        qq = g1.DEFAULT_JOINT_POS + _offsets(keys, ts)
        pp = _pitch(keys, ts)
        _legs(path, ts, xx, hh, ffh, ffx, qq, pp, _heel(keys, ts))
        pos, quat = _root(xx, hh, pp)
        return com_positions(pos, qq, quat)[:, [0, 2]]

    def outer(i, side):
        """COM (p, v, a) at keyframe i of the uncorrected reference on the `side` (-1 before, +1 after) of it:
        one-sided second-order differences, so the corrected segment joins the neighbouring one C2."""
        if side < 0 and i == 0:
            return com0([kt[0]])[0], np.zeros(2), np.zeros(2)
        e = 1e-3 * side
        f = com0(kt[i] + e * np.arange(4))
        return f[0], (-3 * f[0] + 4 * f[1] - f[2]) / (2 * e), (2 * f[0] - 5 * f[1] + 4 * f[2] - f[3]) / e**2

    takeoff, touchdown = {}, {}  # keyframe index -> COM (p, v, a), each (x, z)
    for i, k in enumerate(keys[:-1]):
        if k.flight:
            T = kt[i + 1] - k.t
            ca, cb = com0([k.t, kt[i + 1]])
            vxf = (keys[i + 1].x - k.x) / T  # the keyframes' planned horizontal velocity
            vz0 = (cb[1] - ca[1]) / T + GRAVITY * T / 2  # parabola through the uncorrected COM heights
            if i > 0 and not keys[i - 1].flight:  # push-off from rest: the COM covers vxf * T_push / 2 (no back swing)
                xa = outer(i - 1, -1)[0][0] + vxf * (k.t - kt[i - 1]) / 2
            else:
                xa = ca[0]
            takeoff[i] = (np.array([xa, ca[1]]), np.array([vxf, vz0]), np.array([0.0, -GRAVITY]))
            touchdown[i + 1] = (np.array([xa + vxf * T, cb[1]]), np.array([vxf, vz0 - GRAVITY * T]),
                                np.array([0.0, -GRAVITY]))
    seg = np.searchsorted(kt, times, side="right") - 1
    c, cv, ca_ = np.zeros((len(times), 2)), np.zeros((len(times), 2)), np.zeros((len(times), 2))
    fix = np.zeros(len(times), bool)
    for j in range(n - 1):
        sel = np.flatnonzero(seg == j)
        if not sel.size:
            continue
        tau = times[sel] - kt[j]
        if keys[j].flight:
            (px, pz), (vxf, vz0), _ = takeoff[j]
            c[sel, 0], cv[sel, 0], ca_[sel, 0] = px + vxf * tau, vxf, 0.0
            c[sel, 1], cv[sel, 1], ca_[sel, 1] = pz + vz0 * tau - GRAVITY * tau**2 / 2, vz0 - GRAVITY * tau, -GRAVITY
        elif j in touchdown or (j + 1) in takeoff:
            s0 = touchdown[j] if j in touchdown else outer(j, -1)
            s1 = takeoff[j + 1] if (j + 1) in takeoff else outer(j + 1, +1)
            for ax in (0, 1):
                c[sel, ax], cv[sel, ax], ca_[sel, ax] = _quintic(s0[0][ax], s0[1][ax], s0[2][ax], s1[0][ax], s1[1][ax],
                                                                 s1[2][ax], kt[j + 1] - kt[j], tau)
        else:
            continue
        fix[sel] = True
    F = np.flatnonzero(fix)
    offsets = _offsets(keys, times[F])
    pitch = _pitch(keys, times[F])
    heel = _heel(keys, times[F])
    px, pz = x[F].copy(), h[F].copy()
    fh, fx = np.array(fh, float), np.array(fx, float)
    fh0, fx0 = fh[F].copy(), fx[F].copy()
    follow = [(k.t, keys[i + 1].t) for i, k in enumerate(keys[:-1]) if k.flight and k.feet == "follow"]
    for it in range(COM_MAX_ITER):
        for t0, t1 in follow:  # the soles move with the solved pelvis: its correction, less that at the ends
            sel = (times[F] > t0) & (times[F] < t1)
            s = (times[F][sel] - t0) / (t1 - t0)
            for base_f, f0, p, p0 in ((fh, fh0, pz, h[F]), (fx, fx0, px, x[F])):
                d = p - p0
                d0, d1 = np.interp([t0, t1], times[F], d)
                base_f[F[sel]] = f0[sel] + d[sel] - (d0 + (d1 - d0) * s)
        q = g1.DEFAULT_JOINT_POS + offsets
        _legs(path, times[F], px, pz, fh[F], fx[F], q, pitch, heel)
        pos, quat = _root(px, pz, pitch)
        com = com_positions(pos, q, quat)[:, [0, 2]]
        r = c[F] - com
        err = np.abs(r).max(axis=1)
        if not np.all(np.isfinite(err)):
            break
        if err.max() < COM_TOL:
            break
        px, pz = px + r[:, 0], pz + r[:, 1]  # pelvis = desired COM - (COM - pelvis) at the current joints
    else:
        it = COM_MAX_ITER
    if it >= COM_MAX_ITER or not np.all(np.isfinite(err)) or err.max() >= COM_TOL:
        j = int(np.nanargmax(np.where(np.isfinite(err), err, np.inf)))
        raise field_error(path, "ballistic", f"the pelvis solve for a ballistic centre of mass did not converge in "
                         f"{COM_MAX_ITER} iterations (COM {err[j]:.2g} m from the plan at t = {times[F][j]:.2f} s); "
                         "use ballistic: pelvis or make that segment longer / the joint motion smaller")
    x[F], h[F] = px, pz
    off = com - np.c_[px, pz]  # COM - pelvis at the solved joints
    dx = np.gradient(off, dt, axis=0) if len(F) >= 2 else np.zeros_like(off)
    vx[F], vz[F] = cv[F, 0] - dx[:, 0], cv[F, 1] - dx[:, 1]
    return x, vx, h, vz, ca_[:, 1], fix, fh, fx


def build_motion(path: Path, meta: MotionMeta, keys: list[Keyframe], dt: float = g1.CONTROL_DT) -> Motion:
    """Sample the keyframes at `dt` from 0 to meta.duration inclusive; a MotionError names `path` and
    the first time a limit (reach, joint range, joint speed, floor pull) is violated."""
    T = int(round(meta.duration / dt)) + 1
    times = np.arange(T) * dt
    h, vz, az, x, vx, fh, fx, flight = base_and_feet(keys, times)
    com_mode = meta.ballistic == "com"
    if com_mode:
        x, vx, h, vz, com_az, fixed, fh, fx = _com_ballistic(path, keys, times, dt, (h, vz, az, x, vx), fh, fx)
    else:
        pull = np.flatnonzero(~flight & (az < -GRAVITY - 1e-6))
        if pull.size:
            j = int(pull[0])
            raise field_error(path, "keyframes", f"the pelvis accelerates down at {-az[j]:.1f} m/s^2 > g at t = {times[j]:.2f} s "
                             "while standing: the floor would have to pull the feet; lengthen that segment")
    q = g1.DEFAULT_JOINT_POS + _offsets(keys, times)
    pitch = _pitch(keys, times)
    foot_pos = _legs(path, times, x, h, fh, fx, q, pitch, _heel(keys, times))
    quat = pitch_quat(pitch)
    if com_mode:  # the floor can only push: the COM's downward acceleration in stance is at most g
        from motions.momentum import com_positions

        cz = com_positions(np.stack([x, np.zeros(T), h], 1), q, quat)[:, 2]
        az_fd = np.gradient(np.gradient(cz, dt), dt) if T >= 3 else np.zeros(T)
        com_az = np.where(fixed, com_az, az_fd)
        pull = np.flatnonzero(~flight & (com_az < -GRAVITY - 1e-6))
        if pull.size:
            j = int(pull[0])
            raise field_error(path, "keyframes", f"the centre of mass accelerates down at {-com_az[j]:.1f} m/s^2 > g at "
                             f"t = {times[j]:.2f} s while standing: the floor would have to pull the feet; lengthen "
                             "that segment")
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
    if com_mode:  # the solved pelvis at each take-off (interpolated between frames)
        heights = tuple(float(np.interp(k.t, times, h)) for k, _ in fl)
        v0s = tuple(float(np.interp(k.t, times, vz)) for k, _ in fl)
    else:
        heights = tuple(k.h for k, _ in fl)
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
                  takeoff_heights=heights, takeoff_vz=v0s, ref_base_quat=quat, **arrays)
