"""The robot's side of a wire run (experiments.wire): the operator at the robot and what reached it.

    python -m experiments.wire_operator --interface IF --out operator.json      # domain 0
    python -m experiments.wire_operator --interface IF --write-lowcmd            # a second LowCmd writer

Operator mode, against the sim bridge on the same domain and interface: resets the bridge (the robot on its
elastic band, the gantry), waits for the deploy's PASSIVE stream (zero-torque LowCmds), presses Start on the
virtual remote, releases the band when the stand-up is done, presses A, and prints `policy <t>`
(time.monotonic(), the clock every namespace shares) when it did. Until SIGINT/SIGTERM it records every LowCmd
that reached the robot's side (deploy.link.LowCmdObserver) and the ground truth, then writes --out: the
command kind changes, gaps in the command stream, and the pelvis's lowest height and largest tilt between the
band's release and the first damping command (damped, the robot falls: there is no gantry here).
Commands carrying WRITER_MARK (the second writer's) are counted apart.

Writer mode: another process publishing rt/lowcmd at 500 Hz (zero torque, valid CRC, the robot's
mode_machine; reserve[0] = WRITER_MARK), through unitree_sdk2py's ChannelPublisher, as another controller
would, once a line arrives on stdin; prints `writing <t>`, t the time just before its writer was created.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time

import numpy as np

from comm import dds, hg

WRITER_MARK = 0x5EC0  # LowCmd_.reserve[0] of the second writer's commands (the deploy sends 0)
BAND_AFTER_S = 0.5  # after the stand-up: release the band this much later, press A 0.7 s after that


def _wait(pred, timeout: float, what: str, poll: float = 0.005):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v is not None:
            return v
        if time.monotonic() > end:
            raise TimeoutError(f"operator: no {what} within {timeout:g} s")
        time.sleep(poll)


def _stop_event() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def stream_report(samples: list, t_from: float) -> dict:
    """Gaps and kinds of the deploy's commands received at or after t_from (rx times, monotonic)."""
    from deploy.link import record_kind

    own = [(t, r) for t, r in samples if t >= t_from and int(r["reserve"][0]) != WRITER_MARK]
    t = np.array([x for x, _ in own])
    gaps = np.diff(t) if len(t) > 1 else np.zeros(0)
    changes: list[tuple[float, str]] = []
    for tt, r in own:
        k = record_kind(r)
        if not changes or changes[-1][1] != k:
            changes.append((round(float(tt), 6), k))
    return {"received": len(own), "first": float(t[0]) if len(t) else None, "last": float(t[-1]) if len(t) else None,
            "max_gap_s": float(gaps.max()) if len(gaps) else None,
            "gaps_over_20ms": [[round(float(t[i]), 6), round(float(g), 6)] for i, g in enumerate(gaps) if g > 0.02],
            "changes": changes}


def operate(args) -> int:
    from comm.sim_msgs import SimClient
    from deploy.link import LowCmdObserver
    from robots.physics import tilt_angle

    dds.init_dds(args.domain, args.interface)
    stop = _stop_event()
    client = SimClient(args.domain, args.interface, timeout=10.0)
    observer = LowCmdObserver(args.domain)
    out: dict = {"events": {}}
    truth: list[tuple[float, float, float, bool]] = []  # (time.monotonic(), pelvis z, tilt, band) at 100 Hz
    done = threading.Event()

    def sample_truth() -> None:
        while not done.wait(0.01):
            g = client.ground_truth()
            if g is not None:
                truth.append((time.monotonic(), float(g.pos[2]), float(tilt_angle(np.asarray(g.quat))), bool(g.band)))

    sampler = threading.Thread(target=sample_truth, daemon=True)
    try:
        if args.observe_only:  # record what reaches the robot, operate nothing
            print(f"ready {time.monotonic():.6f}", flush=True)
            stop.wait()
            return _report(args, out, observer.snapshot(), [], observer, client)
        client.wait_ground_truth()
        client.reset()
        client.resume_state()
        t_ready = time.monotonic()
        sampler.start()
        print(f"ready {t_ready:.6f}", flush=True)
        ev = out["events"]
        ev["passive"] = _wait(lambda: observer.first("zero_torque", t_ready), args.timeout, "zero-torque LowCmd")
        time.sleep(0.3)
        client.press("Start", hold_s=0.2, wait=False)
        ev["stand_up"] = _wait(lambda: observer.first("position", t_ready), 5.0, "position LowCmd after Start")
        time.sleep(max(0.0, ev["stand_up"] + args.stand_up_s + BAND_AFTER_S - time.monotonic()))
        client.release_band()
        ev["band_released"] = time.monotonic()
        time.sleep(0.7)
        client.press("A", hold_s=0.2, wait=False)
        ev["policy"] = time.monotonic()
        print(f"policy {ev['policy']:.6f}", flush=True)
        stop.wait()
    except TimeoutError as e:
        out["error"] = str(e)
        print(str(e), file=sys.stderr, flush=True)
    finally:
        done.set()
    return _report(args, out, observer.snapshot(), truth, observer, client)


def _report(args, out: dict, samples: list, truth: list, observer, client) -> int:
    observer.close()
    client.close()
    out["stream"] = stream_report(samples, out["events"].get("passive", 0.0))
    out["other_writer_received"] = sum(1 for _, r in samples if int(r["reserve"][0]) == WRITER_MARK)
    # off the band and before the first damping command reached the robot (damped, it falls: no gantry here)
    t_damp = next((t for t, k in out["stream"]["changes"] if k == "damping"), float("inf"))
    free = [x for x in truth if not x[3] and x[0] < t_damp]
    out["pelvis_min_m"] = min((x[1] for x in free), default=None)
    out["tilt_max_rad"] = max((x[2] for x in free), default=None)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return 1 if "error" in out else 0


def write_lowcmd(args) -> int:
    from unitree_sdk2py.core.channel import ChannelPublisher
    from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowCmd_

    from comm import dds_compat
    from comm.crc import struct_crc
    from robots import g1

    dds.init_dds(args.domain, args.interface)
    stop = _stop_event()
    print("armed: a line on stdin starts the writer", flush=True)
    sys.stdin.readline()
    t_writer = time.monotonic()  # before the rt/lowcmd writer exists: nobody can have matched it yet
    pub = ChannelPublisher(hg.TOPIC_LOWCMD, LowCmd_)
    pub.Init()
    rec = hg.lowcmd_record(mode=hg.MOTOR_MODE_ENABLE, mode_pr=g1.MODE_PR)  # kp = kd = 0: zero torque
    rec["mode_machine"] = g1.MODE_MACHINE_29DOF_REV1
    rec["reserve"][0] = WRITER_MARK
    rec["crc"] = struct_crc(rec)
    sample = hg.lowcmd_wire_sample(rec)
    print(f"writing {t_writer:.6f}", flush=True)
    t0, k = time.monotonic(), 0
    try:
        while not stop.is_set():
            pub.Write(sample)
            k += 1
            time.sleep(max(0.0, t0 + k * g1.COMMAND_DT - time.monotonic()))
    finally:
        dds_compat.close_channel(pub)
    print(f"wrote {k}", flush=True)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.wire_operator", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--domain", type=int, default=dds.ROBOT_DOMAIN)
    p.add_argument("--interface", required=True)
    p.add_argument("--out", default=None, help="operator mode: the report (JSON)")
    p.add_argument("--stand-up-s", type=float, default=2.5, help="the deploy's stand-up blend (its --stand-up-s)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the deploy's PASSIVE stream")
    p.add_argument("--write-lowcmd", action="store_true", help="be a second LowCmd writer instead")
    p.add_argument("--observe-only", action="store_true", help="only record the LowCmds that reach the robot")
    args = p.parse_args(argv)
    return write_lowcmd(args) if args.write_lowcmd else operate(args)


if __name__ == "__main__":
    sys.exit(main())
