"""A partition whose weights do not fit DRAM1 cut into consecutive partitions that each fit.

A partition's body is a sequence of calls to composite functions (one per fused op). The cut keeps
that order: each piece is a partition function of its own, called from ``main`` with the values the
pieces before it computed. At run time the device holds the weights of the pieces it ran last and
writes the others again when their turn comes (runtime/weights.py): slower than one resident
partition, but on the TCU rather than on the CPU.
"""

from __future__ import annotations

import math

import tvm
from tvm import relax

from ..arch import Architecture
from ..packing import weight_blocks
from .frontend import collect_constants

__all__ = ["weight_vectors", "partition_weight_vectors", "split_partition"]

FILL = 0.9  # a piece's estimated weights at most this share of DRAM1 (the estimate ignores small tables)


def weight_vectors(func: relax.Function, arch: Architecture) -> int:
    """DRAM1 vectors a composite function's constants take, estimated as the compiler packs them:
    a conv's or dense layer's weights in blocks of N + 1 vectors (N rows and the bias row, so the
    bias added to its result takes none of its own) per tap, a conv's only the blocks its groups
    need (``packing.weight_blocks``); anything else in vectors of N."""
    n = arch.array_size
    groups, biases = _conv_groups_and_biases(func)
    total = 0
    for const in collect_constants(func):
        shape = tuple(int(d) for d in const.value.shape)
        if any(c.same_as(const) for c in biases):
            continue
        if len(shape) == 4:  # conv (O, I / groups, kh, kw); transposed (I, O, kh, kw)
            g = next((g for c, g in groups if c.same_as(const)), 1)
            total += weight_blocks(shape[0], shape[1], g, n) * shape[2] * shape[3] * (n + 1)
        elif len(shape) == 2:  # dense
            total += math.ceil(shape[0] / n) * math.ceil(shape[1] / n) * (n + 1)
        else:
            total += math.ceil(math.prod(shape) / n)
    return total


_LAYERS = ("relax.nn.conv2d", "relax.nn.conv2d_transpose", "relax.matmul")


def _conv_groups_and_biases(func: relax.Function) -> tuple[list, list]:
    """The function's grouped convs' weight constants with their groups, and the constants added to
    a conv's or dense layer's result (biases)."""
    groups, biases, values = [], [], {}
    for block in func.body.blocks:
        for binding in block.bindings:
            values[binding.var] = e = binding.value
            if not isinstance(e, relax.Call):
                continue
            name = getattr(e.op, "name", "")
            if name == "relax.nn.conv2d" and int(e.attrs.groups) != 1:
                groups.append((e.args[1], int(e.attrs.groups)))
            elif name == "relax.add":
                layer = values.get(e.args[0], e.args[0])
                if isinstance(layer, relax.Call) and getattr(layer.op, "name", "") in _LAYERS:
                    biases.append(e.args[1])
    return groups, biases


def partition_weight_vectors(func: relax.Function, arch: Architecture) -> int:
    """A partition's estimated DRAM1 vectors: its ops' ``weight_vectors``. It errs low (small
    tables and calibration's two-part weights are not counted), so a partition it finds too big
    is."""
    functions, calls, _ = _body(func)
    return sum(_op_vectors(b, functions, arch) for b in calls)


def _op_vectors(binding, functions: dict, arch: Architecture) -> int:
    """The estimated weights of a binding: a call of a composite function's, else none (a tuple
    item)."""
    v = binding.value
    return weight_vectors(functions[v.op].value, arch) if isinstance(v, relax.Call) and v.op in functions else 0


def _body(func: relax.Function) -> tuple[dict, list, relax.Expr]:
    """The partition's local composite functions (by var), its call bindings in order, its result."""
    seq = func.body
    functions, calls = {}, []
    for block in seq.blocks:
        for b in block.bindings:
            if isinstance(b.value, relax.Function):
                functions[b.var] = b
            else:
                calls.append(b)
    return functions, calls, seq.body


def _uses(expr) -> list:
    return list(relax.analysis.free_vars(expr))


def _piece(name: str, attrs, params: list, functions: dict, calls: list, result) -> relax.Function:
    """A partition function of ``calls`` (with the composite functions they call), taking ``params``
    and returning ``result``."""
    used = {v for b in calls for v in _uses(b.value)}
    bindings = [b for v, b in functions.items() if v in used] + list(calls)
    if isinstance(result, relax.Tuple):
        result = relax.Tuple(list(result.fields))  # typed from its fields
    body = relax.SeqExpr([relax.BindingBlock(bindings)], result)
    func = relax.Function(params, body, result.ty, attrs=attrs)
    return relax.utils.copy_with_new_vars(func).with_attr("global_symbol", name)


def split_partition(
    mod: tvm.IRModule, gv: relax.GlobalVar, arch: Architecture, need: int
) -> tuple[tvm.IRModule, list[relax.GlobalVar]]:
    """Cut partition ``gv`` (its weights ``need`` vectors of DRAM1, more than the architecture has)
    into pieces whose estimated weights fit. Returns the module with the pieces in its place (``main``
    calling them in turn) and the pieces' global vars; the module as it was and [] when the
    partition has a single op (nothing to cut)."""
    func = mod[gv]
    functions, calls, result = _body(func)
    if len(calls) < 2:
        return mod, []
    sizes = [_op_vectors(b, functions, arch) for b in calls]
    # The estimate is scaled to the compiler's own count, so the cut lands where the bytes are.
    scale = need / max(sum(sizes), 1)
    limit = FILL * arch.dram1_depth
    groups, current, filled = [], [], 0.0
    for b, size in zip(calls, sizes):
        if current and filled + size * scale > limit:
            groups.append(current)
            current, filled = [], 0.0
        current.append(b)
        filled += size * scale
    groups.append(current)
    if len(groups) < 2:  # one op's weights alone are the need: halve, the compile says what fits
        half = len(calls) // 2
        groups = [calls[:half], calls[half:]]

    symbol = str(func.attrs["global_symbol"])
    params = list(func.params)
    bound_in = {}  # var -> index of the group that binds it
    for i, group in enumerate(groups):
        for b in group:
            bound_in[b.var] = i
    # What each group reads from earlier groups (or the result needs), in binding order.
    later_uses = [set() for _ in groups]
    for i, group in enumerate(groups):
        for b in group:
            for v in _uses(b.value):
                if v in bound_in and bound_in[v] < i:
                    later_uses[bound_in[v]].add(v)
    for v in _uses(result):
        if v in bound_in:
            later_uses[bound_in[v]].add(v)
    exported = [[b.var for b in group if b.var in later_uses[i]] for i, group in enumerate(groups)]

    pieces = []
    for i, group in enumerate(groups):
        reads = []  # the piece's inputs: the partition's params and earlier pieces' values it uses
        for b in group:
            for v in _uses(b.value):
                if v not in reads and v not in functions and (v in params or bound_in.get(v, i) < i):
                    reads.append(v)
        # Each piece returns what later pieces or the result use; ``main`` assembles the result
        # (a piece returning a value it was given would alias its input and output in DRAM0).
        out = exported[i][0] if len(exported[i]) == 1 else relax.Tuple(exported[i])
        piece = _piece(f"{symbol}_{i}", func.attrs, reads, functions, group, out)
        pieces.append((reads, piece, exported[i]))

    mod = mod.clone()
    bb = relax.BlockBuilder(mod)
    new_gvs = [bb.add_func(piece, f"{gv.name_hint}_part{i}") for i, (_, piece, _) in enumerate(pieces)]
    mod.update(bb.get())
    mod["main"] = _call_pieces(mod["main"], gv, params, pieces, new_gvs, result)
    return tvm.IRModule({g: f for g, f in mod.functions.items() if not g.same_as(gv)}, attrs=mod.attrs), new_gvs


def _call_pieces(main: relax.Function, gv, params: list, pieces: list, gvs: list, result) -> relax.Function:
    """``main`` with its call of ``gv`` replaced by calls of the pieces in turn, and ``result`` (the
    partition's) made of their values."""

    @relax.expr_functor.mutator
    class Calls(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not call.op.same_as(gv):
                return call
            values = dict(zip(params, call.args))
            for (reads, _, exported), g in zip(pieces, gvs):
                out = self.builder_.emit(relax.Call(g, [values[v] for v in reads]))
                if len(exported) == 1:
                    values[exported[0]] = out
                else:
                    for j, v in enumerate(exported):
                        values[v] = self.builder_.emit(relax.TupleGetItem(out, j))
            if isinstance(result, relax.Tuple):
                return relax.Tuple([values[f] for f in result.fields])
            return values[result]

    mutator = Calls()
    return mutator.visit_expr(main)
