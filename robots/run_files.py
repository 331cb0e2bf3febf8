"""What every room's runs write: the stamped run folder (runs/<...>/<stamp>) and JSON-ready values.
In robots/ because that is the one room every writer (train, eval, deploy, calibration) may import."""
from __future__ import annotations

import dataclasses
import datetime as _dt
import math
from collections.abc import Mapping
from pathlib import Path, PurePath

import numpy as np


def stamp(precise: bool = False) -> str:
    """Local time as a folder name: YYYYmmdd-HHMMSS, with -ffffff (microseconds) when precise."""
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f" if precise else "%Y%m%d-%H%M%S")


def stamped_dir(parent: str | PurePath, *, precise: bool = False, tag: str = "", exist_ok: bool = False) -> Path:
    """parent/<stamp>[-tag] (`stamp`), created with its parents."""
    d = Path(parent) / (stamp(precise) + (f"-{tag}" if tag else ""))
    d.mkdir(parents=True, exist_ok=exist_ok)
    return d


def jsonable(x, *, finite: bool = False):
    """x as plain Python for json (and yaml), recursively: mappings (keys as str) and dataclass instances
    as dicts, lists and tuples as lists, arrays as nested lists, NumPy scalars and 0-d arrays (NumPy,
    JAX) as Python scalars, paths as str; anything else as it is. finite: a Python float that is not
    finite becomes None (strict JSON); a NumPy scalar is only converted."""
    if isinstance(x, Mapping):
        return {str(k): jsonable(v, finite=finite) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v, finite=finite) for v in x]
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return jsonable(dataclasses.asdict(x), finite=finite)
    if isinstance(x, np.ndarray):
        return x.tolist()
    if hasattr(x, "item") and np.ndim(x) == 0:
        return x.item()
    if isinstance(x, PurePath):
        return str(x)
    if finite and isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def json_default(o):
    """For json.dumps(default=...): `jsonable`'s conversion of o, else str(o)."""
    v = jsonable(o)
    return str(o) if v is o else v
