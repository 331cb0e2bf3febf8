"""Report plots: one PNG per fit (measured vs simulated), IMU, latency, joint check."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from robots import g1


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_fit(fit, path: Path, max_joints: int = 6, max_segments: int = 4) -> Path:
    """Measured vs simulated (fitted and nominal) q of the group's joints over a few segments."""
    plt = _plt()
    nj = min(max_joints, len(fit.joints))
    pick = np.linspace(0, len(fit.joints) - 1, nj).round().astype(int)
    ns = min(max_segments, fit.t.shape[0])
    fig, axes = plt.subplots(nj, 1, figsize=(10, 1.8 * nj + 0.8), sharex=True, squeeze=False)
    for a, j in zip(axes[:, 0], pick):
        for s in range(ns):
            t = fit.t[s] - fit.t[0, 0]
            a.plot(t, fit.q_meas[s, :, j], "k", lw=1.2, label="measured" if s == 0 else None)
            a.plot(t, fit.q_sim[s, :, j], "C1", lw=1.0, label="fitted model" if s == 0 else None)
            a.plot(t, fit.q_nominal[s, :, j], "C0", lw=0.8, alpha=0.6, ls="--", label="nominal model" if s == 0 else None)
        a.set_ylabel(g1.JOINT_NAMES[fit.joints[j]].replace("_joint", ""), fontsize=7)
    axes[0, 0].legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("robot time (s); each segment starts from the measured state")
    p = fit.params
    axes[0, 0].set_title(
        f"{fit.group}: armature x{p.armature_scale:.3f}  damping +{p.damping:.3f}  friction x{p.frictionloss_scale:.3f}  "
        f"kp x{p.kp_scale:.3f}   residual {fit.residual_rms * 1e3:.2f} mrad (nominal {fit.residual_rms_nominal * 1e3:.2f})",
        fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_imu(log, imu, path: Path) -> Path:
    plt = _plt()
    t = log.t - log.t[0]
    fig, (a, b) = plt.subplots(2, 1, figsize=(9, 5), sharex=True)
    for i, c in enumerate("xyz"):
        a.plot(t, log.states["gyro"][:, i], f"C{i}", lw=0.6, label=f"gyro {c}")
        a.axhline(imu.gyro_bias[i], color=f"C{i}", ls="--", lw=1)
        b.plot(t, log.states["acc"][:, i] - imu.accel_bias[i], f"C{i}", lw=0.6, label=f"acc {c} - bias")
    a.set_ylabel("rad/s")
    b.set_ylabel("m/s^2")
    b.set_xlabel("s")
    a.legend(fontsize=7, ncol=3)
    b.legend(fontsize=7, ncol=3)
    a.set_title(f"IMU at standstill: gyro bias {np.round(imu.gyro_bias, 4)}, accel bias {np.round(imu.accel_bias, 3)}, "
                f"tilt misalignment {np.degrees(imu.tilt_misalignment_rad):.2f} deg", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_latency(log, lat, joint: int, path: Path) -> Path:
    plt = _plt()
    from calibration.sysid import command_times

    t0 = log.t[0]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.5), gridspec_kw={"width_ratios": [3, 1]})
    tc = command_times(log) - t0
    kp = log.cmds["kp"][:, joint]
    a.plot(log.t - t0, log.states["tau"][:, joint], "k", lw=1, label="tau_est (state time)")
    a.step(tc, kp * (log.cmds["q"][:, joint] - log.cmds["q"][0, joint]), "C1", lw=0.8, where="post",
           label="kp x target step (time computed)")
    a.set_xlim(0, min(0.6, log.duration))
    a.set_xlabel("robot time (s)")
    a.set_ylabel("Nm")
    a.legend(fontsize=7)
    a.set_title(f"{lat.joint}: latency {lat.latency_s * 1e3:.1f} ms, action delay {lat.action_delay_s * 1e3:.1f} ms "
                f"({lat.edges_used}/{lat.edges_total} steps)", fontsize=8)
    b.plot(np.arange(len(lat.per_edge_s)), np.round(np.array(lat.per_edge_s) * 1e3, 3), "o", color="C0")
    b.set_xlabel("step")
    b.set_ylabel("latency (ms)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_joints(check, path: Path) -> Path:
    plt = _plt()
    fig, a = plt.subplots(figsize=(10, 3.5))
    x = np.arange(g1.NUM_MOTORS)
    a.bar(x, check.residual * 1e3, color=["C3" if g1.JOINT_NAMES[i] in check.flagged else "C0" for i in x])
    a.plot(x, check.tolerance * 1e3, "k_", ms=10, label="tolerance")
    a.plot(x, -check.tolerance * 1e3, "k_", ms=10)
    a.set_xticks(x, [n.replace("_joint", "") for n in g1.JOINT_NAMES], rotation=90, fontsize=6)
    a.set_ylabel("measured - predicted (mrad)")
    a.set_title(f"held pose: flagged {list(check.flagged) or 'none'}", fontsize=8)
    a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
