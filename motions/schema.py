"""The keyframe YAML schema of `motions/<name>.yaml`, validated with pydantic.

    name: jump                  # must equal the file name
    description: free text
    duration: 3.6               # s; after the last keyframe the last pose is held
    ballistic: pelvis           # what flies ballistically: pelvis (default: the keyframe pelvis path as
                                #   written) | com (the pelvis x/z is solved so the whole-robot centre of
                                #   mass flies ballistically; see motions.reference)
    keyframes:                  # strictly increasing t, the first at t = 0
      - t: 0.0
        pelvis_height: 0.785    # m, world z of the pelvis (upright)
        pelvis_x: 0.0           # m, world x of the pelvis (optional, default: previous keyframe, 0 first)
        pelvis_pitch: 0.0       # rad, the pelvis's pitch about y, + leans forward (optional, absent -> 0: level);
                                #    interpolated like the joints, the legs solved for it (feet stay flat)
        heel_lift: 0.0          # rad, the feet's pitch toes-down about their toe spheres (optional, absent -> 0:
                                #    flat): a take-off rolling onto the toes; interpolated as pelvis_pitch
        heel_rise_s: 0.15       # s (optional, with heel_lift): reach this keyframe's heel lift over only this
                                #    long before it (smootherstep; the previous keyframe's value held until then)
        foot_x: 0.0             # m, both feet's x relative to their home-pose stance position under a pelvis
                                #    at x = 0 (optional, default: unchanged; it may only change across a flight)
        phase: stance           # stance (default) | flight: the segment from this keyframe to the next is
                                #    airborne (both feet clear)
        apex_foot_clearance: 0.1  # flight only: sole height at mid-flight, m
        flight_feet: tuck       # flight only: tuck (default: soles c * 64 s^3 (1 - s)^3, at rest at both ends) |
                                #    follow (soles rise with the pelvis, legs held at their take-off shape, plus
                                #    a tuck that makes up the rest of the clearance; see motions.reference)
        joints:                 # offsets (rad) from g1.DEFAULT_JOINT_POS at this keyframe; absent -> 0
          waist_pitch: 0.1      #   a full joint name, or a name without left_/right_ (both sides;
          shoulder_roll: 0.1    #   roll and yaw mirrored for the right side, so this is symmetric)
    reward_weights: {joint_pos: 1.0, ...}   # name -> weight, read by train/rewards.py

Two layers: the pydantic models check each field on its own (unknown keys rejected, types,
finite numbers, ranges; numbers are strict: a bool or a string is not a number); `parse_motion`
then checks the rules that span fields and keyframes (name = file name, t order and range, feet
move only across a flight, a flight's clearance and touch-down, joint names). Every failure is a
MotionError "<file>: <field>: <what is wrong and the fix>", the field written as
`keyframes[1].joints.knee`.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import pydantic
from pydantic import BaseModel, ConfigDict, Field

from motions.kinematics import IK_JOINTS
from motions.motion import MotionError, field_error
from robots import g1
from robots.physics import GRAVITY

_MIRRORED = ("roll", "yaw")  # right-side offset = -left-side offset for these short names


def _num(lo: float | None = None, hi: float | None = None):
    """A finite number (int or float, not bool or str) in [lo, hi]."""
    return Annotated[float, Field(strict=True, allow_inf_nan=False, ge=lo, le=hi)]


class KeyframeSpec(BaseModel):
    """One keyframe as written in the file (defaults resolved by `parse_motion`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    t: _num(0.0)  # <= duration: checked by parse_motion
    pelvis_height: _num(0.3, 1.2)
    pelvis_x: _num(-5, 5) | None = None
    pelvis_pitch: _num(-0.8, 0.8) | None = None
    heel_lift: _num(0.0, 0.8) | None = None
    heel_rise_s: _num(0.02, 2.0) | None = None
    foot_x: _num(-5, 5) | None = None
    phase: Literal["stance", "flight"] = "stance"
    apex_foot_clearance: _num(0.0, 0.5) | None = None
    flight_feet: Literal["tuck", "follow"] | None = None
    joints: dict[str, _num(-math.pi, math.pi)] | None = None


class MotionSpec(BaseModel):
    """A motion file as written."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, Field(strict=True)]
    description: Annotated[str, Field(strict=True)] | None = ""
    duration: _num(2 * g1.CONTROL_DT, 600.0)
    ballistic: Literal["pelvis", "com"] = "pelvis"
    keyframes: list[KeyframeSpec] = Field(min_length=1)
    reward_weights: dict[str, _num()] = Field(min_length=1)


@dataclasses.dataclass(frozen=True)
class MotionMeta:
    name: str
    duration: float  # s
    reward_weights: dict[str, float]
    description: str
    ballistic: str = "pelvis"  # "pelvis" | "com": what the flight makes ballistic (motions.reference)


@dataclasses.dataclass(frozen=True)
class Keyframe:
    """A keyframe with its defaults resolved: what the trajectory builder reads."""

    t: float  # s
    h: float  # pelvis height, m
    x: float  # pelvis x, m
    foot_x: float  # both feet's x offset from the home stance, m
    flight: bool  # the segment to the next keyframe is airborne
    clearance: float  # apex sole height of that flight, m (0 in stance)
    offsets: np.ndarray  # (29,) joint offsets from g1.DEFAULT_JOINT_POS, rad
    feet: str = "tuck"  # flight only: "tuck" | "follow" (motions.reference)
    pitch: float = 0.0  # pelvis pitch about y, rad (+: leaning forward)
    heel: float = 0.0  # the feet's toes-down pitch about the toe spheres, rad
    heel_rise: float = 0.0  # s: the heel lift is reached over this long before the keyframe (0: interpolated)


def follow_rise(T: float) -> float:
    """Mid-flight height of a ballistic flight of duration T above the straight line from take-off to touch-down
    (g T^2 / 8): what `flight_feet: follow` soles rise by without a tuck."""
    return GRAVITY * T**2 / 8


def _field(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<top level>"


def _allowed(loc: tuple) -> list[str]:
    model = KeyframeSpec if loc[:1] == ("keyframes",) else MotionSpec
    return sorted(model.model_fields)


_NOT_A_NUMBER = "expected a finite number, got {input!r}"
_NOT_A_MAPPING = "expected a mapping, got {kind}"
# pydantic error type -> what is wrong and the fix, in the words of the old hand-written checks
_EXPLAIN = {
    "missing": "missing (required)",
    "extra_forbidden": "unknown field; allowed: {allowed}",
    "float_type": _NOT_A_NUMBER, "finite_number": _NOT_A_NUMBER, "float_parsing": _NOT_A_NUMBER,
    "greater_than_equal": "{input} is too small: it must be >= {ctx[ge]}",
    "less_than_equal": "{input} is too large: it must be <= {ctx[le]}",
    "model_type": _NOT_A_MAPPING, "dict_type": _NOT_A_MAPPING, "model_attributes_type": _NOT_A_MAPPING,
    "literal_error": "{input!r}; use {ctx[expected]}",
}


def _explain(e: dict) -> str:
    """One pydantic error -> the message part after "<file>: <field>: "."""
    template = _EXPLAIN.get(e["type"], "{msg} (got {input!r})")
    value = e.get("input")
    return template.format(input=value, kind=type(value).__name__, ctx=e.get("ctx", {}), msg=e["msg"],
                           allowed=_allowed(e["loc"]) if e["type"] == "extra_forbidden" else None)


def _validation_error(path, exc: pydantic.ValidationError) -> MotionError:
    # unknown keys first: a misspelt key also makes the intended one "missing"
    errs = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    lines = [f"{_field(e['loc'])}: {_explain(e)}" for e in errs]
    more = f" (and {len(lines) - 1} more: {'; '.join(lines[1:])})" if len(lines) > 1 else ""
    return MotionError(f"{path}: {lines[0]}{more}")


def joint_offsets(path, field, joints: dict[str, float] | None) -> np.ndarray:
    """Keyframe joint offsets (full or side-less names) -> (29,) offsets in motor order."""
    off = np.zeros(g1.NUM_MOTORS)
    if joints is None:
        return off
    for key, v in joints.items():
        short = str(key).removesuffix("_joint")
        if short.endswith(IK_JOINTS):
            raise field_error(path, f"{field}.{key}", f"leg pitch joints {list(IK_JOINTS)} are set by the leg IK from "
                             "pelvis_height/foot_x; remove this offset")
        if f"{short}_joint" in g1.JOINT_NAMES:
            off[g1.joint_index(f"{short}_joint")] += v
        elif f"left_{short}_joint" in g1.JOINT_NAMES:
            sign = -1.0 if short.endswith(_MIRRORED) else 1.0
            off[g1.joint_index(f"left_{short}_joint")] += v
            off[g1.joint_index(f"right_{short}_joint")] += sign * v
        else:
            names = sorted({n.removesuffix("_joint").removeprefix("left_").removeprefix("right_") for n in g1.JOINT_NAMES})
            raise field_error(path, f"{field}.{key}", f"unknown joint; use a full G1 joint name or one of {names}")
    return off


def parse_motion(path: Path, raw: Any) -> tuple[MotionMeta, list[Keyframe]]:
    """The YAML document `raw` of file `path` -> (meta, keyframes), or a MotionError naming the field."""
    try:
        spec = MotionSpec.model_validate(raw)
    except pydantic.ValidationError as e:
        raise _validation_error(path, e) from None
    if spec.name != path.stem:
        raise field_error(path, "name", f"{spec.name!r} must equal the file name {path.stem!r}")
    duration = spec.duration
    keys: list[Keyframe] = []
    x, foot_x = 0.0, 0.0
    last = len(spec.keyframes) - 1
    for i, k in enumerate(spec.keyframes):
        f = f"keyframes[{i}]"
        t = k.t
        if t > duration:
            raise field_error(path, f"{f}.t", f"{t} is outside [0.0, {duration}] (the motion's duration)")
        if i == 0 and t != 0.0:
            raise field_error(path, f"{f}.t", "the first keyframe must be at t = 0")
        if keys and t <= keys[-1].t + 1e-9:
            raise field_error(path, f"{f}.t", f"{t} is not after the previous keyframe ({keys[-1].t})")
        x = x if k.pelvis_x is None else k.pelvis_x
        new_foot_x = foot_x if k.foot_x is None else k.foot_x
        if new_foot_x != foot_x and not (keys and keys[-1].flight):
            raise field_error(path, f"{f}.foot_x", "feet can only move during a flight (the previous keyframe must have "
                             "phase: flight)")
        foot_x = new_foot_x
        flight = k.phase == "flight"
        if flight:
            if i == last:
                raise field_error(path, f"{f}.phase", "a flight must end at a following keyframe (the touch-down)")
            if k.apex_foot_clearance is None:
                raise field_error(path, f"{f}.apex_foot_clearance", "missing (required for phase: flight)")
            clearance = k.apex_foot_clearance
        else:
            for name in ("apex_foot_clearance", "flight_feet"):
                if getattr(k, name) is not None:
                    raise field_error(path, f"{f}.{name}", "only allowed with phase: flight")
            clearance = 0.0
        if keys and keys[-1].flight and keys[-1].feet == "follow":
            rise = follow_rise(t - keys[-1].t)
            if keys[-1].clearance < rise - 1e-9:
                raise field_error(path, f"keyframes[{i - 1}].apex_foot_clearance", f"{keys[-1].clearance} m is below "
                                 f"what flight_feet: follow gives without a tuck ({rise:.3f} m for this {t - keys[-1].t:.2f} s "
                                 "flight); raise it or use flight_feet: tuck")
        if k.heel_rise_s is not None and (not keys or keys[-1].flight or k.heel_rise_s > t - keys[-1].t + 1e-9):
            raise field_error(path, f"{f}.heel_rise_s", "needs a previous stance keyframe at least that long before "
                             "(the rise is the end of the stance segment leading to this keyframe)")
        if keys and keys[-1].flight and flight:
            raise field_error(path, f"{f}.phase", "two consecutive flights: the touch-down keyframe must be stance")
        keys.append(Keyframe(t, k.pelvis_height, x, foot_x, flight, clearance,
                             joint_offsets(path, f"{f}.joints", k.joints), k.flight_feet or "tuck",
                             k.pelvis_pitch or 0.0, k.heel_lift or 0.0, k.heel_rise_s or 0.0))
    meta = MotionMeta(name=spec.name, duration=duration, reward_weights=dict(spec.reward_weights),
                      description=(spec.description or "").strip(), ballistic=spec.ballistic)
    return meta, keys
