"""Run folders: the stamped folder, metrics.csv appended per iteration, curves.png (the config:
train/config.py's save_config)."""
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
