"""Element-wise ops as layers of their own: ``add`` of two maps, or a standalone activation, over
flat pixel runs through the accumulators and the SIMD unit."""

from __future__ import annotations

from ...isa.instructions import Direction
from ..elementwise import ACTIVATIONS
from ..graph import Node
from .context import NOTHING, Context, HandOver, Out
from .epilogue import const_vectors, emit_epilogue, epilogue_constants

OPS = ("add", *ACTIVATIONS)


def lower(node: Node, ctx: Context, given: HandOver, out: Out) -> HandOver:
    result = ctx.place[node.output]
    ins = [ctx.place[i] for i in node.inputs]
    lir = out.lir
    epilogue = ([] if node.op == "add" else [(node.op, node.attrs)]) + node.epilogue
    cvals = epilogue_constants(epilogue)
    acc_free = ctx.arch.accumulator_depth - len(cvals)
    cvec = const_vectors(ctx, out, cvals, acc_free)
    chunk = min(acc_free, ctx.arch.local_depth - len(cvals))
    # Every vector is real (no padding blocks) and the operands share the layout: one flat run.
    for off in range(0, result.size, chunk):
        cnt = min(chunk, result.size - off)
        lir.comment(f"{node.op} {node.output}: vectors {off}+{cnt}")
        for k, src in enumerate(ins):
            lir.datamove(Direction.DRAM0_TO_LOCAL, 0, src.base + off, cnt)
            lir.datamove(Direction.LOCAL_TO_ACC_ACCUMULATE if k else Direction.LOCAL_TO_ACC, 0, 0, cnt)
        emit_epilogue(lir, 0, cnt, epilogue, cvec)
        lir.datamove(Direction.ACC_TO_LOCAL, 0, 0, cnt)
        lir.datamove(Direction.LOCAL_TO_DRAM0, 0, result.base + off, cnt)
    return NOTHING
