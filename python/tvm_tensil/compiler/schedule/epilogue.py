"""What every lowering shares at the end of a tile: constant vectors in the accumulators, the
fused element-wise ops through the SIMD unit, and moving results to DRAM0."""

from __future__ import annotations

import numpy as np

from ...isa.instructions import Direction, SIMDOp
from ...placement import TensorPlacement
from ..lir import LIR
from .context import Context, Out, ScheduleError, Tile
from .tiles import tile_runs


def const_vectors(ctx: Context, out: Out, values: list[float], acc_base: int, *more_bases: int) -> dict[float, int]:
    """Load one full vector per value into the accumulators at ``acc_base`` (and copies at
    ``more_bases``); returns where the first copy is."""
    if not values:
        return {}
    rec = out.consts.add("fill", ctx.graph.constants, values=[float(v) for v in values])
    scratch = ctx.arch.local_depth - len(values)
    out.lir.datamove(Direction.DRAM1_TO_LOCAL, scratch, rec.base, rec.size)
    for base in (acc_base, *more_bases):
        out.lir.datamove(Direction.LOCAL_TO_ACC, scratch, base, rec.size)
    return {float(v): acc_base + i for i, v in enumerate(values)}


def epilogue_constants(epilogue) -> list[float]:
    """The constants an epilogue's ops read (one vector each)."""
    vals = []
    for op, attrs in epilogue:
        if op == "leaky_relu":
            vals.append(attrs.alpha)
        elif op == "clip":
            vals += [v for v in (attrs.lo, attrs.hi) if np.isfinite(v)]
    return list(dict.fromkeys(vals))


def emit_epilogue(lir: LIR, acc: int, count: int, epilogue, cvec: dict[float, int]) -> None:
    """Element-wise ops on ``count`` accumulator vectors, in place, through the SIMD unit."""
    for op, attrs in epilogue:
        if op == "relu":
            lir.simd(SIMDOp.ZERO, dest=1)
            lir.simd_run(SIMDOp.MAX, acc, count, left=0, right=1)
        elif op == "leaky_relu":  # max(x, alpha * x), for 0 <= alpha <= 1
            a = cvec[float(attrs.alpha)]
            steps = [
                (SIMDOp.MOVE, 1, 0, 0, a, None),
                (SIMDOp.MULTIPLY, 1, 0, 1, "v", None),
                (SIMDOp.MAX, 0, 0, 1, "v", "v"),
            ]
            lir.simd_runs(acc, count, steps)
        elif op == "clip":  # an infinite bound clips nothing beyond saturation
            for bound, fn in ((attrs.hi, SIMDOp.MIN), (attrs.lo, SIMDOp.MAX)):
                if not np.isfinite(bound):
                    continue
                lir.simd(SIMDOp.MOVE, dest=1, left=0, read=cvec[float(bound)])
                lir.simd_run(fn, acc, count, left=0, right=1)
        else:  # pragma: no cover - the frontend only fuses the ops above
            raise ScheduleError(f"unknown epilogue {op}")


def gather(lir: LIR, tile: Tile, block: int, acc: int, buf: int) -> None:
    """One channel block of the tile: accumulators -> the store buffer, which holds the tile
    block-major (block ``b`` at ``buf + b * pixels``)."""
    lir.datamove(Direction.ACC_TO_LOCAL, buf + block * tile.pixels, acc, tile.pixels)


def flush(place: TensorPlacement, tile: Tile, buf: int, move) -> None:
    """The store buffer -> DRAM0; ``move`` issues each run (``LIR.datamove`` or a deferral)."""
    for local, address, size in tile_runs(place, tile, buf):
        move(Direction.LOCAL_TO_DRAM0, local, address, size)


def load_tile(src: TensorPlacement, tile: Tile, buf: int, move) -> None:
    """A tile of ``src`` -> local memory in the store buffer's layout (a fused residual's shortcut)."""
    for local, address, size in tile_runs(src, tile, buf):
        move(Direction.DRAM0_TO_LOCAL, local, address, size)
