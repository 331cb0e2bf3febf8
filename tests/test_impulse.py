"""train/impulse.py, the seed's impulse foot contact: one Gauss-Seidel sweep by hand, the cone, a block on a
tilted floor against Coulomb's law and C MuJoCo, a float64 finite-difference check on a sliding segment,
the modes' forward passes, and the G1 on C MuJoCo's bridge model: rest penetration, a 20 cm drop, 10 s
standing under PD. The training config's refusals are at the end (no compile)."""
from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

from robots import g1
from robots import model as M
from robots import physics as P
from train import contact as C
from train import impulse as I


def _problem(Gb, v, c=(-0.001, -0.001), F=0):
    S = len(v)
    return I.Problem(Gb=jnp.asarray(Gb, jnp.float32), v=jnp.asarray(v, jnp.float32), c=jnp.asarray(c, jnp.float32),
                     Gfc=jnp.zeros((F, S, 3)), Gff=jnp.eye(F), vf=jnp.zeros(F), fmax=jnp.zeros(F),
                     lam0=jnp.zeros(F), p0=jnp.zeros((S, 3)))


# two slots: G11 = diag(2, 2, 1), G22 = diag(4, 4, 2), G12 = G21 = 0.5 I; v1 = (0.1, 0, -1), v2 = (0, 0, -0.5)
G2 = np.zeros((2, 2, 3, 3))
G2[0, 0], G2[1, 1] = np.diag([2.0, 2.0, 1.0]), np.diag([4.0, 4.0, 2.0])
G2[0, 1] = G2[1, 0] = 0.5 * np.eye(3)
V2 = [[0.1, 0.0, -1.0], [0.0, 0.0, -0.5]]
W2 = jnp.array([1.0, 0.5])


def _sweep(mu, relaxation):
    (applied, lam), raw = I.gauss_seidel(_problem(G2, V2), W2, jnp.float32(mu), 1, relaxation)
    return np.asarray(applied), np.asarray(raw)


def test_one_gauss_seidel_sweep_by_hand():
    # start p1 = -G11^-1 v1 = (-0.05, 0, 1), p2 = -G22^-1 v2 = (0, 0, 0.25)
    # slot 1: r = G11 p1 + w2 G12 p2 + v1 = (0, 0, 1 + 0.0625 - 1) -> p1 = (-0.05, 0, 0.9375) (inside the cone)
    # slot 2: r = w1 G21 p1 + G22 p2 + v2 = (-0.025, 0, 0.46875) -> p2 = (0.00625, 0, 0.015625); applied w2 p2
    applied, raw = _sweep(0.5, "block")
    np.testing.assert_allclose(raw, [[-0.05, 0, 0.9375], [0.00625, 0, 0.015625]], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(applied, [[-0.05, 0, 0.9375], [0.003125, 0, 0.0078125]], rtol=1e-6, atol=1e-8)
    # the seed's step r_i = 1 / (1 + sum_j det G_ij): r1 = 1 / 5.125, r2 = 1 / 33.125
    # slot 1: p1_z = 1 - 0.0625 / 5.125 = 0.987805; slot 2: r = (-0.025, 0, 0.493902),
    # p2 = (0.025 / 33.125, 0, 0.25 - 0.493902 / 33.125) = (0.000754717, 0, 0.235090)
    applied, raw = _sweep(0.5, "seed")
    np.testing.assert_allclose(raw, [[-0.05, 0, 0.987805], [0.000754717, 0, 0.235090]], rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(applied[1], [0.000377358, 0, 0.117545], rtol=1e-5)
    # mu = 0.01: slot 1 projected to |p_t| = 0.01 * 0.9375; slot 2 then sees it: r = (-0.0046875, 0, 0.46875),
    # p2 = (0.001171875, 0, 0.015625) projected to (0.00015625, 0, 0.015625)
    applied, raw = _sweep(0.01, "block")
    np.testing.assert_allclose(raw, [[-0.009375, 0, 0.9375], [0.00015625, 0, 0.015625]], rtol=1e-6, atol=1e-9)


def test_cone_projection_and_gates():
    p = jnp.array([[3.0, 4.0, 10.0], [3.0, 4.0, 2.0], [1.0, 1.0, -1.0], [0.0, 0.0, 0.0]])
    out = np.asarray(I.project_cone(p, 0.5))
    np.testing.assert_allclose(out[0], [3, 4, 10])  # |p_t| = 5 <= 0.5 * 10
    np.testing.assert_allclose(out[1], [0.6, 0.8, 2.0], rtol=1e-6)  # scaled onto 0.5 * 2 = 1
    np.testing.assert_array_equal(out[2:], 0.0)  # pulling: no impulse; zero stays zero
    g = jax.grad(lambda x: I.project_cone(x, 0.5).sum())(jnp.zeros((1, 3)))
    assert np.all(np.isfinite(np.asarray(g)))
    c = jnp.array([-0.01, 0.0, 0.01, 1.0])
    np.testing.assert_allclose(I.gate(c, 300.0, "soft"), [1 / (1 + math.exp(-3)), 0.5, 1 / (1 + math.exp(3)), 1 / (1 + math.exp(50))],
                               rtol=1e-5)
    np.testing.assert_array_equal(I.gate(c, 300.0, "hard"), [1, 1, 0, 0])


def test_joint_friction_row_clips_at_its_bound():
    # one slot far away (no coupling), one friction row: G_ff = 2, v_f = 1 -> stuck impulse -0.5, bound 0.1
    prob = _problem(G2[:1, :1], [[0.0, 0.0, 0.1]], c=(0.5,), F=1)
    for fmax, want in ((0.1, -0.1), (1.0, -0.5)):
        pr = prob._replace(Gff=jnp.array([[2.0]]), vf=jnp.array([1.0]), fmax=jnp.array([fmax]))
        (_, lam), _ = I.gauss_seidel(pr, jnp.array([0.0]), jnp.float32(0.5), 3, "block")
        assert float(lam[0]) == pytest.approx(want, rel=1e-6)


# ------------------------------------------------------------------ a block on a tilted floor
BLOCK_XML = """
<mujoco>
  <option timestep="0.005" cone="elliptic" noslip_iterations="20"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" friction="{mu} 0.005 0.0001"/>
    <body name="block" pos="0 0 0.06">
      <freejoint/>
      <geom type="box" size="0.1 0.1 0.05" mass="2" contype="0" conaffinity="0"/>
      <geom type="sphere" size="0.01" pos=" 0.09  0.09 -0.05" friction="{mu} 0.005 0.0001"/>
      <geom type="sphere" size="0.01" pos=" 0.09 -0.09 -0.05" friction="{mu} 0.005 0.0001"/>
      <geom type="sphere" size="0.01" pos="-0.09  0.09 -0.05" friction="{mu} 0.005 0.0001"/>
      <geom type="sphere" size="0.01" pos="-0.09 -0.09 -0.05" friction="{mu} 0.005 0.0001"/>
    </body>
  </worldbody>
</mujoco>"""
MU = 0.5


def block_model(theta_deg: float):
    """The block with gravity tilted by theta about y (a floor tilted by theta); spheres resting at c = 0."""
    m = mujoco.MjModel.from_xml_string(BLOCK_XML.format(mu=MU))
    th = math.radians(theta_deg)
    m.opt.gravity[:] = [9.81 * math.sin(th), 0.0, -9.81 * math.cos(th)]
    return m


def block_spheres(m):
    return np.array([i for i in range(m.ngeom) if m.geom_type[i] == mujoco.mjtGeom.mjGEOM_SPHERE])


@pytest.fixture(scope="module")
def block_rollout():
    """jit(theta-independent) rollout of the block on the impulse contact: (x(t), impulses) for n steps."""
    m = block_model(0.0)
    sg = block_spheres(m)
    mj = C.disable_foot_contact(m, sg)
    mx = mjx.put_model(mj)

    @jax.jit
    def run(gravity, qvel0, mode_soft):
        mxg = mx.replace(opt=mx.opt.replace(gravity=gravity))
        d0 = mjx.put_data(mj, mujoco.MjData(mj)).replace(qvel=qvel0, userdata=jnp.zeros(I.warm_start_size(sg)))

        def sub(d, _):
            p_soft = I.ImpulseParams(kappa=300.0, friction=MU, mode="soft")
            p_hard = I.ImpulseParams(kappa=300.0, friction=MU, mode="hard")
            ds, imps = I.step(mxg, d, sg, p_soft)
            dh, imph = I.step(mxg, d, sg, p_hard)
            d = jax.tree.map(lambda a, b: jnp.where(mode_soft, a, b), ds, dh)
            return d, (d.qpos, jnp.where(mode_soft, imps, imph))

        return jax.lax.scan(sub, d0, None, length=200)[1]

    return m, run


@pytest.mark.jax
@pytest.mark.parametrize("theta", [20.0, 35.0])
def test_block_slides_by_coulomb_and_as_c_mujoco(block_rollout, theta):
    m, run = block_rollout
    mt = block_model(theta)
    a_coulomb = max(0.0, 9.81 * (math.sin(math.radians(theta)) - MU * math.cos(math.radians(theta))))
    # C MuJoCo, the same block with its own (elliptic, noslip) contact
    d = mujoco.MjData(mt)
    mujoco.mj_forward(mt, d)
    for _ in range(200):
        mujoco.mj_step(mt, d)
    x_c = d.qpos[0] - 0.0
    for soft in (False, True):
        qpos, imp = run(jnp.asarray(mt.opt.gravity, jnp.float32), jnp.zeros(6), soft)
        x = float(qpos[-1, 0])
        # 1 s from rest: x = a / 2; sticking (20 deg, tan < mu): no slide
        assert x == pytest.approx(a_coulomb / 2, abs=0.01 if soft else 0.003), (theta, soft, x)
        assert x == pytest.approx(x_c, abs=0.01 if soft else 0.004), (theta, soft, x, x_c)
        normal = float(imp[-1, :, 2].sum()) / 0.005
        weight = 2.0 * 9.81 * math.cos(math.radians(theta))
        # the floor carries the block's normal weight (soft: the residual (1 - s) of the gated impulse)
        assert normal == pytest.approx(weight, rel=0.02), (theta, soft, normal)


FD_SCRIPT = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np, mujoco, math, sys
    jax.config.update("jax_enable_x64", True)
    sys.path.insert(0, ".")
    from mujoco import mjx
    from tests.test_impulse import block_model, block_spheres
    from train import contact as C, impulse as I
    m = block_model(35.0)
    sg = block_spheres(m)
    mj = C.disable_foot_contact(m, sg)
    mx = mjx.put_model(mj)
    d0 = mjx.put_data(mj, mujoco.MjData(mj)).replace(userdata=jnp.zeros(I.warm_start_size(sg)))
    p = I.ImpulseParams(kappa=300.0, friction=0.5, mode="soft")

    def final(x):  # x = (z0 offset, vx0, vz0): the block sliding 20 substeps; returns (x, z) at the end
        d = d0.replace(qpos=d0.qpos.at[2].add(x[0]), qvel=d0.qvel.at[0].set(x[1]).at[2].set(x[2]))
        d = jax.lax.fori_loop(0, 20, lambda _, d: I.step(mx, d, sg, p)[0], d)
        return d.qpos[jnp.array([0, 2])]

    x0 = jnp.array([-0.002, 0.3, -0.05])
    J = np.asarray(jax.jit(jax.jacrev(final))(x0))
    f = jax.jit(final)
    eps = 1e-6
    fd = np.stack([(np.asarray(f(x0 + eps * e)) - np.asarray(f(x0 - eps * e))) / (2 * eps) for e in np.eye(3)], 1)
    print("J", J.tolist())
    print("FD", fd.tolist())
    err = np.abs(J - fd).max() / np.abs(fd).max()
    print("relerr", err)
    assert err < 1e-5, err
    """
)


@pytest.mark.jax
def test_finite_differences_match_autodiff_float64_sliding():
    """d(final x, z)/d(z0, vx0, vz0) of the block sliding on the soft contact (contact active throughout:
    a smooth segment), in float64 in a subprocess so x64 does not leak into other tests."""
    out = subprocess.run([sys.executable, "-c", FD_SCRIPT], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "relerr" in out.stdout


# ------------------------------------------------------------------ the G1 against C MuJoCo's bridge model
def _sphere_bottoms(m, d, sg):
    return d.geom_xpos[sg, 2] - m.geom_size[sg, 0]


def c_mujoco_run(drop: float, seconds: float):
    """The PD-held home pose on the bridge model (1 kHz, its noslip contact): per 5 ms the pelvis (x, y, z,
    yaw), sphere bottoms, and vz."""
    m = M.build_bridge_model()
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    mujoco.mj_forward(m, d)
    sg = M.sole_spheres(m).ravel()
    d.qpos[2] += drop - _sphere_bottoms(m, d, sg).min()
    mujoco.mj_forward(m, d)
    qadr, dadr = M.motor_qpos_adr(m), M.motor_dof_adr(m)
    qt = d.qpos[qadr].copy()
    rec = []
    for k in range(int(round(seconds / m.opt.timestep))):
        d.ctrl[:] = P.pd_torque(qt, d.qpos[qadr], d.qvel[dadr], g1.KP, g1.KD, tau_max=g1.TORQUE_LIMIT)
        mujoco.mj_step(m, d)
        if (k + 1) % 5 == 0:
            rec.append(np.concatenate([d.qpos[:3], [2 * math.atan2(d.qpos[6], d.qpos[3]), d.qvel[2]],
                                       _sphere_bottoms(m, d, sg)]))
    return np.array(rec)


STEPS_10S = 2000  # 10 s at 5 ms


@pytest.fixture(scope="module")
def g1_impulse():
    """jit rollouts of the PD-held G1 on the impulse contact (feet-only training model, 5 ms substeps), one
    per mode; each returns per step (qpos[:7], vz, sphere bottoms, normal impulses) for STEPS_10S steps."""
    m = M.build_training_model(M.TrainModelConfig(timestep=0.005))
    sg = M.sole_spheres(m).ravel()
    mj, fdofs, floss = I.without_frictionloss(C.disable_foot_contact(m, sg))
    mx = mjx.put_model(mj)
    qadr, dadr = M.motor_qpos_adr(mj), M.motor_dof_adr(mj)
    d = mujoco.MjData(mj)
    mujoco.mj_resetDataKeyframe(mj, d, 0)
    mujoco.mj_forward(mj, d)
    qt = jnp.asarray(d.qpos[qadr], jnp.float32)
    home = d.qpos.copy()
    bottom0 = _sphere_bottoms(mj, d, sg).min()
    kp, kd, lim = (jnp.asarray(x, jnp.float32) for x in (g1.KP, g1.KD, g1.TORQUE_LIMIT))

    def drives(q, v):
        return P.pd_torque(qt, q[qadr], v[dadr], kp, kd, tau_max=lim, xp=jnp)

    fns = {}

    def rollout(mode, drop=0.0):
        if mode not in fns:
            p = I.ImpulseParams(kappa=300.0, friction=0.6, mode=mode)

            def sub(d, _):
                d, imp = I.step(mx, d, sg, p, drives, fdofs, floss)
                c, _ = I.slots(mx, d, sg)
                return d, (d.qpos[:7], d.qvel[2], c, imp[:, 2])

            fns[mode] = jax.jit(lambda d: jax.lax.scan(sub, d, None, length=STEPS_10S)[1])
        q0 = home.copy()
        q0[2] += drop - bottom0
        d0 = mjx.put_data(mj, mujoco.MjData(mj)).replace(qpos=jnp.asarray(q0, jnp.float32),
                                                        userdata=jnp.zeros(I.warm_start_size(sg, fdofs)))
        return [np.asarray(x) for x in fns[mode](d0)]

    return rollout


@pytest.mark.jax
def test_hard_and_mixed_forward_are_identical_soft_is_not(g1_impulse):
    hard = g1_impulse("hard", drop=0.05)
    mixed = g1_impulse("mixed", drop=0.05)
    for a, b in zip(hard, mixed):
        np.testing.assert_array_equal(a, b)  # bit for bit
    soft = g1_impulse("soft", drop=0.05)
    assert np.abs(soft[0][:200, 2] - hard[0][:200, 2]).max() > 1e-4


def _yaw(q):
    return 2 * np.arctan2(q[..., 6], q[..., 3])


@pytest.mark.jax
def test_g1_stands_10s_under_pd_like_c_mujoco(g1_impulse):
    """Hard impulse contact (= mixed's forward): rest penetration, drift and yaw creep over 10 s of the
    PD-held home pose, against C MuJoCo's bridge model."""
    base, vz, c, pn = g1_impulse("hard")
    ref = c_mujoco_run(0.0, 10.0)
    # rest penetration after 1 s: C's noslip soft contact ~0.2-0.3 mm; ours holds the spheres where they stop
    pen, pen_c = -c[199].mean(), -ref[199, 5:].mean()
    assert 0.0 <= pen < 0.0015 and abs(pen - pen_c) < 0.001, (pen, pen_c)
    # the floor carries the robot: sum of normal impulses / h = m g
    mg = 33.34 * 9.81
    assert pn[1000:].sum(1).mean() / 0.005 == pytest.approx(mg, rel=0.02)
    # settles like C (pelvis x within 5 mm), then no drift or yaw creep over the last 9 s
    assert abs((base[199, 0] - base[0, 0]) - (ref[199, 0] - ref[0, 0])) < 0.005
    drift = np.hypot(*(base[-1, :2] - base[199, :2]))
    drift_c = np.hypot(*(ref[-1, :2] - ref[199, :2]))
    assert drift < 0.002 and drift_c < 0.002, (drift, drift_c)
    assert abs(_yaw(base[-1]) - _yaw(base[199])) < 1e-3 and abs(ref[-1, 3] - ref[199, 3]) < 1e-3


@pytest.mark.jax
def test_g1_drop_20cm_stops_without_bounce(g1_impulse):
    """A 20 cm drop of the PD-held robot: the touch-down impulse stops the feet within one substep (no
    restitution), the pelvis rebounds no more than on C MuJoCo's bridge model."""
    base, vz, c, pn = g1_impulse("hard", drop=0.20)
    td = int(np.argmax(pn.sum(1) > 1e-3))
    v_td = vz[td - 1]
    assert v_td == pytest.approx(-math.sqrt(2 * 9.81 * 0.2), abs=0.1)
    # the first contact step takes most of the feet's momentum: sphere velocities are zeroed
    assert pn[td].sum() > 10.0
    # the pelvis's rebound after touch-down (the legs' PD, no restitution): below 0.25 m/s and not above C
    # MuJoCo's (whose soft contact adds a spring: 0.35 m/s measured)
    ref = c_mujoco_run(0.20, 1.0)
    rebound, rebound_c = vz[td:td + 100].max(), ref[:, 4][np.argmax(ref[:, 5:].min(1) < 0.0):].max()
    assert rebound < 0.25 and rebound <= rebound_c + 0.02, (rebound, rebound_c)
    # landed and standing 0.5 s later, sphere bottoms within 2 mm of the floor like C's
    assert np.abs(c[td + 100]).max() < 0.002 and np.abs(ref[-1, 5:]).max() < 0.002


@pytest.mark.jax
def test_soft_gate_sinks_loaded_spheres_logarithmically(g1_impulse):
    """Soft mode applies s(c) p: a loaded sphere keeps (1 - s) of its free velocity and sinks until s ~ 1.
    At kappa = 300 the standing robot's spheres are 5-25 mm deep after 1 s (C MuJoCo: < 0.5 mm): the
    penetration gap the seed's stiffness sweep measures, and what tips the PD-held robot over."""
    base, vz, c, pn = g1_impulse("soft")
    ref = c_mujoco_run(0.0, 1.0)
    deep = -c[199]
    assert 0.005 < deep.mean() < 0.025, deep
    assert -ref[-1, 5:].mean() < 0.0005


# ------------------------------------------------------------------ configuration refusals (no compile)
@pytest.mark.parametrize("env, match", [
    ({"contact": "impulse", "kappa": 0.0}, "kappa"),
    ({"contact": "impulse", "kappa": float("nan")}, "kappa"),
    ({"contact": "impulse", "kappa": -50.0}, "kappa"),
    ({"contact": "impulse", "impulse_iterations": 0}, "iterations"),
    ({"contact": "impulse", "impulse_mode": "stiff"}, "mode"),
    ({"contact": "impulse", "impulse_relaxation": "sor"}, "relaxation"),
    ({"contact": "impulse", "substeps": 2}, "substeps >= 3"),
    ({"contact": "penalty"}, "unknown env.contact"),
])
def test_training_config_refuses_bad_contact_settings(env, match):
    from train.config import preset

    with pytest.raises(ValueError, match=match):
        preset("cpu").with_overrides({"env": env})


def test_training_config_refuses_zero_iterations():
    from train.config import preset

    with pytest.raises(ValueError, match="shac.iterations"):
        preset("cpu").with_overrides({"shac": {"iterations": 0}})
    cfg = preset("cpu").with_overrides({"env": {"contact": "impulse", "substeps": 3}})
    assert cfg.env.physics_dt == pytest.approx(0.02 / 3)
