"""Resizes: nearest as strided copies of source rows; linear as two 1-D passes of MatMuls with
diagonal weight blocks (one per distinct interpolation weight). A gather (a crop, a flip, a reflect
or edge pad: pixels picked by row and column) is copied like a nearest resize."""

from __future__ import annotations

import numpy as np

from ...isa.instructions import Direction
from ...placement import TensorPlacement
from ..graph import Node
from .context import NOTHING, Context, HandOver, Out, ScheduleError, Tile
from .epilogue import flush, gather

OPS = ("resize_nearest", "resize_linear", "gather")


def lower(node: Node, ctx: Context, given: HandOver, out: Out) -> HandOver:
    (_linear if node.op == "resize_linear" else _nearest)(node, ctx, out)
    return NOTHING


def column_runs(cols: list[int]) -> list[tuple[int, int, int, int]]:
    """Cover output columns with runs (first output col, first source col, output step, count)
    where the source column grows by one per step."""
    todo = dict(enumerate(cols))
    runs = []
    for ox in range(len(cols)):
        if ox not in todo:
            continue
        best = (1, 1)
        for step in (1, 2, 4, 8, 16):
            k = 1
            while todo.get(ox + k * step, -1) == cols[ox] + k:
                k += 1
            if k > best[1]:
                best = (step, k)
        step, k = best
        runs.append((ox, cols[ox], step, k))
        for i in range(k):
            del todo[ox + i * step]
    return runs


def pair_runs(pairs: list[tuple[int, int]]) -> list[tuple[int, int, int, int, int]]:
    """Cover (output, input) pairs with runs of constant steps: (o0, i0, ostep, istep, count)."""
    todo = set(pairs)
    runs = []
    for o, i in sorted(pairs):
        if (o, i) not in todo:
            continue
        best = (1, 1, 1)
        for ostep in (1, 2, 4, 8):
            for istep in (1, 2, 4, 8):
                k = 1
                while (o + k * ostep, i + k * istep) in todo:
                    k += 1
                if k > best[2]:
                    best = (ostep, istep, k)
        ostep, istep, k = best
        runs.append((o, i, ostep, istep, k))
        for j in range(k):
            todo.discard((o + j * ostep, i + j * istep))
    return runs


def _nearest(node: Node, ctx: Context, out: Out) -> None:
    """Each source row is loaded once into local memory and written to every output row that
    repeats it, as strided runs: output columns ``r, r + s, ...`` take source columns
    ``c0, c0 + 1, ...`` (an integer upscale is one run per residue ``r``)."""
    inp, result = ctx.place[node.inputs[0]], ctx.place[node.output]
    rows, cols = node.attrs.rows, node.attrs.cols
    lir = out.lir
    n, h, w, _ = inp.shape
    if w * inp.blocks > ctx.arch.local_depth:
        raise ScheduleError(f"resize: a row of {w} pixels x {inp.blocks} channel blocks does not fit local memory")
    runs = column_runs(cols)
    for img in range(n):
        loaded = None
        for oy, sy in enumerate(rows):
            if sy != loaded:  # the source row, block b at b * w
                for b in range(inp.blocks):
                    lir.datamove(Direction.DRAM0_TO_LOCAL, b * w, inp.address(img, sy, 0, b), w)
                loaded = sy
            for ox0, sx0, step, count in runs:
                for b in range(inp.blocks):
                    lir.datamove(Direction.LOCAL_TO_DRAM0, b * w + sx0, result.address(img, oy, ox0, b), count, 1, step)


def _linear(node: Node, ctx: Context, out: Out) -> None:
    """Two 1-D passes through a DRAM0 temporary: along w (rows of the input), then along h. Each
    output vector is a weighted sum of input vectors; every distinct weight is a diagonal weight
    block, loaded once per row and applied with strided MatMul runs."""
    inp, result = ctx.place[node.inputs[0]], ctx.place[node.output]
    mh = np.asarray(node.attrs.rows, dtype=np.float64)
    mw = np.asarray(node.attrs.cols, dtype=np.float64)
    n, h, w, c = inp.shape
    tmp = ctx.dram0.alloc((n, h, mw.shape[0], c), f"{node.output} (resize temporary)")
    _resample_cols(ctx, out, inp, tmp, mw)
    _resample_rows(ctx, out, tmp, result, mh)
    if node.epilogue:  # pragma: no cover - fuse() does not fuse into resizes
        raise ScheduleError("resize epilogue")


def _diagonal_blocks(ctx: Context, out: Out, matrix: np.ndarray) -> dict[float, int]:
    values = sorted({float(v) for v in matrix.reshape(-1) if v != 0.0})
    rec = out.consts.add("diagonal_weights", ctx.graph.constants, values=values)
    return {v: rec.base + i * (ctx.n + 1) for i, v in enumerate(values)}


def _resample_cols(ctx: Context, out: Out, inp: TensorPlacement, result: TensorPlacement, mw: np.ndarray) -> None:
    lir = out.lir
    n, h, w, _ = inp.shape
    ow = mw.shape[0]
    cb = inp.blocks
    blocks = _diagonal_blocks(ctx, out, mw)
    block = ctx.n + 1
    wbuf, src = 0, block
    store = src + w * cb
    if store + ow * cb > ctx.arch.local_depth or ow > ctx.arch.accumulator_depth:
        raise ScheduleError(f"resize: a row of {w} -> {ow} pixels does not fit local memory/accumulators")
    for img in range(n):
        for y in range(h):
            for b in range(cb):  # the row, block b at src + b * w
                lir.datamove(Direction.DRAM0_TO_LOCAL, src + b * w, inp.address(img, y, 0, b), w)
            tile = Tile(img, y, 1, 0, ow)
            for b in range(inp.blocks):
                lir.load_weights(0, 1, zeroes=True)
                lir.matmul(0, 0, ow, zeroes=True)
                for v, dram1 in blocks.items():
                    pairs = [(o, i) for o in range(ow) for i in range(w) if mw[o, i] == v]
                    if not pairs:
                        continue
                    lir.datamove(Direction.DRAM1_TO_LOCAL, wbuf, dram1, block)
                    lir.load_weights(wbuf, block)
                    for o0, i0, ostep, istep, cnt in pair_runs(pairs):
                        lir.matmul(src + b * w + i0, o0, cnt, istep, ostep, accumulate=True)
                gather(lir, tile, b, 0, store)
            flush(result, tile, store, lir.datamove)


def _resample_rows(ctx: Context, out: Out, inp: TensorPlacement, result: TensorPlacement, mh: np.ndarray) -> None:
    lir = out.lir
    n, h, w, _ = inp.shape
    blocks = _diagonal_blocks(ctx, out, mh)
    block = ctx.n + 1
    wbuf, src = 0, block
    store = src + w
    if store + w * inp.blocks > ctx.arch.local_depth or w > ctx.arch.accumulator_depth:
        raise ScheduleError(f"resize: a row of {w} pixels does not fit local memory/accumulators")
    for img in range(n):
        for oy in range(mh.shape[0]):
            tile = Tile(img, oy, 1, 0, w)
            terms = [(iy, float(mh[oy, iy])) for iy in range(h) if mh[oy, iy] != 0.0]
            for b in range(inp.blocks):
                lir.load_weights(0, 1, zeroes=True)
                lir.matmul(0, 0, w, zeroes=True)
                for iy, v in terms:
                    lir.datamove(Direction.DRAM0_TO_LOCAL, src, inp.address(img, iy, 0, b), w)
                    lir.datamove(Direction.DRAM1_TO_LOCAL, wbuf, blocks[v], block)
                    lir.load_weights(wbuf, block)
                    lir.matmul(src, 0, w, 1, 1, accumulate=True)
                gather(lir, tile, b, 0, store)
            flush(result, tile, store, lir.datamove)
