"""Native tracking artifacts (a policy trained with env.task = tracking): the reference kept as pelvis states in
reference.npz, the anchor term built by forward kinematics at load, refused when the states are missing or
wrong; the body-position error against hand values; the anchor pose against C MuJoCo."""
from __future__ import annotations

import mujoco
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from policies import artifact as A
from policies.observation import TRACKING_OBS_TERMS, obs_size, term_specs
from policies.runtime import PolicyRuntime
from policies.tracking import (KEY_BODIES, TrackingSpec, body_pos_error, pelvis_pose, reference_from_states,
                               relative_to_anchor, rot6d)
from robots import g1
from robots.body_frames import BodyFrames, mat_to_quat, quat_to_mat, rot_z
from robots.model import motor_qpos_adr

T = 60  # 1.2 s at 50 Hz


def _quat_yaw_pitch(yaw: float, pitch: float) -> np.ndarray:
    c = np.cos(pitch)
    r = rot_z(yaw) @ np.array([[c, 0, np.sin(pitch)], [0, 1, 0], [-np.sin(pitch), 0, c]])
    return mat_to_quat(r)


def reference_states():
    """Joints wiggling the waist, the pelvis turning 40 deg and pitching 0.2 rad, walking 0.3 m in x."""
    t = np.arange(T) * g1.CONTROL_DT
    q = np.tile(g1.DEFAULT_JOINT_POS, (T, 1))
    for name, amp in (("waist_yaw_joint", 0.4), ("waist_pitch_joint", 0.2), ("left_knee_joint", 0.3)):
        q[:, g1.JOINT_NAMES.index(name)] += amp * np.sin(2 * np.pi * t / 1.2)
    pos = np.stack([0.25 * t, 0.0 * t, np.full(T, g1.DEFAULT_BASE_HEIGHT)], 1)
    quat = np.stack([_quat_yaw_pitch(0.6 * tk, 0.2 * np.sin(2 * np.pi * tk)) for tk in t])
    return q, pos, quat


def linear_model(n_obs: int, rng) -> "object":
    w = numpy_helper.from_array(rng.normal(0, 0.01, (n_obs, g1.NUM_MOTORS)).astype(np.float32), "w")
    b = numpy_helper.from_array(np.zeros((1, g1.NUM_MOTORS), np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["obs", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["actions"])],
        "tracking_policy", [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", n_obs])],
        [helper.make_tensor_value_info("actions", TensorProto.FLOAT, ["batch", g1.NUM_MOTORS])], initializer=[w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def spec_of(anchor_body: str = "torso_link") -> A.PolicySpec:
    return A.PolicySpec(**A.robot_spec_fields(), action_scale=0.25, observation=term_specs(TRACKING_OBS_TERMS),
                        motion=A.MotionSpec("track_test", (T - 1) * g1.CONTROL_DT),
                        provenance=A.provenance("test: linear", seed=0, iterations=0),
                        tracking=TrackingSpec(anchor_body=anchor_body, source="reference"))


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    q, pos, quat = reference_states()
    out = tmp_path_factory.mktemp("art") / "track_test"
    model = linear_model(obs_size(term_specs(TRACKING_OBS_TERMS)), np.random.default_rng(0))
    A.write_artifact(out, model, spec_of(), q, pos[:, 2], pos, quat)
    return A.load_artifact(out)


def test_anchor_pose_is_c_mujoco_forward_kinematics():
    q, pos, quat = reference_states()
    ref = reference_from_states(q, pos, quat, g1.CONTROL_DT, "torso_link")
    kin = BodyFrames()
    m = kin.model
    d = mujoco.MjData(m)
    b = m.body("torso_link").id
    for k in (0, 17, T - 1):
        d.qpos[:3], d.qpos[3:7] = pos[k], quat[k]
        d.qpos[motor_qpos_adr(m)] = q[k]
        mujoco.mj_forward(m, d)
        np.testing.assert_allclose(ref.anchor_pos[k], d.xpos[b], atol=1e-9)
        np.testing.assert_allclose(quat_to_mat(ref.anchor_quat[k]), d.xmat[b].reshape(3, 3), atol=1e-9)
        p, r = pelvis_pose(ref, k, b, kin)  # the anchor chain inverted gives the pelvis back
        np.testing.assert_allclose(p, pos[k], atol=1e-9)
        np.testing.assert_allclose(r, quat_to_mat(quat[k]), atol=1e-9)
    # joint velocities: central differences (hand value at an inner frame)
    np.testing.assert_allclose(ref.joint_vel[5], (q[6] - q[4]) / (2 * g1.CONTROL_DT))


def test_reference_pelvis_tilt_and_height_bound_the_gate_and_the_fall(artifact):
    """TrackingTerms' per-frame pelvis tilt and height are those of the reference's own pelvis states (tilt from
    the quaternion, robots.physics.tilt_angle); in POLICY the gate's tilt trip follows the reference
    (safety.limits.tilt_limit) and eval's fall bounds read the same frame."""
    from control.tick import PolicyTick
    from estimation.estimator import Estimator
    from eval.policy_eval import reference_bounds
    from robots.physics import tilt_angle
    from safety import SafetyMonitor, WatchdogConfig

    _, pos, quat = reference_states()
    rt = PolicyRuntime(artifact)
    tr = rt.tracking
    np.testing.assert_allclose(tr.pelvis_tilt, [tilt_angle(x) for x in quat], atol=1e-7)  # acos near 0: ~sqrt(eps)
    np.testing.assert_allclose(tr.pelvis_height, pos[:, 2], atol=1e-9)
    assert reference_bounds(tr, 17) == {"ref_tilt": tr.pelvis_tilt[17], "ref_height": tr.pelvis_height[17]}
    assert reference_bounds(tr, 10 * T)["ref_tilt"] == tr.pelvis_tilt[-1]  # past the clip: its last frame
    assert reference_bounds(None, 3) == {}
    # the gate: a 60 deg pelvis trips in HOLD, and in POLICY only beyond min(reference tilt + 20 deg, 75 deg)
    tr.pelvis_tilt[:] = np.radians(58.0)
    tilted = lambda deg: np.array([np.cos(np.radians(deg) / 2), 0, np.sin(np.radians(deg) / 2), 0])  # noqa: E731
    q = g1.DEFAULT_JOINT_POS.copy()
    for policy, deg, trips in ((False, 60, True), (True, 60, False), (True, 74, False), (True, 76, True)):  # 75: ceiling
        mon = SafetyMonitor(watchdog=WatchdogConfig(1e9, 1e9, 1e9))
        tick = PolicyTick(Estimator(), rt, mon)
        rt.reset()
        tr.update(0, q, tilted(deg), np.zeros(3))
        mon.reset_target(q)
        tick.gate(0.0, q, np.zeros(g1.NUM_MOTORS), tilted(deg), q, rx_time=0.0, tick=0, policy=policy)
        assert mon.latched == trips, (policy, deg, mon.events)
        assert [e["kind"] for e in mon.events] == (["tilt"] if trips else [])


def test_round_trip_keeps_states_and_tracking_spec(artifact):
    q, pos, quat = reference_states()
    assert artifact.spec.tracking == TrackingSpec(anchor_body="torso_link", source="reference")
    np.testing.assert_allclose(artifact.ref_base_pos, pos, atol=1e-6)
    np.testing.assert_allclose(artifact.ref_base_quat, quat, atol=1e-12)
    assert A.PolicySpec.from_dict(artifact.spec.to_dict()).tracking == artifact.spec.tracking


def _anchor_slice():
    specs = term_specs(TRACKING_OBS_TERMS)
    off = 0
    for s in specs:
        if s.name == "motion_anchor_ori_b":
            return slice(off, off + s.size)
        off += s.size
    raise AssertionError("no anchor term")


@pytest.mark.parametrize("yaw0", [0.0, 0.7])
def test_runtime_anchor_term_on_and_off_the_reference(artifact, yaw0):
    """On the reference (whatever the heading it starts at: the reference is turned to it at step 0) the
    anchor term is the identity; a robot pitched 0.15 rad more than the reference reads that rotation."""
    q, pos, quat = reference_states()
    rt = PolicyRuntime(artifact, backend="onnxruntime")
    assert rt.tracking is not None and rt.tracking.needs_anchor
    sl = _anchor_slice()
    turn = rot_z(yaw0)
    for k in range(0, 40):
        r = turn @ quat_to_mat(quat[k])
        if k >= 20:
            c, s = np.cos(0.15), np.sin(0.15)
            r = r @ np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])  # extra pitch of the pelvis, body frame
        out = rt.step(k, q[k], np.zeros(29), np.zeros(3), mat_to_quat(r), np.zeros(3), pos[k, 2],
                      base_pos=turn @ pos[k])
        if k < 20:
            np.testing.assert_allclose(out.obs[sl], rot6d(np.eye(3)), atol=1e-6)
        else:
            assert rt.tracking.anchor_ori_error == pytest.approx(0.15, abs=1e-6)
            # R_robot^T R_ref for a robot turned by +0.15 about its pelvis y axis, torso through the waist
            p_in, r_in = rt.tracking.kin.pose_in_pelvis(rt.tracking.anchor, q[k])
            pitch = np.array([[np.cos(0.15), 0, np.sin(0.15)], [0, 1, 0], [-np.sin(0.15), 0, np.cos(0.15)]])
            np.testing.assert_allclose(out.obs[sl], rot6d(r_in.T @ pitch.T @ r_in), atol=1e-5)


def test_a_run_started_mid_clip_is_aligned_at_its_own_first_frame(artifact):
    """Started at frame 25 (heading 0.3 rad in the reference) on a robot turned 0.7 rad: the reference is turned
    by the heading difference at frame 25, so a robot on the (turned) reference reads the identity."""
    q, pos, quat = reference_states()
    rt = PolicyRuntime(artifact, backend="onnxruntime")
    sl = _anchor_slice()
    turn = rot_z(0.7)
    for k in range(25, 35):
        out = rt.step(k, q[k], np.zeros(29), np.zeros(3), mat_to_quat(turn @ quat_to_mat(quat[k])), np.zeros(3),
                      pos[k, 2], base_pos=turn @ pos[k])
        np.testing.assert_allclose(out.obs[sl], rot6d(np.eye(3)), atol=1e-6)
        ref_anchor = rt.tracking.align @ rt.tracking.ref.anchor_pos[k] + rt.tracking.origin
        np.testing.assert_allclose(ref_anchor[0:2], (turn @ rt.tracking.ref.anchor_pos[k])[0:2], atol=1e-6)


def test_missing_or_wrong_states_are_refused(tmp_path):
    q, pos, quat = reference_states()
    model = linear_model(obs_size(term_specs(TRACKING_OBS_TERMS)), np.random.default_rng(1))
    with pytest.raises(A.ArtifactError, match="needs ref_base_pos and ref_base_quat"):
        A.write_artifact(tmp_path / "a", model, spec_of(), q, pos[:, 2])
    bad = quat.copy()
    bad[10] *= 1.5
    with pytest.raises(A.ArtifactError, match="not unit"):
        A.write_artifact(tmp_path / "b", model, spec_of(), q, pos[:, 2], pos, bad)
    with pytest.raises(A.ArtifactError, match="not a G1 body"):
        A.write_artifact(tmp_path / "c", model, spec_of("head_link"), q, pos[:, 2], pos, quat)
    # a reference.npz stripped of its states, and a YAML with a stray tracking key
    out = A.write_artifact(tmp_path / "d", model, spec_of(), q, pos[:, 2], pos, quat)
    with np.load(out / A.REFERENCE_NAME) as z:
        kept = {k: z[k] for k in ("ref_q", "ref_height")}
    np.savez(out / A.REFERENCE_NAME, **kept)
    with pytest.raises(A.ArtifactError, match="needs ref_base_pos"):
        A.load_artifact(out)
    d = spec_of().to_dict()
    d["tracking"]["source"] = "graph"
    with pytest.raises(A.ArtifactError, match="anchor_body only"):
        A.PolicySpec.from_dict(d)


def test_body_pos_error_hand_values():
    kin = BodyFrames()
    q, pos, quat = reference_states()
    ids = [kin.body_id(b) for b in KEY_BODIES]
    anchor = list(KEY_BODIES).index("torso_link")
    m, d = kin.model, mujoco.MjData(kin.model)

    def bodies(p, qt, joints):
        d.qpos[:3], d.qpos[3:7] = p, qt
        d.qpos[motor_qpos_adr(m)] = joints
        mujoco.mj_kinematics(m, d)
        return d.xpos[ids].copy(), d.xmat[ids].reshape(-1, 3, 3).copy()

    ref_p, ref_r = bodies(pos[10], quat[10], q[10])
    # the same pose, turned 90 deg about z and moved 2 m: relative to the anchor the error is zero
    turn = rot_z(np.pi / 2)
    p, r = bodies(turn @ pos[10] + [2.0, -1.0, 0.0], mat_to_quat(turn @ quat_to_mat(quat[10])), q[10])
    rel, rel_r = relative_to_anchor(anchor, p, r, ref_p, ref_r)
    np.testing.assert_allclose(rel, p, atol=1e-9)
    np.testing.assert_allclose(rel_r, r, atol=1e-9)
    assert body_pos_error(anchor, p, r, ref_p, ref_r) == pytest.approx(0.0, abs=1e-9)
    # one non-anchor body 3 cm off: the mean over the 14 bodies is 3 / 14 cm
    p2 = p.copy()
    p2[0] += [0.0, 0.03, 0.0]
    assert body_pos_error(anchor, p2, r, ref_p, ref_r) == pytest.approx(0.03 / len(KEY_BODIES), abs=1e-9)
    # the robot 5 cm lower everywhere: the reference anchor keeps its height, so every body is 5 cm off
    p3 = p - [0.0, 0.0, 0.05]
    assert body_pos_error(anchor, p3, r, ref_p, ref_r) == pytest.approx(0.05, abs=1e-9)


def test_eval_starts_in_the_reference_state_and_measures_bodies(artifact, tmp_path):
    """eval.sim.reference_start puts the bridge model in the reference's state (the body error is the lift
    out of the floor, if any); a 0.2 s episode from there reports the body-position error; --start-frame
    on a policy without a tracking reference is refused."""
    import dataclasses

    from eval.config import EvalConfig, EvalError
    from eval.policy_eval import evaluate_policy
    from eval.sim import BodyTracker, EvalSim, reference_start

    sim = EvalSim()
    rt = PolicyRuntime(artifact, backend="onnxruntime")
    ref, kin, anchor = rt.tracking.ref, rt.tracking.kin, rt.tracking.anchor
    qpos, qvel = reference_start(sim, ref, 10, g1.CONTROL_DT, kin, anchor)
    q, pos, quat = reference_states()
    lift = qpos[2] - pos[10, 2]
    assert lift >= 0.0
    np.testing.assert_allclose(qpos[0:2], pos[10, 0:2], atol=1e-6)
    np.testing.assert_allclose(qvel[0], 0.25, atol=1e-6)  # the reference walks 0.25 m/s in x
    sim.reset_to(qpos, qvel)
    assert BodyTracker(sim, ref, "torso_link").error(10) == pytest.approx(lift, abs=1e-6)
    cfg = EvalConfig(episodes=1, video=False, hold_s=0.0, duration_s=0.2, start_frame=10,
                     dr=dataclasses.replace(EvalConfig().dr, enabled=False))
    summary, _ = evaluate_policy(artifact.path, cfg, tmp_path)
    tr = summary["per_episode"][0]["tracking"]
    assert tr["start_frame"] == 10 and tr["policy_steps"] == 10
    assert 0.0 <= tr["body_pos_err_cm"] < 5.0
    with pytest.raises(EvalError, match="outside the clip"):
        evaluate_policy(artifact.path, dataclasses.replace(cfg, start_frame=T), tmp_path)
