"""deploy/ without DDS: codec fast paths vs protocol, state machine, the policy runtime, and a
hypothesis proof that no LowCmd leaving the control loop exceeds joint, torque or rate limits for
arbitrary (NaN/inf included) policy outputs and measured states."""
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from comm import crc, hg, remote
from deploy.link import LowCmdBuilder, StateSample, parse_lowstate
from deploy.loop import ControlLoop, LoopConfig
from deploy.state_machine import AutoScript, ButtonEdges, State, StateMachine, estop_requested
from policies.action import action_to_joint_target
from policies.artifact import load_artifact
from policies.observation import ObsInputs, build_observation, reference_window
from policies.runtime import PolicyRuntime
from policies.stand import write_stand_artifact
from robots import g1
from safety import Command, Limits, implied_torque, rate_interval, torque_interval

N = g1.NUM_MOTORS
LIM = Limits.default()


@pytest.fixture(scope="module")
def estimator():
    from estimation.estimator import Estimator

    return Estimator()


@pytest.fixture(scope="module")
def stand_art(tmp_path_factory):
    return load_artifact(write_stand_artifact(tmp_path_factory.mktemp("art") / "stand"))


# ---------------------------------------------------------------------- codec


def test_link_codec_matches_protocol():
    rng = np.random.default_rng(0)
    b = LowCmdBuilder()
    for _ in range(30):
        rec = hg.lowstate_record(
            int(rng.integers(2**32)), rng.normal(size=N), rng.normal(size=N), rng.normal(size=N), rng.normal(size=4),
            rng.normal(size=3), rng.normal(size=3), rng.normal(size=3),
            remote=remote.encode_remote(remote.RemoteState(int(rng.integers(2**16)), 0.5)),
            mode_machine=int(rng.integers(256)))
        mine = parse_lowstate(hg.lowstate_cdr(rec))
        ref = hg.lowstate_arrays(rec)
        assert mine.crc_ok and ref.crc_ok and mine.tick == ref.tick and mine.remote == ref.remote
        for f in ("q", "dq", "tau_est", "quat", "gyro", "acc"):
            np.testing.assert_array_equal(getattr(mine, f), getattr(ref, f))
        cmd = Command(*(rng.normal(size=N) for _ in range(5)), "position")
        mm = int(rng.integers(256))
        mine = b.build(cmd, mm)
        ref = hg.lowcmd_record(q=cmd.q, dq=cmd.dq, tau=cmd.tau, kp=cmd.kp, kd=cmd.kd, mode=1,
                                     mode_machine=mm, mode_pr=0)
        assert mine.tobytes() == ref.tobytes()
        assert hg.check_lowcmd(hg.lowcmd_msg_from_record(mine), mode_machine=mm)[1] is None
    bad = hg.lowstate_cdr(rec)
    bad = bad[:-1] + bytes([bad[-1] ^ 1])  # flip a CRC bit
    assert not parse_lowstate(bad).crc_ok


# ---------------------------------------------------------------------- state machine


def test_state_machine_sequence_and_latch():
    sm = StateMachine()
    none = frozenset()
    assert not sm.on_buttons(0.0, frozenset({"A"}), frozenset({"A"}))  # A does nothing in PASSIVE
    assert sm.on_buttons(0.1, frozenset({"Start"}), frozenset({"Start"})) and sm.state == State.STAND_UP
    sm.go(State.HOLD, 2.6, "blend done")
    assert sm.on_buttons(3.0, frozenset({"A"}), frozenset({"A"})) and sm.state == State.POLICY
    assert not sm.on_buttons(3.1, frozenset({"Start"}), frozenset({"Start"}))
    assert sm.on_buttons(3.2, frozenset({"Select"}), frozenset({"Select"})) and sm.state == State.DAMPING
    # latched: nothing leaves DAMPING
    for b in ("Start", "A", "Select"):
        assert not sm.on_buttons(4.0, frozenset({b}), frozenset({b}))
    assert not sm.go(State.HOLD, 5.0, "x") and sm.state == State.DAMPING
    assert sm.visited == ["PASSIVE", "STAND_UP", "HOLD", "POLICY", "DAMPING"]
    assert sm.on_buttons(0.0, none, none) is False


def test_estop_combinations_and_edges():
    assert estop_requested(frozenset({"Select"}), frozenset({"Select"})) == "Select"
    assert estop_requested(frozenset({"L2", "B"}), frozenset({"B"})) == "L2+B"
    assert estop_requested(frozenset({"L2", "B"}), frozenset({"L2"})) == "L2+B"
    assert estop_requested(frozenset({"B"}), frozenset({"B"})) is None
    assert estop_requested(frozenset({"L2", "R2"}), frozenset({"R2"})) is None  # debug-mode chord is not e-stop
    e = ButtonEdges()
    assert e.update(frozenset({"A"})) == {"A"}
    assert e.update(frozenset({"A"})) == frozenset()  # held, not pressed again
    assert e.update(frozenset({"A", "Start"})) == {"Start"}


def test_auto_script():
    sm, a = StateMachine(), AutoScript(passive_s=0.5, hold_s=1.0, hold_after_s=1.0)
    assert a.presses(sm, 0.4, 0) == frozenset() and a.presses(sm, 0.5, 0) == {"Start"}
    sm.go(State.HOLD, 3.0, "x")
    assert a.presses(sm, 3.9, 0) == frozenset() and a.presses(sm, 4.0, 0) == {"A"}
    assert a.presses(sm, 9.0, 1) == frozenset()  # one motion per auto run
    assert not a.finished(sm, 3.5, 1) and a.finished(sm, 4.0, 1)


# ---------------------------------------------------------------------- policy runtime


def test_policy_runtime_matches_the_contract(stand_art):
    r = PolicyRuntime(stand_art)
    assert r.n_steps == 200 and r.phase(100) == pytest.approx(0.5)
    rng = np.random.default_rng(1)
    q, dq, gyro = rng.normal(size=N), rng.normal(size=N), rng.normal(size=3)
    quat = np.array([0.9, 0.1, 0.2, 0.3]) / np.linalg.norm([0.9, 0.1, 0.2, 0.3])
    v, h = rng.normal(size=3), 0.7
    out = r.step(7, q, dq, gyro, quat, v, h)
    ref_q, ref_h = reference_window(stand_art.ref_q, stand_art.ref_height, 7)
    expect = build_observation(stand_art.spec.observation, ObsInputs(
        gyro=gyro, quat=quat, q=q, dq=dq, last_action=np.zeros(N), base_lin_vel=v, base_height=np.asarray(h),
        phase=np.asarray(7 * 0.02 / 4.0), ref_q=ref_q, ref_height=ref_h))
    np.testing.assert_allclose(out.obs, expect.astype(np.float32), atol=1e-6)
    np.testing.assert_array_equal(out.action, 0.0)  # the stand policy outputs zeros
    np.testing.assert_allclose(out.target, action_to_joint_target(out.action))
    np.testing.assert_allclose(out.target, g1.DEFAULT_JOINT_POS)
    assert r.done(200) and not r.done(199)


# ---------------------------------------------------------------------- the loop's output (hypothesis)


class FakeLink:
    """Feeds the loop hypothesis-made LowStates; records the LowCmd records it writes."""

    domain, interface, crc_errors = 0, "fake", 0

    def __init__(self):
        self.sample = None
        self.records = []
        self.builder = LowCmdBuilder()

    def latest(self):
        return self.sample

    others = (0, 0)  # (other rt/lowcmd writers matched, their samples heard): deploy.link.Link.other_commanders

    def other_commanders(self):
        return self.others

    def send(self, cmd, mode_machine, at=None):
        raw = bytearray(self.builder.build(cmd, mode_machine).tobytes())  # (.copy() drops the padding bytes)
        self.records.append(np.frombuffer(raw, dtype=hg.LOWCMD_DTYPE).reshape(()))
        return time.monotonic()


class ScriptedRuntime(PolicyRuntime):
    """The real runtime with the ONNX inference replaced by hypothesis-made actions (the next one each
    step): observation, action -> target and the HOLD blend are the loop's real code."""

    def __init__(self, art, actions):
        self.actions = list(actions)
        self.i = 0
        super().__init__(art)

    def infer(self, obs):
        a = self.actions[self.i % len(self.actions)]
        self.i += 1
        return a


def _state_strategy():
    u = arrays(np.float64, (N,), elements=st.floats(-0.2, 1.2))
    v = arrays(np.float64, (N,), elements=st.floats(-1.5, 1.5))
    tilt = st.floats(-1.2, 1.2)
    bad = st.sampled_from([None, np.nan, np.inf, -np.inf])
    return st.tuples(u, v, tilt, bad, st.integers(0, 2 * N))


def _sample(state, tick, t):
    u, v, tilt, bad, idx = state
    q = g1.JOINT_POS_MIN + u * (g1.JOINT_POS_MAX - g1.JOINT_POS_MIN)
    dq = v * g1.VELOCITY_LIMIT
    quat = np.array([np.cos(tilt / 2), np.sin(tilt / 2), 0.0, 0.0])
    if bad is not None:
        (q if idx < N else dq)[idx % N] = bad
    rec = hg.lowstate_record(tick, q, dq, np.zeros(N), quat, np.zeros(3), np.array([0, 0, 9.81]),
                                   np.zeros(3))
    return StateSample(parse_lowstate(hg.lowstate_cdr(rec)), t, tick)


wild = st.one_of(st.floats(-1e6, 1e6), st.floats(allow_nan=True, allow_infinity=True),
                 st.sampled_from([np.nan, np.inf, -np.inf]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(states=st.lists(_state_strategy(), min_size=3, max_size=40),
       actions=st.lists(arrays(np.float64, (N,), elements=wild), min_size=1, max_size=6),
       start_state=st.sampled_from([State.POLICY, State.HOLD, State.STAND_UP]))
def test_no_lowcmd_leaving_the_loop_exceeds_limits(stand_art, estimator, states, actions, start_state):
    link = FakeLink()
    loop = ControlLoop(LoopConfig(policy_dir=str(stand_art.path)), stand_art, link,
                       runtime=ScriptedRuntime(stand_art, actions), echo=lambda s: None, estimator=estimator)
    # the loop's run() without its clock: drive _tick_inner directly, one command tick each
    from safety import WatchdogConfig

    loop.init_run_state(0.0, WatchdogConfig(1e9, 1e9, 1e9))
    link.sample = _sample(states[0], 1, 0.0)
    loop.sm.go(State.STAND_UP, 0.0, "test")
    loop._on_enter(State.PASSIVE, State.STAND_UP, 0.0, 0, link.sample.state)
    if start_state != State.STAND_UP:
        loop._go(State.HOLD, 0.0, 0, link.sample.state, "test")
    if start_state == State.POLICY:
        loop._go(State.POLICY, 0.0, 0, link.sample.state, "test")
    prev_target = None
    for k, s in enumerate(states):
        link.sample = _sample(s, k + 2, k * g1.COMMAND_DT)
        st_ = link.sample.state
        prev_pos = loop.monitor.prev_target.copy() if loop.monitor.prev_target is not None else None
        if loop._policy_step_due(k) is not None:  # as run() does: policy computed ahead of the deadline
            loop._prepare_policy(k, k * g1.COMMAND_DT)
        loop._tick_inner(k, k * g1.COMMAND_DT, k * g1.COMMAND_DT, 0.0)
        a = hg.lowcmd_arrays(link.records[-1])
        assert a.crc == crc.struct_crc(link.records[-1])
        assert a.mode_pr == 0 and a.mode_machine == g1.MODE_MACHINE_29DOF_REV1
        assert np.all(a.mode[:N] == 1) and np.all(a.mode[N:] == 0)
        assert a.is_finite()
        q, kp, kd = a.q[:N], a.kp[:N], a.kd[:N]
        if np.all(kp == 0):  # damping (kd = DAMPING_KD) or zero torque
            assert np.all(q == 0) and np.all(a.dq == 0) and np.all(a.tau == 0)
            assert np.all((kd == g1.DAMPING_KD) | (kd == 0))
            prev_target = None
            continue
        np.testing.assert_allclose(kp, g1.KP, rtol=1e-6)
        np.testing.assert_allclose(kd, g1.KD, rtol=1e-6)
        assert np.all(a.dq == 0) and np.all(a.tau == 0)
        tol = 1e-5  # float32 on the wire
        assert np.all(q >= LIM.q_min - tol) and np.all(q <= LIM.q_max + tol)
        assert np.all(q >= g1.JOINT_POS_MIN) and np.all(q <= g1.JOINT_POS_MAX)
        prev = prev_pos if prev_pos is not None else prev_target
        if prev is not None:
            assert np.all(np.abs(q - prev) <= LIM.max_step + tol)
            # torque within the motor limit wherever a joint-and-rate-admissible target allows it
            mq, mdq = st_.q, st_.dq
            r_lo, r_hi = rate_interval(prev, LIM)
            f_lo, f_hi = np.maximum(LIM.q_min, r_lo), np.minimum(LIM.q_max, r_hi)
            t_lo, t_hi = torque_interval(mq, mdq, LIM.kp, LIM.kd, LIM.torque)
            ok = np.maximum(f_lo, t_lo) <= np.minimum(f_hi, t_hi)
            tau = implied_torque(q, mq, mdq, LIM.kp, LIM.kd)
            assert np.all(np.abs(tau[ok]) <= LIM.torque[ok] + 1e-3 * (1 + LIM.kp[ok]))
        prev_target = q.copy()
    # any non-finite policy output or state that reached the safety gate latched damping
    assert loop.monitor.latched == (loop.sm.state == State.DAMPING)


OK_STATE = (np.full(N, 0.5), np.zeros(N), 0.0, None, 0)


def _loop_in_hold(stand_art, estimator, link, runtime=None) -> ControlLoop:
    """A ControlLoop on `link` driven tick by tick (watchdogs off), in HOLD after one position command."""
    from safety import WatchdogConfig

    loop = ControlLoop(LoopConfig(policy_dir=str(stand_art.path)), stand_art, link, runtime=runtime,
                       echo=lambda s: None, estimator=estimator)
    loop.init_run_state(0.0, WatchdogConfig(1e9, 1e9, 1e9))
    link.sample = _sample(OK_STATE, 1, 0.0)
    loop.sm.go(State.HOLD, 0.0, "test")
    loop._hold_from = g1.DEFAULT_JOINT_POS.copy()
    loop._tick(0, 0.0, 0.0)
    assert hg.lowcmd_arrays(link.records[-1]).kp[:N].tolist() == g1.KP.tolist()  # HOLD: position
    return loop


def test_exception_in_the_loop_sends_damping_and_latches(stand_art, estimator):
    class Boom(PolicyRuntime):
        def infer(self, obs):
            raise RuntimeError("onnxruntime went away")

    link = FakeLink()
    loop = _loop_in_hold(stand_art, estimator, link, runtime=Boom(stand_art))
    loop.sm.go(State.POLICY, 0.002, "test")
    loop._on_enter(State.HOLD, State.POLICY, 0.002, 1, link.sample.state)
    for k in range(1, 6):
        link.sample = _sample(OK_STATE, k + 1, k * 0.002)
        loop._tick(k, k * 0.002, 0.0)  # the runtime raises on the first policy step
        a = hg.lowcmd_arrays(link.records[-1])
        assert np.all(a.kp[:N] == 0) and np.all(a.kd[:N] == g1.DAMPING_KD)
    assert loop.sm.state == State.DAMPING
    assert [e["kind"] for e in loop.monitor.events] == ["exception"]
    assert "onnxruntime went away" in loop.monitor.events[0]["detail"]


def test_the_run_record_is_fixed_and_the_summary_reads_only_it(stand_art, estimator, tmp_path):
    """ControlLoop.record(): an immutable RunRecord of what the run did; deploy.summary.write_results turns it into
    summary.json without the loop. No ground truth (the robot): `fell` is None, the tilt trip its own key. on_hold:
    the hook the sim's band release uses, called on every HOLD tick with the time in HOLD."""
    import dataclasses
    import json

    from deploy.summary import write_results
    from safety import WatchdogConfig

    link, held = FakeLink(), []
    loop = ControlLoop(LoopConfig(policy_dir=str(stand_art.path), run_root=str(tmp_path), plot=False), stand_art, link,
                       on_hold=lambda t, s, note: held.append((t, s)), echo=lambda s: None, estimator=estimator)
    loop.init_run_state(0.0, WatchdogConfig(1e9, 1e9, 1e9))
    loop.sm.go(State.HOLD, 0.0, "test")
    loop._hold_from = g1.DEFAULT_JOINT_POS.copy()
    for k in range(3):
        link.sample = _sample(OK_STATE, k + 1, k * 0.002)
        loop._tick(k, k * 0.002, 0.0)
    assert held == [(0.0, 0.0), (0.002, 0.002), (0.004, 0.004)]
    loop.request_damping("sigint")
    link.sample = _sample(OK_STATE, 4, 0.006)
    loop._tick(3, 0.006, 0.0)
    rec = loop.record("DAMPING", 0.008)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.final_state = "HOLD"
    assert rec.n_ticks == 4 and rec.states_visited == ("PASSIVE", "HOLD", "DAMPING")
    assert [e["kind"] for e in rec.safety_events] == ["sigint"] and not rec.tilt_tripped
    summary = write_results(rec)
    assert json.loads((rec.run_dir / "summary.json").read_text()) == json.loads(json.dumps(summary))
    assert summary["fell"] is None and summary["tilt_tripped"] is False and summary["ticks"] == 4
    assert summary["transitions"][-1]["to"] == "DAMPING" and summary["motion"] == stand_art.spec.motion.name


def test_missed_policy_steps_counted_per_motion():
    """summary.json's policy_steps_missed: the steps a stall skipped whole, counted within each motion (a second
    motion restarts at step 0); step 0 itself is never prepared late, but a lost one counts too."""
    from deploy.summary import missed_steps

    assert missed_steps(np.array([], dtype=int)) == 0
    assert missed_steps(np.arange(211)) == 0
    assert missed_steps(np.delete(np.arange(211), [57])) == 1
    assert missed_steps(np.array([0, 1, 3, 4, 6])) == 2
    assert missed_steps(np.array([0, 2, 0, 1, 2, 5])) == 1 + 2
    assert missed_steps(np.array([1, 2])) == 1


def test_another_lowcmd_writer_appearing_damps_on_the_next_tick(stand_art, estimator):
    """A second rt/lowcmd publisher matched during a run (deploy.link.Link.other_commanders): the next command
    is damping, latched, with the trip naming it; samples heard count too, and only those after the run began."""
    for others in ((1, 0), (0, 3)):
        link = FakeLink()
        link.others = (0, 5)  # heard before the run (pre-flight passed: they are the baseline)
        loop = _loop_in_hold(stand_art, estimator, link)
        link.others = (others[0], 5 + others[1])
        for k in (1, 2):
            link.sample = _sample(OK_STATE, k + 1, k * 0.002)
            loop._tick(k, k * 0.002, 0.0)
            a = hg.lowcmd_arrays(link.records[-1])
            assert np.all(a.kp[:N] == 0) and np.all(a.kd[:N] == g1.DAMPING_KD)
        assert loop.sm.state == State.DAMPING
        assert [e["kind"] for e in loop.monitor.events] == ["other_commander"]
        assert f"({others[0]} matched writers, {others[1]} commands heard)" in loop.monitor.events[0]["detail"]


def test_max_run_s_ends_a_run_in_damping_too(stand_art, estimator):
    """Without --auto a DAMPING run streams damping until stopped (exit_on_damping False), but max_run_s is a
    hard stop: a 1 h soak whose loop tripped at 50 min must still end (it did not: measured 63.6 min)."""
    link = FakeLink()
    loop = ControlLoop(LoopConfig(policy_dir=str(stand_art.path), exit_on_damping=False, max_run_s=10.0), stand_art,
                       link, echo=lambda s: None, estimator=estimator)
    from safety import WatchdogConfig

    loop.init_run_state(0.0, WatchdogConfig(1e9, 1e9, 1e9))
    loop.sm.go(State.DAMPING, 1.0, "test")
    assert loop._should_end(5.0) is None  # damping, before the limit: keep streaming damping
    assert loop._should_end(10.5) == "max_run_s 10 s reached"


def test_wait_until_sleeps_then_spins_to_the_deadline():
    """realtime.wait_until: one sleep to spin_s before the deadline, then polling the clock until it is reached;
    a deadline already within spin_s (or passed) is never slept for. A fake clock advancing 0.1 ms per read."""
    from deploy import realtime

    def run(deadline, now=0.0):
        t, slept = [now], []

        def clock():
            t[0] += 1e-4
            return t[0]

        def sleep(s):
            slept.append(s)
            t[0] += s
        end = realtime.wait_until(deadline, 1e-3, clock=clock, sleep=sleep)
        return end, slept

    end, slept = run(0.005)
    assert slept == [pytest.approx(0.005 - 1e-3 - 1e-4)]  # from the first reading (0.1 ms) to 1 ms before
    assert 0.005 <= end < 0.005 + 1e-4 + 1e-12
    end, slept = run(0.0008)
    assert slept == [] and 0.0008 <= end < 0.0009 + 1e-12
    end, slept = run(0.001, now=0.002)
    assert slept == [] and end == pytest.approx(0.0021)


def test_a_tracking_dry_run_falls_by_its_reference_in_policy_only():
    """deploy.summary.ground_truth_metrics: the bridge's ground truth in POLICY is bounded by the tracking
    reference's pelvis at the frame the loop was on (reference_frames: LowState tick -> policy step, hand values);
    outside POLICY the plain criterion holds. A pelvis bent 60 deg under a reference bent 58 deg is tracking, not
    a fall; the same 60 deg in HOLD is one."""
    import math

    from deploy.record import PolicyFacts
    from deploy.state_machine import state_index
    from deploy.summary import ground_truth_metrics, reference_frames
    from plant.robot import GroundTruth

    n_hold, n_pol = 5, 30
    states = [State.HOLD] * n_hold + [State.POLICY] * n_pol + [State.HOLD] * 5
    ticks = {"t": np.arange(len(states)) * 0.002, "tick": 1000 + 2 * np.arange(len(states)),
             "state": np.array([state_index(s) for s in states]), "new": np.ones(len(states)),
             "est_vel": np.zeros((len(states), 3)), "est_height": np.full(len(states), 0.75)}
    frames = reference_frames(ticks)
    assert frames[1000 + 2 * n_hold] == 0 and frames[1000 + 2 * (n_hold + 10)] == 1  # 20 ms after POLICY's entry
    assert 1000 not in frames and max(frames.values()) == 2

    def gt(i, deg):
        a = math.radians(deg)
        return GroundTruth(tick=1000 + 2 * i, sim_time=0.0, clock=0.0, pos=np.array([0.0, 0.0, 0.75]),
                           quat=np.array([math.cos(a / 2), 0.0, math.sin(a / 2), 0.0]), lin_vel_world=np.zeros(3),
                           lin_vel_body=np.zeros(3), ang_vel_world=np.zeros(3), ang_vel_body=np.zeros(3),
                           foot_contact=np.array([True, True]), foot_height=np.zeros(2), band=False, resets=0)

    facts = PolicyFacts("box_lift", "p", "native", "motion", "", None, None, 3,
                        reference_tilt=np.radians([58.0, 58.0, 58.0]), reference_height=np.full(3, 0.7))
    in_policy = [gt(i, 60.0 if i == n_hold + 12 else 0.0) for i in range(len(states))]
    assert ground_truth_metrics(in_policy, ticks, facts)["fell"] is False
    assert ground_truth_metrics(in_policy, ticks)["fell"] is True  # a motion's run: 60 deg is a fall
    in_hold = [gt(i, 60.0 if i == 2 else 0.0) for i in range(len(states))]
    assert ground_truth_metrics(in_hold, ticks, facts)["fell"] is True
    beyond = [gt(i, 79.0 if i == n_hold + 12 else 0.0) for i in range(len(states))]
    assert ground_truth_metrics(beyond, ticks, facts)["fell"] is True  # 21 deg past the reference
