"""Element-wise activations: everything the compiler knows about each, in one table.

An activation runs in the accumulators through the SIMD unit, fused onto the op that produces its
input (an epilogue) or as a layer of its own. Each entry says what the op means in float
(calibration and the simulation of scales), which constant vectors it reads, how it changes when
its tensor is stored at a shift, and the SIMD instructions it is. Adding an activation is one entry
here, its pattern check and its frontend conversion (docs/adding-an-op.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..isa.instructions import SIMDOp

if TYPE_CHECKING:
    from .lir import LIR


@dataclass(frozen=True)
class NoAttrs:
    """An op without parameters."""


@dataclass(frozen=True)
class LeakyRelu:
    alpha: float  # 0 <= alpha <= 1


@dataclass(frozen=True)
class Clip:
    lo: float  # -inf or inf: no bound on that side
    hi: float


@dataclass(frozen=True)
class Activation:
    attrs: type
    meaning: Callable[[np.ndarray, Any], np.ndarray]  # in float
    constants: Callable[[Any], list[float]]  # the constant vectors its instructions read
    emit: Callable[["LIR", int, int, Any, dict], None]  # (lir, first accumulator, count, attrs, constants)
    scaled: Callable[[Any, int], Any] = lambda attrs, k: attrs  # its attrs for values stored times 2**k


def _emit_relu(lir: "LIR", acc: int, count: int, attrs, cvec: dict) -> None:
    lir.simd(SIMDOp.ZERO, dest=1)
    lir.simd_run(SIMDOp.MAX, acc, count, left=0, right=1)


def _emit_leaky_relu(lir: "LIR", acc: int, count: int, attrs: LeakyRelu, cvec: dict) -> None:
    """max(x, alpha * x), for 0 <= alpha <= 1."""
    a = cvec[float(attrs.alpha)]
    steps = [(SIMDOp.MOVE, 1, 0, 0, a, None), (SIMDOp.MULTIPLY, 1, 0, 1, "v", None), (SIMDOp.MAX, 0, 0, 1, "v", "v")]
    lir.simd_runs(acc, count, steps)


def _emit_clip(lir: "LIR", acc: int, count: int, attrs: Clip, cvec: dict) -> None:
    for bound, fn in ((attrs.hi, SIMDOp.MIN), (attrs.lo, SIMDOp.MAX)):
        if np.isfinite(bound):  # an infinite bound clips nothing beyond saturation
            lir.simd(SIMDOp.MOVE, dest=1, left=0, read=cvec[float(bound)])
            lir.simd_run(fn, acc, count, left=0, right=1)


ACTIVATIONS: dict[str, Activation] = {
    "relu": Activation(NoAttrs, lambda x, a: np.maximum(x, 0.0), lambda a: [], _emit_relu),
    "leaky_relu": Activation(LeakyRelu, lambda x, a: np.maximum(x, a.alpha * x), lambda a: [a.alpha], _emit_leaky_relu),
    "clip": Activation(
        Clip,
        lambda x, a: np.minimum(np.maximum(x, a.lo), a.hi),
        lambda a: [v for v in (a.lo, a.hi) if np.isfinite(v)],
        _emit_clip,
        lambda a, k: replace(a, lo=a.lo * 2.0**k, hi=a.hi * 2.0**k),
    ),
}


def constants(epilogue) -> list[float]:
    """The constant vectors an epilogue's ops read (one each, in first use order)."""
    return list(dict.fromkeys(v for op, attrs in epilogue for v in ACTIVATIONS[op].constants(attrs)))


def emit(lir: "LIR", acc: int, count: int, epilogue, cvec: dict[float, int]) -> None:
    """An epilogue's ops on ``count`` accumulator vectors from ``acc``, in place."""
    for op, attrs in epilogue:
        ACTIVATIONS[op].emit(lir, acc, count, attrs, cvec)


def meaning(op: str, x: np.ndarray, attrs) -> np.ndarray:
    return ACTIVATIONS[op].meaning(x, attrs)


def scaled(epilogue, k: int) -> list:
    """An epilogue for values stored times ``2**k``."""
    return [(op, ACTIVATIONS[op].scaled(attrs, k)) for op, attrs in epilogue]
