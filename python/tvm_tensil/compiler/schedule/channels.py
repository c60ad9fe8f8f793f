"""Channel movement: concat and slice as exact 0/1 MatMuls that move lanes; pad as a fill and
copies into the interior."""

from __future__ import annotations

import numpy as np

from ...isa.instructions import Direction
from ...packing import selection_blocks
from ..graph import Node
from .context import NOTHING, Context, HandOver, Out, ScheduleError
from .epilogue import const_vectors, emit_epilogue, epilogue_constants

OPS = ("concat", "slice", "pad")


def lower(node: Node, ctx: Context, given: HandOver, out: Out) -> HandOver:
    if node.op == "pad":
        return _pad(node, ctx, out)
    if node.op == "concat":
        offsets = np.cumsum([0] + [ctx.place[i].shape[3] for i in node.inputs])
        segments = [(i, 0, int(offsets[i + 1] - offsets[i]), int(offsets[i])) for i in range(len(node.inputs))]
    else:
        segments = [(0, node.attrs.begin, node.attrs.end - node.attrs.begin, 0)]
    return _select_channels(node, ctx, out, segments)


def _select_channels(node: Node, ctx: Context, out: Out, segments: list[tuple[int, int, int, int]]) -> HandOver:
    """Channel concat or slice as exact 0/1 matmuls: each selected input lane lands on its output
    lane. ``segments``: (input, first channel, count, first output channel)."""
    ins = [ctx.place[i] for i in node.inputs]
    result = ctx.place[node.output]
    lir = out.lir
    wrec = out.consts.add("channel_selection", ctx.graph.constants, segments=[list(s) for s in segments])
    zero = out.consts.add("fill", ctx.graph.constants, values=[0.0])
    pairs = selection_blocks(segments, ctx.n)
    cvals = epilogue_constants(node.epilogue, ctx.arch.data_type, ctx.n)
    acc_free = ctx.arch.accumulator_depth - len(cvals)
    cvec = const_vectors(ctx, out, cvals, acc_free)
    block = ctx.n + 1
    wlocal = 1
    stage = wlocal + block
    chunk = min(acc_free, (ctx.arch.local_depth - stage - len(cvals)) // 2)
    if chunk < 1:
        raise ScheduleError(f"{node.op}: local memory too small for one pixel of the output")
    buf = stage + chunk
    lir.datamove(Direction.DRAM1_TO_LOCAL, 0, zero.base, 1)
    for start in range(0, result.pixels, chunk):
        cnt = min(chunk, result.pixels - start)
        for ob in range(result.blocks):
            lir.comment(f"{node.op} {node.output}: pixels {start}+{cnt} block {ob}")
            lir.load_weights(0, 1)
            lir.matmul(0, 0, cnt, zeroes=True)
            for k, (seg, pob, ib) in enumerate(pairs):
                if pob != ob:
                    continue
                src = ins[segments[seg][0]]
                lir.datamove(Direction.DRAM0_TO_LOCAL, stage, src.base + ib * src.pixels + start, cnt)
                lir.datamove(Direction.DRAM1_TO_LOCAL, wlocal, wrec.base + k * block, block)
                lir.load_weights(wlocal, block)
                lir.matmul(stage, 0, cnt, accumulate=True)
            emit_epilogue(lir, 0, cnt, node.epilogue, cvec, ob)
            lir.datamove(Direction.ACC_TO_LOCAL, buf, 0, cnt)
            lir.datamove(Direction.LOCAL_TO_DRAM0, buf, result.base + ob * result.pixels + start, cnt)
    return NOTHING


def _pad(node: Node, ctx: Context, out: Out) -> HandOver:
    """Fill the output with the pad value (the bias row of a zero matmul), then copy the input
    rows into the interior."""
    inp, result = ctx.place[node.inputs[0]], ctx.place[node.output]
    lir = out.lir
    pt, pl, _, _ = node.attrs.padding
    fill = out.consts.add("fill", ctx.graph.constants, values=[node.attrs.value])
    lir.datamove(Direction.DRAM1_TO_LOCAL, 0, fill.base, 1)
    lir.load_weights(0, 1)
    chunk = min(ctx.arch.accumulator_depth, ctx.arch.local_depth - 1)
    lir.matmul(0, 0, chunk, zeroes=True)  # every accumulator vector = the value
    lir.datamove(Direction.ACC_TO_LOCAL, 1, 0, chunk)
    for start in range(0, result.size, chunk):
        lir.datamove(Direction.LOCAL_TO_DRAM0, 1, result.base + start, min(chunk, result.size - start))
    n, h, w, _ = inp.shape
    if w > ctx.arch.local_depth - 1:
        raise ScheduleError(f"pad: a row of {w} pixels does not fit local memory")
    rows_per_move = (ctx.arch.local_depth - 1) // w
    for b in range(inp.blocks):
        for img in range(n):
            for y0 in range(0, h, rows_per_move):  # rows of one block are contiguous
                k = min(rows_per_move, h - y0)
                lir.datamove(Direction.DRAM0_TO_LOCAL, 1, inp.address(img, y0, 0, b), k * w)
                for y in range(k):
                    lir.datamove(Direction.LOCAL_TO_DRAM0, 1 + y * w, result.address(img, y0 + y + pt, pl, b), w)
    return NOTHING
