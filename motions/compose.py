"""Compose a whole-body clip: pelvis pose and upper-body waypoints in, a BeyondMimic-style `.npz` out, with the
legs solved by inverse kinematics on the bridge model so both feet stay planted where the home pose puts them.

    python -m motions compose motions/compose/reach_twist.yaml motions/reach_twist.npz

The spec (YAML, validated by pydantic; errors name the file and field):

    fps: 30                       # the clip's frame rate
    waypoints:                    # strictly increasing t, the first at t = 0
      - t: 0.0
        pelvis: {x: 0, y: 0, z: 0.785, roll: 0, pitch: 0, yaw: 0}   # m, rad; each key optional (default: home)
        joints: {waist_yaw: 0.3}  # offsets (rad) from g1.DEFAULT_JOINT_POS, names as in motion YAML files;
                                  #   leg joints are solved, not given
Between waypoints each value follows a smootherstep (C2, at rest at every waypoint), so the clip starts and ends
at rest. The legs (12 joints) are solved per frame by damped Gauss-Newton on both feet's position and orientation
(6 + 6 equations, warm-started from the previous frame); a frame whose feet end up more than IK_TOL_M from the
planted pose (out of reach, or a joint beyond its limits) is a MotionError naming the time. What this makes is a
clip file of the field's format; `motions.clips` imports it like any other (resampling, contact labels, flight
windows from FK).
"""
from __future__ import annotations

import math
from pathlib import Path

import mujoco
import numpy as np
import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field

from motions.motion import MotionError, field_error
from motions.reference import smootherstep
from motions.schema import _num, joint_offsets
from robots import g1

IK_TOL_M = 1e-4  # m (and rad): the feet's pose error a solved frame may keep
IK_ITERS = 50
_LEG = [g1.joint_index(n) for n in g1.JOINT_NAMES if any(s in n for s in ("hip", "knee", "ankle"))]
_PELVIS_KEYS = ("x", "y", "z", "roll", "pitch", "yaw")
_HOME_PELVIS = (0.0, 0.0, g1.DEFAULT_BASE_HEIGHT, 0.0, 0.0, 0.0)


class PelvisSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    x: _num(-1, 1) = 0.0
    y: _num(-1, 1) = 0.0
    z: _num(0.3, 1.0) = g1.DEFAULT_BASE_HEIGHT
    roll: _num(-0.5, 0.5) = 0.0
    pitch: _num(-0.8, 0.8) = 0.0
    yaw: _num(-math.pi, math.pi) = 0.0


class WaypointSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    t: _num(0.0, 600.0)
    pelvis: PelvisSpec = PelvisSpec()
    joints: dict[str, _num(-math.pi, math.pi)] | None = None


class ComposeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    fps: _num(10.0, 1000.0) = 30.0
    waypoints: list[WaypointSpec] = Field(min_length=2)


def load_spec(path: str | Path) -> ComposeSpec:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
        spec = ComposeSpec.model_validate(raw)
    except (OSError, yaml.YAMLError) as e:
        raise MotionError(f"{path}: cannot read the compose spec: {e}") from None
    except pydantic.ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise field_error(path, loc, f"{err['msg']} (see motions/compose.py for the spec)") from None
    ts = [w.t for w in spec.waypoints]
    if ts[0] != 0.0:
        raise field_error(path, "waypoints[0].t", "the first waypoint must be at t = 0")
    for i in range(1, len(ts)):
        if ts[i] <= ts[i - 1]:
            raise field_error(path, f"waypoints[{i}].t", f"{ts[i]} is not after the previous waypoint ({ts[i - 1]})")
    for i, w in enumerate(spec.waypoints):
        legs = [k for k in (w.joints or {}) if any(s in k for s in ("hip", "knee", "ankle"))]
        if legs:
            raise field_error(path, f"waypoints[{i}].joints", f"leg joints {legs} are solved by the IK (feet planted); "
                             "remove them and move the pelvis instead")
        joint_offsets(path, f"waypoints[{i}].joints", w.joints)
    return spec


def waypoint_tracks(path, spec: ComposeSpec, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(T, 6) pelvis x, y, z, roll, pitch, yaw and (T, 29) joint offsets at `times` (smootherstep between
    waypoints, the last waypoint held)."""
    kt = np.array([w.t for w in spec.waypoints])
    kp = np.array([[getattr(w.pelvis, k) for k in _PELVIS_KEYS] for w in spec.waypoints])
    ko = np.stack([joint_offsets(path, f"waypoints[{i}].joints", w.joints) for i, w in enumerate(spec.waypoints)])
    i = np.clip(np.searchsorted(kt, times, side="right") - 1, 0, len(kt) - 2)
    s = smootherstep((times - kt[i]) / (kt[i + 1] - kt[i]))[:, None]
    return kp[i] + (kp[i + 1] - kp[i]) * s, ko[i] + (ko[i + 1] - ko[i]) * s


def _quat_rpy(roll: float, pitch: float, yaw: float) -> np.ndarray:
    q = np.empty(4)
    mujoco.mju_euler2Quat(q, np.array([roll, pitch, yaw]), "xyz")  # intrinsic x-y-z: roll, then pitch, then yaw
    return q


def solve_legs(path, times, pelvis: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Root positions (T, 3), root quaternions (T, 4, w x y z) and joints (T, 29): the given pelvis pose and
    upper body, the legs solved so both feet keep the home pose's world position and orientation."""
    from motions.clips import _fk_model
    from robots import model as RM

    model, qadr = _fk_model()[:2]
    d = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, d, model.key("home").id)
    mujoco.mj_kinematics(model, d)
    feet = [model.body(n).id for n in g1.FOOT_BODIES]
    goal_p = [d.xpos[b].copy() for b in feet]
    goal_q = [d.xquat[b].copy() for b in feet]
    leg_dofs = RM.motor_dof_adr(model)[_LEG]
    lo, hi = g1.JOINT_POS_MIN[_LEG], g1.JOINT_POS_MAX[_LEG]
    T = len(times)
    pos, quat, q = np.zeros((T, 3)), np.zeros((T, 4)), np.zeros((T, 29))
    legs = g1.DEFAULT_JOINT_POS[_LEG].copy()
    jp, jr = np.zeros((3, model.nv)), np.zeros((3, model.nv))
    for k in range(T):
        pos[k] = pelvis[k, :3]
        quat[k] = _quat_rpy(*pelvis[k, 3:])
        q[k] = g1.DEFAULT_JOINT_POS + offsets[k]
        for _ in range(IK_ITERS):
            q[k, _LEG] = legs
            d.qpos[:3], d.qpos[3:7], d.qpos[qadr] = pos[k], quat[k], q[k]
            mujoco.mj_kinematics(model, d)
            mujoco.mj_comPos(model, d)  # mj_jacBody needs it
            err, J = [], []
            for f, b in enumerate(feet):
                er = np.zeros(3)
                mujoco.mju_subQuat(er, goal_q[f], d.xquat[b])  # current -> goal rotation, in the foot's frame
                mujoco.mj_jacBody(model, d, jp, jr, b)
                R = d.xmat[b].reshape(3, 3)
                err += [goal_p[f] - d.xpos[b], R @ er]
                J += [jp[:, leg_dofs], jr[:, leg_dofs]]
            e, Jm = np.concatenate(err), np.concatenate(J)
            if np.abs(e).max() < 1e-12:  # Gauss-Newton converges quadratically: to rounding
                break
            step = np.linalg.solve(Jm.T @ Jm + 1e-6 * np.eye(len(_LEG)), Jm.T @ e)
            legs = np.clip(legs + step, lo, hi)
        if np.abs(e).max() > IK_TOL_M:
            raise field_error(path, "waypoints", f"the legs cannot keep the feet planted at t = {times[k]:.2f} s "
                             f"(pelvis {np.round(pelvis[k], 3).tolist()}: foot pose error {np.abs(e).max():.2g}); "
                             "move the pelvis less far from the home pose there")
        q[k, _LEG] = legs
    return pos, quat, q


def compose(spec_path: str | Path, out: str | Path) -> Path:
    """Write the composed clip of `spec_path` to `out` (.npz: fps, joint_pos = root xyz + quat wxyz + 29 joints,
    joint_names)."""
    spec = load_spec(spec_path)
    T = int(round(spec.waypoints[-1].t * spec.fps)) + 1
    times = np.arange(T) / spec.fps
    pelvis, offsets = waypoint_tracks(spec_path, spec, times)
    pos, quat, q = solve_legs(spec_path, times, pelvis, offsets)
    out = Path(out)
    np.savez(out, fps=np.array([spec.fps]), joint_pos=np.concatenate([pos, quat, q], axis=1),
             joint_names=np.array(g1.JOINT_NAMES))
    return out
