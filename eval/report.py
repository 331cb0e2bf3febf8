"""What an evaluation reports: statistics over episodes, the eval.json definitions, the plot and
the printed table. Pure functions of the episode results (the plot writes one file)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from eval.measures import DEFINITIONS as MOTION_DEFINITIONS
from robots.physics import FALL_DEFINITION


def summary_stats(vals):
    v = [x for x in vals if x is not None]
    return {"mean": float(np.mean(v)), "min": float(np.min(v)), "max": float(np.max(v))} if v else None


def definitions(flight_margin_s: float) -> dict:
    """eval.json's "definitions": what each metric measures."""
    return {
        "fell": FALL_DEFINITION,
        "apex_foot_clearance_m": "min over feet of max sole height (lowest foot sphere) in the reference flight "
                                 f"window(s) +-{flight_margin_s} s",
        "tracking_error_cm": "mean over policy steps and 5 key bodies (pelvis, feet, hands) of world-frame distance "
                             "to FK of the reference (reference pelvis position, upright, ref_q); mean over episodes",
        "penetration_mm": "max over episodes of the deepest robot-floor contact",
        "stance_penetration_mm": "mean foot penetration in stance: load-weighted (sum of normal force x "
                                 "penetration / sum of normal force over robot-floor contacts and physics steps), "
                                 "mean over episodes",
        "landing_impact_bw": "peak total robot-floor normal force (10 ms mean) / body weight, from 0.1 s before "
                             "the last reference touch-down to 0.5 s after (no flight: after a 0.2 s settle)",
        "stood_at_end": "episodes ending upright at 0.785 +- 0.05 m, still (< 0.2 m/s), not fallen",
        **MOTION_DEFINITIONS,
    }


def plot(results, art, ref_motion, path: Path) -> Path:
    import matplotlib

    matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for r in results:
        lg = r["log"]
        c = "C3" if r["fell"] else "C0"
        a1.plot(lg["t"], lg["pelvis_z"], c, lw=0.7, alpha=0.5)
        if len(lg["sole"]):
            a2.plot(lg["t"], lg["sole"][:, 0], "C0", lw=0.7, alpha=0.5)
            a2.plot(lg["t"], lg["sole"][:, 1], "C1", lw=0.7, alpha=0.5)
    tr = np.arange(art.ref_q.shape[0]) * art.spec.control_dt
    a1.plot(tr, art.ref_height, "k--", lw=1.5, label="reference")
    if ref_motion is not None:
        a2.plot(tr, ref_motion.ref_foot_height[:, 0], "k--", lw=1.5, label="reference")
        for t0, t1 in ref_motion.flight_windows:
            for a in (a1, a2):
                a.axvspan(t0, t1, color="0.85", zorder=0)
    a1.set_ylabel("pelvis height (m)")
    a2.set_ylabel("sole height (m)\nleft C0, right C1")
    a2.set_xlabel("t (s)")
    a1.legend()
    falls = sum(r["fell"] for r in results)
    a1.set_title(f"{art.spec.motion.name}: {len(results)} episodes, {falls} falls (red)")
    for a in (a1, a2):
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def format_table(summary: dict) -> str:
    def f(v, scale=1.0, fmt="{:.1f}"):
        return "-" if v is None else fmt.format(v * scale)

    rows = [f"{'ep':>3} {'fell':>5} {'clear cm':>9} {'impact BW':>10} {'track cm':>9} {'pen mm':>7} {'stood':>6}"]
    for r in summary["per_episode"]:
        rows.append(f"{r['episode']:>3} {str(r['fell']):>5} {f(r['apex_foot_clearance_m'], 100):>9} "
                    f"{f(r['landing_impact_bw'], fmt='{:.2f}'):>10} {f(r['tracking_error_cm']):>9} "
                    f"{f(r['penetration_mm']):>7} {str(r['stood_at_end']):>6}")
    c = summary["apex_foot_clearance_m"]
    rows.append(
        f"{summary['motion']} ({summary.get('policy_input', 'true state')}): {summary['episodes']} episodes, falls "
        f"{summary['falls']}, safety tilt trips {summary.get('tilt_tripped', 0)}, stood at end "
        f"{summary['stood_at_end']}/{summary['episodes']}, apex foot clearance "
        + ("n/a (no flight)" if c is None else f"mean {c['mean'] * 100:.1f} cm / min {c['min'] * 100:.1f} cm")
        + f", tracking error {f(summary['tracking_error_cm'])} cm, penetration max {f(summary['penetration_mm'])} mm, "
        f"{summary['seconds_per_episode']:.1f} s/episode")
    rows.append(format_motion_line(summary))
    return "\n".join(rows)


def format_motion_line(summary: dict) -> str:
    """The dynamic-motion figures (eval.measures) in one line; '-' where a key is absent."""
    def st(key, scale, unit, fields=("mean", "min")):
        v = summary.get(key)
        return "-" if not v else " / ".join(f"{v[k] * scale:.{2 if scale == 1 else 1}f}" for k in fields) + unit

    tau = summary.get("peak_torque_ratio") or {}
    taus = ", ".join(f"{g} {v['max']:.2f}" for g, v in tau.items() if v)
    return (f"flight mean/min {st('flight_time_s', 1, ' s')}, pelvis apex rise mean/min "
            f"{st('pelvis_apex_rise_m', 100, ' cm')}, forward displacement mean/min "
            f"{st('forward_displacement_m', 100, ' cm')}, peak |tau|/limit (max over episodes) {taus or '-'}")
