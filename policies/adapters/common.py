"""What every adapter shares: ONNX input/output inspection, the joint-order mapping, the clip length
of a tracking graph, the term-name tables, and the step that turns a filled-in PolicySpec into a
validated `policies.artifact.Artifact` (the same object a native artifact loads into)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from policies.artifact import Artifact, ArtifactError, MotionSpec, PolicySpec, ROBOT, validate_for_robot
from policies.observation import RUNTIME_TERMS, ObsTermSpec
from robots import g1

TIME_STEP = "time_step"


def load_onnx(path: Path) -> tuple[onnx.ModelProto, bytes]:
    try:
        blob = Path(path).read_bytes()
        model = onnx.load_from_string(blob)
        onnx.checker.check_model(model)
    except FileNotFoundError as e:
        raise ArtifactError(f"{path}: no such file; pass the policy's .onnx file or its folder") from e
    except Exception as e:  # noqa: BLE001 - onnx raises several types
        raise ArtifactError(f"{path} is not a valid ONNX model: {e}") from e
    return model, blob


def _dim(d):
    return d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")


def io_shapes(model: onnx.ModelProto) -> tuple[dict[str, list], dict[str, list]]:
    """Graph inputs (without initializers) and outputs -> {name: shape}."""
    init = {i.name for i in model.graph.initializer}
    ins = {i.name: [_dim(d) for d in i.type.tensor_type.shape.dim] for i in model.graph.input if i.name not in init}
    outs = {o.name: [_dim(d) for d in o.type.tensor_type.shape.dim] for o in model.graph.output}
    return ins, outs


def metadata(model: onnx.ModelProto) -> dict[str, str]:
    return {p.key: p.value for p in model.metadata_props}


def to_motor_order(values, policy_names, key: str, where: str) -> tuple[float, ...]:
    """Per-joint values listed in the policy's joint order -> motor order."""
    v = [float(x) for x in values]
    if len(v) != len(policy_names):
        raise ArtifactError(f"{where}: {key} has {len(v)} entries for {len(policy_names)} joints; "
                            "re-export the policy with one value per joint")
    out = list(g1.DEFAULT_JOINT_POS * np.nan)
    for name, x in zip(policy_names, v):
        out[g1.JOINT_NAMES.index(name)] = x
    return tuple(out)


def clip_frames(model: onnx.ModelProto, n_joints: int = g1.NUM_MOTORS) -> int | None:
    """Frames of the reference baked into a tracking graph: the leading size of the (T, n_joints)
    table a Gather reads (an initializer or a Constant node: BeyondMimic / mjlab, holosoma and our own
    exporter store the clip that way)."""
    init = {i.name: list(i.dims) for i in model.graph.initializer}
    for n in model.graph.node:  # tables held by Constant nodes (holosoma's exporter)
        if n.op_type == "Constant":
            init.update({n.output[0]: list(a.t.dims) for a in n.attribute if a.name == "value"})
    frames = [init[n.input[0]][0] for n in model.graph.node
              if n.op_type == "Gather" and n.input and n.input[0] in init
              and len(init[n.input[0]]) == 2 and init[n.input[0]][1] == n_joints]
    return max(frames) if frames else None


def constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The graph's constant tensors: initializers and Constant nodes' values, by name."""
    out = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant":
            out.update({n.output[0]: numpy_helper.to_array(a.t) for a in n.attribute if a.name == "value"})
    return out


def tanh_bound(model: onnx.ModelProto, output: str) -> np.ndarray | None:
    """The per-entry bound S of an output computed as tanh(x) * S (+ b): SAC actors squash their actions so;
    None for any other last layer."""
    consts = constants(model)
    prod = {o: n for n in model.graph.node for o in n.output}
    node = prod.get(output)
    if node is not None and node.op_type == "Add":  # + bias
        node = next((prod[i] for i in node.input if i in prod and prod[i].op_type == "Mul"), None)
    if node is None or node.op_type != "Mul":
        return None
    scale = [consts[i] for i in node.input if i in consts]
    tanh = [i for i in node.input if i in prod and prod[i].op_type == "Tanh"]
    return np.asarray(scale[0], float).reshape(-1) if len(scale) == 1 and len(tanh) == 1 else None


def term(canonical: str, source: str, scale=1.0, history: int = 1, clip=None) -> ObsTermSpec:
    """An observation term of the runtime's vocabulary; scale may be a number or one per entry."""
    size = RUNTIME_TERMS[canonical][0] if canonical in RUNTIME_TERMS else -1
    scales = None
    if isinstance(scale, (list, tuple, np.ndarray)):
        sc = tuple(float(x) for x in scale)
        if len(set(sc)) == 1 and len(sc) == size:
            scale = sc[0]
        else:
            scales, scale = sc, 1.0
    return ObsTermSpec(canonical, size, float(scale), history=history,
                       clip=None if clip is None else (float(clip[0]), float(clip[1])), scales=scales, source=source)


def check_io(model: onnx.ModelProto, spec: PolicySpec, where: str) -> None:
    """The ONNX graph takes what the description says: obs [1|batch, n_obs] (+ time_step [1, 1]) and
    returns [., 29] actions."""
    ins, outs = io_shapes(model)
    want = [spec.input_name] + ([spec.time_step_input] if spec.time_step_input else [])
    if sorted(ins) != sorted(want):
        raise ArtifactError(f"{where}: ONNX inputs {sorted(ins)}, the description expects {want}")
    shape = ins[spec.input_name]
    if len(shape) != 2 or shape[1] != spec.n_obs:
        terms = ", ".join(f"{t.source or t.name}={t.size}x{t.history}" for t in spec.observation)
        raise ArtifactError(f"{where}: ONNX input {spec.input_name!r} has shape {shape} but the observation terms "
                            f"add up to {spec.n_obs} ({terms}); fix the observation list (names, sizes, "
                            "history lengths) to match the network")
    if spec.output_name not in outs:
        raise ArtifactError(f"{where}: ONNX output {spec.output_name!r} missing (outputs: {sorted(outs)})")
    oshape = outs[spec.output_name]
    if len(oshape) != 2 or oshape[1] != g1.NUM_MOTORS:
        raise ArtifactError(f"{where}: ONNX output {spec.output_name!r} has shape {oshape}, expected "
                            f"[batch, {g1.NUM_MOTORS}] (a 29-DoF G1 policy)")


def finish(path: Path, blob: bytes, model: onnx.ModelProto, **fields) -> Artifact:
    """Fill the robot-side fields, validate against robots/ and the ONNX graph, return the Artifact."""
    fields.setdefault("motion", MotionSpec(Path(path).stem, 0.0))
    fields.setdefault("provenance", {})
    spec = PolicySpec(joint_names=tuple(g1.JOINT_NAMES), robot=ROBOT, control_dt=fields.pop("control_dt", g1.CONTROL_DT),
                      **fields)
    validate_for_robot(spec)
    check_io(model, spec, where=str(path))
    return Artifact(path=Path(path), spec=spec, onnx_bytes=blob, ref_q=np.zeros((0, g1.NUM_MOTORS)),
                    ref_height=np.zeros(0))
