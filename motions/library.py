"""The motion library: find, load and summarise motions.

Motion files are `<name>.yaml` (keyframes), imported clips `<name>.npz` / `<name>.csv` (motions.clips) or
clip sources `<name>.source.yaml` (a window of a published file built on first use, motions.sources) in this
package's directory, or in $G1_MOTIONS_DIR when it is set, or in an
explicit `root`; a path to any of these loads too. Loading is cached on (resolved path, mtime,
dt), so an edited file is re-read and a loaded Motion is shared (its arrays are read-only).
"""
from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import yaml

from motions.clip_files import CLIP_SUFFIXES
from motions.motion import Motion, MotionError
from motions.reference import build_motion
from motions.schema import parse_motion
from motions.sources import SOURCE_SUFFIX
from robots import g1
from robots.physics import GRAVITY

MOTIONS_DIR = Path(__file__).resolve().parent
MOTIONS_ENV_VAR = "G1_MOTIONS_DIR"
MOTION_SUFFIXES = (SOURCE_SUFFIX, ".yaml") + CLIP_SUFFIXES  # searched in this order for a name


def _motion_name(p: Path) -> str | None:
    """The motion name of a file in a motions folder (None: not a motion file)."""
    for suffix in MOTION_SUFFIXES:
        if p.name.endswith(suffix):
            return p.name[: -len(suffix)]
    return None


def motions_dir() -> Path:
    return Path(os.environ.get(MOTIONS_ENV_VAR, MOTIONS_DIR))


def available_motions(root: str | os.PathLike | None = None) -> list[str]:
    root = Path(root) if root else motions_dir()
    if not root.is_dir():
        return []
    return sorted({n for p in root.iterdir() if p.is_file() and (n := _motion_name(p))})


def motion_path(name: str, root: str | os.PathLike | None = None) -> Path:
    root = Path(root) if root else motions_dir()
    for suffix in MOTION_SUFFIXES:
        p = root / f"{name}{suffix}"
        if p.is_file():
            return p
    raise MotionError(f"unknown motion {name!r}; available motions: {available_motions(root)} "
                      f"(.yaml keyframes, .npz/.csv clips or .source.yaml clip sources in {root}; or pass a path "
                      "to such a file)")


def load_motion_file(path: str | os.PathLike, dt: float = g1.CONTROL_DT) -> Motion:
    """The motion in the YAML or clip file `path` (uncached); any problem is a MotionError naming the file."""
    path = Path(path)
    if path.name.endswith(SOURCE_SUFFIX):
        from motions.sources import load_source

        return load_source(path, dt)
    if path.suffix in CLIP_SUFFIXES:
        from motions.clips import load_clip

        return load_clip(path, dt)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise MotionError(f"{path}: not valid YAML: {e}") from e
    except OSError as e:
        raise MotionError(f"{path}: cannot read: {e}") from e
    meta, keys = parse_motion(path, raw)
    return build_motion(path, meta, keys, dt)


@functools.lru_cache(maxsize=32)
def _load_cached(path: str, mtime: float, dt: float) -> Motion:
    return load_motion_file(path, dt)


def load_motion(name: str, root: str | os.PathLike | None = None, dt: float = g1.CONTROL_DT) -> Motion:
    """The motion `name` from motions/ (or `root`, or $G1_MOTIONS_DIR). A path to a .yaml, .npz or .csv
    file also works."""
    if str(name).endswith((".yaml", ".yml") + CLIP_SUFFIXES):
        p = Path(name)
        if not p.is_file():
            raise MotionError(f"{p}: no such motion file (a name without a suffix is looked up in {motions_dir()})")
    else:
        p = motion_path(str(name), root)
    return _load_cached(str(p.resolve()), p.stat().st_mtime, dt)


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


def contact_phases(m: Motion) -> list[tuple[str, float, float]]:
    """(phase, t_start, t_end) runs covering [0, duration]. Keyframe motions: "stance" / "flight" from
    the keyframe times of the flight windows (both feet share the phase: flights are two-footed).
    Imported clips: runs of the FK contact labels, "stance" (both feet), "left" / "right" (that foot
    only), "flight"; a run ends where the next begins."""
    if m.source_fps is not None and m.contact is not None:
        c = np.asarray(m.contact, bool)
        labels = np.where(c[:, 0] & c[:, 1], "stance", np.where(c[:, 0], "left", np.where(c[:, 1], "right", "flight")))
        t, out, k0 = m.times, [], 0
        for k in range(1, len(labels) + 1):
            if k == len(labels) or labels[k] != labels[k0]:
                out.append((str(labels[k0]), round(float(t[k0]), 9), round(float(t[min(k, len(t) - 1)]), 9)))
                k0 = k
        return out
    out, t = [], 0.0
    for t0, t1 in m.flight_windows:
        if t0 > t:
            out.append(("stance", t, t0))
        out.append(("flight", t0, t1))
        t = t1
    if t < m.duration or not out:
        out.append(("stance", t, m.duration))
    return out


def summary(m: Motion) -> dict:
    """Key numbers of a motion (apex, clearance, take-off velocity, flight time)."""
    out = {"name": m.name, "duration_s": m.duration, "steps": m.num_steps,
           "min_pelvis_height_m": float(m.ref_height.min()), "max_pelvis_height_m": float(m.ref_height.max())}
    if m.flight_windows:
        t0, t1 = m.flight_windows[0]
        sel = m.flight_mask
        vz, rise = m.takeoff_velocity(), m.takeoff_velocity() ** 2 / (2 * GRAVITY)
        i0, i1 = int(round(t0 / m.dt)), int(round(t1 / m.dt))
        h = m.ref_height[i0:i1 + 1]
        if not np.allclose(np.diff(h, 2) / m.dt**2, -GRAVITY, atol=1e-6):  # `ballistic: com`: the pelvis is not
            vz = float(m.ref_base_lin_vel[i0, 2]) if m.ref_base_lin_vel is not None else float(np.gradient(h, m.dt)[0])
            rise = float(h.max() - h[0])
        out.update(
            flight_time_s=t1 - t0, takeoff_velocity_mps=vz, apex_rise_m=rise,
            apex_pelvis_height_m=float(h[0]) + rise if h.size else m.takeoff_heights[0] + rise,
            apex_foot_clearance_m=float(m.ref_foot_height[sel].max(axis=0).min()),
            forward_distance_m=float(m.ref_foot_pos[-1, 0, 0] - m.ref_foot_pos[0, 0, 0]),
        )
    out["max_joint_speed_frac_of_limit"] = float((np.abs(m.ref_dq) / g1.VELOCITY_LIMIT).max())
    return out
