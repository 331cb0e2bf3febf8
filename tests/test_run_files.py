"""robots.run_files: the stamped run folder and JSON-ready values every room writes."""
from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from robots.run_files import json_default, jsonable, stamped_dir


@dataclasses.dataclass
class _Cfg:
    a: float = 1.5
    q: tuple = (1, 2)


def test_jsonable_makes_numpy_values_dataclasses_and_paths_plain():
    x = {1: np.float32(0.5), "arr": np.arange(3), "0d": np.array(2.0), "b": np.bool_(True), "t": (np.int64(3), 4),
         "cfg": _Cfg(), "p": Path("runs/x"), "s": "text", "none": None}
    got = jsonable(x)
    assert got == {"1": 0.5, "arr": [0, 1, 2], "0d": 2.0, "b": True, "t": [3, 4], "cfg": {"a": 1.5, "q": [1, 2]},
                   "p": "runs/x", "s": "text", "none": None}
    assert type(got["b"]) is bool and type(got["t"][0]) is int
    json.dumps(got)


def test_jsonable_finite_drops_non_finite_python_floats_only():
    assert jsonable([math.nan, math.inf, 1.0], finite=True) == [None, None, 1.0]
    assert math.isnan(jsonable([math.nan])[0])
    assert math.isnan(jsonable(np.float64(math.nan), finite=True))  # a NumPy scalar is only converted


def test_json_default_converts_what_jsonable_does_and_strs_the_rest():
    class Other:
        def __str__(self):
            return "other"

    doc = json.loads(json.dumps({"a": np.arange(2), "b": np.float64(0.25), "c": np.bool_(False), "d": Other()},
                                default=json_default))
    assert doc == {"a": [0, 1], "b": 0.25, "c": False, "d": "other"}


@pytest.mark.parametrize("precise, tag, pattern", [(False, "", r"\d{8}-\d{6}"), (True, "", r"\d{8}-\d{6}-\d{6}"),
                                                   (False, "seed3", r"\d{8}-\d{6}-seed3")])
def test_stamped_dir_names_and_creates_the_folder(tmp_path, precise, tag, pattern):
    d = stamped_dir(tmp_path / "runs" / "hop", precise=precise, tag=tag)
    assert d.is_dir() and d.parent == tmp_path / "runs" / "hop" and re.fullmatch(pattern, d.name)


def test_stamped_dir_refuses_an_existing_folder_unless_told(tmp_path, monkeypatch):
    monkeypatch.setattr("robots.run_files.stamp", lambda precise=False: "20260101-000000")
    d = stamped_dir(tmp_path)
    with pytest.raises(FileExistsError):
        stamped_dir(tmp_path)
    assert stamped_dir(tmp_path, exist_ok=True) == d
