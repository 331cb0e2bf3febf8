"""Property-based proof (hypothesis) that no command leaving the safety layer exceeds joint,
torque or rate limits, for arbitrary (NaN/inf included) policy outputs and measured states."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from robots import g1
from safety import Command, Limits, SafetyMonitor, WatchdogConfig, implied_torque, rate_interval, torque_interval

N = g1.NUM_MOTORS
LIM = Limits.default()
EPS = 1e-9
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

any_float = st.floats(allow_nan=True, allow_infinity=True, width=64)
# mostly finite, sometimes wild
wild = st.one_of(st.floats(-1e6, 1e6), any_float, st.sampled_from([np.nan, np.inf, -np.inf, 0.0]))


def vec(elements):
    return arrays(np.float64, (N,), elements=elements)


@st.composite
def joint_state(draw, allow_bad=True):
    u = draw(vec(st.floats(-0.2, 1.2)))  # fraction of the hard range, a little beyond both ends
    q = g1.JOINT_POS_MIN + u * (g1.JOINT_POS_MAX - g1.JOINT_POS_MIN)
    dq = draw(vec(st.floats(-1.5, 1.5))) * g1.VELOCITY_LIMIT
    quat = draw(arrays(np.float64, (4,), elements=st.floats(-1, 1)))
    if draw(st.booleans()):  # upright-ish, so the position path is exercised
        quat = np.array([1.0, *(0.1 * quat[1:])])
    if allow_bad and draw(st.integers(0, 9)) == 0:
        which = draw(st.sampled_from(["q", "dq", "quat"]))
        arr = {"q": q, "dq": dq, "quat": quat}[which]
        arr[draw(st.integers(0, arr.size - 1))] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    return q, dq, quat


@st.composite
def proposal(draw):
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(vec(wild))  # arbitrary, NaN/inf included
    if kind == 1:  # a plausible policy output mapped through the action scale
        return g1.DEFAULT_JOINT_POS + 0.25 * draw(vec(st.floats(-20, 20)))
    if kind == 2:
        return draw(vec(st.floats(-1e9, 1e9)))
    return g1.DEFAULT_JOINT_POS.copy()


def assert_safe(cmd: Command, q, dq, prev):
    for a in cmd[:5]:
        assert a.shape == (N,) and np.all(np.isfinite(a)), cmd
    if cmd.kind == "damping":
        np.testing.assert_array_equal(cmd.kp, 0.0)
        np.testing.assert_array_equal(cmd.kd, g1.DAMPING_KD)
        for a in (cmd.q, cmd.dq, cmd.tau):
            np.testing.assert_array_equal(a, 0.0)
        return
    if cmd.kind == "zero_torque":
        for a in cmd[:5]:
            np.testing.assert_array_equal(a, 0.0)
        return
    assert cmd.kind == "position"
    np.testing.assert_array_equal(cmd.kp, g1.KP)
    np.testing.assert_array_equal(cmd.kd, g1.KD)
    np.testing.assert_array_equal(cmd.dq, 0.0)
    np.testing.assert_array_equal(cmd.tau, 0.0)
    # 1. joint limits (soft limits, inside the hard ones)
    assert np.all(cmd.q >= LIM.q_min - EPS) and np.all(cmd.q <= LIM.q_max + EPS)
    assert np.all(cmd.q >= g1.JOINT_POS_MIN) and np.all(cmd.q <= g1.JOINT_POS_MAX)
    # 2. rate limit
    assert np.all(np.abs(cmd.q - prev) <= LIM.max_step + EPS)
    # 3. torque: within the motor limit wherever any target satisfying 1 and 2 allows it
    tau = implied_torque(cmd.q, q, dq, cmd.kp, cmd.kd)
    r_lo, r_hi = rate_interval(prev, LIM)
    f_lo, f_hi = np.maximum(LIM.q_min, r_lo), np.minimum(LIM.q_max, r_hi)
    t_lo, t_hi = torque_interval(q, dq, LIM.kp, LIM.kd, LIM.torque)
    feasible = np.maximum(f_lo, t_lo) <= np.minimum(f_hi, t_hi)
    tol = 1e-6 * (1 + np.abs(LIM.kp * q) + np.abs(LIM.kd * dq))
    assert np.all(np.abs(tau[feasible]) <= LIM.torque[feasible] + tol[feasible])
    # where infeasible: no admissible target implies less torque (it sits at F's end nearest T)
    if np.any(~feasible):
        best = np.minimum(np.abs(implied_torque(f_lo, q, dq, LIM.kp, LIM.kd)),
                          np.abs(implied_torque(f_hi, q, dq, LIM.kp, LIM.kd)))
        assert np.all(np.abs(tau[~feasible]) <= best[~feasible] + tol[~feasible])


@SETTINGS
@given(state=joint_state(), proposed=proposal(), prev_u=vec(st.floats(0, 1)))
def test_single_command_is_safe(state, proposed, prev_u):
    q, dq, quat = state
    prev = LIM.q_min + prev_u * (LIM.q_max - LIM.q_min)
    mon = SafetyMonitor(LIM)
    mon.prev_target = prev.copy()
    cmd = mon.step(0.0, q, dq, quat, proposed, rx_time=0.0, tick=1)
    assert_safe(cmd, q, dq, prev)
    bad_input = not (np.all(np.isfinite(q)) and np.all(np.isfinite(dq)) and np.all(np.isfinite(quat))
                     and np.all(np.isfinite(proposed)))
    if bad_input:
        assert cmd.kind == "damping" and mon.latched


@SETTINGS
@given(steps=st.lists(st.tuples(joint_state(allow_bad=False), st.one_of(st.none(), proposal())),
                      min_size=2, max_size=25),
       start=joint_state(allow_bad=False))
def test_command_sequence_is_safe(steps, start):
    """Over a whole sequence: every consecutive pair of position commands respects the rate limit,
    and after the first damping command every later one is damping."""
    mon = SafetyMonitor(LIM, watchdog=WatchdogConfig(stale_s=1e9, tick_stall_s=1e9, max_lateness_s=1e9))
    mon.reset_target(start[0])
    prev = mon.prev_target.copy()
    damped = False
    for k, ((q, dq, quat), proposed) in enumerate(steps):
        cmd = mon.step(k * g1.COMMAND_DT, q, dq, quat, proposed, rx_time=k * g1.COMMAND_DT, tick=k)
        if damped:
            assert cmd.kind == "damping"
        if cmd.kind == "position":
            assert_safe(cmd, q, dq, prev)
            prev = cmd.q
        else:
            assert_safe(cmd, q, dq, prev)
            if cmd.kind == "zero_torque":  # rate limiting restarts from the measured pose
                mon.reset_target(q)
                prev = mon.prev_target.copy()
        damped = damped or cmd.kind == "damping"
