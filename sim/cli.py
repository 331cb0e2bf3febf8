"""`python -m sim` / `make sim`: start the sim bridge from the command line.

Every flag's default is read from the config dataclasses (sim.config, robots.model.BridgeModelConfig):
the CLI repeats no number. Exit codes: 0 clean stop, 2 DDS / model / viewer error, 3 busy domain.
"""
from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
from typing import Any, Sequence

from comm.dds import MAX_DOMAIN_ID, DDSInitError
from comm.remote import STICKS, button_mask
from robots.model import BRIDGE_CONTACT, BridgeModelConfig, ModelError, resolve_contact
from sim.config import BandConfig, BridgeConfig, FaultConfig, NoiseConfig, Push, RemoteEvent
from sim.node import BusyDomainError, SimBridge, ViewerError



def default(cls: type, name: str) -> Any:
    """The default of dataclass field `name` of `cls` (the CLI's one source of defaults)."""
    return {f.name: f.default for f in dataclasses.fields(cls)}[name]


_PUSH_DURATION = default(Push, "duration")
_REMOTE_HOLD = default(RemoteEvent, "hold")


def parse_remote_script(text: str) -> tuple[RemoteEvent, ...]:
    """"1.0:start,4.0:A,6:L2+B@0.5,8:lx=0.5+ly=-0.2": TIME:ITEMS[@HOLD], items joined by '+'
    are buttons (held HOLD s, default RemoteEvent.hold) or stick=value (kept until changed)."""
    events = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        try:
            t_str, rest = entry.split(":", 1)
            hold = _REMOTE_HOLD
            if "@" in rest:
                rest, hold_str = rest.rsplit("@", 1)
                hold = float(hold_str)
            buttons, sticks = 0, []
            for item in filter(None, (i.strip() for i in rest.split("+"))):
                if "=" in item:
                    k, v = item.split("=", 1)
                    k = k.strip().lower()
                    if k not in STICKS:
                        raise ValueError(f"unknown stick {k!r} ({', '.join(STICKS)})")
                    sticks.append((k, float(v)))
                else:
                    buttons |= button_mask(item)
            events.append(RemoteEvent(float(t_str), buttons, hold, tuple(sticks)))
        except ValueError as e:
            raise ValueError(f"--remote-script entry {entry!r}: {e}") from None
    return tuple(events)


def parse_push(text: str) -> Push:
    """"T:FX,FY,FZ[@DURATION]" (s, N world frame, s)."""
    try:
        t_str, rest = text.split(":", 1)
        duration = _PUSH_DURATION
        if "@" in rest:
            rest, d_str = rest.rsplit("@", 1)
            duration = float(d_str)
        f = tuple(float(x) for x in rest.split(","))
        if len(f) != 3:
            raise ValueError("force needs 3 components")
        return Push(float(t_str), f, duration)  # type: ignore[arg-type]
    except ValueError as e:
        raise ValueError(f"--push {text!r}: {e} (format T:FX,FY,FZ[@DURATION])") from None


def _vec3(text: str) -> tuple[float, float, float]:
    v = tuple(float(x) for x in text.split(","))
    if len(v) != 3:
        raise argparse.ArgumentTypeError(f"expected X,Y,Z, got {text!r}")
    return v  # type: ignore[return-value]


def _prob(text: str) -> float:
    p = float(text)
    if not 0.0 <= p <= 1.0:
        raise argparse.ArgumentTypeError(f"probability must be in [0, 1], got {p}")
    return p


def _nonneg(text: str) -> float:
    v = float(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


def build_arg_parser() -> argparse.ArgumentParser:
    B, Bd, N, F, M = BridgeConfig, BandConfig, NoiseConfig, FaultConfig, BridgeModelConfig
    p = argparse.ArgumentParser(
        prog="python -m sim",
        description="MuJoCo G1 that is the robot on DDS (unitree_hg LowState_/LowCmd_), with a virtual "
                    "remote, ground truth, elastic band, lockstep mode and fault injection.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("DDS")
    g.add_argument("--domain", type=int, default=default(B, "domain"), help="DDS domain id")
    g.add_argument("--interface", default=default(B, "interface"), help="network interface")
    g.add_argument("--allow-busy-domain", action="store_true",
                   help="start even if another rt/lowstate publisher is on the domain")
    g.add_argument("--busy-check-s", type=_nonneg, default=default(B, "busy_check_s"),
                   help="how long to look for another rt/lowstate publisher at start (0: skip)")
    g = p.add_argument_group("simulation")
    g.add_argument("--lockstep", action="store_true",
                   help="advance physics only when a LowCmd arrives (deterministic tests)")
    g.add_argument("--steps-per-cmd", type=int, default=default(B, "steps_per_cmd"),
                   help="lockstep: physics steps per LowCmd")
    g.add_argument("--duration", type=float, default=default(B, "duration"),
                   help="stop after this many seconds of sim time")
    g.add_argument("--seed", type=int, default=default(B, "seed"), help="seed of noise and fault injection")
    g.add_argument("--viewer", action="store_true", help="open the MuJoCo viewer (needs a display)")
    g.add_argument("--gt-decimation", type=int, default=default(B, "gt_decimation"),
                   help="ground truth with every n-th LowState")
    g.add_argument("--quiet", action="store_true", help="print errors and the ready line only")
    g = p.add_argument_group("elastic band")
    g.add_argument("--no-band", action="store_true", help="start without the elastic band")
    g.add_argument("--band-release-after", type=_nonneg, default=default(Bd, "release_after"),
                   help="release the band after S seconds")
    g.add_argument("--band-height", type=float, default=default(Bd, "height"), help="pelvis anchor height (m)")
    g.add_argument("--band-stiffness", type=_nonneg, default=default(Bd, "stiffness"), help="N/m")
    g.add_argument("--band-damping", type=_nonneg, default=default(Bd, "damping"), help="N s/m")
    g = p.add_argument_group("virtual remote and pushes")
    g.add_argument("--remote-script", default="",
                   help='scripted remote, e.g. "1.0:start,4.0:A,6:L2+B@0.5,8:lx=0.5" (TIME:ITEMS[@HOLD])')
    g.add_argument("--push", action="append", default=[], metavar="T:FX,FY,FZ[@DUR]",
                   help="force on the pelvis at time T (repeatable)")
    g = p.add_argument_group("fault injection")
    g.add_argument("--state-latency-ms", type=_nonneg, default=default(F, "state_latency_ms"), help="added LowState latency")
    g.add_argument("--cmd-latency-ms", type=_nonneg, default=default(F, "cmd_latency_ms"), help="added LowCmd latency")
    g.add_argument("--jitter-ms", type=_nonneg, default=default(F, "jitter_ms"),
                   help="LowState and LowCmd each delayed a further uniform [0, J] ms (in order)")
    g.add_argument("--state-drop", type=_prob, default=default(F, "state_drop"), help="LowState drop probability")
    g.add_argument("--cmd-drop", type=_prob, default=default(F, "cmd_drop"), help="LowCmd drop probability")
    g.add_argument("--crc-corrupt", type=_prob, default=default(F, "crc_corrupt"),
                   help="probability of a wrong LowState CRC")
    g = p.add_argument_group("sensor noise")
    g.add_argument("--gyro-noise", type=_nonneg, default=default(N, "gyro_std"), help="gyro noise std (rad/s)")
    g.add_argument("--accel-noise", type=_nonneg, default=default(N, "accel_std"),
                   help="accelerometer noise std (m/s^2)")
    g.add_argument("--joint-pos-noise", type=_nonneg, default=default(N, "joint_pos_std"),
                   help="joint position noise std (rad)")
    g.add_argument("--joint-vel-noise", type=_nonneg, default=default(N, "joint_vel_std"),
                   help="joint velocity noise std (rad/s)")
    g.add_argument("--gyro-bias", type=_vec3, default=default(N, "gyro_bias"), help="gyro bias X,Y,Z (rad/s)")
    g.add_argument("--accel-bias", type=_vec3, default=default(N, "accel_bias"), help="accelerometer bias X,Y,Z")
    g = p.add_argument_group("model overrides (robots.model.BridgeModelConfig)")
    g.add_argument("--mjcf", default=default(M, "mjcf"), help="G1 MJCF override")
    g.add_argument("--armature-scale", type=_nonneg, default=default(M, "armature_scale"))
    g.add_argument("--damping-scale", type=_nonneg, default=default(M, "damping_scale"))
    g.add_argument("--frictionloss-scale", type=_nonneg, default=default(M, "frictionloss_scale"))
    g.add_argument("--extra-joint-damping", type=_nonneg, default=default(M, "extra_joint_damping"),
                   help="N m s/rad on every motor joint")
    g.add_argument("--torque-speed-envelope", action="store_true",
                   help="the drives' torque bounded by the torque-speed envelope (robots.physics.torque_speed_bounds)")
    g = p.add_argument_group("foot contact (robots.model.BridgeModelConfig; python -m sim.creep measures them)")
    g.add_argument("--contact", default=default(M, "contact"), choices=list(BRIDGE_CONTACT),
                   help="a named foot-contact setting (robots.model.BRIDGE_CONTACT); default: the MJCF's")
    g.add_argument("--foot-condim", type=int, default=default(M, "foot_condim"), choices=(1, 3, 4, 6))
    g.add_argument("--foot-friction", type=_vec3, default=default(M, "foot_friction"),
                   help="SLIDE,TORSION,ROLL friction of the foot spheres (torsion/roll in m)")
    g.add_argument("--cone", default=default(M, "cone"), choices=("pyramidal", "elliptic"))
    g.add_argument("--noslip-iterations", type=int, default=default(M, "noslip_iterations"),
                   help="MuJoCo's noslip post-solver iterations (0: off)")
    return p


def config_from_args(ns: argparse.Namespace) -> BridgeConfig:
    if not 0 <= ns.domain <= MAX_DOMAIN_ID:
        raise ValueError(f"--domain must be in 0..{MAX_DOMAIN_ID}")
    if ns.steps_per_cmd < 1 or ns.gt_decimation < 1:
        raise ValueError("--steps-per-cmd and --gt-decimation must be >= 1")
    resolve_contact(BridgeModelConfig(contact=ns.contact, foot_condim=ns.foot_condim, foot_friction=ns.foot_friction,
                                      cone=ns.cone, noslip_iterations=ns.noslip_iterations))  # ValueError names it
    return BridgeConfig(
        domain=ns.domain, interface=ns.interface, lockstep=ns.lockstep, steps_per_cmd=ns.steps_per_cmd,
        duration=ns.duration, seed=ns.seed, viewer=ns.viewer, gt_decimation=ns.gt_decimation,
        busy_check_s=ns.busy_check_s, allow_busy_domain=ns.allow_busy_domain, verbose=not ns.quiet,
        model=BridgeModelConfig(mjcf=ns.mjcf, armature_scale=ns.armature_scale, damping_scale=ns.damping_scale,
                                frictionloss_scale=ns.frictionloss_scale,
                                extra_joint_damping=ns.extra_joint_damping, contact=ns.contact,
                                foot_condim=ns.foot_condim, foot_friction=ns.foot_friction, cone=ns.cone,
                                noslip_iterations=ns.noslip_iterations),
        torque_speed_envelope=ns.torque_speed_envelope,
        band=BandConfig(enabled=not ns.no_band, release_after=ns.band_release_after, height=ns.band_height,
                        stiffness=ns.band_stiffness, damping=ns.band_damping),
        noise=NoiseConfig(ns.gyro_noise, ns.accel_noise, ns.joint_pos_noise, ns.joint_vel_noise,
                          ns.gyro_bias, ns.accel_bias),
        faults=FaultConfig(ns.state_latency_ms, ns.cmd_latency_ms, ns.state_drop, ns.cmd_drop, ns.crc_corrupt,
                           ns.jitter_ms),
        pushes=tuple(parse_push(s) for s in ns.push),
        remote_script=parse_remote_script(ns.remote_script),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_arg_parser()
    ns = parser.parse_args(argv)
    try:
        cfg = config_from_args(ns)
    except ValueError as e:
        parser.error(str(e))
    bridge = SimBridge(cfg, announce_ready=True)

    def on_signal(signum: int, frame: Any) -> None:
        bridge.request_stop()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        bridge.run()
    except DDSInitError as e:
        print(f"sim bridge: error: {e}", file=sys.stderr, flush=True)
        return 2
    except BusyDomainError as e:
        print(f"sim bridge: error: {e}", file=sys.stderr, flush=True)
        return 3
    except (ModelError, ViewerError) as e:
        print(f"sim bridge: error: {e}", file=sys.stderr, flush=True)
        return 2
    return 0
