"""The simulated robot: C MuJoCo bridge model, drive PD, IMU, elastic band, pushes. No DDS.

Every 1 kHz physics step applies per motor tau = tau_ff + kp (q* - q) + kd (dq* - dq) from the
latest accepted LowCmd (robots.physics.pd_torque), clipped to `g1.TORQUE_LIMIT` (motor mode 0:
no torque; before any command: zero torque). The IMU accelerometer is MuJoCo's from the previous
physics step (1 ms old); everything else read between steps is of the same instant.

The elastic band (on at start-up unless disabled) is a spring-damper pulling the pelvis to
(x0, y0, band height) plus a torsional spring keeping it upright: a harness to hang the robot
from while a deploy loop blends to its standing pose.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import mujoco
import numpy as np

from comm.hg import MOTOR_MODE_DISABLE, LowCmdArrays
from robots import g1
from robots.model import ModelError, build_bridge_spec, motor_dof_adr, motor_qpos_adr
from robots.physics import pd_torque
from sim.config import BridgeConfig
from sim.faults import PushSchedule


def drive_torque(cmd: LowCmdArrays | None, q: np.ndarray, dq: np.ndarray) -> np.ndarray:
    """The drives' torque for the 29 motors: robots.physics.pd_torque of the command's fields,
    clipped to the motor limits; zero for motors in mode 0 and when no command was ever accepted."""
    n = g1.NUM_MOTORS
    if cmd is None:
        return np.zeros(n)
    tau = pd_torque(cmd.q[:n], q, dq, cmd.kp[:n], cmd.kd[:n], dq_target=cmd.dq[:n], tau_ff=cmd.tau[:n],
                    tau_max=g1.TORQUE_LIMIT)
    return np.where(cmd.mode[:n] != MOTOR_MODE_DISABLE, tau, 0.0)


def _ensure_imu_sensors(spec: mujoco.MjSpec) -> None:
    """Gyro and accelerometer on the pelvis IMU site (added when the MJCF has none)."""
    have = {(s.type, s.objname) for s in spec.sensors if s.objtype == mujoco.mjtObj.mjOBJ_SITE}
    for typ, name in ((mujoco.mjtSensor.mjSENS_GYRO, "bridge_imu_gyro"),
                      (mujoco.mjtSensor.mjSENS_ACCELEROMETER, "bridge_imu_accelerometer")):
        if (typ, g1.IMU_SITE) not in have:
            s = spec.add_sensor()
            s.name, s.type, s.objtype, s.objname = name, typ, mujoco.mjtObj.mjOBJ_SITE, g1.IMU_SITE


def _sensor_slice(m: mujoco.MjModel, typ: mujoco.mjtSensor, site: int) -> slice:
    for i in range(m.nsensor):
        if m.sensor_type[i] == typ and m.sensor_objtype[i] == mujoco.mjtObj.mjOBJ_SITE and m.sensor_objid[i] == site:
            return slice(m.sensor_adr[i], m.sensor_adr[i] + m.sensor_dim[i])
    raise ModelError(f"no {typ.name} sensor on site {g1.IMU_SITE!r}")


@dataclasses.dataclass(frozen=True)
class SensorState:
    """What the robot measures, exact (noise is added by the bridge on publication)."""

    tick: int
    q: np.ndarray
    dq: np.ndarray
    ddq: np.ndarray
    tau: np.ndarray
    quat: np.ndarray
    gyro: np.ndarray
    acc: np.ndarray


@dataclasses.dataclass(frozen=True)
class GroundTruth:
    tick: int
    sim_time: float
    clock: float
    pos: np.ndarray
    quat: np.ndarray
    lin_vel_world: np.ndarray
    lin_vel_body: np.ndarray
    ang_vel_world: np.ndarray
    ang_vel_body: np.ndarray
    foot_contact: np.ndarray  # (2,) bool
    foot_height: np.ndarray
    band: bool
    resets: int


class BridgeSim:
    """The simulated robot: C MuJoCo bridge model, drive PD, IMU, elastic band, pushes.

    Single-threaded and deterministic; no DDS. `step()` advances one physics step with the
    current command. Invariant between steps: position/velocity stages (kinematics, contacts,
    gyro) are computed for the current qpos/qvel (mj_step1 after every mj_step2), so the state
    read between steps is of one instant and PD uses exactly that state.
    """

    def __init__(self, cfg: BridgeConfig = BridgeConfig()):
        self.cfg = cfg
        spec = build_bridge_spec(cfg.model)
        _ensure_imu_sensors(spec)
        self.model = m = spec.compile()
        self.data = mujoco.MjData(m)
        self.dt = float(m.opt.timestep)
        self.qadr = motor_qpos_adr(m)
        self.dadr = motor_dof_adr(m)
        self.imu_site = m.site(g1.IMU_SITE).id
        self.gyro_adr = _sensor_slice(m, mujoco.mjtSensor.mjSENS_GYRO, self.imu_site)
        self.acc_adr = _sensor_slice(m, mujoco.mjtSensor.mjSENS_ACCELEROMETER, self.imu_site)
        self.foot_sites = np.array([m.site(n).id for n in g1.FOOT_SITES])
        self.base_body = m.body(g1.BASE_BODY).id
        self.floor_geom = m.geom("floor").id
        self.geom_foot = np.full(m.ngeom, -1)
        for i, name in enumerate(g1.FOOT_BODIES):
            self.geom_foot[m.geom_bodyid == m.body(name).id] = i
        self.home_key = m.key("home").id
        self.steps = 0  # monotonic physics steps since start
        self.resets = 0
        self.command: LowCmdArrays | None = None
        self.tau = np.zeros(g1.NUM_MOTORS)
        self.band_engaged = cfg.band.enabled
        self.band_anchor = np.zeros(3)
        self.pushes = PushSchedule(cfg.pushes)
        self._band_release_pending = cfg.band.enabled and cfg.band.release_after is not None
        self._quat = np.zeros(4)
        self.reset(count=False)

    # -- clock
    @property
    def clock(self) -> float:
        return self.steps * self.dt

    @property
    def tick(self) -> int:
        return int(round(self.steps * self.dt * 1000.0)) & 0xFFFFFFFF

    # -- commands and events
    def reset(self, count: bool = True) -> None:
        """Home keyframe, zero torque until the next command, band as configured."""
        m, d = self.model, self.data
        mujoco.mj_resetDataKeyframe(m, d, self.home_key)
        mujoco.mj_forward(m, d)
        self.command = None
        self.tau = np.zeros(g1.NUM_MOTORS)
        self.pushes.clear_active()
        self.set_band(self.cfg.band.enabled)
        if count:
            self.resets += 1

    def set_command(self, cmd: LowCmdArrays | None) -> None:
        self.command = cmd

    def set_band(self, engaged: bool) -> None:
        if engaged:
            self.band_anchor = np.array([self.data.qpos[0], self.data.qpos[1], self.cfg.band.height])
        self.band_engaged = bool(engaged)

    def push(self, force: Sequence[float], duration: float) -> None:
        self.pushes.add(self.clock, force, duration, self.dt)

    def _scheduled(self) -> None:
        self.pushes.start_due(self.clock, self.dt)
        if self._band_release_pending and self.clock + 1e-9 >= self.cfg.band.release_after:
            self._band_release_pending = False
            self.set_band(False)

    def _external_force(self) -> np.ndarray:
        d, b = self.data, self.cfg.band
        wrench = np.zeros(6)
        if self.band_engaged:
            wrench[:3] = b.stiffness * (self.band_anchor - d.qpos[:3]) - b.damping * d.qvel[:3]
            rot = d.xmat[self.base_body].reshape(3, 3)
            zx, zy = rot[0, 2], rot[1, 2]  # body z axis; z_body x z_world = (zy, -zx, 0), |.| = sin(tilt)
            omega_world = rot @ d.qvel[3:6]
            wrench[3:] = b.rot_stiffness * np.array([zy, -zx, 0.0]) - b.rot_damping * omega_world
        wrench[:3] += self.pushes.force(self.clock)
        return wrench

    # -- physics
    def step(self) -> None:
        m, d = self.model, self.data
        self._scheduled()
        self.tau = drive_torque(self.command, d.qpos[self.qadr], d.qvel[self.dadr])
        d.ctrl[:] = self.tau
        d.xfrc_applied[self.base_body] = self._external_force()
        mujoco.mj_step2(m, d)
        self.steps += 1
        mujoco.mj_step1(m, d)

    # -- readouts
    def sensor_state(self) -> SensorState:
        d = self.data
        mujoco.mju_mat2Quat(self._quat, d.site_xmat[self.imu_site])
        return SensorState(
            tick=self.tick, q=d.qpos[self.qadr].copy(), dq=d.qvel[self.dadr].copy(),
            ddq=d.qacc[self.dadr].copy(), tau=self.tau.copy(), quat=self._quat.copy(),
            gyro=d.sensordata[self.gyro_adr].copy(), acc=d.sensordata[self.acc_adr].copy(),
        )

    def foot_contacts(self) -> np.ndarray:
        d = self.data
        contact = np.zeros(2, dtype=bool)
        if d.ncon:
            geoms = d.contact.geom[: d.ncon]
            with_floor = (geoms == self.floor_geom).any(axis=1)
            feet = self.geom_foot[geoms]
            for i in range(2):
                contact[i] = bool((with_floor & (feet == i).any(axis=1)).any())
        return contact

    def ground_truth(self) -> GroundTruth:
        d = self.data
        rot = d.xmat[self.base_body].reshape(3, 3)
        v_world = d.qvel[0:3].copy()  # free joint: linear velocity in world, angular in body
        w_body = d.qvel[3:6].copy()
        return GroundTruth(
            tick=self.tick, sim_time=float(d.time), clock=self.clock, pos=d.qpos[0:3].copy(),
            quat=d.qpos[3:7].copy(), lin_vel_world=v_world, lin_vel_body=rot.T @ v_world,
            ang_vel_world=rot @ w_body, ang_vel_body=w_body, foot_contact=self.foot_contacts(),
            foot_height=d.site_xpos[self.foot_sites, 2].copy(), band=self.band_engaged,
            resets=self.resets,
        )
