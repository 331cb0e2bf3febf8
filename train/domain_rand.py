"""Per-environment physics parameters and their randomisation.

Every environment carries an `EnvParams` pytree in its state: contact friction, contact
stiffness (solref time constant), link-mass scales, PD gain scales, action latency and push
settings. `G1Env.step` builds that environment's MJX model from it (`apply_to_model`), so one
compiled step serves every randomisation and every contact stiffness (the gradient benchmark
sweeps stiffness without recompiling). With `DomainRandConfig(enabled=False)` the parameters
are the nominal ones (friction from the model, scales 1, no latency, no pushes).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from mujoco import mjx

from robots import g1
from robots.randomization import TRAINING, TRAINING_CPU, ParamRanges


@dataclasses.dataclass(frozen=True)
class DomainRandConfig:
    """Ranges are uniform [lo, hi]; `enabled=False` switches everything off at once.

    Each item is also off-able alone: a range (1, 1) / (f, f), latency prob 0, push prob 0.
    The four physics ranges default to robots.randomization.TRAINING (defined there once).
    """

    enabled: bool = True
    friction: tuple[float, float] = TRAINING.friction  # foot-floor sliding friction
    mass_scale: tuple[float, float] = TRAINING.mass_scale  # per link, mass and inertia scaled together
    kp_scale: tuple[float, float] = TRAINING.kp_scale  # per motor
    kd_scale: tuple[float, float] = TRAINING.kd_scale  # per motor
    action_latency_prob: float = 0.2  # probability an env applies the previous action (1 control step late)
    push_prob: float = 0.01  # per control step (0.01 at 50 Hz: one push every ~2 s)
    push_vel: float = 0.3  # m/s, max horizontal velocity kick of the pelvis
    # Per-motor centre of the kp scale (29 values, e.g. a calibration's kp_scale): the sampled
    # scale is centre x U(kp_scale) and the nominal (randomisation off) is the centre. None: 1.
    kp_centre: tuple[float, ...] | None = None

    def __post_init__(self):
        if self.kp_centre is not None:
            c = np.asarray(self.kp_centre, float)
            if c.shape != (g1.NUM_MOTORS,) or not np.all(np.isfinite(c)) or np.any(c <= 0.2) or np.any(c >= 5.0):
                raise ValueError(f"domain_rand.kp_centre: expected {g1.NUM_MOTORS} finite scales in (0.2, 5), "
                                 f"got {self.kp_centre!r}")
        if not 0.0 <= self.action_latency_prob <= 1.0:
            raise ValueError(f"domain_rand.action_latency_prob {self.action_latency_prob} is not a probability in [0, 1]")

    @classmethod
    def off(cls) -> "DomainRandConfig":
        return cls(enabled=False)

    @classmethod
    def from_ranges(cls, ranges: ParamRanges, **kw) -> "DomainRandConfig":
        """The physics ranges of a robots.randomization set, plus latency/push settings in kw."""
        return cls(**{f.name: getattr(ranges, f.name) for f in dataclasses.fields(ranges)}, **kw)


# The cpu preset's randomisation: robots.randomization.TRAINING_CPU, rarer latency, softer pushes.
CPU = DomainRandConfig.from_ranges(TRAINING_CPU, action_latency_prob=0.1, push_vel=0.2)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class EnvParams:
    """Physics parameters of one environment (leaves may carry a leading env axis)."""

    friction: jax.Array  # () sliding friction of foot and floor geoms
    contact_timeconst: jax.Array  # () solref time constant of foot-floor contact, s ("mjx" contact)
    contact_kappa: jax.Array  # () 1/m, sigmoid sharpness k of the "sigmoid" contact (train/contact.py)
    mass_scale: jax.Array  # (nbody,)
    kp_scale: jax.Array  # (29,)
    kd_scale: jax.Array  # (29,)
    latency: jax.Array  # () bool: apply the previous action (1 control step late)
    push_prob: jax.Array  # () per control step
    push_vel: jax.Array  # () m/s

    def replace(self, **kw) -> "EnvParams":
        return dataclasses.replace(self, **kw)


def nominal_params(nbody: int, friction: float, timeconst: float, kappa: float = 300.0,
                   kp_centre: tuple[float, ...] | None = None) -> EnvParams:
    f = jnp.asarray(0.0).dtype  # float32, or float64 under jax_enable_x64
    return EnvParams(
        friction=jnp.asarray(friction, f),
        contact_timeconst=jnp.asarray(timeconst, f),
        contact_kappa=jnp.asarray(kappa, f),
        mass_scale=jnp.ones(nbody, f),
        kp_scale=jnp.ones(g1.NUM_MOTORS, f) if kp_centre is None else jnp.asarray(kp_centre, f),
        kd_scale=jnp.ones(g1.NUM_MOTORS, f),
        latency=jnp.asarray(False),
        push_prob=jnp.asarray(0.0, f),
        push_vel=jnp.asarray(0.0, f),
    )


def sample_params(rng: jax.Array, cfg: DomainRandConfig, nominal: EnvParams) -> EnvParams:
    """One environment's parameters; the nominal ones when randomisation is disabled."""
    if not cfg.enabled:
        return nominal
    k = jax.random.split(rng, 5)
    dt = nominal.friction.dtype

    def u(key, rng_range, shape=()):
        lo, hi = rng_range
        return jax.random.uniform(key, shape, dt, lo, hi)

    return nominal.replace(
        friction=u(k[0], cfg.friction),
        mass_scale=u(k[1], cfg.mass_scale, nominal.mass_scale.shape),
        kp_scale=nominal.kp_scale * u(k[2], cfg.kp_scale, (g1.NUM_MOTORS,)),
        kd_scale=u(k[3], cfg.kd_scale, (g1.NUM_MOTORS,)),
        latency=jax.random.bernoulli(k[4], cfg.action_latency_prob),
        push_prob=jnp.asarray(cfg.push_prob, dt),
        push_vel=jnp.asarray(cfg.push_vel, dt),
    )


def apply_to_model(mx: mjx.Model, p: EnvParams, contact_geoms: np.ndarray) -> mjx.Model:
    """The model of one environment: friction and stiffness of the contact geoms, link masses."""
    friction = mx.geom_friction.at[contact_geoms, 0].set(p.friction)
    solref = mx.geom_solref.at[contact_geoms, 0].set(p.contact_timeconst)
    return mx.replace(
        geom_friction=friction,
        geom_solref=solref,
        body_mass=mx.body_mass * p.mass_scale,
        body_inertia=mx.body_inertia * p.mass_scale[:, None],
    )


def maybe_push(rng: jax.Array, qvel: jax.Array, p: EnvParams) -> jax.Array:
    """With probability p.push_prob add a random horizontal pelvis velocity (|v| <= push_vel)."""
    k1, k2 = jax.random.split(rng)
    push = jax.random.bernoulli(k1, p.push_prob)
    dv = jax.random.uniform(k2, (2,), qvel.dtype, -1.0, 1.0) * p.push_vel
    return qvel.at[0:2].add(jnp.where(push, dv, 0.0))
