"""Smooth activations (sigmoid, tanh, SiLU, GELU, softplus, Mish) as cubic pieces in the SIMD unit.

Each is computed from a part p(u) over u = |x| (or x plus an offset) by cubic pieces, evaluated by
Horner in the one register and summed in a scratch accumulator, then the form that makes the
function of it (docs/compiler.md, the ops table).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..isa.instructions import SIMDOp
from .simd import Scratch, into, powers_of_two

if TYPE_CHECKING:
    from ..numbers import DataType
    from .lir import LIR


@dataclass(frozen=True)
class Smooth:
    """A smooth function (a key of ``SMOOTH``: sigmoid, tanh, SiLU, GELU) for inputs stored times
    ``2**shift`` and results times ``2**out_shift``."""

    function: str
    shift: int = 0
    out_shift: int = 0


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
    # max(1, |x|) for the "relu_minus" form), measured at FP16BP8 (tests/compiler/test_smooth.py).
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


def smooth_meaning(x: np.ndarray, a: Smooth) -> np.ndarray:
    return SMOOTH[a.function].meaning(x / 2.0**a.shift) * 2.0**a.out_shift


def smooth_simulated(x: np.ndarray, a: Smooth, dt: "DataType") -> np.ndarray:
    """The function as its sequence computes it: a fine input (``shift > 0``) reaches the pieces
    taken to scale 1, on the data type's grid (``max(x, 0)`` of a ``relu_minus`` form keeps x's bits)."""
    if a.shift <= 0:
        return smooth_meaning(x, a)
    q = dt.from_float(x)
    for factor in powers_of_two(-a.shift, dt)[::-1]:  # as the sequence takes it down (_smooth_plan)
        q = dt.times(q, dt.from_float(factor))
    rounded = dt.to_float(q) * 2.0**a.shift
    y = smooth_meaning(rounded, a)
    if SMOOTH[a.function].form != "odd":
        y = y + (np.maximum(x, 0.0) - np.maximum(rounded, 0.0)) * 2.0 ** (a.out_shift - a.shift)
    return y


def smooth_constants(a: Smooth, dt: "DataType", lanes: int) -> list:
    p = _smooth_plan(a, dt)
    if p.low is not None:
        bounds = [p.low, p.top]
    else:
        bounds = [] if p.top is None else [p.top] if p.factors_in else [-p.top, p.top]
    values = bounds + p.factors_in + p.factors_up + ([p.offset] if p.offset else [])
    values += [v for piece in p.pieces for v in piece]
    values += [1.0, *p.factors_out, *p.factors_relu] + ([p.center] if p.center else [])
    return values + [_U, _V, _G]


def emit_smooth(lir: "LIR", acc: int, count: int, a: Smooth, cvec: dict, block=None) -> None:
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
    steps = into(steps, u)
    for i, (t0, t1, c1, c2, c3) in enumerate(p.pieces):
        if i == 0:  # u >= 0 = t0: the register holds u
            steps = into(steps + [(SIMDOp.MIN, R, 0, R, cvec[t1], None)], v)
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
        steps = into(steps + [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_out], g)
        steps += [(SIMDOp.ZERO, R, 0, 0, None, None), (SIMDOp.MAX, R, 0, R, "v", None)]
        steps += [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in p.factors_relu]
        steps.append((SIMDOp.SUBTRACT, R, R, 0, g, None))
    lir.simd_runs(acc, count, into(steps, "v"))
