"""Preparation passes before partitioning.

- One-dimensional layers (``conv1d``, ``max_pool1d``, ...) over (N, C, W) tensors become the
  two-dimensional ones over (N, C, 1, W) (``lift_1d``).
- Constant folding, and inference-mode batch-norm decomposed into per-channel scale and shift
  (in numpy; a batch-norm in training mode is left as it is).
- Per-channel affine chains (add / subtract / multiply / divide by constants) are folded into
  the preceding conv2d, conv2d_transpose or matmul: ``conv(x, W) * s + t`` becomes ``conv(x, W*s) + t``. This is
  batch-norm folding whether or not the conv has a bias.
- A per-channel scale left over (no conv before it) becomes a depthwise 1x1 conv (or a diagonal
  matmul), which the TCU runs exactly like any other conv.
- A pixel shuffle (DepthToSpace) or its inverse (SpaceToDepth) becomes a transposed conv (a conv)
  of weights of ones whose kernel is its stride.
- Integer index arithmetic on constants (torch.export's reflect and replicate pads) is folded, so
  that their ``take`` has constant indices.
- A reshape of a squeeze, an expand_dims or a reshape is one reshape.
- An adaptive average pool to a size that divides the map becomes the average pool of its windows.
- A channel shuffle (reshape, permute, reshape of the channel axis alone) becomes a 1x1 conv whose
  weights pick each output channel's input channel.
- Each used part of a ``split`` becomes a ``strided_slice``: an op with one tensor result, which
  the patterns take like any other (a tuple-valued split would cut the partition).
- Instance and group normalization (torch.export's ops, ONNX's as TVM imports them) become means
  over the pixels, a group-average 1x1 conv, products and ``rsqrt(x + eps)`` (``_normalized``).

All arithmetic on constants happens here, in float, before partitioning: the runtime module
then receives the folded weights.
"""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.dpl import is_const, is_op, is_tuple, is_tuple_get_item, rewrite_call, wildcard

from .broadcast import LAYOUTS, canonical_shape, channel_axis, channel_values
from .frontend import dtype_of, shape_of, softplus_reason
from .lift_1d import lift_1d


def _value(c) -> np.ndarray:
    return c.value.numpy()


def _const(a: np.ndarray):
    return relax.const(np.ascontiguousarray(a, dtype=np.float32))


def _channel_vector(c, x_shape) -> np.ndarray | None:
    """The per-channel values of constant ``c`` broadcast against ``x`` (numpy's rule), or None."""
    v = _value(c)
    if v.dtype != np.float32:
        return None
    values = channel_values(v, tuple(x_shape))
    return None if values is None else values.astype(np.float32)


def _broadcast_like(vec: np.ndarray, x_shape) -> np.ndarray:
    return vec.reshape(canonical_shape(tuple(x_shape)))


def _rules():
    x, c = wildcard(), is_const()
    rules = []

    # subtract(y, c) -> add(y, -c); divide(y, c) -> multiply(y, 1/c)
    sub = is_op("relax.subtract")(x, c)

    def r_sub(expr, m):
        v = _channel_vector(m[c], shape_of(m[x]))
        return expr if v is None else relax.op.add(m[x], _const(_broadcast_like(-v, shape_of(m[x]))))

    rules.append((sub, r_sub))
    # subtract(c, y) -> add(multiply(y, -1), c) (TVM's importers write ELU and SELU with ``1 - exp(x)``)
    from_const = is_op("relax.subtract")(c, x)

    def r_from_const(expr, m):
        v = _channel_vector(m[c], shape_of(m[x]))
        if v is None or dtype_of(m[x]) != "float32":
            return expr
        negated = relax.op.multiply(m[x], _const(_broadcast_like(-np.ones_like(v), shape_of(m[x]))))
        return relax.op.add(negated, _const(_broadcast_like(v, shape_of(m[x]))))

    rules.append((from_const, r_from_const))
    div = is_op("relax.divide")(x, c)

    def r_div(expr, m):
        v = _channel_vector(m[c], shape_of(m[x]))
        if v is None or np.any(v == 0):
            return expr
        return relax.op.multiply(m[x], _const(_broadcast_like(1.0 / v, shape_of(m[x]))))

    rules.append((div, r_div))

    # multiply(add(y, b), s) -> add(multiply(y, s), b*s): scales move towards the conv.
    b = is_const()
    mul_add = is_op("relax.multiply")(is_op("relax.add")(x, b), c)

    def r_mul_add(expr, m):
        s = _channel_vector(m[c], shape_of(m[x]))
        bv = _channel_vector(m[b], shape_of(m[x]))
        if s is None or bv is None:
            return expr
        shp = shape_of(m[x])
        return relax.op.add(
            relax.op.multiply(m[x], _const(_broadcast_like(s, shp))), _const(_broadcast_like(bv * s, shp))
        )

    rules.append((mul_add, r_mul_add))

    # add(add(y, b1), b2) and multiply(multiply(y, s1), s2) combine.
    for opname, comb in (("relax.add", np.add), ("relax.multiply", np.multiply)):
        inner_c = is_const()
        pat = is_op(opname)(is_op(opname)(x, inner_c), c)

        def r_comb(expr, m, opname=opname, comb=comb, inner_c=inner_c):
            shp = shape_of(m[x])
            v1, v2 = _channel_vector(m[inner_c], shp), _channel_vector(m[c], shp)
            if v1 is None or v2 is None:
                return expr
            fn = relax.op.add if opname == "relax.add" else relax.op.multiply
            return fn(m[x], _const(_broadcast_like(comb(v1, v2), shp)))

        rules.append((pat, r_comb))

    # multiply(conv(x, W), s) -> conv(x, W * s), s along W's output-channel axis: O of a conv2d's
    # (O, I/g, KH, KW), O of a conv2d_transpose's (I, O, KH, KW) (one group only: O/g otherwise).
    w = is_const()
    for op, layout, axis in (("relax.nn.conv2d", "OIHW", 0), ("relax.nn.conv2d_transpose", "IOHW", 1)):
        conv = is_op(op)(x, w)
        mul_conv = is_op("relax.multiply")(conv, c)

        def r_mul_conv(expr, m, conv=conv, layout=layout, axis=axis):
            call = m[conv]
            a = call.attrs
            layouts = (a.data_layout, a.kernel_layout, a.out_layout)
            if layouts != ("NCHW", layout, "NCHW") or (axis and int(a.groups) != 1):
                return expr
            s = _channel_vector(m[c], shape_of(call))
            if s is None:
                return expr
            scale = s.reshape([-1 if k == axis else 1 for k in range(4)])
            return relax.Call(call.op, [m[x], _const(_value(m[w]) * scale)], call.attrs)

        rules.append((mul_conv, r_mul_conv))

    # multiply(matmul(x, W), s) -> matmul(x, W * s)
    mm = is_op("relax.matmul")(x, w)
    mul_mm = is_op("relax.multiply")(mm, c)

    def r_mul_mm(expr, m):
        if len(shape_of(m[mm])) != 2 or len(shape_of(m[w])) != 2:
            return expr
        s = _channel_vector(m[c], shape_of(m[mm]))
        if s is None:
            return expr
        return relax.op.matmul(m[x], _const(_value(m[w]) * s[None, :]))

    rules.append((mul_mm, r_mul_mm))

    # add(y, c) with c one value per channel in another shape (a scalar, (C, 1, 1), ...): the
    # TCU path reads a bias as one value per channel, so it gets (1, C, 1, 1) or (1, C).
    for pat in (is_op("relax.add")(x, c), is_op("relax.add")(c, x)):

        def r_bias(expr, m):
            shp = shape_of(m[x])
            v = _channel_vector(m[c], shp)
            if v is None or shape_of(m[c]) == canonical_shape(shp):
                return expr
            return relax.op.add(m[x], _const(v.reshape(canonical_shape(shp))))

        rules.append((pat, r_bias))
    return rules


def _scale_to_conv():
    """A per-channel multiply left over becomes a depthwise 1x1 conv (or a diagonal matmul)."""
    x, c = wildcard(), is_const()
    pat = is_op("relax.multiply")(x, c)

    def r(expr, m):
        try:
            shp = shape_of(m[x])
        except ValueError:
            return expr
        s = _channel_vector(m[c], shp)
        if s is None or str(m[x].ty.dtype) != "float32":
            return expr
        if len(shp) == 4:
            return relax.op.nn.conv2d(m[x], _const(s.reshape(-1, 1, 1, 1)), groups=shp[1])
        return relax.op.matmul(m[x], _const(np.diag(s)))

    return pat, r


def _safe(rewriter):
    """A rewrite that cannot break a build: on anything it did not foresee (symbolic shapes,
    other data types), it leaves the expression as it was; the op then stays on the CPU."""

    def rewrite(expr, m):
        try:
            return rewriter(expr, m)
        except Exception:  # noqa: BLE001 - the unrewritten op is always correct
            return expr

    return rewrite


def _rewrite_to_fixpoint(func, rules, limit: int = 64):
    for _ in range(limit):
        before = func
        for pat, rewriter in rules:
            func = rewrite_call(pat, _safe(rewriter), func)
        if tvm_ffi.structural_equal(before, func):
            break
    return func


# Integer ops on constants that torch.export's pads write (their row and column indices), in numpy.
_INDEX_OPS = {
    "relax.abs": np.abs, "relax.negative": np.negative, "relax.add": np.add, "relax.subtract": np.subtract,
    "relax.multiply": np.multiply, "relax.minimum": np.minimum, "relax.maximum": np.maximum,
    "relax.floor_divide": np.floor_divide, "relax.floor_mod": np.mod,
}  # fmt: skip


def _index_arithmetic():
    """``arange`` and integer arithmetic on constants (torch.export writes a reflect or replicate pad
    as ``take`` of indices computed this way) folded in numpy: the ``take`` then has constant
    indices, a gather of pixels the TCU runs (``frontend.spatial_gather``)."""
    pat = wildcard()

    def r(expr, m):
        if not isinstance(expr, relax.Call) or not isinstance(expr.op, tvm.ir.Op) or "int" not in dtype_of(expr):
            return expr
        name, args = expr.op.name, expr.args
        if name == "relax.arange":
            value = np.arange(*[int(a.value) for a in args])
        elif name == "relax.clip" and isinstance(args[0], tvm.ir.GenericConst):
            value = np.clip(_value(args[0]), int(args[1].value), int(args[2].value))
        elif name in _INDEX_OPS and all(isinstance(a, tvm.ir.GenericConst) for a in args):
            value = _INDEX_OPS[name](*[_value(a) for a in args])
        else:
            return expr
        return relax.const(np.asarray(value, dtype=dtype_of(expr)), dtype_of(expr))

    return pat, r


def _te_minmax_to_relax(mod: tvm.IRModule, func: relax.Function) -> relax.Function:
    """``call_tir(maximum|minimum, (x, scalar const))``, as the ONNX importer emits Clip, back to
    ``relax.maximum``/``relax.minimum`` so that patterns can match them."""
    c = is_const()
    x = wildcard()
    pat = is_op("relax.call_tir")(wildcard(), wildcard())

    def r(expr, m):
        gv, args = expr.args[0], expr.args[1]
        name = getattr(gv, "name_hint", "")
        kind = "maximum" if name.startswith("maximum") else "minimum" if name.startswith("minimum") else None
        if kind is None or not isinstance(args, relax.Tuple) or len(args.fields) != 2:
            return expr
        data, bound = args.fields
        if not isinstance(bound, tvm.ir.GenericConst) or bound.value.numpy().size != 1:
            return expr
        if str(bound.value.dtype) != "float32" or str(data.ty.dtype) != "float32":
            return expr  # only float32 bounds become relax ops the TCU patterns take
        try:
            if shape_of(data) != shape_of(expr):
                return expr
        except ValueError:
            return expr
        fn = relax.op.maximum if kind == "maximum" else relax.op.minimum
        return fn(data, relax.const(np.float32(bound.value.numpy().reshape(()))))

    del c, x
    return rewrite_call(pat, _safe(r), func)


def probe_pad(mod: tvm.IRModule, gv, in_shape, out_ty):
    """Run the TE pad function once on unique values: (before, after, value) of a constant pad,
    (before, after, "reflect" or "edge") of a mirrored or repeated border, or None.

    ONNX Pad imports as ``call_tir`` of ``topi.nn.pad`` with the amounts baked into the
    function; running it shows exactly where the input lands and what fills the rest.
    """
    bb = relax.BlockBuilder()
    xv = relax.Var("x", ty=relax.TensorType(shape=in_shape, dtype="float32"))
    with bb.function("main", [xv]):
        fn = bb.add_func(mod[gv], "probe_pad")
        bb.emit_func_output(bb.emit(relax.call_tir(fn, (xv,), out_ty)))
    size = int(np.prod(in_shape))
    if size >= 1 << 24:  # float32 holds unique integers only up to 2^24
        return None
    x = np.arange(1, size + 1, dtype=np.float32).reshape(in_shape)
    vm = relax.VirtualMachine(tvm.compile(bb.get(), target="llvm"), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x)).numpy()
    for mode in ("reflect", "edge"):  # every value one of the input's, mirrored or repeated
        grown = [o - i for o, i in zip(out.shape, in_shape)]
        if min(grown) >= 0 and out.size > x.size and np.isin(out, x).all():
            for before in np.ndindex(*[g + 1 for g in grown]):
                after = [g - b for g, b in zip(grown, before)]
                if np.array_equal(np.pad(x, list(zip(before, after)), mode=mode), out):
                    return list(before), after, mode
    where = np.argwhere(out == 1.0)
    if len(where) != 1:
        return None
    before = [int(v) for v in where[0]]
    after = [o - i - b for o, i, b in zip(out.shape, in_shape, before)]
    if min(after) < 0:
        return None
    inner = tuple(slice(b, b + i) for b, i in zip(before, in_shape))
    if not np.array_equal(out[inner], x):
        return None
    mask = np.ones(out.shape, bool)
    mask[inner] = False
    fill = np.unique(out[mask])
    if fill.size > 1:
        return None
    return before, after, float(fill[0]) if fill.size else 0.0


def _pads_to_relax(mod: tvm.IRModule, func: relax.Function) -> relax.Function:
    """``call_tir(pad, x)`` (ONNX Pad: constant, reflect or edge mode) -> ``relax.nn.pad``."""
    pat = is_op("relax.call_tir")(wildcard(), wildcard())

    def r(expr, m):
        gv, args = expr.args[0], expr.args[1]
        if not getattr(gv, "name_hint", "").startswith(("pad", "mirror_pad", "replicate_pad")):
            return expr
        if not isinstance(args, relax.Tuple):
            return expr
        if len(args.fields) != 1 or str(args.fields[0].ty.dtype) != "float32":
            return expr
        try:
            found = probe_pad(mod, gv, shape_of(args.fields[0]), expr.ty)
        except Exception:  # noqa: BLE001 - an unrecognised function simply stays as it is
            return expr
        if found is None:
            return expr
        before, after, value = found
        width = [v for pair in zip(before, after) for v in pair]
        if isinstance(value, str):
            return relax.op.nn.pad(args.fields[0], width, pad_mode=value)
        return relax.op.nn.pad(args.fields[0], width, pad_value=value)

    return rewrite_call(pat, _safe(r), func)


def _merge_pad_into_conv():
    """conv2d(pad(x) with zeros on H/W only) -> conv2d(x) with the padding added."""
    x, w = wildcard(), is_const()
    pad = is_op("relax.nn.pad")(x)
    conv = is_op("relax.nn.conv2d")(pad, w)

    def r(expr, m):
        p = m[pad].attrs
        width = [int(v) for v in p.pad_width]
        a = m[conv].attrs
        if (
            str(p.pad_mode) != "constant"
            or float(p.pad_value) != 0.0
            or len(width) != 8
            or any(width[:4])
            or a.data_layout != "NCHW"
        ):
            return expr
        top, bottom, left, right = width[4:]
        t, l, b, rr = (int(v) for v in a.padding)
        return relax.op.nn.conv2d(
            m[x],
            m[w],
            strides=a.strides,
            padding=(t + top, l + left, b + bottom, rr + right),
            dilation=a.dilation,
            groups=a.groups,
            data_layout="NCHW",
            kernel_layout="OIHW",
        )

    return conv, r


def _inference_batch_norm():
    """``batch_norm(x, gamma, beta, mean, var)[0]`` in inference mode, with constant statistics
    -> ``x * scale + shift`` (computed in numpy), which the affine rules then fold into the conv
    before it. A batch norm in training mode normalises with the batch's own statistics: it is
    left alone (TVM's CPU build computes it)."""
    x = wildcard()
    g, b, m, v = is_const(), is_const(), is_const(), is_const()
    bn = is_op("relax.nn.batch_norm")(x, g, b, m, v)
    pat = is_tuple_get_item(bn, 0)

    def r(expr, match):
        call = match[bn]
        a = call.attrs
        shp = shape_of(match[x])
        if bool(a.training) or str(match[x].ty.dtype) != "float32" or len(shp) not in (2, 4):
            return expr
        if int(a.axis) % len(shp) != 1:
            return expr
        gamma, beta, mean, var = (_value(match[k]).astype(np.float64).reshape(-1) for k in (g, b, m, v))
        if not (gamma.size == beta.size == mean.size == var.size == shp[1]):
            return expr
        scale = (gamma if a.scale else 1.0) / np.sqrt(var + float(a.epsilon))
        shift = (beta if a.center else 0.0) - mean * scale
        return relax.op.add(
            relax.op.multiply(match[x], _const(_broadcast_like(scale, shp))), _const(_broadcast_like(shift, shp))
        )

    return pat, r


def _split_to_slices():
    """``split(x, ...)[i]`` -> ``strided_slice(x)`` of part i (the split itself dies)."""
    x = wildcard()
    split = is_op("relax.split")(x)
    pat = is_tuple_get_item(split)

    def r(expr, match):
        call = match[split]
        shape = shape_of(match[x])
        axis = int(call.attrs.axis) % len(shape)
        size = shape[axis]
        ios = call.attrs.indices_or_sections
        if isinstance(ios, (int, tvm.ir.prim.expr.IntImm)):
            sections = int(ios)
            if sections < 1 or size % sections:
                return expr
            bounds = [k * size // sections for k in range(sections + 1)]
        else:
            bounds = [0] + [min(max(int(i), 0), size) for i in ios] + [size]
        i = int(expr.index)
        if not 0 <= i < len(bounds) - 1:
            return expr
        return relax.op.strided_slice(match[x], [axis], [bounds[i]], [bounds[i + 1]], [1])

    return pat, r


def _stacked_extremum_to_pairs():
    """ONNX Max / Min of two inputs imports as a max / min reduction over ``stack`` of both
    broadcast to the output's shape: the same as ``maximum`` / ``minimum`` of the two by numpy's
    broadcasting, which the patterns take."""
    a, b = wildcard(), wildcard()
    pair = is_tuple([is_op("relax.broadcast_to")(a, wildcard()), is_op("relax.broadcast_to")(b, wildcard())])
    stack = is_op("relax.stack")(pair)
    pat = is_op("relax.max")(stack) | is_op("relax.min")(stack)

    def r(expr, match):
        st, attrs = match[stack], expr.attrs
        if int(st.attrs.axis) != 0 or attrs.axis is None or [int(v) for v in attrs.axis] != [0] or attrs.keepdims:
            return expr
        x, y = match[a], match[b]
        if tuple(np.broadcast_shapes(shape_of(x), shape_of(y))) != tuple(shape_of(expr)):
            return expr
        return (relax.op.maximum if expr.op.name == "relax.max" else relax.op.minimum)(x, y)

    return pat, r


def _prelu(x, slopes) -> relax.Expr | None:
    """``prelu(x, slopes)`` when the constant ``slopes`` holds one value per channel of x."""
    shape = shape_of(x)
    alpha = channel_values(_value(slopes), shape) if len(shape) in LAYOUTS else None
    if alpha is None:
        return None
    return relax.op.nn.prelu(x, _const(alpha.astype(np.float32)), axis=channel_axis(len(shape)))


def _where_to_prelu():
    """``where(x > 0, x, alpha * x)`` with one slope per channel (torch.export's PReLU) is
    ``prelu(x, alpha)``: one activation, where the affine folding would fold ``alpha * x`` into a
    second copy of the conv that makes x."""
    x, c = wildcard(), is_const()
    zero = is_const()
    scaled = is_op("relax.multiply")(c, x) | is_op("relax.multiply")(x, c)
    pat = is_op("relax.where")(is_op("relax.greater")(x, zero), x, scaled)

    def r(expr, m):
        if _value(m[zero]).size != 1 or float(_value(m[zero]).reshape(())) != 0.0:
            return expr
        prelu = _prelu(m[x], m[c])
        return expr if prelu is None else prelu

    return pat, r


def _clamp_bounds(call) -> tuple[float, float] | None:
    """(lo, hi) of ``maximum(x, c)``, ``minimum(x, c)`` or ``clip(x, lo, hi)``; None otherwise."""
    op = call.op.name
    if op in ("relax.maximum", "relax.minimum") and isinstance(call.args[1], tvm.ir.GenericConst):
        c = _value(call.args[1])
        if c.size != 1:
            return None
        v = float(c.reshape(()))
        return (v, float("inf")) if op == "relax.maximum" else (float("-inf"), v)
    if op == "relax.clip":
        return float(call.args[1].value), float(call.args[2].value)
    return None


def _max_min_to_prelu():
    """``max(x, 0) + alpha * min(x, 0)`` (PReLU written out; torch's clamps import as clips) is
    ``prelu(x, alpha)``."""
    x, c = wildcard(), is_const()
    pos = is_op("relax.maximum")(x, is_const()) | is_op("relax.clip")(x, wildcard(), wildcard())
    neg = is_op("relax.minimum")(x, is_const()) | is_op("relax.clip")(x, wildcard(), wildcard())
    scaled = is_op("relax.multiply")(c, neg) | is_op("relax.multiply")(neg, c)
    pat = is_op("relax.add")(pos, scaled) | is_op("relax.add")(scaled, pos)

    def r(expr, m):
        if _clamp_bounds(m[pos]) != (0.0, float("inf")) or _clamp_bounds(m[neg]) != (float("-inf"), 0.0):
            return expr
        prelu = _prelu(m[x], m[c])
        return expr if prelu is None else prelu

    return pat, r


def _is_scalar(c, value: float) -> bool:
    v = _value(c)
    return v.size == 1 and float(v.reshape(())) == value


def _softplus_forms():
    """``log(1 + exp(x))`` (how TVM's ONNX importer writes Mish's softplus) is ``softplus(x)``, and
    so are ``max(x, 0) + softplus(-|x|)`` (its Softplus) and ``where(x > t, x, softplus(x))`` (torch's,
    threshold t): one smooth function."""
    x, one, zero = wildcard(), is_const(), is_const()
    exp = is_op("relax.exp")(x)
    plain = is_op("relax.log")(is_op("relax.add")(one, exp) | is_op("relax.add")(exp, one))
    pos = is_op("relax.maximum")(x, zero)
    tail = is_op("relax.nn.softplus")(is_op("relax.negative")(is_op("relax.abs")(x)))
    steady = is_op("relax.add")(pos, tail) | is_op("relax.add")(tail, pos)

    def r_plain(expr, m):
        # Only where the TCU could take it: an op left on the CPU keeps TVM's own arithmetic.
        if not _is_scalar(m[one], 1.0) or dtype_of(m[x]) != "float32" or len(shape_of(m[x])) not in (2, 4):
            return expr
        return relax.op.nn.softplus(m[x])

    def r_steady(expr, m):
        if not _is_scalar(m[zero], 0.0) or softplus_reason(m[tail]) is not None:
            return expr
        return relax.op.nn.softplus(m[x])

    # torch.export's: where(x > threshold, x, log(1 + exp(x))).
    threshold = is_const()
    linear = is_op("relax.where")(is_op("relax.greater")(x, threshold), x, is_op("relax.nn.softplus")(x))

    def r_linear(expr, m):
        t = _value(m[threshold])
        return expr if t.size != 1 else relax.op.nn.softplus(m[x], threshold=float(t.reshape(())))

    return [(plain, r_plain), (steady, r_steady), (linear, r_linear)]


def _permute_into_dense():
    """``matmul(reshape(permute_dims(x), (N, K)), W)`` with the batch axis kept first: the same dense
    layer on x flattened as it is, its weight rows reordered (MTCNN's nets permute NCHW to NWHC
    before their dense layers)."""
    x, w, s = wildcard(), is_const(), wildcard()
    perm = is_op("relax.permute_dims")(x)
    flat = is_op("relax.reshape")(perm, s)
    pat = is_op("relax.matmul")(flat, w)

    def r(expr, m):
        shape, axes = shape_of(m[x]), [int(a) for a in m[perm].attrs.axes]
        out = shape_of(m[flat])
        if len(out) != 2 or axes[0] != 0 or out[0] != shape[0] or out[1] != int(np.prod(shape[1:])):
            return expr
        # Element j of the permuted map's row is element order[j] of x's own row.
        order = np.arange(out[1]).reshape(shape[1:]).transpose([a - 1 for a in axes[1:]]).reshape(-1)
        weight = _value(m[w])
        rows = np.empty_like(weight)
        rows[order] = weight
        return relax.op.matmul(relax.op.reshape(m[x], out), _const(rows))

    return pat, r


def _adaptive_pool_of_whole_windows():
    """``adaptive_avg_pool2d`` to an output size that divides the map (PSPNet's pyramid, VGG's 7x7
    head) is the average pool of windows of map / output pixels with that stride (each output pixel's
    window is rows ``i*H/oh`` to ``(i+1)*H/oh``); to the map's own size it is the map itself."""
    x = wildcard()
    pat = is_op("relax.nn.adaptive_avg_pool2d")(x)

    def r(expr, m):
        a, shape, out = expr.attrs, shape_of(m[x]), shape_of(expr)
        if a.layout != "NCHW" or a.out_layout != "NCHW" or len(shape) != 4 or out[2:] == (1, 1):
            return expr
        (h, w), (oh, ow) = shape[2:], out[2:]
        if h % oh or w % ow:
            return expr
        if (oh, ow) == (h, w):
            return m[x]
        return relax.op.nn.avg_pool2d(m[x], (h // oh, w // ow), (h // oh, w // ow))

    return pat, r


def _channel_shuffle():
    """``reshape(permute_dims(reshape(x, (n, g, c/g, h, w)), (0, 2, 1, 3, 4)), (n, c, h, w))``
    (ShuffleNet's channel shuffle; any split, permutation and merge of the channel axis alone) is
    a 1x1 conv whose weights pick each output channel's input channel: exact (weights of 1)."""
    x, s1, s2 = wildcard(), wildcard(), wildcard()
    split = is_op("relax.reshape")(x, s1)
    perm = is_op("relax.permute_dims")(split)
    pat = is_op("relax.reshape")(perm, s2)

    def r(expr, m):
        shape, mid = shape_of(m[x]), shape_of(m[split])
        axes = [int(a) for a in m[perm].attrs.axes]
        n, c = shape[0], shape[1]
        channels = mid[1:-2]  # the channel axis split into these
        if (
            len(shape) != 4
            or shape_of(expr) != shape
            or mid[:1] + mid[-2:] != (n,) + shape[2:]
            or int(np.prod(channels)) != c
            or axes[0] != 0
            or axes[-2:] != [len(mid) - 2, len(mid) - 1]
        ):
            return expr
        # Output channel j is input channel order[j].
        order = np.arange(c).reshape(channels).transpose([a - 1 for a in axes[1:-2]]).reshape(-1)
        pick = np.zeros((c, c, 1, 1), np.float32)
        pick[np.arange(c), order] = 1.0
        return relax.op.nn.conv2d(m[x], _const(pick))

    return pat, r


def _elu_negative_part():
    """``relu(1 - exp(x))`` (ELU's and SELU's negative part as TVM's importers write it) is
    ``1 - exp(min(x, 0))``: the same values, but the exp then never exceeds 1, so calibration gives it
    a scale fine enough for the negative side (sized for ``e^max(x)`` it left a trained net's logits
    19% of their range off at FP16BP8)."""
    x, one = wildcard(), is_const()
    e = is_op("relax.exp")(x)
    pat = is_op("relax.nn.relu")(is_op("relax.subtract")(one, e))

    def r(expr, m):
        if not _is_scalar(m[one], 1.0) or dtype_of(m[x]) != "float32":
            return expr
        zero = relax.const(np.float32(0.0))
        return relax.op.subtract(m[one], relax.op.exp(relax.op.minimum(m[x], zero)))

    return pat, r


def _normalized(x, groups: int, eps: float, gamma=None, beta=None):
    """``x`` (N, C, H, W) normalized over each group of ``C / groups`` channels and its pixels, as
    the TCU computes it: means over the pixels (global pools), a group's channels averaged by a 1x1
    conv of the (N, C, 1, 1) means, then ``gamma`` and ``beta`` per channel (the affine rules fold
    them). The variance of the deviation ``d`` is taken twice: ``r0 = rsqrt(mean(d^2) + eps)`` at
    the squares' scale, where a channel of small variance keeps few bits, then that of ``d r0``,
    whose every channel's is near 1: ``r1 = rsqrt(mean((d r0)^2) + eps r0^2)`` is 1 but for r0's
    rounding, and ``d r0 r1`` is ``d / sqrt(var + eps)``."""
    _, c, _, _ = shape_of(x)
    size = c // groups
    same = np.arange(c)[:, None] // size == np.arange(c)[None, :] // size
    average = _const((same / size).reshape(c, c, 1, 1))

    def mean(t):
        m = relax.op.mean(t, axis=[2, 3], keepdims=True)
        return m if size == 1 else relax.op.nn.conv2d(m, average)

    def rsqrt(v, e):
        return relax.op.rsqrt(relax.op.add(v, relax.const(np.float32(e))))

    d = relax.op.subtract(x, mean(x))
    r0 = rsqrt(mean(relax.op.multiply(d, d)), eps)
    d1 = relax.op.multiply(d, r0)
    t = relax.op.multiply(r0, relax.const(np.float32(np.sqrt(eps))))  # (at most 1)
    r1 = rsqrt(relax.op.add(mean(relax.op.multiply(d1, d1)), relax.op.multiply(t, t)), _CORRECTION_EPS)
    y = relax.op.multiply(d1, r1)
    if gamma is not None:
        y = relax.op.multiply(y, _const(np.asarray(gamma, np.float32).reshape(1, c, 1, 1)))
    if beta is not None:
        y = relax.op.add(y, _const(np.asarray(beta, np.float32).reshape(1, c, 1, 1)))
    return y


# The second pass's rsqrt reads about 1: an epsilon that only keeps it finite.
_CORRECTION_EPS = 1e-6


def _affine_of(call, gamma, beta, c: int):
    """A normalization's gamma and beta as per-channel vectors (None: not applied), or None when
    they are not constants of one value per channel."""
    out = []
    for arg, used in ((gamma, bool(call.attrs.scale)), (beta, bool(call.attrs.center))):
        if not used:
            out.append(None)
            continue
        if not isinstance(arg, tvm.ir.GenericConst):
            return None
        v = _value(arg).reshape(-1)
        if v.size != c:
            return None
        out.append(v)
    return out


def _norm_layers():
    """Instance and group normalization (``relax.nn.instance_norm``, ``relax.nn.group_norm`` as
    torch.export writes them) over an NCHW map, as ``_normalized`` computes them. torch.export writes
    a batch's instance norm over ``reshape(x, (1, N * C, H, W))`` with gamma and beta tiled N times:
    the same per-channel statistics over x itself."""
    src, gs, bs = wildcard(), is_const(), is_const()
    norm = is_op("relax.nn.instance_norm")(is_op("relax.reshape")(src, wildcard()), gs, bs)
    batched = is_op("relax.reshape")(norm, wildcard())

    def r_batched(expr, m):
        n, c, h, w = shape = shape_of(m[src])
        a = m[norm].attrs
        if shape_of(expr) != shape or shape_of(m[norm]) != (1, n * c, h, w) or dtype_of(m[src]) != "float32":
            return expr
        if int(a.channel_axis) % 4 != 1 or sorted(int(v) % 4 for v in a.axes) not in ([2, 3], [0, 2, 3]):
            return expr
        affine = _affine_of(m[norm], m[gs], m[bs], n * c)
        if affine is None:
            return expr
        rows = [None if v is None else v.reshape(n, c) for v in affine]
        if any(v is not None and not np.all(v == v[:1]) for v in rows):
            return expr
        return _normalized(m[src], c, float(a.epsilon), *(None if v is None else v[0] for v in rows))

    rules = [(batched, r_batched)]
    for op in ("relax.nn.instance_norm", "relax.nn.group_norm"):
        x, g, b = wildcard(), wildcard(), wildcard()
        pat = is_op(op)(x, g, b)

        def r(expr, m, x=x, g=g, b=b, op=op):
            a = expr.attrs
            shape = shape_of(m[x])
            if len(shape) != 4 or dtype_of(m[x]) != "float32" or int(a.channel_axis) % 4 != 1:
                return expr
            axes = sorted(int(v) % 4 for v in a.axes)
            groups = int(a.num_groups) if op == "relax.nn.group_norm" else shape[1]
            if axes not in ([2, 3], [0, 2, 3]) or shape[1] % groups:
                return expr
            affine = _affine_of(expr, m[g], m[b], shape[1])
            return expr if affine is None else _normalized(m[x], groups, float(a.epsilon), *affine)

        rules.append((pat, r))
    return rules


def _normalization_by_parts():
    """``(x - mean(x)) / sqrt(variance(x) + eps)`` over the pixels of an NCHW map (ONNX
    InstanceNormalization as TVM imports it), and over each row of ``reshape(x, (N, G, -1))``
    followed by a scale and shift per group and the reshape back (torch's GroupNorm exported to
    ONNX: an instance norm of the groups): ``_normalized`` with one channel or ``C / G`` per group."""
    x, e, s, b = wildcard(), is_const(), is_const(), is_const()
    mean, variance = is_op("relax.mean")(x), is_op("relax.variance")(x)
    deviation = is_op("relax.subtract")(x, mean)
    core = is_op("relax.divide")(deviation, is_op("relax.sqrt")(is_op("relax.add")(variance, e)))
    grouped = is_op("relax.reshape")(is_op("relax.add")(is_op("relax.multiply")(core, s), b), wildcard())

    def parts(m, rank: int, axes: list[int]):
        """The normalized tensor and epsilon, or None."""
        var, src = m[variance], m[mean].args[0]  # (the matched x is its value; src the variable)
        if not all(a.same_as(src) for a in (var.args[0], m[deviation].args[0])) or dtype_of(src) != "float32":
            return None
        eps, shape = _value(m[e]).reshape(-1), shape_of(src)
        if not (bool(m[mean].attrs.keepdims) and bool(var.attrs.keepdims)) or not np.all(eps == eps[:1]):
            return None
        if len(shape) != rank or any(sorted(int(v) % rank for v in c.attrs.axis) != axes for c in (m[mean], var)):
            return None
        return src, float(eps[0])

    def r_map(expr, m):
        found = parts(m, 4, [2, 3])
        return expr if found is None else _normalized(found[0], shape_of(found[0])[1], found[1])

    def r_groups(expr, m):
        found, value = parts(m, 3, [2]), m[x]  # x: a reshape of the map, (N, G, C / G * H * W)
        if found is None or not (isinstance(value, relax.Call) and value.op.name == "relax.reshape"):
            return expr
        n, groups, _ = shape_of(found[0])
        src = value.args[0]
        if len(shape_of(src)) != 4 or shape_of(expr) != shape_of(src) or shape_of(src)[0] != n:
            return expr
        c = shape_of(src)[1]
        scale, shift = _value(m[s]), _value(m[b])
        if c % groups or scale.size not in (1, groups) or shift.size not in (1, groups):
            return expr
        per_channel = [np.repeat(np.broadcast_to(v.reshape(-1), (groups,)), c // groups) for v in (scale, shift)]
        return _normalized(src, groups, found[1], *per_channel)

    return [(grouped, r_groups), (core, r_map)]


def _pixel_rearrangement():
    """``reshape(permute_dims(reshape(x, ...)), ...)`` that moves channels into pixels (a pixel
    shuffle, ONNX DepthToSpace in either mode: super-resolution nets) or pixels into channels
    (SpaceToDepth, YOLOv2's reorg) is a transposed conv (or a conv) whose kernel is its stride, each
    output reading one input value: weights of ones, exact. Found by running the rearrangement on the
    indices of x, so any reshape and permutation of that form is recognised."""
    x, s1, s2 = wildcard(), wildcard(), wildcard()
    split = is_op("relax.reshape")(x, s1)
    perm = is_op("relax.permute_dims")(split)
    pat = is_op("relax.reshape")(perm, s2)

    def r(expr, m):
        shape, out = shape_of(m[x]), shape_of(expr)
        if len(shape) != 4 or len(out) != 4 or shape[0] != out[0] or shape[2:] == out[2:]:
            return expr
        axes = [int(a) for a in m[perm].attrs.axes]
        index = np.arange(int(np.prod(shape))).reshape(shape_of(m[split])).transpose(axes).reshape(out)
        n, c, h, w = shape
        if not np.array_equal(
            index - index[:1], np.zeros_like(index) + (np.arange(n) * c * h * w)[:, None, None, None]
        ):
            return expr  # (each image's values stay in that image)
        ci, y, xx = np.unravel_index(index[0], (c, h, w))
        oc, oh, ow = out[1:]
        if oh % h == 0 and ow % w == 0:  # channels into pixels
            ry, rx = oh // h, ow // w
            py, px = np.arange(oh)[:, None] % ry, np.arange(ow)[None, :] % rx
            table = ci[:, :ry, :rx]  # the channel each (output channel, phase) reads
            if not (np.array_equal(y, np.broadcast_to(np.arange(oh)[:, None] // ry, y.shape))
                    and np.array_equal(xx, np.broadcast_to(np.arange(ow)[None, :] // rx, xx.shape))
                    and np.array_equal(ci, table[:, py, px])):  # fmt: skip
                return expr
            weights = np.zeros((c, oc, ry, rx), np.float32)
            o, i, j = np.meshgrid(np.arange(oc), np.arange(ry), np.arange(rx), indexing="ij")
            weights[table[o, i, j], o, i, j] = 1.0
            return relax.op.nn.conv2d_transpose(m[x], _const(weights), strides=(ry, rx))
        if h % oh == 0 and w % ow == 0:  # pixels into channels
            ry, rx = h // oh, w // ow
            i, j = y - np.arange(oh)[:, None] * ry, xx - np.arange(ow)[None, :] * rx
            first = (ci[:, :1, :1], i[:, :1, :1], j[:, :1, :1])
            if i.min() < 0 or i.max() >= ry or j.min() < 0 or j.max() >= rx:
                return expr
            if not all(np.array_equal(a, np.broadcast_to(f, a.shape)) for a, f in zip((ci, i, j), first)):
                return expr
            weights = np.zeros((oc, c, ry, rx), np.float32)
            weights[np.arange(oc), first[0].ravel(), first[1].ravel(), first[2].ravel()] = 1.0
            return relax.op.nn.conv2d(m[x], _const(weights), strides=(ry, rx))
        return expr

    return pat, r


def _reshape_chains():
    """``reshape(squeeze | expand_dims | reshape(x), shape)`` is ``reshape(x, shape)``: the same
    values in the same order (a 1-d net's pooled (N, C, 1, 1) map squeezed, then flattened for its
    classifier, is then the free (N, C, 1, 1) -> (N, C))."""
    x, s = wildcard(), wildcard()
    inner = is_op("relax.squeeze")(x) | is_op("relax.expand_dims")(x) | is_op("relax.reshape")(x, wildcard())
    pat = is_op("relax.reshape")(inner, s)

    def r(expr, m):
        return relax.op.reshape(m[x], m[s])

    return pat, r


def _dense_on_rows():
    """``reshape(matmul(reshape(x, (B * S, K)), W) [+ b], (B, S, N))`` (torch.export's Linear on a
    (B, S, K) sequence) is the dense layer on x itself: its activation then follows it directly."""
    x, w, b, s_in, s_out = wildcard(), is_const(), is_const(), wildcard(), wildcard()
    flat = is_op("relax.reshape")(x, s_in)
    dense = is_op("relax.matmul")(flat, w)
    biased = is_op("relax.add")(dense, b)
    pat = is_op("relax.reshape")(dense | biased, s_out)

    def r(expr, m):
        shape = shape_of(m[x])
        rows, cols = shape_of(m[w])
        if len(shape) != 3 or shape_of(m[flat]) != (shape[0] * shape[1], rows) or shape_of(expr) != shape[:2] + (cols,):
            return expr
        y = relax.op.matmul(m[x], m[w])
        if b not in m:
            return y
        bias = _channel_vector(m[b], shape[:2] + (cols,))  # numpy's rule, as for any bias
        return expr if bias is None else relax.op.add(y, _const(bias))

    return pat, r


def _nan_guarded_bound():
    """``where(isnan(b), r, b)`` on constants (the ONNX importer's guard on each Clip bound), in numpy:
    FoldConstant would build two LLVM functions per Clip, seconds on a MobileNet."""
    bound, other, repl = is_const(), is_const(), is_const()
    pat = is_op("relax.where")(is_op("relax.isnan")(bound), repl, other)

    def r(expr, m):
        b, o, v = _value(m[bound]), _value(m[other]), _value(m[repl])
        if not (b.shape == o.shape and np.array_equal(b, o, equal_nan=True)) or b.dtype != v.dtype:
            return expr
        out = np.where(np.isnan(b), v, b)
        return relax.const(out.astype(b.dtype)) if out.shape == tuple(shape_of(expr)) else expr

    return pat, r


@tvm.transform.module_pass(opt_level=0, name="FoldNanGuardedClipBounds")
def fold_clip_bounds(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function) and not (func.attrs and "Codegen" in func.attrs):
            mod[gv] = _rewrite_to_fixpoint(func, [_nan_guarded_bound()])
    return mod


@tvm.transform.module_pass(opt_level=0, name="FoldAffineIntoTensilOps")
def fold_affine(mod: tvm.IRModule, ctx) -> tvm.IRModule:
    for gv, func in list(mod.functions.items()):
        if not isinstance(func, relax.Function) or (func.attrs and "Codegen" in func.attrs):
            continue
        func = _rewrite_to_fixpoint(func, [_index_arithmetic()])
        func = _rewrite_to_fixpoint(
            func,
            [_inference_batch_norm(), _split_to_slices(), _stacked_extremum_to_pairs(), _permute_into_dense(),
             _channel_shuffle(), _pixel_rearrangement(), _dense_on_rows(), _where_to_prelu(), _max_min_to_prelu(),
             *_softplus_forms(), _adaptive_pool_of_whole_windows(), _elu_negative_part(), *_norm_layers(),
             *_normalization_by_parts()],
        )  # fmt: skip
        func = _te_minmax_to_relax(mod, func)
        func = _pads_to_relax(mod, func)
        func = _rewrite_to_fixpoint(func, [_merge_pad_into_conv()])
        func = _rewrite_to_fixpoint(func, _rules())
        func = _rewrite_to_fixpoint(func, [_scale_to_conv(), _reshape_chains()])
        mod[gv] = func
    return mod


def prepare_for_tensil(mod: tvm.IRModule) -> tvm.IRModule:
    """Constant folding, batch-norm folding, affine folding (see the module docstring)."""
    seq = tvm.transform.Sequential(
        [
            lift_1d,
            fold_clip_bounds,
            relax.transform.FoldConstant(),
            relax.transform.CanonicalizeBindings(),
            fold_affine,
            relax.transform.FoldConstant(),
            relax.transform.CanonicalizeBindings(),
            relax.transform.DeadCodeElimination(),
        ]
    )
    return seq(mod)
