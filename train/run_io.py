"""Run folders: the stamped folder, metrics.csv appended per iteration, curves.png (the config:
train/config.py's save_config); for the tracking task sampler.csv and sampler.png, the adaptive start sampler's
failure counts per clip bin at every checkpoint."""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterable

import numpy as np

from robots.run_files import stamped_dir

RUNS_ROOT = Path(__file__).resolve().parent.parent / "runs"


def new_run_dir(motion: str, root: Path = RUNS_ROOT, tag: str = "") -> Path:
    d = stamped_dir(Path(root) / motion, tag=tag, exist_ok=True)
    (d / "checkpoints").mkdir(exist_ok=False)
    return d


class MetricsLog:
    """Append-only CSV; the header is fixed by the first row written (resume keeps appending)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.fields: list[str] | None = None
        if self.path.is_file():
            with self.path.open() as f:
                self.fields = next(csv.reader(f), None)

    def append(self, row: dict) -> None:
        new = self.fields is None
        if new:
            self.fields = list(row)
        with self.path.open("a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=self.fields, extrasaction="ignore")
            if new:
                w.writeheader()
            w.writerow({k: row.get(k, "") for k in self.fields})

    def read(self) -> dict[str, np.ndarray]:
        with self.path.open() as f:
            rows = list(csv.DictReader(f))
        return {k: np.array([float(r[k]) if r[k] not in ("", None) else np.nan for r in rows]) for k in (self.fields or [])}


def plot_curves(metrics_csv: Path, out_png: Path, keys: Iterable[str] = ("reward", "episode_len", "falls", "actor_loss",
                                                                          "critic_loss", "grad_norm")) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = MetricsLog(metrics_csv).read()
    keys = [k for k in keys if k in data]
    x = data.get("iteration", np.arange(len(next(iter(data.values())))) if data else np.arange(0))
    fig, axes = plt.subplots(len(keys), 1, figsize=(7, 1.8 * max(len(keys), 1)), sharex=True, squeeze=False)
    for ax, k in zip(axes[:, 0], keys):
        ax.plot(x, data[k], lw=1)
        ax.set_ylabel(k, fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("iteration")
    fig.tight_layout()
    fig.savefig(out_png, dpi=90)
    plt.close(fig)
    return Path(out_png)


def append_sampler(path: Path, iteration: int, counts, bin_s: float) -> None:
    """One row of sampler.csv: the tracking sampler's moving average of failures per control step in each bin of
    bin_s seconds (train/tracking.py update_counts) at `iteration`."""
    counts = np.asarray(counts, float).ravel()
    MetricsLog(path).append({"iteration": int(iteration),
                             **{f"fail_{k * bin_s:g}s": float(c) for k, c in enumerate(counts)}})


def plot_sampler(sampler_csv: Path, out_png: Path) -> Path:
    """Iterations x clip bins: where in the clip the training's episodes failed, as the sampler saw it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = MetricsLog(sampler_csv).read()
    bins = [k for k in data if k.startswith("fail_")]
    grid = np.array([data[k] for k in bins])  # (bins, rows)
    fig, ax = plt.subplots(figsize=(7, 3))
    it = data["iteration"]
    im = ax.imshow(grid, aspect="auto", origin="lower", cmap="magma", interpolation="nearest",
                   extent=(it.min() - 0.5, it.max() + 0.5, -0.5, len(bins) - 0.5))
    ax.set_yticks(range(len(bins)), [b[5:] for b in bins], fontsize=6)
    ax.set_xlabel("iteration")
    ax.set_ylabel("clip bin (start)")
    ax.set_title("failures per control step by clip bin (the start sampler's counts)", fontsize=9)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(out_png, dpi=90)
    plt.close(fig)
    return Path(out_png)
