"""Action -> joint position target, shared by training and deploy (numpy or jax via xp)."""
from __future__ import annotations

import numpy as np

from robots import g1

ACTION_SCALE = 0.25  # rad per unit action, the default for new policies


def action_to_joint_target(action, action_scale=ACTION_SCALE, default_joint_pos=g1.DEFAULT_JOINT_POS, xp=np):
    return xp.asarray(default_joint_pos, dtype=action.dtype) + xp.asarray(action_scale, dtype=action.dtype) * action
