"""Max and average pooling over sliding windows: slabs as for a conv; a max through the SIMD
unit, tap by tap; an average as MatMuls with diagonal weights into the accumulators."""

from __future__ import annotations

import numpy as np

from ...isa.instructions import Direction, SIMDOp
from ..graph import Node, average_pool_shift
from .context import NOTHING, Context, HandOver, Out, Window
from .epilogue import const_vectors, emit_epilogue, epilogue_constants, flush, gather
from .tiles import plan_tiles, pool_counts, slab_moves, tap_runs, tiles

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
    # Max pooling stages each tap's run in accumulator scratch: one row of the tile.
    rows, cols = plan_tiles(
        result.shape, window, inp.blocks, local_free, acc_free, in_w=inp.shape[2],
        extra_acc_per_col=1 if is_max else 0, store_blocks=result.blocks,
    )  # fmt: skip
    cvec = const_vectors(ctx, out, cvals, acc_free)
    if is_max:
        init = out.consts.add("fill", ctx.graph.constants, values=[ctx.arch.data_type.min_float])
        lir.datamove(Direction.DRAM1_TO_LOCAL, 0, init.base, 1)
    else:
        diag = out.consts.add("diagonal_weights", ctx.graph.constants, values=[2.0**-shift])
        lir.datamove(Direction.DRAM1_TO_LOCAL, 1, diag.base, wsize)
        lir.load_weights(1, wsize)  # the array keeps them for the whole layer
    store = 1 + wsize
    slab = store + rows * cols * result.blocks
    for tile in tiles(result.shape, rows, cols):
        moves, (y_lo, x_lo, scols, plane) = slab_moves(inp, tile, window, padding, slab, cols == result.shape[2])
        for move in moves:
            lir.datamove(*move)
        count = tile.pixels
        scratch = count
        for b in range(result.blocks):
            lir.comment(f"{node.op} {node.output}: image {tile.image} rows {tile.y0}+{tile.rows} block {b}")
            if is_max:
                lir.load_weights(0, 1)  # row 0 = the initial value (the minimum)
            lir.matmul(0, 0, count, zeroes=True)  # max: the minimum everywhere; average: 0
            for tap in window.taps:
                for r, y, c0, x, cnt in tap_runs(tile, inp.shape, window, padding, tap):
                    src = slab + b * plane + (y - y_lo) * scols + (x - x_lo)
                    dst = r * tile.cols + c0
                    if is_max:
                        lir.datamove(Direction.LOCAL_TO_ACC, src, scratch, cnt, window.sw, 1)
                        for i in range(cnt):
                            lir.simd(SIMDOp.MOVE, dest=1, left=0, read=scratch + i)
                            lir.simd(SIMDOp.MAX, left=0, right=1, read=dst + i, write=dst + i)
                    else:
                        lir.matmul(src, dst, cnt, window.sw, 1, accumulate=True)
            if not is_max:
                tc = counts[tile.y0 : tile.y0 + tile.rows, tile.x0 : tile.x0 + tile.cols].reshape(-1)
                for c, factor in scales.items():
                    idx = np.nonzero(tc == c)[0]
                    if idx.size:
                        lir.simd(SIMDOp.MOVE, dest=1, left=0, read=cvec[factor])
                        for i in idx.tolist():
                            lir.simd(SIMDOp.MULTIPLY, left=0, right=1, read=i, write=i)
            emit_epilogue(lir, 0, count, node.epilogue, cvec, b)
            gather(lir, tile, b, 0, store)
        flush(result, tile, store, lir.datamove)
    return NOTHING
