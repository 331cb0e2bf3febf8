"""The sim bridge's Python API in a thread (SimBridge.start/stop), over DDS in this process:
lockstep, started twice on the same domain (no stale "busy domain"), stats and control."""
import queue

import pytest

from comm import dds_compat, hg
from comm.sim_msgs import SimClient
from sim.config import BridgeConfig
from sim.node import SimBridge
from robots import g1

pytestmark = [pytest.mark.dds, pytest.mark.realtime]  # the sim bridge in real time over DDS on lo


def test_in_process_bridge_start_stop_twice(dds_domain):
    from unitree_sdk2py.core.channel import ChannelPublisher, ChannelSubscriber
    from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowCmd_, LowState_

    cmd = hg.build_lowcmd(q=g1.DEFAULT_JOINT_POS, kp=g1.KP, kd=g1.KD)
    for _ in range(2):
        with SimBridge(BridgeConfig(domain=dds_domain, lockstep=True, verbose=False)) as bridge:
            states = queue.Queue()
            sub = ChannelSubscriber("rt/lowstate", LowState_)
            sub.Init(states.put, 0)
            pub = ChannelPublisher("rt/lowcmd", LowCmd_)
            pub.Init()
            client = SimClient(dds_domain, timeout=10.0)
            try:
                tick = states.get(timeout=10).tick
                for _ in range(10):
                    pub.Write(cmd)
                    while (msg := states.get(timeout=10)).tick <= tick:
                        pass
                    assert msg.tick == tick + 2
                    tick = msg.tick
                client.reset()
                assert client.status().resets == 1
            finally:
                dds_compat.close_channel(sub)
                dds_compat.close_channel(pub)
                client.close()
            assert bridge.stats()["cmd_accepted"] == 10
        assert not bridge._thread.is_alive()


def test_in_process_bridge_reports_a_busy_domain_from_start(dds_domain):
    from comm.sim_process import BridgeLaunchError

    with SimBridge(BridgeConfig(domain=dds_domain, lockstep=True, verbose=False)):
        with pytest.raises(BridgeLaunchError, match="another publisher of rt/lowstate"):
            SimBridge(BridgeConfig(domain=dds_domain, lockstep=True, verbose=False)).start()
