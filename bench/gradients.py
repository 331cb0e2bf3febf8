"""Gradient quality and cost: plain analytic (SHAC) vs BCG vs zero-order, across contact stiffness.

Scenario ("landing into stance"): the G1 in its default pose starts 0-10 mm above the floor
moving down at 0.2-0.5 m/s (random per env), so the soles hit the floor in the first control
step and the rest of the horizon is stance under that contact. Policy: a fixed linear
feedback plus a learnable 29-d action bias theta and reparameterised Gaussian action noise
(std 0.1); the objective is the batch-mean return over `horizon` control steps of the
hold-pose imitation reward (train/rewards.py). Every estimate is one batch of N envs (the
quantity a SHAC iteration uses); `seeds` independent seeds give independent estimates.

Estimators of d(mean return)/d(theta), per seed:
- plain: jax.grad through the rollout (BCG off).
- bcg: BCG as published (B = 10, H = 2, sigma 1 cm, 2 cm/s, tau 400 N) with the default slot
  budget K = round(N / B) (~2x the env-steps).
- bcg_all: the same with K = N (every stiff env bundled: no budget).
- zo: antithetic Gaussian smoothing in theta (sigma ZO_SIGMA), ZO_PAIRS pairs, function values
  only, common random numbers within a pair.
Reported per stiffness: total variance (trace of the covariance over seeds), the distribution of
the gradient norm over seeds (median, p90, max: heavy tails are what stiff contact does to plain
gradients), the fraction of control steps bundled, and, against a reference, the relative bias
and cosine of each estimator's mean, projected on REF_DIRS random orthonormal directions.
Reference: central differences (step REF_H) of the batch-mean return along those directions with
common random numbers. The bias is PAIRED: each estimator seed's projected gradient minus the
central difference of the same seed's return (same initial states, same noise), averaged over
seeds, so the seed-to-seed spread of the return cancels and the bias is resolved (its relative
standard error is reported as grad_bias_se_*; the unpaired reference over REF_SEEDS + seeds
seeds, grad_ref_rel_stderr_*, was 0.4-0.8 and could not resolve it). BCG's trigger tau is a
per-sphere normal force: 400 N as published for MJX's contact; the sigmoid contact's peak per
sphere is ~90 N in this landing (results/contact_models.json), so its default is 50 N.
Stiffness is one knob per contact model, changed per env through EnvParams, so one compile serves
all settings of a model: `--contact mjx` (MJX's constraint contact, the solref time constant of
robots/model.py: soft / medium / stiff) or `--contact sigmoid` (the seed's sigmoid-activated contact
of train/contact.py at a 300 Hz substep, sharpness k = 50 / 100 / 300 1/m; the paper trains at 300).

    python -m bench.gradients [--contact mjx|sigmoid] [--batches 16 64] [--seeds 12] [--horizon 8]
        [--tau 50] [--out results/gradients_sigmoid_h32.json]
"""
from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from robots import g1
from robots.model import STIFFNESS_TIMECONST
from train import domain_rand as DR
from train.bcg import BCGConfig, num_slots
from train.cli import SIGMOID_SUBSTEPS
from train.env import EnvConfig, G1Env
from motions import hold_pose_motion
from train.rollout import rollout

HORIZON = 8  # control steps (0.16 s): impact + stance
ACTION_STD = 0.1
ZO_SIGMA = 0.05  # action units (x 0.25 rad)
ZO_PAIRS = 8
REF_DIRS = 8  # = ZO_PAIRS: the reference reuses the compiled batched-returns function
REF_H = 0.02
REF_SEEDS = 48
STIFFNESSES = ("soft", "medium", "stiff")
# contact model -> (EnvParams field of its knob, {setting name: value}), softest first
SETTINGS = {
    "mjx": ("contact_timeconst", dict(STIFFNESS_TIMECONST)),
    "sigmoid": ("contact_kappa", {"k50": 50.0, "k100": 100.0, "k300": 300.0}),
}
DEFAULT_TAU = {"mjx": 400.0, "sigmoid": 50.0}  # N per foot sphere (module doc)


class Problem:
    def __init__(self, num_envs: int, bcg: dict[str, BCGConfig], horizon: int = HORIZON, contact: str = "mjx"):
        self.N = num_envs
        self.horizon = horizon
        self.bcg = bcg
        self.contact = contact
        self.knob, self.settings = SETTINGS[contact]
        env_kw = dict(contact="sigmoid", substeps=SIGMOID_SUBSTEPS) if contact == "sigmoid" else {}
        self.env = env = G1Env(EnvConfig(domain_rand=DR.DomainRandConfig.off(), obs_noise=0.0, **env_kw),
                               hold_pose_motion(horizon + 8, "hold"))
        knob = self.knob
        w0 = 0.01 * jax.random.normal(jax.random.PRNGKey(42), (env.observation_size, g1.NUM_MOTORS))

        def policy(theta, obs, rng):
            return 0.5 * jnp.tanh(obs @ w0) + theta + ACTION_STD * jax.random.normal(rng, (g1.NUM_MOTORS,))

        def start(seed, timeconst):
            k_reset, k_drop, k_vz, k_roll = jax.random.split(jax.random.PRNGKey(seed), 4)
            s = env.reset_batch(k_reset, num_envs)
            drop = jax.random.uniform(k_drop, (num_envs,), minval=0.0, maxval=0.01)
            vz = jax.random.uniform(k_vz, (num_envs,), minval=-0.5, maxval=-0.2)
            data = s.data.replace(qpos=s.data.qpos.at[:, 2].add(drop), qvel=s.data.qvel.at[:, 2].set(vz))
            dr = s.dr.replace(**{knob: jnp.full(num_envs, timeconst, getattr(s.dr, knob).dtype)})
            return s.replace(data=data, dr=dr), k_roll

        def ret(theta, seed, timeconst, cfg):
            s, k = start(seed, timeconst)
            _, traj = rollout(env, policy, theta, s, k, horizon, cfg)
            return traj["reward"].sum(0).mean(), traj["bundled"].mean()

        self.grads = {"plain": jax.jit(jax.grad(lambda th, sd, tc: ret(th, sd, tc, None), has_aux=True))}
        for name, cfg in bcg.items():
            g = jax.jit(jax.grad(ret, has_aux=True))
            self.grads[name] = lambda th, sd, tc, g=g, cfg=cfg: g(th, sd, tc, cfg)
        self.returns = jax.jit(jax.vmap(lambda th, sd, tc: ret(th, sd, tc, None)[0], in_axes=(0, None, None)))
        self.start, self.policy = start, policy  # the scenario, for bench.step_jacobians
        self.theta = jnp.zeros(g1.NUM_MOTORS)
        q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(g1.NUM_MOTORS, REF_DIRS)))
        self.dirs = jnp.asarray(q.T)  # (REF_DIRS, 29) orthonormal

    def zo(self, seed, timeconst, key):
        eps = jax.random.normal(key, (ZO_PAIRS, g1.NUM_MOTORS))
        thetas = jnp.concatenate([self.theta + ZO_SIGMA * eps, self.theta - ZO_SIGMA * eps])
        r = self.returns(thetas, seed, timeconst)
        return ((r[:ZO_PAIRS] - r[ZO_PAIRS:])[:, None] * eps).sum(0) / (2 * ZO_SIGMA * ZO_PAIRS)

    def directional(self, seed, timeconst):
        """(REF_DIRS,) central differences of the batch-mean return along self.dirs."""
        thetas = jnp.concatenate([self.theta + REF_H * self.dirs, self.theta - REF_H * self.dirs])
        r = self.returns(thetas, seed, timeconst)
        return (r[:REF_DIRS] - r[REF_DIRS:]) / (2 * REF_H)


def _timed(fn, *args, repeats=1):
    out = jax.block_until_ready(fn(*args))
    t = time.perf_counter()
    for _ in range(repeats):
        out = jax.block_until_ready(fn(*args))
    return out, (time.perf_counter() - t) / repeats


def _compile_time(fn, *args):
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t


def gradient_quality(pb: Problem, seeds: int, stiffnesses=None, ref_seeds: int = REF_SEEDS) -> dict:
    out: dict = {}
    stiffnesses = tuple(pb.settings) if stiffnesses is None else stiffnesses
    tc0 = pb.settings[stiffnesses[-1]]
    for k, fn in pb.grads.items():
        out[f"compile_s_grad_{k}"] = _compile_time(fn, pb.theta, 0, tc0)
    out["compile_s_returns"] = _compile_time(pb.zo, 0, tc0, jax.random.PRNGKey(0))
    names = list(pb.grads) + ["zo"]
    times = {k: [] for k in names}
    for stiff in stiffnesses:
        tc = pb.settings[stiff]
        est = {k: [] for k in names}
        bundled = {k: [] for k in pb.bcg}
        for sd in range(seeds):
            seed = 1000 + sd
            for k, fn in pb.grads.items():
                t = time.perf_counter()
                g, b = jax.block_until_ready(fn(pb.theta, seed, tc))
                times[k].append(time.perf_counter() - t)
                est[k].append(np.asarray(g))
                if k in bundled:
                    bundled[k].append(float(b))
            t = time.perf_counter()
            est["zo"].append(np.asarray(jax.block_until_ready(pb.zo(seed, tc, jax.random.PRNGKey(seed)))))
            times["zo"].append(time.perf_counter() - t)
        paired = np.stack([np.asarray(pb.directional(1000 + sd, tc)) for sd in range(seeds)])  # same seeds
        extra = [np.asarray(pb.directional(5000 + i, tc)) for i in range(ref_seeds)]
        ref = np.concatenate([paired, np.stack(extra)]) if extra else paired
        g_ref = ref.mean(0)
        ref_norm = np.linalg.norm(g_ref)
        out[f"grad_ref_rel_stderr_{stiff}"] = float(np.sqrt(ref.var(0, ddof=1).sum() / len(ref)) / ref_norm)
        dirs = np.asarray(pb.dirs)
        for k, v in bundled.items():
            out[f"{k}_bundled_step_fraction_{stiff}"] = float(np.mean(v))
        for k, v in est.items():
            v = np.stack(v)
            d = v @ dirs.T - paired  # (seeds, REF_DIRS): estimator minus the same seed's central difference
            norms = np.linalg.norm(v, axis=1)
            out[f"grad_var_{k}_{stiff}"] = float(v.var(0, ddof=1).sum())
            out[f"grad_bias_{k}_{stiff}"] = float(np.linalg.norm(d.mean(0)) / ref_norm)
            out[f"grad_bias_se_{k}_{stiff}"] = float(np.sqrt(d.var(0, ddof=1).sum() / len(d)) / ref_norm)
            proj, fd = (v @ dirs.T).mean(0), paired.mean(0)
            out[f"grad_cos_{k}_{stiff}"] = float(proj @ fd / (np.linalg.norm(proj) * np.linalg.norm(fd) + 1e-30))
            out[f"grad_norm_{k}_{stiff}"] = {"median": float(np.median(norms)), "p90": float(np.quantile(norms, 0.9)),
                                              "max": float(norms.max())}
            if k != "plain":
                out[f"{k}_grad_variance_ratio_{stiff}"] = out[f"grad_var_{k}_{stiff}"] / out[f"grad_var_plain_{stiff}"]
    for k, v in times.items():
        out[f"grad_time_s_{k}"] = float(np.median(v))
    return out


def throughput(pb: Problem, repeats: int = 3) -> dict:
    """Env-steps/s with gradients (nominal control steps per second of a batched grad call)."""
    tc = list(pb.settings.values())[-1]  # the stiffest setting
    out, t = {}, {}
    for k, fn in pb.grads.items():
        _, t[k] = _timed(fn, pb.theta, 7, tc, repeats=repeats)
        out[f"env_steps_per_s_grad_{k}_b{pb.N}"] = pb.N * pb.horizon / t[k]
    for k, cfg in pb.bcg.items():
        out[f"{k}_time_ratio_b{pb.N}"] = t[k] / t["plain"]
        out[f"{k}_slots_b{pb.N}"] = num_slots(cfg, pb.N)
    return out


def run(batches: tuple[int, ...] = (16,), seeds: int = 6, horizon: int = 32, with_all: bool = False,
        stiffnesses: tuple[str, ...] | None = ("k50", "k300"), contact: str = "sigmoid", tau: float | None = None,
        ref_seeds: int = 0) -> dict:
    """Defaults (`make bench`): the seed's setting, the sigmoid contact at k = 50 and 300 over the paper's
    32-step horizon (= `make gradients-sigmoid`), so bench.json's bcg_grad_variance_ratio is BCG / plain at
    k = 300, horizon 32. The CLI's defaults are the MJX contact's short-horizon study."""
    # published: B = 10, H = 2, sigma_p = 1 cm, sigma_v = 2 cm/s, tau = 400 N (50 N on the sigmoid contact)
    cfg = BCGConfig(tau=DEFAULT_TAU[contact] if tau is None else tau)
    n0 = batches[0]
    variants = {"bcg": cfg}
    if with_all:
        variants["bcg_all"] = cfg.replace(max_bundled_envs=n0)
    pb = Problem(n0, variants, horizon, contact)
    stiffnesses = tuple(pb.settings) if stiffnesses is None else stiffnesses
    out = {"grad_bench_contact": contact, "grad_bench_num_envs": n0, "grad_bench_horizon": horizon, "grad_bench_seeds": seeds,
           "bcg_branches": cfg.branches, "bcg_horizon": cfg.horizon, "bcg_tau_n": cfg.tau, "zo_pairs": ZO_PAIRS}
    out.update(gradient_quality(pb, seeds, stiffnesses, ref_seeds))
    out.update(throughput(pb))
    for n in batches[1:]:
        out.update(throughput(Problem(n, {"bcg": cfg}, horizon, contact)))
    # bench.json's two headline keys: default BCG (budgeted) at the stiffest setting, value+grad of a
    # batched short-horizon return as the "training-like iteration" (critic updates excluded)
    out["bcg_grad_variance_ratio"] = out[f"bcg_grad_variance_ratio_{stiffnesses[-1]}"]
    out["bcg_iteration_time_ratio"] = out[f"bcg_time_ratio_b{n0}"]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, nargs="+", default=[16])
    p.add_argument("--seeds", type=int, default=12)
    p.add_argument("--horizon", type=int, default=HORIZON)
    p.add_argument("--no-all", action="store_true", help="skip the unbudgeted BCG variant (one compile less)")
    p.add_argument("--contact", default="mjx", choices=list(SETTINGS))
    p.add_argument("--stiffness", nargs="+", default=None,
                   help="settings to sweep, stiffest last (its ratio is bcg_grad_variance_ratio): "
                        + "; ".join(f"{c}: {' '.join(s)}" for c, (_, s) in SETTINGS.items()))
    p.add_argument("--tau", type=float, default=None, help=f"BCG trigger, N per foot sphere (default {DEFAULT_TAU})")
    p.add_argument("--ref-seeds", type=int, default=REF_SEEDS,
                   help="extra seeds of the unpaired reference (the paired bias needs none)")
    p.add_argument("--out", default=None, help="also write the JSON here (e.g. results/gradients_sigmoid_h32.json)")
    ns = p.parse_args(argv)
    if ns.tau is not None and not (ns.tau > 0 and np.isfinite(ns.tau)):
        p.error(f"--tau {ns.tau}: a normal force in N, > 0")
    t0 = time.perf_counter()
    res = run(tuple(ns.batches), ns.seeds, ns.horizon, not ns.no_all, None if ns.stiffness is None else tuple(ns.stiffness),
              ns.contact, ns.tau, ns.ref_seeds)
    res["wall_s"] = time.perf_counter() - t0
    text = json.dumps(res, indent=1, sort_keys=True)
    print(text)
    if ns.out:
        from pathlib import Path

        Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
        Path(ns.out).write_text(text + "\n")
    return 0


# ---------------------------------------------------------------------------------------------- docs tables
def _gradient_rows(results: dict) -> list[list[str]]:
    """One row per (stiffness, estimator) of a `--out` JSON: variance, ratio to plain, paired bias against the
    central differences (its standard error), cosine to the reference, norm median / max, bundled steps, time."""
    ks = sorted((k.rsplit("_k", 1)[1] for k in results if k.startswith("grad_var_plain_k")), key=float)
    names = {"plain": "plain", "bcg": f"BCG (B = {results['bcg_branches']}, H = {results['bcg_horizon']})",
             "zo": f"zero-order ({results['zo_pairs']} pairs)"}
    rows = []
    for k in ks:
        plain = results[f"grad_var_plain_k{k}"]
        for est in ("plain", "bcg", "zo"):
            var, norm = results[f"grad_var_{est}_k{k}"], results[f"grad_norm_{est}_k{k}"]
            bundled = results.get(f"bcg_bundled_step_fraction_k{k}") if est == "bcg" else None
            rows.append([k, names[est], f"{var:.3g}", "-" if est == "plain" else f"{var / plain:.3g}x",
                         f"{100 * results[f'grad_bias_{est}_k{k}']:.1f} % ({100 * results[f'grad_bias_se_{est}_k{k}']:.1f})",
                         f"{results[f'grad_cos_{est}_k{k}']:.3f}", f"{norm['median']:.3g} / {norm['max']:.3g}",
                         "-" if bundled is None else f"{100 * bundled:.1f} %", f"{results[f'grad_time_s_{est}']:.2f} s"])
    return rows


def render_gradients_table(results: dict) -> str:
    """The markdown table of a `python -m bench.gradients --out` JSON (make gradients-sigmoid, -h8)."""
    head = ["k (1/m)", "estimator", "variance", "vs plain", "paired bias (s.e.)", "cosine to reference",
            "norm median / max", "bundled steps", "time per gradient"]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                     + ["| " + " | ".join(r) + " |" for r in _gradient_rows(results)])


render_gradients_sigmoid_h32_table = render_gradients_table
render_gradients_sigmoid_h8_table = render_gradients_table


if __name__ == "__main__":
    raise SystemExit(main())
