"""Dynamic-motion measurements of an episode (flight, apex, forward displacement, torque demand),
accumulated per physics step by `MotionMeter` and summarised over episodes by `motion_stats`.

Definitions (also in eval.json's "definitions"):
- flight_time_s: the longest run of physics steps in which no robot geom touches the floor (the
  bridge model's contacts: both feet off, and nothing else down, so a fall is not a flight), s.
- pelvis_apex_rise_m: max pelvis height over the episode minus the standing height 0.785 m.
- forward_displacement_m: pelvis x when the episode ends (standing in the landed stance) minus
  pelvis x when it starts (standing in the take-off stance); None when the episode fell.
- peak_torque_ratio: per joint group (legs, waist, arms), the max over physics steps and the
  group's joints of |PD torque demanded| / motor limit, before the drive's clip: 1 = at the limit,
  above 1 = the drive saturated (it applied the limit).
"""
from __future__ import annotations

import numpy as np

from robots import g1

GROUPS = {"legs": np.r_[0:12], "waist": np.r_[12:15], "arms": np.r_[15:29]}


class MotionMeter:
    """Accumulates one episode's measurements from a bridge-model MjModel/MjData pair."""

    def __init__(self, m, floor_geom: int, foot_bodies, base_x0: float):
        self.m, self.floor = m, int(floor_geom)
        self.foot_of_geom = np.full(m.ngeom, -1)
        for i, b in enumerate(foot_bodies):
            self.foot_of_geom[np.asarray(m.geom_bodyid) == b] = i
        self.dt = float(m.opt.timestep)
        self.x0 = float(base_x0)
        self.run = self.longest = 0
        self.z_max = -np.inf
        self.tau_ratio = np.zeros(g1.NUM_MOTORS)

    def feet_on_floor(self, d) -> np.ndarray:
        """(2,) bool: a geom of that foot touches the floor now."""
        n = d.ncon
        on = np.zeros(2, bool)
        if n:
            g1_, g2_ = d.contact.geom1[:n], d.contact.geom2[:n]
            other = np.where(g1_ == self.floor, g2_, np.where(g2_ == self.floor, g1_, -1))
            feet = self.foot_of_geom[other[other >= 0]]
            on[feet[feet >= 0]] = True
        return on

    def airborne(self, d) -> bool:
        """No contact involves the floor now."""
        n = d.ncon
        return not (n and ((d.contact.geom1[:n] == self.floor) | (d.contact.geom2[:n] == self.floor)).any())

    def step(self, d, tau_demand: np.ndarray, pelvis_z: float) -> None:
        """After each physics step: contacts, pelvis height, the PD torque the drives were asked for."""
        if not self.airborne(d):
            self.run = 0
        else:
            self.run += 1
            self.longest = max(self.longest, self.run)
        self.z_max = max(self.z_max, pelvis_z)
        np.maximum(self.tau_ratio, np.abs(tau_demand) / g1.TORQUE_LIMIT, out=self.tau_ratio)

    def result(self, base_x_end: float | None) -> dict:
        return {
            "flight_time_s": self.longest * self.dt,
            "pelvis_apex_rise_m": float(self.z_max - g1.DEFAULT_BASE_HEIGHT) if np.isfinite(self.z_max) else None,
            "forward_displacement_m": None if base_x_end is None else float(base_x_end - self.x0),
            "peak_torque_ratio": {k: float(self.tau_ratio[ix].max()) for k, ix in GROUPS.items()},
        }


def _stats(vals, keys=("mean", "min", "max")):
    v = [x for x in vals if x is not None]
    if not v:
        return None
    f = {"mean": np.mean, "min": np.min, "max": np.max}
    return {k: float(f[k](v)) for k in keys}


def motion_stats(results: list[dict]) -> dict:
    """eval.json's dynamic-motion keys from the per-episode results."""
    return {
        "flight_time_s": _stats([r.get("flight_time_s") for r in results], ("mean", "min")),
        "pelvis_apex_rise_m": _stats([r.get("pelvis_apex_rise_m") for r in results], ("mean", "min")),
        "forward_displacement_m": _stats([r.get("forward_displacement_m") for r in results]),
        "peak_torque_ratio": {k: _stats([r["peak_torque_ratio"][k] for r in results if r.get("peak_torque_ratio")],
                                        ("mean", "max")) for k in GROUPS},
    }


DEFINITIONS = {
    "flight_time_s": "longest time with no robot geom touching the floor (bridge model contacts: both feet off, "
                     "nothing else down), per episode; mean and min over episodes",
    "pelvis_apex_rise_m": "max pelvis height over the episode minus the standing height 0.785 m; mean and min",
    "forward_displacement_m": "pelvis x at the episode's end (landed stance, after HOLD) minus at its start "
                              "(take-off stance); fallen episodes excluded; mean, min, max",
    "peak_torque_ratio": "per joint group (legs, waist, arms): max over physics steps and joints of |PD torque "
                         "demanded| / motor limit before the drive's clip (> 1: saturated); mean and max over episodes",
}
