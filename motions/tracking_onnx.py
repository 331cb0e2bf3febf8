"""The reference baked into a whole-body-tracking ONNX (BeyondMimic / mjlab, holosoma WBT) read out as a
clip: `python -m motions extract <tracking.onnx> <out.npz>` writes it in the BeyondMimic npz layout that
motions.clip_files reads (so `make train MOTION=<that npz>` and `python -m motions preview` take it).

The graph is run at every time step 0..T-1 (T: the leading size of its (T, 29) joint table; the other
inputs zero) and its outputs are read:
- joints: `joint_pos`, `joint_vel`, in the file's joint order (metadata `dof_names`, JSON: holosoma;
  `joint_names`, CSV: mjlab), written in motor order with `joint_names`;
- root (pelvis) pose: BeyondMimic's `body_pos_w` / `body_quat_w` (w x y z) row of `pelvis` when
  `body_names` has it; otherwise the anchor's row (`anchor_body_name`), or holosoma's `ref_pos_xyz` /
  `ref_quat_xyzw` (its reference body, torso_link), moved to the pelvis through the joints by forward
  kinematics (robots.body_frames);
- root velocities: finite differences of the root pose (world frame), joint velocities the graph's.
The clip's rate is 50 Hz, both exporters' policy rate (the file does not say it).
"""
from __future__ import annotations

import json
from pathlib import Path

import mujoco
import numpy as np
import onnx
import onnxruntime as ort

from motions.motion import MotionError
from robots import g1
from robots.body_frames import BodyFrames, mat_to_quat, quat_to_mat

FPS = 50.0
HOLOSOMA_REF_BODY = "torso_link"  # holosoma-inference's robot config motion.body_name_ref


def _frames(model: onnx.ModelProto) -> int:
    tables = {i.name: list(i.dims) for i in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant":
            tables.update({n.output[0]: list(a.t.dims) for a in n.attribute if a.name == "value"})
    rows = [tables[n.input[0]][0] for n in model.graph.node if n.op_type == "Gather" and n.input
            and tables.get(n.input[0], [0, 0])[1:] == [g1.NUM_MOTORS]]
    return max(rows) if rows else 0


def _joint_names(meta: dict, path) -> list[str]:
    if "dof_names" in meta:
        names = json.loads(meta["dof_names"])
    elif "joint_names" in meta:
        names = [x.strip() for x in meta["joint_names"].split(",") if x.strip()]
    else:
        raise MotionError(f"{path}: metadata_props has neither dof_names (holosoma) nor joint_names (mjlab): the "
                          "joint order of the reference is unknown")
    if sorted(names) != sorted(g1.JOINT_NAMES):
        raise MotionError(f"{path}: the file's joints {names[:3]}... are not the G1's 29 (robots/g1.py)")
    return names


def read_reference(path) -> dict:
    """The graph's reference per time step: joints (motor order), root pose and velocities, at FPS."""
    path = Path(path)
    try:
        model = onnx.load(str(path))
    except Exception as e:  # noqa: BLE001 - onnx raises several types
        raise MotionError(f"{path}: not an ONNX file ({e})") from e
    meta = {p.key: p.value for p in model.metadata_props}
    names = _joint_names(meta, path)
    order = np.array([names.index(n) for n in g1.JOINT_NAMES])
    T = _frames(model)
    if T < 2:
        raise MotionError(f"{path}: {T} reference frames in the graph (the (T, 29) table joint_pos gathers); a clip "
                          "needs at least 2: is this a tracking policy?")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = [o.name for o in sess.get_outputs()]
    ins = {i.name: [d if isinstance(d, int) else 1 for d in i.shape] for i in sess.get_inputs()}
    if "time_step" not in ins or not {"joint_pos", "joint_vel"} <= set(outs):
        raise MotionError(f"{path}: not a tracking graph (inputs {sorted(ins)}, outputs {outs}); it needs the input "
                          "time_step and the outputs joint_pos, joint_vel")
    if {"body_pos_w", "body_quat_w"} <= set(outs):
        bodies = [x.strip() for x in meta.get("body_names", "").split(",") if x.strip()]
        body = "pelvis" if "pelvis" in bodies else meta.get("anchor_body_name", "").strip()
        if body not in bodies:
            raise MotionError(f"{path}: body_names {bodies} has neither pelvis nor the anchor body {body!r}")
        pose_out, row, xyzw = ("body_pos_w", "body_quat_w"), bodies.index(body), False
    elif {"ref_pos_xyz", "ref_quat_xyzw"} <= set(outs):
        body, pose_out, row, xyzw = HOLOSOMA_REF_BODY, ("ref_pos_xyz", "ref_quat_xyzw"), None, True
    else:
        raise MotionError(f"{path}: the graph gives no root pose (outputs {outs}): it needs body_pos_w / body_quat_w "
                          "or ref_pos_xyz / ref_quat_xyzw")
    feed = {k: np.zeros(v, np.float32) for k, v in ins.items()}
    jp, jv, bp, bq = [], [], [], []
    for k in range(T):
        feed["time_step"][...] = k
        a, b, p, q = sess.run(["joint_pos", "joint_vel", *pose_out], feed)
        jp.append(a.reshape(-1)[order])
        jv.append(b.reshape(-1)[order])
        bp.append(p[0, row] if row is not None else p.reshape(3))
        bq.append(q[0, row] if row is not None else q.reshape(4))
    jp, jv, bp, bq = (np.asarray(x, float) for x in (jp, jv, bp, bq))
    if xyzw:
        bq = bq[:, [3, 0, 1, 2]]
    root_pos, root_quat = bp, bq / np.linalg.norm(bq, axis=1, keepdims=True)
    if body != "pelvis":  # the pelvis under the body: R_pelvis = R_body R_in^T, p_pelvis = p_body - R_pelvis p_in
        kin = BodyFrames()
        b = kin.body_id(body)
        root_pos, root_quat = np.empty_like(bp), np.empty_like(root_quat)
        for k in range(T):
            p_in, r_in = kin.pose_in_pelvis(b, jp[k])
            r = quat_to_mat(bq[k]) @ r_in.T
            root_pos[k] = bp[k] - r @ p_in
            root_quat[k] = mat_to_quat(r)
    dt = 1.0 / FPS
    lin = np.gradient(root_pos, dt, axis=0)
    ang = np.zeros((T, 3))
    for k in range(T - 1):  # world-frame angular velocity over each frame
        w = np.empty(3)
        mujoco.mju_subQuat(w, root_quat[k + 1], root_quat[k])
        ang[k] = quat_to_mat(root_quat[k]) @ w / dt
    ang[-1] = ang[-2]
    return {"fps": FPS, "joint_pos": np.concatenate([root_pos, root_quat, jp], axis=1),
            "joint_vel": np.concatenate([lin, ang, jv], axis=1), "joint_names": np.array(g1.JOINT_NAMES),
            "root_from": body, "frames": T}


def extract(onnx_path, out) -> Path:
    """Write the graph's reference as a BeyondMimic-layout npz (fps, joint_pos, joint_vel, joint_names)."""
    r = read_reference(onnx_path)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, fps=np.array([r["fps"]]), joint_pos=r["joint_pos"], joint_vel=r["joint_vel"],
             joint_names=r["joint_names"])
    return out


__all__ = ["extract", "read_reference"]
