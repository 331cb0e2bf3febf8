"""A training run's policy in its own training physics: train.env.G1Env (MJX, the run's config.yaml) with domain
randomisation and observation noise off, the mean action of the checkpoint, started in the reference's state at
chosen frames of the clip for a window of seconds. Beside the C MuJoCo eval's survival map (`experiments.tracking`,
`eval.trace`) it tells whether a failure is the training physics' too (a policy that did not learn the part) or
only the eval's (a sim-to-sim gap).

    python -m experiments.train_window runs/<clip>/<stamp> --frames 700,750,800 [--seconds 2] [--checkpoint latest.npz]

Prints, per start frame: where the episode ended (fell / its window's end / the seconds run out), the largest
distance of the robot's centre of mass from its stance foot in the reference's one-leg stances (`com_support_err`)
and the largest anchor position error.
"""
from __future__ import annotations

import argparse
import dataclasses

import numpy as np


def start_states(env, frames, reset=None):
    """Batched EnvState: the reference's state at each of `frames` (G1Env.reset at a given frame); `reset` a
    compiled jax.jit(jax.vmap(lambda k, f: env.reset(k, frame=f))) to reuse (default: compiled here)."""
    import jax
    import jax.numpy as jnp

    fr = jnp.asarray(np.asarray(frames), jnp.int32)
    reset = reset or jax.jit(jax.vmap(lambda k, f: env.reset(k, frame=f)))
    return reset(jax.random.split(jax.random.PRNGKey(0), fr.shape[0]), fr)


def replay(env, policy, state, steps: int, batched_step=None) -> list[dict]:
    """Run `policy(state) -> actions` (batched EnvState -> (N, 29)) in `env` from the batched `state` (e.g.
    `start_states`) for `steps` control steps (no auto-reset); `batched_step` a compiled jax.jit(jax.vmap(env.step))
    to reuse (default: compiled here). Per env: fell_after_s (None: did not fall), ended ("fell", "window" or
    "steps"), the last frame reached, and the largest com_support_err (m) and anchor_pos_err (m) up to the end,
    the falling steps included."""
    import jax

    env_step = batched_step or jax.jit(jax.vmap(env.step))
    act = jax.jit(policy)
    n = state.step.shape[0]
    alive = np.ones(n, bool)
    out = [{"frame": int(f), "fell_after_s": None, "ended": "steps", "reached": int(f), "com_support_err_max_m": 0.0,
            "anchor_pos_err_max_m": 0.0} for f in np.asarray(state.step)]
    s = state
    for k in range(steps):
        s = env_step(s, act(s))
        done, fell = np.asarray(s.done), np.asarray(s.metrics["fell"]) > 0
        com, anchor = np.asarray(s.metrics["com_support_err"]), np.asarray(s.metrics["anchor_pos_err"])
        reached = np.asarray(s.step)
        for i in np.flatnonzero(alive):
            o = out[i]
            o["reached"] = int(reached[i])
            o["com_support_err_max_m"] = max(o["com_support_err_max_m"], float(com[i]))
            o["anchor_pos_err_max_m"] = max(o["anchor_pos_err_max_m"], float(anchor[i]))
            if done[i]:
                o["ended"] = "fell" if fell[i] else "window"
                if fell[i]:
                    o["fell_after_s"] = round((k + 1) * env.cfg.control_dt, 4)
                alive[i] = False
        if not alive.any():
            break
    return out


def run_policy(run_dir, checkpoint: str = "latest.npz"):
    """(env, policy) of a run folder: its env without randomisation or noise, its checkpoint's mean action."""
    import jax
    import jax.numpy as jnp

    from motions import load_motion
    from train import domain_rand as DR
    from train.env import G1Env
    from train.export import load_run_params
    from train.networks import actor_mean

    rp = load_run_params(run_dir, checkpoint)
    ecfg = dataclasses.replace(rp.config.env, domain_rand=DR.DomainRandConfig.off(), obs_noise=0.0)
    env = G1Env(ecfg, load_motion(rp.config.motion))
    params = jax.tree.map(jnp.asarray, rp.checkpoint.net_params)
    norm = {k: jnp.asarray(v) for k, v in rp.checkpoint.obs_norm.items()}
    act = jax.vmap(lambda o: actor_mean(params, o, rp.cfg, norm))
    return env, lambda st: act(st.obs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.train_window", description=__doc__.splitlines()[0])
    ap.add_argument("run", help="a training run folder, runs/<clip>/<stamp>")
    ap.add_argument("--frames", required=True, help="start frames of the clip, comma-separated (50 Hz frames)")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--checkpoint", default="latest.npz")
    args = ap.parse_args(argv)
    try:
        frames = [int(f) for f in args.frames.split(",")]
    except ValueError:
        ap.error(f"--frames {args.frames!r}: give whole frame numbers, e.g. 700,750")
    env, policy = run_policy(args.run, args.checkpoint)
    if not env.tracking:
        ap.error(f"{args.run} is not a tracking run (env.task = {env.cfg.task}): its episodes do not start at frames")
    bad = [f for f in frames if not 0 <= f < env.episode_length]
    if bad:
        ap.error(f"--frames {bad}: the clip's frames are 0..{env.episode_length - 1}")
    rows = replay(env, policy, start_states(env, frames), int(round(args.seconds / env.cfg.control_dt)))
    print("frame  ended   fell after s  reached  COM off stance foot max cm  anchor err max cm")
    for r in rows:
        fell = "-" if r["fell_after_s"] is None else f"{r['fell_after_s']:.2f}"
        print(f"{r['frame']:5d}  {r['ended']:6s}  {fell:>12s}  {r['reached']:7d}  {100 * r['com_support_err_max_m']:26.1f}"
              f"  {100 * r['anchor_pos_err_max_m']:17.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
