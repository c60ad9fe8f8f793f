"""Frontend: a Relax partition function (merged Tensil composites) -> ``compiler.Graph``.

Relax tensors are NCHW (4-D), (batch, features) (2-D) or a sequence's (batch, steps, features)
(3-D); the graph's feature maps are (n, h, w, c), a 2-D tensor (B, K) becoming one row of B
pixels: (1, 1, B, K), and a 3-D (B, S, K) B rows of S pixels: (1, B, S, K). A dense layer then
runs as a single pointwise convolution over them.

Constants are listed in the order TVM's ``RunCodegen`` delivers them to the runtime module
(post-order over the function body), so constant indices in the graph match the arrays the
module receives in ``__init_``.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir.prim.expr import IntImm

from ..compiler.graph import Graph, Node, Tensor
from .broadcast import LAYOUTS, channel_axis


class FrontendError(ValueError):
    """A partition contains something the compiler cannot take (a pattern check missed it)."""


def shape_of(expr) -> tuple[int, ...]:
    ty = expr.ty if hasattr(expr, "ty") else None
    if ty is None or not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
        raise FrontendError(f"expression has no static tensor shape: {type(expr).__name__}")
    if not all(isinstance(v, IntImm) for v in ty.shape.values):
        raise FrontendError(f"symbolic shape {list(ty.shape.values)} (the TCU needs static shapes)")
    return tuple(int(v) for v in ty.shape.values)


def picks_pixels(call: relax.Call) -> bool:
    """Whether an op of ``GATHERS`` is one of pixels (``spatial_gather``): a take, a flip, a slice of
    H and W alone (a crop), a reflect or edge pad."""
    if call.op.name == "relax.nn.pad":
        return str(call.attrs.pad_mode) in ("reflect", "edge")
    if call.op.name == "relax.strided_slice":
        axes = [int(v) % 4 for v in call.args[1].fields]
        return bool(axes) and set(axes) <= {2, 3} and len(shape_of(call.args[0])) == 4
    return call.op.name in GATHERS


def channel_slice(call: relax.Call) -> tuple[int, int]:
    """``(begin, end)`` of a ``strided_slice`` that keeps channels ``begin..end-1`` of an NCHW
    tensor and everything else; FrontendError naming what else it does."""
    shape = shape_of(call.args[0])
    axes, begin, end = ([int(v) for v in arg.fields] for arg in call.args[1:4])
    strides = (
        [int(v) for v in call.args[4].fields] if len(call.args) > 4 and call.args[4] is not None else [1] * len(axes)
    )
    if len(shape) != 4:
        raise FrontendError(f"slice of a rank-{len(shape)} tensor (only NCHW channels)")
    kept = {1: (0, shape[1])}
    for axis, b, e, st in zip(axes, begin, end, strides):
        axis %= 4
        if st != 1:
            raise FrontendError(f"slice with step {st} (only step 1)")
        size = shape[axis]
        b, e = (min(max(v + size if v < 0 else v, 0), size) for v in (b, e))
        if axis != 1 and (b, e) != (0, size):
            raise FrontendError(f"slice of axis {axis} (only the channel axis)")
        kept[axis] = (b, e)
    lo, hi = kept[1]
    if hi <= lo:
        raise FrontendError("empty slice")
    return lo, hi


# Ops that only pick pixels of an NCHW map: the same rows and columns in every channel (``gather``).
GATHERS = ("relax.take", "relax.flip", "relax.strided_slice", "relax.nn.pad")


def spatial_gather(call: relax.Call) -> tuple[list[int], list[int]]:
    """The source row of every output row and the source column of every output column of an op
    that only picks pixels of an NCHW map: a ``take`` of constant indices along H or W, a ``flip``
    of H or W, a ``strided_slice`` of H and W (a crop, any step), a reflect or edge ``pad``
    (torch's reflect and replicate modes, after the index arithmetic is folded). FrontendError
    naming what else it does."""
    shape = shape_of(call.args[0])
    if len(shape) != 4:
        raise FrontendError(f"{call.op.name} of a rank-{len(shape)} tensor (pixels of NCHW maps only)")
    picks = {2: np.arange(shape[2]), 3: np.arange(shape[3])}
    name, a = call.op.name, call.attrs
    if name == "relax.take":
        axis, index = int(a.axis) % 4, call.args[1]
        if axis not in picks or not _is_const(index) or index.value.numpy().ndim != 1:
            raise FrontendError("take of other than constant indices along H or W")
        rows = index.value.numpy().astype(np.int64)
        mode = str(a.mode)
        rows = rows % shape[axis] if mode == "wrap" else np.clip(rows, 0, shape[axis] - 1) if mode == "clip" else rows
        if rows.size and (rows.min() < 0 or rows.max() >= shape[axis]):
            raise FrontendError("take of indices outside the axis")
        picks[axis] = rows
    elif name == "relax.flip":
        axis = int(a.axis) % 4
        if axis not in picks:
            raise FrontendError(f"flip of axis {axis} (H or W only)")
        picks[axis] = picks[axis][::-1]
    elif name == "relax.strided_slice":
        axes, begin, end = ([int(v) for v in arg.fields] for arg in call.args[1:4])
        given = len(call.args) > 4 and call.args[4] is not None
        steps = [int(v) for v in call.args[4].fields] if given else [1] * len(axes)
        for axis, b, e, step in zip(axes, begin, end, steps):
            if axis % 4 not in picks:
                raise FrontendError(f"slice of axis {axis % 4} with H or W")
            picks[axis % 4] = picks[axis % 4][b:e:step]
    elif name == "relax.nn.pad":
        width, mode = [int(v) for v in a.pad_width], str(a.pad_mode)
        if mode not in ("reflect", "edge") or any(width[:4]) or min(width) < 0:
            raise FrontendError(f"{mode} padding of other than H and W")
        for axis in (2, 3):
            picks[axis] = np.pad(picks[axis], (width[2 * axis], width[2 * axis + 1]), mode=mode)
    else:
        raise FrontendError(f"{name} is not a gather of pixels")
    if not (picks[2].size and picks[3].size):
        raise FrontendError("an empty map")
    return picks[2].tolist(), picks[3].tolist()


def dtype_of(expr) -> str:
    return str(expr.ty.dtype)


def to_internal(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """Relax NCHW, (B, K) or (B, S, K) -> the graph's (n, h, w, c)."""
    if len(shape) == 4:
        n, c, h, w = shape
        return (n, h, w, c)
    if len(shape) in (2, 3):
        return (1,) * (4 - len(shape)) + tuple(shape)
    raise FrontendError(f"tensors of rank {len(shape)} are not supported (shape {shape})")


def collect_constants(func: relax.Function) -> list:
    """Constants in post-order over the body, each once (the order RunCodegen names them)."""
    found: list = []

    def visit(e):
        if isinstance(e, tvm.ir.GenericConst) and not any(e.same_as(c) for c in found):
            found.append(e)

    relax.analysis.post_order_visit(func.body, visit)
    return found


class _Builder:
    def __init__(self, func: relax.Function):
        self.func = func
        self.const_exprs = collect_constants(func)
        self.constants = [c.value.numpy().astype(np.float32) for c in self.const_exprs]
        self.tensors: dict[str, Tensor] = {}
        self.nodes: list[Node] = []
        self.views: dict[str, tuple[str, str]] = {}
        self.relax_shapes: dict[str, tuple[int, ...]] = {}
        self.count = 0

    def const_index(self, expr) -> int:
        for i, c in enumerate(self.const_exprs):
            if c.same_as(expr):
                return i
        raise FrontendError("constant not found in the partition")

    def new_tensor(self, relax_shape: tuple[int, ...]) -> str:
        name = f"t{self.count}"
        self.count += 1
        self.tensors[name] = Tensor(name, to_internal(relax_shape))
        self.relax_shapes[name] = relax_shape
        return name


class _Scope:
    """Relax variables -> tensor names, one scope per function body.

    A composite function that the partitioner reuses for several calls is inlined once per
    call, each time in a fresh scope: its parameters and locals are the same Relax objects
    every time, so a single flat table would hand every later call the first call's tensors.
    Relax objects hash by identity.
    """

    def __init__(self, parent: "_Scope | None" = None):
        self.parent = parent
        self.names: dict = {}

    def bind(self, var, name: str) -> None:
        self.names[var] = name

    def lookup(self, var) -> str:
        scope = self
        while scope is not None:
            if var in scope.names:
                return scope.names[var]
            scope = scope.parent
        raise FrontendError(f"unbound variable {getattr(var, 'name', var)}")


def relax_to_graph(func: relax.Function) -> tuple[Graph, dict[str, tuple[int, ...]]]:
    """Convert a merged Tensil partition. Returns the graph and each graph I/O tensor's Relax shape."""
    b = _Builder(func)
    scope = _Scope()
    inputs = []
    for p in func.params:
        name = b.new_tensor(shape_of(p))
        scope.bind(p, name)
        inputs.append(name)
    result = _walk(b, func.body, scope)
    outputs = list(result) if isinstance(result, tuple) else [result]
    graph = Graph(b.tensors, b.nodes, inputs, outputs, b.constants, b.views)
    io_shapes = {t: b.relax_shapes[t] for t in inputs + outputs}
    return graph, io_shapes


def _walk(b: _Builder, body, scope: _Scope) -> str:
    """Walk a SeqExpr; composite calls are inlined, each in its own scope. Returns the tensor
    name of the result (a tuple of names for a tuple result)."""
    for block in body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Function):
                scope.bind(binding.var, value)
                continue
            if isinstance(value, relax.Var):  # an alias
                scope.bind(binding.var, scope.lookup(value))
                continue
            if isinstance(value, relax.Tuple):  # a composite's tuple result, unpacked below
                scope.bind(binding.var, tuple(_operand(scope, f) for f in value.fields))
                continue
            if isinstance(value, relax.TupleGetItem):
                tup = scope.lookup(value.tuple_value)
                if not isinstance(tup, tuple):
                    raise FrontendError("tuple item of a non-tuple")
                scope.bind(binding.var, tup[int(value.index)])
                continue
            if not isinstance(value, relax.Call):
                raise FrontendError(f"unsupported binding {type(value).__name__}")
            if isinstance(value.op, relax.Var):
                callee = scope.lookup(value.op)
                if not isinstance(callee, relax.Function):
                    raise FrontendError(f"call of a non-function {value.op.name}")
                inner = _Scope(scope)
                for param, arg in zip(callee.params, value.args):
                    inner.bind(param, _operand(scope, arg))
                scope.bind(binding.var, _walk(b, callee.body, inner))
                continue
            scope.bind(binding.var, _convert_call(b, scope, value, shape_of(binding.var)))
    result = body.body
    if isinstance(result, relax.Tuple):  # a partition with several outputs
        return tuple(_operand(scope, f) for f in result.fields)
    return scope.lookup(result)


def _operand(scope: _Scope, arg) -> str:
    if isinstance(arg, relax.Var):
        name = scope.lookup(arg)
        if isinstance(name, str):
            return name
    raise FrontendError(f"unsupported operand {type(arg).__name__}")


def _run_resize(call: relax.Call, probe: np.ndarray, out_shape) -> np.ndarray:
    """Run the same resize2d on the CPU on ``probe`` (n, c, h, w)."""
    a = call.attrs
    x = relax.Var("x", ty=relax.TensorType(shape=probe.shape, dtype="float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        y = bb.emit(
            relax.op.image.resize2d(
                x,
                tuple(int(v) for v in out_shape[2:]),
                roi=tuple(float(v) for v in a.roi),
                layout="NCHW",
                method=str(a.method),
                coordinate_transformation_mode=str(a.coordinate_transformation_mode),
                rounding_method=str(a.rounding_method),
                cubic_alpha=float(a.cubic_alpha),
                cubic_exclude=int(a.cubic_exclude),
                extrapolation_value=float(a.extrapolation_value),
            )
        )
        bb.emit_func_output(y)
    vm = relax.VirtualMachine(tvm.compile(bb.get(), target="llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(probe.astype(np.float32))).numpy()


def probe_nearest(call: relax.Call, in_shape, out_shape) -> tuple[list[int], list[int]]:
    """Source row and column of every output pixel of a nearest-neighbour resize, found by
    running the op (on the CPU, once) on an image whose pixels hold their own index."""
    _, _, h, w = in_shape
    ids = np.arange(h * w, dtype=np.float32).reshape(1, 1, h, w)
    src = _run_resize(call, ids, out_shape)[0, 0].astype(np.int64)
    rows, cols = src[:, 0] // w, src[0, :] % w
    if not np.array_equal(src, rows[:, None] * w + cols[None, :]):
        raise FrontendError("nearest resize is not separable")
    return rows.tolist(), cols.tolist()


def probe_linear(call: relax.Call, in_shape, out_shape) -> tuple[list, list]:
    """The interpolation matrices (out rows x in rows, out cols x in cols) of a separable
    resize, found by running the op on one-hot rows and one-hot columns; checked on a
    random image."""
    _, _, h, w = in_shape
    oh, ow = out_shape[2:]
    rows_probe = np.zeros((1, h, h, w), np.float32)
    rows_probe[0, np.arange(h), np.arange(h), :] = 1.0
    cols_probe = np.zeros((1, w, h, w), np.float32)
    cols_probe[0, np.arange(w), :, np.arange(w)] = 1.0
    mh = _run_resize(call, rows_probe, (1, h, oh, ow))[0, :, :, 0].T  # (oh, h)
    mw = _run_resize(call, cols_probe, (1, w, oh, ow))[0, :, 0, :].T  # (ow, w)
    x = np.random.default_rng(0).standard_normal((1, 1, h, w)).astype(np.float32)
    if not np.allclose(_run_resize(call, x, out_shape)[0, 0], mh @ x[0, 0] @ mw.T, atol=1e-5):
        raise FrontendError("resize is not separable")
    return mh.tolist(), mw.tolist()


def prelu_slopes(call: relax.Call) -> np.ndarray | None:
    """A PReLU's slope per channel (a scalar slope repeated), or None when they are not per channel."""
    x, alpha = call.args
    if not _is_const(alpha):
        return None
    shape, a = shape_of(x), alpha.value.numpy().reshape(-1)
    if len(shape) not in LAYOUTS:
        return None
    axis = channel_axis(len(shape))
    if a.size == 1:
        return np.repeat(a, shape[axis])
    return a if int(call.attrs.axis) % len(shape) == axis and a.size == shape[axis] else None


# Relax ops computed by the compiler's smooth functions, and the function each is.
SMOOTH_OPS = {
    "relax.sigmoid": "sigmoid",
    "relax.tanh": "tanh",
    "relax.nn.silu": "silu",
    "relax.nn.gelu": "gelu",
    "relax.nn.softplus": "softplus",
}


def softplus_reason(call: relax.Call) -> str | None:
    """Why a ``relax.nn.softplus`` is not the compiler's softplus (None: it is)."""
    beta, threshold = float(call.attrs.beta), float(call.attrs.threshold)
    if beta != 1.0:
        return f"softplus with beta {beta:g} (the TCU's has beta 1)"
    # Beyond its threshold the model's is x, off from softplus by log(1 + exp(-threshold)).
    if threshold < 8.0:
        return f"softplus with threshold {threshold:g}, whose result beyond it is not softplus's (8 or more is)"
    return None


def _is_const(e) -> bool:
    return isinstance(e, tvm.ir.GenericConst)


def _convert_call(b: _Builder, scope: _Scope, call: relax.Call, out_shape: tuple[int, ...]) -> str:
    op = call.op.name
    a = call.attrs
    out = b.new_tensor(out_shape)

    def node(kind, inputs, **attrs):
        b.nodes.append(Node(kind, inputs, out, attrs, source_ops=[op]))
        return out

    if op == "relax.nn.conv2d":
        return node(
            "conv2d",
            [_operand(scope, call.args[0])],
            weight=b.const_index(call.args[1]),
            bias=None,
            strides=tuple(int(s) for s in a.strides),
            dilation=tuple(int(d) for d in a.dilation),
            padding=tuple(int(p) for p in a.padding),
            groups=int(a.groups),
        )
    if op == "relax.nn.conv2d_transpose":
        return node(
            "conv2d",
            [_operand(scope, call.args[0])],
            weight=b.const_index(call.args[1]),
            strides=tuple(int(s) for s in a.strides),
            padding=tuple(int(p) for p in a.padding),
            transposed=True,
        )
    if op == "relax.matmul":
        w = b.const_index(call.args[1])
        # A (K, M) matmul weight is a 1x1 conv weight (M, K, 1, 1); the packer transposes.
        b.nodes.append(
            Node(
                "conv2d",
                [_operand(scope, call.args[0])],
                out,
                dict(weight=w, bias=None, groups=1, layout="KM"),
                source_ops=[op],
            )
        )
        return out
    if op == "relax.add":
        lhs, rhs = call.args
        if _is_const(rhs) or _is_const(lhs):
            x, c = (lhs, rhs) if _is_const(rhs) else (rhs, lhs)
            return node("bias_add", [_operand(scope, x)], weight=None, bias=b.const_index(c), groups=1)
        return node("add", [_operand(scope, lhs), _operand(scope, rhs)])
    if op == "relax.nn.relu":
        return node("relu", [_operand(scope, call.args[0])])
    if op == "relax.abs":
        return node("abs", [_operand(scope, call.args[0])])
    if op == "relax.nn.leakyrelu":
        return node("leaky_relu", [_operand(scope, call.args[0])], alpha=float(a.alpha))
    if op == "relax.nn.prelu":
        return node("prelu", [_operand(scope, call.args[0])], alpha=tuple(float(v) for v in prelu_slopes(call)))
    if op in SMOOTH_OPS:  # cubic pieces in the SIMD unit (compiler/smooth.py)
        return node(SMOOTH_OPS[op], [_operand(scope, call.args[0])], function=SMOOTH_OPS[op])
    if op == "relax.rsqrt":  # rsqrt(x + eps), the pattern's whole: cubic pieces (compiler/rsqrt.py)
        src, eps = _operand(scope, call.args[0]), 0.0
        last = b.nodes[-1] if b.nodes else None
        if last is not None and last.output == src and last.op == "bias_add":  # x + eps: eps into the rsqrt
            b.nodes.pop()
            del b.tensors[src], b.relax_shapes[src]
            src, eps = last.inputs[0], float(b.constants[last.attrs.bias].reshape(-1)[0])
        return node("rsqrt", [src], eps=eps)
    if op == "relax.exp":  # cubic pieces in the SIMD unit (compiler/exp.py)
        return node("exp", [_operand(scope, call.args[0])])
    if op == "relax.clip":
        return node("clip", [_operand(scope, call.args[0])], lo=float(call.args[1].value), hi=float(call.args[2].value))
    if op == "relax.image.resize2d":
        if str(a.method) == "nearest_neighbor":
            rows, cols = probe_nearest(call, shape_of(call.args[0]), out_shape)
            return node("resize_nearest", [_operand(scope, call.args[0])], rows=rows, cols=cols)
        mh, mw = probe_linear(call, shape_of(call.args[0]), out_shape)
        return node("resize_linear", [_operand(scope, call.args[0])], rows=mh, cols=mw)
    if op in GATHERS and picks_pixels(call):
        rows, cols = spatial_gather(call)
        return node("gather", [_operand(scope, call.args[0])], rows=rows, cols=cols)
    if op == "relax.nn.pad":
        w = [int(v) for v in a.pad_width]
        return node("pad", [_operand(scope, call.args[0])], padding=(w[4], w[6], w[5], w[7]), value=float(a.pad_value))
    if op == "relax.concat":
        fields = call.args[0].fields if isinstance(call.args[0], relax.Tuple) else None
        if fields is None:
            raise FrontendError("concat of a non-tuple")
        return node("concat", [_operand(scope, t) for t in fields])
    if op == "relax.strided_slice":
        lo, hi = channel_slice(call)
        return node("slice", [_operand(scope, call.args[0])], begin=lo, end=hi)
    if op in ("relax.subtract", "relax.multiply") or (
        op in ("relax.maximum", "relax.minimum") and not _is_const(call.args[1])
    ):
        kind = {"relax.subtract": "sub", "relax.multiply": "mul", "relax.maximum": "max", "relax.minimum": "min"}[op]
        return node(kind, [_operand(scope, call.args[0]), _operand(scope, call.args[1])])
    if op in ("relax.maximum", "relax.minimum"):
        bound = float(call.args[1].value.numpy().reshape(()))
        lo, hi = (bound, float("inf")) if op == "relax.maximum" else (float("-inf"), bound)
        return node("clip", [_operand(scope, call.args[0])], lo=lo, hi=hi)
    if op in ("relax.nn.max_pool2d", "relax.nn.avg_pool2d"):
        kind = "max_pool2d" if "max" in op else "avg_pool2d"
        kernel, strides = tuple(int(k) for k in a.pool_size), tuple(int(s) for s in a.strides)
        dilation, padding = tuple(int(d) for d in a.dilation), [int(p) for p in a.padding]
        if a.ceil_mode:  # the last windows hang over the bottom and right: padding there (max pools only)
            in_shape = b.relax_shapes[_operand(scope, call.args[0])]
            for axis in (0, 1):
                reach = (out_shape[2 + axis] - 1) * strides[axis] + (kernel[axis] - 1) * dilation[axis] + 1
                padding[2 + axis] += max(0, reach - (in_shape[2 + axis] + padding[axis] + padding[2 + axis]))
        return node(kind, [_operand(scope, call.args[0])], kernel=kernel, strides=strides, dilation=dilation,
                    padding=tuple(padding), count_include_pad=bool(a.count_include_pad))  # fmt: skip
    if op in ("relax.nn.adaptive_avg_pool2d", "relax.mean"):
        if len(out_shape) == 4:
            return node("global_avg_pool", [_operand(scope, call.args[0])])
        # A mean without keepdims, (n, c): the pool's (n, c, 1, 1) under the dense layers' shape.
        pooled = b.new_tensor(tuple(out_shape) + (1, 1))
        b.nodes.append(Node("global_avg_pool", [_operand(scope, call.args[0])], pooled, {}, source_ops=[op]))
        b.views[out] = (pooled, "reshape")
        return out
    if op in ("relax.reshape", "relax.flatten"):
        src = _operand(scope, call.args[0])
        src_shape = b.relax_shapes[src]
        if len(src_shape) == 4 and src_shape[2:] != (1, 1) and src_shape != out_shape:
            # An NCHW flatten feeding a dense layer: a view of the same storage.
            b.views[out] = (src, "flatten")
            return out
        # Layout-preserving ((n, c, 1, 1) <-> (n, c)): the same storage under another shape.
        b.views[out] = (src, "reshape")
        return out
    raise FrontendError(f"no conversion for {op}")
