"""Bad input to `python -m deploy.cli`: a clear message, exit code 2, and no command sent, proven by
a DDS subscriber on rt/lowcmd in this process that hears nothing.

The first test runs with nothing on the domain (no LowState at all); the module's bridge starts
with the first test that asks for it."""
import re
import time

import pytest
import yaml

from deploy.cli import BRIDGE_PRIORITY
from deploy.link import LowCmdObserver
from deploy.realtime import boost_process
from deploy.preflight import PreflightError, check_mode_machine
from comm.sim_process import launch_bridge_process
from policies.stand import write_stand_artifact
from tests.test_deploy_support import run_cli

EXIT_PREFLIGHT = 2


@pytest.fixture(scope="module")
def observer(dds_domain):
    o = LowCmdObserver(dds_domain)
    yield o
    o.close()


def assert_refused(r, observer, *phrases, since):
    time.sleep(0.3)  # anything sent would have arrived by now
    assert r.returncode == EXIT_PREFLIGHT, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    msg = r.stderr
    assert msg.startswith("deploy: error: "), msg
    for p in phrases:
        assert p in msg, f"{p!r} not in:\n{msg}"
    assert "Traceback" not in msg
    assert observer.first("position", since) is None and observer.first("zero_torque", since) is None
    assert observer.first("damping", since) is None
    assert observer.count == 0, "a LowCmd was published"
    return msg


@pytest.mark.dds
@pytest.mark.realtime
def test_no_lowstate_clear_message_and_no_command(dds_domain, observer, tmp_path):
    t0 = time.monotonic()
    r = run_cli("--robot", "sim", "--no-bridge", "--domain", dds_domain, "--state-timeout", "1.5",
                "--run-root", tmp_path)
    assert_refused(r, observer, "no LowState on rt/lowstate within 1.5 s", f"DDS domain {dds_domain}",
                   "interface lo", "sudo ip link set lo multicast on", "make sim", since=t0)
    assert not list(tmp_path.iterdir())  # no run directory: the loop never started


# ---------------------------------------------------------------------- with a bridge on the domain


@pytest.fixture(scope="module")
def bridge(dds_domain):
    with launch_bridge_process(["--gt-decimation", "5"], domain=dds_domain) as b:
        boost_process(b.proc.pid, BRIDGE_PRIORITY)
        yield b


def _edit_yaml(d, fn):
    p = d / "policy.yaml"
    y = yaml.safe_load(p.read_text())
    fn(y)
    p.write_text(yaml.safe_dump(y, sort_keys=False))


def _swap(y):
    y["joint_names"][3], y["joint_names"][9] = y["joint_names"][9], y["joint_names"][3]


def _kp(y):
    y["kp"][4] = 5000.0  # beyond robots/gains.py's bound for the 50 Nm ankle (50 / 0.05 rad = 1000 Nm/rad)


BROKEN = {
    "missing_onnx": (lambda d: (d / "policy.onnx").unlink(), ["policy.onnx is missing"]),
    "corrupt_onnx": (lambda d: (d / "policy.onnx").write_bytes((d / "policy.onnx").read_bytes()[:-40] + b"\0" * 40),
                     ["sha256 does not match"]),
    "not_onnx": (lambda d: (d / "policy.onnx").write_bytes(b"not a model"), ["sha256 does not match"]),
    "yaml_joint_count": (lambda d: _edit_yaml(d, lambda y: y["joint_names"].pop()), ["28 joints, the G1 has 29"]),
    "yaml_joint_order": (lambda d: _edit_yaml(d, _swap), ["joint order differs from the motor order at indices [3, 9]"]),
    "yaml_gains": (lambda d: _edit_yaml(d, _kp), ["kp of left_ankle_pitch_joint is 5000, outside 0 < kp <= 1000",
                                                   "robots/gains.py"]),
    "yaml_robot": (lambda d: _edit_yaml(d, lambda y: y.__setitem__("robot", "h1")), ["robot is 'h1'"]),
    "yaml_garbage": (lambda d: (d / "policy.yaml").write_text("{not: [valid"), ["is not valid YAML"]),
}


@pytest.mark.dds
@pytest.mark.realtime
@pytest.mark.parametrize("case", list(BROKEN))
def test_bad_artifact_refused_before_any_command(bridge, dds_domain, observer, tmp_path, case):
    d = write_stand_artifact(tmp_path / "art")
    breaker, phrases = BROKEN[case]
    breaker(d)
    t0 = time.monotonic()
    r = run_cli("--robot", "sim", "--no-bridge", "--domain", dds_domain, "--policy-dir", d, "--run-root", tmp_path)
    assert_refused(r, observer, "policy artifact rejected", *phrases, since=t0)


@pytest.mark.dds
@pytest.mark.realtime
def test_wrong_interface_refused(bridge, dds_domain, observer, tmp_path):
    t0 = time.monotonic()
    r = run_cli("--robot", "sim", "--no-bridge", "--domain", dds_domain, "--net-if", "nosuchif0",
                "--run-root", tmp_path)
    assert_refused(r, observer, "network interface 'nosuchif0' does not exist; available:", "lo", since=t0)


@pytest.mark.dds
@pytest.mark.realtime
def test_unknown_motion_lists_available(bridge, dds_domain, observer, tmp_path):
    t0 = time.monotonic()
    r = run_cli("--robot", "sim", "--no-bridge", "--domain", dds_domain, "--motion", "backflip",
                "--run-root", tmp_path)
    assert_refused(r, observer, "no policy for motion 'backflip'", "Available motions:", "stand",
                   "make train MOTION=backflip", since=t0)


@pytest.mark.dds
@pytest.mark.realtime
def test_other_lowcmd_publisher_refused(bridge, dds_domain, observer, tmp_path):
    """Someone else (the locomotion service, another deploy) owns rt/lowcmd: pre-flight refuses."""
    from cyclonedds.pub import DataWriter
    from cyclonedds.topic import Topic
    from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowCmd_

    from comm import dds, dds_compat

    dp = dds.dds_participant()  # the test process's one participant (dds_domain)
    topic = Topic(dp, "rt/lowcmd", LowCmd_)
    w = DataWriter(dp, topic)  # matched, silent
    try:
        t0 = time.monotonic()
        r = run_cli("--robot", "sim", "--no-bridge", "--domain", dds_domain, "--run-root", tmp_path)
        assert_refused(r, observer, "another process publishes rt/lowcmd (1 matched writers", "L2+R2",
                       "release the locomotion service", since=t0)
    finally:
        dds_compat.delete_entity(w)
        dds_compat.delete_entity(topic)


# ---------------------------------------------------------------------- no DDS needed


def test_real_robot_needs_interface_domain_and_confirmation(tmp_path):
    r = run_cli("--robot", "g1", "--motion", "stand")
    assert r.returncode == EXIT_PREFLIGHT and "ROBOT=g1 needs the robot's network interface" in r.stderr
    r = run_cli("--robot", "g1", "--motion", "stand", "--net-if", "lo", "--domain", "1")
    assert r.returncode == EXIT_PREFLIGHT and "domain 0, not 1" in r.stderr
    r = run_cli("--robot", "g1", "--motion", "stand", "--net-if", "lo", "--auto")
    assert r.returncode == EXIT_PREFLIGHT and "--i-know-this-is-a-real-robot" in r.stderr
    r = run_cli("--robot", "g1", "--motion", "stand", "--net-if", "lo")  # lo is not on the robot's network
    assert r.returncode == EXIT_PREFLIGHT and "'lo' has no address on the robot's network 192.168.123.0/24" in r.stderr
    # the interactive confirmation on an interface that is on the robot's network: tests/test_deploy_wire.py


def test_bad_cpus_refused_before_anything_starts():
    import os

    from deploy.realtime import parse_cpus

    allowed = sorted(os.sched_getaffinity(0))
    assert parse_cpus(str(allowed[-1])) == {allowed[-1]}
    assert parse_cpus(f"{allowed[0]}-{allowed[-1]}") == set(allowed)
    assert parse_cpus(",".join(map(str, allowed))) == set(allowed)
    for text, phrase in ((str(max(allowed) + 1), f"may run on cores {allowed}"), ("one", "expected core numbers"),
                         ("", "may run on cores")):
        with pytest.raises(ValueError, match=re.escape(phrase)):
            parse_cpus(text)
    r = run_cli("--robot", "sim", "--motion", "stand", "--cpus", str(max(allowed) + 1))  # no bridge started
    assert r.returncode == EXIT_PREFLIGHT and f"this process may run on cores {allowed}" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "starting the sim bridge" not in r.stdout


def test_mode_machine_check():
    check_mode_machine(5)
    with pytest.raises(PreflightError, match="mode_machine is 0 .unknown."):
        check_mode_machine(0)
    with pytest.raises(PreflightError, match=r"mode_machine is 2 \(29dof\); this deploy drives a G1 29-DoF rev 1.0"):
        check_mode_machine(2)
