"""The simulated robot: C MuJoCo bridge model at 1 kHz, the drives' PD, the pelvis IMU, the elastic band, pushes.

Every physics step applies per motor tau = tau_ff + kp (q* - q) + kd (dq* - dq) from the drives' latest set-point
(robots.physics.pd_torque), clipped to `g1.TORQUE_LIMIT` (a disabled motor, motor mode 0: no torque; before any
set-point: zero torque). The IMU accelerometer is MuJoCo's from the previous physics step (1 ms old); everything
else read between steps is of the same instant. The floor's contact forces (`record_floor_contacts`) are those the
last step applied: MuJoCo's contact list and constraint forces agree only between mj_step2 and the next mj_step1,
which rebuilds the contact list for the new positions and leaves the force array of the old one (read after it,
mj_contactForce returns another contact's force, or bytes of another array, wherever the contact set changed).

The elastic band (on at start-up unless disabled) is a spring-damper pulling the pelvis to (x0, y0, band height)
plus a torsional spring keeping it upright: a harness to hang the robot from while a deploy loop blends to its
standing pose.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import mujoco
import numpy as np

from comm.hg import MOTOR_MODE_DISABLE, LowCmdArrays
from plant.config import PlantConfig, Push
from plant.faults import PushSchedule
from robots import calibration as C
from robots import g1
from robots.model import ModelError, build_bridge_spec, motor_dof_adr, motor_qpos_adr
from robots.physics import pd_torque, torque_speed_bounds


@dataclasses.dataclass(frozen=True)
class Setpoint:
    """What the 29 drives hold until the next set-point: targets, gains, feed-forward; `enabled` False where a motor
    is disabled (None: all enabled)."""

    q: np.ndarray
    kp: np.ndarray
    kd: np.ndarray
    dq: np.ndarray | float = 0.0
    tau_ff: np.ndarray | float = 0.0
    enabled: np.ndarray | None = None

    @classmethod
    def of_lowcmd(cls, cmd: LowCmdArrays) -> "Setpoint":
        n = g1.NUM_MOTORS
        return cls(cmd.q[:n], cmd.kp[:n], cmd.kd[:n], cmd.dq[:n], cmd.tau[:n], cmd.mode[:n] != MOTOR_MODE_DISABLE)


def drive_torque(sp: Setpoint | None, q: np.ndarray, dq: np.ndarray,
                 envelope: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(demanded, applied) torque of the 29 drives at joint state (q, dq): robots.physics.pd_torque of the set-point,
    and that clipped to the motor limits (`envelope`: to the torque-speed envelope at dq,
    robots.physics.torque_speed_bounds); both zero for disabled motors and before any set-point."""
    if sp is None:
        return np.zeros(g1.NUM_MOTORS), np.zeros(g1.NUM_MOTORS)
    demand = pd_torque(sp.q, q, dq, sp.kp, sp.kd, dq_target=sp.dq, tau_ff=sp.tau_ff)
    if envelope:
        lo, hi = torque_speed_bounds(dq, g1.TORQUE_LIMIT, g1.VELOCITY_LIMIT)
        applied = np.clip(demand, lo, hi)
    else:
        applied = np.clip(demand, -g1.TORQUE_LIMIT, g1.TORQUE_LIMIT)
    if sp.enabled is not None:
        demand, applied = np.where(sp.enabled, demand, 0.0), np.where(sp.enabled, applied, 0.0)
    return demand, applied


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
class FloorContacts:
    """The robot-floor contacts of one physics step: the robot's geom, its distance to the floor at the step's start
    (m, negative: penetration) and the floor's normal force on it during the step (N)."""

    geom: np.ndarray
    dist: np.ndarray
    normal_force: np.ndarray

    @classmethod
    def none(cls) -> "FloorContacts":
        return cls(np.zeros(0, int), np.zeros(0), np.zeros(0))


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


class Plant:
    """The simulated robot: C MuJoCo bridge model, drive PD, IMU, elastic band, pushes.

    Single-threaded and deterministic; no DDS. `step()` advances one physics step with the drives' current
    set-point. Invariant between steps: position/velocity stages (kinematics, contacts, gyro) are computed for the
    current qpos/qvel (mj_step1 after every mj_step2), so the state read between steps is of one instant and PD uses
    exactly that state. `calibration`: a calibration mapping (robots.calibration.load) whose joint parameters are
    applied to the compiled model. `record_floor_contacts`: keep each step's robot-floor contacts and forces in
    `floor_contacts` (read between mj_step2 and mj_step1, where the two agree; off by default: the bridge's
    real-time loop does not pay for it).
    """

    def __init__(self, cfg: PlantConfig = PlantConfig(), calibration: Mapping | None = None,
                 record_floor_contacts: bool = False):
        self.cfg = cfg
        self.record_floor_contacts = record_floor_contacts
        self.floor_contacts = FloorContacts.none()
        self._force6 = np.zeros(6)
        spec = build_bridge_spec(cfg.model)
        _ensure_imu_sensors(spec)
        self.model = m = spec.compile()
        if calibration is not None:
            C.apply_to_model(m, calibration, cfg.model.mjcf)
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
        self.setpoint: Setpoint | None = None
        self.tau = np.zeros(g1.NUM_MOTORS)  # applied by the last step
        self.tau_demand = np.zeros(g1.NUM_MOTORS)  # before the motor limits
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
        """Home keyframe, zero torque until the next set-point, band as configured; scheduled pushes stay."""
        m, d = self.model, self.data
        mujoco.mj_resetDataKeyframe(m, d, self.home_key)
        mujoco.mj_forward(m, d)
        self._keep_floor_contacts()
        self.setpoint = None
        self.tau = np.zeros(g1.NUM_MOTORS)
        self.tau_demand = np.zeros(g1.NUM_MOTORS)
        self.pushes.clear_active()
        self.set_band(self.cfg.band.enabled)
        if count:
            self.resets += 1

    def reset_to(self, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """A given state instead of the home keyframe (otherwise as `reset`, not counted)."""
        self.reset(count=False)
        self.data.qpos[:], self.data.qvel[:] = qpos, qvel
        mujoco.mj_forward(self.model, self.data)
        self._keep_floor_contacts()

    def set_command(self, cmd: LowCmdArrays | None) -> None:
        """An accepted LowCmd becomes the drives' set-point (None: zero torque)."""
        self.setpoint = None if cmd is None else Setpoint.of_lowcmd(cmd)

    def set_drive(self, q: np.ndarray, kp: np.ndarray, kd: np.ndarray) -> None:
        """A position set-point for all 29 drives (no feed-forward, zero target velocity)."""
        self.setpoint = Setpoint(q, kp, kd)

    def set_band(self, engaged: bool) -> None:
        if engaged:
            self.band_anchor = np.array([self.data.qpos[0], self.data.qpos[1], self.cfg.band.height])
        self.band_engaged = bool(engaged)

    def push(self, force: Sequence[float], duration: float) -> None:
        """A push from now."""
        self.pushes.add(self.clock, force, duration, self.dt)

    def schedule(self, push: Push) -> None:
        """A push at `push.time` on the plant clock."""
        self.pushes.schedule(push)

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
        self.tau_demand, self.tau = drive_torque(self.setpoint, d.qpos[self.qadr], d.qvel[self.dadr],
                                                 self.cfg.torque_speed_envelope)
        d.ctrl[:] = self.tau
        d.xfrc_applied[self.base_body] = self._external_force()
        mujoco.mj_step2(m, d)
        self._keep_floor_contacts()
        self.steps += 1
        mujoco.mj_step1(m, d)

    def _keep_floor_contacts(self) -> None:
        """Between mj_forward / mj_step2 and the next mj_step1: d.contact and the constraint forces agree."""
        if not self.record_floor_contacts:
            return
        idx, geom = self._on_floor()
        force = np.zeros(len(idx))
        for j, i in enumerate(idx):
            mujoco.mj_contactForce(self.model, self.data, int(i), self._force6)
            force[j] = self._force6[0]
        self.floor_contacts = FloorContacts(geom, np.asarray(self.data.contact.dist[idx], float), force)

    def _on_floor(self) -> tuple[np.ndarray, np.ndarray]:
        """(indices into d.contact, the robot's geom) of the robot-floor contacts in d.contact."""
        d = self.data
        geoms = np.asarray(d.contact.geom[: d.ncon]).reshape(-1, 2)
        idx = np.flatnonzero((geoms == self.floor_geom).any(axis=1))
        return idx, np.where(geoms[idx, 0] == self.floor_geom, geoms[idx, 1], geoms[idx, 0])

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
        feet = self.geom_foot[self._on_floor()[1]]
        return np.array([(feet == i).any() for i in range(2)])

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
