"""The compiled policy backend (policies.mlp_kernel) against onnxruntime, its reference.

- the committed artifacts (jump, jump_high, stand) and our jump in the mjlab format (an adapted third-party
  artifact: Gather / Concat / time_step lookups in the graph) run compiled by default and agree with their
  ONNX session within COMPILED_TOL over many observations, through `lower` and through PolicyRuntime.step;
- a graph with an operator the kernel does not know (Softmax) falls back to onnxruntime, its reason naming
  it; backend="compiled" on it raises ArtifactError naming it; a failed load check falls back as well;
- a NaN anywhere in the observation makes every action non-finite, as onnxruntime does, and the safety
  layer trips on it; +-inf give what onnxruntime gives;
- the op set on a small graph of its own (activations, Max / Min, Where, Slice, Gather, Concat, Transpose,
  reductions, Gemm with transB) equals onnxruntime on random, NaN and inf inputs.
"""
import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from policies import artifact as A
from policies import mlp_kernel as K
from policies import runtime as R
from policies.adapters import load_policy
from policies.adapters.export import export_mjlab
from policies.runtime import COMPILED_TOL, PolicyRuntime, make_session
from robots import g1
from safety.limits import Limits, Trip, check_command

UP = np.array([1.0, 0.0, 0.0, 0.0])


def _state(rng):
    quat = np.array([0.99, 0.05, -0.03, 0.02]) + rng.normal(0, 0.02, 4)
    return (g1.DEFAULT_JOINT_POS + rng.normal(0, 0.1, 29), rng.normal(0, 1.0, 29), rng.normal(0, 0.5, 3),
            quat / np.linalg.norm(quat), rng.normal(0, 0.3, 3), 0.75 + rng.normal(0, 0.03))


@pytest.fixture(scope="module")
def jump():
    return A.load_artifact(A.artifact_dir("hop"))


@pytest.fixture(scope="module")
def mjlab(jump, tmp_path_factory):
    return load_policy(export_mjlab(jump, tmp_path_factory.mktemp("mj") / "mj"))


def _compare_programs(art, n=400, seed=0):
    """worst max_rel_diff of the lowered graph vs the session over n observations (+ zero), batch 1."""
    spec = art.spec
    shapes = {spec.input_name: (1, spec.n_obs)}
    if spec.time_step_input:
        shapes[spec.time_step_input] = (1, 1)
    prog = K.lower(art.onnx_bytes, shapes, spec.output_name)
    sess = make_session(art.onnx_bytes)
    rng = np.random.default_rng(seed)
    worst = 0.0
    for k in range(n + 1):
        feed = {spec.input_name: (rng.normal(0, (0.03, 0.3, 1.0, 4.0)[k % 4], (1, spec.n_obs)) if k
                                  else np.zeros((1, spec.n_obs))).astype(np.float32)}
        if spec.time_step_input:
            feed[spec.time_step_input] = np.array([[rng.integers(0, 400)]], np.float32)
        want = sess.run([spec.output_name], feed)[0].reshape(-1)
        worst = max(worst, K.max_rel_diff(prog(feed), want))
    return worst


@pytest.mark.parametrize("name", ["hop", "jump_high", "stand"])
def test_committed_artifacts_compile_and_match_onnxruntime(name):
    art = A.load_artifact(A.artifact_dir(name))
    assert _compare_programs(art) <= COMPILED_TOL
    rt = PolicyRuntime(art)
    assert rt.backend == "compiled" and "run compiled" in rt.backend_reason, rt.backend_reason


def test_adapted_mjlab_artifact_compiles_and_matches_onnxruntime(mjlab):
    assert mjlab.spec.time_step_input
    assert _compare_programs(mjlab) <= COMPILED_TOL
    assert PolicyRuntime(mjlab).backend == "compiled"


@pytest.mark.parametrize("which", ["hop", "mjlab"])
def test_runtime_steps_match_the_onnxruntime_backend(jump, mjlab, which):
    """The two backends step by step over a whole motion: the same observation (same last action fed to both),
    actions within COMPILED_TOL, targets from them."""
    art = jump if which == "hop" else mjlab
    c, o = PolicyRuntime(art), PolicyRuntime(art, backend="onnxruntime")
    assert (c.backend, o.backend) == ("compiled", "onnxruntime") and o.backend_reason == "requested"
    rng = np.random.default_rng(3)
    for step in range(c.n_steps):
        state = _state(rng)
        o.last_action = c.last_action.copy()
        oc, oo = c.step(step, *state), o.step(step, *state)
        np.testing.assert_array_equal(oc.obs, oo.obs)
        assert K.max_rel_diff(oc.action, oo.action) <= COMPILED_TOL, step
        np.testing.assert_array_equal(oc.target, c.action_target(oc.action))
    # outputs are the caller's: the next step does not overwrite them
    o1 = c.step(3, *_state(rng))
    kept = o1.obs.copy(), o1.action.copy()
    c.step(4, *_state(rng))
    np.testing.assert_array_equal(o1.obs, kept[0])
    np.testing.assert_array_equal(o1.action, kept[1])


def _with_softmax(jump, tmp_path):
    """The jump with a Softmax on its output: an operator the kernel does not compile."""
    m = onnx.load_from_string(jump.onnx_bytes)
    for node in m.graph.node:
        node.output[:] = ["pre_softmax" if x == "actions" else x for x in node.output]
    m.graph.node.append(helper.make_node("Softmax", ["pre_softmax"], ["actions"], axis=-1))
    spec = dataclasses.replace(jump.spec, onnx_sha256="")
    return A.load_artifact(A.write_artifact(tmp_path / "softmax", m, spec, jump.ref_q, jump.ref_height))


def test_unknown_operator_falls_back_and_compiled_refuses(jump, tmp_path):
    art = _with_softmax(jump, tmp_path)
    rt = PolicyRuntime(art)
    assert rt.backend == "onnxruntime" and "operator Softmax is not compiled" in rt.backend_reason
    assert rt._io is not None  # the bound session, as before the compiled backend
    out = rt.step(0, *_state(np.random.default_rng(0)))
    assert np.isfinite(out.action).all() and out.action.sum() == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(A.ArtifactError, match="compiled policy backend cannot run.*Softmax"):
        PolicyRuntime(art, backend="compiled")
    with pytest.raises(A.ArtifactError, match="unknown policy backend"):
        PolicyRuntime(art, backend="tensorrt")


def test_failed_load_check_falls_back(jump, monkeypatch):
    monkeypatch.setattr(R, "COMPILED_TOL", -1.0)  # nothing passes
    rt = PolicyRuntime(jump)
    assert rt.backend == "onnxruntime" and "differs from onnxruntime" in rt.backend_reason
    with pytest.raises(A.ArtifactError, match="differs from onnxruntime"):
        PolicyRuntime(jump, backend="compiled")


def test_nan_observation_gives_nonfinite_actions_like_onnxruntime(jump):
    prog = K.lower(jump.onnx_bytes, {"obs": (1, jump.spec.n_obs)}, "actions")
    sess = make_session(jump.onnx_bytes)
    rng = np.random.default_rng(1)
    for i in range(jump.spec.n_obs):
        for bad in (np.nan, np.inf, -np.inf):
            x = rng.normal(0, 1, (1, jump.spec.n_obs)).astype(np.float32)
            x[0, i] = bad
            want = sess.run(["actions"], {"obs": x})[0].reshape(-1)
            got = prog({"obs": x})
            np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want), err_msg=f"{i} {bad}")
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{i} {bad}")
            assert K.max_rel_diff(got, want) <= COMPILED_TOL
            if np.isnan(bad):
                assert not np.isfinite(got).any()  # every action: the net mixes every input
    # through the runtime: a NaN gyro -> non-finite action -> the safety layer trips
    rt = PolicyRuntime(jump)
    q, dq, gyro, quat, v, h = _state(rng)
    out = rt.step(0, q, dq, np.array([np.nan, 0.0, 0.0]), quat, v, h)
    assert rt.backend == "compiled" and not np.isfinite(out.action).any()
    res = check_command(q, dq, quat, out.target, q.copy(), Limits.default())
    assert isinstance(res, Trip) and res.kind == "nonfinite_action"


def _op_zoo() -> onnx.ModelProto:
    """A small graph using the op set of policies.mlp_kernel."""
    rng = np.random.default_rng(7)
    c = lambda name, a: numpy_helper.from_array(np.asarray(a, np.float32), name)  # noqa: E731
    i64 = lambda name, a: numpy_helper.from_array(np.asarray(a, np.int64), name)  # noqa: E731
    inits = [c("w1", rng.normal(0, 0.3, (16, 12))), c("b1", rng.normal(0, 0.1, 16)), c("w2", rng.normal(0, 0.3, (40, 8))),
             c("lo", -1.5), c("hi", 2.0), c("half", 0.5), c("two", [2.0]), i64("perm", [5, 0, 3, 3, 11, 1]),
             i64("st", [2]), i64("en", [11]), i64("ax", [1]), i64("sp", [3]), i64("shape26", [2, 3]),
             i64("rax", [1]), c("vec", rng.normal(0, 1, (1, 8)))]
    N = helper.make_node
    nodes = [
        N("Gemm", ["x", "w1", "b1"], ["g"], transB=1, alpha=0.7, beta=1.3),  # (1, 16)
        N("Relu", ["g"], ["r"]), N("Tanh", ["g"], ["t"]), N("Sigmoid", ["g"], ["s"]),
        N("LeakyRelu", ["g"], ["lr"], alpha=0.1), N("Elu", ["g"], ["el"], alpha=0.8), N("Softplus", ["g"], ["sp1"]),
        N("Max", ["r", "t"], ["mx"]), N("Min", ["s", "lr"], ["mn"]), N("Greater", ["g", "half"], ["gt"]),
        N("Where", ["gt", "el", "sp1"], ["wh"]), N("Clip", ["wh", "lo", "hi"], ["cl"]), N("Clip", ["mx"], ["cl0"]),
        N("Abs", ["cl"], ["ab"]), N("Sqrt", ["ab"], ["sq"]), N("Neg", ["mn"], ["ng"]),
        N("Mul", ["sq", "two"], ["m2"]), N("Div", ["ng", "two"], ["d2"]), N("Pow", ["ab", "two"], ["pw"]),
        N("Gather", ["x", "perm"], ["ga"], axis=1),  # (1, 6)
        N("Slice", ["x", "st", "en", "ax", "sp"], ["sl"]),  # (1, 3)
        N("Reshape", ["ga", "shape26"], ["rs"]), N("Transpose", ["rs"], ["tr"], perm=[1, 0]),
        N("Flatten", ["tr"], ["fl"], axis=0),  # (1, 6)
        N("ReduceMean", ["cl"], ["rm"], keepdims=1, axes=[1]), N("ReduceSum", ["cl", "rax"], ["rsu"], keepdims=1), N("ReduceSumSquare", ["m2"], ["rq"], keepdims=1, axes=[1]),
        N("ReduceMax", ["cl0"], ["rx"], keepdims=1, axes=[1]), N("Sub", ["cl0", "rm"], ["cen"]),
        N("Concat", ["m2", "d2", "sl", "fl"], ["cat0"], axis=1),  # (1, 16 + 16 + 3 + 6 = 41)
        N("Slice", ["cat0", "st", "en", "ax"], ["cat1"]),  # (1, 9)
        N("Concat", ["cen", "cat1", "rq", "rx", "pw", "rsu"], ["cat"], axis=1),  # (1, 16 + 9 + 1 + 1 + 16 + 1 = 44)
        N("Slice", ["cat", "st", "en", "ax"], ["cut"]),  # (1, 9)
        N("Concat", ["cut", "cat"], ["both"], axis=1),  # (1, 53)
        N("Exp", ["both"], ["ex"]),
        N("Slice", ["ex", i64("z", [0]).name, i64("f", [40]).name, "ax"], ["ex40"]),
        N("MatMul", ["ex40", "w2"], ["mm"]), N("Add", ["mm", "vec"], ["y"]),
    ]
    inits += [i64("z", [0]), i64("f", [40])]
    g = helper.make_graph(nodes, "zoo", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(m)
    return m


def test_op_set_matches_onnxruntime_including_nonfinite_inputs():
    b = _op_zoo().SerializeToString()
    prog, sess = K.lower(b, {"x": (1, 12)}, "y"), make_session(b)
    rng = np.random.default_rng(0)
    for k in range(300):
        x = rng.normal(0, (0.1, 1.0, 3.0)[k % 3], (1, 12)).astype(np.float32)
        if k >= 200:
            x[0, rng.integers(12)] = (np.nan, np.inf, -np.inf)[k % 3]
        want = sess.run(["y"], {"x": x})[0].reshape(-1)
        got = prog({"x": x})
        assert K.max_rel_diff(got, want) <= COMPILED_TOL, (k, got, want)
    assert prog.run() is prog.output  # in place: the arena's own output row


def test_unsupported_shapes_are_refused_with_a_reason():
    g = helper.make_graph([helper.make_node("MatMul", ["w", "x"], ["y"])], "t",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])],
                          initializer=[numpy_helper.from_array(np.ones((2, 3), np.float32), "w")])
    b = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()
    with pytest.raises(K.Unsupported, match="MatMul.*constant weights"):
        K.lower(b, {"x": (3, 1)}, "y")
    with pytest.raises(K.Unsupported, match="not fed"):
        K.lower(b, {}, "y")


@pytest.mark.parametrize("name", ["hop", "stand"])
def test_native_tick_equals_the_step_by_step_path(name):
    """The native motion tick in one call (observation, program, target: mlp_kernel.NativeTick) gives what
    observe -> infer -> action_target give, bit for bit, at every step and past the motion's end."""
    art = A.load_artifact(A.artifact_dir(name))
    fast, slow = PolicyRuntime(art), PolicyRuntime(art)
    slow._native = None
    assert fast._native is not None and fast.backend == "compiled"
    rng = np.random.default_rng(5)
    for step in list(range(fast.n_steps + 1)) + [fast.n_steps + 3]:
        state = _state(rng)
        slow.last_action = fast.last_action.copy()
        a, b = fast.step(step, *state), slow.step(step, *state)
        assert a.step == b.step and a.phase == b.phase
        for x, y in zip(a[2:], b[2:]):
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), step
    assert fast._time_step == slow._time_step


def test_deploy_cli_and_loop_pass_the_backend(jump):
    from deploy.cli import build_parser
    from deploy.loop import ControlLoop, LoopConfig

    assert build_parser().parse_args([]).policy_backend == "auto"
    assert build_parser().parse_args(["--policy-backend", "onnxruntime"]).policy_backend == "onnxruntime"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--policy-backend", "tensorrt"])

    class NoLink:
        domain, interface, crc_errors = 0, "none", 0

    for backend in ("onnxruntime", "compiled"):
        loop = ControlLoop(LoopConfig(policy_dir=str(jump.path), policy_backend=backend), jump, NoLink(),
                           echo=lambda s: None)
        assert loop.runtime.backend == backend
