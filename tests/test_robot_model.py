"""The robot facts in robots/g1.py against the compiled models and the reference table."""
import mujoco
import numpy as np
import pytest

from robots import g1
from robots import model as M


@pytest.fixture(scope="module")
def train_model():
    return M.build_training_model()


@pytest.fixture(scope="module")
def bridge_model():
    return M.build_bridge_model()


def _motor_joint_names(m):
    return [m.joint(m.actuator_trnid[i, 0]).name for i in range(m.nu)]


@pytest.mark.parametrize("which", ["train_model", "bridge_model"])
def test_actuators_are_torque_motors_in_motor_order(which, request):
    m = request.getfixturevalue(which)
    assert m.nu == g1.NUM_MOTORS == 29
    assert _motor_joint_names(m) == list(g1.JOINT_NAMES)
    # motor: gain 1, no bias -> ctrl is torque in Nm
    np.testing.assert_array_equal(m.actuator_gainprm[:, 0], 1.0)
    np.testing.assert_array_equal(m.actuator_biasprm[:, :3], 0.0)
    np.testing.assert_allclose(m.actuator_ctrlrange[:, 1], g1.TORQUE_LIMIT)
    np.testing.assert_allclose(m.actuator_ctrlrange[:, 0], -g1.TORQUE_LIMIT)


@pytest.mark.parametrize("which", ["train_model", "bridge_model"])
def test_limits_match_model(which, request):
    m = request.getfixturevalue(which)
    jid = [m.joint(n).id for n in g1.JOINT_NAMES]
    np.testing.assert_allclose(m.jnt_range[jid, 0], g1.JOINT_POS_MIN, atol=1e-6)
    np.testing.assert_allclose(m.jnt_range[jid, 1], g1.JOINT_POS_MAX, atol=1e-6)
    np.testing.assert_allclose(m.jnt_actfrcrange[jid, 1], g1.TORQUE_LIMIT)
    assert abs(m.body_subtreemass[1] - g1.TOTAL_MASS) < 0.01


def test_limits_match_reference_table():
    # Unitree's G1 motor table and Menagerie g1.xml, hand-copied
    ref = {
        "left_hip_pitch_joint": (-2.5307, 2.8798, 88, 32),
        "left_hip_roll_joint": (-0.5236, 2.9671, 139, 20),
        "right_hip_roll_joint": (-2.9671, 0.5236, 139, 20),
        "left_hip_yaw_joint": (-2.7576, 2.7576, 88, 32),
        "left_knee_joint": (-0.0873, 2.8798, 139, 20),
        "left_ankle_pitch_joint": (-0.8727, 0.5236, 50, 37),
        "left_ankle_roll_joint": (-0.2618, 0.2618, 50, 37),
        "waist_yaw_joint": (-2.618, 2.618, 88, 32),
        "waist_roll_joint": (-0.52, 0.52, 50, 37),
        "waist_pitch_joint": (-0.52, 0.52, 50, 37),
        "left_wrist_roll_joint": (None, None, 25, 37),
        "right_wrist_yaw_joint": (None, None, 5, 22),
    }
    for name, (lo, hi, tau, vel) in ref.items():
        i = g1.joint_index(name)
        if lo is not None:
            assert abs(g1.JOINT_POS_MIN[i] - lo) < 1e-3 and abs(g1.JOINT_POS_MAX[i] - hi) < 1e-3, name
        assert g1.TORQUE_LIMIT[i] == tau and g1.VELOCITY_LIMIT[i] == vel, name
    assert g1.JOINT_NAMES[12] == "waist_yaw_joint" and g1.JOINT_NAMES[22] == "right_shoulder_pitch_joint"
    assert np.all(g1.DEFAULT_JOINT_POS >= g1.JOINT_POS_MIN) and np.all(g1.DEFAULT_JOINT_POS <= g1.JOINT_POS_MAX)


def test_training_model_has_only_foot_floor_contacts(train_model):
    m = train_model
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, m.key("home").id)
    d.qpos[2] -= 0.01  # press the feet into the floor
    mujoco.mj_forward(m, d)
    feet = {m.body(n).id for n in g1.FOOT_BODIES}
    floor = m.geom("floor").id
    assert d.ncon == 8  # 4 spheres per foot
    for c in d.contact[: d.ncon]:
        pair = {c.geom1, c.geom2}
        assert floor in pair
        other = (pair - {floor}).pop()
        assert m.geom_bodyid[other] in feet
    # every geom other than feet and floor can never collide
    for g in range(m.ngeom):
        if g == floor or m.geom_bodyid[g] in feet:
            continue
        assert m.geom_contype[g] == 0 and m.geom_conaffinity[g] == 0
    assert m.nmesh == 0
    assert m.opt.iterations == 1
    assert m.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_EULERDAMP


@pytest.mark.parametrize("which", ["train_model", "bridge_model"])
def test_sole_spheres_are_the_four_foot_spheres_per_foot(which, request):
    m = request.getfixturevalue(which)
    soles = M.sole_spheres(m)
    assert soles.shape == (2, 4)
    for foot, geoms in zip(g1.FOOT_BODIES, soles):
        assert all(m.geom_bodyid[g] == m.body(foot).id and m.geom_type[g] == mujoco.mjtGeom.mjGEOM_SPHERE for g in geoms)
    np.testing.assert_allclose(m.geom_size[soles, 0], 0.005)
    # the training model's only colliding geoms besides the floor
    if which == "train_model":
        floor = m.geom("floor").id
        assert soles.ravel().tolist() == [g for g in range(m.ngeom) if g != floor and m.geom_contype[g]]


def test_stiffness_knob_sets_contact_timeconst():
    for name, tc in M.STIFFNESS_TIMECONST.items():
        m = M.build_training_model(M.TrainModelConfig(stiffness=name))
        assert m.geom_solref[m.geom("floor").id][0] == pytest.approx(tc)
    with pytest.raises(ValueError, match="below 2 x timestep"):
        M.build_training_model(M.TrainModelConfig(stiffness=0.004))
    with pytest.raises(ValueError, match="unknown contact stiffness"):
        M.build_training_model(M.TrainModelConfig(stiffness="rubber"))


def test_bridge_model_full_collisions_1khz(bridge_model):
    m = bridge_model
    assert m.opt.timestep == pytest.approx(0.001)
    assert m.nmesh > 0 and sum(1 for g in range(m.ngeom) if m.geom_contype[g]) > 20
    assert m.site(g1.IMU_SITE).id >= 0


def test_bridge_holds_default_pose_with_robot_gains(bridge_model):
    """PD at the robot's gains keeps the robot standing (ankle gains were chosen for this)."""
    m = bridge_model
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, m.key("home").id)
    qa, da = M.motor_qpos_adr(m), M.motor_dof_adr(m)
    for _ in range(3000):
        tau = g1.KP * (g1.DEFAULT_JOINT_POS - d.qpos[qa]) - g1.KD * d.qvel[da]
        d.ctrl[:] = np.clip(tau, -g1.TORQUE_LIMIT, g1.TORQUE_LIMIT)
        mujoco.mj_step(m, d)
    assert 0.75 < d.qpos[2] < 0.80
    assert abs(d.qpos[4]) < 0.02 and abs(d.qpos[5]) < 0.02  # quaternion x, y: upright


def test_override_path_missing_is_clear_error(tmp_path):
    with pytest.raises(M.ModelError, match="does not exist"):
        M.build_bridge_model(M.BridgeModelConfig(mjcf=str(tmp_path / "nope.xml")))


def test_override_with_wrong_joints_is_clear_error(tmp_path):
    xml = tmp_path / "robot.xml"
    xml.write_text(
        """<mujoco><worldbody><body name="pelvis"><freejoint/>
        <geom size="0.1"/><body><joint name="left_hip_pitch_joint"/><geom size="0.1"/></body>
        <body><joint name="tail_joint"/><geom size="0.1"/></body></body></worldbody></mujoco>"""
    )
    with pytest.raises(M.ModelError, match=r"missing joints .*left_hip_roll_joint.*unexpected joints \['tail_joint'\]"):
        M.build_training_model(M.TrainModelConfig(mjcf=str(xml)))


def test_env_var_override(tmp_path, monkeypatch):
    monkeypatch.setenv(M.MJCF_ENV_VAR, str(tmp_path / "missing.xml"))
    with pytest.raises(M.ModelError, match="G1_MJCF"):
        M.g1_mjcf_path()
