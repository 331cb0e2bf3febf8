"""Whole-body tracking of a clip (`env.task = "tracking"`): the reference's anchor and key bodies as the target,
BeyondMimic's reward kernels, start frames drawn where episodes fail, episodes as windows of the clip.

The field's form is BeyondMimic's (HybridRobotics/whole_body_tracking, mjlab's `tracking` task): its G1
settings are the defaults here.

Rewards (`reward_terms`), each exp(-e^2 / sigma^2) in (0, 1]:

| term | e^2 | sigma |
|---|---|---|
| `anchor_pos` | \\|p_anchor - p*_anchor\\|^2 (world, m^2) | 0.3 m |
| `anchor_ori` | chordal angle^2 of R_anchor vs R*_anchor (`rot_err_sq`) | 0.4 rad |
| `body_pos` | mean over key bodies of \\|p_b - p~_b\\|^2, p~ the reference relative to the anchor (`relative_to_anchor`) | 0.3 m |
| `body_ori` | mean over key bodies of chordal angle^2 of R_b vs R~_b | 0.4 rad |
| `body_lin_vel` | mean over key bodies of \\|v_b - v*_b\\|^2 (world, body origin) | 1.0 m/s |
| `body_ang_vel` | mean over key bodies of \\|w_b - w*_b\\|^2 (world) | 3.14 rad/s |
| `joint_pos` | sum over the 29 joints of (q - q*)^2 | 0.7071 rad (train/rewards.py's K_JOINT_POS = 2 = 1 / sigma^2) |
| `com_support` | in the reference's one-leg stances, \\|c_xy - f_xy\\|^2: the robot's centre of mass over the centre of its own stance foot's sole spheres (the stance foot: the reference's); 0 elsewhere | 0.1 m |
| `com_feet` | wherever the reference has a foot down, \\|(c_xy - s_xy) - (c*_xy - s*_xy)\\|^2: the robot's centre of mass relative to its support point s as the reference's is to its own s*; s the centre of the stance foot's sole spheres in a one-leg stance, the mean of the two feet's in double stance (the feet down: the reference's); 0 in flight | 0.1 m |

sigmas and the weights anchor 0.5 / 0.5, bodies 1.0 each, action rate -0.1 are BeyondMimic's G1 settings;
`joint_pos` (weight 1.0), `residual` (-0.2: the clip weights of motions/clips.py), `torque` (-1e-5) and `fall`
(-10) are this repository's imitation terms (train/rewards.py), kept for SHAC's residual policy. `com_support`
(weight 0 by default) is a balance term of the robot itself, not of the reference: a reference whose centre of
mass leaves the stance foot still asks the robot to keep its own over it. `com_feet` (weight 0 by default) asks
for the reference's own weight shift: where the reference moves its centre of mass toward the foot it will stand
on, the robot's is asked to move by as much relative to its own feet (`anchor_pos`, in the world at 0.3 m, and the
bodies, relative to the anchor, leave a 10 cm sideways lean of the whole robot almost free).
Chordal angle^2 = 4 sin^2(theta / 2) = 0.5 \\|R_a - R_b\\|_F^2: theta^2 (BeyondMimic's quaternion error
magnitude squared) within theta^2 / 12 (1.3 % at 0.4 rad), and smooth at theta = 0 where theta^2 through
arccos has no gradient.

Relative to the anchor (BeyondMimic's body_pos_relative_w): the reference bodies turned about z by the yaw
of R_anchor R*_anchor^T and moved so the reference anchor sits at the robot anchor's x, y (the reference
anchor's height kept); body velocities are compared in the world frame as BeyondMimic does.

Termination (`tracking_failed`, BeyondMimic's thresholds): |z_anchor - z*_anchor| > 0.25 m, |g_z - g*_z| > 0.8
for the anchor's projected gravity (its z axis' world z component), or any end effector (ankle roll links,
wrist yaw links) with |z_b - z*_b| > 0.25 m; plus the one fall criterion (robots.physics.fallen).

Start frames (`start_probabilities`, `sample_start`): the clip in bins of `bin_s` = 1 s (BeyondMimic's bin);
per bin an exponential moving average of failures per control step (`update_counts`, alpha = 0.005 per
control step: a memory of 200 steps, 12.5 SHAC iterations of 16 steps); smoothed with the non-causal kernel
lambda^j, j = 0..kernel_size - 1 (lambda 0.8, size 3: a failing bin raises the two bins before it, so the
lead-in to it is practised); normalised; mixed with the uniform distribution so every bin keeps at least
floor / n_bins (floor 0.1, BeyondMimic's adaptive_uniform_ratio). No failures yet: uniform. The start frame is
uniform within the drawn bin, at most the clip's last frame - 1.

Start states (`perturb_start`, `start_noise` times BeyondMimic's reset ranges, 0 by default): the reference's
state at the drawn frame with uniform noise on the pelvis position (x, y 5 cm, z 1 cm), orientation (roll,
pitch 0.1 rad, yaw 0.2 rad, applied in the world frame), linear velocity (x, y 0.5 m/s, z 0.2 m/s, world) and
angular velocity (0.52, 0.52, 0.78 rad/s, in the pelvis frame: MuJoCo's free joint) and on every joint (0.1 rad,
clipped to its range); the env then lifts the pelvis so no foot sphere starts below the floor. A start at a
given frame (`G1Env.reset(frame=...)`: replays, evaluation) stays the reference's own state.

Episodes are windows: an episode that starts at frame s ends (truncated, so SHAC bootstraps its value) at
min(s + window_s / control_dt, T - 1), window_s = 2 s: a 15 s clip's 15 bins are all reached by a 32-env
batch within a few SHAC iterations.
"""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from policies import tracking as PT
from policies.tracking import KEY_BODIES
from robots.physics import quat_mul
from train import rewards as R

END_EFFECTORS = ("left_ankle_roll_link", "right_ankle_roll_link", "left_wrist_yaw_link", "right_wrist_yaw_link")
DEFAULT_WEIGHTS = {"anchor_pos": 0.5, "anchor_ori": 0.5, "body_pos": 1.0, "body_ori": 1.0, "body_lin_vel": 1.0,
                   "body_ang_vel": 1.0, "joint_pos": 1.0, "action_rate": -0.1, "residual": -0.2, "torque": -1.0e-5,
                   "fall": -10.0, "com_support": 0.0, "com_feet": 0.0}
TERMS = tuple(DEFAULT_WEIGHTS)


@dataclasses.dataclass(frozen=True)
class TrackingConfig:
    anchor_body: str = "torso_link"
    bodies: tuple[str, ...] = KEY_BODIES
    end_effectors: tuple[str, ...] = END_EFFECTORS
    sigma_anchor_pos: float = 0.3  # m
    sigma_anchor_ori: float = 0.4  # rad
    sigma_body_pos: float = 0.3  # m
    sigma_body_ori: float = 0.4  # rad
    sigma_body_lin_vel: float = 1.0  # m/s
    sigma_body_ang_vel: float = 3.14  # rad/s
    sigma_joint_pos: float = 1.0 / math.sqrt(R.K_JOINT_POS)  # rad, on the sum over joints
    sigma_com_support: float = 0.1  # m
    sigma_com_feet: float = 0.1  # m
    weights: tuple[tuple[str, float], ...] = tuple(DEFAULT_WEIGHTS.items())  # (term, weight); missing -> default
    anchor_z_limit: float = 0.25  # m
    anchor_gravity_limit: float = 0.8  # on the projected gravity's z component
    end_effector_z_limit: float = 0.25  # m
    window_s: float = 2.0  # s: the episode's window of the clip
    bin_s: float = 1.0  # s: adaptive sampling bin
    kernel_size: int = 3
    kernel_lambda: float = 0.8
    uniform_floor: float = 0.1  # the uniform share of the start distribution
    count_alpha: float = 0.005  # per control step: the failure counts' moving-average rate
    start_noise: float = 0.0  # multiplier of START_NOISE on a drawn start (1: BeyondMimic's ranges; 0: the reference's state)

    def __post_init__(self):
        for k in ("sigma_anchor_pos", "sigma_anchor_ori", "sigma_body_pos", "sigma_body_ori", "sigma_body_lin_vel",
                  "sigma_body_ang_vel", "sigma_joint_pos", "sigma_com_support", "sigma_com_feet", "window_s", "bin_s", "anchor_z_limit",
                  "anchor_gravity_limit", "end_effector_z_limit"):
            v = getattr(self, k)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"env.tracking.{k}={v}: use a finite value > 0")
        if not (math.isfinite(self.start_noise) and self.start_noise >= 0.0):
            raise ValueError(f"env.tracking.start_noise={self.start_noise}: use a finite multiplier >= 0 (1: "
                             "BeyondMimic's start ranges, train/tracking.py START_NOISE)")
        if not 0.0 <= self.uniform_floor <= 1.0:
            raise ValueError(f"env.tracking.uniform_floor={self.uniform_floor}: a share in [0, 1]")
        if not 0.0 < self.count_alpha <= 1.0:
            raise ValueError(f"env.tracking.count_alpha={self.count_alpha}: use a rate in (0, 1]")
        if self.kernel_size < 1 or not 0.0 < self.kernel_lambda <= 1.0:
            raise ValueError(f"env.tracking.kernel_size={self.kernel_size} (>= 1), kernel_lambda="
                             f"{self.kernel_lambda} (in (0, 1])")
        unknown = sorted({k for k, _ in self.weights} - set(TERMS))
        if unknown:
            raise ValueError(f"env.tracking.weights: unknown terms {unknown}; known: {list(TERMS)} (train/tracking.py)")
        # canonical: every term in TERMS order, so a config saved before a term existed equals today's default
        object.__setattr__(self, "weights", tuple(self.weight_map().items()))
        for name in (self.anchor_body, *self.bodies, *self.end_effectors):
            if not isinstance(name, str) or not name:
                raise ValueError(f"env.tracking: body names must be non-empty strings, got {name!r}")
        missing = sorted(set(self.end_effectors) - set(self.bodies))
        if missing:
            raise ValueError(f"env.tracking.end_effectors {missing} are not in env.tracking.bodies")

    def weight_map(self) -> dict[str, float]:
        return {**DEFAULT_WEIGHTS, **{k: float(v) for k, v in self.weights}}


# ---------------------------------------------------------------------------------------------- rotations
def rot6d(rot):
    """First two columns of a rotation matrix, row by row (policies.tracking.rot6d, on jax arrays)."""
    return rot[..., :, :2].reshape(rot.shape[:-2] + (6,))


def rot_err_sq(ra, rb):
    """Chordal angle^2 between rotations: 0.5 ||Ra - Rb||_F^2 = 4 sin^2(theta / 2)."""
    return 0.5 * jnp.sum((ra - rb) ** 2, axis=(-2, -1))


def quat_to_mat(q):
    """w, x, y, z (unit) -> rotation matrix, on jax arrays."""
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return jnp.stack([
        jnp.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        jnp.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        jnp.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1)], -2)


def axis_angle(axis, angle):
    """Rotation matrix of `angle` about the unit `axis` (Rodrigues)."""
    x, y, z = axis[0], axis[1], axis[2]
    k = jnp.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]], dtype=jnp.asarray(angle).dtype)
    return jnp.eye(3, dtype=k.dtype) + jnp.sin(angle) * k + (1 - jnp.cos(angle)) * (k @ k)


def quat_from_rpy(rpy):
    """w, x, y, z of the rotation yaw(z) * pitch(y) * roll(x) for rpy = (roll, pitch, yaw)."""
    half = 0.5 * jnp.asarray(rpy)
    (cr, cp, cy), (sr, sp, sy) = jnp.cos(half), jnp.sin(half)
    return jnp.stack([cr * cp * cy + sr * sp * sy, sr * cp * cy - cr * sp * sy,
                      cr * sp * cy + sr * cp * sy, cr * cp * sy - sr * sp * cy])


class Chain(NamedTuple):
    """The rotation of a body in the pelvis frame: per body from the pelvis's child to it, its fixed rotation
    in the parent and its hinge's axis and joint (motor) index (-1: no joint)."""
    body_rot: np.ndarray  # (n, 3, 3)
    axis: np.ndarray  # (n, 3)
    motor: np.ndarray  # (n,)


def chain_of(m, body: str, motor_qadr: np.ndarray) -> Chain:
    """The Chain of `body` on the MuJoCo model m (hinge joints only; the pelvis: an empty chain)."""
    import mujoco

    b = m.body(body).id
    rows = []
    while m.body_parentid[b] != 0:  # up to the pelvis (the free body)
        r = np.empty(9)
        mujoco.mju_quat2Mat(r, m.body_quat[b])
        nj = m.body_jntnum[b]
        if nj > 1 or (nj == 1 and m.jnt_type[m.body_jntadr[b]] != mujoco.mjtJoint.mjJNT_HINGE):
            raise ValueError(f"body {m.body(b).name}: only one hinge joint per body is supported")
        j = m.body_jntadr[b] if nj else -1
        motor = int(np.flatnonzero(motor_qadr == m.jnt_qposadr[j])[0]) if nj else -1
        rows.append((r.reshape(3, 3), m.jnt_axis[j] if nj else np.zeros(3), motor))
        b = m.body_parentid[b]
    rows.reverse()
    if not rows:
        return Chain(np.zeros((0, 3, 3)), np.zeros((0, 3)), np.zeros(0, int))
    return Chain(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]), np.array([r[2] for r in rows]))


def rot_in_pelvis(chain: Chain, q):
    """The chain's body rotation in the pelvis frame at joint positions q (motor order)."""
    rot = jnp.eye(3, dtype=q.dtype)
    for k in range(chain.body_rot.shape[0]):
        rot = rot @ jnp.asarray(chain.body_rot[k], q.dtype)
        if chain.motor[k] >= 0:
            rot = rot @ axis_angle(jnp.asarray(chain.axis[k], q.dtype), q[chain.motor[k]])
    return rot


def origin_velocity(cvel, xpos, root_com, xp=jnp):
    """(linear, angular) world velocity of body origins from MuJoCo's com-based cvel (rotation, then translation
    at the subtree com of the body's root): v = v_com - (x - c) x w. Equal to mj_jacBody's J qdot."""
    return cvel[..., 3:] - xp.cross(xpos - root_com, cvel[..., :3]), cvel[..., :3]


def anchor_ori_b(robot_anchor_rot, ref_anchor_rot):
    """The observation term motion_anchor_ori_b: R_robot^T R_ref as 6 numbers (policies.tracking)."""
    return rot6d(jnp.swapaxes(robot_anchor_rot, -1, -2) @ ref_anchor_rot)


# ---------------------------------------------------------------------------------------------- rewards
class TrackingInputs(NamedTuple):
    anchor: int  # index of the anchor among the bodies
    body_pos: jax.Array  # (B, 3) robot, world
    body_rot: jax.Array  # (B, 3, 3)
    body_lin_vel: jax.Array  # (B, 3) world, at the body origin
    body_ang_vel: jax.Array  # (B, 3) world
    ref_body_pos: jax.Array  # (B, 3) reference, world
    ref_body_rot: jax.Array  # (B, 3, 3)
    ref_body_lin_vel: jax.Array  # (B, 3)
    ref_body_ang_vel: jax.Array  # (B, 3)
    q: jax.Array  # (29,)
    ref_q: jax.Array  # (29,)
    action: jax.Array  # (29,)
    last_action: jax.Array
    ref_action: jax.Array
    torque_sq: jax.Array  # ()
    fell: jax.Array  # () bool
    com: jax.Array  # (3,) the robot's centre of mass, world
    foot_center: jax.Array  # (2, 3) left/right: the centre of each foot's sole spheres, world
    ref_contact: jax.Array  # (2,) bool: the reference's feet on the floor, left/right
    ref_com: jax.Array  # (3,) the reference's centre of mass, world
    ref_foot_center: jax.Array  # (2, 3) the reference's foot_center


def exp_kernel(err_sq, sigma: float):
    return jnp.exp(-err_sq / sigma ** 2)


def relative_to_anchor(anchor: int, body_pos, body_rot, ref_body_pos, ref_body_rot):
    """The reference bodies relative to the robot's anchor (policies.tracking.relative_to_anchor on jax)."""
    return PT.relative_to_anchor(anchor, body_pos, body_rot, ref_body_pos, ref_body_rot, xp=jnp)


def com_support_sq(com, foot_center, ref_contact):
    """|c_xy - f_xy|^2 over the stance foot in the reference's one-leg stances (exactly one foot down), else 0."""
    single = ref_contact[0] != ref_contact[1]
    foot = jnp.where(ref_contact[0], foot_center[0, :2], foot_center[1, :2])
    return jnp.where(single, jnp.sum((com[:2] - foot) ** 2), 0.0)


def support_point(foot_center, contact):
    """The xy point a stance stands on: the foot down in a one-leg stance, the feet's mean in double stance
    (flight: the feet's mean; the terms using it count only stances)."""
    w = jnp.where(jnp.any(contact), contact.astype(foot_center.dtype), jnp.ones(2, foot_center.dtype))
    return (w[:, None] * foot_center[:, :2]).sum(0) / w.sum()


def com_feet_sq(com, foot_center, ref_com, ref_foot_center, ref_contact):
    """|(c - s) - (c* - s*)|^2 in xy, s and s* the support points of the robot's and the reference's feet for
    the reference's feet down; 0 when the reference has no foot down."""
    e = (com[:2] - support_point(foot_center, ref_contact)) - (ref_com[:2] - support_point(ref_foot_center, ref_contact))
    return jnp.where(jnp.any(ref_contact), jnp.sum(e ** 2), 0.0)


def reward_terms(x: TrackingInputs, cfg: TrackingConfig) -> dict:
    a = x.anchor
    rel_pos, rel_rot = relative_to_anchor(a, x.body_pos, x.body_rot, x.ref_body_pos, x.ref_body_rot)
    return {
        "anchor_pos": exp_kernel(jnp.sum((x.body_pos[a] - x.ref_body_pos[a]) ** 2), cfg.sigma_anchor_pos),
        "anchor_ori": exp_kernel(rot_err_sq(x.body_rot[a], x.ref_body_rot[a]), cfg.sigma_anchor_ori),
        "body_pos": exp_kernel(jnp.mean(jnp.sum((x.body_pos - rel_pos) ** 2, -1)), cfg.sigma_body_pos),
        "body_ori": exp_kernel(jnp.mean(rot_err_sq(x.body_rot, rel_rot)), cfg.sigma_body_ori),
        "body_lin_vel": exp_kernel(jnp.mean(jnp.sum((x.body_lin_vel - x.ref_body_lin_vel) ** 2, -1)),
                                   cfg.sigma_body_lin_vel),
        "body_ang_vel": exp_kernel(jnp.mean(jnp.sum((x.body_ang_vel - x.ref_body_ang_vel) ** 2, -1)),
                                   cfg.sigma_body_ang_vel),
        "joint_pos": exp_kernel(jnp.sum((x.q - x.ref_q) ** 2), cfg.sigma_joint_pos),
        "action_rate": jnp.sum((x.action - x.last_action) ** 2),
        "residual": jnp.sum((x.action - x.ref_action) ** 2),
        "torque": x.torque_sq,
        "fall": x.fell.astype(x.q.dtype),
        "com_support": exp_kernel(com_support_sq(x.com, x.foot_center, x.ref_contact), cfg.sigma_com_support),
        "com_feet": exp_kernel(com_feet_sq(x.com, x.foot_center, x.ref_com, x.ref_foot_center, x.ref_contact),
                               cfg.sigma_com_feet),
    }


# BeyondMimic's G1 reset ranges (whole_body_tracking's pose_range, velocity_range, joint_position_range): the
# half-widths of uniform draws, times TrackingConfig.start_noise
START_NOISE = {
    "pos": (0.05, 0.05, 0.01),  # m, pelvis x, y, z (world)
    "rpy": (0.1, 0.1, 0.2),  # rad, roll, pitch, yaw of a rotation applied in the world frame
    "lin_vel": (0.5, 0.5, 0.2),  # m/s, pelvis (world)
    "ang_vel": (0.52, 0.52, 0.78),  # rad/s, pelvis (pelvis frame, MuJoCo's free joint)
    "joint_pos": 0.1,  # rad, every joint, then clipped to its range
}


def perturb_start(key, qpos, qvel, scale: float, qadr, q_min, q_max):
    """One env's start state (qpos (nq,), qvel (nv,), a free joint first) with START_NOISE * scale drawn from key;
    the joints (qpos[qadr]) clipped to [q_min, q_max]."""
    k = jax.random.split(key, 5)
    u = lambda key, half, n: scale * jnp.asarray(half, qpos.dtype) * jax.random.uniform(  # noqa: E731
        key, (n,), qpos.dtype, -1.0, 1.0)
    delta = quat_from_rpy(u(k[1], START_NOISE["rpy"], 3))
    quat = quat_mul(delta, qpos[3:7], xp=jnp)
    q = jnp.clip(qpos[qadr] + u(k[4], START_NOISE["joint_pos"], len(qadr)), q_min, q_max)
    qpos = qpos.at[0:3].add(u(k[0], START_NOISE["pos"], 3)).at[3:7].set(quat / jnp.linalg.norm(quat)).at[qadr].set(q)
    qvel = qvel.at[0:3].add(u(k[2], START_NOISE["lin_vel"], 3)).at[3:6].add(u(k[3], START_NOISE["ang_vel"], 3))
    return qpos, qvel


def total_reward(terms: dict, weights: dict):
    return sum(weights[k] * terms[k] for k in TERMS)


def tracking_failed(anchor: int, ee: np.ndarray, body_pos, body_rot, ref_body_pos, ref_body_rot,
                    cfg: TrackingConfig):
    """BeyondMimic's terminations: anchor height, anchor tilt (projected gravity z), end-effector heights."""
    dz = jnp.abs(body_pos[:, 2] - ref_body_pos[:, 2])
    dg = jnp.abs(body_rot[anchor, 2, 2] - ref_body_rot[anchor, 2, 2])
    return (dz[anchor] > cfg.anchor_z_limit) | (dg > cfg.anchor_gravity_limit) | \
        jnp.any(dz[ee] > cfg.end_effector_z_limit)


# ---------------------------------------------------------------------------------------------- start frames
def num_bins(frames: int, dt: float, bin_s: float) -> int:
    """Bins of bin_s covering the start frames 0..frames - 2."""
    return max(1, int(math.ceil((frames - 1) * dt / bin_s - 1e-9)))


def frames_per_bin(dt: float, bin_s: float) -> int:
    return max(1, int(round(bin_s / dt)))


def bin_of(frame, per_bin: int, n_bins: int):
    return jnp.clip(frame // per_bin, 0, n_bins - 1)


def update_counts(counts, fail_frames, failed, per_bin: int, alpha: float):
    """counts <- (1 - alpha) counts + alpha x (failures per bin this step); fail_frames (N,) the frame each env
    reached, failed (N,) bool."""
    n = counts.shape[0]
    hist = jnp.zeros(n, counts.dtype).at[bin_of(fail_frames, per_bin, n)].add(failed.astype(counts.dtype))
    return (1 - alpha) * counts + alpha * hist


def kernel(size: int, lam: float) -> np.ndarray:
    k = lam ** np.arange(size)
    return k / k.sum()


def start_probabilities(counts, size: int, lam: float, floor: float):
    """Per-bin start probabilities from failure counts: smoothed by the non-causal kernel lam^j (bin i gets
    sum_j k_j counts[i + j], the last bin repeated past the end), normalised, mixed with the uniform share
    `floor`; uniform when no bin has failed."""
    n = counts.shape[0]
    k = jnp.asarray(kernel(size, lam), counts.dtype)
    padded = jnp.concatenate([counts, jnp.repeat(counts[-1:], size - 1)])
    smooth = sum(k[j] * padded[j:j + n] for j in range(size))
    total = smooth.sum()
    uniform = jnp.full(n, 1.0 / n, counts.dtype)
    adaptive = smooth / jnp.where(total > 0, total, 1.0)
    return jnp.where(total > 0, (1 - floor) * adaptive + floor * uniform, uniform)


def sample_start(key, probs, per_bin: int, frames: int):
    """A start frame: a bin drawn from probs, then a frame uniform in it, at most frames - 2."""
    kb, kf = jax.random.split(key)
    b = jax.random.choice(kb, probs.shape[0], p=probs)
    return jnp.minimum(b * per_bin + jax.random.randint(kf, (), 0, per_bin), frames - 2).astype(jnp.int32)


def window_end(start, frames: int, window_steps: int):
    """The last step of an episode starting at frame `start`: its window's end, at most the clip's last frame."""
    return jnp.minimum(start + window_steps, frames - 1).astype(jnp.int32)
