"""Velocity commands for velocity policies: a schedule on the run's clock (dry runs,
`--velocity VX,VY,WZ@T0-T1 ...`) or the remote's sticks (the robot), clipped by the runtime to the
policy's command ranges. Pure functions, no I/O.

Sticks (Unitree's wireless remote, values in [-1, 1]): left stick up (ly > 0) = forward lin_vel_x,
left stick right (lx > 0) = lin_vel_y to the right (negative y), right stick right (rx > 0) = turn
clockwise (negative ang_vel_z). Inside the dead zone a stick is 0; outside it the deflection is
rescaled to 0..1 and mapped onto the range's positive or negative end.
"""
from __future__ import annotations

import re
from typing import NamedTuple, Sequence

import numpy as np

from robots.physics import upright_cos

DEAD_ZONE = 0.1  # of full stick deflection
SETTLE_S = 1.0  # a velocity policy keeps running this long at zero command after the schedule's end


class VelocityWindow(NamedTuple):
    t0: float
    t1: float
    cmd: tuple[float, float, float]  # lin_vel_x, lin_vel_y (m/s), ang_vel_z (rad/s)


_ITEM = re.compile(r"^\s*([-+0-9.eE]+),([-+0-9.eE]+),([-+0-9.eE]+)@([0-9.eE+]+)-([0-9.eE+]+)\s*$")


def parse_schedule(items: Sequence[str]) -> tuple[VelocityWindow, ...]:
    """["0.5,0,0@5-10", ...] -> windows; ValueError naming the bad item and the syntax."""
    out = []
    for raw in items:
        for it in str(raw).split():
            m = _ITEM.match(it)
            if not m:
                raise ValueError(f"--velocity {it!r}: expected VX,VY,WZ@T0-T1 (m/s, m/s, rad/s @ seconds on the "
                                 "run's clock), e.g. 0.5,0,0@5-10")
            vx, vy, wz, t0, t1 = (float(x) for x in m.groups())
            if not (np.isfinite([vx, vy, wz, t0, t1]).all() and 0 <= t0 < t1):
                raise ValueError(f"--velocity {it!r}: needs finite values and 0 <= T0 < T1")
            out.append(VelocityWindow(t0, t1, (vx, vy, wz)))
    out.sort()
    for a, b in zip(out, out[1:]):
        if b.t0 < a.t1:
            raise ValueError(f"--velocity windows overlap: {a.t0:g}-{a.t1:g} s and {b.t0:g}-{b.t1:g} s")
    return tuple(out)


def scheduled(windows: Sequence[VelocityWindow], t: float) -> tuple[float, float, float]:
    """The command at run time t (zero outside every window)."""
    for w in windows:
        if w.t0 <= t < w.t1:
            return w.cmd
    return (0.0, 0.0, 0.0)


def schedule_end(windows: Sequence[VelocityWindow]) -> float:
    return max((w.t1 for w in windows), default=0.0)


def _axis(s: float, lo: float, hi: float, dead_zone: float) -> float:
    a = abs(float(s)) if np.isfinite(s) else 0.0
    if a <= dead_zone:
        return 0.0
    a = min(1.0, (a - dead_zone) / (1.0 - dead_zone))
    return a * hi if s > 0 else (a * lo if lo < 0 else 0.0)


def stick_command(lx: float, ly: float, rx: float, ranges: dict, dead_zone: float = DEAD_ZONE):
    """Remote sticks -> (lin_vel_x, lin_vel_y, ang_vel_z) within `ranges` {name: (lo, hi)}."""
    def rng(name, default=(-0.5, 0.5)):
        return ranges.get(name) or default
    vx = _axis(ly, *rng("lin_vel_x"), dead_zone)
    vy = _axis(-lx, *rng("lin_vel_y"), dead_zone)
    wz = _axis(-rx, *rng("ang_vel_z"), dead_zone)
    return (vx, vy, wz)


def run_s(windows: Sequence[VelocityWindow], policy_s: float | None, kind: str = "velocity",
          default_s: float = 60.0) -> float | None:
    """How long a velocity policy may run: --policy-s, else to the schedule's end + SETTLE_S (on the run's
    clock; the loop shortens it at POLICY entry), else default_s (the robot, driven by the sticks).
    None for motion and tracking policies (they end with their reference)."""
    if kind != "velocity":
        return None
    if policy_s is not None:
        return float(policy_s)
    return schedule_end(windows) + SETTLE_S if windows else float(default_s)


def policy_command(windows: Sequence[VelocityWindow], spec, t: float, remote) -> tuple[float, float, float]:
    """The schedule's command at run time t, else the remote's sticks within the policy's command ranges
    (the runtime clips to the ranges again)."""
    if windows:
        return scheduled(windows, t)
    ranges = {n: spec.command_range(n) for n in ("lin_vel_x", "lin_vel_y", "ang_vel_z")}
    return stick_command(remote.lx, remote.ly, remote.rx, {k: v for k, v in ranges.items() if v})


def run_metrics(gt_history, t, tick, in_policy, cmd_t, cmd, settle_s: float = SETTLE_S) -> dict | None:
    """Commanded vs achieved velocity of a velocity-policy run, from the bridge's ground truth.

    t, tick, in_policy: the command-tick log (run time s, LowState tick ms, POLICY mask); cmd_t, cmd: the
    command of each policy step. Per stretch of constant command (>= settle_s + 0.5 s): the command and
    the mean achieved pelvis velocity (body frame x, y; world yaw rate) after its first settle_s; over
    POLICY: displacement and path length (m), heading change and max tilt (deg)."""
    t, tick, in_policy = (np.asarray(a) for a in (t, tick, in_policy))
    if gt_history is None or not np.any(in_policy) or len(cmd_t) == 0:
        return None
    i = np.flatnonzero(in_policy)
    p0, p1 = float(t[i[0]]), float(t[i[-1]])
    ok = np.isfinite(tick) & np.isfinite(t)
    to_tick = lambda x: float(np.interp(x, t[ok], tick[ok]))  # noqa: E731 - run time -> robot tick (ms)
    hist = sorted((g for g in list(gt_history) if to_tick(p0) <= int(g.tick) <= to_tick(p1)), key=lambda g: int(g.tick))
    if len(hist) < 2:
        return {"info": "no ground truth during POLICY"}
    gtk = np.array([int(g.tick) for g in hist], float)
    pos = np.array([g.pos for g in hist], float)
    quat = np.array([g.quat for g in hist], float)
    vb = np.array([g.lin_vel_body for g in hist], float)
    wz = np.array([g.ang_vel_world[2] for g in hist], float)
    w, x, y, z = quat.T
    yaw = np.unwrap(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))
    tilt = np.degrees(np.arccos(np.clip(upright_cos(quat), -1.0, 1.0)))
    cmd_t, cmd = np.asarray(cmd_t, float), np.asarray(cmd, float)
    segs, start = [], 0
    for j in range(1, len(cmd_t) + 1):
        if j == len(cmd_t) or np.any(cmd[j] != cmd[start]):
            a, b = cmd_t[start] + settle_s, (cmd_t[j] if j < len(cmd_t) else p1)
            sel = (gtk >= to_tick(a)) & (gtk <= to_tick(b))
            if b - a >= 0.5 and sel.sum() > 1:
                segs.append({"t0": round(float(cmd_t[start]), 3), "t1": round(float(b), 3),
                             "commanded": [round(float(v), 4) for v in cmd[start]],
                             "achieved": [round(float(vb[sel, 0].mean()), 4), round(float(vb[sel, 1].mean()), 4),
                                          round(float(wz[sel].mean()), 4)],
                             "achieved_over_commanded_x": (round(float(vb[sel, 0].mean() / cmd[start][0]), 3)
                                                           if abs(cmd[start][0]) > 1e-6 else None)})
            start = j
    return {"policy_s": round(p1 - p0, 3), "segments": segs,
            "distance_m": round(float(np.linalg.norm(pos[-1, :2] - pos[0, :2])), 4),
            "path_m": round(float(np.sum(np.linalg.norm(np.diff(pos[:, :2], axis=0), axis=1))), 4),
            "heading_change_deg": round(float(np.degrees(yaw[-1] - yaw[0])), 2),
            "max_tilt_deg": round(float(tilt.max()), 2),
            "info": f"bridge ground truth, {len(hist)} samples in POLICY; achieved = mean after the first "
                    f"{settle_s:g} s of each constant command (body-frame x, y; world yaw rate)"}
