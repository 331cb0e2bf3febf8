"""The whole-body tracking task (train/tracking.py, env.task = "tracking"): reward kernels against hand-computed
values, the terminations' thresholds, the adaptive start sampler (counts -> probabilities by hand, the uniform
floor, reproducible draws), the episode windows, the configuration; and one jitted smoke of the env on the
box_lift clip whose observation is the one policies' builders make from the same state."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from train import tracking as TR

B = 4  # bodies in the hand-made poses: anchor first


def _rz(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _rx(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def _pose():
    pos = np.array([[0.0, 0.0, 1.0], [0.1, 0.1, 0.6], [-0.1, 0.0, 0.1], [0.2, -0.3, 1.1]])
    rot = np.stack([_rz(0.1), _rx(0.2), np.eye(3), _rz(-0.3) @ _rx(0.1)])
    return pos, rot


def _inputs(pos, rot, ref_pos, ref_rot, lin=None, q=None, **kw):
    z = jnp.zeros((B, 3))
    base = dict(anchor=0, body_pos=jnp.asarray(pos), body_rot=jnp.asarray(rot),
                body_lin_vel=z if lin is None else jnp.asarray(lin), body_ang_vel=z,
                ref_body_pos=jnp.asarray(ref_pos), ref_body_rot=jnp.asarray(ref_rot), ref_body_lin_vel=z,
                ref_body_ang_vel=z, q=jnp.zeros(29) if q is None else jnp.asarray(q), ref_q=jnp.zeros(29),
                action=jnp.zeros(29), last_action=jnp.zeros(29), ref_action=jnp.zeros(29),
                torque_sq=jnp.asarray(0.0), fell=jnp.asarray(False), com=jnp.asarray(pos[0]),
                foot_center=jnp.asarray(pos[[2, 2]]), ref_contact=jnp.array([True, True]), ref_com=jnp.asarray(pos[0]),
                ref_foot_center=jnp.asarray(pos[[2, 2]]))
    base.update(kw)
    return TR.TrackingInputs(**base)


CFG = TR.TrackingConfig()
KERNELS = ("anchor_pos", "anchor_ori", "body_pos", "body_ori", "body_lin_vel", "body_ang_vel", "joint_pos")


def _terms(*a, **kw):
    return {k: float(v) for k, v in TR.reward_terms(_inputs(*a, **kw), CFG).items()}


def test_reward_kernels_are_one_on_the_reference():
    pos, rot = _pose()
    t = _terms(pos, rot, pos, rot)
    assert all(t[k] == pytest.approx(1.0, abs=1e-6) for k in KERNELS)
    assert t["action_rate"] == 0 and t["fall"] == 0


def test_reward_kernels_hand_computed():
    pos, rot = _pose()
    # the whole robot 0.1 m along x: the anchor term sees it, the bodies relative to the anchor do not
    t = _terms(pos + [0.1, 0.0, 0.0], rot, pos, rot)
    assert t["anchor_pos"] == pytest.approx(math.exp(-0.1 ** 2 / 0.3 ** 2), rel=1e-6)
    assert t["body_pos"] == pytest.approx(1.0, abs=1e-6) and t["anchor_ori"] == pytest.approx(1.0, abs=1e-6)
    # 5 cm higher: the relative reference keeps the reference anchor's height, so every body is 5 cm off
    t = _terms(pos + [0.0, 0.0, 0.05], rot, pos, rot)
    assert t["anchor_pos"] == pytest.approx(math.exp(-0.05 ** 2 / 0.09), rel=1e-6)
    assert t["body_pos"] == pytest.approx(math.exp(-0.05 ** 2 / 0.09), rel=1e-6)
    # the whole robot turned 0.3 rad about z through the anchor: only the anchor's orientation term sees it
    turn = _rz(0.3)
    t = _terms(pos[0] + (pos - pos[0]) @ turn.T, turn @ rot, pos, rot)
    assert t["anchor_ori"] == pytest.approx(math.exp(-4 * math.sin(0.15) ** 2 / 0.4 ** 2), rel=1e-6)
    assert t["body_pos"] == pytest.approx(1.0, abs=1e-6) and t["body_ori"] == pytest.approx(1.0, abs=1e-6)
    # one body tilted 0.4 rad about x: body_ori is the mean over the 4 bodies
    rot2 = rot.copy()
    rot2[2] = rot[2] @ _rx(0.4)
    t = _terms(pos, rot2, pos, rot)
    assert t["body_ori"] == pytest.approx(math.exp(-4 * math.sin(0.2) ** 2 / B / 0.4 ** 2), rel=1e-6)
    # one body 0.5 m/s off: the mean over bodies of the squared error
    lin = np.zeros((B, 3))
    lin[1, 0] = 0.5
    assert _terms(pos, rot, pos, rot, lin=lin)["body_lin_vel"] == pytest.approx(math.exp(-0.25 / B / 1.0), rel=1e-6)
    # one joint 0.1 rad off: sigma^2 = 1 / K_JOINT_POS = 0.5
    q = np.zeros(29)
    q[3] = 0.1
    assert _terms(pos, rot, pos, rot, q=q)["joint_pos"] == pytest.approx(math.exp(-0.01 / 0.5), rel=1e-6)


def test_com_support_hand_computed():
    """The robot's COM over its stance foot in the reference's one-leg stances: 0 error (term 1) in double
    stance and in flight wherever the COM is; over the one foot down otherwise; height does not count."""
    pos, rot = _pose()
    feet = jnp.array([[0.0, 0.1, 0.03], [0.05, -0.1, 0.2]])  # left down, right lifted
    com = jnp.array([0.03, 0.06, 0.7])

    def term(contact, c=com):
        return _terms(pos, rot, pos, rot, com=c, foot_center=feet, ref_contact=jnp.array(contact))["com_support"]

    assert term([True, True]) == pytest.approx(1.0) and term([False, False]) == pytest.approx(1.0)
    assert term([True, False]) == pytest.approx(math.exp(-(0.03 ** 2 + 0.04 ** 2) / 0.1 ** 2), rel=1e-5)
    assert term([False, True]) == pytest.approx(math.exp(-(0.02 ** 2 + 0.16 ** 2) / 0.1 ** 2), rel=1e-5)
    assert term([True, False], jnp.array([0.0, 0.1, 0.2])) == pytest.approx(1.0)  # right above the sole: 1
    # weight 0 by default: the field's recipe unchanged unless a recipe asks for the term
    assert TR.TrackingConfig().weight_map()["com_support"] == 0.0
    g = jax.grad(lambda c: TR.com_support_sq(c, feet, jnp.array([True, False])))(com)
    np.testing.assert_allclose(np.asarray(g), [0.06, -0.08, 0.0], atol=1e-6)  # 2 (c - f) in x, y


def test_com_feet_hand_computed():
    """The robot's COM relative to its support point as the reference's is to its own: the support the foot down
    in a one-leg stance, the feet's mean in double stance (the reference's feet down choose it for both), 0 error
    in flight; a robot shifted whole with its feet tracks exactly; height does not count."""
    pos, rot = _pose()
    feet = jnp.array([[0.0, 0.1, 0.03], [0.05, -0.1, 0.2]])
    ref_feet = jnp.array([[0.02, 0.12, 0.03], [0.07, -0.06, 0.03]])
    com, ref_com = jnp.array([0.03, 0.06, 0.7]), jnp.array([0.04, 0.01, 0.75])

    def term(contact, c=com, f=feet):
        return _terms(pos, rot, pos, rot, com=c, foot_center=f, ref_com=ref_com, ref_foot_center=ref_feet,
                      ref_contact=jnp.array(contact))["com_feet"]

    # double stance: robot c - s = (0.03, 0.06) - (0.025, 0.0) = (0.005, 0.06); reference (0.04, 0.01) - (0.045,
    # 0.03) = (-0.005, -0.02); error (0.01, 0.08)
    assert term([True, True]) == pytest.approx(math.exp(-(0.01 ** 2 + 0.08 ** 2) / 0.1 ** 2), rel=1e-5)
    # on the left foot: (0.03, -0.04) against (0.02, -0.11): error (0.01, 0.07)
    assert term([True, False]) == pytest.approx(math.exp(-(0.01 ** 2 + 0.07 ** 2) / 0.1 ** 2), rel=1e-5)
    # on the right foot: (-0.02, 0.16) against (-0.03, 0.07): error (0.01, 0.09)
    assert term([False, True]) == pytest.approx(math.exp(-(0.01 ** 2 + 0.09 ** 2) / 0.1 ** 2), rel=1e-5)
    assert term([False, False]) == pytest.approx(1.0)
    shift = jnp.array([0.3, -0.2, 0.1])  # the reference's COM and feet moved together: exact tracking
    assert term([True, False], ref_com + shift, ref_feet + shift) == pytest.approx(1.0)
    assert TR.TrackingConfig().weight_map()["com_feet"] == 0.0
    g = jax.grad(lambda c: TR.com_feet_sq(c, feet, ref_com, ref_feet, jnp.array([True, False])))(com)
    np.testing.assert_allclose(np.asarray(g), [0.02, 0.14, 0.0], atol=1e-6)  # 2 e in x, y


def test_rot_err_sq_is_the_chordal_angle():
    for th in (0.0, 0.1, 0.4, 1.0, 3.0):
        e = float(TR.rot_err_sq(jnp.asarray(_rx(th) @ _rz(0.7)), jnp.asarray(_rz(0.7))))
        assert e == pytest.approx(4 * math.sin(th / 2) ** 2, rel=1e-5, abs=1e-7)  # float32
        if th <= 0.4:
            assert abs(e - th ** 2) <= th ** 4 / 12 + 1e-6  # theta^2 within theta^2 / 12 (relative)
    g = jax.grad(lambda a: TR.rot_err_sq(jnp.asarray(_rz(0.2)) @ TR.axis_angle(jnp.array([1.0, 0, 0]), a),
                                         jnp.asarray(_rz(0.2))))(0.0)
    assert np.isfinite(float(g))  # smooth at zero error, where theta^2 through arccos is not


def test_terminations_at_the_stated_thresholds():
    pos, rot = _pose()
    ee = np.array([2, 3])

    def failed(p, r):
        return bool(TR.tracking_failed(0, ee, jnp.asarray(p), jnp.asarray(r), jnp.asarray(pos), jnp.asarray(rot), CFG))

    assert not failed(pos, rot)
    up = pos.copy()
    up[0, 2] += 0.24
    assert not failed(up, rot)
    up[0, 2] += 0.02  # anchor 0.26 m off
    assert failed(up, rot)
    hand = pos.copy()
    hand[3, 2] -= 0.26  # an end effector 0.26 m low
    assert failed(hand, rot)
    hand = pos.copy()
    hand[1, 2] -= 0.5  # a body that is not an end effector: not a termination
    assert not failed(hand, rot)
    # the anchor's projected gravity z moves by 1 - cos(theta) from upright-ish R[2, 2]
    base = float(rot[0, 2, 2])
    ok, bad = rot.copy(), rot.copy()
    ok[0] = rot[0] @ _rx(math.acos(base - 0.79) - math.acos(base))
    bad[0] = rot[0] @ _rx(math.acos(base - 0.81) - math.acos(base))
    assert not failed(pos, ok) and failed(pos, bad)


def test_start_probabilities_by_hand():
    counts = jnp.array([0.0, 0.0, 1.0, 0.0])
    k = np.array([1.0, 0.8, 0.64]) / 2.44  # lambda^j, j = 0..2, normalised
    smooth = np.array([k[2], k[1], k[0], 0.0])  # bin i: sum_j k_j counts[i + j]
    want = 0.9 * smooth / smooth.sum() + 0.1 / 4
    p = np.asarray(TR.start_probabilities(counts, 3, 0.8, 0.1))
    np.testing.assert_allclose(p, want, rtol=1e-6)
    assert p.sum() == pytest.approx(1.0) and p.min() == pytest.approx(0.1 / 4)  # the floor
    # the last bin repeats past the end: a failure there weighs fully on it
    np.testing.assert_allclose(TR.start_probabilities(jnp.array([0.0, 0.0, 0.0, 2.0]), 3, 0.8, 0.0),
                               [0, k[2], k[1] + k[2], 1.0] / (1.0 + k[1] + 2 * k[2]), rtol=1e-6)
    np.testing.assert_allclose(TR.start_probabilities(jnp.zeros(5), 3, 0.8, 0.1), np.full(5, 0.2))
    np.testing.assert_allclose(TR.start_probabilities(counts, 3, 0.8, 1.0), np.full(4, 0.25), rtol=1e-6)


def test_failure_counts_moving_average():
    c = TR.update_counts(jnp.array([1.0, 0.0, 0.0]), jnp.array([10, 60, 149, 120]), jnp.array([True, True, True, False]),
                         per_bin=50, alpha=0.1)
    np.testing.assert_allclose(c, [0.9 + 0.1, 0.1, 0.1])  # frames 10 -> bin 0, 60 -> 1, 149 -> 2 (120: not failed)
    assert int(TR.bin_of(10 ** 6, 50, 3)) == 2


def test_start_frames_follow_the_probabilities_and_are_reproducible():
    probs = jnp.array([0.1, 0.6, 0.3])
    keys = jax.random.split(jax.random.PRNGKey(0), 6000)
    draw = jax.vmap(lambda k: TR.sample_start(k, probs, 50, 140))
    f = np.asarray(draw(keys))
    np.testing.assert_array_equal(f, np.asarray(draw(keys)))  # the same keys, the same frames
    assert f.min() >= 0 and f.max() <= 138  # at most the last frame - 1
    share = np.bincount(np.minimum(f // 50, 2), minlength=3) / f.size
    np.testing.assert_allclose(share, [0.1, 0.6, 0.3], atol=3 * math.sqrt(0.25 / f.size))
    assert len(np.unique(f[f // 50 == 1])) == 50  # uniform within a bin


def _ry(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def test_quaternion_helpers_by_hand():
    """quat_from_rpy is yaw(z) * pitch(y) * roll(x) (the IMU's ZYX rpy reads it back); quat_mul composes as the
    rotation matrices do."""
    from robots.physics import quat_to_rpy

    rpy = (0.3, -0.2, 1.1)
    q = np.asarray(TR.quat_from_rpy(jnp.array(rpy)))
    assert np.allclose(np.asarray(TR.quat_to_mat(q)), _rz(1.1) @ _ry(-0.2) @ _rx(0.3), atol=1e-6)
    assert np.allclose(quat_to_rpy(q), rpy, atol=1e-6)
    a, b = TR.quat_from_rpy(jnp.array([0.1, 0.5, -0.7])), TR.quat_from_rpy(jnp.array([-0.4, 0.2, 0.3]))
    assert np.allclose(np.asarray(TR.quat_to_mat(TR.quat_mul(a, b))),
                       np.asarray(TR.quat_to_mat(a)) @ np.asarray(TR.quat_to_mat(b)), atol=1e-6)


def test_start_noise_within_beyondmimics_ranges():
    """perturb_start over 512 draws: every component within START_NOISE * scale and reaching past 90 % of it,
    the orientation turned in the world frame by at most the roll/pitch/yaw ranges, the joints clipped to their
    range; scale 0 leaves the state as it is."""
    from robots.physics import quat_to_rpy

    nq, qadr = 36, np.arange(7, 36)
    base_quat = np.asarray(TR.quat_from_rpy(jnp.array([0.2, 0.4, -1.0])))
    qpos = jnp.concatenate([jnp.array([0.3, -0.2, 0.7]), base_quat, jnp.zeros(29)])
    q_min, q_max = -0.05 * jnp.ones(29), 0.2 * jnp.ones(29)  # the joints start 0.05 from their lower limit
    qvel = jnp.zeros(nq - 1)
    keys = jax.random.split(jax.random.PRNGKey(0), 512)
    draw = jax.vmap(lambda k, s: TR.perturb_start(k, qpos, qvel, s, qadr, q_min, q_max), (0, None))
    for scale in (1.0, 2.0):
        p, v = (np.asarray(x, float) for x in draw(keys, scale))
        for name, got in (("pos", p[:, 0:3] - np.asarray(qpos[0:3])), ("lin_vel", v[:, 0:3]), ("ang_vel", v[:, 3:6])):
            half = scale * np.asarray(TR.START_NOISE[name])
            assert np.all(np.abs(got) <= half + 1e-6), name
            assert np.all(np.abs(got).max(0) > 0.9 * half), name
        delta = [quat_to_rpy(np.asarray(TR.quat_mul(jnp.asarray(x), jnp.asarray(base_quat * [1, -1, -1, -1]))))
                 for x in p[:, 3:7]]  # the world-frame turn: new * old^-1
        half = scale * np.asarray(TR.START_NOISE["rpy"])
        assert np.all(np.abs(delta) <= half + 1e-5) and np.all(np.abs(delta).max(0) > 0.9 * half)
        assert np.allclose(np.linalg.norm(p[:, 3:7], axis=1), 1.0, atol=1e-6)
        dq = p[:, 7:]
        assert dq.min() >= -0.05 - 1e-7 and dq.max() <= min(0.2, scale * 0.1) + 1e-6
        assert np.isclose(dq, -0.05, rtol=0, atol=1e-7).any() and dq.max() > 0.9 * min(0.2, scale * 0.1)  # clipped below, reaching above
    p0, v0 = TR.perturb_start(keys[0], qpos, qvel, 0.0, qadr, q_min, q_max)
    assert np.allclose(np.asarray(p0), np.asarray(qpos), atol=1e-7) and not np.any(np.asarray(v0))
    with pytest.raises(ValueError, match="start_noise"):
        TR.TrackingConfig(start_noise=-1.0)


def test_bins_and_windows():
    assert TR.num_bins(751, 0.02, 1.0) == 15 and TR.frames_per_bin(0.02, 1.0) == 50
    assert TR.num_bins(325, 0.02, 1.0) == 7
    assert int(TR.window_end(0, 751, 100)) == 100 and int(TR.window_end(700, 751, 100)) == 750


def test_config_derives_the_observation_and_round_trips():
    import yaml

    from policies.observation import TRACKING_OBS_TERMS
    from train.config import from_dict, preset

    cfg = preset("cpu", motion="box_lift").with_overrides({"env": {"task": "tracking", "tracking": {"window_s": 3.0}}})
    assert cfg.env.obs_terms == TRACKING_OBS_TERMS and cfg.env.tracking.window_s == 3.0
    assert from_dict(yaml.safe_load(yaml.safe_dump(cfg.to_dict()))) == cfg
    for bad, msg in [({"task": "dance"}, "env.task"), ({"tracking": {"sigma_body_pos": 0}}, "sigma_body_pos"),
                     ({"tracking": {"weights": [["bogus", 1.0]]}}, "bogus"),
                     ({"tracking": {"uniform_floor": 2}}, "uniform_floor")]:
        with pytest.raises(ValueError, match=msg):
            preset("cpu").with_overrides({"env": bad})


def test_recipes_train_the_clips_as_tracking():
    from train.cli import recipe

    for motion in ("dance", "dance_in_limits", "dance_calm", "dance_calm_grounded", "dance_calm_settled", "dance_calm_balanced",
                   "dance_calm_planted", "dance_calm_steady", "box_lift", "box_lift_grounded", "box_lift_balanced"):
        assert "env.task=tracking" in recipe(motion)


# ---------------------------------------------------------------------------------------------- the env
@pytest.fixture(scope="module")
def tracking_env():
    from motions import load_motion
    from train import domain_rand as DR
    from train.env import EnvConfig, G1Env

    cfg = EnvConfig(domain_rand=DR.DomainRandConfig.off(), obs_noise=0.0, task="tracking")
    return G1Env(cfg, load_motion("box_lift"))


@pytest.fixture(scope="module")
def tracking_compiled(tracking_env):
    """The env's batched reset and step, compiled once for the module's tests (batches of 2)."""
    return jax.jit(tracking_env.reset_batch, static_argnums=1), jax.jit(jax.vmap(tracking_env.step))


@pytest.fixture(scope="module")
def tracking_reset_at(tracking_env):
    """The env's batched reset at given frames, compiled once."""
    return jax.jit(jax.vmap(lambda k, f: tracking_env.reset(k, frame=f)))


@pytest.mark.jax
def test_tracking_env_smoke_and_observation_contract(tracking_env, tracking_compiled):
    """A few jitted steps of 2 envs on box_lift: finite rewards and observations, failures counted into the
    sampler, truncation at the window's end; the observation is policies.observation's from the same state
    with motion_anchor_ori_b as policies.tracking builds it (the runtime's FK of the anchor); body velocities
    are C MuJoCo's."""
    import mujoco

    from policies import observation as O
    from policies.tracking import Reference, TrackingSpec, TrackingTerms
    from robots.physics import quat_rotate_inverse

    env = tracking_env
    assert env.observation_size == O.obs_size(O.term_specs(O.TRACKING_OBS_TERMS))
    # jitted: one compile instead of op-by-op dispatch, and device-committed outputs as the step returns them,
    # so the step's first compile serves every later call
    reset_batch, step = tracking_compiled
    s = reset_batch(jax.random.PRNGKey(1), 2)
    assert np.all(np.asarray(s.end_step) == np.minimum(np.asarray(s.step) + 100, 324))
    reset_done = jax.jit(env.reset_done)
    for k in range(3):
        s = step(s, env._ref_action[jnp.minimum(s.step + 1, env.episode_length)])  # the reference's own targets
        assert np.all(np.isfinite(np.asarray(s.reward))) and np.all(np.isfinite(np.asarray(s.obs)))
    # observation of env 0 == the numpy builders' on the same state
    qpos, qvel = np.asarray(s.data.qpos[0], float), np.asarray(s.data.qvel[0], float)
    q, quat, k = qpos[env.qadr], qpos[3:7], int(s.step[0])
    ref_quat = np.array([_mat_quat(r) for r in np.asarray(env._ref_body_rot[:, env.anchor])])
    tt = TrackingTerms(TrackingSpec(anchor_body="torso_link"),
                       Reference(np.asarray(env._ref_q), np.asarray(env._ref_dq), None, ref_quat), np.arange(29))
    start = np.asarray(env._start_qpos[0], float)  # the runtime aligns the clip at its step 0: the robot there
    tt.update(0, start[env.qadr], start[3:7])
    assert np.allclose(tt.align, np.eye(3), atol=1e-6)  # the robot started on the reference's heading
    tt.update(k, q, quat)
    from policies.runtime import observation_inputs

    inputs = observation_inputs(k, np.asarray(env._ref_q, float), np.asarray(env._ref_h, float), env.cfg.control_dt,
                                env.duration, gyro=qvel[3:6], quat=quat, q=q, dq=qvel[env.dadr],
                                last_action=np.asarray(s.last_action[0], float),
                                base_lin_vel=quat_rotate_inverse(quat, qvel[0:3]), base_height=qpos[2],
                                anchor_ori_b=tt.anchor_ori_b)
    np.testing.assert_allclose(np.asarray(s.obs[0]), O.build_observation(env.obs_specs, inputs), atol=2e-5)
    # the exported artifact's reference (pelvis states -> anchor by forward kinematics) is the trainer's anchor
    from motions import load_motion
    from policies.tracking import reference_from_states
    from robots.body_frames import quat_to_mat
    from train.export import reference_base_states

    motion = load_motion("box_lift")
    art_ref = reference_from_states(motion.ref_q, *reference_base_states(motion), env.cfg.control_dt, "torso_link")
    trained = np.asarray(env._ref_body_rot[:, env.anchor], float)
    assert art_ref.frames == trained.shape[0]
    np.testing.assert_allclose(np.stack([quat_to_mat(x) for x in art_ref.anchor_quat]), trained, atol=1e-5)
    # the robot placed in the reference's own state: its COM relative to its feet is the reference's (the MJX
    # inputs of com_feet against the C MuJoCo reference arrays), at frames of double and single stance
    contact = np.asarray(env._ref_c)
    for f in (int(np.flatnonzero(contact.all(1))[5]), int(np.flatnonzero(contact.sum(1) == 1)[3])):
        kin = jax.jit(env._kinematics)(env.mx, env.init_data.replace(qpos=env._start_qpos[f], qvel=env._start_qvel[f]))
        err = TR.com_feet_sq(kin.subtree_com[0], env.foot_centers(kin), env._ref_com[f], env._ref_feet[f],
                             env._ref_c[f])
        assert float(err) < 1e-10 and np.asarray(env._ref_c[f]).any()
    # body kinematics == C MuJoCo's at the same state (velocities: the body Jacobians times qvel)
    m = env.mj_model
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = qpos, qvel
    mujoco.mj_forward(m, d)
    pos, rot, lin, ang = (np.asarray(x[0]) for x in jax.vmap(env.body_kinematics)(s.data))
    jp, jr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
    for i, b in enumerate(env.track_body):
        mujoco.mj_jacBody(m, d, jp, jr, int(b))
        np.testing.assert_allclose(pos[i], d.xpos[b], atol=1e-5)
        np.testing.assert_allclose(rot[i].reshape(9), d.xmat[b], atol=1e-5)
        np.testing.assert_allclose(lin[i], jp @ qvel, atol=1e-4)
        np.testing.assert_allclose(ang[i], jr @ qvel, atol=1e-4)
    # the balance term's COM and sole centres are C MuJoCo's (subtree_com of the world, mean sole-sphere centre)
    com_d = np.asarray(s.data.subtree_com[0, 0])
    np.testing.assert_allclose(com_d, d.subtree_com[0], atol=1e-5)
    soles = np.asarray(jax.vmap(env.foot_centers)(s.data)[0])
    for f in (0, 1):
        np.testing.assert_allclose(soles[f], d.geom_xpos[env.sphere_geoms[env.sphere_foot == f]].mean(0), atol=1e-5)
    assert soles[0, 1] > soles[1, 1]  # left is +y
    # a failure (forced) is counted in its bin and every env carries the counts
    failed = s.replace(done=jnp.array([True, False]), truncated=jnp.array([False, False]))
    r = reset_done(failed, jax.random.split(jax.random.PRNGKey(2), 2))
    counts = np.asarray(r.start_counts)
    b = int(s.step[0]) // env.per_bin
    assert counts[0, b] == pytest.approx(env.cfg.tracking.count_alpha) and np.all(counts[0] == counts[1])
    assert counts[0].sum() == pytest.approx(env.cfg.tracking.count_alpha)
    np.testing.assert_array_equal(np.asarray(r.step[1]), np.asarray(s.step[1]))  # not done: kept
    # truncation at the window's end
    late = s.replace(end_step=s.step + 1)
    assert np.all(np.asarray(step(late, late.last_action).truncated))


@pytest.mark.jax
def test_noisy_starts_stay_above_the_floor_near_the_reference(tracking_env):
    """start_noise 1 on box_lift, 16 drawn starts: C MuJoCo's kinematics of each start state puts no foot sphere
    below the floor; the pelvis is within the x, y noise of the reference's state at its frame and never lower
    than its z noise allows (only lifted); the joints moved from the reference's by at most 0.1 rad."""
    import dataclasses

    import mujoco

    from motions import load_motion
    from train.env import G1Env

    cfg = tracking_env.cfg
    env = G1Env(dataclasses.replace(cfg, tracking=dataclasses.replace(cfg.tracking, start_noise=1.0)),
                load_motion("box_lift"))
    s = jax.jit(env.reset_batch, static_argnums=1)(jax.random.PRNGKey(4), 16)
    m, d = env.mj_model, mujoco.MjData(env.mj_model)
    qpos, frames = np.asarray(s.data.qpos, float), np.asarray(s.step)
    ref = np.asarray(env._start_qpos, float)[frames]
    lowest = []
    for x in qpos:
        d.qpos[:] = x
        mujoco.mj_kinematics(m, d)
        lowest.append((d.geom_xpos[env.sphere_geoms, 2] - env.sphere_radius).min())
    assert min(lowest) > -1e-5, lowest
    assert np.all(np.abs(qpos[:, 0:2] - ref[:, 0:2]) <= 0.05 + 1e-6)
    assert np.all(qpos[:, 2] - ref[:, 2] >= -0.01 - 1e-6)
    assert np.any(qpos[:, 2] - ref[:, 2] > 0.01)  # tilted or bent into the floor: lifted beyond the z noise
    dq = np.abs(qpos[:, env.qadr] - ref[:, env.qadr])
    assert dq.max() <= 0.1 + 1e-5 and dq.max() > 0.05
    assert np.all(np.isfinite(np.asarray(s.obs)))


def _mat_quat(r):
    from robots.body_frames import mat_to_quat

    return mat_to_quat(r)


@pytest.mark.jax
def test_train_window_replay_ends_as_the_env_does(tracking_env, tracking_compiled, tracking_reset_at):
    """experiments.train_window.replay on box_lift with the reference's own targets: a start mid-clip runs its
    steps, a start 3 frames before the clip's end stops at its window's end, a start rolled 70 deg (past the fall
    criterion's 57.3 deg) falls at the first control step."""
    from experiments.train_window import replay, start_states

    env = tracking_env
    T = env.episode_length + 1
    step = tracking_compiled[1]

    def reference(s):
        return env._ref_action[jnp.minimum(s.step + 1, env.episode_length)]

    s = start_states(env, [10, T - 4], tracking_reset_at)
    np.testing.assert_allclose(np.asarray(s.data.qpos[0]), np.asarray(env._start_qpos[10]))
    rows = replay(env, reference, s, 5, batched_step=step)
    assert (rows[0]["ended"], rows[0]["reached"], rows[0]["fell_after_s"]) == ("steps", 15, None)
    assert (rows[1]["ended"], rows[1]["reached"], rows[1]["fell_after_s"]) == ("window", T - 1, None)
    s = start_states(env, [10, 10], tracking_reset_at)
    qpos = np.asarray(s.data.qpos).copy()
    qpos[1, 3:7] = [math.cos(math.radians(35)), math.sin(math.radians(35)), 0.0, 0.0]
    rows = replay(env, reference, s.replace(data=s.data.replace(qpos=jnp.asarray(qpos, s.data.qpos.dtype))), 5,
                  batched_step=step)
    assert rows[0]["ended"] == "steps" and rows[0]["com_support_err_max_m"] >= 0
    assert rows[1]["ended"] == "fell" and rows[1]["fell_after_s"] == pytest.approx(env.cfg.control_dt)
