"""eval.trace: the committed standing policy on C MuJoCo carries its weight on both feet; refused starts."""
import numpy as np
import pytest

from eval.config import EvalError
from eval.sim import EvalSim
from eval.trace import main, roll_pitch_deg, trace
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


def test_a_start_frame_needs_a_tracking_policy(capsys):
    with pytest.raises(EvalError, match="tracking reference"):
        trace(STAND, start_frame=10)
    assert main([str(STAND), "--start-frame", "10"]) == 2
    assert "error:" in capsys.readouterr().err
