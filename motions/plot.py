"""Preview plot of a motion: pelvis height and vertical velocity, sole heights, a few joints,
flight windows shaded. Matplotlib is imported on use (Agg unless MPLBACKEND says otherwise)."""
from __future__ import annotations

import os
from pathlib import Path

from motions.library import summary
from motions.motion import Motion
from robots import g1


def plot_motion(m: Motion, out: str | os.PathLike) -> Path:
    """Write the preview PNG of `m` to `out` (parents created) and return its path."""
    import matplotlib

    matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
    import matplotlib.pyplot as plt

    t = m.times
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    ax = axes[0]
    ax.plot(t, m.ref_height, label="pelvis height")
    ax.set_ylabel("m")
    ax2 = ax.twinx()
    ax2.plot(t, m.ref_base_vel_z, "C3", lw=0.8, label="pelvis vz")
    ax2.set_ylabel("m/s")
    ax.legend(loc="upper left")
    ax2.legend(loc="upper right")
    axes[1].plot(t, m.ref_foot_height[:, 0], label="left sole")
    axes[1].plot(t, m.ref_foot_height[:, 1], "--", label="right sole")
    axes[1].set_ylabel("foot height (m)")
    axes[1].legend()
    for name in ("left_hip_pitch_joint", "left_knee_joint", "left_ankle_pitch_joint", "left_shoulder_pitch_joint",
                 "waist_pitch_joint"):
        axes[2].plot(t, m.ref_q[:, g1.joint_index(name)], label=name.removesuffix("_joint"))
    axes[2].set_ylabel("rad")
    axes[2].set_xlabel("t (s)")
    axes[2].legend(fontsize=8)
    for a in axes:
        for t0, t1 in m.flight_windows:
            a.axvspan(t0, t1, color="0.85", zorder=0)
        a.grid(alpha=0.3)
    s = summary(m)
    title = f"{m.name}: {m.duration} s"
    if m.flight_windows:
        title += (f", take-off {s['takeoff_velocity_mps']:.2f} m/s, apex rise {s['apex_rise_m'] * 100:.1f} cm, "
                  f"foot clearance {s['apex_foot_clearance_m'] * 100:.1f} cm")
    fig.suptitle(title)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
