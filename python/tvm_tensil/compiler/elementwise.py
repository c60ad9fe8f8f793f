"""Element-wise activations: everything the compiler knows about each, in one table.

An activation runs in the accumulators through the SIMD unit, fused onto the op that produces its
input (an epilogue) or as a layer of its own. Each entry says what the op means in float
(calibration and the simulation of scales), which constant vectors it reads, how it changes when
its tensor is stored at a shift, and the SIMD instructions it is. Adding an activation is one entry
here, its pattern check and its frontend conversion (docs/adding-an-op.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..isa.instructions import SIMDOp
from .exp import Exp, emit_exp, exp_constants, exp_meaning
from .rsqrt import RSqrt, emit_rsqrt, rsqrt_constants, rsqrt_meaning
from .simd import Scratch, finest, fits, into, on_grid, powers_of_two
from .smooth import SMOOTH, Smooth, emit_smooth, smooth_constants, smooth_meaning, smooth_simulated

if TYPE_CHECKING:
    from ..numbers import DataType
    from .lir import LIR

_U, _G = Scratch(0), Scratch(2)  # a HardSwish's |x| scaled and its part


@dataclass(frozen=True)
class NoAttrs:
    """An op without parameters."""


@dataclass(frozen=True)
class LeakyRelu:
    alpha: float  # 0 <= alpha <= 1


@dataclass(frozen=True)
class PRelu:
    """``x`` where positive, else ``alpha[c] * x``: one slope per channel. All at most 1, it is
    ``max(x, alpha x)``; all at least 1, ``min(x, alpha x)``; else ``x + (alpha - 1) min(x, 0)``."""

    alpha: tuple[float, ...]


@dataclass(frozen=True)
class Clip:
    lo: float  # -inf or inf: no bound on that side
    hi: float


@dataclass(frozen=True)
class HardSigmoid:
    """``clip(alpha * x + beta, 0, hi)`` (``swish``: times x, a HardSwish), for inputs stored times
    ``2**shift`` and results times ``2**out_shift``."""

    alpha: float = 1 / 6
    beta: float = 0.5
    swish: bool = False
    shift: int = 0
    out_shift: int = 0
    hi: float = 1.0  # 6 for x * relu6(x + 3), a HardSwish whose 1/6 went elsewhere

    @property
    def symmetric(self) -> bool:
        """A HardSwish whose factor rises from 0 to ``hi`` around x = 0 (``beta = hi / 2``; every
        importer's form): computed as ``hi * max(x, 0)`` minus a small quadratic."""
        return self.swish and self.alpha > 0 and self.beta == self.hi / 2


@dataclass(frozen=True)
class Rescale:
    """The value as it is, for inputs stored times ``2**shift`` and results times ``2**out_shift``:
    a layer's accumulators kept at a finer scale than its result's (each product rounded finer),
    brought to the result's by SIMD multiplies by powers of two."""

    shift: int = 0
    out_shift: int = 0


@dataclass(frozen=True)
class Activation:
    attrs: type
    meaning: Callable[[np.ndarray, Any], np.ndarray]  # in float (values as stored: times 2**shift)
    # The constant vectors its instructions read (data type, lanes): a float fills every lane, a
    # tuple gives each lane its value (per-channel constants: one vector per channel block).
    constants: Callable[[Any, "DataType", int], list]
    # (lir, first accumulator, count, attrs, constants, channel block of the vectors or None: mixed)
    emit: Callable[["LIR", int, int, Any, dict, "int | None"], None]
    # Its attrs for inputs stored times 2**k_in and results times 2**k_out (equal but for ops that
    # change the scale).
    scaled: Callable[[Any, int, int], Any] = lambda attrs, k_in, k_out: attrs
    # Its value as its sequence computes it at a data type, where that differs from ``meaning``
    # beyond the result's rounding (the simulation's model of the device).
    simulated: Callable[[np.ndarray, Any, "DataType"], np.ndarray] | None = None


def _emit_abs(lir: "LIR", acc: int, count: int, attrs, cvec: dict, block=None) -> None:
    lir.simd_run(SIMDOp.ABS, acc, count)


def _emit_relu(lir: "LIR", acc: int, count: int, attrs, cvec: dict, block=None) -> None:
    lir.simd(SIMDOp.ZERO, dest=1)
    lir.simd_run(SIMDOp.MAX, acc, count, left=0, right=1)


def _slope_shift(v: float, dt: "DataType") -> int:
    """The power of two a slope off the data type's grid is scaled up by, into [0.5, 1], where the
    grid holds more of its bits (times any stored x it stays in range); 0 for a slope on the grid or
    of 0.5 or more. On the FP16BP8 grid 0.1 would be 0.1016 and 0.01 would be 0.0117; scaled,
    0.1001 and 0.01001."""
    if not 0 < abs(v) < 0.5 or fits(v, dt):
        return 0
    return int(np.floor(np.log2(1.0 / abs(v))))


def _scaled_slope(alpha: float, dt: "DataType") -> tuple[float, list[float]]:
    """``alpha`` as ``slope * prod(factors)``: the slope scaled up (``_slope_shift``), the factors the
    powers of two taking it back."""
    k = _slope_shift(alpha, dt)
    return on_grid(alpha * 2.0**k, dt), powers_of_two(-k, dt)


def _leaky_relu_constants(a: LeakyRelu, dt: "DataType", lanes: int) -> list:
    slope, factors = _scaled_slope(a.alpha, dt)
    return [slope, *factors]


def _emit_leaky_relu(lir: "LIR", acc: int, count: int, attrs: LeakyRelu, cvec: dict, block=None) -> None:
    """max(x, alpha * x), for 0 <= alpha <= 1 (alpha times x as the scaled slope times x, brought down)."""
    slope, factors = _scaled_slope(attrs.alpha, lir.arch.data_type)
    steps = [(SIMDOp.MOVE, 1, 0, 0, cvec[slope], None), (SIMDOp.MULTIPLY, 1, 0, 1, "v", None)]
    steps += [(SIMDOp.MULTIPLY, 1, 0, 1, cvec[f], None) for f in factors]
    lir.simd_runs(acc, count, steps + [(SIMDOp.MAX, 0, 0, 1, "v", "v")])


def _emit_clip(lir: "LIR", acc: int, count: int, attrs: Clip, cvec: dict, block=None) -> None:
    if attrs.lo == 0 and np.isfinite(attrs.hi) and lir.arch.simd_relu:  # a ReLU6: min(x, hi), then the flag
        lir.simd(SIMDOp.MOVE, dest=1, left=0, read=cvec[float(attrs.hi)])
        lir.simd_run(SIMDOp.MIN, acc, count, left=0, right=1, relu=True)
        return
    for bound, fn in ((attrs.hi, SIMDOp.MIN), (attrs.lo, SIMDOp.MAX)):
        if np.isfinite(bound):  # an infinite bound clips nothing beyond saturation
            lir.simd(SIMDOp.MOVE, dest=1, left=0, read=cvec[float(bound)])
            lir.simd_run(fn, acc, count, left=0, right=1)


@dataclass(frozen=True)
class _HardSigmoidPlan:
    """The constants of a HardSigmoid's SIMD sequence (all at stored scales)."""

    bounds: tuple[float | None, float | None]  # x clipped to these first (None: x cannot pass it)
    slope: float  # alpha * 2**m, with as many bits as the data type holds without saturating
    factors: list[float]  # powers of two taking slope * x to the result's scale
    offset: float
    one: float


def _hard_sigmoid_plan(a: HardSigmoid, dt: "DataType") -> _HardSigmoidPlan:
    """x is first clipped to its active range widened by an eighth (where it can go beyond it), so
    no step saturates: a saturation the device counts would be a false alarm to the user. The
    widening keeps the results of x beyond the active range exactly 0 or 1 after the final clip."""
    k = a.shift
    ends = sorted((-a.beta / a.alpha, (a.hi - a.beta) / a.alpha))
    margin = (ends[1] - ends[0]) / 8
    bounds = tuple(b * 2.0**k if abs(b) * 2.0**k < dt.max_float else None for b in (ends[0] - margin, ends[1] + margin))
    active = max(abs(e) for e in ends) + margin
    limit = dt.max_float / 2  # |x * 2**k * alpha * 2**m| stays below it
    m = int(np.floor(np.log2(limit / (abs(a.alpha) * active)))) - k
    m = min(m, int(np.floor(np.log2(limit / abs(a.alpha)))))  # the slope itself representable
    out = a.out_shift - k if a.swish else a.out_shift  # x times the factor at scale out: at out_shift
    if a.hi * 2.0**out > dt.max_float:  # the factor's top would saturate, and the result with it
        raise ValueError(
            f"hard_sigmoid: a result stored {a.out_shift - k} powers of two finer than its input does not "
            f"fit {dt.name}; build without calibration or with a wider data type"
        )
    slope, factors = a.alpha * 2.0**m, powers_of_two(out - k - m, dt)
    return _HardSigmoidPlan(bounds, slope, factors, a.beta * 2.0**out, a.hi * 2.0**out)


@dataclass(frozen=True)
class _HardSwishPlan:
    """A symmetric HardSwish (``beta = hi / 2``) as ``hi * max(x, 0) - T(|x|)``, ``T(u) = alpha u
    (c - u)`` for ``u = min(|x|, c)``, ``c = beta / alpha``: the small quadratic ``T`` (at most
    ``hi**2 / (16 alpha)``) is computed at fine scales, so the result keeps the input's bits (x
    times a factor of 8 fractional bits would lose them). Constants at stored scales."""

    low: float | None  # -c at x's scale: x clipped there first (None: a fine input, scaled down first)
    factors_in: list[float]  # a fine input to the working scale (where c fits) before |x|
    top: float  # c at the working scale: |x| clipped there
    factors_u: list[float]  # u (at the working scale) to its scale in the product
    c: float  # c at u's scale in the product
    factors_w: list[float]  # c - u to its scale in the product
    factors_q: list[float]  # the product u (c - u) to its scale before alpha
    alpha: float  # alpha * 2**m: the product to T's scale (1: no multiply)
    factors_t: list[float]  # T to the scale of the difference
    factors_relu: list[float]  # max(x, 0) times hi, to the scale of the difference (none: 1)
    factors_out: list[float]  # the difference to the result's scale


def _product_error(alpha: float, t: int, t_q: int, t_t: int, peak: float, dt: "DataType") -> float:
    """The error of a product (at most ``peak``) rounded from scale ``t_q`` to ``t``, then times
    ``alpha`` as the constant ``alpha * 2**(t_t - t)`` on the data type's grid."""
    constant = alpha * 2.0 ** (t_t - t)
    if constant > dt.max_float:
        return math.inf
    rounded = alpha * 2.0 ** -(dt.binary_point + t + 1) if t < t_q else 0.0
    return abs(on_grid(constant, dt) / constant - 1) * alpha * peak + rounded


@lru_cache(maxsize=256)
def _hard_swish_plan(a: HardSigmoid, dt: "DataType") -> _HardSwishPlan:
    k, o, c = a.shift, a.out_shift, a.beta / a.alpha
    scale = lambda shift: powers_of_two(shift, dt)[::-1]  # noqa: E731  (down by the small step first)
    j = min(k, finest(c, dt))  # u = min(|x|, c) exactly at x's scale where c fits there
    t_q = finest(c * c / 4, dt)  # u (c - u) is at most c^2 / 4: both at about half its scale
    s_u = (t_q + 1) // 2
    # T = u (c - u) at scale t times alpha 2^m, at T's finest scale: the t (rounding the product
    # there) and the constant's rounding that err least together.
    t_t = finest(a.alpha * c * c / 4, dt)
    t = min(range(t_q - dt.binary_point, t_q + 1), key=lambda t: _product_error(a.alpha, t, t_q, t_t, c * c / 4, dt))
    # The difference hi * max(x, 0) - T at the finest scale up to x's or the result's where
    # hi * max(x, 0) fits: for every input, or for x up to c (beyond, it is the result).
    every = k - math.ceil(math.log2(a.hi))
    d = min(max(o, k), max(every, min(finest(a.hi * min(c, dt.max_float * 2.0**-k), dt), o)))
    relu = a.hi * 2.0 ** (d - k)
    factors_relu = [] if relu == 1 else [relu] if fits(relu, dt) else [*scale(d - k), a.hi]
    return _HardSwishPlan(
        -on_grid(c * 2.0**k, dt) if j == k else None, scale(j - k), on_grid(c * 2.0**j, dt), scale(s_u - j),
        on_grid(c * 2.0**s_u, dt), scale(t_q - 2 * s_u), scale(t - t_q), on_grid(a.alpha * 2.0 ** (t_t - t), dt),
        scale(d - t_t), factors_relu, scale(o - d),
    )  # fmt: skip


def _emit_hard_swish(lir: "LIR", acc: int, count: int, a: HardSigmoid, cvec: dict) -> None:
    """Per vector: u = min(|x|, c) into U; T = (c - u) * u * alpha into G; then hi * max(x, 0)
    minus T, written back."""
    p = _hard_swish_plan(a, lir.arch.data_type)
    u, g = cvec[_U], cvec[_G]
    R = 1  # the register
    if p.low is None:  # a fine input: scaled down first (nothing can saturate), then |x|, clipped
        steps = [(SIMDOp.MOVE, R, 0, 0, cvec[p.factors_in[0]], None), (SIMDOp.MULTIPLY, R, 0, R, "v", None)]
        steps += [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_in[1:]]
        steps.append((SIMDOp.ABS, R, R, 0, None, None))
    else:  # clipped to -c first (|x| of the lowest value saturates)
        steps = [(SIMDOp.MOVE, R, 0, 0, cvec[p.low], None), (SIMDOp.MAX, R, 0, R, "v", None),
                 (SIMDOp.ABS, R, R, 0, None, None)]  # fmt: skip
    steps.append((SIMDOp.MIN, R, 0, R, cvec[p.top], None))
    steps = into(steps + [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_u], u)
    steps.append((SIMDOp.SUBTRACT, R, 0, R, cvec[p.c], None))  # c - u
    steps += [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_w]
    steps.append((SIMDOp.MULTIPLY, R, 0, R, u, None))
    steps += [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_q]
    if p.alpha != 1:
        steps.append((SIMDOp.MULTIPLY, R, 0, R, cvec[p.alpha], None))
    steps = into(steps + [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_t], g)
    steps += [(SIMDOp.ZERO, R, 0, 0, None, None), (SIMDOp.MAX, R, 0, R, "v", None)]
    steps += [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_relu]
    steps.append((SIMDOp.SUBTRACT, R, R, 0, g, None))
    steps += [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_out]
    lir.simd_runs(acc, count, into(steps, "v"))


def _hard_sigmoid_meaning(x: np.ndarray, a: HardSigmoid) -> np.ndarray:
    v = x / 2.0**a.shift
    h = np.minimum(np.maximum(a.alpha * v + a.beta, 0.0), a.hi)
    return (v * h if a.swish else h) * 2.0**a.out_shift


def _hard_sigmoid_constants(a: HardSigmoid, dt: "DataType", lanes: int) -> list:
    if a.symmetric:
        q = _hard_swish_plan(a, dt)
        values = ([] if q.low is None else [q.low]) + q.factors_in + [q.top, *q.factors_u, q.c, *q.factors_w]
        return values + [
            *q.factors_q,
            *([q.alpha] if q.alpha != 1 else []),
            *q.factors_t,
            *q.factors_relu,
            *q.factors_out,
            _U,
            _G,
        ]
    p = _hard_sigmoid_plan(a, dt)
    return [b for b in p.bounds if b is not None] + [p.slope, *p.factors, p.offset, 0.0, p.one]


def _emit_hard_sigmoid(lir: "LIR", acc: int, count: int, a: HardSigmoid, cvec: dict, block=None) -> None:
    """Per vector, in register 1: x clipped to its widened active range, times the slope, to its
    scale, plus the offset, clipped to [0, 1]; then out (a HardSwish: x times it)."""
    if a.symmetric:
        return _emit_hard_swish(lir, acc, count, a, cvec)
    p = _hard_sigmoid_plan(a, lir.arch.data_type)
    lo, hi = p.bounds
    if lo is None and hi is None:
        steps = [(SIMDOp.MOVE, 1, 0, 0, cvec[p.slope], None), (SIMDOp.MULTIPLY, 1, 0, 1, "v", None)]
    else:
        first, second = (hi, SIMDOp.MIN), (lo, SIMDOp.MAX)
        if hi is None:
            first, second = second, first
        steps = [(SIMDOp.MOVE, 1, 0, 0, cvec[first[0]], None), (first[1], 1, 0, 1, "v", None)]
        if second[0] is not None:
            steps.append((second[1], 1, 0, 1, cvec[second[0]], None))
        steps.append((SIMDOp.MULTIPLY, 1, 0, 1, cvec[p.slope], None))
    steps += [(SIMDOp.MULTIPLY, 1, 0, 1, cvec[f], None) for f in p.factors]
    steps += [(SIMDOp.ADD, 1, 0, 1, cvec[p.offset], None), (SIMDOp.MAX, 1, 0, 1, cvec[0.0], None)]
    steps.append((SIMDOp.MIN, 1, 0, 1, cvec[p.one], None))
    steps.append((SIMDOp.MULTIPLY, 0, 0, 1, "v", "v") if a.swish else (SIMDOp.MOVE, 0, 1, 0, None, "v"))
    lir.simd_runs(acc, count, steps)


def _prelu_mixed(a: PRelu) -> bool:
    return min(a.alpha) < 1 < max(a.alpha)


def _prelu_values(a: PRelu, lanes: int) -> list[list[float]]:
    """The slopes (slopes minus one where they lie on both sides of 1) per channel block, padded
    with zeros to whole vectors."""
    values = [v - 1 for v in a.alpha] if _prelu_mixed(a) else list(a.alpha)
    padded = values + [0.0] * (-len(values) % lanes)
    return [padded[i : i + lanes] for i in range(0, len(padded), lanes)]


def _prelu_scales(values: list[float], dt: "DataType") -> list[int]:
    """Each lane's ``_slope_shift``, at most the binary point (a factor's inverse stays on the grid)."""
    return [min(_slope_shift(v, dt), dt.binary_point) for v in values]


def _prelu_block(values: list[float], dt: "DataType") -> tuple[tuple, tuple | None]:
    """A block's scaled slopes, and the factors (one per lane) bringing their products down (None:
    no slope scaled)."""
    k = _prelu_scales(values, dt)
    slopes = tuple(v * 2.0**e for v, e in zip(values, k))
    return slopes, (tuple(2.0**-e for e in k) if any(k) else None)


def _prelu_blocks(a: PRelu, dt: "DataType", lanes: int) -> list:
    """The vectors of scaled slopes and of factors per channel block; and zero, for the mixed form."""
    blocks = [_prelu_block(b, dt) for b in _prelu_values(a, lanes)]
    return [v for pair in blocks for v in pair if v is not None] + ([0.0] if _prelu_mixed(a) else [])


def _emit_prelu(lir: "LIR", acc: int, count: int, a: PRelu, cvec: dict, block=None) -> None:
    """max(x, alpha x) (min for slopes above 1; x + (alpha - 1) min(x, 0) for both), alpha the
    block's vector of slopes (each scaled up, its product brought down by a vector of factors)."""
    if block is None:
        raise ValueError("prelu: per-channel slopes need vectors of one channel block (fused into a conv)")
    slopes, factors = _prelu_block(_prelu_values(a, lir.arch.array_size)[block], lir.arch.data_type)
    down = [(SIMDOp.MULTIPLY, 1, 0, 1, cvec[factors], None)] if factors else []
    if _prelu_mixed(a):
        steps = [(SIMDOp.MOVE, 1, 0, 0, cvec[0.0], None), (SIMDOp.MIN, 1, 0, 1, "v", None)]
        steps += [(SIMDOp.MULTIPLY, 1, 0, 1, cvec[slopes], None), *down, (SIMDOp.ADD, 0, 0, 1, "v", "v")]
    else:
        pick = SIMDOp.MAX if max(a.alpha) <= 1 else SIMDOp.MIN
        steps = [(SIMDOp.MOVE, 1, 0, 0, cvec[slopes], None), (SIMDOp.MULTIPLY, 1, 0, 1, "v", None), *down]
        steps.append((pick, 0, 0, 1, "v", "v"))
    lir.simd_runs(acc, count, steps)


def _emit_rescale(lir: "LIR", acc: int, count: int, a: Rescale, cvec: dict, block=None) -> None:
    for factor in powers_of_two(a.out_shift - a.shift, lir.arch.data_type):
        lir.simd(SIMDOp.MOVE, dest=1, left=0, read=cvec[factor])
        lir.simd_run(SIMDOp.MULTIPLY, acc, count, left=0, right=1)


ACTIVATIONS: dict[str, Activation] = {
    "relu": Activation(NoAttrs, lambda x, a: np.maximum(x, 0.0), lambda a, dt, n: [], _emit_relu),
    "abs": Activation(NoAttrs, lambda x, a: np.abs(x), lambda a, dt, n: [], _emit_abs),
    "leaky_relu": Activation(
        LeakyRelu, lambda x, a: np.maximum(x, a.alpha * x), _leaky_relu_constants, _emit_leaky_relu
    ),
    "prelu": Activation(
        PRelu,
        lambda x, a: np.where(x > 0, x, np.asarray(a.alpha) * x),
        _prelu_blocks,
        _emit_prelu,
    ),
    "clip": Activation(
        Clip,
        lambda x, a: np.minimum(np.maximum(x, a.lo), a.hi),
        lambda a, dt, n: [v for v in (a.lo, a.hi) if np.isfinite(v)],
        _emit_clip,
        lambda a, k_in, k_out: replace(a, lo=a.lo * 2.0**k_out, hi=a.hi * 2.0**k_out),
    ),
    "hard_sigmoid": Activation(
        HardSigmoid,
        _hard_sigmoid_meaning,
        _hard_sigmoid_constants,
        _emit_hard_sigmoid,
        lambda a, k_in, k_out: replace(a, shift=a.shift + k_in, out_shift=a.out_shift + k_out),
    ),
    "rescale": Activation(
        Rescale,
        lambda x, a: x * 2.0 ** (a.out_shift - a.shift),
        lambda a, dt, n: powers_of_two(a.out_shift - a.shift, dt),
        _emit_rescale,
        lambda a, k_in, k_out: replace(a, shift=a.shift + k_in, out_shift=a.out_shift + k_out),
    ),
    "exp": Activation(
        Exp,
        exp_meaning,
        exp_constants,
        emit_exp,
        lambda a, k_in, k_out: replace(a, shift=a.shift + k_in, out_shift=a.out_shift + k_out),
    ),
    "rsqrt": Activation(
        RSqrt,
        rsqrt_meaning,
        rsqrt_constants,
        emit_rsqrt,
        lambda a, k_in, k_out: replace(a, shift=a.shift + k_in, out_shift=a.out_shift + k_out),
    ),
    **{
        name: Activation(
            Smooth,
            smooth_meaning,
            smooth_constants,
            emit_smooth,
            lambda a, k_in, k_out: replace(a, shift=a.shift + k_in, out_shift=a.out_shift + k_out),
            smooth_simulated,
        )
        for name in SMOOTH
    },  # fmt: skip
}


def changes_scale(op: str) -> bool:
    """Whether an activation's result has a scale of its own (its constants take its input from its
    scale to the result's): the others keep their input's."""
    return op in ("hard_sigmoid", "rescale", "exp", "rsqrt") or op in SMOOTH


def constants(epilogue, dt: "DataType", lanes: int) -> list:
    """The constant vectors an epilogue's ops read (one each, in first use order)."""
    return list(dict.fromkeys(v for op, attrs in epilogue for v in ACTIVATIONS[op].constants(attrs, dt, lanes)))


def emit(lir: "LIR", acc: int, count: int, epilogue, cvec: dict, block: int | None = None) -> None:
    """An epilogue's ops on ``count`` accumulator vectors from ``acc``, in place; ``block``: the
    channel block they hold (None: they may hold several, no per-channel constants)."""
    for op, attrs in _clips_joined(epilogue) if lir.arch.simd_relu else epilogue:
        ACTIVATIONS[op].emit(lir, acc, count, attrs, cvec, block)


def _clips_joined(epilogue) -> list:
    """Consecutive clips whose ranges meet as one (a ReLU6 imported as max(x, 0) and min(x, 6)): with
    the SIMD ReLU flag, a clip from 0 is one instruction a vector."""
    out: list = []
    for op, attrs in epilogue:
        if op == "clip" and out and out[-1][0] == "clip":
            lo, hi = max(out[-1][1].lo, attrs.lo), min(out[-1][1].hi, attrs.hi)
            if lo <= hi:
                out[-1] = ("clip", Clip(lo, hi))
                continue
        out.append((op, attrs))
    return out


def meaning(op: str, x: np.ndarray, attrs, rounding: "DataType | None" = None) -> np.ndarray:
    """The activation's value; with ``rounding``, as its sequence computes it at that data type."""
    act = ACTIVATIONS[op]
    if rounding is not None and act.simulated is not None:
        return act.simulated(x, attrs, rounding)
    return act.meaning(x, attrs)


def scaled(epilogue, k: int) -> list:
    """An epilogue for values stored times ``2**k`` (before and after it)."""
    return [(op, ACTIVATIONS[op].scaled(attrs, k, k)) for op, attrs in epilogue]
