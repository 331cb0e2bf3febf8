"""SafetyMonitor's compiled usual tick (safety/kernel.py) equals the pure functions (safety.limits.checked_command)
bit for bit: the same commands, targets, prev_target and trips as a monitor that runs checked_command on every tick,
over random states (near and past the joint, rate and torque limits), policy gains, tilted and zero quaternions,
non-finite states, proposals and previous targets."""
import numpy as np
import pytest

from robots import g1
from safety import SafetyMonitor, WatchdogConfig
from safety import kernel as K
from safety.limits import Command, Limits, Trip, checked_command

N = g1.NUM_MOTORS
WD = WatchdogConfig(1e9, 1e9, 1e9)


def _pure_monitor(**kw):
    m = SafetyMonitor(watchdog=WD, **kw)
    m._set_gains = lambda gains, m=m: _no_kernel(m, gains)  # every tick through checked_command
    m._set_gains(None)
    return m


def _no_kernel(m, gains):
    SafetyMonitor._set_gains(m, gains)
    m._lim = None


def _same(a, b):
    assert type(a) is type(b) and a.kind == b.kind
    for x, y in zip(a[:-1], b[:-1]):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()


def _random_tick(rng, k):
    lo, hi = g1.JOINT_POS_MIN, g1.JOINT_POS_MAX
    q = rng.uniform(lo - 0.1, hi + 0.1)
    dq = rng.normal(0, (0.5, 5.0, 40.0)[k % 3], N)
    proposed = q + rng.normal(0, (0.01, 0.2, 2.0)[k % 3], N)
    quat = np.array([1.0, 0.0, 0.0, 0.0]) + rng.normal(0, (0.05, 0.3, 1.5)[k % 3], 4)
    if k % 17 == 0:
        quat[:] = 0.0
    if k % 23 == 0:
        (q, dq, proposed)[k % 3][rng.integers(N)] = (np.nan, np.inf, -np.inf)[k % 3]
    return q, dq, quat, proposed


@pytest.mark.parametrize("gains", [None, "policy"])
def test_monitor_kernel_equals_checked_command(gains):
    rng = np.random.default_rng(0)
    g = None if gains is None else (g1.KP * rng.uniform(0.5, 1.5, N), g1.KD * rng.uniform(0.5, 1.5, N))
    fast, pure = SafetyMonitor(watchdog=WD), _pure_monitor()
    assert fast._lim is not None and pure._lim is None
    n_fast = 0
    for k in range(4000):
        q, dq, quat, proposed = _random_tick(rng, k)
        check_tilt = k % 5 != 0
        if k % 97 == 0:  # a non-finite previous target: checked_command restarts from the measured pose
            fast.prev_target = pure.prev_target = np.full(N, np.nan)
        a = fast.step(k * 0.002, q, dq, quat, proposed, rx_time=k * 0.002, tick=k, check_tilt=check_tilt, gains=g)
        b = pure.step(k * 0.002, q, dq, quat, proposed, rx_time=k * 0.002, tick=k, check_tilt=check_tilt, gains=g)
        _same(a, b)
        assert fast.events == pure.events
        assert (fast.prev_target is None) == (pure.prev_target is None)
        if fast.prev_target is not None:
            assert fast.prev_target.tobytes() == pure.prev_target.tobytes()
        n_fast += isinstance(a, Command) and a.kind == "position"
        for m in (fast, pure):  # unlatch: keep comparing after trips
            if m.latched:
                m.latch = type(m.latch)()
                m.prev_target = None
    assert n_fast > 2000 and len(fast.events) > 100  # both paths exercised


def test_kernel_equals_checked_command_directly():
    lim = Limits.default()
    rows = K.limit_rows(lim, lim.kp, lim.kd)
    rng = np.random.default_rng(1)
    out = np.empty(N)
    for k in range(3000):
        q, dq, quat, proposed = _random_tick(rng, k)
        prev = np.clip(q + rng.normal(0, 0.05, N), lim.q_min - 0.05, lim.q_max + 0.05)
        u = np.concatenate([q, dq, proposed, prev, quat])
        code = K.safety_tick(u, rows, lim.tilt_max, True, out)
        want = checked_command(q, dq, quat, proposed, prev, lim, True, None)
        if code == K.OK:
            assert isinstance(want, Command) and want.q.tobytes() == out.tobytes(), k
        else:
            assert isinstance(want, Trip), k


def test_kernel_not_used_for_nonpositive_kp_or_odd_inputs():
    lim = Limits.default(kp=np.where(np.arange(N) == 3, 0.0, g1.KP))
    m = SafetyMonitor(lim, watchdog=WD)
    assert m._lim is None  # kp = 0 somewhere: checked_command's general path
    m = SafetyMonitor(watchdog=WD)
    q = g1.DEFAULT_JOINT_POS.copy()
    cmd = m.step(0.0, q.astype(np.float32), q, [1.0, 0.0, 0.0, 0.0], q.tolist(), rx_time=0.0, tick=0)
    want = checked_command(q.astype(np.float32), q, np.array([1.0, 0, 0, 0]), q.tolist(), np.clip(q, m.limits.q_min, m.limits.q_max),
                           m.limits)
    assert cmd.kind == "position" and cmd.q.tobytes() == want.q.tobytes()


@pytest.mark.parametrize("ref_deg, tilt_deg", [(None, 40), (None, 50), (58, 60), (58, 77), (58, 79), (70, 74),
                                                (70, 76), (float("nan"), 50)])
def test_reference_tilt_trips_the_kernel_and_the_pure_path_alike(ref_deg, tilt_deg):
    """safety.limits.tilt_limit: TILT_LIMIT without a reference, the reference's tilt + 20 deg while it bends,
    never beyond the 75 deg ceiling (hand values), the compiled tick and checked_command trip alike."""
    from safety.limits import TILT_CEILING, TILT_LIMIT, tilt_limit

    ref = None if ref_deg is None else np.radians(ref_deg)
    want = TILT_LIMIT if ref is None or not np.isfinite(ref) else min(TILT_CEILING, ref + np.radians(20.0))
    assert tilt_limit(Limits.default(), ref) == pytest.approx(want)
    assert np.degrees(tilt_limit(Limits.default(), np.radians(70.0))) == pytest.approx(75.0)
    q = g1.DEFAULT_JOINT_POS.copy()
    a = np.radians(tilt_deg)
    quat = np.array([np.cos(a / 2), np.sin(a / 2), 0.0, 0.0])
    fast, pure = SafetyMonitor(watchdog=WD), _pure_monitor()
    out = [m.step(0.0, q, np.zeros(N), quat, q, rx_time=0.0, tick=0, reference_tilt=ref) for m in (fast, pure)]
    _same(*out)
    assert fast.latched == pure.latched == (a > want)
