"""Whole-body-tracking policies on the one runtime (policies.tracking): the torso anchor by forward
kinematics against hand-built rotations, BeyondMimic-format tracking graphs built here with known reference
tables (every observed entry checked by hand: the motion command, the anchor orientation and position
relative to the yaw/position-aligned reference), the end of the clip, holosoma-inference 0.1.3's two real
dance models (its reference tables, action scales and term order against the wheel's own files), and
every refusal naming its key, before any command (deploy.preflight)."""
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploy.preflight import PreflightError, check_artifact
from experiments import holosoma_models as holosoma_files
from policies.adapters import load_policy
from policies.adapters.export import ISAAC_ORDER
from policies.runtime import PolicyRuntime
from policies.tracking import rot6d, rotation_angle, tracking_summary
from robots import g1
from robots.body_frames import BodyFrames, mat_to_quat, quat_to_mat
from tests.test_adapters import holosoma_models, random_state  # noqa: F401 - the fixture (PyPI wheel, cached)

REPO = Path(__file__).resolve().parent.parent

BM_160 = ("command", "motion_anchor_pos_b", "motion_anchor_ori_b", "base_lin_vel", "base_ang_vel", "joint_pos",
          "joint_vel", "actions")
BM_154 = ("command", "motion_anchor_ori_b", "base_ang_vel", "joint_pos", "joint_vel", "actions")
SIZES = {"command": 58, "motion_anchor_pos_b": 3, "motion_anchor_ori_b": 6, "base_lin_vel": 3, "base_ang_vel": 3,
         "joint_pos": 29, "joint_vel": 29, "actions": 29}


def rz(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])


def rx(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[1.0, 0, 0], [0, c, -s], [0, s, c]])


def ry(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, 0, s], [0, 1.0, 0], [-s, 0, c]])


def yaw_quat(a):
    return np.array([np.cos(a / 2), 0.0, 0.0, np.sin(a / 2)])


T = 6
ORDER = list(ISAAC_ORDER)  # the file's joint order: IsaacLab's, as BeyondMimic exports
REF_JP = np.array([g1.DEFAULT_JOINT_POS[ORDER] + 0.01 * k for k in range(T)])  # policy order
REF_JV = np.array([np.full(29, 0.1 * k) for k in range(T)])
REF_YAW = 0.5 + 0.1 * np.arange(T)
REF_POS = np.array([[2.0 + 0.3 * k, 1.0, 0.9] for k in range(T)])


def bm_file(path, names=BM_160, n_obs=None, frames=T, anchor="torso_link", bodies=("pelvis", "torso_link"),
            time_step=(1, 1), drop=()):
    """A BeyondMimic-format tracking ONNX: obs + time_step in, zero actions and the reference tables out
    (joint_pos, joint_vel (1, 29); body_pos_w (1, n_bodies, 3), body_quat_w (1, n_bodies, 4) w x y z),
    metadata_props as mjlab's exporter writes them (CSV, 3 decimals)."""
    n_obs = sum(SIZES.get(n, 6) for n in names) if n_obs is None else n_obs
    nb = len(bodies)
    jp, jv = REF_JP[:frames], REF_JV[:frames]
    bpos = np.zeros((frames, nb, 3))
    bquat = np.tile([1.0, 0, 0, 0], (frames, nb, 1))
    ai = bodies.index(anchor) if anchor in bodies else 0
    bpos[:, ai] = REF_POS[:frames]
    bquat[:, ai] = [yaw_quat(a) for a in REF_YAW[:frames]]
    c = lambda n, a, t=np.float32: numpy_helper.from_array(np.asarray(a, t), n)  # noqa: E731
    inits = [c("W", np.zeros((n_obs, 29))), c("jp", jp), c("jv", jv), c("bp", bpos), c("bq", bquat),
             c("flat", [-1], np.int64), c("lo", 0, np.int64), c("hi", frames - 1, np.int64)]
    N = helper.make_node
    nodes = [N("MatMul", ["obs", "W"], ["actions"]),
             N("Cast", ["time_step"], ["ts64"], to=TensorProto.INT64), N("Reshape", ["ts64", "flat"], ["ts1"]),
             N("Clip", ["ts1", "lo", "hi"], ["ts"])]
    outs = [helper.make_tensor_value_info("actions", TensorProto.FLOAT, [1, 29])]
    for table, out, shape in (("jp", "joint_pos", [1, 29]), ("jv", "joint_vel", [1, 29]),
                              ("bp", "body_pos_w", [1, nb, 3]), ("bq", "body_quat_w", [1, nb, 4])):
        nodes.append(N("Gather", [table, "ts"], [out], axis=0))
        outs.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, shape))
    ins = [helper.make_tensor_value_info("obs", TensorProto.FLOAT, [1, n_obs])]
    if time_step is not None:
        ins.append(helper.make_tensor_value_info("time_step", TensorProto.FLOAT, list(time_step)))
    else:  # no time_step input: the reference is read at step 0
        inits.append(c("time_step", [[0.0]]))
    model = helper.make_model(helper.make_graph(nodes, "bm", ins, outs, initializer=inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    csv = lambda v: ",".join(f"{x:.3f}" if isinstance(x, float) else str(x) for x in v)  # noqa: E731
    meta = {"joint_names": csv([g1.JOINT_NAMES[i] for i in ORDER]),
            "joint_stiffness": csv([float(g1.KP[i]) for i in ORDER]),
            "joint_damping": csv([float(g1.KD[i]) for i in ORDER]),
            "default_joint_pos": csv([float(g1.DEFAULT_JOINT_POS[i]) for i in ORDER]),
            "action_scale": csv([0.25] * 29), "observation_names": csv(names), "command_names": "motion",
            "run_path": "test/bm", "anchor_body_name": anchor, "body_names": csv(bodies)}
    for k, v in meta.items():
        if k not in drop:
            model.metadata_props.add(key=k, value=v)
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())
    return path


def robot_state(yaw=-0.4, pos=(0.5, -0.2, 0.78)):
    q = g1.DEFAULT_JOINT_POS.copy()  # waist at zero: the torso is the pelvis' orientation
    return q, np.zeros(29), np.zeros(3), yaw_quat(yaw), np.zeros(3), pos[2], np.asarray(pos)


# ---------------------------------------------------------------- kinematics and the 6-D form
def test_torso_orientation_is_the_pelvis_through_the_waist_joints_yaw_roll_pitch():
    f = BodyFrames()
    q = np.zeros(29)
    q[[12, 13, 14]] = 0.3, 0.2, 0.25  # waist yaw, roll, pitch
    _, r = f.pose_in_pelvis("torso_link", q)
    np.testing.assert_allclose(r, rz(0.3) @ rx(0.2) @ ry(0.25), atol=1e-9)
    q[[12, 13, 14]] = 0.0
    q[:12] = 0.4  # the legs do not move the torso
    p, r = f.pose_in_pelvis("torso_link", q)
    np.testing.assert_allclose(r, np.eye(3), atol=1e-12)
    assert p[2] == pytest.approx(0.044)  # Menagerie G1: torso_link 44 mm above the pelvis origin at zero waist
    with pytest.raises(ValueError, match="no body 'head_link'"):
        f.body_id("head_link")


def test_rot6d_takes_two_columns_row_by_row():
    np.testing.assert_allclose(rot6d(rz(np.pi / 2)), [0, -1, 1, 0, 0, 0], atol=1e-15)
    assert rotation_angle(rz(0.3) @ rx(0.2).T @ rx(0.2)) == pytest.approx(0.3)


# ---------------------------------------------------------------- BeyondMimic layout, by hand
def test_beyondmimic_160_observation_by_hand(tmp_path):
    art = check_artifact(bm_file(tmp_path / "bm.onnx"))
    sp = art.spec
    assert (sp.kind, sp.n_obs, sp.tracking.anchor_body, sp.tracking.body_index) == ("tracking", 160, "torso_link", 1)
    assert [t.name for t in sp.observation][:3] == ["motion_command", "motion_anchor_pos_b", "motion_anchor_ori_b"]
    r = PolicyRuntime(art)
    assert r.n_steps == T - 1
    q, dq, gyro, quat, vel, h, pos = robot_state()
    torso_p, _ = BodyFrames().pose_in_pelvis("torso_link", q)
    pz = pos[2] + torso_p[2]  # the robot torso's height (yaw-only pelvis)
    out0 = r.step(0, q, dq, gyro, quat, vel, h, base_pos=pos)
    np.testing.assert_allclose(out0.obs[:29], REF_JP[0], atol=1e-6)  # command: the graph's joint_pos, policy order
    np.testing.assert_allclose(out0.obs[29:58], REF_JV[0], atol=1e-6)
    np.testing.assert_allclose(out0.obs[58:61], [0, 0, 0.9 - pz], atol=1e-6)  # aligned on the ground, height kept
    np.testing.assert_allclose(out0.obs[61:67], [1, 0, 0, 1, 0, 0], atol=1e-6)  # heading aligned
    out2 = r.step(2, q, dq, gyro, quat, vel, h, base_pos=pos)
    np.testing.assert_allclose(out2.obs[:29], REF_JP[2], atol=1e-6)
    np.testing.assert_allclose(out2.obs[29:58], REF_JV[2], atol=1e-6)
    # the reference moved 0.6 m along world x; turned by yaw_r - yaw_m0 = -0.9 and seen from the robot
    # (yaw_r = -0.4): Rz(0.4) Rz(-0.9) (0.6, 0, 0) = Rz(-0.5) (0.6, 0, 0)
    np.testing.assert_allclose(out2.obs[58:61], [0.6 * np.cos(-0.5), 0.6 * np.sin(-0.5), 0.9 - pz], atol=1e-6)
    np.testing.assert_allclose(out2.obs[61:67], rot6d(rz(0.2)), atol=1e-6)  # 0.2 rad more reference heading
    assert r.tracking.anchor_ori_error == pytest.approx(0.2, abs=1e-6)
    np.testing.assert_allclose(out2.obs[67:70], vel)
    np.testing.assert_allclose(out2.obs[73:102], 0.0, atol=1e-7)  # joint_pos - default, policy order
    np.testing.assert_allclose(r.tracking.joint_error, g1.DEFAULT_JOINT_POS[ORDER] - REF_JP[2], atol=1e-6)


def test_beyondmimic_154_variant_and_heading_of_a_turned_robot(tmp_path):
    r = PolicyRuntime(check_artifact(bm_file(tmp_path / "bm.onnx", names=BM_154)))
    assert r.n_obs == 154
    for yaw in (-2.5, 0.0, 1.7):  # any start heading: the reference is turned onto it
        r.reset()
        q, dq, gyro, quat, vel, h, _ = robot_state(yaw=yaw)
        np.testing.assert_allclose(r.step(0, q, dq, gyro, quat, vel, h).obs[58:64], rot6d(np.eye(3)), atol=1e-6)
        np.testing.assert_allclose(r.step(3, q, dq, gyro, quat, vel, h).obs[58:64], rot6d(rz(0.3)), atol=1e-6)


def test_a_time_step_past_the_clip_ends_it_without_an_index_error(tmp_path):
    r = PolicyRuntime(check_artifact(bm_file(tmp_path / "bm.onnx")))
    q, dq, gyro, quat, vel, h, pos = robot_state()
    assert not r.done(T - 2) and r.done(T - 1)  # time_step 0 .. T-2 run, then HOLD (the caller's)
    out = r.step(T + 40, q, dq, gyro, quat, vel, h, base_pos=pos)
    np.testing.assert_allclose(out.obs[:29], REF_JP[-1], atol=1e-6)  # the last frame, no IndexError
    np.testing.assert_allclose(r.hold_target(out.target, 10.0), r.default_q)


@pytest.mark.parametrize("case, kwargs, match", [
    ("no_time_step", {"time_step": None}, "needs a tracking graph"),
    ("time_step_shape", {"time_step": (1, 2)}, r"'time_step' has shape \[1, 2\], expected \[1, 1\]"),
    ("one_frame", {"frames": 1}, "at least 2"),
    ("unknown_term", {"names": BM_154 + ("robot_body_ori_b",)}, "'robot_body_ori_b'"),
    ("160_file_154_metadata", {"names": BM_154, "n_obs": 160}, "expected 154, found 160"),
    ("154_file_160_metadata", {"n_obs": 154}, "expected 160, found 154"),
    ("anchor_not_a_g1_body", {"anchor": "head_link", "bodies": ("pelvis", "head_link")}, "'head_link'.*not a G1 body"),
    ("anchor_not_in_bodies", {"bodies": ("pelvis",)}, r"anchor_body_name.*not in.*body_names"),
    ("no_anchor_name", {"drop": ("anchor_body_name",)}, r"lacks.*anchor_body_name|need metadata_props\['anchor_body_name'\]"),
])
def test_bad_tracking_files_are_refused_in_preflight_naming_the_key(tmp_path, case, kwargs, match):
    with pytest.raises(PreflightError, match=match):
        check_artifact(bm_file(tmp_path / f"{case}.onnx", **kwargs))


def test_tracking_summary_by_hand():
    t = np.arange(150) * 0.02  # 3 s
    jsq = np.where(t >= 2.0, 0.04, 0.01)  # joint error 0.1 rad then 0.2 rad
    ae = np.where(t < 1.0, 0.3, 0.1)
    s = tracking_summary(t, jsq, ae, clip_frames=151, steps=150)
    assert s["joint_rms_rad"] == pytest.approx(np.sqrt((100 * 0.01 + 50 * 0.04) / 150))
    assert (s["joint_rms_worst_s_rad"], s["joint_rms_worst_s_at"]) == (pytest.approx(0.2), 2.0)
    assert (s["anchor_ori_err_worst_s_rad"], s["anchor_ori_err_worst_s_at"]) == (pytest.approx(0.3), 0.0)
    assert s["anchor_ori_err_rad"] == pytest.approx((50 * 0.3 + 100 * 0.1) / 150)
    assert s["clip_ended"]


# ---------------------------------------------------------------- holosoma-inference 0.1.3 (real files)
def graph_tables(path):
    """The (T, .) Constant tables the four reference outputs gather (read straight from the graph)."""
    m = onnx.load(path)
    consts = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in m.graph.node if n.op_type == "Constant"}
    return {n.output[0]: consts[n.input[0]] for n in m.graph.node if n.op_type == "Gather" and n.input[0] in consts}


@pytest.mark.network
@pytest.mark.parametrize("name, frames", [("ppo_g1_29dof_dancing.onnx", 6574), ("fastsac_g1_29dof_dancing.onnx", 6774)])
def test_holosoma_wbt_models_read_with_the_graphs_reference(holosoma_models, name, frames):
    f = holosoma_models / holosoma_files.WBT / name
    art = check_artifact(f)
    sp = art.spec
    assert (sp.format, sp.kind, sp.n_obs, sp.tracking.anchor_body) == ("holosoma", "tracking", 154, "torso_link")
    assert [t.source.split(": ")[1] for t in sp.observation] == ["actions", "base_ang_vel", "dof_pos", "dof_vel",
                                                                 "motion_command", "motion_ref_ori_b"]
    robot_py = (holosoma_models / "holosoma_inference/config/config_values/robot.py").read_text()
    table = robot_py[robot_py.index("G1_29DOF_PER_JOINT_ACTION_SCALE = ("):]
    want = [float(x) for x in re.findall(r"[0-9]\.[0-9]+", table[:table.index(")")])]
    bound = {i.name: numpy_helper.to_array(i) for i in onnx.load(f).graph.initializer}.get(
        "_wrapped_actor.actor.actor.action_scale")
    if bound is None:  # PPO: raw actions, holosoma's own per-joint table (0.25 x effort limit / kp)
        np.testing.assert_allclose(sp.action_scales, want, rtol=1e-6)
    else:  # FastSAC: tanh x the distance from the default pose to the farther joint limit: offsets in rad
        d = np.asarray(sp.default_joint_pos)
        np.testing.assert_allclose(bound, np.maximum(g1.JOINT_POS_MAX - d, d - g1.JOINT_POS_MIN), atol=2e-3)
        assert sp.action_scales == (1.0,) * 29
    r = PolicyRuntime(art)
    assert r.n_steps == frames - 1
    tab = graph_tables(f)
    ref = r.tracking.ref
    np.testing.assert_allclose(ref.joint_pos, tab["joint_pos"], atol=1e-7)
    np.testing.assert_allclose(ref.joint_vel, tab["joint_vel"], atol=1e-7)
    np.testing.assert_allclose(ref.anchor_quat, tab["ref_quat_xyzw"][:, [3, 0, 1, 2]], atol=1e-6)
    # the robot standing exactly in the reference's frame-0 pose, turned by 1 rad: the reference is turned onto
    # it, so the relative orientation is the identity and the command is the graph's row 0
    k = 0
    q = tab["joint_pos"][k].astype(float)  # dof_names are the motor order
    _, r_t = BodyFrames().pose_in_pelvis("torso_link", q)
    x, y, z, w = tab["ref_quat_xyzw"][k]
    r_torso = rz(1.0) @ quat_to_mat([w, x, y, z])
    quat = mat_to_quat(r_torso @ r_t.T)  # the pelvis whose torso is r_torso
    out = r.step(k, q, np.zeros(29), np.zeros(3), quat, np.zeros(3), 0.78)
    np.testing.assert_allclose(out.obs[90:148], np.concatenate(tab["joint_pos"][k:k + 1].tolist()
                                                               + tab["joint_vel"][k:k + 1].tolist()), atol=1e-6)
    np.testing.assert_allclose(out.obs[148:154], rot6d(np.eye(3)), atol=1e-5)
    np.testing.assert_allclose(out.obs[32:61], q - np.asarray(sp.default_joint_pos), atol=1e-6)


@pytest.mark.network
def test_holosoma_wbt_of_another_size_is_refused(holosoma_models, tmp_path):
    m = onnx.load(holosoma_models / holosoma_files.WBT / "ppo_g1_29dof_dancing.onnx")
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 160
    f = tmp_path / "wbt160.onnx"
    f.write_bytes(m.SerializeToString())
    with pytest.raises(PreflightError, match=r"expected \[1, 154\].*found \[160\]"):
        check_artifact(f)


@pytest.mark.network
def test_graphs_reference_is_the_torso_pose_feet_on_the_floor(holosoma_models):
    """ref_pos_xyz / ref_quat_xyzw are the torso's: placed as the torso, the standing frames put the ankle
    links at their standing height above the floor; placed as the pelvis, 44 mm higher."""
    art = load_policy(holosoma_models / holosoma_files.WBT / "ppo_g1_29dof_dancing.onnx")
    tab = graph_tables(art.path)
    f = BodyFrames()
    stand_q = g1.DEFAULT_JOINT_POS
    ankle_stand = g1.DEFAULT_BASE_HEIGHT + f.pose_in_pelvis("left_ankle_roll_link", stand_q)[0][2]
    k = 0
    q = tab["joint_pos"][k].astype(float)
    p_t, r_t = f.pose_in_pelvis("torso_link", q)
    x, y, z, w = tab["ref_quat_xyzw"][k]
    r_pelvis = quat_to_mat([w, x, y, z]) @ r_t.T
    p_pelvis = tab["ref_pos_xyz"][k] - r_pelvis @ p_t
    feet = [p_pelvis[2] + (r_pelvis @ f.pose_in_pelvis(b, q)[0])[2] for b in g1.FOOT_BODIES]
    assert np.max(np.abs(np.array(feet) - ankle_stand)) < 0.01


# ---------------------------------------------------------------- make eval POLICY=<file>
def test_eval_of_a_tracking_file_measures_against_the_graphs_reference(tmp_path):
    """Zero actions hold the default pose: over the 5 steps of the clip the joint error is default - reference
    (the robot stays within 1 mrad of its home pose in 0.1 s), row by row of the graph's table."""
    from eval.config import DRConfig, EvalConfig
    from eval.policy_eval import evaluate_policy

    f = bm_file(tmp_path / "bm.onnx", names=BM_154)
    cfg = EvalConfig(episodes=1, video=False, hold_s=0.2, dr=DRConfig(enabled=False))
    s, out = evaluate_policy(f, cfg, tmp_path / "eval")
    ep = s["per_episode"][0]
    assert (s["falls"], ep["tracking"]["policy_steps"], ep["tracking"]["clip_ended"]) == (0, T - 1, True)
    want = np.sqrt(np.mean((g1.DEFAULT_JOINT_POS[ORDER] - REF_JP[:T - 1]) ** 2))
    assert ep["tracking"]["joint_rms_rad"] == pytest.approx(want, abs=1e-3)
    assert s["tracking"]["joint_rms_rad"] == ep["tracking"]["joint_rms_rad"]
    assert (out / "eval.json").is_file() and s["policy_info"]["kind"] == "tracking"


# ---------------------------------------------------------------- our policy in the BeyondMimic format, and back
def test_our_policy_exported_as_beyondmimic_tracking_runs_back_within_1e6(tmp_path):
    """policies.adapters.export writes the hop as a BeyondMimic tracking file (keys, 3-decimal CSV, obs +
    time_step, joint_pos / joint_vel / body_pos_w / body_quat_w outputs); read back, the runtime's reference is
    the native one and the targets agree with the native artifact's within 1e-6 rad."""
    from policies.adapters.export import export_mjlab
    from policies.artifact import load_artifact
    native = load_artifact(REPO / "policies" / "g1" / "hop")
    f = export_mjlab(native, tmp_path / "bm")
    m = onnx.load(f)
    meta = {p.key: p.value for p in m.metadata_props}
    assert meta["anchor_body_name"] == "pelvis" and meta["body_names"] == "pelvis"
    assert meta["default_joint_pos"].split(",")[:3] == ["-0.100", "-0.100", "0.000"]
    assert [o.name for o in m.graph.output][3:] == ["body_pos_w", "body_quat_w"]
    art = check_artifact(f)
    a, b = PolicyRuntime(native), PolicyRuntime(art)
    ref = b.tracking.ref
    np.testing.assert_allclose(ref.joint_pos, native.ref_q[:, list(ISAAC_ORDER)], atol=1e-6)
    rng = np.random.default_rng(1)
    worst = 0.0
    for step in range(a.n_steps):
        state = random_state(rng)
        worst = max(worst, float(np.max(np.abs(a.step(step, *state).target - b.step(step, *state).target))))
    assert worst < 1e-6, worst
    sess_out = onnxruntime_outputs(f, 7)
    np.testing.assert_allclose(sess_out["body_pos_w"][0, 0], [0, 0, native.ref_height[7]], atol=1e-6)
    np.testing.assert_allclose(sess_out["body_quat_w"][0, 0], [1, 0, 0, 0])


def onnxruntime_outputs(path, step):
    import onnxruntime as ort

    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32) for i in s.get_inputs()}
    feed["time_step"][...] = step
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feed)))


# ---------------------------------------------------------------- python -m motions extract
def test_extract_writes_the_graphs_reference_as_our_clip(tmp_path):
    """Joints back in motor order from the file's (Isaac) order; the root from the pelvis row when the graph
    has one, else from the anchor (torso) row through the waist by FK: the torso placed on the extracted root
    is the graph's torso pose."""
    from motions.clip_files import read_clip_file
    from motions.tracking_onnx import extract

    out = extract(bm_file(tmp_path / "p.onnx"), tmp_path / "p.npz")
    clip = read_clip_file(out)
    inv = np.argsort(ORDER)
    np.testing.assert_allclose(clip.joints, REF_JP[:, inv], atol=1e-6)
    np.testing.assert_allclose(clip.root_pos, 0.0) and np.testing.assert_allclose(clip.root_quat[:, 0], 1.0)
    clip = read_clip_file(extract(bm_file(tmp_path / "t.onnx", bodies=("torso_link",)), tmp_path / "t.npz"))
    f = BodyFrames()
    for k in range(T):
        p_in, r_in = f.pose_in_pelvis("torso_link", clip.joints[k])
        r = quat_to_mat(clip.root_quat[k])
        np.testing.assert_allclose(clip.root_pos[k] + r @ p_in, REF_POS[k], atol=1e-6)
        np.testing.assert_allclose(r @ r_in, rz(REF_YAW[k]), atol=1e-6)
    d = np.load(tmp_path / "t.npz")
    np.testing.assert_allclose(d["joint_vel"][:, 6:], REF_JV[:, inv], atol=1e-6)  # the graph's joint velocities
    np.testing.assert_allclose(d["joint_vel"][0, :3], (clip.root_pos[1] - clip.root_pos[0]) * 50.0, atol=1e-9)


@pytest.mark.network
def test_extract_of_holosoma_dance_puts_the_torso_on_the_graphs_pose(holosoma_models, tmp_path):
    from motions.clip_files import read_clip_file
    from motions.tracking_onnx import extract

    f = holosoma_models / holosoma_files.WBT / "ppo_g1_29dof_dancing.onnx"
    clip = read_clip_file(extract(f, tmp_path / "dance.npz"))
    tab = graph_tables(f)
    assert clip.joints.shape == (6574, 29) and clip.fps == 50.0
    kin = BodyFrames()
    for k in (0, 1000, 4000, 6573):
        np.testing.assert_allclose(clip.joints[k], tab["joint_pos"][k], atol=1e-6)  # dof_names: motor order
        p_in, r_in = kin.pose_in_pelvis("torso_link", clip.joints[k])
        r = quat_to_mat(clip.root_quat[k])
        x, y, z, w = tab["ref_quat_xyzw"][k]
        np.testing.assert_allclose(clip.root_pos[k] + r @ p_in, tab["ref_pos_xyz"][k], atol=1e-6)
        np.testing.assert_allclose(r @ r_in, quat_to_mat([w, x, y, z]), atol=1e-6)


def test_tracking_policies_table_renders_each_run():
    from experiments.tracking_policies import render_tracking_policies_table

    tr = {"joint_rms_rad": 0.1414, "joint_rms_worst_s_rad": 0.2, "joint_rms_worst_s_at": 48.0,
          "anchor_ori_err_rad": 0.07, "anchor_ori_err_worst_s_rad": None, "anchor_ori_err_worst_s_at": None}
    res = {"models": {"m.onnx": {"policy_s": 66.0, "fell": False, "final_state": "POLICY", "safety_events": [],
                                 "tracking": tr,
                                 "eval": {"policy_s": 4.2, "fell": True, "fell_at_s": 4.22, "tracking": tr},
                                 "extract": {"frames": 6574, "duration_s": 131.46, "start_pelvis_height_m": 0.78,
                                             "min_pelvis_height_m": 0.43, "max_pelvis_height_m": 0.85,
                                             "max_pelvis_tilt_deg": 43.52, "max_pelvis_tilt_at_s": 65.52}},
                      "bad.onnx": {"error": "exit 2: policy artifact rejected"}}}
    lines = render_tracking_policies_table(res).splitlines()
    assert lines[2] == ("| m.onnx | make deploy ROBOT=sim | 66.0 | no | POLICY | 0.141 | 0.200 (at 48 s) | 0.070 | "
                        "- (at - s) | none |")
    assert lines[3].startswith("| m.onnx | make eval (C MuJoCo) | 4.2 | yes (4.2) | fell |")
    assert lines[4].startswith("| bad.onnx | make deploy ROBOT=sim | - | - | did not run: exit 2")
    assert lines[-1] == "| m.onnx | 6574 | 131.46 | 0.780 | 0.430 - 0.850 | 43.5 deg at 65.5 s |"


@pytest.mark.parametrize("outcomes, runs, stalled", [
    ([False], 1, 0),  # a clean run is the result
    ([True, False], 2, 1),  # a host stall is run again; the clean run is the result, the stalled one listed
    ([True, True, True], 3, 2),  # stalled every time: the last run is the result, marked, the two before listed
])
def test_a_dry_run_ended_by_a_host_stall_is_run_again(monkeypatch, outcomes, runs, stalled):
    """run_deploy's retry rule over scripted outcomes of one deploy run (a host stall cannot be provoked on
    demand; the real runs are make tracking's and make tracking-policies')."""
    from experiments import tracking_policies as tp

    calls = []

    def once(policy, max_run_s):  # (summary.json, its path, the row) as one real run gives them
        calls.append(policy)
        k, stalled_k = len(calls), outcomes[len(calls) - 1]
        events = [{"kind": "stale_state", "detail": "latest LowState is 101 ms old"}] if stalled_k else []
        return ({"safety_events": events}, tp.REPO / f"runs/deploy/{k}/summary.json",
                {"summary": f"runs/deploy/{k}/summary.json", "host_stalled": stalled_k,
                 "final_state": "DAMPING" if stalled_k else "HOLD"})

    monkeypatch.setattr(tp, "_deploy_once", once)
    res = tp.run_deploy(Path("p"), 10.0, attempts=3)
    assert len(calls) == runs
    assert res["summary"] == f"runs/deploy/{runs}/summary.json" and res["host_stalled"] == outcomes[-1]
    assert res["stalled_attempts"] == [f"runs/deploy/{k}/summary.json" for k in range(1, stalled + 1)]
