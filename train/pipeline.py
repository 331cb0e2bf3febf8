"""One training run end to end: run folder, the trainer function, checkpoints, export.

    run_dir = run(preset("cpu", motion="jump"), export_dir=None)

Writes runs/<motion>/<stamp>/ (config.yaml = the TrainConfig, metrics.csv, curves.png,
checkpoints/latest.npz; the tracking task also sampler.csv and sampler.png: the start sampler's failure counts per
clip bin at every checkpoint), calls train.trainer.train with a progress bar, a metrics logger and
a checkpoint saver as its callbacks, then exports policies/g1/<motion>/ (or `export_dir`)
from the returned params with the same TrainConfig's actor. `resume=<run dir>` continues that
run from its latest checkpoint with the config given (the run's config.yaml is kept); `init_from=<run dir or
checkpoint>` starts a new run from another run's networks and observation statistics (a warm start: e.g. a clip
changed at its end, trained on from the policy of the clip before), which the artifact's provenance names.
`select_every=N` exports and evaluates the policy every N iterations and exports the best of them and the
final one instead of the final one (train/select.py).
"""
from __future__ import annotations

import time
from pathlib import Path

import jax
import numpy as np

from train import run_io
from train.checkpoint import load_checkpoint, save_checkpoint
from train.config import TrainConfig, save_config
from train.env import G1Env
from train.export import export_policy, repo_relative, training_provenance
from train.select import Selector
from train.trainer import make_trainer, resumable, train


def run(cfg: TrainConfig, *, run_root: Path | None = None, resume: str | Path | None = None,
        init_from: str | Path | None = None,
        export_dir: str | Path | None = None, checkpoint_every: int = 25, progress: bool = True, tag: str = "",
        time_budget_s: float | None = None, select_every: int = 0, select_episodes: int = 20,
        command: str | None = None) -> Path:
    from tqdm import tqdm

    from motions import load_motion

    if select_every and select_every % checkpoint_every:
        raise ValueError(f"select_every ({select_every}) must be a multiple of the checkpoint interval ({checkpoint_every})")
    if resume and init_from:
        raise ValueError("resume continues a run, init_from starts a new one from another run's networks: give one")
    warm = None
    if init_from:
        warm = Path(init_from)
        warm = warm / "checkpoints" / "latest.npz" if warm.is_dir() else warm
        warm_step = load_checkpoint(warm).step  # CheckpointError before anything is built when it is unreadable
    motion = load_motion(cfg.motion)
    env = G1Env(cfg.env, motion)
    trainer = make_trainer(cfg, env)
    run_dir = Path(resume) if resume else run_io.new_run_dir(motion.name, run_root or run_io.RUNS_ROOT, tag or cfg.algo)
    if not resume:
        save_config(run_dir, cfg)
    log = run_io.MetricsLog(run_dir / "metrics.csv")
    ck_latest = run_dir / "checkpoints" / "latest.npz"
    meta = {"motion": motion.name, "actor": cfg.actor.to_dict(), "obs_terms": list(cfg.obs_terms), "algo": cfg.algo,
            "seed": cfg.seed, "devices": [str(d) for d in jax.devices()]}
    s = trainer.cfg
    start = load_checkpoint(ck_latest).step if resume else 0
    if resume:
        print(f"resumed {run_dir} at iteration {start}")
    if warm is not None:
        print(f"starting from the networks of {warm} (iteration {warm_step})")
    warm_prov = {} if warm is None else {"init_from": repo_relative(warm), "init_from_iteration": warm_step}
    print(f"training {motion.name} with {'SHAC+BCG' if cfg.bcg.enabled else 'plain SHAC'} ({cfg.preset} preset): "
          f"{s.num_envs} envs x {s.horizon} steps x {s.iterations} iterations on {jax.devices()}")
    print(f"run folder: {run_dir}  (first iteration compiles: about 1-5 min on CPU)")
    bar = tqdm(total=s.iterations, initial=start, disable=not progress, dynamic_ncols=True)

    def on_progress(it: int, m: dict) -> None:
        log.append(m)
        bar.update(1)
        bar.set_postfix(reward=f"{m['reward']:.3f}", ep_len=f"{m['episode_len']:.0f}", falls=int(m["falls"]),
                        bundled=f"{m.get('bundled_frac', 0):.2f}")

    selector = Selector(run_dir, motion.name, episodes=select_episodes) if select_every else None
    wall_at: dict[int, float] = {}

    def export_at(it: int, **extra):
        return lambda actor, obs_norm, out: export_policy(
            actor, cfg.actor, obs_norm, motion,
            training_provenance(cfg, it, run_dir, wall_at.get(it), **({"command": command} if command else {}),
                                **warm_prov, **extra),
            out_dir=out, obs_terms=cfg.obs_terms, anchor_body=cfg.env.tracking.anchor_body)

    def on_checkpoint(ts, it: int, m: dict) -> None:
        save_checkpoint(ck_latest, ts.actor, ts.obs_norm, it, m, extra=resumable(ts), meta=meta)
        run_io.plot_curves(run_dir / "metrics.csv", run_dir / "curves.png")
        if env.tracking:  # every env carries the same counts
            run_io.append_sampler(run_dir / "sampler.csv", it, np.asarray(ts.env_state.start_counts)[0],
                                  cfg.env.tracking.bin_s)
            run_io.plot_sampler(run_dir / "sampler.csv", run_dir / "sampler.png")
        wall_at[it] = m["wall_s"]
        if selector is not None:
            selector.poll()
            if it % select_every == 0:
                selector.candidate(it, ts.actor, ts.obs_norm, export_at(it))

    t0 = time.time()
    try:
        params, metrics = train(cfg, env, progress_fn=on_progress, checkpoint_fn=on_checkpoint,
                                checkpoint_every=checkpoint_every, restore_from=ck_latest if resume else None, init_from=warm,
                                time_budget_s=time_budget_s, trainer=trainer)
    finally:
        bar.close()
    if metrics["stopped"]:
        print(f"stopped after {metrics['iterations']} iterations: {metrics['stopped']}; saving and exporting what was trained")
    run_io.plot_curves(run_dir / "metrics.csv", run_dir / "curves.png")
    done = metrics["iterations"]
    wall_at[done] = time.time() - t0
    if selector is None:
        res = export_at(done)(params.actor, params.obs_norm, export_dir)
    else:
        pick, (actor, obs_norm) = selector.finish(done, params.actor, params.obs_norm, export_at(done))
        print(f"selected iteration {pick['iteration']} of {sorted(r['iteration'] for r in selector.rows)} "
              f"(eval seed {selector.seed}: {pick.get('falls')}/{pick.get('episodes')} falls); {selector.root / 'select.json'}")
        res = export_at(pick["iteration"], selected=f"{repo_relative(selector.root / 'select.json')} (eval seed {selector.seed})")(
            actor, obs_norm, export_dir)
    print(f"done in {time.time() - t0:.0f} s; metrics: {run_dir / 'metrics.csv'}; curves: {run_dir / 'curves.png'}")
    print(f"exported {res.path} (parity {res.parity_max_abs:.1e}, {res.method})")
    return run_dir
