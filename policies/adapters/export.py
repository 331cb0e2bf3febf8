"""Write one of our native artifacts (a motion policy with its reference) in the mjlab / BeyondMimic
tracking format and in the unitree_rl_lab format, with their exact key names and orders, so the
adapters are tested on files whose every value is known, and our policies run in those toolchains.

    python -m policies.adapters.export mjlab policies/g1/jump out/jump_mjlab [--order isaac|motor]
    python -m policies.adapters.export rl_lab policies/g1/jump out/jump_rl_lab

The exported graph wraps our network: inputs `obs` (the terms the robot side measures, raw for mjlab
and scaled as deploy.yaml says for rl_lab, joints in the exported order) and `time_step` [1, 1]; the
reference (q_ref - default at t+1..t+3, pelvis height, the motion phase) is baked into the graph and
gathered by time_step, the observation is reassembled in our order and scaled inside the graph,
and the actions leave in the exported joint order (BeyondMimic's layout: the motion lives in the
graph). Outputs: `actions`, and the reference at time_step: `joint_pos` / `joint_vel` (exported order),
`body_pos_w` / `body_quat_w` [1, 1, 3|4] of the one body in `body_names`, the pelvis (upright at the
reference's height).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper, numpy_helper

from policies.artifact import Artifact, ArtifactError, load_artifact
from policies.observation import REF_LOOKAHEAD
from robots import g1

# IsaacLab's breadth-first G1 29-DoF joint order (unitree_rl_lab's joint_ids_map: policy i -> motor index)
ISAAC_ORDER = (0, 6, 12, 1, 7, 13, 2, 8, 14, 3, 9, 15, 22, 4, 10, 16, 23, 5, 11, 17, 24, 18, 25, 19, 26, 20, 27, 21, 28)
MEASURED = ("base_ang_vel", "projected_gravity", "joint_pos", "joint_vel", "last_action", "base_lin_vel", "base_height")
IN_GRAPH = ("motion_phase", "ref_joint_pos", "ref_base_height")
JOINT_TERMS = ("joint_pos", "joint_vel", "last_action")
MJLAB_NAMES = {"base_ang_vel": "base_ang_vel", "projected_gravity": "projected_gravity", "joint_pos": "joint_pos",
               "joint_vel": "joint_vel", "last_action": "actions", "base_lin_vel": "base_lin_vel",
               "base_height": "base_height"}
RL_LAB_NAMES = {"base_ang_vel": "base_ang_vel", "projected_gravity": "projected_gravity", "joint_pos": "joint_pos_rel",
                "joint_vel": "joint_vel_rel", "last_action": "last_action", "base_lin_vel": "base_lin_vel",
                "base_height": "base_height"}


def _c(name, arr, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(arr, dtype), name)


def wrap_graph(art: Artifact, order, ext_scales: dict[str, float]) -> onnx.ModelProto:
    """Our network behind the exported interface (see the module docstring). order: exported joint
    i -> motor index; ext_scales: the scale the exported obs carries per measured term."""
    spec = art.spec
    names = [t.name for t in spec.observation]
    if tuple(names) != MEASURED + IN_GRAPH:
        raise ArtifactError(f"export needs the motion layout {MEASURED + IN_GRAPH}, this artifact has {names}")
    order = np.asarray(order, np.int64)
    inv = np.argsort(order)  # motor index -> exported position
    sizes = {t.name: t.size for t in spec.observation}
    # exported obs (measured terms in our term order, joints in `order`) -> our order: one Gather
    idx, off = [], 0
    for n in MEASURED:
        k = sizes[n]
        idx += list(off + inv) if n in JOINT_TERMS else list(range(off, off + k))
        off += k
    n_ext = off
    unscale = np.concatenate([np.full(sizes[n], 1.0 / ext_scales[n]) for n in MEASURED])[idx]
    scale = np.concatenate([np.full(t.size, t.scale) for t in spec.observation])
    T = art.ref_q.shape[0]
    ref_rel = art.ref_q - g1.DEFAULT_JOINT_POS
    ref_h = art.ref_height - g1.DEFAULT_BASE_HEIGHT
    ref_abs = art.ref_q[:, order]
    ref_vel = np.gradient(art.ref_q, spec.control_dt, axis=0)[:, order]
    # body poses (BeyondMimic's body_pos_w / body_quat_w, w x y z): the one body the reference knows, the
    # pelvis, upright above the origin at the reference's height
    body_pos = np.stack([np.zeros(T), np.zeros(T), np.asarray(art.ref_height, float)], 1)[:, None, :]
    body_quat = np.tile([1.0, 0.0, 0.0, 0.0], (T, 1, 1))
    inits = [_c("rt_idx", idx, np.int64), _c("rt_unscale", unscale[None]), _c("rt_scale", scale[None]),
             _c("rt_refq", ref_rel), _c("rt_refh", ref_h), _c("rt_refq_abs", ref_abs), _c("rt_refv", ref_vel),
             _c("rt_look", np.arange(1, REF_LOOKAHEAD + 1), np.int64), _c("rt_zero", 0, np.int64),
             _c("rt_last", T - 1, np.int64), _c("rt_flat1", [-1], np.int64), _c("rt_row", [1, -1], np.int64),
             _c("rt_phase_k", np.pi * spec.control_dt / spec.motion.duration), _c("rt_pi", np.pi),
             _c("rt_f0", 0.0), _c("rt_f1", 1.0), _c("rt_out", order, np.int64), _c("rt_bpos", body_pos),
             _c("rt_bquat", body_quat)]
    N = helper.make_node
    nodes = [
        N("Gather", ["obs", "rt_idx"], ["rt_g"], axis=1),
        N("Mul", ["rt_g", "rt_unscale"], ["rt_meas"]),
        N("Floor", ["time_step"], ["rt_tsf"]), N("Cast", ["rt_tsf"], ["rt_ts64"], to=TensorProto.INT64),
        N("Reshape", ["rt_ts64", "rt_flat1"], ["rt_ts"]),
        N("Add", ["rt_ts", "rt_look"], ["rt_win0"]), N("Clip", ["rt_win0", "rt_zero", "rt_last"], ["rt_win"]),
        N("Gather", ["rt_refq", "rt_win"], ["rt_q3"], axis=0), N("Reshape", ["rt_q3", "rt_row"], ["rt_qf"]),
        N("Gather", ["rt_refh", "rt_win"], ["rt_h3"], axis=0), N("Reshape", ["rt_h3", "rt_row"], ["rt_hf"]),
        N("Mul", ["time_step", "rt_phase_k"], ["rt_ph0"]),
        N("Clip", ["rt_ph0", "rt_f0", "rt_pi"], ["rt_ang"]),
        N("Sin", ["rt_ang"], ["rt_sin"]), N("Cos", ["rt_ang"], ["rt_cos"]),
        N("Concat", ["rt_meas", "rt_sin", "rt_cos", "rt_qf", "rt_hf"], ["rt_cat"], axis=1),
        N("Mul", ["rt_cat", "rt_scale"], ["rt_native_obs"]),
        N("Clip", ["rt_ts", "rt_zero", "rt_last"], ["rt_now"]),
        N("Gather", ["rt_refq_abs", "rt_now"], ["joint_pos"], axis=0),
        N("Gather", ["rt_refv", "rt_now"], ["joint_vel"], axis=0),
        N("Gather", ["rt_bpos", "rt_now"], ["body_pos_w"], axis=0),
        N("Gather", ["rt_bquat", "rt_now"], ["body_quat_w"], axis=0),
    ]
    net = onnx.load_from_string(art.onnx_bytes)
    g = net.graph
    for node in g.node:  # rename the network's interface
        node.input[:] = ["rt_native_obs" if x == "obs" else ("rt_net_actions" if x == "actions" else x) for x in node.input]
        node.output[:] = ["rt_net_actions" if x == "actions" else x for x in node.output]
    nodes += list(g.node) + [N("Gather", ["rt_net_actions", "rt_out"], ["actions"], axis=1)]
    graph = helper.make_graph(
        nodes, "exported_" + spec.motion.name,
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, [1, n_ext]),
         helper.make_tensor_value_info("time_step", TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info("actions", TensorProto.FLOAT, [1, g1.NUM_MOTORS]),
         helper.make_tensor_value_info("joint_pos", TensorProto.FLOAT, [1, g1.NUM_MOTORS]),
         helper.make_tensor_value_info("joint_vel", TensorProto.FLOAT, [1, g1.NUM_MOTORS]),
         helper.make_tensor_value_info("body_pos_w", TensorProto.FLOAT, [1, 1, 3]),
         helper.make_tensor_value_info("body_quat_w", TensorProto.FLOAT, [1, 1, 4])],
        initializer=inits + list(g.initializer))
    model = helper.make_model(graph, opset_imports=list(net.opset_import), ir_version=net.ir_version)
    onnx.checker.check_model(model)
    return model


def _csv(v) -> str:  # mjlab's list_to_csv_str: floats with 3 decimals
    return ",".join(f"{x:.3f}" if isinstance(x, (int, float, np.floating)) else str(x) for x in v)


def export_mjlab(art: Artifact, out: str | Path, order=ISAAC_ORDER) -> Path:
    """<out>/policy.onnx: a BeyondMimic-style tracking policy with mjlab's metadata_props."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model = wrap_graph(art, order, {n: 1.0 for n in MEASURED})
    names = [g1.JOINT_NAMES[i] for i in order]
    sp = art.spec
    meta = {"run_path": f"g1-bcg/{sp.motion.name}", "joint_names": names,
            "joint_stiffness": [float(sp.kp[i]) for i in order], "joint_damping": [float(sp.kd[i]) for i in order],
            "default_joint_pos": [float(sp.default_joint_pos[i]) for i in order],
            "command_names": ["motion"], "observation_names": [MJLAB_NAMES[n] for n in MEASURED],
            "action_scale": [float(sp.action_scale)] * g1.NUM_MOTORS,
            "anchor_body_name": "pelvis", "body_names": ["pelvis"]}
    for k, v in meta.items():
        model.metadata_props.add(key=k, value=_csv(v) if isinstance(v, list) else str(v))
    p = out / "policy.onnx"
    p.write_bytes(model.SerializeToString())
    return p


def export_rl_lab(art: Artifact, out: str | Path, order=ISAAC_ORDER) -> Path:
    """<out>/exported/policy.onnx + <out>/params/deploy.yaml, unitree_rl_lab's layout."""
    out = Path(out)
    (out / "exported").mkdir(parents=True, exist_ok=True)
    (out / "params").mkdir(parents=True, exist_ok=True)
    sp = art.spec
    sc = {t.name: t.scale for t in sp.observation}
    (out / "exported" / "policy.onnx").write_bytes(wrap_graph(art, order, sc).SerializeToString())
    sizes = {t.name: t.size for t in sp.observation}
    d = {
        "joint_ids_map": [int(i) for i in order], "step_dt": float(sp.control_dt),
        "stiffness": [float(x) for x in sp.kp], "damping": [float(x) for x in sp.kd],  # motor order
        "default_joint_pos": [float(sp.default_joint_pos[i]) for i in order],  # policy order
        "commands": {},
        "actions": {"JointPositionAction": {
            "clip": None, "joint_names": [".*"], "scale": [float(sp.action_scale)] * g1.NUM_MOTORS,
            "offset": [float(sp.default_joint_pos[i]) for i in order], "joint_ids": None}},
        "observations": {RL_LAB_NAMES[n]: {"params": {}, "clip": None, "scale": [float(sc[n])] * sizes[n],
                                           "history_length": 1} for n in MEASURED},
    }
    (out / "params" / "deploy.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m policies.adapters.export", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("format", choices=("mjlab", "rl_lab"))
    p.add_argument("artifact", help="a native artifact folder, e.g. policies/g1/jump")
    p.add_argument("out")
    p.add_argument("--order", choices=("isaac", "motor"), default="isaac", help="exported joint order")
    a = p.parse_args(argv)
    art = load_artifact(a.artifact)
    order = ISAAC_ORDER if a.order == "isaac" else tuple(range(g1.NUM_MOTORS))
    print((export_mjlab if a.format == "mjlab" else export_rl_lab)(art, a.out, order))
    return 0


if __name__ == "__main__":
    sys.exit(main())
