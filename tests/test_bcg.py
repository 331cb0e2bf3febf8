"""BCG and the differentiable rollout at the stiffest contact setting.

Two compiled gradient functions (plain, BCG) are shared by the module; the BCG config is a
jit argument (sigma, tau are pytree leaves), so every BCG case reuses one compile. The
float64 finite-difference check runs in a subprocess so x64 does not leak into other tests.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mujoco import mjx

from tests.test_env import nominal_cfg
from motions import hold_pose_motion
from train.bcg import BCGConfig, perturb_branches
from train.env import G1Env
from train.rollout import rollout

pytestmark = pytest.mark.jax  # every test here compiles JAX programs

N, HORIZON = 4, 4  # 4 envs, 4 control steps
DROP, VZ = 0.005, -0.4  # landing: 5 mm above the floor at 0.4 m/s down -> sphere forces > 400 N in step 0
CFG = BCGConfig(branches=4, horizon=2, max_bundled_envs=N)


def policy(p, obs, rng):
    return 0.5 * jnp.tanh(obs @ p["w"] + p["b"]) + 0.05 * jax.random.normal(rng, (29,))


@pytest.fixture(scope="module")
def env():
    return G1Env(nominal_cfg(stiffness="stiff"), hold_pose_motion(60, "stand"))


@pytest.fixture(scope="module")
def params(env):
    return {"w": 0.01 * jax.random.normal(jax.random.PRNGKey(3), (env.observation_size, 29)), "b": jnp.zeros(29)}


def _loss(env, bcg_cfg):
    def loss(p, key):
        k_reset, k_roll = jax.random.split(key)
        s = env.reset_batch(k_reset, N)  # gradient "through reset + steps"
        s = s.replace(data=s.data.replace(qpos=s.data.qpos.at[:, 2].add(DROP), qvel=s.data.qvel.at[:, 2].set(VZ)))
        _, traj = rollout(env, policy, p, s, k_roll, HORIZON, bcg_cfg)
        return traj["reward"].sum(), traj
    return loss


@pytest.fixture(scope="module")
def grad_plain(env):
    return jax.jit(jax.value_and_grad(_loss(env, None), has_aux=True))


@pytest.fixture(scope="module")
def grad_bcg(env):
    def f(p, key, cfg):
        return jax.value_and_grad(_loss(env, cfg), has_aux=True)(p, key)
    return jax.jit(f)


@pytest.fixture(scope="module")
def plain_result(grad_plain, params):
    return grad_plain(params, jax.random.PRNGKey(0))


def _flat(g):
    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(g)])


@pytest.mark.timeout(3600)  # two gradient compiles: ~10 min cold on 2 busy cores, ~3 min with the JAX cache
def test_grad_plain_and_bcg_finite_at_stiff_contact(plain_result, grad_bcg, params):
    (loss, traj), g = plain_result
    assert np.isfinite(float(loss)) and np.all(np.isfinite(_flat(g))) and np.abs(_flat(g)).max() > 0
    assert float(traj["metrics"]["contact_force_max"][0].min()) > CFG.tau  # the landing is stiff in every env
    assert not bool(traj["bundled"].any())
    (loss_b, traj_b), g_b = grad_bcg(params, jax.random.PRNGKey(0), CFG)
    # the trigger reads the state's contact forces: no bundle at step 0, bundles from step 1 on
    assert not bool(traj_b["bundled"][0].any()) and bool(traj_b["bundled"][1].all())
    assert np.isfinite(float(loss_b)) and np.all(np.isfinite(_flat(g_b))) and np.abs(_flat(g_b)).max() > 0
    for k in ("obs", "action", "reward", "done", "truncated", "next_obs", "bundled"):
        assert traj_b[k].shape[:2] == (HORIZON, N), k
    assert traj_b["final_obs"].shape == (N, traj_b["obs"].shape[-1])


def test_bcg_without_trigger_equals_plain_rollout(plain_result, grad_bcg, params):
    (loss, traj), g = plain_result
    (loss_b, traj_b), g_b = grad_bcg(params, jax.random.PRNGKey(0), CFG.replace(tau=1e9))
    assert not bool(traj_b["bundled"].any())
    # the nominal envs run in a larger vmapped batch (N + K*B): equal up to float32 rounding, which the
    # contact dynamics amplify in the joint velocities (measured on this 2-core CPU: 15 of 3024 obs entries
    # beyond 1e-5, max 6.9e-5, on the tree before the re-layer as well; rewards within 1e-5)
    np.testing.assert_allclose(np.asarray(traj_b["reward"]), np.asarray(traj["reward"]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(traj_b["obs"]), np.asarray(traj["obs"]), rtol=1e-5, atol=2e-4)
    gp, gb = _flat(g), _flat(g_b)
    # the same rounding through the backward pass: measured 1.5e-3 relative here (bound 1e-4 held on the
    # previous machine); a bundle leaking into the nominal rollout moves it by O(1)
    assert np.linalg.norm(gb - gp) <= 1e-2 * np.linalg.norm(gp)


def test_bcg_with_zero_sigma_equals_nominal_rollout(plain_result, grad_bcg, params):
    (loss, traj), g = plain_result
    cfg0 = CFG.replace(tau=0.0, sigma_p=0.0, sigma_v=0.0)  # every env in contact bundled, unperturbed
    (loss_b, traj_b), g_b = grad_bcg(params, jax.random.PRNGKey(0), cfg0)
    assert bool(traj_b["bundled"][1:].all())
    np.testing.assert_allclose(np.asarray(traj_b["reward"]), np.asarray(traj["reward"]), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(traj_b["obs"]), np.asarray(traj["obs"]), atol=1e-3)
    gp, gb = _flat(g), _flat(g_b)
    assert np.linalg.norm(gb - gp) <= 1e-2 * np.linalg.norm(gp)


def test_held_nominal_keeps_the_plain_forward_and_the_bundles_gradient(plain_result, grad_bcg, params):
    """hold_nominal: every env bundled and perturbed, yet the forward pass is the plain rollout's (up to the
    larger batch's rounding, as above) while the bundle's own forward drifts from it by orders more; the
    held gradient is the bundle's sensitivities, not plain's."""
    (loss, traj), g = plain_result
    cfg = CFG.replace(tau=0.0, sigma_p=0.02, sigma_v=0.05)
    (_, traj_d), g_d = grad_bcg(params, jax.random.PRNGKey(0), cfg)
    (_, traj_h), g_h = grad_bcg(params, jax.random.PRNGKey(0), cfg.replace(hold_nominal=True))
    assert bool(traj_h["bundled"][1:].all())
    np.testing.assert_allclose(np.asarray(traj_h["reward"]), np.asarray(traj["reward"]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(traj_h["obs"]), np.asarray(traj["obs"]), rtol=1e-5, atol=2e-4)
    drift = np.abs(np.asarray(traj_d["obs"]) - np.asarray(traj["obs"])).max()
    assert drift > 1e-2, drift  # the moving bundle's forward leaves plain's
    gp, gh = _flat(g), _flat(g_h)
    assert np.all(np.isfinite(gh)) and np.linalg.norm(gh - gp) > 5e-2 * np.linalg.norm(gp)


def test_perturbation_moves_the_foot_by_sigma(env):
    """Cartesian foot displacement of the J^+ offsets: std ~ sigma_p per axis, zero mean; only the legs move."""
    B = 4000
    s = jax.jit(env.reset)(jax.random.PRNGKey(0))  # one compile instead of op-by-op dispatch
    cfg = BCGConfig(sigma_p=0.01, sigma_v=0.02)

    @jax.jit
    def run(key):
        br = perturb_branches(env, s, key, jnp.asarray([True, True]), cfg, branches=B)
        mx = env.model_for(s.dr)
        kin = jax.vmap(lambda d: mjx.kinematics(mx, d))(br.data)
        d0 = mjx.com_pos(mx, mjx.kinematics(mx, s.data))
        from train.bcg import leg_pinv
        dv = [jnp.einsum("ij,bj->bi", leg_pinv(env, d0, mx, f, cfg.damping)[0], br.data.qvel[:, env.leg_dadr[f]])
              for f in (0, 1)]
        return kin.site_xpos[:, env.foot_site] - d0.site_xpos[env.foot_site], jnp.stack(dv, 1), br
    dp, dv, br = run(jax.random.PRNGKey(1))
    dp, dv = np.asarray(dp), np.asarray(dv)  # (B, 2 feet, 3)
    np.testing.assert_allclose(dp.std(0), 0.01, rtol=0.1)
    # dq = J^+ dp is linear; the leg's curvature adds a second-order mean shift (z: ~3 mm up, the
    # knee is nearly straight so vertical offsets need large joint offsets); x, y are unbiased
    assert np.abs(dp.mean(0)[:, :2]).max() < 5e-4 and np.abs(dp.mean(0)[:, 2]).max() < 0.5 * 0.01
    np.testing.assert_allclose(dv.std(0), 0.02, rtol=0.1)
    moved = np.any(np.asarray(br.data.qpos) != np.asarray(s.data.qpos)[None], axis=0)
    legs = np.concatenate(env.leg_qadr)
    # only leg joints move (ankle roll does not move the foot site: its Jacobian column is 0)
    assert set(np.flatnonzero(moved)) <= set(legs.tolist()) and moved.sum() >= 10
    # one stiff foot: only that leg moves
    br1 = jax.jit(lambda key, stiff: perturb_branches(env, s, key, stiff, cfg, branches=8))(
        jax.random.PRNGKey(2), jnp.asarray([False, True]))
    moved = np.any(np.asarray(br1.data.qpos) != np.asarray(s.data.qpos)[None], axis=0)
    assert set(np.flatnonzero(moved)) <= set(env.leg_qadr[1].tolist()) and moved.sum() >= 5


FD_SCRIPT = textwrap.dedent(
    """
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp, numpy as np
    from tests.test_env import nominal_cfg
    from train.env import G1Env
    from motions import hold_pose_motion
    from train.rollout import rollout
    from robots import model as M
    # a smooth segment: lifted (no contact), joint friction loss and joint limits off (both are
    # constraint rows whose solver path switches make the dynamics piecewise)
    m = M.build_training_model()
    m.dof_frictionloss[:] = 0.0
    m.jnt_limited[:] = 0
    env = G1Env(nominal_cfg(), hold_pose_motion(60, "stand"), mj_model=m)
    assert env.init_data.qpos.dtype == jnp.float64
    s0 = jax.jit(env.reset_batch, static_argnums=1)(jax.random.PRNGKey(0), 1)  # one compile, not op-by-op
    s0 = s0.replace(data=s0.data.replace(qpos=s0.data.qpos.at[:, 2].add(1.0)))  # lifted: no contact for 0.4 s
    def policy(p, obs, rng):
        return 0.5 * jnp.tanh(obs @ p["w"] + p["b"])
    def f(p):
        _, tr = rollout(env, policy, p, s0, jax.random.PRNGKey(1), 3)
        return tr["reward"].sum() + tr["next_obs"][-1].sum()
    p = {"w": 0.01 * jax.random.normal(jax.random.PRNGKey(2), (env.observation_size, 29)),
         "b": 0.1 * jax.random.normal(jax.random.PRNGKey(3), (29,))}
    vg = jax.jit(jax.value_and_grad(f))
    val, g = vg(p)
    fj = lambda q: vg(q)[0]  # the same compiled program for the values: one float64 compile, not two
    rng = np.random.default_rng(0)
    for i in range(3):
        d = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape)), p)
        eps = 1e-5
        fd = (fj(jax.tree.map(lambda x, y: x + eps * y, p, d)) - fj(jax.tree.map(lambda x, y: x - eps * y, p, d))) / (2 * eps)
        ad = sum(jnp.vdot(a, b) for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(d)))
        print("dir", i, float(fd), float(ad))
        assert abs(float(fd) - float(ad)) <= 1e-5 * max(1.0, abs(float(ad))), (float(fd), float(ad))
    print("FD-OK")
    """
)


@pytest.mark.timeout(3600)
def test_finite_differences_match_autodiff_contact_free_float64():
    out = subprocess.run([sys.executable, "-c", FD_SCRIPT], capture_output=True, text=True, timeout=3000)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "FD-OK" in out.stdout
