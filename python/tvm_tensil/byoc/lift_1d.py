"""One-dimensional layers as two-dimensional ones: an NCW map is an NCHW map of height 1.

Keyword spotting, audio and sensor models convolve along time: ``conv1d``, ``max_pool1d``,
``batch_norm`` over (N, C, W) tensors. The TCU's patterns take NCHW maps, and a rank-3 tensor on
the TCU path is a sequence's (B, S, K), channels last, so without this pass every layer of such a
model stays on the CPU. Here each (N, C, W) tensor such a layer produces gets a twin of shape
(N, C, 1, W), computed by the two-dimensional op (a 1 x k kernel, pool or window), and the ops after
it take the twin as long as they can: element-wise ops (a constant gains an axis of 1 where the
twin has it), batch norms over the channels, reductions over W, concats and reshapes. Where an op
needs the (N, C, W) tensor itself it gets a ``squeeze`` of the twin. An axis of one added in the
same place to every operand changes no value, so the model computes what it did; the later passes
then fold batch norms and biases into the convs as they do for any NCHW model. Only what 1-d layers
make gets a twin: a 2-d model's map one row high squeezed to a sequence (a text recogniser's) is
left as it is.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir.prim.expr import IntImm
from tvm.relax.expr_functor import PyExprMutator, mutator

from .frontend import shape_of

# Ops of one tensor operand (and attributes or scalar operands) that act element by element.
_ELEMENTWISE = {
    "relax.nn.relu", "relax.nn.relu6", "relax.sigmoid", "relax.tanh", "relax.clip", "relax.nn.leakyrelu",
    "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.silu", "relax.nn.softplus", "relax.exp", "relax.negative",
    "relax.erf", "relax.abs", "relax.sqrt", "relax.square", "relax.log", "relax.round", "relax.floor", "relax.ceil",
}  # fmt: skip
# Element-wise ops of several tensors (numpy broadcasting).
_BROADCASTING = {
    "relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum", "relax.power",
    "relax.greater", "relax.greater_equal", "relax.less", "relax.less_equal", "relax.equal", "relax.not_equal",
    "relax.where",
}  # fmt: skip
_REDUCTIONS = {
    "relax.mean": relax.op.mean,
    "relax.sum": relax.op.sum,
    "relax.max": relax.op.max,
    "relax.min": relax.op.min,
}
_POOLS = {"relax.nn.max_pool1d": relax.op.nn.max_pool2d, "relax.nn.avg_pool1d": relax.op.nn.avg_pool2d}


def _rank(expr) -> int | None:
    try:
        return len(shape_of(expr))
    except Exception:  # noqa: BLE001 - not a tensor of known shape: not lifted
        return None


def _width_axes(axis, rank: int) -> list[int] | None:
    return None if axis is None else sorted(int(a) % rank for a in axis)


@mutator
class _Lift(PyExprMutator):
    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.twin: dict[relax.Var, relax.Var] = {}  # an (N, C, W) var -> its (N, C, 1, W) twin
        # A tuple of them (a batch norm's result, a split's) -> its twin's, and which fields are twins.
        self.twin_tuple: dict[relax.Var, tuple[relax.Var, range]] = {}
        self.from_twins: set[relax.Var] = set()  # (N, C, 1, W) results of ops on twins

    # -- operands ---------------------------------------------------------------------------------
    def _lifted(self, expr):
        """``expr`` with an axis of one before its last (an (N, C, W) tensor's twin), or None."""
        if isinstance(expr, relax.Var) and expr in self.twin:
            return self.twin[expr]
        if isinstance(expr, tvm.ir.GenericConst):
            value = expr.value.numpy()
            if value.ndim == 0:
                return expr
            if value.ndim > 3:
                return None
            value = value.reshape((1,) * (3 - value.ndim) + value.shape)
            return relax.const(value.reshape(*value.shape[:2], 1, value.shape[2]), str(value.dtype))
        if isinstance(expr, relax.Var) and _rank(expr) == 3:
            return self.builder_.emit(relax.op.expand_dims(self.visit_expr(expr), [2]))
        return None

    def _has_twin(self, expr) -> bool:
        return isinstance(expr, relax.Var) and expr in self.twin

    def _from_twin(self, expr) -> bool:
        """Whether ``expr`` (of the input) is a twin or computed from one by an op not lifted (torch
        writes a 1-d pool as one on an ``expand_dims``): its ``squeeze`` has a twin, where a height-1
        map of another kind (a text recogniser's features before its sequence layers) has none."""
        if not isinstance(expr, relax.Var):
            return False
        new = self.visit_expr(expr)
        return new in self.from_twins or any(new.same_as(t) for t in self.twin.values())

    # -- the ops ----------------------------------------------------------------------------------
    def _twin_of(self, value):
        """The two-dimensional form of ``value`` (a call giving an (N, C, W) tensor), or None."""
        if isinstance(value, relax.TupleGetItem):
            source = value.tuple_value
            if isinstance(source, relax.Var) and value.index in self.twin_tuple.get(source, (None, ()))[1]:
                return relax.TupleGetItem(self.twin_tuple[source][0], value.index)
            return None
        if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
            return None
        name, args, a = value.op.name, list(value.args), value.attrs
        if name == "relax.nn.conv1d":
            if (a.data_layout, a.kernel_layout, a.out_layout) != ("NCW", "OIW", "NCW"):
                return None
            x, w = self._lifted(args[0]), self._weight(args[1])
            if x is None or w is None:
                return None
            return relax.op.nn.conv2d(x, w, groups=int(a.groups), out_dtype=a.out_dtype, **_window(a))
        if name == "relax.nn.conv1d_transpose":
            if (a.data_layout, a.kernel_layout, a.out_layout) != ("NCW", "IOW", "NCW"):
                return None
            x, w = self._lifted(args[0]), self._weight(args[1])
            if x is None or w is None:
                return None
            return relax.op.nn.conv2d_transpose(
                x, w, output_padding=(0, int(a.output_padding[0])), groups=int(a.groups), out_dtype=a.out_dtype,
                **_window(a),
            )  # fmt: skip
        if name in _POOLS:
            x = self._lifted(args[0])
            if x is None or a.layout != "NCW" or a.out_layout != "NCW":
                return None
            return _POOLS[name](
                x, pool_size=(1, int(a.pool_size[0])), ceil_mode=bool(a.ceil_mode),
                count_include_pad=bool(a.count_include_pad), **_window(a),
            )  # fmt: skip
        if name == "relax.nn.adaptive_avg_pool1d":
            x = self._lifted(args[0])
            if x is None or a.layout != "NCW" or a.out_layout != "NCW":
                return None
            width = int(a.output_size[0]) if a.output_size is not None else int(shape_of(args[0])[2])
            return relax.op.nn.adaptive_avg_pool2d(x, (1, width))
        if not args or not self._has_twin(args[0]) and not (name in _BROADCASTING and any(map(self._has_twin, args))):
            return None  # (below: ops that follow a twin)
        if name in _ELEMENTWISE or name == "relax.nn.prelu" and int(a.axis) % 3 == 1:
            alpha = [self._channel_vector(args[1])] if name == "relax.nn.prelu" else []
            if None in alpha:
                return None
            rest = alpha or [self.visit_expr(e) for e in args[1:]]
            return relax.Call(value.op, [self.twin[args[0]], *rest], a, value.ty_args)
        if name in _BROADCASTING:
            operands = [self._lifted(e) for e in args]
            if None in operands:
                return None
            return relax.Call(value.op, operands, a, value.ty_args)
        if name == "relax.nn.batch_norm" and int(a.axis) % 3 == 1:
            return relax.op.nn.batch_norm(
                self.twin[args[0]], *[self.visit_expr(e) for e in args[1:]], axis=1, epsilon=float(a.epsilon),
                center=bool(a.center), scale=bool(a.scale), momentum=float(a.momentum), training=bool(a.training),
            )  # fmt: skip
        if name == "relax.strided_slice":
            axes = [_height_skipped(int(i)) for i in args[1].fields]
            bounds = [[int(i) for i in e.fields] for e in args[2:5] if e is not None]
            return relax.op.strided_slice(self.twin[args[0]], axes, *bounds, assume_inbound=bool(a.assume_inbound))
        if name in _REDUCTIONS and a.keepdims and _width_axes(a.axis, 3) == [2]:
            return _REDUCTIONS[name](self.twin[args[0]], axis=[2, 3], keepdims=True)  # (H is 1)
        return None

    def _tuple_twin(self, v, value) -> None:
        """A batch norm's or a split's result: its twin tuple (the ops that take its fields)."""
        name, a = value.op.name, value.attrs
        if name == "relax.nn.batch_norm" and int(a.axis) % 3 == 1:
            self.twin_tuple[v] = (self.builder_.emit(self._twin_of(value)), range(1))
        elif name == "relax.split":
            parts = a.indices_or_sections
            parts = int(parts) if isinstance(parts, (int, IntImm)) else [int(i) for i in parts]
            twin = relax.op.split(self.twin[value.args[0]], parts, axis=_height_skipped(int(a.axis)))
            self.twin_tuple[v] = (self.builder_.emit(twin), range(len(v.ty.fields)))

    def _weight(self, w):
        """A 1-d conv's (O, I, K) weights as (O, I, 1, K)."""
        if isinstance(w, tvm.ir.GenericConst):
            v = w.value.numpy()
            return relax.const(v.reshape(v.shape[0], v.shape[1], 1, v.shape[2]), str(v.dtype))
        return self.builder_.emit(relax.op.expand_dims(self.visit_expr(w), [2])) if _rank(w) == 3 else None

    def _channel_vector(self, e):
        return self.visit_expr(e) if _rank(e) == 1 else None

    def _value_from_twin(self, value):
        """``value`` (not an (N, C, W) tensor) computed from a twin where that saves a squeeze:
        an ``expand_dims`` that makes the twin, a reduction over W without its axis, a reshape."""
        if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
            return None
        name, args, a = value.op.name, list(value.args), value.attrs
        if name == "relax.expand_dims" and self._has_twin(args[0]) and _width_axes(a.axis, 4) == [2]:
            return self.twin[args[0]]
        if name == "relax.reshape" and self._has_twin(args[0]):
            return relax.op.reshape(self.twin[args[0]], self.visit_expr(args[1]))
        if name in _REDUCTIONS and self._has_twin(args[0]) and not a.keepdims and _width_axes(a.axis, 3) == [2]:
            return _REDUCTIONS[name](self.twin[args[0]], axis=[2, 3], keepdims=False)
        return None

    def _concat_twin(self, value):
        """A concat of (N, C, W) tensors, one of them with a twin, as a concat of twins."""
        if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name == "relax.concat"):
            return None
        fields = value.args[0]
        if isinstance(fields, relax.Var):
            fields = self.lookup_binding(fields)
        if not isinstance(fields, relax.Tuple) or not any(self._has_twin(f) for f in fields.fields):
            return None
        if any(_rank(f) != 3 for f in fields.fields) or value.attrs.axis is None:
            return None
        parts = [self._lifted(f) for f in fields.fields]
        if None in parts:
            return None
        return relax.op.concat(parts, axis=_height_skipped(int(value.attrs.axis)))

    def visit_dataflow_block_(self, block):
        return self._forgetting(super().visit_dataflow_block_(block))

    def visit_binding_block_(self, block):
        return self._forgetting(super().visit_binding_block_(block))

    def _forgetting(self, block):
        """(A block's twins are its own variables: the next block starts without them.)"""
        self.twin.clear()
        self.twin_tuple.clear()
        self.from_twins.clear()
        return block

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        v, value = binding.var, binding.value
        lifted = direct = None
        try:
            if _rank(v) == 3:
                lifted = self._twin_of(value)
                if lifted is None:
                    lifted = self._concat_twin(value)
            elif isinstance(v.ty, relax.TupleType) and isinstance(value, relax.Call) and value.args:
                if self._has_twin(value.args[0]):
                    self._tuple_twin(v, value)
            else:
                direct = self._value_from_twin(value)
        except Exception:  # noqa: BLE001
            lifted = direct = None  # (an op unforeseen: left as it is, which is always correct)
        if direct is not None:
            super().visit_var_binding_(relax.VarBinding(v, direct))
            if _rank(v) == 4:
                self.from_twins.add(self.visit_expr(v))
        elif lifted is None:
            super().visit_var_binding_(binding)
            try:
                if _rank(v) == 4 and isinstance(value, relax.Call) and any(map(self._from_twin, value.args)):
                    self.from_twins.add(self.visit_expr(v))
                if _is_squeeze_of_height(value) and self._from_twin(value.args[0]):
                    self.twin[v] = self.visit_expr(value.args[0])
            except Exception:  # noqa: BLE001 - (then no twin: the ops after it are left as they are)
                pass
        else:
            self.twin[v] = self.builder_.emit(lifted)
            super().visit_var_binding_(relax.VarBinding(v, relax.op.squeeze(self.twin[v], [2])))


def _window(a) -> dict:
    """A 1-d conv's or pool's stride, padding and dilation as the 2-d op's over a map of height 1."""
    return {"strides": (1, int(a.strides[0])), "padding": (0, int(a.padding[0]), 0, int(a.padding[1])),
            "dilation": (1, int(a.dilation[0]))}  # fmt: skip


def _height_skipped(axis: int) -> int:
    """An (N, C, W) tensor's axis in its (N, C, 1, W) twin."""
    axis %= 3
    return axis if axis < 2 else 3


def _is_squeeze_of_height(value) -> bool:
    """``squeeze(x, axis=2)`` of an NCHW tensor of height 1 (an (N, C, W) tensor's twin)."""
    if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name == "relax.squeeze"):
        return False
    try:
        shape = shape_of(value.args[0])
    except Exception:  # noqa: BLE001
        return False
    return len(shape) == 4 and shape[2] == 1 and _width_axes(value.attrs.axis, 4) == [2]


@tvm.transform.module_pass(opt_level=0, name="LiftOneDimensionalLayers")
def lift_1d(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    """Every function's (N, C, W) layers computed as (N, C, 1, W) ones (the module docstring)."""
    mod = relax.transform.CanonicalizeBindings()(mod)  # (a pool's (values, indices)[0]: the values)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function) and not (func.attrs and "Codegen" in func.attrs):
            mod[gv] = _Lift(mod).visit_expr(func)
    return relax.transform.DeadCodeElimination()(mod)
