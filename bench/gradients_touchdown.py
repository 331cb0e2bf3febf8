"""Gradient quality across touch-down: plain analytic gradients vs BCG, on the seed's impulse contact (soft,
mixed, hard), MJX's constraint contact and the penalty spring ("sigmoid" contact, K = 2e4 N/m per sphere).

Scenario ("landing from flight"): the PD-held G1 falls from a height h ~ U(0.10, 0.20) m (per env) and
is started on that ballistic path t_td ~ U(0.01, 0.6 H dt) s before its soles touch the floor, so the
envs of one batch touch down at different control steps and every gradient crosses the flight ->
contact switch. Policy: a fixed linear feedback plus a learnable 29-d action bias theta and
reparameterised Gaussian action noise (std 0.1); objective: the batch-mean return over H control
steps of the hold-pose imitation reward. theta is given PER ENV (N, 29), so one backward pass yields
every env's own gradient g_i; the batch gradient is their mean.

Estimators: plain (jax.grad through the rollout), bcg_seed (the seed's bundle: BCGConfig.seed_settings,
every env in contact bundled, 8 branches, one control step, any impulse triggers), bcg_ours (the cpu
preset's: B = 4, H = 2, 4 slots, 400 N per sphere). Variants of the seed's bundle, added beside a row already
measured (`--add-pre-trigger`, `--add-held`; plain recomputed on the same seeds): bcg_seed_pre opens a bundle
on a foot near the floor too; bcg_seed_held keeps the plain rollout's values and takes the bundle's gradient
(BCGConfig.hold_nominal): the bundle's averaging without the drift of its rollout from plain's (bench.bundle_drift).
Measures per (contact mode, kappa, horizon, estimator), over `seeds` batches of N envs:
- seed_var: the seed's measure, sum over components of the per-env sample variance of g_i (mean over
  seeds, with its bootstrap 90 % interval over seeds);
- batch_var: trace of the covariance over seeds of the batch gradient (bootstrap 90 % interval);
- ratio_seed_var / ratio_batch_var: BCG / plain;
- bias and cosine of the mean gradient against the resolved reference: plain's mean over all N x seeds
  per-env gradients, with its relative standard error (ref_rel_se = |SE| / |mean|; resolved where <= 0.1).
  noise_rel is the relative difference that the two means' standard errors alone would give: a bias above
  it is the bundle's, below it is sampling noise;
- bundled: fraction of env-steps in a bundle; touchdown_step: mean control step of first contact;
- local: what a bundle can average at all. Each env's start state is perturbed M times by the seed's own
  bundle perturbation (1 cm / 1 cm/s at both feet through the legs' damped pseudo-inverse, clamped; the same
  action noise), and the plain gradient taken at each: local_var is the mean over envs of the summed sample
  variance over those M copies, local_share = local_var / seed_var. The seed's measure is the spread of g_i
  over envs; averaging B whole rollouts from such perturbed starts would remove (1 - 1/B) of its local part:
  bound_seed_var = 1 - (1 - 1/8) local_share is the ratio that smoothing of the start state would reach. A
  bundle is narrower: it averages one window's branches and continues from their mean state.

    python -m bench.gradients_touchdown [--contacts soft mixed hard mjx penalty] [--kappas 50 100 300] [--horizons 8 32]
        [--envs 64] [--seeds 12] [--local 8] [--chunk C] [--out results/gradients_touchdown.json]
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from motions import hold_pose_motion
from robots import g1
from train import domain_rand as DR
from train.bcg import BCGConfig, perturb_branches
from train.contact import SUBSTEP as SPRING_SUBSTEP
from train.env import EnvConfig, G1Env
from train.rollout import rollout

ACTION_STD = 0.1
ESTIMATORS = ("plain", "bcg_seed", "bcg_ours")
VARIANTS = ("bcg_seed_pre", "bcg_seed_held")  # the seed's bundle's variants, added beside rows (add_variant)
IMPULSE_MODES = ("soft", "mixed", "hard")
# a row's contact: an impulse mode, MJX's constraint contact or the penalty spring (EnvConfig.contact "sigmoid")
CONTACTS = IMPULSE_MODES + ("mjx", "penalty")
KAPPA_FREE = ("hard", "mjx")  # contacts without a gate: one row, at the last kappa given


def env_config(contact: str) -> EnvConfig:
    if contact not in CONTACTS:
        raise ValueError(f"contact {contact!r}: one of {', '.join(CONTACTS)}")
    kind = {"mjx": "mjx", "penalty": "sigmoid"}.get(contact, "impulse")
    extra = ({"impulse_mode": contact} if kind == "impulse" else
             {"substeps": math.ceil(g1.CONTROL_DT / SPRING_SUBSTEP - 1e-9)} if kind == "sigmoid" else {})  # 300 Hz
    return EnvConfig(contact=kind, domain_rand=DR.DomainRandConfig.off(), obs_noise=0.0, **extra)


class Scenario:
    """One contact (an impulse mode, "mjx" or "penalty") and horizon: compiled gradients for each estimator;
    kappa is a per-env EnvParams leaf, so one compile serves every kappa. plain and bcg_seed treat every env on its own (no
    slot budget), so they run as a vmap over single-env rollouts and yield per-env gradients; bcg_ours's
    slot budget couples the envs of a batch, so it yields the batch gradient only."""

    def __init__(self, mode: str, horizon: int, num_envs: int, local: int = 0, pre_trigger: float | None = None,
                 held: bool = False, chunk: int | None = None):
        self.N, self.H, self.mode, self.M = num_envs, horizon, mode, local
        self.env = env = G1Env(env_config(mode), hold_pose_motion(horizon + 8, "hold"))
        self.bcg = {"plain": None, "bcg_seed": BCGConfig.seed_settings(1, env.cfg.physics_dt),
                    "bcg_ours": BCGConfig(branches=4, horizon=2, max_bundled_envs=4, tau=400.0)}
        w0 = 0.01 * jax.random.normal(jax.random.PRNGKey(42), (env.observation_size, g1.NUM_MOTORS))
        H = horizon

        def policy(theta, obs, rng):
            return 0.5 * jnp.tanh(obs @ w0) + theta + ACTION_STD * jax.random.normal(rng, (g1.NUM_MOTORS,))

        def start(key, n, kappa):
            k_reset, k_h, k_t, k_roll = jax.random.split(key, 4)
            s = env.reset_batch(k_reset, n)
            h = jax.random.uniform(k_h, (n,), minval=0.10, maxval=0.20)
            t = jax.random.uniform(k_t, (n,), minval=0.01, maxval=0.6 * H * env.cfg.control_dt)
            v_td = jnp.sqrt(2 * 9.81 * h)
            z = jnp.maximum(v_td * t - 0.5 * 9.81 * t * t, 0.0)  # above the touching pose
            data = s.data.replace(qpos=s.data.qpos.at[:, 2].add(z), qvel=s.data.qvel.at[:, 2].set(-(v_td - 9.81 * t)))
            return s.replace(data=data, dr=s.dr.replace(contact_kappa=jnp.full(n, kappa, s.dr.contact_kappa.dtype))), k_roll

        def ret_from(theta, s, k, cfg):
            _, traj = rollout(env, policy, theta, s, k, H, cfg)
            contact = traj["metrics"]["contact_force_max"] > 1e-3  # (H, n)
            td = jnp.where(contact.any(0), jnp.argmax(contact, 0), H).astype(jnp.float32)
            return traj["reward"].sum(0).mean(), (traj["bundled"].mean(), td.mean())

        def ret(theta, key, n, kappa, cfg):
            s, k = start(key, n, kappa)
            return ret_from(theta, s, k, cfg)

        def local_grads(theta, key, kappa):
            """(M, 29) plain gradients of one env from M copies of its start state under the seed's bundle
            perturbation (both legs), with the same action noise."""
            s, k = start(key, 1, kappa)
            s0 = jax.tree.map(lambda x: x[0], s)
            br = perturb_branches(env, s0, jax.random.fold_in(key, 7), jnp.array([True, True]),
                                  self.bcg["bcg_seed"], self.M)
            g = jax.grad(lambda th, sm: ret_from(th, jax.tree.map(lambda x: x[None], sm), k, None)[0])
            return jax.vmap(g, in_axes=(None, 0))(theta, br)

        def per_env(cfg):
            g = jax.grad(lambda th, key, kp: ret(th, key, 1, kp, cfg), has_aux=True)
            if chunk is None or chunk >= num_envs:
                return jax.jit(jax.vmap(g, in_axes=(None, 0, None)))
            # `chunk` envs at a time: the backward pass holds every step's state of the envs it differentiates
            return jax.jit(lambda th, keys, kp: jax.lax.map(lambda k: g(th, k, kp), keys, batch_size=chunk))

        self.per_env = {"plain": per_env(None), "bcg_seed": per_env(self.bcg["bcg_seed"])}
        if pre_trigger is not None:  # the seed's bundle, also opened by a foot within pre_trigger m of the floor
            self.bcg["bcg_seed_pre"] = self.bcg["bcg_seed"].replace(trigger_height=pre_trigger)
        if held:  # the seed's bundle's gradient on the plain forward pass: its averaging without its drift
            self.bcg["bcg_seed_held"] = self.bcg["bcg_seed"].replace(hold_nominal=True)
        self.variants = {k: per_env(self.bcg[k]) for k in VARIANTS if k in self.bcg}
        self.batch = {"bcg_ours": jax.jit(jax.grad(lambda th, key, kp: ret(th, key, num_envs, kp, self.bcg["bcg_ours"]),
                                                   has_aux=True))}
        self.local = jax.jit(jax.vmap(local_grads, in_axes=(None, 0, None))) if local > 1 else None
        self.start, self.policy = start, policy  # the scenario, for bench.step_jacobians
        self.theta = jnp.zeros(g1.NUM_MOTORS)

    def estimates(self, seed: int, kappa: float) -> dict:
        """{estimator: (per-env gradients (N, 29) or None, batch gradient (29,), bundled, touchdown step)}."""
        keys = jax.random.split(jax.random.PRNGKey(seed), self.N)
        out = {}
        for k, fn in self.per_env.items():
            g, (b, td) = jax.block_until_ready(fn(self.theta, keys, kappa))
            g = np.asarray(g)
            out[k] = (g, g.mean(0), float(np.mean(b)), float(np.mean(td)))
        for k, fn in self.batch.items():
            g, (b, td) = jax.block_until_ready(fn(self.theta, jax.random.PRNGKey(seed), kappa))
            out[k] = (None, np.asarray(g), float(b), float(td))
        if self.local is not None:
            out["local"] = np.asarray(jax.block_until_ready(self.local(self.theta, keys, kappa)))  # (N, M, 29)
        return out


def _boot(values: np.ndarray, stat, n: int = 2000, rng=np.random.default_rng(0)) -> list[float]:
    """90 % bootstrap interval of stat over the first axis."""
    idx = rng.integers(0, len(values), size=(n, len(values)))
    s = np.array([stat(values[i]) for i in idx])
    return [float(np.quantile(s, 0.05)), float(np.quantile(s, 0.95))]


def _boot_ratio(a: np.ndarray, b: np.ndarray, stat) -> list[float]:
    """90 % bootstrap interval of stat(a) / stat(b) with the first axis resampled jointly (paired samples: the
    same seeds)."""
    return _boot(np.stack([a, b], axis=1), lambda x: stat(x[:, 0]) / stat(x[:, 1]))


def batch_var(g: np.ndarray) -> float:
    return float(g.var(0, ddof=1).sum())


def local_summary(local: list[np.ndarray], seed_var: float, branches: int = 8) -> dict:
    """local: per seed, (N envs, M copies, 29) plain gradients of perturbed copies of each env's start.
    local_var: mean over seeds of the mean over envs of the summed sample variance over copies;
    bound_seed_var = 1 - (1 - 1/B) local_var / seed_var: the ratio of averaging B whole perturbed rollouts."""
    lv = np.array([g.var(1, ddof=1).sum(-1).mean() for g in local])
    share = float(lv.mean() / seed_var)
    return {"copies": int(local[0].shape[1]), "local_var": float(lv.mean()), "local_var_ci90": _boot(lv, np.mean),
            "local_share": share, "bound_seed_var": 1.0 - (1.0 - 1.0 / branches) * share}


def add_local(sc: Scenario, kappa: float, row: dict) -> dict:
    """The local measure for a row already measured: plain's per-env gradients recomputed (their seed_var must
    equal the row's: the bench is deterministic at a seed) and the M perturbed copies of each env."""
    plain, local = [], []
    for sd in range(row["seeds"]):
        keys = jax.random.split(jax.random.PRNGKey(1000 + sd), sc.N)
        g, _ = jax.block_until_ready(sc.per_env["plain"](sc.theta, keys, kappa))
        plain.append(np.asarray(g).var(0, ddof=1).sum())
        local.append(np.asarray(jax.block_until_ready(sc.local(sc.theta, keys, kappa))))
    seed_var = float(np.mean(plain))
    check_recomputed(row, kappa, seed_var)
    return {**row, "local": local_summary(local, seed_var)}


def check_recomputed(row: dict, kappa: float, seed_var: float) -> None:
    """plain's seed_var recomputed beside a stored row must be the row's (the bench is deterministic at a seed); 1 %:
    another compiled program (--chunk) rounds differently, and contact amplifies it along the horizon."""
    if not np.isclose(seed_var, row["plain"]["seed_var"], rtol=1e-2):
        raise RuntimeError(f"{row['mode']} kappa {kappa} H {row['horizon']}: plain seed_var {seed_var:.6g} recomputed, "
                           f"{row['plain']['seed_var']:.6g} stored: the row was measured with other code or settings")


def add_variant(sc: Scenario, kappa: float, row: dict, name: str) -> dict:
    """A variant of the seed's bundle (`name`: bcg_seed_pre, the pre-contact trigger; bcg_seed_held, the nominal
    held) beside a row already measured, on the same seeds. plain is recomputed (check_recomputed) for paired ratio
    intervals and the bias against the reference."""
    plain, var, bundled = [], [], []
    for sd in range(row["seeds"]):
        keys = jax.random.split(jax.random.PRNGKey(1000 + sd), sc.N)
        plain.append(np.asarray(jax.block_until_ready(sc.per_env["plain"](sc.theta, keys, kappa))[0]))
        g, (b, _) = jax.block_until_ready(sc.variants[name](sc.theta, keys, kappa))
        var.append(np.asarray(g))
        bundled.append(float(np.mean(b)))
    sv_p, sv = (np.array([g.var(0, ddof=1).sum() for g in x]) for x in (plain, var))
    check_recomputed(row, kappa, float(sv_p.mean()))
    G_p, G = (np.stack([g.mean(0) for g in x]) for x in (plain, var))
    r = {"seed_var": float(sv.mean()), "seed_var_ci90": _boot(sv, np.mean), "batch_var": batch_var(G),
         "batch_var_ci90": _boot(G, batch_var), "bundled": float(np.mean(bundled)),
         "ratio_seed_var": float(sv.mean() / sv_p.mean()), "ratio_seed_var_ci90": _boot_ratio(sv, sv_p, np.mean),
         "ratio_batch_var": batch_var(G) / batch_var(G_p), "ratio_batch_var_ci90": _boot_ratio(G, G_p, batch_var),
         **against_reference(mean_and_se(np.concatenate(var)), mean_and_se(np.concatenate(plain)))}
    if name == "bcg_seed_pre":
        r["trigger_height_m"] = sc.bcg[name].trigger_height
    return {**row, name: r}


def study(sc: Scenario, kappa: float, seeds: int) -> dict:
    per = {k: [] for k in ESTIMATORS}
    local = []
    t0 = time.perf_counter()
    for sd in range(seeds):
        est = sc.estimates(1000 + sd, kappa)
        if "local" in est:
            local.append(est.pop("local"))
        for k, v in est.items():
            per[k].append(v)
    row: dict = {"mode": sc.mode, "kappa": kappa, "horizon": sc.H, "envs": sc.N, "seeds": seeds,
                 "wall_s": time.perf_counter() - t0}
    means, batches, seed_vars = {}, {}, {}
    for k, vals in per.items():
        G = np.stack([v[1] for v in vals])  # (seeds, 29) batch gradients
        # the estimator's mean and its standard error from its independent samples: per-env gradients where
        # they exist (N x seeds), else the batch gradients (seeds)
        means[k] = mean_and_se(np.concatenate([v[0] for v in vals]) if vals[0][0] is not None else G)
        batches[k] = G
        r = {"batch_var": batch_var(G), "batch_var_ci90": _boot(G, batch_var),
             "bundled": float(np.mean([v[2] for v in vals])), "touchdown_step": float(np.mean([v[3] for v in vals])),
             "grad_norm_median": float(np.median(np.linalg.norm(G, axis=1)))}
        if vals[0][0] is not None:
            sv = np.array([v[0].var(0, ddof=1).sum() for v in vals])  # the seed's measure, per batch
            seed_vars[k] = sv
            r["seed_var"] = float(sv.mean())
            r["seed_var_ci90"] = _boot(sv, np.mean)
        row[k] = r
    if local:
        row["local"] = local_summary(local, row["plain"]["seed_var"])
    for k in ESTIMATORS[1:]:
        row[k]["ratio_batch_var"] = row[k]["batch_var"] / row["plain"]["batch_var"]
        row[k]["ratio_batch_var_ci90"] = _boot_ratio(batches[k], batches["plain"], batch_var)
        if "seed_var" in row[k]:
            row[k]["ratio_seed_var"] = row[k]["seed_var"] / row["plain"]["seed_var"]
            row[k]["ratio_seed_var_ci90"] = _boot_ratio(seed_vars[k], seed_vars["plain"], np.mean)
        row[k].update(against_reference(means[k], means["plain"]))
    ref, ref_se = means["plain"]
    row["plain"]["ref_rel_se"] = float(ref_se / (np.linalg.norm(ref) + 1e-30))
    return row


def mean_and_se(samples: np.ndarray) -> tuple[np.ndarray, float]:
    """(mean (29,), |standard error of the mean|) of independent gradient samples (n, 29): the SE's norm is
    sqrt(trace of the sample covariance / n)."""
    return samples.mean(0), float(np.sqrt(samples.var(0, ddof=1).sum() / len(samples)))


def against_reference(est: tuple[np.ndarray, float], ref: tuple[np.ndarray, float]) -> dict:
    """An estimator's mean gradient against the reference's (plain's, resolved over every sample): cosine, the
    relative difference |a - b| / |b| (cos_vs_plain, rel_diff_vs_plain), and noise_rel = sqrt(se_a^2 + se_b^2) /
    |b|, what the two means' sampling errors alone would give."""
    (a, se_a), (b, se_b) = est, ref
    nb = np.linalg.norm(b) + 1e-30
    return {"cos_vs_plain": float(a @ b / (np.linalg.norm(a) * nb)), "rel_diff_vs_plain": float(np.linalg.norm(a - b) / nb),
            "noise_rel": float(np.hypot(se_a, se_b) / nb)}


def _pre_cell(row: dict) -> str:
    pre = row.get("bcg_seed_pre")
    if not pre:
        return "-"
    return f"{ratio_cell(row['plain'], pre, 'seed_var')[:-1]}; {pre['bundled']:.2f}, {100 * pre['trigger_height_m']:g} cm)"


def _held_cell(row: dict) -> str:
    """The seed's bundle with the nominal held / plain: seed variance, batch variance (paired 90 % CIs); bias."""
    h = row.get("bcg_seed_held")
    if not h:
        return "-"
    return f"{ratio_cell(row['plain'], h, 'seed_var')}; {ratio_cell(row['plain'], h, 'batch_var')}; {bias_cell(h)}"


def _from(row: dict) -> str:
    return f" [{row['extras_from']}]" if "extras_from" in row else ""


def _local_cell(loc: dict | None) -> str:
    return "-" if not loc else f"{loc['local_share']:.3f} ({loc['bound_seed_var']:.2f})"


def ratio_cell(plain: dict, est: dict, measure: str) -> str:
    """est's `measure` ("seed_var" / "batch_var") over plain's, with the ratio's paired bootstrap 90 % interval over
    seeds where the row has it. Rows without: the seed variance with est's own interval over plain's value, the
    batch variance alone (a bootstrap of a variance over 6 seeds sits below its own estimate)."""
    ratio = f"{est[measure] / plain[measure]:.2f}"
    if f"ratio_{measure}_ci90" in est:
        lo, hi = est[f"ratio_{measure}_ci90"]
    elif measure == "seed_var":
        lo, hi = (x / plain[measure] for x in est["seed_var_ci90"])
    else:
        return ratio
    return f"{ratio} ({lo:.2f}-{hi:.2f})"


def contact_label(row: dict) -> str:
    mode = row["mode"]
    return {"mjx": "MJX", "penalty": "penalty"}.get(mode, f"impulse {mode}")


def kappa_label(row: dict) -> str:
    return "-" if row["mode"] in KAPPA_FREE else f"{row['kappa']:g}"


def bias_cell(est: dict) -> str:
    """relative difference to the reference (what sampling noise alone gives)."""
    if "noise_rel" not in est:
        return f"{est['rel_diff_vs_plain']:.3f} (-)"
    return f"{est['rel_diff_vs_plain']:.3f} ({est['noise_rel']:.3f})"


def shown_rows(results: dict) -> list[dict]:
    """One row per (contact, kappa, horizon): the one with the most samples (envs x seeds), in contact order. The
    local and pre-trigger measures, where only a smaller sample of the setting has them, come from that one
    (`extras_from` names its envs x seeds)."""
    best: dict = {}
    for r in results["rows"]:
        k = (r["mode"], r["kappa"], r["horizon"])
        if k not in best or r["envs"] * r["seeds"] > best[k]["envs"] * best[k]["seeds"]:
            best[k] = r
    out = []
    for k, r in best.items():
        for o in results["rows"]:
            extra = {m: o[m] for m in ("local",) + VARIANTS if m in o and m not in r}
            if (o["mode"], o["kappa"], o["horizon"]) == k and o is not r and extra:
                r = {**r, **extra, "extras_from": f"{o['envs']} x {o['seeds']}"}
        out.append(r)
    return sorted(out, key=lambda r: (r["horizon"], CONTACTS.index(r["mode"]), -r["kappa"]))


def render_gradients_touchdown_headline(results: dict) -> str:
    """The README's short form: per contact and horizon at kappa 300, what the seed's bundle does to the seed's own
    variance measure and to the batch gradient's variance."""
    lines = ["| contact (landing from flight, kappa 300) | steps | envs x seeds | the seed's bundle / plain: seed's variance "
             "measure (90 % CI) | batch gradient's variance (90 % CI) | env-steps bundled |", "|---|---|---|---|---|---|"]
    for r in shown_rows(results):
        if r["kappa"] != 300.0:
            continue
        p, s = r["plain"], r["bcg_seed"]
        lines.append(f"| {contact_label(r)} | {r['horizon']} | {r['envs']} x {r['seeds']} | {ratio_cell(p, s, 'seed_var')} "
                     f"| {ratio_cell(p, s, 'batch_var')} | {s['bundled']:.2f} |")
    return "\n".join(lines)


def render_gradients_touchdown_table(results: dict) -> str:
    """Markdown table of results/gradients_touchdown.json (per setting, its row with the most samples)."""
    lines = ["| contact | kappa | H | envs x seeds | touch-down step | plain seed var (reference's rel. SE) "
             "| BCG-seed / plain (seed var, 90 % CI) | BCG-seed / plain (batch var, 90 % CI) "
             "| BCG-ours / plain (batch var, 90 % CI) | bundled (seed / ours) | BCG-seed vs reference: rel. difference "
             "(noise alone) | local share of seed var (8 whole perturbed rollouts averaged) "
             "| BCG-seed, pre-contact trigger / plain (seed var, 90 % CI; bundled) "
             "| BCG-seed, nominal held / plain (seed var; batch var; rel. difference to the reference) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in shown_rows(results):
        p, s, o = r["plain"], r["bcg_seed"], r["bcg_ours"]
        se = f"{p['ref_rel_se']:.2f}" if "ref_rel_se" in p else "-"
        lines.append(
            f"| {contact_label(r)} | {kappa_label(r)} | {r['horizon']} | {r['envs']} x {r['seeds']} "
            f"| {p['touchdown_step']:.1f} | {p['seed_var']:.3g} ({se}) | {ratio_cell(p, s, 'seed_var')} "
            f"| {ratio_cell(p, s, 'batch_var')} | {ratio_cell(p, o, 'batch_var')} | {s['bundled']:.2f} / {o['bundled']:.2f} "
            f"| {bias_cell(s)} | {_local_cell(r.get('local'))}{_from(r)} | {_pre_cell(r)}{_from(r)} | {_held_cell(r)}{_from(r)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contacts", nargs="+", default=list(CONTACTS), choices=CONTACTS,
                    help="impulse modes (soft, mixed, hard), MJX's contact (mjx), the penalty spring (penalty)")
    ap.add_argument("--kappas", type=float, nargs="+", default=[50.0, 100.0, 300.0])
    ap.add_argument("--horizons", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--envs", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=12)
    ap.add_argument("--local", type=int, default=8, metavar="M",
                    help="perturbed copies per env for the local variance (0: skip)")
    ap.add_argument("--add-local", action="store_true",
                    help="only add the local measure to rows already in --out (plain recomputed and checked against them)")
    ap.add_argument("--add-pre-trigger", type=float, default=None, metavar="M",
                    help="only add the seed's bundle with a pre-contact trigger (a foot below M m) to rows already in --out")
    ap.add_argument("--add-held", action="store_true",
                    help="only add the seed's bundle with the nominal held (its gradient on the plain forward pass) to rows "
                         "already in --out")
    ap.add_argument("--chunk", type=int, default=None, metavar="C",
                    help="per-env gradients C envs at a time (memory: the impulse contact's 64 envs x 32 steps hold ~19 GB)")
    ap.add_argument("--out", default=None, help="write the JSON here (rows already there for other settings are kept)")
    a = ap.parse_args(argv)
    if a.envs < 2 or a.seeds < 2:
        ap.error("--envs and --seeds must be >= 2 (variances)")
    if a.chunk is not None and a.chunk < 1:
        ap.error("--chunk must be >= 1")
    if a.add_local and (a.local < 2 or not a.out):
        ap.error("--add-local needs --local >= 2 and --out with the rows to complete")
    if a.add_pre_trigger is not None and (not a.out or not a.add_pre_trigger > 0):
        ap.error("--add-pre-trigger needs a height > 0 (m) and --out with the rows to complete")
    if a.add_held and not a.out:
        ap.error("--add-held needs --out with the rows to complete")
    adding = a.add_local or a.add_held or a.add_pre_trigger is not None
    old = json.loads(Path(a.out).read_text())["rows"] if a.out and Path(a.out).is_file() else []
    key = lambda r: (r["mode"], r["kappa"], r["horizon"], r["envs"])  # noqa: E731
    res = {"scenario": "landing from flight: h ~ U(0.10, 0.20) m, touch-down after U(0.01, 0.6 H dt) s", "rows": old}
    for H in a.horizons:
        for mode in a.contacts:
            sc = Scenario(mode, H, a.envs, a.local, a.add_pre_trigger, a.add_held, a.chunk)
            for kappa in (a.kappas if mode not in KAPPA_FREE else a.kappas[-1:]):
                if adding:
                    have = [r for r in old if key(r) == (mode, kappa, H, a.envs)]
                    if not have:
                        print(f"no {mode} kappa {kappa:g} H {H} x {a.envs} row in {a.out}: skipped", flush=True)
                        continue
                    row = have[0]
                    for name in sc.variants:
                        row = add_variant(sc, kappa, row, name)
                    if a.add_local:
                        row = add_local(sc, kappa, row)
                else:
                    row = study(sc, kappa, a.seeds)
                print(json.dumps(row), flush=True)
                if a.out:  # after every row, merged into the file as it is now (a study at another horizon may run beside)
                    now = json.loads(Path(a.out).read_text())["rows"] if Path(a.out).is_file() else []
                    res["rows"] = [r for r in now if key(r) != key(row)] + [row]
                    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
                else:
                    res["rows"] = [r for r in res["rows"] if key(r) != key(row)] + [row]
    print(render_gradients_touchdown_table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
