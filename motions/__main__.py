"""python -m motions list | preview <name or path (.yaml, .npz, .csv)> [--out PNG] | compose <spec.yaml> <out.npz>
| extract <tracking.onnx> <out.npz> [--preview]

`preview` prints the motion's duration, rate, frames, contact phases, flight windows and key
numbers, and writes the preview plot (default runs/motions/<name>.png). Exit status 2 with the
MotionError's message for an unknown or malformed motion.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from motions.library import available_motions, contact_phases, load_motion, summary
from motions.balance import balance, outside_windows
from motions.momentum import flight_consistency
from motions.torques import upper_torque_ratio
from motions.motion import MotionError
from motions.plot import plot_motion


def _preview(name: str, out: str | None) -> int:
    try:
        m = load_motion(name)
    except MotionError as e:
        print(f"error: {e}")
        return 2
    png = plot_motion(m, out or Path("runs") / "motions" / f"{m.name}.png")
    print(f"{m.name}: {m.duration} s at {1 / m.dt:g} Hz, {m.num_steps} frames ({m.source})")
    if m.source_fps is not None:
        print(f"  source: {m.source_frames} frames at {m.source_fps:g} fps, resampled to {1 / m.dt:g} Hz "
              f"({m.description})")
    for phase, t0, t1 in contact_phases(m):
        print(f"  {phase:6s} {t0:6.2f} - {t1:6.2f} s")
    print(f"  flight windows: {list(m.flight_windows)}")
    for f in flight_consistency(m):  # a ballistic COM: horizontal velocity constant, vertical acceleration -g
        print(f"  flight {f['window_s']}: COM vx,vy take-off {f['com_vxy_takeoff'][0]:+.2f},{f['com_vxy_takeoff'][1]:+.2f} -> "
              f"touch-down {f['com_vxy_touchdown'][0]:+.2f},{f['com_vxy_touchdown'][1]:+.2f} m/s (change "
              f"{f['com_dvxy']:.2f}, ballistic 0), COM az {f['com_az_mean']:+.2f} m/s^2 (ballistic {f['g']:+.2f})")
        print(f"    angular momentum about the COM, pitch: {f['angmom_y_takeoff']:+.2f} N m s at take-off, range "
              f"{f['angmom_y_range']:.2f} in flight (constant if consistent): a free robot's pelvis would pitch "
              f"{f['free_pitch_drift_deg']:+.1f} deg by touch-down")
    b = balance(m)
    if b["min_com_margin_m"] is not None:
        out = outside_windows(b["cop_margin"], m.times)
        where = (f"leaves the feet at t = {', '.join(f'{a:.2f}-{c:.2f}' for a, c in out[:6])} s (worst "
                 f"{-b['min_cop_margin_m'] * 100:.1f} cm outside at t = {b['min_cop_margin_t']:.2f} s)") if out else \
            f"stays >= {b['min_cop_margin_m'] * 100:.1f} cm inside them"
        print(f"  balance in stance: the COM >= {b['min_com_margin_m'] * 100:+.1f} cm inside the feet (t = "
              f"{b['min_com_margin_t']:.2f} s); the CoP the reference's momentum needs {where}")
    tau = upper_torque_ratio(m)
    print(f"  upper-body torque the reference needs (inverse dynamics): peak |tau|/limit waist {tau['waist']:.2f}, "
          f"arms {tau['arms']:.2f} (worst {tau['peak_joint']} at t = {tau['peak_t_s']:.2f} s)")
    for k, v in summary(m).items():
        print(f"  {k}: {v:.4g}" if isinstance(v, float) else f"  {k}: {v}")
    print(png)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m motions", description="The G1 motion library.")
    sub = ap.add_subparsers(dest="cmd")
    sub.add_parser("list", help="list the available motions")
    pv = sub.add_parser("preview", help="print a motion's phases and numbers and write its preview PNG")
    pv.add_argument("motion", help="a motion name (see list) or a path to a .yaml, .npz or .csv file")
    pv.add_argument("--out", help="PNG path (default runs/motions/<motion>.png)")
    cp = sub.add_parser("compose", help="write a whole-body clip (.npz) from pelvis and upper-body waypoints, "
                        "the legs solved so the feet stay planted (motions/compose.py)")
    cp.add_argument("spec", help="the waypoint YAML, e.g. motions/compose/reach_twist.yaml")
    cp.add_argument("out", help="the .npz to write (in motions/ it is found by name)")
    ex = sub.add_parser("extract", help="write the reference baked into a whole-body-tracking ONNX (BeyondMimic / "
                        "mjlab, holosoma) as a clip (.npz) (motions/tracking_onnx.py)")
    ex.add_argument("onnx", help="the tracking policy's .onnx")
    ex.add_argument("out", help="the .npz to write")
    ex.add_argument("--preview", action="store_true", help="then preview the written clip")
    args = ap.parse_args(argv)
    if args.cmd == "extract":
        from motions.tracking_onnx import extract

        try:
            out = extract(args.onnx, args.out)
        except MotionError as e:
            print(f"error: {e}")
            return 2
        print(out)
        return _preview(str(out), None) if args.preview else 0
    if args.cmd == "preview":
        return _preview(args.motion, args.out)
    if args.cmd == "compose":
        from motions.compose import compose

        try:
            print(compose(args.spec, args.out))
        except MotionError as e:
            print(f"error: {e}")
            return 2
        return 0
    for n in available_motions():
        print(n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
