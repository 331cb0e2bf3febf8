"""A trivial 'stand' artifact (zero actions = hold the default pose), written through the same
writer as trained policies, so deploy can be built and tested without training.

    python -m policies.stand [out_dir]
"""
from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from policies import artifact as A
from policies.action import ACTION_SCALE
from policies.observation import MOTION_OBS_TERMS, obs_size, term_specs
from robots import g1

STAND_DURATION = 4.0  # s


def zero_policy_onnx(n_obs: int) -> onnx.ModelProto:
    """actions = ((obs - mean) / std) @ 0: NaN in the observation still propagates, as in a real net."""
    mean = numpy_helper.from_array(np.zeros((1, n_obs), np.float32), "obs_mean")
    std = numpy_helper.from_array(np.ones((1, n_obs), np.float32), "obs_std")
    w = numpy_helper.from_array(np.zeros((n_obs, g1.NUM_MOTORS), np.float32), "w")
    nodes = [helper.make_node("Sub", ["obs", "obs_mean"], ["c"]), helper.make_node("Div", ["c", "obs_std"], ["n"]),
             helper.make_node("MatMul", ["n", "w"], ["actions"])]
    graph = helper.make_graph(
        nodes, "stand",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", n_obs])],
        [helper.make_tensor_value_info("actions", TensorProto.FLOAT, ["batch", g1.NUM_MOTORS])],
        initializer=[mean, std, w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def write_stand_artifact(out_dir=None):
    obs = term_specs(MOTION_OBS_TERMS)
    T = int(round(STAND_DURATION / g1.CONTROL_DT))
    spec = A.PolicySpec(
        **A.robot_spec_fields(), action_scale=ACTION_SCALE, observation=obs,
        motion=A.MotionSpec("stand", STAND_DURATION),
        provenance=A.provenance("none (zero policy)", seed=0, iterations=0),
    )
    ref_q = np.tile(g1.DEFAULT_JOINT_POS, (T, 1))
    ref_h = np.full(T, g1.DEFAULT_BASE_HEIGHT)
    return A.write_artifact(out_dir or A.artifact_dir("stand"), zero_policy_onnx(obs_size(obs)), spec, ref_q, ref_h)


if __name__ == "__main__":
    print(write_stand_artifact(sys.argv[1] if len(sys.argv) > 1 else None))
