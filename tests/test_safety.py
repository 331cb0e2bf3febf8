"""safety/: hand-computed oracles for the limit functions, watchdogs and the latch."""
import numpy as np
import pytest

from robots import g1
from robots.physics import tilt_angle
from safety import (Command, Limits, SafetyMonitor, Trip, WatchdogConfig, check_command, damping_command,
                    implied_torque, safe_target, soft_limits, torque_interval)

N = g1.NUM_MOTORS
UP = np.array([1.0, 0, 0, 0])
LIM = Limits.default()


def test_soft_limits_inside_hard_limits_and_contain_default_pose():
    lo, hi = soft_limits()
    assert np.all(lo > g1.JOINT_POS_MIN) and np.all(hi < g1.JOINT_POS_MAX)
    # ankle roll: range 0.5236 rad -> margin 5 % = 0.02618 rad
    i = g1.joint_index("left_ankle_roll_joint")
    assert lo[i] == pytest.approx(-0.2618 + 0.02618) and hi[i] == pytest.approx(0.2618 - 0.02618)
    # hip pitch: range 5.41 rad -> margin capped at 0.1 rad
    i = g1.joint_index("left_hip_pitch_joint")
    assert lo[i] == pytest.approx(-2.5307 + 0.1) and hi[i] == pytest.approx(2.8798 - 0.1)
    assert np.all(g1.DEFAULT_JOINT_POS > lo) and np.all(g1.DEFAULT_JOINT_POS < hi)


def test_torque_interval_hand_computed():
    # knee: kp 150, kd 4, limit 139 Nm; q = 0.3, dq = 2 rad/s -> kd dq = 8 Nm
    i = g1.joint_index("left_knee_joint")
    lo, hi = torque_interval(np.array([0.3]), np.array([2.0]), np.array([150.0]), np.array([4.0]), np.array([139.0]))
    assert lo[0] == pytest.approx(0.3 + (8 - 139) / 150) and hi[0] == pytest.approx(0.3 + (8 + 139) / 150)
    assert g1.KP[i] == 150 and g1.KD[i] == 4 and g1.TORQUE_LIMIT[i] == 139
    # kp = 0 admits every target
    lo, hi = torque_interval(np.array([0.0]), np.array([0.0]), np.array([0.0]), np.array([8.0]), np.array([5.0]))
    assert lo[0] == -np.inf and hi[0] == np.inf


def test_safe_target_clamps_torque_rate_and_limits():
    q = g1.DEFAULT_JOINT_POS.copy()
    dq = np.zeros(N)
    # a 1 rad step on every joint from the current pose: rate limit wins (<= v_max * 2 ms)
    t = safe_target(q + 1.0, q, dq, q, LIM)
    np.testing.assert_allclose(t - q, np.minimum(LIM.max_step, LIM.q_max - q))
    # with a huge rate allowance the torque bound and joint limits win
    wide = Limits.default(command_dt=10.0)
    t = safe_target(q + 1.0, q, dq, q, wide)
    tau = implied_torque(t, q, dq, wide.kp, wide.kd)
    assert np.all(np.abs(tau) <= wide.torque + 1e-9)
    i = g1.joint_index("left_ankle_pitch_joint")  # 50 Nm / 200 Nm/rad = 0.25 rad, soft max 0.4538
    assert t[i] == pytest.approx(min(q[i] + 0.25, LIM.q_max[i]))
    # inside everything: unchanged
    small = q + 1e-3
    np.testing.assert_allclose(safe_target(small, q, dq, q, LIM), small)


def test_safe_target_infeasible_torque_takes_least_torque_end():
    # wrist yaw: kp 20, kd 0.5, limit 5 Nm; moving at +30 rad/s -> kd dq = 15 Nm, needs q* >= q + 0.5
    i = g1.joint_index("left_wrist_yaw_joint")
    q = g1.DEFAULT_JOINT_POS.copy()
    dq = np.zeros(N)
    dq[i] = 30.0
    t = safe_target(q, q, dq, q, LIM)
    assert t[i] == pytest.approx(q[i] + LIM.max_step[i])  # as far towards the torque interval as the rate allows


def test_tilt_angle():
    assert tilt_angle(UP) == pytest.approx(0.0)
    a = 0.5
    assert tilt_angle(np.array([np.cos(a / 2), np.sin(a / 2), 0, 0])) == pytest.approx(a)
    assert tilt_angle(np.array([np.cos(a / 2), 0, np.sin(a / 2), 0])) == pytest.approx(a)
    assert tilt_angle(np.array([np.cos(a / 2), 0, 0, np.sin(a / 2)])) == pytest.approx(0.0)  # yaw is not tilt
    assert tilt_angle(2 * UP) == pytest.approx(0.0)  # unnormalised


def test_check_command_trips():
    q, dq = g1.DEFAULT_JOINT_POS.copy(), np.zeros(N)
    nan = q.copy()
    nan[3] = np.nan
    assert check_command(q, dq, UP, nan, q, LIM).kind == "nonfinite_action"
    assert check_command(q, dq, UP, q + np.inf, q, LIM).kind == "nonfinite_action"
    assert check_command(nan, dq, UP, q, q, LIM).kind == "nonfinite_state"
    assert check_command(q, dq, np.array([np.nan, 0, 0, 0]), q, q, LIM).kind == "nonfinite_state"
    s = np.sqrt(0.5)
    assert check_command(q, dq, np.array([s, s, 0, 0]), q, q, LIM).kind == "tilt"
    assert check_command(q, dq, UP, np.zeros(3), q, LIM).kind == "bad_action"
    out = check_command(q, dq, UP, q, q, LIM)
    assert isinstance(out, Command) and out.kind == "position"
    np.testing.assert_array_equal(out.kp, g1.KP)
    np.testing.assert_array_equal(out.kd, g1.KD)
    assert check_command(q, dq, UP, None, q, LIM).kind == "zero_torque"


def test_damping_command():
    d = damping_command()
    assert d.kind == "damping"
    np.testing.assert_array_equal(d.kp, 0)
    np.testing.assert_array_equal(d.kd, g1.DAMPING_KD)
    for a in (d.q, d.dq, d.tau):
        np.testing.assert_array_equal(a, 0)


def test_monitor_latches_and_records():
    m = SafetyMonitor(t0=100.0)
    q, dq = g1.DEFAULT_JOINT_POS.copy(), np.zeros(N)
    c = m.step(100.0, q, dq, UP, q, rx_time=100.0, tick=1)
    assert c.kind == "position"
    c = m.step(100.002, q, dq, UP, q * np.nan, rx_time=100.002, tick=2)
    assert c.kind == "damping" and m.latched
    # good input afterwards: still damping (latched), and only one event
    for k in range(5):
        assert m.step(100.004 + k * 0.002, q, dq, UP, q, rx_time=100.004, tick=3 + k).kind == "damping"
    assert m.events == [{"time": pytest.approx(0.002), "kind": "nonfinite_action", "detail": m.events[0]["detail"]}]


def test_stale_state_and_tick_stall_and_deadline():
    cfg = WatchdogConfig(stale_s=0.05, tick_stall_s=0.05, max_lateness_s=0.05)
    q, dq = g1.DEFAULT_JOINT_POS.copy(), np.zeros(N)
    m = SafetyMonitor(watchdog=cfg)
    assert m.step(0.0, q, dq, UP, q, rx_time=0.0, tick=0).kind == "position"
    assert m.step(0.049, q, dq, UP, q, rx_time=0.0, tick=0).kind == "position"
    assert m.step(0.051, q, dq, UP, q, rx_time=0.0, tick=0).kind == "damping"
    assert m.events[0]["kind"] == "stale_state" and "old" in m.events[0]["detail"]
    # fresh samples whose tick does not advance
    m = SafetyMonitor(watchdog=cfg)
    for k in range(25):  # up to 48 ms
        c = m.step(k * 0.002, q, dq, UP, q, rx_time=k * 0.002, tick=7)
    assert c.kind == "position"
    c = m.step(0.052, q, dq, UP, q, rx_time=0.052, tick=7)
    assert c.kind == "damping" and "stuck" in m.events[0]["detail"]
    # deadline: misses counted, large lateness trips
    m = SafetyMonitor(watchdog=cfg)
    assert m.step(0.0, q, dq, UP, q, rx_time=0.0, tick=1, lateness=0.003).kind == "position"
    assert m.deadline.misses == 1
    assert m.step(0.1, q, dq, UP, q, rx_time=0.1, tick=2, lateness=0.06).kind == "damping"
    assert m.events[0]["kind"] == "deadline"
    assert isinstance(Trip("x", "y"), tuple)
