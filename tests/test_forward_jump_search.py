"""experiments/forward_jump_search.py: its parameterisation round-trips through a motion file, and the figures it
scores are those of the library's reference built from that file."""
import numpy as np
import pytest
import yaml

from experiments import forward_jump_search as F
from motions.library import load_motion_file
from motions.momentum import flight_consistency


def test_draft_round_trips_and_its_figures_are_the_references(tmp_path):
    raw = F.file_of(F.DRAFT, "draft")
    p = tmp_path / "forward_jump.yaml"
    p.write_text(yaml.safe_dump(raw, sort_keys=False))
    np.testing.assert_allclose(F.params_of(yaml.safe_load(p.read_text())), F.DRAFT, atol=1e-12)
    fig = F.figures(raw)
    m = load_motion_file(p)
    (f,) = flight_consistency(m)
    assert fig["free_pitch_drift_deg"] == pytest.approx(f["free_pitch_drift_deg"], abs=1e-9)
    assert fig["travel_m"] == pytest.approx(m.ref_base_pos[-1, 0] - m.ref_base_pos[0, 0], abs=1e-12)
    assert fig["flight_s"] == pytest.approx(m.flight_windows[0][1] - m.flight_windows[0][0], abs=1e-12)
    assert abs(f["com_dvxy"]) < 0.01 and np.max(m.ref_foot_height[m.flight_mask]) >= F.CLEARANCE - 1e-9
    assert F.cost(None) == 1e6 and F.figures(F.file_of(np.r_[0.30, F.DRAFT[1:]])) is None  # a refused crouch


def test_toe_start_and_the_torque_term():
    """`--start toe` is motions/jump.yaml sent forward (the library accepts it), and --tau-max prices the upper
    body's inverse-dynamics torque above the bar: zero below it, 1000 x the square of the excess above."""
    fig = F.figures(F.file_of(F.start_from_toe_jump()))
    assert fig is not None and fig["travel_m"] > 0.3
    tau = max(fig["waist_torque_ratio"], fig["arms_torque_ratio"])
    assert F.cost(fig, tau + 0.01) == pytest.approx(F.cost(fig))
    assert F.cost(fig, tau - 0.1) == pytest.approx(F.cost(fig) + 1000 * 0.1 ** 2)



def test_committed_forward_toe_jump_is_the_searched_one():
    """motions/forward_jump_toes.yaml holds the keyframes of results/forward_jump_search_tau.json's best and what the
    JSON says of them (travel, torque)."""
    import json
    from pathlib import Path

    from motions.library import MOTIONS_DIR
    from motions.torques import upper_torque_ratio

    best = json.loads((Path(__file__).parents[1] / "results" / "forward_jump_search_tau.json").read_text())
    raw = yaml.safe_load((MOTIONS_DIR / "forward_jump_toes.yaml").read_text())
    np.testing.assert_allclose(F.params_of(raw), [best["best_keyframes"][n] for n in F.NAMES], atol=1e-9)
    m = load_motion_file(MOTIONS_DIR / "forward_jump_toes.yaml")
    tau = upper_torque_ratio(m)
    assert m.ref_base_pos[-1, 0] - m.ref_base_pos[0, 0] == pytest.approx(best["best"]["travel_m"], abs=1e-4)
    assert tau["waist"] == pytest.approx(best["best"]["waist_torque_ratio"], abs=1e-4) and tau["arms"] < 0.75
