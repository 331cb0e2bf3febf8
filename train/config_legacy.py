"""Reading training configs of the layout before config_version 2 (the committed
policies/g1/hop/training/config.yaml and runs made before the typed root).

The explicit mapping, old key -> TrainConfig (everything else is read as is):
- `devices`: dropped (a record of the machine); `shac.num_envs` was saved already multiplied
  by the device count, so it is divided by len(devices).
- `obs_terms` -> `env.obs_terms`.
- `env.domain_rand` -> the `domain_rand` section; `env.stiffness` -> `stiffness` (when absent).
- `env.min_base_height`, `env.max_tilt`: dropped; they must equal the one fall criterion
  (robots.physics FALL_HEIGHT_M / FALL_TILT_RAD), else the run used a different termination.
- `actor.init_log_std`: dropped (dead: the trainer's std is `shac.init_log_std`).
- `shac.obs_clip`: dropped; it must equal `actor.obs_clip` (the one clip now).
- `actor.action_scale`, `action_size`, `ref_index`, `ref_scale`, `bcg.enabled`: derived now; an
  old value that disagrees with its derivation is refused (e.g. a run trained with
  `--set env.action_scale=0.5`, whose actor said 0.25: no single artifact matches it).
- `algorithm` -> `algo`; `network` -> `actor` (older exporter keys).
"""
from __future__ import annotations

from typing import Any, Mapping

from robots import physics as P
from train import config as C
from train.networks import OBS_CLIP


def from_legacy(old: Mapping[str, Any]) -> C.TrainConfig:
    d = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in old.items()}
    devices = d.pop("devices", None) or [None]
    if "algorithm" in d and "algo" not in d:
        d["algo"] = d.pop("algorithm")
    if "network" in d and "actor" not in d:
        d["actor"] = d.pop("network")
    env = d.setdefault("env", {})
    if "obs_terms" in d:
        env["obs_terms"] = list(d.pop("obs_terms"))
    if "domain_rand" in env:
        d["domain_rand"] = env.pop("domain_rand")
    if "stiffness" in env:
        d.setdefault("stiffness", env["stiffness"])
        if env.pop("stiffness") != d["stiffness"]:
            raise ValueError(f"legacy config: env.stiffness differs from stiffness {d['stiffness']!r}")
    for key, now in (("min_base_height", P.FALL_HEIGHT_M), ("max_tilt", P.FALL_TILT_RAD)):
        if key in env and float(env.pop(key)) != now:
            raise ValueError(f"legacy config: env.{key} is not the one fall criterion's {now} "
                             f"({P.FALL_DEFINITION}); this run cannot be reproduced by the current env")
    actor = d.setdefault("actor", {})
    actor.pop("init_log_std", None)
    shac = d.setdefault("shac", {})
    if "obs_clip" in shac and float(shac.pop("obs_clip")) != float(actor.get("obs_clip", OBS_CLIP)):
        raise ValueError("legacy config: shac.obs_clip differs from actor.obs_clip; the two clips are one now")
    if "num_envs" in shac:
        shac["num_envs"] = int(shac["num_envs"]) // len(devices)
    old_derived = {("actor", k): actor.pop(k) for k in ("action_scale", "action_size", "ref_index", "ref_scale")
                   if k in actor}
    if "enabled" in d.get("bcg", {}):
        old_derived["bcg", "enabled"] = d["bcg"].pop("enabled")
    cfg = C.from_dict({"config_version": C.CONFIG_VERSION, **d})
    for (sec, k), v in old_derived.items():
        now = getattr(getattr(cfg, sec), k)
        if (float(v) if isinstance(now, float) else v) != now:
            raise ValueError(f"legacy config: {sec}.{k}={v!r}, but it derives to {now!r} from {C.DERIVED[sec, k]}; "
                             "the trained actor and its export would disagree")
    return cfg
