"""The results of one deploy run under runs/deploy/<stamp>/ (see deploy/log.py), from its RunRecord
(deploy.record): summary.json (its stable keys: docs/deploy.md), events.json and the plot; plus, when the caller
hands in the sim bridge's ground truth, the metrics taken from it (`fell` by robots.physics.fallen, the one fall
criterion, estimator RMSE, pelvis apex, flight time).
"""
from __future__ import annotations

import os
from typing import Callable, Iterable

import numpy as np

from deploy import velocity
from deploy.log import LOG_FILE, pct, plot_run, read_log, write_json
from deploy.record import RunRecord
from deploy.state_machine import STATES, State, state_index
from policies.tracking import tracking_summary
from robots import g1
from robots.physics import FALL_DEFINITION, FALL_DEFINITION_TRACKING, fallen

# what the summary reads back from the log at full rate (t, sent, lateness, work: timing; the rest: ground truth)
SUMMARY_TICK_FIELDS = ("t", "sent", "lateness", "work_ms", "state", "tick", "new", "est_vel", "est_height")
SUMMARY_POLICY_FIELDS = ("t", "step", "est_ms", "policy_ms", "safety_ms", "compute_ms", "compute_cpu_ms")
PLOT_TICK_FIELDS = ("t", "q", "cmd_q", "cmd_kp", "cmd_kd", "quat", "state")
PLOT_ROWS = 50_000


def missed_steps(steps: np.ndarray) -> int:
    """Policy steps absent from the logged step indices: each motion counts from 0 (a new one restarts there)."""
    s = np.asarray(steps, dtype=np.int64)
    if not len(s):
        return 0
    return int(sum(seg[-1] + 1 - len(seg) for seg in np.split(s, np.flatnonzero(np.diff(s) <= 0) + 1)))


def write_results(rec: RunRecord, ground_truth: Iterable | None = None, echo: Callable[[str], None] = print) -> dict:
    """Write the run's files; returns the summary. `ground_truth`: the sim bridge's GroundTruth samples (None on the
    robot: `fell` and the estimator's errors are then None)."""
    run_dir, ticks, pol = rec.run_dir, rec.ticks, rec.policy
    send_gaps = np.diff(ticks["sent"])
    period_err = np.abs(send_gaps - g1.COMMAND_DT) / g1.COMMAND_DT
    compute = pol["compute_ms"]
    gt_hist = list(ground_truth) if ground_truth is not None else None
    facts = rec.policy_facts
    gt = ground_truth_metrics(gt_hist, ticks, facts)
    log_info = {} if rec.log is None else {
        "log_file": rec.log.file, "log_bytes": rec.log.bytes, "log_chunks": rec.log.chunks,
        "log_dropped_chunks": rec.log.dropped_chunks, "log_error": rec.log.error}
    summary = {
        "final_state": rec.final_state,
        "states_visited": list(rec.states_visited),
        "ticks": rec.n_ticks,
        "policy_ticks": rec.n_policy_ticks,
        # policy steps never computed: a stall covered all of their command ticks (the loop skips, never bursts)
        "policy_steps_missed": missed_steps(pol["step"]),
        "deadline_misses": rec.deadline_misses,
        "max_send_gap_ms": round(float(send_gaps.max()) * 1e3, 3) if send_gaps.size else None,
        "safety_events": list(rec.safety_events),
        "compute_ms_p50": pct(compute, 50),
        "compute_ms_p99": pct(compute, 99),
        # the loop thread's CPU time over the same stages: the wall time less what it spent preempted or waiting
        # for the GIL (the gap between the two is the host's and the other threads', not this code's work)
        "compute_cpu_ms_p99": pct(pol["compute_cpu_ms"], 99),
        "stream_period_error_p50": pct(period_err, 50),
        "stream_period_error_p99": pct(period_err, 99),
        # fell: ground truth only (robots.physics.fallen on the sim bridge; None on the robot); the safety
        # monitor's tilt trip is a different criterion (safety.limits.TILT_LIMIT) and is its own key
        "fell": bool(gt["fell"]) if gt.get("fell") is not None else None,
        "tilt_tripped": rec.tilt_tripped,
        "estimator_base_vel_rmse_mps": gt.get("vel_rmse"),
        "estimator_base_height_rmse_m": gt.get("height_rmse"),
        "gt_pelvis_max_m": gt.get("pelvis_max"),  # sim: highest pelvis after the band's release
        "gt_flight_s": gt.get("flight_s"),  # sim: longest time with both feet off the floor
        "estop_to_damping_s": rec.estop_to_damping_s,
        "max_lateness_ms": pct(ticks["lateness"] * 1e3, 100),
        "duration_s": round(rec.end_t, 3),
        "t0_monotonic": round(rec.t0_monotonic, 6),
        "motion": facts.motion,
        "policy_dir": facts.policy_dir,
        "domain": rec.domain,
        "interface": rec.interface,
        "auto": rec.auto,
        "transitions": [{"time": round(a, 4), "from": b, "to": c, "reason": d} for a, b, c, d in rec.transitions],
        "lowstate_crc_errors": rec.lowstate_crc_errors,
        "scheduling": rec.scheduling,
        "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "ground_truth": gt.get("info"),
        "policy": {"format": facts.format, "kind": facts.kind, "source": facts.source, "backend": facts.backend,
                   "backend_reason": facts.backend_reason},
        "velocity": _velocity(rec, gt_hist) if facts.kind == "velocity" else None,
        "tracking": _tracking(rec) if facts.tracking_frames is not None else None,
        **log_info,
        "run_dir": str(run_dir),
    }
    write_json(run_dir / "events.json", list(rec.events) + [{**e, "safety": True} for e in summary["safety_events"]])
    write_json(run_dir / "summary.json", summary)
    if rec.plot and rec.n_ticks:
        try:
            plot = ticks
            if rec.log is not None:  # a long run is plotted from every n-th tick (at most ~PLOT_ROWS points)
                plot = read_log(run_dir / LOG_FILE, fields={"tick": list(PLOT_TICK_FIELDS)},
                                stride=max(1, rec.n_ticks // PLOT_ROWS))
            plot_run(run_dir, plot, STATES)
        except Exception as e:  # noqa: BLE001 - the plot must not lose the run's log
            echo(f"[deploy] plot failed: {e}")
    return summary


def _tracking(rec: RunRecord) -> dict:
    """Joint RMS and anchor orientation error against the graph's own reference (policies.tracking)."""
    c = rec.tracking_steps
    return tracking_summary(c["t"], c["joint_sq"], c["anchor_err"], rec.policy_facts.tracking_frames,
                            int(c["step"].max()) + 1 if len(c["step"]) else 0)


def _velocity(rec: RunRecord, gt_hist: list | None) -> dict | None:
    """Commanded vs achieved velocity, distance, heading change, tilt (deploy.velocity.run_metrics)."""
    ticks, c = rec.ticks, rec.velocity_commands
    return velocity.run_metrics(gt_hist, ticks["t"], ticks["tick"], ticks["state"] == state_index(State.POLICY),
                                c["t"], c["cmd"])


def reference_frames(ticks: dict) -> dict[int, int]:
    """LowState tick -> the policy step (the tracking reference's frame before clamping) of the loop tick that read
    it, over every POLICY stretch of the run (steps count from the stretch's first tick, one per CONTROL_DT)."""
    pol = ticks["state"] == state_index(State.POLICY)
    out: dict[int, int] = {}
    t0 = None
    for i in range(len(pol)):
        if not pol[i]:
            t0 = None
            continue
        t0 = ticks["t"][i] if t0 is None else t0
        out.setdefault(int(ticks["tick"][i]), int((ticks["t"][i] - t0) / g1.CONTROL_DT + 1e-9))
    return out


def ground_truth_metrics(gt_history, ticks: dict, facts=None) -> dict:
    """Estimator RMSE and `fell` from the bridge's ground truth, matched by LowState tick. A tracking policy's
    samples in POLICY are bounded by its reference's pelvis at that frame (robots.physics.fallen's ref_tilt /
    ref_height, `facts`: the run's PolicyFacts)."""
    if gt_history is None:
        return {}
    hist = list(gt_history)
    if not hist:
        return {"info": "no ground truth received"}
    n = len(ticks["t"])
    t_end_tick = int(np.nanmax(ticks["tick"])) if n else 0
    by_tick = {int(g.tick): g for g in hist if int(g.tick) <= t_end_tick}
    # fell: robots.physics' one fall criterion after the band was released
    released = sorted((g for g in by_tick.values() if not g.band), key=lambda g: int(g.tick))
    fell = pelvis_max = flight_s = None
    if released:
        z = np.array([g.pos[2] for g in released])
        quat = np.array([np.asarray(g.quat, float) for g in released])
        bounds = {}
        if facts is not None and facts.reference_tilt is not None:
            frames = reference_frames(ticks)
            last = len(facts.reference_tilt) - 1
            k = np.array([min(frames.get(int(g.tick), -1), last) for g in released])
            inf = np.full(len(k), np.inf)
            bounds["ref_tilt"] = np.where(k >= 0, facts.reference_tilt[np.maximum(k, 0)], -inf)
            if facts.reference_height is not None:
                bounds["ref_height"] = np.where(k >= 0, facts.reference_height[np.maximum(k, 0)], inf)
        fell = bool(np.any(fallen(z, quat, **bounds)))
        pelvis_max = float(z.max())
        # longest stretch with both feet off the floor (a jump's flight): from a run's first
        # airborne sample to the next grounded one (or the last sample), sample ticks in ms
        airborne = np.array([not any(g.foot_contact) for g in released], int)
        t_ms = np.array([int(g.tick) for g in released], float)
        edges = np.diff(np.concatenate([[0], airborne, [0]]))
        starts, ends = np.flatnonzero(edges == 1), np.minimum(np.flatnonzero(edges == -1), len(t_ms) - 1)
        flight_s = float(np.max(t_ms[ends] - t_ms[starts], initial=0.0)) / 1e3
    # estimator error where it feeds the policy: from POLICY entry to the end of the run
    st = ticks["state"]
    in_pol = np.flatnonzero(st == state_index(State.POLICY))
    vel_rmse = height_rmse = None
    if in_pol.size:
        sel = np.arange(in_pol[0], n)
        sel = sel[(ticks["new"][sel] > 0) & (st[sel] != state_index(State.DAMPING))]
        ev, eh, gv, gh = [], [], [], []
        for i in sel:
            g = by_tick.get(int(ticks["tick"][i]))
            if g is None:
                continue
            ev.append(ticks["est_vel"][i])
            eh.append(ticks["est_height"][i])
            gv.append(np.asarray(g.lin_vel_body))
            gh.append(g.pos[2])
        if ev:
            ev, gv = np.asarray(ev), np.asarray(gv)
            vel_rmse = float(np.sqrt(np.mean(np.sum((ev - gv) ** 2, axis=1))))
            height_rmse = float(np.sqrt(np.mean((np.asarray(eh) - np.asarray(gh)) ** 2)))
    return {"fell": fell, "vel_rmse": vel_rmse, "height_rmse": height_rmse, "pelvis_max": pelvis_max,
            "flight_s": flight_s,
            "info": f"{len(by_tick)} ground-truth samples; fell = "
                    f"{FALL_DEFINITION_TRACKING if facts is not None and facts.reference_tilt is not None else FALL_DEFINITION}"
                    " after band release; RMSE over POLICY and after"}
