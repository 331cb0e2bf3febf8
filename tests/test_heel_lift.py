"""`heel_lift` on keyframes (motions.schema, motions.reference): the feet pitch toes-down about their toe spheres,
the ankle pitch takes it; checked by C MuJoCo FK of the result on the bridge model."""
import mujoco
import numpy as np
import pytest

from motions.clips import _fk_model
from motions.library import load_motion_file
from motions.motion import MotionError
from tests.test_pelvis_pitch import _write


TOES = {"duration": 3.0, "reward_weights": {"joint_pos": 1.0}, "keyframes": [
    {"t": 0.0, "pelvis_height": 0.785},
    {"t": 1.0, "pelvis_height": 0.80, "pelvis_x": 0.03, "pelvis_pitch": 0.1, "heel_lift": 0.4},
    {"t": 2.0, "pelvis_height": 0.785, "pelvis_x": 0.0},
    {"t": 2.5, "pelvis_height": 0.785}]}


def _soles(m, i, model, qadr, soles, d):
    d.qpos[:3] = m.ref_base_pos[i]
    d.qpos[3:7] = (1.0, 0.0, 0.0, 0.0) if m.ref_base_quat is None else m.ref_base_quat[i]
    d.qpos[qadr] = m.ref_q[i]
    mujoco.mj_kinematics(model, d)
    return [d.geom_xpos[s].copy() for s in soles]


def test_heel_lift_rolls_the_feet_about_the_toe_spheres(tmp_path):
    """At the keyframe with heel_lift 0.4 rad: FK puts each foot's front (toe) spheres exactly where they are in
    the home stance (1e-9 m), the back spheres raised by (x_front - x_back) sin 0.4 and moved forward by
    (x_front - x_back)(1 - cos 0.4) (a rigid rotation about the toe spheres' centres, hand-computed), and the
    foot body pitched 0.4 rad about y; flat again (every sphere home) at t = 2 s."""
    m = load_motion_file(_write(tmp_path, TOES, "toes"))
    model, qadr, soles = _fk_model()[:3]
    d = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, d, model.key("home").id)
    mujoco.mj_kinematics(model, d)
    home = [d.geom_xpos[s].copy() for s in soles]
    for f in range(2):
        home[f][:, 0] -= d.qpos[0]
    k = int(round(1.0 / m.dt))
    got = _soles(m, k, model, qadr, soles, d)
    for f in range(2):
        front = home[f][:, 0] > home[f][:, 0].mean()
        np.testing.assert_allclose(got[f][front], home[f][front], atol=1e-9)
        L = home[f][front, 0].max() - home[f][~front, 0]
        np.testing.assert_allclose(got[f][~front, 2] - home[f][~front, 2], L * np.sin(0.4), atol=1e-9)
        np.testing.assert_allclose(got[f][~front, 0] - home[f][~front, 0], L * (1 - np.cos(0.4)), atol=1e-9)
        body = model.body(("left", "right")[f] + "_ankle_roll_link").id
        R = d.xmat[body].reshape(3, 3)
        assert np.arctan2(-R[2, 0], R[0, 0]) == pytest.approx(0.4, abs=1e-9)  # pitch about y
    for i in (int(round(2.0 / m.dt)), m.num_steps - 1):
        got = _soles(m, i, model, qadr, soles, d)
        for f in range(2):
            np.testing.assert_allclose(got[f], home[f], atol=1e-9)
    assert m.ref_foot_height[k].max() == pytest.approx(0.0, abs=1e-12)  # the toes stay on the floor


def test_heel_lift_out_of_range_names_the_field(tmp_path):
    raw = {**TOES, "keyframes": [TOES["keyframes"][0], {**TOES["keyframes"][1], "heel_lift": -0.1}]}
    with pytest.raises(MotionError, match=r"keyframes\[1\]\.heel_lift"):
        load_motion_file(_write(tmp_path, raw, "toes"))


def test_support_on_the_toes_is_a_segment():
    """Both feet on their toes: the support points are collinear (no polygon): the margin is minus the distance
    to the segment (hand-computed), 0 on it; a polygon's margin is the distance to its nearest edge."""
    from motions.balance import support_margin

    toes = np.array([[0.1, 0.15], [0.1, 0.09], [0.1, -0.09], [0.1, -0.15]])
    assert support_margin(toes, np.array([0.1, 0.0])) == pytest.approx(0.0, abs=1e-15)
    assert support_margin(toes, np.array([0.05, 0.02])) == pytest.approx(-0.05, abs=1e-15)
    assert support_margin(toes, np.array([0.13, 0.19])) == pytest.approx(-0.05, abs=1e-15)  # 3-4-5 past the end
    square = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    assert support_margin(square, np.array([0.3, 0.6])) == pytest.approx(0.3, abs=1e-12)


def test_heel_rise_confines_the_lift_to_the_end_of_the_segment(tmp_path):
    """heel_rise_s 0.2 on the 0.4 rad keyframe at t = 1.0: FK's foot pitch is 0 (flat) until t = 0.8, half the
    lift (smootherstep's midpoint) at 0.9 and 0.4 at 1.0; without it, PCHIP lifts the heels from t = 0. A rise
    longer than its segment names the field."""
    low = {**TOES, "keyframes": [TOES["keyframes"][0], {**TOES["keyframes"][1], "pelvis_height": 0.78},
                                 *TOES["keyframes"][2:]]}  # flat feet until 0.8 s: no 0.80 m pelvis in reach
    raw = {**low, "keyframes": [low["keyframes"][0], {**low["keyframes"][1], "heel_rise_s": 0.2},
                                *low["keyframes"][2:]]}
    m = load_motion_file(_write(tmp_path, raw, "toes"))
    model, qadr, soles = _fk_model()[:3]
    d = mujoco.MjData(model)
    body = model.body("left_ankle_roll_link").id

    def foot_pitch(t):
        _soles(m, int(round(t / m.dt)), model, qadr, soles, d)
        R = d.xmat[body].reshape(3, 3)
        return np.arctan2(-R[2, 0], R[0, 0])

    for t in (0.2, 0.5, 0.78):
        assert foot_pitch(t) == pytest.approx(0.0, abs=1e-9)
    assert foot_pitch(0.9) == pytest.approx(0.2, abs=1e-9)
    assert foot_pitch(1.0) == pytest.approx(0.4, abs=1e-9)
    plain = load_motion_file(_write(tmp_path, low, "toes"))
    k = int(round(0.5 / plain.dt))
    assert abs(plain.ref_q[k, 4] - m.ref_q[k, 4]) > 0.01  # PCHIP has the heels up by mid-segment
    bad = {**TOES, "keyframes": [TOES["keyframes"][0], {**TOES["keyframes"][1], "heel_rise_s": 1.5}]}
    with pytest.raises(MotionError, match=r"keyframes\[1\]\.heel_rise_s"):
        load_motion_file(_write(tmp_path, bad, "toes"))
