"""Global average pooling by pairwise halving.

With T = next_pow2(pixels), log2(T) levels each replace vectors i and i + T/2 by their mean (both
halves through a MatMul with diagonal weights 1/2; a missing partner counts as zero), so nothing
ever leaves the range and each level adds at most one unit in the last place. The result
(sum / T) is scaled by T / pixels, a factor in [1, 2). All channel blocks of an image go through
the levels together when they fit local memory; else block by block, pixels in chunks of a power
of two whose means are reduced the same way. Blocks go together in groups as large as the
accumulators hold (a group's first level writes half its vectors there; a 7x7 map of 1,280
channels is 107 blocks of 12, two groups in 2,048 accumulators), each group as two halves in the
two accumulator banks, one half's gather beside the other half's MatMuls. When the conv before
left the whole input in local memory, the first level reads it there (and its store to DRAM0 is dropped
when the pool is its only reader).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...isa.instructions import Direction, SIMDOp
from ..graph import Node
from ..lir import LIR
from .context import NOTHING, Context, HandOver, Out, ScheduleError
from .epilogue import const_vectors, emit_epilogue, epilogue_constants
from .tiles import ceil_div

OPS = ("global_avg_pool",)


@dataclass(frozen=True)
class _Levels:
    """One pool's sizes: ``pixels`` per map, ``total`` (the next power of two), vectors per block."""

    pixels: int
    total: int
    block: int
    blocks: int


def group_size(lv: _Levels, acc_free: int, room: int) -> int:
    """The most channel blocks that go through the levels together: their first level's results
    (half their vectors) fit the accumulators and ``room`` vectors of local memory (0: none)."""
    return max(0, min(lv.blocks, acc_free // max(1, lv.total // 2), room // max(1, lv.total)))


def hand_over(node: Node, ctx: Context, given: HandOver, lv: _Levels, consts: int, acc_free: int):
    """``(where the input is, base, blocks a group)`` when the conv before left the pool's whole
    (single-image) input in local memory, block-major, and the pool's own vectors (the diagonal
    weights, then half of a group's input for the first level's results) fit below or above
    everything that conv still holds; else None."""
    held = given.in_local.get(node.inputs[0])
    if not ctx.options.pool_hand_over or held is None:
        return None
    if ctx.place[node.inputs[0]].shape[0] != 1 or held[1] < lv.blocks * lv.pixels:
        return None
    group = group_size(lv, acc_free, 2 * (given.most_beside(ctx.arch, consts) - lv.block))
    if group < 1:
        return None
    base = given.room_beside(ctx.arch, lv.block + group * max(1, lv.total // 2), consts)
    return None if base is None else (held[0], base, group)


def _reduce(lir: LIR, buf: int, size: int, width: int, blocks: int = 1, load=None, src=None) -> None:
    """For each of ``blocks`` blocks, vectors buf[b * width + (0:size)] of a logical width
    ``width`` (a power of two, zeros beyond ``size``) -> their mean in acc[b]. Each level is one
    MatMul pair per block, streaming back to back, and one gather for all blocks (the blocks hide
    each other's array latency). ``load(b)``, if given, brings block b in just before its first
    level. ``src = (address, stride)``: the first level reads block b at address + b * stride
    instead (the levels after it work in ``buf``)."""
    at, stride = src or (buf, width)
    if width == 1:
        for b in range(blocks if load else 0):
            load(b)
        if stride == 1:
            lir.datamove(Direction.LOCAL_TO_ACC, at, 0, blocks)
        for b in range(blocks) if stride != 1 else ():
            lir.datamove(Direction.LOCAL_TO_ACC, at + b * stride, b, 1)
        return
    first = True
    while width > 1:
        width //= 2
        lo, hi = min(size, width), max(0, size - width)
        for b in range(blocks):
            if first and load:
                load(b)
            lir.matmul(at + b * stride, b * width, lo)
            lir.matmul(at + b * stride + width, b * width, hi, accumulate=True)
        first, at, stride, size = False, buf, width, lo  # block b now at buf + b * width
        if width > 1:
            lir.datamove(Direction.ACC_TO_LOCAL, buf, 0, (blocks - 1) * width + size)


@dataclass(frozen=True)
class _Half:
    """Half of a group's channel blocks (``count`` from ``first``) in one accumulator bank: block
    ``b`` of it loads at ``data + b * width`` (from DRAM0), its levels work at ``buf + b * w`` and
    its means end in ``acc + b``."""

    first: int
    count: int
    data: int
    buf: int
    acc: int


def _reduce_in_turn(lir: LIR, halves: tuple[_Half, _Half], size: int, width: int, load=None, src=None) -> None:
    """``_reduce`` for two halves of a group in the two accumulator banks, in turn: a level's
    gather of one half runs beside the other half's MatMuls (one half's gather, then the other's
    MatMuls, in program order: each level is B's gather of the level before, A's MatMuls, A's
    gather, B's MatMuls). ``load(b)`` brings block ``b`` (of the group) in; B's loads go out
    among A's first MatMuls. ``src = (address, stride)``: the first level reads block ``b`` of the
    group at address + b * stride."""
    a, b = halves
    # Each half's first-level reads: (address, stride).
    at = [(src[0] + h.first * src[1], src[1]) if src else (h.data, width) for h in halves]
    first, last_size = True, size

    def matmuls(k: int, h: _Half, w: int, lo: int, hi: int, loads: bool) -> None:
        base, stride = at[k]
        for j in range(max(h.count, b.count if loads else 0)):
            if j < h.count:
                if loads:
                    load(h.first + j)
                lir.matmul(base + j * stride, h.acc + j * w, lo)
                lir.matmul(base + j * stride + w, h.acc + j * w, hi, accumulate=True)
            if loads and j < b.count:
                load(b.first + j)

    def gather(h: _Half, w: int, size: int) -> None:
        lir.datamove(Direction.ACC_TO_LOCAL, h.buf, h.acc, (h.count - 1) * w + size)

    behind = None  # (width, size) of B's level whose gather is still to go
    while width > 1:
        width //= 2
        lo, hi = min(last_size, width), max(0, last_size - width)
        if behind:
            gather(b, *behind)
        matmuls(0, a, width, lo, hi, first and load is not None)
        if width > 1:
            gather(a, width, lo)
        matmuls(1, b, width, lo, hi, False)
        behind = (width, lo) if width > 1 else None
        at = [(h.buf, width) for h in halves]
        first, last_size = False, lo


def lower(node: Node, ctx: Context, given: HandOver, out: Out) -> HandOver:
    inp, result = ctx.place[node.inputs[0]], ctx.place[node.output]
    lir = out.lir
    n_img, h, w, _ = inp.shape
    lv = _Levels(h * w, 1 << max(0, h * w - 1).bit_length(), ctx.n + 1, inp.blocks)
    post = lv.total / lv.pixels
    fused = epilogue_constants(node.epilogue, ctx.arch.data_type, ctx.n)
    cvals = list(dict.fromkeys(([post] if post != 1.0 else []) + fused))
    acc_free = ctx.arch.accumulator_depth - len(cvals)
    room = ctx.arch.local_depth - len(cvals) - lv.block
    # Local memory from ``base``: the diagonal weights, then the data (``block`` vectors up).
    held = hand_over(node, ctx, given, lv, len(cvals), acc_free)
    for name, moves in given.carried:  # the conv's stores, beside the pool when it reads local memory
        if held is None or not (name == node.inputs[0] and name in ctx.read_once):
            for move in moves:
                lir.datamove(*move)
    base = 0 if held is None else held[1]
    data = base + lv.block
    fits = [
        1 << e
        for e in range(lv.total.bit_length())
        if (1 << e) <= 2 * acc_free and (1 << e) + lv.total // (1 << e) <= room
    ]
    if not fits and held is None:
        raise ScheduleError(f"global average pool over {lv.pixels} pixels does not fit local memory")
    chunk = fits[-1] if fits else 1
    cvec = const_vectors(ctx, out, cvals, acc_free)
    if lv.total > 1:
        half = out.consts.add("diagonal_weights", ctx.graph.constants, values=[0.5])
        lir.datamove(Direction.DRAM1_TO_LOCAL, base, half.base, lv.block)
        lir.load_weights(base, lv.block)

    def finish(img: int, first_block: int, count: int, acc: int = 0, at: int = data) -> None:
        """Scale and epilogue the means in acc[acc:acc + count] (channel blocks from
        ``first_block``), gather them at ``at``, store them."""
        if post != 1.0:
            lir.simd(SIMDOp.MOVE, dest=1, left=0, read=cvec[post])
            lir.simd_run(SIMDOp.MULTIPLY, acc, count, left=0, right=1)
        emit_epilogue(lir, acc, count, node.epilogue, cvec)
        lir.datamove(Direction.ACC_TO_LOCAL, at, acc, count)
        outs = [result.address(img, 0, 0, b) for b in range(first_block, first_block + count)]
        if outs == list(range(outs[0], outs[0] + count)):
            lir.datamove(Direction.LOCAL_TO_DRAM0, at, outs[0], count)
        else:
            for b, address in enumerate(outs):
                lir.datamove(Direction.LOCAL_TO_DRAM0, at + b, address, 1)

    # A group of two or more blocks goes as two halves in the two accumulator banks, in turn
    # (``_reduce_in_turn``), where each half's first level fits its bank.
    bank = ctx.arch.accumulator_depth // 2
    in_turn = 2 * ((bank - len(cvals)) // max(1, lv.total // 2)) if lv.total > 1 else 0

    def reduce_group(img: int, g0: int, count: int, load=None, src=None) -> None:
        if count < 2 or count > in_turn:
            _reduce(lir, data, lv.pixels, lv.total, count, load=load, src=src)
            finish(img, g0, count)
            return
        a = (count + 1) // 2
        step = lv.total if load else max(1, lv.total // 2)  # (loaded blocks take their whole width)
        halves = (_Half(0, a, data, data, 0), _Half(a, count - a, data + a * lv.total, data + a * step, bank))
        _reduce_in_turn(lir, halves, lv.pixels, lv.total, load=load, src=src)
        for h in halves:
            finish(img, g0 + h.first, h.count, h.acc, h.buf)

    if held is not None:  # block b at held[0] + b * pixels, where the conv left it
        at, group = held[0], held[2]
        group = min(group, in_turn) if in_turn >= 2 else group
        for g0 in range(0, lv.blocks, group):
            count = min(group, lv.blocks - g0)
            lir.comment(f"global_avg_pool {node.output}: blocks {g0}+{count} together, from local memory")
            reduce_group(0, g0, count, src=(at + g0 * lv.pixels, lv.pixels))
        return NOTHING
    # Channel blocks of an image in groups when two or more fit (block b at data + (b - g0) * total).
    group = group_size(lv, acc_free, room)
    if lv.blocks > 1 and group > 1:
        group = min(group, in_turn) if in_turn >= 2 else group
        for img in range(n_img):
            for g0 in range(0, lv.blocks, group):
                count = min(group, lv.blocks - g0)
                lir.comment(f"global_avg_pool {node.output}: image {img}, blocks {g0}+{count} together")

                def load(b, img=img, g0=g0):
                    address = inp.address(img, 0, 0, g0 + b)
                    lir.datamove(Direction.DRAM0_TO_LOCAL, data + b * lv.total, address, lv.pixels)

                reduce_group(img, g0, count, load=load)
        return NOTHING
    _block_by_block(node, ctx, lir, lv, data, chunk, finish)
    return NOTHING


def _block_by_block(node: Node, ctx: Context, lir: LIR, lv: _Levels, data: int, chunk: int, finish) -> None:
    """Each image's channel blocks one at a time, pixels in chunks whose means are reduced again."""
    inp = ctx.place[node.inputs[0]]
    means = data + chunk  # one vector per chunk
    for img in range(inp.shape[0]):
        for b in range(inp.blocks):
            lir.comment(f"global_avg_pool {node.output}: image {img} block {b}")
            first = inp.address(img, 0, 0, b)
            chunks = ceil_div(lv.pixels, chunk)
            for q in range(chunks):
                cnt = min(chunk, lv.pixels - q * chunk)
                lir.datamove(Direction.DRAM0_TO_LOCAL, data, first + q * chunk, cnt)
                if chunks > 1:
                    _reduce(lir, data, cnt, chunk)
                    lir.datamove(Direction.ACC_TO_LOCAL, means + q, 0, 1)
            if chunks > 1:
                _reduce(lir, means, chunks, lv.total // chunk)
            else:
                _reduce(lir, data, lv.pixels, lv.total)
            finish(img, b, 1)
