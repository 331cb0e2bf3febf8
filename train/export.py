"""Export a trained actor to a policy artifact (policies/g1/<motion>/), through jax2onnx only.

The deterministic actor (train/networks.py's `actor_mean`, normalisation inside the graph) is
traced by jax2onnx: input `obs` float32 [batch, n_obs], output `actions` float32 [batch, 29].
There is no second, hand-written copy of the network: a layer change in networks.py is the
whole change. JAX vs onnxruntime parity (max abs diff < PARITY_TOL) is checked on random,
out-of-range (the clip) and realistic observations before anything is written; the artifact is
written through policies.artifact.write_artifact with the spec of `artifact_spec`.

Run folder (written by `make train`; read by `python -m train.export --run DIR`):

    runs/<motion>/<stamp>/
      config.yaml              # the run's TrainConfig (train/config.py, older layouts too)
      checkpoints/latest.npz   # train/checkpoint.py's format; other *.npz beside it (e.g. iter_000100.npz)

Export reloads exactly the run's TrainConfig: the actor config (action scale, observation
terms, reference slice) is the one the trainer used, derived in one place.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from train import calibrated
from train.checkpoint import Checkpoint, CheckpointError, load_checkpoint

PARITY_TOL = 1e-4
OPSET = 17
CONVERTER = "jax2onnx"


class ExportError(RuntimeError):
    """Export failed; the message names the cause and the fix."""


# ============================================================================ run folders

@dataclasses.dataclass
class RunParams:
    run_dir: Path
    checkpoint: Checkpoint
    config: Any  # train.config.TrainConfig

    @property
    def cfg(self):  # the actor network's config
        return self.config.actor


def load_run_params(run_dir: str | os.PathLike, checkpoint: str = "latest.npz") -> RunParams:
    """The run's TrainConfig (config.yaml) and checkpoint (layout in the module docstring)."""
    from train.config import load_config

    run = Path(run_dir)
    if not run.is_dir():
        raise ExportError(f"run folder {run} does not exist (expected runs/<motion>/<stamp>)")
    cfg_path = run / "config.yaml"
    if not cfg_path.is_file():
        raise ExportError(f"{cfg_path} is missing: is {run} a training run folder (runs/<motion>/<stamp>)?")
    try:
        config = load_config(run)
    except ValueError as e:
        raise ExportError(f"{cfg_path}: {e}") from e
    ck_path = run / "checkpoints" / checkpoint
    if not ck_path.is_file():
        have = sorted(p.name for p in (run / "checkpoints").glob("*.npz")) if (run / "checkpoints").is_dir() else []
        raise ExportError(f"{ck_path} not found; checkpoints in the run: {have or 'none'}")
    return RunParams(run, load_checkpoint(ck_path), config)


# ============================================================================ ONNX

def _jax_fn(params, cfg, obs_norm):
    import jax
    import jax.numpy as jnp

    from train.networks import actor_mean, norm_arrays

    mean, var = (jnp.asarray(np.asarray(a), jnp.float32) for a in norm_arrays(obs_norm))
    p = jax.tree.map(lambda a: jnp.asarray(np.asarray(a), jnp.float32), params)

    def fn(obs):
        return actor_mean(p, obs, cfg, (mean, var))

    return fn


def to_onnx(params, cfg, obs_norm, n_obs: int):
    """The actor as an ONNX model, traced by jax2onnx."""
    import jax
    import jax.numpy as jnp
    from jax2onnx import to_onnx as j2o

    return j2o(_jax_fn(params, cfg, obs_norm), [jax.ShapeDtypeStruct(("batch", n_obs), jnp.float32)],
               input_names=["obs"], output_names=["actions"], opset=OPSET, model_name="g1_policy")


def realistic_observations(motion, terms: Sequence[str], rng: np.random.Generator, n: int = 64) -> np.ndarray:
    """Observations a policy sees while tracking `motion`, built with the one observation builder
    (the reference window, state near the reference, small noise)."""
    from policies.observation import ObsInputs, build_observation, reference_window, term_specs
    from policies.tracking import rot6d
    from robots.body_frames import quat_to_mat

    specs = term_specs(terms)
    T = motion.ref_q.shape[0]
    steps = rng.integers(0, T, n)
    rq, rh = zip(*(reference_window(motion.ref_q, motion.ref_height, int(k)) for k in steps))
    quat = np.concatenate([np.ones((n, 1)), rng.normal(0, 0.03, (n, 3))], 1)
    quat /= np.linalg.norm(quat, axis=1, keepdims=True)
    dq = motion.ref_dq[steps] if getattr(motion, "ref_dq", None) is not None else np.zeros((n, 29))
    vel = motion.ref_base_lin_vel[steps] if getattr(motion, "ref_base_lin_vel", None) is not None else np.zeros((n, 3))
    inp = ObsInputs(
        gyro=rng.normal(0, 0.3, (n, 3)), quat=quat, q=motion.ref_q[steps] + rng.normal(0, 0.03, (n, 29)),
        dq=dq + rng.normal(0, 0.3, (n, 29)), last_action=rng.normal(0, 0.5, (n, 29)),
        base_lin_vel=vel + rng.normal(0, 0.05, (n, 3)), base_height=motion.ref_height[steps] + rng.normal(0, 0.01, n),
        phase=steps / max(T - 1, 1), ref_q=np.stack(rq), ref_height=np.stack(rh),
        # the tracking term: the reference anchor a small turn away (the same small rotations as the pelvis's)
        anchor_ori_b=np.stack([rot6d(quat_to_mat(x)) for x in quat]))
    return build_observation(specs, inp).astype(np.float32)


def parity(model, params, cfg, obs_norm, obs: np.ndarray) -> float:
    """max |JAX - onnxruntime| on a batch of observations."""
    import jax
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    y_onnx = sess.run(["actions"], {"obs": np.asarray(obs, np.float32)})[0]
    y_jax = np.asarray(jax.jit(_jax_fn(params, cfg, obs_norm))(np.asarray(obs, np.float32)))
    if y_onnx.shape != y_jax.shape:
        raise ExportError(f"ONNX output shape {y_onnx.shape} != JAX {y_jax.shape}")
    return float(np.max(np.abs(y_onnx - y_jax)))


def to_onnx_checked(params, cfg, obs_norm, n_obs: int, check_obs: np.ndarray, tol: float = PARITY_TOL):
    """-> (model, max abs parity error). Raises ExportError if conversion or parity fails."""
    try:
        model = to_onnx(params, cfg, obs_norm, n_obs)
    except Exception as e:
        raise ExportError(f"jax2onnx could not convert the actor: {type(e).__name__}: {e} "
                          "(a primitive without a jax2onnx plugin? check the pinned jax2onnx version)") from e
    err = parity(model, params, cfg, obs_norm, check_obs)
    if not np.isfinite(err) or err >= tol:
        raise ExportError(f"ONNX ({CONVERTER}) differs from JAX by {err:.3g} (tolerance {tol}); not writing the artifact")
    return model, err


@dataclasses.dataclass
class ExportResult:
    path: Path
    method: str
    parity_max_abs: float
    n_obs: int


def artifact_spec(cfg, obs_terms: Sequence[str], motion, provenance: dict, anchor_body: str = "torso_link"):
    """The artifact's PolicySpec: the action scale is the actor config's (TrainConfig-derived,
    equal to the env's), the observation terms the run's; a layout with the anchor term gets the tracking
    spec of its anchor body (the reference's states go to reference.npz)."""
    from policies import artifact as A
    from policies.observation import term_specs
    from policies.tracking import TrackingSpec

    tracking = TrackingSpec(anchor_body=anchor_body, source="reference") if "motion_anchor_ori_b" in obs_terms \
        else None
    return A.PolicySpec(**A.robot_spec_fields(), action_scale=float(cfg.action_scale),
                        observation=term_specs(tuple(obs_terms)),
                        motion=A.MotionSpec(motion.name, float(motion.duration)), provenance=provenance,
                        tracking=tracking)


def reference_base_states(motion) -> tuple[np.ndarray, np.ndarray]:
    """(T, 3), (T, 4): the reference's pelvis position and orientation as the trainer places them
    (train.env: x, y from the clip relative to its first frame, height ref_height, upright without a clip
    orientation)."""
    T = motion.ref_q.shape[0]
    pos = np.zeros((T, 3))
    if getattr(motion, "ref_base_pos", None) is not None:
        xy = np.asarray(motion.ref_base_pos, float)[:, 0:2]
        pos[:, 0:2] = xy - xy[0]
    pos[:, 2] = motion.ref_height
    quat = getattr(motion, "ref_base_quat", None)
    quat = np.tile([1.0, 0.0, 0.0, 0.0], (T, 1)) if quat is None else np.asarray(quat, float)
    return pos, quat / np.linalg.norm(quat, axis=1, keepdims=True)


def export_policy(params, cfg, obs_norm, motion, provenance_info: dict, out_dir: str | os.PathLike | None = None,
                  obs_terms: Sequence[str] | None = None, seed: int = 0,
                  anchor_body: str = "torso_link") -> ExportResult:
    """Actor -> policies/g1/<motion>/ (policy.onnx + policy.yaml + reference.npz).

    params: actor net params (or the trainer's {"net", "log_std"}); cfg: ActorConfig (a
    TrainConfig's `actor`); obs_norm: ObsNorm / {"mean","var"}; motion: motions.Motion;
    provenance_info: {"algorithm", "seed", "iterations", ...extra} passed to
    policies.artifact.provenance (a dict that already has "git_commit" and "date" is used as is).
    Parity JAX vs onnxruntime is checked before writing.
    """
    from policies import artifact as A
    from policies.observation import MOTION_OBS_TERMS, obs_size, term_specs
    from train.networks import ActorConfig, norm_arrays

    if isinstance(params, dict) and "net" in params:
        params = params["net"]
    specs = term_specs(tuple(obs_terms or MOTION_OBS_TERMS))
    n_obs = obs_size(specs)
    mean, var = (np.asarray(a) for a in norm_arrays(obs_norm))
    if mean.shape != (n_obs,) or var.shape != (n_obs,):
        raise ExportError(f"obs_norm has shapes {mean.shape}/{var.shape}, the observation has {n_obs} entries")
    w0 = np.asarray(params["layers"][0]["w"] if params["layers"] else params["out"]["w"])
    if w0.shape[0] != n_obs:
        raise ExportError(f"the actor's input size is {w0.shape[0]}, the observation terms give {n_obs}")
    if cfg.residual_on_reference:
        expect = ActorConfig.for_terms(specs, residual_on_reference=True)
        if cfg.ref_index != expect.ref_index or cfg.ref_scale != expect.ref_scale:
            raise ExportError(f"actor cfg reads the reference at index {cfg.ref_index}, the observation has it at "
                              f"{expect.ref_index}: the config does not belong to these observation terms")
    rng = np.random.default_rng(seed)
    check = np.concatenate([rng.normal(0, 1, (32, n_obs)).astype(np.float32) * np.sqrt(var + 1e-8).astype(np.float32)
                            + mean.astype(np.float32),
                            rng.normal(0, 3, (16, n_obs)).astype(np.float32),  # well outside: exercises the clip
                            realistic_observations(motion, [s.name for s in specs], rng)])
    model, err = to_onnx_checked(params, cfg, obs_norm, n_obs, check)
    info = dict(provenance_info)
    prov = info if {"git_commit", "date"} <= set(info) else A.provenance(
        info.pop("algorithm", "unknown"), info.pop("seed", 0), info.pop("iterations", 0), **info)
    prov = {**prov, "onnx_converter": CONVERTER, "export_parity_max_abs": float(f"{err:.3g}")}
    spec = artifact_spec(cfg, [s.name for s in specs], motion, prov, anchor_body)
    out = Path(out_dir) if out_dir else A.artifact_dir(motion.name)
    base_pos, base_quat = reference_base_states(motion)
    A.write_artifact(out, model, spec, motion.ref_q, motion.ref_height, base_pos, base_quat)
    return ExportResult(out, CONVERTER, err, n_obs)


def contact_provenance(cfg) -> dict:
    """The training contact model and its knob, for the artifact's provenance."""
    env = cfg.env
    if env.contact == "sigmoid":
        return {"contact": "sigmoid", "kappa": float(env.kappa), "contact_law": env.contact_law,
                "substeps": int(env.substeps)}
    if env.contact == "impulse":
        return {"contact": "impulse", "kappa": float(env.kappa), "impulse_mode": env.impulse_mode,
                "impulse_iterations": int(env.impulse_iterations), "substeps": int(env.substeps)}
    return {"contact": "mjx", "stiffness": cfg.stiffness, "substeps": int(env.substeps)}


REPO = Path(__file__).resolve().parents[1]


def repo_relative(path) -> str:
    """`path` relative to the repository when it lies inside it (an artifact's provenance names runs/..., not the
    machine it was trained on), else as given."""
    for p in (Path(path).absolute(), Path(path).resolve()):  # as given first: runs/ may be a link out of the tree
        try:
            return str(p.relative_to(REPO))
        except ValueError:
            pass
    return str(path)


def training_provenance(cfg, iterations: int, run, wall_time_s: float | None = None, **extra) -> dict:
    """What an artifact records of its training, the same whether the training exported it or a checkpoint was
    re-exported (`make export RUN=...`, e.g. of a run stopped early): algorithm, seed, iterations, preset, contact
    and knob, calibration, run folder, training wall time (s, when known)."""
    wall = {} if wall_time_s is None else {"wall_time_s": round(float(wall_time_s), 1)}
    return {"algorithm": "shac+bcg" if cfg.bcg.enabled else "shac", "seed": cfg.seed, "iterations": int(iterations),
            "preset": cfg.preset, **contact_provenance(cfg), **calibrated.provenance(cfg), "run": repo_relative(run), **wall,
            **extra}


def zero_residual(net_params) -> Any:
    """The actor with its output layer zeroed: a residual policy that commands the reference's next joint targets
    (on the robot's PD), whatever it observes. The baseline a trained residual policy has to beat."""
    out = dict(net_params)
    out["out"] = {k: np.zeros_like(np.asarray(v)) for k, v in net_params["out"].items()}
    return out


def export_run(run_dir, out_dir=None, checkpoint: str = "latest.npz", zeroed: bool = False) -> ExportResult:
    from motions import load_motion

    rp = load_run_params(run_dir, checkpoint)
    cfg = rp.config
    motion = load_motion(cfg.motion)
    params = rp.checkpoint.net_params
    if zeroed:
        if not cfg.actor.residual_on_reference:
            raise ExportError(f"--zero-residual: the run's actor is not a residual on the reference "
                              f"(actor.residual_on_reference is false in {rp.run_dir}/config.yaml)")
        params = zero_residual(params)
        prov = training_provenance(cfg, 0, rp.run_dir, 0.0, checkpoint=rp.checkpoint.path.name,
                                   untrained="the output layer zeroed: the reference's joint targets on PD")
    else:
        prov = training_provenance(cfg, rp.checkpoint.step, rp.run_dir, rp.checkpoint.metrics.get("wall_s"),
                                   checkpoint=rp.checkpoint.path.name)
    return export_policy(params, cfg.actor, rp.checkpoint.obs_norm, motion, prov, out_dir,
                         obs_terms=cfg.obs_terms, anchor_body=cfg.env.tracking.anchor_body)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m train.export", description="Re-export a training run as a policy artifact")
    ap.add_argument("--run", required=True, help="run folder runs/<motion>/<stamp>")
    ap.add_argument("--checkpoint", default="latest.npz", help="file in <run>/checkpoints (default latest.npz)")
    ap.add_argument("--out", help="artifact folder (default policies/g1/<motion>)")
    ap.add_argument("--zero-residual", action="store_true",
                    help="export the untrained baseline instead: the actor's output layer zeroed, so the policy commands "
                         "the reference's joint targets (a residual actor only)")
    args = ap.parse_args(argv)
    from motions import MotionError
    from policies.artifact import ArtifactError

    try:
        res = export_run(args.run, args.out, args.checkpoint, zeroed=args.zero_residual)
    except (ExportError, CheckpointError, MotionError, ArtifactError) as e:
        print(f"export failed: {e}", file=sys.stderr)
        return 2
    print(f"exported {res.path} (converter {res.method}, parity max |JAX - ORT| = {res.parity_max_abs:.2e})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
