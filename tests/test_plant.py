"""The plant eval runs on is the sim bridge's (plant.robot.Plant): what eval reads is the robot's measurement of
the same instant, its pushes land on the plant clock at episode times, and nothing of an episode leaks into the next.
"""
import numpy as np
import pytest

from eval.sim import EvalSim
from plant.robot import Plant
from robots import g1


def _hold(sim: EvalSim, steps: int, ts0: float = 0.0) -> list[np.ndarray]:
    forces = []
    for k in range(steps):
        sim.drive(g1.DEFAULT_JOINT_POS, g1.KP, g1.KD, ts0 + k * 1e-3)
        sim.step()
        forces.append(sim.d.xfrc_applied[sim.pelvis, :3].copy())
    return forces


def test_eval_reads_the_plants_sensors_of_the_current_instant():
    sim = EvalSim()
    assert isinstance(sim.plant, Plant) and sim.m is sim.plant.model and sim.d is sim.plant.data
    sim.reset()
    sim.push(0.0, 0.05, np.array([0.0, 120.0, 0.0]))  # sets the pelvis turning: a gyro that changes every step
    _hold(sim, 30)
    q, dq, quat, gyro, acc, tau = sim.sensors()
    s = sim.plant.sensor_state()
    for a, b in ((q, s.q), (dq, s.dq), (quat, s.quat), (gyro, s.gyro), (acc, s.acc), (tau, s.tau)):
        np.testing.assert_array_equal(a, b)
    # the IMU site is aligned with the pelvis: its gyro is the free joint's body angular velocity now, not a step ago
    np.testing.assert_allclose(gyro, sim.d.qvel[3:6], rtol=0, atol=1e-12)
    assert np.abs(gyro).max() > 0.05
    np.testing.assert_array_equal(tau, np.clip(sim.plant.tau_demand, -g1.TORQUE_LIMIT, g1.TORQUE_LIMIT))


def test_pushes_act_at_episode_times_and_do_not_leak_into_the_next_episode():
    sim = EvalSim()
    sim.reset()
    _hold(sim, 137)  # the plant clock runs on across resets: the next episode starts at 0.137 s of it
    sim.reset()
    f = np.array([30.0, -40.0, 0.0])
    sim.push(0.0105, 0.0305, f)  # episode time: steps starting at 11 ... 30 ms carry it (20 steps)
    sim.push(0.5, 0.6, f)  # never reached: the episode ends first
    forces = _hold(sim, 40)
    on = [k for k, x in enumerate(forces) if np.any(x)]
    assert on == list(range(11, 31))
    np.testing.assert_array_equal(forces[11], f)
    sim.reset()
    assert not np.any(_hold(sim, 700))  # the 0.5 s push of the last episode is gone


def test_torque_speed_envelope_hand_values_and_the_plant_applies_it():
    """robots.physics.torque_speed_bounds (the seed's envelope, tau_peak = tau_max): full torque at rest, half in
    the direction of motion at half the velocity limit, braking always; the plant applies it when configured."""
    from eval.bridge_setup import parse_perturbation
    from plant.config import PlantConfig
    from plant.robot import Setpoint, drive_torque
    from robots.physics import torque_speed_bounds

    lo, hi = torque_speed_bounds(np.array([0.0, 16.0, -16.0, 40.0]), 88.0, 32.0)
    np.testing.assert_allclose(hi, [88.0, 44.0, 88.0, 0.0])
    np.testing.assert_allclose(lo, [-88.0, -88.0, -44.0, -88.0])
    sp = Setpoint(np.full(g1.NUM_MOTORS, 1.0), np.full(g1.NUM_MOTORS, 1000.0), np.zeros(g1.NUM_MOTORS))
    q, dq = np.zeros(g1.NUM_MOTORS), 0.5 * g1.VELOCITY_LIMIT
    demand, plain = drive_torque(sp, q, dq)
    _, env = drive_torque(sp, q, dq, envelope=True)
    np.testing.assert_array_equal(plain, g1.TORQUE_LIMIT)  # 1000 Nm/rad x 1 rad: saturated either way
    np.testing.assert_allclose(env, 0.5 * g1.TORQUE_LIMIT)
    assert Plant(PlantConfig(torque_speed_envelope=True)).cfg.torque_speed_envelope
    assert EvalSim(parse_perturbation("torque_speed=1")).plant.cfg.torque_speed_envelope
    assert not EvalSim().plant.cfg.torque_speed_envelope


def test_floor_forces_are_the_ones_the_step_applied_newtons_second_law_on_the_whole_robot():
    """The robot dropped 6 cm with an 8 deg roll, so its feet land one after the other and the set of floor contacts
    changes many times. Every step the floor's normal forces that eval reads must account for the whole robot's
    vertical momentum change: sum F = M (dv_com_z / dt + g) (a flat floor: friction has no vertical part). Read after
    mj_step1 (MuJoCo's contact list of the new positions against the old step's forces) they missed it by up to
    1.4e4 N at the steps where the contact set changed; the plant reads them between mj_step2 and mj_step1."""
    import mujoco

    from robots.physics import GRAVITY

    sim = EvalSim()
    m, d = sim.m, sim.d
    sim.reset()
    q0 = d.qpos.copy()
    q0[2] += 0.06
    a = np.radians(8.0)
    q0[3:7] = [np.cos(a / 2), np.sin(a / 2), 0.0, 0.0]
    sim.reset_to(q0, np.zeros(m.nv))
    mass, dt = float(m.body_subtreemass[0]), float(m.opt.timestep)
    target = d.qpos[sim.qadr].copy()

    def com_vz() -> float:
        mujoco.mj_subtreeVel(m, d)
        return float(d.subtree_linvel[0, 2])

    v, residual, counts, soles = com_vz(), [], [], []
    for k in range(800):
        sim.drive(target, np.full(g1.NUM_MOTORS, 150.0), np.full(g1.NUM_MOTORS, 4.0), k * dt)
        sim.step()
        _, fz, _ = sim.floor_contacts()
        v1 = com_vz()
        residual.append(fz - mass * ((v1 - v) / dt + GRAVITY))
        counts.append(sim.plant.floor_contacts.geom.size)
        soles.append(sim.sole_forces().sum())
        v = v1
    assert (np.diff(counts) != 0).sum() >= 8  # the contact set changed step to step this often
    assert np.mean(soles[-100:]) == pytest.approx(mass * GRAVITY, rel=0.02)  # settled, on its soles
    # the discrete COM velocity's own error at 1 kHz is under 2 N; the weight is 327 N
    assert np.abs(residual).max() < 0.01 * mass * GRAVITY
