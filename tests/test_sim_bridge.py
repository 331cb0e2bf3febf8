"""Sim bridge without DDS: physics core (PD, IMU, band, pushes, reset, determinism), the fault
and remote pipeline of SimBridge driven step by step, and the CLI surface.

The over-the-wire behaviour is in test_sim_bridge_dds.py.
"""
import math
import subprocess
import sys

import mujoco
import numpy as np
import pytest

from comm import crc, hg, remote, sim_msgs
from comm.sim_process import REPO_ROOT
from sim.cli import build_arg_parser, config_from_args, parse_push, parse_remote_script
from sim.config import BandConfig, BridgeConfig, FaultConfig, NoiseConfig, Push
from sim.node import SimBridge
from plant.robot import Plant, Setpoint, drive_torque
from robots import g1
from robots.physics import quat_to_rpy

NO_BAND = BridgeConfig(band=BandConfig(enabled=False), verbose=False)


def hold_default_pose() -> hg.LowCmdArrays:
    return hg.lowcmd_arrays(hg.lowcmd_record(q=g1.DEFAULT_JOINT_POS, kp=g1.KP, kd=g1.KD))


@pytest.fixture(scope="module")
def standing():
    """A sim that held the default pose for 1 s without the band (shared, read-only)."""
    sim = Plant(NO_BAND.plant())
    sim.set_command(hold_default_pose())
    for _ in range(1000):
        sim.step()
    return sim


def test_pd_torque_hand_computed():
    rec = hg.lowcmd_record(q=0.0, kp=0.0, kd=0.0)
    mc = rec["motor_cmd"]
    mc["q"][0], mc["kp"][0], mc["kd"][0], mc["dq"][0], mc["tau"][0] = 0.5, 100.0, 2.0, 1.0, 3.0
    mc["q"][19], mc["kp"][19] = 10.0, 100.0  # left_wrist_roll, limit 25 Nm: saturates
    mc["mode"][4], mc["q"][4], mc["kp"][4] = 0, 1.0, 100.0  # disabled motor: no torque
    q = np.full(29, 0.1)
    dq = np.full(29, -0.5)
    demand, tau = drive_torque(Setpoint.of_lowcmd(hg.lowcmd_arrays(rec)), q, dq)
    assert demand[19] == pytest.approx(100.0 * (10.0 - 0.1)) and demand[4] == 0.0  # before the limit
    assert tau[0] == pytest.approx(3.0 + 100.0 * (0.5 - 0.1) + 2.0 * (1.0 + 0.5))  # 46
    assert tau[19] == pytest.approx(g1.TORQUE_LIMIT[19]) == 25.0
    assert tau[4] == 0.0
    assert not np.delete(tau, [0, 19]).any()
    assert not np.any(drive_torque(None, q, dq))  # no command yet: zero torque


def test_applied_torque_is_pd_of_the_measured_state():
    sim = Plant(NO_BAND.plant())
    cmd = hold_default_pose()
    sim.set_command(cmd)
    for _ in range(20):
        q, dq = sim.data.qpos[sim.qadr].copy(), sim.data.qvel[sim.dadr].copy()
        sim.step()
        np.testing.assert_allclose(sim.tau, drive_torque(Setpoint.of_lowcmd(cmd), q, dq)[1])
        np.testing.assert_allclose(sim.data.actuator_force, sim.tau)  # what MuJoCo applied


def test_step_split_matches_mj_step():
    sim = Plant(NO_BAND.plant())
    m, d = sim.model, mujoco.MjData(sim.model)
    mujoco.mj_resetDataKeyframe(m, d, sim.home_key)
    sim.set_command(hold_default_pose())
    for _ in range(200):
        d.ctrl[:] = drive_torque(sim.setpoint, d.qpos[sim.qadr], d.qvel[sim.dadr])[1]
        mujoco.mj_step(m, d)
        sim.step()
    np.testing.assert_allclose(sim.data.qpos, d.qpos, atol=1e-6)
    assert sim.tick == 200 and sim.clock == pytest.approx(0.2)


def test_zero_torque_before_any_command_falls():
    sim = Plant(NO_BAND.plant())
    for _ in range(1500):
        sim.step()
        assert not sim.tau.any()
    assert sim.ground_truth().pos[2] < 0.4


def test_stands_5s_holding_default_pose():
    sim = Plant(NO_BAND.plant())
    sim.set_command(hold_default_pose())
    heights = []
    for i in range(5000):
        sim.step()
        if i % 10 == 0:
            heights.append(sim.ground_truth().pos[2])
    assert 0.74 < min(heights) and max(heights) < 0.80, (min(heights), max(heights))


def test_imu_and_ground_truth_at_rest(standing):
    s = standing.sensor_state()
    gt = standing.ground_truth()
    assert np.linalg.norm(s.acc) == pytest.approx(9.81, abs=0.05)  # specific force, +z at rest
    assert s.acc[2] > 9.7
    assert np.abs(s.gyro).max() < 0.02
    assert abs(quat_to_rpy(s.quat)[:2]).max() < 0.05  # upright
    assert np.linalg.norm(s.quat) == pytest.approx(1.0)
    rot = standing.data.xmat[standing.base_body].reshape(3, 3)
    np.testing.assert_allclose(gt.lin_vel_body, rot.T @ gt.lin_vel_world, atol=1e-12)
    np.testing.assert_allclose(gt.ang_vel_world, rot @ gt.ang_vel_body, atol=1e-12)
    assert gt.foot_contact.all()
    assert 0.02 < gt.foot_height.min() and gt.foot_height.max() < 0.05  # foot sites at the ankle
    assert 0.74 < gt.pos[2] < 0.80


def test_imu_gyro_matches_base_rotation():
    sim = Plant(NO_BAND.plant())
    sim.data.qvel[3:6] = [0.3, -0.2, 0.5]  # spin the base (body frame), no gravity effects yet
    mujoco.mj_forward(sim.model, sim.data)
    site_rot = sim.data.site_xmat[sim.imu_site].reshape(3, 3)
    body_rot = sim.data.xmat[sim.base_body].reshape(3, 3)
    expected = site_rot.T @ body_rot @ np.array([0.3, -0.2, 0.5])  # IMU frame
    np.testing.assert_allclose(sim.sensor_state().gyro, expected, atol=1e-9)


def test_elastic_band_holds_a_limp_robot_and_releases():
    cfg = BridgeConfig(band=BandConfig(release_after=2.0), verbose=False)
    sim = Plant(cfg.plant())
    for _ in range(2000):
        sim.step()
    assert sim.band_engaged and sim.ground_truth().pos[2] > 0.65
    for _ in range(1500):
        sim.step()
    assert not sim.band_engaged and sim.ground_truth().pos[2] < 0.4


def test_push_gives_the_impulse_to_the_centre_of_mass():
    sim = Plant(BridgeConfig(pushes=(Push(0.01, (0.0, 150.0, 0.0), 0.1),), verbose=False,
                             band=BandConfig(enabled=False)).plant())
    sim.data.qpos[2] += 2.0  # in the air: only gravity (z) and the push act on the robot
    mujoco.mj_forward(sim.model, sim.data)
    com_y = []
    for _ in range(130):
        sim.step()
        com_y.append(sim.data.subtree_com[0, 1])
    v_after = (com_y[129] - com_y[119]) / (10 * sim.dt)  # COM velocity after the push ended at 0.11 s
    mass = sim.model.body_subtreemass[0]
    assert v_after == pytest.approx(150.0 * 0.1 / mass, rel=0.02)  # impulse / mass = 0.45 m/s


def test_reset_restores_home_and_zero_torque():
    sim = Plant(NO_BAND.plant())
    sim.set_command(hold_default_pose())
    for _ in range(300):
        sim.step()
    sim.push((100.0, 0, 0), 1.0)
    sim.reset()
    np.testing.assert_array_equal(sim.data.qpos, sim.model.key_qpos[sim.home_key])
    assert sim.setpoint is None and sim.resets == 1 and sim.data.time == 0.0
    assert sim.tick == 300  # the tick keeps counting across resets
    sim.step()
    assert not sim.tau.any() and not sim.data.xfrc_applied.any()


def test_lockstep_core_is_deterministic():
    def run():
        cfg = BridgeConfig(seed=3, verbose=False, noise=NoiseConfig(gyro_std=0.01, joint_pos_std=0.001),
                              faults=FaultConfig(cmd_drop=0.2))
        bridge = SimBridge(cfg)
        bridge.sim = Plant(cfg.plant())
        out = []
        cmd = hg.build_lowcmd(q=g1.DEFAULT_JOINT_POS, kp=g1.KP, kd=g1.KD)
        for k in range(200):
            bridge.pump_commands([cmd])
            for i in range(2):
                states, _ = bridge.advance(publish_state=i == 1, drain_inbox=False)
                out += states
        return bridge.sim.data.qpos.copy(), out, dict(bridge.counters)

    (q1, s1, c1), (q2, s2, c2) = run(), run()
    np.testing.assert_array_equal(q1, q2)
    assert s1 == s2 and c1 == c2 and len(s1) == 200 and 0 < c1["cmd_dropped"] < 80


def offline_bridge(**kw) -> SimBridge:
    """A SimBridge driven step by step without DDS (white box: the pipeline, not the wire)."""
    cfg = BridgeConfig(verbose=False, **kw)
    bridge = SimBridge(cfg)
    bridge.sim = Plant(cfg.plant())
    return bridge


def run_steps(bridge, n, cmd=None):
    states = []
    for k in range(n):
        if cmd is not None:
            bridge.submit_lowcmd(cmd)
        s, _ = bridge.advance(publish_state=(bridge.sim.steps + 1) % 2 == 0)
        states += [hg.lowstate_record_from_cdr(x) for x in s]
    return states


def test_rejected_commands_are_counted_and_never_applied():
    bridge = offline_bridge(band=BandConfig(enabled=False))
    bad_crc = hg.build_lowcmd(q=g1.DEFAULT_JOINT_POS, kp=g1.KP, kd=g1.KD)
    bad_crc.crc ^= 0xFF
    q = g1.DEFAULT_JOINT_POS.copy()
    q[0] = math.nan
    for msg, counter in ((bad_crc, "cmd_rejected_crc"),
                         (hg.build_lowcmd(q=g1.DEFAULT_JOINT_POS, kp=g1.KP, mode_machine=2), "cmd_rejected_mode_machine"),
                         (hg.build_lowcmd(q=q, kp=g1.KP), "cmd_rejected_nonfinite"),
                         (hg.build_lowcmd(q=g1.DEFAULT_JOINT_POS, kp=g1.KP, mode_pr=1), "cmd_rejected_mode_pr")):
        states = run_steps(bridge, 10, msg)
        assert bridge.counters[counter] == 10
        assert bridge.sim.setpoint is None and not bridge.sim.tau.any()
        assert all(not s["motor_state"]["tau_est"].any() for s in states)
    assert bridge.counters["cmd_accepted"] == 0 and bridge.counters["cmd_received"] == 40


def test_jitter_delays_lowstate_within_its_bounds_in_order():
    """--jitter-ms: each LowState delayed latency + uniform [0, J] ms, released in the order measured (a
    queue: one that would overtake waits); hand bounds: delays in [5, 15] ms at 1 ms steps, spread over them."""
    b = offline_bridge(faults=FaultConfig(state_latency_ms=5, jitter_ms=10), seed=3)
    out = []  # (publication clock in ms, measured tick in ms)
    for _ in range(2000):
        s, _ = b.advance(publish_state=(b.sim.steps + 1) % 2 == 0)
        out += [(round(b.sim.clock * 1e3), int(hg.lowstate_record_from_cdr(x)["tick"])) for x in s]
    delay = np.array([c - t for c, t in out])
    ticks = [t for _, t in out]
    assert ticks == sorted(ticks) and len(set(ticks)) == len(ticks)  # in order, none twice
    assert delay.min() >= 5 and delay.max() <= 15 + 1, (delay.min(), delay.max())
    assert delay.max() - delay.min() >= 8 and len(out) > 0.95 * 1000 - 10  # jittered, and nothing lost


def test_state_latency_drop_corruption_and_pause():
    late = offline_bridge(faults=FaultConfig(state_latency_ms=10))
    ticks = [int(s["tick"]) for s in run_steps(late, 40)]
    assert ticks[0] == 2 and len(ticks) == 20 - 5  # the first 10 ms are in flight at the end
    # each published state was measured 10 ms before publication: publication happens at step
    # tick + 10, so the state published after step 40 is tick 30
    assert ticks[-1] == 30

    dropped = offline_bridge(faults=FaultConfig(state_drop=1.0))
    assert run_steps(dropped, 20) == [] and dropped.counters["state_dropped"] == 10

    corrupt = offline_bridge(faults=FaultConfig(crc_corrupt=0.5), seed=1)
    states = run_steps(corrupt, 400)
    bad = sum(crc.struct_crc(s) != int(s["crc"]) for s in states)
    assert bad == corrupt.counters["state_crc_corrupted"] and 60 < bad < 140

    paused = offline_bridge()
    paused.submit_control("control", sim_msgs.SimControl_(7, sim_msgs.OP_PAUSE_STATE, [0.01, 0, 0, 0, 0, 0]))
    ticks = [int(s["tick"]) for s in run_steps(paused, 20)]
    assert ticks == [10, 12, 14, 16, 18, 20] and paused.counters["state_paused"] == 4
    assert paused.control_seq == 7


def test_command_latency_and_drop():
    bridge = offline_bridge(band=BandConfig(enabled=False), faults=FaultConfig(cmd_latency_ms=5))
    cmd = hg.build_lowcmd(q=g1.DEFAULT_JOINT_POS, kp=g1.KP, kd=g1.KD)
    bridge.submit_lowcmd(cmd)
    for k in range(5):
        run_steps(bridge, 1)
        assert bridge.sim.setpoint is None, k
    run_steps(bridge, 1)
    assert bridge.sim.setpoint is not None and bridge.counters["cmd_accepted"] == 1

    lossy = offline_bridge(faults=FaultConfig(cmd_drop=1.0))
    run_steps(lossy, 10, cmd)
    assert lossy.counters["cmd_dropped"] == 10 and lossy.sim.setpoint is None


def test_control_messages_reset_band_push():
    bridge = offline_bridge()
    run_steps(bridge, 10, hg.build_lowcmd(q=g1.DEFAULT_JOINT_POS, kp=g1.KP, kd=g1.KD))
    assert bridge.sim.band_engaged and bridge.sim.setpoint is not None
    bridge.submit_control("control", sim_msgs.SimControl_(1, sim_msgs.OP_BAND, [0.0] * 6))
    bridge.submit_control("control", sim_msgs.SimControl_(2, sim_msgs.OP_PUSH, [0.0, 50.0, 0.0, 0.05, 0, 0]))
    run_steps(bridge, 1)
    assert not bridge.sim.band_engaged and bridge.sim.data.xfrc_applied[bridge.sim.base_body, 1] == 50.0
    bridge.submit_control("control", sim_msgs.SimControl_(3, sim_msgs.OP_RESET, [0.0] * 6))
    bridge.submit_control("control", sim_msgs.SimControl_(4, "explode", [0.0] * 6))
    run_steps(bridge, 1)
    assert bridge.sim.resets == 1 and bridge.sim.setpoint is None and bridge.sim.band_engaged
    assert bridge.counters["control_rejected"] == 1 and bridge.control_seq == 4


def test_virtual_remote_script_and_topic():
    script = parse_remote_script("0.010:start, 0.020:L2+B@0.004, 0.030:lx=0.5+ly=-0.25")
    assert script[1].buttons == remote.button_mask("L2", "B") and script[1].hold == 0.004
    assert script[2].sticks == (("lx", 0.5), ("ly", -0.25))
    bridge = offline_bridge(remote_script=script)
    by_tick = {int(s["tick"]): remote.decode_remote(s["wireless_remote"].tobytes()) for s in run_steps(bridge, 260)}
    assert by_tick[8].buttons == 0
    assert by_tick[12].pressed() == ("Start",)
    assert by_tick[22].pressed() == ("Start", "L2", "B")
    assert by_tick[26].pressed() == ("Start",)  # L2+B held 4 ms
    assert by_tick[212].buttons == 0  # Start held the default 0.2 s
    assert by_tick[40].lx == 0.5 and by_tick[260].ly == -0.25  # sticks persist

    bridge.submit_control("remote", sim_msgs.SimRemote_(9, remote.button_mask("A"), 0.0, 0.0, 0.0, 0.0, 0.0, 0.01))
    states = run_steps(bridge, 20)
    first, last = (remote.decode_remote(s["wireless_remote"].tobytes()) for s in (states[0], states[-1]))
    assert first.pressed() == ("A",) and first.lx == 0.0  # a SimRemote_ sets the whole remote
    assert last.buttons == 0 and bridge.remote_seq == 9


def test_sensor_noise_and_bias(standing):
    cfg = BridgeConfig(verbose=False, noise=NoiseConfig(
        gyro_std=0.02, accel_std=0.1, joint_pos_std=0.005, joint_vel_std=0.05,
        gyro_bias=(0.01, -0.02, 0.03), accel_bias=(0.2, 0.0, 0.0)))
    bridge = SimBridge(cfg)
    bridge.sim = standing  # a frozen instant: published minus true = noise + bias
    truth = standing.sensor_state()
    recs = [hg.lowstate_arrays(bridge.capture_state()) for _ in range(400)]
    gyro = np.array([r.gyro for r in recs]) - truth.gyro
    acc = np.array([r.acc for r in recs]) - truth.acc
    q = np.array([r.q for r in recs]) - truth.q
    np.testing.assert_allclose(gyro.mean(0), [0.01, -0.02, 0.03], atol=0.005)
    np.testing.assert_allclose(gyro.std(0), 0.02, rtol=0.2)
    np.testing.assert_allclose(acc.mean(0), [0.2, 0, 0], atol=0.03)
    assert q.std() == pytest.approx(0.005, rel=0.1)


def test_model_overrides_reach_the_model():
    ns = build_arg_parser().parse_args(["--armature-scale", "2", "--extra-joint-damping", "0.5",
                                           "--frictionloss-scale", "0"])
    cfg = config_from_args(ns)
    base, perturbed = Plant(BridgeConfig(verbose=False).plant()).model, Plant(cfg.plant()).model
    dof = Plant(cfg.plant()).dadr
    np.testing.assert_allclose(perturbed.dof_armature[dof], 2 * base.dof_armature[dof])
    np.testing.assert_allclose(perturbed.dof_damping[dof], base.dof_damping[dof] + 0.5)
    assert not perturbed.dof_frictionloss[dof].any()


def test_cli_config_parsing_and_errors():
    cfg = config_from_args(build_arg_parser().parse_args(
        ["--lockstep", "--push", "1.5:0,80,0@0.2", "--push", "3:10,0,0", "--crc-corrupt", "0.1",
         "--state-latency-ms", "20", "--gyro-bias", "0.01,0,0", "--no-band", "--domain", "5"]))
    assert cfg.lockstep and cfg.domain == 5 and not cfg.band.enabled
    assert cfg.pushes == (Push(1.5, (0.0, 80.0, 0.0), 0.2), Push(3.0, (10.0, 0.0, 0.0), 0.1))
    assert cfg.faults.crc_corrupt == 0.1 and cfg.faults.state_latency_ms == 20
    with pytest.raises(ValueError, match="--push"):
        parse_push("1.0:1,2")
    with pytest.raises(ValueError, match="unknown remote button"):
        parse_remote_script("1.0:Q")
    with pytest.raises(SystemExit):
        build_arg_parser().parse_args(["--state-drop", "1.5"])


def test_help_lists_flags_and_import_has_no_side_effects():
    out = subprocess.run([sys.executable, "-m", "sim", "--help"], capture_output=True, text=True,
                         timeout=120, cwd=REPO_ROOT)
    assert out.returncode == 0
    for flag in ("--domain", "--interface", "--lockstep", "--state-latency-ms", "--cmd-latency-ms",
                 "--state-drop", "--cmd-drop", "--push", "--crc-corrupt", "--armature-scale", "--damping-scale",
                 "--frictionloss-scale", "--remote-script", "--viewer", "--no-band", "--band-release-after",
                 "--gyro-noise", "--accel-bias"):
        assert flag in out.stdout, flag
    probe = ("import threading, sim.cli, sim.node, comm.sim_msgs, comm.sim_process; from comm import dds; "
             "from unitree_sdk2py.core.channel import ChannelFactory; "
             "assert dds.dds_initialized() is None; "
             "assert getattr(ChannelFactory, '_ChannelFactory__participant', None) is None; "
             "assert threading.active_count() == 1, threading.enumerate()")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr


def test_unknown_interface_exits_with_a_clear_error(fresh_domain):
    out = subprocess.run([sys.executable, "-m", "sim", "--interface", "nosuch0", "--domain", str(fresh_domain)],
                         capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert out.returncode == 2
    assert "network interface 'nosuch0' does not exist; available:" in out.stderr
    assert "Traceback" not in out.stderr


def test_viewer_without_a_display_is_a_clear_error(fresh_domain):
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    out = subprocess.run([sys.executable, "-m", "sim", "--viewer", "--busy-check-s", "0",
                          "--domain", str(fresh_domain)],
                         capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, env=env)
    assert out.returncode == 2 and "--viewer needs a display" in out.stderr, out.stderr
