"""`make eval` and the deploy loop run the same policy runtime (policies.runtime.PolicyRuntime).

A copy of the committed jump artifact is written with a different action_scale through the
artifact writer. For the same state, eval's episode code and deploy's ControlLoop policy path give
exactly the targets PolicyRuntime gives, and switching the artifact moves them by exactly the
hand-computed amount, (scale_b - scale_a) * action, with the action itself unchanged.
"""
import dataclasses
import time

import numpy as np
import onnx
import pytest

from comm.hg import lowstate_cdr, lowstate_record
from deploy.link import StateSample, parse_lowstate
from deploy.loop import ControlLoop, LoopConfig
from deploy.state_machine import State
from estimation.estimator import Estimator
from eval.config import DRConfig, EvalConfig
from eval.episode import run_episode
from eval.sim import EvalSim, reference_key_positions
from policies import artifact as A
from policies.runtime import PolicyRuntime
from safety import WatchdogConfig

SCALE_B = 0.4  # the committed jump uses 0.25


@pytest.fixture(scope="module")
def arts(tmp_path_factory):
    a = A.load_artifact(A.artifact_dir("hop"))
    spec_b = dataclasses.replace(a.spec, action_scale=SCALE_B, onnx_sha256="")
    out = A.write_artifact(tmp_path_factory.mktemp("scaled") / "hop", onnx.load_from_string(a.onnx_bytes),
                           spec_b, a.ref_q, a.ref_height)
    b = A.load_artifact(out)
    assert a.spec.action_scale != SCALE_B and b.spec.action_scale == SCALE_B
    return a, b


@pytest.fixture(scope="module")
def sim():
    return EvalSim()


def _home_state(sim):
    sim.reset()
    return sim.state()  # q, dq, gyro, quat, base_lin_vel, base_height


def _check_scaling(out_a, out_b, art_a, art_b):
    """Same observation and action; targets default + scale * action, apart by (s_b - s_a) * action."""
    np.testing.assert_array_equal(out_a.obs, out_b.obs)
    np.testing.assert_array_equal(out_a.action, out_b.action)
    assert np.abs(out_a.action).max() > 1e-3  # a trained policy: the scale matters
    default = np.asarray(art_a.spec.default_joint_pos)
    np.testing.assert_allclose(out_a.target, default + art_a.spec.action_scale * out_a.action, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out_b.target - out_a.target, (SCALE_B - art_a.spec.action_scale) * out_a.action,
                               rtol=0, atol=1e-12)


def test_runtime_targets_move_by_the_scale_difference(arts, sim):
    a, b = arts
    state = _home_state(sim)
    _check_scaling(PolicyRuntime(a).step(0, *state), PolicyRuntime(b).step(0, *state), a, b)


def _eval_policy_steps(sim, art, n_steps, true_state=True):
    """eval's episode code, no randomisation, n_steps policy steps and no HOLD: its logged actions/targets."""
    cfg = EvalConfig(episodes=1, duration_s=n_steps * art.spec.control_dt, hold_s=0.0, video=False,
                     dr=DRConfig(enabled=False), true_state=true_state)
    ref_key = reference_key_positions(sim, np.asarray(art.ref_q, float),
                                      np.stack([np.zeros(len(art.ref_height)), np.zeros(len(art.ref_height)),
                                                np.asarray(art.ref_height, float)], 1))
    r = run_episode(sim, PolicyRuntime(art), cfg, 0, ref_key, ())
    assert not r["fell"] and r["log"]["target"].shape == (n_steps, 29)
    return r["log"]["action"], r["log"]["target"]


def test_eval_episode_runs_the_runtime(arts, sim):
    a, b = arts
    acts_a, tgts_a = _eval_policy_steps(sim, a, 5)
    acts_b, tgts_b = _eval_policy_steps(sim, b, 5)
    # step 0 observes the home keyframe: exactly the runtime's output for that state
    state = _home_state(sim)
    out_a, out_b = PolicyRuntime(a).step(0, *state), PolicyRuntime(b).step(0, *state)
    np.testing.assert_array_equal(tgts_a[0], out_a.target)
    np.testing.assert_array_equal(tgts_b[0], out_b.target)
    np.testing.assert_array_equal(acts_b[0], acts_a[0])
    _check_scaling(out_a, out_b, a, b)
    # every step: the target is the runtime's default + scale * action
    for art, acts, tgts in ((a, acts_a, tgts_a), (b, acts_b, tgts_b)):
        np.testing.assert_allclose(tgts, np.asarray(art.spec.default_joint_pos) + art.spec.action_scale * acts,
                                   rtol=0, atol=1e-12)


def test_eval_episode_runs_the_deploy_tick(arts, sim):
    """By default eval's policy step 0 is the deploy loop's PolicyTick on the home keyframe's sensors: the estimator
    reset at rest from the encoders and IMU, the runtime on its estimate (not on the true state)."""
    from control.tick import PolicyTick
    from estimation.estimator import Estimator
    from safety import SafetyMonitor

    a, _ = arts
    acts, tgts = _eval_policy_steps(sim, a, 3, true_state=False)
    sim.reset()
    q, dq, quat, gyro, acc, tau = sim.sensors()
    tick = PolicyTick(Estimator(model=sim.m), PolicyRuntime(a), SafetyMonitor())
    est = tick.start(q, quat, 0.0)
    out = tick.act(0, q, dq, quat)
    np.testing.assert_array_equal(tgts[0], out.target)
    true = PolicyRuntime(a).step(0, *_home_state(sim))
    assert np.abs(out.obs - true.obs).max() > 0  # the estimate is not the true state
    assert est.base_lin_vel == pytest.approx(np.zeros(3))  # reset at rest


class RecordingLink:
    """The loop's view of the DDS link without DDS: the latest LowState, commands recorded."""

    domain, interface, crc_errors = 0, "test", 0

    def __init__(self, sample):
        self.sample, self.sent = sample, []

    def latest(self):
        return self.sample

    def other_commanders(self):
        return 0, 0

    def send(self, cmd, mode_machine, at=None):
        self.sent.append(cmd)
        return time.monotonic()


def _deploy_first_policy_step(art, state):
    """deploy's ControlLoop in POLICY for one policy tick on a LowState made of `state`: its logged
    policy output and the estimate that step used."""
    q, dq, gyro, quat, _, _ = state
    rec = lowstate_record(1, q, dq, np.zeros(29), quat, gyro, np.array([0.0, 0.0, 9.81]), np.zeros(3))
    link = RecordingLink(StateSample(parse_lowstate(lowstate_cdr(rec)), 0.0, 1))
    loop = ControlLoop(LoopConfig(policy_dir=str(art.path)), art, link, echo=lambda s: None, estimator=Estimator())
    loop.init_run_state(0.0, WatchdogConfig(1e9, 1e9, 1e9))
    st = link.sample.state
    loop.sm.go(State.STAND_UP, 0.0, "test")
    loop._on_enter(State.PASSIVE, State.STAND_UP, 0.0, 0, st)
    loop._go(State.HOLD, 0.0, 0, st, "test")
    loop._go(State.POLICY, 0.0, 0, st, "test")
    assert loop._policy_step_due(0) == 0
    loop._prepare_policy(0, 0.0)  # as run() does: the policy step ahead of the deadline
    loop._tick_inner(0, 0.0, 0.0, 0.0)
    assert loop.sm.state == State.POLICY and not loop.monitor.latched and loop.pol.n == 1
    pol = loop.pol.arrays()
    return pol, loop._est, st


def test_deploy_loop_runs_the_runtime(arts, sim):
    a, b = arts
    state = _home_state(sim)
    outs = []
    for art in (a, b):
        pol, est, st = _deploy_first_policy_step(art, state)
        out = PolicyRuntime(art).step(0, st.q, st.dq, est.gyro, st.quat, est.base_lin_vel, est.base_height)
        np.testing.assert_array_equal(pol["obs"][0], out.obs)
        np.testing.assert_array_equal(pol["action"][0], out.action)
        np.testing.assert_array_equal(pol["target"][0], out.target)
        outs.append(out)
    _check_scaling(outs[0], outs[1], a, b)
