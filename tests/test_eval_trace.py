"""eval.trace: the committed standing policy on C MuJoCo carries its weight on both feet; the COM margin against
a hand-computed rectangle of soles; refused starts."""
import numpy as np
import pytest

from eval.config import EvalError
from eval.sim import EvalSim
from eval.trace import com_margin, main, roll_pitch_deg, trace
from policies.artifact import POLICY_ROOT
from robots.physics import GRAVITY

STAND = POLICY_ROOT / "stand"


def test_roll_pitch_of_hand_built_quaternions():
    c, s = np.cos(np.radians(10) / 2), np.sin(np.radians(10) / 2)
    assert np.allclose(roll_pitch_deg([c, s, 0, 0]), (10, 0), atol=1e-9)
    assert np.allclose(roll_pitch_deg([c, 0, s, 0]), (0, 10), atol=1e-9)


def test_standing_policy_carries_its_weight_on_both_feet():
    rows, fell = trace(STAND, seconds=1.0, every=10)
    assert fell is None and len(rows) == 5
    weight = float(EvalSim().m.body_subtreemass[0]) * GRAVITY
    last = rows[-1]
    assert sum(last["foot_force_n"]) == pytest.approx(weight, rel=0.05)  # at rest: the floor holds the robot
    assert min(last["foot_force_n"]) > 0.3 * weight  # on both feet
    assert abs(last["roll_deg"]) < 2 and abs(last["pitch_deg"]) < 5
    assert max(abs(h) for h in last["sole_height_m"]) < 0.003


def test_com_margin_is_the_distance_to_the_nearest_edge_of_the_soles_on_the_floor():
    """The home keyframe: both feet flat and side by side, their sole spheres' hull a rectangle; the COM's
    margin is its distance to the nearest of the four edges (by hand from the sphere centres; the heels' edge,
    8.4 cm behind the COM, is axis-aligned). Raised 1 cm (no sphere within 5 mm of the floor): NaN; the left
    foot's soles alone: the COM between the feet, 9 cm outside its inner edge."""
    import mujoco

    sim = EvalSim()
    m, d = sim.m, mujoco.MjData(sim.m)
    mujoco.mj_resetDataKeyframe(m, d, m.key("home").id)
    mujoco.mj_forward(m, d)
    ids = np.concatenate([np.atleast_1d(g) for g in sim.soles])
    xy, c = d.geom_xpos[ids, :2], d.subtree_com[0, :2]
    by_hand = min(c[0] - xy[:, 0].min(), xy[:, 0].max() - c[0], c[1] - xy[:, 1].min(), xy[:, 1].max() - c[1])
    assert by_hand > 0.02
    assert com_margin(m, d, sim.soles) == pytest.approx(by_hand, abs=1e-9)
    d.qpos[2] += 0.01
    mujoco.mj_forward(m, d)
    assert np.isnan(com_margin(m, d, sim.soles))
    d.qpos[2] -= 0.01
    mujoco.mj_forward(m, d)
    left = np.atleast_1d(sim.soles[0])
    assert -0.10 < com_margin(m, d, [left]) < -0.08


def test_a_start_frame_needs_a_tracking_policy(capsys):
    with pytest.raises(EvalError, match="tracking reference"):
        trace(STAND, start_frame=10)
    assert main([str(STAND), "--start-frame", "10"]) == 2
    assert "error:" in capsys.readouterr().err
