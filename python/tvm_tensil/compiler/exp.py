"""e^x as cubic pieces in the SIMD unit, the largest of which is the value.

The result's scale sets the stretch of x that matters (from half a unit of the result to the data
type's top). Each cubic piece covers a stretch of it at the finest scale its values fit; a piece is
clamped at its end and runs on below its start until it reaches 0, so the largest piece is e^x:
one rounding reaches the result and no mask is needed (docs/compiler.md, the ops table).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from ..isa.instructions import SIMDOp
from .simd import Scratch, finest, into, nudged, on_grid, powers_of_two, widest_spans

if TYPE_CHECKING:
    from ..numbers import DataType
    from .lir import LIR

_U, _V, _G, _D = Scratch(0), Scratch(1), Scratch(2), Scratch(3)  # w, a piece's v, the largest piece, x's rounding


@dataclass(frozen=True)
class Exp:
    """e^x for inputs stored times ``2**shift`` and results times ``2**out_shift``."""

    shift: int = 0
    out_shift: int = 0


# e^x is within this many units of the result plus this share of it, beyond the half unit of its
# rounding, for every value of the data type at any scales (tests/compiler/test_exp.py).
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


def _exp_cubic(a: float, start: int, w: np.ndarray, dt: "DataType") -> tuple[np.ndarray, int, np.ndarray]:
    """``a * e^w`` at raw w, the finest scale k its largest value fits, and the float cubic in
    v = (w - start) / one closest to it, weighted by the bound (raw units of the target)."""
    one = dt.one
    target = a * np.exp(w / one)
    k = finest(float(target[-1]) / one, dt)
    v = (w - start) / one
    basis = np.stack([v**j for j in range(4)], axis=1)
    weight = 1.0 / (_EXP_FIT_UNITS + EXP_SHARE * target)
    return target, k, np.linalg.lstsq(basis * weight[:, None], target * weight, rcond=None)[0]


def _exp_fit(a: float, start: int, end: int, dt: "DataType") -> tuple[_ExpPiece, float]:
    """The piece over [start, end] (raw w) for ``a * e^w`` raw: a weighted least-squares cubic at
    the finest scale its values fit, its integer coefficients then moved a unit at a time while the
    largest excess over the grid falls (each a simulation of the device's steps)."""
    one = dt.one
    w = _exp_grid(start, end)
    target, k, c = _exp_cubic(a, start, w, dt)
    coefficients = [int(x) for x in dt.from_float(c * 2.0**k / one)]
    down = tuple(powers_of_two(-k, dt)[::-1])  # the small step first: its rounding shrinks with the next

    def score(cs):
        return float(np.max(_exp_excess(_exp_run(_ExpPiece(start, end, 0, tuple(cs), down), w, dt), target)))

    coefficients, best = nudged(coefficients, score, dt)
    # How far below its start the cubic stays above 0 (where the next piece down rules).
    piece = _ExpPiece(start, end, 3 * one, tuple(coefficients), down)
    reach = np.arange(0, 3 * one, dtype=np.int64)
    below = _exp_run(piece, start - reach, dt)
    first = int(np.argmax(below <= 0)) if np.any(below <= 0) else len(reach) - 1
    return replace(piece, reach=int(reach[first])), best


def _exp_breaks(a: float, top: int, dt: "DataType") -> list[int]:
    """Piece ends over [0, top] (raw w), each piece the widest whose float cubic keeps well inside
    the bound with room for the roundings (the integer fit then closes the rest)."""
    one = dt.one

    def fits(start: int, end: int) -> bool:
        w = np.linspace(start, end, 257)
        target, k, c = _exp_cubic(a, start, w, dt)
        v = (w - start) / one
        cubic = np.polynomial.polynomial.polyval(v, c)
        rounding = (1 + v + v**2 + v**3) * 2.0 ** -(k + 1)  # the coefficients' and products' roundings (raw)
        return bool(np.all(np.abs(cubic - target) + rounding <= 0.8 * (_EXP_FIT_UNITS + EXP_SHARE * target)))

    return widest_spans(0, top, fits)


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
    low = on_grid(-(dt.binary_point + 1 + a.out_shift) * math.log(2.0), dt)  # e^low: half a unit
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


def exp_meaning(x: np.ndarray, a: Exp) -> np.ndarray:
    return np.exp(np.asarray(x, dtype=np.float64) / 2.0**a.shift) * 2.0**a.out_shift


def exp_constants(a: Exp, dt: "DataType", lanes: int) -> list:
    p = _exp_plan(a, dt)
    values = ([p.clip] if p.clip is not None else []) + p.factors_in + ([p.cap] if p.cap is not None else [])
    values += p.back + p.factors_up + [p.low]
    for piece in p.pieces:
        ends = ([] if piece.end is None else [piece.end]) + [piece.start - piece.reach, piece.start]
        values += [e / dt.one for e in ends] + [c / dt.one for c in piece.coefficients] + list(piece.down)
    return values + p.d_down + p.d_out + [_U, _V, _G, _D]


def emit_exp(lir: "LIR", acc: int, count: int, a: Exp, cvec: dict, block=None) -> None:
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
        steps = into(steps, v) + mul(p.back) + [(SIMDOp.SUBTRACT, R, 0, R, "v", d), (SIMDOp.MOVE, R, 0, 0, v, None)]
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
            steps = into(steps, g)
    if p.factors_in:  # y + y * d
        steps += [(SIMDOp.MOVE, R, 0, 0, d, None), *mul(p.d_down), (SIMDOp.MULTIPLY, R, 0, R, g, None), *mul(p.d_out),
                  (SIMDOp.ADD, R, 0, R, g, None)]  # fmt: skip
    lir.simd_runs(acc, count, into(steps, "v"))
