"""G1Env with the seed's sigmoid contact (env.contact = "sigmoid"): configuration errors, a standing
rollout in the real env step (finite, on its feet, forces and penetration where the law puts them),
and kappa as a per-env parameter (one compile serves every k)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from motions import hold_pose_motion
from robots import g1
from train import contact as C
from train import domain_rand as DR
from train.config import preset
from train.env import EnvConfig, G1Env

pytestmark = pytest.mark.jax  # every test here compiles JAX programs


def sigmoid_cfg(**kw) -> EnvConfig:
    return EnvConfig(domain_rand=DR.DomainRandConfig.off(), obs_noise=0.0, contact="sigmoid", substeps=6, **kw)


def test_configuration_errors_name_the_limit():
    with pytest.raises(ValueError, match=r"substeps >= 6"):
        EnvConfig(contact="sigmoid")  # 200 Hz: the sigmoid contact is unstable on the G1
    with pytest.raises(ValueError, match="kappa"):
        sigmoid_cfg(kappa=0.0)
    with pytest.raises(ValueError, match="unknown env.contact"):
        EnvConfig(contact="soft")
    # the choice and k travel in the run's config (selectable with --set)
    cfg = preset("cpu").with_overrides({"env": {"contact": "sigmoid", "kappa": 100.0, "substeps": 6}})
    assert (cfg.env.contact, cfg.env.kappa, cfg.env.substeps) == ("sigmoid", 100.0, 6)
    assert cfg.to_dict()["env"]["contact"] == "sigmoid"


@pytest.fixture(scope="module")
def env():
    return G1Env(sigmoid_cfg(), hold_pose_motion(30, "stand"))


def test_standing_rollout_with_the_sigmoid_contact(env):
    """Zero residual = the default pose held by PD: 0.4 s on the sigmoid contact at k = 300 and k = 100
    from one compiled step (kappa is an EnvParams leaf). At k = 300 the feet carry the robot within
    about +-2 mm of touch (rest distance +0.54 mm per the law at 41 N per sphere); at k = 100 it rides
    higher (law: +14.8 mm); MJX's own foot contact is off."""
    assert env.sphere_efc_rows is None and env.mj_model.geom_contype[env.sphere_geoms].sum() == 0
    step = jax.jit(jax.vmap(env.step))

    def start(keys):
        s = jax.vmap(env.reset)(keys)
        return s.replace(dr=s.dr.replace(contact_kappa=jnp.asarray([300.0, 100.0], s.dr.contact_kappa.dtype)))

    # jitted: one compile instead of op-by-op dispatch, and device-committed outputs as the step returns them,
    # so the step's first compile serves every later call
    s = jax.jit(start)(jax.random.split(jax.random.PRNGKey(0), 2))
    a = jnp.zeros((2, g1.NUM_MOTORS))
    heights = []
    for _ in range(20):
        s = step(s, a)
        bottom = np.asarray(s.data.geom_xpos[:, env.sphere_geoms, 2]) - env.sphere_radius
        heights.append(bottom.min(axis=1))
    assert np.all(np.isfinite(np.asarray(s.data.qpos)))
    assert not bool(s.done.any())
    force = np.asarray(s.contact_force)  # (2, 8) N
    assert 150 < force[0].sum() < 700  # ~ body weight (327 N) carried by the spheres, give or take the settling
    h = np.asarray(heights)[-5:]  # lowest sphere bottom above the floor, m
    assert np.all(np.abs(h[:, 0]) < 0.004), h[:, 0]
    assert np.all(h[:, 1] > h[:, 0] + 0.003), h  # softer k: the feet ride higher on the contact
    assert C.rest_distance(41.0, env.cfg.contact_params()) == pytest.approx(5.4e-4, abs=1e-4)
