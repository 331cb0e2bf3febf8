"""The compiled policy backend: the artifact's own ONNX graph, lowered at load to a short
program over one float32 arena and run by one numba kernel, in place of an onnxruntime session per tick.

The ONNX file stays the artifact and onnxruntime stays the reference: `lower` reads the graph with the `onnx`
package (its initializers are the weights), `PolicyRuntime` checks the program against its ORT session on random
observations at load (policies/runtime.py) and uses it only when they agree; anything `lower` does not know
raises `Unsupported` with a one-line reason and the runtime falls back to onnxruntime.

What `lower` accepts: float32 inputs of fixed shape (batch 1), the nodes the requested output needs, every
node whose inputs are all constants folded at load with onnx's reference evaluator (the exporters' shape
arithmetic: Shape, Gather, Concat, Expand of constants, ...), and on values that depend on the inputs:
  elementwise unary (Identity, Neg, Abs, Sqrt, Exp, Log, Tanh, Sigmoid, Relu, Elu, LeakyRelu, Softplus, Floor,
  Ceil, Sin, Cos, Reciprocal, Not, Cast to float32 / int / bool), binary with numpy broadcasting of a constant
  or a one-element value (Add, Sub, Mul, Div (float), Pow, Max, Min (two inputs), Greater, Less,
  GreaterOrEqual, LessOrEqual, Equal, And, Or), Where, Clip (constant bounds), Gemm / MatMul of a row by a
  constant matrix, ReduceSum / ReduceMean / ReduceSumSquare / ReduceMax / ReduceMin / ReduceL2 over every
  non-unit axis, data movement with constant indices (Reshape, Flatten, Squeeze, Unsqueeze, Expand, Slice,
  Gather, Transpose, Concat), and Gather along axis 0 of a constant table by computed indices (the time_step
  lookups of mjlab / BeyondMimic exports).

Numerics: every node's result is rounded to float32 as onnxruntime's are; each is computed in float64 first
(Gemm's sums included, vectorised: reassociated), so the program differs from onnxruntime by onnxruntime's own float32 rounding and its
fused kernels (~2e-7 of the output's scale on the committed artifacts; ~1e-6 on holosoma's
512-256-128 network, where the program is ten times closer than onnxruntime to the float64 result). NaN propagates as in onnxruntime: Clip, Relu, Max and
Min keep it, comparisons with it are false.

The kernel is compiled from numba's on-disk cache at the first `Program` (never in a tick); `Program.run` writes
into the arena only (no allocation): its inputs are views of the arena (`Program.inputs`), as is its output.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from policies.observation import projected_gravity_scalar
from robots.compiled import njit


_FAST = {"reassoc", "contract"}  # fastmath for the vectorised sums: reassociate and contract; NaN and inf kept


class Unsupported(Exception):
    """The graph is outside what `lower` compiles; str(e) is the one-line reason."""


# program row columns
OP, CODE, OUT, N, A, SA, B, SB, C, SC, P, M, NCOL = range(13)
# ops
UN, BIN, WHERE, CLIP, GEMM, REDUCE, MOVE, GDYN = range(8)
UNARY = {"Identity": 0, "Neg": 1, "Abs": 2, "Sqrt": 3, "Exp": 4, "Log": 5, "Tanh": 6, "Sigmoid": 7, "Relu": 8,
         "Floor": 9, "Ceil": 10, "Sin": 11, "Cos": 12, "Reciprocal": 13, "Softplus": 14, "Elu": 15, "LeakyRelu": 16,
         "Not": 17, "_trunc": 18, "_bool": 19}
BINARY = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Pow": 4, "Max": 5, "Min": 6, "Greater": 7, "Less": 8,
          "GreaterOrEqual": 9, "LessOrEqual": 10, "Equal": 11, "And": 12, "Or": 13}
REDUCE_CODES = {"ReduceSum": 0, "ReduceMean": 1, "ReduceSumSquare": 2, "ReduceMax": 3, "ReduceMin": 4, "ReduceL2": 5}
COMPARE = {"Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Equal", "And", "Or", "Not"}


@njit
def _un(code, x, alpha):
    if code == 0:
        return x
    if code == 1:
        return -x
    if code == 2:
        return abs(x)
    if code == 3:
        return math.sqrt(x) if x >= 0.0 else (x if x != x else math.nan)
    if code == 4:
        return math.exp(x) if x < 709.0 else (math.inf if x == x else x)
    if code == 5:
        if x > 0.0:
            return math.log(x)
        if x == 0.0:
            return -math.inf
        return math.nan
    if code == 6:
        return math.tanh(x)
    if code == 7:
        if x >= 0.0:
            return 1.0 / (1.0 + math.exp(-x))
        if x < 0.0:
            e = math.exp(x)
            return e / (1.0 + e)
        return x
    if code == 8:
        return 0.0 if x < 0.0 else x
    if code == 9:
        return math.floor(x) if x == x and abs(x) != math.inf else x
    if code == 10:
        return math.ceil(x) if x == x and abs(x) != math.inf else x
    if code == 11:
        return math.sin(x) if abs(x) != math.inf else math.nan
    if code == 12:
        return math.cos(x) if abs(x) != math.inf else math.nan
    if code == 13:
        return 1.0 / x if x != 0.0 else math.copysign(math.inf, x)
    if code == 14:
        return x + math.log1p(math.exp(-x)) if x > 0.0 else (math.log1p(math.exp(x)) if x <= 0.0 else x)
    if code == 15:
        return x if x > 0.0 else alpha * (math.exp(x) - 1.0)
    if code == 16:
        return x if x >= 0.0 else alpha * x
    if code == 17:
        return 1.0 if x == 0.0 else 0.0
    if code == 18:
        return float(int(x)) if x == x and abs(x) < 9.0e18 else x
    if code == 19:
        return 0.0 if x == 0.0 else 1.0
    return math.nan


@njit
def _bin(code, x, y):
    if code == 0:
        return x + y
    if code == 1:
        return x - y
    if code == 2:
        return x * y
    if code == 3:
        return x / y if y != 0.0 else (math.nan if x == 0.0 or x != x else math.copysign(math.inf, x) * math.copysign(1.0, y))
    if code == 4:
        if x < 0.0 and y != math.floor(y):
            return math.nan
        if x == 0.0 and y < 0.0:
            return math.inf
        return x ** y
    if code == 5:
        if x != x or y != y:
            return math.nan
        return x if x >= y else y
    if code == 6:
        if x != x or y != y:
            return math.nan
        return x if x <= y else y
    if code == 7:
        return 1.0 if x > y else 0.0
    if code == 8:
        return 1.0 if x < y else 0.0
    if code == 9:
        return 1.0 if x >= y else 0.0
    if code == 10:
        return 1.0 if x <= y else 0.0
    if code == 11:
        return 1.0 if x == y else 0.0
    if code == 12:
        return 1.0 if x != 0.0 and y != 0.0 else 0.0
    if code == 13:
        return 1.0 if x != 0.0 or y != 0.0 else 0.0
    return math.nan


@njit(fastmath=_FAST)
def _gemm(fa, acc, a, w, k, n):
    """acc[j] = sum_k fa[a + k] * W[j, k], W (n, k) row-major at fa[w]; in float64."""
    x = fa[a:a + k]
    for j in range(n):
        wr = fa[w + j * k:w + (j + 1) * k]
        s = 0.0
        for kk in range(k):
            s += np.float64(x[kk]) * np.float64(wr[kk])
        acc[j] = s

@njit
def _arith(fa, code, out, n, a, sa, b, sb):
    """fa[out + i] = fa[a + i sa] (+ - * /)[code] fa[b + i sb] in float32, a loop per case (vectorised)."""
    if sa == 1 and sb == 1:
        if code == 0:
            for i in range(n):
                fa[out + i] = fa[a + i] + fa[b + i]
        elif code == 1:
            for i in range(n):
                fa[out + i] = fa[a + i] - fa[b + i]
        elif code == 2:
            for i in range(n):
                fa[out + i] = fa[a + i] * fa[b + i]
        else:
            for i in range(n):
                fa[out + i] = fa[a + i] / fa[b + i]
    elif sa == 1 and sb == 0:
        y = fa[b]
        if code == 0:
            for i in range(n):
                fa[out + i] = fa[a + i] + y
        elif code == 1:
            for i in range(n):
                fa[out + i] = fa[a + i] - y
        elif code == 2:
            for i in range(n):
                fa[out + i] = fa[a + i] * y
        else:
            for i in range(n):
                fa[out + i] = fa[a + i] / y
    elif sa == 0 and sb == 1:
        x = fa[a]
        if code == 0:
            for i in range(n):
                fa[out + i] = x + fa[b + i]
        elif code == 1:
            for i in range(n):
                fa[out + i] = x - fa[b + i]
        elif code == 2:
            for i in range(n):
                fa[out + i] = x * fa[b + i]
        else:
            for i in range(n):
                fa[out + i] = x / fa[b + i]
    else:
        for i in range(n):
            fa[out + i] = _bin(code, np.float64(fa[a + i * sa]), np.float64(fa[b + i * sb]))


@njit(fastmath=_FAST)
def _sum(fa, a, n, square):
    x = fa[a:a + n]
    s = 0.0
    if square:
        for i in range(n):
            s += np.float64(x[i]) * np.float64(x[i])
    else:
        for i in range(n):
            s += np.float64(x[i])
    return s


@njit
def run_program(prog, fa, ia, acc):
    """Runs the rows of `prog` in order on the arena `fa` (float32); ia: index tables; acc: float64 scratch."""
    for r in range(prog.shape[0]):
        op = prog[r, OP]
        code = prog[r, CODE]
        out = prog[r, OUT]
        n = prog[r, N]
        a, sa = prog[r, A], prog[r, SA]
        b, sb = prog[r, B], prog[r, SB]
        c, sc = prog[r, C], prog[r, SC]
        if op == UN and code == 0:
            for i in range(n):
                fa[out + i] = fa[a + i * sa]
        elif op == UN:
            alpha = np.float64(fa[prog[r, P]])
            for i in range(n):
                fa[out + i] = _un(code, np.float64(fa[a + i * sa]), alpha)
        elif op == BIN and code <= 3:  # + - * /: float32 arithmetic is exact-rounded, as through float64
            _arith(fa, code, out, n, a, sa, b, sb)
        elif op == BIN:
            for i in range(n):
                fa[out + i] = _bin(code, np.float64(fa[a + i * sa]), np.float64(fa[b + i * sb]))
        elif op == WHERE:
            for i in range(n):
                fa[out + i] = fa[b + i * sb] if fa[a + i * sa] != 0.0 else fa[c + i * sc]
        elif op == CLIP:
            lo, hi = fa[b], fa[c]
            for i in range(n):
                x = fa[a + i * sa]
                fa[out + i] = lo if x < lo else (hi if x > hi else x)
        elif op == GEMM:  # out (n) = alpha * W (n, k) @ a (k) [+ beta * bias]
            _gemm(fa, acc, a, b, prog[r, M], n)
            alpha = np.float64(fa[prog[r, P]])
            beta = np.float64(fa[prog[r, P] + 1])
            for j in range(n):
                v = alpha * acc[j]
                if c >= 0:
                    v += beta * np.float64(fa[c + j * sc])
                fa[out + j] = v
        elif op == REDUCE:
            if code == 3 or code == 4:
                s = np.float64(fa[a])
                for i in range(n):
                    x = np.float64(fa[a + i * sa])
                    if x != x or (x > s if code == 3 else x < s):
                        s = x
            else:
                s = _sum(fa, a, n, code == 2 or code == 5)
                if code == 1:
                    s /= n
                elif code == 5:
                    s = math.sqrt(s)
            fa[out] = s
        elif op == MOVE:
            p = prog[r, P]
            for i in range(n):
                fa[out + ia[p + 2 * i]] = fa[a + ia[p + 2 * i + 1]]
        elif op == GDYN:  # n indices at a (stride sa) into a table at b of c rows of m values
            m = prog[r, M]
            for i in range(n):
                x = fa[a + i * sa]
                kk = int(x) if x == x else -c - 1
                if kk < 0:
                    kk += c
                ok = 0 <= kk < c
                for j in range(m):
                    fa[out + i * m + j] = fa[b + kk * m + j] if ok else np.float32(math.nan)
    return 0


@dataclass
class _Value:
    """A value computed in the program: arena offset, shape (numpy's), kind ('f' float, 'i' int, 'b' bool)."""
    off: int
    shape: tuple
    kind: str

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


class Program:
    """A lowered graph: `inputs` (name -> arena view of the input's shape, written by the caller), `output` (a
    flat float32 arena view), `run()` evaluates the graph in place."""

    def __init__(self, rows, consts: list[tuple[int, np.ndarray]], ints: list[int], size: int, acc: int,
                 inputs: dict[str, _Value], output: _Value, n_nodes: int):
        self.prog = np.ascontiguousarray(np.asarray(rows, np.int64).reshape(-1, NCOL))
        self.fa = np.zeros(size, np.float32)
        for off, arr in consts:
            self.fa[off:off + arr.size] = arr.ravel()
        self.ia = np.asarray(ints or [0], np.int64)
        self.acc = np.zeros(max(acc, 1), np.float64)
        self.inputs = {k: self.fa[v.off:v.off + v.size].reshape(v.shape) for k, v in inputs.items()}
        self.output = self.fa[output.off:output.off + output.size]
        self.n_nodes = n_nodes
        run_program(self.prog, self.fa, self.ia, self.acc)  # compiled (or loaded from the cache) here, not in a tick

    def run(self) -> np.ndarray:
        run_program(self.prog, self.fa, self.ia, self.acc)
        return self.output

    def __call__(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        """Convenience (tests, the load check): copy `feed` in, run, a copy of the flat output."""
        for k, v in feed.items():
            self.inputs[k][...] = v
        return self.run().copy()


class _Builder:
    def __init__(self):
        self.size = 1  # arena slot 0: a zero (the unused alpha of most unary rows)
        self.rows: list[list[int]] = []
        self.consts: list[tuple[int, np.ndarray]] = []
        self.ints: list[int] = []
        self.acc = 0
        self._const_cache: dict[tuple, int] = {}

    def alloc(self, n: int) -> int:
        off = self.size
        self.size += int(n)
        return off

    def const(self, arr) -> int:
        a = np.ascontiguousarray(np.asarray(arr, np.float32)).ravel()
        key = (a.size, a.tobytes())
        if key not in self._const_cache:
            off = self.alloc(a.size)
            self.consts.append((off, a))
            self._const_cache[key] = off
        return self._const_cache[key]

    def int_table(self, values) -> int:
        p = len(self.ints)
        self.ints.extend(int(v) for v in values)
        return p

    def row(self, op, code=0, out=0, n=0, a=0, sa=0, b=0, sb=0, c=0, sc=0, p=0, m=0):
        self.rows.append([op, code, out, n, a, sa, b, sb, c, sc, p, m])


def _np_dtype(elem_type: int):
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def _kind(dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return "b"
    if np.issubdtype(dtype, np.integer):
        return "i"
    if dtype == np.float32:
        return "f"
    raise Unsupported(f"{dtype} values are not compiled (float32, integers and bools only)")


def _exact_f32(arr: np.ndarray, what: str) -> np.ndarray:
    """A constant as float32, refused when that changes an integer (float32 holds them exactly to 2**24)."""
    arr = np.asarray(arr)
    if arr.dtype == np.float32:
        return arr
    if arr.dtype == np.bool_ or np.issubdtype(arr.dtype, np.integer):
        f = arr.astype(np.float32)
        if not np.array_equal(f.astype(np.float64), arr.astype(np.float64)):
            raise Unsupported(f"{what}: an integer constant too large for float32")
        return f
    raise Unsupported(f"{what}: a {arr.dtype} constant (float32 graphs only)")


def lower(onnx_bytes: bytes, input_shapes: dict[str, tuple], output: str) -> Program:
    """The program computing `output` of the model from its inputs of the given shapes; Unsupported(reason)."""
    try:
        import onnx
        from onnx import numpy_helper
        from onnx.reference import ReferenceEvaluator
    except ImportError as e:  # pragma: no cover - onnx is in both locks
        raise Unsupported(f"the onnx package is not installed ({e})") from e
    try:
        model = onnx.load_from_string(onnx_bytes)
    except Exception as e:  # noqa: BLE001 - protobuf raises several types
        raise Unsupported(f"onnx cannot parse the file: {e}") from e
    g = model.graph
    opset = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    consts: dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    vals: dict[str, _Value] = {}
    bld = _Builder()
    graph_inputs = [i for i in g.input if i.name not in consts]
    for i in graph_inputs:
        if i.name not in input_shapes:
            raise Unsupported(f"graph input {i.name!r} is not fed by the runtime")
        dt = _np_dtype(i.type.tensor_type.elem_type)
        if dt != np.float32:
            raise Unsupported(f"graph input {i.name!r} is {dt}, not float32")
        shape = tuple(int(s) for s in input_shapes[i.name])
        vals[i.name] = _Value(bld.alloc(int(np.prod(shape))), shape, "f")
    if output not in {o.name for o in g.output}:
        raise Unsupported(f"the graph has no output {output!r}")
    # the nodes the output needs, in the graph's (topological) order
    producer = {o: k for k, node in enumerate(g.node) for o in node.output}
    need, stack = set(), [output]
    while stack:
        name = stack.pop()
        k = producer.get(name)
        if k is None or k in need:
            continue
        need.add(k)
        stack.extend(x for x in g.node[k].input if x)
    n_runtime = 0
    for k, node in enumerate(g.node):
        if k not in need:
            continue
        if node.domain not in ("", "ai.onnx"):
            raise Unsupported(f"node {node.name or node.op_type!r}: operator domain {node.domain!r}")
        if any(a.type == onnx.AttributeProto.GRAPH for a in node.attribute):
            raise Unsupported(f"{node.op_type} with a subgraph is not compiled")
        ins = list(node.input)
        if all((not x) or x in consts for x in ins):  # constant folding
            try:
                res = ReferenceEvaluator(node).run(None, {x: consts[x] for x in ins if x})
            except Exception as e:  # noqa: BLE001
                raise Unsupported(f"{node.op_type} on constants cannot be folded: {e}") from e
            for name, v in zip(node.output, res):
                consts[name] = np.asarray(v)
            continue
        missing = [x for x in ins if x and x not in consts and x not in vals]
        if missing:
            raise Unsupported(f"{node.op_type} reads {missing[0]!r}, which nothing computes")
        _lower_node(node, opset.get("ai.onnx", 1), consts, vals, bld)
        n_runtime += 1
    if output in consts:
        raise Unsupported("the output does not depend on the inputs")
    out = vals[output]
    if out.kind != "f":
        raise Unsupported("the output is not float32")
    return Program(bld.rows, bld.consts, bld.ints, bld.size, bld.acc, {i.name: vals[i.name] for i in graph_inputs}, out, n_runtime)


def _attr(node, name, default=None):
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _operand(bld: _Builder, x, consts, vals, out_shape, what) -> tuple[int, int]:
    """(offset, stride) of an elementwise operand broadcast to out_shape: stride 0 for one element."""
    n = int(np.prod(out_shape, dtype=np.int64))
    if x in consts:
        c = _exact_f32(consts[x], what)
        if c.size == 1:
            return bld.const(c), 0
        return bld.const(np.broadcast_to(c, out_shape)), 1
    v = vals[x]
    if v.size == 1:
        return v.off, 0
    if v.size == n:
        return v.off, 1
    raise Unsupported(f"{what}: broadcasting {v.shape} to {out_shape} is not compiled")


def _shape_of(x, consts, vals):
    return tuple(consts[x].shape) if x in consts else vals[x].shape


def _kind_of(x, consts, vals):
    return _kind(consts[x].dtype) if x in consts else vals[x].kind


def _index_map(node, x_shape, extra_consts) -> np.ndarray:
    """The flat source index of each output element of a data-movement node applied to an input of x_shape."""
    from onnx.reference import ReferenceEvaluator

    idx = np.arange(int(np.prod(x_shape, dtype=np.int64)), dtype=np.int64).reshape(x_shape)
    feeds = {node.input[0]: idx, **{k: v for k, v in extra_consts.items()}}
    try:
        return np.asarray(ReferenceEvaluator(node).run(None, feeds)[0])
    except Exception as e:  # noqa: BLE001
        raise Unsupported(f"{node.op_type}: cannot evaluate its index map: {e}") from e


def _move(bld: _Builder, src: _Value, idx: np.ndarray, kind: str) -> _Value:
    """A value made of src's elements at flat indices idx (an alias when idx is src itself)."""
    flat = idx.ravel()
    if flat.size == src.size and np.array_equal(flat, np.arange(src.size)):
        return _Value(src.off, tuple(idx.shape), kind)
    off = bld.alloc(flat.size)
    if flat.size and np.all(flat == flat[0]):
        bld.row(UN, UNARY["Identity"], off, flat.size, src.off + int(flat[0]), 0)
    elif flat.size > 1 and np.all(np.diff(flat) == flat[1] - flat[0]) and flat[1] > flat[0]:
        bld.row(UN, UNARY["Identity"], off, flat.size, src.off + int(flat[0]), int(flat[1] - flat[0]))
    else:
        pairs = np.stack([np.arange(flat.size), flat], 1).ravel()
        bld.row(MOVE, 0, off, flat.size, src.off, p=bld.int_table(pairs))
    return _Value(off, tuple(idx.shape), kind)


def _lower_node(node, opset: int, consts, vals, bld: _Builder) -> None:
    op, ins, out = node.op_type, list(node.input), node.output[0]
    what = f"{op} {node.name or out!r}"
    rt = [x for x in ins if x and x not in consts]
    if len(node.output) > 1 and any(node.output[1:]) and op not in ("Dropout",):
        raise Unsupported(f"{what}: more than one output")
    if op == "Cast":
        x = vals[ins[0]]
        kind = _kind(_np_dtype(_attr(node, "to")))
        code = UNARY["_trunc"] if (kind == "i" and x.kind == "f") else (UNARY["_bool"] if kind == "b" else None)
        if kind == x.kind or code is None:  # the same numbers in the arena (ints and bools are stored exactly)
            vals[out] = _Value(x.off, x.shape, kind)
            return
        off = bld.alloc(x.size)
        bld.row(UN, code, off, x.size, x.off, 1)
        vals[out] = _Value(off, x.shape, kind)
        return
    if op in UNARY:
        x = vals[ins[0]]
        if op == "Identity":
            vals[out] = x
            return
        if x.kind != "f" and op not in ("Neg", "Abs", "Not"):
            raise Unsupported(f"{what}: on {x.kind} values")
        alpha = 0
        if op in ("Elu", "LeakyRelu"):
            alpha = bld.const([_attr(node, "alpha", 1.0 if op == "Elu" else 0.01)])
        off = bld.alloc(x.size)
        bld.row(UN, UNARY[op], off, x.size, x.off, 1, p=alpha)
        vals[out] = _Value(off, x.shape, "b" if op == "Not" else x.kind)
        return
    if op in BINARY:
        if len(ins) != 2:
            raise Unsupported(f"{what}: {len(ins)} inputs")
        kinds = {_kind_of(x, consts, vals) for x in ins}
        if op == "Div" and kinds != {"f"}:
            raise Unsupported(f"{what}: integer division is not compiled")
        if len(kinds) > 1 and op not in ("And", "Or"):
            raise Unsupported(f"{what}: mixed types {sorted(kinds)}")
        shape = tuple(np.broadcast_shapes(_shape_of(ins[0], consts, vals), _shape_of(ins[1], consts, vals)))
        n = int(np.prod(shape, dtype=np.int64))
        (a, sa), (b, sb) = (_operand(bld, x, consts, vals, shape, what) for x in ins)
        off = bld.alloc(n)
        bld.row(BIN, BINARY[op], off, n, a, sa, b, sb)
        vals[out] = _Value(off, shape, "b" if op in COMPARE else kinds.pop())
        return
    if op == "Where":
        shapes = [_shape_of(x, consts, vals) for x in ins]
        shape = tuple(np.broadcast_shapes(*shapes))
        n = int(np.prod(shape, dtype=np.int64))
        kinds = {_kind_of(x, consts, vals) for x in ins[1:]}
        if len(kinds) > 1:
            raise Unsupported(f"{what}: mixed types {sorted(kinds)}")
        (a, sa), (b, sb), (c, sc) = (_operand(bld, x, consts, vals, shape, what) for x in ins)
        off = bld.alloc(n)
        bld.row(WHERE, 0, off, n, a, sa, b, sb, c, sc)
        vals[out] = _Value(off, shape, kinds.pop())
        return
    if op == "Clip":
        if len(rt) != 1 or ins[0] not in vals:
            raise Unsupported(f"{what}: bounds that depend on the inputs")
        x = vals[ins[0]]
        if opset < 11:
            lo, hi = _attr(node, "min", -np.inf), _attr(node, "max", np.inf)
        else:
            lo = consts[ins[1]] if len(ins) > 1 and ins[1] else -np.inf
            hi = consts[ins[2]] if len(ins) > 2 and ins[2] else np.inf
        lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
        if lo.size != 1 or hi.size != 1:
            raise Unsupported(f"{what}: non-scalar bounds")
        off = bld.alloc(x.size)
        bld.row(CLIP, 0, off, x.size, x.off, 1, bld.const([lo.item()]), 0, bld.const([hi.item()]), 0)
        vals[out] = _Value(off, x.shape, x.kind)
        return
    if op in ("Gemm", "MatMul"):
        if ins[0] not in vals or ins[1] not in consts or any(x in vals for x in ins[2:] if x):
            raise Unsupported(f"{what}: only a computed row times constant weights is compiled")
        x, w = vals[ins[0]], np.asarray(consts[ins[1]])
        if x.kind != "f" or w.dtype != np.float32:
            raise Unsupported(f"{what}: not float32")
        if op == "Gemm":
            if _attr(node, "transA", 0):
                raise Unsupported(f"{what}: transA")
            if _attr(node, "transB", 0):
                w = w.T
            alpha, beta = float(_attr(node, "alpha", 1.0)), float(_attr(node, "beta", 1.0))
            if len(x.shape) != 2 or x.shape[0] != 1:
                raise Unsupported(f"{what}: input shape {x.shape}")
            shape = (1, w.shape[1])
        else:
            alpha, beta = 1.0, 0.0
            if w.ndim != 2 or len(x.shape) < 1 or int(np.prod(x.shape[:-1])) != 1:
                raise Unsupported(f"{what}: shapes {x.shape} x {w.shape}")
            shape = tuple(x.shape[:-1]) + (w.shape[1],)
        if w.ndim != 2 or x.shape[-1] != w.shape[0]:
            raise Unsupported(f"{what}: shapes {x.shape} x {w.shape}")
        k, n = w.shape
        bias, sbias = -1, 0
        if op == "Gemm" and len(ins) > 2 and ins[2] and beta != 0.0:
            cvec = np.asarray(consts[ins[2]], np.float32)
            try:
                np.broadcast_to(cvec, shape)
            except ValueError as e:
                raise Unsupported(f"{what}: bias shape {cvec.shape}") from e
            bias, sbias = (bld.const(cvec), 0) if cvec.size == 1 else (bld.const(np.broadcast_to(cvec, shape)), 1)
        off = bld.alloc(n)
        bld.row(GEMM, 0, off, n, x.off, 1, bld.const(np.ascontiguousarray(w.T)), 0, bias, sbias, bld.const([alpha, beta]), k)
        bld.acc = max(bld.acc, n)
        vals[out] = _Value(off, shape, "f")
        return
    if op in REDUCE_CODES:
        x = vals[ins[0]]
        axes = _attr(node, "axes")
        if len(ins) > 1 and ins[1]:
            if ins[1] not in consts:
                raise Unsupported(f"{what}: axes that depend on the inputs")
            axes = consts[ins[1]].tolist()
        nd = len(x.shape)
        if axes is None or len(axes) == 0:
            if _attr(node, "noop_with_empty_axes", 0):
                vals[out] = x
                return
            axes = list(range(nd))
        axes = sorted({int(a) % nd for a in np.atleast_1d(axes)}) if nd else []
        if any(x.shape[d] != 1 for d in range(nd) if d not in axes):
            raise Unsupported(f"{what}: a partial reduction of {x.shape}")
        keep = bool(_attr(node, "keepdims", 1))
        shape = tuple(1 if d in axes else x.shape[d] for d in range(nd) if keep or d not in axes)
        if x.kind != "f":
            raise Unsupported(f"{what}: on {x.kind} values")
        off = bld.alloc(1)
        bld.row(REDUCE, REDUCE_CODES[op], off, x.size, x.off, 1)
        vals[out] = _Value(off, shape, "f")
        return
    if op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand", "Slice", "Transpose", "Gather") \
            and ins[0] in vals and all(x in consts for x in ins[1:] if x):
        x = vals[ins[0]]
        idx = _index_map(node, x.shape, {k: consts[k] for k in ins[1:] if k})
        vals[out] = _move(bld, x, idx, x.kind)
        return
    if op == "Gather" and ins[0] in consts and ins[1] in vals:
        axis = int(_attr(node, "axis", 0))
        table, ix = np.asarray(consts[ins[0]]), vals[ins[1]]
        if axis % max(table.ndim, 1) != 0 or table.ndim < 1:
            raise Unsupported(f"{what}: a computed index along axis {axis}")
        m = int(np.prod(table.shape[1:], dtype=np.int64))
        off = bld.alloc(ix.size * m)
        bld.row(GDYN, 0, off, ix.size, ix.off, 1, bld.const(_exact_f32(table, what)), 0, table.shape[0], 0, 0, m)
        vals[out] = _Value(off, tuple(ix.shape) + tuple(table.shape[1:]), _kind(table.dtype))
        return
    if op == "Concat":
        axis = int(_attr(node, "axis"))
        parts, kinds = [], set()
        for j, x in enumerate(ins):
            if x in consts:
                c = _exact_f32(consts[x], what)
                v = _Value(bld.const(c), tuple(c.shape), _kind(consts[x].dtype))
            else:
                v = vals[x]
            kinds.add(v.kind)
            parts.append(v)
        if len(kinds) > 1:
            raise Unsupported(f"{what}: mixed types {sorted(kinds)}")
        big = 1 << 32
        coded = [j * big + np.arange(v.size, dtype=np.int64).reshape(v.shape) for j, v in enumerate(parts)]
        joined = np.concatenate(coded, axis=axis)
        flat = joined.ravel()
        off = bld.alloc(flat.size)
        for j, v in enumerate(parts):
            pos = np.nonzero(flat // big == j)[0]
            src = flat[pos] % big
            if pos.size:
                if np.array_equal(src, np.arange(v.size)) and np.array_equal(pos, pos[0] + np.arange(pos.size)):
                    bld.row(UN, 0, off + int(pos[0]), pos.size, v.off, 1)
                else:
                    bld.row(MOVE, 0, off, pos.size, v.off, p=bld.int_table(np.stack([pos, src], 1).ravel()))
        vals[out] = _Value(off, tuple(joined.shape), kinds.pop())
        return
    if op == "Shape":
        x = vals[ins[0]]
        s = np.asarray(x.shape, np.int64)
        start, end = _attr(node, "start", 0), _attr(node, "end", None)
        consts[out] = s[start:end]
        return
    if op == "Size":
        consts[out] = np.asarray(vals[ins[0]].size, np.int64)
        return
    if op == "Dropout":
        vals[out] = vals[ins[0]]
        return
    raise Unsupported(f"operator {op} is not compiled")


def max_rel_diff(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max(1, max |want|): the difference relative to the output's scale (float32 sums
    carry errors proportional to it, not to each element); inf where one is finite and the other not, or
    they are non-finite differently (nan vs inf, inf vs -inf)."""
    got, want = np.asarray(got, np.float64).ravel(), np.asarray(want, np.float64).ravel()
    if got.shape != want.shape:
        return math.inf
    fin = np.isfinite(want) & np.isfinite(got)
    same_nonfinite = ~np.isfinite(want) & ((np.isnan(want) & np.isnan(got)) | (want == got))
    if not np.all(fin | same_nonfinite):
        return math.inf
    if not fin.any():
        return 0.0
    return float(np.max(np.abs(got[fin] - want[fin])) / max(1.0, float(np.max(np.abs(want[fin])))))


# ---------------------------------------------------------------------- a native policy tick in one call
# PolicyRuntime's native motion tick (policies.observation.ObservationBuffer's layout, compiled backend):
# observation, network and joint target in one kernel call. f64 (float64, owned by the runtime):
#   [stage: gyro (3), quat (4), q (29), dq (29), last_action (29), base_lin_vel (3), base_height (1),
#    projected gravity (3, written here)], then offset (n_state), scale (n_state), default_q (29), and the
#   outputs action (29), target (29); meta (int64): the offsets below, then src (n_state): the stage index of
#   each state element of the observation.
ST_GYRO, ST_QUAT, ST_Q, ST_DQ, ST_LAST, ST_V, ST_H, ST_PG, ST_N = 0, 3, 7, 36, 65, 94, 97, 98, 101
STAGE_FIELDS = {"gyro": ST_GYRO, "quat": ST_PG, "q": ST_Q, "dq": ST_DQ, "last_action": ST_LAST,
                "base_lin_vel": ST_V, "base_height": ST_H}
MT_NSTATE, MT_OFFSET, MT_SCALE, MT_DEFAULT, MT_ACTION, MT_TARGET, MT_OBS, MT_OUT, MT_NACT, MT_SRC = range(10)
# the Python tick's scalar projected gravity, compiled (the same source, so the same IEEE operations)
projected_gravity = njit(projected_gravity_scalar)


@njit
def native_tick(f64, meta, table, step, action_scale, prog, fa, ia, acc):
    """ObservationBuffer.fill (the same IEEE operations: projected_gravity_scalar, (v - offset) * scale in
    float64 rounded to float32, the step row of `table`), run_program, then target = default_q +
    action_scale * action (policies.action). Returns 0."""
    f64[ST_PG], f64[ST_PG + 1], f64[ST_PG + 2] = projected_gravity(
        f64[ST_QUAT], f64[ST_QUAT + 1], f64[ST_QUAT + 2], f64[ST_QUAT + 3])
    n_state, off, sc, obs = meta[MT_NSTATE], meta[MT_OFFSET], meta[MT_SCALE], meta[MT_OBS]
    for j in range(n_state):
        v = f64[meta[MT_SRC + j]] - f64[off + j]
        fa[obs + j] = v * f64[sc + j]
    row = table[step]
    for j in range(row.shape[0]):
        fa[obs + n_state + j] = row[j]
    run_program(prog, fa, ia, acc)
    out, n_act = meta[MT_OUT], meta[MT_NACT]
    a, t, d = meta[MT_ACTION], meta[MT_TARGET], meta[MT_DEFAULT]
    for i in range(n_act):
        v = np.float64(fa[out + i])
        f64[a + i] = v
        f64[t + i] = f64[d + i] + action_scale * v
    return 0


class NativeTick:
    """native_tick's buffers for one runtime: `stage` (write the state in, in ST_* order), `run(step)`,
    then `action` and `target` (views, overwritten by the next run)."""

    def __init__(self, prog: Program, obs_buf, input_name: str, default_q: np.ndarray, action_scale: float):
        n_state = obs_buf.n_state
        src = []
        for s, field in zip([s for s in obs_buf.specs if s.name not in _step_terms()], obs_buf._fields):
            src += [STAGE_FIELDS[field] + i for i in range(s.size)]
        if len(src) != n_state or prog.output.size != default_q.size:
            raise Unsupported("the observation layout is not the native one")
        n_act = prog.output.size
        o_off = ST_N
        o_sc = o_off + n_state
        o_def = o_sc + n_state
        o_act = o_def + n_act
        o_tgt = o_act + n_act
        self.f64 = np.zeros(o_tgt + n_act)
        self.f64[o_off:o_sc], self.f64[o_sc:o_def] = obs_buf._offset, obs_buf._scale
        self.f64[o_def:o_act] = default_q
        x = prog.inputs[input_name]
        obs_off = int((x.ctypes.data - prog.fa.ctypes.data) // prog.fa.itemsize)
        out_off = int((prog.output.ctypes.data - prog.fa.ctypes.data) // prog.fa.itemsize)
        self.meta = np.asarray([n_state, o_off, o_sc, o_def, o_act, o_tgt, obs_off, out_off, n_act] + src, np.int64)
        self.table = np.ascontiguousarray(obs_buf._table, np.float32)
        if self.table.shape[1] + n_state != x.size:
            raise Unsupported("the observation size does not match the network's input")
        self.n_steps = obs_buf.n_steps
        self.stage = self.f64[:ST_N - 3]  # what the caller writes (projected gravity is computed)
        self.action = self.f64[o_act:o_tgt]
        self.target = self.f64[o_tgt:o_tgt + n_act]
        self.obs = x.reshape(-1)
        self.action_scale = float(action_scale)
        self.prog = prog
        native_tick(self.f64, self.meta, self.table, 0, self.action_scale, prog.prog, prog.fa, prog.ia, prog.acc)

    def run(self, step: int) -> None:
        p = self.prog
        native_tick(self.f64, self.meta, self.table, step, self.action_scale, p.prog, p.fa, p.ia, p.acc)


def _step_terms():
    from policies.observation import STEP_TERMS

    return STEP_TERMS
