"""Motions as data: YAML keyframes -> a physically consistent reference trajectory.

A motion file `motions/<name>.yaml` holds keyframes and reward weights:

    name: jump                  # must equal the file name
    description: free text
    duration: 3.6               # s; after the last keyframe the last pose is held
    keyframes:                  # strictly increasing t, the first at t = 0
      - t: 0.0
        pelvis_height: 0.785    # m, world z of the pelvis (upright)
        pelvis_x: 0.0           # m, world x of the pelvis (optional, default: previous keyframe, 0 first)
        foot_x: 0.0             # m, both feet's x relative to their home-pose stance position under a pelvis
                                #    at x = 0 (optional, default: unchanged; it may only change across a flight)
        phase: stance           # stance (default) | flight: the segment from this keyframe to the next is
                                #    airborne (both feet clear)
        apex_foot_clearance: 0.1  # flight only: sole height at mid-flight, m
        joints:                 # offsets (rad) from g1.DEFAULT_JOINT_POS at this keyframe; absent -> 0
          waist_pitch: 0.1      #   a full joint name, or a name without left_/right_ (both sides;
          shoulder_roll: 0.1    #   roll and yaw mirrored for the right side, so this is symmetric)
    reward_weights: {joint_pos: 1.0, ...}   # name -> weight, read by train/rewards.py

How the trajectory is made (sampled at g1.CONTROL_DT from t = 0 to `duration` inclusive):
- Pelvis height and x between stance keyframes: quintic Hermite (C2) with zero velocity and
  acceleration at the keyframes, except next to a flight, where they take the ballistic
  values, so height is C2 through take-off and touch-down.
- Flight from (t0, h0, x0) to (t1, h1, x1), T = t1 - t0: h = h0 + v0 tau - g tau^2 / 2 with
  v0 = (h1 - h0) / T + g T / 2 (= sqrt(2 g apex_rise) when h1 = h0), x linear in time.
  The soles follow f = c * 64 s^3 (1 - s)^3 (s = tau / T, c = apex_foot_clearance): C2 with
  stance at both ends (zero velocity and acceleration at take-off and touch-down), c at mid-flight.
  The feet's x moves from the old to the new stance with a quintic smoothstep.
- Legs (hip pitch, knee, ankle pitch) by planar two-link IK from the ankle-pitch axis position
  relative to the hip-pitch axis, with the thigh/shank vectors measured from robots.model at
  q = 0; ankle pitch keeps the sole flat (the three pitch axes are parallel). The feet's
  sole height 0 is the home-keyframe stance (the sole spheres are 0.8 mm above the floor
  there), so a standing frame at 0.785 m is exactly g1.DEFAULT_JOINT_POS.
- Other joints: default + PCHIP (monotone, C1) interpolation of the keyframe offsets.
The loader checks joint limits, joint velocity limits and leg reach, and names the file and
keyframe on any problem.

    python -m train.motions --list
    python -m train.motions --plot jump [--out runs/motions/jump.png]
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from robots import g1

GRAVITY = 9.81
MOTIONS_DIR = Path(__file__).resolve().parent.parent / "motions"
MOTIONS_ENV_VAR = "G1_MOTIONS_DIR"
IK_JOINTS = ("hip_pitch", "knee", "ankle_pitch")  # set by IK, not by keyframes
_KEYFRAME_FIELDS = {"t", "pelvis_height", "pelvis_x", "foot_x", "phase", "apex_foot_clearance", "joints"}
_TOP_FIELDS = {"name", "description", "duration", "keyframes", "reward_weights"}
_MIRRORED = ("roll", "yaw")  # right-side offset = -left-side offset for these short names


class MotionError(ValueError):
    """A motion is unknown or its file is malformed; the message names the file and field."""


@dataclasses.dataclass(frozen=True, eq=False)
class Motion:
    """A reference trajectory at `dt` from t = 0 to `duration` inclusive (T = round(duration/dt) + 1).

    Arrays are read-only. World frame: x forward, z up; the pelvis stays upright (identity
    orientation) and at y = 0.
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


def hold_pose_motion(num_steps: int, name: str = "stand") -> Motion:
    """Hold the default pose for `num_steps` control steps: the stand-in reference of tests and
    benchmarks that need an env without a motion file (default reward weights)."""
    def ro(a):
        a.setflags(write=False)
        return a

    return Motion(name=name, duration=(num_steps - 1) * g1.CONTROL_DT,
                  ref_q=ro(np.tile(np.asarray(g1.DEFAULT_JOINT_POS, float), (num_steps, 1))),
                  ref_height=ro(np.full(num_steps, g1.DEFAULT_BASE_HEIGHT)),
                  ref_foot_height=ro(np.zeros((num_steps, 2))), reward_weights={})


# ----------------------------------------------------------------------------- leg geometry

@dataclasses.dataclass(frozen=True)
class LegGeometry:
    """Sagittal-plane (x, z) leg geometry of one leg, pelvis frame, measured from the model."""

    hip: np.ndarray  # hip-pitch axis position relative to the pelvis at q = 0
    thigh: np.ndarray  # knee axis - hip axis at q = 0
    shank: np.ndarray  # ankle-pitch axis - knee axis at q = 0
    ankle_height: float  # ankle-pitch axis above the floor in the home keyframe stance
    home_ankle_x: float  # ankle-pitch axis x relative to the pelvis in the home pose
    home_ankle_y: float  # ankle-pitch axis y relative to the pelvis in the home pose
    sole_below_ankle: float  # ankle axis - lowest sole-sphere bottom (flat foot), m
    sole_home_gap: float  # lowest sole-sphere bottom above the floor in the home keyframe, m


@functools.lru_cache(maxsize=1)
def leg_geometry() -> tuple[LegGeometry, LegGeometry]:
    """(left, right) leg geometry from robots.model's bridge model (the MJCF in use)."""
    import mujoco

    from robots import model as M

    m = M.build_bridge_model()
    d = mujoco.MjData(m)
    out = []
    for side in ("left", "right"):
        jids = [m.joint(f"{side}_{j}_joint").id for j in IK_JOINTS]
        foot = m.body(f"{side}_ankle_roll_link").id
        spheres = [g for g in range(m.ngeom) if m.geom_bodyid[g] == foot and m.geom_type[g] == mujoco.mjtGeom.mjGEOM_SPHERE]
        if not spheres:
            raise MotionError(f"the G1 model has no foot spheres on {side}_ankle_roll_link; cannot measure the sole")
        d.qpos[:] = 0
        d.qpos[3] = 1.0
        mujoco.mj_kinematics(m, d)
        for j in jids:
            if not np.allclose(d.xaxis[j], [0, 1, 0], atol=1e-6):
                raise MotionError(f"{m.joint(j).name} axis {d.xaxis[j]} is not the y axis; planar leg IK needs parallel pitch axes")
        hip, knee, ankle = (d.xanchor[j][[0, 2]].copy() for j in jids)
        sole0 = min(d.geom_xpos[g][2] - m.geom_size[g][0] for g in spheres)
        mujoco.mj_resetDataKeyframe(m, d, m.key("home").id)
        mujoco.mj_kinematics(m, d)
        a_home = d.xanchor[jids[2]]
        sole_home = min(d.geom_xpos[g][2] - m.geom_size[g][0] for g in spheres)
        out.append(LegGeometry(
            hip=hip, thigh=knee - hip, shank=ankle - knee,
            ankle_height=float(a_home[2]), home_ankle_x=float(a_home[0] - d.qpos[0]),
            home_ankle_y=float(a_home[1] - d.qpos[1]),
            sole_below_ankle=float(ankle[1] - sole0), sole_home_gap=float(sole_home),
        ))
    return out[0], out[1]


def leg_ik(geo: LegGeometry, ankle_rel_pelvis_x, ankle_rel_pelvis_z):
    """Planar IK: ankle-pitch axis position in the (upright) pelvis frame -> (hip, knee, ankle) pitch.

    Rotation about +y by theta acts on w = x + i z as w * exp(-i theta). With w = hip->ankle,
    w = exp(-i q_hip) (a + exp(-i q_knee) b), a = thigh, b = shank; the foot is flat when
    q_hip + q_knee + q_ankle = 0 (flat at q = 0). Returns arrays and the reach ratio
    |hip->ankle| / (|a| + |b|) (NaN angles where unreachable).
    """
    a = complex(*geo.thigh)
    b = complex(*geo.shank)
    d = (np.asarray(ankle_rel_pelvis_x) - geo.hip[0]) + 1j * (np.asarray(ankle_rel_pelvis_z) - geo.hip[1])
    la, lb = abs(a), abs(b)
    c = (np.abs(d) ** 2 - la**2 - lb**2) / (2 * la * lb)
    phi = np.angle(b) - np.angle(a)
    with np.errstate(invalid="ignore"):
        knee = phi + np.arccos(c)
    w = a + np.exp(-1j * knee) * b
    hip = np.angle(w) - np.angle(d)
    hip = (hip + np.pi) % (2 * np.pi) - np.pi
    ankle = -(hip + knee)
    return hip, knee, ankle, np.abs(d) / (la + lb)


# ----------------------------------------------------------------------------- curves

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


# ----------------------------------------------------------------------------- parsing

@dataclasses.dataclass(frozen=True)
class _Key:
    t: float
    h: float
    x: float
    foot_x: float
    flight: bool
    clearance: float
    offsets: np.ndarray  # (29,)


def _err(path, field, msg) -> MotionError:
    return MotionError(f"{path}: {field}: {msg}")


def _num(path, field, v, lo=-math.inf, hi=math.inf) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise _err(path, field, f"expected a finite number, got {v!r}")
    v = float(v)
    if not (lo <= v <= hi):
        raise _err(path, field, f"{v} is outside [{lo}, {hi}]")
    return v


def _joint_offsets(path, field, joints) -> np.ndarray:
    off = np.zeros(g1.NUM_MOTORS)
    if joints is None:
        return off
    if not isinstance(joints, dict):
        raise _err(path, field, f"expected a mapping joint -> offset (rad), got {type(joints).__name__}")
    for key, val in joints.items():
        v = _num(path, f"{field}.{key}", val, -math.pi, math.pi)
        short = str(key).removesuffix("_joint")
        if short.endswith(IK_JOINTS):
            raise _err(path, f"{field}.{key}", f"leg pitch joints {list(IK_JOINTS)} are set by the leg IK from "
                       "pelvis_height/foot_x; remove this offset")
        if f"{short}_joint" in g1.JOINT_NAMES:
            off[g1.joint_index(f"{short}_joint")] += v
        elif f"left_{short}_joint" in g1.JOINT_NAMES:
            sign = -1.0 if short.endswith(_MIRRORED) else 1.0
            off[g1.joint_index(f"left_{short}_joint")] += v
            off[g1.joint_index(f"right_{short}_joint")] += sign * v
        else:
            names = sorted({n.removesuffix("_joint").removeprefix("left_").removeprefix("right_") for n in g1.JOINT_NAMES})
            raise _err(path, f"{field}.{key}", f"unknown joint; use a full G1 joint name or one of {names}")
    return off


def _parse(path: Path, raw: Any) -> tuple[dict, list[_Key]]:
    if not isinstance(raw, dict):
        raise _err(path, "<top level>", f"expected a mapping, got {type(raw).__name__}")
    unknown = set(raw) - _TOP_FIELDS
    if unknown:
        raise _err(path, sorted(unknown)[0], f"unknown field; allowed: {sorted(_TOP_FIELDS)}")
    for f in ("name", "duration", "keyframes", "reward_weights"):
        if f not in raw:
            raise _err(path, f, "missing (required)")
    if raw["name"] != path.stem:
        raise _err(path, "name", f"{raw['name']!r} must equal the file name {path.stem!r}")
    duration = _num(path, "duration", raw["duration"], 2 * g1.CONTROL_DT, 600.0)
    rw = raw["reward_weights"]
    if not isinstance(rw, dict) or not rw:
        raise _err(path, "reward_weights", "expected a non-empty mapping name -> weight")
    weights = {str(k): _num(path, f"reward_weights.{k}", v) for k, v in rw.items()}
    kfs = raw["keyframes"]
    if not isinstance(kfs, list) or len(kfs) < 1:
        raise _err(path, "keyframes", "expected a non-empty list")
    keys: list[_Key] = []
    x, foot_x = 0.0, 0.0
    for i, k in enumerate(kfs):
        f = f"keyframes[{i}]"
        if not isinstance(k, dict):
            raise _err(path, f, f"expected a mapping, got {k!r}")
        unknown = set(k) - _KEYFRAME_FIELDS
        if unknown:
            raise _err(path, f"{f}.{sorted(unknown)[0]}", f"unknown field; allowed: {sorted(_KEYFRAME_FIELDS)}")
        for req in ("t", "pelvis_height"):
            if req not in k:
                raise _err(path, f"{f}.{req}", "missing (required)")
        t = _num(path, f"{f}.t", k["t"], 0.0, duration)
        if i == 0 and t != 0.0:
            raise _err(path, f"{f}.t", "the first keyframe must be at t = 0")
        if keys and t <= keys[-1].t + 1e-9:
            raise _err(path, f"{f}.t", f"{t} is not after the previous keyframe ({keys[-1].t})")
        h = _num(path, f"{f}.pelvis_height", k["pelvis_height"], 0.3, 1.2)
        x = _num(path, f"{f}.pelvis_x", k.get("pelvis_x", x), -5, 5)
        new_foot_x = _num(path, f"{f}.foot_x", k.get("foot_x", foot_x), -5, 5)
        if new_foot_x != foot_x and not (keys and keys[-1].flight):
            raise _err(path, f"{f}.foot_x", "feet can only move during a flight (the previous keyframe must have "
                       "phase: flight)")
        foot_x = new_foot_x
        phase = k.get("phase", "stance")
        if phase not in ("stance", "flight"):
            raise _err(path, f"{f}.phase", f"{phase!r}; use 'stance' or 'flight'")
        flight = phase == "flight"
        if flight:
            if i == len(kfs) - 1:
                raise _err(path, f"{f}.phase", "a flight must end at a following keyframe (the touch-down)")
            if "apex_foot_clearance" not in k:
                raise _err(path, f"{f}.apex_foot_clearance", "missing (required for phase: flight)")
            clearance = _num(path, f"{f}.apex_foot_clearance", k["apex_foot_clearance"], 0.0, 0.5)
        else:
            if "apex_foot_clearance" in k:
                raise _err(path, f"{f}.apex_foot_clearance", "only allowed with phase: flight")
            clearance = 0.0
        if keys and keys[-1].flight and flight:
            raise _err(path, f"{f}.phase", "two consecutive flights: the touch-down keyframe must be stance")
        keys.append(_Key(t, h, x, foot_x, flight, clearance, _joint_offsets(path, f"{f}.joints", k.get("joints"))))
    return {"name": raw["name"], "duration": duration, "weights": weights,
            "description": str(raw.get("description", "")).strip()}, keys


# ----------------------------------------------------------------------------- trajectory

def _base_and_feet(keys: list[_Key], times: np.ndarray):
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


def _build(path: Path, meta: dict, keys: list[_Key], dt: float) -> Motion:
    T = int(round(meta["duration"] / dt)) + 1
    times = np.arange(T) * dt
    h, vz, az, x, vx, fh, fx, flight = _base_and_feet(keys, times)
    pull = np.flatnonzero(~flight & (az < -GRAVITY - 1e-6))
    if pull.size:
        j = int(pull[0])
        raise _err(path, "keyframes", f"the pelvis accelerates down at {-az[j]:.1f} m/s^2 > g at t = {times[j]:.2f} s "
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
            raise _err(path, "keyframes", f"the {('left', 'right')[side]} leg cannot reach the foot at t = "
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
        raise _err(path, "keyframes", f"{g1.JOINT_NAMES[m]} = {q[j, m]:.3f} rad at t = {times[j]:.2f} s is outside its "
                   f"limits [{lo[m]:.3f}, {hi[m]:.3f}]; make the motion less deep or change the joint offsets")
    dq = np.gradient(q, dt, axis=0)
    fast = np.abs(dq) > g1.VELOCITY_LIMIT
    if fast.any():
        j, m = map(int, np.argwhere(fast)[0])
        raise _err(path, "keyframes", f"{g1.JOINT_NAMES[m]} moves at {dq[j, m]:.1f} rad/s at t = {times[j]:.2f} s, "
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
    return Motion(name=meta["name"], duration=meta["duration"], reward_weights=dict(meta["weights"]), dt=dt,
                  description=meta["description"], source=str(path), flight_windows=windows,
                  takeoff_heights=tuple(k.h for k, _ in fl), takeoff_vz=v0s, **arrays)


# ----------------------------------------------------------------------------- public API

def motions_dir() -> Path:
    return Path(os.environ.get(MOTIONS_ENV_VAR, MOTIONS_DIR))


def available_motions(root: str | os.PathLike | None = None) -> list[str]:
    root = Path(root) if root else motions_dir()
    return sorted(p.stem for p in root.glob("*.yaml")) if root.is_dir() else []


def motion_path(name: str, root: str | os.PathLike | None = None) -> Path:
    root = Path(root) if root else motions_dir()
    p = root / f"{name}.yaml"
    if not p.is_file():
        raise MotionError(f"unknown motion {name!r}; available motions: {available_motions(root)} "
                          f"(files in {root})")
    return p


def load_motion_file(path: str | os.PathLike, dt: float = g1.CONTROL_DT) -> Motion:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise MotionError(f"{path}: not valid YAML: {e}") from e
    except OSError as e:
        raise MotionError(f"{path}: cannot read: {e}") from e
    meta, keys = _parse(path, raw)
    return _build(path, meta, keys, dt)


@functools.lru_cache(maxsize=32)
def _load_cached(path: str, mtime: float, dt: float) -> Motion:
    return load_motion_file(path, dt)


def load_motion(name: str, root: str | os.PathLike | None = None, dt: float = g1.CONTROL_DT) -> Motion:
    """The motion `name` from motions/ (or `root`, or $G1_MOTIONS_DIR). A path to a .yaml also works."""
    if str(name).endswith((".yaml", ".yml")) and Path(name).is_file():
        p = Path(name)
    else:
        p = motion_path(str(name), root)
    return _load_cached(str(p.resolve()), p.stat().st_mtime, dt)


def summary(m: Motion) -> dict:
    """Key numbers of a motion (apex, clearance, take-off velocity, flight time)."""
    out = {"name": m.name, "duration_s": m.duration, "steps": m.num_steps,
           "min_pelvis_height_m": float(m.ref_height.min()), "max_pelvis_height_m": float(m.ref_height.max())}
    if m.flight_windows:
        t0, t1 = m.flight_windows[0]
        sel = m.flight_mask
        out.update(
            flight_time_s=t1 - t0, takeoff_velocity_mps=m.takeoff_velocity(),
            apex_rise_m=m.takeoff_velocity() ** 2 / (2 * GRAVITY),
            apex_pelvis_height_m=m.takeoff_heights[0] + m.takeoff_velocity() ** 2 / (2 * GRAVITY),
            apex_foot_clearance_m=float(m.ref_foot_height[sel].max(axis=0).min()),
            forward_distance_m=float(m.ref_foot_pos[-1, 0, 0] - m.ref_foot_pos[0, 0, 0]),
        )
    out["max_joint_speed_frac_of_limit"] = float((np.abs(m.ref_dq) / g1.VELOCITY_LIMIT).max())
    return out


def plot_motion(m: Motion, out: str | os.PathLike) -> Path:
    import matplotlib

    matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
    import matplotlib.pyplot as plt

    t = m.times
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    ax = axes[0]
    ax.plot(t, m.ref_height, label="pelvis height")
    ax.set_ylabel("m")
    ax2 = ax.twinx()
    ax2.plot(t, m.ref_base_vel_z, "C3", lw=0.8, label="pelvis vz")
    ax2.set_ylabel("m/s")
    ax.legend(loc="upper left")
    ax2.legend(loc="upper right")
    axes[1].plot(t, m.ref_foot_height[:, 0], label="left sole")
    axes[1].plot(t, m.ref_foot_height[:, 1], "--", label="right sole")
    axes[1].set_ylabel("foot height (m)")
    axes[1].legend()
    for name in ("left_hip_pitch_joint", "left_knee_joint", "left_ankle_pitch_joint", "left_shoulder_pitch_joint",
                 "waist_pitch_joint"):
        axes[2].plot(t, m.ref_q[:, g1.joint_index(name)], label=name.removesuffix("_joint"))
    axes[2].set_ylabel("rad")
    axes[2].set_xlabel("t (s)")
    axes[2].legend(fontsize=8)
    for a in axes:
        for t0, t1 in m.flight_windows:
            a.axvspan(t0, t1, color="0.85", zorder=0)
        a.grid(alpha=0.3)
    s = summary(m)
    title = f"{m.name}: {m.duration} s"
    if m.flight_windows:
        title += (f", take-off {s['takeoff_velocity_mps']:.2f} m/s, apex rise {s['apex_rise_m'] * 100:.1f} cm, "
                  f"foot clearance {s['apex_foot_clearance_m'] * 100:.1f} cm")
    fig.suptitle(title)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m train.motions", description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true", help="list the available motions")
    ap.add_argument("--plot", metavar="MOTION", help="write a preview PNG of MOTION")
    ap.add_argument("--out", help="PNG path (default runs/motions/<motion>.png)")
    args = ap.parse_args(argv)
    if args.plot:
        try:
            m = load_motion(args.plot)
        except MotionError as e:
            print(f"error: {e}")
            return 2
        out = plot_motion(m, args.out or Path("runs") / "motions" / f"{m.name}.png")
        for k, v in summary(m).items():
            print(f"  {k}: {v:.4g}" if isinstance(v, float) else f"  {k}: {v}")
        print(out)
        return 0
    for n in available_motions():
        print(n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
