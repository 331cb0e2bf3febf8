"""Per-tick log of the deploy loop (growable numpy columns -> log.npz), summary.json, plot.

Written under runs/deploy/<stamp>/:
  log.npz       command-tick columns (prefix none) and policy-tick columns (prefix `pol_`)
  events.json   every event: state transitions, safety trips, deadline misses, notes
  summary.json  the stable keys in DESIGN.md (final_state, states_visited, ticks, ...)
  joints.png    measured vs commanded joints, kp, state over time
"""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

import numpy as np

from robots import g1
from robots.physics import upright_cos

RUNS_DIR = Path(__file__).resolve().parent.parent / "runs" / "deploy"


def new_run_dir(root: Path | str | None = None) -> Path:
    root = Path(root) if root is not None else RUNS_DIR
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    d = root / stamp
    d.mkdir(parents=True, exist_ok=False)
    return d


class Columns:
    """Append rows of fixed-shape fields into preallocated arrays (amortised O(1), no per-tick allocation
    beyond the copy into the slot)."""

    def __init__(self, fields: dict[str, tuple], capacity: int = 4096) -> None:
        self.fields = fields
        self.n = 0
        self.cap = capacity
        self.data = {k: np.full((capacity, *shape), np.nan, dtype=np.float64) for k, shape in fields.items()}

    def append(self, **row) -> None:
        if self.n == self.cap:
            self.cap *= 2
            for k, a in self.data.items():
                b = np.full((self.cap, *a.shape[1:]), np.nan, dtype=a.dtype)
                b[: self.n] = a[: self.n]
                self.data[k] = b
        i = self.n
        for k, v in row.items():
            if v is not None:
                self.data[k][i] = v
        self.n += 1

    def arrays(self, prefix: str = "") -> dict[str, np.ndarray]:
        return {prefix + k: a[: self.n] for k, a in self.data.items()}

    def __getitem__(self, k: str) -> np.ndarray:
        return self.data[k][: self.n]


def tick_fields() -> dict:
    """The command-tick columns (one row per 2 ms tick) and their per-row shapes."""
    n = g1.NUM_MOTORS
    return dict(t=(), lateness=(), work_ms=(), tick_ms=(), sent=(), state=(), tick=(), rx_age=(), new=(), buttons=(),
                q=(n,), dq=(n,), quat=(4,), gyro=(3,), acc=(3,), tau_est=(n,), proposed=(n,), cmd_q=(n,),
                cmd_kp=(n,), cmd_kd=(n,), est_vel=(3,), est_height=(), est_contact=(2,), est_flags=())


def policy_fields(n_obs: int) -> dict:
    """The policy-tick columns (one row per policy step, prefix `pol_` in log.npz)."""
    n = g1.NUM_MOTORS
    return dict(t=(), step=(), phase=(), obs=(n_obs,), action=(n,), target=(n,), cmd_q=(n,), est_ms=(),
                policy_ms=(), safety_ms=(), compute_ms=())


def pct(x, p) -> float | None:
    x = np.asarray(x, float)
    x = x[np.isfinite(x)]
    return float(np.percentile(x, p)) if x.size else None


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, default=_json_default) + "\n")


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def plot_run(path: Path, ticks: Columns, state_names: list[str], joint_idx=(0, 3, 4, 6, 9, 10, 12, 15)) -> Path | None:
    """Measured (solid) vs commanded (dashed) joints, gains and state over time."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # pragma: no cover - plotting is best effort
        return None
    t = ticks["t"]
    fig, axes = plt.subplots(4, 1, figsize=(11, 11), sharex=True,
                             gridspec_kw={"height_ratios": [3, 3, 1.2, 1]})
    for ax, sel in ((axes[0], joint_idx[:4]), (axes[1], joint_idx[4:])):
        for j in sel:
            line, = ax.plot(t, ticks["q"][:, j], lw=1, label=g1.JOINT_NAMES[j].replace("_joint", ""))
            pos = ticks["cmd_kp"][:, j] > 0
            ax.plot(t, np.where(pos, ticks["cmd_q"][:, j], np.nan), "--", lw=1, color=line.get_color())
        ax.set_ylabel("q (rad): measured -, target --")
        ax.legend(fontsize=7, ncol=4, loc="upper right")
        ax.grid(alpha=0.3)
    axes[2].plot(t, ticks["cmd_kp"][:, 3], label="kp knee")
    axes[2].plot(t, ticks["cmd_kd"][:, 3], label="kd knee")
    axes[2].legend(fontsize=7, loc="upper left")
    axes[2].set_ylabel("gains")
    with np.errstate(invalid="ignore", divide="ignore"):  # a zero or NaN quaternion: a gap in the plot
        cz = upright_cos(np.asarray(ticks["quat"], dtype=float))  # pelvis tilt from the IMU quaternion
    tw = axes[2].twinx()
    tw.plot(t, np.degrees(np.arccos(np.clip(cz, -1, 1))), color="k", lw=0.8, label="pelvis tilt")
    tw.set_ylabel("tilt (deg)")
    tw.legend(fontsize=7, loc="upper right")
    axes[3].step(t, ticks["state"], where="post")
    axes[3].set_yticks(range(len(state_names)), state_names, fontsize=7)
    axes[3].set_xlabel("time (s)")
    fig.tight_layout()
    out = path / "joints.png"
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out
