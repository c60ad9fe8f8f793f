"""A dense layer of one output vector (a classifier at batch 1) with its weights streamed through
the array as MatMul inputs and the layer's input held in the array as weights.

Loaded as weights (``conv.bare_blocks``), each block of N x N weights feeds one MatMul vector: the
layer moves every weight twice through local memory's second port (written from DRAM, read by
LoadWeights) and the array waits for both. Streamed, chunk ``c`` of the input (its N features, as
lane 0 of N vectors: ``x_c``) is loaded once as the array's weights, and class ``k``'s N weights of
that chunk are one MatMul input vector: lane 0 of ``acc[k]`` gains ``sum_j W[cN + j, k] x[cN + j]``,
the same sequence of roundings as the weight-stationary MatMul without bias rows (the product is
symmetric; each MatMul's chain of roundings starts from zero, the bias is added exactly last; with
the bias row in the first block's chain a tie can round the other way, an lsb). The
weights then pass through local memory once, at one vector a cycle, and where the DRAM bus takes
several beats a vector they come from both DRAM banks in turn (``banks``), each bank's reader
streaming beside the other's.

Around the stream: the input's chunks become lane-0 vectors through N MatMuls of 0/1 weights (row
j -> lane 0), and the results, one class per vector, become channel blocks through N more (lane 0
-> lane j), starting from the bias: exact moves, no rounding."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...isa.instructions import Direction
from ..graph import Node
from ..latency import beats_per_vector
from .context import Context, HandOver, Out, ScheduleError
from .epilogue import const_vectors, emit_epilogue, epilogue_constants

# DRAM -> local buffers of a class group's chunk: the stream reads ahead of the MatMuls by all but one.
SLOTS = 4


@dataclass(frozen=True)
class DenseLayout:
    """Where a streamed dense layer keeps its buffers in local memory, from 0 up to ``end``: the 0/1
    weights (2N blocks of N), the bias rows, the input, the input as lane-0 vectors, the weight
    slots, the class group's results, the output's store buffer."""

    ones: int
    bias_rows: int
    x: int
    xt: int
    slots: int
    results: int
    store: int
    end: int


def local_layout(chunks: int, classes: int, group: int, n: int, stride: int) -> DenseLayout:
    """The layout of a layer of ``chunks`` input vectors and ``classes`` outputs in class groups of
    ``group`` (``group=0``: what it needs besides the slots and results)."""
    blocks = math.ceil(classes / n)
    ones, bias_rows = 0, 2 * n * n
    x = bias_rows + blocks
    xt = x + chunks
    slots = xt + chunks * stride
    results = slots + SLOTS * group
    store = results + group
    return DenseLayout(ones, bias_rows, x, xt, slots, results, store, store + blocks)


@dataclass(frozen=True)
class StreamedDense:
    """A streamed dense layer's plan: ``chunks`` input vectors (N features each) by ``classes``
    outputs, in class groups of ``group`` (a multiple of N but the last) that the accumulators and
    local memory hold; chunk ``c`` comes from DRAM bank ``banks[c % len(banks)]``; ``local``: its
    buffers."""

    chunks: int
    classes: int
    group: int
    stride: int  # accumulator vectors between chunks while the input is turned into lane-0 vectors
    banks: tuple[int, ...]
    local: DenseLayout


def streams(node: Node, ctx: Context) -> bool:
    """Whether ``node`` is a dense layer of a single output vector the streamed form computes: a
    matmul or 1x1 conv of one input pixel (or an NCHW map it reads flattened), no residue, second
    output, fused residual or windows, and 1.0 exact in the data type."""
    a, inp, result = node.attrs, ctx.place[node.inputs[0]], ctx.place[node.output]
    if a.weight is None or a.groups != 1 or a.residue or a.second or a.residual or a.patches or a.phase:
        return False
    shape = np.shape(ctx.graph.constants[a.weight])
    pointwise = a.layout == "KM" or (tuple(shape[2:]) == (1, 1) and not any(a.padding))
    one_input = inp.pixels == 1 or (a.flatten is not None and inp.shape[0] == 1)
    if not (pointwise and one_input and result.pixels == 1 and not inp.interleave and not inp.patches):
        return False
    dt = ctx.arch.data_type
    return int(dt.from_float(1.0)) == 1 << dt.binary_point


def bank_choices(node: Node, ctx: Context, consts) -> list[tuple[int, ...]]:
    """The DRAM banks the streamed form can take its weights from here: DRAM1 alone, and both in
    turn where the DRAM bus takes several beats a vector (with one, the banks' readers take turns
    anyway) and DRAM0 has room for half of them above the feature maps."""
    if not streams(node, ctx):
        return []
    try:
        p = plan(node, ctx, (1,))
    except ScheduleError:
        return []
    choices = [(1,)]
    half = (p.chunks + 1) // 2 * p.classes
    room = ctx.dram0 is None or ctx.dram0.top + consts.top0 + half <= ctx.arch.dram0_depth
    if beats_per_vector(ctx.arch) > 1 and p.chunks > 1 and room:
        choices.append((0, 1))
    return choices


def plan(node: Node, ctx: Context, banks: tuple[int, ...]) -> StreamedDense:
    n = ctx.n
    inp, result = ctx.place[node.inputs[0]], ctx.place[node.output]
    chunks, classes = inp.size, result.shape[3]
    stride = 1 << max(0, math.ceil(math.log2(n)))
    cvals = epilogue_constants(node.epilogue, ctx.arch.data_type, n)
    acc_free = ctx.arch.accumulator_depth - len(cvals)
    # Accumulators: the group's lane-0 results and its channel blocks; local memory: the slots, the
    # group's results again, the buffers of fixed size.
    room = ctx.arch.local_depth - len(cvals) - local_layout(chunks, classes, 0, n, stride).end
    group = min(classes, acc_free * n // (n + 1), room // (SLOTS + 1))
    group = group if group == classes else group // n * n
    if group < min(n, classes):
        raise ScheduleError(f"{node.output}: a group of {min(n, classes)} classes does not fit the memories")
    if min(chunks, acc_free // stride) < 1:
        raise ScheduleError(f"{node.output}: the accumulators hold no chunk of the input")
    return StreamedDense(chunks, classes, group, stride, banks, local_layout(chunks, classes, group, n, stride))


def lower(node: Node, ctx: Context, given: HandOver, out: Out, banks: tuple[int, ...]) -> HandOver:
    p = plan(node, ctx, banks)
    given.issue(out.lir)
    n, lir, a = ctx.n, out.lir, node.attrs
    inp = ctx.place[node.inputs[0]]
    constants = ctx.graph.constants
    cvals = epilogue_constants(node.epilogue, ctx.arch.data_type, n)
    acc_free = ctx.arch.accumulator_depth - len(cvals)
    cvec = const_vectors(ctx, out, cvals, acc_free)
    # Constants: the 0/1 weights, the bias rows, the streamed weights (per bank, its chunks in order).
    moves = out.consts.add("lane_moves", constants)
    bias = None
    if a.bias is not None:
        bias = out.consts.add("channel_vectors", constants, channels=p.classes, values=a.bias)
    extra = {"flatten": list(a.flatten)} if a.flatten else {}
    owned = {b: [c for c in range(p.chunks) if p.banks[c % len(p.banks)] == b] for b in sorted(set(p.banks))}
    streamed = {
        b: out.consts.add("streamed_dense", constants, bank=b, weight=a.weight, layout=a.layout, chunks=cs, **extra)
        for b, cs in owned.items()
    }
    ones, bias_rows, x, xt, slots = p.local.ones, p.local.bias_rows, p.local.x, p.local.xt, p.local.slots
    lir.datamove(Direction.DRAM1_TO_LOCAL, ones, moves.base, moves.size)
    if bias is not None:
        lir.datamove(Direction.DRAM1_TO_LOCAL, bias_rows, bias.base, bias.size)
    lir.datamove(Direction.DRAM0_TO_LOCAL, x, inp.address(0, 0, 0, 0), p.chunks)

    # The input's chunks as lane-0 vectors: chunk c's feature j at xt + c * stride + j.
    lir.comment(f"dense {node.output}: the input as lane-0 vectors")
    piece = acc_free // p.stride
    for c0 in range(0, p.chunks, piece):
        count = min(piece, p.chunks - c0)
        for j in range(n):
            _load(lir, ones + j * n, n)
            lir.matmul(x + c0, j, count, acc_step=p.stride)
        lir.datamove(Direction.ACC_TO_LOCAL, xt + c0 * p.stride, 0, count * p.stride)

    # The stream: per class group, every chunk's weights through the array onto its lane-0 input.
    jobs = [(k0, c) for k0 in range(0, p.classes, p.group) for c in range(p.chunks)]

    def fetch(i: int) -> None:
        k0, c = jobs[i]
        bank = p.banks[c % len(p.banks)]
        rec = streamed[bank]
        src = rec.base + owned[bank].index(c) * p.classes + k0
        direction = Direction.DRAM0_TO_LOCAL if bank == 0 else Direction.DRAM1_TO_LOCAL
        lir.datamove(direction, slots + (i % SLOTS) * p.group, src, min(p.group, p.classes - k0))

    for i in range(min(SLOTS - 1, len(jobs))):
        fetch(i)
    for i, (k0, c) in enumerate(jobs):
        count = min(p.group, p.classes - k0)
        if i + SLOTS - 1 < len(jobs):
            fetch(i + SLOTS - 1)
        if c == 0:
            lir.comment(f"dense {node.output}: classes {k0}+{count} streamed")
        _load(lir, xt + c * p.stride, n)
        lir.matmul(slots + (i % SLOTS) * p.group, 0, count, accumulate=c > 0)
        if c == p.chunks - 1:
            _finish(node, ctx, out, p, k0, count, cvec, bias is not None)
    return HandOver()


def _load(lir, local: int, n: int) -> None:
    """N rows of weights from ``local``, then a zero shifted in as the bias row."""
    lir.load_weights(local, n)
    lir.load_weights(0, 1, zeroes=True)


def _finish(node, ctx, out, p: StreamedDense, k0, count, cvec, has_bias: bool) -> None:
    """A class group's lane-0 results as channel blocks (from the bias), its epilogue and stores."""
    n, lir = ctx.n, out.lir
    ones, results, store = p.local.ones, p.local.results, p.local.store
    bias_rows = p.local.bias_rows if has_bias else None
    result = ctx.place[node.output]
    first, blocks = k0 // n, math.ceil(count / n)
    at = p.group  # the channel blocks, above the lane-0 results
    lir.datamove(Direction.ACC_TO_LOCAL, results, 0, count)
    if bias_rows is not None:
        lir.datamove(Direction.LOCAL_TO_ACC, bias_rows + first, at, blocks)
    for j in range(min(n, count)):
        _load(lir, ones + (n + j) * n, n)
        lir.matmul(results + j, at, math.ceil((count - j) / n), local_step=n, accumulate=bias_rows is not None or j > 0)
    for b in range(blocks):
        emit_epilogue(lir, at + b, 1, node.epilogue, cvec, first + b)
    lir.datamove(Direction.ACC_TO_LOCAL, store, at, blocks)
    lir.datamove(Direction.LOCAL_TO_DRAM0, store, result.address(0, 0, 0, first), blocks)
