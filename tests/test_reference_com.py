"""`ballistic: com` (motions.reference): the pelvis x/z solved so the whole-robot centre of mass flies
ballistically, joined C1/C2 to quintic push-off and landing COM profiles; the default stays as it was (1e-12)."""
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import yaml

import motions.reference as R
from motions.clips import sole_heights_and_ankles
from motions.library import MOTIONS_DIR, load_motion_file
from motions.momentum import com_trajectory, flight_consistency
from motions.motion import MotionError
from motions.schema import parse_motion
from robots.physics import GRAVITY

ARRAYS = ("ref_q", "ref_height", "ref_foot_height", "ref_dq", "ref_base_pos", "ref_base_lin_vel", "ref_foot_pos",
          "contact", "flight_mask")
# the default (ballistic: pelvis) references as the builder makes them without `ballistic: com`, `pelvis_pitch` or
# `heel_lift`: tests/data/default_references.npz, "<motion>/<array>". Written by the builder
# whose sha256 of these arrays matched, on the machine of the last CI run, the ones recorded before `ballistic: com`
# existed; on this session's machine (numpy's X86_V3 paths) the same code gives other bytes, so a byte-for-byte
# hash is a check of the CPU: the check is to 1e-12 (rad, m, m/s)
DEFAULT_REFERENCES = Path(__file__).parent / "data" / "default_references.npz"
DEFAULT_MOTIONS = ("hop_forward", "hop", "jump_high", "squat")
DVXY_MAX = 0.01  # m/s: COM horizontal velocity change over the flight
AZ_TOL = 0.05  # m/s^2: |mean COM vertical acceleration in flight + g| (flight_consistency's stencil reaches the edges)


@pytest.fixture(scope="module")
def jb():
    m = load_motion_file(MOTIONS_DIR / "jump_ballistic.yaml")
    return m, com_trajectory(m)


@pytest.mark.parametrize("name", DEFAULT_MOTIONS)
def test_default_references_are_unchanged(name):
    m = load_motion_file(MOTIONS_DIR / f"{name}.yaml")
    with np.load(DEFAULT_REFERENCES) as ref:
        for k in ARRAYS:
            want = ref[f"{name}/{k}"]
            got = np.asarray(getattr(m, k))
            assert got.shape == want.shape and got.dtype == want.dtype, k
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12, err_msg=f"{name}.{k}")


def test_explicit_pelvis_equals_the_default():
    path = MOTIONS_DIR / "jump_high.yaml"
    raw = yaml.safe_load(path.read_text())
    meta, keys = parse_motion(path, raw)
    meta2, keys2 = parse_motion(path, {**raw, "ballistic": "pelvis"})
    assert meta.ballistic == meta2.ballistic == "pelvis"
    a, b = R.build_motion(path, meta, keys), R.build_motion(path, meta2, keys2)
    for k in ARRAYS:
        assert np.asarray(getattr(a, k)).tobytes() == np.asarray(getattr(b, k)).tobytes(), k


def test_ballistic_com_flight_is_consistent_and_jump_high_is_not(jb):
    m, com = jb
    (f,) = flight_consistency(m, com)
    assert f["com_dvxy"] < DVXY_MAX, f
    assert abs(f["com_az_mean"] + GRAVITY) < AZ_TOL, f
    (t0, t1), = m.flight_windows
    keys = parse_motion(MOTIONS_DIR / "jump_ballistic.yaml",
                        yaml.safe_load((MOTIONS_DIR / "jump_ballistic.yaml").read_text()))[1]
    k0, k1 = next((k, keys[i + 1]) for i, k in enumerate(keys) if k.flight)
    assert f["com_vxy_takeoff"][0] == pytest.approx((k1.x - k0.x) / (t1 - t0), abs=2e-3)  # the planned velocity
    (g,) = flight_consistency(load_motion_file(MOTIONS_DIR / "jump_high.yaml"))  # the same bounds fail without it
    assert g["com_dvxy"] > DVXY_MAX and abs(g["com_az_mean"] + GRAVITY) > AZ_TOL, g


def test_com_is_exactly_ballistic_on_the_flight_frames(jb):
    m, com = jb
    idx = np.flatnonzero(m.flight_mask)
    c = com[idx]
    assert np.ptp(np.diff(c[:, 0])) / m.dt < 1e-6  # constant horizontal velocity
    np.testing.assert_allclose(np.diff(c[:, 2], 2) / m.dt ** 2, -GRAVITY, atol=1e-4)
    assert np.ptp(com[:, 1]) < 1e-6  # symmetric motion: no sideways COM motion


def test_com_velocity_is_continuous_through_takeoff_and_touchdown(jb):
    """Second-order one-sided differences of the FK COM on either side of each window edge agree."""
    m, com = jb
    (t0, t1), = m.flight_windows
    dt = m.dt
    for tb in (t0, t1):
        i = int(np.floor(tb / dt + 1e-9))  # last frame at or before the edge
        back = (3 * com[i] - 4 * com[i - 1] + com[i - 2]) / (2 * dt)  # v at frame i from the left
        fwd = (-3 * com[i + 1] + 4 * com[i + 2] - com[i + 3]) / (2 * dt)  # v at frame i + 1 from the right
        acc = (com[i + 1] - com[i]) / dt  # mean velocity between: both sides must match it to O(a dt)
        assert np.abs(back - acc).max() < 0.3 and np.abs(fwd - acc).max() < 0.3, (tb, back, acc, fwd)
        # no kink: the velocity change across the edge is what the (bounded) acceleration gives
        a = np.diff(com[i - 3:i + 5], 2, axis=0) / dt ** 2
        assert np.abs(a).max() < 40.0, (tb, a)
    # the reference pelvis velocity is the derivative of the reference pelvis position
    err = np.abs(np.gradient(m.ref_base_pos, dt, axis=0) - m.ref_base_lin_vel)
    assert err[:, [0, 2]].max() < 0.06


def test_feet_stay_planted_in_stance(jb):
    m, _ = jb
    quat = np.tile([1.0, 0.0, 0.0, 0.0], (m.num_steps, 1))
    soles, ankles = sole_heights_and_ankles(m.ref_base_pos, quat, m.ref_q)
    stance = ~m.flight_mask
    runs = np.split(np.flatnonzero(stance), np.flatnonzero(np.diff(np.flatnonzero(stance)) > 1) + 1)
    assert len(runs) == 2
    for run in runs:
        assert np.ptp(ankles[run], axis=0).max() < 1e-6, run[0]  # FK ankle axes do not move
        assert np.ptp(soles[run]) < 1e-3  # soles flat on the stance height
    np.testing.assert_allclose(ankles[runs[0], :, 0], m.ref_foot_pos[runs[0], :, 0], atol=1e-9)


def test_bad_ballistic_value_names_file_and_field(tmp_path):
    raw = yaml.safe_load((MOTIONS_DIR / "jump_ballistic.yaml").read_text())
    p = tmp_path / "jump_ballistic.yaml"
    for bad in ("comm", True, 1.0):
        p.write_text(yaml.safe_dump({**raw, "ballistic": bad}))
        with pytest.raises(MotionError) as e:
            load_motion_file(p)
        msg = str(e.value)
        assert msg.startswith(f"{p}: ballistic: ") and "'pelvis' or 'com'" in msg, msg


def test_solve_that_does_not_converge_names_file_and_field(monkeypatch):
    monkeypatch.setattr(R, "COM_MAX_ITER", 1)
    path = MOTIONS_DIR / "jump_ballistic.yaml"
    with pytest.raises(MotionError, match=r"jump_ballistic\.yaml: ballistic: .*did not converge in 1 iterations"):
        load_motion_file(path)


def test_floor_pull_is_checked_on_the_com(tmp_path):
    """A landing too short to brake the fall: the COM would accelerate down faster than g in stance."""
    raw = yaml.safe_load((MOTIONS_DIR / "jump_ballistic.yaml").read_text())
    k = raw["keyframes"]
    p = tmp_path / "jump_ballistic.yaml"
    p.write_text(yaml.safe_dump({**raw, "keyframes": k[:4] + [{**k[4], "pelvis_height": 0.60}] + k[5:]}))
    with pytest.raises(MotionError, match=r"keyframes: the centre of mass accelerates down at .* while standing"):
        load_motion_file(p)
    meta, keys = parse_motion(p, yaml.safe_load(p.read_text()))
    with pytest.raises(MotionError, match=r"keyframes: the pelvis accelerates down"):  # the default checks the pelvis
        R.build_motion(p, dataclasses.replace(meta, ballistic="pelvis"), keys)
