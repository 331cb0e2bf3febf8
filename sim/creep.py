"""Contact creep of the bridge: `python -m sim.creep [--seconds 10] [--out results/bridge_creep.json]`.

A standing robot under constant asymmetric hip-yaw torques (tau_ff +5 / -5 Nm on the left / right hip
yaw, on top of the drives' PD holding the default pose: the situation a balancing policy creates) must
not turn or slide on a rubber sole. On a soft contact it creeps: MuJoCo's friction constraints are soft,
so a steady tangential load is carried by a steady slip velocity. For each bridge contact setting
(robots.model.BridgeModelConfig: foot condim 3 / 4 / 6, torsional / rolling friction, pyramidal /
elliptic cone, the noslip post-solver) this measures, on plant.robot.Plant (the bridge's physics,
no DDS):

- yaw_rate_rad_s: pelvis yaw rate, least-squares slope over the loaded window after a 1 s transient
- foot_yaw_rate_rad_s: the same for each foot (ankle roll link), left and right
- slide_mps: horizontal pelvis speed, slope of the displacement over that window
- physics_step_us: wall time of one physics step (drive PD + mj_step) with the robot standing
- lockstep_rtf: simulated / wall time of the bridge process in lockstep with a lean DDS client
  (`--lockstep`, 2 steps per LowCmd), measured side by side for every setting (ratios matter: the
  machine is shared)

Sequence: 1 s on the elastic band under PD, band released, 1 s settle, then the torques for `seconds`.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import mujoco
import numpy as np

from comm import hg
from robots import g1
from robots.model import BridgeModelConfig
from sim.config import BandConfig, BridgeConfig
from plant.robot import Plant

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "results" / "bridge_creep.json"
HIP_YAW = (g1.JOINT_NAMES.index("left_hip_yaw_joint"), g1.JOINT_NAMES.index("right_hip_yaw_joint"))
TRANSIENT_S = 1.0

# the settings compared (name -> BridgeModelConfig fields over the MJCF's contact, BASE); the bridge's default is
# "noslip 4" (robots.model.BRIDGE_CONTACT)
BASE = BridgeModelConfig(contact="mjcf")
SETTINGS = {
    "mjcf (condim 3, pyramidal)": {},
    "condim 4": {"foot_condim": 4},
    "condim 4, torsional 0.05 m": {"foot_condim": 4, "foot_friction": (0.6, 0.05, 0.0001)},
    "condim 6": {"foot_condim": 6},
    "elliptic cone": {"cone": "elliptic"},
    "elliptic, condim 4": {"cone": "elliptic", "foot_condim": 4},
    "noslip 2": {"noslip_iterations": 2},
    "noslip 4": {"noslip_iterations": 4},
    "noslip 10": {"noslip_iterations": 10},
    "noslip 10, condim 4": {"noslip_iterations": 10, "foot_condim": 4},
    "noslip 10, condim 6": {"noslip_iterations": 10, "foot_condim": 6},
    "noslip 10, elliptic": {"noslip_iterations": 10, "cone": "elliptic"},
}


def _yaw(quat: np.ndarray) -> float:
    w, x, y, z = quat
    return float(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))


def _slope(t: np.ndarray, y: np.ndarray) -> float:
    return float(np.polyfit(t, y, 1)[0])


def hold_command(tau_ff: np.ndarray) -> hg.LowCmdArrays:
    return hg.lowcmd_arrays(hg.lowcmd_record(q=g1.DEFAULT_JOINT_POS, kp=g1.KP, kd=g1.KD, tau=tau_ff))


def creep(model: BridgeModelConfig, seconds: float = 10.0, torque_nm: float = 5.0) -> dict:
    """Creep of one contact setting (see the module doc); deterministic."""
    sim = Plant(BridgeConfig(model=model, band=BandConfig(enabled=True), verbose=False).plant())
    m, d = sim.model, sim.data
    feet = [m.body(n).id for n in g1.FOOT_BODIES]
    sim.set_command(hold_command(np.zeros(g1.NUM_MOTORS)))
    n1 = int(round(1.0 / sim.dt))
    for _ in range(n1):
        sim.step()
    sim.set_band(False)
    for _ in range(n1):
        sim.step()
    tau = np.zeros(g1.NUM_MOTORS)
    tau[HIP_YAW[0]], tau[HIP_YAW[1]] = torque_nm, -torque_nm
    sim.set_command(hold_command(tau))
    n = int(round(seconds / sim.dt))
    t, yaw, fyaw, xy, z = np.zeros(n), np.zeros(n), np.zeros((n, 2)), np.zeros((n, 2)), np.zeros(n)
    q = np.zeros(4)
    wall = 0.0
    for k in range(n):
        w0 = time.perf_counter()
        sim.step()
        wall += time.perf_counter() - w0
        t[k] = (k + 1) * sim.dt
        yaw[k] = _yaw(d.qpos[3:7])
        for i, b in enumerate(feet):
            mujoco.mju_mat2Quat(q, d.xmat[b])
            fyaw[k, i] = _yaw(q)
        xy[k], z[k] = d.qpos[:2], d.qpos[2]
    yaw, fyaw = np.unwrap(yaw), np.unwrap(fyaw, axis=0)
    sel = t >= TRANSIENT_S
    disp = np.linalg.norm(xy - xy[sel][0], axis=1)
    return {
        "yaw_rate_rad_s": _slope(t[sel], yaw[sel]),
        "foot_yaw_rate_rad_s": [_slope(t[sel], fyaw[sel, i]) for i in range(2)],
        "slide_mps": _slope(t[sel], disp[sel]),
        "yaw_change_rad": float(yaw[-1] - yaw[0]),
        "displacement_m": float(np.linalg.norm(xy[-1] - xy[0])),
        "min_pelvis_height_m": float(z.min()),
        "standing": bool(z.min() > 0.6),
        "physics_step_us": wall / n * 1e6,
    }


def lockstep_rtf(args: list[str], domain: int, commands: int = 1000) -> float:
    """Simulated / wall time of a `--lockstep` bridge process driven by a lean client (pre-encoded PD
    LowCmd holding the default pose, raw LowState payloads), 2 physics steps per command."""
    import queue

    from cyclonedds.core import Listener
    from cyclonedds.pub import DataWriter
    from cyclonedds.sub import DataReader
    from cyclonedds.topic import Topic
    from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowCmd_, LowState_

    from comm import dds, dds_compat
    from comm.sim_process import launch_bridge_process

    with launch_bridge_process(["--lockstep", "--gt-decimation", "1000", "--quiet", *args], domain=domain):
        dds.init_dds(domain, dds.SIM_INTERFACE)
        participant = dds.dds_participant()
        raw: queue.Queue = queue.Queue()
        st_topic = Topic(participant, hg.TOPIC_LOWSTATE, LowState_)
        cmd_topic = Topic(participant, hg.TOPIC_LOWCMD, LowCmd_)
        reader = DataReader(participant, st_topic, None,
                            Listener(on_data_available=lambda r: [raw.put(p) for p in dds_compat.take_raw_payloads(r)]))
        writer = DataWriter(participant, cmd_topic)
        sample = hg.lowcmd_wire_sample(hg.lowcmd_record(q=g1.DEFAULT_JOINT_POS, kp=g1.KP, kd=g1.KD))

        def tick_of(payload: bytes) -> int:
            return int(hg.lowstate_record_from_cdr(payload)["tick"])

        last = tick_of(raw.get(timeout=30))
        t0, tick0 = time.perf_counter(), last
        for k in range(commands):
            writer.write(sample)
            while last < tick0 + 2 * (k + 1):
                last = tick_of(raw.get(timeout=5))
        wall = time.perf_counter() - t0
        for ent in (writer, reader, cmd_topic, st_topic):
            dds_compat.delete_entity(ent)
    return (last - tick0) * 1e-3 / wall


def step_cost_us(model: BridgeModelConfig, steps: int = 2000) -> float:
    """Wall time of one physics step of the robot standing on PD (after a 0.5 s settle)."""
    sim = Plant(BridgeConfig(model=model, band=BandConfig(enabled=False), verbose=False).plant())
    sim.set_command(hold_command(np.zeros(g1.NUM_MOTORS)))
    for _ in range(500):
        sim.step()
    t = time.perf_counter()
    for _ in range(steps):
        sim.step()
    return (time.perf_counter() - t) / steps * 1e6


def timing(names: list[str], rounds: int, domain: int) -> dict:
    """Physics step cost and lockstep RTF of `names`, interleaved round by round (the machine is shared):
    medians, and ratios to the first name's medians."""
    raw = {n: {"physics_step_us": [], "lockstep_rtf": []} for n in names}
    for _ in range(rounds):
        for n in names:
            cfg = dataclasses.replace(BASE, **SETTINGS[n])
            raw[n]["physics_step_us"].append(step_cost_us(cfg))
            raw[n]["lockstep_rtf"].append(lockstep_rtf(bridge_args(SETTINGS[n]), domain))
            print(f"  {n:28s} step {raw[n]['physics_step_us'][-1]:6.0f} us  rtf {raw[n]['lockstep_rtf'][-1]:.2f}",
                  flush=True)
    out = {}
    base = {k: float(np.median(v)) for k, v in raw[names[0]].items()}
    for n in names:
        med = {k: float(np.median(v)) for k, v in raw[n].items()}
        out[n] = {**{f"{k}_median": v for k, v in med.items()}, **{f"{k}_all": v for k, v in raw[n].items()},
                  **{f"{k}_ratio": med[k] / base[k] for k in med}}
    return out


def bridge_args(fields: dict) -> list[str]:
    """sim CLI flags of a BridgeModelConfig contact setting (over the MJCF's contact)."""
    out = ["--contact", "mjcf"]
    if "foot_condim" in fields:
        out += ["--foot-condim", str(fields["foot_condim"])]
    if "foot_friction" in fields:
        out += ["--foot-friction", ",".join(str(x) for x in fields["foot_friction"])]
    if "cone" in fields:
        out += ["--cone", fields["cone"]]
    if "noslip_iterations" in fields:
        out += ["--noslip-iterations", str(fields["noslip_iterations"])]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.creep", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds under the hip-yaw torques")
    ap.add_argument("--torque", type=float, action="append", default=[],
                    help="Nm: +T on the left hip yaw, -T on the right (repeatable; default 5 and 10)")
    ap.add_argument("--only", action="append", default=[], help="measure only these setting names")
    ap.add_argument("--no-rtf", action="store_true", help="skip the lockstep DDS real-time factor")
    ap.add_argument("--domain", type=int, default=88, help="DDS domain for the lockstep measurement")
    ap.add_argument("--timing", action="append", default=[], metavar="NAME",
                    help="only the interleaved timing of these settings (the first is the baseline)")
    ap.add_argument("--rounds", type=int, default=3, help="--timing rounds")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    unknown = [n for n in args.only + args.timing if n not in SETTINGS]
    if unknown:
        ap.error(f"unknown settings {unknown}; known: {list(SETTINGS)}")
    prev = json.loads(Path(args.out).read_text()) if Path(args.out).is_file() else {}
    if args.timing:
        prev["timing"] = {"rounds": args.rounds, "note": "interleaved; shared 2-core machine, training in the "
                          "background: ratios to the first setting", "settings": timing(args.timing, args.rounds, args.domain)}
        Path(args.out).write_text(json.dumps(prev, indent=2))
        print(args.out)
        return 0
    torques = args.torque or [5.0, 10.0]
    rows = {}
    for name, fields in SETTINGS.items():
        if args.only and name not in args.only:
            continue
        row: dict = {"fields": {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}}
        steps = []
        for tq in torques:
            r = creep(dataclasses.replace(BASE, **fields), args.seconds, tq)
            steps.append(r.pop("physics_step_us"))
            row[f"{tq:g}Nm"] = r
            print(f"{name:28s} {tq:4g} Nm  yaw {r['yaw_rate_rad_s']:+.5f} rad/s  feet {r['foot_yaw_rate_rad_s'][0]:+.5f} "
                  f"{r['foot_yaw_rate_rad_s'][1]:+.5f}  slide {r['slide_mps'] * 1000:7.3f} mm/s  "
                  f"standing {r['standing']}", flush=True)
        row["physics_step_us"] = float(np.mean(steps))
        if not args.no_rtf:
            row["lockstep_rtf"] = lockstep_rtf(bridge_args(fields), args.domain)
        print(f"{name:28s} step {row['physics_step_us']:.0f} us  lockstep rtf {row.get('lockstep_rtf', float('nan')):.2f}",
              flush=True)
        rows[name] = row
    out = {"what": "bridge contact creep under +T/-T Nm hip-yaw torques on PD holding the default pose "
                   "(sim/creep.py); rates are slopes after a 1 s transient",
           "seconds": args.seconds, "torques_nm": torques,
           "note": "timings on a shared 2-core machine with a training in the background: compare ratios "
                   "(see timing: interleaved)",
           "settings": {**prev.get("settings", {}), **rows}}
    if "timing" in prev:
        out["timing"] = prev["timing"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(args.out)
    return 0


def render_bridge_creep_table(results: dict) -> str:
    """The markdown table of results/bridge_creep.json (make bridge-creep): per contact setting, the creep under
    5 and 10 Nm of opposite hip-yaw torque (its step timings are left out: measured beside a training)."""
    lines = ["| contact | 5 Nm: pelvis slide | 5 Nm: foot yaw | 10 Nm |", "|---|---|---|---|"]
    for name, s in results["settings"].items():
        five, ten = s["5Nm"], s["10Nm"]
        yaw = max(abs(v) for v in five["foot_yaw_rate_rad_s"])
        ten_cell = f"stands, {1e3 * ten['slide_mps']:.2f} mm/s" if ten["standing"] else "falls"
        lines.append(f"| {name} | {1e3 * five['slide_mps']:.2f} mm/s | {1e3 * yaw:.2f} mrad/s | {ten_cell} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
