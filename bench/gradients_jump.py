"""Gradient quality over the whole jump: a trained actor's policy gradient, plain vs the seed's bundle, on the
impulse contact.

Scenario: the jump (`motions/jump.yaml`) under a checkpoint of a jump training (its actor, observation
statistics and action noise std). Each env starts at a reference frame drawn uniformly from [take-off - H,
landing] (the frames where the reference's feet leave and regain the floor), so every H-step window holds a
take-off, a flight or a landing; nominal physics (no domain randomisation, no observation noise). Objective:
the H-step return of the training reward (no critic bootstrap), gradient w.r.t. every actor parameter
(~20 k), per env from a vmap of single-env rollouts.

Estimators: plain, and bcg_seed (the seed's bundle, `BCGConfig.seed_settings`: 8 branches, one control
step, every env in contact bundled). Measures as bench.gradients_touchdown's (over `seeds` batches of N
envs): the seed's summed per-env sample variance with its bootstrap 90 % interval, the batch gradient's
variance over seeds, cosine and relative difference of the mean gradients, bundled fraction, and the local
share (each env's start perturbed M times by the seed's bundle perturbation: the part of the seed's measure
a bundle can average at all).

    python -m bench.gradients_jump --checkpoint runs/jump/<stamp>/checkpoints/latest.npz --name late
        [--modes soft mixed hard] [--horizon 32] [--envs 16] [--seeds 6] [--local 4]
        [--out results/gradients_jump.json]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from bench.gradients_touchdown import _boot, _local_cell, batch_var, local_summary, ratio_cell
from motions import load_motion
from train import domain_rand as DR
from train.bcg import BCGConfig, perturb_branches
from train.checkpoint import load_checkpoint
from train.config import load_config
from train.env import G1Env
from train.networks import make_actor_apply
from train.rollout import rollout

FLIGHT_M = 0.01  # a reference foot more than this above the floor is off it


def flight_window(motion) -> tuple[int, int]:
    """(take-off, landing) frames: the first and last reference frame with both feet above FLIGHT_M."""
    off = np.all(np.asarray(motion.ref_foot_height) > FLIGHT_M, axis=1)
    if not off.any():
        raise ValueError(f"motion {motion.name!r} has no frame with both feet off the floor")
    idx = np.flatnonzero(off)
    return int(idx[0]), int(idx[-1])


class JumpScenario:
    def __init__(self, checkpoint: Path, mode: str, horizon: int, num_envs: int, local: int = 0):
        run_dir = Path(checkpoint).resolve().parents[1]
        cfg = load_config(run_dir)
        motion = load_motion(cfg.motion)
        env_cfg = dataclasses.replace(cfg.env, contact="impulse", impulse_mode=mode, obs_noise=0.0,
                                      domain_rand=DR.DomainRandConfig.off(), random_start=0.0)
        self.env = env = G1Env(env_cfg, motion)
        self.N, self.H, self.mode, self.M = num_envs, horizon, mode, local
        ck = load_checkpoint(checkpoint)
        self.step_of_checkpoint = int(ck.step)
        self.params = jax.tree.map(jnp.asarray, ck.params["net"])
        log_std = jnp.asarray(ck.params["log_std"])
        norm = jax.tree.map(jnp.asarray, ck.obs_norm)
        apply = make_actor_apply(cfg.actor)
        std = jnp.exp(jnp.maximum(log_std, cfg.shac.min_log_std))
        self.takeoff, self.landing = flight_window(motion)
        lo, hi = max(0, self.takeoff - horizon), min(self.landing, env.episode_length - horizon - 1)
        self.frames = (lo, hi)
        self.seed_bcg = BCGConfig.seed_settings(1, env.cfg.physics_dt)

        def policy(params, obs, rng):
            mean = apply(params, obs, norm)
            return mean + std * jax.random.normal(rng, mean.shape)

        def start(key):
            """One env at a reference frame in [take-off - H, landing] (its reference state and action)."""
            k_reset, k_frame, k_roll = jax.random.split(key, 3)
            s = env.reset(k_reset)
            f = jax.random.randint(k_frame, (), lo, hi + 1)
            data = s.data.replace(qpos=env._start_qpos[f], qvel=env._start_qvel[f])
            s = s.replace(data=data, step=f.astype(s.step.dtype), last_action=env._ref_action[f])
            return s.replace(obs=env.observe(s)), k_roll

        def ret_from(params, s, k, bcg):
            batched = jax.tree.map(lambda x: x[None], s)
            _, traj = rollout(env, policy, params, batched, k, horizon, bcg)
            return traj["reward"].sum(), traj["bundled"].mean()

        def flat(g):
            return jnp.concatenate([x.ravel() for x in jax.tree.leaves(g)])

        def per_env(bcg):
            def one(params, key):
                s, k = start(key)
                g, b = jax.grad(ret_from, has_aux=True)(params, s, k, bcg)
                return flat(g), b
            return jax.jit(jax.vmap(one, in_axes=(None, 0)))

        def local_grads(params, key):
            s, k = start(key)
            br = perturb_branches(env, s, jax.random.fold_in(key, 7), jnp.array([True, True]), self.seed_bcg, local)
            g = jax.vmap(lambda sm: flat(jax.grad(lambda p: ret_from(p, sm, k, None)[0])(params)))
            return g(br)

        self.per_env = {"plain": per_env(None), "bcg_seed": per_env(self.seed_bcg)}
        self.local = jax.jit(jax.vmap(local_grads, in_axes=(None, 0))) if local > 1 else None

    def estimates(self, seed: int) -> dict:
        keys = jax.random.split(jax.random.PRNGKey(seed), self.N)
        out = {}
        for k, fn in self.per_env.items():
            g, b = jax.block_until_ready(fn(self.params, keys))
            out[k] = (np.asarray(g, np.float64), float(np.mean(b)))
        if self.local is not None:
            out["local"] = np.asarray(jax.block_until_ready(self.local(self.params, keys)), np.float64)
        return out


def study(sc: JumpScenario, seeds: int) -> dict:
    per: dict = {"plain": [], "bcg_seed": []}
    local = []
    t0 = time.perf_counter()
    for sd in range(seeds):
        est = sc.estimates(2000 + sd)
        if "local" in est:
            local.append(est.pop("local"))
        for k, v in est.items():
            per[k].append(v)
    row: dict = {"mode": sc.mode, "horizon": sc.H, "envs": sc.N, "seeds": seeds, "checkpoint_step": sc.step_of_checkpoint,
                 "start_frames": list(sc.frames), "takeoff_frame": sc.takeoff, "landing_frame": sc.landing,
                 "params": int(per["plain"][0][0].shape[1]), "wall_s": time.perf_counter() - t0}
    means = {}
    for k, vals in per.items():
        G = np.stack([v[0].mean(0) for v in vals])  # (seeds, P) batch gradients
        sv = np.array([v[0].var(0, ddof=1).sum() for v in vals])
        means[k] = G.mean(0)
        row[k] = {"seed_var": float(sv.mean()), "seed_var_ci90": _boot(sv, np.mean), "batch_var": batch_var(G),
                  "batch_var_ci90": _boot(G, batch_var), "bundled": float(np.mean([v[1] for v in vals])),
                  "grad_norm_median": float(np.median(np.linalg.norm(G, axis=1))),
                  "per_env_norm_max_over_median": float(np.max([np.linalg.norm(v[0], axis=1).max() for v in vals])
                                                        / np.median([np.linalg.norm(v[0], axis=1) for v in vals]))}
    s, p = row["bcg_seed"], row["plain"]
    s["ratio_seed_var"] = s["seed_var"] / p["seed_var"]
    s["ratio_batch_var"] = s["batch_var"] / p["batch_var"]
    a, b = means["bcg_seed"], means["plain"]
    s["cos_vs_plain"] = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))
    s["rel_diff_vs_plain"] = float(np.linalg.norm(a - b) / (np.linalg.norm(b) + 1e-30))
    if local:
        row["local"] = local_summary(local, p["seed_var"])
    return row


def render_gradients_jump_table(results: dict) -> str:
    """Markdown table of results/gradients_jump.json."""
    lines = ["| checkpoint | mode | H | envs x seeds | plain seed var | BCG-seed / plain (seed var, 90 % CI) "
             "| BCG-seed / plain (batch var) | bundled | cos BCG-seed vs plain | max / median per-env norm (plain) "
             "| local share (8 whole perturbed rollouts averaged) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        p, s, loc = r["plain"], r["bcg_seed"], r.get("local")
        lines.append(
            f"| {r['name']} (it {r['checkpoint_step']}) | {r['mode']} | {r['horizon']} | {r['envs']} x {r['seeds']} "
            f"| {p['seed_var']:.3g} | {ratio_cell(p, s, 'seed_var')} | {s['ratio_batch_var']:.2f} "
            f"| {s['bundled']:.2f} | {s['cos_vs_plain']:.2f} | {p['per_env_norm_max_over_median']:.1f} "
            f"| {_local_cell(loc)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path, required=True, help="a jump training's checkpoints/<name>.npz")
    ap.add_argument("--name", required=True, help="the checkpoint's label in the table (e.g. early, trained)")
    ap.add_argument("--modes", nargs="+", default=["soft", "mixed", "hard"], choices=["soft", "mixed", "hard"])
    ap.add_argument("--horizon", type=int, default=32)
    ap.add_argument("--envs", type=int, default=16)
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--local", type=int, default=4, metavar="M", help="perturbed copies per env (0: skip)")
    ap.add_argument("--out", default=None, help="write the JSON here (rows of other settings are kept)")
    a = ap.parse_args(argv)
    if a.envs < 2 or a.seeds < 2:
        ap.error("--envs and --seeds must be >= 2 (variances)")
    if not a.checkpoint.is_file():
        ap.error(f"--checkpoint {a.checkpoint}: no such file (a training run's checkpoints/latest.npz)")
    key = lambda r: (r["name"], r["mode"], r["horizon"], r["envs"])  # noqa: E731
    res = {"scenario": "the jump under a trained actor, starts in [take-off - H, landing], nominal physics",
           "rows": json.loads(Path(a.out).read_text())["rows"] if a.out and Path(a.out).is_file() else []}
    for mode in a.modes:
        row = {"name": a.name, "checkpoint": str(a.checkpoint), **study(JumpScenario(a.checkpoint, mode, a.horizon, a.envs,
                                                                                      a.local), a.seeds)}
        print(json.dumps(row), flush=True)
        res["rows"] = [r for r in res["rows"] if key(r) != key(row)] + [row]
        if a.out:  # after every mode: a long run keeps what it measured
            Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    print(render_gradients_jump_table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
