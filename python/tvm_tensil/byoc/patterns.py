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

import numpy as np
import tvm
from tvm import relax
from tvm.relax.backend.pattern_registry import get_patterns_with_prefix, register_patterns
from tvm.relax.dpl import is_const, is_op, wildcard
from tvm.relax.transform import FusionPattern, PatternCheckContext

from ..arch import Architecture, load_arch
from ..compiler.exp import exp_reason
from ..compiler.rsqrt import RSqrt, rsqrt_constants, rsqrt_reason
from ..compiler.smooth import smooth_reason
from .broadcast import broadcast_reason
from .frontend import (
    SMOOTH_OPS,
    FrontendError,
    channel_slice,
    picks_pixels,
    prelu_slopes,
    shape_of,
    softplus_reason,
    spatial_gather,
)  # fmt: skip
from .prepare import prepare_for_tensil


@dataclass
class Rejections:
    """Why ops were left on the CPU: (op, shape) -> reason."""

    reasons: dict[tuple[str, tuple], str] = field(default_factory=dict)

    def add(self, expr, reason: str, replace: bool = False) -> bool:
        try:
            key = (expr.op.name, shape_of(expr))
        except Exception:  # noqa: BLE001 - a report detail must never break partitioning
            key = (str(getattr(getattr(expr, "op", None), "name", "?")), ())
        if replace:
            self.reasons[key] = reason
        else:
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


def _rank(expr, ranks=(2, 3, 4)) -> str | None:
    try:
        s = shape_of(expr)
    except ValueError as e:
        return str(e)
    if len(s) in ranks:
        return None
    takes = {(4,): "NCHW", (2, 4): "NCHW or (B, K)", (2, 3, 4): "NCHW, (B, K) or (B, S, K)"}[tuple(ranks)]
    return f"rank {len(s)} tensor (the TCU takes {takes} here)"


def _needs_registers(arch: Architecture, what: str) -> str | None:
    if arch.simd_registers_depth < 1:
        return f"{what} needs a SIMD register; this architecture has simd_registers_depth = 0"
    return None


# -- check functions: one per op, each returns None (offload) or the reason it stays on the CPU --


def check_conv2d(arch: Architecture, call: relax.Call) -> str | None:
    a = call.attrs
    x, w = call.args
    if err := _float32(x, w) or _rank(x, (4,)):
        return err
    if (a.data_layout, a.kernel_layout, a.out_layout) != ("NCHW", "OIHW", "NCHW"):
        return f"layout {a.data_layout}/{a.kernel_layout}: the TCU path takes NCHW/OIHW"
    if a.out_dtype and str(a.out_dtype) not in ("", "float32", "void"):
        return f"out_dtype {a.out_dtype}"
    co, ci_g, kh, kw = shape_of(w)
    ci = shape_of(x)[1]
    dh, dw = (int(d) for d in a.dilation)
    n = arch.array_size
    window = ((kh - 1) * dh + 1) * ((kw - 1) * dw + 1) * math.ceil(ci / n)
    if window + 2 * (n + 1) + 1 > arch.local_depth:
        return f"a {kh}x{kw} window over {ci} channels needs {window} local vectors; local_depth is {arch.local_depth}"
    return None


def check_conv2d_transpose(arch: Architecture, call: relax.Call) -> str | None:
    """A transposed conv runs as one conv per output phase: each phase needs a tap, and an input
    window that starts inside the input."""
    a = call.attrs
    x, w = call.args
    if err := _float32(x, w) or _rank(x, (4,)):
        return err
    if (a.data_layout, a.kernel_layout, a.out_layout) != ("NCHW", "IOHW", "NCHW"):
        return f"layout {a.data_layout}/{a.kernel_layout}: the TCU path takes NCHW/IOHW"
    if int(a.groups) != 1:
        return f"grouped transposed convolution (groups = {int(a.groups)})"
    if any(int(d) != 1 for d in a.dilation):
        return "dilated transposed convolution"
    ci, _, kh, kw = shape_of(w)
    out_hw = shape_of(call)[2:]
    for k, s, pad, size in zip((kh, kw), (int(v) for v in a.strides), (int(p) for p in a.padding[:2]), out_hw):
        for phase in range(min(s, size)):
            taps = -(-(k - (phase + pad) % s) // s)
            if taps < 1:
                return f"kernel {kh}x{kw} smaller than its stride: some outputs get no tap"
    window = kh * kw * math.ceil(ci / arch.array_size)
    if window + 2 * (arch.array_size + 1) + 1 > arch.local_depth:
        return f"a {kh}x{kw} window over {ci} channels needs {window} local vectors; local_depth is {arch.local_depth}"
    return None


def check_matmul(arch: Architecture, call: relax.Call) -> str | None:
    x, w = call.args
    if err := _float32(x, w):
        return err
    if len(shape_of(x)) not in (2, 3) or len(shape_of(w)) != 2:
        return "matmul of other than a (B, K) or (B, S, K) input and a 2-D constant weight"
    return None


def check_flatten(arch: Architecture, call: relax.Call) -> str | None:
    """A reshape feeding a dense layer: free when it is an NCHW flatten (the weights are permuted)."""
    src, dst = shape_of(call.args[0]), shape_of(call)
    if len(src) != 4 or dst != (src[0], src[1] * src[2] * src[3]):
        return f"reshape {src} -> {dst} is not an NCHW flatten"
    hw = src[2] * src[3]
    if src[0] > 1 and hw & (hw - 1):
        return f"flatten of a batch of {src[0]} maps of {src[2]}x{src[3]} (h*w not a power of two)"
    return None


def check_bias(arch: Architecture, add: relax.Call) -> str | None:
    x, c = add.args if isinstance(add.args[1], tvm.ir.GenericConst) else add.args[::-1]
    if reason := broadcast_reason(shape_of(c), shape_of(x)):
        return f"bias: {reason}"
    return None


def check_activation(arch: Architecture, call: relax.Call) -> str | None:
    op = call.op.name
    if err := _float32(call.args[0]) or _rank(call.args[0]) or _needs_registers(arch, op):
        return err
    if op in SMOOTH_OPS and (err := smooth_reason(SMOOTH_OPS[op], arch.data_type)):
        return err
    if op == "relax.exp" and (err := exp_reason(arch.data_type)):
        return err
    if op == "relax.clip":
        lo, hi = float(call.args[1].value), float(call.args[2].value)
        if lo > hi:
            return f"clip bounds [{lo}, {hi}] are empty"
        # Bounds beyond the data type's range clip nothing more than saturation does.
    if op == "relax.nn.leakyrelu" and not 0.0 <= float(call.attrs.alpha) <= 1.0:
        return f"leaky relu alpha {float(call.attrs.alpha)} outside [0, 1] (computed as max(x, alpha*x))"
    return None


def check_rsqrt_eps(arch: Architecture, add: relax.Call) -> str | None:
    """The ``x + eps`` of ``rsqrt(x + eps)`` (a normalization's factor per channel): one epsilon
    above 0, so that the result is finite at 0."""
    eps = add.args[1].value.numpy().reshape(-1)
    if not (eps.size and np.all(eps == eps[0]) and eps[0] > 0):
        return (
            f"rsqrt of x + {eps[:4].tolist()}{'...' * (eps.size > 4)} (one epsilon above 0: the TCU's is finite at 0)"
        )
    x = add.args[0]
    if err := _float32(x) or _rank(x) or _needs_registers(arch, "rsqrt") or rsqrt_reason(arch.data_type):
        return err
    # Its cubic pieces' constants (at the data type's own scales; calibrated ones take about as many)
    # share the accumulators with the values it works on.
    vectors = len(dict.fromkeys(rsqrt_constants(RSqrt(float(eps[0])), arch.data_type, arch.array_size)))
    if vectors > arch.accumulator_depth // 4:
        return f"rsqrt's {vectors} constant vectors take over a quarter of the {arch.accumulator_depth} accumulators"
    return None


def check_rsqrt_alone(arch: Architecture, call: relax.Call) -> str | None:
    """An rsqrt with nothing added before it (``rsqrt(x + eps)`` is another pattern's)."""
    return "rsqrt without an epsilon added before it (x + eps, eps > 0: the TCU's is finite at 0)"


def check_softplus(arch: Architecture, call: relax.Call) -> str | None:
    return check_activation(arch, call) or softplus_reason(call)


def check_prelu(arch: Architecture, call: relax.Call) -> str | None:
    if err := _float32(call.args[0]) or _rank(call.args[0]) or _needs_registers(arch, "prelu"):
        return err
    if prelu_slopes(call) is None:
        return "prelu slopes that are not one per channel (or one for all)"
    return None


def check_add(arch: Architecture, call: relax.Call) -> str | None:
    x, y = call.args
    if err := _float32(x, y):
        return err
    if isinstance(y, tvm.ir.GenericConst) or isinstance(x, tvm.ir.GenericConst):
        xx, c = (x, y) if isinstance(y, tvm.ir.GenericConst) else (y, x)
        if reason := _rank(xx) or broadcast_reason(shape_of(c), shape_of(xx)):
            return f"add of a constant: {reason}"
        return None
    return _two_maps(arch, "add", x, y)


def _two_maps(arch: Architecture, what: str, x, y) -> str | None:
    """Two maps element by element: of one shape, or a map (N, C, H, W) and a per-channel vector
    (N, C, 1, 1) broadcast over H and W (which goes through a SIMD register)."""
    if err := _rank(x) or _rank(y):
        return err
    sx, sy = shape_of(x), shape_of(y)
    if sx == sy:
        return None
    if len(sx) == len(sy) == 4 and ((sx[2:] == (1, 1) and sx[:2] == sy[:2]) or (sy[2:] == (1, 1) and sy[:2] == sx[:2])):
        return _needs_registers(arch, what)
    return (
        f"{what} with broadcasting ({sx} and {sy}): the TCU takes two maps of one shape or a map and "
        "a per-channel (N, C, 1, 1) vector"
    )


def check_binary(arch: Architecture, call: relax.Call) -> str | None:
    """subtract, multiply, maximum, minimum of two maps (a constant operand is another op's: a
    per-channel multiply folds into a conv, a scalar maximum is a clip)."""
    x, y = call.args[:2]
    what = call.op.name.removeprefix("relax.")
    if err := _float32(x, y):
        return err
    for c in (x, y):
        if isinstance(c, tvm.ir.GenericConst):
            return f"{what} by a constant of shape {shape_of(c)} (the TCU folds per-channel constants into convs)"
    return _two_maps(arch, what, x, y) or (_needs_registers(arch, what) if shape_of(x) == shape_of(y) else None)


def check_resize(arch: Architecture, call: relax.Call) -> str | None:
    a = call.attrs
    if err := _float32(call.args[0]) or _rank(call.args[0], (4,)):
        return err
    if a.layout != "NCHW":
        return f"resize layout {a.layout}"
    if str(a.method) not in ("nearest_neighbor", "linear"):
        return f"{a.method} resize (nearest and linear run on the TCU)"
    if str(a.coordinate_transformation_mode) == "tf_crop_and_resize":
        return "tf_crop_and_resize"
    return None


def check_gather(arch: Architecture, call: relax.Call) -> str | None:
    """An op that only picks pixels (``frontend.spatial_gather``): rows of the map are copied
    through local memory, a row of every channel block at a time."""
    if err := _float32(call.args[0]) or _rank(call.args[0], (4,)):
        return err
    try:
        spatial_gather(call)
    except FrontendError as e:
        return str(e)
    _, c, _, w = shape_of(call.args[0])
    blocks = math.ceil(c / arch.array_size)
    if w * blocks > arch.local_depth:
        return f"a row of {w} pixels x {blocks} channel blocks does not fit local memory"
    return None


def check_pad(arch: Architecture, call: relax.Call) -> str | None:
    a = call.attrs
    width = [int(v) for v in a.pad_width]
    if err := _float32(call.args[0]) or _rank(call.args[0], (4,)):
        return err
    if picks_pixels(call):
        return check_gather(arch, call)
    if str(a.pad_mode) != "constant":
        return f"{a.pad_mode} padding (only constant)"
    if any(width[:4]):
        return "padding of the batch or channel axes (only H and W)"
    if min(width) < 0:
        return "negative padding (a crop)"
    return None


def check_slice(arch: Architecture, call: relax.Call) -> str | None:
    if err := _float32(call.args[0]):
        return err
    if picks_pixels(call):
        return check_gather(arch, call)  # (a crop)
    try:
        channel_slice(call)
    except FrontendError as e:
        return str(e)
    return None


def check_concat(arch: Architecture, call: relax.Call) -> str | None:
    tup = call.args[0]
    if not isinstance(tup, relax.Tuple):
        return "concat of a tuple variable"
    if err := _float32(*tup.fields):
        return err
    shapes = [shape_of(t) for t in tup.fields]
    axis = int(call.attrs.axis) % len(shapes[0])
    if len(shapes[0]) != 4 or axis != 1:
        return f"concat along axis {axis} of rank-{len(shapes[0])} tensors (only channels of NCHW)"
    if len({(s[0], s[2], s[3]) for s in shapes}) != 1:
        return "concat of tensors with different batch or spatial sizes"
    return None


def check_minmax(arch: Architecture, call: relax.Call) -> str | None:
    x, c = call.args
    if err := _float32(x, c) or _rank(x):
        return err
    if c.value.numpy().size != 1:
        return f"{call.op.name} with a non-scalar bound"
    return _needs_registers(arch, call.op.name)


def check_pool(arch: Architecture, call: relax.Call) -> str | None:
    a = call.attrs
    if err := _float32(call.args[0]) or _rank(call.args[0], (4,)):
        return err
    if a.layout != "NCHW" or a.out_layout != "NCHW":
        return f"pool layout {a.layout}"
    if a.ceil_mode and call.op.name == "relax.nn.avg_pool2d":
        return "ceil_mode average pooling (its last windows count fewer values)"
    kh, kw = (int(k) for k in a.pool_size)
    if call.op.name == "relax.nn.avg_pool2d":
        # Each value enters the sum scaled by 2^-s, 2^s >= kh*kw; keep at least half the
        # fraction bits for it (see docs/compiler.md, error bounds).
        shift = math.ceil(math.log2(kh * kw)) if kh * kw > 1 else 0
        if shift > arch.data_type.binary_point // 2:
            return (
                f"average pool over {kh}x{kw} values: {arch.data_type.name} keeps too few fraction bits "
                f"to sum them exactly enough (at most {1 << (arch.data_type.binary_point // 2)} values)"
            )
    return _needs_registers(arch, "pooling")


def check_global_pool(arch: Architecture, call: relax.Call) -> str | None:
    x = call.args[0]
    if err := _float32(x) or _rank(x, (4,)):
        return err
    out = shape_of(call)
    if call.op.name == "relax.nn.adaptive_avg_pool2d":
        if call.attrs.layout != "NCHW" or tuple(out[2:]) != (1, 1):
            sizes = f"{shape_of(x)[2:]} to {out[2:]}"
            return f"adaptive average pool of {sizes} (only 1x1, or sizes that divide the map, NCHW)"
    else:  # mean
        axes = sorted(int(v) % 4 for v in call.attrs.axis) if call.attrs.axis is not None else []
        if axes != [2, 3]:
            return f"mean over axes {axes} (only H and W)"
    return _needs_registers(arch, "average pooling")


def check_reshape(arch: Architecture, call: relax.Call) -> str | None:
    if err := _float32(call.args[0]):
        return err
    src, dst = shape_of(call.args[0]), shape_of(call)
    ok = (
        src == dst
        or (len(src) == 4 and src[2:] == (1, 1) and dst == src[:2])
        or (len(dst) == 4 and dst[2:] == (1, 1) and src == dst[:2])
        # Rows of pixels regrouped ((B, S, K) <-> (B * S, K)): the same pixels in the same order.
        or (len(src) in (2, 3) and len(dst) in (2, 3) and src[-1] == dst[-1])
    )
    return None if ok else f"reshape {src} -> {dst} reorders data in the TCU layout"


# Which check applies to which annotated part of a pattern. Fused patterns check every part.
_PART_CHECKS = {
    "conv": check_conv2d,
    "conv_transpose": check_conv2d_transpose,
    "matmul": check_matmul,
    "flatten": check_flatten,
    "bias": check_bias,
    "relu": check_activation,
    "rsqrt_eps": check_rsqrt_eps,
}


def _checker(arch: Architecture, rejections: Rejections, root_check=None):
    """A FusionPattern check: every annotated part passes its check function, or the root op
    is recorded in ``rejections`` with the first reason and stays on the CPU. A check that
    fails unexpectedly rejects too: a build never aborts over a pattern."""

    def check(ctx: PatternCheckContext) -> bool:
        root = ctx.annotated_expr["root"]
        try:
            parts = [(fn, ctx.annotated_expr[key]) for key, fn in _PART_CHECKS.items() if key in ctx.annotated_expr]
            if root_check is not None:
                parts.append((root_check, root))
            for fn, expr in parts:
                if (reason := fn(arch, expr)) is not None:
                    return rejections.add(root, reason)
            return True
        except Exception as e:  # noqa: BLE001 - reported, and the op stays on the CPU
            return rejections.add(root, f"not offloaded: {type(e).__name__}: {e}")

    return check


# Single ops: pattern name -> (Relax op, number of operands, check). Arguments after those operands
# (a slice's axes and bounds) match anything; the check reads them.
SINGLE_OPS = {
    "add": ("relax.add", 2, check_add),
    "relu": ("relax.nn.relu", 1, check_activation),
    "abs": ("relax.abs", 1, check_activation),
    "leaky_relu": ("relax.nn.leakyrelu", 1, check_activation),
    "prelu": ("relax.nn.prelu", 2, check_prelu),
    "clip": ("relax.clip", 3, check_activation),
    "sigmoid": ("relax.sigmoid", 1, check_activation),
    "tanh": ("relax.tanh", 1, check_activation),
    "silu": ("relax.nn.silu", 1, check_activation),
    "gelu": ("relax.nn.gelu", 1, check_activation),
    "softplus": ("relax.nn.softplus", 1, check_softplus),
    "exp": ("relax.exp", 1, check_activation),
    "rsqrt_alone": ("relax.rsqrt", 1, check_rsqrt_alone),
    "max_pool2d": ("relax.nn.max_pool2d", 1, check_pool),
    "avg_pool2d": ("relax.nn.avg_pool2d", 1, check_pool),
    "global_avg_pool": ("relax.nn.adaptive_avg_pool2d", 1, check_global_pool),
    "mean": ("relax.mean", 1, check_global_pool),
    "reshape": ("relax.reshape", 2, check_reshape),
    "concat": ("relax.concat", 1, check_concat),
    "slice": ("relax.strided_slice", 1, check_slice),
    "take": ("relax.take", 2, check_gather),
    "flip": ("relax.flip", 1, check_gather),
    "pad": ("relax.nn.pad", 1, check_pad),
    "resize2d": ("relax.image.resize2d", 2, check_resize),
    "maximum": ("relax.maximum", 2, check_minmax),
    "minimum": ("relax.minimum", 2, check_minmax),
    "subtract": ("relax.subtract", 2, check_binary),
    "multiply": ("relax.multiply", 2, check_binary),
    "maximum_maps": ("relax.maximum", 2, check_binary),
    "minimum_maps": ("relax.minimum", 2, check_binary),
}


def make_patterns(arch: Architecture, rejections: Rejections) -> list[FusionPattern]:
    """The Tensil patterns for ``arch``, generic first, fused last (later = higher priority)."""
    x = wildcard
    pats = []
    for name, (op, arity, check) in SINGLE_OPS.items():
        operands = [is_const()] if name in ("maximum", "minimum") else []
        pattern = is_op(op)(*([x() for _ in range(arity - len(operands))] + operands), varg_default_wildcard=True)
        pats.append(FusionPattern(f"tensil.{name}", pattern, {"root": pattern}, _checker(arch, rejections, check)))

    conv = is_op("relax.nn.conv2d")(x(), is_const())
    convt = is_op("relax.nn.conv2d_transpose")(x(), is_const())
    matmul = is_op("relax.matmul")(x(), is_const())
    flat = is_op("relax.reshape")(x(), x())
    flat_mm = is_op("relax.matmul")(flat, is_const())
    check = _checker(arch, rejections)
    # Each base, then its fused forms: bias, relu, bias + relu.
    for base_name, base, parts in (
        ("conv2d", conv, {"conv": conv}),
        ("conv2d_transpose", convt, {"conv_transpose": convt}),
        ("matmul", matmul, {"matmul": matmul}),
        ("flatten_matmul", flat_mm, {"matmul": flat_mm, "flatten": flat}),
    ):
        pats.append(FusionPattern(f"tensil.{base_name}", base, dict(parts, root=base), check))
    for base_name, base, parts in (
        ("conv2d", conv, {"conv": conv}),
        ("conv2d_transpose", convt, {"conv_transpose": convt}),
        ("matmul", matmul, {"matmul": matmul}),
        ("flatten_matmul", flat_mm, {"matmul": flat_mm, "flatten": flat}),
    ):
        biased = is_op("relax.add")(base, is_const())
        relu = is_op("relax.nn.relu")(base)
        bias_relu = is_op("relax.nn.relu")(biased)
        for suffix, pattern, ann in (
            ("bias", biased, {"bias": biased}),
            ("relu", relu, {"relu": relu}),
            ("bias_relu", bias_relu, {"bias": biased, "relu": bias_relu}),
        ):
            pats.append(FusionPattern(f"tensil.{base_name}_{suffix}", pattern, dict(parts, **ann, root=pattern), check))
    # rsqrt(x + eps) last (first matched): a conv's bias pattern would otherwise take the eps.
    eps = is_op("relax.add")(x(), is_const())
    rsqrt = is_op("relax.rsqrt")(eps)
    pats.append(FusionPattern("tensil.rsqrt", rsqrt, {"root": rsqrt, "rsqrt_eps": eps}, check))
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
    mod = relax.transform.FuseOpsByPattern(list(reversed(patterns)), bind_constants=True, annotate_codegen=False)(mod)
    mod = relax.transform.MergeCompositeFunctions()(mod)
    return mod


# The architecture the patterns in TVM's registry check against (``partition_for_tensil(mod, arch)``
# makes them for any other).
REGISTRY_ARCH = "pynqz1"


def register_tensil_patterns() -> None:
    """Put the patterns in TVM's pattern registry (``get_patterns_with_prefix("tensil")``), as the
    cuBLAS and CUTLASS backends do; their check functions judge for ``REGISTRY_ARCH``."""
    if get_patterns_with_prefix("tensil."):
        return
    patterns = make_patterns(load_arch(REGISTRY_ARCH), Rejections())
    register_patterns([(p.name, p.pattern, dict(p.annotation_patterns), p.check) for p in patterns])


register_tensil_patterns()
