"""How far a bundle moves the rollout it differentiates: the seed's bundle against plain on the same starts and
the same action noise (bench.gradients_touchdown's landing from flight), forward only.

After every bundled control step the nominal state becomes the mean of B perturbed branches, so the bundled
rollout leaves the plain one even where the dynamics are smooth. Per step t this measures, over N envs x seeds,
the mean norm of next_obs(bundle) - next_obs(plain) (the observation layout's units: rad, rad/s, m, ...), and
the spread of the return's difference. A drift that grows along the horizon is a random offset the bundle
injects and the rest of the horizon carries.

    python -m bench.bundle_drift [--contacts soft mjx] [--horizon 32] [--envs 32] [--seeds 4] [--out results/bundle_drift.json]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import numpy as np

from bench.gradients_touchdown import CONTACTS, Scenario, contact_label, kappa_label
from train.rollout import rollout


def drift(sc: Scenario, kappa: float, seeds: int) -> dict:
    def one(key, cfg):
        s, k = sc.start(key, 1, kappa)
        _, traj = rollout(sc.env, sc.policy, sc.theta, s, k, sc.H, cfg)
        return traj["next_obs"][:, 0], traj["reward"][:, 0], traj["bundled"][:, 0]

    f = jax.jit(jax.vmap(lambda key: (one(key, None), one(key, sc.bcg["bcg_seed"]))))
    dev, dret, bundled = [], [], []
    for sd in range(seeds):
        (o0, r0, _), (o1, r1, b1) = jax.block_until_ready(f(jax.random.split(jax.random.PRNGKey(1000 + sd), sc.N)))
        dev.append(np.linalg.norm(np.asarray(o1) - np.asarray(o0), axis=-1))  # (N, H)
        dret.append(np.asarray(r1).sum(-1) - np.asarray(r0).sum(-1))
        bundled.append(np.asarray(b1).mean())
    dev, dret = np.concatenate(dev), np.concatenate(dret)
    steps = sorted({1, 2, 4, 8, 16, sc.H} & set(range(1, sc.H + 1)))
    return {"mode": sc.mode, "kappa": kappa, "horizon": sc.H, "envs": sc.N, "seeds": seeds,
            "obs_deviation_mean": {str(t): float(dev[:, t - 1].mean()) for t in steps},
            "return_difference_std": float(dret.std(ddof=1)), "bundled": float(np.mean(bundled))}


def render_bundle_drift_table(results: dict) -> str:
    """Markdown table of results/bundle_drift.json."""
    steps = list(results["rows"][0]["obs_deviation_mean"]) if results["rows"] else []
    lines = ["| contact | kappa | H | envs x seeds | env-steps bundled | " + " | ".join(f"obs deviation, step {t}" for t in steps)
             + " | std of the return's difference |", "|---" * (6 + len(steps)) + "|"]
    for r in results["rows"]:
        dev = " | ".join(f"{r['obs_deviation_mean'][t]:.3g}" for t in steps)
        lines.append(f"| {contact_label(r)} | {kappa_label(r)} | {r['horizon']} | {r['envs']} x {r['seeds']} "
                     f"| {r['bundled']:.2f} | {dev} | {r['return_difference_std']:.3g} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contacts", nargs="+", default=["soft", "mjx"], choices=CONTACTS)
    ap.add_argument("--kappa", type=float, default=300.0)
    ap.add_argument("--horizon", type=int, default=32)
    ap.add_argument("--envs", type=int, default=32)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    rows = []
    for c in a.contacts:
        t0 = time.perf_counter()
        row = {**drift(Scenario(c, a.horizon, a.envs), a.kappa, a.seeds), "wall_s": time.perf_counter() - t0}
        print(json.dumps(row), flush=True)
        rows.append(row)
        if a.out:
            Path(a.out).write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
