"""Bundled Contact Gradients (BCG), as published (shared/reference/bcg.md).

On a stiff-contact trigger, B branches perturb the contacting legs' state -- a Cartesian
offset dp ~ N(0, sigma_p^2 I) and a velocity offset dv ~ N(0, sigma_v^2 I) at each foot in
stiff contact, mapped to the leg's 6 joints with the damped pseudo-inverse of the foot point's
translational Jacobian, J^+ = J^T (J J^T + damping I)^-1 -- roll H control steps forward under
the same actions, and are averaged into x_bar; the nominal rollout continues from x_bar. The
offsets are constants for differentiation (stop_gradient), so autodiff through the average
gives the mean of the branch sensitivities.

How it sits in a batched rollout (train/rollout.py calls `bundled_chunk` per H-step chunk):
1. Nominal pass: every env steps H control steps (policy in the loop, auto-reset).
2. Trigger: an env is stiff if any foot sphere's normal force exceeded tau in any substep of
   that chunk (`train.env.stiff_contact`); the feet to perturb are the feet that were stiff.
3. Contact-local cost under vmap: a fixed budget of K = min(max_bundled_envs, N) envs per
   chunk, chosen by top-k on the peak contact force among the triggered ones, is gathered,
   re-simulated from the chunk's start as K x B branches, and scattered back over the nominal
   results (rewards, observations, dones and the chunk's end state). Unused slots (fewer than
   K triggers) are computed and discarded; triggered envs beyond K keep the plain gradient.
   Cost per chunk: N*H + K*B*H env-steps instead of N*H (x (1 + K*B/N)).
4. Actions inside a bundle: step 0 uses the policy at the nominal (unperturbed) chunk-start
   state -- identical to the nominal pass, same rng; step h >= 1 uses the policy at the
   branch-mean state x_bar_{t+h} (observed with the same noise key as the nominal). All
   branches receive that same action. Rewards are the branch means, done is evaluated on
   x_bar; a done x_bar auto-resets all branches.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from mujoco import mjx

from train.env import EnvState, G1Env, stiff_contact


@dataclasses.dataclass(frozen=True)
class BCGConfig:
    """Structural fields are static; sigma_p, sigma_v, tau, damping are pytree leaves, so one
    compiled rollout serves any values (pass the config as a jit argument)."""

    enabled: bool = True
    branches: int = 10  # B
    horizon: int = 2  # H, control steps per bundle
    sigma_p: float = 0.01  # m, foot position offset std
    sigma_v: float = 0.02  # m/s, foot velocity offset std
    tau: float = 400.0  # N, per-sphere normal force that triggers a bundle
    damping: float = 1e-4  # J^+ damping (m^2)
    max_bundled_envs: int = 8  # K, per-chunk budget of bundled envs (clipped to the batch)

    def replace(self, **kw) -> "BCGConfig":
        return dataclasses.replace(self, **kw)


jax.tree_util.register_dataclass(
    BCGConfig,
    data_fields=["sigma_p", "sigma_v", "tau", "damping"],
    meta_fields=["enabled", "branches", "horizon", "max_bundled_envs"],
)


def leg_pinv(env: G1Env, data: mjx.Data, mx: mjx.Model, foot: int, damping):
    """(J (3, 6), J^+ (6, 3)) of foot `foot`'s site w.r.t. its leg joints; data needs fresh kinematics."""
    point = data.site_xpos[env.foot_site[foot]]
    jacp, _ = mjx.jac(mx, data, point, env.foot_body[foot])  # (nv, 3)
    J = jacp[env.leg_dadr[foot]].T
    Jp = J.T @ jnp.linalg.inv(J @ J.T + damping * jnp.eye(3, dtype=J.dtype))
    return J, Jp


def perturb_branches(env: G1Env, state: EnvState, key: jax.Array, feet: jax.Array, cfg: BCGConfig,
                     branches: int | None = None) -> EnvState:
    """`branches` copies of one env's `state` (leading axis), legs of the `feet` (2,) bool perturbed.

    Offsets are stop_gradient constants: d(branch)/d(state) = identity.
    """
    B = cfg.branches if branches is None else branches
    mx = env.model_for(state.dr)
    d = mjx.com_pos(mx, mjx.kinematics(mx, state.data))
    d = jax.lax.stop_gradient(d)
    qpos = jnp.broadcast_to(state.data.qpos, (B,) + state.data.qpos.shape)
    qvel = jnp.broadcast_to(state.data.qvel, (B,) + state.data.qvel.shape)
    dq_all = jnp.zeros_like(qpos)
    dv_all = jnp.zeros_like(qvel)
    for f, k in zip((0, 1), jax.random.split(key, 2)):
        _, Jp = leg_pinv(env, d, mx, f, cfg.damping)
        kp, kv = jax.random.split(k)
        dp = cfg.sigma_p * jax.random.normal(kp, (B, 3), qpos.dtype)
        dv = cfg.sigma_v * jax.random.normal(kv, (B, 3), qpos.dtype)
        on = feet[f].astype(qpos.dtype)
        dq_all = dq_all.at[:, env.leg_qadr[f]].add(on * dp @ Jp.T)
        dv_all = dv_all.at[:, env.leg_dadr[f]].add(on * dv @ Jp.T)
    dq_all, dv_all = jax.lax.stop_gradient((dq_all, dv_all))
    tiled = jax.tree.map(lambda x: jnp.broadcast_to(x, (B,) + jnp.shape(x)), state)
    return tiled.replace(data=tiled.data.replace(qpos=qpos + dq_all, qvel=qvel + dv_all))


def mean_state(env: G1Env, branches: EnvState) -> EnvState:
    """x_bar: arithmetic mean of the branches' physical state (base quaternion renormalised);
    fields identical across branches by construction (step, last action, rng, params) from branch 0.
    done is re-evaluated on x_bar and the observation re-computed from it."""
    def avg(x):
        return x.mean(0) if jnp.issubdtype(x.dtype, jnp.floating) else x[0]

    data = jax.tree.map(avg, branches.data)
    qpos = data.qpos.at[3:7].set(data.qpos[3:7] / jnp.linalg.norm(data.qpos[3:7]))
    data = data.replace(qpos=qpos)
    first = jax.tree.map(lambda x: x[0], branches)
    metrics = jax.tree.map(avg, branches.metrics)
    fell = env.fell(data, first.step)
    metrics["fell"] = fell.astype(qpos.dtype)
    x = first.replace(data=data, reward=branches.reward.mean(0), metrics=metrics,
                      contact_force=branches.contact_force.mean(0), done=fell | first.truncated)
    return x.replace(obs=env.observe(x))


def step_keys(key: jax.Array, num_envs: int):
    """Per-env (policy keys, reset keys) of one control step: shared by nominal and bundle passes."""
    kp, kr = jax.random.split(key)
    return jax.random.split(kp, num_envs), jax.random.split(kr, num_envs)


def _tree_where(c, a, b):
    """where(c, a, b) leafwise, c broadcast over each leaf's trailing axes."""
    return jax.tree.map(lambda x, y: jnp.where(jnp.reshape(c, c.shape + (1,) * (x.ndim - c.ndim)), x, y), a, b)


def _gather(tree, idx):
    return jax.tree.map(lambda x: x[idx], tree)


def _scatter(tree, idx, new, valid):
    def put(x, y):
        old = x[idx]
        v = jnp.reshape(valid, valid.shape + (1,) * (y.ndim - 1))
        return x.at[idx].set(jnp.where(v, y, old))
    return jax.tree.map(put, tree, new)


def bundled_chunk(env: G1Env, policy_fn, params, state: EnvState, keys: jax.Array, cfg: BCGConfig, plain_step):
    """One H-step chunk of a batched rollout with BCG (see the module doc).

    keys: (H, 2) per-step keys (the same a plain rollout would use); `plain_step(state, key) ->
    (state, out, contact_force)` is the rollout's batched policy + env step with auto-reset.
    Returns (state after H steps, outs stacked (H, N, ...)).
    """
    H = cfg.horizon
    N = state.step.shape[0]
    K = min(cfg.max_bundled_envs, N)

    # 1. nominal pass
    s = state
    outs, peak, feet_any = [], jnp.zeros(N, state.contact_force.dtype), jnp.zeros((N, 2), bool)
    for h in range(H):
        s, out, force = plain_step(s, keys[h])
        outs.append(out)
        _, feet = stiff_contact(force, env.sphere_foot, cfg.tau)
        feet_any = feet_any | feet
        peak = jnp.maximum(peak, force.max(-1))
    if K == 0:
        return s, jax.tree.map(lambda *x: jnp.stack(x), *outs)
    trig = jnp.any(feet_any, -1)

    # 2. budget: top-K triggered envs by peak force
    _, idx = jax.lax.top_k(jnp.where(trig, peak, -1.0), K)
    valid = trig[idx]

    # 3. bundle pass from the chunk start
    s0 = _gather(state, idx)
    pert_keys = jax.random.split(jax.random.fold_in(keys[0], 0xBC6), K)
    br = jax.vmap(lambda st, k, f: perturb_branches(env, st, k, f, cfg))(s0, pert_keys, feet_any[idx])
    xbar = s0
    step_b = jax.vmap(jax.vmap(env.step, in_axes=(0, None)))
    for h in range(H):
        pk, rk = step_keys(keys[h], N)
        obs = xbar.obs
        action = jax.vmap(policy_fn, in_axes=(None, 0, 0))(params, obs, pk[idx])
        br = step_b(br, action)
        xbar = jax.vmap(lambda b: mean_state(env, b))(br)
        out_b = dict(obs=obs, action=action, reward=xbar.reward, done=xbar.done, truncated=xbar.truncated,
                     next_obs=xbar.obs, metrics=xbar.metrics, bundled=valid)
        rst = jax.lax.stop_gradient(jax.vmap(env.reset)(rk[idx]))
        xbar = _tree_where(xbar.done, rst, xbar)
        if h + 1 < H:
            rst_b = jax.tree.map(lambda x: jnp.broadcast_to(x[:, None], x.shape[:1] + (cfg.branches,) + x.shape[1:]), rst)
            br = _tree_where(jnp.broadcast_to(xbar.done[:, None], (K, cfg.branches)), rst_b, br)
        outs[h] = _scatter(outs[h], idx, out_b, valid)

    # 4. scatter the bundled envs' end state over the nominal one
    s = _scatter(s, idx, xbar, valid)
    return s, jax.tree.map(lambda *x: jnp.stack(x), *outs)
