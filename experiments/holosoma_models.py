"""holosoma-inference 0.1.3's published G1 model files, from its PyPI wheel (`pip download --no-deps`),
cached under .cache/holosoma (never committed: the wheel carries no licence file, so nothing from it is
shipped). Used by the adapter tests and the tracking-policy experiment."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from motions.sources import cache_lock

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "holosoma"
WHEEL = "holosoma_inference-0.1.3-py3-none-any.whl"
LOCO = "holosoma_inference/models/loco/g1_29dof"
WBT = "holosoma_inference/models/wbt"
WBT_MODELS = ("ppo_g1_29dof_dancing.onnx", "fastsac_g1_29dof_dancing.onnx")


class DownloadError(RuntimeError):
    """The wheel cannot be fetched here (no network to PyPI, pip failed)."""


def models_dir(cache: Path = CACHE) -> Path:
    """The unpacked wheel's root (holds holosoma_inference/...); downloads and unpacks it once (one process at a
    time: motions.sources.cache_lock)."""
    with cache_lock(cache):
        return _models_dir(cache)


def _models_dir(cache: Path) -> Path:
    wheel = cache / WHEEL
    if not wheel.is_file():  # cache_lock made the folder
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "holosoma-inference==0.1.3",
                            "-d", str(cache)], capture_output=True, text=True, timeout=300)
        if r.returncode != 0 or not wheel.is_file():
            raise DownloadError(f"holosoma-inference 0.1.3 cannot be downloaded here: {r.stderr.strip()[-200:]}")
    out = cache / "x"
    if not all((out / p).is_file() for p in (f"{LOCO}/ppo_g1_29dof.onnx", *(f"{WBT}/{m}" for m in WBT_MODELS))):
        with zipfile.ZipFile(wheel) as z:
            z.extractall(out)
    return out
