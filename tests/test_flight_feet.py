"""`flight_feet: follow` (motions.reference): in the air the legs keep their take-off shape (soles rise with the
pelvis above the take-off -> touch-down line, g T^2 / 8 at mid-flight) plus an s^3 (1 - s)^3 tuck of the rest
of the clearance; and the jump built on it, `jump_swing`, whose angular momentum about the COM is consistent."""
import numpy as np
import pytest
import yaml

from motions.library import MOTIONS_DIR, load_motion_file
from motions.momentum import flight_consistency
from motions.motion import MotionError
from motions.schema import follow_rise
from robots import g1
from robots.physics import GRAVITY

LEG = [6 * s + j for s in (0, 1) for j in (0, 3, 4)]  # hip pitch, knee, ankle pitch: the IK joints


def _jump(tmp_path, name="hop", same_offset=False, **flight):
    """motions/hop.yaml (the hop: 0.2 s flight from t = 1.9 s, take-off = touch-down height) with the flight
    keyframe's fields replaced; same_offset: the touch-down foot_x keeps the take-off's feet-to-pelvis x offset."""
    raw = yaml.safe_load((MOTIONS_DIR / "hop.yaml").read_text())
    k = raw["keyframes"]
    i = next(i for i, kf in enumerate(k) if kf.get("phase") == "flight")
    k[i] = {**k[i], **flight}
    if same_offset:
        k[i + 1] = {**k[i + 1], "foot_x": k[i].get("foot_x", 0.0) - k[i]["pelvis_x"] + k[i + 1]["pelvis_x"]}
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p, k[i], k[i + 1]


def test_follow_rise_is_the_ballistic_sagitta():
    T = 0.36  # h(T/2) - line = v0 T/2 - g T^2/8 - dh/2 with v0 = dh/T + g T/2
    assert follow_rise(T) == pytest.approx(GRAVITY * T**2 / 8) == pytest.approx(0.158922)


def test_follow_without_tuck_holds_the_legs_still_in_the_air(tmp_path):
    raw = yaml.safe_load((MOTIONS_DIR / "hop.yaml").read_text())
    kf = next(kf for kf in raw["keyframes"] if kf.get("phase") == "flight")
    T = next(k["t"] for k in raw["keyframes"] if k["t"] > kf["t"]) - kf["t"]
    p, kf, k1 = _jump(tmp_path, same_offset=True, apex_foot_clearance=round(follow_rise(T), 12), flight_feet="follow")
    m = load_motion_file(p)
    (t0, t1), = m.flight_windows
    fl = np.flatnonzero(m.flight_mask)
    # the soles rise by exactly the pelvis's height above the take-off -> touch-down line
    line = np.interp(m.times[fl], [t0, t1], [kf["pelvis_height"], k1["pelvis_height"]])
    np.testing.assert_allclose(m.ref_foot_height[fl, 0], m.ref_height[fl] - line, atol=1e-12)
    mid = int(np.argmin(np.abs(m.times[fl] - (t0 + t1) / 2)))
    assert m.times[fl[mid]] == pytest.approx((t0 + t1) / 2)  # the hop's apex lies on the grid
    assert m.ref_foot_height[fl[mid], 0] == pytest.approx(follow_rise(T), abs=1e-12)
    # the legs' joints hold their take-off values through the flight (the default profile moves them 10 cm)
    assert np.ptp(m.ref_q[fl][:, LEG], axis=0).max() < 1e-9
    m2 = load_motion_file(_jump(tmp_path, same_offset=True, apex_foot_clearance=round(follow_rise(T), 12))[0])
    assert np.ptp(m2.ref_q[fl][:, LEG], axis=0).max() > 0.05


def test_follow_tuck_is_the_rest_of_the_clearance(tmp_path):
    c = 0.12
    p, kf, k1 = _jump(tmp_path, apex_foot_clearance=c, flight_feet="follow")
    m = load_motion_file(p)
    t0, t1 = m.flight_windows[0]
    T = t1 - t0
    fl = np.flatnonzero(m.flight_mask)
    s = (m.times[fl] - t0) / T
    line = kf["pelvis_height"] + (k1["pelvis_height"] - kf["pelvis_height"]) * s
    tuck = m.ref_foot_height[fl, 0] - (m.ref_height[fl] - line)
    np.testing.assert_allclose(tuck, (c - GRAVITY * T**2 / 8) * 64 * s**3 * (1 - s) ** 3, atol=1e-12)
    # the default (tuck) profile is the whole clearance on the same s^3 (1 - s)^3
    p2, _, _ = _jump(tmp_path, apex_foot_clearance=c)
    m2 = load_motion_file(p2)
    np.testing.assert_allclose(m2.ref_foot_height[fl, 0], c * 64 * s**3 * (1 - s) ** 3, atol=1e-12)


def test_follow_in_com_mode_moves_the_soles_with_the_solved_pelvis():
    """jump_swing (ballistic: com): the pelvis is re-solved, and the soles move with it: over the flight, the
    leg joints change only by the 3 cm tuck (a tuck-free variant would hold them)."""
    m = load_motion_file(MOTIONS_DIR / "jump_swing.yaml")
    fl = np.flatnonzero(m.flight_mask)
    t0, t1 = m.flight_windows[0]
    s = (m.times[fl] - t0) / (t1 - t0)
    rel = m.ref_foot_pos[fl, 0, 2] - m.ref_height[fl]  # ankle height relative to the pelvis
    tuck = (0.19 - follow_rise(t1 - t0)) * 64 * s**3 * (1 - s) ** 3
    assert np.ptp(rel - tuck) < 2e-3, np.ptp(rel - tuck)  # the legs' length is the take-off one, less the tuck
    assert m.ref_foot_height[fl, 0].min() > 0


def test_jump_swing_flight_is_consistent_in_both_momenta():
    (f,) = flight_consistency(load_motion_file(MOTIONS_DIR / "jump_swing.yaml"))
    assert f["com_dvxy"] < 0.01 and abs(f["com_az_mean"] + GRAVITY) < 0.05, f
    assert abs(f["free_pitch_drift_deg"]) < 2.5, f  # jump_ballistic (legs tucking, upper body still): +32 deg
    (g,) = flight_consistency(load_motion_file(MOTIONS_DIR / "jump_ballistic.yaml"))
    assert g["free_pitch_drift_deg"] > 20.0, g


def test_follow_needs_the_clearance_the_flight_gives(tmp_path):
    p, kf, _ = _jump(tmp_path, apex_foot_clearance=0.02, flight_feet="follow")  # the hop's sagitta is 0.049 m
    with pytest.raises(MotionError, match=r"hop\.yaml: keyframes\[\d\]\.apex_foot_clearance: 0\.02 m is below what "
                                          r"flight_feet: follow gives without a tuck \(0\.049 m"):
        load_motion_file(p)


def test_flight_feet_only_in_a_flight_and_only_known_values(tmp_path):
    raw = yaml.safe_load((MOTIONS_DIR / "hop.yaml").read_text())
    p = tmp_path / "hop.yaml"
    k = raw["keyframes"]
    p.write_text(yaml.safe_dump({**raw, "keyframes": [{**k[0], "flight_feet": "follow"}] + k[1:]}))
    with pytest.raises(MotionError, match=r"keyframes\[0\]\.flight_feet: only allowed with phase: flight"):
        load_motion_file(p)
    i = next(i for i, kf in enumerate(k) if kf.get("phase") == "flight")
    k2 = list(k)
    k2[i] = {**k[i], "flight_feet": "drag"}
    p.write_text(yaml.safe_dump({**raw, "keyframes": k2}))
    with pytest.raises(MotionError, match=rf"keyframes\[{i}\]\.flight_feet"):
        load_motion_file(p)


def test_default_joint_pos_unchanged_by_follow(tmp_path):
    p, _, _ = _jump(tmp_path, apex_foot_clearance=0.1, flight_feet="follow")
    m = load_motion_file(p)
    np.testing.assert_allclose(m.ref_q[0], g1.DEFAULT_JOINT_POS, atol=1e-9)
    assert np.all(np.abs(m.ref_dq[:, LEG]) <= g1.VELOCITY_LIMIT[LEG])
