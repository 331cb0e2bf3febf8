"""The sim bridge over real DDS on loopback, in real time, talked to exactly as a Unitree client
talks to the robot: unitree_sdk2py ChannelFactoryInitialize / ChannelPublisher /
ChannelSubscriber, hg LowCmd_/LowState_ from `idl.default`, CRC from `utils.crc.CRC`.

One bridge process serves the module (started with `launch_bridge_process`, stopped with
SIGINT: its exit code must be 0). Bounds on rates are loose on purpose: the machine running
the tests has two cores shared with JAX compiles.
"""
import math
import os
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest

from comm import dds_compat, hg
from comm.sim_msgs import SimClient
from comm.sim_process import REPO_ROOT, launch_bridge_process
from sim.node import LOOP_PHASES
from robots import g1

pytestmark = [pytest.mark.dds, pytest.mark.realtime]  # the sim bridge in real time over DDS on lo


@pytest.fixture(scope="module")
def bridge(dds_domain):
    with launch_bridge_process(["--gt-decimation", "5"], domain=dds_domain) as b:
        yield b
        code = b.stop()
    assert code == 0, f"Ctrl-C did not stop the bridge cleanly:\n{b.output}"
    assert "sim bridge stopped" in b.output


@pytest.fixture(scope="module")
def client(bridge, dds_domain):
    c = SimClient(dds_domain, timeout=10.0)
    try:
        c.wait_ground_truth()
    except Exception as e:
        raise AssertionError(f"{e}\nbridge output:\n{bridge.output}") from e
    yield c
    c.close()


@pytest.fixture(scope="module")
def lowcmd_pub(bridge):
    from unitree_sdk2py.core.channel import ChannelPublisher
    from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowCmd_

    pub = ChannelPublisher("rt/lowcmd", LowCmd_)
    pub.Init()
    yield pub
    dds_compat.close_channel(pub)


class LowStateRecorder:
    """rt/lowstate subscriber (unitree_sdk2py) recording (arrival time, message)."""

    def __init__(self):
        from unitree_sdk2py.core.channel import ChannelSubscriber
        from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowState_

        self.samples = []
        self.sub = ChannelSubscriber("rt/lowstate", LowState_)
        self.sub.Init(lambda msg: self.samples.append((time.perf_counter(), msg)), 0)

    def wait_for(self, predicate, timeout=5.0):
        end = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < end:
            for _, msg in self.samples[seen:]:
                if predicate(msg):
                    return msg
            seen = len(self.samples)
            time.sleep(0.005)
        raise AssertionError("no matching LowState in time")

    def close(self):
        dds_compat.close_channel(self.sub)


def hold_pose_cmd(mode_machine=g1.MODE_MACHINE_29DOF_REV1):
    """LowCmd_ holding the default pose, built the way Unitree's examples build it."""
    from unitree_sdk2py.idl.default import unitree_hg_msg_dds__LowCmd_
    from unitree_sdk2py.utils.crc import CRC

    cmd = unitree_hg_msg_dds__LowCmd_()
    cmd.mode_pr = g1.MODE_PR
    cmd.mode_machine = mode_machine
    for i in range(g1.NUM_MOTORS):
        m = cmd.motor_cmd[i]
        m.mode, m.q, m.dq, m.tau = 1, float(g1.DEFAULT_JOINT_POS[i]), 0.0, 0.0
        m.kp, m.kd = float(g1.KP[i]), float(g1.KD[i])
    cmd.crc = CRC().Crc(cmd)
    return cmd


class CommandStream:
    """Writes one LowCmd_ at 500 Hz against absolute deadlines until stopped."""

    def __init__(self, pub, cmd, period=g1.COMMAND_DT):
        self.pub, self.cmd, self.period, self.sent = pub, cmd, period, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        t = time.perf_counter()
        while not self._stop.is_set():
            self.pub.Write(self.cmd)
            self.sent += 1
            t += self.period
            delay = t - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            elif delay < -0.05:
                t = time.perf_counter()

    def stop(self):
        self._stop.set()
        self._thread.join(5)
        return self.sent


def settled_status(client, quiet=0.3, timeout=10.0):
    """The bridge's status once cmd_received stopped changing for `quiet` s of wall time."""
    last, since, end = client.status(), time.monotonic(), time.monotonic() + timeout
    while time.monotonic() < end:
        time.sleep(0.05)
        s = client.status()
        if s.cmd_received != last.cmd_received:
            last, since = s, time.monotonic()
        elif time.monotonic() - since > quiet and s.tick > last.tick:
            return s
    raise AssertionError("command counters did not settle")


def _cpu_seconds(pid: int) -> float:
    """user + system CPU time of a process, from /proc (Linux); 0 where unavailable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _runqueue_wait_seconds(pid: int) -> float:
    """Seconds the threads of a process spent runnable but waiting for a CPU (/proc/PID/task/*/schedstat,
    Linux); 0 where unavailable. High: the process was starved; low with a low rate: it was blocked."""
    total = 0.0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[1]) * 1e-9
            except (OSError, ValueError, IndexError):
                pass
    except OSError:
        pass
    return total


def test_lowstate_arrives_at_500hz_with_valid_crc(bridge, client):
    from unitree_sdk2py.utils.crc import CRC

    rec = LowStateRecorder()
    try:
        rec.wait_for(lambda m: True, timeout=10.0)
        time.sleep(0.2)
        s0 = client.status()
        n0, t0, cpu0 = len(rec.samples), time.perf_counter(), _cpu_seconds(bridge.proc.pid)
        wait0 = _runqueue_wait_seconds(bridge.proc.pid)
        time.sleep(2.0)
        window = rec.samples[n0:]
        elapsed = time.perf_counter() - t0
        cpu = (_cpu_seconds(bridge.proc.pid) - cpu0) / elapsed  # cores
        wait = (_runqueue_wait_seconds(bridge.proc.pid) - wait0) / elapsed  # s/s
        s1 = client.wait_status(lambda s: s.tick > s0.tick + 100)
    finally:
        rec.close()
    # The bridge's contract, on its own clock (tick, ms) and its own counter: one LowState
    # written per 2 ms of simulated time.
    published_per_sim_second = (s1.state_published - s0.state_published) / ((s1.tick - s0.tick) * 1e-3)
    assert published_per_sim_second == pytest.approx(500, rel=0.02)
    # What this client received: in order, on the 2 ms grid. Samples a Python subscriber did not
    # take in time are dropped (keep-last, as on the robot): a CI runner delivered 389 of 500 per
    # simulated second to this process in a full suite, 500 when the module runs alone, and loaded full suites
    # 144-311 (below). So the bound is one a loaded machine cannot break: a stream that arrives at all.
    msgs = [m for _, m in window]
    ticks = np.array([m.tick for m in msgs])
    assert (np.diff(ticks) > 0).all() and (np.diff(ticks) % 2 == 0).all()
    received = len(msgs) / ((ticks[-1] - ticks[0] + 2) * 1e-3)
    print(f"this client received {received:.0f} LowState per simulated second (500 published)")
    assert received > 50, f"this client received {received:.0f} LowState per simulated second (500 published)"
    # Keeping up with the wall clock is a throughput claim, measured by `make bench`
    # (bench/bridge.py) side by side with the deploy loop. In full suites this process took
    # LowState in at 144-311 Hz (500 Hz alone) while the bridge kept real time (76 % of its loop
    # asleep, 0 overruns, no run-queue wait): the lag is this process's Python listener working
    # through a backlog, not the bridge. Reported with the bridge's side of it: CPU use, run-queue
    # wait, overruns, where its loop spent the wall time, and the machine's load.
    rate = len(msgs) / elapsed
    if rate < 400 or received < 450:
        spent = {k: getattr(s1, f"loop_{k}_s") - getattr(s0, f"loop_{k}_s") for k in LOOP_PHASES}
        loop = ", ".join(f"{k} {v / max(sum(spent.values()), 1e-9):.0%}" for k, v in spent.items())
        warnings.warn(f"LowState taken in at {rate:.0f} Hz wall clock, {received:.0f} per simulated second: the "
                      f"bridge used {cpu:.2f} of a core and its threads waited {wait:.2f} s/s for a CPU, "
                      f"{s1.overruns - s0.overruns} schedule overruns, its loop's wall time: {loop}; machine load "
                      f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    crc = CRC()
    assert all(crc.Crc(m) == m.crc for m in msgs)
    assert {m.mode_machine for m in msgs} == {g1.MODE_MACHINE_29DOF_REV1}
    assert {m.mode_pr for m in msgs} == {0}
    last = hg.lowstate_to_arrays(msgs[-1])
    assert np.linalg.norm(last.quat) == pytest.approx(1.0, abs=1e-5)
    assert np.linalg.norm(last.acc) == pytest.approx(9.81, abs=1.0)
    assert all(len(m.motor_state) == 35 for m in msgs[:5])
    assert not any(m.motor_state[i].q for m in msgs[:5] for i in range(29, 35))


def test_stands_holding_default_pose_with_standard_gains(client, lowcmd_pub):
    client.reset()
    before = client.wait_status(lambda s: s.resets >= 1)
    stream = CommandStream(lowcmd_pub, hold_pose_cmd())
    try:
        client.wait_status(lambda s: s.commanded == 1)
        time.sleep(0.5)
        client.release_band()
        heights, t_end = [], time.monotonic() + 5.0
        while time.monotonic() < t_end:
            time.sleep(0.05)
            gt = client.ground_truth()
            assert gt.band == 0
            heights.append(gt.pos[2])
    finally:
        stream.stop()
    status = client.status()
    assert 0.74 < min(heights) and max(heights) < 0.80, (min(heights), max(heights))
    assert status.cmd_accepted - before.cmd_accepted > 0.5 * 5.5 / g1.COMMAND_DT  # most of ~2750 arrived
    assert status.cmd_rejected_crc == before.cmd_rejected_crc
    assert status.max_abs_tau > 0


def test_wrong_crc_has_no_effect(client, lowcmd_pub):
    client.reset()
    client.release_band()
    before = client.status()
    cmd = hold_pose_cmd()
    cmd.crc ^= 0x1  # everything right but the CRC
    stream = CommandStream(lowcmd_pub, cmd)
    try:
        time.sleep(1.5)
    finally:
        sent = stream.stop()
    after = settled_status(client)
    received = after.cmd_received - before.cmd_received
    assert 50 < received <= sent  # (a loaded bridge may see only the latest of a burst)
    assert after.cmd_rejected_crc - before.cmd_rejected_crc == received
    assert after.cmd_accepted == before.cmd_accepted and after.commanded == 0
    assert after.max_abs_tau == 0.0  # the drives stay at zero torque
    assert client.ground_truth().pos[2] < 0.45  # and the released robot fell over


def test_malformed_commands_are_counted_and_the_bridge_keeps_running(bridge, client, lowcmd_pub):
    from unitree_sdk2py.utils.crc import CRC

    nan_cmd = hold_pose_cmd()
    nan_cmd.motor_cmd[3].q = math.nan
    nan_cmd.crc = CRC().Crc(nan_cmd)  # a valid CRC over a NaN
    wrong_machine = hold_pose_cmd(mode_machine=2)  # 29-DoF pre-rev-1.0
    for cmd, field in ((nan_cmd, "cmd_rejected_nonfinite"), (wrong_machine, "cmd_rejected_mode_machine")):
        before = client.status()
        for _ in range(20):
            lowcmd_pub.Write(cmd)
            time.sleep(0.004)
        after = client.wait_status(lambda s: getattr(s, field) - getattr(before, field) >= 10)
        assert after.cmd_accepted == before.cmd_accepted
    assert bridge.proc.poll() is None
    tick = client.status().tick
    client.wait_status(lambda s: s.tick > tick + 100)  # still simulating and publishing


def test_virtual_remote_and_stale_state_pause(client):
    rec = LowStateRecorder()
    try:
        client.press("L2", "B", hold_s=0.3, lx=0.5)
        msg = rec.wait_for(lambda m: hg.lowstate_to_arrays(m).remote.buttons != 0)
        remote = hg.lowstate_to_arrays(msg).remote
        assert remote.pressed() == ("L2", "B") and remote.lx == pytest.approx(0.5)
        rec.wait_for(lambda m: hg.lowstate_to_arrays(m).remote.buttons == 0, timeout=3.0)

        n = len(rec.samples)
        tick0 = rec.samples[n - 1][1].tick
        client.pause_state(0.5)
        resumed = rec.wait_for(lambda m: m.tick > tick0 + 600, timeout=10.0)
        ticks = np.array([m.tick for _, m in rec.samples[n - 1:]])
    finally:
        rec.close()
    # No LowState for 0.5 s of robot time (stale state as a client sees it), then it resumes.
    assert 490 <= np.diff(ticks).max() <= 520 and resumed.tick > ticks[0]


def test_push_over_the_control_topic(client, lowcmd_pub):
    client.reset()
    stream = CommandStream(lowcmd_pub, hold_pose_cmd())
    try:
        client.wait_status(lambda s: s.commanded == 1)
        client.release_band()
        time.sleep(0.3)
        client.push((0.0, 120.0, 0.0), 0.1)
        peak, t_end = 0.0, time.monotonic() + 0.5
        while time.monotonic() < t_end:
            peak = max(peak, client.ground_truth().lin_vel_world[1])
            time.sleep(0.01)
    finally:
        stream.stop()
    assert peak > 0.15


def test_second_bridge_on_the_same_domain_refuses_to_start(bridge, dds_domain):
    out = subprocess.run([sys.executable, "-m", "sim", "--domain", str(dds_domain)],
                         capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert out.returncode == 3, out.stdout + out.stderr
    assert f"another publisher of rt/lowstate is on DDS domain {dds_domain}" in out.stderr
    assert "Traceback" not in out.stderr
