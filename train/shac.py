"""Short-Horizon Actor-Critic (SHAC) over a differentiable rollout.

Actor loss: -(sum of discounted rewards over a short horizon + gamma^h V(s_h)) / h, with the
gradient taken through the simulator (optionally bundled by BCG inside `rollout_fn`) and cut
between horizons. Critic: an ensemble fitted to TD(lambda) targets computed with a slowly
moving target critic. Settings default to the published ones (the BCG paper's SHAC settings).

The trainer takes its collaborators as arguments (brax style): `rollout_fn`, the actor's
`actor_init`/`actor_apply`, a progress callback; it holds no environment knowledge.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from train.networks import OBS_CLIP


def _strong(x) -> jax.Array:
    """x as a strongly typed jax array of its own dtype (a weak-typed scalar would retrace the iteration)."""
    x = jnp.asarray(x)
    return jax.lax.convert_element_type(x, x.dtype)


@dataclasses.dataclass(frozen=True)
class SHACConfig:
    num_envs: int = 64
    horizon: int = 32
    iterations: int = 3000
    gamma: float = 0.99
    lam: float = 0.95
    actor_lr: float = 5e-3
    critic_lr: float = 2e-3
    lr_final: float = 1e-5
    betas: tuple[float, float] = (0.7, 0.95)
    critic_ensemble: int = 3
    critic_hidden: tuple[int, ...] = (256, 256)
    critic_iterations: int = 16
    critic_minibatches: int = 4
    actor_grad_norm: float = 1.0
    critic_grad_norm: float = 10.0
    target_alpha: float = 0.2  # target <- alpha * target + (1 - alpha) * critic (SHAC's setting)
    init_log_std: float = 0.0  # learned action std starts at exp(0) = 1.0
    min_log_std: float = -5.0
    reward_scale: float = 1.0


# ----------------------------------------------------------------------------- observation normaliser
class ObsNorm(NamedTuple):
    count: jax.Array
    mean: jax.Array
    var: jax.Array


def obs_norm_init(n: int) -> ObsNorm:
    return ObsNorm(jnp.asarray(1e-4, jnp.float32), jnp.zeros(n, jnp.float32), jnp.ones(n, jnp.float32))


def obs_norm_update(norm: ObsNorm, batch: jax.Array) -> ObsNorm:
    """Parallel (Chan et al.) update of running mean/var with a batch [..., n]."""
    x = batch.reshape(-1, batch.shape[-1])
    n = jnp.asarray(x.shape[0], jnp.float32)
    bmean, bvar = x.mean(0), x.var(0)
    tot = norm.count + n
    delta = bmean - norm.mean
    mean = norm.mean + delta * n / tot
    m2 = norm.var * norm.count + bvar * n + delta**2 * norm.count * n / tot
    return ObsNorm(tot, mean, m2 / tot)


def obs_normalize(norm: ObsNorm, obs: jax.Array, clip: float = OBS_CLIP) -> jax.Array:
    return jnp.clip((obs - norm.mean) / jnp.sqrt(norm.var + 1e-8), -clip, clip)


# ----------------------------------------------------------------------------- critic
def _dense_init(rng, n_in, n_out, scale=1.0):
    w = jax.random.normal(rng, (n_in, n_out)) * scale * jnp.sqrt(1.0 / n_in)
    return {"w": w, "b": jnp.zeros(n_out)}


def critic_init(rng, obs_size: int, hidden: tuple[int, ...]) -> dict:
    sizes = (obs_size,) + tuple(hidden)
    keys = jax.random.split(rng, len(sizes))
    layers = [
        {**_dense_init(k, a, b), "ln_g": jnp.ones(b), "ln_b": jnp.zeros(b)}
        for k, a, b in zip(keys[:-1], sizes[:-1], sizes[1:])
    ]
    return {"layers": layers, "out": _dense_init(keys[-1], sizes[-1], 1, scale=0.1)}


def critic_apply(params: dict, x: jax.Array) -> jax.Array:
    for layer in params["layers"]:
        x = x @ layer["w"] + layer["b"]
        mu = x.mean(-1, keepdims=True)
        x = (x - mu) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5) * layer["ln_g"] + layer["ln_b"]
        x = jax.nn.elu(x)
    return (x @ params["out"]["w"] + params["out"]["b"])[..., 0]


def ensemble_value(critics: dict, x: jax.Array) -> jax.Array:
    """Mean over the ensemble (critic params stacked on a leading axis)."""
    return jax.vmap(critic_apply, in_axes=(0, None))(critics, x).mean(0)


# ----------------------------------------------------------------------------- returns
def actor_objective(rewards, dones, terminal_values, gamma: float):
    """Per-env short-horizon return with episode resets.

    rewards, dones: [H, N]; terminal_values: [N] = V(s_H). At a done step the discount restarts
    (the next reward belongs to a fresh episode) and no value is bootstrapped: episodes end
    at a fall or at the end of the motion, both terminal.
    """
    def body(carry, x):
        ret, disc = carry
        r, d = x
        ret = ret + disc * r
        disc = jnp.where(d, 1.0, disc * gamma)
        return (ret, disc), None

    N = rewards.shape[1]
    (ret, disc), _ = jax.lax.scan(body, (jnp.zeros(N), jnp.ones(N)), (rewards, dones))
    last_done = dones[-1]
    return ret + jnp.where(last_done, 0.0, disc * terminal_values)


def td_lambda_targets(rewards, dones, values, last_value, gamma: float, lam: float):
    """TD(lambda) targets [H, N]; values[t] = V(s_t) (state before step t), last_value = V(s_H)."""
    next_values = jnp.concatenate([values[1:], last_value[None]], 0)

    def body(g_next, x):
        r, d, v_next = x
        g = r + gamma * jnp.where(d, 0.0, (1 - lam) * v_next + lam * g_next)
        return g, g

    _, targets = jax.lax.scan(body, last_value, (rewards, dones, next_values), reverse=True)
    return targets


# ----------------------------------------------------------------------------- trainer
class TrainState(NamedTuple):
    actor: Any  # {"net": actor net params, "log_std": [A]}
    critics: Any
    target_critics: Any
    actor_opt: Any
    critic_opt: Any
    obs_norm: ObsNorm
    env_state: Any
    rng: jax.Array
    iteration: jax.Array


def _adam(lr_init, cfg: SHACConfig, clip: float):
    # The learning rate lives in the optimiser state (inject_hyperparams) and is set from the
    # host before every iteration (`SHAC.learning_rates`): the schedule then follows SHAC
    # iterations (not optimiser steps: the critic takes many per iteration) and the compiled
    # iteration does not depend on the run length, so resuming with more iterations reuses it.
    adam = optax.inject_hyperparams(optax.adam)(learning_rate=lr_init, b1=cfg.betas[0], b2=cfg.betas[1])
    return optax.chain(optax.clip_by_global_norm(clip), adam)


def _with_learning_rate(opt_state, lr: float):
    clip_state, adam_state = opt_state
    old = adam_state.hyperparams["learning_rate"]
    new = jnp.asarray(lr, old.dtype)
    if getattr(old, "committed", False):  # same placement as before, or jit would see new input shardings and recompile
        new = jax.device_put(new, old.sharding)
    return (clip_state, adam_state._replace(hyperparams={**adam_state.hyperparams, "learning_rate": new}))


@dataclasses.dataclass
class SHAC:
    """Holds the compiled functions. `rollout_fn(policy_fn, actor_params, env_state, rng) -> (env_state, traj)`
    where traj has `obs` [H, N, O] (before each step), `reward` [H, N], `done` [H, N] and
    `final_obs` [N, O]; `policy_fn(actor_params, obs, rng) -> action` is built here."""

    cfg: SHACConfig
    obs_size: int
    action_size: int
    actor_init: Callable[[jax.Array], Any]
    actor_apply: Callable[[Any, jax.Array, ObsNorm], jax.Array]  # (net params, raw obs, obs norm) -> mean action
    rollout_fn: Callable
    reset_fn: Callable[[jax.Array], Any]  # batched reset: rng -> env_state with N envs
    sharding: Any = None  # jax.sharding for the env axis (None: single device)
    obs_clip: float = OBS_CLIP  # critic-input clip; pass the actor's (ActorConfig.obs_clip): one value for both

    def __post_init__(self):
        self.actor_tx = _adam(self.cfg.actor_lr, self.cfg, self.cfg.actor_grad_norm)
        self.critic_tx = _adam(self.cfg.critic_lr, self.cfg, self.cfg.critic_grad_norm)
        self._iterate_jit = jax.jit(self._iterate, donate_argnums=(0,))

    def learning_rates(self, iteration: int) -> tuple[float, float]:
        """(actor, critic) learning rates at a SHAC iteration: linear from the configured values
        to `lr_final` over `cfg.iterations`."""
        frac = min(max(iteration / max(self.cfg.iterations, 1), 0.0), 1.0)
        return tuple(lr + frac * (self.cfg.lr_final - lr) for lr in (self.cfg.actor_lr, self.cfg.critic_lr))

    def iterate(self, ts: "TrainState"):
        """One SHAC iteration (compiled once; `ts` is donated). Returns (new state, metrics)."""
        lr_a, lr_c = self.learning_rates(int(ts.iteration))
        ts = ts._replace(actor_opt=_with_learning_rate(ts.actor_opt, lr_a),
                         critic_opt=_with_learning_rate(ts.critic_opt, lr_c))
        ts, metrics = self._iterate_jit(ts)
        return ts, {**metrics, "actor_lr": lr_a, "critic_lr": lr_c}

    # policy used inside the differentiable rollout: reparameterised Gaussian
    def policy_fn(self, actor: Any, norm: ObsNorm):
        def fn(obs, rng):
            mean = self.actor_apply(actor["net"], obs, norm)
            std = jnp.exp(jnp.maximum(actor["log_std"], self.cfg.min_log_std))
            return mean + std * jax.random.normal(rng, mean.shape)
        return fn

    def init(self, rng: jax.Array) -> TrainState:
        cfg = self.cfg
        k_actor, k_critic, k_env, rng = jax.random.split(rng, 4)
        actor = {"net": self.actor_init(k_actor), "log_std": jnp.full(self.action_size, cfg.init_log_std)}
        critics = jax.vmap(lambda k: critic_init(k, self.obs_size, cfg.critic_hidden))(
            jax.random.split(k_critic, cfg.critic_ensemble))
        env_state = jax.jit(self.reset_fn)(k_env)  # one compile; op by op it dispatches for a minute and more
        if self.sharding is not None:
            env_state = jax.device_put(env_state, self.sharding)
        norm = obs_norm_update(obs_norm_init(self.obs_size), env_state.obs)
        ts = TrainState(actor, critics, jax.tree.map(jnp.copy, critics), self.actor_tx.init(actor),
                        self.critic_tx.init(critics), norm, env_state, rng, jnp.int32(0))
        return self.match_iterate_types(ts)

    def match_iterate_types(self, ts: TrainState) -> TrainState:
        """Cast the state to exactly the dtypes/weak types `iterate` returns, so the second
        iteration reuses the first compile (a weak-typed leaf would trigger a full recompile).
        Also for a state restored from a checkpoint (numpy leaves).

        The output types come from tracing the jitted iteration on the state made strongly typed
        and committed, as the first call then sees it: that call reuses this trace (tracing the
        iteration costs ~45 s on 2 cores for the smallest env), and a restored state of the same
        types reuses it too."""
        ts = jax.tree.map(_strong, ts)
        if self.sharding is None:  # outputs come back committed to the device: make the inputs so too
            ts = jax.device_put(ts, jax.devices()[0])
        out = jax.eval_shape(self._iterate_jit, ts)[0]
        return jax.tree.map(lambda x, s: jax.lax.convert_element_type(x, s.dtype)
                            if x.weak_type != s.weak_type or x.dtype != s.dtype else x, ts, out)

    def _iterate(self, ts: TrainState):
        cfg = self.cfg
        rng, k_roll, k_critic = jax.random.split(ts.rng, 3)
        norm = ts.obs_norm

        def actor_loss(actor):
            env_state, traj = self.rollout_fn(self.policy_fn(actor, norm), actor, ts.env_state, k_roll)
            v_last = ensemble_value(ts.target_critics, obs_normalize(norm, traj["final_obs"], self.obs_clip))
            ret = actor_objective(traj["reward"] * cfg.reward_scale, traj["done"], v_last, cfg.gamma)
            return -ret.mean() / cfg.horizon, (env_state, traj)

        (loss, (env_state, traj)), grads = jax.value_and_grad(actor_loss, has_aux=True)(ts.actor)
        grad_norm = optax.tree.norm(grads)
        finite = jnp.isfinite(grad_norm) & jnp.isfinite(loss)
        # a non-finite gradient skips the update (counted); the caller stops after repeated NaNs
        grads = jax.tree.map(lambda g: jnp.where(finite, g, 0.0), grads)
        updates, actor_opt = self.actor_tx.update(grads, ts.actor_opt, ts.actor)
        actor = optax.apply_updates(ts.actor, updates)

        traj = jax.lax.stop_gradient(traj)
        obs_n = obs_normalize(norm, traj["obs"], self.obs_clip)
        last_n = obs_normalize(norm, traj["final_obs"], self.obs_clip)
        rew = traj["reward"] * cfg.reward_scale
        values = ensemble_value(ts.target_critics, obs_n)
        targets = td_lambda_targets(rew, traj["done"], values, ensemble_value(ts.target_critics, last_n),
                                    cfg.gamma, cfg.lam)
        x = obs_n.reshape(-1, self.obs_size)
        y = targets.reshape(-1)
        mb = x.shape[0] // cfg.critic_minibatches

        def critic_epoch(carry, key):
            critics, opt = carry
            perm = jax.random.permutation(key, x.shape[0])[: mb * cfg.critic_minibatches]
            perm = perm.reshape(cfg.critic_minibatches, mb)

            def minibatch(carry, idx):
                critics, opt = carry

                def loss_fn(c):
                    pred = jax.vmap(critic_apply, in_axes=(0, None))(c, x[idx])
                    return ((pred - y[idx]) ** 2).mean()

                l, g = jax.value_and_grad(loss_fn)(critics)
                upd, opt = self.critic_tx.update(g, opt, critics)
                return (optax.apply_updates(critics, upd), opt), l

            (critics, opt), losses = jax.lax.scan(minibatch, (critics, opt), perm)
            return (critics, opt), losses.mean()

        (critics, critic_opt), closs = jax.lax.scan(
            critic_epoch, (ts.critics, ts.critic_opt), jax.random.split(k_critic, cfg.critic_iterations))
        target = jax.tree.map(lambda t, c: cfg.target_alpha * t + (1 - cfg.target_alpha) * c, ts.target_critics, critics)
        norm = obs_norm_update(norm, traj["obs"])

        metrics = {
            "actor_loss": loss,
            "critic_loss": closs[-1],
            "grad_norm": grad_norm,
            "nonfinite_grad": (~finite).astype(jnp.float32),
            "reward": traj["reward"].mean(),
            "done_frac": traj["done"].mean(),
            "episodes": traj["done"].sum().astype(jnp.float32),
            "falls": (traj["done"] & ~traj.get("truncated", jnp.zeros_like(traj["done"]))).sum().astype(jnp.float32),
            "action_std": jnp.exp(actor["log_std"]).mean(),
            "value": values.mean(),
        }
        if "bundled" in traj:
            metrics["bundled_frac"] = traj["bundled"].mean()
        for k, v in traj.get("metrics", {}).items():
            metrics[k] = jnp.mean(v)
        ts = TrainState(actor, critics, target, actor_opt, critic_opt, norm, env_state, rng, ts.iteration + 1)
        return ts, metrics


def env_sharding(num_envs: int):
    """Shard the env axis over every JAX device (more GPUs -> more envs, same command).

    Returns None on a single device. The env count must divide evenly.
    """
    devices = jax.devices()
    if len(devices) == 1:
        return None
    if num_envs % len(devices):
        raise ValueError(f"num_envs={num_envs} is not divisible by the {len(devices)} JAX devices; "
                         f"use a multiple of {len(devices)}")
    mesh = jax.sharding.Mesh(np.array(devices), ("env",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("env"))


def to_numpy_tree(tree):
    return jax.tree.map(lambda x: np.asarray(x), tree)
