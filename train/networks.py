"""The actor network: one definition, used by the trainer (differentiable rollout) and the
exporter (ONNX graph), so the two cannot drift apart.

    mean_action = [ref_next / action_scale] + MLP(normalise(obs))

- normalise(obs) = clip((obs - mean) / sqrt(var + 1e-8), -clip, clip): the running statistics
  (train/shac.py's ObsNorm: count, mean, var) are passed in as arrays, never baked into params.
- MLP: Dense -> LayerNorm -> ELU per hidden layer (reference: [512, 256, 128]), then a linear
  output layer initialised small (x 0.01), so a fresh policy outputs ~0 residual.
- Residual on reference (`residual_on_reference`, default on): ref_next is the first 29 entries
  of the `ref_joint_pos` observation term (q_ref(t+1) - default, rad, divided by the term's scale),
  so action * action_scale + default = q_ref(t+1) + residual * action_scale: a fresh policy tracks
  the reference, and zero MLP output gives exactly the reference target.
- Deterministic mean action; the trainer owns the log-std for sampling (SHACConfig.init_log_std).
- action_scale, action_size, ref_index, ref_scale are DERIVED (the env's action scale and the
  observation layout): train/config.py's TrainConfig sets them, never a user setting.

Params are a plain dict pytree of jnp arrays:
    {"layers": [{"w": [in, out], "b": [out], "ln_g": [out], "ln_b": [out]}, ...],
     "out": {"w": [last, 29], "b": [29]}}
(no "ln_*" keys when layer_norm is off).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from policies.action import ACTION_SCALE
from policies.observation import MOTION_OBS_TERMS, ObsTermSpec, term_specs
from robots import g1

LN_EPS = 1e-5
NORM_EPS = 1e-8
OBS_CLIP = 5.0


@dataclasses.dataclass(frozen=True)
class ActorConfig:
    hidden: tuple[int, ...] = (512, 256, 128)
    layer_norm: bool = True
    activation: str = "elu"  # elu | tanh | relu
    residual_on_reference: bool = True
    action_scale: float = ACTION_SCALE
    action_size: int = g1.NUM_MOTORS
    obs_clip: float = OBS_CLIP  # the one clip of normalised observations (actor graph and critic inputs)
    out_init_scale: float = 0.01
    # where ref_q(t+1) - default sits in the observation, and the term's scale (set by for_terms)
    ref_index: int = -1
    ref_scale: float = 1.0

    def __post_init__(self):
        if self.activation not in _ACT:
            raise ValueError(f"unknown activation {self.activation!r}; use one of {list(_ACT)}")
        if self.residual_on_reference and self.ref_index < 0:
            raise ValueError("residual_on_reference needs ref_index: build the config with ActorConfig.for_terms(...)")

    @staticmethod
    def for_terms(terms: Sequence[ObsTermSpec] | Sequence[str] = MOTION_OBS_TERMS, **kw) -> "ActorConfig":
        """A config whose residual reads `ref_joint_pos` at its position in this observation layout."""
        specs = term_specs(terms) if terms and isinstance(terms[0], str) else tuple(terms)
        kw = {k: (tuple(v) if k == "hidden" else v) for k, v in kw.items()}
        off = 0
        for s in specs:
            if s.name == "ref_joint_pos":
                return ActorConfig(ref_index=off, ref_scale=float(s.scale), **kw)
            off += s.size
        if kw.get("residual_on_reference", True):
            raise ValueError("residual_on_reference needs the observation term 'ref_joint_pos'; "
                             f"terms are {[s.name for s in specs]}")
        return ActorConfig(**kw)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["hidden"] = list(self.hidden)
        return d

    @staticmethod
    def from_dict(d: dict) -> "ActorConfig":
        fields = {f.name for f in dataclasses.fields(ActorConfig)}
        unknown = set(d) - fields
        if unknown:
            raise ValueError(f"unknown actor config keys {sorted(unknown)}; known: {sorted(fields)}")
        d = dict(d)
        if "hidden" in d:
            d["hidden"] = tuple(int(h) for h in d["hidden"])
        return ActorConfig(**d)


_ACT = {"elu": jax.nn.elu, "tanh": jnp.tanh, "relu": jax.nn.relu}


def _dense(rng, n_in, n_out, scale=1.0):
    w = jax.random.normal(rng, (n_in, n_out), jnp.float32) * (scale * np.sqrt(1.0 / n_in))
    return {"w": w, "b": jnp.zeros(n_out, jnp.float32)}


def init_actor(rng: jax.Array, obs_size: int, cfg: ActorConfig) -> dict:
    if cfg.residual_on_reference and cfg.ref_index + cfg.action_size > obs_size:
        raise ValueError(f"ref_index {cfg.ref_index} + {cfg.action_size} exceeds the observation size {obs_size}")
    sizes = (obs_size,) + tuple(cfg.hidden)
    keys = jax.random.split(rng, len(sizes))
    layers = []
    for k, a, b in zip(keys[:-1], sizes[:-1], sizes[1:]):
        layer = _dense(k, a, b)
        if cfg.layer_norm:
            layer.update(ln_g=jnp.ones(b, jnp.float32), ln_b=jnp.zeros(b, jnp.float32))
        layers.append(layer)
    return {"layers": layers, "out": _dense(keys[-1], sizes[-1], cfg.action_size, scale=cfg.out_init_scale)}


def norm_arrays(obs_norm: Any) -> tuple[Any, Any]:
    """(mean, var) from train/shac.py's ObsNorm, a dict {mean, var} or {mean, std}, or a (mean, var) pair."""
    if obs_norm is None:
        raise ValueError("obs_norm is required (mean/var arrays)")
    m, v = getattr(obs_norm, "mean", None), getattr(obs_norm, "var", None)
    if m is not None and v is not None and not callable(m):  # a NamedTuple (ObsNorm), not an array
        return m, v
    if isinstance(obs_norm, dict):
        if "var" in obs_norm:
            return obs_norm["mean"], obs_norm["var"]
        if "std" in obs_norm:
            return obs_norm["mean"], jnp.asarray(obs_norm["std"]) ** 2
        raise ValueError(f"obs_norm dict needs 'mean' and 'var' (or 'std'); got keys {sorted(obs_norm)}")
    mean, var = obs_norm
    return mean, var


def normalize(obs, mean, var, clip: float):
    return jnp.clip((obs - mean) / jnp.sqrt(var + NORM_EPS), -clip, clip)


def mlp(params: dict, x: jax.Array, cfg: ActorConfig) -> jax.Array:
    act = _ACT[cfg.activation]
    for layer in params["layers"]:
        x = x @ layer["w"] + layer["b"]
        if "ln_g" in layer:
            mu = x.mean(-1, keepdims=True)
            var = ((x - mu) ** 2).mean(-1, keepdims=True)
            x = (x - mu) / jnp.sqrt(var + LN_EPS) * layer["ln_g"] + layer["ln_b"]
        x = act(x)
    return x @ params["out"]["w"] + params["out"]["b"]


def reference_action(obs: jax.Array, cfg: ActorConfig) -> jax.Array:
    """The action that commands exactly q_ref(t+1): (ref_joint_pos[:29] / scale) / action_scale."""
    ref = obs[..., cfg.ref_index:cfg.ref_index + cfg.action_size]
    return ref / (cfg.ref_scale * cfg.action_scale)


def actor_mean(params: dict, obs: jax.Array, cfg: ActorConfig, obs_norm: Any) -> jax.Array:
    """Deterministic (mean) action from the raw observation. Pure; jit/grad/vmap friendly."""
    mean, var = norm_arrays(obs_norm)
    y = mlp(params, normalize(obs, mean, var, cfg.obs_clip), cfg)
    if cfg.residual_on_reference:
        y = reference_action(obs, cfg) + y
    return y


def make_actor_apply(cfg: ActorConfig):
    """(net params, raw obs, obs_norm) -> mean action: the signature train/shac.py's SHAC takes."""
    def apply(params, obs, obs_norm):
        return actor_mean(params, obs, cfg, obs_norm)
    return apply


def param_count(params: dict) -> int:
    return int(sum(np.size(x) for x in jax.tree.leaves(params)))
