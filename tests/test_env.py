"""G1Env: reset pose, observation contract, PD vs C MuJoCo, standing, termination, rewards, DR.

One compiled batched step (batch 4) is shared by every test here (module fixture).
"""
from __future__ import annotations


import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from policies import observation as O
from robots import g1
from robots import physics as P
from train import domain_rand as DR
from train import rewards as R
from train.env import EnvConfig, G1Env, stiff_contact
from motions import hold_pose_motion

pytestmark = pytest.mark.jax  # every test here compiles JAX programs

N = 4


def nominal_cfg(**kw) -> EnvConfig:
    return EnvConfig(domain_rand=DR.DomainRandConfig.off(), obs_noise=0.0, **kw)


@pytest.fixture(scope="module")
def env():
    return G1Env(nominal_cfg(), hold_pose_motion(60, "stand"))


@pytest.fixture(scope="module")
def step(env):
    return jax.jit(jax.vmap(env.step))


@pytest.fixture(scope="module")
def state0(env):
    return jax.jit(env.reset_batch, static_argnums=1)(jax.random.PRNGKey(0), N)


def _set(state, i=None, **fields):
    """Set data fields (qpos=...) on every env of a batched state."""
    return state.replace(data=state.data.replace(**fields))


def test_reset_pose_feet_on_floor_and_observation_contract(env, state0):
    m = env.mj_model
    d = mujoco.MjData(m)
    d.qpos[:] = np.asarray(state0.data.qpos[0])
    mujoco.mj_forward(m, d)
    bottoms = d.geom_xpos[env.sphere_geoms, 2] - env.sphere_radius
    assert abs(bottoms.min()) < 1e-6  # lowest sole sphere exactly on the floor
    np.testing.assert_allclose(d.qpos[env.qadr], g1.DEFAULT_JOINT_POS, atol=1e-7)
    assert int(state0.step[0]) == 0 and not bool(state0.done.any())
    # the observation is policies/observation.py's, built by numpy from the same state
    T = env.motion.ref_q.shape[0]
    inp = O.ObsInputs(
        gyro=d.qvel[3:6], quat=d.qpos[3:7], q=d.qpos[env.qadr], dq=d.qvel[env.dadr], last_action=np.zeros(29),
        base_lin_vel=P.quat_rotate_inverse(d.qpos[3:7], d.qvel[0:3]), base_height=np.asarray(d.qpos[2]),
        phase=np.asarray(0.0), ref_q=env.motion.ref_q[1:4], ref_height=env.motion.ref_height[1:4])
    expected = O.build_observation(O.term_specs(), inp)
    assert env.observation_size == expected.shape[-1] == O.obs_size(env.obs_specs)
    np.testing.assert_allclose(np.asarray(state0.obs[0]), expected, atol=1e-5)
    assert T == 60 and env.episode_length == 59


def test_pd_and_substeps_match_c_mujoco_in_flight(env, step, state0):
    """PD at every 200 Hz substep with the robot's gains and clip: MJX env vs a C MuJoCo loop."""
    m = env.mj_model
    lift = 0.5
    qpos = state0.data.qpos.at[:, 2].add(lift)
    s = _set(state0, qpos=qpos)
    rng = np.random.default_rng(0)
    actions = rng.normal(0, 0.5, (3, N, 29)).astype(np.float32)
    d = mujoco.MjData(m)
    d.qpos[:] = np.asarray(qpos[0])
    for k in range(3):
        s = step(s, jnp.asarray(actions[k]))
        target = g1.DEFAULT_JOINT_POS + 0.25 * actions[k, 0]
        for _ in range(env.cfg.substeps):
            d.ctrl[:] = np.clip(g1.KP * (target - d.qpos[env.qadr]) - g1.KD * d.qvel[env.dadr], -g1.TORQUE_LIMIT, g1.TORQUE_LIMIT)
            mujoco.mj_step(m, d)
    assert d.ncon == 0
    np.testing.assert_allclose(np.asarray(s.data.qpos[0]), d.qpos, atol=3e-4)
    np.testing.assert_allclose(np.asarray(s.data.qvel[0]), d.qvel, atol=2e-2)
    np.testing.assert_allclose(np.asarray(s.last_action[0]), actions[-1, 0])
    assert float(s.metrics["contact_force_max"][0]) == 0.0
    # the hold-pose reference action is 0, so the residual term is the action's squared norm
    assert float(s.metrics["r_residual"][0]) == pytest.approx(float(np.sum(actions[-1, 0] ** 2)), rel=1e-5)


def test_stands_one_second_with_zero_action(env, step, state0):
    s = state0
    for _ in range(50):
        s = step(s, jnp.zeros((N, 29)))
    assert not bool(s.done.any())
    assert np.all(np.asarray(s.step) == 50)
    h = np.asarray(s.data.qpos[:, 2])
    assert np.all(np.abs(h - g1.DEFAULT_BASE_HEIGHT) < 0.02), h
    assert np.all(np.asarray(s.metrics["joint_pos_err"]) < 0.05)
    # 8 spheres carry the weight (~330 N), nothing near the 400 N per-sphere stiff threshold
    f = np.asarray(s.contact_force)
    assert 0.8 * g1.TOTAL_MASS * 9.81 < f[0].sum() < 1.5 * g1.TOTAL_MASS * 9.81
    assert not bool(s.metrics["stiff_contact"].any())
    w = env.reward_weights
    r = np.asarray(s.reward)
    assert np.all(np.isfinite(r)) and np.all(r > 0.8 * (w["joint_pos"] + w["base_height"] + w["alive"]))


def test_fall_and_end_of_motion_terminate(env, step, state0):
    # tilted by 1.2 rad about x, high above the floor: a fall by tilt, not truncation
    c, s_ = np.cos(0.6), np.sin(0.6)
    qpos = state0.data.qpos.at[:, 2].add(1.0).at[:, 3:7].set(jnp.asarray([c, s_, 0.0, 0.0]))
    s = step(_set(state0, qpos=qpos), jnp.zeros((N, 29)))
    assert bool(s.done.all()) and not bool(s.truncated.any())
    assert np.all(np.asarray(s.metrics["fell"]) == 1.0)
    # last reference frame: truncated, done, not fallen
    s = step(state0.replace(step=jnp.full(N, env.episode_length - 1, jnp.int32)), jnp.zeros((N, 29)))
    assert bool(s.truncated.all()) and bool(s.done.all())
    assert np.all(np.asarray(s.metrics["fell"]) == 0.0)


def test_reward_terms_hand_computed():
    z29 = jnp.zeros(29)
    x = R.RewardInputs(
        q=z29.at[0].set(0.1), ref_q=z29, dq=z29.at[1].set(2.0), ref_dq=z29, base_height=jnp.asarray(0.7),
        ref_height=jnp.asarray(0.8), base_lin_vel=jnp.asarray([0.5, 0.0, 0.0]), ref_base_lin_vel=jnp.zeros(3),
        gravity=jnp.asarray([0.1, 0.0, -0.995]), ref_gravity=jnp.asarray([0.0, 0.0, -1.0]), foot_height=jnp.asarray([0.1, 0.0]), ref_foot_height=jnp.zeros(2),
        foot_contact=jnp.asarray([True, False]), ref_contact=jnp.asarray([True, True]), fell=jnp.asarray(True),
        action=z29.at[2].set(1.0), last_action=z29, ref_action=z29.at[2].set(0.5).at[3].set(-0.5),
        torque_sq=jnp.asarray(30.0))
    t = {k: float(v) for k, v in R.reward_terms(x).items()}
    assert t["joint_pos"] == pytest.approx(np.exp(-2.0 * 0.01))
    assert t["joint_vel"] == pytest.approx(np.exp(-0.1 * 4.0))
    assert t["base_height"] == pytest.approx(np.exp(-100.0 * 0.01))
    assert t["base_lin_vel"] == pytest.approx(np.exp(-4.0 * 0.25))
    assert t["base_orientation"] == pytest.approx(np.exp(-10.0 * 0.01))
    # a leaning reference (an imported clip's pelvis pitch): the term compares with its gravity, not with level
    lean = x._replace(ref_gravity=jnp.asarray([0.1, 0.0, -0.995]))
    assert float(R.reward_terms(lean)["base_orientation"]) == 1.0
    lean = x._replace(ref_gravity=jnp.asarray([-0.2, 0.05, -0.978]))
    assert float(R.reward_terms(lean)["base_orientation"]) == pytest.approx(np.exp(-10.0 * (0.3**2 + 0.05**2)))
    assert t["foot_height"] == pytest.approx(np.exp(-100.0 * 0.01))
    assert t["foot_contact"] == 0.5 and t["alive"] == 1.0 and t["fall"] == 1.0
    assert t["action_rate"] == 1.0 and t["torque"] == 30.0
    assert t["residual"] == pytest.approx(0.5)  # 0.5^2 + 0.5^2
    w = R.resolve_weights({"joint_pos": 2.0})
    assert w["joint_pos"] == 2.0 and w["fall"] == R.DEFAULT_WEIGHTS["fall"]
    total = float(R.total_reward(R.reward_terms(x), w))
    assert total == pytest.approx(sum(w[k] * t[k] for k in R.TERMS), rel=1e-5)
    with pytest.raises(KeyError, match="unknown reward terms"):
        R.resolve_weights({"jump_height": 1.0})


def test_stiff_contact_detector():
    foot = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    f = jnp.asarray([[0, 10, 0, 0, 0, 0, 0, 0], [0, 0, 401, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 500, 900.0]])
    env_, feet = stiff_contact(f, foot, 400.0)
    assert env_.tolist() == [False, True, True]
    assert feet.tolist() == [[False, False], [True, False], [False, True]]


def test_domain_randomisation_ranges_and_model(env):
    cfg = DR.DomainRandConfig()
    p = jax.vmap(lambda k: DR.sample_params(k, cfg, env._nominal))(jax.random.split(jax.random.PRNGKey(1), 256))
    assert np.all((np.asarray(p.friction) >= 0.4) & (np.asarray(p.friction) <= 1.0))
    assert np.all((np.asarray(p.kp_scale) >= 0.9) & (np.asarray(p.kp_scale) <= 1.1))
    assert 0.1 < float(p.latency.mean()) < 0.3
    off = DR.sample_params(jax.random.PRNGKey(1), DR.DomainRandConfig.off(), env._nominal)
    assert float(off.friction) == pytest.approx(env.cfg.foot_friction) and not bool(off.latency)
    assert float(off.contact_timeconst) == pytest.approx(0.01)  # "stiff"
    one = jax.tree.map(lambda x: x[0], p).replace(contact_timeconst=jnp.asarray(0.03))
    mx = env.model_for(one)
    cg = env.contact_geoms
    np.testing.assert_allclose(np.asarray(mx.geom_friction)[cg, 0], float(one.friction))
    np.testing.assert_allclose(np.asarray(mx.geom_solref)[cg, 0], 0.03)
    others = np.setdiff1d(np.arange(env.mj_model.ngeom), cg)
    np.testing.assert_allclose(np.asarray(mx.geom_friction)[others], env.mj_model.geom_friction[others])
    np.testing.assert_allclose(np.asarray(mx.body_mass), env.mj_model.body_mass * np.asarray(one.mass_scale), rtol=1e-6)


def test_real_motion_builds_an_env():
    motions = pytest.importorskip("motions")
    m = motions.load_motion("hop")
    e = G1Env(nominal_cfg(), m)
    assert e.episode_length == m.ref_q.shape[0] - 1
    assert set(e.reward_weights) == set(R.TERMS)
    s = e.reset(jax.random.PRNGKey(0))
    assert np.all(np.isfinite(np.asarray(s.obs)))
    # the residual term compares the step's action with the reference action for the time reached
    # after the step (the frame the residual policy's ref_joint_pos[0] targets): 0 for that one
    k = 90  # in the crouch, where the reference moves
    a_ref = [(m.ref_q[i] - g1.DEFAULT_JOINT_POS) / e.cfg.action_scale for i in (k, k - 1)]
    z = jnp.zeros(29)
    res = [float(e._evaluate(s.data, jnp.int32(k), jnp.asarray(a, jnp.float32), z, jnp.zeros(()),
                              s.contact_force)[2]["r_residual"]) for a in a_ref]
    assert res[0] == pytest.approx(0.0, abs=1e-8)
    assert res[1] == pytest.approx(float(np.sum((a_ref[0] - a_ref[1]) ** 2)), rel=1e-4) and res[1] > 1e-4


def test_orientation_term_follows_an_imported_clips_lean():
    """reach_twist's squat pitches the pelvis 0.3 rad forward (motions/compose/reach_twist.yaml): the env's
    reference gravity there is (sin 0.3, 0, -cos 0.3), hand-computed for a pitch about y; keyframe motions
    (no orientation) keep (0, 0, -1), so their reward is what the level-pelvis term gave."""
    motions = pytest.importorskip("motions")
    m = motions.load_motion("reach_twist")
    e = G1Env(nominal_cfg(), m)
    k = int(round(4.0 / m.dt))
    np.testing.assert_allclose(np.asarray(e._ref_g[k]), [np.sin(0.3), 0.0, -np.cos(0.3)], atol=1e-5)
    np.testing.assert_allclose(np.asarray(e._ref_g[0]), [0.0, 0.0, -1.0], atol=1e-6)
    stand = G1Env(nominal_cfg(), hold_pose_motion(3, "stand"))
    assert np.array_equal(np.asarray(stand._ref_g), np.tile([0.0, 0.0, -1.0], (stand.episode_length + 1, 1)))


def test_random_starts_are_the_reference_states():
    """env.random_start: a reset at frame k starts from the reference's state there. Oracles: C MuJoCo
    kinematics of the start table (a stance frame's lowest foot sphere on the floor, a flight frame's
    soles in the air), the reference's joints and joint velocities, the pelvis's body-frame angular
    velocity against 2 Im(conj(q) dq/dt) from central differences of the quaternion's components, and
    the draws: ~random_start of them past frame 0, none past the margin, the previous action the one
    commanding that frame."""
    motions = pytest.importorskip("motions")
    m = motions.load_motion("reach_twist")
    e = G1Env(nominal_cfg(random_start=0.5), m)
    qpos, qvel = np.asarray(e._start_qpos), np.asarray(e._start_qvel)
    np.testing.assert_allclose(qpos[0], e.init_qpos, atol=1e-6)
    np.testing.assert_array_equal(qvel[0], 0.0)
    np.testing.assert_allclose(qpos[1:, e.qadr], m.ref_q[1:], atol=1e-6)
    np.testing.assert_allclose(qvel[1:, e.dadr], m.ref_dq[1:], atol=1e-6)
    d = mujoco.MjData(e.mj_model)
    for k in range(1, m.num_steps, 7):
        d.qpos[:] = qpos[k]
        mujoco.mj_kinematics(e.mj_model, d)
        assert (d.geom_xpos[e.sphere_geoms, 2] - e.sphere_radius).min() == pytest.approx(0.0, abs=1e-6)  # float32 table
    q = m.ref_base_quat / np.linalg.norm(m.ref_base_quat, axis=1, keepdims=True)
    for k in range(2, m.num_steps - 2, 11):
        dq = (q[k + 1] - q[k - 1]) / (2 * m.dt)
        w, v = q[k][0], -q[k][1:]  # conj(q)
        prod_vec = w * dq[1:] + dq[0] * v + np.cross(v, dq[1:])
        np.testing.assert_allclose(qvel[k, 3:6], 2 * prod_vec, atol=2e-3 + 0.02 * np.abs(qvel[k, 3:6]).max())
    assert np.abs(qvel[:, 5]).max() > 0.3  # the clip turns: the check above saw a yaw rate

    jump = motions.load_motion("jump_swing")
    ej = G1Env(nominal_cfg(random_start=0.5), jump)
    d = mujoco.MjData(ej.mj_model)
    flight = ~np.asarray(ej._ref_c).any(axis=1)
    assert flight.sum() > 10
    for k in np.nonzero(flight)[0]:
        d.qpos[:] = np.asarray(ej._start_qpos)[k]
        mujoco.mj_kinematics(ej.mj_model, d)
        assert (d.geom_xpos[ej.sphere_geoms, 2] - ej.sphere_radius).min() > 0.0

    states = jax.jit(e.reset_batch, static_argnums=1)(jax.random.PRNGKey(3), 400)
    k = np.asarray(states.step)
    assert 0.4 < np.mean(k > 0) < 0.6
    assert k.max() < e.num_start_frames == e.episode_length - 25
    np.testing.assert_allclose(np.asarray(states.data.qpos), qpos[k], atol=1e-6)
    i = int(np.argmax(k))
    np.testing.assert_allclose(np.asarray(states.last_action[i]), np.asarray(e._ref_action[k[i]]), atol=1e-6)
    assert np.all(np.asarray(states.last_action)[k == 0] == 0.0)
    assert np.all(np.isfinite(np.asarray(states.obs)))
    with pytest.raises(ValueError, match="probability"):
        nominal_cfg(random_start=1.5)
