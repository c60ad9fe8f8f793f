"""Helpers of the activations' SIMD sequences: scratch vectors, exact powers of two, the data
type's grid."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:
    from ..numbers import DataType


@dataclass(frozen=True)
class Scratch:
    """An accumulator vector an activation keeps an intermediate in while it works on a vector
    (placed with the constants, which fill it with zeros)."""

    index: int


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


def on_grid(value: float, dt: "DataType") -> float:
    return float(dt.to_float(dt.from_float(value)))


def fits(value: float, dt: "DataType") -> bool:
    """``value`` is on the data type's grid and within its range."""
    return abs(value) <= dt.max_float and on_grid(value, dt) == value


def finest(peak: float, dt: "DataType") -> int:
    """The finest power of two ``2**s`` at which values up to ``peak`` stay below the data type's
    largest value (with a little room for the roundings on their way)."""
    return int(np.floor(np.log2(dt.max_float / (peak * 1.01))))


def into(steps: list, where) -> list:
    """``steps`` with the last one also writing its result to ``where``."""
    op, dest, left, right, read, _ = steps[-1]
    return steps[:-1] + [(op, dest, left, right, read, where)]


def widest_spans(start: int, top: int, fits: Callable[[int, int], bool]) -> list[int]:
    """Ends of spans from ``start`` to ``top`` (raw values), each the widest from where the last
    ended that ``fits(begin, end)`` accepts (found by bisection; one value at least)."""
    breaks = [start]
    while breaks[-1] < top:
        begin = breaks[-1]
        if fits(begin, top):
            breaks.append(top)
            break
        lo, hi = begin + 1, top
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(begin, mid) else (lo, mid)
        breaks.append(lo)
    return breaks


def nudged(coefficients: list[int], score: Callable[[list[int]], float], dt: "DataType") -> tuple[list[int], float]:
    """Integer coefficients moved a unit at a time while ``score`` (the largest error, simulated)
    falls; for a data type wider than 16 bits, as they are (a unit is too small to matter)."""
    best, moved = score(coefficients), dt.width <= 16
    while moved:
        moved = False
        for j in range(len(coefficients)):
            for d in (-1, 1):
                trial = list(coefficients)
                trial[j] += d
                if (t := score(trial)) < best:
                    best, coefficients, moved = t, trial, True
    return coefficients, best
