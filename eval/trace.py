"""One episode of a policy, step by step: how it falls. Every `every` control steps the pelvis roll and pitch
(deg), its height, each foot's normal force from the floor (N), each foot's lowest sole height (m) and the
COM's margin inside the support polygon (cm; motions.balance.support_margin over the sole spheres within
CONTACT_HEIGHT_M of the floor; negative outside, nan with no foot down), of the robot and, for a tracking
policy, of its reference at that frame (where the runtime placed it), on C MuJoCo with the policy on the
true state, no randomisation and no pushes; a tracking policy can start in its reference's state at a frame
(`--start-frame`, as `make eval`'s segments do).

    python -m eval.trace runs/policies/dance_calm_field_w15_s0 --start-frame 100 --seconds 4
"""
from __future__ import annotations

import argparse
import math
import sys

import mujoco
import numpy as np

from eval.closed_loop import ClosedLoop
from eval.config import EvalError
from eval.policy_eval import ghost_qpos, load, reference_bounds, start_episode
from eval.sim import EvalSim
from motions.balance import support_margin
from motions.clips import CONTACT_HEIGHT_M
from policies.runtime import PolicyRuntime
from robots.body_frames import quat_to_mat
from robots.physics import fallen

def roll_pitch_deg(quat: np.ndarray) -> tuple[float, float]:
    r = quat_to_mat(np.asarray(quat, float))
    return math.degrees(math.atan2(r[2, 1], r[2, 2])), math.degrees(-math.asin(float(np.clip(r[2, 0], -1, 1))))


def com_margin(m: mujoco.MjModel, d: mujoco.MjData, soles) -> float:
    """The whole robot's COM's signed distance inside the convex hull of the sole spheres within CONTACT_HEIGHT_M
    of the floor (z = 0), m; NaN with no sphere down. Needs d's kinematics and COM (mj_step or mj_comPos)."""
    ids = np.concatenate([np.atleast_1d(g) for g in soles])
    down = ids[d.geom_xpos[ids, 2] - m.geom_size[ids, 0] <= CONTACT_HEIGHT_M]
    return support_margin(d.geom_xpos[down, :2], d.subtree_com[0, :2]) if down.size else float("nan")


def trace(policy, start_frame: int | None = None, seconds: float = 4.0,
          every: int = 5) -> tuple[list[dict], float | None]:
    """(rows, fell_at_s): a row every `every` control steps until the fall (robots.physics.fallen, the reference's
    bounds for a tracking policy) or `seconds`."""
    runtime = PolicyRuntime(load(policy))
    sim = EvalSim()
    tr = runtime.tracking
    k0 = start_episode(sim, runtime, start_frame)
    loop = ClosedLoop(sim, runtime, true_state=True)
    loop.start()
    kp, kd = np.asarray(runtime.spec.kp, float), np.asarray(runtime.spec.kd, float)
    dt = runtime.control_dt
    decim = int(round(dt / sim.m.opt.timestep))
    n = min(int(round(seconds / dt)), runtime.n_steps - k0)
    ghost = mujoco.MjData(sim.m)
    rows = []
    for k in range(n):
        _, _, _, quat, _, z = sim.state()
        if k % every == 0:
            roll, pitch = roll_pitch_deg(quat)
            ref = float("nan")  # sim.d's COM is mj_step's (or the reset's mj_forward), as its positions are
            if tr is not None and tr.needs_anchor:
                ghost.qpos[:] = ghost_qpos(sim, tr, k0 + k)
                mujoco.mj_kinematics(sim.m, ghost)
                mujoco.mj_comPos(sim.m, ghost)
                ref = com_margin(sim.m, ghost, sim.soles)
            rows.append({"t": round(k * dt, 3), "frame": k0 + k, "roll_deg": roll, "pitch_deg": pitch, "z": z,
                         "foot_force_n": sim.sole_forces().tolist(), "sole_height_m": sim.sole_heights().tolist(),
                         "com_margin_m": com_margin(sim.m, sim.d, sim.soles), "ref_com_margin_m": ref})
        if fallen(z, quat, **reference_bounds(tr, k0 + k)):
            return rows, k * dt
        target = loop.act(k0 + k).target
        for s in range(decim):
            ts = k * dt + s * sim.m.opt.timestep
            sim.drive(*loop.command(ts, target, kp, kd, policy=True), ts)
            sim.step()
    return rows, None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.trace", description=__doc__.split("\n\n")[0])
    p.add_argument("policy", help="a policy folder or file (as make eval POLICY=...)")
    p.add_argument("--start-frame", type=int, default=None,
                   help="start a tracking policy in its reference's state at this frame")
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--every", type=int, default=5, help="a row every N control steps")
    a = p.parse_args(argv)
    try:
        rows, fell = trace(a.policy, a.start_frame, a.seconds, a.every)
    except EvalError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{'t s':>6} {'frame':>5} {'roll':>6} {'pitch':>6} {'z m':>6}  {'force N (left, right)':>21}  "
          f"{'sole mm (left, right)':>21}  COM margin cm (robot, reference)")
    for r in rows:
        f, h = r["foot_force_n"], r["sole_height_m"]
        print(f"{r['t']:6.2f} {r['frame']:5d} {r['roll_deg']:6.1f} {r['pitch_deg']:6.1f} {r['z']:6.3f}  "
              f"{f[0]:10.0f} {f[1]:10.0f}  {h[0] * 1e3:10.1f} {h[1] * 1e3:10.1f}  "
              f"{r['com_margin_m'] * 100:8.1f} {r['ref_com_margin_m'] * 100:8.1f}")
    print(f"fell at {fell:.2f} s" if fell is not None else f"no fall in {a.seconds:g} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
