"""Command -> state latency from steps of one joint's target (calibration.excitation.SquareWave).

A step of the target changes the drive torque at once by kp * step (tau = kp (q* - q) - kd dq),
long before the joint moves, so `tau_est` shows when a command took effect. For every LowState
after a step the measured tau_est is compared with the torque the previous and the new target
would give at that state's q, dq; the first state (followed by a second) that is closer to the
new one marks the response (the state the command was computed from must still look like the
previous one: a torque that does not change is no response).

    latency      = tick of that state - robot time the command was computed at (its ref tick)
                   = the delay a controller sees from the state it acted on to the first state
                     that shows its action; per-edge values, median reported
    action_delay = robot time from the state a command was computed from to the command acting:
                   latency - one state period in lockstep (the bridge publishes after the 2 ms
                   its command acted for), latency - half a period in real time (the response
                   falls anywhere in the period). The actuator fit replays commands with it; a
                   training env can use it as its action latency.
Refusals: no response at all (motor disabled, tau_est not reported), too few edges, edges that
disagree by more than `max_spread_s` (interquartile range).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from calibration.runlog import CalibrationError, RunLog
from calibration.sysid import command_times
from robots import g1


@dataclasses.dataclass(frozen=True)
class LatencyConfig:
    min_edges: int = 5
    max_spread_s: float = 0.005  # interquartile range of the per-edge latencies
    max_latency_s: float = 0.1  # no response within this = no response
    min_jump_nm: float = 0.5  # a target step must change the torque at least this much to be used


@dataclasses.dataclass(frozen=True)
class LatencyResult:
    latency_s: float
    latency_std_s: float
    action_delay_s: float
    state_period_s: float
    edges_used: int
    edges_total: int
    per_edge_s: tuple
    joint: str
    lockstep: bool

    def summary(self) -> dict:
        return {"latency_s": round(self.latency_s, 5), "latency_std_s": round(self.latency_std_s, 5),
                "action_delay_s": round(self.action_delay_s, 5), "state_period_s": round(self.state_period_s, 5),
                "edges_used": self.edges_used, "edges_total": self.edges_total, "joint": self.joint,
                "mode": "lockstep" if self.lockstep else "real time",
                "per_edge_ms": [round(x * 1e3, 2) for x in self.per_edge_s]}


def estimate_latency(log: RunLog, joint: int, cfg: LatencyConfig = LatencyConfig()) -> LatencyResult:
    what = "latency"
    log.require(0.2, 100, what)
    if not np.isfinite(log.states["tau"][:, joint]).all():
        raise CalibrationError(f"{what}: non-finite tau_est on {g1.JOINT_NAMES[joint]}")
    tc = command_times(log)
    c, kp, kd = log.cmds["q"][:, joint], log.cmds["kp"][:, joint], log.cmds["kd"][:, joint]
    ticks = log.states["tick"] * 1e-3
    q, dq, tau = log.states["q"][:, joint], log.states["dq"][:, joint], log.states["tau"][:, joint]
    jumps = np.abs(np.diff(c)) * kp[1:]
    edges = np.flatnonzero(jumps >= cfg.min_jump_nm) + 1
    if len(edges) < cfg.min_edges:
        raise CalibrationError(f"{what}: only {len(edges)} target steps of >= {cfg.min_jump_nm} Nm in the log "
                               f"(need {cfg.min_edges}): log too short or the excitation was clamped")
    per_edge = []
    for k in edges:
        ref = np.flatnonzero(ticks <= tc[k] + 1e-6)
        if not len(ref):
            continue
        after = np.flatnonzero((ticks > tc[k] + 1e-6) & (ticks <= tc[k] + cfg.max_latency_s))
        nxt = edges[edges > k]
        if len(nxt):  # stop at the next step
            after = after[ticks[after] < tc[nxt[0]] + 1e-6]
        if len(after) < 3:
            continue
        idx = np.concatenate([[ref[-1]], after])  # the state the command was computed from, then the rest
        old = kp[k - 1] * (c[k - 1] - q[idx]) - kd[k - 1] * dq[idx]
        new = kp[k] * (c[k] - q[idx]) - kd[k] * dq[idx]
        is_new = np.abs(tau[idx] - new) < np.abs(tau[idx] - old)
        if is_new[0]:  # the torque before the step already looks like the new target: no transition to time
            continue
        hit = np.flatnonzero(is_new[1:-1] & is_new[2:])
        if len(hit):
            per_edge.append(float(ticks[after[hit[0]]] - tc[k]))
    if not per_edge:
        raise CalibrationError(
            f"{what}: no response to {len(edges)} target steps on {g1.JOINT_NAMES[joint]} within "
            f"{cfg.max_latency_s * 1e3:.0f} ms: the motor does not follow commands (disabled, locomotion service "
            "not released?) or the robot does not report tau_est")
    if len(per_edge) < cfg.min_edges:
        raise CalibrationError(f"{what}: only {len(per_edge)} of {len(edges)} target steps got a response "
                               f"(need {cfg.min_edges}): noisy tau_est or lost commands")
    lat = np.array(per_edge)
    q25, q75 = np.percentile(lat, [25, 75])
    if q75 - q25 > cfg.max_spread_s:
        raise CalibrationError(f"{what}: per-step latencies disagree (interquartile range {(q75 - q25) * 1e3:.1f} ms "
                               f"> {cfg.max_spread_s * 1e3:.1f} ms): a jittery link or noisy tau_est; repeat with more "
                               "edges (--latency-edges)")
    lockstep = bool(log.meta.get("lockstep", False))
    period = log.state_period
    latency = float(np.median(lat))
    delay = latency - (period if lockstep else period / 2)
    return LatencyResult(latency, float(lat.std()), max(0.0, delay), period, len(lat), len(edges), tuple(lat),
                         g1.JOINT_NAMES[joint], lockstep)
