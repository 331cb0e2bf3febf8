"""Sim bridge DDS node: a C MuJoCo G1 (plant.robot) that is the robot on DDS.

Speaks the robot's protocol with unitree_sdk2py's DDS set-up and IDL types (ChannelFactory
participant; LowState_ written through a ChannelPublisher, LowCmd_ read as raw payloads of the
SDK type and decoded by `comm.hg`, ~20x cheaper than the SDK's Python deserializer).
It publishes `rt/lowstate` (unitree_hg LowState_) at 500 Hz with tick (ms), mode_machine 5
(29-DoF rev 1.0), pelvis IMU (quaternion w,x,y,z, gyro and accelerometer in the IMU frame, rpy),
motor q/dq/ddq/tau_est for the 29 motors, wireless_remote and CRC; it subscribes `rt/lowcmd` and,
like the robot, ignores (and counts) commands with a bad CRC or another mode_machine, and also
those with non-finite fields or mode_pr != 0 (only pitch/roll mode is simulated).

Sim-only topics (`comm.sim_msgs`): rt/sim/remote (virtual remote), rt/sim/control (reset,
push, elastic band, pause LowState), rt/sim/ground_truth (evaluation only), rt/sim/status.

Modes
- real time (default): physics scheduled against absolute 1 ms deadlines; LowState every 2nd
  step. A step later than `max_lag_s` behind schedule re-bases the schedule (counted as overrun)
  instead of bursting to catch up.
- lockstep: physics advances only when a LowCmd arrives: each received LowCmd (valid or not, so
  rejected commands still let time pass) runs `steps_per_cmd` (2) physics steps, then one
  LowState is published. Nothing else advances time, so a client that sends its next command
  after each LowState gets a deterministic run. While no command arrives the latest LowState is
  re-published every 0.1 s (same tick) so a late subscriber can start.

Timing conventions: every scheduled thing (latency, pushes, remote script, band release,
pause) uses the bridge clock = physics steps x dt since start (monotonic across resets), so
lockstep runs are reproducible.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from typing import Any, Callable, Sequence

import numpy as np

from comm import dds, dds_compat, sim_msgs
from comm.hg import TOPIC_LOWCMD, TOPIC_LOWSTATE
from comm.sim_process import READY_LINE, BridgeLaunchError
from robots import g1
from sim.config import BridgeConfig
from sim.core import COUNTERS, BridgeCore
from plant.robot import GroundTruth, Plant

LOOP_PHASES = ("lock", "step", "publish", "sleep")  # real-time loop wall time, SimStatus_.loop_<phase>_s


class BusyDomainError(RuntimeError):
    """Another publisher of rt/lowstate (a bridge or a robot) is on the domain."""


class ViewerError(RuntimeError):
    """--viewer could not open a window."""


class SimBridge(BridgeCore):
    """The bridge: the plant + DDS + scheduling. `run()` blocks (the CLI); `start()` runs it in a
    thread and returns once LowState is being published; `stop()` ends it.

        with SimBridge(BridgeConfig(domain=1, lockstep=True)) as bridge: ...

    unitree_sdk2py allows one DDS domain per process: an in-process bridge shares it with the
    process's clients (`comm.dds.init_dds`). For a bridge in its own process use
    `comm.sim_process.launch_bridge_process`.
    """

    def __init__(self, cfg: BridgeConfig = BridgeConfig(), log: Callable[[str], None] | None = None,
                 announce_ready: bool | None = None):
        super().__init__(cfg, log)
        # The ready line is the launch handshake (comm.sim_process): printed even when quiet.
        self._announce_ready = cfg.verbose if announce_ready is None else announce_ready
        self.loop_seconds = dict.fromkeys(LOOP_PHASES, 0.0)  # real-time loop, wall s
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
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
                       commanded=sim.setpoint is not None, real_time_factor=self._rtf())
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
        dds.check_interface(cfg.interface)
        dds.init_dds(cfg.domain, cfg.interface)
        note = dds.multicast_note(cfg.interface) if cfg.interface else None
        if note:
            self._log(f"sim bridge: note: {note}")
        self._sim_topics = sim_msgs.SimTopics()
        probe = self._start_busy_probe() if cfg.busy_check_s > 0 else None
        try:
            t0 = time.monotonic()
            self.sim = Plant(cfg.plant())  # compiling takes ~1 s: the probe listens meanwhile
            if probe is not None:
                self._finish_busy_probe(probe, cfg.busy_check_s - (time.monotonic() - t0))
        finally:
            if probe is not None:
                dds_compat.delete_entity(probe)
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
            if alive and getattr(s, "topic_name", None) == TOPIC_LOWSTATE:
                others.append(s)
        if others:
            msg = (
                f"another publisher of {TOPIC_LOWSTATE} is on DDS domain {self.cfg.domain} "
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

        self._state_pub = ChannelPublisher(TOPIC_LOWSTATE, LowState_)
        self._state_pub.Init()
        self._channels.append(self._state_pub)
        # rt/lowcmd: the SDK's LowCmd_ type, read as raw payloads (cyclonedds' Python deserializer
        # costs ~0.3 ms per command, 15 % of a core at 500 Hz); decoded by comm.hg.
        t = self._sim_topics
        self._cmd_reader = t.own(DataReader(t.participant, t.topic(TOPIC_LOWCMD, LowCmd_),
                                            None, Listener(on_data_available=self._on_lowcmd_available)))
        self._gt_writer = t.writer(sim_msgs.TOPIC_GROUND_TRUTH, keep_all=False)
        self._status_writer = t.writer(sim_msgs.TOPIC_STATUS, keep_all=False)
        t.reader(sim_msgs.TOPIC_CONTROL, lambda s: self.submit_control("control", s))
        t.reader(sim_msgs.TOPIC_REMOTE, lambda s: self.submit_control("remote", s))

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
        faults = ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(cfg.faults).items() if v) or "none"
        self._log(
            f"sim bridge: G1 29-DoF on DDS domain {cfg.domain}, interface {cfg.interface} ({mode})\n"
            f"  publishes : {TOPIC_LOWSTATE} (unitree_hg LowState_, mode_machine "
            f"{g1.MODE_MACHINE_29DOF_REV1}), {sim_msgs.TOPIC_GROUND_TRUTH}, {sim_msgs.TOPIC_STATUS}\n"
            f"  subscribes: {TOPIC_LOWCMD} (unitree_hg LowCmd_), {sim_msgs.TOPIC_REMOTE}, "
            f"{sim_msgs.TOPIC_CONTROL}\n"
            f"  elastic band {band}; faults: {faults}"
        )

    def _teardown(self) -> None:
        for ch in self._channels:
            try:
                dds_compat.close_channel(ch)
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
        for payload in dds_compat.take_raw_payloads(reader):
            self.submit_lowcmd(payload)

    # -- publication (outside the lock)
    def _publish(self, states: Sequence[bytes], gt: GroundTruth | None) -> None:
        from unitree_sdk2py.idl.unitree_hg.msg.dds_ import LowState_

        for payload in states:
            self._state_pub.Write(dds_compat.wire_sample(LowState_, payload))
            self.counters["state_published"] += 1
        if gt is not None:
            self._gt_writer.write(_gt_message(gt))

    def _publish_status(self) -> None:
        with self.lock:
            sim, c = self.sim, self.counters
            msg = sim_msgs.SimStatus_(
                tick=sim.tick, sim_time=float(sim.data.time), clock=sim.clock, lockstep=int(self.cfg.lockstep),
                band=int(sim.band_engaged), paused=int(self._paused_until is not None),
                commanded=int(sim.setpoint is not None),
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
                states, gt = self.advance(publish_state=(self.sim.steps + 1) % decim == 0)
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
            first = self.finish_state(self.capture_state())
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
                            self.apply_controls()
                            payload = self.finish_state(self.capture_state())
                        else:
                            payload = self._last_state_payload if self._paused_until is None else None
                    if payload is not None:
                        self._state_pub.Write(dds_compat.wire_sample(LowState_, payload))
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
    return sim_msgs.SimGroundTruth_(
        tick=gt.tick, sim_time=gt.sim_time, clock=gt.clock, pos=gt.pos.tolist(), quat=gt.quat.tolist(),
        lin_vel_world=gt.lin_vel_world.tolist(), lin_vel_body=gt.lin_vel_body.tolist(),
        ang_vel_world=gt.ang_vel_world.tolist(), ang_vel_body=gt.ang_vel_body.tolist(),
        foot_contact=[int(x) for x in gt.foot_contact], foot_height=gt.foot_height.tolist(),
        band=int(gt.band), resets=gt.resets,
    )
