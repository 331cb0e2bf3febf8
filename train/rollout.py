"""Batched, differentiable rollouts of G1Env under a policy, with or without BCG.

    final_state, traj = rollout(env, policy_fn, params, state, rng, horizon, bcg_cfg)

- `state`: a batched EnvState (leading env axis N), e.g. `env.reset_batch(rng, N)`.
- `policy_fn(params, obs, rng) -> action` is called PER ENVIRONMENT under jax.vmap: `obs` is
  (obs_size,), `rng` a per-env key, the action (29,). (A function written for a batch works
  unchanged.) Reparameterised sampling inside it is differentiated like everything else.
- Differentiable w.r.t. `params` (and the incoming state): wrap it in jax.grad. Gradients are
  NOT cut anywhere inside the horizon except at auto-resets.
- Auto-reset: an env whose step ends `done` (fall or end of motion) is replaced by
  `env.reset(key)` under stop_gradient before the next step. The transition's own reward,
  done flag and pre-reset observation (`next_obs`) are recorded first.
- `bcg_cfg=None` or `BCGConfig(enabled=False)`: plain analytic gradients (SHAC). Enabled:
  every step is `train.bcg.bcg_rollout_step` (bundle slots carried through the scan, see
  train/bcg.py); bundles still open at the last step close there (a bundle never crosses a
  rollout boundary, so `final_state` is a plain batched EnvState). With no env triggered the
  result equals the plain rollout (up to float rounding of the larger vmapped batch).

traj (a dict; leaves have leading axes (horizon, N)):
  obs (before the step), action, reward, done, truncated, next_obs (after the step, before
  any auto-reset: the bootstrap observation of truncated episodes), bundled (bool: the step
  came from a bundle), metrics (dict of per-env scalars, env.step's metrics); plus
  final_obs (N, obs_size) = final_state.obs (after auto-reset: the SHAC bootstrap state).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from train.bcg import BCGConfig, bcg_rollout_step, init_slots, num_slots, step_keys
from train.env import EnvState, G1Env


def auto_reset(env: G1Env, state: EnvState, keys: jax.Array) -> EnvState:
    """Replace done envs by fresh resets (stop_gradient; G1Env.reset_done); keys: (N, 2) per-env reset keys."""
    return env.reset_done(state, keys)


def make_plain_step(env: G1Env, policy_fn, params):
    """Batched policy + env step + auto-reset: (state, key) -> (state, out, contact_force)."""
    step = jax.vmap(env.step)
    policy = jax.vmap(policy_fn, in_axes=(None, 0, 0))

    def plain_step(state: EnvState, key: jax.Array):
        N = state.step.shape[0]
        pk, rk = step_keys(key, N)
        obs = state.obs
        action = policy(params, obs, pk)
        nxt = step(state, action)
        out = dict(obs=obs, action=action, reward=nxt.reward, done=nxt.done, truncated=nxt.truncated,
                   next_obs=nxt.obs, metrics=nxt.metrics, bundled=jnp.zeros(N, bool))
        return auto_reset(env, nxt, rk), out, nxt.contact_force

    return plain_step


def rollout(env: G1Env, policy_fn, params, state: EnvState, rng: jax.Array, horizon: int,
            bcg_cfg: BCGConfig | None = None):
    plain_step = make_plain_step(env, policy_fn, params)
    keys = jax.random.split(rng, horizon)
    if bcg_cfg is None or not bcg_cfg.enabled:
        def body(s, k):
            s, out, _ = plain_step(s, k)
            return s, out
        final, traj = jax.lax.scan(body, state, keys)
    elif num_slots(bcg_cfg, state.step.shape[0]) == 0:  # no budget: the plain rollout
        return rollout(env, policy_fn, params, state, rng, horizon, None)
    else:
        def body(carry, x):
            s, slots = carry
            k, t = x
            s, slots, out = bcg_rollout_step(env, policy_fn, params, bcg_cfg, s, slots, k, t == horizon - 1)
            return (s, slots), out
        (final, _), traj = jax.lax.scan(body, (state, init_slots(env, state, bcg_cfg)), (keys, jnp.arange(horizon)))
    traj["final_obs"] = final.obs
    return final, traj
