"""The sim bridge in lockstep mode over real DDS: one LowState per LowCmd, two physics steps
each, runs reproducible bit for bit; CRC corruption as a Unitree client sees it.

The client uses unitree_sdk2py only (ChannelPublisher / ChannelSubscriber, CRC()).
"""
import queue
import time

import numpy as np
import pytest

from comm import dds_compat
from comm.sim_msgs import SimClient
from comm.sim_process import launch_bridge_process
from robots import g1

pytestmark = [pytest.mark.dds, pytest.mark.realtime]  # the sim bridge in real time over DDS on lo

CORRUPT = 0.25


@pytest.fixture(scope="module")
def bridge(dds_domain):
    args = ["--lockstep", "--no-band", "--crc-corrupt", str(CORRUPT), "--seed", "5"]
    with launch_bridge_process(args, domain=dds_domain) as b:
        yield b
        code = b.stop()
    assert code == 0, b.output


class LockstepClient:
    def __init__(self):
        from unitree_sdk2py.core.channel import ChannelPublisher, ChannelSubscriber
        from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowCmd_, LowState_

        self.states = queue.Queue()
        self.sub = ChannelSubscriber("rt/lowstate", LowState_)
        self.sub.Init(self.states.put, 0)
        self.pub = ChannelPublisher("rt/lowcmd", LowCmd_)
        self.pub.Init()

    def next_state(self, after_tick, timeout=5.0):
        """The first LowState newer than after_tick (the bridge re-publishes when idle)."""
        end = time.monotonic() + timeout
        while True:
            msg = self.states.get(timeout=max(0.0, end - time.monotonic()))
            if after_tick is None or msg.tick > after_tick:
                return msg

    def step(self, cmd, tick):
        self.pub.Write(cmd)
        return self.next_state(tick)

    def close(self):
        dds_compat.close_channel(self.sub)
        dds_compat.close_channel(self.pub)


def hold_cmd():
    from unitree_sdk2py.idl.default import unitree_hg_msg_dds__LowCmd_
    from unitree_sdk2py.utils.crc import CRC

    cmd = unitree_hg_msg_dds__LowCmd_()
    cmd.mode_machine = g1.MODE_MACHINE_29DOF_REV1
    for i in range(g1.NUM_MOTORS):
        m = cmd.motor_cmd[i]
        m.mode, m.q, m.kp, m.kd = 1, float(g1.DEFAULT_JOINT_POS[i]), float(g1.KP[i]), float(g1.KD[i])
    cmd.crc = CRC().Crc(cmd)
    return cmd


def test_lockstep_is_one_state_per_command_and_reproducible(bridge, dds_domain):
    from unitree_sdk2py.utils.crc import CRC

    sim = SimClient(dds_domain, timeout=10.0)
    client = LockstepClient()
    try:
        cmd, crc = hold_cmd(), CRC()
        runs = []
        for _ in range(2):
            sim.reset()  # a reset in lockstep publishes the state it left
            state = client.next_state(None)
            while sim.status().resets != len(runs) + 1 or state.motor_state[3].q != pytest.approx(g1.DEFAULT_JOINT_POS[3]):
                state = client.next_state(None)
            tick0, ticks, qs, bad = state.tick, [], [], 0
            t0 = time.perf_counter()
            for _ in range(150):
                state = client.step(cmd, state.tick)
                ticks.append(state.tick - tick0)
                qs.append([m.q for m in state.motor_state[:29]])
                bad += crc.Crc(state) != state.crc
            wall = time.perf_counter() - t0
            runs.append((ticks, np.array(qs), bad, wall))
        status = sim.wait_status(lambda s: s.cmd_received >= 300)
    finally:
        client.close()
        sim.close()
    (ticks_a, q_a, bad_a, wall_a), (ticks_b, q_b, bad_b, _) = runs
    assert ticks_a == ticks_b == list(range(2, 302, 2))  # 2 physics steps of 1 ms per command
    np.testing.assert_array_equal(q_a, q_b)  # deterministic: same commands, same states
    assert np.abs(q_a[-1] - g1.DEFAULT_JOINT_POS).max() < 0.1  # and it held the pose
    # CRC corruption reaches the client as a wrong CRC, at the configured rate (300 states).
    assert 0.10 * 300 < bad_a + bad_b < 0.40 * 300
    assert status.cmd_accepted == status.cmd_received and status.overruns == 0
    print(f"lockstep: 150 commands (0.3 s simulated) in {wall_a:.2f} s wall, rtf {0.3 / wall_a:.2f}")
