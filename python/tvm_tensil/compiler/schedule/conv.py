"""Convolutions (also dense layers, depthwise convs and standalone bias adds): plan, then emit.

``plan`` decides everything about one way to run a conv and returns it as a frozen ``ConvPlan``:
the tiles, one or two slab and store buffers, how the weights reach the array (``WeightPlan``),
whether output blocks alternate accumulator banks, and the local memory map (including a map the
conv before left in local memory). ``emit`` reads the plan and writes the instructions. ``lower``
chooses among plans by the latency model (``search.cheapest``). ``emit_in_turn`` writes two plans
together, a conv's output blocks and those of the depthwise conv that reads it in turn.

Within a tile: inputs (the slab) are loaded into local memory once and reused by every kernel tap
and every output channel block; weights are loaded into the array once per (tile, tap, channel
block) and reused by all the tile's vectors. With two buffers, the next tile's slab loads and the
previous tile's stores are issued in pieces between this tile's compute instructions (``Overlap``).

Memory map: local = [weights | second output's weights | identity weights | store buffer(s) |
slab(s)] from ``lo``; accumulators = [tile | scratch | constants] (per bank when banked).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from ...isa.instructions import ConfigRegister, Direction, SIMDOp, TapWindow
from ...isa.layout import layout_of
from ...packing import ConstRecipe, group_blocks
from ..graph import Conv, Node, grouped, kernel_size
from ..latency import COSTS, accumulator_cycles, beats_per_vector
from ..lir import CONTINUED, LIR, LOAD, Burst, no_rows
from ..memory import ConstTable
from . import dense
from .context import NOTHING, Context, HandOver, Out, ScheduleError, Tile, Window
from .epilogue import const_vectors, emit_epilogue, epilogue_constants, flush, gather, load_tile
from .overlap import Overlap
from .search import TAKES_HAND_OVER, cheapest, cycles_with, decided_once, fastest_of, lowered
from .tiles import ceil_div, covering_tap, merge_runs, plan_tiles, slab_moves, slab_size, tap_runs, tiles

OPS = ("conv2d", "bias_add")

# How a conv's weights reach the array, in the order tried (the first whose tiles fit is used).
WEIGHT_MODES = ("resident", "input blocks", "blocks", "one block")


@dataclass(frozen=True)
class WeightGroup:
    """Weights loaded into local memory together: DRAM1 runs ``(address, local offset, vectors)``,
    and the array loads they feed, in use order: ``(input block or None for the bias row, tap
    index, local offset, part)`` (part 0 of weights in two parts is the residue)."""

    runs: tuple[tuple[int, int, int], ...]
    loads: tuple[tuple[int | None, int, int, int], ...]


@dataclass(frozen=True)
class WeightPlan:
    """``groups[ob]``: output block ``ob``'s weight groups in use order. ``slots`` local slots of
    ``slot`` vectors take the groups in turn (2: the next group loads beside the current one's
    MatMuls); ``slots == 0``: every weight stays resident for the layer (``slot``: their size)."""

    mode: str
    groups: tuple[tuple[WeightGroup, ...], ...]
    slot: int
    slots: int

    @property
    def staging(self) -> int:
        """Local vectors the weights take."""
        return self.slot * max(self.slots, 1)


@dataclass(frozen=True)
class Recipes:
    """The conv's DRAM1 constants: weights (with the bias in the covering tap's row), a bias row
    per output block when no tap covers every pixel, identity weights for a shortcut through the
    array, and the fused second output's weights."""

    weights: ConstRecipe
    bias: ConstRecipe | None
    identity: ConstRecipe | None
    second: ConstRecipe | None


@dataclass(frozen=True)
class LocalMap:
    """Where everything lives in local memory; ``geometry`` is the first slab's when the conv
    before handed this conv's whole input over (then ``slabs`` is where it left it)."""

    weights: int
    second_weights: int
    identity: int
    stores: tuple[int, ...]
    stores2: tuple[int, ...]
    slabs: tuple[int, ...]
    handed: bool
    geometry: tuple[int, int, int, int] | None
    # The conv before left this residual conv's shortcut (read by nobody else) whole in local memory
    # in the store buffer's layout: it is the store buffer, and its stores to DRAM0 are dropped.
    shortcut_handed: bool = False
    # Maps the conv before left whole in local memory that this conv does not read but a later conv
    # does (``kept_maps``): they stay where they are, and this conv hands them on.
    kept: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConvPlan:
    window: Window
    padding: tuple[int, int, int, int]
    taps: tuple[tuple[int, int], ...]
    order: tuple[int, ...]  # taps in use order: a covering tap first (it starts the accumulators)
    covering: int | None
    recipes: Recipes
    weights: WeightPlan
    constants: tuple[float, ...]  # the epilogues' constant vectors
    buffers: int
    rows: int
    cols: int
    tiles: tuple[Tile, ...]
    banked: bool  # output blocks alternate between the accumulators' halves
    shortcut_matmul: bool
    memory: LocalMap
    # A depthwise conv on a core with the window MatMul: each kernel row one window MatMul per
    # output row (``taps`` are then the kernel rows, (ky, 0); each tile's window: ``_tile_window``).
    window_rows: bool = False
    # Weight blocks of N rows, without the bias row (``bare_blocks``).
    bare_blocks: bool = False
    # The store buffer as a ring of this many output blocks (0: every block of the tile): each
    # block's gather goes to slot ``block % store_slots`` and out to DRAM0 at once (``_store_base``).
    store_slots: int = 0

    @property
    def key(self) -> tuple[int, int, int, int]:
        """What tells plans apart: buffers, tile shape and store slots."""
        return self.buffers, self.rows, self.cols, self.store_slots


def _window(node: Node, ctx: Context) -> Window:
    a = node.attrs
    if a.weight is None:  # identity (a standalone bias add)
        kh = kw = 1
    else:
        kh, kw = kernel_size(ctx.graph.constants, a)
    return Window(int(kh), int(kw), *a.strides, *a.dilation)


def _recipes(
    node: Node, ctx: Context, consts: ConstTable, taps, covering, shortcut_matmul: bool, rows: bool = False,
    bare: bool = False,
) -> Recipes:  # fmt: skip
    """``rows``: the weights of window MatMuls, a block per kernel row (``taps`` the rows); ``bare``:
    weight blocks without bias rows (``bare_blocks``), the bias a row per output block."""
    a = node.attrs
    out_c = ctx.place[node.output].shape[3]
    bias = a.bias
    fused = covering is not None and bias is not None and not bare
    fused_bias = {"bias": bias, "bias_tap": list(taps[covering])} if fused else {}
    constants = ctx.graph.constants
    if a.weight is None:
        weights = consts.add("identity_weights", constants, channels=out_c, **({"bias": bias} if fused_bias else {}))
    else:
        extra = {"flatten": list(a.flatten)} if a.flatten else {}
        extra |= {"phase": list(a.phase)} if a.phase else {}
        extra |= {"patches": True} if a.patches else {}
        extra |= {"residue": [a.residue, ctx.arch.data_type.binary_point]} if a.residue else {}
        extra |= {"window": True} if rows else {}
        extra |= {"bias_rows": False} if bare else {}
        extra |= {"blocks": list(a.blocks)} if a.blocks else {}
        weights = consts.add(
            "conv_weights", constants, weight=a.weight, groups=a.groups, layout=a.layout,
            **extra, **fused_bias,
        )  # fmt: skip
    separate = covering is None or (bare and bias is not None)
    bias_rows = None
    if separate and a.blocks:  # (the whole conv's channels, then its blocks)
        full = np.shape(constants[a.weight])[0]
        bias_rows = consts.add("channel_vectors", constants, channels=full, values=bias, blocks=list(a.blocks))
    elif separate:
        bias_rows = consts.add("channel_vectors", constants, channels=out_c, values=bias)
    identity = None
    if a.residual and shortcut_matmul:
        identity = consts.add("diagonal_weights", constants, values=[1.0])
    second, srec = a.second, None
    if second:
        srec = consts.add(
            "conv_weights", constants, weight=second.weight, groups=second.groups, layout="OIHW",
            **({"bias": second.bias, "bias_tap": [0, 0]} if second.bias is not None else {}),
        )  # fmt: skip
    return Recipes(weights, bias_rows, identity, srec)


def lower(node: Node, ctx: Context, given: HandOver, out: Out) -> HandOver:
    """A conv (weights in two parts where calibration chose them and local memory holds what they
    need: a residual conv's shortcut then enters through the array; else in one part)."""
    if not node.attrs.residue:
        return _lower(node, ctx, given, out)
    trial = out.fork()
    try:
        left = _lower(node, ctx, given, trial)
    except ScheduleError:
        return _lower(replace(node, attrs=replace(node.attrs, residue=0)), ctx, given, out)
    out.lir.extend(trial.lir)
    out.consts.commit(trial.consts)
    return left


def _lower(node: Node, ctx: Context, given: HandOver, out: Out) -> HandOver:
    """A conv, and its fused second output (if any) when that is faster than a layer of its own:
    the second output saves reading the result back from DRAM0 but needs a second store buffer,
    which can shrink the conv's tiles."""
    second = node.attrs.second
    if not second:
        sizes = block_group_sizes(node, ctx)
        if not sizes:
            return _best(node, ctx, given, out)
        ways = [lambda c, g, o: _best(node, c, g, o)]
        ways += [lambda c, g, o, size=size: _in_block_groups(node, c, g, o, size) for size in sizes]
        return cheapest(ways, ctx, given, out)
    plain = Node(node.op, node.inputs, node.output, replace(node.attrs, second=None), node.epilogue, node.source_ops)
    affine = Node("conv2d", [node.output], second.output, Conv(second.weight, second.bias, groups=second.groups),
                  list(second.epilogue))  # fmt: skip
    fused, alone = plan(node, ctx, given, out.consts, 1), plan(plain, ctx, given, out.consts, 1)
    if fused.key[1:] == alone.key[1:]:  # the same tiles: the second output only saves DRAM traffic
        return _best(node, ctx, given, out)
    if tile_count(node, ctx, alone) <= 4:
        pair = [lambda c, g, o: _best(node, c, g, o), lambda c, g, o: _pair(plain, affine, c, g, o)]
        return cheapest(pair, ctx, given, out)
    return _pair(plain, affine, ctx, given, out)


def block_group_sizes(node: Node, ctx: Context) -> list[int]:
    """Channel blocks a depthwise conv may go in, a group at a time, where its whole map for all
    blocks is more than local memory holds: each output block reads only its own input block, so a
    group's tiles need only the group's slabs, and where they cover a group's whole map its rows are
    read once (tiles of all blocks are then a few pixels each, their slabs read row by row, each
    read a DRAM round trip). Sizes whose group's input map takes at most a quarter, or an eighth, of
    local memory; none for a conv with a fused residual, residue or second output, per-channel
    epilogue constants, or maps not plainly block-major."""
    a = node.attrs
    inp, res = ctx.place[node.inputs[0]], ctx.place[node.output]
    if a.weight is None or not _depthwise(a, ctx) or a.blocks or a.residual or a.residue or a.second:
        return []
    if any(p.interleave or p.flattened_hw or p.patches for p in (inp, res)):
        return []
    if any(isinstance(v, tuple) for v in _constants(node, ctx.arch.data_type, ctx.n)):
        return []
    per_block = inp.pixels
    if per_block * inp.blocks <= ctx.arch.local_depth:
        return []
    sizes = {ctx.arch.local_depth // (share * per_block) for share in (4, 8)}
    return sorted(s for s in sizes if 1 <= s < res.blocks)


def _in_block_groups(node: Node, ctx: Context, given: HandOver, out: Out, size: int) -> HandOver:
    """A depthwise conv ``size`` channel blocks at a time, each group a conv of its own over views
    of the input and output (block-major: a group's blocks are one run of each map). The groups
    differ only in where their maps and weights lie: a group as wide as one before it (from the same
    hand-over) is lowered as that one's searches decided."""
    inp, res = ctx.place[node.inputs[0]], ctx.place[node.output]
    channels = res.shape[3]
    left = given.issue(out.lir)
    decisions: dict = {}
    for first in range(0, res.blocks, size):
        end = min(res.blocks, first + size)
        width = min(channels, end * ctx.n) - first * ctx.n
        views = {
            t: replace(p, base=p.base + first * p.pixels, shape=(*p.shape[:3], width))
            for t, p in ((node.inputs[0], inp), (node.output, res))
        }
        group = Node(node.op, node.inputs, node.output, replace(node.attrs, blocks=(first, end)), node.epilogue,
                     node.source_ops)  # fmt: skip
        sub_ctx = replace(ctx, place={**ctx.place, **views}, following=None)
        lower = partial(_best, group, sub_ctx, left)
        left = decided_once(decisions, (width, left.key), lower, out).issue(out.lir)
    return left


def _pair(plain: Node, affine: Node, ctx: Context, given: HandOver, out: Out) -> HandOver:
    """A conv, then its second output as a layer of its own (which comes next while lowering it)."""
    left = _best(plain, ctx.before(affine), given, out)
    return _best(affine, ctx, left, out)


def _best(node: Node, ctx: Context, given: HandOver, out: Out) -> HandOver:
    """A fused residual's shortcut starts the accumulators either by a move (the accumulator
    engine's work) or by a MatMul with identity weights (the array's): the faster one is kept,
    unless the options choose. A dense conv's weight blocks go with or without their bias rows
    (``bare_blocks``), likewise."""
    chosen, streamed = ctx.options.stream_dense, dense.bank_choices(node, ctx, out.consts)
    if isinstance(chosen, tuple) and chosen in streamed:
        return dense.lower(node, ctx, given, out, chosen)
    if ctx.options.bare_blocks is None and bare_blocks(node, ctx):
        ways = [lambda c, g, o, b=b: _best(node, _with_bare_blocks(c, b), g, o) for b in (False, True)]
        if chosen is None:
            ways += [lambda c, g, o, b=b: dense.lower(node, c, g, o, b) for b in streamed]
        return cheapest(ways, ctx, given, out)
    if not node.attrs.residual:
        return _plans(node, ctx, given, out, False)
    if node.attrs.residue:  # the shortcut adds to the residue's result: a MatMul accumulates, a move would not
        return _plans(node, ctx, given, out, True)
    if ctx.options.shortcut is not None:
        return _plans(node, ctx, given, out, ctx.options.shortcut == "array")
    ways = [lambda c, g, o, through_array=b: _plans(node, c, g, o, through_array) for b in (False, True)]
    return cheapest(ways, ctx, given, out)


def _plans(node: Node, ctx: Context, given: HandOver, out: Out, shortcut_matmul: bool) -> HandOver:
    """Where the conv before left the whole input in local memory and this conv cannot take it as
    one slab (its tiles are smaller than the map), its tiles reading it in place (its own buffers
    beside it) or the stores issued and the input read back; where it left maps a later conv reads
    (``kept_maps``), those kept where they are or not: whichever the latency model finds faster,
    a tie kept and in place (without comparing, kept where only the conv's buffers move, in place
    where its tiles are as large)."""
    single = plan(node, ctx, given, out.consts, 1, None, shortcut_matmul)

    def feasible(in_place: bool, keep: bool) -> bool:
        try:
            plan(node, ctx, given, out.consts, 1, None, shortcut_matmul, in_place, keep)
        except ScheduleError:
            return False
        return True

    keeps = [False]
    if kept_maps(node, ctx, given):
        try:
            kept = plan(node, ctx, given, out.consts, 1, None, shortcut_matmul, False, True)
            # The same plan but for where its buffers go: kept without comparing.
            keeps = [True] if replace(kept, memory=single.memory) == single else [True, False]
        except ScheduleError:
            pass
    ins = [False]
    if not single.memory.handed and held_input(node, ctx, given) is not None:
        try:
            reading = plan(node, ctx, given, out.consts, 1, None, shortcut_matmul, True)
            # Tiles as large in place: nothing to weigh against reading the map back. Smaller: the
            # single-buffered plans weighed alone (weighing every plan both ways costs compile time).
            ins = [True]
            if reading.rows * reading.cols < single.rows * single.cols:
                ins = [_faster_alone(node, ctx, given, out, [reading, single]) == 0]
        except ScheduleError:
            pass
    ways = [(in_place, keep) for keep in keeps for in_place in ins]
    # (Keeping was tried reading the input back; in place it may not fit: then not kept.)
    ways = [way for way in ways if way == (False, False) or feasible(*way)] or [(ins[0], False)]
    if len(ways) == 1:
        return _plans_as(node, ctx, given, out, shortcut_matmul, *ways[0])
    alternatives = [lambda c, g, o, w=way: _plans_as(node, c, g, o, shortcut_matmul, *w) for way in ways]
    return cheapest(alternatives, ctx, given, out)


def _faster_alone(node: Node, ctx: Context, given: HandOver, out: Out, plans: list[ConvPlan]) -> int:
    """The index of the plan whose instructions (and the stores it leaves) the latency model finds
    fastest, each emitted alone (a tie: the first)."""

    def cycles(i: int) -> int:
        trial = out.fork()
        return cycles_with(trial.lir, emit(node, ctx, given, trial, plans[i]))

    return fastest_of(len(plans), cycles)


def _plans_as(
    node: Node, ctx: Context, given: HandOver, out: Out, shortcut_matmul: bool, in_place: bool, keep: bool
) -> HandOver:
    """The fastest of the single- and double-buffered plans, by the latency model: double buffering
    overlaps DRAM with compute but halves the tiles (more weight loads per pixel). Layers of up to
    64 tiles (a small local memory cuts even CIFAR-sized maps into 8-16) are emitted each way and
    compared; a layer of more tiles keeps the single-buffered plan (emitting it several times would
    cost compile time)."""
    single = plan(node, ctx, given, out.consts, 1, None, shortcut_matmul, in_place, keep)
    oh = ctx.place[node.output].shape[1]
    options = [(1, None)]
    # (A band's map between two convs: single-buffered, so that it is one tile handed to the next.)
    if node.output not in ctx.band_maps and tile_count(node, ctx, single) <= 64 and dram_share(node, ctx) >= 0.05:
        options += [(2, None)] + [(2, ceil_div(oh, k)) for k in (2, 4, 8)]
    plans: dict[tuple, ConvPlan] = {}
    for buffers, max_rows in options:
        try:
            p = plan(node, ctx, given, out.consts, buffers, max_rows, shortcut_matmul, in_place, keep)
        except ScheduleError:
            continue
        plans.setdefault(p.key, p)
    # Narrower bands overlap more but reload weights more often: stop at the first band count that
    # loses to the one before it. Then the winner with its tiles pipelined, where it can be.
    choice = ctx.options.pipeline_tiles
    candidates = list(plans.values())
    forced = bool(ctx.options.paced_epilogues)
    ways = [lambda c, g, o, p=p: emit(node, c, g, o, p, bool(choice), paced=forced) for p in candidates]
    if len(candidates) > 1 and _stores_early(node, ctx, candidates[0]):
        # (a layer of few tiles) the single-buffered plan's stores block by block or after each
        # tile's last block, whichever is faster: now and then the first hold the next slab up.
        stores = [
            lambda c, g, o, early=e: emit(node, c, g, o, candidates[0], bool(choice), early, forced)
            for e in (True, False)
        ]
        ways[0] = lambda c, g, o: cheapest(stores, c, g, o)
    banked = _banked_plans(node, ctx, given, out, single, shortcut_matmul, in_place, keep)
    may_pace = ctx.options.paced_epilogues is None and _accumulator_heavy(node, single)
    streams = _streams_weights(ctx, single)
    ring = _ring_plan(node, ctx, given, out, single, shortcut_matmul, in_place, keep)
    if (
        not banked
        and not may_pace
        and not streams
        and ring is None
        and (choice is not None or not any(pipelines(node, p) for p in candidates))
    ):
        return cheapest(ways, ctx, given, out, stop_when_worse=True)
    first, won = out.fork(), []
    left = cheapest(ways, ctx, given, first, stop_when_worse=True, won=won)
    p = candidates[won[0]]
    # The winner as lowered, pipelined, the banked plans; where the epilogues keep the accumulator
    # engine about as busy as the MatMuls the array, each of those paced by both engines too.
    others = [(p, True)] if choice is None and pipelines(node, p) else []  # (plan, pipelined)
    others += [(b, bool(choice) if choice is not None else pipelines(node, b)) for b in banked]
    paced = [(q, piped, True) for q, piped in [(p, bool(choice))] + others] if may_pace else []
    # Where the weights stream through the layer, each unpaced one also with its weight runs in
    # pieces the loads can follow (the loads wait for less, the reader pays its latency more often).
    pieced = [(q, piped, forced, WEIGHT_PIECE) for q, piped in [(p, bool(choice))] + others] if streams else []
    finalists = [lowered(first, left)] + [
        lambda c, g, o, q=q, piped=piped, pace=pace, piece=piece: emit(
            node, c, g, o, q, piped, paced=pace, weight_piece=piece
        )
        for q, piped, pace, piece in [(q, piped, forced, None) for q, piped in others]
        + [(q, piped, True, None) for q, piped, _ in paced]
        + pieced
        + ([(ring, False, forced, None)] if ring is not None else [])
    ]
    if len(finalists) == 1:
        return finalists[0](ctx, given, out)
    return cheapest(finalists, ctx, given, out)


WEIGHT_PIECE = 1024  # vectors per piece of a weight run, where the loads follow it
STORE_SLOTS = 4  # output blocks in a ring store buffer (``ConvPlan.store_slots``)


def _ring_plan(
    node: Node,
    ctx: Context,
    given: HandOver,
    out: Out,
    single: ConvPlan,
    shortcut_matmul: bool,
    in_place: bool,
    keep: bool,
) -> ConvPlan | None:
    """Where the single-buffered plan's store buffer (every output block of a tile) cuts a map
    into several tiles, the plan with a ring of ``STORE_SLOTS`` blocks instead, if its tiles are
    fewer: each tile loads every weight block once, so a conv of many weights and few pixels (the
    last 1x1 convs of MobileNet-v2 on a small local memory) reads them fewer times."""
    a, result = node.attrs, ctx.place[node.output]
    if a.residual or a.second or result.blocks <= STORE_SLOTS or len(single.tiles) <= result.shape[0]:
        return None
    try:
        p = plan(node, ctx, given, out.consts, 1, None, shortcut_matmul, in_place, keep, STORE_SLOTS)
    except ScheduleError:
        return None
    return p if len(p.tiles) < len(single.tiles) else None


def _streams_weights(ctx: Context, p: ConvPlan) -> bool:
    """Whether the layer's weights stream through local memory (not resident for the layer) on a
    core with more than one bus beat a vector (with one, weight runs go in pieces anyway)."""
    return p.weights.slots != 0 and beats_per_vector(ctx.arch) > 1


def _accumulator_heavy(node: Node, p: ConvPlan) -> bool:
    """Whether a block's epilogue and gather take at least half as long as its MatMuls (a 1x1
    conv of few input channels with a ReLU6, say)."""
    loads = sum(1 for group in p.weights.groups[0] for ib, *_ in group.loads if ib is not None)
    return 2 * (1 + len(node.epilogue)) >= loads


def _banked_plans(
    node: Node, ctx: Context, given: HandOver, out: Out, single: ConvPlan, shortcut_matmul: bool, in_place: bool,
    keep: bool,
):  # fmt: skip
    """When the largest tile needs more than half the accumulators (the first layers of a large
    image), plans whose tiles fit half of them: output blocks then alternate banks, so one block's
    epilogue and gather run beside the next one's MatMuls, which pays where the epilogue is long
    (a ReLU6 is two SIMD instructions a vector)."""
    if single.banked or single.cols != ctx.place[node.output].shape[2]:
        return []
    rows = (ctx.arch.accumulator_depth // 2 - len(single.constants)) // single.cols
    if rows < 1 or rows >= single.rows:
        return []
    plans = {}
    for buffers in (1, 2):
        try:
            p = plan(node, ctx, given, out.consts, buffers, rows, shortcut_matmul, in_place, keep)
        except ScheduleError:
            continue
        if p.banked:
            plans.setdefault(p.key, p)
    return list(plans.values())


def weight_plan(
    mode: str, recipes: Recipes, taps, order, cbi: int, cbo: int, depthwise: bool, local_free: int, n: int,
    reads: list[list[int]] | None = None, parts: int = 1, bare: bool = False,
):  # fmt: skip
    """The ``WeightPlan`` of ``mode``, or None when it does not apply. Modes: "resident" (all
    weights stay in local memory for the layer), "input blocks" (as many input blocks' weights per
    group as fit a quarter of local memory twice), "blocks" (one weight block per group), both in
    two alternating slots, and "one block" (one block per group, a single slot). ``reads``: the
    input blocks each output block reads (a grouped conv's; else all of them). ``parts``: 2 for
    weights in two parts (a residue, then the rounded weights with the bias), each part's loads
    after the one before's. ``bare``: blocks of ``n`` rows (``bare_blocks``)."""
    block = n if bare else n + 1
    unit = len(taps) * block  # the weights of one (output block, part, input block)
    ibs_per_ob = 1 if depthwise else max(len(r) for r in reads) if reads else cbi
    wrec, brec = recipes.weights, recipes.bias
    total = wrec.size + (brec.size if brec else 0)
    last = parts - 1  # the part whose loads start with the bias row (without a covering tap)

    # Each output block's input blocks, listed once (indexing rebuilt them per weight block).
    every = list(range(cbi))
    ibs = [[ob] if depthwise else list(reads[ob]) if reads else every for ob in range(cbo)]

    # Block order (output block, part, its input blocks, tap): a grouped conv's output blocks hold
    # only the input blocks they read (packing.pack_conv_weights).
    starts = [int(v) * parts for v in np.cumsum([0] + [len(ibs[ob]) for ob in range(cbo)])]

    def idx(ob, part, ib, t):
        if depthwise:
            return (ob * parts + part) * len(taps) + t
        ob_ibs = ibs[ob]
        return (starts[ob] + part * len(ob_ibs) + ib - ob_ibs[0]) * len(taps) + t

    groups = []
    if mode == "resident":
        if total > local_free // 2:
            return None
        for ob in range(cbo):
            runs, loads = [], []
            for part in range(parts):
                first = idx(ob, part, ibs[ob][0], 0)
                runs.append((wrec.base + first * block, first * block, len(ibs[ob]) * unit))
                if brec and part == last:
                    loads.append((None, 0, wrec.size + ob, part))
                loads += [(ib, t, idx(ob, part, ib, t) * block, part) for ib in ibs[ob] for t in order]
            if brec:
                runs.append((brec.base + ob, wrec.size + ob, 1))
            groups.append((WeightGroup(tuple(runs), tuple(loads)),))
        return WeightPlan(mode, tuple(groups), total, 0)
    if mode == "input blocks":
        per_group = min(ibs_per_ob, (local_free // 4) // (2 * unit + 2))
        if per_group < 1:
            return None
        for ob in range(cbo):
            ob_groups = []
            for part in range(parts):
                for g0 in range(0, len(ibs[ob]), per_group):
                    chunk = ibs[ob][g0 : g0 + per_group]
                    first = idx(ob, part, chunk[0], 0)
                    runs = [(wrec.base + first * block, 0, len(chunk) * unit)]
                    loads = [(ib, t, (idx(ob, part, ib, t) - first) * block, part) for ib in chunk for t in order]
                    if brec and g0 == 0 and part == last:
                        runs.append((brec.base + ob, per_group * unit, 1))
                        loads.insert(0, (None, 0, per_group * unit, part))
                    ob_groups.append(WeightGroup(tuple(runs), tuple(loads)))
            groups.append(tuple(ob_groups))
        return WeightPlan(mode, tuple(groups), per_group * unit + (1 if brec else 0), 2)
    for ob in range(cbo):
        ob_groups = []
        for part in range(parts):
            if brec and part == last:
                ob_groups.append(WeightGroup(((brec.base + ob, 0, 1),), ((None, 0, 0, part),)))
            for ib in ibs[ob]:
                ob_groups += [
                    WeightGroup(((wrec.base + idx(ob, part, ib, t) * block, 0, block),), ((ib, t, 0, part),))
                    for t in order
                ]
        groups.append(tuple(ob_groups))
    return WeightPlan(mode, tuple(groups), block, 2 if mode == "blocks" else 1)


def plan(
    node: Node,
    ctx: Context,
    given: HandOver,
    consts: ConstTable,
    buffers: int,
    max_rows: int | None = None,
    shortcut_matmul: bool = False,
    in_place: bool = False,
    keep: bool = False,
    store_slots: int = 0,
) -> ConvPlan:
    """One way to run ``node``: up to ``buffers`` slabs and store buffers, at most ``max_rows``
    output rows per tile; ``shortcut_matmul``: a fused residual's shortcut enters each output
    block's accumulators through a MatMul with identity weights (exact: x * 1 + 0) instead of a
    move; ``in_place``: every tile reads the input where the conv before left it whole in local
    memory (``held_input``), no slab loaded; ``keep``: the maps ``kept_maps`` names stay where they
    are; ``store_slots``: the store buffer a ring of that many blocks (``ConvPlan.store_slots``;
    one slab, no fused residual or second output). Places the conv's constants in ``consts``."""
    a = node.attrs
    if store_slots and (buffers != 1 or a.residual or a.second):
        raise ScheduleError(f"{node.output}: a ring of store slots takes one buffer, no shortcut or second output")
    if in_place and held_input(node, ctx, given) is None:
        raise ScheduleError(f"{node.output}: its input is not whole in local memory")
    kept = kept_maps(node, ctx, given) if keep else ()
    holding = HandOver({name: given.in_local[name] for name in kept})
    inp, out = ctx.place[node.inputs[0]], ctx.place[node.output]
    window, padding = _window(node, ctx), tuple(a.padding)
    window_rows = _window_rows(node, ctx, window, padding)
    taps = [(ky, 0) for ky in range(window.kh)] if window_rows else window.taps
    # A tap that reads a real input pixel for every output pixel starts each output block: its
    # MatMuls overwrite the accumulators and its first input block's weights carry the bias, so no
    # bias-initialising MatMul is needed. Without such a tap (padding cuts every tap somewhere) the
    # accumulators start from the bias by a MatMul of zeroes. (A kernel row's window MatMuls pad
    # the row: the row covers where it reads a real input row for every output row.)
    if window_rows:
        cover = covering_tap(inp.shape, out.shape, replace(window, kw=1, sw=1, dw=1), padding[:1] + (0,), taps)
    else:
        cover = covering_tap(inp.shape, out.shape, window, padding, taps)
    depthwise = _depthwise(a, ctx)
    bare = bool(ctx.options.bare_blocks) and bare_blocks(node, ctx)
    recipes = _recipes(node, ctx, consts, taps, cover, shortcut_matmul, window_rows, bare)
    reads = None
    if a.weight is not None and grouped(ctx.graph.constants, a):
        o, i_g = np.shape(ctx.graph.constants[a.weight])[:2]
        reads = group_blocks(o, i_g * a.groups, a.groups, ctx.n)
    second = a.second
    order = [cover] + [t for t in range(len(taps)) if t != cover] if cover is not None else list(range(len(taps)))
    cvals = tuple(_constants(node, ctx.arch.data_type, ctx.n))
    acc_free = ctx.arch.accumulator_depth - len(cvals)
    resident = sum(r.size for r in (recipes.second, recipes.identity) if r)
    # Read in place, everything of the conv's own goes below or above what the conv before holds.
    room = (given if in_place else holding).most_beside(ctx.arch, len(cvals))
    local_free = room - resident

    store_blocks = store_slots or out.blocks * (2 if second else 1)

    def fit(room: int) -> tuple[int, int]:
        """Tile rows and columns with ``room`` vectors of local memory for slab and store buffer."""
        return plan_tiles(
            out.shape, window, inp.blocks, room, acc_free, store_blocks=store_blocks, max_rows=max_rows,
            in_w=inp.shape[2], slab_room=not in_place,
        )  # fmt: skip

    for mode in WEIGHT_MODES:  # the first whose weights leave room for a tile
        weights = weight_plan(
            mode, recipes, taps, order, inp.blocks, out.blocks, depthwise, local_free, ctx.n, reads,
            2 if a.residue else 1, bare,
        )  # fmt: skip
        if weights is not None:
            try:
                fit(local_free - weights.staging)
                break
            except ScheduleError:
                if mode == WEIGHT_MODES[-1]:
                    raise
    # Two slabs and two store buffers (the next tile's loads and the previous tile's stores then
    # run beside this tile's MatMuls) or one of each.
    if buffers == 2:
        try:
            rows, cols = fit((local_free - weights.staging) // 2)
        except ScheduleError:
            buffers = 1
    if buffers == 1:
        rows, cols = fit(local_free - weights.staging)
    cut = tuple(tiles(out.shape, rows, cols))
    if len(cut) == 1:
        buffers = 1
    # Accumulator banks: when a tile fits half the accumulators (with the constants at the top of
    # each half), consecutive output blocks alternate between the halves, so one block's epilogue
    # and gather run beside the next one's MatMuls.
    half = ctx.arch.accumulator_depth // 2
    banked = rows * cols <= half - len(cvals) and len(cut) * out.blocks > 1
    memory = _local_map(node, ctx, given, cut, window, padding, weights, resident, buffers, len(cvals), recipes,
                        holding=holding, in_place=in_place, store_slots=store_slots)  # fmt: skip
    memory = replace(memory, kept=kept)
    return ConvPlan(
        window, padding, tuple(taps), tuple(order), cover, recipes, weights, cvals, buffers, rows, cols, cut, banked,
        shortcut_matmul, memory, window_rows, bare, store_slots,
    )  # fmt: skip


def _with_bare_blocks(ctx: Context, bare: bool) -> Context:
    return replace(ctx, options=replace(ctx.options, bare_blocks=bare))


def bare_blocks(node: Node, ctx: Context) -> bool:
    """Whether the conv's weight blocks may go without their bias rows: a dense conv (one output pixel
    an image, no residue, second output or shortcut). Each weight block then feeds a single MatMul
    vector, so reading the blocks from DRAM1 and into the array is the layer's time: a block of N
    rows is read and a zero bias row shifted in after it (1/(N+1) fewer reads); the bias starts
    each output block's accumulators through a MatMul of one zero vector."""
    a, out = node.attrs, ctx.place[node.output]
    dense = a.weight is not None and not _depthwise(a, ctx)  # (so no window MatMuls either)
    return dense and not (a.residue or a.second or a.residual) and out.shape[1] * out.shape[2] == 1


def _depthwise(a: Conv, ctx: Context) -> bool:
    """One diagonal weight block per channel block (an identity with bias, a depthwise conv)."""
    return a.weight is None or (a.groups != 1 and not grouped(ctx.graph.constants, a))


def _window_rows(node: Node, ctx: Context, window: Window, padding) -> bool:
    """Whether each kernel row runs as window MatMuls: on a core with the window MatMul, for a
    depthwise conv whose rows the array holds and whose windows the core's Configure can hold (else
    diagonal blocks)."""
    a = node.attrs
    if not (ctx.arch.window_matmul and ctx.options.window_matmul and a.weight is not None and _depthwise(a, ctx)):
        return False
    # (One tap a row gains nothing over a diagonal block, which a pointwise conv streams whole.)
    if not 1 < window.kw <= ctx.n or window.dw != 1 or window.sw not in TapWindow.STRIDES:
        return False
    lead, right = padding[1], padding[3]
    # (A small core's Configure may not hold every window: its tiles' largest must fit.)
    largest = TapWindow(window.kw, lead, window.kw - 1, window.sw)
    return lead < window.kw and right < window.kw and not largest.value >> layout_of(ctx.arch).configure_value_bits


def _tile_window(p: ConvPlan, tile: Tile, in_w: int) -> tuple[TapWindow, int]:
    """A tile's row window and the first input column it reads: a tile's columns from x0 read
    their window from input column x0 * stride - left padding on (the padding only at the edges)."""
    kw, sw = p.window.kw, p.window.sw
    first = tile.x0 * sw - p.padding[1]
    last = (tile.x0 + tile.cols - 1) * sw - p.padding[1] + kw - 1
    start = max(0, first)
    return TapWindow(kw, start - first, 0, sw).fitting(min(in_w, last + 1) - start, tile.cols), start


def _constants(node: Node, dt, lanes: int) -> list:
    second = node.attrs.second
    consts = epilogue_constants(node.epilogue + (list(second.epilogue) if second else []), dt, lanes)
    residue = node.attrs.residue
    return consts + [2.0**-residue] if residue and 2.0**-residue not in consts else consts


def _local_map(
    node, ctx, given, cut, window, padding, weights, resident, buffers, consts, recipes, shortcut_in_place=True,
    holding: HandOver = NOTHING, in_place: bool = False, store_slots: int = 0,
) -> LocalMap:  # fmt: skip
    """The local memory map of a plan. When the conv before left this conv's whole input in local
    memory, that is the slab (``in_place``: of every tile, read as the whole map), and the rest goes
    below or above it (and above what it still has to store); else below or above what is
    ``holding`` (the maps it keeps for a later conv)."""
    inp, out = ctx.place[node.inputs[0]], ctx.place[node.output]
    rows, cols = cut[0].rows, cut[0].cols
    second = bool(node.attrs.second)
    store_size = rows * cols * (store_slots or out.blocks)
    full_rows = cols == out.shape[2]  # every tile spans the output's width: whole input rows
    slab = slab_size(rows, cols, window, inp.blocks, inp.shape[2] if full_rows else None)
    whole = _one_whole_map(cut, out.shape)
    short = _shortcut_held(node, ctx, given, store_size) if whole and shortcut_in_place and not in_place else None
    own = weights.staging + resident + ((2 if second else 1) * buffers - (short is not None)) * store_size
    handed = _handed_over(node, ctx, given, cut[0], window, padding, own, consts, short is not None) if whole else None
    if in_place:  # (``plan`` checked that the input is held)
        lo = given.room_beside(ctx.arch, own, consts)
        if lo is None:
            raise ScheduleError(f"{node.output}: its buffers do not fit beside its input in local memory")
        handed = (lo, [held_input(node, ctx, given)] * buffers, (0, 0, inp.shape[2], inp.shape[1] * inp.shape[2]))
    lo, geometry = (0, None) if handed is None else (handed[0], handed[2])
    if short is None and handed is None and holding.in_local:
        lo = holding.room_beside(ctx.arch, own + buffers * slab, consts)
        if lo is None:
            raise ScheduleError(f"{node.output}: its buffers do not fit beside the maps kept in local memory")
    if short is not None and handed is None:  # everything of this conv's beside what is held
        lo = given.room_beside(ctx.arch, own + buffers * slab, consts)
        if lo is None:
            args = (weights, resident, buffers, consts, recipes)
            return _local_map(node, ctx, given, cut, window, padding, *args, shortcut_in_place=False, holding=holding,
                              store_slots=store_slots)  # fmt: skip
    second_weights = lo + weights.staging
    identity = second_weights + (recipes.second.size if recipes.second else 0)
    stores = [lo + weights.staging + resident + k * store_size for k in range(buffers * (2 if second else 1))]
    if short is not None:  # (one tile: one buffer of each)
        stores = [short] + stores[:-1]
    slabs = (lo + own + k * slab for k in range(buffers)) if handed is None else handed[1]
    return LocalMap(
        lo, second_weights, identity, tuple(stores[:buffers]), tuple(stores[buffers:]), tuple(slabs),
        handed is not None, geometry, short is not None,
    )  # fmt: skip


def kept_maps(node: Node, ctx: Context, given: HandOver) -> tuple[str, ...]:
    """Maps the conv before left whole in local memory that this conv does not read and a later
    conv (or pool) of the graph reads as its input: kept where they are, that one can read them
    there (a projection's input read after the block's other convs). (A shortcut is used in place
    only by a conv of one whole tile: not kept for that.)"""
    later = ctx.nodes_after(node)
    return tuple(
        name for name in sorted(given.in_local)
        if name not in node.inputs and any(tuple(n.inputs[:1]) == (name,) and n.op in TAKES_HAND_OVER for n in later)
    )  # fmt: skip


def held_input(node: Node, ctx: Context, given: HandOver) -> int | None:
    """Where the conv before left this conv's whole input in local memory (one image, block-major:
    block ``b``'s map at ``b * H * W``), which any tiling can read as its slab; None when it did not,
    or when a shortcut it still has to store would be read back from DRAM0 first."""
    held = given.in_local.get(node.inputs[0])
    inp = ctx.place[node.inputs[0]]
    if held is None or inp.shape[0] != 1 or held[1] != inp.pixels * inp.blocks:
        return None
    if any(given.carries(t) for t in node.inputs[1:]):
        return None
    return held[0]


def _shortcut_held(node: Node, ctx: Context, given: HandOver, store_size: int) -> int | None:
    """Where the conv before left this conv's whole shortcut in local memory, when nobody else reads
    it (its stores are dropped, so the result may overwrite it: not even this conv's MatMuls, as
    its input) and its layout is the store buffer's (the same vectors, block-major); else None."""
    a = node.attrs
    if not (ctx.options.shortcut_in_place and a.residual) or node.inputs[1] not in ctx.read_once:
        return None
    if node.inputs[1] == node.inputs[0]:
        return None
    held = given.in_local.get(node.inputs[1])
    if held is None or held[1] != store_size or ctx.place[node.inputs[1]].blocks != ctx.place[node.output].blocks:
        return None
    return held[0]


def _handed_over(
    node: Node, ctx: Context, given: HandOver, tile: Tile, window: Window, padding, own: int, consts: int,
    shortcut_in_place: bool = False,
):  # fmt: skip
    """``(lo, [slab], geometry)`` when the conv before left this conv's whole input in local memory
    where this conv can read it as its slab, with its own ``own`` vectors from ``lo`` (below or
    above everything the conv before still holds); else None. (A shortcut still to be stored
    first would be read back from DRAM0, unless it is used in place.)"""
    held = given.in_local.get(node.inputs[0])
    if held is None or any(given.carries(t) for t in node.inputs[1 + shortcut_in_place :]):
        return None
    inp = ctx.place[node.inputs[0]]
    _, geometry = slab_moves(inp, tile, window, padding, 0, whole_width=True)
    if geometry[:2] != (0, 0) or geometry[2:] != (inp.shape[2], inp.shape[1] * inp.shape[2]):
        return None  # the window does not read the input as one whole map
    lo = given.room_beside(ctx.arch, own, consts)
    return None if lo is None else (lo, [held[0]], geometry)


def tile_count(node: Node, ctx: Context, p: ConvPlan) -> int:
    n, oh, ow, _ = ctx.place[node.output].shape
    return n * ceil_div(oh, p.rows) * ceil_div(ow, p.cols)


def dram_share(node: Node, ctx: Context) -> float:
    """Roughly, a conv's DRAM0 vectors (input and output) per MatMul vector: where overlapping them
    with compute can pay."""
    inp, out = ctx.place[node.inputs[0]], ctx.place[node.output]
    a = node.attrs
    taps = 1
    if a.weight is not None and a.layout != "KM":
        taps = int(np.prod(kernel_size(ctx.graph.constants, a)))
    depthwise = _depthwise(a, ctx)
    reads = inp.blocks * inp.shape[1] * inp.shape[2] / max(1, out.shape[1] * out.shape[2])
    writes = out.blocks * (2 if a.second else 1)
    return (reads + writes) / ((1 if depthwise else inp.blocks) * taps * out.blocks)


class _SerialClock:
    """The overlap's clock, unpaced: MatMuls, then each block's epilogue and gather as counted when
    it is queued, one after the other; rows go out whole."""

    def __init__(self, overlap: Overlap):
        self.overlap = overlap

    def compute(self, cycles: int) -> None:
        """``cycles`` of the compute engine's work were emitted."""
        self.overlap.compute(cycles)

    def serial(self, cycles: int) -> None:
        """``cycles`` of accumulator work that the MatMuls before and after it wait for."""
        self.overlap.compute(cycles)

    def queued(self, cycles: int) -> None:
        """A block's epilogue and gather of about ``cycles`` were queued."""
        self.overlap.compute(cycles)

    def mark_ready(self) -> None:
        """Accumulator work was queued behind the MatMuls emitted so far."""

    def reach(self, costs: list[int], i: int, n: int, need: int | None) -> tuple[int, int]:
        """How far compute of ``costs[i:n]`` goes before the overlap's clock has counted ``need``
        cycles (None: to the end): (the end of that run, its cycles). ``advance`` then counts them."""
        if need is None:
            return n, sum(costs[i:n])
        cycles = 0
        for j in range(i, n):
            cycles += costs[j]
            if cycles >= need:
                return j + 1, cycles
        return n, cycles

    def advance(self, cycles: int) -> None:
        if cycles:
            self.overlap.compute(cycles)

    def emit(self, lir: LIR, rows: np.ndarray) -> None:
        lir.emit_rows(rows)

    def now(self, lir: LIR, emit) -> None:
        """``emit(lir)``: accumulator work the next MatMuls wait for."""
        emit(lir)


class _PacedClock:
    """The overlap's clock, paced: when the compute engine and the accumulator engine are expected
    to be done with what was emitted, the epilogues counted by their instructions as they go out in
    pieces of ``PIECE`` rows, the deferred DRAM moves between them; dispatch is as far as the later
    engine."""

    PIECE = 64

    def __init__(self, overlap: Overlap):
        self.overlap = overlap
        self.t_compute = self.t_acc = self.ready = self.clock = 0

    def _tick(self) -> None:
        now = max(self.t_compute, self.t_acc)
        if now > self.clock:
            self.overlap.compute(now - self.clock)
            self.clock = now

    def compute(self, cycles: int) -> None:
        self.t_compute += cycles
        self._tick()

    def serial(self, cycles: int) -> None:
        self.t_compute = self.t_acc = max(self.t_compute, self.t_acc) + cycles
        self._tick()

    def queued(self, cycles: int) -> None:
        """Counted as the rows go out (``emit``)."""

    def mark_ready(self) -> None:
        self.ready = self.t_compute  # its MatMuls are out

    def reach(self, costs: list[int], i: int, n: int, need: int | None) -> tuple[int, int]:
        """As ``_SerialClock.reach``: the overlap counts how far the later engine's clock moves."""
        if need is None:
            return n, sum(costs[i:n])
        start, t_compute, t_acc, cycles = self.clock, self.t_compute, self.t_acc, 0
        for j in range(i, n):
            cycles += costs[j]
            if max(start, t_compute + cycles, t_acc) - start >= need:
                return j + 1, cycles
        return n, cycles

    def advance(self, cycles: int) -> None:
        if cycles:
            self.t_compute += cycles
            self._tick()

    def emit(self, lir: LIR, rows: np.ndarray) -> None:
        for lo in range(0, len(rows), self.PIECE):
            piece = rows[lo : lo + self.PIECE]
            lir.emit_rows(piece)
            self.t_acc = max(self.t_acc, self.ready) + accumulator_cycles(piece)
            self._tick()

    def now(self, lir: LIR, emit) -> None:
        side = LIR(lir.arch)
        emit(side)
        self.mark_ready()
        self.emit(lir, side.pending_rows())
        self.t_compute = max(self.t_compute, self.t_acc)


class _Stream:
    """A conv's instruction stream while it is emitted: MatMuls and weight loads advance the
    overlap's clock (deferred DRAM moves go out beside them), weight groups are fetched into their
    slots ahead of use, and with accumulator banks one output block's epilogue and gather wait in a
    backlog that the next block's MatMuls release (a MatMul of k vectors keeps the array busy while
    up to k instructions dispatch beside it). They go out after the LoadWeights that follows the
    MatMul, if one does: in order, the load would otherwise wait behind them and the next MatMul
    for the load."""

    def __init__(
        self,
        ctx: Context,
        out: Out,
        p: ConvPlan,
        pipelined: bool,
        early: bool,
        paced: bool = False,
        weight_piece: int | None = None,
        beside: "_Stream | None" = None,
    ):
        self.ctx, self.lir, self.p = ctx, out.lir, p
        # ``beside``: a stream whose overlap and clock this one shares (two convs' blocks in turn).
        self.overlap = beside.overlap if beside else Overlap(out.lir, ctx.arch, weight_piece)
        self.backlog = no_rows()
        # Every (tile, output block, group) in program order, so each can fetch the next one's weights.
        self.sequence = [
            (i, ob, g) for i in range(len(p.tiles)) for ob in range(len(p.weights.groups))
            for g in range(len(p.weights.groups[ob]))
        ]  # fmt: skip
        self.seq = 0  # the next group to use
        # A tile's last epilogue and gather wait in the backlog for the next tile's first MatMuls,
        # and its stores (``waiting``) are deferred once that gather is out (``pipelines``).
        self.pipelined = pipelined
        # Otherwise, with one store buffer, each output block's stores may wait only for its gather
        # (they go out beside the next blocks' MatMuls, not after the tile's last block).
        self.early = early
        self.waiting: list = []
        self.earned = 0  # backlog rows the last MatMul earned, not yet released
        # The overlap's clock (``_SerialClock``, ``_PacedClock``).
        self.clock = beside.clock if beside else _PacedClock(self.overlap) if paced else _SerialClock(self.overlap)
        self.shortcuts_moved: set[tuple[int, int]] = set()  # (tile, block) whose shortcut is in
        self.fresh = False  # an epilogue was queued since the last MatMul
        self.window: TapWindow | None = None  # the window register as this stream left it
        self.burst = Burst(ctx.arch)  # MatMuls and weight loads recorded to ``play``
        # The tile being emitted: its runs (``_emit_tile``) as a key; recorded groups by their loads,
        # that key and the state they start from.
        self.runs_key = 0
        self.templates: dict[tuple, tuple] = {}
        self._interned: dict = {}
        self._loads: dict[int, tuple] = {}
        self._queued: dict[tuple, np.ndarray] = {}  # ``later``'s rows by key (never written to)

    def take_over(self, other: "_Stream") -> None:
        """Go on where ``other`` (sharing this stream's overlap and clock) stopped: its backlog, the
        rows its last MatMul earned, the window register as it left it."""
        self.backlog, self.earned, self.fresh, self.window = other.backlog, other.earned, other.fresh, other.window
        other.backlog, other.earned = no_rows(), 0

    def release(self, limit: int | None = None) -> None:
        take = len(self.backlog) if limit is None else limit
        self.clock.emit(self.lir, self.backlog[:take])
        self.backlog = self.backlog[take:]
        self.earned = 0

    def _release_earned(self) -> None:
        if self.earned and len(self.backlog):
            self.release(self.earned)
        self.earned = 0

    def matmul(self, local: int, acc: int, size: int, local_step: int = 1, runs: int = 1, **flags) -> None:
        """``runs``: rows joined into this MatMul; the DRAM moves beside it are paced as if each
        were its own MatMul."""
        self._before_matmul()
        self.lir.matmul(local, acc, size, local_step, 1, **flags)
        self._after_matmul(size, runs)

    def window_matmul(self, local: int, acc: int, outputs: int, window: TapWindow, accumulate: bool) -> None:
        """A window MatMul (the window register set first where it differs): the array streams its
        reads and padding, ``(outputs - 1) * stride + taps`` vectors."""
        if window != self.window:
            self.lir.configure(ConfigRegister.WINDOW, window.value)
            self.window = window
        self._before_matmul()
        self.lir.window_matmul(local, acc, outputs, accumulate=accumulate)
        self._after_matmul((outputs - 1) * window.stride + window.taps, 1)

    def _before_matmul(self) -> None:
        self._release_earned()
        if self.fresh and len(self.backlog):
            # The backlog's first row waits for its block's MatMuls to leave the array, and the core
            # keeps a bank busy while MatMuls stream back to back: behind the next MatMul it would
            # wait for that one too, so it goes first (the array drains once, as it would after
            # that MatMul), and the MatMuls after it stream beside the rest.
            self.release(1)
            self.fresh = False
        if self.early and self.waiting and not len(self.backlog):  # their gather is out: beside this
            self.defer_waiting()

    def _after_matmul(self, size: int, runs: int) -> None:
        self.clock.compute(size + runs)
        self._earn(size)

    def _earn(self, size: int) -> None:
        """A MatMul streaming ``size`` vectors went out: what it lets the backlog release."""
        self.earned = size
        if self.fresh:  # the backlog's first rows wait for its block's last MatMul to leave the array
            self.earned = max(0, size - self.ctx.arch.array_size - COSTS["mm"])
            self.fresh = False

    def intern(self, value) -> int:
        """A small integer for ``value`` (equal values, the same one)."""
        return self._interned.setdefault(value, len(self._interned))

    def loads_key(self, group) -> tuple[int, tuple]:
        """``intern(group.loads)`` and the parts its loads are of, once per group."""
        key = self._loads.get(id(group))
        if key is None:
            parts = tuple(sorted({load[3] for load in group.loads}))
            key = self._loads[id(group)] = (self.intern(group.loads), parts)
        return key

    def record_window_matmul(self, local: int, acc: int, outputs: int, window: TapWindow, accumulate: bool) -> None:
        """``window_matmul`` into the burst."""
        if window != self.window:
            self.burst.configure(ConfigRegister.WINDOW, window.value)
            self.window = window
        self.burst.window_matmul(local, acc, outputs, (outputs - 1) * window.stride + window.taps, accumulate)

    def play(self) -> None:
        """The burst's instructions out, as ``matmul``, ``load_weights`` and ``window_matmul`` would
        have emitted them one by one: stepped one at a time while the backlog has rows to release
        between them (or stores wait for the next MatMul); else, where only the overlap's deferred
        moves go out between them, in runs up to each instruction after which it issues some."""
        burst, lir, clock = self.burst, self.lir, self.clock
        costs, kinds, n, i = burst.costs, burst.kinds, len(burst), 0
        while i < n:
            if len(self.backlog) or (self.early and self.waiting):
                e = i  # the request's last row
                while kinds[e] == CONTINUED:
                    e += 1
                kind = kinds[e]
                if kind >= 0:  # a MatMul
                    self._before_matmul()
                    lir.emit_burst(burst, i, e + 1)
                    clock.compute(costs[e])
                    self._earn(kind)
                else:
                    lir.emit_burst(burst, i, e + 1)
                    if kind == LOAD:
                        clock.compute(costs[e])
                        self._release_earned()
                i = e + 1
                continue
            threshold = self.overlap.threshold()
            j, cycles = clock.reach(costs, i, n, None if threshold is None else max(threshold, 1))
            lir.emit_burst(burst, i, j)
            clock.advance(cycles)
            # (Nothing to release: the last MatMul's or load's effect on ``earned`` is all that is left.)
            first = next((k for k in range(i, j) if kinds[k] >= 0), None)
            last = next((k for k in range(j - 1, i - 1, -1) if kinds[k] >= 0 or kinds[k] == LOAD), None)
            if last is not None:
                if kinds[last] == LOAD:
                    self.earned = 0
                    if first is not None:
                        self.fresh = False
                elif last == first:
                    self._earn(kinds[last])
                else:
                    self.fresh = False
                    self.earned = kinds[last]
            i = j
        burst.clear()

    def load_weights(self, local: int, size: int) -> None:
        self.lir.load_weights(local, size)
        self.clock.compute(size + 4)
        self._release_earned()

    def defer_waiting(self) -> None:
        """The stores of the tile whose last gather the backlog just released."""
        for move in self.waiting:
            self.overlap.defer(*move)
        self.waiting = []

    def later(self, emit, key=None) -> None:
        """``emit(lir)`` now or, banked, into the end of the backlog (``key``: what ``emit`` emits
        depends on only, as a value: its rows are then emitted once per stream)."""
        if not self.p.banked:
            self.now(emit)
            return
        rows = self._queued.get(key) if key is not None else None
        if rows is None:
            side = LIR(self.ctx.arch)
            emit(side)
            rows = side.pending_rows()
            if key is not None:
                self._queued[key] = rows
        self.backlog = np.concatenate([self.backlog, rows]) if len(self.backlog) else rows
        self.clock.mark_ready()
        self.fresh = True

    def now(self, emit) -> None:
        """``emit(lir)`` now: accumulator work the next MatMuls wait for."""
        self.clock.now(self.lir, emit)

    def slot_base(self, seq: int) -> int:
        w = self.p.weights
        return self.p.memory.weights + ((seq % w.slots) * w.slot if w.slots else 0)

    def fetch(self, seq: int) -> None:
        """Queue the weights of the ``seq``-th group in program order as urgent DRAM1 moves."""
        tile, ob, g = self.sequence[seq]
        if self.p.weights.slots == 0 and tile > 0:
            return  # resident: loaded during the first tile
        base = self.slot_base(seq)
        for dram1, local, size in self.p.weights.groups[ob][g].runs:
            self.overlap.defer(Direction.DRAM1_TO_LOCAL, base + local, dram1, size, urgent=True)


def pipelines(node: Node, p: ConvPlan) -> bool:
    """Whether a tile's last epilogue can run beside the next tile's MatMuls: banked, two slabs
    and store buffers, and no shortcut to load into a store buffer still being stored."""
    return p.banked and p.buffers == 2 and not node.attrs.residual


def _stores_early(node: Node, ctx: Context, p: ConvPlan) -> bool:
    """Whether each output block's stores can go out once its gather has (one store buffer, no
    second output, not a whole map kept in local memory for the next node)."""
    whole = _one_whole_map(p.tiles, ctx.place[node.output].shape)
    return p.buffers == 1 and not node.attrs.second and (bool(p.store_slots) or not whole)


def _one_whole_map(cut, out_shape) -> bool:
    """One tile, the whole map of one image: the conv keeps it in local memory for the next node."""
    return len(cut) == 1 and (cut[0].rows, cut[0].cols) == tuple(out_shape[1:3]) and out_shape[0] == 1


def emit(
    node: Node,
    ctx: Context,
    given: HandOver,
    out: Out,
    p: ConvPlan,
    pipelined: bool = False,
    early: bool = True,
    paced: bool = False,
    weight_piece: int | None = None,
) -> HandOver:
    """The instructions of plan ``p`` (``pipelined``: see ``pipelines``; ``early``: stores block by
    block where ``_stores_early``; ``paced``: see ``_Stream``; ``weight_piece``: see ``Overlap``);
    returns what the conv leaves the next node."""
    inp, result = ctx.place[node.inputs[0]], ctx.place[node.output]
    lir, m = out.lir, p.memory
    if m.shortcut_handed:  # the shortcut stays where it is: its stores are dropped
        given = given.without(node.inputs[1])
    if not m.handed:  # this conv reads DRAM0: what the conv before still had to store first
        given.issue(lir)
    if p.banked:
        cvecs = _banked_constants(ctx, out, p.constants, ctx.arch.accumulator_depth // 2)
    else:
        cvecs = [const_vectors(ctx, out, list(p.constants), ctx.arch.accumulator_depth - len(p.constants))]
    pipelined = pipelined and pipelines(node, p)
    early = (early or bool(p.store_slots)) and not pipelined and _stores_early(node, ctx, p)  # (a ring: always)
    s = _Stream(ctx, out, p, pipelined, early, paced, weight_piece)
    geometry = _take_input(node, ctx, given, s)
    full_rows = p.cols == result.shape[2]
    short = ctx.place[node.inputs[1]] if node.attrs.residual else None
    # A tile's shortcut loaded before its MatMuls (the first tile's, each tile's with one buffer):
    # deferred, each block's settled just before it enters the accumulators, so the later blocks'
    # loads go out beside the first blocks' MatMuls, not all ahead of them.
    load_shortcut = s.overlap.defer if ctx.options.defer_shortcut else lir.datamove
    if short and not m.shortcut_handed:
        load_tile(short, p.tiles[0], m.stores[0], load_shortcut)
    if p.recipes.identity:
        lir.datamove(Direction.DRAM1_TO_LOCAL, m.identity, p.recipes.identity.base, p.recipes.identity.size)
    s.fetch(0)
    left = HandOver()
    for i, tile in enumerate(p.tiles):
        if i and p.buffers == 1:
            if not m.handed:
                geometry = _load_slab(lir.datamove, inp, tile, p, m.slabs[0], full_rows)
            if short:
                load_tile(short, tile, m.stores[0], load_shortcut)
        geometry = _emit_tile(node, ctx, s, p, i, geometry, cvecs)
        if _one_whole_map(p.tiles, result.shape) and not p.store_slots:
            left = _keep_in_local(node, ctx, p, tile)
            continue
        if s.early:
            continue  # its stores went out block by block
        move = s.overlap.defer if p.buffers == 2 else lir.datamove
        if s.pipelined:
            move = lambda *run: s.waiting.append(run)  # noqa: E731
        flush(result, tile, m.stores[i % p.buffers], move)
        if node.attrs.second:
            flush(ctx.place[node.attrs.second.output], tile, m.stores2[i % p.buffers], move)
    s.release()
    s.defer_waiting()
    s.overlap.drain()
    if m.kept:  # (their stores were issued above, beside this conv or before it)
        left = HandOver({**left.in_local, **{name: given.in_local[name] for name in m.kept}}, left.carried)
    return left


def depthwise_follows(first: Node, then: Node, ctx: Context) -> bool:
    """Whether ``then`` is a depthwise conv reading only ``first``'s result, which nothing else
    reads: its output block ``b`` needs only ``first``'s block ``b``."""
    return (
        then.op == "conv2d" and first.op == "conv2d" and then.inputs == [first.output]
        and first.output in ctx.read_once and then.attrs.weight is not None and _depthwise(then.attrs, ctx)
        and not (first.attrs.second or then.attrs.second or first.attrs.residue or then.attrs.residue)
        and not then.attrs.residual
    )  # fmt: skip


def lower_with_depthwise(first: Node, then: Node, ctx: Context, given: HandOver, out: Out) -> HandOver:
    """``first``, then the depthwise conv ``then`` that reads its result (``depthwise_follows``),
    their output blocks in turn (``emit_in_turn``), each one tile: raises ``ScheduleError`` where
    they do not fit together."""
    return emit_in_turn(first, then, ctx, given, out, *in_turn_plans(first, then, ctx, given, out.consts))


def in_turn_plans(first: Node, then: Node, ctx: Context, given: HandOver, consts) -> tuple[ConvPlan, ConvPlan]:
    """The plans ``lower_with_depthwise`` emits in turn, or ``ScheduleError`` where they do not fit
    together (decided before anything is emitted)."""
    pa = plan(first, ctx, given, consts, 1)
    result = ctx.place[first.output]
    if len(pa.tiles) != 1 or not _one_whole_map(pa.tiles, result.shape) or pa.memory.kept:
        raise ScheduleError(f"{first.output}: not one whole map in local memory")
    handed = _keep_in_local(first, ctx, pa, pa.tiles[0])
    # ``then``'s buffers beside everything of ``first``'s (its weights and slab are in use meanwhile).
    m = pa.memory
    spans = [(m.weights, m.weights + pa.weights.staging), *((s, s + _slab_size(pa, ctx, first)) for s in m.slabs)]
    spans += [(a, a + n) for a, n in given.in_local.values()]
    lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
    busy = HandOver({**handed.in_local, "": (lo, hi - lo)}, handed.carried)
    pb = plan(then, ctx, busy, consts, 1)
    if len(pb.tiles) != 1 or not pb.memory.handed or pb.memory.kept:
        raise ScheduleError(f"{then.output}: not one whole map beside {first.output}'s")
    half = ctx.arch.accumulator_depth // 2
    if max(pa.tiles[0].pixels, pb.tiles[0].pixels) > half - len(pa.constants) - len(pb.constants):
        raise ScheduleError(f"{first.output}, {then.output}: their tiles and constants do not fit a bank")
    if not (pa.banked and pb.banked):
        raise ScheduleError(f"{first.output}, {then.output}: not banked")
    return pa, pb


def _slab_size(p: ConvPlan, ctx: Context, node: Node) -> int:
    """The vectors of plan ``p``'s slab (of its first tile)."""
    inp, tile = ctx.place[node.inputs[0]], p.tiles[0]
    full_rows = p.cols == ctx.place[node.output].shape[2]
    return slab_size(tile.rows, tile.cols, p.window, inp.blocks, inp.shape[2] if full_rows else None)


def emit_in_turn(first: Node, then: Node, ctx: Context, given: HandOver, out: Out, pa: ConvPlan, pb: ConvPlan):
    """Plans ``pa`` (one whole map handed over in local memory) and ``pb`` (its depthwise conv)
    emitted together, their output blocks in turn: ``first``'s block 0, then its block ``b + 1``
    before ``then``'s block ``b`` (which reads ``first``'s block ``b`` only), the accumulator banks
    alternating from one to the next. One block's epilogue and gather then run beside the other
    conv's MatMuls: an expansion's long epilogue (a ReLU6 and the gather, two accumulator cycles a
    vector against one MatMul cycle) beside a depthwise conv's MatMuls, its short epilogue beside
    the next expansion block's. Returns what ``then`` leaves the next node."""
    half, ka = ctx.arch.accumulator_depth // 2, len(pa.constants)
    cvecs = [_banked_constants(ctx, out, pa.constants, half), _banked_constants(ctx, out, pb.constants, half - ka)]
    if not pa.memory.handed:
        given.issue(out.lir)
    sa = _Stream(ctx, out, pa, False, False)
    geometry = _take_input(first, ctx, given, sa)
    sb = _Stream(ctx, out, pb, False, False, beside=sa)
    sa.fetch(0)
    sb.fetch(0)
    runs = [_tile_runs(first, ctx, sa, pa, 0, geometry), _tile_runs(then, ctx, sb, pb, 0, pb.memory.geometry)]
    planes = [geometry[3], pb.memory.geometry[3]]
    blocks = len(pa.weights.groups)
    order = [(0, 0)] + [job for b in range(1, blocks) for job in ((0, b), (1, b - 1))] + [(1, blocks - 1)]
    streams, nodes, plans = (sa, sb), (first, then), (pa, pb)
    active = sa
    for j, (k, ob) in enumerate(order):
        s, node, p = streams[k], nodes[k], plans[k]
        if s is not active:
            s.take_over(active)
            active = s
        tile = p.tiles[0]
        s.lir.comment(f"{node.op} {node.output}: rows {tile.y0}+{tile.rows} block {ob} (in turn)")
        bank = j % 2
        _emit_block(node, ctx, s, p, 0, ob, bank * half, cvecs[k][bank], planes[k], *runs[k])
    active.release()
    active.overlap.drain()
    return _keep_in_local(then, ctx, pb, pb.tiles[0])


def _banked_constants(ctx: Context, out: Out, values, top: int) -> list[dict]:
    """The epilogue's constant vectors ``values`` just below ``top`` in each accumulator bank: per
    bank, where each one is."""
    half, k = ctx.arch.accumulator_depth // 2, len(values)
    lower = const_vectors(ctx, out, list(values), top - k, top - k + half)
    return [lower, {v: a + half for v, a in lower.items()}]


def _take_input(node: Node, ctx: Context, given: HandOver, s: _Stream) -> tuple:
    """The stream's conv takes its input: where the conv before handed it over in local memory,
    that conv's stores are deferred beside this compute (its result's dropped when only this conv
    reads it); else the first tile's slab is loaded. Returns the slab's geometry."""
    p = s.p
    m = p.memory
    for name, moves in given.carried if m.handed else ():
        if not (name == node.inputs[0] and name in ctx.read_once):
            s.overlap.defer_moves(moves)
    if m.handed:
        return m.geometry
    full_rows = p.cols == ctx.place[node.output].shape[2]
    return _load_slab(s.lir.datamove, ctx.place[node.inputs[0]], p.tiles[0], p, m.slabs[0], full_rows)


def _window_runs(p: ConvPlan, tile: Tile, in_shape, y_lo: int, x_lo: int, scols: int) -> list[list[tuple]]:
    """Per kernel row: (slab offset, accumulator, outputs, the tile's window) of each output row
    whose input row is real (the others are padding: nothing to add)."""
    window, start = _tile_window(p, tile, in_shape[2])
    w, pt = p.window, p.padding[0]
    runs = []
    for ky, _ in p.taps:
        ys = [(r, (tile.y0 + r) * w.sh - pt + ky * w.dh) for r in range(tile.rows)]
        runs.append([((y - y_lo) * scols + start - x_lo, r * tile.cols, tile.cols, window)
                     for r, y in ys if 0 <= y < in_shape[1]])  # fmt: skip
    return runs


def _emit_tile(node: Node, ctx: Context, s: _Stream, p: ConvPlan, i: int, geometry, cvecs) -> tuple:
    """Tile ``i``: every output block's MatMuls, epilogue and gather (the next tile's slab loads
    deferred beside them with two buffers); returns the geometry of the slab loaded next."""
    tile, m = p.tiles[i], p.memory
    short = ctx.place[node.inputs[1]] if node.attrs.residual else None
    plane = geometry[3]
    runs, streamed = _tile_runs(node, ctx, s, p, i, geometry)
    if p.buffers == 2 and i + 1 < len(p.tiles):  # the next tile's slab, beside this tile's MatMuls
        full_rows = p.cols == ctx.place[node.output].shape[2]
        if not m.handed:
            inp = ctx.place[node.inputs[0]]
            geometry = _load_slab(s.overlap.defer, inp, p.tiles[i + 1], p, m.slabs[(i + 1) % 2], full_rows)
        if short:
            load_tile(short, p.tiles[i + 1], m.stores[(i + 1) % 2], s.overlap.defer)
    blocks = len(p.weights.groups)
    paired = blocks - blocks % 2 if _pairs_second_outputs(node, p) else 0
    for ob in range(blocks):
        s.lir.comment(
            f"{node.op} {node.output}: image {tile.image} rows {tile.y0}+{tile.rows} "
            f"cols {tile.x0}+{tile.cols} block {ob}"
        )
        bank = _bank(p, i, ob)
        acc0 = bank * (ctx.arch.accumulator_depth // 2)
        if ob < paired:
            _emit_paired(node, ctx, s, p, i, ob, cvecs, plane, runs, streamed)
        else:
            _emit_block(node, ctx, s, p, i, ob, acc0, cvecs[bank], plane, runs, streamed)
    if s.pipelined and i + 1 < len(p.tiles):
        # The tile's last epilogue and gather go out beside the next tile's MatMuls, which read
        # the next slab: its loads are issued; stores still deferred may wait.
        if not m.handed:
            lo = m.slabs[(i + 1) % 2]
            s.overlap.settle(lo, lo + abs(m.slabs[1] - m.slabs[0]))
        return geometry
    s.release()  # the tile's last epilogue and gather, before its stores
    s.defer_waiting()
    s.overlap.drain()  # the next tile reads its slab; the store buffer about to be reused is flushed
    return geometry


def _tile_runs(node: Node, ctx: Context, s: _Stream, p: ConvPlan, i: int, geometry) -> tuple[list, bool]:
    """Tile ``i``'s MatMul runs per tap (slab offset, accumulator, vectors; the same for every
    block), and whether its pointwise MatMuls stream the slab whole; the runs become the stream's key."""
    inp, tile = ctx.place[node.inputs[0]], p.tiles[i]
    y_lo, x_lo, scols, _ = geometry
    if p.window_rows:  # per kernel row: a window MatMul per output row it reads a real input row for
        runs = _window_runs(p, tile, inp.shape, y_lo, x_lo, scols)
    else:
        runs = [
            merge_runs([((y - y_lo) * scols + (x - x_lo), r * tile.cols + c0, cnt) for r, y, c0, x, cnt in
                        tap_runs(tile, inp.shape, p.window, p.padding, tap)], p.window.sw)
            for tap in p.taps
        ]  # fmt: skip
    # (Read in place, a tile's rows start at its own row of the whole map, not at the slab's start.)
    streamed = p.window.pointwise and not any(p.padding) and tile.cols == inp.shape[2] == scols and tile.y0 == y_lo
    s.runs_key = s.intern(tuple(tuple(r) for r in runs))
    return runs, streamed


def _bank(p: ConvPlan, i: int, ob: int) -> int:
    """The accumulator bank (0: lower half, 1: upper) of tile ``i``'s output block ``ob``."""
    return (i * len(p.weights.groups) + ob) % 2 if p.banked else 0


def _emit_block(node, ctx, s: _Stream, p: ConvPlan, i: int, ob: int, acc0: int, cvec, plane: int, runs, streamed):
    """Output block ``ob`` of tile ``i``: start the accumulators (the shortcut, the bias or the
    covering tap), every weight group's MatMuls, then the epilogue and gather (and the second
    output's)."""
    _block_matmuls(node, ctx, s, p, i, ob, acc0, cvec, plane, runs, streamed)
    count = p.tiles[i].pixels
    short, second = node.attrs.residual, node.attrs.second
    s.release()  # what the block before still had to do
    s.defer_waiting()
    _settle_block(s, p, i, ob, bool(second))
    if short and not node.attrs.residue and not p.recipes.identity and p.banked:
        _move_next_shortcut(ctx, s, p, i, ob + 1)
    if p.store_slots:  # the store of the block before in this slot goes out before the gather overwrites it
        slot = _store_base(p, i, ob) + ob * count
        s.overlap.settle(slot, slot + count)
    finish, key = _finish(node, p, i, ob, acc0, cvec)
    if second:  # now: the second output's MatMul reads this gather
        s.now(finish)
    else:
        s.later(finish, key)
        if s.early:
            base = _store_base(p, i, ob)
            flush(ctx.place[node.output], p.tiles[i], base, lambda *run: s.waiting.append(run), blocks=[ob])
    s.clock.queued(count * (1 + len(node.epilogue)))
    if second:
        _second_matmul(ctx, s, p, i, ob, acc0)
        _queue_second_finish(node, s, p, i, ob, acc0, cvec)


def _pairs_second_outputs(node: Node, p: ConvPlan) -> bool:
    """Whether a conv with a second output runs its output blocks in pairs (``_emit_paired``):
    banked, not split into a residue and the rest."""
    return bool(node.attrs.second) and p.banked and not node.attrs.residue


def _emit_paired(node, ctx, s: _Stream, p: ConvPlan, i: int, ob: int, cvecs, plane: int, runs, streamed):
    """Output block ``ob`` of a pair (``ob`` even: the first, ``a``, in one bank; odd: the second,
    ``b``, in the other). A second output's MatMul reads its block's gather, which waits for the
    block's MatMuls: block by block the array would wait for it. In a pair each gather runs beside
    the other block's MatMuls: MatMuls (a), MatMuls (b), second output (a), second output (b); the
    second outputs' epilogues and gathers beside the next MatMuls."""
    half = ctx.arch.accumulator_depth // 2
    bank = _bank(p, i, ob)
    acc0, cvec = bank * half, cvecs[bank]
    _block_matmuls(node, ctx, s, p, i, ob, acc0, cvec, plane, runs, streamed)
    count = p.tiles[i].pixels
    s.release()  # (a) the pair before's last epilogue; (b) the first block's gather
    s.defer_waiting()
    _settle_block(s, p, i, ob, True)
    if ob % 2 == 0 and node.attrs.residual and not p.recipes.identity:
        _move_next_shortcut(ctx, s, p, i, ob + 1)
    s.later(*_finish(node, p, i, ob, acc0, cvec))
    s.clock.queued(count * (1 + len(node.epilogue)))
    if ob % 2 == 0:
        return
    first = _bank(p, i, ob - 1)
    _second_matmul(ctx, s, p, i, ob - 1, first * half)
    s.release()  # the second block's gather: its second output's MatMul reads it
    _queue_second_finish(node, s, p, i, ob - 1, first * half, cvecs[first])
    _second_matmul(ctx, s, p, i, ob, acc0)
    s.release()  # the first block's second output: its bank is the next pair's
    if node.attrs.residual and not p.recipes.identity:
        _move_next_shortcut(ctx, s, p, i, ob + 1)
    _queue_second_finish(node, s, p, i, ob, acc0, cvec)


def _move_next_shortcut(ctx, s: _Stream, p: ConvPlan, i: int, after: int) -> None:
    """Block ``after``'s shortcut into its bank now, beside this block's last MatMuls (what was in
    that bank is out): its MatMuls then need not wait for the move."""
    if after < len(p.weights.groups):
        count, store = p.tiles[i].pixels, p.memory.stores[i % p.buffers]
        bank = _bank(p, i, after) * (ctx.arch.accumulator_depth // 2)
        s.overlap.settle(store + after * count, store + (after + 1) * count)
        s.lir.datamove(Direction.LOCAL_TO_ACC, store + after * count, bank, count)
        s.shortcuts_moved.add((i, after))


def _store_base(p: ConvPlan, i: int, ob: int) -> int:
    """Tile ``i``'s store buffer as block ``ob`` sees it (block b at base + b * pixels): with a ring of
    ``p.store_slots``, shifted so that ``ob`` lands in slot ``ob % store_slots``."""
    store, pixels = p.memory.stores[i % p.buffers], p.tiles[i].pixels
    return store + (ob % p.store_slots - ob) * pixels if p.store_slots else store


def _finish(node: Node, p: ConvPlan, i: int, ob: int, acc0: int, cvec):
    """Block ``ob``'s epilogue and gather into the store buffer, and what they depend on (a key)."""
    store, pixels = _store_base(p, i, ob), p.tiles[i].pixels

    def finish(lir: LIR) -> None:
        emit_epilogue(lir, acc0, pixels, node.epilogue, cvec, ob)
        gather(lir, p.tiles[i], ob, acc0, store)

    return finish, ("finish", id(node.epilogue), id(cvec), acc0, pixels, ob, store)


def _second_matmul(ctx, s: _Stream, p: ConvPlan, i: int, ob: int, acc0: int) -> None:
    """Block ``ob``'s second output: a MatMul of its gathered result into its bank."""
    count, store = p.tiles[i].pixels, p.memory.stores[i % p.buffers]
    if i == ob == 0:
        s.overlap.need_urgent()  # the second output's weights
    s.load_weights(p.memory.second_weights + ob * (ctx.n + 1), ctx.n + 1)
    s.matmul(store + ob * count, acc0, count)


def _queue_second_finish(node: Node, s: _Stream, p: ConvPlan, i: int, ob: int, acc0: int, cvec) -> None:
    """Block ``ob``'s second output's epilogue and gather into the second store buffer, queued."""
    second, count, store2 = node.attrs.second, p.tiles[i].pixels, p.memory.stores2[i % p.buffers]

    def finish_second(lir: LIR) -> None:
        emit_epilogue(lir, acc0, count, second.epilogue, cvec, ob)
        gather(lir, p.tiles[i], ob, acc0, store2)

    s.later(finish_second, ("second", id(second.epilogue), id(cvec), acc0, count, ob, store2))
    s.clock.queued(count * (1 + len(second.epilogue)))


def _settle_block(s: _Stream, p: ConvPlan, i: int, ob: int, second: bool) -> None:
    """Pipelined: the stores of the tile before last that read the buffers this block's gathers write."""
    if s.pipelined:
        count = p.tiles[i].pixels
        for buffers in (p.memory.stores, p.memory.stores2) if second else (p.memory.stores,):
            buf = buffers[i % p.buffers]
            s.overlap.settle(buf + ob * count, buf + (ob + 1) * count)


def _block_matmuls(node, ctx, s: _Stream, p: ConvPlan, i: int, ob: int, acc0: int, cvec, plane: int, runs, streamed):
    """Block ``ob``'s accumulators started (the shortcut, the bias or the covering tap) and every
    weight group's MatMuls."""
    block, count = ctx.n + 1, p.tiles[i].pixels
    slab, store = p.memory.slabs[i % p.buffers], p.memory.stores[i % p.buffers]
    short = node.attrs.residual
    residue = node.attrs.residue
    # ``first``: the next MatMul starts the accumulators (the covering tap's, or the residue's).
    if residue:  # the residue's MatMuls start the accumulators; the shortcut comes after them
        first = p.covering is not None
    else:
        if short:
            s.overlap.settle(store + ob * count, store + (ob + 1) * count)  # this block's shortcut
        if p.recipes.identity:  # the shortcut through the array: acc = shortcut * 1
            s.load_weights(p.memory.identity, block)
            s.matmul(store + ob * count, acc0, count)
        elif short and (i, ob) not in s.shortcuts_moved:
            s.lir.datamove(Direction.LOCAL_TO_ACC, store + ob * count, acc0, count)
            s.clock.serial(count + 6)
        first = p.recipes.bias is None and not short
    zero_first = residue and not first  # no covering tap: a MatMul of zeroes clears them first
    part_now = 0
    slots = p.weights.slots
    burst, bias_accumulates = s.burst, bool(short or residue)
    for group in p.weights.groups[ob]:
        s.overlap.need_urgent()  # this group's weights
        base = s.slot_base(s.seq)
        if slots != 1 and s.seq + 1 < len(s.sequence):
            s.fetch(s.seq + 1)  # into the other slot, beside this group's MatMuls
        if s.seq == 0 and p.recipes.second:
            rec = p.recipes.second
            s.overlap.defer(Direction.DRAM1_TO_LOCAL, p.memory.second_weights, rec.base, rec.size, urgent=True)
        s.seq += 1
        # The group's weight loads and MatMuls are recorded, then played out together. Recorded
        # once per stream for the same loads, tile geometry and state, then filled in at this
        # group's addresses (each group of each tile would record the same rows).
        record = partial(_record_load, s, p, runs, plane, count, block, streamed, bias_accumulates)
        loads, parts = s.loads_key(group)
        if parts == (part_now,):
            key = (loads, s.runs_key, streamed, plane, count, first, zero_first, s.window)
            template = s.templates.get(key)
            if template is None:
                state = first, zero_first
                for ib, t, local, _ in group.loads:
                    state = record(ib, t, local, 0, 0, 0, *state)
                template = (burst.template(), state, s.window)
                s.templates[key] = template
                burst.clear()
            burst.fill(template[0], base, slab, acc0)
            (first, zero_first), s.window = template[1:]
        else:
            for ib, t, local, part in group.loads:
                if part != part_now:  # the residue's result to the output's scale; the rest adds to it
                    s.play()
                    part_now = part
                    _rescale(s, acc0, count, cvec, residue)
                    if p.recipes.identity:
                        s.overlap.settle(store + ob * count, store + (ob + 1) * count)
                        s.load_weights(p.memory.identity, block)
                        s.matmul(store + ob * count, acc0, count, accumulate=True)
                first, zero_first = record(ib, t, local, base, slab, acc0, first, zero_first)
        s.play()
        if slots == 1 and s.seq < len(s.sequence):
            s.fetch(s.seq)  # one slot: the next group's load waits for this group's LoadWeights


def _load_block(burst: Burst, p: ConvPlan, local: int, block: int) -> None:
    """A weight block of ``block`` (N + 1) rows into the array: without its bias row
    (``p.bare_blocks``) its N rows, then a zero shifted in as the bias row."""
    if p.bare_blocks:
        burst.load_weights(local, block - 1)
        burst.load_weights(0, 1, zeroes=True)
    else:
        burst.load_weights(local, block)


def _record_load(s: _Stream, p: ConvPlan, runs, plane, count, block, streamed, bias_accumulates, ib, t, local, base,
                 slab, acc0, first: bool, zero_first: bool) -> tuple[bool, bool]:  # fmt: skip
    """One of a group's array loads into the stream's burst: its weights (from ``base + local``)
    and MatMuls (input block ``ib`` of the slab at ``slab``, tap ``t``, into ``acc0``); returns
    ``first`` and ``zero_first`` after it."""
    burst = s.burst
    if ib is None:  # the bias into row 0 of a MatMul of zeroes
        burst.load_weights(base + local, 1)
        burst.matmul(0, acc0, count, 1, count + 1, accumulate=bias_accumulates, zeroes=True)
        return first, zero_first
    if not streamed and not runs[t]:  # the tap reads only padding in this tile: nothing to load
        if zero_first:  # (the accumulators are still cleared)
            _load_block(burst, p, base + local, block)
            burst.matmul(0, acc0, count, 1, count + 1, zeroes=True)
        return first, False
    # (A window MatMul uses only the bias row and its taps: the rest need not be loaded.)
    if p.window_rows:
        burst.load_weights(base + local, p.window.kw + 1)
    else:
        _load_block(burst, p, base + local, block)
    if zero_first:  # (a residue block's bias row is zero)
        burst.matmul(0, acc0, count, 1, count + 1, zeroes=True)
    if streamed:
        burst.matmul(slab + ib * plane, acc0, count, 1, count + 1, accumulate=not first)
    elif p.window_rows:
        for offset, acc, cnt, window in runs[t]:
            s.record_window_matmul(slab + ib * plane + offset, acc0 + acc, cnt, window, not first)
    else:
        at = slab + ib * plane
        for offset, acc, cnt, rows in runs[t]:
            burst.matmul(at + offset, acc0 + acc, cnt, p.window.sw, cnt + rows, accumulate=not first)
    return False, False


def _rescale(s: _Stream, acc: int, count: int, cvec, bits: int) -> None:
    """Accumulators times ``2**-bits`` (exact but for the rounding of the bits dropped). The
    epilogue the block before left in the backlog goes first: it uses the SIMD registers too."""
    s.release()
    s.lir.simd(SIMDOp.MOVE, dest=1, left=0, read=cvec[2.0**-bits])
    s.lir.simd_run(SIMDOp.MULTIPLY, acc, count, left=0, right=1)
    s.clock.serial(count + 2)


def _load_slab(move, inp, tile: Tile, p: ConvPlan, slab: int, full_rows: bool):
    moves, geometry = slab_moves(inp, tile, p.window, p.padding, slab, full_rows)
    for m in moves:
        move(*m)
    return geometry


def _keep_in_local(node: Node, ctx: Context, p: ConvPlan, tile: Tile) -> HandOver:
    """A conv whose result is one whole map leaves it in local memory for the next conv, which
    issues its stores (or drops them, when it is the only reader)."""
    store_size = p.rows * p.cols * ctx.place[node.output].blocks
    outputs = [(node.output, ctx.place[node.output], p.memory.stores[0])]
    second = node.attrs.second
    if second:
        outputs.append((second.output, ctx.place[second.output], p.memory.stores2[0]))
    carried, in_local = [], {}
    for name, place, buf in outputs:
        moves = []
        flush(place, tile, buf, lambda *m, moves=moves: moves.append(m))
        carried.append((name, tuple(moves)))
        in_local[name] = (buf, store_size)
    return HandOver(in_local, tuple(carried))
