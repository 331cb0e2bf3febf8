"""The deploy control loop: LowState -> estimator -> observation -> ONNX -> safety -> LowCmd.

One thread, scheduled against absolute deadlines (command stream every g1.COMMAND_DT = 2 ms,
the policy on every 10th command tick = g1.CONTROL_DT); each tick's work starts SEND_LEAD_S before
its deadline and its LowCmd is written at the deadline; a late wake-up skips the missed slots
instead of bursting, and never sleeps a full period after its work. Every command passes through
`safety.SafetyMonitor`, whose latch turns every later command into damping; so does another rt/lowcmd
publisher appearing on the domain (deploy.link.Link.other_commanders; pre-flight refuses to start beside one).

Programmatic use (the CLI is a thin wrapper):

    from deploy.loop import LoopConfig, run
    summary = run(LoopConfig(policy_dir="policies/g1/stand", domain=1, interface="lo", sim=True, auto=True))
    summary["final_state"], summary["run_dir"]
"""
from __future__ import annotations

import dataclasses
import json
import threading
import time
import traceback
from typing import Any, Callable

import numpy as np

from comm import dds, remote
from control.tick import PolicyTick
from deploy import realtime, velocity
from deploy.link import Link
from deploy.offsets import JointOffsets
from deploy.log import CHUNK_S, LOG_FILE, Columns, StreamLog, new_run_dir, policy_fields, read_log, tick_fields
from deploy.preflight import PreflightError, check_artifact, open_link, run_preflight
from deploy.state_machine import STATES, AutoScript, ButtonEdges, State, StateMachine, estop_requested, state_index
from deploy.record import LogFacts, PolicyFacts, RunRecord
from deploy.summary import SUMMARY_POLICY_FIELDS, SUMMARY_TICK_FIELDS, write_results
from estimation.estimator import Estimator, EstimatorConfig
from policies.artifact import Artifact
from policies.runtime import HOLD_BLEND_S, PolicyRuntime
from robots import g1
from safety import Limits, SafetyMonitor, WatchdogConfig, all_finite

DECIMATION = int(round(g1.CONTROL_DT / g1.COMMAND_DT))  # command ticks per policy tick (10)
POLICY_LEAD_S = 0.0015  # policy ticks: observation + ONNX start this early (p99 compute ~1 ms here)
# every tick: state machine, safety gate and the command's build start this early; the write waits for the
# deadline, so the stream's period carries only the wake-up's jitter, not the work's (measured beside a busy
# process: work after the wake-up p50 0.18 / p99 0.27 ms; period error p99 0.082 from the send times, 0.023
# from the wake-ups)
SEND_LEAD_S = 0.0005


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    policy_dir: str
    domain: int = dds.SIM_DOMAIN
    interface: str | None = dds.SIM_INTERFACE
    sim: bool = True  # the peer is the sim bridge: run() may use its band / ground-truth topics
    auto: bool = False  # advance PASSIVE -> ... -> HOLD without a remote (AutoScript)
    stand_up_s: float = 2.5  # linear blend from the measured pose to the default pose
    hold_blend_s: float = HOLD_BLEND_S  # the runtime's blend from the last policy target back to the default pose
    band_release_s: float = 0.3  # sim + auto: run() releases the bridge's elastic band this long into HOLD
    script: AutoScript = AutoScript()
    watchdog: WatchdogConfig = WatchdogConfig()
    state_timeout_s: float = 3.0  # pre-flight: wait this long for the first LowState
    preflight_listen_s: float = 0.5  # pre-flight: listen this long for other rt/lowcmd publishers
    max_run_s: float | None = None  # hard stop of the main loop (event "timeout")
    damping_linger_s: float = 1.0  # after entering DAMPING keep streaming it this long, then end
    exit_on_damping: bool = True  # False: stream damping until stop() (second Ctrl-C)
    shutdown_damping_s: float = 0.2  # at the end of a run that was not damping: stream damping this long
    run_root: str | None = None  # default runs/deploy
    plot: bool = True
    estimator: EstimatorConfig = EstimatorConfig()
    ground_truth: bool = True  # sim: subscribe to the bridge's ground truth for the summary
    realtime_priority: int = 10  # SCHED_FIFO priority of the loop thread when permitted (0: leave as is)
    velocity: tuple = ()  # velocity policies: deploy.velocity.VelocityWindow schedule on the run's clock (else sticks)
    policy_s: float | None = None  # velocity policies: how long POLICY runs (default: schedule end + settle, or 60 s)
    joint_offsets: tuple = ()  # calibration joints.offsets (29, rad): the loop uses q - offset, sends target + offset
    policy_backend: str = "auto"  # PolicyRuntime's backend: auto (compiled when it checks out), onnxruntime, compiled


class ControlLoop:
    """Owns the state machine, safety monitor, estimator, policy runtime and the per-tick log; `run()` returns the
    run's RunRecord. `on_hold(t, s_in_hold, note)`: called on every HOLD tick (the sim's band release: run())."""

    def __init__(self, cfg: LoopConfig, art: Artifact, link: Link, runtime: PolicyRuntime | None = None,
                 on_hold: Callable[[float, float, Callable[[float, str, str], None]], None] | None = None,
                 echo: Callable[[str], None] = print, estimator: Estimator | None = None) -> None:
        self.cfg, self.art, self.link = cfg, art, link
        self.runtime = runtime or PolicyRuntime(art, hold_blend_s=cfg.hold_blend_s,
                                                run_s=velocity.run_s(cfg.velocity, cfg.policy_s, art.spec.kind),
                                                backend=cfg.policy_backend)
        self.cmd_log = Columns(dict(t=(), cmd=(3,)))  # velocity policies: the command of each policy step
        self.track_log = Columns(dict(t=(), step=(), joint_sq=(), anchor_err=()))  # tracking policies, per step
        self.on_hold = on_hold
        self.echo = echo
        self.estimator = estimator or Estimator(cfg.estimator)
        SafetyMonitor.load_kernel()  # numba loads the safety kernel here, not when run() makes its monitor
        self.offsets = JointOffsets(cfg.joint_offsets)  # the one place LowState q enters (deploy.offsets)
        self.sm = StateMachine()
        self.edges = ButtonEdges()
        self.monitor: SafetyMonitor | None = None
        self._stop = threading.Event()
        self._sigint = threading.Event()
        self.events: list[dict] = []
        # in memory until run() streams them to <run_dir>/log.mcap (tests driving ticks directly read these)
        self.ticks = Columns(tick_fields())
        self.pol = Columns(policy_fields(self.runtime.n_obs))
        self.log: StreamLog | None = None
        self.run_dir = None
        self.motions_done = 0
        self.mode_machine = g1.MODE_MACHINE_29DOF_REV1
        self._estop_press_t: float | None = None
        self.estop_latency_s: float | None = None
        self.scheduling = None

    # ------------------------------------------------------------------ external requests
    def request_damping(self, reason: str = "sigint") -> None:
        """Thread/signal safe: the next tick enters DAMPING."""
        self._sigint_reason = reason
        self._sigint.set()

    def stop(self) -> None:
        self._stop.set()

    def note(self, t: float, kind: str, detail: str) -> None:
        e = {"time": round(float(t), 6), "kind": kind, "detail": detail}
        self.events.append(e)
        if self.log is not None:
            self.log.event(e)

    def open_log(self) -> None:
        """The run folder and its streamed log (deploy.log.StreamLog): from here on the tick and policy rows
        go to <run_dir>/log.mcap in 1 s chunks through the writer thread, in bounded memory."""
        self.run_dir = new_run_dir(self.cfg.run_root)
        rows = {"tick": int(round(CHUNK_S / g1.COMMAND_DT)), "policy": int(round(CHUNK_S / g1.CONTROL_DT))}
        channels = {"tick": tick_fields(), "policy": policy_fields(self.runtime.n_obs)}
        meta = {"state_names": json.dumps(STATES), "joint_names": json.dumps(g1.JOINT_NAMES),
                "policy": str(self.art.path)}
        self.log = StreamLog(self.run_dir / LOG_FILE, channels, rows, metadata=meta)
        self.ticks, self.pol = self.log.columns("tick"), self.log.columns("policy")

    # ------------------------------------------------------------------ main loop
    def run(self) -> RunRecord:
        cfg = self.cfg
        dt = g1.COMMAND_DT
        self.open_log()  # before enter(): its writer thread is boosted like the DDS threads (no GIL-holding preemption)
        rt = realtime.enter(cfg.realtime_priority)  # SCHED_FIFO, DDS threads one below, GC frozen
        self.scheduling = rt.scheduling
        self.link.open_writer()
        t0 = time.monotonic()
        self.init_run_state(t0)
        self.note(0.0, "start", f"policy {self.art.spec.motion.name}, domain {self.link.domain}, "
                                f"interface {self.link.interface}, auto={cfg.auto}, joint offsets: {self.offsets.describe()}")
        end_reason = "stopped"
        k = 0
        try:
            while True:
                deadline = t0 + k * dt
                if self._policy_step_due(k) is not None:  # policy tick: compute ahead, send on time
                    now = time.monotonic()
                    if deadline - POLICY_LEAD_S > now:
                        time.sleep(deadline - POLICY_LEAD_S - now)
                    self._guarded(self._prepare_policy, k, time.monotonic())
                wake = realtime.sleep_until(deadline - SEND_LEAD_S)
                self._tick(k, wake, wake - (deadline - SEND_LEAD_S), send_at=deadline)
                t = wake - t0
                reason = self._should_end(t)
                if reason:
                    end_reason = reason
                    break
                # next slot: the following deadline, skipping any already missed (no catch-up burst)
                k = max(k + 1, int((time.monotonic() - t0) / dt) + 1)
        finally:
            final_state = self.sm.state.value
            end_t = time.monotonic() - t0
            self.note(end_t, "end", end_reason)
            if self.sm.state != State.DAMPING:
                self._shutdown_damping(cfg.shutdown_damping_s)
            realtime.leave(rt)
        return self.record(final_state, end_t)

    def init_run_state(self, t0: float, watchdog: WatchdogConfig | None = None) -> None:
        """Clock origin, a fresh safety monitor and the per-run controller state (run() calls it; tests
        that drive `_tick_inner` directly call it too)."""
        self.t0 = t0
        self.monitor = SafetyMonitor(Limits.default(), watchdog or self.cfg.watchdog, period=g1.COMMAND_DT, t0=t0)
        self.tick = PolicyTick(self.estimator, self.runtime, self.monitor)  # estimator -> runtime -> safety gate
        self._state_q0 = None
        self._hold_from = self.runtime.default_q.copy()
        self._policy_target = self.runtime.default_q.copy()
        self._policy_k0 = 0
        self._last_step = -1
        self._last_seq = -1
        self._est_seq = -1
        self._pending = None
        self._pending_times = (0.0, 0.0, 0.0)
        self._est_ms_last = 0.0
        self._est_cpu_ms_last = 0.0
        self._est = None
        self._damping_since = None
        self._cmd_heard0 = self.link.other_commanders()[1]  # pre-flight passed: none were heard before this

    def _should_end(self, t: float) -> str | None:
        cfg = self.cfg
        if self._stop.is_set():
            return "stop requested"
        if cfg.max_run_s is not None and t > cfg.max_run_s:  # a hard stop, in DAMPING too (soak: no auto)
            return f"max_run_s {cfg.max_run_s:g} s reached"
        if self.sm.state == State.DAMPING:
            if self._damping_since is None:
                self._damping_since = t
            if cfg.exit_on_damping and t - self._damping_since >= cfg.damping_linger_s:
                return "damping"
            return None
        if cfg.auto and cfg.script.finished(self.sm, t, self.motions_done):
            return "auto sequence finished"
        return None

    def _shutdown_damping(self, seconds: float) -> None:
        """End of run in a non-damping state: hand the robot over in damping (a few ms of commands)."""
        if self.monitor is None or seconds <= 0:
            return
        self.note(time.monotonic() - self.t0, "shutdown", f"damping for {seconds:g} s before exit")
        end = time.monotonic() + seconds
        k = 0
        t_start = time.monotonic()
        while time.monotonic() < end:
            try:
                self.link.send(self.monitor.damping(), self.mode_machine)
            except Exception:  # noqa: BLE001 - nothing else to do at exit
                return
            k += 1
            nxt = t_start + k * g1.COMMAND_DT
            time.sleep(max(0.0, nxt - time.monotonic()))

    # ------------------------------------------------------------------ one command tick
    def _guarded(self, fn, k: int, wake: float) -> None:
        """Work before the deadline (policy preparation): an exception latches damping for the tick."""
        try:
            fn(k, wake)
        except Exception as e:  # noqa: BLE001 - any exception -> damping, latched
            t = wake - self.t0
            self.monitor.trip("exception", f"{type(e).__name__}: {e}", wake)
            self.note(t, "exception", traceback.format_exc(limit=6))
            self._enter_damping(t, "exception")

    def _tick(self, k: int, wake: float, lateness: float, send_at: float | None = None) -> None:
        t = wake - self.t0
        mon = self.monitor
        try:
            self._tick_inner(k, wake, t, lateness, send_at)
        except Exception as e:  # noqa: BLE001 - any exception -> damping, latched
            mon.trip("exception", f"{type(e).__name__}: {e}", wake)
            self.note(t, "exception", traceback.format_exc(limit=6))
            self._enter_damping(t, "exception")
            try:
                sent = self.link.send(mon.damping(), self.mode_machine)
                self.ticks.append(t=t, lateness=lateness, sent=sent - self.t0, state=state_index(State.DAMPING),
                                  cmd_q=0.0, cmd_kp=0.0, cmd_kd=mon.damping().kd)
            except Exception:  # noqa: BLE001
                pass

    def _update_estimate(self, s) -> None:
        """The estimator runs on every new LowState while its output is used: in POLICY (it is reset on
        entry, standing still in HOLD) and in the HOLD after a motion (for the log and the summary).
        A non-finite sample is not fed to the filter: the safety gate trips on it in this tick."""
        st = s.state
        if s.seq == self._est_seq:
            return
        if (self.sm.state == State.POLICY or (self.sm.state == State.HOLD and self.motions_done > 0)) \
                and all_finite(st.q, st.dq, st.quat, st.gyro, st.acc):
            self._est_seq = s.seq
            t0, c0 = time.monotonic(), time.thread_time()
            self._est = self.tick.sense(st.tick * 1e-3, st.q, st.dq, st.quat, st.gyro, st.acc, st.tau_est)
            self._est_ms_last = (time.monotonic() - t0) * 1e3
            self._est_cpu_ms_last = (time.thread_time() - c0) * 1e3

    def _policy_step_due(self, k: int) -> int | None:
        """The policy step that command tick k starts, if it must be computed (POLICY, not done)."""
        if self.sm.state != State.POLICY or self.monitor.latched:
            return None
        step = (k - self._policy_k0) // DECIMATION
        if step == self._last_step or self.runtime.done(step):
            return None
        return step

    def _prepare_policy(self, k: int, wake: float) -> None:
        """Run estimator + observation + ONNX for the policy step of tick k ahead of its deadline
        (POLICY_LEAD_S early), so the command of that tick still leaves on time; the safety gate and the
        send happen at the deadline with the freshest LowState."""
        step = self._policy_step_due(k)
        if step is None:
            return
        s = self.offsets.state(self.link.latest())
        st = s.state
        self._update_estimate(s)  # catches up if a LowState arrived since the last tick
        est = self._est
        if est is None:
            return  # the tick at the deadline handles it (trip)
        self._run_policy(step, st, est, wake)

    def _run_policy(self, step: int, st, est, wake: float):
        t0, c0 = time.monotonic(), time.thread_time()
        cmd = velocity.policy_command(self.cfg.velocity, self.runtime.spec, wake - self.t0, st.remote) \
            if self.runtime.kind == "velocity" else None
        out = self.tick.act(step, st.q, st.dq, st.quat, command=cmd, estimate=est)
        if cmd is not None:
            self.cmd_log.append(t=wake - self.t0, cmd=self.runtime.command)
        tr = self.runtime.tracking
        if tr is not None:
            self.track_log.append(t=wake - self.t0, step=step, joint_sq=float(np.mean(tr.joint_error ** 2)),
                                  anchor_err=tr.anchor_ori_error if tr.needs_anchor else np.nan)
        t1, c1 = time.monotonic(), time.thread_time()
        self._last_step = step
        self._policy_target = out.target
        self._pending = out
        # estimator: the cost of its latest update (it runs on every LowState, after the command is sent)
        self._pending_times = (self._est_ms_last, (t1 - t0) * 1e3, self._est_cpu_ms_last + (c1 - c0) * 1e3)
        if est.flags.imu_rejected and est.flags.imu_bad_s > 0.05:
            self.monitor.trip("imu_fault", f"IMU samples rejected for {est.flags.imu_bad_s * 1e3:.0f} ms "
                                           f"({_flag_text(est.flags)})", wake)
        return out

    def _tick_inner(self, k: int, wake: float, t: float, lateness: float, send_at: float | None = None) -> None:
        """One command tick from the state at `wake`; the command is written at `send_at` (None: at once)."""
        cfg, sm, mon = self.cfg, self.sm, self.monitor
        s = self.offsets.state(self.link.latest())
        st = s.state
        self.mode_machine = st.mode_machine or self.mode_machine
        new = s.seq != self._last_seq
        self._last_seq = s.seq
        held = frozenset(remote.button_names(st.remote.buttons))
        pressed = self.edges.update(held) if new else frozenset()

        # another rt/lowcmd publisher (a controller started beside this one): the robot would apply both streams
        writers, heard = self.link.other_commanders()
        if (writers or heard != self._cmd_heard0) and not mon.latched:
            mon.trip("other_commander", f"another process publishes rt/lowcmd ({writers} matched writers, "
                                        f"{heard - self._cmd_heard0} commands heard): stop it, then restart", wake)
        # operator inputs: SIGINT, remote, auto script
        if self._sigint.is_set() and sm.state != State.DAMPING:
            reason = getattr(self, "_sigint_reason", "sigint")
            mon.trip(reason, f"{reason} received", wake)
            self._enter_damping(t, reason)
        why = estop_requested(held, pressed)
        if why and sm.state != State.DAMPING:
            mon.trip("estop", f"remote {why}", wake)
            self._estop_press_t = s.rx_time
            self._enter_damping(t, f"remote {why}")
        if cfg.auto:
            pressed = pressed | cfg.script.presses(sm, t, self.motions_done)
        before = sm.state
        sm.on_buttons(t, held, pressed)
        if sm.state != before:
            self._on_enter(before, sm.state, t, k, st)

        # what the current state wants
        proposed = None
        policy_out, est_ms, pol_ms, cpu_ms = None, 0.0, 0.0, 0.0
        if sm.state == State.STAND_UP:
            a = min(1.0, sm.time_in_state(t) / cfg.stand_up_s)
            proposed = self._state_q0 + a * (self.runtime.default_q - self._state_q0)
            if a >= 1.0:
                self._go(State.HOLD, t, k, st, "stand-up blend done")
                self._hold_from = self.runtime.default_q.copy()
        est = self._est  # (re)set on entering POLICY above
        if sm.state == State.POLICY:
            step = (k - self._policy_k0) // DECIMATION
            if step != self._last_step and self.runtime.done(step):
                self.motions_done += 1
                self._hold_from = self._policy_target.copy()
                self._go(State.HOLD, t, k, st, f"motion ended after {step} policy steps")
            elif step != self._last_step and est is None:
                # no estimate: the reset on entry refused a non-finite sample. The gate below trips on a
                # non-finite state; a finite one without an estimate is an estimator fault.
                if all_finite(st.q, st.dq, st.quat):
                    mon.trip("estimator", "no state estimate available in POLICY", wake)
            elif step != self._last_step:  # not prepared ahead (first step after A): compute it now
                self._run_policy(step, st, est, wake)
            if self._pending is not None and self._pending.step == step:
                policy_out, (est_ms, pol_ms, cpu_ms) = self._pending, self._pending_times
                self._pending = None
            proposed = self._policy_target
        if sm.state == State.HOLD:
            proposed = self.runtime.hold_target(self._hold_from, sm.time_in_state(t))
            if self.on_hold is not None:
                self.on_hold(t, sm.time_in_state(t), self.note)

        # the safety gate
        t_saf0, c_saf0 = time.monotonic(), time.thread_time()
        cmd = self.tick.gate(wake, st.q, st.dq, st.quat, proposed, rx_time=s.rx_time, tick=st.tick, lateness=lateness,
                             policy=sm.state == State.POLICY)
        t_saf1, c_saf1 = time.monotonic(), time.thread_time()
        if mon.latched and sm.state != State.DAMPING:
            self._enter_damping(t, mon.latch.trip.kind)
        sent = self.link.send(self.offsets.command(cmd), self.mode_machine, at=send_at)  # encoder frame
        if cmd.kind == "damping" and self._estop_press_t is not None and self.estop_latency_s is None:
            self.estop_latency_s = sent - self._estop_press_t
        # after the send (not on the command's path): the estimator, for the next policy step and the log
        self._update_estimate(s)
        est = self._est

        # log
        self.ticks.append(
            t=t, lateness=lateness, work_ms=(t_saf1 - wake) * 1e3, tick_ms=(time.monotonic() - wake) * 1e3,
            sent=sent - self.t0, state=state_index(sm.state),
            tick=st.tick, rx_age=wake - s.rx_time, new=float(new), buttons=st.remote.buttons,
            q=st.q, dq=st.dq, quat=st.quat, gyro=st.gyro, acc=st.acc, tau_est=st.tau_est,
            proposed=proposed, cmd_q=cmd.q, cmd_kp=cmd.kp, cmd_kd=cmd.kd,
            est_vel=est.base_lin_vel if est is not None else None,
            est_height=est.base_height if est is not None else None,
            est_contact=est.foot_contact if est is not None else None,
            est_flags=_flag_bits(est.flags) if est is not None else None,
        )
        if policy_out is not None:
            saf_ms = (t_saf1 - t_saf0) * 1e3
            self.pol.append(
                t=t, step=policy_out.step, phase=policy_out.phase, obs=policy_out.obs, action=policy_out.action,
                target=policy_out.target, cmd_q=cmd.q, est_ms=est_ms, policy_ms=pol_ms, safety_ms=saf_ms,
                compute_ms=est_ms + pol_ms + saf_ms, compute_cpu_ms=cpu_ms + (c_saf1 - c_saf0) * 1e3,
            )

    # ------------------------------------------------------------------ transitions
    def _go(self, new: State, t: float, k: int, st, reason: str) -> None:
        before = self.sm.state
        if self.sm.go(new, t, reason):
            self._on_enter(before, new, t, k, st)

    def _on_enter(self, before: State, new: State, t: float, k: int, st) -> None:
        self.note(t, "state", f"{before.value} -> {new.value} ({self.sm.transitions[-1][3]})")
        self.echo(f"[deploy] t={t:6.2f} s  {before.value} -> {new.value}  ({self.sm.transitions[-1][3]})")
        if new == State.STAND_UP:
            self._state_q0 = np.clip(st.q, self.monitor.limits.q_min, self.monitor.limits.q_max)
            self.monitor.reset_target(st.q)
        elif new == State.POLICY:
            self.runtime.reset()
            self._policy_k0 = k
            self._last_step = -1
            self._pending = None
            self._policy_target = self.runtime.default_q.copy()
            if self.runtime.kind == "velocity" and self.cfg.velocity and self.cfg.policy_s is None:  # to schedule end
                end = velocity.run_s(self.cfg.velocity, None)
                self.runtime.n_steps = max(1, int(round((end - t) / self.runtime.control_dt)))
            # standing still in HOLD: the estimator's reset assumption (at rest, lower foot on the ground)
            try:
                self._est = self.tick.start(st.q, st.quat, st.tick * 1e-3)
                self._est_seq = self._last_seq  # this sample is the reset's
            except ValueError as e:
                self.note(t, "estimator", f"reset skipped: {e}")

    def _enter_damping(self, t: float, reason: str) -> None:
        before = self.sm.state
        if self.sm.damp(t, reason):
            self.note(t, "state", f"{before.value} -> DAMPING ({reason})")
            self.echo(f"[deploy] t={t:6.2f} s  {before.value} -> DAMPING  ({reason})")

    # ------------------------------------------------------------------ results
    def record(self, final_state: str, end_t: float) -> RunRecord:
        """The run as it stands (after run(): closes the streamed log and reads the summary's columns back)."""
        log = None
        if self.log is not None:
            self.log.close()
            cols = read_log(self.run_dir / LOG_FILE, fields={"tick": list(SUMMARY_TICK_FIELDS),
                                                              "policy": list(SUMMARY_POLICY_FIELDS)})
            ticks = {k: v for k, v in cols.items() if not k.startswith("pol_")}
            pol = {k[len("pol_"):]: v for k, v in cols.items() if k.startswith("pol_")}
            log = LogFacts(str(self.run_dir / LOG_FILE), self.log.bytes_written(), self.log.written_chunks,
                           self.log.dropped_chunks, self.log.error)
            run_dir = self.run_dir
        else:
            ticks, pol = self.ticks.arrays(), self.pol.arrays()
            run_dir = self.run_dir or new_run_dir(self.cfg.run_root)
        rt, spec = self.runtime, self.art.spec
        tr = getattr(rt, "tracking", None)
        facts = PolicyFacts(motion=spec.motion.name, policy_dir=str(self.art.path), format=spec.format, kind=spec.kind,
                            source=spec.source, backend=getattr(rt, "backend", None),
                            backend_reason=getattr(rt, "backend_reason", None),
                            tracking_frames=tr.ref.frames if tr is not None else None,
                            reference_tilt=None if tr is None else tr.pelvis_tilt,
                            reference_height=None if tr is None else tr.pelvis_height)
        mon = self.monitor
        return RunRecord(
            run_dir=run_dir, final_state=final_state, end_t=float(end_t), t0_monotonic=float(getattr(self, "t0", 0.0)),
            auto=self.cfg.auto, plot=self.cfg.plot, states_visited=tuple(self.sm.visited),
            transitions=tuple(self.sm.transitions), events=tuple(self.events),
            safety_events=tuple(mon.events) if mon else (), deadline_misses=int(mon.deadline.misses) if mon else 0,
            estop_to_damping_s=self.estop_latency_s, n_ticks=int(self.ticks.n), n_policy_ticks=int(self.pol.n),
            ticks=ticks, policy=pol, velocity_commands=self.cmd_log.arrays(), tracking_steps=self.track_log.arrays(),
            domain=self.link.domain, interface=self.link.interface, lowstate_crc_errors=int(self.link.crc_errors),
            scheduling=self.scheduling, policy_facts=facts, log=log)


class BandRelease:
    """The sim's elastic band let go `after_s` into HOLD (once, from a thread: the request must not hold the tick)."""

    def __init__(self, client: Any, after_s: float):
        self.client, self.after_s, self.released_at = client, after_s, None

    def __call__(self, t: float, s_in_hold: float, note: Callable[[float, str, str], None]) -> None:
        if self.released_at is not None or s_in_hold < self.after_s:
            return
        self.released_at = t
        note(t, "sim", "elastic band released")

        def release() -> None:
            try:
                self.client.release_band(wait=False)
            except Exception as e:  # noqa: BLE001 - the dry run then stays on the band; say so
                note(t, "sim", f"band release failed: {e}")

        threading.Thread(target=release, name="band-release", daemon=True).start()


def _flag_bits(flags) -> int:
    return sum(1 << i for i, v in enumerate(flags[:8]) if isinstance(v, (bool, np.bool_)) and v)


def _flag_text(flags) -> str:
    return ", ".join(n for n, v in zip(flags._fields, flags) if isinstance(v, (bool, np.bool_)) and v)


# ---------------------------------------------------------------------- top level


def run(cfg: LoopConfig, echo: Callable[[str], None] = print, on_loop: Callable[[ControlLoop], None] | None = None) -> dict:
    """Pre-flight, then the loop; returns the summary (also written to <run_dir>/summary.json).

    Raises PreflightError (nothing commanded) when a pre-flight check fails. `on_loop` receives the
    ControlLoop before it starts (the CLI uses it to route SIGINT)."""
    art = check_artifact(cfg.policy_dir)
    runtime = PolicyRuntime(art, hold_blend_s=cfg.hold_blend_s,
                            run_s=velocity.run_s(cfg.velocity, cfg.policy_s, art.spec.kind), backend=cfg.policy_backend)
    link = open_link(cfg.domain, cfg.interface)
    sim_client = None
    try:
        run_preflight(link, cfg.state_timeout_s, cfg.preflight_listen_s)
        if cfg.sim and (cfg.auto or cfg.ground_truth):
            from comm.sim_msgs import SimClient

            sim_client = SimClient(cfg.domain, cfg.interface, gt_history=200_000 if cfg.ground_truth else 0)
        band = BandRelease(sim_client, cfg.band_release_s) if sim_client is not None and cfg.auto else None
        loop = ControlLoop(cfg, art, link, runtime, on_hold=band, echo=echo)
        if on_loop is not None:
            on_loop(loop)
        record = loop.run()
        gt = sim_client.gt_history if sim_client is not None and cfg.ground_truth else None
        return write_results(record, ground_truth=gt, echo=echo)
    finally:
        link.close()
        if sim_client is not None:
            sim_client.close()


__all__ = ["LoopConfig", "ControlLoop", "run", "PreflightError", "DECIMATION"]
