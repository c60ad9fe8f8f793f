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

if TYPE_CHECKING:
    from ..numbers import DataType
    from .lir import LIR


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
class Smooth:
    """A smooth function (a key of ``SMOOTH``: sigmoid, tanh, SiLU, GELU) for inputs stored times
    ``2**shift`` and results times ``2**out_shift``."""

    function: str
    shift: int = 0
    out_shift: int = 0


@dataclass(frozen=True)
class Rescale:
    """The value as it is, for inputs stored times ``2**shift`` and results times ``2**out_shift``:
    a layer's accumulators kept at a finer scale than its result's (each product rounded finer),
    brought to the result's by SIMD multiplies by powers of two."""

    shift: int = 0
    out_shift: int = 0


@dataclass(frozen=True)
class Scratch:
    """An accumulator vector an activation keeps an intermediate in while it works on a vector
    (placed with the constants, which fill it with zeros)."""

    index: int


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


def _emit_relu(lir: "LIR", acc: int, count: int, attrs, cvec: dict, block=None) -> None:
    lir.simd(SIMDOp.ZERO, dest=1)
    lir.simd_run(SIMDOp.MAX, acc, count, left=0, right=1)


def _emit_leaky_relu(lir: "LIR", acc: int, count: int, attrs: LeakyRelu, cvec: dict, block=None) -> None:
    """max(x, alpha * x), for 0 <= alpha <= 1."""
    a = cvec[float(attrs.alpha)]
    steps = [(SIMDOp.MOVE, 1, 0, 0, a, None), (SIMDOp.MULTIPLY, 1, 0, 1, "v", None), (SIMDOp.MAX, 0, 0, 1, "v", "v")]
    lir.simd_runs(acc, count, steps)


def _emit_clip(lir: "LIR", acc: int, count: int, attrs: Clip, cvec: dict, block=None) -> None:
    for bound, fn in ((attrs.hi, SIMDOp.MIN), (attrs.lo, SIMDOp.MAX)):
        if np.isfinite(bound):  # an infinite bound clips nothing beyond saturation
            lir.simd(SIMDOp.MOVE, dest=1, left=0, read=cvec[float(bound)])
            lir.simd_run(fn, acc, count, left=0, right=1)


def powers_of_two(shift: int, dt: "DataType") -> list[float]:
    """Powers of two the data type holds exactly whose product is ``2**shift`` (one SIMD multiply
    each)."""
    top = int(np.floor(np.log2(dt.max_float)))
    out = []
    while shift < -dt.binary_point or shift > top:
        step = -dt.binary_point if shift < 0 else top
        out.append(2.0**step)
        shift -= step
    return out + ([2.0**shift] if shift else [])


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


def _on_grid(value: float, dt: "DataType") -> float:
    return float(dt.to_float(dt.from_float(value)))


def _fits(value: float, dt: "DataType") -> bool:
    """``value`` is on the data type's grid and within its range."""
    return abs(value) <= dt.max_float and _on_grid(value, dt) == value


def _finest(peak: float, dt: "DataType") -> int:
    """The finest power of two ``2**s`` at which values up to ``peak`` stay below the data type's
    largest value (with a little room for the roundings on their way)."""
    return int(np.floor(np.log2(dt.max_float / (peak * 1.01))))


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
    return abs(_on_grid(constant, dt) / constant - 1) * alpha * peak + rounded


@lru_cache(maxsize=256)
def _hard_swish_plan(a: HardSigmoid, dt: "DataType") -> _HardSwishPlan:
    k, o, c = a.shift, a.out_shift, a.beta / a.alpha
    scale = lambda shift: powers_of_two(shift, dt)[::-1]  # noqa: E731  (down by the small step first)
    j = min(k, _finest(c, dt))  # u = min(|x|, c) exactly at x's scale where c fits there
    t_q = _finest(c * c / 4, dt)  # u (c - u) is at most c^2 / 4: both at about half its scale
    s_u = (t_q + 1) // 2
    # T = u (c - u) at scale t times alpha 2^m, at T's finest scale: the t (rounding the product
    # there) and the constant's rounding that err least together.
    t_t = _finest(a.alpha * c * c / 4, dt)
    t = min(range(t_q - dt.binary_point, t_q + 1), key=lambda t: _product_error(a.alpha, t, t_q, t_t, c * c / 4, dt))
    # The difference hi * max(x, 0) - T at the finest scale up to x's or the result's where
    # hi * max(x, 0) fits: for every input, or for x up to c (beyond, it is the result).
    every = k - math.ceil(math.log2(a.hi))
    d = min(max(o, k), max(every, min(_finest(a.hi * min(c, dt.max_float * 2.0**-k), dt), o)))
    relu = a.hi * 2.0 ** (d - k)
    factors_relu = [] if relu == 1 else [relu] if _fits(relu, dt) else [*scale(d - k), a.hi]
    return _HardSwishPlan(
        -_on_grid(c * 2.0**k, dt) if j == k else None, scale(j - k), _on_grid(c * 2.0**j, dt), scale(s_u - j),
        _on_grid(c * 2.0**s_u, dt), scale(t_q - 2 * s_u), scale(t - t_q), _on_grid(a.alpha * 2.0 ** (t_t - t), dt),
        scale(d - t_t), factors_relu, scale(o - d),
    )  # fmt: skip


def _into(steps: list, where) -> list:
    """``steps`` with the last one also writing its result to ``where``."""
    op, dest, left, right, read, _ = steps[-1]
    return steps[:-1] + [(op, dest, left, right, read, where)]


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
    steps = _into(steps + [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_u], u)
    steps.append((SIMDOp.SUBTRACT, R, 0, R, cvec[p.c], None))  # c - u
    steps += [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_w]
    steps.append((SIMDOp.MULTIPLY, R, 0, R, u, None))
    steps += [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_q]
    if p.alpha != 1:
        steps.append((SIMDOp.MULTIPLY, R, 0, R, cvec[p.alpha], None))
    steps = _into(steps + [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_t], g)
    steps += [(SIMDOp.ZERO, R, 0, 0, None, None), (SIMDOp.MAX, R, 0, R, "v", None)]
    steps += [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_relu]
    steps.append((SIMDOp.SUBTRACT, R, R, 0, g, None))
    steps += [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_out]
    lir.simd_runs(acc, count, _into(steps, "v"))


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


def _prelu_blocks(a: PRelu, lanes: int) -> list:
    """The slopes (slopes minus one where they lie on both sides of 1) per channel block, padded
    with zeros to whole vectors; and zero, for the mixed form."""
    values = [v - 1 for v in a.alpha] if _prelu_mixed(a) else list(a.alpha)
    padded = values + [0.0] * (-len(values) % lanes)
    return [tuple(padded[i : i + lanes]) for i in range(0, len(padded), lanes)] + ([0.0] if _prelu_mixed(a) else [])


def _emit_prelu(lir: "LIR", acc: int, count: int, a: PRelu, cvec: dict, block=None) -> None:
    """max(x, alpha x) (min for slopes above 1; x + (alpha - 1) min(x, 0) for both), alpha the
    block's vector of slopes."""
    if block is None:
        raise ValueError("prelu: per-channel slopes need vectors of one channel block (fused into a conv)")
    slopes = cvec[_prelu_blocks(a, lir.arch.array_size)[block]]
    if _prelu_mixed(a):
        steps = [(SIMDOp.MOVE, 1, 0, 0, cvec[0.0], None), (SIMDOp.MIN, 1, 0, 1, "v", None)]
        steps += [(SIMDOp.MULTIPLY, 1, 0, 1, slopes, None), (SIMDOp.ADD, 0, 0, 1, "v", "v")]
    else:
        pick = SIMDOp.MAX if max(a.alpha) <= 1 else SIMDOp.MIN
        steps = [(SIMDOp.MOVE, 1, 0, 0, slopes, None), (SIMDOp.MULTIPLY, 1, 0, 1, "v", None)]
        steps.append((pick, 0, 0, 1, "v", "v"))
    lir.simd_runs(acc, count, steps)


def _emit_rescale(lir: "LIR", acc: int, count: int, a: Rescale, cvec: dict, block=None) -> None:
    for factor in powers_of_two(a.out_shift - a.shift, lir.arch.data_type):
        lir.simd(SIMDOp.MOVE, dest=1, left=0, read=cvec[factor])
        lir.simd_run(SIMDOp.MULTIPLY, acc, count, left=0, right=1)


def _sigmoid(x):
    return np.exp(-np.logaddexp(0.0, -np.asarray(x, dtype=np.float64)))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _normal_cdf(x):
    return 0.5 * (1.0 + _erf(np.asarray(x, dtype=np.float64) / math.sqrt(2.0)))


@dataclass(frozen=True)
class SmoothFunction:
    """How a smooth function is computed from cubic pieces of a part ``p`` over ``u = |x|`` (or,
    with an ``offset``, over ``u = x + offset``: a part that is not symmetric in x): ``"odd"``:
    ``center + sign(x) * p(u)``; ``"relu_minus"``: ``max(x, 0) - p(u) + center`` (x times a
    sigmoid-like function, a softplus: the small part is what is left to compute, so the product
    never has to be formed). Pieces end at ``breaks``; beyond the last, ``p`` is taken as ``limit``."""

    meaning: Callable[[np.ndarray], np.ndarray]
    form: str
    part: Callable[[np.ndarray], np.ndarray]
    center: float
    breaks: tuple[float, ...]
    limit: float
    # Its error over every value of the data type, beyond half a unit of the result (times
    # max(1, |x|) for the "relu_minus" form), measured at FP16BP8 (tests/compiler/test_elementwise.py).
    bound: float
    offset: float = 0.0


def _x_times(cdf, breaks: tuple[float, ...], bound: float) -> SmoothFunction:
    """``x * cdf(x)`` for a symmetric cdf: ``max(x, 0) - u * cdf(-u)``."""
    return SmoothFunction(lambda x: x * cdf(x), "relu_minus", lambda u: u * cdf(-u), 0.0, breaks, 0.0, bound)


def _softplus(x):
    return np.logaddexp(0.0, np.asarray(x, dtype=np.float64))


def _mish(x):
    x = np.asarray(x, dtype=np.float64)
    return x * np.tanh(_softplus(x))


# Mish's part, max(x, 0) - mish(x), over x + MISH_OFFSET: beyond -MISH_OFFSET mish is within
# 5e-4 of 0, beyond 6 within 5e-4 of x.
MISH_OFFSET = 10.0


def _mish_part(u):
    x = np.asarray(u, dtype=np.float64) - MISH_OFFSET
    return np.maximum(x, 0.0) - _mish(x)


SMOOTH: dict[str, SmoothFunction] = {
    "sigmoid": SmoothFunction(_sigmoid, "odd", lambda u: _sigmoid(u) - 0.5, 0.5, (0, 1.125, 3.5, 6.125, 8), 0.5, 7e-4),
    "tanh": SmoothFunction(np.tanh, "odd", np.tanh, 0.0, (0, 0.5, 1.625, 2.625, 4.5), 1.0, 2.1e-3),
    "silu": _x_times(_sigmoid, (0, 1, 2.625, 7.625, 12), 1.4e-3),
    "gelu": _x_times(_normal_cdf, (0, 0.375, 1.375, 4, 5), 1.8e-3),
    # softplus(x) = max(x, 0) + log(1 + exp(-|x|)): the part is log 2 minus the second term.
    "softplus": SmoothFunction(
        _softplus, "relu_minus", lambda u: math.log(2.0) - np.log1p(np.exp(-np.asarray(u, dtype=np.float64))),
        math.log(2.0), (0, 1, 2.5, 5, 8), math.log(2.0), 1.2e-3,
    ),
    # mish(x) = x tanh(softplus(x)) is not x times a symmetric cdf: its part is taken over signed x.
    "mish": SmoothFunction(
        _mish, "relu_minus", _mish_part, -float(_mish_part(0.0)), (0, 6.5, 8.75, 10, 11.5, 16), 0.0, 1.9e-3,
        MISH_OFFSET,
    ),
}  # fmt: skip


def smooth_reason(function: str, dt: "DataType") -> str | None:
    """Why ``function``'s pieces cannot run at data type ``dt`` (None: they can): their stretch of
    u, taken at scale 1, must be one the data type holds, or the pieces compute another function."""
    fn = SMOOTH[function]
    reach = max(fn.breaks[-1], fn.offset)
    if reach > dt.max_float:
        return f"{function}'s cubic pieces run to {reach:g}, beyond {dt.name}'s range (up to {dt.max_float:g})"
    return None


def _piece(fn: SmoothFunction, t0: float, t1: float) -> np.ndarray:
    """Coefficients (c1, c2, c3) of the cubic through 0 and the part's rise over [t0, t1] (the
    last piece rising to the limit) that fits the rise in between by least squares."""
    v = np.linspace(0.0, t1 - t0, 257)
    rise = fn.part(t0 + v) - fn.part(t0)
    if t1 == fn.breaks[-1]:
        rise[-1] = fn.limit - fn.part(t0)
    basis = np.stack([v, v**2, v**3], axis=1)
    # The end exactly (the pieces then sum to the part at every break), the rest by least squares
    # over the coefficients that keep it.
    end, inner = basis[-1], basis[:-1]
    particular = end * rise[-1] / (end @ end)
    keep_end = np.linalg.svd(end[None, :])[2][1:].T
    z = np.linalg.lstsq(inner @ keep_end, rise[:-1] - inner @ particular, rcond=None)[0]
    return particular + keep_end @ z


@dataclass(frozen=True)
class _SmoothPlan:
    """A smooth function's constants, at stored scales: ``u = min(|x|, top) * factors_in`` (u as
    is, unscaled; with an ``offset``: ``u = min(max(x, low), top) * factors_in + offset``), the
    pieces' (start, end, c1, c2, c3) summed at ``2**inner``, then the form's scaling
    (``factors_out`` for the part, ``factors_relu`` for max(x, 0)) and ``center``."""

    top: float | None  # |x| (or x) clipped here (at the input's scale)
    factors_in: list[float]  # x taken to scale 1 before |x| (a fine input)
    factors_up: list[float]  # |x| taken to scale 1 after the clip (a coarse input)
    pieces: list[tuple[float, float, float, float, float]]
    inner: int
    factors_out: list[float]
    factors_relu: list[float]
    center: float
    low: float | None = None  # x clipped here first (a part over signed x)
    offset: float = 0.0


_U, _V, _G = Scratch(0), Scratch(1), Scratch(2)  # |x| scaled, a piece's variable, the pieces' sum
_D = Scratch(3)  # exp: a fine input's rounding to scale 1


@lru_cache(maxsize=256)
def _smooth_plan(a: Smooth, dt: "DataType") -> _SmoothPlan:
    fn = SMOOTH[a.function]
    last = fn.breaks[-1]
    # The part summed at the finest power of two that keeps twice its largest value in range.
    peak = float(np.max(np.abs(fn.part(np.linspace(0.0, last, 4097)))))
    inner = int(np.floor(np.log2(dt.max_float / (2 * peak))))
    pieces = []
    for t0, t1 in zip(fn.breaks, fn.breaks[1:]):
        c = _piece(fn, t0, t1) * 2.0**inner
        pieces.append(tuple(float(v) for v in dt.to_float(dt.from_float(np.array([t0, t1, *c])))))
    at = 1.0 if a.shift > 0 else 2.0**a.shift  # the clip's scale: after the scaling down / before the scaling up
    top, low = (last - fn.offset) * at, -fn.offset * at if fn.offset else None
    # Down by the small step first: a rounding before the large one shrinks with it.
    scaling = lambda shift: powers_of_two(shift, dt)[::-1]  # noqa: E731
    center = fn.center * 2.0**a.out_shift
    if fn.form == "relu_minus":  # taken from the part where it is summed: one rounding to the result
        center = float(dt.to_float(dt.from_float(np.array([fn.center * 2.0**inner])))[0])
    return _SmoothPlan(
        top if low is not None or a.shift <= 0 or last * 2.0**a.shift < dt.max_float else None,
        scaling(-a.shift) if a.shift > 0 else [], scaling(-a.shift) if a.shift < 0 else [], pieces, inner,
        scaling(a.out_shift - inner), scaling(a.out_shift - a.shift), center, low, fn.offset,
    )  # fmt: skip


def _smooth_meaning(x: np.ndarray, a: Smooth) -> np.ndarray:
    return SMOOTH[a.function].meaning(x / 2.0**a.shift) * 2.0**a.out_shift


def _smooth_constants(a: Smooth, dt: "DataType", lanes: int) -> list:
    p = _smooth_plan(a, dt)
    if p.low is not None:
        bounds = [p.low, p.top]
    else:
        bounds = [] if p.top is None else [p.top] if p.factors_in else [-p.top, p.top]
    values = bounds + p.factors_in + p.factors_up + ([p.offset] if p.offset else [])
    values += [v for piece in p.pieces for v in piece]
    values += [1.0, *p.factors_out, *p.factors_relu] + ([p.center] if p.center else [])
    return values + [_U, _V, _G]


def _emit_smooth(lir: "LIR", acc: int, count: int, a: Smooth, cvec: dict, block=None) -> None:
    """Per vector: u = |x| (clipped, to scale 1) into U; each cubic piece of the part over its
    stretch of u, by Horner in register 1, summed into G; then the form (sign, or max(x, 0) minus
    the part) and the result's scale, written back."""
    p = _smooth_plan(a, lir.arch.data_type)
    fn = SMOOTH[a.function]
    u, v, g = cvec[_U], cvec[_V], cvec[_G]
    R = 1  # the register

    if p.low is not None:  # x clipped to the pieces' stretch (at scale 1 for a fine input), then offset
        first, *rest = p.factors_in or [p.low]
        steps = [(SIMDOp.MOVE, R, 0, 0, cvec[first], None)]
        steps.append((SIMDOp.MULTIPLY if p.factors_in else SIMDOp.MAX, R, 0, R, "v", None))
        steps += [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in rest]
        if p.factors_in:
            steps.append((SIMDOp.MAX, R, 0, R, cvec[p.low], None))
        steps.append((SIMDOp.MIN, R, 0, R, cvec[p.top], None))
        steps += [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_up]
        steps.append((SIMDOp.ADD, R, 0, R, cvec[p.offset], None))
    elif p.factors_in:  # a fine input: scaled down first (nothing can saturate), then |x|, clipped
        steps = [(SIMDOp.MOVE, R, 0, 0, cvec[p.factors_in[0]], None), (SIMDOp.MULTIPLY, R, 0, R, "v", None)]
        steps += [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_in[1:]]
        steps.append((SIMDOp.ABS, R, R, 0, None, None))
        if p.top is not None:
            steps.append((SIMDOp.MIN, R, 0, R, cvec[p.top], None))
    else:  # clipped to [-top, top] first (|x| of the lowest value saturates), then scaled up
        steps = [(SIMDOp.MOVE, R, 0, 0, cvec[-p.top], None), (SIMDOp.MAX, R, 0, R, "v", None),
                 (SIMDOp.ABS, R, R, 0, None, None), (SIMDOp.MIN, R, 0, R, cvec[p.top], None)]  # fmt: skip
        steps += [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_up]
    steps = _into(steps, u)
    for i, (t0, t1, c1, c2, c3) in enumerate(p.pieces):
        if i == 0:  # u >= 0 = t0: the register holds u
            steps = _into(steps + [(SIMDOp.MIN, R, 0, R, cvec[t1], None)], v)
        else:
            steps += [(SIMDOp.MOVE, R, 0, 0, cvec[t0], None), (SIMDOp.MAX, R, 0, R, u, None),
                      (SIMDOp.MIN, R, 0, R, cvec[t1], None), (SIMDOp.SUBTRACT, R, R, 0, cvec[t0], v)]  # fmt: skip
        steps += [(SIMDOp.MULTIPLY, R, 0, R, cvec[c3], None), (SIMDOp.ADD, R, 0, R, cvec[c2], None),
                  (SIMDOp.MULTIPLY, R, 0, R, v, None), (SIMDOp.ADD, R, 0, R, cvec[c1], None),
                  (SIMDOp.MULTIPLY, R, 0, R, v, g, i > 0)]  # fmt: skip
    if fn.form == "odd":  # center + sign(x) * part: the sign as 2 * (x >= 0) - 1
        steps += [(SIMDOp.ZERO, R, 0, 0, None, None), (SIMDOp.GREATER_THAN_EQUAL, R, 0, R, "v", None),
                  (SIMDOp.ADD, R, R, R, None, None), (SIMDOp.SUBTRACT, R, R, 0, cvec[1.0], None),
                  (SIMDOp.MULTIPLY, R, 0, R, g, None)]  # fmt: skip
        steps += [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_out]
        if p.center:
            steps.append((SIMDOp.ADD, R, 0, R, cvec[p.center], None))
    else:  # max(x, 0) - part, each at the result's scale
        # The part is never below 0 (its rounded pieces may leave it a unit below at the tail,
        # where max(x, 0) minus it would saturate).
        steps += [(SIMDOp.ZERO, R, 0, 0, None, None), (SIMDOp.MAX, R, 0, R, g, None)]
        if p.center:  # max(x, 0) - (part - center)
            steps.append((SIMDOp.SUBTRACT, R, R, 0, cvec[p.center], None))
        steps = _into(steps + [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_out], g)
        steps += [(SIMDOp.ZERO, R, 0, 0, None, None), (SIMDOp.MAX, R, 0, R, "v", None)]
        steps += [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_relu]
        steps.append((SIMDOp.SUBTRACT, R, R, 0, g, None))
    lir.simd_runs(acc, count, _into(steps, "v"))


@dataclass(frozen=True)
class Exp:
    """e^x for inputs stored times ``2**shift`` and results times ``2**out_shift``."""

    shift: int = 0
    out_shift: int = 0


# e^x is within this many units of the result plus this share of it, beyond the half unit of its
# rounding, for every value of the data type at any scales (tests/compiler/test_elementwise.py).
EXP_UNITS = 1.0
EXP_SHARE = 2.0**-12
# The pieces are fitted within half a unit less: a fine input's rounding, put back at the end,
# rounds once more.
_EXP_FIT_UNITS = EXP_UNITS - 0.5


def exp_reason(dt: "DataType") -> str | None:
    """Why exp cannot run at data type ``dt`` (None: it can)."""
    if dt.width < 16:
        return f"exp's cubic pieces need 16-bit data or wider ({dt.name}'s coefficients would be off by percents)"
    return None


@dataclass(frozen=True)
class _ExpPiece:
    """A cubic over ``v = max(min(w, end), start - reach) - start`` (raw integers of the data type,
    w at scale 1; the last piece without the ``end``: beyond it the result saturates, as it should),
    evaluated at a fine scale and brought to the result's by ``down`` (powers of two). Below
    ``start - reach`` it is at most 0, so the largest piece is the value."""

    start: int
    end: int | None
    reach: int
    coefficients: tuple[int, int, int, int]  # c0..c3
    down: tuple[float, ...]


@dataclass(frozen=True)
class _ExpPlan:
    """e^x = A e^w with ``w = max(x, low) - low`` at scale 1 (A: half a unit of the result). A coarse
    input is clipped at its own scale (``clip``) and taken up (``factors_up``); a fine one is taken
    down first (``factors_in``, then ``cap``: no larger than the input's top) and its rounding ``d``
    (at the input's scale) is put back at the end: ``y + y * d`` (``d_down``, ``d_out``)."""

    clip: float | None  # x's lower bound (None: the input cannot go below it)
    factors_in: list[float]
    cap: float | None
    back: list[float]  # x at scale 1 back to the input's scale (exact)
    factors_up: list[float]
    low: float
    pieces: tuple[_ExpPiece, ...]
    d_down: list[float]  # d taken down before the product (a fine input's product would saturate)
    d_out: list[float]  # y * d to the result's scale


def _exp_run(piece: _ExpPiece, w: np.ndarray, dt: "DataType", sat=None) -> np.ndarray:
    """A piece's SIMD steps on raw ``w``, as the device computes them (raw results)."""
    v = np.maximum(w if piece.end is None else np.minimum(w, piece.end), piece.start - piece.reach) - piece.start
    c0, c1, c2, c3 = piece.coefficients
    r = dt.plus(dt.times(v, c3, sat), c2, sat)
    r = dt.plus(dt.times(r, v, sat), c1, sat)
    r = dt.plus(dt.times(r, v, sat), c0, sat)
    for f in piece.down:
        r = dt.times(r, dt.from_float(f), sat)
    return r


def _exp_grid(start: int, end: int) -> np.ndarray:
    """The raw values of w a piece is checked on: all of them, or 4097 spread over a long piece."""
    if end - start <= 4096:
        return np.arange(start, end + 1, dtype=np.int64)
    return np.unique(np.linspace(start, end, 4097).round().astype(np.int64))


def _exp_excess(y: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The error beyond the pieces' bound (half a unit, then ``_EXP_FIT_UNITS`` and ``EXP_SHARE``), as
    a share of it."""
    return (np.abs(y - target) - 0.5) / (_EXP_FIT_UNITS + EXP_SHARE * target)


def _exp_fit(a: float, start: int, end: int, dt: "DataType") -> tuple[_ExpPiece, float]:
    """The piece over [start, end] (raw w) for ``a * e^w`` raw: a weighted least-squares cubic at
    the finest scale its values fit, its integer coefficients then moved a unit at a time while the
    largest excess over the grid falls (each a simulation of the device's steps)."""
    one = dt.one
    w = _exp_grid(start, end)
    target = a * np.exp(w / one)
    k = _finest(float(target[-1]) / one, dt)
    v = (w - start) / one
    basis = np.stack([v**j for j in range(4)], axis=1)
    weight = 1.0 / (_EXP_FIT_UNITS + EXP_SHARE * target)
    c = np.linalg.lstsq(basis * weight[:, None], target * 2.0**k / one * weight, rcond=None)[0]
    coefficients = [int(x) for x in dt.from_float(c)]
    down = tuple(powers_of_two(-k, dt)[::-1])  # the small step first: its rounding shrinks with the next

    def score(cs):
        return float(np.max(_exp_excess(_exp_run(_ExpPiece(start, end, 0, tuple(cs), down), w, dt), target)))

    best, moved = score(coefficients), dt.width <= 16  # (a unit of a wider type is too small to matter)
    while moved:
        moved = False
        for j in range(4):
            for d in (-1, 1):
                trial = list(coefficients)
                trial[j] += d
                if (s := score(trial)) < best:
                    best, coefficients, moved = s, trial, True
    # How far below its start the cubic stays above 0 (where the next piece down rules).
    piece = _ExpPiece(start, end, 3 * one, tuple(coefficients), down)
    reach = np.arange(0, 3 * one, dtype=np.int64)
    below = _exp_run(piece, start - reach, dt)
    first = int(np.argmax(below <= 0)) if np.any(below <= 0) else len(reach) - 1
    return replace(piece, reach=int(reach[first])), best


def _exp_breaks(a: float, top: int, dt: "DataType") -> list[int]:
    """Piece ends over [0, top] (raw w), each piece the widest whose float cubic keeps well inside
    the bound with room for the roundings (the integer fit then closes the rest)."""
    one, breaks = dt.one, [0]
    while breaks[-1] < top:
        start = breaks[-1]

        def fits(end: int) -> bool:
            w = np.linspace(start, end, 257)
            target = a * np.exp(w / one)
            k = _finest(float(target[-1]) / one, dt)
            v = (w - start) / one
            basis = np.stack([v**j for j in range(4)], axis=1)
            weight = 1.0 / (_EXP_FIT_UNITS + EXP_SHARE * target)
            c = np.linalg.lstsq(basis * weight[:, None], target * weight, rcond=None)[0]
            rounding = (1 + v + v**2 + v**3) * 2.0 ** -(k + 1)  # the coefficients' and products' roundings (raw)
            return bool(np.all(np.abs(basis @ c - target) + rounding <= 0.8 * (_EXP_FIT_UNITS + EXP_SHARE * target)))

        if fits(top):
            breaks.append(top)
            break
        lo, hi = start + 1, top
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        breaks.append(lo)
    return breaks


def _exp_check(pieces: list[_ExpPiece], scale: float, top: int, dt: "DataType") -> None:
    """The largest of the pieces within the bound over w's values (no step saturating): the fit's
    promise, checked whole (a piece reaching below its start must not exceed the one that rules)."""
    from ..numbers import SaturationCounter

    w = np.arange(0, top + 1, dtype=np.int64) if top <= 1 << 16 else np.linspace(0, top, 1 << 16).astype(np.int64)
    sat = SaturationCounter()
    y = np.max([_exp_run(piece, w, dt, sat) for piece in pieces], axis=0)
    excess = float(np.max(_exp_excess(y, scale * np.exp(w / dt.one))))
    if excess > 1 or sat.count:
        raise AssertionError(f"exp's pieces at {dt.name}: {excess:.3g} of the bound, {sat.count} saturated steps")


@lru_cache(maxsize=64)
def _exp_plan(a: Exp, dt: "DataType") -> _ExpPlan:
    if (reason := exp_reason(dt)) is not None:
        raise ValueError(reason)
    one = dt.one
    low = _on_grid(-(dt.binary_point + 1 + a.out_shift) * math.log(2.0), dt)  # e^low: half a unit
    scale = 2.0 ** (a.out_shift + dt.binary_point) * math.exp(low)  # a: raw result at w = 0
    top = int(math.floor(math.log(dt.max_int / scale) * one))  # raw w of the largest result
    high = low + top / one
    if max(abs(low), abs(high)) >= dt.max_float / 2:
        raise ValueError(
            f"exp: results stored times 2^{a.out_shift} need inputs from {low:g} to {high:g}, beyond {dt.name}; "
            "build without calibration or with a wider data type"
        )
    breaks = _exp_breaks(scale, top, dt)
    pieces, spans = [], list(zip(breaks, breaks[1:]))
    while spans:  # a piece the integer fit cannot keep within the bound is split in two
        start, end = spans.pop(0)
        piece, excess = _exp_fit(scale, start, end, dt)
        if excess > 1 and end - start > 1:
            spans[:0] = [(start, (start + end) // 2), ((start + end) // 2, end)]
        else:
            pieces.append(piece if start else replace(piece, reach=0))
    _exp_check(pieces, scale, top, dt)
    pieces[-1] = replace(pieces[-1], end=None)
    reach = dt.max_float * 2.0**-a.shift  # the largest |x| the input holds
    if a.shift <= 0:  # clipped at its own scale, inside [low, ...) once taken up (exact)
        clip = math.ceil(low * 2.0**a.shift * one) / one
        return _ExpPlan(clip if low > -reach else None, [], None, [], powers_of_two(-a.shift, dt), low,
                        tuple(pieces), [], [])  # fmt: skip
    # A fine input: x at scale 1 (rounded to the grid there), no larger than the input's top (so it
    # goes back exactly), and the rounding d = x - x1 kept at the input's scale, at most 2^(shift - 8)
    # there: the product y * d is taken with d brought to 6 bits' size first.
    cap = math.floor(reach * one) / one
    d_shift = max(0, a.shift - 6)
    return _ExpPlan(low if low > -reach else None, powers_of_two(-a.shift, dt)[::-1], cap if cap < high else None,
                    powers_of_two(a.shift, dt), [], low, tuple(pieces), powers_of_two(-d_shift, dt),
                    powers_of_two(d_shift - a.shift, dt)[::-1])  # fmt: skip


def _exp_meaning(x: np.ndarray, a: Exp) -> np.ndarray:
    return np.exp(np.asarray(x, dtype=np.float64) / 2.0**a.shift) * 2.0**a.out_shift


def _exp_constants(a: Exp, dt: "DataType", lanes: int) -> list:
    p = _exp_plan(a, dt)
    values = ([p.clip] if p.clip is not None else []) + p.factors_in + ([p.cap] if p.cap is not None else [])
    values += p.back + p.factors_up + [p.low]
    for piece in p.pieces:
        ends = ([] if piece.end is None else [piece.end]) + [piece.start - piece.reach, piece.start]
        values += [e / dt.one for e in ends] + [c / dt.one for c in piece.coefficients] + list(piece.down)
    return values + p.d_down + p.d_out + [_U, _V, _G, _D]


def _emit_exp(lir: "LIR", acc: int, count: int, a: Exp, cvec: dict, block=None) -> None:
    """Per vector: w = max(x, low) - low at scale 1 into U; each cubic piece at its fine scale,
    brought to the result's; the largest of them (and, for a fine input, the rounding of x to
    scale 1 put back) written back."""
    dt = lir.arch.data_type
    p = _exp_plan(a, dt)
    u, v, g, d = cvec[_U], cvec[_V], cvec[_G], cvec[_D]
    R, raw = 1, lambda n: cvec[n / dt.one]  # noqa: E731
    mul = lambda factors: [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in factors]  # noqa: E731
    if p.factors_in:  # a fine input: x1 = x at scale 1 into V, d = x - x1 (at x's scale) into D
        steps = [(SIMDOp.MOVE, R, 0, 0, cvec[p.factors_in[0]], None), (SIMDOp.MULTIPLY, R, 0, R, "v", None)]
        steps += mul(p.factors_in[1:]) + ([(SIMDOp.MIN, R, 0, R, cvec[p.cap], None)] if p.cap is not None else [])
        steps = _into(steps, v) + mul(p.back) + [(SIMDOp.SUBTRACT, R, 0, R, "v", d), (SIMDOp.MOVE, R, 0, 0, v, None)]
        if p.clip is not None:
            steps.append((SIMDOp.MAX, R, 0, R, cvec[p.clip], None))
    elif p.clip is not None:
        steps = [(SIMDOp.MOVE, R, 0, 0, cvec[p.clip], None), (SIMDOp.MAX, R, 0, R, "v", None)] + mul(p.factors_up)
    else:
        steps = [(SIMDOp.MOVE, R, 0, 0, "v", None)] + mul(p.factors_up)
    steps.append((SIMDOp.SUBTRACT, R, R, 0, cvec[p.low], u))
    for i, piece in enumerate(p.pieces):
        c0, c1, c2, c3 = piece.coefficients
        if i == 0:  # w >= 0 = start: the register holds w
            end = (SIMDOp.MIN, R, 0, R, raw(piece.end), v) if piece.end is not None else (SIMDOp.MOVE, R, 0, 0, u, v)
            steps.append(end)
        else:
            ends = [] if piece.end is None else [(SIMDOp.MIN, R, 0, R, raw(piece.end), None)]
            steps += [(SIMDOp.MOVE, R, 0, 0, u, None), *ends,
                      (SIMDOp.MAX, R, 0, R, raw(piece.start - piece.reach), None),
                      (SIMDOp.SUBTRACT, R, R, 0, raw(piece.start), v)]  # fmt: skip
        steps += [(SIMDOp.MULTIPLY, R, 0, R, raw(c3), None), (SIMDOp.ADD, R, 0, R, raw(c2), None),
                  (SIMDOp.MULTIPLY, R, 0, R, v, None), (SIMDOp.ADD, R, 0, R, raw(c1), None),
                  (SIMDOp.MULTIPLY, R, 0, R, v, None), (SIMDOp.ADD, R, 0, R, raw(c0), None)]  # fmt: skip
        steps += mul(piece.down)
        if i > 0:
            steps.append((SIMDOp.MAX, R, 0, R, g, None))
        if i < len(p.pieces) - 1 or p.factors_in:
            steps = _into(steps, g)
    if p.factors_in:  # y + y * d
        steps += [(SIMDOp.MOVE, R, 0, 0, d, None), *mul(p.d_down), (SIMDOp.MULTIPLY, R, 0, R, g, None), *mul(p.d_out),
                  (SIMDOp.ADD, R, 0, R, g, None)]  # fmt: skip
    lir.simd_runs(acc, count, _into(steps, "v"))


ACTIVATIONS: dict[str, Activation] = {
    "relu": Activation(NoAttrs, lambda x, a: np.maximum(x, 0.0), lambda a, dt, n: [], _emit_relu),
    "leaky_relu": Activation(
        LeakyRelu, lambda x, a: np.maximum(x, a.alpha * x), lambda a, dt, n: [a.alpha], _emit_leaky_relu
    ),
    "prelu": Activation(
        PRelu,
        lambda x, a: np.where(x > 0, x, np.asarray(a.alpha) * x),
        lambda a, dt, n: _prelu_blocks(a, n),
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
        _exp_meaning,
        _exp_constants,
        _emit_exp,
        lambda a, k_in, k_out: replace(a, shift=a.shift + k_in, out_shift=a.out_shift + k_out),
    ),
    **{
        name: Activation(
            Smooth,
            _smooth_meaning,
            _smooth_constants,
            _emit_smooth,
            lambda a, k_in, k_out: replace(a, shift=a.shift + k_in, out_shift=a.out_shift + k_out),
        )
        for name in SMOOTH
    },  # fmt: skip
}


def changes_scale(op: str) -> bool:
    """Whether an activation's result has a scale of its own (its constants take its input from its
    scale to the result's): the others keep their input's."""
    return op in ("hard_sigmoid", "rescale", "exp") or op in SMOOTH


def constants(epilogue, dt: "DataType", lanes: int) -> list:
    """The constant vectors an epilogue's ops read (one each, in first use order)."""
    return list(dict.fromkeys(v for op, attrs in epilogue for v in ACTIVATIONS[op].constants(attrs, dt, lanes)))


def emit(lir: "LIR", acc: int, count: int, epilogue, cvec: dict, block: int | None = None) -> None:
    """An epilogue's ops on ``count`` accumulator vectors from ``acc``, in place; ``block``: the
    channel block they hold (None: they may hold several, no per-channel constants)."""
    for op, attrs in epilogue:
        ACTIVATIONS[op].emit(lir, acc, count, attrs, cvec, block)


def meaning(op: str, x: np.ndarray, attrs) -> np.ndarray:
    return ACTIVATIONS[op].meaning(x, attrs)


def scaled(epilogue, k: int) -> list:
    """An epilogue for values stored times ``2**k`` (before and after it)."""
    return [(op, ACTIVATIONS[op].scaled(attrs, k, k)) for op, attrs in epilogue]
