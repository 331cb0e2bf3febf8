"""The training loop as a function, brax style: collaborators in, (params, metrics) out.

    params, metrics = train(cfg, env, progress_fn=..., checkpoint_fn=..., restore_from=... | init_from=...)

- `cfg`: train.config.TrainConfig (shac, actor, bcg sections read here); `env`: a G1Env built
  from cfg.env and the motion. The loop knows no run folders: progress and checkpoints leave
  through the callbacks, so the CLI, tests and benchmarks wire them as they need.
- `progress_fn(iteration, metrics)` after every iteration (metrics are floats; `iteration` counts
  completed iterations); `checkpoint_fn(ts, iteration, metrics)` every `checkpoint_every`
  iterations, at the last one, and once at the end when the last saved one is older.
- Stops early on the time budget or Ctrl-C (params so far are returned, `metrics["stopped"]`
  says why); raises TrainingDiverged after NAN_PATIENCE non-finite iterations in a row or on
  non-finite parameters (the last checkpoint written by `checkpoint_fn` stays the good one).
- Returns `PolicyParams(actor, obs_norm)`, what the exporter takes, and the last iteration's
  metrics plus `iterations`, `wall_s`, `stopped`.
"""
from __future__ import annotations

import dataclasses
import math
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from train.checkpoint import CheckpointError, load_checkpoint
from train.networks import init_actor, make_actor_apply
from train.rollout import rollout
from train.shac import SHAC, ObsNorm, TrainState, env_sharding

NAN_PATIENCE = 5  # consecutive non-finite iterations before training stops


class TrainingDiverged(RuntimeError):
    pass


class PolicyParams(NamedTuple):
    actor: Any  # {"net": actor net params, "log_std": [29]}
    obs_norm: ObsNorm


def make_trainer(cfg, env) -> SHAC:
    """SHAC wired to the env's differentiable rollout (BCG per cfg.bcg); env count x devices."""
    num_envs = cfg.shac.num_envs * len(jax.devices())  # more devices -> more envs, same command
    shac_cfg = dataclasses.replace(cfg.shac, num_envs=num_envs)
    actor_cfg, bcg_cfg = cfg.actor, cfg.bcg

    def rollout_fn(policy, actor, state, rng):
        return rollout(env, lambda _p, obs, k: policy(obs, k), actor, state, rng, shac_cfg.horizon, bcg_cfg)

    return SHAC(shac_cfg, obs_size=env.observation_size, action_size=env.action_size,
                actor_init=lambda k: init_actor(k, env.observation_size, actor_cfg),
                actor_apply=make_actor_apply(actor_cfg), rollout_fn=rollout_fn,
                reset_fn=lambda k: env.reset_batch(k, num_envs), sharding=env_sharding(num_envs),
                obs_clip=actor_cfg.obs_clip)


def resumable(ts: TrainState) -> dict:
    """The part of the train state a checkpoint keeps beside the actor and obs_norm."""
    return {"critics": ts.critics, "target_critics": ts.target_critics, "actor_opt": ts.actor_opt,
            "critic_opt": ts.critic_opt, "rng": ts.rng}


def _with_networks(ts: TrainState, ck) -> TrainState:
    """The state with a checkpoint's actor, critics, target critics and observation statistics."""
    norm = ObsNorm(jnp.asarray(ck.obs_norm["count"], jnp.float32), jnp.asarray(ck.obs_norm["mean"]),
                   jnp.asarray(ck.obs_norm["var"]))
    x = ck.extra
    return ts._replace(actor=ck.params, critics=x["critics"], target_critics=x["target_critics"], obs_norm=norm)


def _restore(ts: TrainState, path: Path) -> TrainState:
    ck = load_checkpoint(path, params_template=ts.actor, extra_template=resumable(ts))
    x = ck.extra
    return _with_networks(ts, ck)._replace(actor_opt=x["actor_opt"], critic_opt=x["critic_opt"], rng=x["rng"],
                                           iteration=jnp.asarray(ck.step))


class StopRequest:
    """While active: the first Ctrl-C (SIGINT) only asks the training loop to stop after the iteration in flight,
    so the run saves and exports what it trained (an interrupt inside the jitted iteration would leave its
    donated train state deleted); a second Ctrl-C interrupts at once. Only the main thread can install it."""

    def __init__(self):
        self.asked, self._prev = False, None

    def _handle(self, signum, frame):
        if self.asked:
            raise KeyboardInterrupt
        self.asked = True
        print("\nstopping after this iteration (Ctrl-C again to interrupt at once)", flush=True)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._prev = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc):
        if self._prev is not None:
            signal.signal(signal.SIGINT, self._prev)


def _warm_start(ts: TrainState, path: Path) -> TrainState:
    """The fresh state with another run's networks and observation statistics (its actor, critics, target
    critics and normaliser); the optimisers' moments, the rng and the iteration count stay fresh, so the run
    follows its own learning-rate schedule from iteration 0. CheckpointError when the networks differ."""
    try:
        ck = load_checkpoint(path, params_template=ts.actor, extra_template=resumable(ts))
    except CheckpointError as e:
        raise CheckpointError(f"--init-from {path}: {e}; start from a run with the same actor.hidden, "
                              "shac.critic_hidden and shac.critic_ensemble") from e
    mean = np.asarray(ck.obs_norm["mean"])
    if mean.shape != np.shape(ts.obs_norm.mean):
        raise CheckpointError(f"--init-from {path}: its observation has {mean.shape[-1]} entries, this run's "
                              f"{np.shape(ts.obs_norm.mean)[-1]}: start from a run with the same observation terms")
    for what, mine, theirs in (("actor", ts.actor, ck.params), ("critics", ts.critics, ck.extra["critics"])):
        if [np.shape(a) for a in jax.tree.leaves(mine)] != [np.shape(b) for b in jax.tree.leaves(theirs)]:
            raise CheckpointError(f"--init-from {path}: its {what} has other layer sizes than this run's: start from "
                                  "a run with the same actor.hidden and shac.critic_hidden")
    return _with_networks(ts, ck)


def _finite_tree(tree) -> bool:
    return all(bool(np.all(np.isfinite(np.asarray(x)))) for x in jax.tree.leaves(tree))


def train(cfg, env, *, progress_fn: Callable[[int, dict], None] | None = None,
          checkpoint_fn: Callable[[TrainState, int, dict], None] | None = None, checkpoint_every: int = 25,
          restore_from: str | Path | None = None, init_from: str | Path | None = None,
          time_budget_s: float | None = None, trainer: SHAC | None = None) -> tuple[PolicyParams, dict]:
    trainer = trainer or make_trainer(cfg, env)
    n_env, horizon, iterations = trainer.cfg.num_envs, trainer.cfg.horizon, trainer.cfg.iterations
    t0 = time.time()
    ts = trainer.init(jax.random.PRNGKey(cfg.seed))
    start = 0
    if restore_from is not None:
        ts = trainer.match_iterate_types(_restore(ts, Path(restore_from)))
        start = int(ts.iteration)
    elif init_from is not None:
        ts = trainer.match_iterate_types(_warm_start(ts, Path(init_from)))
    bad, last, saved_at, stopped = 0, {}, start, ""
    ep_steps = ep_count = 0.0
    with StopRequest() as stop:
        for it in range(start, iterations):
            if time_budget_s is not None and time.time() - t0 > time_budget_s:
                stopped = f"time budget of {time_budget_s:.0f} s reached"
                break
            if stop.asked:
                stopped = "interrupted (Ctrl-C)"
                break
            t_it = time.time()
            ts_new, m = trainer.iterate(ts)
            m = {k: float(v) for k, v in m.items()}
            bad = bad + 1 if m["nonfinite_grad"] > 0 or not math.isfinite(m["actor_loss"]) else 0
            ts = ts_new
            if bad >= NAN_PATIENCE or not _finite_tree(ts.actor):
                raise TrainingDiverged(
                    f"training diverged at iteration {it}: non-finite actor gradient/loss for {bad} iterations in a row "
                    f"(or non-finite parameters). The last good checkpoint is kept (iteration {saved_at}). "
                    "Try a lower actor_lr, a smaller BCG sigma, or a softer contact (--stiffness medium) to localise the cause.")
            ep_steps += n_env * horizon
            ep_count += m["episodes"]
            m["episode_len"] = ep_steps / max(ep_count, 1.0)
            if ep_count > 10 * n_env:  # running window
                ep_steps, ep_count = ep_steps / 2, ep_count / 2
            m.update(iteration=it + 1, wall_s=time.time() - t0, iter_s=time.time() - t_it)
            last = m
            if progress_fn is not None:
                progress_fn(it + 1, m)
            if checkpoint_fn is not None and ((it + 1) % checkpoint_every == 0 or it + 1 == iterations):
                checkpoint_fn(ts, it + 1, m)
                saved_at = it + 1
        if stop.asked and not stopped:
            stopped = "interrupted (Ctrl-C)"
    done = int(last.get("iteration", start)) if last else start
    if checkpoint_fn is not None and last and saved_at != done:
        checkpoint_fn(ts, done, last)
    metrics = {**last, "iterations": done, "wall_s": time.time() - t0, "stopped": stopped}
    return PolicyParams(ts.actor, ts.obs_norm), metrics
