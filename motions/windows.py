"""Windows of a long clip: the measure of how much the whole body moves, the most active (or the calmest)
window that the safety gate's tilt allows, and the window written as a clip of its own.

    arrays = read_clip_arrays(path)                       # npz (BeyondMimic / mjlab / holosoma) or tracking .onnx
    w = best_window(arrays, seconds=15.0, max_tilt_deg=MAX_TILT_DEG)
    write_clip_arrays(out, cut(arrays, w.start, w.frames))

Activity of frame k (`activity`): a_k = RMS over the 29 joints of the joint velocity (rad/s) + |pelvis
linear velocity| (m/s) + |pelvis angular velocity| (rad/s), the three summed as numbers (units mixed, each
of order 1 for a dancing G1). A window's score is the mean of a_k over its frames. Windows whose pelvis tilts
more than `max_tilt_deg` in any frame are excluded: the deploy loop's safety monitor trips at
safety.limits.TILT_LIMIT (0.8 rad, 45.8 deg), and MAX_TILT_DEG = 40 deg leaves 5.8 deg for tracking error.

With `max_torque_ratio`, a window must also keep the torque that its own motion needs at the waist and arms
(motions.torques: inverse dynamics, exact whatever the floor does) within that fraction of the motors' limits in
every frame: a policy cannot track a window the motors cannot move.

Velocities are the file's `joint_vel` when it has one (root linear + angular velocity, then the joints, as
BeyondMimic writes them), else central differences of `joint_pos`.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np

from motions.clip_files import ROOT_COLS, _fps, _map_joint_names
from motions.motion import MotionError
from robots import g1
from robots.physics import GRAVITY

MAX_TILT_DEG = 40.0  # deg: the pelvis tilt a chosen window stays under (safety trip 45.8 deg, module docstring)


def _tilt_deg(quat_wxyz: np.ndarray) -> np.ndarray:
    x, y = quat_wxyz[:, 1], quat_wxyz[:, 2]
    n2 = np.sum(quat_wxyz ** 2, axis=1)
    return np.degrees(np.arccos(np.clip(1 - 2 * (x ** 2 + y ** 2) / n2, -1, 1)))


def read_clip_arrays(path) -> dict:
    """{fps, joint_pos (T, 36), joint_vel (T, 35), joint_names} of an npz clip or a tracking graph (.onnx: the
    reference baked into it, motions.tracking_onnx), joints in motor order."""
    path = Path(path)
    if path.suffix == ".onnx":
        from motions.tracking_onnx import read_reference

        r = read_reference(path)
        return {k: r[k] for k in ("fps", "joint_pos", "joint_vel", "joint_names")}
    try:
        f = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise MotionError(f"{path}: cannot read as npz: {e}") from e
    with f:
        if "joint_pos" not in f.files or "fps" not in f.files:
            raise MotionError(f"{path}: a clip needs fps and joint_pos (has {sorted(f.files)})")
        fps = _fps(path, f["fps"])
        jp = np.asarray(f["joint_pos"], float)
        jv = np.asarray(f["joint_vel"], float) if "joint_vel" in f.files else None
        order = _map_joint_names(path, f["joint_names"]) if "joint_names" in f.files else np.arange(g1.NUM_MOTORS)
    if jp.ndim != 2 or jp.shape[1] != ROOT_COLS + g1.NUM_MOTORS or jp.shape[0] < 2:
        raise MotionError(f"{path}: joint_pos has shape {jp.shape}; expected (frames >= 2, 36)")
    jp = np.concatenate([jp[:, :ROOT_COLS], jp[:, ROOT_COLS:][:, order]], axis=1)
    if jv is None or jv.shape != (jp.shape[0], 6 + g1.NUM_MOTORS):
        jv = velocities(jp, fps)
    else:
        jv = np.concatenate([jv[:, :6], jv[:, 6:][:, order]], axis=1)
    return {"fps": fps, "joint_pos": jp, "joint_vel": jv, "joint_names": np.array(g1.JOINT_NAMES)}


def velocities(joint_pos: np.ndarray, fps: float) -> np.ndarray:
    """(T, 35) root linear velocity, root angular velocity (world, from quaternion differences) and joint
    velocities of a (T, 36) joint_pos table, by central differences."""
    import mujoco

    dt = 1.0 / fps
    lin = np.gradient(joint_pos[:, :3], dt, axis=0)
    q = joint_pos[:, 3:7] / np.linalg.norm(joint_pos[:, 3:7], axis=1, keepdims=True)
    T = q.shape[0]
    ang = np.zeros((T, 3))
    for k in range(T):
        a, b = max(k - 1, 0), min(k + 1, T - 1)
        w = np.empty(3)
        mujoco.mju_subQuat(w, q[b], q[a])  # body-frame rotation from a to b
        r = np.empty(9)
        mujoco.mju_quat2Mat(r, q[k])
        ang[k] = r.reshape(3, 3) @ w / ((b - a) * dt)
    return np.concatenate([lin, ang, np.gradient(joint_pos[:, ROOT_COLS:], dt, axis=0)], axis=1)


def activity_parts(joint_vel: np.ndarray) -> np.ndarray:
    """(T, 3) per frame: joint-velocity RMS (rad/s), pelvis linear speed (m/s), pelvis angular speed (rad/s)."""
    jv = np.asarray(joint_vel, float)
    return np.stack([np.sqrt(np.mean(jv[:, 6:] ** 2, axis=1)), np.linalg.norm(jv[:, :3], axis=1),
                     np.linalg.norm(jv[:, 3:6], axis=1)], axis=1)


def activity(joint_vel: np.ndarray) -> np.ndarray:
    """(T,) per-frame activity: joint-velocity RMS + pelvis linear speed + pelvis angular speed."""
    return activity_parts(joint_vel).sum(axis=1)


@dataclasses.dataclass(frozen=True)
class Window:
    start: int  # first frame
    frames: int  # frames in the window (seconds * fps + 1)
    fps: float
    score: float  # mean activity over the window
    max_tilt_deg: float  # the window's largest pelvis tilt
    candidates: int  # windows allowed by the tilt bound
    excluded: int  # windows excluded by it
    clip_frames: int
    clip_best_score: float  # the best score over all windows, tilt ignored
    tilt_bound_deg: float  # the bound the window was chosen under
    parts: tuple[float, float, float]  # the window's mean joint-velocity RMS, pelvis speed, pelvis angular speed
    torque_bound: float | None = None  # the upper-body torque / limit bound it was chosen under (None: none)
    max_torque_ratio: float | None = None  # the window's largest upper-body torque / limit (with a bound)
    excluded_by_torque: int = 0  # windows the tilt bound allows and the torque bound excludes
    calmest: bool = False  # chosen as the least active window (else the most active)

    @property
    def start_s(self) -> float:
        return self.start / self.fps

    @property
    def seconds(self) -> float:
        return (self.frames - 1) / self.fps

    def record(self) -> dict:
        """The choice as the motion's source file states it."""
        return {"choice": "the least active window" if self.calmest else "the most active window",
                "measure": "mean over the window's frames of RMS_j(joint velocity) [rad/s] + |pelvis linear "
                           "velocity| [m/s] + |pelvis angular velocity| [rad/s] (motions.windows.activity)",
                "score": round(self.score, 4), "start_s": round(self.start_s, 4), "seconds": round(self.seconds, 4),
                "max_pelvis_tilt_deg": round(self.max_tilt_deg, 2), "tilt_bound_deg": self.tilt_bound_deg,
                "windows_allowed": self.candidates, "windows_excluded_by_tilt": self.excluded,
                "joint_vel_rms_mean": round(self.parts[0], 4), "pelvis_speed_mean": round(self.parts[1], 4),
                "pelvis_ang_speed_mean": round(self.parts[2], 4),
                "best_score_ignoring_tilt": round(self.clip_best_score, 4), "clip_frames": self.clip_frames,
                **({} if self.torque_bound is None else {
                    "upper_torque_bound": self.torque_bound, "max_upper_torque_ratio": round(self.max_torque_ratio, 4),
                    "windows_excluded_by_torque": self.excluded_by_torque})}


def torque_ratio(arrays: dict) -> np.ndarray:
    """(T,) per frame: the largest |torque| / limit over the waist and arm joints that the clip's motion needs
    (motions.torques), the clip imported at its own rate."""
    from motions.torques import UPPER, upper_body_torque

    return (np.abs(upper_body_torque(_as_motion(arrays))) / g1.TORQUE_LIMIT[UPPER]).max(axis=1)


def _as_motion(arrays: dict):
    """The clip imported at its own rate (motions.clips.clip_to_motion: its first frame turned to +x at x = y = 0,
    standing on the floor at z = 0), frame for frame."""
    from motions.clip_files import RawClip
    from motions.clips import clip_to_motion

    jp, fps = np.asarray(arrays["joint_pos"], float), float(arrays["fps"])
    m = clip_to_motion(RawClip(Path("<clip>"), fps, jp[:, :3], jp[:, 3:7], jp[:, ROOT_COLS:], "by name"), 1.0 / fps)
    if m.num_steps != len(jp):
        raise MotionError(f"the clip imported at its own rate has {m.num_steps} frames, not {len(jp)}")
    return m


def best_window(arrays: dict, seconds: float, max_tilt_deg: float = MAX_TILT_DEG,
                max_torque_ratio: float | None = None, calmest: bool = False) -> Window:
    """The window of `seconds` (every start frame tried) with the highest mean activity (with `calmest`: the
    lowest) among those whose pelvis tilt stays <= max_tilt_deg (and, with max_torque_ratio, whose upper-body
    torque / limit stays <= it); the earliest on a tie. MotionError when the clip is shorter or no window passes
    the bounds."""
    fps = float(arrays["fps"])
    n = int(round(seconds * fps)) + 1
    T = arrays["joint_pos"].shape[0]
    if n > T:
        raise MotionError(f"the clip has {T} frames ({(T - 1) / fps:.2f} s), shorter than a {seconds} s window")
    a = activity(arrays["joint_vel"])
    c = np.concatenate([[0.0], np.cumsum(a)])
    score = (c[n:] - c[:-n]) / n
    tilt = _tilt_deg(arrays["joint_pos"][:, 3:7])
    wtilt = np.lib.stride_tricks.sliding_window_view(tilt, n).max(axis=1)
    ok = wtilt <= max_tilt_deg
    if not ok.any():
        raise MotionError(f"every {seconds} s window tilts the pelvis beyond {max_tilt_deg} deg "
                          f"(least: {wtilt.min():.1f} deg)")
    tilted = int((~ok).sum())
    torque = {}
    if max_torque_ratio is not None:
        wtau = np.lib.stride_tricks.sliding_window_view(torque_ratio(arrays), n).max(axis=1)
        ok_tau = ok & (wtau <= max_torque_ratio)
        if not ok_tau.any():
            raise MotionError(f"no {seconds} s window within {max_tilt_deg} deg of tilt keeps the waist and arm "
                              f"torques <= {max_torque_ratio} x their limits (least: {wtau[ok].min():.2f})")
        torque = {"excluded_by_torque": int((ok & ~ok_tau).sum()), "torque_bound": float(max_torque_ratio)}
        ok = ok_tau
    k = int(np.argmin(np.where(ok, score, np.inf))) if calmest else int(np.argmax(np.where(ok, score, -np.inf)))
    if torque:
        torque["max_torque_ratio"] = float(wtau[k])
    return Window(start=k, frames=n, fps=fps, score=float(score[k]), max_tilt_deg=float(wtilt[k]),
                  candidates=int(ok.sum()), excluded=tilted, clip_frames=T,
                  clip_best_score=float(score.max()), tilt_bound_deg=float(max_tilt_deg),
                  parts=tuple(float(x) for x in activity_parts(arrays["joint_vel"][k:k + n]).mean(axis=0)),
                  calmest=calmest, **torque)


def cut(arrays: dict, start: int, frames: int) -> dict:
    """Frames start .. start + frames - 1 of a clip."""
    T = arrays["joint_pos"].shape[0]
    if start < 0 or frames < 2 or start + frames > T:
        raise MotionError(f"window of {frames} frames at frame {start} does not fit a clip of {T} frames")
    sl = slice(start, start + frames)
    return {**arrays, "joint_pos": arrays["joint_pos"][sl].copy(), "joint_vel": arrays["joint_vel"][sl].copy()}


def lead_in(arrays: dict, seconds: float, hold_s: float = 0.5, stance: str = "pelvis") -> dict:
    """The clip with `seconds` of made-up frames before it that bring the robot from standing to its first
    frame, so a policy can start it from the deploy loop's HOLD: `hold_s` in the home pose (robots/g1.py's
    default joints, the pelvis upright at the first frame's heading and x, y, its height such that the
    lowest sole stands where the first frame's does), then a smoothstep blend (3u^2 - 2u^3) of the
    joints and pelvis position and a slerp of the pelvis orientation to the first frame. The lead-in's
    velocities are central differences; the clip's own frames keep theirs.

    stance="feet": the home pose stands on the first frame's feet instead: its heading square to the line
    between them and its x, y over their midpoint, so that a first frame whose hips are twisted against its
    feet is reached by turning the pelvis on them, not by sliding the feet across the floor."""
    from motions.clips import slerp, sole_heights_and_ankles, yaw_of

    if stance not in ("pelvis", "feet"):
        raise MotionError(f"lead-in stance {stance!r}: use 'pelvis' or 'feet'")

    fps = float(arrays["fps"])
    n_hold, n_blend = int(round(hold_s * fps)), int(round((seconds - hold_s) * fps))
    if seconds <= 0 or n_blend < 2 or n_hold < 0:
        raise MotionError(f"a lead-in of {seconds} s with {hold_s} s of hold leaves {n_blend} blend frames at "
                          f"{fps:g} Hz: give at least {hold_s + 2 / fps:.2f} s")
    jp = np.asarray(arrays["joint_pos"], float)
    pos1, quat1, q1 = jp[0, 0:3], jp[0, 3:7] / np.linalg.norm(jp[0, 3:7]), jp[0, ROOT_COLS:]
    yaw = yaw_of(quat1)
    quat0 = np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])
    quat0 = -quat0 if quat0 @ quat1 < 0 else quat0  # the blend ends on the first frame's own quaternion
    q0 = np.asarray(g1.DEFAULT_JOINT_POS, float)
    xy0 = pos1[:2]
    if stance == "feet":
        from motions.balance import sole_points

        feet1 = sole_points(pos1[None], quat1[None], q1[None])[0].mean(axis=1)  # (2, 3): left, right
        left = feet1[0, :2] - feet1[1, :2]  # the home pose's left foot is at +y of its heading
        yaw = float(np.arctan2(left[1], left[0])) - np.pi / 2
        quat0 = np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])
        quat0 = -quat0 if quat0 @ quat1 < 0 else quat0
        home = sole_points(np.array([[0.0, 0.0, pos1[2]]]), quat0[None], q0[None])[0].mean(axis=1)
        xy0 = feet1[:, :2].mean(axis=0) - home[:, :2].mean(axis=0)  # the home feet's midpoint on the clip's
    low1 = sole_heights_and_ankles(pos1[None], quat1[None], q1[None])[0].min()
    low0 = sole_heights_and_ankles(np.r_[xy0, pos1[2]][None], quat0[None], q0[None])[0].min()
    pos0 = np.r_[xy0, pos1[2] + low1 - low0]
    u = np.concatenate([np.zeros(n_hold), np.arange(n_blend) / n_blend])
    s = 3 * u ** 2 - 2 * u ** 3
    n = len(u)
    head = np.empty((n, jp.shape[1]))
    head[:, 0:3] = pos0 + s[:, None] * (pos1 - pos0)
    head[:, 3:7] = slerp(np.tile(quat0, (n, 1)), np.tile(quat1, (n, 1)), s)
    head[:, ROOT_COLS:] = q0 + s[:, None] * (q1 - q0)
    out = np.concatenate([head, jp])
    vel = velocities(out[: n + 1], fps)[:n]
    return {**arrays, "joint_pos": out, "joint_vel": np.concatenate([vel, np.asarray(arrays["joint_vel"], float)])}


MAX_DROP_M = 0.03  # m: how far _move_com may lower the pelvis so that a straight leg reaches its foot
GROUND_TOL = 0.01  # m and rad together: how close ground_feet must reach a foot pose to take it (a straight knee or
# a joint limit can keep it a few mm short; the dance's kicks: at most 4 mm)


@dataclasses.dataclass
class _Legs:
    """The bridge model set up for foot-pose IK: its data, each foot's sole spheres (ids, centres in the foot's
    frame, radii) and body, and per leg (left, right) its six joints' dof and qpos addresses, ranges and columns
    in a clip's joint_pos."""
    m: object
    d: object
    qadr: np.ndarray
    soles: list
    local: list
    radius: list
    feet: list
    legs: list  # (dofs, qpos_adr, ranges, joint_pos columns) per leg
    jacp: np.ndarray
    jacr: np.ndarray

    def pose(self, row: np.ndarray) -> None:
        """Set a clip frame (root position, quaternion, 29 joints) and run the kinematics and COM."""
        import mujoco

        self.d.qpos[:3], self.d.qpos[3:7], self.d.qpos[self.qadr] = row[0:3], row[3:7], row[ROOT_COLS:]
        mujoco.mj_kinematics(self.m, self.d)
        mujoco.mj_comPos(self.m, self.d)

    def bottoms(self) -> list[np.ndarray]:
        """Per foot, its sole spheres' bottom heights now."""
        return [self.d.geom_xpos[g, 2] - r for g, r in zip(self.soles, self.radius)]

    def reach(self, f: int, goal_p, goal_q, iterations: int) -> float:
        dofs, qpos_adr, ranges, _ = self.legs[f]
        return _reach(self.m, self.d, self.feet[f], dofs, qpos_adr, ranges, goal_p, goal_q, iterations, self.jacp,
                      self.jacr)


def _leg_ik() -> _Legs:
    import mujoco

    from motions.clips import _fk_model

    m, qadr, soles, _, _ = _fk_model()
    soles = [np.atleast_1d(g) for g in soles]
    col = {int(a): i for i, a in enumerate(qadr)}
    legs = []
    for side in ("left", "right"):
        js = [m.joint(f"{side}_{n}_joint") for n in ("hip_pitch", "hip_roll", "hip_yaw", "knee", "ankle_pitch",
                                                     "ankle_roll")]
        qpos_adr = np.array([int(j.qposadr[0]) for j in js])
        legs.append((np.array([int(j.dofadr[0]) for j in js]), qpos_adr, m.jnt_range[[int(j.id) for j in js]],
                     ROOT_COLS + np.array([col[int(a)] for a in qpos_adr])))
    return _Legs(m=m, d=mujoco.MjData(m), qadr=qadr, soles=soles, local=[m.geom_pos[g] for g in soles],
                 radius=[m.geom_size[g, 0] for g in soles], feet=[int(m.geom_bodyid[g[0]]) for g in soles],
                 legs=legs, jacp=np.zeros((3, m.nv)), jacr=np.zeros((3, m.nv)))


def _with_velocities(arrays: dict, jp: np.ndarray, changed: np.ndarray, **extra) -> dict:
    """The clip with joint_pos jp; the changed frames' and their neighbours' velocities central differences of
    it, the others' kept."""
    out = {**arrays, "joint_pos": jp, **extra}
    if changed.any():
        near = np.convolve(changed.astype(int), np.ones(3, int))[1:-1] > 0
        jv = np.asarray(arrays["joint_vel"], float).copy()
        jv[near] = velocities(jp, float(arrays["fps"]))[near]
        out["joint_vel"] = jv
    return out


def _reach(m, d, body, dofs, qpos_adr, ranges, goal_p, goal_q, iterations, jacp, jacr) -> float:
    """Damped Gauss-Newton on one leg's joints (within `ranges`) towards the foot pose (goal_p, goal_q); leaves
    them in d.qpos and returns the remaining |error| (m and rad together)."""
    import mujoco

    err = np.full(6, np.inf)
    for _ in range(iterations):
        mujoco.mj_kinematics(m, d)
        mujoco.mj_comPos(m, d)
        err_r = np.empty(3)
        mujoco.mju_subQuat(err_r, goal_q, d.xquat[body])  # in the body's frame
        err = np.concatenate([goal_p - d.xpos[body], d.xmat[body].reshape(3, 3) @ err_r])
        if np.linalg.norm(err) < 1e-7:
            break
        mujoco.mj_jacBody(m, d, jacp, jacr, body)
        J = np.vstack([jacp[:, dofs], jacr[:, dofs]])
        step = np.linalg.solve(J.T @ J + 1e-6 * np.eye(6), J.T @ err)
        step *= min(1.0, 0.1 / max(float(np.abs(step).max()), 1e-12))  # at most 0.1 rad a joint a step
        d.qpos[qpos_adr] = np.clip(d.qpos[qpos_adr] + step, *ranges.T)
    mujoco.mj_kinematics(m, d)
    err_r = np.empty(3)
    mujoco.mju_subQuat(err_r, goal_q, d.xquat[body])
    return float(np.linalg.norm(np.concatenate([goal_p - d.xpos[body], err_r])))


def ground_feet(arrays: dict, full_m: float, blend_m: float, iterations: int = 30) -> dict:
    """The clip with the feet that retargeting left just off the floor put flat on it. Per frame, the floor is
    the lower foot's lowest sole sphere (where the clip's import stands it); a foot whose highest sphere is at
    most full_m above it is levelled (its roll and pitch to 0, its yaw kept) and lowered onto it, one whose
    highest sphere is blend_m or more stays as it is, and in between the orientation is slerped and the lowest
    sphere's height mixed by w = (blend_m - highest) / (blend_m - full_m): continuous, so a heel that lifts into
    a step stays smooth. Retargeted standing feet come tilted by a few degrees and hover by a few mm; a robot
    that tracks them stands on an edge of one foot. The leg's six joints reach the new foot pose by damped
    Gauss-Newton within their limits; a pose they cannot reach within GROUND_TOL (a heel strike on a straight
    knee) is approached by 1/2, 1/4, 1/8 of the way, else the foot stays as it was (counted in the returned
    "ground_feet" entry). The pelvis is untouched; the changed frames' velocities are central differences, the
    others keep theirs."""
    import mujoco

    from motions.clips import slerp

    if not 0 < full_m < blend_m:
        raise MotionError(f"ground_feet: need 0 < full ({full_m} m) < blend ({blend_m} m)")
    ik = _leg_ik()
    d = ik.d
    jp = np.asarray(arrays["joint_pos"], float).copy()
    changed = np.zeros(len(jp), bool)
    reduced = {"share": 0, "kept": 0}
    for k in range(len(jp)):
        ik.pose(jp[k])
        bottoms = ik.bottoms()
        floor = min(float(b.min()) for b in bottoms)
        goals = []
        for f in range(2):
            w = float(np.clip((blend_m - (bottoms[f].max() - floor)) / (blend_m - full_m), 0.0, 1.0))
            if w == 0.0:
                continue
            body = ik.feet[f]
            quat = d.xquat[body].copy()
            yaw = np.arctan2(d.xmat[body][3], d.xmat[body][0])
            level = np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])
            level = -level if level @ quat < 0 else level
            goal_q = slerp(quat[None], level[None], np.array([w]))[0]
            rot = np.empty(9)
            mujoco.mju_quat2Mat(rot, goal_q)
            low = floor + (1.0 - w) * (float(bottoms[f].min()) - floor)  # the goal's lowest sphere bottom
            z = low - float(np.min((ik.local[f] @ rot.reshape(3, 3).T)[:, 2] - ik.radius[f]))
            goals.append((f, d.xpos[body].copy(), quat, np.array([d.xpos[body][0], d.xpos[body][1], z]), goal_q))
        for f, start_p, start_q, goal_p, goal_q in goals:
            _, qpos_adr, _, cols = ik.legs[f]
            q_start = d.qpos[qpos_adr].copy()
            for share in (1.0, 0.5, 0.25, 0.125):  # a goal the leg cannot reach (a straight knee): less of it
                d.qpos[qpos_adr] = q_start
                err = ik.reach(f, start_p + share * (goal_p - start_p),
                               slerp(start_q[None], goal_q[None], np.array([share]))[0], iterations)
                if err <= GROUND_TOL:
                    break
            if err > GROUND_TOL:
                d.qpos[qpos_adr] = q_start
                reduced["kept"] += 1
                continue
            reduced["share"] += share < 1.0
            jp[k, cols] = d.qpos[qpos_adr]
            changed[k] = True
    return _with_velocities(arrays, jp, changed, ground_feet={"feet_partly_grounded": reduced["share"],
                                                               "feet_left_as_they_were": reduced["kept"]})


def plant(arrays: dict, full_m: float, blend_m: float) -> dict:
    """The clip with the frames in which retargeting left both feet just above the floor lowered onto it. The
    floor is the first frame's lowest sole sphere (where the clip's import stands the robot); in a frame whose
    lowest sphere hovers h above it the pelvis is lowered by w h, w = 1 up to full_m, blended to 0 at blend_m
    (w = (blend_m - h) / (blend_m - full_m)), so a real flight (feet higher than blend_m) stays a flight and
    the lowest sole's height stays continuous. A retargeted one-leg stance that floats by a centimetre is
    labelled a flight by the import's contact threshold (motions.clips.CONTACT_HEIGHT_M), so the balance
    checks and balance_cop skip it; planted, it is a stance. The joints are untouched; the changed frames'
    velocities are central differences."""
    if not 0 < full_m < blend_m:
        raise MotionError(f"plant: need 0 < full ({full_m} m) < blend ({blend_m} m)")
    ik = _leg_ik()
    jp = np.asarray(arrays["joint_pos"], float).copy()
    ik.pose(jp[0])
    floor = min(float(b.min()) for b in ik.bottoms())
    drop = np.zeros(len(jp))
    for k in range(len(jp)):
        ik.pose(jp[k])
        h = min(float(b.min()) for b in ik.bottoms()) - floor
        if h > 0:
            drop[k] = h * float(np.clip((blend_m - h) / (blend_m - full_m), 0.0, 1.0))
    jp[:, 2] -= drop
    changed = drop > 0
    return _with_velocities(arrays, jp, changed, plant={"frames_lowered": int(changed.sum()),
                                                        "max_lowered_mm": round(float(drop.max()) * 1000, 2)})


def _into(points: np.ndarray, p: np.ndarray, margin: float) -> np.ndarray:
    """The shortest horizontal move of floor point p that puts it `margin` inside the convex hull of `points`
    (a least-distance problem on the hull's edge lines moved in by margin); a hull too thin for that margin:
    the move to its most-inside point (the centre of its largest inscribed circle)."""
    from scipy.optimize import linprog, minimize
    from scipy.spatial import ConvexHull

    eq = ConvexHull(points).equations  # n . x + offset <= 0 inside, |n| = 1
    A, b = eq[:, :2], -eq[:, 2]
    if np.all(A @ p - b + margin <= 1e-12):
        return np.zeros(2)
    deepest = linprog([0.0, 0.0, -1.0], A_ub=np.hstack([A, np.ones((len(A), 1))]), b_ub=b,
                      bounds=[(None, None), (None, None), (0.0, None)])
    if deepest.status != 0 or deepest.x[2] <= margin:
        return deepest.x[:2] - p if deepest.status == 0 else np.zeros(2)
    res = minimize(lambda x: float((x - p) @ (x - p)), deepest.x[:2], jac=lambda x: 2 * (x - p), method="SLSQP",
                   constraints=[{"type": "ineq", "fun": lambda x: b - margin - A @ x, "jac": lambda x: -A}])
    return res.x - p


def balance_com(arrays: dict, margin_m: float, smooth_s: float = 0.2, iterations: int = 6) -> dict:
    """The clip with its pelvis moved horizontally where the whole robot's COM comes nearer than margin_m to an
    edge of the feet (or leaves them) while both feet stand: retargeting keeps a human's proportions, and a
    human's squat over the forefoot puts the G1's COM past its toes. Per double-support frame (both feet's
    lowest sole spheres within motions.balance.SOLE_ON_FLOOR_M of the floor, the lower foot's lowest sphere),
    the COM move that puts it margin_m inside the support polygon (the sole spheres on the floor); the moves
    are smoothed over time (a Gaussian of smooth_s), then the pelvis is moved until the COM has moved that
    much (a few fixed-point steps: the legs stay behind), both legs re-solved to keep each foot's world pose
    (damped Gauss-Newton within the joint limits, as ground_feet; _move_com). Pelvis orientation, waist and
    arms untouched; changed frames' velocities are central differences. The returned "balance_com" entry:
    _move_com's."""
    from scipy.ndimage import gaussian_filter1d

    from motions.balance import SOLE_ON_FLOOR_M

    if not 0 < margin_m < 0.1:
        raise MotionError(f"balance_com: margin_m {margin_m} m; give 0 < margin < 0.1 m")
    ik = _leg_ik()
    d = ik.d
    jp = np.asarray(arrays["joint_pos"], float)
    want = np.zeros((len(jp), 2))
    for k in range(len(jp)):
        ik.pose(jp[k])
        bottoms = ik.bottoms()
        floor = min(float(b.min()) for b in bottoms)
        if all(b.min() <= floor + SOLE_ON_FLOOR_M for b in bottoms):
            pts = np.concatenate([d.geom_xpos[g][b <= b.min() + SOLE_ON_FLOOR_M, :2]
                                  for g, b in zip(ik.soles, bottoms)])
            want[k] = _into(pts, d.subtree_com[0][:2], margin_m)
    want = gaussian_filter1d(want, smooth_s * float(arrays["fps"]), axis=0, mode="nearest")
    out = _move_com(arrays, want, iterations, "balance_com")
    out.pop("share")
    return out


SWING_FOLLOW_M = 0.025  # m: a foot this far above the other one on the floor moves with the pelvis (_move_com)


def _move_com(arrays: dict, want: np.ndarray, iterations: int, what: str, swing_follows: bool = False) -> dict:
    """The clip with each frame's COM moved horizontally by want[k] (T, 2; m, the clip's frame): the pelvis moved
    until the COM has moved that much (fixed-point steps: the legs stay behind), both legs re-solved to keep each
    foot's world pose. A frame whose feet cannot be kept in place within GROUND_TOL (a straight stance leg the
    move would stretch) has its pelvis lowered as little as lets the legs reach (up to MAX_DROP_M); one that
    still cannot (an ankle at its roll limit) takes the largest part of its move that they can (bisection to
    1/64), or none. The returned `what` entry: the frames moved, those moved part of the way and those left, the
    largest pelvis move (m), the frames lowered and the largest drop (m); `share` (T,): the part of each frame's
    move taken. swing_follows: a foot off the floor moves with the pelvis, blended in over its height above the
    lower foot from motions.balance.SOLE_ON_FLOOR_M (stays) to SWING_FOLLOW_M more (moves as far as the pelvis):
    only the feet on the floor stay, and a lifting foot does not jump."""
    from motions.balance import SOLE_ON_FLOOR_M

    ik = _leg_ik()
    d = ik.d
    jp0 = np.asarray(arrays["joint_pos"], float)

    def moved(row: np.ndarray, shift_to: np.ndarray, drop: float) -> tuple[np.ndarray, float]:
        ik.pose(row)
        com0 = d.subtree_com[0][:2].copy()
        goals = [(d.xpos[f].copy(), d.xquat[f].copy()) for f in ik.feet]
        lows = np.array([float(b.min()) for b in ik.bottoms()])
        follow = np.clip((lows - lows.min() - SOLE_ON_FLOOR_M) / SWING_FOLLOW_M, 0.0, 1.0) * swing_follows
        out, shift, errs = row.copy(), shift_to.copy(), [0.0]
        out[2] = row[2] - drop
        for _ in range(iterations):
            out[0:2] = row[0:2] + shift
            ik.pose(out)
            errs = []
            for f, (_, qpos_adr, _, cols) in enumerate(ik.legs):
                errs.append(ik.reach(f, goals[f][0] + follow[f] * (out[0:3] - row[0:3]), goals[f][1], 30))
                out[cols] = d.qpos[qpos_adr]
            ik.pose(out)
            shift += shift_to - (d.subtree_com[0][:2] - com0)
        return out, max(errs)

    def move(row: np.ndarray, shift_to: np.ndarray) -> tuple[np.ndarray, float]:
        """The frame moved; a straight leg the move stretches: the pelvis lowered as little as lets it reach
        (bisection to 0.25 mm, at most MAX_DROP_M)."""
        out, err = moved(row, shift_to, 0.0)
        if err <= GROUND_TOL:
            return out, err
        best, err = moved(row, shift_to, MAX_DROP_M)
        if err > GROUND_TOL:
            return out, err
        lo, hi = 0.0, MAX_DROP_M
        for _ in range(7):
            o, e = moved(row, shift_to, 0.5 * (lo + hi))
            lo, hi, best = (lo, 0.5 * (lo + hi), o) if e <= GROUND_TOL else (0.5 * (lo + hi), hi, best)
        return best, 0.0

    share = np.ones(len(jp0))
    jp = jp0.copy()
    for k in np.flatnonzero(np.linalg.norm(want, axis=1) > 1e-4):
        row, err = move(jp0[k], want[k])
        if err > GROUND_TOL:  # the largest part of the move the legs can take (bisection to 1/64)
            row, lo, hi = jp0[k], 0.0, 1.0
            for _ in range(6):
                r, e = move(jp0[k], 0.5 * (lo + hi) * want[k])
                row, lo, hi = (r, 0.5 * (lo + hi), hi) if e <= GROUND_TOL else (row, lo, 0.5 * (lo + hi))
            share[k] = lo
        jp[k] = row
    count = {"part": int(np.sum((share > 0) & (share < 1))), "left": int(np.sum(share == 0))}
    pelvis = np.linalg.norm(jp[:, 0:2] - jp0[:, 0:2], axis=1)
    changed = np.any(jp != jp0, axis=1)
    drop = jp0[:, 2] - jp[:, 2]
    return _with_velocities(arrays, jp, changed, share=share, **{what: {
        "frames_moved": int(changed.sum()), "frames_moved_part_of_the_way": count["part"],
        "frames_left": count["left"], "largest_pelvis_move_m": round(float(pelvis.max()), 4),
        "frames_lowered": int(np.sum(drop > 0)), "largest_pelvis_drop_m": round(float(drop.max()), 4)}})


def _second_derivative(T: int, dt: float):
    """(T, T) sparse matrix of np.gradient applied twice (central differences inside, one-sided at the ends):
    the operator motions.balance.required_cop takes the COM's acceleration with."""
    from scipy import sparse

    eye = np.eye(T)
    return sparse.csr_matrix(np.gradient(np.gradient(eye, dt, axis=0), dt, axis=0))


def balance_cop(arrays: dict, margin_m: float, smooth: float = 30.0, accel: float = 1e3, rounds: int = 4,
                iterations: int = 6, com_margin_m: float | None = None, com_one_leg_s: float = 0.3) -> dict:
    """The clip with its COM path bent so that the centre of pressure its motion needs (motions.balance) stays
    margin_m inside the feet on the floor. A tracking policy cannot follow a reference whose CoP leaves its feet:
    the floor cannot push there. Moving the COM by d(t) horizontally (the pelvis moved, both feet kept in place)
    moves the needed CoP by

        d(t) - h(t) d''(t),   h = c_z / (c_z'' + g)

    (required_cop with the COM's horizontal acceleration changed, its height, vertical acceleration and angular
    momentum kept): a few cm of COM acceleration move the CoP as far as metres of lean would. The move d (T, 2)
    minimises |d|^2 + smooth |d_k+1 - d_k|^2 + accel |d_k+1 - 2 d_k + d_k-1|^2 + 1e4 |the CoP past the support
    polygon shrunk by margin_m|^2 (+ 1e4 |d_k past the frame's reach|^2) over the CoP-checked stance frames
    (L-BFGS-B on a convex penalty); the pelvis is moved until the COM has (_move_com: both feet kept in place).
    Rounds repeat the solve, linearised about the moved clip (its legs and angular momentum changed a little),
    with a frame whose legs could not take its whole move held within 95 % of the part they took (its reach),
    until no checked frame's CoP is past the shrunk polygon by more than 2 mm or `rounds` are spent. Frames next
    to a flight (both feet off the floor) are not checked and not constrained. With com_margin_m, the COM itself
    is held that far inside the stance foot in the checked frames of every run of at least com_one_leg_s on one
    foot alone (1e4 |the COM past the shrunk polygon|^2, on d directly): a CoP inside is met by a COM that
    stands outside the stance foot and accelerates back, which a policy has to reproduce exactly; a COM inside
    asks for the quasi-static stance. Then a foot off the floor moves with the pelvis (_move_com's
    swing_follows), and where legs cannot take a frame's whole move the part they take is smoothed over its
    neighbours (a minimum over 5 frames, a Gaussian of 2) so the pelvis does not zig-zag. The returned
    "balance_cop" entry: frames moved, the largest pelvis move, the rounds run, the frames still held short of
    their move, the share of the checked frames with the CoP inside the feet before and after, and (with
    com_margin_m) the share with the COM inside before and after."""
    from scipy import sparse
    from scipy.optimize import minimize
    from scipy.spatial import ConvexHull

    from motions.balance import balance
    from motions.clips import yaw_of

    if not 0 <= margin_m < 0.05:
        raise MotionError(f"balance_cop: margin_m {margin_m} m; give 0 <= margin < 0.05 m")
    if com_margin_m is not None and not 0 <= com_margin_m < 0.05:
        raise MotionError(f"balance_cop: com_margin_m {com_margin_m} m; give 0 <= com_margin < 0.05 m")
    fps = float(arrays["fps"])
    T = len(arrays["joint_pos"])
    D2 = _second_derivative(T, 1.0 / fps)
    D1 = sparse.diags([-np.ones(T - 1), np.ones(T - 1)], [0, 1], shape=(T - 1, T)).tocsr()
    R = sparse.block_diag([D1, D1]).tocsr()
    A = sparse.block_diag([D1[1:] - D1[:-1]] * 2).tocsr()  # x_k+1 - 2 x_k + x_k-1
    yaw = yaw_of(np.asarray(arrays["joint_pos"], float)[0, 3:7])
    to_clip = np.array([[np.cos(yaw), -np.sin(yaw)], [np.sin(yaw), np.cos(yaw)]])  # the motion's frame -> the clip's
    out, done, first, first_com, held = arrays, 0, None, None, 0
    moved = np.zeros(2 * T)  # the move taken so far (the motion's frame; x then y)
    reach = np.full(T, np.inf)
    for done in range(1, rounds + 1):
        mo = _as_motion(out)
        b = balance(mo)
        first = _inside(b) if first is None else first
        first_com = _inside(b, "com_margin") if first_com is None else first_com
        com = b["com"]
        h = com[:, 2] / (np.gradient(np.gradient(com[:, 2], 1.0 / fps), 1.0 / fps) + GRAVITY)
        rows, rhs = [], []  # (frame, nx, ny, on the CoP: True / on the COM: False)
        held_on_one = None if com_margin_m is None else _one_leg_runs(mo.contact, round(com_one_leg_s * fps))
        for k in np.flatnonzero(b["checked"] & np.all(np.isfinite(b["cop"]), axis=1)):
            if len(b["support"][k]) < 3:
                continue
            for n in ConvexHull(b["support"][k]).equations:  # n[:2] . (cop + dp) + n[2] <= -margin
                rows.append((k, n[0], n[1], True))
                rhs.append(-margin_m - n[2] - n[:2] @ b["cop"][k])
                if held_on_one is not None and held_on_one[k]:  # n[:2] . (com + d) + n[2] <= -com_margin
                    rows.append((k, n[0], n[1], False))
                    rhs.append(-com_margin_m - n[2] - n[:2] @ com[k, :2])
        if not rows or np.max(-np.array(rhs)) <= 0.002:
            break
        k_, nx, ny, on_cop = (np.array(c) for c in zip(*rows))
        M = sparse.identity(T, format="csr") - sparse.diags(h) @ D2  # a COM move -> its CoP move, per axis
        M = sparse.diags(on_cop.astype(float)) @ M[k_] + sparse.diags((~on_cop).astype(float)) @ \
            sparse.identity(T, format="csr")[k_]  # a COM row: the move itself
        G = sparse.hstack([sparse.diags(nx) @ M, sparse.diags(ny) @ M]).tocsr()
        rhs = np.array(rhs) + G @ moved  # G (x - moved) <= rhs: the constraint on the whole move x
        cap = np.where(np.isfinite(reach), reach, 0.0)
        Rt, At, Gt = R.T, A.T, G.T  # once, not per evaluation (tens of thousands of them)

        def f(x):
            v = np.maximum(G @ x - rhs, 0.0)
            r, a = R @ x, A @ x
            norm = np.hypot(x[:T], x[T:])
            over = np.where(np.isfinite(reach), np.maximum(norm - cap, 0.0), 0.0)
            d_over = np.where(over > 0, over / np.maximum(norm, 1e-12), 0.0)
            return (x @ x + smooth * r @ r + accel * a @ a + 1e4 * (v @ v + over @ over),
                    2 * x + 2 * smooth * (Rt @ r) + 2 * accel * (At @ a) + 2e4 * (Gt @ v)
                    + 2e4 * np.concatenate([d_over * x[:T], d_over * x[T:]]))

        x = minimize(f, moved, jac=True, method="L-BFGS-B", options={"maxiter": 20000, "maxfun": 40000}).x
        out = _move_com(arrays, (to_clip @ x.reshape(2, T)).T, iterations, "balance_cop",
                        swing_follows=com_margin_m is not None)
        share = moved_share = out.pop("share")
        short = share < 1.0 - 1e-9
        reach[short] = np.minimum(reach[short], 0.95 * share[short] * np.hypot(x[:T], x[T:])[short])
        held = int(short.sum())
        moved = x * np.concatenate([share, share])
    if com_margin_m is not None and held:  # the COM rows ask more than some legs reach: no frame-to-frame zig-zag
        from scipy.ndimage import gaussian_filter1d, minimum_filter1d

        taken = gaussian_filter1d(minimum_filter1d(moved_share, 5), 2.0)
        out = _move_com(arrays, (to_clip @ (x * np.concatenate([taken, taken])).reshape(2, T)).T, iterations,
                        "balance_cop", swing_follows=True)
        held = int(np.sum(out.pop("share") < 1.0 - 1e-9))
    pelvis = np.linalg.norm(np.asarray(out["joint_pos"])[:, 0:2] - np.asarray(arrays["joint_pos"])[:, 0:2], axis=1)
    after = balance(_as_motion(out))
    com_shares = {} if com_margin_m is None else {"com_inside_before": first_com,
                                                  "com_inside_after": _inside(after, "com_margin")}
    return {**out, "balance_cop": {"frames_moved": int((pelvis > 1e-5).sum()),
                                   "largest_pelvis_move_m": round(float(pelvis.max()), 4), "rounds": done,
                                   "frames_held_short": held, "cop_inside_before": first,
                                   "cop_inside_after": _inside(after), **com_shares}}


def _one_leg_runs(contact, frames: int) -> np.ndarray:
    """(T,) bool: the frames of runs of at least `frames` frames on one foot alone (contact (T, 2) bool)."""
    one = np.asarray(contact).sum(axis=1) == 1
    same = np.r_[True, np.any(np.diff(contact, axis=0), axis=1)]  # a run starts where the contact changes
    run_id = np.cumsum(same)
    length = np.bincount(run_id)[run_id]
    return one & (length >= frames)


def _inside(b: dict, key: str = "cop_margin") -> float:
    """The share of motions.balance's CoP-checked frames whose CoP (key "com_margin": COM) is inside the feet."""
    cm = b[key][b["checked"]]
    return round(float(np.mean(cm > 0)), 3) if len(cm) else 1.0


def lead_out(arrays: dict, seconds: float, hold_s: float = 0.5, stance: str = "pelvis") -> dict:
    """The clip with `seconds` of made-up frames after it back to standing: `lead_in` of the clip played
    backwards, played forwards (its velocities' signs turned back), ending in `hold_s` of the home pose
    (`stance`: lead_in's, "feet" to stand on the last frame's feet)."""
    rev = {**arrays, "joint_pos": np.asarray(arrays["joint_pos"])[::-1], "joint_vel": np.asarray(arrays["joint_vel"])[::-1]}
    b = lead_in(rev, seconds, hold_s, stance)
    n = b["joint_pos"].shape[0] - rev["joint_pos"].shape[0]
    jv = b["joint_vel"][::-1].copy()
    jv[-n:] *= -1.0  # central differences taken backwards in time
    return {**arrays, "joint_pos": b["joint_pos"][::-1].copy(), "joint_vel": jv}


def write_clip_arrays(path, arrays: dict, note: dict | None = None) -> Path:
    """The clip in the BeyondMimic npz layout (fps, joint_pos, joint_vel, joint_names; motions.clip_files reads
    it), float32 tables (a 15 s clip at 50 Hz: 751 x 71 numbers); `note`, when given, as a JSON string entry."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    extra = {"note": np.array(json.dumps(note, sort_keys=True))} if note else {}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # renamed into place: no reader sees half a file
    try:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, fps=np.array([float(arrays["fps"])]),
                                joint_pos=np.asarray(arrays["joint_pos"], np.float32),
                                joint_vel=np.asarray(arrays["joint_vel"], np.float32),
                                joint_names=np.array([str(n) for n in arrays["joint_names"]]), **extra)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


__all__ = ["MAX_TILT_DEG", "Window", "activity", "activity_parts", "balance_com", "balance_cop", "best_window", "cut",
           "ground_feet", "lead_in", "lead_out", "plant", "read_clip_arrays", "torque_ratio", "velocities", "write_clip_arrays"]
