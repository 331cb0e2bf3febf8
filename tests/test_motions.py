"""Motions: YAML keyframes -> reference trajectories (the motions package)."""
import mujoco
import numpy as np
import pytest
import yaml

import motions as M
from motions.__main__ import main as motions_cli
from motions.reference import base_and_feet
from motions.schema import parse_motion
from robots import g1
from robots import model as RM
from robots.physics import GRAVITY

# mocap clips that start and end mid-motion, not standing (and `dance` is built from a download): their checks
# are tests/test_motion_windows.py's
TRACKING_CLIPS = ("dance", "dance_in_limits", "dance_calm", "dance_calm_grounded", "dance_calm_settled", "dance_calm_balanced",
                  "dance_calm_planted", "dance_calm_steady", "box_lift", "box_lift_grounded", "box_lift_balanced")
ALL = [n for n in M.available_motions() if n not in TRACKING_CLIPS]
G = GRAVITY


def test_at_least_three_motions_including_jump():
    assert {"hop", "squat", "hop_forward"} <= set(ALL)


@pytest.mark.parametrize("name", ALL)
def test_reference_shapes_limits_and_start_pose(name):
    m = M.load_motion(name)
    T = int(round(m.duration / g1.CONTROL_DT)) + 1
    assert m.name == name and m.dt == g1.CONTROL_DT
    assert m.ref_q.shape == (T, 29) and m.ref_height.shape == (T,) and m.ref_foot_height.shape == (T, 2)
    assert m.ref_dq.shape == (T, 29) and m.ref_base_lin_vel.shape == (T, 3) and m.flight_mask.shape == (T,)
    assert np.all(m.ref_q >= g1.JOINT_POS_MIN) and np.all(m.ref_q <= g1.JOINT_POS_MAX)
    assert np.all(np.abs(m.ref_dq) <= g1.VELOCITY_LIMIT)
    # starts (and ends) standing in exactly the default pose, so a zero residual holds still
    np.testing.assert_allclose(m.ref_q[0], g1.DEFAULT_JOINT_POS, atol=1e-9)
    np.testing.assert_allclose(m.ref_q[-1], g1.DEFAULT_JOINT_POS, atol=1e-9)
    assert m.ref_height[0] == pytest.approx(g1.DEFAULT_BASE_HEIGHT)
    assert np.all(m.ref_foot_height >= -1e-12)
    assert m.reward_weights and all(isinstance(v, float) for v in m.reward_weights.values())
    assert not m.ref_q.flags.writeable


@pytest.mark.parametrize("name", [n for n in ALL if M.load_motion(n).flight_windows])
def test_flight_is_ballistic_and_takeoff_touchdown_are_c1(name):
    if yaml.safe_load(M.motion_path(name).read_text()).get("ballistic") == "com":
        pytest.skip("the COM, not the pelvis, is ballistic: tests/test_reference_com.py")
    m = M.load_motion(name)
    h, f, dt = m.ref_height, m.flight_mask, m.dt
    inner = np.flatnonzero(f[:-2] & f[1:-1] & f[2:]) + 1
    assert inner.size >= 5
    acc = (h[inner + 1] - 2 * h[inner] + h[inner - 1]) / dt**2
    np.testing.assert_allclose(acc, -G, atol=1e-6)
    # C1 (in fact C2) through take-off and touch-down: evaluate the curve just either side
    keys = parse_motion(M.motion_path(name), __import__("yaml").safe_load(M.motion_path(name).read_text()))[1]
    for t0, t1 in m.flight_windows:
        for tb in (t0, t1):
            eps = 1e-7
            hh, vz, az, *_ = base_and_feet(keys, np.array([tb - eps, tb + eps]))
            assert abs(hh[1] - hh[0]) < 1e-5
            assert abs(vz[1] - vz[0]) < 1e-4, (tb, vz)
            assert abs(az[1] - az[0]) < 1e-3, (tb, az)
        T = t1 - t0
        v0 = m.takeoff_velocity()
        if name == "hop":  # same take-off and touch-down height: v0 = sqrt(2 g h_apex)
            i = int(np.argmax(h))  # the apex lies on a sample for this motion (t0 + T/2 on the grid)
            assert m.times[i] == pytest.approx(t0 + T / 2)
            apex = h[i] - m.takeoff_heights[0]
            assert v0 == pytest.approx(np.sqrt(2 * G * apex), rel=1e-9)
            assert v0 == pytest.approx(G * T / 2)
    # the discrete velocity agrees with the analytic one everywhere (no hidden jumps)
    assert np.max(np.abs(np.gradient(h, dt) - m.ref_base_vel_z)) < 0.06


def test_jump_numbers():
    m = M.load_motion("hop")
    s = M.summary(m)
    clearance = m.ref_foot_height[m.flight_mask].max(axis=0).min()  # min over feet of the max in flight
    assert clearance >= 0.08
    assert 0.8 <= s["takeoff_velocity_mps"] <= 1.6
    assert 0.15 <= g1.DEFAULT_BASE_HEIGHT - m.ref_height.min() <= 0.2  # crouch depth
    assert 3.0 <= m.duration <= 5.0
    # it ends with >= 1 s of standing still in the default pose under the policy, where the policy
    # has to catch the landing before deploy's PD HOLD
    still = np.all(np.abs(m.ref_q - g1.DEFAULT_JOINT_POS) < 1e-9, axis=1) & (np.abs(m.ref_height - g1.DEFAULT_BASE_HEIGHT) < 1e-9)
    tail = len(still) - np.flatnonzero(~still)[-1] - 1  # trailing standing frames
    assert tail * m.dt >= 1.0, tail
    assert np.all(m.ref_foot_height[~m.flight_mask] == 0)
    assert np.all(m.contact == ~m.flight_mask[:, None])


def test_hop_forward_moves_forward():
    m = M.load_motion("hop_forward")
    assert m.ref_foot_pos[-1, 0, 0] - m.ref_foot_pos[0, 0, 0] > 0.15
    assert m.ref_base_lin_vel[m.flight_mask, 0].min() > 0.3


@pytest.fixture(scope="module")
def bridge():
    model = RM.build_bridge_model()
    return model, RM.sole_spheres(model).tolist()


@pytest.mark.parametrize("name", ["hop", "hop_forward"])
def test_ik_puts_soles_flat_at_reference_height_in_c_mujoco(name, bridge):
    """FK oracle: the reference joints with the pelvis at the reference pose put each sole flat
    at the reference foot height (0 in stance) and at the reference x."""
    model, spheres = bridge
    d = mujoco.MjData(model)
    m = M.load_motion(name)
    qadr = RM.motor_qpos_adr(model)
    geo = M.leg_geometry()
    for k in range(0, m.num_steps, 2):
        d.qpos[:] = 0
        d.qpos[:3] = m.ref_base_pos[k]
        d.qpos[3] = 1.0
        d.qpos[qadr] = m.ref_q[k]
        mujoco.mj_kinematics(model, d)
        for side in (0, 1):
            bottoms = np.array([d.geom_xpos[g][2] - model.geom_size[g][0] for g in spheres[side]])
            assert np.ptp(bottoms) < 1e-3, f"{name} t={k * m.dt:.2f}: foot not flat ({np.ptp(bottoms)*1e3:.1f} mm)"
            sole = bottoms.min() - geo[side].sole_home_gap  # 0 = home stance
            assert abs(sole - m.ref_foot_height[k, side]) < 0.01, (name, k, side, sole)
            if not m.flight_mask[k]:
                assert abs(bottoms.min()) < 0.01  # on the ground
            ankle = d.xanchor[model.joint(f"{('left', 'right')[side]}_ankle_pitch_joint").id]
            assert abs(ankle[0] - m.ref_foot_pos[k, side, 0]) < 1e-6


def test_unknown_motion_lists_available():
    with pytest.raises(M.MotionError) as e:
        M.load_motion("moonwalk")
    msg = str(e.value)
    assert "moonwalk" in msg and "hop" in msg and "squat" in msg


GOOD = """\
name: {name}
duration: 2.0
keyframes:
  - {{t: 0.0, pelvis_height: 0.785}}
  - {{t: 1.0, pelvis_height: 0.70, joints: {{shoulder_pitch: 0.2}}}}
reward_weights: {{joint_pos: 1.0}}
"""


def test_a_good_file_from_a_path_loads(tmp_path):
    p = tmp_path / "mini.yaml"
    p.write_text(GOOD.format(name="mini"))
    m = M.load_motion(str(p))
    assert m.num_steps == 101 and m.ref_height[-1] == pytest.approx(0.70)
    i = g1.joint_index("right_shoulder_pitch_joint")
    assert m.ref_q[60, i] == pytest.approx(g1.DEFAULT_JOINT_POS[i] + 0.2)
    assert M.available_motions(tmp_path) == ["mini"]


@pytest.mark.parametrize(
    "text, field",
    [
        ("name: bad\nduration: [1\n", "not valid YAML"),
        (GOOD.format(name="other"), "name"),
        (GOOD.format(name="bad").replace("duration: 2.0\n", ""), "duration"),
        (GOOD.format(name="bad").replace("pelvis_height: 0.70", "pelvis_hieght: 0.70"), "keyframes[1].pelvis_hieght"),
        (GOOD.format(name="bad").replace("t: 1.0", "t: 0.0"), "keyframes[1].t"),
        (GOOD.format(name="bad").replace("shoulder_pitch", "knee"), "keyframes[1].joints.knee"),
        (GOOD.format(name="bad").replace("shoulder_pitch", "tail"), "keyframes[1].joints.tail"),
        (GOOD.format(name="bad").replace("shoulder_pitch: 0.2", "shoulder_pitch: fast"), "keyframes[1].joints.shoulder_pitch"),
        (GOOD.format(name="bad").replace("{joint_pos: 1.0}", "{joint_pos: high}"), "reward_weights.joint_pos"),
        (GOOD.format(name="bad").replace("pelvis_height: 0.70", "pelvis_height: 0.70, foot_x: 0.1"), "keyframes[1].foot_x"),
        (GOOD.format(name="bad").replace("pelvis_height: 0.70", "pelvis_height: 0.70, phase: flight"), "keyframes[1].phase"),
        (GOOD.format(name="bad").replace("pelvis_height: 0.70", "pelvis_height: 0.95"), "cannot reach"),
        (GOOD.format(name="bad").replace("pelvis_height: 0.70", "pelvis_height: 0.45"), "outside its limits"),
    ],
)
def test_malformed_file_names_file_and_field(tmp_path, text, field):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(M.MotionError) as e:
        M.load_motion_file(p)
    assert str(p) in str(e.value) and field in str(e.value), str(e.value)


@pytest.mark.parametrize(
    "text, field, fix",
    [
        (GOOD.format(name="bad").replace("t: 1.0", "t: true"), "keyframes[1].t", "expected a finite number, got True"),
        (GOOD.format(name="bad").replace("t: 1.0", "t: '1.0'"), "keyframes[1].t", "expected a finite number"),
        (GOOD.format(name="bad").replace("pelvis_height: 0.70", "pelvis_height: .nan"), "keyframes[1].pelvis_height",
         "expected a finite number"),
        (GOOD.format(name="bad").replace("pelvis_height: 0.70", "pelvis_height: 1.5"), "keyframes[1].pelvis_height",
         "1.5 is too large: it must be <= 1.2"),
        (GOOD.format(name="bad").replace("t: 1.0", "t: 2.5"), "keyframes[1].t", "duration"),
        (GOOD.format(name="bad") + "speed: 2\n", "speed", "unknown field; allowed: ["),
        (GOOD.format(name="bad").replace("{joint_pos: 1.0}", "{}"), "reward_weights", "at least 1"),
        (GOOD.format(name="bad").replace("pelvis_height: 0.70", "pelvis_height: 0.70, phase: jump"),
         "keyframes[1].phase", "use 'stance' or 'flight'"),
        (GOOD.format(name="bad").replace("pelvis_height: 0.785", "pelvis_height: 0.785, phase: flight"),
         "keyframes[0].apex_foot_clearance", "missing (required for phase: flight)"),
        (GOOD.format(name="bad").replace("pelvis_height: 0.70", "pelvis_height: 0.70, apex_foot_clearance: 0.1"),
         "keyframes[1].apex_foot_clearance", "only allowed with phase: flight"),
        ("- 1\n- 2\n", "<top level>", "expected a mapping, got list"),
    ],
)
def test_schema_errors_name_field_and_fix(tmp_path, text, field, fix):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(M.MotionError) as e:
        M.load_motion_file(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: {field}: ") and fix in msg, msg


def test_preview_plot(tmp_path):
    out = M.plot_motion(M.load_motion("hop"), tmp_path / "jump.png")
    assert out.stat().st_size > 10_000


def test_preview_cli_prints_phases_and_writes_the_plot(tmp_path, capsys):
    m = M.load_motion("hop")
    assert motions_cli(["preview", "hop", "--out", str(tmp_path / "j.png")]) == 0
    text = capsys.readouterr().out
    assert (tmp_path / "j.png").stat().st_size > 10_000
    assert f"{m.num_steps} frames" in text and "50 Hz" in text and str(list(m.flight_windows)) in text
    (t0, t1), = m.flight_windows
    phases = M.contact_phases(m)
    assert [p for p, *_ in phases] == ["stance", "flight", "stance"]
    assert phases[1][1:] == (t0, t1) and phases[0][1] == 0.0 and phases[-1][2] == m.duration
    assert motions_cli(["preview", "moonwalk"]) == 2 and "available motions" in capsys.readouterr().out


@pytest.mark.parametrize("name", ALL)
def test_centre_of_mass_stays_over_the_feet_in_stance(name, bridge):
    """Quasi-static plausibility: with the reference pose (pelvis at the reference position and orientation),
    the whole-body CoM lies between the heel and toe spheres whenever the feet are on the ground,
    except in the 0.15 s after a touch-down and the 0.1 s before a take-off: there the floor brakes the
    flight's momentum (a forward jump lands with the feet ahead of the CoM on purpose) or launches it
    (a forward take-off off the toes ends with the CoM past them), which is not quasi-static; the
    dynamic check of those frames is the CoP's (motions.balance, tests/test_balance.py)."""
    model, spheres = bridge
    d = mujoco.MjData(model)
    m = M.load_motion(name)
    qadr = RM.motor_qpos_adr(model)
    dynamic = np.zeros(m.num_steps, bool)  # braking or launching
    for t0, t1 in m.flight_windows:
        dynamic |= (m.times >= t1 - 1e-9) & (m.times < t1 + 0.15) | (m.times > t0 - 0.1) & (m.times <= t0 + 1e-9)
    for k in np.flatnonzero(~m.flight_mask & ~dynamic)[::3]:
        d.qpos[:] = 0
        d.qpos[:3] = m.ref_base_pos[k]
        d.qpos[3:7] = (1.0, 0.0, 0.0, 0.0) if m.ref_base_quat is None else m.ref_base_quat[k]
        d.qpos[qadr] = m.ref_q[k]
        mujoco.mj_kinematics(model, d)
        mujoco.mj_comPos(model, d)
        xs = np.concatenate([d.geom_xpos[s, 0] for s in spheres])
        com = d.subtree_com[1, 0]
        assert xs.min() + 0.02 < com < xs.max() - 0.02, (name, k * m.dt, com, xs.min(), xs.max())
