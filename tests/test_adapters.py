"""Third-party policy formats read into our artifact description (policies.adapters) and run by the
one runtime: holosoma-inference's real G1 models (PyPI wheel, cached; skipped when it cannot be
fetched), our jump exported in the mjlab / BeyondMimic and unitree_rl_lab formats and read back (the
same state must give the same targets as the native artifact), IsaacLab history stacks by hand, gain
bounds, the safety gate with the gains sent, and every refusal naming its key."""
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from deploy.preflight import PreflightError, check_artifact
from experiments import holosoma_models as holosoma_files
from policies.adapters import detect, load_policy
from policies.adapters.export import ISAAC_ORDER, export_mjlab, export_rl_lab
from policies.artifact import ArtifactError, load_artifact
from policies.runtime import PolicyRuntime
from robots import g1
from robots.gains import KD_MAX, KP_MAX, gain_errors
from safety.limits import Command, Limits, Trip, check_command

REPO = Path(__file__).resolve().parent.parent
HOLO_CACHE = holosoma_files.CACHE
LOCO = holosoma_files.LOCO
UP = np.array([1.0, 0.0, 0.0, 0.0])


@pytest.fixture(scope="module")
def holosoma_models():
    """holosoma-inference 0.1.3's model files (experiments.holosoma_models: PyPI wheel, cached)."""
    try:
        return holosoma_files.models_dir()
    except holosoma_files.DownloadError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def jump():
    return load_artifact(REPO / "policies" / "g1" / "hop")


def random_state(rng):
    q = g1.DEFAULT_JOINT_POS + rng.normal(0, 0.05, 29)
    quat = np.array([0.99, 0.05, -0.03, 0.02])
    return (q, rng.normal(0, 0.5, 29), rng.normal(0, 0.3, 3), quat / np.linalg.norm(quat), rng.normal(0, 0.2, 3), 0.76)


# ---------------------------------------------------------------- holosoma (real files)
@pytest.mark.network
@pytest.mark.parametrize("name", ["ppo_g1_29dof.onnx", "fastsac_g1_29dof.onnx"])
def test_holosoma_loco_models_read_and_observe_in_sorted_order(holosoma_models, name):
    f = holosoma_models / LOCO / name
    assert detect(f) == "holosoma"
    art = load_policy(f)
    sp = art.spec
    assert (sp.format, sp.kind, sp.n_obs, sp.input_name, sp.output_name) == ("holosoma", "velocity", 100, "actor_obs", "action")
    assert "built-in defaults" in sp.source
    meta = {p.key: p.value for p in onnx.load(f).metadata_props}
    np.testing.assert_allclose(sp.kp, json.loads(meta["kp"]))  # dof_names are the motor order
    assert sp.kp[0] == pytest.approx(40.179238471) and sp.kp[3] == pytest.approx(99.098427777)
    assert sp.command_range("lin_vel_x") == (-1.0, 1.0) and sp.command_range("ang_vel_z") == (-1.0, 1.0)
    assert [t.source.split(": ")[1] for t in sp.observation] == sorted(
        ["base_ang_vel", "projected_gravity", "command_lin_vel", "command_ang_vel", "dof_pos", "dof_vel", "actions",
         "sin_phase", "cos_phase"])
    r = PolicyRuntime(art, run_s=2.0)
    q = np.asarray(sp.default_joint_pos) + 0.01 * np.arange(29)
    dq = np.linspace(-1, 1, 29)
    gyro = np.array([0.4, -0.8, 1.2])
    out = r.step(0, q, dq, gyro, UP, np.zeros(3), 0.75, command=(0.5, -0.2, 3.0))  # wz clipped to 1.0
    o = out.obs
    ph = np.array([0.0, np.pi]) + 2 * np.pi * 0.02 / 1.0  # advanced once from [0, pi] before the observation
    ph = np.fmod(ph + np.pi, 2 * np.pi) - np.pi
    np.testing.assert_allclose(o[0:29], 0.0)  # actions (none yet)
    np.testing.assert_allclose(o[29:32], gyro * 0.25, rtol=1e-6)  # base_ang_vel x 0.25
    np.testing.assert_allclose(o[32], 1.0)  # command_ang_vel, clipped to ang_vel_yaw's range
    np.testing.assert_allclose(o[33:35], [0.5, -0.2], rtol=1e-6)  # command_lin_vel
    np.testing.assert_allclose(o[35:37], np.cos(ph), atol=1e-6)  # cos_phase
    np.testing.assert_allclose(o[37:66], 0.01 * np.arange(29), atol=1e-6)  # dof_pos - holosoma's default pose
    np.testing.assert_allclose(o[66:95], dq * 0.05, atol=1e-7)  # dof_vel x 0.05
    np.testing.assert_allclose(o[95:98], [0, 0, -1])  # projected_gravity
    np.testing.assert_allclose(o[98:100], np.sin(ph), atol=1e-6)  # sin_phase
    np.testing.assert_allclose(out.target, np.asarray(sp.default_joint_pos) + 0.25 * np.clip(out.action, -100, 100))
    out2 = r.step(1, q, dq, gyro, UP, np.zeros(3), 0.75, command=(0.0, 0.0, 0.0))  # standing: both feet at pi
    np.testing.assert_allclose(out2.obs[0:29], out.action, rtol=1e-6)  # last action fed back, policy order
    np.testing.assert_allclose(out2.obs[35:37], [-1, -1], atol=1e-9)


@pytest.mark.network
def test_holosoma_sidecar_replaces_the_defaults_and_missing_keys_are_named(holosoma_models, tmp_path):
    f = tmp_path / "loco.onnx"
    shutil.copy(holosoma_models / LOCO / "ppo_g1_29dof.onnx", f)
    side = {"default_dof_angles": [0.0] * 29, "policy_action_scale": 0.5, "gait_period": 0.8,
            "actor_obs": ["base_ang_vel", "projected_gravity", "command_lin_vel", "command_ang_vel", "dof_pos",
                          "dof_vel", "actions", "sin_phase", "cos_phase"],
            "obs_dims": {"base_ang_vel": 3, "projected_gravity": 3, "command_lin_vel": 2, "command_ang_vel": 1,
                         "dof_pos": 29, "dof_vel": 29, "actions": 29, "sin_phase": 2, "cos_phase": 2},
            "obs_scales": {k: 1.0 for k in ("base_ang_vel", "projected_gravity", "command_lin_vel", "command_ang_vel",
                                            "dof_pos", "dof_vel", "actions", "sin_phase", "cos_phase")}}
    (tmp_path / "loco.yaml").write_text(yaml.safe_dump(side))
    sp = load_policy(f).spec
    assert sp.action_scale == 0.5 and sp.gait_period == 0.8 and "sidecar loco.yaml" in sp.source
    assert np.all(np.asarray(sp.default_joint_pos) == 0.0)
    del side["obs_scales"]
    (tmp_path / "loco.yaml").write_text(yaml.safe_dump(side))
    with pytest.raises(PreflightError, match=r"lacks \['obs_scales'\]"):
        check_artifact(f)


# ---------------------------------------------------------------- our jump through mjlab and rl_lab
@pytest.mark.parametrize("fmt", ["mjlab", "rl_lab"])
def test_jump_round_trips_through_each_format(jump, tmp_path, fmt):
    out = (export_mjlab if fmt == "mjlab" else export_rl_lab)(jump, tmp_path / fmt)
    art = load_policy(out)
    assert (art.spec.format, art.spec.kind) == (fmt, "tracking")
    assert art.spec.policy_joint_names == tuple(g1.JOINT_NAMES[i] for i in ISAAC_ORDER)
    native, other = PolicyRuntime(jump), PolicyRuntime(art)
    assert other.n_steps == native.n_steps == 230  # clip of 231 frames: time_step 0..229, then HOLD
    rng = np.random.default_rng(0)
    worst = 0.0
    for step in range(native.n_steps):
        state = random_state(rng)
        a, b = native.step(step, *state), other.step(step, *state)
        worst = max(worst, float(np.max(np.abs(a.target - b.target))))
        np.testing.assert_allclose(b.action, a.action[list(ISAAC_ORDER)], atol=1e-5)  # policy order out
    assert worst < 1e-5, worst  # float32 graph arithmetic vs the native float64 observation
    np.testing.assert_allclose(art.spec.kp, g1.KP)  # gains back in motor order
    np.testing.assert_allclose(art.spec.default_joint_pos, g1.DEFAULT_JOINT_POS)


def test_exported_files_carry_the_formats_exact_keys(jump, tmp_path):
    m = onnx.load(export_mjlab(jump, tmp_path / "mj"))
    meta = {p.key: p.value for p in m.metadata_props}
    assert set(meta) == {"run_path", "joint_names", "joint_stiffness", "joint_damping", "default_joint_pos",
                         "command_names", "observation_names", "action_scale", "anchor_body_name", "body_names"}
    assert meta["joint_names"].split(",")[:4] == ["left_hip_pitch_joint", "right_hip_pitch_joint", "waist_yaw_joint",
                                                  "left_hip_roll_joint"]
    assert meta["joint_stiffness"].split(",")[:3] == ["100.000", "100.000", "60.000"]  # 3 decimals, policy order
    assert [i.name for i in m.graph.input] == ["obs", "time_step"]
    assert [o.name for o in m.graph.output] == ["actions", "joint_pos", "joint_vel", "body_pos_w", "body_quat_w"]
    d = yaml.safe_load((export_rl_lab(jump, tmp_path / "rl") / "params" / "deploy.yaml").read_text())
    assert list(d) == ["joint_ids_map", "step_dt", "stiffness", "damping", "default_joint_pos", "commands", "actions",
                       "observations"]
    assert d["joint_ids_map"] == list(ISAAC_ORDER) and d["stiffness"] == list(g1.KP)  # stiffness: motor order
    assert d["default_joint_pos"][9:11] == [0.3, 0.3]  # policy order: knees at Isaac index 9, 10
    assert d["observations"]["joint_vel_rel"]["scale"] == [0.05] * 29


# ---------------------------------------------------------------- rl_lab history, by hand
def probe_onnx(n_obs: int, path: Path, time_step: bool = False) -> None:
    """actions = obs[:, :29] (a network whose output shows its input)."""
    w = np.zeros((n_obs, 29), np.float32)
    w[np.arange(min(29, n_obs)), np.arange(min(29, n_obs))] = 1
    nodes = [helper.make_node("MatMul", ["obs", "w"], ["actions"])]
    ins = [helper.make_tensor_value_info("obs", TensorProto.FLOAT, [1, n_obs])]
    if time_step:
        ins.append(helper.make_tensor_value_info("time_step", TensorProto.FLOAT, [1, 1]))
    g = helper.make_graph(nodes, "probe", ins, [helper.make_tensor_value_info("actions", TensorProto.FLOAT, [1, 29])],
                          initializer=[numpy_helper.from_array(w, "w")])
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)


def rl_lab_folder(tmp_path, observations, n_obs, **edit) -> Path:
    d = {"joint_ids_map": list(ISAAC_ORDER), "step_dt": 0.02, "stiffness": g1.KP.tolist(), "damping": g1.KD.tolist(),
         "default_joint_pos": [float(g1.DEFAULT_JOINT_POS[i]) for i in ISAAC_ORDER],
         "commands": {"base_velocity": {"ranges": {"lin_vel_x": [-0.5, 1.0], "lin_vel_y": [-0.3, 0.3],
                                                   "ang_vel_z": [-0.2, 0.2], "heading": None}}},
         "actions": {"JointPositionAction": {"clip": None, "joint_names": [".*"], "scale": [0.25] * 29,
                                             "offset": [float(g1.DEFAULT_JOINT_POS[i]) for i in ISAAC_ORDER],
                                             "joint_ids": None}},
         "observations": observations}
    for k, v in edit.items():
        d[k] = v
    root = tmp_path / "rl"
    probe_onnx(n_obs, root / "exported" / "policy.onnx")
    (root / "params").mkdir(parents=True, exist_ok=True)
    (root / "params" / "deploy.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
    return root


OBS_HIST = {"joint_pos_rel": {"params": {}, "clip": None, "scale": 1.0, "history_length": 1},
            "base_ang_vel": {"params": {}, "clip": [-1.0, 1.0], "scale": [0.2, 0.2, 0.2], "history_length": 3},
            "velocity_commands": {"params": {"command_name": "base_velocity"}, "clip": None, "scale": 1.0,
                                  "history_length": 2}}


def test_rl_lab_history_clip_scale_and_joint_order_by_hand(tmp_path):
    art = load_policy(rl_lab_folder(tmp_path, OBS_HIST, 29 + 9 + 6))
    assert art.spec.kind == "velocity" and art.spec.history_fill == "first"
    r = PolicyRuntime(art, run_s=1.0)
    q = g1.DEFAULT_JOINT_POS + 0.001 * np.arange(29)  # motor k off by k mrad
    o1 = r.step(0, q, np.zeros(29), np.array([0.5, 2.0, -3.0]), UP, np.zeros(3), 0.75, command=(2.0, 0.1, -1.0)).obs
    np.testing.assert_allclose(o1[:29], 0.001 * np.array(ISAAC_ORDER), atol=1e-7)  # policy order = Isaac order
    f1 = [0.1, 0.2, -0.2]  # gyro clipped to [-1, 1], then x 0.2
    np.testing.assert_allclose(o1[29:38], f1 * 3, rtol=1e-6)  # IsaacLab: the first frame fills the history
    np.testing.assert_allclose(o1[38:44], [1.0, 0.1, -0.2] * 2, rtol=1e-6)  # command clipped to the ranges
    o2 = r.step(1, q, np.zeros(29), np.array([-0.5, 0.0, 0.25]), UP, np.zeros(3), 0.75, command=(0.0, 0.0, 0.0)).obs
    np.testing.assert_allclose(o2[29:38], f1 + f1 + [-0.1, 0.0, 0.05], rtol=1e-6)  # oldest first
    np.testing.assert_allclose(o2[38:44], [1.0, 0.1, -0.2, 0.0, 0.0, 0.0], rtol=1e-6)
    # action: policy i -> motor ISAAC_ORDER[i]; target = offset + 0.25 * action
    out = r.step(2, q, np.zeros(29), np.zeros(3), UP, np.zeros(3), 0.75, command=(0, 0, 0))
    np.testing.assert_allclose(out.target[list(ISAAC_ORDER)], g1.DEFAULT_JOINT_POS[list(ISAAC_ORDER)] + 0.25 * out.action)
    r.reset()  # a new run starts with empty histories
    o3 = r.step(0, q, np.zeros(29), np.zeros(3), UP, np.zeros(3), 0.75, command=(0, 0, 0)).obs
    np.testing.assert_allclose(o3[29:44], 0.0)


# ---------------------------------------------------------------- refusals, each naming its key
def _mjlab_file(jump, tmp_path, edit):
    p = export_mjlab(jump, tmp_path / "mj")
    m = onnx.load(p)
    meta = {e.key: e.value for e in m.metadata_props}
    edit(meta)
    del m.metadata_props[:]
    for k, v in meta.items():
        m.metadata_props.add(key=k, value=v)
    onnx.save(m, p)
    return p


def _rl_lab_edit(jump, tmp_path, fn):
    root = export_rl_lab(jump, tmp_path / "rl")
    p = root / "params" / "deploy.yaml"
    d = yaml.safe_load(p.read_text())
    fn(d)
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return root


def _set(d, path, v):
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = v


REFUSALS = {
    "mjlab_missing_key": ("mjlab", lambda m: m.pop("joint_stiffness"), r"lacks \['joint_stiffness'\]"),
    "mjlab_not_g1_joints": ("mjlab", lambda m: m.__setitem__("joint_names", m["joint_names"].replace(
        "left_knee_joint", "left_toe_joint")), r"\['left_toe_joint'\] is not a G1 joint"),
    "mjlab_23dof": ("mjlab", lambda m: m.__setitem__("joint_names", ",".join(m["joint_names"].split(",")[:23])),
                    "missing"),
    "mjlab_unbuilt_term": ("mjlab", lambda m: m.__setitem__("observation_names", m["observation_names"] + ",height_scan"),
                           "'height_scan'.*terrain height scan"),
    "rl_lab_missing_key": ("rl_lab", lambda d: d.pop("damping"), r"missing keys \['damping'\]"),
    "rl_lab_obs_size": ("rl_lab", lambda d: d["observations"].pop("base_height"),
                        r"ONNX input 'obs' has shape \[1, 97\] but the observation terms add up to 96"),
    "rl_lab_kp_beyond_bounds": ("rl_lab", lambda d: _set(d, ["stiffness", 4], 5000.0),
                                r"kp of left_ankle_pitch_joint is 5000, outside 0 < kp <= 1000"),
    "rl_lab_kd_negative": ("rl_lab", lambda d: _set(d, ["damping", 0], -1.0), r"kd of left_hip_pitch_joint is -1"),
    "rl_lab_history_too_long": ("rl_lab", lambda d: _set(d, ["observations", "base_ang_vel", "history_length"], 100),
                                r"observations.base_ang_vel.*history length 100 cannot be built"),
    "rl_lab_history_negative": ("rl_lab", lambda d: _set(d, ["observations", "base_ang_vel", "history_length"], -2),
                                r"history length -2 cannot be built"),
    "rl_lab_joint_ids": ("rl_lab", lambda d: _set(d, ["joint_ids_map", 0], 6), "joint_ids_map must list each motor"),
    "rl_lab_unknown_term": ("rl_lab", lambda d: _set(d, ["observations", "gait_clock"], {"scale": 1.0}),
                            "observations.gait_clock is not a term this runtime builds"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_bad_input_is_refused_in_preflight_naming_the_key(jump, tmp_path, case):
    fmt, edit, match = REFUSALS[case]
    path = _mjlab_file(jump, tmp_path, edit) if fmt == "mjlab" else _rl_lab_edit(jump, tmp_path, edit)
    with pytest.raises(PreflightError, match=match):
        check_artifact(path)


def test_unknown_formats_are_refused(tmp_path):
    probe_onnx(10, tmp_path / "plain.onnx")
    with pytest.raises(PreflightError, match=r"unknown policy format: metadata_props keys none"):
        check_artifact(tmp_path / "plain.onnx")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(PreflightError, match="not an .onnx file or a folder"):
        check_artifact(tmp_path / "notes.txt")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PreflightError, match="unknown policy format"):
        check_artifact(empty)
    with pytest.raises(PreflightError, match="no such file"):
        check_artifact(tmp_path / "nothing.onnx")


# ---------------------------------------------------------------- gain bounds and the safety gate
def test_gain_bounds_admit_the_published_gains_with_room():
    holosoma_kp = [40.179, 99.098, 40.179, 99.098, 28.501, 28.501] * 2 + [40.179, 28.501, 28.501] + [14.251] * 14
    holo_stiff = [350, 200, 200, 300, 300, 150] * 2 + [200] * 3 + [40] * 14  # holosoma wbt start-up gains
    rl_lab_kd = [2, 2, 2, 4, 2, 2] * 2 + [5, 5, 5] + [10] * 14  # unitree_rl_lab's G1 velocity deploy.yaml
    ratios = [np.max(np.asarray(v) / KP_MAX) for v in (g1.KP, holosoma_kp, holo_stiff)]
    ratios += [np.max(np.asarray(v) / KD_MAX) for v in (g1.KD, rl_lab_kd)]
    assert max(ratios) == pytest.approx(0.5)  # rl_lab's kd 10 on the 5 Nm wrists; the docstring's claim
    assert gain_errors(g1.KP, g1.KD) == [] and gain_errors(holo_stiff, rl_lab_kd) == []
    assert KP_MAX[4] == pytest.approx(1000.0) and KD_MAX[20] == pytest.approx(20.0)  # 50 Nm / 0.05, 5 Nm / 0.25
    errs = gain_errors(np.where(np.arange(29) == 3, 0.0, g1.KP), g1.KD)
    assert len(errs) == 1 and "kp of left_knee_joint is 0" in errs[0]


def test_safety_bounds_torque_with_the_gains_sent():
    lim = Limits.default(command_dt=10.0)  # no rate limit in this check
    j = 2  # left hip yaw: torque 88 Nm, range +-2.76 rad (soft +-2.66)
    prop = g1.DEFAULT_JOINT_POS.copy()
    prop[j] = 2.0
    z = np.zeros(29)
    ours = check_command(g1.DEFAULT_JOINT_POS, z, UP, prop, g1.DEFAULT_JOINT_POS, lim)
    assert ours.q[j] == pytest.approx(88 / 100)  # kp 100: |kp (q* - q)| <= 88 Nm
    kp = g1.KP.copy()
    kp[j] = 40.0
    kd = g1.KD * 0.5
    soft = check_command(g1.DEFAULT_JOINT_POS, z, UP, prop, g1.DEFAULT_JOINT_POS, lim, gains=(kp, kd))
    assert isinstance(soft, Command) and soft.q[j] == pytest.approx(2.0)  # 40 * 2 = 80 Nm <= 88: passes
    np.testing.assert_array_equal(soft.kp, kp)
    np.testing.assert_array_equal(soft.kd, kd)  # the gains sent are the gains bounded
    kp[j] = 10 * KP_MAX[j]
    bad = check_command(g1.DEFAULT_JOINT_POS, z, UP, prop, g1.DEFAULT_JOINT_POS, lim, gains=(kp, kd))
    assert isinstance(bad, Trip) and bad.kind == "bad_gains"
