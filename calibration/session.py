"""Run a target schedule on the robot through `safety/`, record it, abort to damping on any trip.

    session = Session(robot)                 # calibration.robot.DDSRobot or InProcessBridge
    log = session.blend("stand_up", pose, 1.5)   # linear blend from the measured pose, then hold
    log = session.run("excite", lambda t, s: targets, duration=6.0)
    session.finish()                          # damping, as deploy ends

Every proposed target passes `safety.SafetyMonitor.step` (soft joint limits, per-tick rate
limit = the joint's velocity limit, PD torque within the motor limit, tilt, stale LowState,
non-finite values); the command actually sent is what the log records (the actuator fit replays
exactly that). Any trip latches: the session streams damping for `abort_damping_s` and raises
`CalibrationAborted`; so does any exception or Ctrl-C inside a routine.

Clocks. Lockstep (bridge): the bridge advances only on commands, so the session sends one command
per LowState and uses the robot clock (ticks) for the watchdogs. When the bridge holds LowStates
back (state latency) no state arrives after a command: after `lockstep_wait_s` the next command
goes out anyway (time passes on the bridge only through commands). Real time (robot): commands
at 500 Hz against absolute deadlines (never sleep-after-work), watchdogs on the host clock.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np

from calibration.runlog import RunLog, State
from deploy.realtime import realtime
from robots import g1
from safety import Command, Limits, SafetyMonitor, WatchdogConfig


class CalibrationAborted(RuntimeError):
    """A safety trip (or an exception) stopped a routine; the robot was sent damping."""


Schedule = Callable[[float, State], np.ndarray]


@dataclasses.dataclass(frozen=True)
class SessionConfig:
    kp: tuple = tuple(g1.KP)
    kd: tuple = tuple(g1.KD)
    command_dt: float = g1.COMMAND_DT
    lockstep_wait_s: float = 0.25  # lockstep: wall time to wait for a LowState before the next command
    max_missing_states: int = 50  # lockstep: this many commands in a row without a LowState -> abort
    state_timeout_s: float = 2.0  # real time: wait this long for the first LowState of a routine
    abort_damping_s: float = 0.5  # robot clock: damping streamed after a trip
    watchdog: WatchdogConfig = WatchdogConfig()
    realtime_priority: int = 10  # real time: SCHED_FIFO of the loop thread when permitted (DDS threads one below)


class Session:
    def __init__(self, robot, cfg: SessionConfig = SessionConfig(), echo: Callable[[str], None] = print) -> None:
        self.robot = robot
        self.cfg = cfg
        self.echo = echo
        self.kp = np.asarray(cfg.kp, float)
        self.kd = np.asarray(cfg.kd, float)
        self.limits = Limits.default(command_dt=cfg.command_dt, kp=self.kp, kd=self.kd)
        self.monitor = SafetyMonitor(self.limits, cfg.watchdog, period=cfg.command_dt)
        self.logs: list[RunLog] = []

    # ------------------------------------------------------------------ public routines
    @property
    def state(self) -> State:
        return self.robot.latest

    def run(self, name: str, schedule: Schedule, duration: float, **meta) -> RunLog:
        """Send `schedule(t, state)` (t: robot-clock seconds since the routine started) for `duration` s."""
        states: list[State] = []
        cmds: list[dict] = []
        try:
            if self.robot.lockstep:
                self._run_lockstep(schedule, duration, states, cmds)
            else:
                with realtime(self.cfg.realtime_priority):
                    self._run_realtime(schedule, duration, states, cmds)
        except CalibrationAborted:
            raise
        except BaseException as e:  # Ctrl-C, an exception in a schedule, a lost link: damping first
            self.monitor.trip("exception", f"{type(e).__name__}: {e}", self._now())
            self._abort(states, cmds)
            raise CalibrationAborted(f"{name}: {type(e).__name__}: {e}; the robot was sent damping") from e
        if self.monitor.latched:
            self._abort(states, cmds)
            trip = self.monitor.latch.trip
            raise CalibrationAborted(f"{name}: safety trip {trip.kind}: {trip.detail}; the robot was sent damping")
        log = RunLog.from_rows(name, states, cmds, lockstep=bool(self.robot.lockstep),
                               kp=self.kp.tolist(), kd=self.kd.tolist(), **meta)
        self.logs.append(log)
        return log

    def blend(self, name: str, target: np.ndarray, duration: float, hold: float = 0.0, **meta) -> RunLog:
        """Linear blend from the measured pose to `target` over `duration`, then hold for `hold` s."""
        q0 = np.array(self.state.q, float)
        target = np.asarray(target, float)

        def schedule(t: float, s: State) -> np.ndarray:
            a = min(1.0, t / duration) if duration > 0 else 1.0
            return q0 + a * (target - q0)

        return self.run(name, schedule, duration + hold, **meta)

    def hold(self, name: str, target: np.ndarray, duration: float, **meta) -> RunLog:
        target = np.asarray(target, float)
        return self.run(name, lambda t, s: target, duration, **meta)

    def finish(self, damping_s: float = 0.2) -> None:
        """End as deploy does: stream damping for a moment."""
        self._stream(self.monitor.damping(), damping_s, [], [])

    # ------------------------------------------------------------------ loops
    def _now(self) -> float:
        return self.state.tick * 1e-3 if self.robot.lockstep else time.monotonic()

    def _command(self, s: State, proposed: np.ndarray | None, lateness: float = 0.0) -> Command:
        if self.robot.lockstep:  # robot clock: the bridge does not advance without us
            now = rx = s.tick * 1e-3
        else:
            now, rx = time.monotonic(), s.rx_time
        return self.monitor.step(now, s.q, s.dq, s.quat, proposed, rx, s.tick, lateness)

    @staticmethod
    def _row(s: State, cmd: Command, proposed, tx: float) -> dict:
        p = np.full(g1.NUM_MOTORS, np.nan) if proposed is None else np.asarray(proposed, float)
        return {"ref_tick": s.tick, "q": cmd.q, "kp": cmd.kp, "kd": cmd.kd, "proposed": p, "tx_time": tx}

    def _run_lockstep(self, schedule: Schedule, duration: float, states: list, cmds: list) -> None:
        s = self.state
        t0, missing = s.tick, 0
        while (s.tick - t0) * 1e-3 < duration - 1e-9:
            proposed = np.asarray(schedule((s.tick - t0) * 1e-3, s), float)
            cmd = self._command(s, proposed)
            tx = self.robot.send(cmd)
            cmds.append(self._row(s, cmd, proposed, tx))
            if self.monitor.latched:
                return
            new = self.robot.wait_states(s.tick, self.cfg.lockstep_wait_s)
            if not new:
                missing += 1
                if missing > self.cfg.max_missing_states:
                    raise TimeoutError(f"no LowState after {missing} commands (bridge stopped or not in lockstep?)")
                continue
            missing = 0
            states.extend(new)
            s = new[-1]

    def _run_realtime(self, schedule: Schedule, duration: float, states: list, cmds: list) -> None:
        dt = self.cfg.command_dt
        new = self.robot.wait_states(None, self.cfg.state_timeout_s)
        if not new:
            raise TimeoutError(f"no LowState within {self.cfg.state_timeout_s} s")
        states.extend(new)
        s = self.state
        t0 = s.tick
        deadline = time.monotonic()
        while (s.tick - t0) * 1e-3 < duration - 1e-9:
            lateness = time.monotonic() - deadline
            proposed = np.asarray(schedule((s.tick - t0) * 1e-3, s), float)
            cmd = self._command(s, proposed, max(0.0, lateness))
            tx = self.robot.send(cmd)
            cmds.append(self._row(s, cmd, proposed, tx))
            if self.monitor.latched:
                return
            deadline += dt
            if time.monotonic() - deadline > dt:  # late: skip the missed slots, do not burst
                deadline += dt * int((time.monotonic() - deadline) / dt)
            pause = deadline - time.monotonic()
            states.extend(self.robot.wait_states(s.tick, 0.0) if pause <= 0 else self._collect(s.tick, pause))
            s = self.state

    def _collect(self, after_tick: int, pause: float) -> list[State]:
        end = time.monotonic() + pause
        out: list[State] = []
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return out
            out += self.robot.wait_states(out[-1].tick if out else after_tick, left)

    def _stream(self, cmd: Command, seconds: float, states: list, cmds: list) -> None:
        s = self.state
        if self.robot.lockstep:
            for _ in range(max(1, int(round(seconds / self.cfg.command_dt)))):
                tx = self.robot.send(cmd)
                cmds.append(self._row(s, cmd, None, tx))
                new = self.robot.wait_states(s.tick, self.cfg.lockstep_wait_s)
                states.extend(new)
                s = self.state
        else:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                tx = self.robot.send(cmd)
                cmds.append(self._row(s, cmd, None, tx))
                states.extend(self._collect(s.tick, self.cfg.command_dt))
                s = self.state

    def _abort(self, states: list, cmds: list) -> None:
        self.echo("calibration: safety trip -> damping")
        try:
            self._stream(self.monitor.damping(), self.cfg.abort_damping_s, states, cmds)
        except BaseException:  # noqa: BLE001 - the trip is what is reported; keep trying to damp once more
            try:
                self.robot.send(self.monitor.damping())
            except BaseException:
                pass
        if states or cmds:
            self.logs.append(RunLog.from_rows("aborted", states, cmds, lockstep=bool(self.robot.lockstep)))
