"""What every lowering shares at the end of a tile: constant vectors in the accumulators, the
fused element-wise ops through the SIMD unit, and moving results to DRAM0."""

from __future__ import annotations

from ...isa.instructions import Direction
from ...placement import TensorPlacement
from .. import elementwise
from ..lir import LIR
from ..simd import Scratch
from .context import Context, Out, Tile
from .tiles import tile_runs


def const_vectors(ctx: Context, out: Out, values: list, acc_base: int, *more_bases: int) -> dict:
    """Load one vector per value into the accumulators at ``acc_base`` (and copies at
    ``more_bases``): a float fills every lane, a tuple gives each lane its own, a ``Scratch`` is
    zeros an activation keeps intermediates in; returns where the first copy is."""
    if not values:
        return {}
    fills = [[float(x) for x in v] if isinstance(v, tuple) else 0.0 if isinstance(v, Scratch) else float(v)
             for v in values]  # fmt: skip
    rec = out.consts.add("fill", ctx.graph.constants, values=fills)
    scratch = ctx.arch.local_depth - len(values)
    out.lir.datamove(Direction.DRAM1_TO_LOCAL, scratch, rec.base, rec.size)
    for base in (acc_base, *more_bases):
        out.lir.datamove(Direction.LOCAL_TO_ACC, scratch, base, rec.size)
    return {v if isinstance(v, (tuple, Scratch)) else float(v): acc_base + i for i, v in enumerate(values)}


# The constants an epilogue's ops read, and the ops as SIMD instructions (``compiler/elementwise.py``).
epilogue_constants = elementwise.constants
emit_epilogue = elementwise.emit


def gather(lir: LIR, tile: Tile, block: int, acc: int, buf: int) -> None:
    """One channel block of the tile: accumulators -> the store buffer, which holds the tile
    block-major (block ``b`` at ``buf + b * pixels``)."""
    lir.datamove(Direction.ACC_TO_LOCAL, buf + block * tile.pixels, acc, tile.pixels)


def flush(place: TensorPlacement, tile: Tile, buf: int, move, blocks=None) -> None:
    """The store buffer (its channel blocks ``blocks``, else all) -> DRAM0; ``move`` issues each
    run (``LIR.datamove`` or a deferral)."""
    for run in tile_runs(place, tile, buf, blocks):
        move(Direction.LOCAL_TO_DRAM0, *run)


def load_tile(src: TensorPlacement, tile: Tile, buf: int, move) -> None:
    """A tile of ``src`` -> local memory in the store buffer's layout (a fused residual's shortcut)."""
    for run in tile_runs(src, tile, buf):
        move(Direction.DRAM0_TO_LOCAL, *run)
