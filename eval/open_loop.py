"""Open-loop evaluation of a motion's reference: a zero-residual artifact (the residual actor of
train/networks.py with its MLP at zero: action = ref_joint_pos[t+1] / action_scale, i.e. the drives'
PD tracks q_ref(t+1)) run by the ordinary evaluation. This is what an untrained policy does, so it
shows what training must fix (the README's 'untrained (zero residual)' rows).

    python -m eval.open_loop jump_high [--episodes 20] [--no-dr] [--video] [--out runs/eval]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from eval.config import EVAL_ROOT, DRConfig, EvalConfig, EvalError
from motions import MotionError, load_motion
from policies import artifact as A
from policies.action import ACTION_SCALE
from policies.observation import MOTION_OBS_TERMS, obs_size, term_specs
from robots import g1


def zero_residual_onnx(terms=MOTION_OBS_TERMS, action_scale: float = ACTION_SCALE) -> onnx.ModelProto:
    """actions = obs[ref_joint_pos, first 29] / (term scale x action_scale)."""
    specs = term_specs(terms)
    start, scale = 0, None
    for s in specs:
        if s.name == "ref_joint_pos":
            scale = s.scale
            break
        start += s.size * s.history
    if scale is None:
        raise EvalError(f"observation terms {list(terms)} have no ref_joint_pos: no zero-residual policy")
    n = obs_size(specs)
    inits = [numpy_helper.from_array(np.array([start], np.int64), "starts"),
             numpy_helper.from_array(np.array([start + g1.NUM_MOTORS], np.int64), "ends"),
             numpy_helper.from_array(np.array([1], np.int64), "axes"),
             numpy_helper.from_array(np.array([[1.0 / (scale * action_scale)]], np.float32), "k")]
    nodes = [helper.make_node("Slice", ["obs", "starts", "ends", "axes"], ["ref"]),
             helper.make_node("Mul", ["ref", "k"], ["actions"])]
    graph = helper.make_graph(nodes, "zero_residual",
                              [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", n])],
                              [helper.make_tensor_value_info("actions", TensorProto.FLOAT, ["batch", g1.NUM_MOTORS])],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def write_zero_residual_artifact(motion: str, root: Path) -> Path:
    """policies-style artifact root/<name>/ of `motion` (a name or a path) with the zero residual."""
    m = load_motion(motion)
    spec = A.PolicySpec(**A.robot_spec_fields(), action_scale=ACTION_SCALE, observation=term_specs(MOTION_OBS_TERMS),
                        motion=A.MotionSpec(m.name, float(m.duration)),
                        provenance=A.provenance("none (zero residual: open-loop PD tracking)", seed=0, iterations=0))
    return A.write_artifact(Path(root) / m.name, zero_residual_onnx(), spec, m.ref_q, m.ref_height)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.open_loop", description=__doc__.split("\n\n")[0])
    ap.add_argument("motion")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-dr", action="store_true")
    ap.add_argument("--video", action="store_true")
    ap.add_argument("--out", default=str(EVAL_ROOT))
    args = ap.parse_args(argv)
    from eval.evaluate import evaluate
    from eval.report import format_table

    cfg = EvalConfig(episodes=args.episodes, seed=args.seed, video=args.video, dr=DRConfig(enabled=not args.no_dr))
    with tempfile.TemporaryDirectory() as tmp:
        try:
            art = write_zero_residual_artifact(args.motion, Path(tmp))
            summary, out = evaluate(art.name, cfg, Path(tmp), Path(args.out) / "open_loop", progress=False)
        except (EvalError, MotionError, A.ArtifactError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    print(format_table(summary))
    print(out / "eval.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
