"""Tensil patterns and ``partition_for_tensil``.

Patterns are named ``tensil.<op>[_<epilogue>]``; each has a check function that looks at
shapes, data types, layouts and what fits the architecture, so that an op the TCU cannot run
exactly stays on the CPU instead of being miscompiled. The reason every rejected op stays on
the CPU is recorded for the build report. Generic patterns come first and fused ones last,
as in TVM's pattern registry (later = higher priority).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, wildcard
from tvm.relax.transform import FusionPattern, PatternCheckContext

from ..arch import Architecture, load_arch
from .frontend import shape_of
from .prepare import prepare_for_tensil


@dataclass
class Rejections:
    """Why ops were left on the CPU: (op, shape) -> reason."""

    reasons: dict[tuple[str, tuple], str] = field(default_factory=dict)

    def add(self, expr, reason: str) -> bool:
        try:
            key = (expr.op.name, shape_of(expr))
        except Exception:  # noqa: BLE001 - a report detail must never break partitioning
            key = (str(getattr(getattr(expr, "op", None), "name", "?")), ())
        self.reasons.setdefault(key, reason)
        return False

    def reason(self, op: str, shape: tuple) -> str | None:
        return self.reasons.get((op, shape))


def _float32(*exprs) -> str | None:
    for e in exprs:
        try:
            if str(e.ty.dtype) != "float32":
                return f"data type {e.ty.dtype}: the TCU path takes float32 models (converted to fixed point)"
        except AttributeError:
            return "operand without a tensor type"
    return None


def _rank(expr, ranks=(2, 4)) -> str | None:
    try:
        s = shape_of(expr)
    except ValueError:
        return "dynamic shape"
    return None if len(s) in ranks else f"rank {len(s)} tensor (the TCU takes NCHW or 2-D)"


def _per_channel(const_shape: tuple, x_shape: tuple) -> bool:
    """A constant that broadcasts along channels only: (C,), (1, C) or (1, C, 1, 1)."""
    if len(x_shape) not in (2, 4):
        return False
    c = x_shape[1]
    return const_shape in ((c,), (1, c), (1, c, 1, 1)) and (len(x_shape) == 4 or const_shape != (1, c, 1, 1))


def make_patterns(arch: Architecture, rejections: Rejections) -> list[FusionPattern]:
    """The Tensil patterns for ``arch``, generic first, fused last."""
    n = arch.array_size

    def reject(ctx: PatternCheckContext, reason: str) -> bool:
        return rejections.add(ctx.annotated_expr["root"], reason)

    def needs_registers(ctx, what) -> bool:
        if arch.simd_registers_depth < 1:
            return reject(ctx, f"{what} needs a SIMD register; this architecture has simd_registers_depth = 0")
        return True

    def check_conv(ctx: PatternCheckContext) -> bool:
        call = ctx.annotated_expr["conv"]
        a = call.attrs
        x, w = call.args
        if (err := _float32(x, w) or _rank(x, (4,))):
            return reject(ctx, err)
        if (a.data_layout, a.kernel_layout, a.out_layout) != ("NCHW", "OIHW", "NCHW"):
            return reject(ctx, f"layout {a.data_layout}/{a.kernel_layout}: the TCU path takes NCHW/OIHW")
        if a.out_dtype and str(a.out_dtype) not in ("", "float32", "void"):
            return reject(ctx, f"out_dtype {a.out_dtype}")
        co, ci_g, kh, kw = shape_of(w)
        ci = shape_of(x)[1]
        groups = int(a.groups)
        if groups != 1 and not (groups == ci == co and ci_g == 1):
            return reject(ctx, f"grouped convolution (groups = {groups}); only groups = 1 and depthwise run on the TCU")
        dh, dw = (int(d) for d in a.dilation)
        pb = 1 << max(0, math.ceil(ci / n) - 1).bit_length()
        window = ((kh - 1) * dh + 1) * ((kw - 1) * dw + 1) * pb
        if window + 2 * (n + 1) + 1 > arch.local_depth:
            return reject(ctx, f"a {kh}x{kw} window over {ci} channels needs {window} local vectors; "
                               f"local_depth is {arch.local_depth}")
        return check_epilogue(ctx)

    def check_matmul(ctx: PatternCheckContext) -> bool:
        call = ctx.annotated_expr["matmul"]
        x, w = call.args
        if (err := _float32(x, w)):
            return reject(ctx, err)
        if len(shape_of(x)) != 2 or len(shape_of(w)) != 2:
            return reject(ctx, "matmul of other than a 2-D input and a 2-D constant weight")
        return check_epilogue(ctx)

    def check_bias(ctx: PatternCheckContext) -> bool:
        if "bias" not in ctx.annotated_expr:
            return True
        add = ctx.annotated_expr["bias"]
        x, c = add.args if isinstance(add.args[1], tvm.ir.GenericConst) else add.args[::-1]
        if not _per_channel(shape_of(c), shape_of(x)):
            return reject(ctx, f"bias of shape {shape_of(c)} does not broadcast along channels")
        return True

    def check_epilogue(ctx: PatternCheckContext) -> bool:
        if not check_bias(ctx):
            return False
        for key in ("relu", "clip", "leakyrelu"):
            if key in ctx.annotated_expr and not check_activation(ctx, ctx.annotated_expr[key]):
                return False
        return True

    def check_activation(ctx, call) -> bool:
        op = call.op.name
        if (err := _float32(call.args[0]) or _rank(call.args[0])):
            return reject(ctx, err)
        if not needs_registers(ctx, op):
            return False
        if op == "relax.clip":
            lo, hi = float(call.args[1].value), float(call.args[2].value)
            if lo > hi:
                return reject(ctx, f"clip bounds [{lo}, {hi}] are empty")
            # Bounds beyond the data type's range clip nothing more than saturation does.
        if op == "relax.nn.leakyrelu" and not 0.0 <= float(call.attrs.alpha) <= 1.0:
            return reject(ctx, f"leaky relu alpha {float(call.attrs.alpha)} outside [0, 1] (computed as max(x, alpha*x))")
        return True

    def check_add(ctx: PatternCheckContext) -> bool:
        call = ctx.annotated_expr["root"]
        x, y = call.args
        if (err := _float32(x, y) or _rank(x) or _rank(y)):
            return reject(ctx, err)
        if isinstance(y, tvm.ir.GenericConst) or isinstance(x, tvm.ir.GenericConst):
            xx, c = (x, y) if isinstance(y, tvm.ir.GenericConst) else (y, x)
            if not _per_channel(shape_of(c), shape_of(xx)):
                return reject(ctx, f"add of a constant of shape {shape_of(c)} that is not per channel")
            return True
        if shape_of(x) != shape_of(y):
            return reject(ctx, f"add with broadcasting ({shape_of(x)} + {shape_of(y)})")
        return True

    def check_act(ctx: PatternCheckContext) -> bool:
        return check_activation(ctx, ctx.annotated_expr["root"])

    def check_resize(ctx: PatternCheckContext) -> bool:
        call = ctx.annotated_expr["root"]
        a = call.attrs
        if (err := _float32(call.args[0]) or _rank(call.args[0], (4,))):
            return reject(ctx, err)
        if a.layout != "NCHW":
            return reject(ctx, f"resize layout {a.layout}")
        if str(a.method) not in ("nearest_neighbor", "linear"):
            return reject(ctx, f"{a.method} resize (nearest and linear run on the TCU)")
        if str(a.coordinate_transformation_mode) == "tf_crop_and_resize":
            return reject(ctx, "tf_crop_and_resize")
        return True

    def check_pad(ctx: PatternCheckContext) -> bool:
        call = ctx.annotated_expr["root"]
        a = call.attrs
        width = [int(v) for v in a.pad_width]
        if (err := _float32(call.args[0]) or _rank(call.args[0], (4,))):
            return reject(ctx, err)
        if str(a.pad_mode) != "constant":
            return reject(ctx, f"{a.pad_mode} padding (only constant)")
        if any(width[:4]):
            return reject(ctx, "padding of the batch or channel axes (only H and W)")
        return True

    def check_concat(ctx: PatternCheckContext) -> bool:
        call = ctx.annotated_expr["root"]
        tup = call.args[0]
        if not isinstance(tup, relax.Tuple):
            return reject(ctx, "concat of a tuple variable")
        shapes = [shape_of(t) for t in tup.fields]
        if any(_float32(t) for t in tup.fields):
            return reject(ctx, _float32(*tup.fields))
        axis = int(call.attrs.axis) % len(shapes[0])
        if len(shapes[0]) != 4 or axis != 1:
            return reject(ctx, f"concat along axis {axis} of rank-{len(shapes[0])} tensors (only channels of NCHW)")
        if len({(s[0], s[2], s[3]) for s in shapes}) != 1:
            return reject(ctx, "concat of tensors with different batch or spatial sizes")
        return True

    def check_minmax(ctx: PatternCheckContext) -> bool:
        call = ctx.annotated_expr["root"]
        x, c = call.args
        if (err := _float32(x, c) or _rank(x)):
            return reject(ctx, err)
        if c.value.numpy().size != 1:
            return reject(ctx, f"{call.op.name} with a non-scalar bound")
        return needs_registers(ctx, call.op.name)

    def check_pool(ctx: PatternCheckContext) -> bool:
        call = ctx.annotated_expr["root"]
        a = call.attrs
        if (err := _float32(call.args[0]) or _rank(call.args[0], (4,))):
            return reject(ctx, err)
        if a.layout != "NCHW" or a.out_layout != "NCHW":
            return reject(ctx, f"pool layout {a.layout}")
        if a.ceil_mode:
            return reject(ctx, "ceil_mode pooling")
        if call.op.name == "relax.nn.max_pool2d" and not needs_registers(ctx, "max pooling"):
            return False
        if call.op.name == "relax.nn.avg_pool2d" and not needs_registers(ctx, "average pooling"):
            return False
        return True

    def check_global_pool(ctx: PatternCheckContext) -> bool:
        call = ctx.annotated_expr["root"]
        x = call.args[0]
        if (err := _float32(x) or _rank(x, (4,))):
            return reject(ctx, err)
        out = shape_of(call)
        if call.op.name == "relax.nn.adaptive_avg_pool2d":
            if call.attrs.layout != "NCHW" or tuple(out[2:]) != (1, 1):
                return reject(ctx, f"adaptive average pool to {out[2:]} (only 1x1, NCHW)")
        else:  # mean
            axes = sorted(int(v) % 4 for v in call.attrs.axis) if call.attrs.axis is not None else []
            if axes != [2, 3] or not call.attrs.keepdims:
                return reject(ctx, f"mean over axes {axes} (only H and W with keepdims)")
        return needs_registers(ctx, "average pooling")

    def check_reshape(ctx: PatternCheckContext) -> bool:
        call = ctx.annotated_expr["root"]
        src, dst = shape_of(call.args[0]), shape_of(call)
        ok = (len(src) == 4 and src[2:] == (1, 1) and dst == src[:2]) or (
            len(dst) == 4 and dst[2:] == (1, 1) and src == dst[:2])
        if not ok:
            return reject(ctx, f"reshape {src} -> {dst} reorders data in the TCU layout")
        return _float32(call.args[0]) is None or reject(ctx, _float32(call.args[0]))

    x = wildcard
    conv = is_op("relax.nn.conv2d")(x(), is_const())
    matmul = is_op("relax.matmul")(x(), is_const())

    def with_bias(p):
        return is_op("relax.add")(p, is_const())

    def single(name, pattern, check):
        return FusionPattern(name, pattern, {"root": pattern}, check)

    pats = [
        FusionPattern("tensil.conv2d", conv, {"conv": conv, "root": conv}, check_conv),
        FusionPattern("tensil.matmul", matmul, {"matmul": matmul, "root": matmul}, check_matmul),
        single("tensil.add", is_op("relax.add")(x(), x()), check_add),
        single("tensil.relu", is_op("relax.nn.relu")(x()), check_act),
        single("tensil.leaky_relu", is_op("relax.nn.leakyrelu")(x()), check_act),
        single("tensil.clip", is_op("relax.clip")(x(), x(), x()), check_act),
        single("tensil.max_pool2d", is_op("relax.nn.max_pool2d")(x()), check_pool),
        single("tensil.avg_pool2d", is_op("relax.nn.avg_pool2d")(x()), check_pool),
        single("tensil.global_avg_pool", is_op("relax.nn.adaptive_avg_pool2d")(x()), check_global_pool),
        single("tensil.mean", is_op("relax.mean")(x()), check_global_pool),
        single("tensil.reshape", is_op("relax.reshape")(x(), x()), check_reshape),
        single("tensil.concat", is_op("relax.concat")(wildcard()), check_concat),
        single("tensil.pad", is_op("relax.nn.pad")(x()), check_pad),
        single("tensil.resize2d", is_op("relax.image.resize2d")(x(), x()), check_resize),
        single("tensil.maximum", is_op("relax.maximum")(x(), is_const()), check_minmax),
        single("tensil.minimum", is_op("relax.minimum")(x(), is_const()), check_minmax),
    ]
    # A dense layer reading an NCHW flatten: the flatten is free (the weights are permuted).
    flat = is_op("relax.reshape")(x(), x())
    flat_mm = is_op("relax.matmul")(flat, is_const())

    def check_flatten_matmul(ctx: PatternCheckContext) -> bool:
        src = shape_of(ctx.annotated_expr["flatten"].args[0])
        dst = shape_of(ctx.annotated_expr["flatten"])
        if len(src) != 4 or dst != (src[0], src[1] * src[2] * src[3]):
            return reject(ctx, f"reshape {src} -> {dst} is not an NCHW flatten")
        hw = src[2] * src[3]
        if src[0] > 1 and hw & (hw - 1):
            return reject(ctx, f"flatten of a batch of {src[0]} maps of {src[2]}x{src[3]} (h*w not a power of two)")
        return check_matmul(ctx)

    # Fused patterns: conv/matmul with bias and activation epilogues.
    for base_name, base, key, check in (("conv2d", conv, "conv", check_conv), ("matmul", matmul, "matmul", check_matmul),
                                        ("flatten_matmul", flat_mm, "matmul", check_flatten_matmul)):
        biased = with_bias(base)
        for suffix, pattern, ann in (
            ("bias", biased, {key: base, "bias": biased}),
            ("relu", is_op("relax.nn.relu")(base), {key: base}),
            ("bias_relu", is_op("relax.nn.relu")(biased), {key: base, "bias": biased}),
        ):
            if "relu" in suffix:
                ann = dict(ann, relu=pattern)
            if base_name == "flatten_matmul":
                ann = dict(ann, flatten=flat)
            pats.append(FusionPattern(f"tensil.{base_name}_{suffix}", pattern, dict(ann, root=pattern), check))
    pats.insert(len(pats) - 9, FusionPattern("tensil.flatten_matmul", flat_mm,
                                             {"matmul": flat_mm, "flatten": flat, "root": flat_mm}, check_flatten_matmul))
    return pats


def partition_for_tensil(mod: tvm.IRModule, arch="pynqz1", rejections: Rejections | None = None) -> tvm.IRModule:
    """Partition a Relax module: every op the TCU can run goes into a Tensil partition.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module, e.g. from ``tvm.relax.frontend.onnx.from_onnx(model,
        keep_params_in_input=False)``; weights must be constants.
    arch : str, pathlib.Path, Architecture or dict
        The TCU architecture: a preset name (``tvm-tensil arch --list``) or a ``.tarch``.
    rejections : Rejections, optional
        Filled with the reason each unsupported op stays on the CPU.

    Returns
    -------
    tvm.IRModule
        The module with neighbouring offloaded ops merged into functions carrying
        ``Codegen="tensil"``; ``RunCodegen`` (or ``tvm_tensil.build``) compiles them.
    """
    arch = load_arch(arch)
    rejections = rejections if rejections is not None else Rejections()
    mod = prepare_for_tensil(mod)
    patterns = make_patterns(arch, rejections)
    mod = relax.transform.FuseOpsByPattern(list(reversed(patterns)), bind_constants=True,
                                           annotate_codegen=False)(mod)
    mod = relax.transform.MergeCompositeFunctions()(mod)
    return mod
