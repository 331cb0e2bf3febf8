"""Cost of one control step per foot-contact model, side by side in one run: the impulse contact
(train/impulse.py, soft and mixed) against MJX's own constraint contact, forward and with gradients.

Each model: a jitted, vmapped env step over N envs (cpu preset: 32) at the training substep (4 per
20 ms), timed after its compile as the median of `repeats` calls; the gradient is jax.grad of the
summed reward of one control step w.r.t. the actions. Ratios are impulse / mjx.

    python -m bench.contact_cost [--envs 32] [--repeats 10] [--out results/contact_cost.json]
"""
from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from motions import load_motion
from train import domain_rand as DR
from train.env import EnvConfig, G1Env

CONTACTS = {"mjx": {}, "impulse_soft": dict(contact="impulse", impulse_mode="soft"),
            "impulse_mixed": dict(contact="impulse", impulse_mode="mixed")}


def _median_time(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def run(num_envs: int = 32, repeats: int = 10) -> dict:
    motion = load_motion("jump")
    out: dict = {"contact_cost_envs": num_envs}
    for name, kw in CONTACTS.items():
        env = G1Env(EnvConfig(domain_rand=DR.DomainRandConfig.off(), **kw), motion)
        s = env.reset_batch(jax.random.PRNGKey(0), num_envs)
        a = jnp.zeros((num_envs, env.action_size))
        step = jax.jit(jax.vmap(env.step))
        grad = jax.jit(jax.grad(lambda a, s=s, env=env: jax.vmap(env.step)(s, a).reward.sum()))
        out[f"contact_step_ms_{name}"] = 1e3 * _median_time(step, s, a, repeats=repeats)
        out[f"contact_grad_ms_{name}"] = 1e3 * _median_time(grad, a, repeats=repeats)
    for name in CONTACTS:
        if name != "mjx":
            out[f"contact_step_ratio_{name}"] = out[f"contact_step_ms_{name}"] / out["contact_step_ms_mjx"]
            out[f"contact_grad_ratio_{name}"] = out[f"contact_grad_ms_{name}"] / out["contact_grad_ms_mjx"]
    return out


def render_contact_cost_table(results: dict) -> str:
    """Markdown table of results/contact_cost.json."""
    n = results["contact_cost_envs"]
    lines = [f"| contact | step of {n} envs | vs mjx | gradient of one step | vs mjx |", "|---|---|---|---|---|"]
    for name in CONTACTS:
        ratio = lambda k: "-" if name == "mjx" else f"{results[f'contact_{k}_ratio_{name}']:.2f}x"  # noqa: E731
        lines.append(f"| {name} | {results[f'contact_step_ms_{name}']:.1f} ms | {ratio('step')} "
                     f"| {results[f'contact_grad_ms_{name}']:.1f} ms | {ratio('grad')} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", default=None, help="also write the JSON here (results/contact_cost.json)")
    a = ap.parse_args(argv)
    text = json.dumps(run(a.envs, a.repeats), indent=1)
    print(text)
    if a.out:
        from pathlib import Path

        Path(a.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
