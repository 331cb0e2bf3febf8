"""SHAC pieces against hand-computed values, and the trainer on a tiny differentiable task."""
import dataclasses
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typing import NamedTuple

from train.shac import (SHAC, SHACConfig, actor_objective, critic_apply, critic_init, obs_norm_init,
                        obs_norm_update, td_lambda_targets)

pytestmark = pytest.mark.jax  # every test here compiles JAX programs


def test_actor_objective_hand_computed():
    g = 0.9
    r = jnp.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    d = jnp.array([[False, False], [True, False], [False, False]])
    v = jnp.array([10.0, 10.0])
    out = np.asarray(actor_objective(r, d, v, g))
    # env 0: 1 + 0.9*2 (done: discount restarts) + 3 + 0.9*10
    # env 1: 1 + 0.9*2 + 0.81*3 + 0.729*10
    np.testing.assert_allclose(out, [1 + 1.8 + 3 + 9.0, 1 + 1.8 + 2.43 + 7.29], rtol=1e-6)


def test_td_lambda_hand_computed():
    g, lam = 0.5, 0.5
    r = jnp.array([[1.0], [1.0]])
    d = jnp.array([[False], [False]])
    v = jnp.array([[0.0], [2.0]])
    last = jnp.array([4.0])
    t = np.asarray(td_lambda_targets(r, d, v, last, g, lam))[:, 0]
    g1_ = 1 + 0.5 * 4  # last step: bootstrap fully from V(s_H)
    g0 = 1 + 0.5 * (0.5 * 2.0 + 0.5 * g1_)
    np.testing.assert_allclose(t, [g0, g1_], rtol=1e-6)
    # done cuts the bootstrap
    t = np.asarray(td_lambda_targets(r, jnp.array([[True], [False]]), v, last, g, lam))[:, 0]
    np.testing.assert_allclose(t[0], 1.0)


def test_obs_norm_matches_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.normal(2, 3, (100, 4)), rng.normal(-1, 0.5, (50, 4))
    n = obs_norm_update(obs_norm_update(obs_norm_init(4), jnp.asarray(a)), jnp.asarray(b))
    allx = np.concatenate([a, b])
    np.testing.assert_allclose(n.mean, allx.mean(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(n.var, allx.var(0), rtol=1e-3)


class PMState(NamedTuple):
    x: jax.Array
    v: jax.Array
    t: jax.Array
    obs: jax.Array


class PointMass:
    """Tiny differentiable task (brax `fast` style): drive x to 1 with force a; 20-step episodes."""

    N, T, dt = 32, 20, 0.1

    def reset(self, rng):
        x = jax.random.uniform(rng, (self.N,), minval=-1, maxval=1)
        return PMState(x, jnp.zeros(self.N), jnp.zeros(self.N, jnp.int32), self._obs(x, jnp.zeros(self.N)))

    def _obs(self, x, v):
        return jnp.stack([x, v], -1)

    def step(self, s, a):
        v = s.v + self.dt * jnp.clip(a[:, 0], -5, 5)
        x = s.x + self.dt * v
        r = -((x - 1.0) ** 2) - 0.01 * a[:, 0] ** 2
        t = s.t + 1
        done = t >= self.T
        x = jnp.where(done, jax.lax.stop_gradient(jnp.zeros_like(x)), x)
        v = jnp.where(done, 0.0, v)
        t = jnp.where(done, 0, t)
        return PMState(x, v, t, self._obs(x, v)), r, done


def _rollout_factory(env, H):
    def rollout(policy, actor, state, rng):
        def body(s, k):
            a = policy(s.obs, k)
            s2, r, d = env.step(s, a)
            return s2, (s.obs, r, d)
        s, (obs, r, d) = jax.lax.scan(body, state, jax.random.split(rng, H))
        return s, {"obs": obs, "reward": r, "done": d, "final_obs": s.obs}
    return rollout


def _linear_actor():
    init = lambda k: {"w": jnp.zeros((2, 1)), "b": jnp.zeros(1)}  # noqa: E731
    apply = lambda p, obs, norm: obs @ p["w"] + p["b"]  # noqa: E731
    return init, apply


def test_shac_improves_reward_on_point_mass():
    env = PointMass()
    cfg = SHACConfig(num_envs=env.N, horizon=10, iterations=60, actor_lr=2e-2, critic_lr=2e-3,
                     critic_hidden=(32, 32), critic_iterations=4, critic_minibatches=2, init_log_std=-2.0)
    init, apply = _linear_actor()
    algo = SHAC(cfg, obs_size=2, action_size=1, actor_init=init, actor_apply=apply,
                rollout_fn=_rollout_factory(env, cfg.horizon), reset_fn=env.reset)
    ts = algo.init(jax.random.PRNGKey(0))
    rewards = []
    for _ in range(cfg.iterations):
        ts, m = algo.iterate(ts)
        rewards.append(float(m["reward"]))
    assert np.mean(rewards[-10:]) > np.mean(rewards[:10]) + 0.3, (rewards[:10], rewards[-10:])
    assert float(m["nonfinite_grad"]) == 0


def test_learning_rate_follows_iterations_and_compile_is_reused():
    """The schedule is linear over SHAC iterations for actor and critic alike (the critic takes
    critic_iterations x critic_minibatches optimiser steps per iteration), it is what the
    optimiser state holds, and the compiled iteration is shared by runs of any length."""
    env = PointMass()
    cfg = SHACConfig(num_envs=env.N, horizon=5, iterations=4, actor_lr=1e-2, critic_lr=3e-3, lr_final=1e-4,
                     critic_hidden=(8,), critic_iterations=3, critic_minibatches=2)
    init, apply = _linear_actor()
    algo = SHAC(cfg, 2, 1, init, apply, _rollout_factory(env, 5), env.reset)
    assert algo.learning_rates(0) == pytest.approx((1e-2, 3e-3))
    assert algo.learning_rates(2) == pytest.approx(((1e-2 + 1e-4) / 2, (3e-3 + 1e-4) / 2))
    assert algo.learning_rates(4) == pytest.approx((1e-4, 1e-4))
    assert algo.learning_rates(9) == pytest.approx((1e-4, 1e-4))
    ts = algo.init(jax.random.PRNGKey(0))
    seen = []
    for _ in range(3):
        ts, m = algo.iterate(ts)
        seen.append((m["actor_lr"], float(ts.critic_opt[1].hyperparams["learning_rate"])))
    assert [a for a, _ in seen] == pytest.approx([1e-2, 1e-2 - (1e-2 - 1e-4) / 4, 1e-2 - 2 * (1e-2 - 1e-4) / 4])
    assert [c for _, c in seen] == pytest.approx([3e-3, 3e-3 - (3e-3 - 1e-4) / 4, 3e-3 - 2 * (3e-3 - 1e-4) / 4])
    assert algo._iterate_jit._cache_size() == 1  # the second and third iterations reused the first compile
    longer = SHAC(dataclasses.replace(cfg, iterations=40), 2, 1, init, apply, _rollout_factory(env, 5), env.reset)
    ts2 = longer.init(jax.random.PRNGKey(0))
    lowered = [a.lower(t).as_text() for a, t in ((algo._iterate_jit, ts2), (longer._iterate_jit, ts2))]
    assert lowered[0] == lowered[1], "the compiled iteration must not depend on the run length"


def test_critic_shapes():
    p = critic_init(jax.random.PRNGKey(0), 5, (8, 8))
    assert critic_apply(p, jnp.ones((3, 5))).shape == (3,)


SHARDED = r"""
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax, numpy as np
from tests.test_shac import PointMass, _rollout_factory, _linear_actor
from train.shac import SHAC, SHACConfig, env_sharding
assert len(jax.devices()) == 2
env = PointMass()
cfg = SHACConfig(num_envs=env.N, horizon=5, iterations=3, critic_hidden=(8,), critic_iterations=2, critic_minibatches=2)
init, apply = _linear_actor()
algo = SHAC(cfg, 2, 1, init, apply, _rollout_factory(env, 5), env.reset, sharding=env_sharding(env.N))
ts = algo.init(jax.random.PRNGKey(0))
for _ in range(3):
    ts, m = algo.iterate(ts)
assert len(ts.env_state.obs.sharding.device_set) == 2, ts.env_state.obs.sharding
assert np.isfinite(float(m["actor_loss"]))
try:
    env_sharding(33)
except ValueError as e:
    assert "divisible" in str(e)
else:
    raise AssertionError("33 envs on 2 devices must be refused")
print("SHARDED OK")
"""


def test_envs_shard_across_two_host_devices():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", SHARDED], capture_output=True, text=True, timeout=300)
    assert "SHARDED OK" in out.stdout, out.stderr[-3000:]
