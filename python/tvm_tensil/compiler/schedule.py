"""The scheduler: each graph node becomes tiles of instructions that fit the on-chip memories.

Every node reads its inputs from DRAM0 and writes its output to DRAM0 (a "layer" in Tensil's
terms); accumulators and array weights never carry data between nodes. Within a node:

- A *tile* is a block of output pixels (rows x columns of one image) whose vectors, for one
  output channel block, fit the accumulators.
- Inputs for a tile (the *slab*: the input rows and columns the tile's window touches, all
  channel blocks) are loaded into local memory once and reused by every kernel tap and
  every output channel block.
- Weights are loaded into the array once per (tile, tap, channel block) and reused by all the
  tile's vectors; when all of a layer's weights fit in local memory they are staged there
  once for the whole layer.
- Runs of vectors are single instructions with strides (see ``lir.py``).
- Convolutions overlap DRAM with compute when local memory holds two slabs and two store
  buffers: the next tile's slab loads and the previous tile's stores are issued in pieces
  between the current tile's compute instructions (``_Overlap``), so that the core's in-order
  dispatch runs them on its DRAM engine beside the MatMuls.

Memory map while a node runs: local = [weights | store buffer(s) | slab(s)]; accumulators =
[tile | scratch | constants].
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..arch import Architecture
from ..isa.instructions import Direction, SIMDOp
from .graph import Graph, Node
from .latency import dram_move_cycles, estimate_cycles
from .lir import LIR
from .memory import ConstTable, TensorPlacement, selection_blocks


class ScheduleError(ValueError):
    """A node that cannot be scheduled on this architecture (the message says why)."""


@dataclass
class Tile:
    image: int
    y0: int
    rows: int
    x0: int
    cols: int


def _consumer_counts(graph: Graph) -> dict[str, int]:
    """How many nodes read each tensor (a fused second output reads its conv's result too)."""
    counts: dict[str, int] = {}
    for node in graph.nodes:
        for t in set(node.inputs) | ({node.output} if node.attrs.get("second") else set()):
            counts[t] = counts.get(t, 0) + 1
    return counts


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class _Overlap:
    """DRAM moves deferred into the compute instructions that follow them.

    The core dispatches in order: a DRAM move issued while the DRAM engine is still busy holds up
    every compute instruction behind it. So deferred moves are cut into pieces and each piece is
    issued only once the compute instructions issued since the previous piece are expected to have
    covered its duration (the latency model's costs). Urgent moves (the next weights) go first."""

    PIECE = 128  # vectors per deferred move

    def __init__(self, lir: LIR, arch: Architecture):
        self.lir = lir
        self.arch = arch
        self.pending: deque = deque()
        self.urgent: deque = deque()
        self.busy = 0  # cycles the DRAM engine is still expected to be busy
        self._cost: dict[tuple, int] = {}

    def defer(
        self,
        direction: Direction,
        local: int,
        address: int,
        size: int,
        local_step: int = 1,
        step: int = 1,
        urgent: bool = False,
    ) -> None:
        """A run, queued in pieces (a strided one whole)."""
        queue = self.urgent if urgent else self.pending
        if (local_step, step) != (1, 1):
            queue.append((direction, local, address, size, local_step, step))
            return
        for off in range(0, size, self.PIECE):
            queue.append((direction, local + off, address + off, min(self.PIECE, size - off)))

    def compute(self, cycles: int) -> None:
        """``cycles`` of compute were issued: issue the deferred moves that fit beside them."""
        self.busy -= cycles
        while (self.urgent or self.pending) and self.busy <= 0:
            self._issue()

    def need_urgent(self) -> None:
        """What comes next reads the urgent moves' data: issue them all now."""
        while self.urgent:
            self._issue()

    def drain(self) -> None:
        while self.urgent or self.pending:
            self._issue()
        self.busy = 0

    def _issue(self) -> None:
        move = (self.urgent or self.pending).popleft()
        self.lir.datamove(*move)
        key = (move[0], move[3])
        if key not in self._cost:
            self._cost[key] = dram_move_cycles(self.arch, move[0], move[3])
        self.busy = max(self.busy, 0) + self._cost[key]


# The ops that take what the conv before them left in local memory (the others start by issuing its
# carried stores).
_TAKES_HAND_OVER = ("conv2d", "bias_add", "global_avg_pool")


class Scheduler:
    # _cheapest measures a hand-over through the next node; a test turns it off to show what it gains.
    LOOK_AHEAD = True

    def __init__(
        self,
        arch: Architecture,
        graph: Graph,
        placements: dict[str, TensorPlacement],
        consts: ConstTable,
        lir: LIR,
        dram0=None,
    ):
        self.arch = arch
        self.n = arch.array_size
        self.graph = graph
        self.place = placements
        self.consts = consts
        self.lir = lir
        self.dram0 = dram0  # for temporaries (Dram0Allocator)
        # Hand-over between consecutive convs: the tensors the last node left whole in local memory
        # ({name: (local address, vectors)}), and its stores of them to DRAM0 not issued yet
        # ([(name, [DataMove arguments])]), which the next node issues beside its own compute.
        self.in_local: dict[str, tuple[int, int]] = {}
        self.carried: list[tuple[str, list[tuple]]] = []
        pinned = set(graph.outputs) | set(graph.views) | {src for src, _ in graph.views.values()}
        self._read_once = {t for t, users in _consumer_counts(graph).items() if users == 1 and t not in pinned}
        # The node lowered after the current one (``_cheapest`` looks ahead into it), and whether a
        # look-ahead is being lowered (it does not look further).
        self._after = {id(a): b for a, b in zip(graph.nodes, graph.nodes[1:])}
        self._following: Node | None = None
        self._looking_ahead = False

    # -- shared pieces ---------------------------------------------------------------------------
    def _const_vectors(self, values: list[float], acc_base: int, *more_bases: int) -> dict[float, int]:
        """Load one full vector per value into the accumulators at ``acc_base`` (and copies at
        ``more_bases``); returns where the first copy is."""
        if not values:
            return {}
        rec = self.consts.add("fill", self.graph.constants, values=[float(v) for v in values])
        scratch = self.arch.local_depth - len(values)
        self.lir.datamove(Direction.DRAM1_TO_LOCAL, scratch, rec.base, rec.size)
        for base in (acc_base, *more_bases):
            self.lir.datamove(Direction.LOCAL_TO_ACC, scratch, base, rec.size)
        return {float(v): acc_base + i for i, v in enumerate(values)}

    def _epilogue_constants(self, epilogue) -> list[float]:
        vals = []
        for op, attrs in epilogue:
            if op == "leaky_relu":
                vals.append(attrs["alpha"])
            elif op == "clip":
                vals += [v for v in (attrs["lo"], attrs["hi"]) if np.isfinite(v)]
        return list(dict.fromkeys(vals))

    def _epilogue(self, acc: int, count: int, epilogue, cvec: dict[float, int]) -> None:
        """Element-wise ops on ``count`` accumulator vectors, in place, through the SIMD unit."""
        lir = self.lir
        for op, attrs in epilogue:
            if op == "relu":
                lir.simd(SIMDOp.ZERO, dest=1)
                lir.simd_run(SIMDOp.MAX, acc, count, left=0, right=1)
            elif op == "leaky_relu":  # max(x, alpha * x), for 0 <= alpha <= 1
                a = cvec[float(attrs["alpha"])]
                lir.simd_runs(
                    acc,
                    count,
                    [
                        (SIMDOp.MOVE, 1, 0, 0, a, None),
                        (SIMDOp.MULTIPLY, 1, 0, 1, "v", None),
                        (SIMDOp.MAX, 0, 0, 1, "v", "v"),
                    ],
                )
            elif op == "clip":  # an infinite bound clips nothing beyond saturation
                for bound, fn in ((attrs["hi"], SIMDOp.MIN), (attrs["lo"], SIMDOp.MAX)):
                    if not np.isfinite(bound):
                        continue
                    lir.simd(SIMDOp.MOVE, dest=1, left=0, read=cvec[float(bound)])
                    lir.simd_run(fn, acc, count, left=0, right=1)
            else:  # pragma: no cover - the frontend only fuses the ops above
                raise ScheduleError(f"unknown epilogue {op}")

    def _gather(self, out: TensorPlacement, tile: Tile, block: int, acc: int, buf: int) -> None:
        """One channel block of the tile: accumulators -> the store buffer, which holds the tile
        block-major (block ``b`` at ``buf + b * pixels``)."""
        count = tile.rows * tile.cols
        self.lir.datamove(Direction.ACC_TO_LOCAL, buf + block * count, acc, count)

    def _flush(self, out: TensorPlacement, tile: Tile, buf: int, move=None) -> None:
        """The store buffer -> DRAM0. ``move``: what issues each run (default: the LIR, now)."""
        for local, address, size in self._tile_runs(out, tile, buf):
            (move or self.lir.datamove)(Direction.LOCAL_TO_DRAM0, local, address, size)

    def _load_tile(self, src: TensorPlacement, tile: Tile, buf: int, move=None) -> None:
        """A tile of ``src`` -> local memory in the store buffer's layout (a fused residual's shortcut)."""
        for local, address, size in self._tile_runs(src, tile, buf):
            (move or self.lir.datamove)(Direction.DRAM0_TO_LOCAL, local, address, size)

    @staticmethod
    def _tile_runs(place: TensorPlacement, tile: Tile, buf: int):
        """(local, DRAM0 address, vectors) runs between a tile of ``place`` (all its channel blocks,
        block-major) and a local buffer: per block, whole rows are one run, else one per row."""
        count = tile.rows * tile.cols
        if count == place.pixels and place.pixel_step == 1:  # the whole (single) map: one run
            yield buf, place.base, count * place.blocks
            return
        for b in range(place.blocks):
            if tile.cols == place.shape[2]:
                yield buf + b * count, place.address(tile.image, tile.y0, 0, b), count
                continue
            for r in range(tile.rows):
                yield buf + b * count + r * tile.cols, place.address(tile.image, tile.y0 + r, tile.x0, b), tile.cols

    def _plan_tiles(
        self,
        out_shape,
        window,
        in_blocks: int,
        local_free: int,
        acc_free: int,
        extra_acc_per_col: int = 0,
        store_blocks: int = 1,
        max_rows: int | None = None,
        in_w: int | None = None,
    ):
        """Largest tile (rows, cols) whose accumulator vectors and input slab fit.

        ``window`` = (kh, kw, sh, sw, dh, dw). The slab holds every input row and column the
        tile's window covers, all channel blocks.
        """
        _, oh, ow, _ = out_shape
        kh, kw, sh, sw, dh, dw = window

        def slab(rows, cols):
            return self._slab_size(rows, cols, window, in_blocks, in_w if cols == ow else None)

        cols = ow
        while cols >= 1:
            best = None
            for rows in range(min(oh, max_rows or oh), 0, -1):
                vectors = rows * cols
                if (
                    vectors + extra_acc_per_col * cols <= acc_free
                    and vectors * store_blocks + slab(rows, cols) <= local_free
                ):
                    best = rows
                    break
            if best:
                return best, cols
            cols = cols // 2 if cols > 1 else 0
        raise ScheduleError(
            "one output pixel's input window does not fit local memory "
            f"(window {kh}x{kw}, {in_blocks} channel blocks, {local_free} vectors free); "
            "use an architecture with a larger local_depth"
        )

    def _tiles(self, out_shape, rows: int, cols: int):
        n, oh, ow, _ = out_shape
        for img in range(n):
            for y0 in range(0, oh, rows):
                for x0 in range(0, ow, cols):
                    yield Tile(img, y0, min(rows, oh - y0), x0, min(cols, ow - x0))

    def _load_slab(
        self, inp: TensorPlacement, tile: Tile, window, padding, slab: int, move=None, whole_width: bool = False
    ):
        """Load the valid input rows/columns of ``tile``'s window, block-major (block ``b`` at
        ``slab + b * plane``); returns the slab geometry ``(y_lo, x_lo, cols, plane)``.
        ``move``: what issues each run (default: the LIR, now). ``whole_width`` (the tile spans
        every output column): whole input rows, so each block's rows are one run."""
        move = move or self.lir.datamove
        kh, kw, sh, sw, dh, dw = window
        pt, pl = padding[0], padding[1]
        _, h, w, _ = inp.shape
        y_lo = max(0, tile.y0 * sh - pt)
        y_hi = min(h - 1, (tile.y0 + tile.rows - 1) * sh - pt + (kh - 1) * dh)
        x_lo = max(0, tile.x0 * sw - pl)
        x_hi = min(w - 1, (tile.x0 + tile.cols - 1) * sw - pl + (kw - 1) * dw)
        if whole_width:
            x_lo, x_hi = 0, w - 1
        cols = max(0, x_hi - x_lo + 1)
        rows = max(0, y_hi - y_lo + 1)
        plane = rows * cols
        step = inp.pixel_step
        if plane == inp.pixels and step == 1:  # the whole (single) map: every block in one run
            move(Direction.DRAM0_TO_LOCAL, slab, inp.address(tile.image, 0, 0, 0), plane * inp.blocks)
            return y_lo, x_lo, cols, plane
        for b in range(inp.blocks if plane else 0):
            if cols == w and step == 1:  # whole rows are one contiguous run
                move(Direction.DRAM0_TO_LOCAL, slab + b * plane, inp.address(tile.image, y_lo, 0, b), plane)
                continue
            for y in range(y_lo, y_hi + 1):
                move(
                    Direction.DRAM0_TO_LOCAL,
                    slab + b * plane + (y - y_lo) * cols,
                    inp.address(tile.image, y, x_lo, b),
                    cols,
                    1,
                    step,
                )
        return y_lo, x_lo, cols, plane

    def _tap_runs(self, tile: Tile, inp_shape, window, padding, tap):
        """For one kernel tap: (row in tile, input y, first col, input x of it, count) runs."""
        kh, kw, sh, sw, dh, dw = window
        pt, pl = padding[0], padding[1]
        _, h, w, _ = inp_shape
        ky, kx = tap
        for r in range(tile.rows):
            y = (tile.y0 + r) * sh - pt + ky * dh
            if not 0 <= y < h:
                continue
            off = kx * dw - pl
            first = max(tile.x0, _ceil_div(-off, sw))
            last = min(tile.x0 + tile.cols - 1, (w - 1 - off) // sw)
            if first > last:
                continue
            yield r, y, first - tile.x0, first * sw + off, last - first + 1

    # -- convolution (also dense, depthwise, bias add) -----------------------------------------
    def conv2d(self, node: Node) -> None:
        """A conv, and its fused second output (if any) when that is faster than a layer of its own:
        the second output saves reading the result back from DRAM0 but needs a second store buffer,
        which can shrink the conv's tiles."""
        second = node.attrs.get("second")
        if not second:
            self._conv2d_best(node)
            return
        plain = Node(
            node.op,
            node.inputs,
            node.output,
            {k: v for k, v in node.attrs.items() if k != "second"},
            node.epilogue,
            node.source_ops,
        )
        affine = Node(
            "conv2d",
            [node.output],
            second["output"],
            {"weight": second["weight"], "bias": second["bias"], "groups": second["groups"]},
            second["epilogue"],
        )
        fused_plan, plain_plan = self._conv2d(node, 1, None, emit=False), self._conv2d(plain, 1, None, emit=False)
        if fused_plan[1:] == plain_plan[1:]:  # the same tiles: the second output only saves DRAM traffic
            self._conv2d_best(node)
        elif self._tile_count(node, plain_plan) <= 4:
            self._cheapest([lambda: self._conv2d_best(node), lambda: self._conv2d_pair(plain, affine)])
        else:
            self._conv2d_pair(plain, affine)

    def _conv2d_pair(self, plain: Node, affine: Node) -> None:
        """A conv, then its second output as a layer of its own (which comes next while lowering it)."""
        following, self._following = self._following, affine
        try:
            self._conv2d_best(plain)
        finally:
            self._following = following
        self._conv2d_best(affine)

    def _conv2d_best(self, node: Node) -> None:
        """The faster of the single- and double-buffered schedules, by the latency model: double
        buffering overlaps DRAM with compute but halves the tiles (more weight loads per pixel).
        A fused residual's shortcut starts the accumulators either by a move (the accumulator
        engine's work) or by a MatMul with identity weights (the array's): the faster one is kept."""
        if node.attrs.get("residual"):
            self._cheapest([lambda: self._conv2d_plans(node, False), lambda: self._conv2d_plans(node, True)])
        else:
            self._conv2d_plans(node, False)

    def _conv2d_plans(self, node: Node, shortcut_matmul: bool) -> None:
        # (buffers, most output rows per tile). Layers of up to 64 tiles (a small local memory cuts
        # even CIFAR-sized maps into 8-16) are emitted each way and compared; a layer of more tiles
        # keeps the single-buffered schedule (emitting it several times would cost compile time).
        single = self._conv2d(node, 1, None, emit=False, shortcut_matmul=shortcut_matmul)
        oh = self.place[node.output].shape[1]
        options = [(1, None)]
        if self._tile_count(node, single) <= 64 and self._dram_share(node) >= 0.05:
            options += [(2, None)] + [(2, _ceil_div(oh, k)) for k in (2, 4, 8)]
        plans = {}
        for buffers, max_rows in options:
            try:
                plans.setdefault(
                    self._conv2d(node, buffers, max_rows, emit=False, shortcut_matmul=shortcut_matmul),
                    (buffers, max_rows),
                )
            except ScheduleError:
                continue
        # Narrower bands overlap more but reload weights more often: stop at the first band count
        # that loses to the one before it.
        self._cheapest(
            [lambda b=b, m=m: self._conv2d(node, b, m, shortcut_matmul=shortcut_matmul) for b, m in plans.values()],
            stop_when_worse=True,
        )

    def _cheapest(self, emitters, stop_when_worse: bool = False) -> None:
        """Emit the alternative the latency model finds fastest (each is emitted once to measure it;
        with ``stop_when_worse``, from the third on, the search stops at the first alternative
        slower than the one before it).

        What a node leaves to the next one counts too: the stores it carries, and, when the fastest
        alternative does not leave the next conv's input in local memory but another does, that conv
        itself: those are then measured with the next node lowered after them (a greedy choice would
        keep the faster tiling of this node and pay a DRAM round trip of its whole output in the
        next). A hand-over that is fastest on its own is kept without looking."""
        if len(emitters) == 1:
            emitters[0]()
            return
        final, previous = self.lir, None
        start = (self.in_local, self.carried)
        consts_before = self.consts.state()  # a losing alternative's weights must not stay in DRAM1
        tried = []  # (cycles, lir, (in_local, carried), consts state)
        for i, emit in enumerate(emitters):
            self.lir = LIR(self.arch)
            self.in_local, self.carried = start
            self.consts.restore(consts_before)
            try:
                emit()
                cycles = self._cycles_with(self.lir, self.carried)
                worse = i >= 2 and cycles > previous
                previous = cycles
                tried.append((cycles, self.lir, (self.in_local, self.carried), self.consts.state()))
            finally:
                self.lir = final
            if stop_when_worse and worse:
                break
        nxt = self._following
        hands = [nxt is not None and nxt.inputs[0] in held for _, _, (held, _), _ in tried]
        fastest = min(range(len(tried)), key=lambda i: tried[i][0])
        if (
            self.LOOK_AHEAD
            and not self._looking_ahead
            and not hands[fastest]  # a hand-over that is fastest on its own is kept
            and any(hands)
            and nxt.op in _TAKES_HAND_OVER
        ):
            # The next node costs about the same after any alternative that does not hand over: only
            # the fastest (of all) is looked through, beside each one that does.
            tried = [tried[fastest]] + [t for t, h in zip(tried, hands) if h]
            tried = [(self._cycles_through(nxt, *t[1:]),) + t[1:] for t in tried]
        best = min(tried, key=lambda t: t[0])
        final.extend(best[1])
        self.in_local, self.carried = best[2]
        self.consts.restore(best[3])

    def _cycles_with(self, lir: LIR, carried) -> int:
        """Latency-model cycles of ``lir`` followed by the stores it still carries."""
        trial = LIR(self.arch)
        trial.extend(lir)
        for _, moves in carried:
            for move in moves:
                trial.datamove(*move)
        return estimate_cycles(trial.program(), self.arch)["total"]

    def _cycles_through(self, nxt: Node, lir: LIR, state, consts_state) -> int:
        """Cycles of ``lir`` (one alternative, leaving ``state``) and then ``nxt`` lowered after it;
        the scheduler is left as it was."""
        final, saved = self.lir, (self.in_local, self.carried)
        self.lir = LIR(self.arch)
        self.lir.extend(lir)
        self.in_local, self.carried = dict(state[0]), list(state[1])
        self.consts.restore(consts_state)
        self._looking_ahead = True
        try:
            self.lower(nxt)
            return self._cycles_with(self.lir, self.carried)
        finally:
            self._looking_ahead = False
            self.lir = final
            self.in_local, self.carried = saved
            self.consts.restore(consts_state)

    @staticmethod
    def _covering_tap(in_shape, out_shape, window, padding, taps) -> int | None:
        """Index of a tap that reads an input pixel for every output pixel (the centre first)."""
        kh, kw, sh, sw, dh, dw = window
        _, h, w, _ = in_shape
        _, oh, ow, _ = out_shape
        pt, pl = padding[0], padding[1]
        centre = (kh // 2, kw // 2)
        for t in sorted(range(len(taps)), key=lambda t: taps[t] != centre):
            ky, kx = taps[t]
            if (
                0 <= ky * dh - pt
                and (oh - 1) * sh - pt + ky * dh < h
                and 0 <= kx * dw - pl
                and (ow - 1) * sw - pl + kx * dw < w
            ):
                return t
        return None

    def _dram_share(self, node: Node) -> float:
        """Roughly, a conv's DRAM0 vectors (input and output) per MatMul vector: where overlapping
        them with compute can pay."""
        inp, out = self.place[node.inputs[0]], self.place[node.output]
        a = node.attrs
        taps = 1
        if a.get("weight") is not None and a.get("layout", "OIHW") != "KM":
            taps = int(np.prod(np.shape(self.graph.constants[a["weight"]])[2:]))
        depthwise = a.get("weight") is None or a.get("groups", 1) != 1
        reads = inp.blocks * inp.shape[1] * inp.shape[2] / max(1, out.shape[1] * out.shape[2])
        writes = out.blocks * (2 if a.get("second") else 1)
        return (reads + writes) / ((1 if depthwise else inp.blocks) * taps * out.blocks)

    def _tile_count(self, node: Node, plan: tuple[int, int, int]) -> int:
        _, rows, cols = plan
        n, oh, ow, _ = self.place[node.output].shape
        return n * _ceil_div(oh, rows) * _ceil_div(ow, cols)

    def _conv2d(
        self, node: Node, buffers: int, max_rows: int | None = None, emit: bool = True, shortcut_matmul: bool = False
    ) -> tuple[int, int, int]:
        """Emit ``node`` with up to ``buffers`` slabs and store buffers and at most ``max_rows``
        output rows per tile; returns the plan it used: (buffers, rows, cols). With ``emit=False``,
        only the plan. ``shortcut_matmul``: a fused residual's shortcut enters each output block's
        accumulators through a MatMul with identity weights (exact: x * 1 + 0) instead of a move."""
        a = node.attrs
        inp, out = self.place[node.inputs[0]], self.place[node.output]
        n = self.n
        lir = self.lir
        layout = a.get("layout", "OIHW")
        if a.get("weight") is None:  # identity (a standalone bias add)
            kh = kw = 1
        else:
            kh, kw = (1, 1) if layout == "KM" else np.shape(self.graph.constants[a["weight"]])[2:]
        sh, sw = a.get("strides", (1, 1))
        dh, dw = a.get("dilation", (1, 1))
        padding = a.get("padding", (0, 0, 0, 0))
        window = (kh, kw, sh, sw, dh, dw)
        taps = [(y, x) for y in range(kh) for x in range(kw)]
        # A tap that reads a real input pixel for every output pixel starts each output block: its
        # MatMuls overwrite the accumulators and its first input block's weights carry the bias, so
        # no bias-initialising MatMul is needed. Without such a tap (padding cuts every tap
        # somewhere) the accumulators start from the bias by a MatMul of zeroes.
        cover = self._covering_tap(inp.shape, out.shape, window, padding, taps)
        bias = a.get("bias")
        fused_bias = {"bias": bias, "bias_tap": list(taps[cover])} if cover is not None and bias is not None else {}
        if a.get("weight") is None:
            wrec = self.consts.add(
                "identity_weights",
                self.graph.constants,
                channels=out.shape[3],
                **({"bias": bias} if fused_bias else {}),
            )
            depthwise = True
        else:
            depthwise = a["groups"] != 1
            extra = {"flatten": list(a["flatten"])} if a.get("flatten") else {}
            wrec = self.consts.add(
                "conv_weights",
                self.graph.constants,
                weight=a["weight"],
                groups=a["groups"],
                layout=layout,
                **extra,
                **fused_bias,
            )
        brec = (
            None
            if cover is not None
            else self.consts.add("channel_vectors", self.graph.constants, channels=out.shape[3], values=bias)
        )
        # A fused residual add: the shortcut tile is loaded into the store buffer (the same layout
        # as the output tile), and each output block's accumulators start from it.
        short = self.place[node.inputs[1]] if a.get("residual") else None
        identity = (
            self.consts.add("diagonal_weights", self.graph.constants, values=[1.0])
            if (short and shortcut_matmul)
            else None
        )
        # A fused second output (a channel affine + activation of this conv's result): each output
        # block's result, once gathered into the store buffer, goes through one more MatMul with
        # diagonal weights (bias in row 0) and its own epilogue into a second store buffer.
        second = a.get("second")
        out2 = self.place[second["output"]] if second else None
        srec = (
            self.consts.add(
                "conv_weights",
                self.graph.constants,
                weight=second["weight"],
                groups=second["groups"],
                layout="OIHW",
                **({"bias": second["bias"], "bias_tap": [0, 0]} if second["bias"] is not None else {}),
            )
            if second
            else None
        )
        store_cap = out.blocks * (2 if second else 1)  # store buffer vectors per tile pixel
        cbi, cbo = inp.blocks, out.blocks
        block = n + 1
        order = [cover] + [t for t in range(len(taps)) if t != cover] if cover is not None else list(range(len(taps)))

        cvals = self._epilogue_constants(node.epilogue + (second["epilogue"] if second else []))
        acc_free = self.arch.accumulator_depth - len(cvals)
        local_free = (
            self.arch.local_depth - len(cvals) - (srec.size if srec else 0) - (identity.size if identity else 0)
        )

        # Weights come in groups, each group's next one loaded beside its MatMuls (``_weight_groups``).
        def plan(room: int) -> tuple[int, int]:
            """Tile rows and columns with ``room`` vectors of local memory for slab and store buffer."""
            return self._plan_tiles(
                out.shape, window, cbi, room, acc_free, store_blocks=store_cap, max_rows=max_rows, in_w=inp.shape[2]
            )

        groups, slot, slots = None, 0, 0
        for mode in ("resident", "input blocks", "blocks", "one block"):
            groups, slot, slots = self._weight_groups(mode, wrec, brec, taps, order, cbi, cbo, depthwise, local_free)
            if groups is not None:
                staging = slot * max(slots, 1)
                try:
                    plan(local_free - staging)
                    break
                except ScheduleError:
                    if mode == "one block":
                        raise
        store_blocks = out.blocks
        # Two slabs and two store buffers (the next tile's loads and the previous tile's stores then
        # run beside this tile's MatMuls) or one of each.
        if buffers == 2:
            try:
                rows, cols = plan((local_free - staging) // 2)
            except ScheduleError:
                buffers = 1
        if buffers == 1:
            rows, cols = plan(local_free - staging)
        tiles = list(self._tiles(out.shape, rows, cols))
        if len(tiles) == 1:
            buffers = 1
        if not emit:
            return buffers, rows, cols
        # Accumulator banks: when a tile fits half the accumulators (with the constants at the top of
        # each half), consecutive output blocks alternate between the halves, so one block's epilogue
        # and gather run beside the next one's MatMuls.
        half = self.arch.accumulator_depth // 2
        banked = rows * cols <= half - len(cvals) and len(tiles) * cbo > 1
        store_size = rows * cols * store_blocks
        full_rows = cols == out.shape[2]  # every tile spans the output's width: whole input rows
        slab_size = self._slab_size(rows, cols, window, cbi, inp.shape[2] if full_rows else None)
        # Local memory: [weights | second output's weights | identity weights | store buffer(s) |
        # slab(s)] from ``lo``.
        # When the previous conv left this conv's whole input in local memory (``handed``), that is
        # the slab, and the rest goes below or above it (and above what it still has to store).
        resident = (srec.size if srec else 0) + (identity.size if identity else 0)
        own = staging + resident + (2 if second else 1) * buffers * store_size
        whole = len(tiles) == 1 and (tiles[0].rows, tiles[0].cols) == out.shape[1:3] and out.shape[0] == 1
        handed = self._handed_over(node, inp, tiles[0], window, padding, own, len(cvals)) if whole else None
        carried, self.carried, self.in_local = self.carried, [], {}
        if handed is None:
            for _, moves in carried:  # this node reads DRAM0: what the previous one still had to store first
                for move in moves:
                    lir.datamove(*move)
            carried = []
            lo = 0
        else:
            lo, slabs, geometry = handed
        wbase = lo
        wsecond = lo + staging  # the second output's weights, resident for the layer
        wident = wsecond + (srec.size if srec else 0)  # the identity weights, resident for the layer
        stores = [lo + staging + resident + k * store_size for k in range(buffers * (2 if second else 1))]
        stores, stores2 = stores[:buffers], stores[buffers:]
        if handed is None:
            slabs = [lo + own + k * slab_size for k in range(buffers)]
        if banked:
            cvec0 = self._const_vectors(cvals, half - len(cvals), 2 * half - len(cvals))
            cvecs = [cvec0, {v: a + half for v, a in cvec0.items()}]
        else:
            cvecs = [self._const_vectors(cvals, acc_free)]
        overlap = _Overlap(lir, self.arch)
        for name, moves in carried:  # the previous node's stores, beside this node's compute
            if not (name == node.inputs[0] and name in self._read_once):  # (nobody else reads that one)
                overlap.pending.extend(moves)

        def fetch(seq: int) -> None:
            """Queue the weights of the ``seq``-th group in program order as urgent DRAM1 moves."""
            group = groups[sequence[seq][1]][sequence[seq][2]]
            if slots == 0 and sequence[seq][0] > 0:
                return  # resident: loaded during the first tile
            base = wbase + ((seq % slots) * slot if slots else 0)
            for dram1, local, size in group[0]:
                overlap.defer(Direction.DRAM1_TO_LOCAL, base + local, dram1, size, urgent=True)

        def load_weights(local: int, size: int) -> None:
            lir.load_weights(local, size)
            overlap.compute(size + 4)

        # With accumulator banks, an output block's epilogue and gather (the SIMD instructions, one per
        # vector, and the move to the store buffer) are interleaved with the next block's MatMuls: a
        # MatMul of k vectors keeps the array busy while up to k of them dispatch beside it.
        backlog = np.zeros((0, 7), dtype=np.int64)

        def release(limit: int | None = None) -> None:
            nonlocal backlog
            take = len(backlog) if limit is None else limit
            lir.emit_rows(backlog[:take])
            backlog = backlog[take:]

        def matmul(local: int, acc: int, size: int, local_step: int = 1, **flags) -> None:
            lir.matmul(local, acc, size, local_step, 1, **flags)
            overlap.compute(size + 1)
            if len(backlog):
                release(size)

        def later(emit) -> None:
            """Run ``emit`` now or, banked, capture its instructions at the end of the backlog."""
            nonlocal backlog
            if not banked:
                emit()
                return
            side, self.lir = self.lir, LIR(self.arch)
            try:
                emit()
                backlog = np.concatenate([backlog, self.lir.pending_rows()])
            finally:
                self.lir = side

        def finish_block(acc0: int, count: int, cvec, tile: Tile, ob: int, store: int) -> None:
            """This output block's epilogue and gather, after what the block before still had to do."""
            release()

            def emit():
                self._epilogue(acc0, count, node.epilogue, cvec)
                self._gather(out, tile, ob, acc0, store)

            if second:  # now: the second output's MatMul reads this gather
                emit()
            else:
                later(emit)

        def finish_second(acc0: int, count: int, cvec, tile: Tile, ob: int, store2: int) -> None:
            """The second output's epilogue and gather."""
            later(
                lambda: (
                    self._epilogue(acc0, count, second["epilogue"], cvec),
                    self._gather(out2, tile, ob, acc0, store2),
                )
            )

        # Every (tile, output block, group) in program order, so each can fetch the next one's weights.
        sequence = [(i, ob, g) for i in range(len(tiles)) for ob in range(cbo) for g in range(len(groups[ob]))]
        pointwise = kh == kw == 1 and sh == sw == 1 and not any(padding)
        if handed is None:
            geometry = self._load_slab(inp, tiles[0], window, padding, slabs[0], whole_width=full_rows)
        if short:
            self._load_tile(short, tiles[0], stores[0])
        if identity:
            lir.datamove(Direction.DRAM1_TO_LOCAL, wident, identity.base, identity.size)
        fetch(0)
        seq = 0
        for i, tile in enumerate(tiles):
            slab, store = slabs[i % buffers], stores[i % buffers]
            if i and buffers == 1:
                geometry = self._load_slab(inp, tile, window, padding, slab, whole_width=full_rows)
                if short:
                    self._load_tile(short, tile, store)
            y_lo, x_lo, scols, plane = geometry
            # Per tap: (slab offset, accumulator, vectors) of each run, the same for every block.
            tap_runs = [
                [
                    ((y - y_lo) * scols + (x - x_lo), r * tile.cols + c0, cnt)
                    for r, y, c0, x, cnt in self._tap_runs(tile, inp.shape, window, padding, tap)
                ]
                for tap in taps
            ]
            if buffers == 2 and i + 1 < len(tiles):  # the next tile's slab, beside this tile's MatMuls
                geometry = self._load_slab(
                    inp, tiles[i + 1], window, padding, slabs[(i + 1) % 2], overlap.defer, whole_width=full_rows
                )
                if short:
                    self._load_tile(short, tiles[i + 1], stores[(i + 1) % 2], overlap.defer)
            count = tile.rows * tile.cols
            for ob in range(cbo):
                lir.comment(
                    f"{node.op} {node.output}: image {tile.image} rows {tile.y0}+{tile.rows} "
                    f"cols {tile.x0}+{tile.cols} block {ob}"
                )
                unit = (i * cbo + ob) % len(cvecs)  # the accumulator bank of this output block
                acc0, cvec = unit * half, cvecs[unit]
                if identity:  # the shortcut through the array: acc = shortcut * 1
                    load_weights(wident, block)
                    matmul(store + ob * count, acc0, count)
                elif short:
                    lir.datamove(Direction.LOCAL_TO_ACC, store + ob * count, acc0, count)
                    overlap.compute(count + 6)
                first = brec is None and not short  # the covering tap's MatMuls start the accumulators
                for _, loads in groups[ob]:
                    overlap.need_urgent()  # this group's weights
                    base = wbase + ((seq % slots) * slot if slots else 0)
                    if slots != 1 and seq + 1 < len(sequence):
                        fetch(seq + 1)  # into the other slot, beside this group's MatMuls
                    if seq == 0 and srec:
                        overlap.defer(Direction.DRAM1_TO_LOCAL, wsecond, srec.base, srec.size, urgent=True)
                    seq += 1
                    for ib, t, local in loads:
                        if ib is None:  # the bias into row 0 of a MatMul of zeroes
                            load_weights(base + local, 1)
                            matmul(0, acc0, count, zeroes=True, accumulate=bool(short))
                            continue
                        load_weights(base + local, block)
                        if pointwise and tile.cols == inp.shape[2] == scols:
                            matmul(slab + ib * plane, acc0, count, accumulate=not first)
                            first = False
                            continue
                        src = slab + ib * plane
                        for offset, acc, cnt in tap_runs[t]:
                            matmul(src + offset, acc0 + acc, cnt, sw, accumulate=not first)
                        first = False
                    if slots == 1 and seq < len(sequence):
                        fetch(seq)  # one slot: the next group's load waits for this group's LoadWeights
                finish_block(acc0, count, cvec, tile, ob, store)
                overlap.compute(count * (1 + len(node.epilogue)))
                if second:
                    if i == ob == 0:
                        overlap.need_urgent()  # the second output's weights
                    load_weights(wsecond + ob * block, block)
                    matmul(store + ob * count, acc0, count)
                    finish_second(acc0, count, cvec, tile, ob, stores2[i % buffers])
                    overlap.compute(count * (1 + len(second["epilogue"])))
            release()  # the tile's last epilogue and gather, before its stores
            overlap.drain()  # the next tile reads its slab; the store buffer about to be reused is flushed
            if whole:  # the next conv may take the result from local memory; it issues these stores
                outputs = [(node.output, out, store)] + ([(second["output"], out2, stores2[0])] if second else [])
                for name, place, buf in outputs:
                    moves = []
                    self._flush(place, tile, buf, lambda *m, moves=moves: moves.append(m))
                    self.carried.append((name, moves))
                    self.in_local[name] = (buf, store_size)
                continue
            self._flush(out, tile, store, overlap.defer if buffers == 2 else None)
            if second:
                self._flush(out2, tile, stores2[i % buffers], overlap.defer if buffers == 2 else None)
        release()
        overlap.drain()
        return buffers, rows, cols

    def _handed_over(self, node: Node, inp: TensorPlacement, tile: Tile, window, padding, own: int, consts: int):
        """``(lo, [slab], geometry)`` when the previous conv left this conv's whole input in local
        memory where this conv can read it as its slab, with its own ``own`` vectors from ``lo``
        (below or above everything the previous conv still holds); else None."""
        held = self.in_local.get(node.inputs[0])
        if held is None or any(t in dict(self.carried) for t in node.inputs[1:]):
            return None
        geometry = self._load_slab(inp, tile, window, padding, 0, lambda *move: None, whole_width=True)
        if geometry[:2] != (0, 0) or geometry[2:] != (inp.shape[2], inp.shape[1] * inp.shape[2]):
            return None  # the window does not read the input as one whole map
        lo = self._room_beside_held(own, consts)
        return None if lo is None else (lo, [held[0]], geometry)

    def _room_beside_held(self, own: int, consts: int) -> int | None:
        """Where ``own`` vectors of local memory fit below or above everything the previous node left
        there (``in_local``), the top ``consts`` vectors kept free (constants pass through them);
        else None."""
        spans = [(a, a + n) for a, n in self.in_local.values()]
        hole = (min(a for a, _ in spans), max(b for _, b in spans))
        limit = self.arch.local_depth - consts
        if hole[1] > limit:
            return None
        return 0 if own <= hole[0] else hole[1] if hole[1] + own <= limit else None

    def _weight_groups(self, mode, wrec, brec, taps, order, cbi, cbo, depthwise, local_free):
        """How a conv's weights reach the array: ``(groups, slot, slots)`` or ``(None, 0, 0)`` when
        ``mode`` does not apply. ``groups[ob]`` lists output block ``ob``'s groups in use order, each
        ``(DRAM1 runs [(address, local offset, vectors)], loads [(input block or None for the bias,
        tap index, local offset)])``. Modes: "resident" (all weights stay in local memory for the
        layer, at fixed offsets in ``slot = `` their size; ``slots = 0``), "input blocks" (as many input blocks'
        weights per
        group as fit a quarter of local memory twice), "blocks" (one weight block per group), both
        in two alternating slots of ``slot`` vectors, and "one block" (a single slot)."""
        block = self.n + 1
        unit = len(taps) * block  # the weights of one (output block, input block)
        ibs_per_ob = 1 if depthwise else cbi
        total = wrec.size + (brec.size if brec else 0)

        def idx(ob, ib, t):
            return (ob * len(taps) + t) if depthwise else ((ob * cbi + ib) * len(taps) + t)

        def ibs(ob):
            return [ob] if depthwise else list(range(cbi))

        groups = []
        if mode == "resident":
            if total > local_free // 2:
                return None, 0, 0
            for ob in range(cbo):
                first = idx(ob, ibs(ob)[0], 0)
                runs = [(wrec.base + first * block, first * block, ibs_per_ob * unit)]
                loads = [(ib, t, idx(ob, ib, t) * block) for ib in ibs(ob) for t in order]
                if brec:
                    runs.append((brec.base + ob, wrec.size + ob, 1))
                    loads.insert(0, (None, 0, wrec.size + ob))
                groups.append([(runs, loads)])
            return groups, total, 0
        if mode == "input blocks":
            per_group = min(ibs_per_ob, (local_free // 4) // (2 * unit + 2))
            if per_group < 1:
                return None, 0, 0
            for ob in range(cbo):
                obs_groups = []
                for g0 in range(0, ibs_per_ob, per_group):
                    chunk = ibs(ob)[g0 : g0 + per_group]
                    first = idx(ob, chunk[0], 0)
                    runs = [(wrec.base + first * block, 0, len(chunk) * unit)]
                    loads = [(ib, t, (idx(ob, ib, t) - first) * block) for ib in chunk for t in order]
                    if brec and g0 == 0:
                        runs.append((brec.base + ob, per_group * unit, 1))
                        loads.insert(0, (None, 0, per_group * unit))
                    obs_groups.append((runs, loads))
                groups.append(obs_groups)
            return groups, per_group * unit + (1 if brec else 0), 2
        for ob in range(cbo):
            obs_groups = [([(brec.base + ob, 0, 1)], [(None, 0, 0)])] if brec else []
            obs_groups += [
                ([(wrec.base + idx(ob, ib, t) * block, 0, block)], [(ib, t, 0)]) for ib in ibs(ob) for t in order
            ]
            groups.append(obs_groups)
        return groups, block, 2 if mode == "blocks" else 1

    def _slab_size(self, rows: int, cols: int, window, in_blocks: int, whole_width: int | None = None) -> int:
        """Local vectors of the slab of a tile; ``whole_width``: the input's width, when the tile
        spans every output column (its slab then holds whole input rows)."""
        kh, kw, sh, sw, dh, dw = window
        width = whole_width or (cols - 1) * sw + (kw - 1) * dw + 1
        return ((rows - 1) * sh + (kh - 1) * dh + 1) * width * in_blocks

    # -- element-wise -------------------------------------------------------------------------------
    def eltwise(self, node: Node) -> None:
        """add (two inputs), or a standalone activation (one input), over flat pixel runs."""
        out = self.place[node.output]
        ins = [self.place[i] for i in node.inputs]
        lir = self.lir
        epilogue = ([] if node.op == "add" else [(node.op, node.attrs)]) + node.epilogue
        cvals = self._epilogue_constants(epilogue)
        acc_free = self.arch.accumulator_depth - len(cvals)
        cvec = self._const_vectors(cvals, acc_free)
        chunk = min(acc_free, self.arch.local_depth - len(cvals))
        # Every vector is real (no padding blocks) and the operands share the layout: one flat run.
        for off in range(0, out.size, chunk):
            cnt = min(chunk, out.size - off)
            lir.comment(f"{node.op} {node.output}: vectors {off}+{cnt}")
            for k, src in enumerate(ins):
                lir.datamove(Direction.DRAM0_TO_LOCAL, 0, src.base + off, cnt)
                lir.datamove(Direction.LOCAL_TO_ACC_ACCUMULATE if k else Direction.LOCAL_TO_ACC, 0, 0, cnt)
            self._epilogue(0, cnt, epilogue, cvec)
            lir.datamove(Direction.ACC_TO_LOCAL, 0, 0, cnt)
            lir.datamove(Direction.LOCAL_TO_DRAM0, 0, out.base + off, cnt)

    # -- pooling ------------------------------------------------------------------------------------
    def pool2d(self, node: Node) -> None:
        a = node.attrs
        inp, out = self.place[node.inputs[0]], self.place[node.output]
        lir = self.lir
        kh, kw = a["kernel"]
        sh, sw = a["strides"]
        dh, dw = a.get("dilation", (1, 1))
        padding = a["padding"]
        window = (kh, kw, sh, sw, dh, dw)
        is_max = node.op == "max_pool2d"
        cbi = inp.blocks
        taps = [(y, x) for y in range(kh) for x in range(kw)]
        dt = self.arch.data_type

        # Average pooling never sums raw values: a window of k values inside the range can sum
        # far outside it. Each value enters the sum pre-scaled by 2^-s (2^s >= k, so no partial
        # sum can leave the range), through a MatMul with diagonal weights 2^-s (exact up to
        # rounding each product); the sum is then scaled by 2^s / count, a factor in [1, 2)
        # that the data type holds to within 2^-(bp+1). Scaling by 1/count directly would
        # round the factor itself (1/9 is 28/256 in FP16BP8: 1.6% off).
        scales: dict[int, float] = {}
        counts = None
        shift = 0
        if not is_max:
            counts = self._pool_counts(inp.shape, out.shape, window, padding, a.get("count_include_pad", False))
            shift = max(0, math.ceil(math.log2(kh * kw)))
            scales = {c: 2.0**shift / c for c in sorted(set(counts.reshape(-1).tolist())) if 2**shift != c}
        cvals = list(dict.fromkeys(self._epilogue_constants(node.epilogue) + list(scales.values())))
        wsize = 0 if is_max else self.n + 1
        acc_free = self.arch.accumulator_depth - len(cvals)
        local_free = self.arch.local_depth - len(cvals) - 1 - wsize
        # Max pooling stages each tap's run in accumulator scratch: one row of the tile.
        rows, cols = self._plan_tiles(
            out.shape,
            window,
            cbi,
            local_free,
            acc_free,
            in_w=inp.shape[2],
            extra_acc_per_col=1 if is_max else 0,
            store_blocks=out.blocks,
        )
        cvec = self._const_vectors(cvals, acc_free)
        if is_max:
            init = self.consts.add("fill", self.graph.constants, values=[dt.min_float])
            lir.datamove(Direction.DRAM1_TO_LOCAL, 0, init.base, 1)
        else:
            diag = self.consts.add("diagonal_weights", self.graph.constants, values=[2.0**-shift])
            lir.datamove(Direction.DRAM1_TO_LOCAL, 1, diag.base, wsize)
            lir.load_weights(1, wsize)  # the array keeps them for the whole layer
        store = 1 + wsize
        slab = store + rows * cols * out.blocks
        for tile in self._tiles(out.shape, rows, cols):
            y_lo, x_lo, scols, plane = self._load_slab(
                inp, tile, window, padding, slab, whole_width=cols == out.shape[2]
            )
            count = tile.rows * tile.cols
            scratch = count
            for b in range(out.blocks):
                lir.comment(f"{node.op} {node.output}: image {tile.image} rows {tile.y0}+{tile.rows} block {b}")
                if is_max:
                    lir.load_weights(0, 1)  # row 0 = the initial value (the minimum)
                lir.matmul(0, 0, count, zeroes=True)  # max: the minimum everywhere; average: 0
                for tap in taps:
                    for r, y, c0, x, cnt in self._tap_runs(tile, inp.shape, window, padding, tap):
                        src = slab + b * plane + (y - y_lo) * scols + (x - x_lo)
                        dst = r * tile.cols + c0
                        if is_max:
                            lir.datamove(Direction.LOCAL_TO_ACC, src, scratch, cnt, sw, 1)
                            for i in range(cnt):
                                lir.simd(SIMDOp.MOVE, dest=1, left=0, read=scratch + i)
                                lir.simd(SIMDOp.MAX, left=0, right=1, read=dst + i, write=dst + i)
                        else:
                            lir.matmul(src, dst, cnt, sw, 1, accumulate=True)
                if not is_max:
                    tc = counts[tile.y0 : tile.y0 + tile.rows, tile.x0 : tile.x0 + tile.cols].reshape(-1)
                    for c, factor in scales.items():
                        idx = np.nonzero(tc == c)[0]
                        if idx.size:
                            lir.simd(SIMDOp.MOVE, dest=1, left=0, read=cvec[factor])
                            for i in idx.tolist():
                                lir.simd(SIMDOp.MULTIPLY, left=0, right=1, read=i, write=i)
                self._epilogue(0, count, node.epilogue, cvec)
                self._gather(out, tile, b, 0, store)
            self._flush(out, tile, store)

    def _pool_handover(
        self, node: Node, blocks: int, pixels: int, total: int, block: int, consts: int, acc_free: int
    ) -> tuple[int, int] | None:
        """``(where the input is, base)`` when the previous conv left a global average pool's whole
        (single-image) input in local memory, block-major, and the pool's own vectors (the diagonal
        weights, then half the input for the first level's results) fit below or above everything
        that conv still holds; else None."""
        held = self.in_local.get(node.inputs[0])
        if held is None or self.place[node.inputs[0]].shape[0] != 1 or held[1] < blocks * pixels:
            return None
        if blocks * max(1, total // 2) > acc_free:
            return None
        base = self._room_beside_held(block + blocks * max(1, total // 2), consts)
        return None if base is None else (held[0], base)

    @staticmethod
    def _pool_counts(in_shape, out_shape, window, padding, include_pad: bool) -> np.ndarray:
        """Elements each output pixel averages over (ONNX count_include_pad semantics)."""
        kh, kw, sh, sw, dh, dw = window
        pt, pl, pb, pr = padding
        _, h, w, _ = in_shape
        _, oh, ow, _ = out_shape

        def valid(o, s, k, d, pad, size, pad_end):
            idx = o * s - pad + np.arange(k) * d
            lo, hi = (-pad, size - 1 + pad_end) if include_pad else (0, size - 1)
            return int(np.count_nonzero((idx >= lo) & (idx <= hi)))

        ys = np.array([valid(o, sh, kh, dh, pt, h, pb) for o in range(oh)])
        xs = np.array([valid(o, sw, kw, dw, pl, w, pr) for o in range(ow)])
        return ys[:, None] * xs[None, :]

    def global_avg_pool(self, node: Node) -> None:
        """Mean over h and w by pairwise halving: with T = next_pow2(pixels), log2(T) levels each
        replace vectors i and i + T/2 by their mean (both halves through a MatMul with diagonal
        weights 1/2; a missing partner counts as zero), so nothing ever leaves the range and
        each level adds at most one unit in the last place. The result (sum / T) is scaled by
        T / pixels, a factor in [1, 2). All channel blocks of an image go through the levels
        together when they fit local memory; else block by block, pixels in chunks of a power of
        two whose means are reduced the same way. When the previous conv left the whole input in
        local memory, the first level reads it there (and its store to DRAM0 is dropped when the
        pool is its only reader)."""
        inp, out = self.place[node.inputs[0]], self.place[node.output]
        lir = self.lir
        n = self.n
        n_img, h, w, _ = inp.shape
        pixels = h * w
        total = 1 << max(0, pixels - 1).bit_length()
        post = total / pixels
        cvals = list(dict.fromkeys(([post] if post != 1.0 else []) + self._epilogue_constants(node.epilogue)))
        acc_free = self.arch.accumulator_depth - len(cvals)
        block = n + 1
        blocks = inp.blocks
        room = self.arch.local_depth - len(cvals) - block
        # Local memory from ``base``: the diagonal weights, then the data (``block`` vectors up).
        held = self._pool_handover(node, blocks, pixels, total, block, len(cvals), acc_free)
        carried, self.carried, self.in_local = self.carried, [], {}
        for name, moves in carried:  # the previous conv's stores, beside the pool when it reads local memory
            if held is None or not (name == node.inputs[0] and name in self._read_once):
                for move in moves:
                    lir.datamove(*move)
        base = 0 if held is None else held[1]
        data = base + block
        fits = [
            1 << e
            for e in range(total.bit_length())
            if (1 << e) <= 2 * acc_free and (1 << e) + total // (1 << e) <= room
        ]
        if not fits and held is None:
            raise ScheduleError(f"global average pool over {pixels} pixels does not fit local memory")
        chunk = fits[-1] if fits else 1
        means = data + chunk  # one vector per chunk
        cvec = self._const_vectors(cvals, acc_free)
        if total > 1:
            half = self.consts.add("diagonal_weights", self.graph.constants, values=[0.5])
            lir.datamove(Direction.DRAM1_TO_LOCAL, base, half.base, block)
            lir.load_weights(base, block)

        def reduce(buf: int, size: int, width: int, blocks: int = 1, load=None, src=None) -> None:
            """For each of ``blocks`` blocks, vectors buf[b * width + (0:size)] of a logical width
            ``width`` (a power of two, zeros beyond ``size``) -> their mean in acc[b]. Each level is
            one MatMul pair per block, streaming back to back, and one gather for all blocks (the
            blocks hide each other's array latency). ``load(b)``, if given, brings block b in just
            before its first level. ``src = (address, stride)``: the first level reads block b at
            address + b * stride instead (the levels after it work in ``buf``)."""
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

        def finish(img: int, first_block: int, count: int) -> None:
            """Scale and epilogue the means in acc[0:count] (channel blocks from ``first_block``), store them."""
            if post != 1.0:
                lir.simd(SIMDOp.MOVE, dest=1, left=0, read=cvec[post])
                lir.simd_run(SIMDOp.MULTIPLY, 0, count, left=0, right=1)
            self._epilogue(0, count, node.epilogue, cvec)
            lir.datamove(Direction.ACC_TO_LOCAL, data, 0, count)
            outs = [out.address(img, 0, 0, b) for b in range(first_block, first_block + count)]
            if outs == list(range(outs[0], outs[0] + count)):
                lir.datamove(Direction.LOCAL_TO_DRAM0, data, outs[0], count)
            else:
                for b, address in enumerate(outs):
                    lir.datamove(Direction.LOCAL_TO_DRAM0, data + b, address, 1)

        if held is not None:  # block b at held[0] + b * pixels, where the previous conv left it
            lir.comment(f"global_avg_pool {node.output}: {blocks} blocks together, from local memory")
            reduce(data, pixels, total, blocks, src=(held[0], pixels))
            finish(0, 0, blocks)
            return
        # Every channel block of an image at once when they fit (block b at data + b * total).
        if blocks > 1 and blocks * total <= room and blocks * max(1, total // 2) <= acc_free:
            for img in range(n_img):
                lir.comment(f"global_avg_pool {node.output}: image {img}, {blocks} blocks together")
                reduce(
                    data,
                    pixels,
                    total,
                    blocks,
                    load=lambda b: lir.datamove(
                        Direction.DRAM0_TO_LOCAL, data + b * total, inp.address(img, 0, 0, b), pixels
                    ),
                )
                finish(img, 0, blocks)
            return

        for img in range(n_img):
            for b in range(inp.blocks):
                lir.comment(f"global_avg_pool {node.output}: image {img} block {b}")
                first = inp.address(img, 0, 0, b)
                chunks = _ceil_div(pixels, chunk)
                for q in range(chunks):
                    cnt = min(chunk, pixels - q * chunk)
                    lir.datamove(Direction.DRAM0_TO_LOCAL, data, first + q * chunk, cnt)
                    if chunks > 1:
                        reduce(data, cnt, chunk)
                        lir.datamove(Direction.ACC_TO_LOCAL, means + q, 0, 1)
                reduce(
                    means if chunks > 1 else data,
                    chunks if chunks > 1 else pixels,
                    total // chunk if chunks > 1 else total,
                )
                finish(img, b, 1)

    # -- concat -------------------------------------------------------------------------------------
    def concat(self, node: Node) -> None:
        offsets = np.cumsum([0] + [self.place[i].shape[3] for i in node.inputs])
        self._select_channels(
            node, [(i, 0, int(offsets[i + 1] - offsets[i]), int(offsets[i])) for i in range(len(node.inputs))]
        )

    def slice(self, node: Node) -> None:
        self._select_channels(node, [(0, node.attrs["begin"], node.attrs["end"] - node.attrs["begin"], 0)])

    def _select_channels(self, node: Node, segments: list[tuple[int, int, int, int]]) -> None:
        """Channel concat or slice as exact 0/1 matmuls: each selected input lane lands on its
        output lane. ``segments``: (input, first channel, count, first output channel)."""
        ins = [self.place[i] for i in node.inputs]
        out = self.place[node.output]
        lir = self.lir
        n = self.n
        wrec = self.consts.add("channel_selection", self.graph.constants, segments=[list(s) for s in segments])
        zero = self.consts.add("fill", self.graph.constants, values=[0.0])
        pairs = selection_blocks(segments, n)
        cvals = self._epilogue_constants(node.epilogue)
        acc_free = self.arch.accumulator_depth - len(cvals)
        cvec = self._const_vectors(cvals, acc_free)
        block = n + 1
        wlocal = 1
        stage = wlocal + block
        chunk = min(acc_free, (self.arch.local_depth - stage - len(cvals)) // 2)
        if chunk < 1:
            raise ScheduleError(f"{node.op}: local memory too small for one pixel of the output")
        buf = stage + chunk
        lir.datamove(Direction.DRAM1_TO_LOCAL, 0, zero.base, 1)
        pixels = out.pixels
        for start in range(0, pixels, chunk):
            cnt = min(chunk, pixels - start)
            for ob in range(out.blocks):
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
                self._epilogue(0, cnt, node.epilogue, cvec)
                lir.datamove(Direction.ACC_TO_LOCAL, buf, 0, cnt)
                lir.datamove(Direction.LOCAL_TO_DRAM0, buf, out.base + ob * out.pixels + start, cnt)

    # -- pad ----------------------------------------------------------------------------------------
    def pad(self, node: Node) -> None:
        """Fill the output with the pad value (the bias row of a zero matmul), then copy the
        input rows into the interior."""
        inp, out = self.place[node.inputs[0]], self.place[node.output]
        lir = self.lir
        pt, pl, _, _ = node.attrs["padding"]
        fill = self.consts.add("fill", self.graph.constants, values=[node.attrs["value"]])
        lir.datamove(Direction.DRAM1_TO_LOCAL, 0, fill.base, 1)
        lir.load_weights(0, 1)
        chunk = min(self.arch.accumulator_depth, self.arch.local_depth - 1)
        lir.matmul(0, 0, chunk, zeroes=True)  # every accumulator vector = the value
        lir.datamove(Direction.ACC_TO_LOCAL, 1, 0, chunk)
        for start in range(0, out.size, chunk):
            lir.datamove(Direction.LOCAL_TO_DRAM0, 1, out.base + start, min(chunk, out.size - start))
        n, h, w, _ = inp.shape
        if w > self.arch.local_depth - 1:
            raise ScheduleError(f"pad: a row of {w} pixels does not fit local memory")
        rows_per_move = (self.arch.local_depth - 1) // w
        for b in range(inp.blocks):
            for img in range(n):
                for y0 in range(0, h, rows_per_move):  # rows of one block are contiguous
                    k = min(rows_per_move, h - y0)
                    lir.datamove(Direction.DRAM0_TO_LOCAL, 1, inp.address(img, y0, 0, b), k * w)
                    for y in range(k):
                        lir.datamove(Direction.LOCAL_TO_DRAM0, 1 + y * w, out.address(img, y0 + y + pt, pl, b), w)

    # -- nearest resize -----------------------------------------------------------------------------
    def resize_nearest(self, node: Node) -> None:
        """Each source row is loaded once into local memory and written to every output row
        that repeats it, as strided runs: output columns ``r, r + s, ...`` take source columns
        ``c0, c0 + 1, ...`` (an integer upscale is one run per residue ``r``)."""
        inp, out = self.place[node.inputs[0]], self.place[node.output]
        rows, cols = node.attrs["rows"], node.attrs["cols"]
        lir = self.lir
        n, h, w, _ = inp.shape
        if w * inp.blocks > self.arch.local_depth:
            raise ScheduleError(f"resize: a row of {w} pixels x {inp.blocks} channel blocks does not fit local memory")
        runs = self._column_runs(cols)
        for img in range(n):
            loaded = None
            for oy, sy in enumerate(rows):
                if sy != loaded:  # the source row, block b at b * w
                    for b in range(inp.blocks):
                        lir.datamove(Direction.DRAM0_TO_LOCAL, b * w, inp.address(img, sy, 0, b), w)
                    loaded = sy
                for ox0, sx0, step, count in runs:
                    for b in range(inp.blocks):
                        lir.datamove(
                            Direction.LOCAL_TO_DRAM0, b * w + sx0, out.address(img, oy, ox0, b), count, 1, step
                        )

    # -- linear resize ------------------------------------------------------------------------------
    def resize_linear(self, node: Node) -> None:
        """Two 1-D passes through a DRAM0 temporary: along w (rows of the input), then along h.
        Each output vector is a weighted sum of input vectors; every distinct weight is a
        diagonal weight block, loaded once per row and applied with strided MatMul runs."""
        inp, out = self.place[node.inputs[0]], self.place[node.output]
        mh = np.asarray(node.attrs["rows"], dtype=np.float64)
        mw = np.asarray(node.attrs["cols"], dtype=np.float64)
        n, h, w, c = inp.shape
        ow = mw.shape[0]
        tmp = self.dram0.alloc((n, h, ow, c), f"{node.output} (resize temporary)")
        self._resample_cols(inp, tmp, mw)
        self._resample_rows(tmp, out, mh)
        if node.epilogue:  # pragma: no cover - fuse() does not fuse into resizes
            raise ScheduleError("resize epilogue")

    def _diag_blocks(self, matrix: np.ndarray):
        values = sorted({float(v) for v in matrix.reshape(-1) if v != 0.0})
        rec = self.consts.add("diagonal_weights", self.graph.constants, values=values)
        return {v: rec.base + i * (self.n + 1) for i, v in enumerate(values)}

    def _resample_cols(self, inp: TensorPlacement, out: TensorPlacement, mw: np.ndarray) -> None:
        lir = self.lir
        n, h, w, _ = inp.shape
        ow = mw.shape[0]
        cb = inp.blocks
        blocks = self._diag_blocks(mw)
        block = self.n + 1
        wbuf, src = 0, block
        store = src + w * cb
        if store + ow * cb > self.arch.local_depth or ow > self.arch.accumulator_depth:
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
                        for o0, i0, ostep, istep, cnt in self._pair_runs(pairs):
                            lir.matmul(src + b * w + i0, o0, cnt, istep, ostep, accumulate=True)
                    self._gather(out, tile, b, 0, store)
                self._flush(out, tile, store)

    def _resample_rows(self, inp: TensorPlacement, out: TensorPlacement, mh: np.ndarray) -> None:
        lir = self.lir
        n, h, w, _ = inp.shape
        oh = mh.shape[0]
        blocks = self._diag_blocks(mh)
        block = self.n + 1
        wbuf, src = 0, block
        store = src + w
        if store + w * inp.blocks > self.arch.local_depth or w > self.arch.accumulator_depth:
            raise ScheduleError(f"resize: a row of {w} pixels does not fit local memory/accumulators")
        for img in range(n):
            for oy in range(oh):
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
                    self._gather(out, tile, b, 0, store)
                self._flush(out, tile, store)

    @staticmethod
    def _pair_runs(pairs: list[tuple[int, int]]):
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

    @staticmethod
    def _column_runs(cols: list[int]) -> list[tuple[int, int, int, int]]:
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

    # -- dispatch -----------------------------------------------------------------------------------
    def finish(self) -> None:
        """After the last node: issue the stores still carried."""
        self._issue_carried()

    def _issue_carried(self) -> None:
        for _, moves in self.carried:
            for move in moves:
                self.lir.datamove(*move)
        self.carried, self.in_local = [], {}

    def lower(self, node: Node) -> None:
        following, self._following = self._following, self._after.get(id(node))
        try:
            self._lower(node)
        finally:
            self._following = following

    def _lower(self, node: Node) -> None:
        if node.op not in _TAKES_HAND_OVER:
            self._issue_carried()
        if node.op in ("conv2d", "bias_add"):
            self.conv2d(node)
        elif node.op in ("add", "relu", "leaky_relu", "clip"):
            self.eltwise(node)
        elif node.op in ("max_pool2d", "avg_pool2d"):
            self.pool2d(node)
        elif node.op == "global_avg_pool":
            self.global_avg_pool(node)
        elif node.op == "concat":
            self.concat(node)
        elif node.op == "slice":
            self.slice(node)
        elif node.op == "pad":
            self.pad(node)
        elif node.op == "resize_nearest":
            self.resize_nearest(node)
        elif node.op == "resize_linear":
            self.resize_linear(node)
        else:
            raise ScheduleError(f"no schedule for op '{node.op}'")
