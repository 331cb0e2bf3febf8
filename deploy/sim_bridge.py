"""Sim bridge: a C MuJoCo G1 that is the robot on DDS.

    python -m deploy.sim_bridge [--domain 1] [--interface lo] [--lockstep] [...]   (`make sim`)

Speaks the robot's protocol with unitree_sdk2py's DDS set-up and IDL types (ChannelFactory
participant; LowState_ written through a ChannelPublisher, LowCmd_ read as raw payloads of the
SDK type and decoded by `deploy.protocol`, ~20x cheaper than the SDK's Python deserializer).
It publishes `rt/lowstate` (unitree_hg LowState_) at 500 Hz with tick (ms), mode_machine 5
(29-DoF rev 1.0), pelvis IMU (quaternion w,x,y,z, gyro and accelerometer in the IMU frame, rpy),
motor q/dq/ddq/tau_est for the 29 motors, wireless_remote and CRC; it subscribes `rt/lowcmd` and,
like the robot, ignores (and counts) commands with a bad CRC or another mode_machine, and also
those with non-finite fields or mode_pr != 0 (only pitch/roll mode is simulated). Every 1 kHz physics
step applies per motor tau = tau_ff + kp (q* - q) + kd (dq* - dq) from the latest accepted
LowCmd, clipped to `g1.TORQUE_LIMIT` (motor mode 0: no torque; before any command: zero torque).

Sim-only topics (`deploy.sim_msgs`): rt/sim/remote (virtual remote), rt/sim/control (reset,
push, elastic band, pause LowState), rt/sim/ground_truth (evaluation only), rt/sim/status.

Modes
- real time (default): physics scheduled against absolute 1 ms deadlines; LowState every 2nd
  step. A step later than `max_lag_s` behind schedule re-bases the schedule (counted as overrun)
  instead of bursting to catch up.
- lockstep (`--lockstep`): physics advances only when a LowCmd arrives: each received LowCmd
  (valid or not, so rejected commands still let time pass) runs `--steps-per-cmd` (2) physics
  steps, then one LowState is published. Nothing else advances time, so a client that sends its
  next command after each LowState gets a deterministic run. While no command arrives the latest
  LowState is re-published every 0.1 s (same tick) so a late subscriber can start.

Timing conventions: every scheduled thing (latency, pushes, remote script, band release,
pause) uses the bridge clock = physics steps x dt since start (monotonic across resets), so
lockstep runs are reproducible. The IMU accelerometer is MuJoCo's from the previous physics step
(1 ms old); everything else in a LowState is of the same instant.

The elastic band (on at start-up unless --no-band) is a spring-damper pulling the pelvis to
(x0, y0, band height) plus a torsional spring keeping it upright: a harness to hang the robot
from while a deploy loop blends to its standing pose. Release it with rt/sim/control "band" 0,
or --band-release-after S.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import math
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import mujoco
import numpy as np

from deploy import protocol
from robots import g1
from robots.model import BridgeModelConfig, ModelError, build_bridge_spec, motor_dof_adr, motor_qpos_adr

READY_LINE = "sim bridge ready"
REPO_ROOT = Path(__file__).resolve().parents[1]

# ----------------------------------------------------------------------------- configuration


@dataclasses.dataclass(frozen=True)
class Push:
    """External force (N, world frame) on the pelvis CoM from `time` (bridge clock, s)."""

    time: float
    force: tuple[float, float, float]
    duration: float = 0.1


@dataclasses.dataclass(frozen=True)
class RemoteEvent:
    """Scripted remote input at `time` (bridge clock, s): press buttons for `hold` s, set sticks."""

    time: float
    buttons: int = 0
    hold: float = 0.2
    sticks: tuple[tuple[str, float], ...] = ()


@dataclasses.dataclass(frozen=True)
class BandConfig:
    enabled: bool = True  # engaged at start-up and after every reset
    release_after: float | None = None  # s of bridge clock; None: only by control message
    height: float = g1.DEFAULT_BASE_HEIGHT  # pelvis anchor height (m)
    stiffness: float = 5000.0  # N/m: ~6.5 cm sag carrying the whole 33 kg robot
    damping: float = 600.0  # N s/m (~0.75 of critical for 33 kg)
    rot_stiffness: float = 500.0  # N m/rad, keeps the pelvis upright (yaw free)
    rot_damping: float = 60.0  # N m s/rad


@dataclasses.dataclass(frozen=True)
class NoiseConfig:
    """Sensor noise on the published LowState (ground truth stays exact)."""

    gyro_std: float = 0.0  # rad/s
    accel_std: float = 0.0  # m/s^2
    joint_pos_std: float = 0.0  # rad
    joint_vel_std: float = 0.0  # rad/s
    gyro_bias: tuple[float, float, float] = (0.0, 0.0, 0.0)
    accel_bias: tuple[float, float, float] = (0.0, 0.0, 0.0)


@dataclasses.dataclass(frozen=True)
class FaultConfig:
    state_latency_ms: float = 0.0  # LowState published this much bridge time after it was measured
    cmd_latency_ms: float = 0.0  # LowCmd applied this much bridge time after it was received
    state_drop: float = 0.0  # probability a LowState is not published
    cmd_drop: float = 0.0  # probability a received LowCmd is discarded
    crc_corrupt: float = 0.0  # probability a published LowState carries a wrong CRC

    def any(self) -> bool:
        return any(v != 0 for v in dataclasses.astuple(self))


@dataclasses.dataclass(frozen=True)
class BridgeConfig:
    domain: int = protocol.SIM_DOMAIN
    interface: str | None = protocol.SIM_INTERFACE
    lockstep: bool = False
    steps_per_cmd: int = 2  # lockstep: physics steps per received LowCmd
    duration: float | None = None  # stop after this many seconds of bridge clock
    seed: int = 0
    viewer: bool = False
    model: BridgeModelConfig = BridgeModelConfig()
    band: BandConfig = BandConfig()
    noise: NoiseConfig = NoiseConfig()
    faults: FaultConfig = FaultConfig()
    pushes: tuple[Push, ...] = ()
    remote_script: tuple[RemoteEvent, ...] = ()
    gt_decimation: int = 1  # ground truth with every n-th LowState
    status_period: float = 0.1  # s (wall) between SimStatus_ messages
    busy_check_s: float = 0.5  # look this long for another rt/lowstate publisher (0: skip)
    allow_busy_domain: bool = False
    max_lag_s: float = 0.02  # real time: re-base the schedule beyond this lag
    lockstep_idle_s: float = 0.1  # lockstep: re-publish the latest LowState this often when idle
    verbose: bool = True


class BusyDomainError(RuntimeError):
    """Another publisher of rt/lowstate (a bridge or a robot) is on the domain."""


class BridgeLaunchError(RuntimeError):
    pass


class ViewerError(RuntimeError):
    """--viewer could not open a window."""


# ----------------------------------------------------------------------------- physics core


def pd_torque(cmd: protocol.LowCmdArrays | None, q: np.ndarray, dq: np.ndarray) -> np.ndarray:
    """The drives' torque for the 29 motors: tau + kp (q* - q) + kd (dq* - dq), clipped to the
    motor limits; zero for motors in mode 0 and when no command was ever accepted."""
    n = g1.NUM_MOTORS
    if cmd is None:
        return np.zeros(n)
    tau = cmd.tau[:n] + cmd.kp[:n] * (cmd.q[:n] - q) + cmd.kd[:n] * (cmd.dq[:n] - dq)
    tau = np.where(cmd.mode[:n] != protocol.MOTOR_MODE_DISABLE, tau, 0.0)
    return np.clip(tau, -g1.TORQUE_LIMIT, g1.TORQUE_LIMIT)


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
        self.command: protocol.LowCmdArrays | None = None
        self.tau = np.zeros(g1.NUM_MOTORS)
        self.band_engaged = cfg.band.enabled
        self.band_anchor = np.zeros(3)
        self._pushes_active: list[tuple[float, np.ndarray]] = []  # (end clock, force)
        self._pushes_pending = sorted(cfg.pushes, key=lambda p: p.time)
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
        self._pushes_active.clear()
        self.set_band(self.cfg.band.enabled)
        if count:
            self.resets += 1

    def set_command(self, cmd: protocol.LowCmdArrays | None) -> None:
        self.command = cmd

    def set_band(self, engaged: bool) -> None:
        if engaged:
            self.band_anchor = np.array([self.data.qpos[0], self.data.qpos[1], self.cfg.band.height])
        self.band_engaged = bool(engaged)

    def push(self, force: Sequence[float], duration: float) -> None:
        self._pushes_active.append((self.clock + max(duration, self.dt), np.asarray(force, dtype=float)))

    def _scheduled(self) -> None:
        while self._pushes_pending and self._pushes_pending[0].time <= self.clock + 1e-9:
            p = self._pushes_pending.pop(0)
            self.push(p.force, p.duration)
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
        if self._pushes_active:
            self._pushes_active = [(end, f) for end, f in self._pushes_active if end > self.clock + 1e-9]
            for _, f in self._pushes_active:
                wrench[:3] += f
        return wrench

    # -- physics
    def step(self) -> None:
        m, d = self.model, self.data
        self._scheduled()
        self.tau = pd_torque(self.command, d.qpos[self.qadr], d.qvel[self.dadr])
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


# ----------------------------------------------------------------------------- remote, delays


class VirtualRemote:
    """The wireless remote's state, driven by a script and by rt/sim/remote messages."""

    def __init__(self, script: Sequence[RemoteEvent] = ()):
        self.buttons = 0
        self.sticks = {"lx": 0.0, "rx": 0.0, "ry": 0.0, "l2": 0.0, "ly": 0.0}
        self._releases: list[tuple[float, int]] = []
        self._script = sorted(script, key=lambda e: e.time)
        self._bytes: bytes | None = None

    def press(self, now: float, buttons: int, hold: float, sticks: Sequence[tuple[str, float]] = ()) -> None:
        self.buttons |= buttons
        if buttons and hold > 0:
            self._releases.append((now + hold, buttons))
        for k, v in sticks:
            self.sticks[k] = float(v)
        self._bytes = None

    def set(self, now: float, buttons: int, hold: float, **sticks: float) -> None:
        """Replace the whole remote state (a rt/sim/remote message)."""
        self.buttons = 0
        self._releases.clear()
        self.press(now, buttons, hold, tuple(sticks.items()))

    def update(self, now: float) -> None:
        while self._script and self._script[0].time <= now + 1e-9:
            e = self._script.pop(0)
            self.press(now, e.buttons, e.hold, e.sticks)
        if self._releases:
            due = [r for r in self._releases if r[0] <= now + 1e-9]
            if due:
                self._releases = [r for r in self._releases if r[0] > now + 1e-9]
                for _, mask in due:
                    self.buttons &= ~mask
                self._bytes = None

    def encode(self) -> bytes:
        if self._bytes is None:
            self._bytes = protocol.encode_remote(protocol.RemoteState(self.buttons, **self.sticks))
        return self._bytes


class DelayLine:
    """FIFO of items released at a due time (constant latency keeps it ordered)."""

    def __init__(self) -> None:
        self._q: collections.deque = collections.deque()

    def push(self, due: float, item: Any) -> None:
        self._q.append((due, item))

    def pop_due(self, now: float) -> list[Any]:
        out = []
        while self._q and self._q[0][0] <= now + 1e-9:
            out.append(self._q.popleft()[1])
        return out

    def clear(self) -> None:
        self._q.clear()

    def __len__(self) -> int:
        return len(self._q)


# ----------------------------------------------------------------------------- DDS bridge

COUNTERS = (
    "cmd_received", "cmd_accepted", "cmd_rejected_crc", "cmd_rejected_mode_machine",
    "cmd_rejected_mode_pr", "cmd_rejected_nonfinite", "cmd_rejected_malformed", "cmd_dropped", "state_published",
    "state_dropped", "state_paused", "state_crc_corrupted", "overruns", "control_rejected",
)
LOOP_PHASES = ("lock", "step", "publish", "sleep")  # real-time loop wall time, SimStatus_.loop_<phase>_s


class SimBridge:
    """The bridge: BridgeSim + DDS + scheduling. `run()` blocks (the CLI); `start()` runs it in a
    thread and returns once LowState is being published; `stop()` ends it.

        with SimBridge(BridgeConfig(domain=1, lockstep=True)) as bridge: ...

    unitree_sdk2py allows one DDS domain per process: an in-process bridge shares it with the
    process's clients (`protocol.init_dds`). For a bridge in its own process use
    `launch_bridge_process`.
    """

    def __init__(self, cfg: BridgeConfig = BridgeConfig(), log: Callable[[str], None] | None = None,
                 announce_ready: bool | None = None):
        if cfg.steps_per_cmd < 1 or cfg.gt_decimation < 1:
            raise ValueError("steps_per_cmd and gt_decimation must be >= 1")
        self.cfg = cfg
        self._log = log or ((lambda s: print(s, flush=True)) if cfg.verbose else (lambda s: None))
        # The ready line is the launch handshake (launch_bridge_process): printed even when quiet.
        self._announce_ready = cfg.verbose if announce_ready is None else announce_ready
        self.lock = threading.Lock()  # the physics lock: BridgeSim is touched only under it
        self.sim: BridgeSim | None = None
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.loop_seconds = dict.fromkeys(LOOP_PHASES, 0.0)  # real-time loop, wall s
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._cmd_inbox: collections.deque = collections.deque(maxlen=1024)
        self._cmd_event = threading.Event()
        self._ctl_inbox: collections.deque = collections.deque(maxlen=1024)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._rng = np.random.default_rng(cfg.seed)
        self._remote = VirtualRemote(cfg.remote_script)
        self._cmd_delay = DelayLine()
        self._state_delay = DelayLine()
        self._paused_until: float | None = None
        self._control_seq = 0
        self._remote_seq = 0
        self._status_due = False
        self._last_state_payload: bytes | None = None
        self._n_states = 0
        self._t_start = 0.0
        self._clock_start = 0.0
        self._channels: list[Any] = []
        self._cmd_reader: Any = None
        self._sim_topics: Any = None
        self._viewer: Any = None

    # -- lifecycle
    def start(self, timeout: float = 60.0) -> "SimBridge":
        self._thread = threading.Thread(target=self._thread_main, name="sim-bridge", daemon=True)
        self._thread.start()
        end = time.monotonic() + timeout
        while not self.ready.wait(0.05):
            if self._error is not None or not self._thread.is_alive():
                raise BridgeLaunchError(f"sim bridge failed to start: {self._error!r}") from self._error
            if time.monotonic() > end:
                self.stop()
                raise BridgeLaunchError(f"sim bridge not ready after {timeout} s")
        return self

    def _thread_main(self) -> None:
        try:
            self.run()
        except BaseException as e:  # reported by start()/stop(), never swallowed
            self._error = e

    def request_stop(self) -> None:
        self._stop.set()
        self._cmd_event.set()

    def stop(self, timeout: float = 10.0) -> None:
        self.request_stop()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError("sim bridge thread did not stop")
        if self._error is not None and not isinstance(self._error, KeyboardInterrupt):
            raise self._error

    def __enter__(self) -> "SimBridge":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stats(self) -> dict[str, Any]:
        out = dict(self.counters)
        sim = self.sim
        if sim is not None:
            out.update(tick=sim.tick, clock=sim.clock, band=sim.band_engaged, resets=sim.resets,
                       commanded=sim.command is not None, real_time_factor=self._rtf())
        return out

    def _rtf(self) -> float:
        wall = time.perf_counter() - self._t_start
        return (self.sim.clock - self._clock_start) / wall if self.sim and wall > 0 else 0.0

    # -- set-up
    def run(self) -> None:
        """Set up DDS and the model, then run until stop()/duration. Raises DDSInitError,
        BusyDomainError or ModelError with a message that says what to do."""
        try:
            self._setup()
            self.ready.set()
            if self._announce_ready:
                print(f"{READY_LINE} (Ctrl-C stops)", flush=True)
            if self.cfg.lockstep:
                self._run_lockstep()
            else:
                self._run_realtime()
        finally:
            self._teardown()
        self._log(self._summary())

    def _setup(self) -> None:
        cfg = self.cfg
        protocol.check_interface(cfg.interface)
        protocol.init_dds(cfg.domain, cfg.interface)
        note = protocol.multicast_note(cfg.interface) if cfg.interface else None
        if note:
            self._log(f"sim bridge: note: {note}")
        from deploy import sim_msgs

        self._sim_topics = sim_msgs.SimTopics()
        probe = self._start_busy_probe() if cfg.busy_check_s > 0 else None
        try:
            t0 = time.monotonic()
            self.sim = BridgeSim(cfg)  # compiling takes ~1 s: the probe listens meanwhile
            if probe is not None:
                self._finish_busy_probe(probe, cfg.busy_check_s - (time.monotonic() - t0))
        finally:
            if probe is not None:
                protocol.delete_entity(probe)
        self._open_channels()
        if cfg.viewer:
            self._open_viewer()
        self._banner()
        self._t_start = time.perf_counter()
        self._clock_start = self.sim.clock

    def _start_busy_probe(self) -> Any:
        from cyclonedds.builtin import BuiltinDataReader, BuiltinTopicDcpsPublication

        return BuiltinDataReader(self._sim_topics.participant, BuiltinTopicDcpsPublication)

    def _finish_busy_probe(self, reader: Any, wait: float) -> None:
        from cyclonedds.core import InstanceState

        if wait > 0:
            time.sleep(wait)
        others = []
        for s in reader.take(N=1024):
            info = getattr(s, "sample_info", None)
            alive = info is None or info.instance_state == InstanceState.Alive
            if alive and getattr(s, "topic_name", None) == protocol.TOPIC_LOWSTATE:
                others.append(s)
        if others:
            msg = (
                f"another publisher of {protocol.TOPIC_LOWSTATE} is on DDS domain {self.cfg.domain} "
                f"(participant {others[0].participant_key}): a sim bridge or a robot is already there. "
                f"Stop it, or start this bridge on another domain (--domain N) and point clients at it."
            )
            if not self.cfg.allow_busy_domain:
                raise BusyDomainError(msg + " (--allow-busy-domain starts anyway)")
            self._log(f"sim bridge: warning: {msg}")

    def _open_channels(self) -> None:
        from cyclonedds.core import Listener
        from cyclonedds.sub import DataReader
        from unitree_sdk2py.core.channel import ChannelPublisher
        from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowCmd_, LowState_

        from deploy import sim_msgs

        self._state_pub = ChannelPublisher(protocol.TOPIC_LOWSTATE, LowState_)
        self._state_pub.Init()
        self._channels.append(self._state_pub)
        # rt/lowcmd: the SDK's LowCmd_ type, read as raw payloads (cyclonedds' Python deserializer
        # costs ~0.3 ms per command, 15 % of a core at 500 Hz); decoded by deploy.protocol.
        t = self._sim_topics
        self._cmd_reader = DataReader(t.participant, t.topic(protocol.TOPIC_LOWCMD, LowCmd_),
                                      None, Listener(on_data_available=self._on_lowcmd_available))
        t._entities.append(self._cmd_reader)
        self._gt_writer = t.writer(sim_msgs.TOPIC_GROUND_TRUTH, keep_all=False)
        self._status_writer = t.writer(sim_msgs.TOPIC_STATUS, keep_all=False)
        t.reader(sim_msgs.TOPIC_CONTROL, lambda s: self._on_control("control", s))
        t.reader(sim_msgs.TOPIC_REMOTE, lambda s: self._on_control("remote", s))

    def _open_viewer(self) -> None:
        if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            # checked here: MuJoCo's viewer exits the whole process when GLFW cannot start
            raise ViewerError("--viewer needs a display (DISPLAY is not set); run headless without --viewer")
        try:
            import mujoco.viewer

            self._viewer = mujoco.viewer.launch_passive(self.sim.model, self.sim.data)
        except Exception as e:
            raise ViewerError(
                f"--viewer: could not open the MuJoCo viewer ({e}); it needs a display "
                "(run headless without --viewer)"
            ) from e

    def _banner(self) -> None:
        cfg, sim = self.cfg, self.sim
        rate = round(1.0 / sim.dt)
        mode = (f"lockstep: {cfg.steps_per_cmd} physics steps per LowCmd, one LowState after each"
                if cfg.lockstep else f"real time: physics {rate} Hz, LowState {rate // self._state_decimation} Hz")
        band = "off"
        if cfg.band.enabled:
            band = "on (release: rt/sim/control band 0" + (
                f", or after {cfg.band.release_after} s)" if cfg.band.release_after is not None else ")")
        from deploy import sim_msgs

        faults = ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(cfg.faults).items() if v) or "none"
        self._log(
            f"sim bridge: G1 29-DoF on DDS domain {cfg.domain}, interface {cfg.interface} ({mode})\n"
            f"  publishes : {protocol.TOPIC_LOWSTATE} (unitree_hg LowState_, mode_machine "
            f"{g1.MODE_MACHINE_29DOF_REV1}), {sim_msgs.TOPIC_GROUND_TRUTH}, {sim_msgs.TOPIC_STATUS}\n"
            f"  subscribes: {protocol.TOPIC_LOWCMD} (unitree_hg LowCmd_), {sim_msgs.TOPIC_REMOTE}, "
            f"{sim_msgs.TOPIC_CONTROL}\n"
            f"  elastic band {band}; faults: {faults}"
        )

    def _teardown(self) -> None:
        for ch in self._channels:
            try:
                protocol.close_channel(ch)
            except Exception:  # pragma: no cover - best effort on shutdown
                pass
        self._channels.clear()
        self._state_pub = None
        self._cmd_reader = None
        if self._sim_topics is not None:
            self._sim_topics.close()
            self._sim_topics = None
        if self._viewer is not None:
            self._viewer.close()
            self._viewer = None

    @property
    def _state_decimation(self) -> int:
        return max(1, int(round(g1.LOWSTATE_DT / self.sim.dt)))

    # -- DDS callbacks: store only, never touch the simulation
    def _on_lowcmd_available(self, reader: Any) -> None:
        for payload in protocol.take_raw_payloads(reader):
            self._on_lowcmd(payload)

    def _on_lowcmd(self, msg: Any) -> None:
        """A received LowCmd_ (raw payload or object) into the inbox; validated by the physics thread."""
        self._cmd_inbox.append(msg)
        self._cmd_event.set()

    def _on_control(self, kind: str, msg: Any) -> None:
        self._ctl_inbox.append((kind, msg))
        self._cmd_event.set()

    # -- physics thread (all below runs with self.lock held unless noted)
    def _pump_commands(self, received: Sequence[Any]) -> None:
        sim, f, c = self.sim, self.cfg.faults, self.counters
        for msg in received:
            c["cmd_received"] += 1
            if f.cmd_drop > 0 and self._rng.random() < f.cmd_drop:
                c["cmd_dropped"] += 1
                continue
            self._cmd_delay.push(sim.clock + f.cmd_latency_ms * 1e-3, msg)
        for msg in self._cmd_delay.pop_due(sim.clock):
            arrays, reason = protocol.check_lowcmd(msg)
            if reason is None:
                c["cmd_accepted"] += 1
                sim.set_command(arrays)
            else:
                c[f"cmd_rejected_{reason}"] += 1

    def _apply_controls(self) -> None:
        from deploy import sim_msgs

        sim = self.sim
        while self._ctl_inbox:
            kind, msg = self._ctl_inbox.popleft()
            self._status_due = True
            if kind == "remote":
                self._remote.set(sim.clock, int(msg.buttons), float(msg.hold_s), lx=msg.lx, rx=msg.rx,
                                 ry=msg.ry, l2=msg.l2, ly=msg.ly)
                self._remote_seq = int(msg.seq)
                continue
            op, v = msg.op, [float(x) for x in msg.value]
            if op == sim_msgs.OP_RESET:
                sim.reset()
                self._cmd_delay.clear()
                self._state_delay.clear()
            elif op == sim_msgs.OP_PUSH:
                sim.push(v[:3], v[3] if v[3] > 0 else 0.1)
            elif op == sim_msgs.OP_BAND:
                sim.set_band(v[0] > 0.5)
            elif op == sim_msgs.OP_PAUSE_STATE:
                self._paused_until = sim.clock + v[0] if v[0] > 0 else math.inf
            elif op == sim_msgs.OP_RESUME_STATE:
                self._paused_until = None
            else:
                self.counters["control_rejected"] += 1
                self._log(f"sim bridge: warning: unknown control op {op!r} ignored")
            self._control_seq = int(msg.seq)

    def _capture_state(self) -> np.ndarray:
        """LowState record of the current instant, with sensor noise (the CRC is filled)."""
        s, n = self.sim.sensor_state(), self.cfg.noise
        q, dq, gyro, acc = s.q, s.dq, s.gyro, s.acc
        rng = self._rng
        if n.joint_pos_std > 0:
            q = q + rng.normal(0.0, n.joint_pos_std, q.shape)
        if n.joint_vel_std > 0:
            dq = dq + rng.normal(0.0, n.joint_vel_std, dq.shape)
        gyro = gyro + np.asarray(n.gyro_bias)
        acc = acc + np.asarray(n.accel_bias)
        if n.gyro_std > 0:
            gyro = gyro + rng.normal(0.0, n.gyro_std, 3)
        if n.accel_std > 0:
            acc = acc + rng.normal(0.0, n.accel_std, 3)
        return protocol.lowstate_record(
            s.tick, q, dq, s.tau, s.quat, gyro, acc, protocol.quat_to_rpy(s.quat), ddq=s.ddq,
            remote=self._remote.encode(),
        )

    def lockstep_command(self, msg: Any) -> list[tuple[list[bytes], Any]]:
        """Lockstep for one received LowCmd_ (raw payload or object; rejected ones count too):
        `steps_per_cmd` physics steps, a LowState after the last. Takes the lock; returns what each
        step left to publish ([(LowState payloads, ground truth or None)]), published by the caller."""
        n = self.cfg.steps_per_cmd
        with self.lock:
            self._pump_commands([msg])
            return [self._advance(publish_state=i == n - 1, drain_inbox=False) for i in range(n)]

    def _advance(self, publish_state: bool, drain_inbox: bool = True) -> tuple[list[bytes], Any]:
        """One physics step (lock held by the caller); returns what to publish after it."""
        sim = self.sim
        received = []
        while drain_inbox and self._cmd_inbox:
            received.append(self._cmd_inbox.popleft())
        self._pump_commands(received)
        if self._ctl_inbox:
            self._apply_controls()
        self._remote.update(sim.clock)
        sim.step()
        states: list[bytes] = []
        gt = None
        if publish_state:
            self._n_states += 1
            self._state_delay.push(sim.clock + self.cfg.faults.state_latency_ms * 1e-3, self._capture_state())
            if self._n_states % self.cfg.gt_decimation == 0:
                gt = sim.ground_truth()
        for rec in self._state_delay.pop_due(sim.clock):
            payload = self._finish_state(rec)
            if payload is not None:
                states.append(payload)
        return states, gt

    def _finish_state(self, rec: np.ndarray) -> bytes | None:
        """Apply pause, drop and CRC corruption to a due LowState; its wire bytes or None."""
        f, c, clock = self.cfg.faults, self.counters, self.sim.clock
        if self._paused_until is not None:
            if clock < self._paused_until - 1e-9:
                c["state_paused"] += 1
                return None
            self._paused_until = None
        if f.state_drop > 0 and self._rng.random() < f.state_drop:
            c["state_dropped"] += 1
            return None
        if f.crc_corrupt > 0 and self._rng.random() < f.crc_corrupt:
            rec = rec.copy()
            rec["crc"] = int(rec["crc"]) ^ int(self._rng.integers(1, 2**32))
            c["state_crc_corrupted"] += 1
        payload = protocol.lowstate_cdr(rec)
        self._last_state_payload = payload
        return payload

    # -- publication (outside the lock)
    def _publish(self, states: Sequence[bytes], gt: GroundTruth | None) -> None:
        from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowState_

        for payload in states:
            self._state_pub.Write(protocol.wire_sample(LowState_, payload))
            self.counters["state_published"] += 1
        if gt is not None:
            self._gt_writer.write(_gt_message(gt))

    def _publish_status(self) -> None:
        from deploy import sim_msgs

        with self.lock:
            sim, c = self.sim, self.counters
            msg = sim_msgs.SimStatus_(
                tick=sim.tick, sim_time=float(sim.data.time), clock=sim.clock, lockstep=int(self.cfg.lockstep),
                band=int(sim.band_engaged), paused=int(self._paused_until is not None),
                commanded=int(sim.command is not None),
                **{k: c[k] for k in COUNTERS if k != "control_rejected"},
                resets=sim.resets, control_seq=self._control_seq, remote_seq=self._remote_seq,
                max_abs_tau=float(np.abs(sim.tau).max()), real_time_factor=self._rtf(),
                **{f"loop_{k}_s": v for k, v in self.loop_seconds.items()},
            )
            self._status_due = False
        self._status_writer.write(msg)

    # -- loops
    def _done(self) -> bool:
        d = self.cfg.duration
        return self._stop.is_set() or (d is not None and self.sim.clock - self._clock_start >= d - 1e-9)

    def _run_realtime(self) -> None:
        dt, decim = self.sim.dt, self._state_decimation
        t_next = time.perf_counter()
        next_status = t_next
        next_view = t_next
        timers = self.loop_seconds
        while not self._done():
            t0 = time.perf_counter()
            with self.lock:
                t1 = time.perf_counter()
                states, gt = self._advance(publish_state=(self.sim.steps + 1) % decim == 0)
            t2 = time.perf_counter()
            self._publish(states, gt)
            t_next += dt
            now = time.perf_counter()
            timers["lock"] += t1 - t0
            timers["step"] += t2 - t1
            timers["publish"] += now - t2
            if now >= next_status or self._status_due:
                self._publish_status()
                next_status = now + self.cfg.status_period
            if self._viewer is not None and now >= next_view:
                next_view = now + 1 / 60
                if not self._sync_viewer():
                    break
            lag = now - t_next
            if lag < 0:
                time.sleep(-lag)  # absolute deadline: work time is not added to the period
                timers["sleep"] += time.perf_counter() - now
            elif lag > self.cfg.max_lag_s:
                self.counters["overruns"] += 1
                t_next = now

    def _run_lockstep(self) -> None:
        from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowState_

        with self.lock:
            first = self._finish_state(self._capture_state())
        self._publish([first] if first else [], None)
        self._publish_status()
        next_status = time.perf_counter() + self.cfg.status_period
        while not self._done():
            if not self._cmd_inbox:
                self._cmd_event.clear()
                if not self._cmd_inbox and not self._ctl_inbox:
                    self._cmd_event.wait(self.cfg.lockstep_idle_s)
                if not self._cmd_inbox:  # idle: controls only, re-publish the latest LowState
                    with self.lock:
                        if self._ctl_inbox:  # e.g. a reset: publish the state it left
                            self._apply_controls()
                            payload = self._finish_state(self._capture_state())
                        else:
                            payload = self._last_state_payload if self._paused_until is None else None
                    if payload is not None:
                        self._state_pub.Write(protocol.wire_sample(LowState_, payload))
                    self._publish_status()
                    next_status = time.perf_counter() + self.cfg.status_period
                    continue
            out = self.lockstep_command(self._cmd_inbox.popleft())
            for states, gt in out:
                self._publish(states, gt)
            now = time.perf_counter()
            if now >= next_status or self._status_due:
                self._publish_status()
                next_status = now + self.cfg.status_period
            if self._viewer is not None and not self._sync_viewer():
                break

    def _sync_viewer(self) -> bool:
        if not self._viewer.is_running():
            self._stop.set()
            return False
        with self.lock:
            self._viewer.sync()
        return True

    def _summary(self) -> str:
        s = self.stats()
        c = ", ".join(f"{k} {s[k]}" for k in COUNTERS if s.get(k))
        loop = ", ".join(f"{k} {v:.1f} s" for k, v in self.loop_seconds.items()) if not self.cfg.lockstep else ""
        return (f"sim bridge stopped at t={s.get('clock', 0):.3f} s (real-time factor {s.get('real_time_factor', 0):.2f}): {c}"
                + (f"; loop wall time: {loop}" if loop else ""))


def _gt_message(gt: GroundTruth) -> Any:
    from deploy import sim_msgs

    return sim_msgs.SimGroundTruth_(
        tick=gt.tick, sim_time=gt.sim_time, clock=gt.clock, pos=gt.pos.tolist(), quat=gt.quat.tolist(),
        lin_vel_world=gt.lin_vel_world.tolist(), lin_vel_body=gt.lin_vel_body.tolist(),
        ang_vel_world=gt.ang_vel_world.tolist(), ang_vel_body=gt.ang_vel_body.tolist(),
        foot_contact=[int(x) for x in gt.foot_contact], foot_height=gt.foot_height.tolist(),
        band=int(gt.band), resets=gt.resets,
    )


# ----------------------------------------------------------------------------- CLI


def parse_remote_script(text: str) -> tuple[RemoteEvent, ...]:
    """"1.0:start,4.0:A,6:L2+B@0.5,8:lx=0.5+ly=-0.2": TIME:ITEMS[@HOLD], items joined by '+'
    are buttons (held HOLD s, default 0.2) or stick=value (kept until changed)."""
    events = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        try:
            t_str, rest = entry.split(":", 1)
            hold = 0.2
            if "@" in rest:
                rest, hold_str = rest.rsplit("@", 1)
                hold = float(hold_str)
            buttons, sticks = 0, []
            for item in filter(None, (i.strip() for i in rest.split("+"))):
                if "=" in item:
                    k, v = item.split("=", 1)
                    k = k.strip().lower()
                    if k not in ("lx", "rx", "ry", "l2", "ly"):
                        raise ValueError(f"unknown stick {k!r} (lx, rx, ry, l2, ly)")
                    sticks.append((k, float(v)))
                else:
                    buttons |= protocol.button_mask(item)
            events.append(RemoteEvent(float(t_str), buttons, hold, tuple(sticks)))
        except ValueError as e:
            raise ValueError(f"--remote-script entry {entry!r}: {e}") from None
    return tuple(events)


def parse_push(text: str) -> Push:
    """"T:FX,FY,FZ[@DURATION]" (s, N world frame, s)."""
    try:
        t_str, rest = text.split(":", 1)
        duration = 0.1
        if "@" in rest:
            rest, d_str = rest.rsplit("@", 1)
            duration = float(d_str)
        f = tuple(float(x) for x in rest.split(","))
        if len(f) != 3:
            raise ValueError("force needs 3 components")
        return Push(float(t_str), f, duration)  # type: ignore[arg-type]
    except ValueError as e:
        raise ValueError(f"--push {text!r}: {e} (format T:FX,FY,FZ[@DURATION])") from None


def _vec3(text: str) -> tuple[float, float, float]:
    v = tuple(float(x) for x in text.split(","))
    if len(v) != 3:
        raise argparse.ArgumentTypeError(f"expected X,Y,Z, got {text!r}")
    return v  # type: ignore[return-value]


def _prob(text: str) -> float:
    p = float(text)
    if not 0.0 <= p <= 1.0:
        raise argparse.ArgumentTypeError(f"probability must be in [0, 1], got {p}")
    return p


def _nonneg(text: str) -> float:
    v = float(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {v}")
    return v


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m deploy.sim_bridge",
        description="MuJoCo G1 that is the robot on DDS (unitree_hg LowState_/LowCmd_), with a virtual "
                    "remote, ground truth, elastic band, lockstep mode and fault injection.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("DDS")
    g.add_argument("--domain", type=int, default=protocol.SIM_DOMAIN, help="DDS domain id")
    g.add_argument("--interface", default=protocol.SIM_INTERFACE, help="network interface")
    g.add_argument("--allow-busy-domain", action="store_true",
                   help="start even if another rt/lowstate publisher is on the domain")
    g.add_argument("--busy-check-s", type=_nonneg, default=0.5,
                   help="how long to look for another rt/lowstate publisher at start (0: skip)")
    g = p.add_argument_group("simulation")
    g.add_argument("--lockstep", action="store_true",
                   help="advance physics only when a LowCmd arrives (deterministic tests)")
    g.add_argument("--steps-per-cmd", type=int, default=2, help="lockstep: physics steps per LowCmd")
    g.add_argument("--duration", type=float, default=None, help="stop after this many seconds of sim time")
    g.add_argument("--seed", type=int, default=0, help="seed of noise and fault injection")
    g.add_argument("--viewer", action="store_true", help="open the MuJoCo viewer (needs a display)")
    g.add_argument("--gt-decimation", type=int, default=1, help="ground truth with every n-th LowState")
    g.add_argument("--quiet", action="store_true", help="print errors and the ready line only")
    g = p.add_argument_group("elastic band")
    g.add_argument("--no-band", action="store_true", help="start without the elastic band")
    g.add_argument("--band-release-after", type=_nonneg, default=None, help="release the band after S seconds")
    g.add_argument("--band-height", type=float, default=BandConfig.height, help="pelvis anchor height (m)")
    g.add_argument("--band-stiffness", type=_nonneg, default=BandConfig.stiffness, help="N/m")
    g.add_argument("--band-damping", type=_nonneg, default=BandConfig.damping, help="N s/m")
    g = p.add_argument_group("virtual remote and pushes")
    g.add_argument("--remote-script", default="",
                   help='scripted remote, e.g. "1.0:start,4.0:A,6:L2+B@0.5,8:lx=0.5" (TIME:ITEMS[@HOLD])')
    g.add_argument("--push", action="append", default=[], metavar="T:FX,FY,FZ[@DUR]",
                   help="force on the pelvis at time T (repeatable)")
    g = p.add_argument_group("fault injection")
    g.add_argument("--state-latency-ms", type=_nonneg, default=0.0, help="added LowState latency")
    g.add_argument("--cmd-latency-ms", type=_nonneg, default=0.0, help="added LowCmd latency")
    g.add_argument("--state-drop", type=_prob, default=0.0, help="LowState drop probability")
    g.add_argument("--cmd-drop", type=_prob, default=0.0, help="LowCmd drop probability")
    g.add_argument("--crc-corrupt", type=_prob, default=0.0, help="probability of a wrong LowState CRC")
    g = p.add_argument_group("sensor noise")
    g.add_argument("--gyro-noise", type=_nonneg, default=0.0, help="gyro noise std (rad/s)")
    g.add_argument("--accel-noise", type=_nonneg, default=0.0, help="accelerometer noise std (m/s^2)")
    g.add_argument("--joint-pos-noise", type=_nonneg, default=0.0, help="joint position noise std (rad)")
    g.add_argument("--joint-vel-noise", type=_nonneg, default=0.0, help="joint velocity noise std (rad/s)")
    g.add_argument("--gyro-bias", type=_vec3, default=(0.0, 0.0, 0.0), help="gyro bias X,Y,Z (rad/s)")
    g.add_argument("--accel-bias", type=_vec3, default=(0.0, 0.0, 0.0), help="accelerometer bias X,Y,Z")
    g = p.add_argument_group("model overrides (robots.model.BridgeModelConfig)")
    g.add_argument("--mjcf", default=None, help="G1 MJCF override")
    g.add_argument("--armature-scale", type=_nonneg, default=1.0)
    g.add_argument("--damping-scale", type=_nonneg, default=1.0)
    g.add_argument("--frictionloss-scale", type=_nonneg, default=1.0)
    g.add_argument("--extra-joint-damping", type=_nonneg, default=0.0, help="N m s/rad on every motor joint")
    return p


def config_from_args(ns: argparse.Namespace) -> BridgeConfig:
    if not 0 <= ns.domain <= protocol.MAX_DOMAIN_ID:
        raise ValueError(f"--domain must be in 0..{protocol.MAX_DOMAIN_ID}")
    if ns.steps_per_cmd < 1 or ns.gt_decimation < 1:
        raise ValueError("--steps-per-cmd and --gt-decimation must be >= 1")
    return BridgeConfig(
        domain=ns.domain, interface=ns.interface, lockstep=ns.lockstep, steps_per_cmd=ns.steps_per_cmd,
        duration=ns.duration, seed=ns.seed, viewer=ns.viewer, gt_decimation=ns.gt_decimation,
        busy_check_s=ns.busy_check_s, allow_busy_domain=ns.allow_busy_domain, verbose=not ns.quiet,
        model=BridgeModelConfig(mjcf=ns.mjcf, armature_scale=ns.armature_scale, damping_scale=ns.damping_scale,
                                frictionloss_scale=ns.frictionloss_scale,
                                extra_joint_damping=ns.extra_joint_damping),
        band=BandConfig(enabled=not ns.no_band, release_after=ns.band_release_after, height=ns.band_height,
                        stiffness=ns.band_stiffness, damping=ns.band_damping),
        noise=NoiseConfig(ns.gyro_noise, ns.accel_noise, ns.joint_pos_noise, ns.joint_vel_noise,
                          ns.gyro_bias, ns.accel_bias),
        faults=FaultConfig(ns.state_latency_ms, ns.cmd_latency_ms, ns.state_drop, ns.cmd_drop, ns.crc_corrupt),
        pushes=tuple(parse_push(s) for s in ns.push),
        remote_script=parse_remote_script(ns.remote_script),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_arg_parser()
    ns = parser.parse_args(argv)
    try:
        cfg = config_from_args(ns)
    except ValueError as e:
        parser.error(str(e))
    bridge = SimBridge(cfg, announce_ready=True)

    def on_signal(signum: int, frame: Any) -> None:
        bridge.request_stop()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        bridge.run()
    except protocol.DDSInitError as e:
        print(f"sim bridge: error: {e}", file=sys.stderr, flush=True)
        return 2
    except BusyDomainError as e:
        print(f"sim bridge: error: {e}", file=sys.stderr, flush=True)
        return 3
    except (ModelError, ViewerError) as e:
        print(f"sim bridge: error: {e}", file=sys.stderr, flush=True)
        return 2
    return 0


# ----------------------------------------------------------------------------- subprocess helper


class BridgeProcess:
    """A sim bridge running in its own process (see `launch_bridge_process`)."""

    def __init__(self, proc: subprocess.Popen, domain: int, interface: str | None):
        self.proc = proc
        self.domain = domain
        self.interface = interface
        self.lines: list[str] = []
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, name="sim-bridge-output", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith(READY_LINE):
                self._ready.set()

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_ready(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None:
                self._reader.join(2.0)
                raise BridgeLaunchError(f"sim bridge exited with code {self.proc.returncode}:\n{self.output}")
            if time.monotonic() > end:
                raise BridgeLaunchError(f"sim bridge not ready after {timeout} s:\n{self.output}")

    def stop(self, timeout: float = 15.0) -> int:
        """Ctrl-C (SIGINT) and wait; kill if it does not stop. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(2.0)
        return self.proc.returncode


def _resolve_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    return ctypes.CDLL(None).prctl


# Looked up here, in the parent: the preexec_fn below runs in a forked copy of a multithreaded
# process (DDS, JAX threads), where an import or dlopen could wait on a lock another thread held.
_PRCTL = _resolve_prctl()
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child (Popen preexec_fn): SIGTERM when the launching thread's process dies (Linux),
    so a killed test run leaves no bridge behind holding its DDS domain. One foreign call."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


@contextmanager
def launch_bridge_process(
    args: Sequence[str] = (), *, domain: int = protocol.SIM_DOMAIN,
    interface: str | None = protocol.SIM_INTERFACE, ready_timeout: float = 90.0,
    python: str = sys.executable, env: dict[str, str] | None = None,
) -> Iterator[BridgeProcess]:
    """Run `python -m deploy.sim_bridge --domain D --interface I *args` in a subprocess, wait
    until it publishes LowState, yield it, and stop it with SIGINT on exit.

        with launch_bridge_process(["--lockstep"], domain=7) as bridge: ...
        bridge.stop() -> exit code (0 on a clean stop); bridge.output: what it printed
    """
    cmd = [python, "-u", "-m", "deploy.sim_bridge", "--domain", str(domain), *args]
    if interface is not None:
        cmd += ["--interface", interface]
    full_env = dict(os.environ if env is None else env)
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), full_env.get("PYTHONPATH")]))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            env=full_env, cwd=str(REPO_ROOT), preexec_fn=_die_with_parent)
    bridge = BridgeProcess(proc, domain, interface)
    try:
        bridge.wait_ready(ready_timeout)
        yield bridge
    finally:
        bridge.stop()


if __name__ == "__main__":
    sys.exit(main())
