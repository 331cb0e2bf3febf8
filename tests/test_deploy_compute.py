"""The policy tick's fast paths against the computations they replace, bit for bit
where the arithmetic is the same and within float tolerance where it is reordered:
- policies.observation.ObservationBuffer == build_observation(...).astype(float32), every step;
- projected_gravity_scalar == robots.physics.projected_gravity;
- PolicyRuntime on the bound ONNX session (fixed batch dimension, IOBinding) == a plain session.run;
- safety.limits.safe_target's two-row path == the interval formulas it replaced (hypothesis);
- all_finite == np.isfinite(...).all(), overflow included.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from policies import artifact as A
from policies.observation import (ObservationBuffer, ObsInputs, build_observation, projected_gravity_scalar,
                                  reference_window, term_specs)
from policies.runtime import PolicyRuntime, make_session
from robots import g1
from robots.physics import projected_gravity
from safety.limits import Limits, all_finite, safe_target, torque_interval

N = g1.NUM_MOTORS


@pytest.fixture(scope="module", params=["hop", "stand"])
def art(request):
    return A.load_artifact(A.artifact_dir(request.param))


def _state(rng):
    quat = rng.normal(size=4)
    return dict(q=rng.normal(size=N), dq=rng.normal(size=N), gyro=rng.normal(size=3), quat=quat / np.linalg.norm(quat),
                base_lin_vel=rng.normal(size=3), base_height=float(rng.uniform(0.3, 1.0)))


def _reference_obs(art, step, last_action, s):
    spec = art.spec
    ref_q, ref_h = reference_window(np.asarray(art.ref_q, float), np.asarray(art.ref_height, float), step)
    phase = np.asarray(np.clip(step * spec.control_dt / spec.motion.duration, 0.0, 1.0))
    return build_observation(spec.observation, ObsInputs(
        gyro=s["gyro"], quat=s["quat"], q=s["q"], dq=s["dq"], last_action=last_action, base_lin_vel=s["base_lin_vel"],
        base_height=np.asarray(s["base_height"]), phase=phase, ref_q=ref_q, ref_height=ref_h)).astype(np.float32)


def test_projected_gravity_scalar_is_bit_identical():
    rng = np.random.default_rng(0)
    quats = np.concatenate([rng.normal(size=(2000, 4)), rng.integers(-1, 2, size=(200, 4)).astype(float),
                            [[1, 0, 0, 0], [0, 0, 0, 0], [-0.0, 0.0, -0.0, 1.0]]])
    for q in quats:
        want = projected_gravity(q)
        got = np.array(projected_gravity_scalar(*q.tolist()))
        assert want.tobytes() == got.tobytes(), q


def test_observation_buffer_equals_build_observation_at_every_step(art):
    rt = PolicyRuntime(art)
    assert rt._obs_buf is not None  # the native motion layout takes the fast path
    rng = np.random.default_rng(1)
    for step in list(range(rt.n_steps + 1)) + [rt.n_steps + 5]:  # past the table: computed on the fly
        s = _state(rng)
        rt.last_action = rng.normal(size=N)
        got = rt.observe(step, s["q"], s["dq"], s["gyro"], s["quat"], s["base_lin_vel"], s["base_height"])
        want = _reference_obs(art, step, rt.last_action, s)
        assert got.dtype == np.float32 and got.tobytes() == want.tobytes(), step


def test_observation_buffer_supports_only_what_it_builds():
    specs = term_specs()
    assert ObservationBuffer.supported(specs)
    assert not ObservationBuffer.supported(specs[::-1])  # a step term before a state term
    from dataclasses import replace

    assert not ObservationBuffer.supported((replace(specs[0], history=2),) + specs[1:])
    assert not ObservationBuffer.supported((replace(specs[0], clip=(-1.0, 1.0)),) + specs[1:])


def test_runtime_step_equals_plain_session_run(art):
    """Same observation, action and target as the runtime's contract computed with a plain session (the
    onnxruntime backend: tests/test_policy_kernel.py holds the compiled one to it)."""
    rt = PolicyRuntime(art, backend="onnxruntime")
    assert rt._io is not None and rt.session.get_inputs()[0].shape == [1, rt.n_obs]  # batch fixed, bound
    plain = make_session(art.onnx_bytes)
    rng = np.random.default_rng(2)
    last = np.zeros(N)
    for step in range(0, rt.n_steps, 7):
        s = _state(rng)
        out = rt.step(step, s["q"], s["dq"], s["gyro"], s["quat"], s["base_lin_vel"], s["base_height"])
        obs = _reference_obs(art, step, last, s)
        action = np.asarray(plain.run([art.spec.output_name], {art.spec.input_name: obs[None]})[0], float).reshape(-1)
        np.testing.assert_array_equal(out.obs, obs)
        np.testing.assert_array_equal(out.action, action)
        np.testing.assert_array_equal(out.target, np.asarray(art.spec.default_joint_pos) + art.spec.action_scale * action)
        assert out.phase == min(step * art.spec.control_dt / art.spec.motion.duration, 1.0)
        last = action
    # outputs are the caller's: the next step does not overwrite them
    o1 = rt.step(3, **{k: v for k, v in _state(rng).items()})
    kept = o1.obs.copy(), o1.action.copy()
    rt.step(4, **{k: v for k, v in _state(rng).items()})
    np.testing.assert_array_equal(o1.obs, kept[0])
    np.testing.assert_array_equal(o1.action, kept[1])


# ---------------------------------------------------------------------- safety


def _safe_target_reference(proposed, q, dq, prev, limits, kp, kd):
    """safe_target as written before the two-row path (the interval formulas one end at a time)."""
    prev = np.minimum(np.maximum(prev, limits.q_min), limits.q_max)
    f_lo = np.maximum(limits.q_min, prev - limits.max_step)
    f_hi = np.minimum(limits.q_max, prev + limits.max_step)
    t_lo, t_hi = torque_interval(q, dq, kp, kd, limits.torque)
    lo, hi = np.maximum(f_lo, t_lo), np.minimum(f_hi, t_hi)
    empty = lo > hi
    if empty.any():
        lo = np.where(empty, np.where(t_hi < f_lo, f_lo, f_hi), lo)
        hi = np.where(empty, lo, hi)
    return np.minimum(np.maximum(proposed, lo), hi)


LIM = Limits.default()
finite = st.floats(-1e6, 1e6)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prop=arrays(np.float64, (N,), elements=finite), u=arrays(np.float64, (N,), elements=st.floats(-0.2, 1.2)),
       v=arrays(np.float64, (N,), elements=st.floats(-3, 3)), w=arrays(np.float64, (N,), elements=st.floats(-0.3, 1.3)),
       gain_scale=st.one_of(st.none(), st.floats(0.1, 2.0)))
def test_safe_target_two_row_path_is_bit_identical(prop, u, v, w, gain_scale):
    span = g1.JOINT_POS_MAX - g1.JOINT_POS_MIN
    q, dq, prev = g1.JOINT_POS_MIN + u * span, v * g1.VELOCITY_LIMIT, g1.JOINT_POS_MIN + w * span
    kp, kd = (LIM.kp, LIM.kd) if gain_scale is None else (LIM.kp * gain_scale, LIM.kd * gain_scale)
    got = safe_target(prop, q, dq, prev, LIM, kp, kd)
    want = _safe_target_reference(prop, q, dq, prev, LIM, kp, kd)
    assert got.tobytes() == want.tobytes()


def test_limits_arrays_are_read_only_and_shared_by_commands():
    from safety import SafetyMonitor

    mon = SafetyMonitor(LIM)
    cmd = mon.step(0.0, g1.DEFAULT_JOINT_POS, np.zeros(N), np.array([1.0, 0, 0, 0]), g1.DEFAULT_JOINT_POS, 0.0, 1)
    assert cmd.kind == "position" and cmd.q.flags.writeable
    for a in (cmd.dq, cmd.tau, cmd.kp, cmd.kd, LIM.q_min, LIM.torque):
        assert not a.flags.writeable
    with pytest.raises(ValueError):
        cmd.kp[0] = 1e6


def test_all_finite_matches_isfinite():
    rng = np.random.default_rng(3)
    cases = [rng.normal(size=29), np.full(29, 1e308), np.array([1e308, -1e308]), np.array([np.inf, -np.inf]),
             np.array([np.nan]), np.zeros(0), np.zeros((2, 3)), np.array([1, 2, 3]), [1.0, np.nan], 3.0, np.float64("nan")]
    for _ in range(200):
        a = rng.normal(size=rng.integers(1, 30)) * 10.0 ** rng.integers(-5, 309)
        if rng.random() < 0.3:
            a[rng.integers(a.size)] = rng.choice([np.nan, np.inf, -np.inf])
        cases.append(a)
    for a in cases:
        with np.errstate(over="ignore"):
            assert all_finite(a) == bool(np.isfinite(a).all()), a
    assert not all_finite(np.zeros(3), np.array([np.nan]))
