"""Per-step Jacobians of the closed-loop transition around touch-down, per contact model.

Why BCG shows no effect here is a question about the chain rule: the gradient of a return through a
rollout is a product of per-step state-transition Jacobians J_t = d x_{t+1} / d x_t (x = qpos, qvel;
policy feedback included), and BCG replaces the J_t of stiff-contact steps by the mean over a bundle of
perturbed states. If stiff contact made some J_t huge (the seed's premise), plain gradients would explode
there and a bundle's mean would be much smaller. This measures it on bench.gradients' landing scenario
(the G1 dropped 0-10 mm onto the floor at 0.2-0.5 m/s, the same policy: fixed linear feedback, zero
bias, action noise std 0.1), for the seed's sigmoid contact (k = 50 / 100 / 300 1/m, 300 Hz substep)
and MJX's constraint contact (stiff: 10 ms time constant); and for the seed's impulse contact (soft, mixed,
hard at kappa 300) on bench.gradients_touchdown's landing from flight (10-20 cm, touch-downs spread over the
horizon), so that the touch-down step is a real flight -> contact switch:

  step_norm_*            spectral norm ||J_t||_2 per control step: median over the stance steps, the
                         touch-down step (the first with foot force), and the maximum over the horizon
  chain_log10_norm_h*    log10 ||J_{h-1} ... J_0||_2: how much the whole horizon can amplify a gradient
  bundled_norm_ratio_*   at the touch-down step: ||mean_b J_t(x_b)||_2 / ||J_t(x)||_2 over the BCG bundle
                         (train.bcg.perturb_branches: B = 10, sigma 1 cm / 2 cm/s at both feet)
  bundle_spread_*        mean_b ||J_t(x_b) - mean J||_2 / ||mean J||_2: how different the bundle's members are

Means over `envs` landings. x mixes units (m, rad, m/s, rad/s); the norms are of that raw state.

    python -m bench.step_jacobians [--horizon 32] [--envs 4] [--out results/step_jacobians.json]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from bench.gradients import Problem
from train.bcg import BCGConfig, perturb_branches

SETTINGS = (("sigmoid", "k50", 50.0), ("sigmoid", "k100", 100.0), ("sigmoid", "k300", 300.0), ("mjx", "stiff", None),
            ("impulse_soft", "k300", 300.0), ("impulse_mixed", "k300", 300.0), ("impulse_hard", "k300", 300.0))
CONTACTS = ("sigmoid", "mjx", "impulse_soft", "impulse_mixed", "impulse_hard")
CONTACT_N = 1.0  # N: a step "has contact" when any foot sphere carried more than this


def _norm(J) -> float:
    return float(np.linalg.norm(np.asarray(J, np.float64), 2))


class TouchdownProblem:
    """bench.gradients_touchdown's landing from flight (10-20 cm, touch-downs spread over the horizon) on the
    impulse contact, as the (env, policy, theta, start(seed, kappa), settings) this measurement needs."""

    def __init__(self, mode: str, horizon: int, envs: int):
        from bench.gradients_touchdown import Scenario

        sc = Scenario(mode, horizon, envs)
        self.env, self.policy, self.theta, self.settings = sc.env, sc.policy, sc.theta, {}
        self._start, self._envs = sc.start, envs

    def start(self, seed: int, kappa: float):
        return self._start(jax.random.PRNGKey(seed), self._envs, kappa)


def measure(contact: str, settings: list[tuple[str, float | None]], horizon: int, envs: int, seed: int = 0) -> dict:
    if contact.startswith("impulse_"):
        pb = TouchdownProblem(contact.split("_", 1)[1], horizon, envs)
    else:
        pb = Problem(envs, {}, horizon=horizon, contact=contact)
    env, theta = pb.env, pb.theta
    cfg = BCGConfig()
    # forward mode cannot pass the mixed impulse mode's custom VJP: reverse mode there (the same matrix)
    jac = jax.jacrev if contact.startswith("impulse_") else jax.jacfwd

    def transition(x, state, action_key):
        nq = state.data.qpos.shape[-1]
        s = state.replace(data=state.data.replace(qpos=x[:nq], qvel=x[nq:]))
        s = s.replace(obs=env.observe(s))
        nxt = env.step(s, pb.policy(theta, s.obs, action_key))
        return jnp.concatenate([nxt.data.qpos, nxt.data.qvel]), nxt

    def x_of(s):
        return jnp.concatenate([s.data.qpos, s.data.qvel], -1)

    # per env: the Jacobian and the next state (one compile per contact model: the knob is EnvParams)
    jac_step = jax.jit(jax.vmap(lambda x, s, k: (jac(lambda y: transition(y, s, k)[0])(x), transition(x, s, k)[1])))
    branches = jax.jit(lambda s, k: perturb_branches(env, s, k, jnp.ones(2, bool), cfg))
    jac_only = jax.jit(jax.vmap(lambda x, s, k: jac(lambda y: transition(y, s, k)[0])(x), in_axes=(0, 0, None)))
    out = {}
    for name, value in settings:
        t0 = time.perf_counter()
        state, key = pb.start(seed, value if value is not None else pb.settings[name])
        norms, forces, Js, states, akeys = [], [], [], [], []
        for t in range(horizon):
            key, k_act = jax.random.split(key)
            keys = jax.random.split(k_act, envs)
            J, nxt = jax.block_until_ready(jac_step(x_of(state), state, keys))
            Jn = np.asarray(J, np.float64)
            Js.append(Jn)
            norms.append([_norm(j) for j in Jn])
            forces.append(np.asarray(nxt.contact_force).max(-1))  # (envs,) largest sphere force in this step
            states.append(state)
            akeys.append(keys)
            state = nxt
        norms, forces = np.array(norms), np.array(forces)  # (T, envs)
        touching = forces > CONTACT_N
        td = touching.argmax(0)  # per env: the touch-down step, the first with foot force
        if not touching.any(0).all():
            raise RuntimeError(f"{contact}/{name}: an env never touched down in {horizon} steps")
        stance = touching.copy()
        stance[td, np.arange(envs)] = False  # the touch-down step is reported on its own
        ratios, spreads = [], []
        for e in range(envs):  # the BCG bundle at the touch-down state
            one = jax.tree.map(lambda a: a[e], states[td[e]])
            br = branches(one, jax.random.PRNGKey(1000 + e))
            Jb = np.asarray(jax.block_until_ready(jac_only(x_of(br), br, akeys[td[e]][e])), np.float64)
            mean = Jb.mean(0)
            ratios.append(_norm(mean) / norms[td[e], e])
            spreads.append(np.mean([_norm(j - mean) for j in Jb]) / _norm(mean))
        chain = {}
        for h in sorted({8, horizon}):
            vals = []
            for e in range(envs):
                P = np.eye(Js[0].shape[1])
                for t in range(min(h, horizon)):
                    P = Js[t][e] @ P
                vals.append(np.log10(_norm(P)))
            chain[h] = float(np.mean(vals))
        out[name] = {
            "touchdown_step_mean": float(td.mean()),
            "step_norm_touchdown": float(norms[td, np.arange(envs)].mean()),
            "step_norm_stance_median": float(np.median(norms[stance])) if stance.any() else None,
            "step_norm_max": float(norms.max()),
            "step_norm_flight_median": float(np.median(norms[~touching])) if (~touching).any() else None,
            "touchdown_force_n": float(forces[td, np.arange(envs)].mean()),
            "peak_force_n": float(forces.max()),
            "stance_fraction": float(touching.mean()),
            **{f"chain_log10_norm_h{h}": v for h, v in chain.items()},
            "bundled_norm_ratio_touchdown": float(np.mean(ratios)),
            "bundle_spread_touchdown": float(np.mean(spreads)),
            "wall_s": time.perf_counter() - t0,
        }
        print(f"{contact}/{name}: " + ", ".join(f"{k} {v:.3g}" for k, v in out[name].items() if isinstance(v, float)),
              flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--horizon", type=int, default=32)
    ap.add_argument("--envs", type=int, default=4)
    ap.add_argument("--contacts", nargs="+", default=list(CONTACTS), choices=CONTACTS,
                    help="impulse_*: the landing from flight of bench.gradients_touchdown (kappa 300)")
    ap.add_argument("--out", default="results/step_jacobians.json", help="settings already there for other contacts are kept")
    ns = ap.parse_args(argv)
    if ns.horizon < 1 or ns.envs < 1:
        ap.error("--horizon and --envs must be >= 1")
    t0 = time.perf_counter()
    old = json.loads(Path(ns.out).read_text()) if Path(ns.out).is_file() else {}
    if old and (old.get("horizon"), old.get("envs")) != (ns.horizon, ns.envs):
        old = {}  # rows of another size are not comparable: start afresh
    res = {"horizon": ns.horizon, "envs": ns.envs, "bcg": {"branches": BCGConfig().branches, "sigma_p": BCGConfig().sigma_p,
                                                           "sigma_v": BCGConfig().sigma_v},
           "settings": dict(old.get("settings", {}))}
    Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
    for contact in ns.contacts:  # written after each contact: a long run stopped early keeps what it measured
        sets = [(n, v) for c, n, v in SETTINGS if c == contact]
        res["settings"].update({f"{contact}_{k}": v for k, v in measure(contact, sets, ns.horizon, ns.envs).items()})
        res["wall_s"] = time.perf_counter() - t0  # this run's; each setting's own is in its row
        Path(ns.out).write_text(json.dumps(res, indent=2) + "\n")
        print(f"wrote {ns.out}", flush=True)
    return 0


def _setting_label(name: str) -> str:
    contact, k = name.rsplit("_", 1)
    if contact.startswith("impulse_"):
        return f"impulse {contact.split('_', 1)[1]}, kappa {k[1:]} (landing from flight)"
    return f"sigmoid k = {k[1:]}" if contact == "sigmoid" else f"MJX constraint ({k}, solref 0.01 s)"


def render_step_jacobians_table(results: dict) -> str:
    """The markdown table of results/step_jacobians.json (make step-jacobians)."""
    head = ["contact", "sphere force at touch-down", "‖J_t‖ at touch-down", "‖J_t‖ stance median / max",
            "log10 ‖J_7…J_0‖", "log10 ‖J_31…J_0‖", "‖mean_b J(x_b)‖ / ‖J(x)‖ at touch-down", "bundle spread"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, s in results["settings"].items():
        lines.append("| " + " | ".join([
            _setting_label(name), f"{s['touchdown_force_n']:.0f} N", f"{s['step_norm_touchdown']:.0f}",
            f"{s['step_norm_stance_median']:.0f} / {s['step_norm_max']:.0f}", f"{s['chain_log10_norm_h8']:.2f}",
            f"{s['chain_log10_norm_h32']:.2f}", f"{s['bundled_norm_ratio_touchdown']:.2f}",
            f"{s['bundle_spread_touchdown']:.2f}"]) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
