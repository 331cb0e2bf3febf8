"""The calibration loop: one calibration file feeds deploy and eval.

- deploy applies joint offsets (hand-computed case: a known offset on one joint; estimator input,
  observation joint_pos and the safety gate all use q - offset, the LowCmd carries target + offset)
- pre-flight compares the run's calibration with the artifact's (another robot refused unless allowed,
  an older calibration of the same robot warned with both dates) and refuses bad files before any LowCmd
- eval builds the calibrated bridge model (and a hidden-perturbation one), delays targets / observations
"""
import time

import numpy as np
import pytest
import yaml

from calibration import store
from comm import hg
from comm.hg import lowstate_cdr, lowstate_record
from estimation.estimator import Estimator
from deploy.link import LowCmdBuilder, StateSample, parse_lowstate
from deploy.loop import ControlLoop, LoopConfig
from deploy.preflight import PreflightError, check_calibration
from deploy.state_machine import State
from policies import artifact as A
from policies.runtime import PolicyRuntime
from robots import calibration as C
from robots import g1
from robots.model import BridgeModelConfig, build_bridge_model, motor_dof_adr
from safety import Limits, WatchdogConfig
from safety.limits import check_command

N = g1.NUM_MOTORS
J = g1.JOINT_NAMES.index("left_knee_joint")
OFF = 0.05  # rad: the knee encoder reads 0.05 rad more than the joint's true angle


class RecordingLink:
    """The loop's view of the DDS link (transport only): a fixed LowState, the LowCmd records written."""

    domain, interface, crc_errors = 0, "test", 0

    def __init__(self, sample):
        self.sample, self.records, self.builder = sample, [], LowCmdBuilder()

    def latest(self):
        return self.sample

    def other_commanders(self):
        return 0, 0

    def send(self, cmd, mode_machine, at=None):
        raw = bytearray(self.builder.build(cmd, mode_machine).tobytes())
        self.records.append(hg.lowcmd_arrays(np.frombuffer(raw, dtype=hg.LOWCMD_DTYPE).reshape(())))
        return time.monotonic()


def _joint_pos(art):
    """The observation slice of the joint_pos term (sizes x history of the terms before it)."""
    start = 0
    for t in art.spec.observation:
        if t.name == "joint_pos":
            assert t.scale == 1.0 and t.history == 1
            return slice(start, start + t.size)
        start += t.size * t.history
    raise AssertionError("no joint_pos term")


def _one_policy_tick(art, q_raw, offsets):
    rec = lowstate_record(1, q_raw, np.zeros(N), np.zeros(N), np.array([1.0, 0, 0, 0]), np.zeros(3),
                          np.array([0.0, 0.0, 9.81]), np.zeros(3))
    link = RecordingLink(StateSample(parse_lowstate(lowstate_cdr(rec)), 0.0, 1))
    loop = ControlLoop(LoopConfig(policy_dir=str(art.path), joint_offsets=offsets), art, link, echo=lambda s: None,
                       estimator=Estimator())
    loop.init_run_state(0.0, WatchdogConfig(1e9, 1e9, 1e9))
    st = loop.offsets.state(link.sample).state
    loop.sm.go(State.STAND_UP, 0.0, "test")
    loop._on_enter(State.PASSIVE, State.STAND_UP, 0.0, 0, st)
    stand_prev = loop.monitor.prev_target.copy()  # the safety gate's start: the measured pose
    loop._go(State.HOLD, 0.0, 0, st, "test")
    loop._go(State.POLICY, 0.0, 0, st, "test")
    loop._prepare_policy(0, 0.0)
    loop._tick_inner(0, 0.0, 0.0, 0.0)
    assert loop.sm.state == State.POLICY and not loop.monitor.latched
    return loop, link, stand_prev


def test_joint_offsets_hand_computed_case():
    art = A.load_artifact(A.POLICY_ROOT / "stand")
    default = np.asarray(art.spec.default_joint_pos, float)
    off = np.zeros(N)
    off[J] = OFF
    q_raw = default.copy()
    q_raw[J] += OFF  # the robot stands exactly in the default pose; its knee encoder reads +0.05
    q_true = default  # = q_raw - off, by hand
    loop, link, stand_prev = _one_policy_tick(art, q_raw, tuple(off))
    # safety: the gate started from the corrected pose (reset_target(q) at STAND_UP)
    np.testing.assert_allclose(stand_prev, np.clip(q_true, Limits.default().q_min, Limits.default().q_max), atol=1e-6)
    # estimator input: the loop's estimate equals a fresh estimator's on q - offset, not on the raw q
    est_true = Estimator().reset(q_true, np.array([1.0, 0, 0, 0]), 1e-3)
    est_raw = Estimator().reset(q_raw, np.array([1.0, 0, 0, 0]), 1e-3)
    assert loop._est.base_height == pytest.approx(est_true.base_height, abs=1e-6)
    assert abs(est_raw.base_height - est_true.base_height) > 1e-3  # the knee matters: the check can fail
    # observation: joint_pos of the knee is q - offset - default = 0 (by hand), float32 on the wire
    obs = loop.pol.arrays()["obs"][0]
    assert obs[_joint_pos(art)][J] == pytest.approx(0.0, abs=1e-6)
    # the command: the runtime's target (joint frame) through the gate, sent as target + offset
    out = PolicyRuntime(art).step(0, q_true, np.zeros(N), np.zeros(3), np.array([1.0, 0, 0, 0]),
                                  loop._est.base_lin_vel, loop._est.base_height)
    want = check_command(q_true, np.zeros(N), np.array([1.0, 0, 0, 0]), out.target, stand_prev, Limits.default())
    sent = link.records[-1].q[:N]
    np.testing.assert_allclose(sent - off, want.q, atol=1e-6)
    assert sent[J] == pytest.approx(want.q[J] + OFF, abs=1e-6)
    others = np.arange(N) != J
    np.testing.assert_allclose(sent[others], want.q[others], atol=1e-6)


def test_without_offsets_the_raw_q_is_used():
    """The same LowState without the calibration: joint_pos shows the 0.05 rad (the test above can fail)."""
    art = A.load_artifact(A.POLICY_ROOT / "stand")
    q_raw = np.asarray(art.spec.default_joint_pos, float).copy()
    q_raw[J] += OFF
    loop, link, _ = _one_policy_tick(art, q_raw, ())
    assert loop.pol.arrays()["obs"][0][_joint_pos(art)][J] == pytest.approx(OFF, abs=1e-6)
    assert not loop.offsets.active


def test_damping_commands_are_not_shifted():
    from deploy.offsets import JointOffsets
    from safety.limits import damping_command

    off = np.zeros(N)
    off[J] = OFF
    d = JointOffsets(off).command(damping_command())
    assert np.all(d.q == 0) and np.all(d.kp == 0)
    with pytest.raises(ValueError, match="29 finite"):
        JointOffsets([0.0] * 5)


# ----------------------------------------------------------------------------- pre-flight


def _calibration(tmp_path, name, robot_id="g1-07", date="2026-11-30T10:00:00+00:00", **edit):
    c = {"robot_id": robot_id, "imu": {"gyro_bias": [0.01, 0.0, 0.0], "accel_bias": [0.0, 0.0, 0.0]},
         "latency": {"action_delay_s": 0.004}, "joints": {"offsets": [0.0] * N},
         "domain_randomization_centre": {"armature_scale": [1.2] * N, "damping": [0.1] * N,
                                         "frictionloss_scale": [0.8] * N, "kp_scale": [0.98] * N}}
    path = store.write(c, tmp_path / f"{name}.yaml")
    body = yaml.safe_load(path.read_text())
    body["date"] = date
    for k, v in edit.items():
        if v is None:
            body.pop(k, None)
        else:
            body[k] = v
    path.write_text(yaml.safe_dump(body))
    return path


def _artifact_trained_with(tmp_path, calib_path):
    """The stand artifact re-exported with provenance.calibration = {robot_id, date, sha256} (what the
    lead's exporter writes)."""
    import dataclasses

    import onnx

    a = A.load_artifact(A.POLICY_ROOT / "stand")
    prov = {**a.spec.provenance, "calibration": C.provenance(C.load(calib_path))}
    spec = dataclasses.replace(a.spec, provenance=prov, onnx_sha256="")
    return A.load_artifact(A.write_artifact(tmp_path / "art", onnx.load_from_string(a.onnx_bytes), spec,
                                            a.ref_q, a.ref_height))


def test_preflight_compares_calibrations(tmp_path):
    trained = _calibration(tmp_path, "trained")
    art = _artifact_trained_with(tmp_path, trained)
    calib, warn = check_calibration(art, trained)
    assert calib["robot_id"] == "g1-07" and warn == []  # the same file: silent
    other = _calibration(tmp_path, "other", robot_id="g1-12")
    with pytest.raises(PreflightError, match="robot 'g1-07'.*robot 'g1-12'.*--allow-other-robot-calibration"):
        check_calibration(art, other)
    calib, warn = check_calibration(art, other, allow_other_robot=True)
    assert len(warn) == 1 and "allowed" in warn[0]
    older = _calibration(tmp_path, "older", date="2026-10-01T09:00:00+00:00")
    _, warn = check_calibration(art, older)
    assert len(warn) == 1 and "OLDER" in warn[0]
    assert "2026-10-01T09:00:00+00:00" in warn[0] and "2026-11-30T10:00:00+00:00" in warn[0]  # both dates
    newer = _calibration(tmp_path, "newer", date="2026-12-05T09:00:00+00:00")
    _, warn = check_calibration(art, newer)
    assert len(warn) == 1 and "differs" in warn[0] and "2026-12-05" in warn[0]
    _, warn = check_calibration(art, None)  # trained with one, none given: warned, not refused
    assert len(warn) == 1 and "none given" in warn[0]
    nominal = A.load_artifact(A.POLICY_ROOT / "stand")  # none on either side: as before
    assert check_calibration(nominal, None) == (None, [])
    assert check_calibration(nominal, other)[1] == []


@pytest.mark.parametrize("edit, match", [
    ("notyaml", "not valid YAML"),
    ({"robot": "h1_2"}, "not g1_29dof_rev1"),
    ({"imu": {"gyro_bias": [float("nan"), 0.0, 0.0]}}, "imu.gyro_bias"),
    ({"joints": {"offsets": [0.0] * 3 + [0.7] + [0.0] * 25}}, r"joints.offsets\[3\] = \[0.7\] outside"),
    ({"latency": {"action_delay_s": 0.5}}, "latency.action_delay_s"),
    ({"robot_id": None}, "lacks robot_id"),
    ({"date": None}, "lacks date"),
])
def test_deploy_refuses_bad_calibration_before_any_lowcmd(tmp_path, capsys, edit, match):
    from deploy import cli as deploy_cli

    path = _calibration(tmp_path, "bad")
    if edit == "notyaml":
        path.write_text("imu: [unclosed\n")
    else:
        body = yaml.safe_load(path.read_text())
        for k, v in edit.items():
            if v is None:
                body.pop(k)
            else:
                body[k] = v
        path.write_text(yaml.safe_dump(body))
    # --no-bridge and no bridge running: a refusal comes before DDS is even opened (nothing is commanded)
    assert deploy_cli.main(["--robot", "sim", "--no-bridge", "--calibration", str(path)]) == deploy_cli.EXIT_PREFLIGHT
    err = capsys.readouterr().err
    assert "calibration rejected" in err
    import re

    assert re.search(match, err), err


def test_deploy_cli_refuses_another_robots_calibration(tmp_path, capsys):
    from deploy import cli as deploy_cli

    art = _artifact_trained_with(tmp_path, _calibration(tmp_path, "trained"))
    other = _calibration(tmp_path, "other", robot_id="g1-12")
    assert deploy_cli.main(["--robot", "sim", "--no-bridge", "--policy", str(art.path), "--calibration",
                            str(other)]) == deploy_cli.EXIT_PREFLIGHT
    assert "--allow-other-robot-calibration" in capsys.readouterr().err


# ----------------------------------------------------------------------------- eval


def test_eval_bridge_from_calibration_is_the_calibrated_model(tmp_path):
    from eval.bridge_setup import from_calibration
    from eval.sim import EvalSim

    path = _calibration(tmp_path, "cal")
    sim = EvalSim(from_calibration(str(path)))
    want = build_bridge_model(BridgeModelConfig(armature_scale=1.2, extra_joint_damping=0.1, frictionloss_scale=0.8))
    d = motor_dof_adr(want)
    for f in ("dof_armature", "dof_damping", "dof_frictionloss"):
        np.testing.assert_allclose(getattr(sim.m, f)[d], getattr(want, f)[d], atol=1e-12, err_msg=f)
    from eval.config import DRConfig

    dr = sim.randomise(np.random.default_rng(0), DRConfig(enabled=False))
    np.testing.assert_allclose(dr["kp_scale"], 0.98)  # kp centred on the calibration's kp_scale
    assert sim._cmd_delay == pytest.approx(0.004)  # the calibration's action delay
    body = yaml.safe_load(path.read_text())
    body.pop("latency")
    path.write_text(yaml.safe_dump(body))
    from eval.config import EvalError

    with pytest.raises(EvalError, match="lacks latency.action_delay_s"):
        from_calibration(str(path))


def test_eval_delays_targets_and_observations_by_hand():
    from eval.bridge_setup import parse_perturbation
    from eval.sim import EvalSim

    sim = EvalSim(parse_perturbation("cmd_latency_ms=6,state_latency_ms=4,armature_scale=1.5"))
    sim.reset()
    a, b = np.full(N, 0.1), np.full(N, 0.2)
    # a issued at 0, b at 0.020 s: with 6 ms the drives use a until 0.026 s, then b (physics at 1 ms)
    used = []
    for k in range(40):
        sim.drive(a if k < 20 else b, g1.KP, g1.KD, k * 1e-3)
        used.append(sim.plant.setpoint.q[0])
    sim.reset()
    assert used[:26] == [0.1] * 26 and used[26:] == [0.2] * 14
    q0 = sim.state()[0].copy()
    for _ in range(4):
        sim.step()
    assert np.array_equal(sim.state()[0], q0)  # 4 steps later the policy still sees the reset state
    sim.step()
    assert not np.array_equal(sim.state()[0], q0)
    nominal = build_bridge_model()
    d = motor_dof_adr(nominal)
    np.testing.assert_allclose(sim.m.dof_armature[d], 1.5 * nominal.dof_armature[d])


@pytest.mark.parametrize("text, match", [
    ("armature=1.5", "KEY one of"), ("armature_scale=x", "not a number"), ("armature_scale=-1", ">= 0"),
    ("cmd_latency_ms=500", "100 ms"), ("", "empty"), ("contact=soft", "use one of"),
    ("kp_scale=1,kp_scale=2", "twice"),
])
def test_eval_refuses_bad_perturbations(text, match):
    from eval.bridge_setup import parse_perturbation
    from eval.config import EvalError

    with pytest.raises(EvalError, match=match):
        parse_perturbation(text)


def test_eval_cli_refuses_calibration_and_perturbation_together(capsys):
    from eval import cli

    assert cli.main(["--motion", "hop", "--calibration", "calibration/sim.yaml",
                     "--bridge-perturbation", "armature_scale=1.5"]) == 2
    assert "not both" in capsys.readouterr().err
