"""The field's motion-clip files, read into one raw form and written from a Motion.

Formats (see the README's "Motions"):
- BeyondMimic / mjlab / holosoma `.npz`: `fps` (scalar or [1]), `joint_pos` (N, 7 + 29): root
  x, y, z (m), root quaternion **w, x, y, z**, 29 joint angles (rad); optional `joint_names` (29,)
  naming the columns (mapped to the motor order by name; without them the columns are taken to be
  in motor order), `joint_vel`, `body_*` (not needed: velocities and feet come from our own FK).
- LAFAN-retargeted `.csv`: no header, 30 Hz unless told otherwise, one row per frame: root x, y, z,
  root quaternion **x, y, z, w**, 29 joint angles in motor order.

`read_clip_file` returns a `RawClip` (quaternions always w, x, y, z, joints always in motor order)
or raises a MotionError naming the file, and where it applies the frame and joint.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from motions.motion import Motion, MotionError
from robots import g1

CSV_FPS = 30.0  # LAFAN-retargeted csv files carry no rate
CLIP_SUFFIXES = (".npz", ".csv")
ROOT_COLS = 7


@dataclasses.dataclass(frozen=True)
class RawClip:
    """A clip as read: frames at `fps`, root quaternion w, x, y, z, joints in g1.JOINT_NAMES order."""

    path: Path
    fps: float
    root_pos: np.ndarray  # (N, 3)
    root_quat: np.ndarray  # (N, 4) w, x, y, z
    joints: np.ndarray  # (N, 29)
    joint_order: str  # "by name" | "motor order (file has no joint names)"


def _err(path, msg: str) -> MotionError:
    return MotionError(f"{path}: {msg}")


def _column_name(col: int, joint_names=g1.JOINT_NAMES) -> str:
    roots = ("root x", "root y", "root z", "root quaternion 0", "root quaternion 1", "root quaternion 2",
             "root quaternion 3")
    return roots[col] if col < ROOT_COLS else joint_names[col - ROOT_COLS]


def _check_table(path, table: np.ndarray, what: str, joint_names=g1.JOINT_NAMES) -> None:
    """Rows x (7 + 29) finite numbers, at least two frames."""
    if table.ndim != 2:
        raise _err(path, f"{what} has shape {table.shape}; expected (frames, 7 + 29)")
    n, c = table.shape
    if c != ROOT_COLS + g1.NUM_MOTORS:
        dof = c - ROOT_COLS
        hint = (" (a 23-DoF G1 clip: this robot is the 29-DoF G1; retarget it to the 29-DoF model, whose wrists "
                "and waist add 6 joints)" if dof == 23 else "")
        raise _err(path, f"{what} has {c} columns = 7 root + {dof} joints; the G1 needs 7 + 29 = 36{hint}")
    if n == 0:
        raise _err(path, f"{what} is empty (0 frames); a clip needs at least two frames")
    if n == 1:
        raise _err(path, f"{what} has one frame; a clip needs at least two frames to define a motion")
    bad = ~np.isfinite(table)
    if bad.any():
        f, col = map(int, np.argwhere(bad)[0])
        raise _err(path, f"frame {f}: {_column_name(col, joint_names)} is {table[f, col]} (non-finite; "
                   f"{int(bad.any(axis=1).sum())} rows affected); fix or drop those rows")


def _fps(path, raw) -> float:
    a = np.asarray(raw, dtype=float).reshape(-1)
    if a.size != 1 or not np.isfinite(a[0]) or a[0] <= 0:
        raise _err(path, f"fps = {raw!r}; expected one positive number (frames per second)")
    return float(a[0])


def _map_joint_names(path, names) -> np.ndarray:
    """Column index in the file of each g1.JOINT_NAMES entry."""
    names = [str(n) for n in np.asarray(names).reshape(-1)]
    if len(names) == 23:
        raise _err(path, "joint_names lists 23 joints (a 23-DoF G1 clip); this robot is the 29-DoF G1")
    unknown = [n for n in names if n not in g1.JOINT_NAMES]
    missing = [n for n in g1.JOINT_NAMES if n not in names]
    if unknown or missing or len(names) != g1.NUM_MOTORS:
        raise _err(path, f"joint_names do not match the G1's 29 joints: unknown {unknown}, missing {missing} "
                   f"(expected the names of robots/g1.py JOINT_NAMES)")
    return np.array([names.index(n) for n in g1.JOINT_NAMES])


def read_npz(path: Path) -> RawClip:
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise _err(path, f"cannot read as npz: {e}") from e
    with data:
        files = set(data.files)
        if "joint_pos" not in files:
            raise _err(path, f"no 'joint_pos' array (has {sorted(files)}); a BeyondMimic/mjlab/holosoma clip "
                       "has joint_pos (frames, 7 + 29)")
        if "fps" not in files:
            raise _err(path, "no 'fps' entry: the frame rate is missing; add it (np.savez(..., fps=50, ...))")
        fps = _fps(path, data["fps"])
        table = np.asarray(data["joint_pos"], dtype=float)
        names = np.asarray(data["joint_names"]) if "joint_names" in files else None
    file_names = g1.JOINT_NAMES
    order = np.arange(g1.NUM_MOTORS)
    if names is not None:
        order = _map_joint_names(path, names)
        file_names = tuple(str(n) for n in names.reshape(-1))
    _check_table(path, table, "joint_pos", file_names)
    return RawClip(path, fps, table[:, :3], table[:, 3:7], table[:, ROOT_COLS:][:, order],
                   "by name" if names is not None else "motor order (file has no joint names)")


def read_csv(path: Path, fps: float = CSV_FPS) -> RawClip:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise _err(path, f"cannot read: {e}") from e
    rows = [ln for ln in text.splitlines() if ln.strip()]
    if not rows:
        raise _err(path, "empty file (0 frames); a clip needs at least two frames")
    table = []
    for i, ln in enumerate(rows):
        try:
            table.append([float(x) for x in ln.split(",")])
        except ValueError as e:
            raise _err(path, f"frame {i}: not a row of numbers ({e}); the LAFAN csv has no header") from e
    widths = {len(r) for r in table}
    if len(widths) > 1:
        i = next(i for i, r in enumerate(table) if len(r) != len(table[0]))
        raise _err(path, f"frame {i}: {len(table[i])} columns, frame 0 has {len(table[0])}")
    table = np.asarray(table, dtype=float)
    _check_table(path, table, "the csv table")
    xyzw = table[:, 3:7]
    return RawClip(Path(path), float(fps), table[:, :3], xyzw[:, [3, 0, 1, 2]], table[:, ROOT_COLS:],
                   "motor order (csv)")


def read_clip_file(path: str | os.PathLike, fps: float | None = None) -> RawClip:
    """The clip in `path` (.npz or .csv); `fps` overrides the csv's 30 Hz (npz files carry their own)."""
    path = Path(path)
    if not path.is_file():
        raise MotionError(f"{path}: no such clip file")
    if path.suffix == ".npz":
        return read_npz(path)
    if path.suffix == ".csv":
        return read_csv(path, CSV_FPS if fps is None else fps)
    raise MotionError(f"{path}: unknown clip format {path.suffix!r}; use .npz (BeyondMimic/mjlab/holosoma) or "
                      ".csv (LAFAN-retargeted)")


def motion_root_quat(m: Motion) -> np.ndarray:
    q = getattr(m, "ref_base_quat", None)
    return np.tile([1.0, 0, 0, 0], (m.num_steps, 1)) if q is None else np.asarray(q, float)


def write_npz(path, m: Motion, joint_names: bool = True, **extra) -> Path:
    """`m` as a BeyondMimic-style npz at the motion's rate (the round-trip oracle of the tests)."""
    path = Path(path)
    table = np.concatenate([m.ref_base_pos, motion_root_quat(m), m.ref_q], axis=1)
    arrays = dict(fps=np.array([round(1 / m.dt)]), joint_pos=table, **extra)
    if joint_names:
        arrays["joint_names"] = np.array(g1.JOINT_NAMES)
    np.savez(path, **arrays)
    return path


def write_csv(path, m: Motion) -> Path:
    """`m` as a LAFAN-style csv (no header, quaternion x, y, z, w) at the motion's rate."""
    path = Path(path)
    wxyz = motion_root_quat(m)
    table = np.concatenate([m.ref_base_pos, wxyz[:, [1, 2, 3, 0]], m.ref_q], axis=1)
    np.savetxt(path, table, delimiter=",", fmt="%.9g")
    return path
