"""Whole-body-tracking terms (BeyondMimic / mjlab `command`, `motion_anchor_ori_b`, `motion_anchor_pos_b`;
holosoma `motion_command`, `motion_ref_ori_b`): the reference the graph bakes in, read back from the
graph's own outputs, and the robot's anchor body relative to it.

- The reference at policy step k is what the graph outputs for time_step k (`joint_pos`, `joint_vel`,
  the anchor's position and orientation), tabulated at load by running the graph on every step
  (`read_reference`); a step past the clip reads its last frame (the runtime ends the clip there).
- The robot's anchor is the pelvis (IMU orientation, estimated position) moved through the joints to the
  anchor body by forward kinematics on the G1 model (robots.body_frames): `torso_link` through the three
  waist joints.
- At the run's first step (the clip's first frame, or the frame a run starts at) the reference is turned about z
  so that its anchor heading is the robot's, and moved on the ground so that its anchor starts at the robot's
  (height kept): what the field's
  deploy code does (holosoma captures both yaws at start and removes them from both orientations; the
  product is the same rotation).
- Orientation term: the relative rotation R = R_robot^T R_ref as its first two columns, row by row
  (R[:, :2].reshape(-1), the exporters' `matrix_from_quat(...)[..., :2]`); position term: the reference
  anchor in the robot anchor's frame, R_robot^T (p_ref - p_robot).
- Native tracking artifacts (trained here with `env.task = tracking`) keep the reference as states in
  reference.npz (pelvis position and orientation, joints); the anchor's pose is their forward kinematics
  (`reference_from_states`), the same rotations the trainer observes.
- Body-position error (`body_pos_error`, eval's tracking measure): the mean over the key bodies of
  |p_b - p~_b|, p~ the reference moved so its anchor sits at the robot anchor's x, y and turned by the yaw
  between the two anchors (`relative_to_anchor`, the trainer's `body_pos` reward uses the same function).
"""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np

from robots.body_frames import BodyFrames, mat_to_quat, quat_to_mat, rot_z, yaw_of

QUAT_ORDERS = ("wxyz", "xyzw")
SOURCES = ("graph", "reference")  # where the reference lives: the graph's outputs, or reference.npz's states
# BeyondMimic's G1 key bodies (its flat G1 config's body_names): the tracking reward's and eval's bodies.
KEY_BODIES = ("pelvis", "left_hip_roll_link", "left_knee_link", "left_ankle_roll_link", "right_hip_roll_link",
              "right_knee_link", "right_ankle_roll_link", "torso_link", "left_shoulder_roll_link", "left_elbow_link",
              "left_wrist_yaw_link", "right_shoulder_roll_link", "right_elbow_link", "right_wrist_yaw_link")


class TrackingError(ValueError):
    """The tracking graph's reference cannot be read: the message names the output and the fix."""


@dataclasses.dataclass(frozen=True)
class TrackingSpec:
    """Where a tracking graph keeps its reference. Output names are the graph's; body outputs are either
    (1, 3) / (1, 4) for the anchor alone (holosoma) or (1, n_bodies, .) read at row body_index (BeyondMimic)."""

    anchor_body: str  # a G1 body (robots.body_frames), e.g. torso_link
    joint_pos: str = "joint_pos"  # (1, n_joints), policy joint order, rad
    joint_vel: str = "joint_vel"
    anchor_pos: str = ""  # "" when the graph gives none (then no position term can be built)
    anchor_quat: str = ""
    body_index: int = -1
    quat_order: str = "wxyz"
    source: str = "graph"  # graph | reference (native artifacts: reference.npz's pelvis states and joints)


class Reference(NamedTuple):
    joint_pos: np.ndarray  # (T, n) policy joint order
    joint_vel: np.ndarray  # (T, n)
    anchor_pos: np.ndarray | None  # (T, 3) world, m
    anchor_quat: np.ndarray | None  # (T, 4) w, x, y, z

    @property
    def frames(self) -> int:
        return int(self.joint_pos.shape[0])


def _row(out: np.ndarray, index: int, size: int, name: str) -> np.ndarray:
    a = np.asarray(out, float)
    if index >= 0:
        if a.ndim != 3 or a.shape[1] <= index or a.shape[2] != size:
            raise TrackingError(f"graph output {name!r} has shape {list(a.shape)}, expected [1, n_bodies > "
                                f"{index}, {size}] (the anchor body's row {index})")
        return a[0, index]
    if a.size != size:
        raise TrackingError(f"graph output {name!r} has shape {list(a.shape)}, expected [1, {size}]")
    return a.reshape(size)


def read_reference(session, spec: TrackingSpec, feed: dict[str, np.ndarray], time_step: str, frames: int,
                   n_joints: int) -> Reference:
    """The graph's reference outputs at time_step 0..frames-1 (the other inputs zero). Refused when an
    output depends on the observation (it would not be a reference) or is not finite."""
    names = [spec.joint_pos, spec.joint_vel] + [n for n in (spec.anchor_pos, spec.anchor_quat) if n]
    x = {k: np.zeros_like(v) for k, v in feed.items()}
    rows: list[list[np.ndarray]] = [[] for _ in names]
    sizes = [n_joints, n_joints] + ([3] if spec.anchor_pos else []) + ([4] if spec.anchor_quat else [])
    for k in range(frames):
        x[time_step][...] = k
        for r, out, name, size in zip(rows, session.run(names, x), names, sizes):
            r.append(_row(out, spec.body_index if size in (3, 4) else -1, size, name))
    tables = [np.array(r) for r in rows]
    probe = {k: v.copy() for k, v in x.items()}
    main = max(probe, key=lambda k: probe[k].size if k != time_step else -1)
    probe[main][...] = np.random.default_rng(0).normal(0.0, 1.0, probe[main].shape)
    probe[time_step][...] = frames // 2
    for name, size, out, t in zip(names, sizes, session.run(names, probe), tables):
        if not np.allclose(_row(out, spec.body_index if size in (3, 4) else -1, size, name), t[frames // 2],
                           atol=1e-6):
            raise TrackingError(f"graph output {name!r} changes with the observation: it is not a reference "
                                "baked into the graph; export the reference as a function of time_step only")
    for name, t in zip(names, tables):
        if not np.all(np.isfinite(t)):
            raise TrackingError(f"graph output {name!r} is not finite at some time steps: re-export the clip")
    pos = tables[2] if spec.anchor_pos else None
    quat = tables[-1] if spec.anchor_quat else None
    if quat is not None:
        if spec.quat_order == "xyzw":
            quat = quat[:, [3, 0, 1, 2]]
        n = np.linalg.norm(quat, axis=1)
        if not np.all(n > 0.5):
            raise TrackingError(f"graph output {spec.anchor_quat!r} holds non-unit quaternions (norms "
                                f"{n.min():.3g}..{n.max():.3g}): check its order ({spec.quat_order})")
        quat = quat / n[:, None]
    return Reference(tables[0], tables[1], pos, quat)


def reference_from_states(joint_pos, base_pos, base_quat, dt: float, anchor_body: str,
                          frames: BodyFrames | None = None) -> Reference:
    """The Reference of a clip kept as states: joints (T, n) in motor order, pelvis position (T, 3) and
    orientation (T, 4, w, x, y, z) in the world; the anchor's pose by forward kinematics on the G1 model,
    joint velocities by central differences at dt."""
    kin = frames if frames is not None else BodyFrames()
    q = np.asarray(joint_pos, float)
    pos, quat = np.asarray(base_pos, float), np.asarray(base_quat, float)
    T = q.shape[0]
    if T < 2 or pos.shape != (T, 3) or quat.shape != (T, 4):
        raise TrackingError(f"reference states of shapes joints {q.shape}, pelvis position {pos.shape}, orientation "
                            f"{quat.shape}: expected (T >= 2, n), (T, 3), (T, 4)")
    if not (np.all(np.isfinite(q)) and np.all(np.isfinite(pos)) and np.all(np.isfinite(quat))):
        raise TrackingError("reference states are not finite: re-export the policy")
    n = np.linalg.norm(quat, axis=1)
    if not np.all(np.abs(n - 1.0) < 1e-3):
        raise TrackingError(f"reference pelvis quaternions are not unit (norms {n.min():.4g}..{n.max():.4g}): "
                            "re-export the policy")
    b = kin.body_id(anchor_body)
    a_pos, a_quat = np.zeros((T, 3)), np.zeros((T, 4))
    for k in range(T):
        p_in, r_in = kin.pose_in_pelvis(b, q[k])
        r = quat_to_mat(quat[k])
        a_pos[k] = pos[k] + r @ p_in
        a_quat[k] = mat_to_quat(r @ r_in)
    return Reference(q, np.gradient(q, dt, axis=0), a_pos, a_quat)


def pelvis_pose(ref: Reference, k: int, anchor: int, kin: BodyFrames) -> tuple[np.ndarray, np.ndarray]:
    """(position, rotation) of the reference's pelvis at frame k, from its anchor pose and joints (the anchor
    chain inverted)."""
    p_in, r_in = kin.pose_in_pelvis(anchor, ref.joint_pos[k])
    r = quat_to_mat(ref.anchor_quat[k]) @ r_in.T
    p = (ref.anchor_pos[k] if ref.anchor_pos is not None else np.zeros(3)) - r @ p_in
    return p, r


def yaw_rotation(m, xp=np):
    """Rz(psi) with psi the heading of the 3x3 matrix m (the angle of its x axis on the ground)."""
    c, s = m[..., 0, 0], m[..., 1, 0]
    n = xp.sqrt(c ** 2 + s ** 2 + 1e-12)
    c, s = c / n, s / n
    z, o = xp.zeros_like(c), xp.ones_like(c)
    return xp.stack([xp.stack([c, -s, z], -1), xp.stack([s, c, z], -1), xp.stack([z, z, o], -1)], -2)


def relative_to_anchor(anchor: int, body_pos, body_rot, ref_body_pos, ref_body_rot, xp=np):
    """The reference bodies relative to the robot's anchor: (pos (B, 3), rot (B, 3, 3)): turned about z by
    the yaw between the two anchors and moved so the reference anchor sits at the robot anchor's x, y (its
    height kept)."""
    turn = yaw_rotation(body_rot[anchor] @ xp.swapaxes(ref_body_rot[anchor], -1, -2), xp=xp)
    origin = xp.stack([body_pos[anchor, 0], body_pos[anchor, 1], ref_body_pos[anchor, 2]])
    pos = origin + (ref_body_pos - ref_body_pos[anchor]) @ xp.swapaxes(turn, -1, -2)
    return pos, turn @ ref_body_rot


def body_pos_error(anchor: int, body_pos, body_rot, ref_body_pos, ref_body_rot) -> float:
    """Mean over bodies of |p_b - p~_b| (m), p~ the reference relative to the robot's anchor."""
    rel, _ = relative_to_anchor(anchor, body_pos, body_rot, ref_body_pos, ref_body_rot)
    return float(np.mean(np.linalg.norm(np.asarray(body_pos) - rel, axis=-1)))


def rot6d(rot: np.ndarray) -> np.ndarray:
    """The first two columns of a rotation matrix, row by row (the exporters' 6-D orientation)."""
    return rot[:, :2].reshape(6)


def rotation_angle(rot: np.ndarray) -> float:
    """Angle (rad) of a rotation matrix."""
    return float(np.arccos(np.clip((np.trace(rot) - 1.0) / 2.0, -1.0, 1.0)))


class TrackingTerms:
    """The tracking terms of one clip run, updated once per policy step (`update`), read by the runtime's
    observation (`command`, `anchor_ori_b`, `anchor_pos_b`) and by the run's tracking error
    (`joint_error`, `anchor_ori_error`) and by what bounds the run by its reference (`reference_tilt`,
    `reference_height`: the reference's pelvis at the current frame; per frame in `pelvis_tilt`, `pelvis_height`)."""

    def __init__(self, spec: TrackingSpec, ref: Reference, motor_index: np.ndarray, frames: BodyFrames | None = None):
        if ref.frames < 2:
            raise TrackingError(f"the reference has {ref.frames} frame(s); a clip needs at least 2")
        self.spec = spec
        self.ref = ref
        self.mi = np.asarray(motor_index)
        self.needs_anchor = ref.anchor_quat is not None
        self.kin = frames if frames is not None or not self.needs_anchor else BodyFrames()
        self.anchor = self.kin.body_id(spec.anchor_body) if self.needs_anchor else -1
        self.pelvis_tilt = self.pelvis_height = None  # (T,): rad from the vertical, m over the floor
        if self.needs_anchor:
            poses = [pelvis_pose(ref, k, self.anchor, self.kin) for k in range(ref.frames)]
            self.pelvis_tilt = np.array([math.acos(min(1.0, max(-1.0, r[2, 2]))) for _, r in poses])
            if ref.anchor_pos is not None:
                self.pelvis_height = np.array([p[2] for p, _ in poses])
        self.reset()

    def reset(self) -> None:
        self._aligned = False
        self.align = np.eye(3)
        self.origin = np.zeros(3)
        self.command = np.zeros(2 * len(self.mi))
        self.anchor_ori_b = rot6d(np.eye(3))
        self.anchor_pos_b = np.zeros(3)
        self.joint_error = np.zeros(len(self.mi))
        self.anchor_ori_error = 0.0
        self.reference_tilt = self.reference_height = None

    def frame(self, step: int) -> int:
        return int(min(max(step, 0), self.ref.frames - 1))

    def bounds(self, step: int) -> dict:
        """The fall bounds at `step` (robots.physics.fallen's ref_tilt / ref_height: the reference's pelvis at that
        frame); none for a reference without the anchor's pose."""
        if self.pelvis_tilt is None:
            return {}
        k = self.frame(step)
        return {"ref_tilt": float(self.pelvis_tilt[k]),
                "ref_height": None if self.pelvis_height is None else float(self.pelvis_height[k])}

    def robot_anchor(self, q, quat, base_pos) -> tuple[np.ndarray, np.ndarray]:
        """(position, rotation) of the robot's anchor body in the world from the pelvis pose and q."""
        p_in, r_in = self.kin.pose_in_pelvis(self.anchor, q)
        r_pelvis = quat_to_mat(quat)
        p = (np.zeros(3) if base_pos is None else np.asarray(base_pos, float)) + r_pelvis @ p_in
        return p, r_pelvis @ r_in

    def update(self, step: int, q, quat, base_pos=None) -> None:
        k = self.frame(step)
        ref = self.ref
        q = np.asarray(q, float)
        self.command = np.concatenate((ref.joint_pos[k], ref.joint_vel[k]))
        self.joint_error = q[self.mi] - ref.joint_pos[k]
        if not self.needs_anchor:
            return
        self.reference_tilt = float(self.pelvis_tilt[k])
        self.reference_height = None if self.pelvis_height is None else float(self.pelvis_height[k])
        p_robot, r_robot = self.robot_anchor(q, quat, base_pos)
        if not self._aligned:  # the run's first step (frame k): the reference starts at the robot's heading and place
            self.align = rot_z(yaw_of(r_robot) - yaw_of(quat_to_mat(ref.anchor_quat[k])))
            if ref.anchor_pos is not None:
                self.origin = np.array([p_robot[0], p_robot[1], 0.0]) - self.align @ ref.anchor_pos[k] * [1, 1, 0]
            self._aligned = True
        r_rel = r_robot.T @ self.align @ quat_to_mat(ref.anchor_quat[k])
        self.anchor_ori_b = rot6d(r_rel)
        self.anchor_ori_error = rotation_angle(r_rel)
        if ref.anchor_pos is not None:
            p_ref = self.align @ ref.anchor_pos[k] + self.origin
            self.anchor_pos_b = r_robot.T @ (p_ref - p_robot)


def tracking_summary(t, joint_sq, anchor_err, clip_frames: int | None = None, steps: int | None = None,
                     body_err=None) -> dict:
    """The tracking error of a run from its policy steps: t (s), joint_sq (mean squared joint error of the
    step, rad^2), anchor_err (anchor orientation error, rad; nan without an anchor), body_err (body-position error,
    m; nan without a reference anchor position). Joint RMS (rad), anchor orientation error (rad, mean) and
    body-position error (cm, mean) over the run and over its worst whole second (steps binned by floor(t - t[0]))."""
    t, jsq, ae = (np.asarray(x, float) for x in (t, joint_sq, anchor_err))
    if t.size == 0:
        return {"policy_steps": 0}
    sec = np.floor(t - t[0]).astype(int)
    bins = np.unique(sec)
    j_s = np.array([np.sqrt(jsq[sec == b].mean()) for b in bins])
    a_s = np.array([ae[sec == b].mean() for b in bins])
    out = {"policy_steps": int(t.size), "joint_rms_rad": float(np.sqrt(jsq.mean())),
           "joint_rms_worst_s_rad": float(j_s.max()), "joint_rms_worst_s_at": float(bins[j_s.argmax()]),
           "anchor_ori_err_rad": None, "anchor_ori_err_worst_s_rad": None, "anchor_ori_err_worst_s_at": None}
    if np.all(np.isfinite(ae)):  # nan: the policy observes no anchor
        out.update(anchor_ori_err_rad=float(ae.mean()), anchor_ori_err_worst_s_rad=float(a_s.max()),
                   anchor_ori_err_worst_s_at=float(bins[a_s.argmax()]))
    be = np.asarray(body_err if body_err is not None else np.full(t.size, np.nan), float)
    out.update(body_pos_err_cm=None, body_pos_err_worst_s_cm=None)
    if be.size == t.size and np.all(np.isfinite(be)):  # nan: no reference anchor position
        b_s = np.array([be[sec == b].mean() for b in bins])
        out.update(body_pos_err_cm=float(be.mean() * 100), body_pos_err_worst_s_cm=float(b_s.max() * 100),
                   body_pos_err_worst_s_at=float(bins[b_s.argmax()]))
    if clip_frames is not None:
        out["clip_frames"] = int(clip_frames)
        out["clip_ended"] = bool(steps is not None and steps >= clip_frames - 1)
    return out
