"""The one typed training configuration root: `TrainConfig`, its presets, overrides and file form.

    cfg = preset("cpu", motion="jump", algo="bcg", seed=0).with_overrides({"env": {"action_scale": 0.5}})
    save_config(run_dir, cfg)          # the run's config.yaml
    load_config(run_dir) == cfg        # what export (and only export's reader) reloads

Invariants:
- Every fact is set once. DERIVED fields are computed in `TrainConfig.__post_init__` and
  nowhere else: the actor's action_scale (= env.action_scale), action_size (the robot's motor
  count), ref_index / ref_scale (where `ref_joint_pos` sits in env.obs_terms); env.stiffness
  (= stiffness) and env.domain_rand (= domain_rand); bcg.enabled (= algo == "bcg"). An override
  of a derived field is refused with the name of its source, so training and export cannot
  disagree (the old `--set env.action_scale=0.5` trained at 0.5 and exported 0.25).
- Every construction path (presets, `dataclasses.replace`, `with_overrides`, `from_dict`)
  runs the derivation and the validation (pydantic over the section dataclasses: types,
  lists -> tuples, unknown keys refused).
- Presets are TrainConfig instances; `preset` names the one a config started from.
- config.yaml holds `to_dict()` (`config_version: 2`, derived fields left out). Files of the
  earlier layout (no config_version: the committed policies/g1/hop/training/config.yaml) are
  read through `from_legacy`, an explicit mapping.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

import pydantic
import yaml

from robots import physics as P
from train import domain_rand as DR
from train.bcg import BCGConfig
from train.env import EnvConfig
from train.networks import OBS_CLIP, ActorConfig
from train.shac import SHACConfig

CONFIG_VERSION = 2
ALGOS = ("bcg", "shac")
SECTIONS = {"env": EnvConfig, "domain_rand": DR.DomainRandConfig, "actor": ActorConfig, "shac": SHACConfig,
            "bcg": BCGConfig}
SECTION_ALIASES = {"dr": "domain_rand"}  # the CLI's short name, kept
# (section, field) -> where its value comes from
DERIVED = {
    ("env", "stiffness"): "stiffness (--stiffness)",
    ("env", "domain_rand"): "the domain_rand section (--set dr.KEY=...)",
    ("actor", "action_scale"): "env.action_scale",
    ("actor", "action_size"): "the robot's motor count",
    ("actor", "ref_index"): "env.obs_terms (the observation layout)",
    ("actor", "ref_scale"): "env.obs_terms (the observation layout)",
    ("bcg", "enabled"): "algo (--algo bcg|shac)",
}


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    motion: str = "jump"
    algo: str = "bcg"  # bcg: SHAC + Bundled Contact Gradients; shac: plain analytic gradients
    preset: str = "custom"
    seed: int = 0
    stiffness: str | float = "stiff"  # robots.model.STIFFNESS_TIMECONST name or a solref timeconst (s)
    env: EnvConfig = EnvConfig()
    domain_rand: DR.DomainRandConfig = DR.DomainRandConfig()
    actor: ActorConfig = dataclasses.field(default_factory=ActorConfig.for_terms)
    shac: SHACConfig = SHACConfig()
    bcg: BCGConfig = BCGConfig()

    def __post_init__(self):
        if self.algo not in ALGOS:
            raise ValueError(f"unknown algo {self.algo!r}; use bcg (SHAC + Bundled Contact Gradients) or shac (plain)")
        if not (isinstance(self.shac.iterations, int) and self.shac.iterations >= 1):
            raise ValueError(f"shac.iterations={self.shac.iterations!r}: use an integer >= 1")
        env = dataclasses.replace(self.env, stiffness=self.stiffness, domain_rand=self.domain_rand)
        actor = _derive_actor({f.name: getattr(self.actor, f.name) for f in dataclasses.fields(ActorConfig)}, env)
        bcg = dataclasses.replace(self.bcg, enabled=self.algo == "bcg")
        if bcg.enabled and self.shac.horizon % bcg.horizon:
            raise ValueError(f"SHAC horizon {self.shac.horizon} must be a multiple of the BCG horizon {bcg.horizon}")
        for name, value in (("env", env), ("actor", actor), ("bcg", bcg)):
            object.__setattr__(self, name, value)

    @property
    def obs_terms(self) -> tuple[str, ...]:
        return tuple(self.env.obs_terms)

    def with_overrides(self, overrides: Mapping[str, Mapping[str, Any]]) -> "TrainConfig":
        """A new config with {section: {field: value}} applied (sections as in SECTIONS, or "dr"),
        then re-derived and re-validated."""
        d = self.to_dict()
        for section, fields in overrides.items():
            sec = SECTION_ALIASES.get(section, section)
            if sec not in SECTIONS:
                raise ValueError(f"unknown section {section!r}; use one of {override_sections()}")
            for k, v in fields.items():
                if (sec, k) in DERIVED:
                    raise ValueError(f"{section}.{k} is derived from {DERIVED[sec, k]}: set that instead")
                d[sec][k] = v
        return from_dict(d)

    def to_dict(self) -> dict:
        """Plain YAML-able form: config_version, the top-level fields, then each section without
        its derived fields."""
        out: dict = {"config_version": CONFIG_VERSION}
        out.update({k: getattr(self, k) for k in _TOP_FIELDS})
        for sec in SECTIONS:
            obj = getattr(self, sec)
            out[sec] = {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj) if (sec, f.name) not in DERIVED}
        return out


_TOP_FIELDS = ("motion", "algo", "preset", "seed", "stiffness")


def _derive_actor(actor: Mapping[str, Any], env: EnvConfig) -> ActorConfig:
    """The actor network's config: its settings from `actor` (derived keys in it ignored), its
    derived fields from the env (the one place they are computed)."""
    settings = {k: v for k, v in actor.items() if ("actor", k) not in DERIVED}
    return ActorConfig.for_terms(tuple(env.obs_terms), action_scale=env.action_scale, **settings)


def _plain(x: Any) -> Any:
    if dataclasses.is_dataclass(x):  # a nested settings section (env.tracking)
        return {f.name: _plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def override_sections() -> list[str]:
    return list(SECTIONS) + list(SECTION_ALIASES)


def settable_fields(section: str) -> list[str]:
    """The fields `--set section.KEY=...` accepts (derived env fields excluded; the others are
    refused with their source when applied)."""
    sec = SECTION_ALIASES.get(section, section)
    return [f.name for f in dataclasses.fields(SECTIONS[sec]) if (sec, f.name) not in
            (("env", "domain_rand"), ("env", "stiffness"))]


def _check_keys(d: Mapping, allowed, where: str) -> None:
    unknown = sorted(set(d) - set(allowed))
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; known: {sorted(allowed)}")


def from_dict(d: Mapping[str, Any]) -> TrainConfig:
    """A TrainConfig from its `to_dict()` form (config_version 2). Sections may be partial: the
    missing fields come from the named preset (or the class defaults for preset "custom")."""
    d = dict(d)
    if d.pop("config_version", None) != CONFIG_VERSION:
        raise ValueError(f"not a config_version {CONFIG_VERSION} training config (older files: train.config.from_legacy)")
    _check_keys(d, list(_TOP_FIELDS) + list(SECTIONS), "training config")
    base = PRESETS.get(d.get("preset", "custom"), TrainConfig()).to_dict()
    for sec, cls in SECTIONS.items():
        given = dict(d.pop(sec, None) or {})
        _check_keys(given, [f.name for f in dataclasses.fields(cls) if (sec, f.name) not in DERIVED], f"section {sec}")
        base[sec].update(given)
    base.pop("config_version")
    base.update(d)
    # derived fields: the validators need values; __post_init__ derives them again from the same inputs
    base["env"] = {**base["env"], "domain_rand": base["domain_rand"], "stiffness": base["stiffness"]}
    try:
        env = pydantic.TypeAdapter(EnvConfig).validate_python(base["env"])
        base["actor"] = dataclasses.asdict(_derive_actor(base["actor"], env))
    except (pydantic.ValidationError, TypeError) as e:
        raise ValueError(f"invalid training config: {e}") from e
    try:
        return _ADAPTER.validate_python(base)
    except pydantic.ValidationError as e:
        raise ValueError(f"invalid training config: {e}") from e


def preset(name: str, **top) -> TrainConfig:
    """A preset with top-level fields (motion, algo, seed, stiffness) replaced, re-derived."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; use one of {list(PRESETS)}")
    return dataclasses.replace(PRESETS[name], **top)


def save_config(run_dir: str | Path, cfg: TrainConfig) -> Path:
    p = Path(run_dir) / "config.yaml"
    p.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    return p


def load_config(run_dir: str | Path) -> TrainConfig:
    """The run's TrainConfig from <run_dir>/config.yaml (either layout)."""
    p = Path(run_dir) / "config.yaml"
    if not p.is_file():
        raise FileNotFoundError(f"{p} not found: is {run_dir} a training run folder (runs/<motion>/<stamp>)?")
    d = yaml.safe_load(p.read_text()) or {}
    return from_dict(d) if "config_version" in d else from_legacy(d)


def from_legacy(old: Mapping[str, Any]) -> TrainConfig:
    """A TrainConfig from a config of the layout before config_version 2 (the committed
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
    cfg = from_dict({"config_version": CONFIG_VERSION, **d})
    for (sec, k), v in old_derived.items():
        now = getattr(getattr(cfg, sec), k)
        if (float(v) if isinstance(now, float) else v) != now:
            raise ValueError(f"legacy config: {sec}.{k}={v!r}, but it derives to {now!r} from {DERIVED[sec, k]}; "
                             "the trained actor and its export would disagree")
    return cfg


_ADAPTER = pydantic.TypeAdapter(TrainConfig)

PRESETS: dict[str, TrainConfig] = {
    # Fits a 2-core CPU: small batch, short horizon, small networks, a light bundle.
    # gamma 0.95 (not the published 0.99): with 0.99 the terminal value was ~70 % of the actor
    # objective, the critic's fit was poor (loss ~40) and the actor drifted off the reference;
    # with 0.95 the critic loss is ~2.5 and reward, falls and tracking improve together (README).
    # Randomisation milder than DomainRandConfig's defaults (still wider than `make eval`'s):
    # with the defaults the untrained jump fell in nearly every training episode.
    "cpu": TrainConfig(
        preset="cpu",
        shac=SHACConfig(num_envs=32, horizon=16, iterations=800, gamma=0.95, actor_lr=3e-4, critic_lr=1e-3,
                        critic_hidden=(128, 128), critic_iterations=8, critic_minibatches=4, init_log_std=-1.9),
        actor=ActorConfig.for_terms(hidden=(128, 64)),
        bcg=BCGConfig(branches=4, horizon=2, max_bundled_envs=4),
        domain_rand=DR.CPU,
    ),
    # Paper scale (the BCG paper's published settings): 64 envs x 32 steps x 3000 iterations, B = 10, H = 2.
    "gpu": TrainConfig(
        preset="gpu",
        shac=SHACConfig(num_envs=64, horizon=32, iterations=3000),
        actor=ActorConfig.for_terms(hidden=(512, 256, 128)),
        bcg=BCGConfig(branches=10, horizon=2, max_bundled_envs=32),
    ),
}
