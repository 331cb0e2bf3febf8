"""Export a trained actor to a policy artifact, and the checkpoint format trainer and exporter share.

Export: the deterministic actor (train/networks.py, normalisation inside the graph) is
converted to ONNX with jax2onnx (input `obs` float32 [batch, n_obs], output `actions` float32
[batch, 29]); if jax2onnx fails, the same graph is built explicitly with onnx.helper from the
params (`method="helper"`, tested to the same parity). JAX vs onnxruntime parity is asserted
on random and realistic observations (max abs diff < 1e-4) before anything is written, then
the artifact is written through policies.artifact.write_artifact.

Run folder (written by the trainer, `make train`; read by `python -m train.export --run DIR`):

    runs/<motion>/<stamp>/
      config.yaml              # the run's config; keys read here:
                               #   motion: <name>               (or env: {motion: <name>})
                               #   actor: ActorConfig.to_dict() (or network: {...}; missing -> defaults)
                               #   obs_terms: [term names]      (optional, default MOTION_OBS_TERMS)
                               #   algo / algorithm, seed       (provenance)
                               # (checkpoint meta keys motion, actor, obs_terms, algo, seed take precedence)
      checkpoints/latest.npz   # save_checkpoint(...) below; other *.npz beside it (e.g. iter_000100.npz)

Checkpoint (`save_checkpoint(path, params, obs_norm, step, metrics, extra=None, meta=None)`):
one .npz written atomically (temp file + fsync + os.replace: a crash never leaves a torn file
and the previous checkpoint stays until the new one is complete), no pickle:

    format                 "g1-bcg-checkpoint-v1"
    step                   int
    metrics_json, meta_json  JSON strings (metrics: name -> float; meta: free-form, e.g. the actor cfg)
    params/<path>          the actor: either the net params of train/networks.py, or the trainer's
                           {"net": net params, "log_std": [29]}
    obs_norm/mean, obs_norm/var, obs_norm/count   running observation statistics
    extra/<path>           any other pytree (critics, optimiser states, rng) for resume

<path> is the pytree key path, elements joined by "/" and typed: "d:key" (dict), "l:3" (list /
tuple index), "a:name" (NamedTuple field). `load_checkpoint(path)` rebuilds dicts and lists;
pass `extra_template=` (e.g. the trainer's fresh state) to restore NamedTuples/optax states
into that exact structure.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np

FORMAT = "g1-bcg-checkpoint-v1"
PARITY_TOL = 1e-4
OPSET = 17


class ExportError(RuntimeError):
    """Export or checkpoint I/O failed; the message names the cause and the fix."""


# ============================================================================ checkpoints

def _key_str(k) -> str:
    import jax

    if isinstance(k, jax.tree_util.DictKey):
        s = str(k.key)
        if "/" in s:
            raise ExportError(f"checkpoint: dict key {s!r} contains '/'")
        return f"d:{s}"
    if isinstance(k, jax.tree_util.SequenceKey):
        return f"l:{k.idx}"
    if isinstance(k, jax.tree_util.GetAttrKey):
        return f"a:{k.name}"
    if isinstance(k, jax.tree_util.FlattenedIndexKey):
        return f"l:{k.key}"
    raise ExportError(f"checkpoint: unsupported pytree node key {k!r}")


def _flatten(prefix: str, tree: Any) -> dict[str, np.ndarray]:
    import jax

    out = {}
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    for path, leaf in leaves:
        name = "/".join([prefix] + [_key_str(k) for k in path]) if path else prefix
        out[name] = np.asarray(leaf)
    return out


def _unflatten(entries: dict[str, np.ndarray]) -> Any:
    """Rebuild nested dicts/lists from typed paths (NamedTuples come back as dicts)."""
    if list(entries) == [""]:
        return entries[""]
    root: dict = {}
    for name, v in entries.items():
        parts = name.split("/")
        node = root
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = v

    def build(node):
        if not isinstance(node, dict):
            return node
        kinds = {k[:2] for k in node}
        if kinds == {"l:"}:
            return [build(node[k]) for k in sorted(node, key=lambda s: int(s[2:]))]
        return {k[2:]: build(v) for k, v in node.items()}

    return build(root)


def _to_template(entries: dict[str, np.ndarray], template: Any, what: str) -> Any:
    import jax

    leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    names = ["/".join(_key_str(k) for k in path) for path, _ in leaves]
    missing = [n for n in names if n not in entries]
    if missing or len(names) != len(entries):
        extra = sorted(set(entries) - set(names))
        raise ExportError(f"checkpoint {what} does not match the template: missing {missing[:5]}, unexpected {extra[:5]}")
    return jax.tree_util.tree_unflatten(treedef, [entries[n] for n in names])


def save_checkpoint(path: str | os.PathLike, params: Any, obs_norm: Any, step: int, metrics: dict | None = None,
                    extra: Any = None, meta: dict | None = None) -> Path:
    """Write one checkpoint atomically (see the module docstring for the format)."""
    from train.networks import norm_arrays

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mean, var = norm_arrays(obs_norm)
    count = getattr(obs_norm, "count", None) if not isinstance(obs_norm, dict) else obs_norm.get("count")
    arrays = {"format": np.asarray(FORMAT), "step": np.asarray(int(step)),
              "metrics_json": np.asarray(json.dumps(_jsonable(metrics or {}))),
              "meta_json": np.asarray(json.dumps(_jsonable(meta or {}))),
              "obs_norm/mean": np.asarray(mean, np.float32), "obs_norm/var": np.asarray(var, np.float32),
              "obs_norm/count": np.asarray(count if count is not None else np.nan, np.float64)}
    arrays.update(_flatten("params", params))
    if extra is not None:
        arrays.update(_flatten("extra", extra))
    bad = [k for k, v in arrays.items() if v.dtype.kind in "fc" and not np.all(np.isfinite(v)) and k != "obs_norm/count"]
    if bad:
        raise ExportError(f"refusing to write checkpoint {path}: non-finite values in {bad[:5]} (training diverged?); "
                          "the previous checkpoint is kept")
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


@dataclasses.dataclass
class Checkpoint:
    params: Any  # as saved (dicts/lists)
    obs_norm: dict  # {"mean", "var", "count"}
    step: int
    metrics: dict
    meta: dict
    extra: Any = None
    path: Path | None = None

    @property
    def net_params(self) -> Any:
        """The actor net params (unwraps the trainer's {"net": ..., "log_std": ...})."""
        return self.params["net"] if isinstance(self.params, dict) and "net" in self.params else self.params

    @property
    def log_std(self) -> np.ndarray | None:
        return self.params.get("log_std") if isinstance(self.params, dict) else None


def load_checkpoint(path: str | os.PathLike, params_template: Any = None, extra_template: Any = None) -> Checkpoint:
    path = Path(path)
    if not path.is_file():
        raise ExportError(f"checkpoint {path} not found")
    try:
        with np.load(path, allow_pickle=False) as z:
            entries = {k: z[k] for k in z.files}
    except Exception as e:
        raise ExportError(f"checkpoint {path} is unreadable ({e}); use an earlier checkpoint") from e
    if str(entries.get("format", "")) != FORMAT:
        raise ExportError(f"{path}: not a {FORMAT} checkpoint (format={entries.get('format')!r})")

    def group(prefix):
        n = len(prefix) + 1
        return {k[n:]: v for k, v in entries.items() if k == prefix or k.startswith(prefix + "/")}

    p, x = group("params"), group("extra")
    params = _to_template(p, params_template, "params") if params_template is not None else _unflatten(p)
    extra = None
    if x:
        extra = _to_template(x, extra_template, "extra") if extra_template is not None else _unflatten(x)
    norm = {"mean": entries["obs_norm/mean"], "var": entries["obs_norm/var"], "count": entries["obs_norm/count"]}
    return Checkpoint(params=params, obs_norm=norm, step=int(entries["step"]),
                      metrics=json.loads(str(entries["metrics_json"])), meta=json.loads(str(entries["meta_json"])),
                      extra=extra, path=path)


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if dataclasses.is_dataclass(x):
        return _jsonable(dataclasses.asdict(x))
    if hasattr(x, "item") and np.ndim(x) == 0:
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return x


# ============================================================================ run folders

@dataclasses.dataclass
class RunParams:
    run_dir: Path
    checkpoint: Checkpoint
    cfg: Any  # ActorConfig
    motion: str
    obs_terms: tuple[str, ...]
    algorithm: str
    seed: int


def _pick(d: dict, *paths, default=None):
    for p in paths:
        node = d
        for k in p.split("."):
            if not isinstance(node, dict) or k not in node:
                break
            node = node[k]
        else:
            return node
    return default


def load_run_params(run_dir: str | os.PathLike, checkpoint: str = "latest.npz") -> RunParams:
    """Everything export needs from a run folder (layout in the module docstring)."""
    import yaml

    from policies.observation import MOTION_OBS_TERMS
    from train.networks import ActorConfig

    run = Path(run_dir)
    if not run.is_dir():
        raise ExportError(f"run folder {run} does not exist (expected runs/<motion>/<stamp>)")
    cfg_path = run / "config.yaml"
    if not cfg_path.is_file():
        raise ExportError(f"{cfg_path} is missing: is {run} a training run folder (runs/<motion>/<stamp>)?")
    config = yaml.safe_load(cfg_path.read_text()) or {}
    ck_path = run / "checkpoints" / checkpoint
    if not ck_path.is_file():
        have = sorted(p.name for p in (run / "checkpoints").glob("*.npz")) if (run / "checkpoints").is_dir() else []
        raise ExportError(f"{ck_path} not found; checkpoints in the run: {have or 'none'}")
    ck = load_checkpoint(ck_path)
    motion = _pick(ck.meta, "motion") or _pick(config, "motion", "env.motion", "train.motion")
    if not motion:
        raise ExportError(f"{cfg_path}: no 'motion' key (nor env.motion); cannot tell which motion this run trained")
    terms = tuple(_pick(ck.meta, "obs_terms") or _pick(config, "obs_terms", "env.obs_terms") or MOTION_OBS_TERMS)
    actor = _pick(ck.meta, "actor") or _pick(config, "actor", "network.actor", "network") or {}
    actor = {k: v for k, v in actor.items() if k not in ("ref_index", "ref_scale")}
    try:
        cfg = ActorConfig.for_terms(list(terms), **actor)
    except (TypeError, ValueError) as e:
        raise ExportError(f"{cfg_path}: bad actor config {actor}: {e}") from e
    algo = str(_pick(ck.meta, "algo", "algorithm") or _pick(config, "algo", "algorithm", "train.algo") or "unknown")
    seed = int(_pick(ck.meta, "seed") or _pick(config, "seed", "train.seed") or 0)
    return RunParams(run, ck, cfg, str(motion), terms, algo, seed)


# ============================================================================ ONNX

def _jax_fn(params, cfg, obs_norm):
    import jax.numpy as jnp

    from train.networks import actor_mean, norm_arrays

    mean, var = (jnp.asarray(np.asarray(a), jnp.float32) for a in norm_arrays(obs_norm))
    p = _as_f32(params)

    def fn(obs):
        return actor_mean(p, obs, cfg, (mean, var))

    return fn


def _as_f32(params):
    import jax
    import jax.numpy as jnp

    return jax.tree.map(lambda a: jnp.asarray(np.asarray(a), jnp.float32), params)


def onnx_via_jax2onnx(params, cfg, obs_norm, n_obs: int):
    import jax
    import jax.numpy as jnp
    from jax2onnx import to_onnx

    model = to_onnx(_jax_fn(params, cfg, obs_norm), [jax.ShapeDtypeStruct(("batch", n_obs), jnp.float32)],
                    input_names=["obs"], output_names=["actions"], opset=OPSET, model_name="g1_policy")
    return model


def onnx_via_helper(params, cfg, obs_norm, n_obs: int):
    """The same graph built op by op with onnx.helper (fallback when jax2onnx fails)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from train.networks import LN_EPS, NORM_EPS, norm_arrays

    mean, var = (np.asarray(a, np.float32) for a in norm_arrays(obs_norm))
    inits, nodes = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), name))
        return name

    const("obs_mean", mean.reshape(1, -1))
    std = np.sqrt(var + np.float32(NORM_EPS)).astype(np.float32)  # as in JAX: sqrt(var + eps) in float32
    const("obs_std", std.reshape(1, -1))
    const("clip_lo", np.float32(-cfg.obs_clip))
    const("clip_hi", np.float32(cfg.obs_clip))
    nodes += [helper.make_node("Sub", ["obs", "obs_mean"], ["obs_c"]),
              helper.make_node("Div", ["obs_c", "obs_std"], ["obs_n"]),
              helper.make_node("Clip", ["obs_n", "clip_lo", "clip_hi"], ["x0"])]
    x = "x0"
    for i, layer in enumerate(params["layers"]):
        w, b = const(f"l{i}_w", layer["w"]), const(f"l{i}_b", layer["b"])
        nodes += [helper.make_node("MatMul", [x, w], [f"l{i}_mm"]), helper.make_node("Add", [f"l{i}_mm", b], [f"l{i}_z"])]
        z = f"l{i}_z"
        if "ln_g" in layer:
            g, bb = const(f"l{i}_ln_g", layer["ln_g"]), const(f"l{i}_ln_b", layer["ln_b"])
            nodes.append(helper.make_node("LayerNormalization", [z, g, bb], [f"l{i}_ln"], axis=-1, epsilon=LN_EPS))
            z = f"l{i}_ln"
        act = {"elu": ("Elu", {"alpha": 1.0}), "tanh": ("Tanh", {}), "relu": ("Relu", {})}[cfg.activation]
        nodes.append(helper.make_node(act[0], [z], [f"l{i}_a"], **act[1]))
        x = f"l{i}_a"
    w, b = const("out_w", params["out"]["w"]), const("out_b", params["out"]["b"])
    out = "actions" if not cfg.residual_on_reference else "mlp_out"
    nodes += [helper.make_node("MatMul", [x, w], ["out_mm"]), helper.make_node("Add", ["out_mm", b], [out])]
    if cfg.residual_on_reference:
        for name, v in (("ref_start", [cfg.ref_index]), ("ref_end", [cfg.ref_index + cfg.action_size]), ("ref_axis", [1])):
            inits.append(numpy_helper.from_array(np.asarray(v, np.int64), name))
        const("ref_div", np.float32(cfg.ref_scale * cfg.action_scale))
        nodes += [helper.make_node("Slice", ["obs", "ref_start", "ref_end", "ref_axis"], ["ref"]),
                  helper.make_node("Div", ["ref", "ref_div"], ["ref_action"]),
                  helper.make_node("Add", ["ref_action", "mlp_out"], ["actions"])]
    graph = helper.make_graph(
        nodes, "g1_policy",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", n_obs])],
        [helper.make_tensor_value_info("actions", TensorProto.FLOAT, ["batch", cfg.action_size])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=9)
    onnx.checker.check_model(model)
    return model


def realistic_observations(motion, terms: Sequence[str], rng: np.random.Generator, n: int = 64) -> np.ndarray:
    """Observations a policy sees while tracking `motion`, built with the one observation builder
    (the reference window, state near the reference, small noise)."""
    from policies.observation import ObsInputs, build_observation, reference_window, term_specs

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
        phase=steps / max(T - 1, 1), ref_q=np.stack(rq), ref_height=np.stack(rh))
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


def to_onnx_checked(params, cfg, obs_norm, n_obs: int, check_obs: np.ndarray, method: str = "auto",
                    tol: float = PARITY_TOL):
    """-> (model, method used, max abs parity error). Raises ExportError if parity fails."""
    errors = []
    methods = {"auto": ["jax2onnx", "helper"], "jax2onnx": ["jax2onnx"], "helper": ["helper"]}[method]
    for m in methods:
        try:
            model = (onnx_via_jax2onnx if m == "jax2onnx" else onnx_via_helper)(params, cfg, obs_norm, n_obs)
            err = parity(model, params, cfg, obs_norm, check_obs)
        except ExportError:
            raise
        except Exception as e:  # converter failure: try the next method
            errors.append(f"{m}: {type(e).__name__}: {e}")
            if m != methods[-1]:
                warnings.warn(f"jax2onnx export failed ({e}); falling back to the onnx.helper graph builder")
            continue
        if not np.isfinite(err) or err >= tol:
            raise ExportError(f"ONNX ({m}) differs from JAX by {err:.3g} (tolerance {tol}); not writing the artifact")
        return model, m, err
    raise ExportError("ONNX export failed:\n  " + "\n  ".join(errors))


@dataclasses.dataclass
class ExportResult:
    path: Path
    method: str
    parity_max_abs: float
    n_obs: int


def export_policy(params, cfg, obs_norm, motion, provenance_info: dict, out_dir: str | os.PathLike | None = None,
                  obs_terms: Sequence[str] | None = None, method: str = "auto", seed: int = 0) -> ExportResult:
    """Actor -> policies/g1/<motion>/ (policy.onnx + policy.yaml + reference.npz).

    params: actor net params (or the trainer's {"net", "log_std"}); cfg: ActorConfig; obs_norm:
    ObsNorm / {"mean","var"}; motion: train.motions.Motion; provenance_info: {"algorithm", "seed",
    "iterations", ...extra} passed to policies.artifact.provenance (a dict that already has
    "git_commit" and "date" is used as is). Parity JAX vs onnxruntime is checked on random and
    realistic observations before writing.
    """
    from policies import artifact as A
    from policies.observation import MOTION_OBS_TERMS, obs_size, term_specs

    if isinstance(params, dict) and "net" in params:
        params = params["net"]
    specs = term_specs(tuple(obs_terms or MOTION_OBS_TERMS))
    n_obs = obs_size(specs)
    from train.networks import ActorConfig, norm_arrays

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
    model, used, err = to_onnx_checked(params, cfg, obs_norm, n_obs, check, method=method)
    info = dict(provenance_info)
    prov = info if {"git_commit", "date"} <= set(info) else A.provenance(
        info.pop("algorithm", "unknown"), info.pop("seed", 0), info.pop("iterations", 0), **info)
    prov = {**prov, "onnx_converter": used, "export_parity_max_abs": float(f"{err:.3g}")}
    spec = A.PolicySpec(**A.robot_spec_fields(), action_scale=float(cfg.action_scale), observation=specs,
                        motion=A.MotionSpec(motion.name, float(motion.duration)), provenance=prov)
    out = Path(out_dir) if out_dir else A.artifact_dir(motion.name)
    A.write_artifact(out, model, spec, motion.ref_q, motion.ref_height)
    return ExportResult(out, used, err, n_obs)


def export_run(run_dir, out_dir=None, checkpoint: str = "latest.npz", method: str = "auto") -> ExportResult:
    from motions import load_motion

    rp = load_run_params(run_dir, checkpoint)
    motion = load_motion(rp.motion)
    prov = {"algorithm": rp.algorithm, "seed": rp.seed, "iterations": rp.checkpoint.step,
            "run": str(rp.run_dir), "checkpoint": rp.checkpoint.path.name}
    return export_policy(rp.checkpoint.net_params, rp.cfg, rp.checkpoint.obs_norm, motion, prov, out_dir,
                         obs_terms=rp.obs_terms, method=method)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m train.export", description="Re-export a training run as a policy artifact")
    ap.add_argument("--run", required=True, help="run folder runs/<motion>/<stamp>")
    ap.add_argument("--checkpoint", default="latest.npz", help="file in <run>/checkpoints (default latest.npz)")
    ap.add_argument("--out", help="artifact folder (default policies/g1/<motion>)")
    ap.add_argument("--method", choices=["auto", "jax2onnx", "helper"], default="auto")
    args = ap.parse_args(argv)
    from policies.artifact import ArtifactError
    from motions import MotionError

    try:
        res = export_run(args.run, args.out, args.checkpoint, args.method)
    except (ExportError, MotionError, ArtifactError) as e:
        print(f"export failed: {e}", file=sys.stderr)
        return 2
    print(f"exported {res.path} (converter {res.method}, parity max |JAX - ORT| = {res.parity_max_abs:.2e})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
