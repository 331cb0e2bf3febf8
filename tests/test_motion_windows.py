"""Windows of long clips (motions.windows), clip sources built on first use (motions.sources) and the two
tracking clips of the library: `dance` (15 s of holosoma-inference 0.1.3's PPO dance, built from the wheel)
and `box_lift` (holosoma 0.0.3's box-lift clip, committed).

Oracles: activity and window scores of synthetic clips computed by hand; the recorded dance window is the one
the measure picks on the source (network)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import motions as M
from motions import sources as S
from motions import windows as W
from robots import g1

FPS = 50.0


def _still(frames: int) -> dict:
    jp = np.zeros((frames, 36))
    jp[:, 2] = 0.78
    jp[:, 3] = 1.0
    jp[:, 7:] = g1.DEFAULT_JOINT_POS
    return {"fps": FPS, "joint_pos": jp, "joint_vel": np.zeros((frames, 35)), "joint_names": np.array(g1.JOINT_NAMES)}


def test_activity_is_joint_rms_plus_pelvis_speeds():
    jv = np.zeros((2, 35))
    jv[0, 6:] = 2.0  # RMS 2 rad/s
    jv[0, 0:3] = [0.3, 0.4, 0.0]  # 0.5 m/s
    jv[0, 3:6] = [0.0, 0.0, 1.5]  # 1.5 rad/s
    jv[1, 6] = math.sqrt(29.0)  # one joint: RMS 1
    np.testing.assert_allclose(W.activity(jv), [2.0 + 0.5 + 1.5, 1.0])
    np.testing.assert_allclose(W.activity_parts(jv)[0], [2.0, 0.5, 1.5])


def test_best_window_is_the_most_active_one_the_tilt_bound_allows():
    a = _still(501)  # 10 s
    a["joint_vel"][100:151, 6:] = 1.0  # frames 100..150: activity 1
    a["joint_vel"][300:351, 6:] = 3.0  # frames 300..350: activity 3, but tilted 45 deg
    a["joint_pos"][300:351, 3:7] = [math.cos(math.radians(22.5)), math.sin(math.radians(22.5)), 0.0, 0.0]
    w = W.best_window(a, seconds=1.0, max_tilt_deg=40.0)
    assert (w.start, w.frames) == (100, 51) and w.score == pytest.approx(1.0) and w.max_tilt_deg == pytest.approx(0.0)
    # 451 windows; those with a start in 250..350 overlap the tilted frames
    assert w.clip_best_score == pytest.approx(3.0) and w.excluded == 101 and w.candidates == 451 - 101
    loose = W.best_window(a, seconds=1.0, max_tilt_deg=50.0)
    assert loose.start == 300 and loose.max_tilt_deg == pytest.approx(45.0)
    with pytest.raises(M.MotionError, match="shorter"):
        W.best_window(a, seconds=20.0)
    assert W.MAX_TILT_DEG < math.degrees(__import__("safety.limits", fromlist=["TILT_LIMIT"]).TILT_LIMIT)


def test_the_calmest_window_is_the_least_active_one_the_tilt_bound_allows():
    a = _still(501)
    a["joint_vel"][:, 6:] = 2.0  # activity 2 everywhere but
    a["joint_vel"][200:251, 6:] = 0.5  # frames 200..250: activity 0.5
    a["joint_vel"][400:451, 6:] = 0.1  # frames 400..450: activity 0.1, but tilted 45 deg
    a["joint_pos"][400:451, 3:7] = [math.cos(math.radians(22.5)), math.sin(math.radians(22.5)), 0.0, 0.0]
    w = W.best_window(a, seconds=1.0, max_tilt_deg=40.0, calmest=True)
    assert (w.start, w.frames) == (200, 51) and w.score == pytest.approx(0.5) and w.calmest
    assert w.record()["choice"] == "the least active window"
    assert W.best_window(a, seconds=1.0, max_tilt_deg=50.0, calmest=True).start == 400
    assert W.best_window(a, seconds=1.0).record()["choice"] == "the most active window"


def test_the_torque_bound_excludes_a_window_the_arms_cannot_move():
    """A shoulder swung 1 rad at 8 Hz needs ~1 rad * (2 pi 8 Hz)^2 = 2500 rad/s^2 of the arm: hundreds of N m
    against a 25 N m limit; a smooth 1 Hz raise and lower of 0.5 rad needs ~20 rad/s^2 and the arm's weight. The fast window is the
    more active one, so it wins without the bound and loses with it."""
    a = _still(501)
    t = np.arange(501) / FPS
    sh = g1.JOINT_NAMES.index("left_shoulder_pitch_joint")
    fast, slow = slice(100, 151), slice(300, 351)
    a["joint_pos"][fast, 7 + sh] += np.sin(2 * np.pi * 8.0 * (t[fast] - t[100]))
    a["joint_pos"][slow, 7 + sh] += 0.25 * (1 - np.cos(2 * np.pi * (t[slow] - t[300])))
    a["joint_vel"] = W.velocities(a["joint_pos"], FPS)
    tau = W.torque_ratio(a)
    assert tau[fast].max() > 3.0 and tau[slow].max() < 0.5 and tau.shape == (501,)
    assert W.best_window(a, seconds=1.0).start == 100
    w = W.best_window(a, seconds=1.0, max_torque_ratio=1.0)
    assert 250 <= w.start <= 300 and w.max_torque_ratio < 0.5 and w.torque_bound == 1.0
    assert w.excluded_by_torque > 0 and w.record()["windows_excluded_by_torque"] == w.excluded_by_torque
    with pytest.raises(M.MotionError, match="torques"):
        W.best_window(a, seconds=1.0, max_torque_ratio=1e-3)


def test_cut_write_and_read_back(tmp_path):
    a = _still(200)
    a["joint_pos"][:, 0] = np.arange(200) * 0.01
    a["joint_vel"] = W.velocities(a["joint_pos"], FPS)
    np.testing.assert_allclose(a["joint_vel"][:, 0], 0.5, atol=1e-9)  # x advances 1 cm a frame at 50 Hz
    p = W.write_clip_arrays(tmp_path / "w.npz", W.cut(a, 50, 101), note={"from": "test"})
    b = W.read_clip_arrays(p)
    assert b["fps"] == FPS and b["joint_pos"].shape == (101, 36)
    np.testing.assert_allclose(b["joint_pos"][:, 0], a["joint_pos"][50:151, 0], atol=1e-6)
    m = M.load_motion(str(p))
    assert m.num_steps == 101 and m.duration == pytest.approx(2.0)
    with pytest.raises(M.MotionError, match="does not fit"):
        W.cut(a, 150, 101)


def test_a_clip_is_written_whole_or_not_at_all(tmp_path):
    """write_clip_arrays renames a finished file into place: a write that fails leaves neither the clip nor a
    temporary file, and one that succeeds leaves only the clip (readers in other processes never see half)."""
    a = _still(20)
    p = W.write_clip_arrays(tmp_path / "w.npz", a)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["w.npz"]
    with pytest.raises(ValueError):
        W.write_clip_arrays(tmp_path / "bad.npz", {**a, "joint_pos": [["not a number"] * 36] * 20})
    assert sorted(x.name for x in tmp_path.iterdir()) == ["w.npz"]
    assert W.read_clip_arrays(p)["joint_pos"].shape == (20, 36)


def test_the_cache_lock_keeps_a_second_process_out_until_the_first_lets_go(tmp_path):
    """Two processes building under one clip cache (a training beside an eval, two test workers) take turns:
    a child holds motions.sources.cache_lock for 1.5 s; this process's cache_lock waits for it."""
    import subprocess
    import sys
    import time

    held = tmp_path / "held"
    child = subprocess.Popen([sys.executable, "-c", (
        "import sys, time, pathlib; from motions.sources import cache_lock\n"
        f"with cache_lock(pathlib.Path({str(tmp_path)!r})):\n"
        f"    pathlib.Path({str(held)!r}).touch(); time.sleep(1.5)\n")], cwd=S.REPO)
    try:
        t0 = time.monotonic()
        while not held.exists():
            assert child.poll() is None and time.monotonic() - t0 < 60, "the child never took the lock"
            time.sleep(0.01)
        t1 = time.monotonic()
        with S.cache_lock(tmp_path):
            waited = time.monotonic() - t1
            assert child.poll() is not None or waited > 1.0  # the child let go: it is leaving or gone
        assert waited > 1.0
    finally:
        child.wait(timeout=30)
    assert child.returncode == 0


def test_lead_in_from_standing_to_the_first_frame():
    """Hold the home pose at the first frame's heading, smoothstep to the first frame, then the clip unchanged."""
    from motions.clips import sole_heights_and_ankles

    a = _still(30)
    yaw = 0.8
    a["joint_pos"][:, 0:2] = [0.3, -0.2]
    a["joint_pos"][:, 2] = 0.70
    a["joint_pos"][:, 3:7] = [math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]  # turned 0.8 rad, upright
    knee = [g1.JOINT_NAMES.index(n) for n in ("left_knee_joint", "right_knee_joint")]
    a["joint_pos"][:, 7 + np.array(knee)] = 1.2  # crouched
    b = W.lead_in(a, 1.0, hold_s=0.2)
    jp = b["joint_pos"]
    n_hold, n = 10, 50
    assert jp.shape == (n + 30, 36) and b["joint_vel"].shape == (n + 30, 35)
    np.testing.assert_array_equal(jp[n:], a["joint_pos"])
    np.testing.assert_array_equal(b["joint_vel"][n:], a["joint_vel"])
    np.testing.assert_allclose(jp[:n_hold, 7:], np.tile(g1.DEFAULT_JOINT_POS, (n_hold, 1)))
    np.testing.assert_allclose(jp[:n_hold, 3:7], a["joint_pos"][:n_hold, 3:7], atol=1e-12)  # same heading, upright
    np.testing.assert_allclose(jp[:n, 0:2], np.tile([0.3, -0.2], (n, 1)))
    # the blend: u = k / 40 over frames 10..49, smoothstep 3u^2 - 2u^3 (hand value at u = 0.5: 0.5)
    mid = n_hold + 20
    np.testing.assert_allclose(jp[mid, 7:], 0.5 * (g1.DEFAULT_JOINT_POS + a["joint_pos"][0, 7:]))
    # standing home pose: its lowest sole where the crouched first frame's is
    h0 = sole_heights_and_ankles(jp[:1, 0:3], jp[:1, 3:7], jp[:1, 7:])[0].min()
    h1 = sole_heights_and_ankles(a["joint_pos"][:1, 0:3], a["joint_pos"][:1, 3:7], a["joint_pos"][:1, 7:])[0].min()
    assert h0 == pytest.approx(h1, abs=1e-9) and jp[0, 2] > 0.70
    with pytest.raises(M.MotionError, match="lead-in"):
        W.lead_in(a, 0.2, hold_s=0.2)
    # the lead-out is the lead-in of the clip played backwards: mirrored frames, velocities of opposite sign
    c = W.lead_out(a, 1.0, hold_s=0.2)
    np.testing.assert_array_equal(c["joint_pos"][:30], a["joint_pos"])
    np.testing.assert_allclose(c["joint_pos"][30:], b["joint_pos"][:n][::-1])
    np.testing.assert_allclose(c["joint_vel"][30:], -b["joint_vel"][:n][::-1])
    np.testing.assert_allclose(c["joint_pos"][-1, 7:], g1.DEFAULT_JOINT_POS)



def test_lead_out_on_the_feet_turns_the_pelvis_back_over_them():
    """stance="feet": the home pose the lead-out ends in stands on the last frame's feet (their midpoint, the
    line between them), where the default stance's stands under the pelvis and slides a twisted pair of feet."""
    from motions.balance import sole_points

    a = _still(30)
    yaw = 0.8
    a["joint_pos"][:, 0:2] = [0.3, -0.2]
    a["joint_pos"][:, 3:7] = [math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]
    hips = [g1.JOINT_NAMES.index(n) for n in ("left_hip_yaw_joint", "right_hip_yaw_joint")]
    a["joint_pos"][:, 7 + np.array(hips)] = 0.4  # the hips twisted 0.4 rad against the feet

    def feet(jp):  # (2, 2): left, right foot centres on the floor
        return sole_points(jp[None, 0:3], jp[None, 3:7], jp[None, 7:])[0].mean(axis=1)[:, :2]

    last = feet(a["joint_pos"][-1])
    on_feet = W.lead_out(a, 1.0, hold_s=0.2, stance="feet")["joint_pos"]
    end = feet(on_feet[-1])
    np.testing.assert_allclose(end.mean(axis=0), last.mean(axis=0), atol=1e-9)
    d0, d1 = last[0] - last[1], end[0] - end[1]
    assert math.atan2(d1[1], d1[0]) == pytest.approx(math.atan2(d0[1], d0[0]), abs=1e-9)
    np.testing.assert_allclose(on_feet[-1, 7:], g1.DEFAULT_JOINT_POS)
    slide = np.linalg.norm(end - last, axis=1)
    under_pelvis = np.linalg.norm(feet(W.lead_out(a, 1.0, hold_s=0.2)["joint_pos"][-1]) - last, axis=1)
    assert slide.max() < 1e-3 and under_pelvis.min() > 0.05  # measured: 0.16 mm against 7.7 cm
    with pytest.raises(M.MotionError, match="stance"):
        W.lead_out(a, 1.0, hold_s=0.2, stance="hands")

def test_box_lift_clip_file():
    """holosoma 0.0.3's sub3_largebox_003_mj.npz in this library's layout: 325 frames at 50 Hz (6.48 s)."""
    with np.load(M.MOTIONS_DIR / "box_lift.npz") as f:
        assert float(f["fps"][0]) == 50.0 and f["joint_pos"].shape == (325, 36) and f["joint_vel"].shape == (325, 35)
        assert list(f["joint_names"]) == list(g1.JOINT_NAMES) and "Apache-2.0" in str(f["note"])
    m = M.load_motion("box_lift")
    assert m.num_steps == 325 and m.dt == g1.CONTROL_DT and m.duration == pytest.approx(6.48)
    assert np.all(np.isfinite(m.ref_q)) and m.ref_height.min() > 0.4


def _feet(jp: np.ndarray):
    """Per frame and foot: (lowest, highest) sole-sphere bottom, the foot's (roll, pitch) and its body's world
    (x, y), by FK."""
    import mujoco

    from motions.clips import _fk_model

    m, qadr, soles, _, _ = _fk_model()
    d = mujoco.MjData(m)
    out = []
    for row in jp:
        d.qpos[:3], d.qpos[3:7], d.qpos[qadr] = row[0:3], row[3:7], row[7:]
        mujoco.mj_kinematics(m, d)
        feet = []
        for g in soles:
            b = d.geom_xpos[g, 2] - m.geom_size[g, 0]
            r = d.xmat[m.geom_bodyid[g[0]]].reshape(3, 3)
            x, y = d.xpos[m.geom_bodyid[g[0]], :2]
            feet.append((b.min(), b.max(), math.atan2(r[2, 1], r[2, 2]), -math.asin(r[2, 0]), x, y))
        out.append(feet)
    return np.array(out)  # (T, 2, 6)


def test_ground_feet_puts_a_hovering_tilted_foot_flat_on_the_floor():
    """The home pose with the left foot lifted 6 mm and rolled 3.4 deg (knee, hip and ankle pitch, ankle roll):
    it comes back level with the right foot's soles and flat; the right leg and the pelvis are untouched. The
    same foot lifted by a 0.5 rad knee (a step, past blend) is left alone."""
    a = _still(3)
    J = g1.JOINT_NAMES.index
    for name, dq in (("knee", 0.14), ("hip_pitch", -0.07), ("ankle_pitch", -0.07), ("ankle_roll", 0.06)):
        a["joint_pos"][0, 7 + J(f"left_{name}_joint")] += dq
    a["joint_pos"][2, 7 + J("left_knee_joint")] += 0.5
    before = _feet(a["joint_pos"])
    assert 0.005 < before[0, 0, 0] - before[0, 1, 0] < 0.02 and before[0, 0, 1] - before[0, 0, 0] > 0.003
    assert before[2, 0, 1] - before[2, 1, 0] > 0.04
    b = W.ground_feet(a, 0.02, 0.04)
    after = _feet(b["joint_pos"])
    # the lifted, tilted left foot: lowest sole level with the right's, flat (its spheres' spread < 0.1 mm)
    assert after[0, 0, 0] == pytest.approx(after[0, 1, 0], abs=1e-4)
    assert after[0, 0, 1] - after[0, 0, 0] < 1e-4 and abs(after[0, 0, 2]) < 1e-3 and abs(after[0, 0, 3]) < 1e-3
    np.testing.assert_array_equal(b["joint_pos"][:, 0:7], a["joint_pos"][:, 0:7])  # the pelvis
    right = [i for i, n in enumerate(g1.JOINT_NAMES) if n.startswith("right_")]
    np.testing.assert_allclose(b["joint_pos"][:, 7 + np.array(right)], a["joint_pos"][:, 7 + np.array(right)],
                               atol=1e-6)  # the standing right foot is flat already: unchanged
    np.testing.assert_array_equal(b["joint_pos"][2], a["joint_pos"][2])  # the step: past blend, untouched
    with pytest.raises(M.MotionError, match="full"):
        W.ground_feet(a, 0.04, 0.02)


def test_ground_feet_takes_part_of_the_way_to_a_pose_a_straight_knee_cannot_reach():
    """The left leg straight (knee, hip pitch 0) with its foot pitched 0.1 rad: it sets the floor (its heel is the
    lowest sphere), and levelling it about the ankle would need a longer leg. No error: the foot goes half of the
    way (pitch 0.05 rad), the right foot as far as its own straightening knee allows, both counted, every joint
    within its limits."""
    from motions.clips import _fk_model

    a = _still(2)
    J = g1.JOINT_NAMES.index
    for name, v in (("knee", 0.0), ("hip_pitch", 0.0), ("ankle_pitch", 0.1)):
        a["joint_pos"][:, 7 + J(f"left_{name}_joint")] = v
    b = W.ground_feet(a, 0.02, 0.04)
    after = _feet(b["joint_pos"])
    assert after[:, 0, 3] == pytest.approx(0.05, abs=1e-3)
    assert b["ground_feet"] == {"feet_partly_grounded": 4, "feet_left_as_they_were": 0}
    m, qadr = _fk_model()[:2]
    rng = np.array([m.jnt_range[m.jnt_qposadr.tolist().index(int(q))] for q in qadr])
    assert np.all(b["joint_pos"][:, 7:] >= rng[:, 0] - 1e-9) and np.all(b["joint_pos"][:, 7:] <= rng[:, 1] + 1e-9)


def test_plant_lowers_a_hovering_frame_onto_the_first_frames_floor():
    """The home pose, frame 0 on the floor; the whole robot raised by 10 mm (within full 15: lowered all the way),
    25 mm (w = (30 - 25) / 15 = 1/3: lowered 8.33 mm) and 50 mm (past blend 30: a flight, untouched), and
    one frame 2 mm below the floor (not lifted: the import does that). Joints untouched; the changed frames'
    vertical velocity the central difference of the new heights."""
    a = _still(6)
    a["joint_pos"][1:5, 2] += [0.010, 0.025, 0.050, -0.002]
    b = W.plant(a, 0.015, 0.030)
    np.testing.assert_allclose(b["joint_pos"][:, 2] - a["joint_pos"][:, 2],
                               [0.0, -0.010, -0.025 / 3, 0.0, 0.0, 0.0], atol=1e-9)
    np.testing.assert_array_equal(b["joint_pos"][:, 3:], a["joint_pos"][:, 3:])
    assert b["plant"] == {"frames_lowered": 2, "max_lowered_mm": 10.0}
    z = b["joint_pos"][:, 2]
    assert b["joint_vel"][2, 2] == pytest.approx((z[3] - z[1]) * FPS / 2)
    after = _feet(b["joint_pos"])
    assert after[1, :, 0].min() == pytest.approx(after[0, :, 0].min(), abs=1e-9)  # on the floor
    with pytest.raises(M.MotionError, match="full"):
        W.plant(a, 0.03, 0.015)


def test_the_shortest_move_into_a_hull_hand_values():
    """The unit square, margin 0.1: a point 0.2 past the right edge moves 0.3 left; one past the corner (1.2, 1.3)
    moves to (0.9, 0.9); a point inside stays; a margin larger than the square allows (0.7): its centre. A
    triangle 5 cm high (inscribed circle of radius 2.5 cm) asked for 10 cm: its incentre."""
    from motions.balance import support_margin

    sq = np.array([[0, 0], [1, 0], [1, 1], [0, 1.0]])
    np.testing.assert_allclose(W._into(sq, np.array([1.2, 0.5]), 0.1), [-0.3, 0.0], atol=1e-6)
    np.testing.assert_allclose(W._into(sq, np.array([1.2, 1.3]), 0.1), [-0.3, -0.4], atol=1e-6)
    np.testing.assert_array_equal(W._into(sq, np.array([0.5, 0.4]), 0.1), [0.0, 0.0])
    np.testing.assert_allclose(W._into(sq, np.array([3.0, 3.0]), 0.7), [-2.5, -2.5], atol=1e-6)
    tri, p = np.array([[0, 0], [1, 0], [0.5, 0.05]]), np.array([0.5, -0.2])
    r = 0.5 * 0.05 / (0.5 + math.hypot(0.5, 0.05))  # inradius: area / semi-perimeter
    assert support_margin(tri, p + W._into(tri, p, 0.1)) == pytest.approx(r, abs=1e-6)


def _only_the_pelvis_xy_and_legs_moved(a: dict, b: dict) -> None:
    """Clip b is clip a with the pelvis moved horizontally and the legs re-solved: the pelvis's height and
    orientation and the waist and arms the same, each foot's world pose kept (0.5 mm / 1 mrad)."""
    np.testing.assert_array_equal(b["joint_pos"][:, 2:7], a["joint_pos"][:, 2:7])
    legs = [i for i, n in enumerate(g1.JOINT_NAMES) if n.startswith(("left_hip", "left_knee", "left_ankle",
                                                                    "right_hip", "right_knee", "right_ankle"))]
    upper = np.setdiff1d(np.arange(g1.NUM_MOTORS), legs)
    np.testing.assert_array_equal(b["joint_pos"][:, 7 + upper], a["joint_pos"][:, 7 + upper])
    fa, fb = _feet(a["joint_pos"]), _feet(b["joint_pos"])
    np.testing.assert_allclose(fb[..., :2], fa[..., :2], atol=5e-4)  # sole heights
    np.testing.assert_allclose(fb[..., 2:4], fa[..., 2:4], atol=1e-3)  # roll, pitch
    np.testing.assert_allclose(fb[..., 4:], fa[..., 4:], atol=5e-4)  # x, y


def test_balance_com_moves_the_pelvis_back_until_the_com_is_inside_the_feet(tmp_path):
    """The home pose leaning over its toes (waist pitch 0.5 rad, arms forward): the COM 0.3 mm inside the feet's
    front edge (home: 4.2 cm). Asked for 3 cm, the pelvis goes back and the legs follow: the COM 3 cm inside
    (motions.balance on the written clip, to 2 mm), each foot's world pose kept (0.5 mm / 1 mrad), the pelvis's
    height and orientation and the waist and arms untouched. A pose with the margin already is left alone."""
    from motions.balance import balance
    from motions.clips import load_clip

    def lean(waist_pitch):
        a = _still(5)
        J = g1.JOINT_NAMES.index
        a["joint_pos"][:, 7 + J("waist_pitch_joint")] = waist_pitch
        for side in ("left", "right"):
            a["joint_pos"][:, 7 + J(f"{side}_shoulder_pitch_joint")] = -1.5
        return a

    def margin(a, name):
        p = W.write_clip_arrays(tmp_path / name, a)
        return balance(load_clip(p, g1.CONTROL_DT))["com_margin"][2]

    a = lean(0.5)
    assert 0 < margin(a, "a.npz") < 0.002
    b = W.balance_com(a, 0.03)
    assert margin(b, "b.npz") == pytest.approx(0.03, abs=0.002)
    assert b["balance_com"]["frames_moved"] == 5 and b["joint_pos"][2, 0] < a["joint_pos"][2, 0] - 0.03
    _only_the_pelvis_xy_and_legs_moved(a, b)
    home = _still(5)
    c = W.balance_com(home, 0.03)
    assert c["balance_com"]["frames_moved"] == 0
    np.testing.assert_array_equal(c["joint_pos"], home["joint_pos"])
    with pytest.raises(M.MotionError, match="margin"):
        W.balance_com(a, 0.2)


def _sway(frames: int, amplitude: float, hz: float) -> dict:
    """The home pose with its COM swaying forward and back, amplitude * sin(2 pi hz t), the feet kept in place."""
    a = _still(frames)
    t = np.arange(frames) / FPS
    want = np.c_[amplitude * np.sin(2 * np.pi * hz * t), np.zeros(frames)]
    out = W._move_com(a, want, 6, "sway")
    assert out.pop("share").min() == 1.0
    return out


def test_the_cop_a_com_move_buys_is_the_move_minus_height_over_g_times_its_acceleration(tmp_path):
    """balance_cop's linear model against motions.balance's Newton-Euler CoP (angular momentum included): a
    standing robot swaying its COM 1 cm at 1 Hz needs its CoP at d - c_z d'' / (c_z'' + g) (c_z'' = 0 here:
    the home pose's COM height over g, 0.07 s^2), a sway 1 + 0.07 (2 pi)^2 = 3.8 times the COM's, to 15 % of
    it (the model leaves out the angular momentum of the legs swinging under the pelvis; balance_cop's rounds
    re-linearise about the moved clip) and four times closer than the COM's own sway."""
    from motions.balance import balance
    from motions.clips import load_clip

    a = _sway(100, 0.01, 1.0)
    b = balance(load_clip(W.write_clip_arrays(tmp_path / "a.npz", a), 1.0 / FPS))
    still = balance(load_clip(W.write_clip_arrays(tmp_path / "s.npz", _still(100)), 1.0 / FPS))
    com_z = still["com"][0, 2]
    d = b["com"][:, 0] - still["com"][:, 0]
    dd = np.gradient(np.gradient(d, 1.0 / FPS), 1.0 / FPS)
    k = b["checked"]
    cop, model = b["cop"][k, 0] - still["cop"][k, 0], d[k] - com_z / 9.81 * dd[k]
    assert np.abs(cop - model).max() < 0.15 * np.abs(model).max()
    assert np.abs(cop - model).max() < 0.25 * np.abs(cop - d[k]).max()
    assert np.ptp(cop) == pytest.approx(np.ptp(d[k]) * (1 + com_z / 9.81 * (2 * np.pi) ** 2), rel=0.15)


def test_balance_cop_bends_the_com_path_until_the_cop_is_inside_the_feet(tmp_path):
    """The home pose swaying its COM 2 cm at 1.5 Hz needs its CoP 14 cm forward and back: past the toes and the
    heels (motions.balance). balance_cop brings it 1 cm inside in every checked frame (to the 2 mm it stops at),
    with the pelvis moved less than the 2 cm sway (undoing the sway would do), each foot's world pose kept
    (0.5 mm / 1 mrad), the pelvis height and orientation and the waist and arms untouched. A clip whose CoP is
    inside already is left alone; a bad margin is refused."""
    from motions.balance import balance
    from motions.clips import load_clip

    def cop_margin(a, name):
        b = balance(load_clip(W.write_clip_arrays(tmp_path / name, a), 1.0 / FPS))
        return b["cop_margin"][b["checked"]]

    a = _sway(100, 0.02, 1.5)
    assert cop_margin(a, "a.npz").min() < -0.03
    b = W.balance_cop(a, 0.01)
    assert cop_margin(b, "b.npz").min() > 0.008
    assert b["balance_cop"]["cop_inside_after"] == 1.0 and b["balance_cop"]["frames_held_short"] == 0
    assert b["balance_cop"]["largest_pelvis_move_m"] < 0.02
    _only_the_pelvis_xy_and_legs_moved(a, b)
    calm = _sway(100, 0.005, 0.5)
    c = W.balance_cop(calm, 0.01)
    assert c["balance_cop"]["frames_moved"] == 0 and c["balance_cop"]["cop_inside_before"] == 1.0
    np.testing.assert_array_equal(c["joint_pos"], calm["joint_pos"])
    with pytest.raises(M.MotionError, match="margin"):
        W.balance_cop(a, 0.1)


def test_one_leg_runs_hand_values():
    """Runs on one foot alone at least 3 frames long: a 4-frame run on the left foot counts, a 2-frame run on the
    right one and the double-support frames do not."""
    c = np.array([[1, 1], [1, 0], [1, 0], [1, 0], [1, 0], [1, 1], [0, 1], [0, 1], [1, 1]], bool)
    np.testing.assert_array_equal(W._one_leg_runs(c, 3), [0, 1, 1, 1, 1, 0, 0, 0, 0])
    np.testing.assert_array_equal(W._one_leg_runs(c, 2), [0, 1, 1, 1, 1, 0, 1, 1, 0])


def _on_the_left_foot(frames: int, lift: slice) -> dict:
    """The home pose with the right foot lifted (hip pitch -0.4, knee +0.8 rad, eased in over 10 frames) in
    frames `lift`: the COM stays between the feet, outside the left foot."""
    a = _still(frames)
    J = g1.JOINT_NAMES.index
    s = np.zeros(frames)
    s[lift] = 1.0
    s = np.convolve(s, np.ones(10) / 10, mode="same")
    a["joint_pos"][:, 7 + J("right_hip_pitch_joint")] += -0.4 * s
    a["joint_pos"][:, 7 + J("right_knee_joint")] += 0.8 * s
    return a


def test_balance_cop_with_a_com_margin_puts_the_com_over_the_stance_foot(tmp_path):
    """The home pose lifting its right foot for 0.8 s stands on its left foot with its COM between the feet, more
    than 3 cm outside the left sole. balance_cop with com_margin_m 0 moves the pelvis over the left foot until the
    COM is inside it (to the 2 mm it stops at) in the held one-leg frames, the left foot kept in place (3 mm: the
    IK stops within GROUND_TOL) and the lifted foot carried with the pelvis (moved as far as it, 2 mm); the record
    counts the frames with the COM inside before and after."""
    from motions.balance import balance
    from motions.clips import load_clip

    a = _on_the_left_foot(80, slice(20, 60))
    ma = load_clip(W.write_clip_arrays(tmp_path / "a.npz", a), 1.0 / FPS)
    ba = balance(ma)
    held = W._one_leg_runs(ma.contact, 15)
    assert held.sum() > 25 and ba["com_margin"][held].max() < -0.03
    b = W.balance_cop(a, 0.01, com_margin_m=0.0, rounds=2)
    bb = balance(load_clip(W.write_clip_arrays(tmp_path / "b.npz", b), 1.0 / FPS))
    inside = bb["com_margin"][held & bb["checked"]]
    assert len(inside) > 25 and inside.min() > -0.002
    rec = b["balance_cop"]
    assert rec["com_inside_after"] > rec["com_inside_before"] and rec["frames_held_short"] == 0
    fa, fb = _feet(a["joint_pos"]), _feet(b["joint_pos"])
    np.testing.assert_allclose(fb[:, 0, 4:], fa[:, 0, 4:], atol=3e-3)  # the left foot stays (the IK: GROUND_TOL)
    k = 40  # mid-lift: the right leg carried, its foot moved as far as the pelvis
    moved = b["joint_pos"][k, 0:2] - a["joint_pos"][k, 0:2]
    np.testing.assert_allclose(fb[k, 1, 4:] - fa[k, 1, 4:], moved, atol=2e-3)
    with pytest.raises(M.MotionError, match="com_margin"):
        W.balance_cop(a, 0.01, com_margin_m=0.1)


def test_dance_source_file():
    src = S.read_source(M.MOTIONS_DIR / "dance.source.yaml")
    assert src.package == "holosoma-inference==0.1.3" and src.member.endswith("ppo_g1_29dof_dancing.onnx")
    assert src.window.frames == 751  # 15 s at 50 Hz, both ends included
    assert src.selection["seconds"] == 15.0 and src.selection["max_pelvis_tilt_deg"] <= W.MAX_TILT_DEG
    assert {"dance", "dance_in_limits", "dance_calm", "box_lift"} <= set(M.available_motions())


def test_a_built_clips_cache_name_covers_every_motions_module_its_build_imports():
    """materialise names a built clip by the source file and BUILDER_MODULES' code: every motions module that
    motions/windows.py imports (at the top or inside its functions) is in the list, so editing one rebuilds."""
    import ast

    from motions import sources

    tree = ast.parse((Path(sources.__file__).parent / "windows.py").read_text())
    imported = {n.module.split(".")[1] for n in ast.walk(tree)
                if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("motions.")}
    assert imported and imported <= set(sources.BUILDER_MODULES), sorted(imported - set(sources.BUILDER_MODULES))
    assert "windows" in sources.BUILDER_MODULES
    code = sources.builder_code()
    for m in sources.BUILDER_MODULES:
        assert (Path(sources.__file__).parent / f"{m}.py").read_bytes() in code


def test_source_file_errors_name_the_file(tmp_path):
    p = tmp_path / "x.source.yaml"
    p.write_text("package: holosoma\nmember: a.npz\nwindow: {start_frame: 0, frames: 10}\n")
    with pytest.raises(M.MotionError, match="x.source.yaml.*package"):
        S.read_source(p)
    p.write_text("package: a==1\nmember: a.npz\nwindow: {start_frame: 0, frames: 10, ground_feet_mm: [40, 20]}\n")
    with pytest.raises(M.MotionError, match="x.source.yaml.*ground_feet_mm"):
        S.read_source(p)
    p.write_text("package: a==1\nmember: a.npz\nwindow: {start_frame: 0, frames: 10, plant_mm: [30, 15]}\n")
    with pytest.raises(M.MotionError, match="x.source.yaml.*plant_mm.*full, blend"):
        S.read_source(p)
    p.write_text("package: a==1\nmember: a.npz\nwindow: {start_frame: 0, frames: 10, cop_margin_mm: 60}\n")
    with pytest.raises(M.MotionError, match="x.source.yaml.*cop_margin_mm"):
        S.read_source(p)
    p.write_text("package: a==1\nmember: a.npz\nwindow: {start_frame: 0, frames: 10, cop_com_margin_mm: 0}\n")
    with pytest.raises(M.MotionError, match="x.source.yaml.*give cop_margin_mm as well"):
        S.read_source(p)


def _built_from_the_wheel(name: str):
    """(motion, its source file, the whole extracted clip's arrays) of a dance built from holosoma-inference's wheel
    (pip download, once); skipped where PyPI cannot be reached."""
    try:
        m = M.load_motion(name)
    except M.MotionError as e:
        if "cannot be downloaded" in str(e):
            pytest.skip(str(e))
        raise
    full = sorted((S.CACHE / "full").glob("holosoma-inference-0.1.3-ppo_g1_29dof_dancing.npz"))
    return m, S.read_source(M.MOTIONS_DIR / f"{name}.source.yaml"), W.read_clip_arrays(full[0])


@pytest.mark.network
def test_dance_is_the_most_active_15_s_of_the_ppo_clip():
    """Builds the dance from the wheel (pip download, once) and checks it: 2 s lead-in and lead-out around 751 frames at 50 Hz (15 s), and the
    recorded window is the one motions.windows picks on the whole extracted clip (6574 frames)."""
    m, src, clip = _built_from_the_wheel("dance")
    lead = int(round(src.window.lead_in_s * FPS))
    assert lead == 100 and m.num_steps == 2 * lead + 751 and m.dt == g1.CONTROL_DT and m.duration == pytest.approx(19.0)
    w = W.best_window(clip, 15.0)
    assert (w.start, w.frames) == (src.window.start_frame, src.window.frames)
    assert w.score == pytest.approx(src.selection["score"], abs=1e-4) and w.clip_frames == 6574
    assert "chosen by" in m.description


@pytest.mark.network
def test_dance_in_limits_is_the_most_active_15_s_within_the_torque_limits():
    """The third tracking clip: the window motions.windows picks on the same dance with the waist and arm torques
    bounded by the motors' limits; its preview's inverse dynamics stays within them, the dance's does not."""
    from motions.torques import upper_torque_ratio

    m, src, clip = _built_from_the_wheel("dance_in_limits")
    w = W.best_window(clip, 15.0, max_torque_ratio=src.selection["upper_torque_bound"])
    assert (w.start, w.frames) == (src.window.start_frame, src.window.frames) and m.duration == pytest.approx(19.0)
    assert w.max_torque_ratio == pytest.approx(src.selection["max_upper_torque_ratio"], abs=1e-3)
    assert upper_torque_ratio(m)["peak"] <= 1.0 < upper_torque_ratio(M.load_motion("dance"))["peak"]


@pytest.mark.network
def test_dance_calm_is_the_least_active_15_s_within_the_torque_limits():
    """The calm end of the same dance: the window motions.windows picks as the least active under the same tilt
    and torque bounds; it moves less than half as much as dance_in_limits."""
    m, src, clip = _built_from_the_wheel("dance_calm")
    assert src.selection["choice"] == "the least active window"
    w = W.best_window(clip, 15.0, max_torque_ratio=src.selection["upper_torque_bound"], calmest=True)
    assert (w.start, w.frames) == (src.window.start_frame, src.window.frames) and m.duration == pytest.approx(19.0)
    assert w.score == pytest.approx(src.selection["score"], abs=1e-4)
    busy = S.read_source(M.MOTIONS_DIR / "dance_in_limits.source.yaml").selection["score"]
    assert w.score < 0.5 * busy
