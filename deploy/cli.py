"""`make deploy ROBOT=sim|g1 MOTION=<m> [NET_IF=<iface>]`

    python -m deploy.cli --robot sim --motion stand          # dry run: bridge + loop with --auto
    python -m deploy.cli --robot g1 --net-if eth0 --motion jump
    python -m deploy.cli --robot sim --policy <.onnx or folder> --velocity 0.5,0,0@5-10   # third-party policy

sim: starts the sim bridge (`python -m sim`, DDS domain 1 on lo) in a subprocess (comm.sim_process), runs pre-flight and the whole
     sequence with --auto (PASSIVE -> STAND_UP -> HOLD -> band released -> POLICY -> HOLD), stops
     the bridge, prints the summary and its path.
g1:  the real robot, DDS domain 0 on --net-if; asks for an interactive confirmation; buttons on the
     remote drive the state machine (Start, A; Select or L2+B = damping). Ctrl-C = damping; a
     second Ctrl-C exits. --auto on the real robot needs --i-know-this-is-a-real-robot.
Without --auto (g1, or sim with --no-auto) DAMPING streams until a second Ctrl-C; with --auto the
run ends 1 s after entering DAMPING.

Exit codes: 0 run finished outside DAMPING, 1 run ended in DAMPING (see safety_events),
2 usage / artifact / pre-flight error (nothing was commanded).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
from pathlib import Path

from comm import dds
from comm.sim_process import BridgeLaunchError
from deploy import realtime
from deploy.preflight import PreflightError
from policies.artifact import POLICY_ROOT, YAML_NAME, available_motions

EXIT_OK, EXIT_DAMPING, EXIT_PREFLIGHT = 0, 1, 2
BRIDGE_PRIORITY = 5  # SCHED_FIFO for the sim bridge when permitted (below the loop's 10)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m deploy.cli", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--robot", choices=("sim", "g1"), default="sim")
    p.add_argument("--motion", default="stand", help="policies/g1/<motion> (default: stand)")
    p.add_argument("--policy-dir", "--policy", dest="policy_dir", default=None,
                   help="a policy of any supported format (overrides --motion): a native artifact folder, an "
                        "mjlab / BeyondMimic or holosoma .onnx, an unitree_rl_lab folder (policies.adapters)")
    p.add_argument("--velocity", action="append", default=[], metavar="VX,VY,WZ@T0-T1",
                   help="velocity policies: command VX, VY (m/s), WZ (rad/s) from T0 to T1 s on the run's clock "
                        "(repeatable; POLICY starts ~4 s into a dry run); without it the remote's sticks command")
    p.add_argument("--policy-s", type=float, default=None,
                   help="velocity policies: seconds in POLICY (default: to the last --velocity window + 1 s, else 60)")
    p.add_argument("--policy-backend", choices=("auto", "onnxruntime", "compiled"), default="auto",
                   help="how the policy network runs: auto (default) compiles the ONNX graph (policies.mlp_kernel) "
                        "when it matches onnxruntime on the load check, else onnxruntime; compiled: or refuse")
    p.add_argument("--net-if", default=None, help="network interface (g1: required; sim: lo)")
    p.add_argument("--domain", type=int, default=None, help="DDS domain (g1: 0, sim: 1)")
    p.add_argument("--auto", dest="auto", action="store_true", default=None,
                   help="advance the state machine without a remote (default for sim)")
    p.add_argument("--no-auto", dest="auto", action="store_false", help="sim: wait for (virtual) remote buttons")
    p.add_argument("--i-know-this-is-a-real-robot", dest="real_confirmed", action="store_true",
                   help="allow --auto on the real robot")
    p.add_argument("--yes", action="store_true", help=argparse.SUPPRESS)  # confirmation for scripted g1 runs
    p.add_argument("--no-bridge", action="store_true", help="sim: use an already running bridge")
    p.add_argument("--bridge-args", default="", help='sim: extra sim bridge flags, e.g. "--lockstep"')
    p.add_argument("--state-timeout", type=float, default=3.0, help="pre-flight: seconds to wait for LowState")
    p.add_argument("--stand-up-s", type=float, default=2.5)
    p.add_argument("--max-run-s", type=float, default=None, help="end the loop after this many seconds")
    p.add_argument("--run-root", default=None, help="where runs/deploy/<stamp>/ goes")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--no-ground-truth", action="store_true",
                   help="sim: no ground-truth subscription, as on the robot (it is held in memory: ~1.3 MB/min at 10 Hz)")
    p.add_argument("--quiet", action="store_true", help="print only the summary path")
    p.add_argument("--calibration", default=None,
                   help="calibration YAML or robot id (calibration/<id>.yaml): IMU biases for the estimator, joint "
                        "offsets (q - offset), compared in pre-flight with the policy's training calibration")
    p.add_argument("--cpus", default=None, metavar="N[,M]",
                   help="pin the loop's process to these cores (e.g. 1, or 2,3; on the robot cores isolated with "
                        "isolcpus): warm caches between ticks; sim: the bridge stays on the others")
    p.add_argument("--allow-other-robot-calibration", action="store_true",
                   help="deploy a policy trained with another robot's calibration (pre-flight refuses it otherwise)")
    return p


def resolve_policy_dir(motion: str, policy_dir: str | None) -> Path:
    if policy_dir:
        return Path(policy_dir)
    d = POLICY_ROOT / motion
    if not (d / YAML_NAME).is_file():
        avail = available_motions()
        raise PreflightError(
            f"no policy for motion {motion!r}: {d} does not exist (or has no {YAML_NAME}). "
            f"Available motions: {', '.join(avail) if avail else 'none'}. Train and export it with "
            f"`make train MOTION={motion}`, or run `make deploy MOTION=stand` "
            "(regenerate that one with `python -m policies.stand`).")
    return d


def confirm_real_robot(args) -> None:
    msg = (f"About to command the REAL G1 on interface {args.net_if}, DDS domain {args.domain}.\n"
           "  - robot hanging on its gantry, area clear, e-stop at hand (remote Select or L2+B = damping)\n"
           "  - locomotion service released (remote L2+R2 debug mode)\n"
           "Type 'yes' to continue: ")
    if args.yes:
        return
    if not sys.stdin.isatty():
        raise PreflightError("ROBOT=g1 needs an interactive confirmation (stdin is not a terminal); refusing")
    if input(msg).strip().lower() != "yes":
        raise PreflightError("not confirmed; nothing was commanded")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    echo = (lambda s: None) if args.quiet else (lambda s: print(s, flush=True))
    try:
        policy_dir = resolve_policy_dir(args.motion, args.policy_dir)
        if args.robot == "g1":
            if not args.net_if:
                raise PreflightError("ROBOT=g1 needs the robot's network interface: make deploy ROBOT=g1 "
                                     "NET_IF=<iface> (the one with a 192.168.123.x address)")
            args.domain = dds.ROBOT_DOMAIN if args.domain is None else args.domain
            if args.domain != dds.ROBOT_DOMAIN:
                raise PreflightError(f"the real G1 talks on DDS domain {dds.ROBOT_DOMAIN}, not {args.domain}")
            if args.auto and not args.real_confirmed:
                raise PreflightError("--auto drives the real robot without a remote; add "
                                     "--i-know-this-is-a-real-robot if that is really what you want")
            args.auto = bool(args.auto)
        else:
            args.net_if = args.net_if or dds.SIM_INTERFACE
            args.domain = dds.SIM_DOMAIN if args.domain is None else args.domain
            args.auto = True if args.auto is None else args.auto
        # fail before starting anything: artifact and interface
        from deploy.preflight import check_artifact, check_interface

        art = check_artifact(policy_dir)
        check_interface(args.net_if, robot=args.robot == "g1")
        from deploy import velocity

        try:
            windows = velocity.parse_schedule(args.velocity)
        except ValueError as e:
            raise PreflightError(str(e)) from e
        if windows and art.spec.kind != "velocity":
            raise PreflightError(f"--velocity given, but {policy_dir} is a {art.spec.kind} policy (no velocity command)")
        if art.spec.kind == "velocity" and args.auto and not windows and args.robot == "sim":
            raise PreflightError("a velocity policy in an --auto dry run needs --velocity VX,VY,WZ@T0-T1 (no sticks)")
        estimator_cfg, offsets = None, ()
        # calibration (robots.calibration): checked against the policy's; IMU biases, joint offsets
        from deploy.preflight import check_calibration

        calib, warnings = check_calibration(art, args.calibration, args.allow_other_robot_calibration)
        for w in warnings:
            print(f"deploy: warning: {w}", file=sys.stderr, flush=True)
        if calib is not None:
            from estimation.estimator import EstimatorConfig
            from robots.calibration import joint_offsets

            try:
                estimator_cfg = EstimatorConfig.from_calibration(calib)
            except ValueError as e:
                raise PreflightError(f"calibration rejected: {e}") from e
            offsets = tuple(float(x) for x in joint_offsets(calib))
        cpus = None
        if args.cpus is not None:
            try:
                cpus = realtime.parse_cpus(args.cpus)
            except ValueError as e:
                raise PreflightError(str(e)) from e
        if args.robot == "g1":
            confirm_real_robot(args)
    except PreflightError as e:
        print(f"deploy: error: {e}", file=sys.stderr, flush=True)
        return EXIT_PREFLIGHT

    from deploy.loop import LoopConfig, run
    from deploy.state_machine import AutoScript

    if args.auto and args.max_run_s is None:  # an auto run that has not ended by then is stuck: end it
        a = AutoScript()
        run_len = velocity.run_s(windows, args.policy_s, art.spec.kind) or art.spec.motion.duration
        args.max_run_s = a.passive_s + args.stand_up_s + a.hold_s + run_len + a.hold_after_s + 10.0

    cfg = LoopConfig(
        policy_dir=str(policy_dir), domain=args.domain, interface=args.net_if, sim=args.robot == "sim",
        auto=args.auto, stand_up_s=args.stand_up_s, state_timeout_s=args.state_timeout, max_run_s=args.max_run_s,
        exit_on_damping=args.auto, run_root=args.run_root, plot=not args.no_plot,
        ground_truth=args.robot == "sim" and not args.no_ground_truth, velocity=windows, policy_s=args.policy_s,
        joint_offsets=offsets, policy_backend=args.policy_backend,
        **({"estimator": estimator_cfg} if estimator_cfg is not None else {}),
    )
    holder = {}

    def on_sigint(signum, frame):
        loop = holder.get("loop")
        if loop is None:
            raise KeyboardInterrupt
        if holder.get("sigints", 0) == 0:
            holder["sigints"] = 1
            loop.request_damping("sigint")
            echo("[deploy] Ctrl-C: DAMPING (latched). Ctrl-C again to exit.")
        else:
            loop.stop()

    signal.signal(signal.SIGINT, on_sigint)
    bridge_ctx = None
    try:
        if args.robot == "sim" and not args.no_bridge:
            from comm.sim_process import launch_bridge_process

            echo(f"[deploy] starting the sim bridge (domain {args.domain}, {args.net_if}) ...")
            bridge_ctx = launch_bridge_process(["--gt-decimation", "5", *shlex.split(args.bridge_args)], domain=args.domain,
                                               interface=args.net_if)
            bridge = bridge_ctx.__enter__()
            echo(f"[deploy] sim bridge scheduling: {realtime.boost_process(bridge.proc.pid, BRIDGE_PRIORITY)}")
            if cpus is not None:  # the bridge (the robot's stand-in) keeps the other cores
                others = frozenset(os.sched_getaffinity(0)) - cpus
                if others:
                    echo(f"[deploy] sim bridge pinned to {realtime.pin_process(others, bridge.proc.pid)}")
        if cpus is not None:
            echo(f"[deploy] loop pinned to {realtime.pin_process(cpus)}")
        summary = run(cfg, echo=echo, on_loop=lambda loop: holder.__setitem__("loop", loop))
    except PreflightError as e:
        print(f"deploy: error: {e}", file=sys.stderr, flush=True)
        return EXIT_PREFLIGHT
    except BridgeLaunchError as e:  # the bridge did not start: nothing was commanded
        print(f"deploy: error: the sim bridge did not start: {e}", file=sys.stderr, flush=True)
        return EXIT_PREFLIGHT
    except KeyboardInterrupt:
        print("deploy: interrupted before the first command; nothing was commanded", file=sys.stderr)
        return EXIT_PREFLIGHT
    finally:
        if bridge_ctx is not None:
            bridge_ctx.__exit__(None, None, None)
    if not args.quiet:
        keys = ("final_state", "states_visited", "ticks", "policy_ticks", "policy_steps_missed", "deadline_misses",
                "safety_events", "compute_ms_p50", "compute_ms_p99", "compute_cpu_ms_p99", "stream_period_error_p50",
                "stream_period_error_p99", "fell", "tilt_tripped", "estimator_base_vel_rmse_mps",
                "estimator_base_height_rmse_m", "estop_to_damping_s", "policy", "velocity")
        print(json.dumps({k: summary.get(k) for k in keys}, indent=2))
    print(f"summary: {Path(summary['run_dir']) / 'summary.json'}", flush=True)
    return EXIT_DAMPING if summary["final_state"] == "DAMPING" else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
