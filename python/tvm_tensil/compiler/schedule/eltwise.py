"""Element-wise ops as layers of their own, over flat pixel runs through the accumulators and the
SIMD unit: two maps combined (add, sub, max, min, mul; the second of the same shape or a
per-channel vector (n, 1, 1, c) broadcast over h and w), or a standalone activation."""

from __future__ import annotations

from ...isa.instructions import Direction, SIMDOp
from ..elementwise import ACTIVATIONS
from ..graph import Node
from ..simd import powers_of_two
from .context import NOTHING, Context, HandOver, Out, ScheduleError
from .epilogue import const_vectors, emit_epilogue, epilogue_constants

BINARY = {"add": SIMDOp.ADD, "sub": SIMDOp.SUBTRACT, "max": SIMDOp.MAX, "min": SIMDOp.MIN, "mul": SIMDOp.MULTIPLY}
OPS = (*BINARY, *ACTIVATIONS)


def lower(node: Node, ctx: Context, given: HandOver, out: Out) -> HandOver:
    shapes = [ctx.graph.tensors[t].shape for t in node.inputs]
    if node.op in BINARY and (node.op != "add" or shapes[0] != shapes[1]):
        return _binary(node, ctx, out)
    result = ctx.place[node.output]
    ins = [ctx.place[i] for i in node.inputs]
    lir = out.lir
    epilogue = ([] if node.op == "add" else [(node.op, node.attrs)]) + node.epilogue
    cvals = epilogue_constants(epilogue, ctx.arch.data_type, ctx.n)
    acc_free = ctx.arch.accumulator_depth - len(cvals)
    cvec = const_vectors(ctx, out, cvals, acc_free)
    chunk = min(acc_free, ctx.arch.local_depth - len(cvals))
    # Every vector is real (no padding blocks) and the operands share the layout: one flat run (one
    # per channel block when the epilogue reads per-channel constants). Two maps are added as the
    # second's move into the accumulators (a saturating add).
    for off, cnt, block in _runs(result, chunk, cvals):
        lir.comment(f"{node.op} {node.output}: vectors {off}+{cnt}")
        for k, src in enumerate(ins):
            lir.datamove(Direction.DRAM0_TO_LOCAL, 0, src.base + off, cnt)
            lir.datamove(Direction.LOCAL_TO_ACC_ACCUMULATE if k else Direction.LOCAL_TO_ACC, 0, 0, cnt)
        emit_epilogue(lir, 0, cnt, epilogue, cvec, block)
        lir.datamove(Direction.ACC_TO_LOCAL, 0, 0, cnt)
        lir.datamove(Direction.LOCAL_TO_DRAM0, 0, result.base + off, cnt)
    return NOTHING


def _binary(node: Node, ctx: Context, out: Out) -> HandOver:
    """``first OP second`` vector by vector: the second operand (or the broadcast vector) into SIMD
    register 1, then the op on the first in the accumulators. A product stored at a scale other than
    its inputs' (``shift``) is rescaled by exact powers of two: the operands first when the product
    shrinks (so that it cannot overflow; each its share, ``Product.first``), the product when it
    grows."""
    if ctx.arch.simd_registers_depth < 1:
        raise ScheduleError(f"{node.op} needs a SIMD register; this architecture has simd_registers_depth = 0")
    a_shape, b_shape = (ctx.graph.tensors[t].shape for t in node.inputs)
    swapped = a_shape[1:3] == (1, 1) and b_shape[1:3] != (1, 1)  # the vector comes first
    first, second = (node.inputs[1], node.inputs[0]) if swapped else tuple(node.inputs)
    mat, vec = ctx.place[first], ctx.place[second]
    broadcast = ctx.graph.tensors[first].shape != ctx.graph.tensors[second].shape
    dt = ctx.arch.data_type
    shift = node.attrs.shift if node.op == "mul" else 0
    # A shrinking product: each operand takes its share of the powers of two before the product.
    shares = (node.attrs.first, -shift - node.attrs.first) if shift < 0 else (0, 0)
    in_acc, in_r1 = shares[::-1] if swapped else shares
    before, in_place = powers_of_two(-in_r1, dt), powers_of_two(-in_acc, dt)
    after = powers_of_two(shift, dt) if shift > 0 else []
    cvals = list(dict.fromkeys(epilogue_constants(node.epilogue, dt, ctx.n) + before + in_place + after))
    acc_free = ctx.arch.accumulator_depth - len(cvals) - 1  # and one vector for the broadcast one
    cvec = const_vectors(ctx, out, cvals, acc_free + 1)
    left, right = (1, 0) if swapped else (0, 1)
    op = BINARY[node.op]
    # Per vector: [the second operand into r1], r1 rescaled, then the op (into r1 when the product is
    # rescaled after it), then the rescale into the output.
    scale_r1 = [(SIMDOp.MULTIPLY, 1, 0, 1, cvec[f], None) for f in before]
    # The operand in the accumulators shrunk in place (through r1, before r1 takes the other).
    shrink = [(SIMDOp.MOVE, 1, 0, 0, "v", None)] + [(SIMDOp.MULTIPLY, 1, 0, 1, cvec[f], None) for f in in_place]
    shrink = shrink[:-1] + [shrink[-1][:5] + ("v",)] if in_place else []
    if after:
        tail = [(op, 1, left, right, "v", None)]
        tail += [(SIMDOp.MULTIPLY, 1, 0, 1, cvec[f], None) for f in after[:-1]]
        tail += [(SIMDOp.MULTIPLY, 0, 0, 1, cvec[after[-1]], "v")]
    else:
        tail = [(op, 0, left, right, "v", "v")]
    lir = out.lir
    result = ctx.place[node.output]
    if not broadcast:
        chunk = min(acc_free // 2, ctx.arch.local_depth - len(cvals))
        for off, cnt, block in _runs(result, chunk, cvals):
            lir.comment(f"{node.op} {node.output}: vectors {off}+{cnt}")
            for src, acc in ((mat, 0), (vec, cnt)):
                lir.datamove(Direction.DRAM0_TO_LOCAL, 0, src.base + off, cnt)
                lir.datamove(Direction.LOCAL_TO_ACC, 0, acc, cnt)
            lir.simd_runs(0, cnt, shrink + [(SIMDOp.MOVE, 1, 0, 0, ("v", cnt), None)] + scale_r1 + tail)
            _finish(node, lir, cnt, cvec, result.base + off, block)
        return NOTHING
    n, h, w, _ = result.shape
    chunk = min(acc_free, ctx.arch.local_depth - len(cvals), h * w)
    held = acc_free  # the broadcast vector
    for img in range(n):
        for b in range(result.blocks):
            lir.datamove(Direction.DRAM0_TO_LOCAL, 0, vec.address(img, 0, 0, b), 1)
            lir.datamove(Direction.LOCAL_TO_ACC, 0, held, 1)
            for off in range(0, h * w, chunk):
                cnt = min(chunk, h * w - off)
                lir.comment(f"{node.op} {node.output}: image {img} block {b} pixels {off}+{cnt}")
                lir.datamove(Direction.DRAM0_TO_LOCAL, 0, mat.address(img, 0, 0, b) + off, cnt)
                lir.datamove(Direction.LOCAL_TO_ACC, 0, 0, cnt)
                lir.simd_runs(0, cnt, shrink)
                load_r1 = [(SIMDOp.MOVE, 1, 0, 0, held, None)] + scale_r1  # (the epilogue may have used r1)
                if after:  # the product is rescaled in r1: the vector goes back into r1 for each
                    lir.simd_runs(0, cnt, load_r1 + tail)
                else:
                    for step in load_r1:
                        lir.simd(step[0], dest=1, left=0, right=step[3], read=step[4])
                    lir.simd_runs(0, cnt, tail)
                _finish(node, lir, cnt, cvec, result.address(img, 0, 0, b) + off, b)
    return NOTHING


def _runs(result, chunk: int, cvals: list):
    """(first vector, count, channel block) of a map's runs of at most ``chunk`` vectors: the whole
    map in one run, or each channel block in its own when the epilogue reads per-channel constants
    (block None: a run may span blocks)."""
    if any(isinstance(v, tuple) for v in cvals):
        spans = [(b * result.pixels, result.pixels, b) for b in range(result.blocks)]
    else:
        spans = [(0, result.size, None)]
    for start, size, block in spans:
        for o in range(0, size, chunk):
            yield start + o, min(chunk, size - o), block


def _finish(node: Node, lir, cnt: int, cvec, address: int, block: int | None) -> None:
    emit_epilogue(lir, 0, cnt, node.epilogue, cvec, block)
    lir.datamove(Direction.ACC_TO_LOCAL, 0, 0, cnt)
    lir.datamove(Direction.LOCAL_TO_DRAM0, 0, address, cnt)
