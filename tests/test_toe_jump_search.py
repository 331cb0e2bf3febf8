"""experiments/toe_jump_search.py: the committed motions/jump.yaml is what its parameterisation writes, the
figures it scores are the library's reference's, and what it was searched for holds (the reference's:
a flight of >= 0.34 s to a >= 0.92 m pelvis apex whose upper body needs <= 0.76 of its torque limits, against
jump_swing's 1.58 / 1.54)."""
import numpy as np
import pytest
import yaml

from experiments import toe_jump_search as T
from motions.library import MOTIONS_DIR, load_motion_file
from motions.momentum import flight_consistency
from motions.torques import upper_torque_ratio


def test_committed_keyframes_round_trip_and_score_as_the_library_builds_them(tmp_path):
    raw = yaml.safe_load((MOTIONS_DIR / "jump.yaml").read_text())
    p = T.params_of(raw)
    assert T.file_of(p)["keyframes"] == raw["keyframes"]
    fig = T.figures(raw)
    m = load_motion_file(MOTIONS_DIR / "jump.yaml")
    (f,) = flight_consistency(m)
    tau = upper_torque_ratio(m)
    assert fig["free_pitch_drift_deg"] == pytest.approx(f["free_pitch_drift_deg"], abs=1e-9)
    assert fig["waist_torque_ratio"] == tau["waist"] and fig["arms_torque_ratio"] == tau["arms"]
    assert fig["flight_s"] >= T.FLIGHT_MIN - 1e-9 and m.ref_height.max() >= T.APEX_MIN - 0.005
    assert max(tau["waist"], tau["arms"]) < 0.77 and abs(f["free_pitch_drift_deg"]) < 2.5
    assert abs(f["com_dvxy"]) < 0.01 and m.ref_base_pos[-1, 0] == pytest.approx(0.0, abs=1e-9)  # lands where it stood
    assert fig["apex_foot_clearance_m"] >= 0.20


def test_draft_is_accepted_and_a_refused_one_costs_the_penalty():
    draft = np.array([T.DRAFT[n] for n in T.NAMES])
    assert T.figures(T.file_of(draft)) is not None
    i = T.NAMES.index("takeoff_heel")  # flat feet at the draft's 0.80 m take-off: beyond the straight leg
    assert T.figures(T.file_of(np.r_[draft[:i], 0.0, draft[i + 1:]])) is None
    assert T.cost(None) == 1e6
