"""motions.balance: the COM and the CoP a reference needs, against hand-computed values and C MuJoCo."""
from __future__ import annotations

import copy

import mujoco
import numpy as np
import pytest
import yaml

from motions import balance as B
from motions.clips import _fk_model
from motions.compose import compose
import motions as M
from motions.library import MOTIONS_DIR, hold_pose_motion, load_motion
from robots.physics import GRAVITY


def test_support_margin_of_a_square():
    sq = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.5, 0.5]])
    assert B.support_margin(sq, np.array([0.5, 0.5])) == pytest.approx(0.5)
    assert B.support_margin(sq, np.array([0.9, 0.5])) == pytest.approx(0.1)
    assert B.support_margin(sq, np.array([1.5, 0.5])) == pytest.approx(-0.5)


def test_required_cop_hand_computed():
    """Constant horizontal acceleration a with no rotation: p_x = c_x - c_z a / g. A constant pitch torque tau
    (L_y growing linearly) with the COM at rest: p_x = c_x - tau / (M g); a roll torque moves p_y by + tau_x / (M g).
    Interior frames (np.gradient is exact there for these polynomials)."""
    dt, M, z0, a = 0.02, 35.0, 0.7, 1.5
    t = np.arange(50) * dt
    com = np.c_[0.5 * a * t**2, np.zeros_like(t), np.full_like(t, z0)]
    cop = B.required_cop(com, np.zeros((50, 3)), M, dt)
    np.testing.assert_allclose(cop[3:-3, 0], com[3:-3, 0] - z0 * a / GRAVITY, atol=1e-12)
    np.testing.assert_allclose(cop[3:-3, 1], 0.0, atol=1e-12)
    tau_y, tau_x = 4.0, -2.0
    L = np.c_[tau_x * t, tau_y * t, np.zeros_like(t)]
    still = np.tile([0.01, -0.02, z0], (50, 1))
    cop = B.required_cop(still, L, M, dt)
    np.testing.assert_allclose(cop[2:-2, 0], 0.01 - tau_y / (M * GRAVITY), atol=1e-12)
    np.testing.assert_allclose(cop[2:-2, 1], -0.02 + tau_x / (M * GRAVITY), atol=1e-12)


def test_standing_still_cop_is_the_com_and_its_margin_is_c_mujocos():
    """The home pose held: the required CoP is the COM (no motion) and the COM margin is its distance to the
    nearest side of the rectangle the eight sole spheres make, with the COM from C MuJoCo's subtree_com."""
    m = hold_pose_motion(20, "stand")
    b = B.balance(m)
    k = b["checked"]
    assert k.sum() == 16
    np.testing.assert_allclose(b["cop"][k], b["com"][k, :2], atol=1e-9)
    model, qadr, soles = _fk_model()[:3]
    d = mujoco.MjData(model)
    d.qpos[:3], d.qpos[3] = (0.0, 0.0, m.ref_height[0]), 1.0
    d.qpos[qadr] = m.ref_q[0]
    mujoco.mj_kinematics(model, d)
    mujoco.mj_comPos(model, d)
    c = d.subtree_com[1, :2]
    pts = np.concatenate([d.geom_xpos[s, :2] for s in soles])
    rect = min(c[0] - pts[:, 0].min(), pts[:, 0].max() - c[0], c[1] - pts[:, 1].min(), pts[:, 1].max() - c[1])
    np.testing.assert_allclose(b["com_margin"], rect, atol=1e-9)
    np.testing.assert_allclose(b["cop_margin"][k], rect, atol=1e-9)


def test_reach_twist_stays_balanced_and_its_first_version_did_not(tmp_path):
    """The committed composed clip keeps the COM >= 6 cm and its CoP >= 4 cm inside the feet (the spec's
    comment); the first version (squat with the hips forward: x +0.03, pitch 0.3, reach -1.2) put the COM
    beyond the toes, which the check finds around the squat (t = 4.0 s)."""
    b = B.balance(load_motion("reach_twist"))
    assert b["min_com_margin_m"] > 0.06 and b["min_cop_margin_m"] > 0.04
    spec = yaml.safe_load((MOTIONS_DIR / "compose" / "reach_twist.yaml").read_text())
    old = copy.deepcopy(spec)
    squat = next(w for w in old["waypoints"] if w.get("pelvis", {}).get("z") == 0.64)
    squat["pelvis"] = {"x": 0.03, "z": 0.62, "pitch": 0.3}
    squat["joints"] = {"shoulder_pitch": -1.2, "elbow": -0.5, "waist_pitch": 0.2}
    sp = tmp_path / "old.yaml"
    sp.write_text(yaml.safe_dump(old))
    from motions.clips import load_clip

    m = load_clip(compose(sp, tmp_path / "old.npz"))
    b = B.balance(m)
    out = B.outside_windows(b["com_margin"], m.times)
    assert b["min_com_margin_m"] < -0.01 and any(a <= squat["t"] <= c for a, c in out), out


def test_outside_windows():
    t = np.arange(8) * 0.1
    margin = np.array([0.1, -0.1, -0.2, 0.0, np.nan, -0.1, 0.1, -0.3])
    got = B.outside_windows(margin, t)
    assert len(got) == 3 and np.allclose(got, [(0.1, 0.2), (0.5, 0.5), (0.7, 0.7)])


def test_preview_prints_the_balance(capsys):
    from motions.__main__ import main

    assert main(["preview", "reach_twist", "--out", "/tmp/reach_twist_preview.png"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "balance in stance" in x)
    assert "stays >=" in line and "inside the feet" in line


def test_hovering_hand_values():
    """Left/right lowest-sole heights (m): a hover is 3-20 mm up while the other foot is below 3 mm."""
    h = np.array([[0.001, 0.001],   # both down
                  [0.006, 0.001],   # left hovers
                  [0.006, 0.005],   # both up a little: neither stands, no hover
                  [0.030, 0.001],   # left 30 mm up: a step
                  [0.001, 0.019]])  # right hovers
    assert B.hovering(h).tolist() == [[False, False], [True, False], [False, False], [False, False], [False, True]]


def _calm_dance_or_skip():
    try:
        load_motion("dance_calm")
    except M.MotionError as e:
        if "cannot be downloaded" in str(e):
            pytest.skip(str(e))
        raise


@pytest.mark.network
def test_preview_names_the_hovering_foot_of_the_calm_dance(capsys):
    """dance_calm's standing part has the left sole 5-10 mm above the floor while the right stands (the clip is
    built from holosoma-inference's wheel: skipped where PyPI cannot be reached); dance_calm_grounded, the same
    with its feet put down (motions.windows.ground_feet), has no such stretch; its kicks are floating "flights"."""
    from motions.__main__ import main

    _calm_dance_or_skip()
    assert main(["preview", "dance_calm", "--out", "/tmp/dance_calm_preview.png"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "left foot 3-20 mm" in x)
    share = int(line.split("stands: ")[1].split("%")[0])
    assert 40 <= share <= 60 and "1.22-7.96" in line
    assert main(["preview", "dance_calm_grounded", "--out", "/tmp/dance_calm_grounded_preview.png"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "left foot 3-20 mm" in x)
    assert int(line.split("stands: ")[1].split("%")[0]) < 15 and "1.22" not in line
    # its kicks float 6-12 mm up, labelled flights that the COM does not fall through
    assert "(15.08, 15.58)" in out and out.count("not a flight") >= 6


@pytest.mark.network
@pytest.mark.slow  # builds two clips by leg IK over every moved frame: 3-7 min from a cold motion cache
def test_planted_and_steady_calm_dance_stand_their_kicks(capsys):
    """dance_calm_planted (motions.windows.plant) puts the calm dance's floating kicks down: no flight left;
    dance_calm_steady balances them with the COM over the stance foot (motions.windows.balance_cop's
    com_margin_m)."""
    from motions.__main__ import main

    _calm_dance_or_skip()
    assert main(["preview", "dance_calm_planted", "--out", "/tmp/dance_calm_planted_preview.png"]) == 0
    assert "flight windows: []" in capsys.readouterr().out
    # the kicks' longest stance, on the left foot alone from 15.64 to 16.50 s: planted, its COM stands 4.7 cm
    # outside the foot (built from a clean cache), dance_calm_steady's within 1.3 cm of the foot's edge
    for name, low in (("dance_calm_planted", (-0.12, -0.035)), ("dance_calm_steady", (-0.02, 0.01))):
        m = load_motion(name)
        kicks = (m.times >= 15.6) & (m.times <= 16.5) & (m.contact.sum(axis=1) == 1)
        assert kicks.sum() > 35, name
        assert low[0] < np.nanmin(B.balance(m)["com_margin"][kicks]) < low[1], name
