"""train/contact.py: the sigmoid foot contact against hand-computed values, its stability bound,
gradients through a touch-down at k = 300, and the rest penetration of the training model with it
against C MuJoCo's bridge model. MJX compiles are one environment and a few steps each.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

from robots import g1
from robots import model as M
from train import contact as C

pytestmark = pytest.mark.jax  # every test here compiles JAX programs

K, D = 2.0e4, 60.0
P300 = C.ContactParams(kappa=300.0, stiffness=K, damping=D, friction=0.6, eps=0.01, friction_compliance=0.0)


def fn(d, v, p=P300):
    return float(C.normal_force(jnp.float32(d), jnp.float32(v), p))


def test_normal_force_hand_values():
    # softplus law f = max(0, (K/k) softplus(-k d) - D v s_k(d)), K/k = 2e4/300 = 66.667 N
    # d = 0, v = 0: 66.667 * ln 2 = 46.210 N (acts at touch, at rest)
    assert fn(0.0, 0.0) == pytest.approx(66.6667 * 0.693147, rel=1e-4)
    # d = +10 mm apart, v = 0: k d = 3, softplus(-3) = ln(1 + e^-3) = 0.048587 -> 3.2391 N
    assert fn(0.010, 0.0) == pytest.approx(66.6667 * 0.048587, rel=1e-4)
    # d = -5 mm, v = 0: softplus(1.5) = 1.5 + ln(1 + e^-1.5) = 1.701413 -> 113.428 N
    assert fn(-0.005, 0.0) == pytest.approx(66.6667 * 1.701413, rel=1e-4)
    # d = 0, approaching at 0.5 m/s: 46.210 + 60 * 0.5 * s(0) = 46.210 + 15 = 61.210 N
    assert fn(0.0, -0.5) == pytest.approx(46.2098 + 15.0, rel=1e-4)
    # d = +5 mm, separating at 1 m/s: softplus(-1.5) = 0.201413 -> 13.4275; s = 1/(1+e^1.5) = 0.182426
    # -> 13.4275 - 60 * 0.182426 = 2.4820 N
    assert fn(0.005, 1.0) == pytest.approx(13.4275 - 10.9455, rel=1e-3)
    # d = 0, separating at 2 m/s: 46.210 - 60 = -13.8 -> clipped to 0 (no adhesion)
    assert fn(0.0, 2.0) == 0.0
    # k = 50, d = +60 mm (the seed's "tens of mm"): (2e4/50) softplus(-3) = 400 * 0.048587 = 19.435 N
    assert fn(0.060, 0.0, P300.__class__(kappa=50.0)) == pytest.approx(19.435, rel=1e-3)
    # k -> large recovers the hard penalty: k = 1e5, d = -5 mm: K * 5 mm = 100 N (+ 2e4/1e5 * softplus(-500) ~ 0)
    assert fn(-0.005, 0.0, C.ContactParams(kappa=1e5)) == pytest.approx(100.0, rel=1e-4)
    # product law s_k(d) max(0, -K d - D v): d = -5 mm, v = 0: s = 1/(1+e^-1.5) = 0.817574 -> 81.757 N
    prod = C.ContactParams(kappa=300.0, law="product")
    assert fn(-0.005, 0.0, prod) == pytest.approx(0.817574 * 100.0, rel=1e-4)
    # d = +1 mm approaching at 0.5 m/s: s = 1/(1+e^0.3) = 0.425557, -K d - D v = -20 + 30 = 10 -> 4.2556 N
    assert fn(0.001, -0.5, prod) == pytest.approx(4.25557, rel=1e-4)
    assert fn(0.010, 0.0, prod) == 0.0  # apart and at rest: nothing
    with pytest.raises(ValueError, match="unknown contact law"):
        fn(0.0, 0.0, C.ContactParams(law="nope"))


def test_rest_distance_formula_carries_the_load():
    for k in (50.0, 100.0, 300.0):
        p = C.ContactParams(kappa=k)
        d = C.rest_distance(41.0, p)
        assert fn(d, 0.0, p) == pytest.approx(41.0, rel=1e-3)
    # the docstring's numbers (K = 2e4, 41 N): +0.54 / +14.8 / +44.5 mm at k = 300 / 100 / 50
    assert C.rest_distance(41.0, C.ContactParams(kappa=300.0)) * 1e3 == pytest.approx(0.543, abs=0.01)
    assert C.rest_distance(41.0, C.ContactParams(kappa=50.0)) * 1e3 == pytest.approx(44.52, abs=0.05)
    assert C.sigmoid_width(300.0) * 1e3 == pytest.approx(9.81, abs=0.01)


def test_friction_hand_values_and_direction():
    pos = jnp.array([[0.0, 0.0, 0.005]])  # sphere of radius 5 mm touching: d = 0 -> f_n = 46.210 N
    r = jnp.array([0.005])
    vel = jnp.array([[0.3, 0.4, 0.0]])  # |v_t| = 0.5 m/s along (0.6, 0.8)
    f = np.asarray(C.sphere_contact_forces(pos, vel, r, P300))[0]
    # |f_t| = mu f_n |v| / sqrt(|v|^2 + eps^2) = 0.6 * 46.2098 * 0.5 / sqrt(0.25 + 1e-4) = 27.7204 N, opposite v
    assert f[2] == pytest.approx(46.2098, rel=1e-4)
    np.testing.assert_allclose(f[:2], -27.7204 * np.array([0.6, 0.8]), rtol=1e-4)
    # implicit friction, c = 0.01 s/kg: |f_t| = mu f_n |v| / (sqrt(.) + c mu f_n) = 13.8629 / (0.50010 + 0.27726)
    pc = C.ContactParams(kappa=300.0, friction_compliance=0.01)
    fc = np.asarray(C.sphere_contact_forces(pos, vel, r, pc))[0]
    np.testing.assert_allclose(fc[:2], -(13.8629 / 0.77736) * np.array([0.6, 0.8]), rtol=1e-4)
    # slow slip: c bounds the slope by 1/c = 100 N s/m (explicit: mu f_n / eps = 2773 N s/m)
    slow = jnp.array([[1e-3, 0.0, 0.0]])
    assert abs(float(C.sphere_contact_forces(pos, slow, r, pc)[0, 0])) < 100.0 * 1e-3
    # apart by 50 mm at k = 300: f_n and friction ~ 0
    far = np.asarray(C.sphere_contact_forces(pos + jnp.array([0, 0, 0.05]), vel, r, P300))[0]
    assert np.all(np.abs(far) < 1e-3)


def test_jit_vmap_grad_finite_at_zero_velocity_and_extremes():
    r = jnp.full((5,), 0.005)
    pos = jnp.array([[0, 0, 0.005], [0, 0, -1.0], [0, 0, 1.0], [0, 0, 0.0], [0, 0, 0.02]], jnp.float32)
    vel = jnp.zeros((5, 3), jnp.float32)  # zero slip: the friction norm must stay safe

    def total(pos, vel, p):
        return jnp.sum(C.sphere_contact_forces(pos, vel, r, p) ** 2)

    for p in (P300, C.ContactParams(), C.ContactParams(law="product"), C.ContactParams(kappa=50.0)):
        gp, gv = jax.jit(jax.grad(total, argnums=(0, 1)))(pos, vel, p)
        assert np.all(np.isfinite(np.asarray(gp))) and np.all(np.isfinite(np.asarray(gv)))
    # kappa traced (a jit argument): one compile for every k
    f = jax.jit(jax.vmap(lambda k: C.normal_force(jnp.float32(0.0), jnp.float32(0.0), C.ContactParams(kappa=k))))
    np.testing.assert_allclose(np.asarray(f(jnp.array([50.0, 300.0]))), [400 * math.log(2), 66.6667 * math.log(2)], rtol=1e-4)


def test_validate_names_the_limit():
    with pytest.raises(ValueError, match="kappa"):
        C.ContactParams(kappa=0.0).validate(C.SUBSTEP)
    with pytest.raises(ValueError, match="kappa"):
        C.ContactParams(kappa=-50.0).validate(C.SUBSTEP)
    with pytest.raises(ValueError, match=r"< 4 \(K < "):
        C.ContactParams().validate(0.005)  # the defaults at the 200 Hz substep: measured unstable
    with pytest.raises(ValueError, match="dt D / m"):
        C.ContactParams(damping=200.0).validate(C.SUBSTEP)
    with pytest.raises(ValueError, match="friction_compliance"):
        C.ContactParams(friction_compliance=0.001).validate(C.SUBSTEP)
    assert C.ContactParams().validate(C.SUBSTEP)  # defaults at 300 Hz
    for k in (50.0, 100.0, 300.0):
        C.ContactParams(kappa=k, law="product").validate(C.SUBSTEP)


@pytest.mark.parametrize("factor,grows", [(0.9, False), (1.1, True)])
def test_stability_criterion_measured_on_an_oscillator(factor, grows):
    """A mass m on one sphere, loaded deep into contact (s_k ~ 1), stepped by MuJoCo's semi-implicit
    Euler (v += h a; x += h v) with the force law. At 0.9 x the criterion's K bound a small
    perturbation decays; at 1.1 x it grows: the bound is the measured limit."""
    h, m, Dd = 0.005, 0.18, 20.0
    kmax = C.ContactParams(damping=Dd).stability(h, m)["max_stiffness"]
    p = C.ContactParams(kappa=300.0, stiffness=factor * kmax, damping=Dd)
    load = 0.02 * p.stiffness  # equilibrium about 20 mm deep: s_k = 0.9975, local stiffness ~ K
    d_eq = float(-0.02 - math.log1p(-math.exp(-300 * 0.02)) / 300)  # softplus^-1, close to -0.02
    x, v = d_eq + 1e-4, 0.0
    normal = jax.jit(C.normal_force)
    amp = []
    for _ in range(300):
        f = float(normal(x, v, p))
        v += h * (f - load) / m
        x += h * v
        amp.append(abs(x - d_eq))
    ratio = max(amp[-50:]) / 1e-4
    assert (ratio > 10.0) if grows else (ratio < 0.5), ratio


def test_disable_foot_contact_and_effective_mass():
    m = M.build_training_model()
    g = M.sole_spheres(m).ravel()
    assert len(g) == 8
    off = C.disable_foot_contact(m, g)
    assert np.all(m.geom_contype[g] == 1) and np.all(off.geom_contype[g] == 0)  # the original is untouched
    d = mujoco.MjData(off)
    mujoco.mj_resetDataKeyframe(off, d, 0)
    d.qpos[2] -= 0.01  # spheres 1 cm into the floor: still no MuJoCo contact
    mujoco.mj_forward(off, d)
    assert d.ncon == 0
    # contact-only effective mass of the stiffest foot mode (documented 0.37 kg; G1_SPHERE_MASS is
    # smaller because the ankle PD acts on the same mode)
    assert C.effective_sphere_mass(m, g) == pytest.approx(0.37, abs=0.02)
    assert C.G1_SPHERE_MASS < C.effective_sphere_mass(m, g)


# ------------------------------------------------------------------------------ MJX (small compiles)
def _standing_setup(substep, lift=0.0, vz=0.0):
    m = M.build_training_model(M.TrainModelConfig(timestep=substep))
    g = M.sole_spheres(m).ravel()
    m = C.disable_foot_contact(m, g)
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    mujoco.mj_forward(m, d)
    d.qpos[2] += lift - (d.geom_xpos[g, 2] - m.geom_size[g, 0]).min()
    d.qvel[2] = vz
    mujoco.mj_forward(m, d)
    return m, g, mjx.put_model(m), mjx.put_data(m, d)


def _pd_substep(mx, g, p, qa, da, offset=0.0):
    kp, kd, lim = (jnp.asarray(x, jnp.float32) for x in (g1.KP, g1.KD, g1.TORQUE_LIMIT))
    q0 = jnp.asarray(g1.DEFAULT_JOINT_POS, jnp.float32)

    def sub(dd, _):
        tau = jnp.clip(kp * (q0 + offset - dd.qpos[qa]) - kd * dd.qvel[da], -lim, lim)
        dd, f = C.step(mx, dd.replace(ctrl=tau), g, p)
        return dd, (dd.geom_xpos[g, 2] - mx.geom_size[g, 0], f[:, 2])

    return sub


def _bridge_rest_penetration():
    """Mean foot-sphere penetration (m) in stance of C MuJoCo's bridge model, PD-held default pose."""
    m = M.build_bridge_model()
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    mujoco.mj_forward(m, d)
    g = M.sole_spheres(m).ravel()
    d.qpos[2] -= (d.geom_xpos[g, 2] - m.geom_size[g, 0]).min()
    qa, da = M.motor_qpos_adr(m), M.motor_dof_adr(m)
    floor = m.geom("floor").id
    pens = []
    for k in range(2000):
        d.ctrl[:] = np.clip(g1.KP * (g1.DEFAULT_JOINT_POS - d.qpos[qa]) - g1.KD * d.qvel[da],
                            -g1.TORQUE_LIMIT, g1.TORQUE_LIMIT)
        mujoco.mj_step(m, d)
        if k >= 1000:
            c = d.contact[: d.ncon]
            on = ((c.geom1 == floor) | (c.geom2 == floor)) & (c.dist < 0)
            pens.append(-c.dist[on].mean())
    return float(np.mean(pens))


def test_rest_penetration_of_training_model_vs_c_mujoco_bridge():
    """Training model (MJX, float32, 300 Hz substep) with the sigmoid contact at k = 300, PD-held
    default pose, settled 1.5 s: mean foot-sphere distance vs the bridge's mean penetration.
    Measured: bridge 0.22 mm penetration; sigmoid k = 300 rests at +0.59 mm (hovering; C MuJoCo
    stepping the same model and law: +0.67 mm; the formula: +0.54 mm for an even 41 N per sphere):
    training minus bridge penetration -0.82 mm, inside the seed's 3 mm at k = 300."""
    m, g, mx, dx = _standing_setup(C.SUBSTEP)
    p = C.ContactParams(kappa=300.0).validate(C.SUBSTEP)
    sub = _pd_substep(mx, g, p, M.motor_qpos_adr(m), M.motor_dof_adr(m))
    roll = jax.jit(lambda dd: jax.lax.scan(sub, dd, None, length=50))
    dists = []
    for _ in range(9):  # 450 substeps = 1.5 s
        dx, (dist, fz) = roll(dx)
        dists.append(np.asarray(dist))
    dist = np.concatenate(dists)
    fz = np.asarray(fz)[-1]  # (8,) normal forces at the last substep
    assert np.all(np.isfinite(dist))
    rest = float(dist[-150:].mean())  # last 0.5 s, all 8 spheres (all in stance)
    bridge = _bridge_rest_penetration()
    print(f"rest: sigmoid k=300 mean sphere distance {rest * 1e3:+.3f} mm (std over time "
          f"{dist[-150:].mean(1).std() * 1e3:.3f} mm), total normal force {fz.sum():.1f} N; "
          f"bridge penetration {bridge * 1e3:.3f} mm; training minus bridge penetration "
          f"{(-rest - bridge) * 1e3:+.3f} mm")
    assert fz.sum() == pytest.approx(mujoco.mj_getTotalmass(m) * 9.81, rel=0.15)  # carries the robot
    assert 0.0 < bridge < 1e-3
    assert abs(-rest - bridge) < 3e-3  # loose: the seed's 3 mm at k = 300
    assert float(np.asarray(dx.qpos[2])) > 0.7  # still standing


def test_gradient_finite_through_touchdown_k300():
    """jax.grad of the final pelvis height after 12 substeps (40 ms) from 8 mm above the rest height,
    falling at 0.4 m/s, w.r.t. the initial vertical velocity and a PD target offset (an action):
    the spheres touch down within the rollout (float32, k = 300)."""
    m, g, mx, dx = _standing_setup(C.SUBSTEP, lift=0.008, vz=-0.4)
    p = C.ContactParams(kappa=300.0)
    qa, da = M.motor_qpos_adr(m), M.motor_dof_adr(m)

    def final_height(vz, offset):
        sub = _pd_substep(mx, g, p, qa, da, offset)
        d0 = dx.replace(qvel=dx.qvel.at[2].set(vz))
        d1, (dist, fz) = jax.lax.scan(sub, d0, None, length=12)
        return d1.qpos[2], (dist, fz)

    (h, (dist, fz)), (gv, ga) = jax.jit(jax.value_and_grad(final_height, argnums=(0, 1), has_aux=True))(
        jnp.float32(-0.4), jnp.zeros(29, jnp.float32))
    dist, fz, gv, ga = map(np.asarray, (dist, fz, gv, ga))
    print(f"touch-down: min sphere distance {dist.min() * 1e3:.2f} mm at start {dist[0].min() * 1e3:.2f} mm, "
          f"max normal force {fz.max():.1f} N; dh/dvz0 = {float(gv):.4g} s, |dh/da| = {np.linalg.norm(ga):.4g}")
    assert dist[0].min() > 0.003 and dist.min() < 0.0  # apart at the start, in contact later
    assert np.isfinite(float(h)) and np.isfinite(gv) and np.all(np.isfinite(ga))
    assert 0.0 < float(gv) < 0.04 + 1e-3  # between "stopped by the floor" and free flight (12 * dt)
    assert np.linalg.norm(ga) > 0.0
