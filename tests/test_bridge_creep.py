"""Bridge contact creep: a standing robot under +-T Nm hip-yaw torques on top of the PD
holding the default pose (sim.creep on plant.robot.Plant, the bridge's physics). With the chosen
contact (robots.model.BRIDGE_CONTACT["noslip"]) the feet must not slide or turn; the bridge's default
contact creeps (so the bound can fail). Figures: results/bridge_creep.json (`python -m sim.creep`)."""
import pytest

from robots.model import BridgeModelConfig, build_bridge_model, resolve_contact
from sim.creep import creep

SLIDE_MAX_MPS = 0.5e-3
FOOT_YAW_MAX = 0.5e-3  # rad/s


def test_noslip_contact_bounds_creep():
    r = creep(BridgeModelConfig(contact="noslip"), seconds=4.0, torque_nm=5.0)
    assert r["standing"]
    assert r["slide_mps"] < SLIDE_MAX_MPS, r
    assert max(abs(x) for x in r["foot_yaw_rate_rad_s"]) < FOOT_YAW_MAX, r
    assert abs(r["yaw_rate_rad_s"]) < FOOT_YAW_MAX, r
    r10 = creep(BridgeModelConfig(contact="noslip"), seconds=4.0, torque_nm=10.0)
    assert r10["standing"] and r10["slide_mps"] < 2 * SLIDE_MAX_MPS, r10


def test_mjcf_contact_creeps():
    r = creep(BridgeModelConfig(contact="mjcf"), seconds=4.0, torque_nm=5.0)
    assert r["slide_mps"] > 4 * SLIDE_MAX_MPS, r  # measured 5.9 mm/s over 10 s
    r10 = creep(BridgeModelConfig(contact="mjcf"), seconds=10.0, torque_nm=10.0)
    assert not r10["standing"] or max(abs(x) for x in r10["foot_yaw_rate_rad_s"]) > 100 * FOOT_YAW_MAX, r10


def test_contact_options_and_the_noslip_default():
    m0, m1 = build_bridge_model(), build_bridge_model(BridgeModelConfig(contact="mjcf"))
    assert m0.opt.noslip_iterations == 4 and m1.opt.noslip_iterations == 0 and m0.opt.cone == m1.opt.cone == 0
    m = build_bridge_model(BridgeModelConfig(contact="noslip_elliptic", foot_condim=6))
    assert m.opt.noslip_iterations == 10 and m.opt.cone == 1 and 6 in set(m.geom_condim)
    assert resolve_contact(BridgeModelConfig(contact="noslip", noslip_iterations=7)).noslip_iterations == 7  # explicit wins
    with pytest.raises(ValueError, match="unknown bridge contact"):
        build_bridge_model(BridgeModelConfig(contact="rubber"))
    with pytest.raises(ValueError, match="foot_condim 5"):
        build_bridge_model(BridgeModelConfig(foot_condim=5))
