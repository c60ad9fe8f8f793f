"""Max and average pooling over sliding windows: slabs as for a conv; a max through the SIMD
unit, each output vector the running maximum of its window in a register; an average as MatMuls
with diagonal weights into the accumulators."""

from __future__ import annotations

import numpy as np

from ...isa.instructions import Direction, SIMDOp
from ..graph import Node, average_pool_shift
from .context import NOTHING, Context, HandOver, Out, ScheduleError, Window
from .epilogue import const_vectors, emit_epilogue, epilogue_constants, flush, gather
from .overlap import Overlap
from .tiles import plan_tiles, pool_counts, slab_moves, slab_size, tap_runs, tiles

OPS = ("max_pool2d", "avg_pool2d")


def _average_scales(node: Node, ctx: Context, window: Window) -> tuple[int, dict[int, float], np.ndarray]:
    """Average pooling never sums raw values: a window of k values inside the range can sum far
    outside it. Each value enters the sum pre-scaled by 2^-s (2^s >= k, so no partial sum can leave
    the range), through a MatMul with diagonal weights 2^-s (exact up to rounding each product); the
    sum is then scaled by 2^s / count, a factor in [1, 2) that the data type holds to within
    2^-(bp+1). Scaling by 1/count directly would round the factor itself (1/9 is 28/256 in FP16BP8:
    1.6% off). Returns s, {count: its factor}, and each output pixel's count."""
    a = node.attrs
    inp, result = ctx.place[node.inputs[0]], ctx.place[node.output]
    counts = pool_counts(inp.shape, result.shape, window, a.padding, a.count_include_pad)
    shift = average_pool_shift(window.kh, window.kw)
    scales = {c: 2.0**shift / c for c in sorted(set(counts.reshape(-1).tolist())) if 2**shift != c}
    return shift, scales, counts


def lower(node: Node, ctx: Context, given: HandOver, out: Out) -> HandOver:
    a = node.attrs
    inp, result = ctx.place[node.inputs[0]], ctx.place[node.output]
    lir = out.lir
    window = Window(*a.kernel, *a.strides, *a.dilation)
    padding = a.padding
    is_max = node.op == "max_pool2d"
    shift, scales, counts = (0, {}, None) if is_max else _average_scales(node, ctx, window)
    cvals = list(dict.fromkeys(epilogue_constants(node.epilogue, ctx.arch.data_type, ctx.n) + list(scales.values())))
    wsize = 0 if is_max else ctx.n + 1
    acc_free = ctx.arch.accumulator_depth - len(cvals)
    local_free = ctx.arch.local_depth - len(cvals) - 1 - wsize

    # Max pooling moves each channel block's slab into the accumulators, beside the outputs.
    def fit(room: int) -> tuple[int, int]:
        return plan_tiles(
            result.shape, window, inp.blocks, room, acc_free, in_w=inp.shape[2], store_blocks=result.blocks,
            acc_plane=is_max,
        )  # fmt: skip

    rows, cols = fit(local_free)
    buffers = 1
    if len(tiles(result.shape, rows, cols)) > 1:  # two slabs and store buffers: DRAM beside the SIMD work
        try:
            rows, cols = fit(local_free // 2)
            buffers = 2
        except ScheduleError:
            pass
    cvec = const_vectors(ctx, out, cvals, acc_free)
    if not is_max:
        diag = out.consts.add("diagonal_weights", ctx.graph.constants, values=[2.0**-shift])
        lir.datamove(Direction.DRAM1_TO_LOCAL, 1, diag.base, wsize)
        lir.load_weights(1, wsize)  # the array keeps them for the whole layer
    full = cols == result.shape[2]
    store_size = rows * cols * result.blocks
    slab_vectors = slab_size(rows, cols, window, inp.blocks, inp.shape[2] if full else None)
    stores = [1 + wsize + k * store_size for k in range(buffers)]
    slabs = [1 + wsize + buffers * store_size + k * slab_vectors for k in range(buffers)]
    cut = tiles(result.shape, rows, cols)
    overlap = Overlap(lir, ctx.arch)

    def load(i: int, move) -> tuple:
        moves, geometry = slab_moves(inp, cut[i], window, padding, slabs[i % buffers], full)
        for m in moves:
            move(*m)
        return geometry

    geometry = load(0, lir.datamove)
    for i, tile in enumerate(cut):
        slab, store = slabs[i % buffers], stores[i % buffers]
        if i and buffers == 1:
            geometry = load(i, lir.datamove)
        overlap.settle(slab, slab + slab_vectors)  # this tile's slab, loaded beside the tile before
        y_lo, x_lo, scols, plane = geometry
        if buffers == 2 and i + 1 < len(cut):
            geometry = load(i + 1, overlap.defer)
        count = tile.pixels
        windows = _window_vectors(tile, inp.shape, window, padding, y_lo, x_lo, scols) if is_max else None
        for b in range(result.blocks):
            lir.comment(f"{node.op} {node.output}: image {tile.image} rows {tile.y0}+{tile.rows} block {b}")
            if is_max:
                lir.datamove(Direction.LOCAL_TO_ACC, slab + b * plane, count, plane)
                overlap.compute(plane)
                _running_max(lir, windows, count, overlap.compute)
                work = 0
            else:
                lir.matmul(0, 0, count, zeroes=True)  # the sums start at 0
                work = count
                for tap in window.taps:
                    for r, y, c0, x, cnt in tap_runs(tile, inp.shape, window, padding, tap):
                        src = slab + b * plane + (y - y_lo) * scols + (x - x_lo)
                        lir.matmul(src, r * tile.cols + c0, cnt, window.sw, 1, accumulate=True)
                        work += cnt + 1
                tc = counts[tile.y0 : tile.y0 + tile.rows, tile.x0 : tile.x0 + tile.cols].reshape(-1)
                for c, factor in scales.items():  # the sums to averages
                    idx = np.nonzero(tc == c)[0]
                    if idx.size:
                        lir.simd(SIMDOp.MOVE, dest=1, left=0, read=cvec[factor])
                        for i_ in idx.tolist():
                            lir.simd(SIMDOp.MULTIPLY, left=0, right=1, read=i_, write=i_)
            emit_epilogue(lir, 0, count, node.epilogue, cvec, b)
            overlap.settle(store + b * count, store + (b + 1) * count)  # the stores of the tile before last
            gather(lir, tile, b, 0, store)
            overlap.compute(work + count * (1 + len(node.epilogue)))
        flush(result, tile, store, overlap.defer if buffers == 2 else lir.datamove)
    overlap.drain()
    return NOTHING


def _window_vectors(tile, inp_shape, window: Window, padding, y_lo: int, x_lo: int, scols: int) -> list[list[int]]:
    """Each output pixel's window: the slab plane's vectors its taps read inside the input."""
    _, h, w, _ = inp_shape
    out = []
    for r in range(tile.rows):
        for c in range(tile.cols):
            ys = [(tile.y0 + r) * window.sh - padding[0] + ky * window.dh for ky in range(window.kh)]
            xs = [(tile.x0 + c) * window.sw - padding[1] + kx * window.dw for kx in range(window.kw)]
            vecs = [(y - y_lo) * scols + (x - x_lo) for y in ys if 0 <= y < h for x in xs if 0 <= x < w]
            if not vecs:
                raise ScheduleError(f"a max pool window at output ({r}, {c}) reads only padding")
            out.append(vecs)
    return out


def _running_max(lir, windows: list[list[int]], base: int, tick) -> None:
    """Output vector ``i`` = the maximum of its window's vectors (at ``base`` + each): the first
    into register 1, each next one's maximum with it there, the last one's to the output.
    ``tick(n)``: n more SIMD instructions went out (deferred DRAM moves go between them)."""
    for i, vecs in enumerate(windows):
        if i % 16 == 15:
            tick(sum(len(v) for v in windows[i - 15 : i + 1]))
        if len(vecs) == 1:
            lir.simd(SIMDOp.MOVE, left=0, read=base + vecs[0], write=i)
            continue
        lir.simd(SIMDOp.MOVE, dest=1, left=0, read=base + vecs[0])
        for v in vecs[1:-1]:
            lir.simd(SIMDOp.MAX, dest=1, left=0, right=1, read=base + v)
        lir.simd(SIMDOp.MAX, left=0, right=1, read=base + vecs[-1], write=i)
