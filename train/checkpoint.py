"""Checkpoint I/O shared by the trainer and the exporter: one .npz per checkpoint, no pickle.

Written atomically (temp file + fsync + os.replace): a crash never leaves a torn file and the
previous checkpoint stays until the new one is complete. A checkpoint with a non-finite float
is refused (the previous one is kept). Layout:

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

import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from robots.run_files import jsonable

FORMAT = "g1-bcg-checkpoint-v1"


class CheckpointError(RuntimeError):
    """Checkpoint I/O failed; the message names the cause and the fix."""


def _key_str(k) -> str:
    import jax

    if isinstance(k, jax.tree_util.DictKey):
        s = str(k.key)
        if "/" in s:
            raise CheckpointError(f"checkpoint: dict key {s!r} contains '/'")
        return f"d:{s}"
    if isinstance(k, jax.tree_util.SequenceKey):
        return f"l:{k.idx}"
    if isinstance(k, jax.tree_util.GetAttrKey):
        return f"a:{k.name}"
    if isinstance(k, jax.tree_util.FlattenedIndexKey):
        return f"l:{k.key}"
    raise CheckpointError(f"checkpoint: unsupported pytree node key {k!r}")


def flatten(prefix: str, tree: Any) -> dict[str, np.ndarray]:
    import jax

    out = {}
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    for path, leaf in leaves:
        name = "/".join([prefix] + [_key_str(k) for k in path]) if path else prefix
        out[name] = np.asarray(leaf)
    return out


def unflatten(entries: dict[str, np.ndarray]) -> Any:
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
        raise CheckpointError(f"checkpoint {what} does not match the template: missing {missing[:5]}, unexpected {extra[:5]}")
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
              "metrics_json": np.asarray(json.dumps(jsonable(metrics or {}))),
              "meta_json": np.asarray(json.dumps(jsonable(meta or {}))),
              "obs_norm/mean": np.asarray(mean, np.float32), "obs_norm/var": np.asarray(var, np.float32),
              "obs_norm/count": np.asarray(count if count is not None else np.nan, np.float64)}
    arrays.update(flatten("params", params))
    if extra is not None:
        arrays.update(flatten("extra", extra))
    bad = [k for k, v in arrays.items() if v.dtype.kind in "fc" and not np.all(np.isfinite(v)) and k != "obs_norm/count"]
    if bad:
        raise CheckpointError(f"refusing to write checkpoint {path}: non-finite values in {bad[:5]} (training diverged?); "
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
        raise CheckpointError(f"checkpoint {path} not found")
    try:
        with np.load(path, allow_pickle=False) as z:
            entries = {k: z[k] for k in z.files}
    except Exception as e:
        raise CheckpointError(f"checkpoint {path} is unreadable ({e}); use an earlier checkpoint") from e
    if str(entries.get("format", "")) != FORMAT:
        raise CheckpointError(f"{path}: not a {FORMAT} checkpoint (format={entries.get('format')!r})")

    def group(prefix):
        n = len(prefix) + 1
        return {k[n:]: v for k, v in entries.items() if k == prefix or k.startswith(prefix + "/")}

    p, x = group("params"), group("extra")
    params = _to_template(p, params_template, "params") if params_template is not None else unflatten(p)
    extra = None
    if x:
        extra = _to_template(x, extra_template, "extra") if extra_template is not None else unflatten(x)
    norm = {"mean": entries["obs_norm/mean"], "var": entries["obs_norm/var"], "count": entries["obs_norm/count"]}
    return Checkpoint(params=params, obs_norm=norm, step=int(entries["step"]),
                      metrics=json.loads(str(entries["metrics_json"])), meta=json.loads(str(entries["meta_json"])),
                      extra=extra, path=path)
