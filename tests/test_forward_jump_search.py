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



@pytest.mark.parametrize("motion, results, travel_min", [("forward_jump_toes", "forward_jump_search_tau", 0.40),
                                                         ("forward_jump", "forward_jump_search_far", 0.43)])
def test_committed_forward_jumps_are_the_searched_ones(motion, results, travel_min):
    """motions/<motion>.yaml holds the keyframes of results/<results>.json's best and what the JSON says of them
    (travel, torque)."""
    import json
    from pathlib import Path

    from motions.library import MOTIONS_DIR
    from motions.torques import upper_torque_ratio

    best = json.loads((Path(__file__).parents[1] / "results" / f"{results}.json").read_text())
    raw = yaml.safe_load((MOTIONS_DIR / f"{motion}.yaml").read_text())
    np.testing.assert_allclose(F.params_of(raw), [best["best_keyframes"][n] for n in F.NAMES], atol=1e-9)
    m = load_motion_file(MOTIONS_DIR / f"{motion}.yaml")
    tau = upper_torque_ratio(m)
    travel = m.ref_base_pos[-1, 0] - m.ref_base_pos[0, 0]
    assert travel == pytest.approx(best["best"]["travel_m"], abs=1e-4) and travel >= travel_min
    assert tau["waist"] == pytest.approx(best["best"]["waist_torque_ratio"], abs=1e-4) and tau["arms"] < 0.85


def test_set_names_a_number_within_its_bounds_and_the_travel_wall():
    """--set changes the named numbers only and refuses unknown names and values outside the bounds; the wall the
    far search steps across: forward_jump_toes with 3 cm more flight travel puts the ankle past its 50 deg limit
    during the push-off (the library refuses it), 1 cm more does not."""
    x = F.params_of(yaml.safe_load((F.MOTION.parent / "forward_jump_toes.yaml").read_text()))
    y = F.with_set(x, ["travel=0.26", "flight_s=0.3"])
    changed = np.flatnonzero(y != x)
    assert [F.NAMES[i] for i in changed] == ["flight_s", "travel"] and y[F.NAMES.index("travel")] == 0.26
    for bad, msg in (("travl=0.3", "NAME one of"), ("travel=0.9", r"travel must lie in \[0.25, 0.55\]"), ("travel", "NAME=VALUE")):
        with pytest.raises(SystemExit, match=msg):
            F.with_set(x, [bad])
    assert F.figures(F.file_of(F.with_set(x, ["travel=0.26"]))) is not None
    from motions import MotionError
    from motions.library import build_motion
    from motions.schema import parse_motion

    with pytest.raises(MotionError, match=r"ankle_pitch_joint = -0\.87\d rad at t = 1\.76 s is outside its limits"):
        build_motion(F.MOTION, *parse_motion(F.MOTION, F.file_of(F.with_set(x, ["travel=0.28"]))))
