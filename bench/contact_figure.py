"""Contact models side by side: normal force per foot sphere vs distance, and rest penetration.

`python -m bench.contact_figure [--timing]` writes docs/contact_models.png and
results/contact_models.json:
- the sigmoid contact of train/contact.py (law "softplus", the default, and "product") at
  k = 50, 100, 300 1/m, evaluated from the force law;
- today's MJX native contact (the training model: solref time constant 0.01 s, dampratio 1, MuJoCo's
  default solimp) and the C MuJoCo bridge model's contact, both MEASURED: the whole robot in the
  default pose, at rest or moving down at 0.5 m/s, placed so its 8 foot spheres are at distance d,
  one C MuJoCo mj_forward, normal forces from mj_contactForce summed and divided by 8. MJX solves the
  same constraint model with the same solver settings (Newton, 1 iteration), so C MuJoCo's numbers
  stand for it. These forces are what the constraint solver produces for this robot at that state;
  unlike a force law they depend on the masses;
- rest penetration of each model: the PD-held default pose settled 2 s, mean sphere distance over the
  last 0.5 s (> 0 = the sphere rests above the floor). The sigmoid contact is stepped by C MuJoCo on
  the training model (foot contact off, the law's forces as qfrc_applied, 300 Hz): the physics MJX
  runs with train/contact.py (tests/test_contact.py checks MJX at k = 300);
- with --timing: one batched (16) jit-compiled mjx.step with vs without the sigmoid contact, after
  compile.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from robots import g1
from robots import model as M
from train import contact as C

ROOT = Path(__file__).resolve().parents[1]
KAPPAS = (50.0, 100.0, 300.0)
D_GRID = np.linspace(0.060, -0.010, 141)  # m
SPEEDS = (0.0, 0.5)  # approach speed, m/s (v_n = -speed)


def _place(m, d, g, dist, vz):
    mujoco.mj_resetDataKeyframe(m, d, 0)
    mujoco.mj_kinematics(m, d)
    d.qpos[2] += dist - (d.geom_xpos[g, 2] - m.geom_size[g, 0]).min()
    d.qvel[:] = 0.0
    d.qvel[2] = vz


def measured_curve(m: mujoco.MjModel, dists, speed) -> np.ndarray:
    """Mean normal force per foot sphere (N) of MuJoCo's constraint contact, robot at distance d."""
    g = M.sole_spheres(m).ravel()
    floor = m.geom("floor").id
    d = mujoco.MjData(m)
    f6 = np.zeros(6)
    out = []
    for dist in dists:
        _place(m, d, g, dist, -speed)
        mujoco.mj_forward(m, d)
        fz = 0.0
        for i in range(d.ncon):
            c = d.contact[i]
            if floor in (c.geom1, c.geom2):
                mujoco.mj_contactForce(m, d, i, f6)
                fz += f6[0]
        out.append(fz / len(g))
    return np.array(out)


def _pd(m, d):
    qa, da = M.motor_qpos_adr(m), M.motor_dof_adr(m)
    d.ctrl[:] = np.clip(g1.KP * (g1.DEFAULT_JOINT_POS - d.qpos[qa]) - g1.KD * d.qvel[da],
                        -g1.TORQUE_LIMIT, g1.TORQUE_LIMIT)


def _settle_stats(dist_hist, h_hist, n_last):
    b = np.array(dist_hist[-n_last:])
    h = np.array(h_hist)
    return {"rest_distance_mm": float(b.mean() * 1e3), "rest_penetration_mm": float(-b.mean() * 1e3),
            "distance_std_mm": float(b.mean(1).std() * 1e3), "pelvis_height_end_m": float(h[-1]),
            "standing": bool(np.all(np.isfinite(h)) and h[-1] > 0.7 and h[-n_last:].std() < 0.005)}


def rest_native(m: mujoco.MjModel, T=2.0) -> dict:
    """PD-held default pose on MuJoCo's own contact, settled: mean sphere distance (stance)."""
    g = M.sole_spheres(m).ravel()
    d = mujoco.MjData(m)
    _place(m, d, g, 0.0, 0.0)
    dist, h = [], []
    for _ in range(int(T / m.opt.timestep)):
        _pd(m, d)
        mujoco.mj_step(m, d)
        dist.append(d.geom_xpos[g, 2] - m.geom_size[g, 0])
        h.append(d.qpos[2])
    return _settle_stats(dist, h, int(0.5 / m.opt.timestep))


def rest_sigmoid(p: C.ContactParams, substep=C.SUBSTEP, T=2.0) -> dict:
    """PD-held default pose on the sigmoid contact (C MuJoCo steps, forces from train/contact.py)."""
    m = M.build_training_model(M.TrainModelConfig(timestep=substep))
    g = M.sole_spheres(m).ravel()
    m = C.disable_foot_contact(m, g)
    d = mujoco.MjData(m)
    _place(m, d, g, 0.0, 0.0)
    forces = jax.jit(C.sphere_contact_forces)
    r = m.geom_size[g, 0]
    jp = np.zeros((3, m.nv))
    J = np.zeros((len(g), 3, m.nv))
    dist, h = [], []
    for _ in range(int(T / substep)):
        mujoco.mj_kinematics(m, d)
        mujoco.mj_comPos(m, d)
        for i, gi in enumerate(g):
            pt = d.geom_xpos[gi].copy()
            pt[2] -= r[i]
            mujoco.mj_jac(m, d, jp, None, pt, m.geom_bodyid[gi])
            J[i] = jp
        f = np.asarray(forces(d.geom_xpos[g], J @ d.qvel, r, p))
        d.qfrc_applied[:] = np.einsum("skn,sk->n", J, f)
        _pd(m, d)
        mujoco.mj_step(m, d)
        dist.append(d.geom_xpos[g, 2] - r)
        h.append(d.qpos[2])
        if not np.isfinite(d.qpos).all():
            break
    return _settle_stats(dist, h, int(0.5 / substep))


def timing(batch=16, calls=50) -> dict:
    from mujoco import mjx

    out = {"batch": batch, "calls": calls}
    m_nat = M.build_training_model(M.TrainModelConfig(timestep=C.SUBSTEP))
    g = M.sole_spheres(m_nat).ravel()
    m_sig = C.disable_foot_contact(m_nat, g)
    p = C.ContactParams()
    for name, m, fn in (("mjx_native", m_nat, lambda mx, d: mjx.step(mx, d)),
                        ("sigmoid", m_sig, lambda mx, d: C.step(mx, d, g, p)[0])):
        mx = mjx.put_model(m)
        d0 = mjx.put_data(m, mujoco.MjData(m))
        mujoco_d = mujoco.MjData(m)
        mujoco.mj_resetDataKeyframe(m, mujoco_d, 0)
        d0 = mjx.put_data(m, mujoco_d)
        db = jax.tree.map(lambda x: jnp.stack([x] * batch), d0)
        f = jax.jit(jax.vmap(lambda d: fn(mx, d)))
        t0 = time.perf_counter()
        jax.block_until_ready(f(db))
        compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        x = db
        for _ in range(calls):
            x = f(x)
        jax.block_until_ready(x)
        out[name] = {"ms_per_batched_step": (time.perf_counter() - t0) / calls * 1e3, "compile_s": compile_s}
    out["ratio_sigmoid_over_native"] = out["sigmoid"]["ms_per_batched_step"] / out["mjx_native"]["ms_per_batched_step"]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timing", action="store_true", help="also time a batched mjx.step with/without")
    ap.add_argument("--out-png", default=str(ROOT / "docs" / "contact_models.png"))
    ap.add_argument("--out-json", default=str(ROOT / "results" / "contact_models.json"))
    args = ap.parse_args(argv)

    m_train = M.build_training_model()  # today's MJX contact, 200 Hz, solref 0.01 s
    m_bridge = M.build_bridge_model()
    curves = {}
    for law in C.LAWS:
        for k in KAPPAS:
            p = C.ContactParams(kappa=k, law=law)
            curves[f"sigmoid_{law}_k{int(k)}"] = {
                f"v{s}": np.asarray(jax.vmap(lambda x, s=s: C.normal_force(x, jnp.float32(-s), p))(
                    jnp.asarray(D_GRID, jnp.float32))).tolist() for s in SPEEDS}
    curves["mjx_native"] = {f"v{s}": measured_curve(m_train, D_GRID, s).tolist() for s in SPEEDS}
    curves["bridge_c_mujoco"] = {f"v{s}": measured_curve(m_bridge, D_GRID, s).tolist() for s in SPEEDS}

    rest = {"mjx_native": rest_native(m_train), "bridge_c_mujoco": rest_native(m_bridge)}
    for law in C.LAWS:
        for k in KAPPAS:
            p = C.ContactParams(kappa=k, law=law)
            rest[f"sigmoid_{law}_k{int(k)}"] = {**rest_sigmoid(p),
                                                "formula_rest_distance_mm_41N": float(C.rest_distance(41.0, p) * 1e3)
                                                if law == "softplus" else None}
    bridge_pen = rest["bridge_c_mujoco"]["rest_penetration_mm"]
    for v in rest.values():
        v["penetration_minus_bridge_mm"] = v["rest_penetration_mm"] - bridge_pen

    p0 = C.ContactParams()
    result = {
        "description": __doc__,
        "distance_m": D_GRID.tolist(),
        "approach_speeds_m_s": list(SPEEDS),
        "normal_force_per_sphere_N": curves,
        "rest": rest,
        "params": {"stiffness": p0.stiffness, "damping": p0.damping, "friction": p0.friction, "eps": p0.eps,
                   "friction_compliance": p0.friction_compliance, "substep_s": C.SUBSTEP,
                   "sphere_mass_kg": C.G1_SPHERE_MASS,
                   "stability_at_substep": p0.stability(C.SUBSTEP, C.G1_SPHERE_MASS),
                   "stability_at_200Hz": p0.stability(0.005, C.G1_SPHERE_MASS)},
        "native_model": {"train_timeconst_s": M.STIFFNESS_TIMECONST["stiff"], "bridge_timeconst_s": M.BRIDGE_TIMECONST,
                         "solimp": m_train.geom_solimp[M.sole_spheres(m_train)[0, 0]].tolist()},
    }
    if args.timing:
        result["timing"] = timing()
    Path(args.out_json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out_json).write_text(json.dumps(result, indent=1))
    plot(result, args.out_png)
    print(json.dumps({k: {kk: round(vv, 3) if isinstance(vv, float) else vv for kk, vv in v.items()}
                      for k, v in rest.items()}, indent=1))
    if "timing" in result:
        print(json.dumps(result["timing"], indent=1))


def plot(result, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dmm = np.asarray(result["distance_m"]) * 1e3
    colors = {50: "tab:orange", 100: "tab:green", 300: "tab:blue"}
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2), sharey=True)
    for ax, s in zip(axes, result["approach_speeds_m_s"]):
        key = f"v{s}"
        for law, ls in (("softplus", "-"), ("product", ":")):
            for k in KAPPAS:
                y = result["normal_force_per_sphere_N"][f"sigmoid_{law}_k{int(k)}"][key]
                ax.plot(dmm, y, ls, color=colors[int(k)], lw=2 if law == "softplus" else 1.6,
                        label=f"sigmoid {law}, k = {int(k)} 1/m")
        ax.plot(dmm, result["normal_force_per_sphere_N"]["mjx_native"][key], "-", color="black", lw=2,
                label="MJX native (training, solref 0.01 s)")
        ax.plot(dmm, result["normal_force_per_sphere_N"]["bridge_c_mujoco"][key], "--", color="tab:red", lw=2,
                label="C MuJoCo bridge (solref 0.02 s)")
        ax.axvline(0, color="grey", lw=0.8)
        ax.axhline(327.08 / 8, color="grey", lw=0.8, ls="--")
        ax.text(59, 327.08 / 8 + 4, "robot weight / 8 spheres", ha="left", fontsize=8, color="grey")
        ax.set_xlim(60, -10)
        ax.set_ylim(0, 400)
        ax.set_xlabel("sphere-floor distance d (mm)   (> 0 apart, < 0 penetrating)")
        ax.set_title("at rest" if s == 0 else f"approaching at {s} m/s")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("normal force per foot sphere (N)")
    axes[1].legend(fontsize=8, loc="upper left")
    rest = result["rest"]
    lines = [f"{k.replace('sigmoid_', '')}: {v['rest_penetration_mm']:+.2f} mm"
             + ("" if v["standing"] else " (PD pose falls)") for k, v in rest.items()]
    axes[0].text(0.02, 0.98, "rest penetration (PD-held pose, > 0 = into floor):\n" + "\n".join(lines),
                 transform=axes[0].transAxes, va="top", fontsize=7.5, family="monospace",
                 bbox=dict(facecolor="white", alpha=0.85, edgecolor="grey"))
    fig.suptitle("G1 foot-sphere contact models: sigmoid contact (train/contact.py, K = 2e4 N/m, D = 60 N s/m) "
                 "vs MuJoCo constraint contact (measured, whole robot)", fontsize=10)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


REST_ROWS = (("bridge_c_mujoco", "C MuJoCo bridge (eval, sim bridge)"), ("mjx_native", "MJX constraint, solref 0.01 s (training, `mjx`)"),
             ("sigmoid_softplus_k300", "sigmoid k = 300"), ("sigmoid_softplus_k100", "sigmoid k = 100"),
             ("sigmoid_softplus_k50", "sigmoid k = 50"))


def render_contact_models_table(results: dict) -> str:
    """Rest penetration of the robot held in the default pose by PD, per contact model (results/contact_models.json,
    make contact-figure); > 0 is into the floor. A model the robot does not stand on gives the force law's rest
    distance under a sphere's share of the weight."""
    lines = ["| model | rest penetration | minus bridge | stands on PD alone |", "|---|---|---|---|"]
    for key, label in REST_ROWS:
        r = results["rest"][key]
        if r["standing"]:
            pen = f"{r['rest_penetration_mm']:+.2f} mm"
            diff = "-" if key == "bridge_c_mujoco" else f"{r['penetration_minus_bridge_mm']:+.2f} mm"
        else:
            pen, diff = f"law: {-r['formula_rest_distance_mm_41N']:.1f} mm", "-"
        lines.append(f"| {label} | {pen} | {diff} | {'yes' if r['standing'] else 'no: falls'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
