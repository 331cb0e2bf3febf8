"""Target schedules for the routines: poses, multisine excitation, latency square wave.

All amplitudes are bounded here by the soft joint limits of `safety.limits` (and the session's
SafetyMonitor clamps every command again: rate = the joint's velocity limit, PD torque within the
motor limit). Joint groups are the motor-index groups of robots/g1.py.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from robots import g1
from safety.limits import soft_limits

GROUPS: dict[str, tuple[int, ...]] = {
    "legs": tuple(range(0, 12)),
    "waist": tuple(range(12, 15)),
    "arms": tuple(range(15, 29)),
}
# finer groups for a user who wants them (--groups left_arm,...)
FINE_GROUPS: dict[str, tuple[int, ...]] = {
    "left_leg": tuple(range(0, 6)), "right_leg": tuple(range(6, 12)),
    "left_arm": tuple(range(15, 22)), "right_arm": tuple(range(22, 29)),
    "ankles": (4, 5, 10, 11), "wrists": (19, 20, 21, 26, 27, 28),
}
ALL_GROUPS = {**GROUPS, **FINE_GROUPS}


def group_joints(name: str) -> tuple[int, ...]:
    if name not in ALL_GROUPS:
        raise ValueError(f"unknown joint group {name!r}; use one of {sorted(ALL_GROUPS)}")
    return ALL_GROUPS[name]


def hang_pose() -> np.ndarray:
    """Pose held on the gantry / elastic band: the default pose with legs and arms spread (hip roll
    +-0.25, shoulder roll +-0.6, knee 0.5, elbow 1.0) so that excited links stay clear of each
    other, of the torso and of the hips (checked by `self_contacts`), and every excited joint has
    room both ways."""
    q = g1.DEFAULT_JOINT_POS.copy()
    for side, sign in ((0, 1), (6, -1)):
        q[side + 1] = 0.25 * sign  # hip roll outward
        q[side + 3] = 0.5  # knee (away from its lower limit)
        q[side + 4] = -0.25  # ankle pitch
    for side, sign in ((15, 1), (22, -1)):
        q[side + 0] = 0.0  # shoulder pitch
        q[side + 1] = 0.6 * sign  # shoulder roll outward
        q[side + 3] = 1.0  # elbow
    return q


def room(q0: np.ndarray, fraction: float = 0.8) -> np.ndarray:
    """Per joint, `fraction` of the distance from q0 to the nearer soft limit (rad)."""
    lo, hi = soft_limits()
    return fraction * np.maximum(0.0, np.minimum(q0 - lo, hi - q0))


@dataclasses.dataclass(frozen=True)
class Multisine:
    """q*(t) = q0 + ramp(t) * sum_k a_k sin(2 pi f_k t + phi_k), per excited joint.

    Each excited joint gets its own interleaved subset of `n_freq * n_joints` log-spaced
    frequencies in [f_min, f_max] (so joints are uncorrelated), amplitude ~ f^-0.5, random
    (seeded) phases, the peak scaled to that joint's amplitude."""

    joints: tuple[int, ...]
    q0: np.ndarray
    amplitude: np.ndarray  # (n_joints,) rad peak
    f_min: float = 0.4
    f_max: float = 8.0
    n_freq: int = 6
    ramp_s: float = 0.5
    duration: float = 6.0
    seed: int = 0
    mirror: tuple | None = None

    def __post_init__(self):
        n = len(self.joints)
        freqs = np.geomspace(self.f_min, self.f_max, self.n_freq * n)
        rng = np.random.default_rng(self.seed)
        self_f = np.stack([freqs[i::n] for i in range(n)])  # (n, n_freq)
        phases = rng.uniform(0, 2 * np.pi, self_f.shape)
        weights = self_f ** -0.5
        t = np.arange(0.0, self.duration, 1e-3)
        peak = np.array([np.abs((weights[i, :, None] * np.sin(2 * np.pi * self_f[i, :, None] * t + phases[i, :, None]))
                                .sum(0)).max() for i in range(n)])
        object.__setattr__(self, "freqs", self_f)
        object.__setattr__(self, "phases", phases)
        object.__setattr__(self, "coef", weights * (np.asarray(self.amplitude, float) / peak)[:, None])

    def offsets(self, t: float) -> np.ndarray:
        r = np.clip(min(t, self.duration - t) / self.ramp_s, 0.0, 1.0) if self.ramp_s > 0 else 1.0
        out = r * (self.coef * np.sin(2 * np.pi * self.freqs * t + self.phases)).sum(1)
        if self.mirror is not None:  # second half of the joints: the first half's motion, signed
            n = len(self.joints) // 2
            out[n:] = out[:n] * np.asarray(self.mirror)
        return out

    def __call__(self, t: float, state=None) -> np.ndarray:
        q = np.array(self.q0, float)
        q[list(self.joints)] += self.offsets(t)
        return q


def group_excitation(group: str, q0: np.ndarray | None = None, duration: float = 6.0, max_amplitude: float = 0.3,
                     seed: int = 0, clearance: float | None = None, **kw) -> Multisine:
    """Multisine on every joint of `group` around `q0` (default `hang_pose()`), peak amplitude
    min(max_amplitude, 0.8 x room to the soft limits). With `clearance` (m), the amplitude is shrunk
    (x0.85 per try) until no two links of the planned poses come closer than that (`self_contacts`)."""
    q0 = hang_pose() if q0 is None else np.asarray(q0, float)
    joints = group_joints(group)
    amp = np.minimum(max_amplitude, room(q0)[list(joints)])
    if (amp < 0.02).any():
        bad = [g1.JOINT_NAMES[j] for j, a in zip(joints, amp) if a < 0.02]
        raise ValueError(f"excitation pose leaves no room to move {bad} inside the soft limits")
    exc = Multisine(tuple(joints), q0, amp, duration=duration, seed=seed, **kw)
    if clearance is None:
        return exc
    for _ in range(12):
        pairs = self_contacts(exc, clearance)
        if not pairs:
            return exc
        amp = amp * 0.85
        exc = Multisine(tuple(joints), q0, amp, duration=duration, seed=seed, **kw)
    raise ValueError(f"excitation of {group} keeps links within {clearance} m of each other ({pairs[:3]}): "
                     "choose another pose")


_CLEARANCE_MODEL = {}


def self_contacts(schedule, clearance: float, dt: float = 0.01) -> list[tuple[str, str]]:
    """Pairs of bodies (floor excluded) that come within `clearance` m of each other along the
    planned targets (kinematics only, pelvis fixed upright; the real motion lags the targets),
    except neighbours that are that close already in the schedule's rest pose (q0)."""
    import mujoco

    from robots.model import build_bridge_spec, motor_qpos_adr

    if clearance not in _CLEARANCE_MODEL:
        spec = build_bridge_spec()
        for geom in spec.geoms:
            geom.margin = clearance
        m = spec.compile()
        m.geom_contype[m.geom("floor").id] = m.geom_conaffinity[m.geom("floor").id] = 0
        _CLEARANCE_MODEL[clearance] = (m, mujoco.MjData(m), motor_qpos_adr(m))
    m, d, qadr = _CLEARANCE_MODEL[clearance]

    def chain(a: int, b: int) -> bool:  # one body is an ancestor of the other (same limb)
        for x, y in ((a, b), (b, a)):
            while y > 0:
                y = m.body_parentid[y]
                if y == x:
                    return True
        return False

    def close(q) -> set:
        d.qpos[:7] = [0, 0, 1.0, 1, 0, 0, 0]
        d.qpos[qadr] = q
        mujoco.mj_kinematics(m, d)
        mujoco.mj_collision(m, d)
        out = set()
        for c in d.contact[: d.ncon]:
            b1, b2 = (int(m.geom_bodyid[g]) for g in c.geom)
            if c.dist < (0.0 if chain(b1, b2) else clearance):  # same limb: joint limits keep it apart
                out.add(tuple(sorted((m.body(b1).name, m.body(b2).name))))
        return out

    rest = close(schedule.q0)
    pairs = set()
    for t in np.arange(0.0, schedule.duration, dt):
        pairs |= close(schedule(t)) - rest
    return sorted(pairs)


@dataclasses.dataclass(frozen=True)
class SquareWave:
    """Steps between q0 and q0 + `amplitude` on one joint, a step every `period` s (jittered by up to
    `jitter` s, seeded, so real-time edges fall at every phase of the state period)."""

    joint: int
    q0: np.ndarray
    amplitude: float = 0.06  # rad: below one tick of the rate limit for every G1 joint (>= 20 rad/s x 2 ms)
    period: float = 0.12
    n_edges: int = 16
    jitter: float = 0.01
    seed: int = 0

    def __post_init__(self):
        rng = np.random.default_rng(self.seed)
        edges = self.period * (1 + np.arange(self.n_edges)) + rng.uniform(0, self.jitter, self.n_edges)
        object.__setattr__(self, "edges", edges)

    @property
    def duration(self) -> float:
        return float(self.edges[-1] + self.period)

    def level(self, t: float) -> float:
        k = int(np.searchsorted(self.edges, t, side="right"))
        return self.amplitude if k % 2 else 0.0

    def __call__(self, t: float, state=None) -> np.ndarray:
        q = np.array(self.q0, float)
        q[self.joint] += self.level(t)
        return q
