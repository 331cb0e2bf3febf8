"""Bundled Contact Gradients (BCG), as published for the Unitree G1 (the BCG paper's project page, 2026).

On a stiff-contact trigger, B branches perturb the contacting legs' state -- a Cartesian
offset dp ~ N(0, sigma_p^2 I) and a velocity offset dv ~ N(0, sigma_v^2 I) at each foot in
stiff contact, mapped to the leg's 6 joints with the damped pseudo-inverse of the foot point's
translational Jacobian, J^+ = J^T (J J^T + damping I)^-1 -- roll H control steps forward under
the same actions, and are averaged into x_bar; the nominal rollout continues from x_bar. The
offsets are constants for differentiation (stop_gradient), so autodiff through the average
gives the mean of the branch sensitivities.

How it sits in a batched rollout (`bcg_rollout_step`, one control step, scanned by
train/rollout.py):
- Trigger (the published one): at control step t, an env is stiff if any of its foot spheres
  carried a normal force above tau in the last control step's substeps (the state's
  `contact_force`, `train.env.stiff_contact`); the feet to perturb are the stiff feet.
- Contact-local cost under vmap: K = `num_slots(cfg, N)` bundle SLOTS of B branches
  each. Every step, free slots take the not-yet-bundled stiff envs with the highest peak
  force (top-k); the N nominal envs and the K*B branches are stepped together in ONE vmapped
  env step (N + K*B env-steps instead of N; one step body in the compiled graph). A slot runs
  H steps, then (or earlier if x_bar is done, or at the last step of the rollout) x_bar is
  scattered over its env's nominal state and the slot frees. Stiff envs beyond the budget
  keep the plain gradient. Idle slots step perturbed copies of some env and are discarded.
- While an env is bundled, its trajectory entries (obs, action, reward, done, next_obs,
  metrics) are the bundle's: reward = branch mean, done evaluated on x_bar; its nominal copy
  keeps stepping and is overwritten by x_bar when the bundle ends.
- `hold_nominal`: x_bar's values are replaced by the nominal copy's and its gradient kept (straight-through), so
  the rollout's forward pass is the plain one's and only the gradient is the bundle's.
- Actions inside a bundle: at its first step the policy sees the nominal (unperturbed) state
  -- exactly the nominal action, same rng key; at step h >= 1 the policy sees x_bar_{t+h}
  (observation with the env's own noise key), and every branch gets that one action.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

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
    # K bundle slots; None: round(N / B) (at least 1), so the K*B branches cost about as much
    # as the N nominal envs (~2x the plain env-steps); an int is clipped to the batch N.
    max_bundled_envs: int | None = None
    # per-joint bounds of the offsets (rad, rad/s); None: unbounded. The seed clamps to 0.1 rad, 0.5 rad/s
    clamp_q: float | None = None
    clamp_v: float | None = None
    # also trigger when a foot's lowest sole sphere is below this height above the floor (m; the env's foot height
    # metric of the step before), so a bundle can open on the step before a touch-down and hold the impact; None:
    # contact triggers only (the seed's: the first bundle opens the step after the impact)
    trigger_height: float | None = None
    # keep the nominal rollout's values and take only the bundle's gradient (straight-through, `hold_nominal`): the
    # forward pass is the plain rollout's, so the bundle's averaging is measured apart from its drift (x_bar != x)
    hold_nominal: bool = False

    def replace(self, **kw) -> "BCGConfig":
        return dataclasses.replace(self, **kw)

    @classmethod
    def seed_settings(cls, num_envs: int, physics_dt: float) -> "BCGConfig":
        """The bundle of the seed's authors' simulator: 8 branches, one control step, sigma 1 cm and 1 cm/s,
        offsets clamped to 0.1 rad / 0.5 rad/s, triggered by any contact impulse above 1e-6 N s (tau as a
        force: 1e-6 / physics_dt), every environment in contact bundled (no slot budget)."""
        return cls(branches=8, horizon=1, sigma_p=0.01, sigma_v=0.01, tau=1e-6 / physics_dt, damping=1e-4,
                   max_bundled_envs=num_envs, clamp_q=0.1, clamp_v=0.5)


jax.tree_util.register_dataclass(
    BCGConfig,
    data_fields=["sigma_p", "sigma_v", "tau", "damping", "hold_nominal"],
    meta_fields=["enabled", "branches", "horizon", "max_bundled_envs", "clamp_q", "clamp_v", "trigger_height"],
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
        dq, dqd = dp @ Jp.T, dv @ Jp.T
        if cfg.clamp_q is not None:
            dq = jnp.clip(dq, -cfg.clamp_q, cfg.clamp_q)
        if cfg.clamp_v is not None:
            dqd = jnp.clip(dqd, -cfg.clamp_v, cfg.clamp_v)
        dq_all = dq_all.at[:, env.leg_qadr[f]].add(on * dq)
        dv_all = dv_all.at[:, env.leg_dadr[f]].add(on * dqd)
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


def hold_nominal(hold, nominal: EnvState, xbar: EnvState) -> EnvState:
    """Where `hold`: the nominal state's values with x_bar's gradient (stop_gradient(x) + (x_bar - stop_gradient(x_bar)),
    exact in the forward pass); else x_bar. `hold` may be traced, so one compile serves both."""
    def pick(x, xb):
        if jnp.issubdtype(xb.dtype, jnp.inexact):
            x = jax.lax.stop_gradient(x) + (xb - jax.lax.stop_gradient(xb))
        return jnp.where(hold, x, xb)
    return jax.tree.map(pick, nominal, xbar)


def step_keys(key: jax.Array, num_envs: int):
    """Per-env (policy keys, reset keys) of one control step: shared by nominal and bundle passes."""
    kp, kr = jax.random.split(key)
    return jax.random.split(kp, num_envs), jax.random.split(kr, num_envs)


def _tree_where(c, a, b):
    """where(c, a, b) leafwise, c broadcast over each leaf's trailing axes."""
    return jax.tree.map(lambda x, y: jnp.where(jnp.reshape(c, c.shape + (1,) * (x.ndim - c.ndim)), x, y), a, b)


def _gather(tree, idx):
    return jax.tree.map(lambda x: x[idx], tree)


def _scatter(tree, idx, new, valid, axis=0):
    """tree[..., idx, ...] = new where valid (idx indexes `axis`)."""
    def put(x, y):
        xs = jnp.moveaxis(x, axis, 0)
        ys = jnp.moveaxis(y, axis, 0)
        v = jnp.reshape(valid, valid.shape + (1,) * (ys.ndim - 1))
        out = xs.at[idx].set(jnp.where(v, ys, xs[idx]))
        return jnp.moveaxis(out, 0, axis)
    return jax.tree.map(put, tree, new)


class Slots(NamedTuple):
    """Bundle slots carried through a BCG rollout (leading axis K)."""

    branches: EnvState  # (K, B) branch states
    idx: jax.Array  # (K,) int32 env index the slot bundles
    age: jax.Array  # (K,) int32 control steps done
    active: jax.Array  # (K,) bool
    obs: jax.Array  # (K, obs_size) observation of x_bar (what the policy sees next)


def num_slots(cfg: BCGConfig, num_envs: int) -> int:
    k = max(1, round(num_envs / cfg.branches)) if cfg.max_bundled_envs is None else cfg.max_bundled_envs
    return max(0, min(k, num_envs))


def init_slots(env: G1Env, state: EnvState, cfg: BCGConfig) -> Slots:
    N = state.step.shape[0]
    K = num_slots(cfg, N)
    idx = jnp.arange(K, dtype=jnp.int32) % N
    s = _gather(state, idx)
    br = jax.tree.map(lambda x: jnp.broadcast_to(x[:, None], x.shape[:1] + (cfg.branches,) + x.shape[1:]), s)
    return Slots(br, idx, jnp.zeros(K, jnp.int32), jnp.zeros(K, bool), s.obs)


def bundle_trigger(contact_force, sphere_foot, foot_height, cfg: BCGConfig):
    """(triggered (N,), feet to perturb (N, 2)): a foot with a sphere force above cfg.tau, or, with
    cfg.trigger_height, a foot whose lowest sphere is below that height. contact_force (N, S); foot_height (N, 2)."""
    stiff, feet = stiff_contact(contact_force, sphere_foot, cfg.tau)
    if cfg.trigger_height is not None:
        near = foot_height < cfg.trigger_height
        stiff, feet = stiff | near.any(-1), feet | near
    return stiff, feet


def bcg_rollout_step(env: G1Env, policy_fn, params, cfg: BCGConfig, state: EnvState, slots: Slots,
                     key: jax.Array, last: jax.Array):
    """One control step of a batched BCG rollout (module doc). `last`: the rollout's final step
    (every open bundle closes). Returns (state after auto-reset, slots, out) -- out as the plain step's."""
    N = state.step.shape[0]
    K, B = slots.idx.shape[0], cfg.branches
    pk, rk = step_keys(key, N)

    # assign free slots to the stiffest not-yet-bundled envs
    in_slot = jnp.zeros(N, jnp.int32).at[slots.idx].max(slots.active.astype(jnp.int32)) > 0
    feet_h = jnp.stack([state.metrics["foot_height_left"], state.metrics["foot_height_right"]], -1)
    stiff, stiff_feet = bundle_trigger(state.contact_force, env.sphere_foot, feet_h, cfg)
    cand = stiff & ~in_slot
    top_score, top_idx = jax.lax.top_k(jnp.where(cand, state.contact_force.max(-1), -1.0), K)
    top_valid = cand[top_idx]
    free = ~slots.active
    rank = jnp.clip(jnp.cumsum(free.astype(jnp.int32)) - 1, 0, K - 1)
    new = free & top_valid[rank]
    new_idx = top_idx[rank]
    idx = jnp.where(new, new_idx, slots.idx)
    age = jnp.where(new, 0, slots.age)
    active = slots.active | new
    s_new = _gather(state, new_idx)
    pert_keys = jax.random.split(jax.random.fold_in(key, 0xBC6), K)
    fresh = jax.vmap(lambda st, k, f: perturb_branches(env, st, k, f, cfg))(s_new, pert_keys, stiff_feet[new_idx])
    branches = _tree_where(jnp.broadcast_to((new | ~active)[:, None], (K, B)), fresh, slots.branches)
    slot_obs = jnp.where(new[:, None], s_new.obs, slots.obs)

    # actions: nominal envs at their state, slots at x_bar (= the nominal state on a slot's first step)
    policy = jax.vmap(policy_fn, in_axes=(None, 0, 0))
    a_nom = policy(params, state.obs, pk)
    a_slot = policy(params, slot_obs, pk[idx])

    # one vmapped step over N nominal envs + K*B branches
    flat = jax.tree.map(lambda x: x.reshape((K * B,) + x.shape[2:]), branches)
    both = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), state, flat)
    act = jnp.concatenate([a_nom, jnp.repeat(a_slot, B, axis=0)])
    nxt = jax.vmap(env.step)(both, act)
    nom = jax.tree.map(lambda x: x[:N], nxt)
    branches = jax.tree.map(lambda x: x[N:].reshape((K, B) + x.shape[1:]), nxt)
    xbar = hold_nominal(cfg.hold_nominal, _gather(nom, idx), jax.vmap(lambda b: mean_state(env, b))(branches))
    age = age + 1
    finish = active & ((age >= cfg.horizon) | xbar.done | last)

    out = dict(obs=state.obs, action=a_nom, reward=nom.reward, done=nom.done, truncated=nom.truncated,
               next_obs=nom.obs, metrics=nom.metrics, bundled=jnp.zeros(N, bool))
    out_b = dict(obs=slot_obs, action=a_slot, reward=xbar.reward, done=xbar.done, truncated=xbar.truncated,
                 next_obs=xbar.obs, metrics=xbar.metrics, bundled=active)
    out = _scatter(out, idx, out_b, active)
    nom = _scatter(nom, idx, xbar, finish)
    state = env.reset_done(nom, rk)
    return state, Slots(branches, idx, age, active & ~finish, xbar.obs), out
