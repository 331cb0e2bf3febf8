"""Imitation reward: DeepMimic-style exp(-k * err^2) tracking terms plus regularisers.

reward = sum_k w_k * term_k with w = motion.reward_weights (the keys of motions/*.yaml; a key
the motion leaves out takes DEFAULT_WEIGHTS; an unknown key is an error). The weight carries
the sign: tracking terms are in (0, 1] with positive weights, penalty terms are magnitudes
>= 0 with negative weights (as in motions/jump.yaml). Per step, no dt factor.

| key | term | units / scale |
|---|---|---|
| `joint_pos` | exp(-K_JOINT_POS * sum_j (q_j - q*_j)^2) | rad (0.1 rad on all 29 -> 0.56) |
| `joint_vel` | exp(-K_JOINT_VEL * sum_j (dq_j - dq*_j)^2) | rad/s |
| `base_height` | exp(-K_HEIGHT * (h - h*)^2) | m (10 cm -> e^-1) |
| `base_lin_vel` | exp(-K_LIN_VEL * norm(v - v*)^2) | pelvis velocity, world frame, m/s (0.5 m/s -> e^-1) |
| `base_orientation` | exp(-K_ORIENT * ((g_x - g*_x)^2 + (g_y - g*_y)^2)) | gravity in the pelvis frame vs in the reference's (g* = 0, 0, -1 for keyframe motions: 1 when level; an imported clip's pelvis roll and pitch otherwise) |
| `foot_height` | exp(-K_FOOT * sum_feet (f - f*)^2) | lowest sole-sphere bottom above the floor, m |
| `foot_contact` | mean over feet of [in contact == reference contact] | in (0, 1]; a step function (no gradient) |
| `alive` | 1 | per step |
| `fall` | 1 on the step the episode ends by a fall | use a negative weight |
| `action_rate` | sum (a_t - a_{t-1})^2 | raw policy output; negative weight |
| `residual` | sum (a_t - a*_t)^2, a*_t = (q*(t+1) - default) / action_scale | the policy's departure from the reference target, action units; negative weight (anchors a residual policy to the reference: without it first-order updates drifted 0.2 rad RMS off the reference in 600 iterations) |
| `torque` | mean over substeps of sum_j tau_j^2 | Nm^2; negative weight |

The reference row compared at a step is the one for the time reached after the step.
"""
from __future__ import annotations

from typing import Mapping, NamedTuple

import jax
import jax.numpy as jnp

K_JOINT_POS = 2.0  # DeepMimic pose term
K_JOINT_VEL = 0.1  # DeepMimic velocity term
K_HEIGHT = 100.0
K_LIN_VEL = 4.0
K_ORIENT = 10.0  # 0.3 rad tilt -> ~e^-0.87
K_FOOT = 100.0  # 10 cm on one foot -> e^-1
CONTACT_FORCE = 1.0  # N: a foot with a sphere above this is in contact

DEFAULT_WEIGHTS: dict[str, float] = {
    "joint_pos": 1.0,
    "joint_vel": 0.1,
    "base_height": 1.0,
    "base_lin_vel": 0.5,
    "base_orientation": 0.5,
    "foot_height": 1.0,
    "foot_contact": 0.5,
    "alive": 0.5,
    "fall": -10.0,
    "action_rate": -0.01,
    "residual": 0.0,
    "torque": -1.0e-5,
}
TERMS = tuple(DEFAULT_WEIGHTS)


class RewardInputs(NamedTuple):
    q: jax.Array  # (29,)
    ref_q: jax.Array  # (29,)
    dq: jax.Array  # (29,)
    ref_dq: jax.Array  # (29,)
    base_height: jax.Array  # ()
    ref_height: jax.Array  # ()
    base_lin_vel: jax.Array  # (3,) world
    ref_base_lin_vel: jax.Array  # (3,) world
    gravity: jax.Array  # (3,) projected gravity (pelvis frame)
    ref_gravity: jax.Array  # (3,) projected gravity in the reference's pelvis frame ((0, 0, -1) when level)
    foot_height: jax.Array  # (2,)
    ref_foot_height: jax.Array  # (2,)
    foot_contact: jax.Array  # (2,) bool
    ref_contact: jax.Array  # (2,) bool
    fell: jax.Array  # () bool
    action: jax.Array  # (29,)
    last_action: jax.Array  # (29,)
    ref_action: jax.Array  # (29,) the action that commands exactly the reference target
    torque_sq: jax.Array  # () mean over substeps of sum tau^2


def resolve_weights(weights: Mapping[str, float] | None) -> dict[str, float]:
    """Defaults overridden by `weights`; unknown keys raise with the list of known ones."""
    weights = dict(weights or {})
    unknown = sorted(set(weights) - set(TERMS))
    if unknown:
        raise KeyError(f"unknown reward terms {unknown}; known terms: {list(TERMS)} (see train/rewards.py)")
    return {**DEFAULT_WEIGHTS, **{k: float(v) for k, v in weights.items()}}


def reward_terms(x: RewardInputs) -> dict[str, jax.Array]:
    f = x.base_height.dtype
    return {
        "joint_pos": jnp.exp(-K_JOINT_POS * jnp.sum((x.q - x.ref_q) ** 2)),
        "joint_vel": jnp.exp(-K_JOINT_VEL * jnp.sum((x.dq - x.ref_dq) ** 2)),
        "base_height": jnp.exp(-K_HEIGHT * (x.base_height - x.ref_height) ** 2),
        "base_lin_vel": jnp.exp(-K_LIN_VEL * jnp.sum((x.base_lin_vel - x.ref_base_lin_vel) ** 2)),
        "base_orientation": jnp.exp(-K_ORIENT * jnp.sum((x.gravity[:2] - x.ref_gravity[:2]) ** 2)),
        "foot_height": jnp.exp(-K_FOOT * jnp.sum((x.foot_height - x.ref_foot_height) ** 2)),
        "foot_contact": jnp.mean((x.foot_contact == x.ref_contact).astype(f)),
        "alive": jnp.ones_like(x.base_height),
        "fall": x.fell.astype(f),
        "action_rate": jnp.sum((x.action - x.last_action) ** 2),
        "residual": jnp.sum((x.action - x.ref_action) ** 2),
        "torque": x.torque_sq,
    }


def total_reward(terms: Mapping[str, jax.Array], weights: Mapping[str, float]) -> jax.Array:
    return sum(weights[k] * terms[k] for k in TERMS)
