"""1 / sqrt(x + eps) as cubic pieces in the SIMD unit, summed.

A normalization's statistics (a per-channel variance) become the factor each value is multiplied
by. Over the input's raw values the function falls from the result's top (below that it
saturates) to its value at the data type's top: pieces cover that stretch in roughly geometric
spans. Each piece is a cubic in ``v = clamp(w, start, end) - end`` without a constant term, so it
adds exactly 0 right of its span and a constant left of it; the result is the sum of the pieces
and the function's value at the top. The pieces are fitted from the top down, each to the function
less what the pieces right of it add as the device computes them: the roundings of those constants
do not add up, and one piece's error is the result's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from ..isa.instructions import SIMDOp
from .simd import Scratch, finest, into, nudged, powers_of_two, widest_spans

if TYPE_CHECKING:
    from ..numbers import DataType
    from .lir import LIR

_U, _V, _G = Scratch(0), Scratch(1), Scratch(2)  # x clamped, a piece's v, the sum so far


@dataclass(frozen=True)
class RSqrt:
    """``(x + eps) ** -0.5`` for inputs stored times ``2**shift`` and results times ``2**out_shift``."""

    eps: float = 1e-5
    shift: int = 0
    out_shift: int = 0


# The result is within this many units plus this share of it, beyond the half unit of its rounding,
# for every input value at any scales (tests/compiler/test_rsqrt.py).
RSQRT_UNITS = 1.0
RSQRT_SHARE = 2.0**-11
_FIT_UNITS = RSQRT_UNITS - 0.25  # room for the integer coefficients' own rounding
# A piece's v is taken to at most this (at scale 1), where Horner's products keep their bits and
# its coefficients fit.
_V_TOP = 4.0


def rsqrt_reason(dt: "DataType") -> str | None:
    """Why rsqrt cannot run at data type ``dt`` (None: it can)."""
    if dt.width < 16:
        return f"rsqrt's cubic pieces need 16-bit data or wider ({dt.name}'s coefficients would be off by percents)"
    return None


@dataclass(frozen=True)
class _Piece:
    """``c1 v + c2 v^2 + c3 v^3`` over ``v = (min(max(w, start), end) - end) * 2**-s`` (w: the raw
    input; ``v_down``: the powers of two), at a fine scale brought to the result's by ``down``."""

    start: int
    end: int
    v_down: tuple[float, ...]
    coefficients: tuple[int, int, int]  # c1..c3, raw
    down: tuple[float, ...]


@dataclass(frozen=True)
class _Plan:
    low: int  # raw inputs below it saturate the result (0: none do; negative inputs read as 0)
    base: int  # the raw result at the data type's top, which the pieces add to
    pieces: tuple[_Piece, ...]


def _target(w, a: RSqrt, dt: "DataType") -> np.ndarray:
    """The raw result for raw inputs ``w`` (float, unbounded)."""
    x = np.maximum(np.asarray(w, dtype=np.float64), 0.0) / dt.one * 2.0**-a.shift + a.eps
    with np.errstate(divide="ignore"):
        return dt.one * 2.0**a.out_shift / np.sqrt(x)


def _run(piece: _Piece, w: np.ndarray, dt: "DataType", sat=None) -> np.ndarray:
    """A piece's SIMD steps on raw ``w`` (at least the plan's low), as the device computes them."""
    v = np.minimum(np.maximum(w, piece.start), piece.end) - piece.end
    for f in piece.v_down:
        v = dt.times(v, dt.from_float(f), sat)
    c1, c2, c3 = piece.coefficients
    r = dt.plus(dt.times(v, c3, sat), c2, sat)
    r = dt.plus(dt.times(r, v, sat), c1, sat)
    r = dt.times(r, v, sat)
    for f in piece.down:
        r = dt.times(r, dt.from_float(f), sat)
    return r


def _grid(start: int, end: int) -> np.ndarray:
    if end - start <= 4096:
        return np.arange(start, end + 1, dtype=np.int64)
    return np.unique(np.linspace(start, end, 4097).round().astype(np.int64))


def _excess(y: np.ndarray, target: np.ndarray, units: float = _FIT_UNITS) -> np.ndarray:
    """The error beyond half a unit, as a share of the bound."""
    return (np.abs(y - target) - 0.5) / (units + RSQRT_SHARE * target)


def _v_shift(start: int, end: int, dt: "DataType") -> int:
    """The power of two taking a piece's v (raw) down to at most ``_V_TOP`` (up, for a short
    piece: exact)."""
    return math.ceil(math.log2(max(end - start, 1) / (_V_TOP * dt.one)))


def _cubic(part: np.ndarray, start: int, end: int, w: np.ndarray, target: np.ndarray, dt: "DataType"):
    """The piece's fine scale k, v's shift, v (float, as the device rounds it) and the float cubic
    without a constant term closest to ``part`` (what the piece adds) weighted by the bound on
    ``target`` (the result)."""
    k = finest(max(float(part.max()), 1.0) / dt.one, dt)
    s = _v_shift(start, end, dt)
    v = np.round((w - end) * 2.0**-s) / dt.one
    basis = np.stack([v**j for j in range(1, 4)], axis=1)
    weight = 1.0 / (_FIT_UNITS + RSQRT_SHARE * target)
    return k, s, v, np.linalg.lstsq(basis * weight[:, None], part * weight, rcond=None)[0]


def _fit(a: RSqrt, start: int, end: int, offset: np.ndarray, dt: "DataType") -> tuple[_Piece, float]:
    """The piece over raw [start, end] adding what the result needs beyond ``offset`` (a function of
    raw w: what the pieces right of it add, and the base): a weighted least-squares cubic at its
    finest scale, the integer coefficients then moved a unit at a time while the largest excess
    falls (each a simulation of the device's steps)."""
    one = dt.one
    w = _grid(start, end)
    target, rest = _target(w, a, dt), offset(w)
    part = target - rest
    k, s, _, c = _cubic(part, start, end, w, target, dt)
    coefficients = [int(x) for x in dt.from_float(c * 2.0**k / one)]
    down = tuple(powers_of_two(-k, dt)[::-1])
    v_down = tuple(powers_of_two(-s, dt)[::-1])

    def score(cs):
        y = _run(_Piece(start, end, v_down, tuple(cs), down), w, dt) + rest
        return float(np.max(_excess(y, target)))

    coefficients, best = nudged(coefficients, score, dt)
    return _Piece(start, end, v_down, tuple(coefficients), down), best


def _breaks(a: RSqrt, low: int, dt: "DataType") -> list[int]:
    """Piece ends over [low, top] (raw), each piece the widest whose float cubic keeps well inside
    the bound with room for the roundings (the integer fit closes the rest)."""

    def fits(start: int, end: int) -> bool:
        w = np.unique(np.linspace(start, end, 257).round().astype(np.int64))
        target = _target(w, a, dt)
        part = target - target[-1]
        k, s, v, c = _cubic(part, start, end, w, target, dt)
        cubic = np.polynomial.polynomial.polyval(v, np.concatenate([[0.0], c]))
        slope = np.abs(np.gradient(target, w)) if len(w) > 1 else np.zeros(1)
        rounding = (1 + np.abs(v) + v**2) * 2.0 ** -(k + 1) + (s > 0) * 2.0 ** (s - 1) * slope
        return bool(np.all(np.abs(cubic - part) + rounding <= 0.8 * (_FIT_UNITS + RSQRT_SHARE * target)))

    return widest_spans(low, dt.max_int, fits)


def _evaluate(plan: _Plan, w: np.ndarray, dt: "DataType", sat=None) -> np.ndarray:
    """The base plus every piece at raw ``w`` (at least the plan's low), as the device sums them."""
    y = np.full(np.shape(w), plan.base, dtype=np.int64)
    for piece in plan.pieces:
        y = dt.plus(_run(piece, w, dt, sat), y, sat)
    return y


def _check(plan: _Plan, a: RSqrt, dt: "DataType") -> None:
    """The sum within the bound over every input value, no step saturating."""
    from ..numbers import SaturationCounter

    top = dt.max_int
    w = np.arange(plan.low, top + 1) if top - plan.low <= 1 << 16 else np.linspace(plan.low, top, 1 << 16)
    w = np.unique(np.concatenate([w.astype(np.int64), [p.start for p in plan.pieces]]))
    sat = SaturationCounter()
    excess = float(np.max(_excess(_evaluate(plan, w, dt, sat), _target(w, a, dt), RSQRT_UNITS)))
    if excess > 1 or sat.count:
        raise AssertionError(f"rsqrt's pieces at {dt.name}: {excess:.3g} of the bound, {sat.count} saturated steps")


@lru_cache(maxsize=64)
def _plan(a: RSqrt, dt: "DataType") -> _Plan:
    if (reason := rsqrt_reason(dt)) is not None:
        raise ValueError(reason)
    if a.eps < 0:
        raise ValueError(f"rsqrt: epsilon {a.eps} is negative")
    # The smallest raw input whose result fits, with room for the error (below it: saturated).
    room = dt.max_int - 2 * (1 + RSQRT_UNITS)
    low = max(0, math.ceil(((dt.one * 2.0**a.out_shift / room) ** 2 - a.eps) * dt.one * 2.0**a.shift))
    while low > 0 and _target(low - 1, a, dt) <= room:  # (the float formula's last bit)
        low -= 1
    while low <= dt.max_int and _target(low, a, dt) > room:
        low += 1
    if low > dt.max_int:
        raise ValueError(
            f"rsqrt: results stored times 2^{a.out_shift} do not fit {dt.name} for any input stored times "
            f"2^{a.shift}; build without calibration or with a wider data type"
        )
    base = int(np.round(_target(dt.max_int, a, dt)))
    breaks = _breaks(a, low, dt)
    spans, pieces = list(zip(breaks, breaks[1:])), []
    while spans:  # from the top down; a piece the integer fit cannot keep within the bound is split
        start, end = spans.pop()
        right = tuple(pieces)

        def offset(w, right=right):
            return _evaluate(_Plan(low, base, right), w, dt)

        piece, excess = _fit(a, start, end, offset, dt)
        if excess > 1 and end - start > 1:
            spans += [(start, (start + end) // 2), ((start + end) // 2, end)]
        else:
            pieces.insert(0, piece)
    plan = _Plan(low, base, tuple(pieces))
    _check(plan, a, dt)
    return plan


def rsqrt_meaning(x: np.ndarray, a: RSqrt) -> np.ndarray:
    v = np.maximum(np.asarray(x, dtype=np.float64) / 2.0**a.shift, 0.0) + a.eps
    with np.errstate(divide="ignore"):
        return 2.0**a.out_shift / np.sqrt(v)


def rsqrt_constants(a: RSqrt, dt: "DataType", lanes: int) -> list:
    p = _plan(a, dt)
    values = [p.low / dt.one, p.base / dt.one]
    for piece in p.pieces:
        values += [piece.start / dt.one, piece.end / dt.one, *piece.v_down]
        values += [c / dt.one for c in piece.coefficients] + list(piece.down)
    if p.low > 0:
        values += [0.0, dt.max_float]
    return values + [_U, _V, _G]


def emit_rsqrt(lir: "LIR", acc: int, count: int, a: RSqrt, cvec: dict, block=None) -> None:
    """Per vector: w = max(x, low) into U; each cubic piece at its fine scale, brought to the
    result's and added up in G (from the base); an input below ``low`` then saturates the result."""
    dt = lir.arch.data_type
    p = _plan(a, dt)
    u, v, g = cvec[_U], cvec[_V], cvec[_G]
    R, raw = 1, lambda n: cvec[n / dt.one]  # noqa: E731
    mul = lambda factors: [(SIMDOp.MULTIPLY, R, 0, R, cvec[f], None) for f in factors]  # noqa: E731
    steps = into([(SIMDOp.MOVE, R, 0, 0, raw(p.low), None), (SIMDOp.MAX, R, 0, R, "v", None)], u)
    for i, piece in enumerate(p.pieces):
        c1, c2, c3 = piece.coefficients
        if i:
            steps += [(SIMDOp.MOVE, R, 0, 0, u, None), (SIMDOp.MAX, R, 0, R, raw(piece.start), None)]
        steps += [(SIMDOp.MIN, R, 0, R, raw(piece.end), None), (SIMDOp.SUBTRACT, R, R, 0, raw(piece.end), None)]
        steps = into(steps + mul(piece.v_down), v)
        steps += [(SIMDOp.MULTIPLY, R, 0, R, raw(c3), None), (SIMDOp.ADD, R, 0, R, raw(c2), None),
                  (SIMDOp.MULTIPLY, R, 0, R, v, None), (SIMDOp.ADD, R, 0, R, raw(c1), None),
                  (SIMDOp.MULTIPLY, R, 0, R, v, None)]  # fmt: skip
        steps += mul(piece.down)
        steps.append((SIMDOp.ADD, R, 0, R, g if i else raw(p.base), None))
        if i < len(p.pieces) - 1 or p.low > 0:
            steps = into(steps, g)
    if p.low > 0:  # (low - x) clipped at 0, taken past the top when positive, added: saturates
        steps += [(SIMDOp.MOVE, R, 0, 0, raw(p.low), None), (SIMDOp.SUBTRACT, R, R, 0, "v", None),
                  (SIMDOp.MAX, R, 0, R, cvec[0.0], None), *mul([dt.max_float] * 3),
                  (SIMDOp.ADD, R, 0, R, g, None)]  # fmt: skip
    lir.simd_runs(acc, count, into(steps, "v"))
