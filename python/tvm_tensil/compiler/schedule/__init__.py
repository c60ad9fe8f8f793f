"""The scheduler: each graph node becomes tiles of instructions that fit the on-chip memories.

Every node reads its inputs from DRAM0 and writes its output to DRAM0 (a "layer" in Tensil's
terms), except that a conv whose result is one whole map may hand it to the next conv or global
average pool in local memory. One module per op family lowers its ops (``LOWERINGS``, keyed by op
name): ``lower(node, context, hand-over in, out) -> hand-over out``, writing its instructions and
constants into ``out``. Alternatives are compared as values (``search``); ``tiles`` holds the
geometry every lowering shares, ``overlap`` the DRAM moves deferred beside compute.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Callable

from ...arch import Architecture
from ...placement import TensorPlacement
from ..bands import Banded
from ..graph import Graph, Node
from ..interleave import AUTO_LIMIT
from ..lir import LIR
from ..memory import ConstTable
from . import channels, conv, eltwise, global_pool, pools, resize
from .context import NOTHING, CompileOptions, Context, HandOver, Out, ScheduleError, Tile, Window
from .search import (
    TAKES_HAND_OVER,
    Alternative,
    Choice,
    cheapest,
    cycles_with,
    decisions_so_far,
    interleaved_cycles,
    lowered,
)

__all__ = [
    "LOWERINGS", "CompileOptions", "Context", "GraphSchedule", "HandOver", "Out", "ScheduleError", "Tile", "Window",
    "NOTHING", "lower_node",
]  # fmt: skip

Lowering = Callable[[Node, Context, HandOver, Out], HandOver]
LOWERINGS: dict[str, Lowering] = {
    op: module.lower for module in (conv, eltwise, pools, global_pool, channels, resize) for op in module.OPS
}


def lower_node(node: Node, ctx: Context, given: HandOver, out: Out) -> HandOver:
    """Lower one node after the hand-over ``given``; returns what it leaves the next node."""
    if ctx.graph.in_place(node):  # a view: nothing to compute, and what was handed over passes on
        return given
    if node.op not in TAKES_HAND_OVER:
        given = given.issue(out.lir)
    lowering = LOWERINGS.get(node.op)
    if lowering is None:
        raise ScheduleError(f"no schedule for op '{node.op}'")
    return lowering(node, ctx, given, out)


def _read_once(graph: Graph) -> frozenset[str]:
    """Intermediates exactly one node reads (a fused second output reads its conv's result too):
    a hand-over in local memory need not store them."""
    counts: dict[str, int] = {}
    for node in graph.nodes:
        for t in set(node.inputs) | ({node.output} if node.op == "conv2d" and node.attrs.second else set()):
            counts[t] = counts.get(t, 0) + 1
    pinned = set(graph.outputs) | set(graph.views) | {src for src, _ in graph.views.values()}
    return frozenset(t for t, users in counts.items() if users == 1 and t not in pinned)


class GraphSchedule:
    """A partition's nodes lowered in order into one LIR and constant table; ``left`` is what the
    last node lowered hands to the next."""

    def __init__(
        self,
        arch: Architecture,
        graph: Graph,
        placements: dict[str, TensorPlacement],
        consts: ConstTable,
        lir: LIR,
        dram0=None,
        options: CompileOptions = CompileOptions(),
        banded: Banded | None = None,
    ):
        self.ctx = Context(arch, graph, placements, _read_once(graph), dram0, options, lower_next=lower_node)
        self.out = Out(lir, consts)
        self.left = NOTHING
        self._after = {id(a): b for a, b in zip(graph.nodes, graph.nodes[1:])}
        self.banded = banded
        if banded is not None and banded.chains:
            self.plain = replace(self.ctx, graph=banded.plain, read_once=_read_once(banded.plain))
            maps = {n.output for bands, _, _ in banded.chains.values() for n in bands} - set(graph.views)
            self.ctx = replace(self.ctx, band_maps=frozenset(maps))

    def lower(self, node: Node) -> None:
        self.left = lower_node(node, self.ctx.before(self._after.get(id(node))), self.left, self.out)

    def lower_chain(self, first: Node) -> list[tuple[Node, int, Node | None]]:
        """The chain whose first band's first node is ``first``: its bands (each conv lowered on
        its own, or a conv and the depthwise conv after it in turn: ``conv.emit_in_turn``) or its
        convs whole, whichever the latency model finds faster (with the stores each leaves still to
        go; bands alone where they are certain to be). Returns the nodes lowered, their
        instructions and the node each was emitted in turn with (its instructions counted in the
        first of the two)."""
        bands, convs, certain = self.banded.chains[first.output]
        after = self._after.get(id(bands[-1]))
        done: dict[int, list[tuple[Node, int, Node | None]]] = {}
        # The bands node by node as lowered (its Out, what it left), where no conv and the depthwise
        # conv after it could have gone in turn where they met: the in-turn sequence is the same.
        unpaired: list[tuple[Out, HandOver, tuple[Choice, ...]]] = []
        in_turn = self.ctx.options.in_turn

        def sequence(index: int, nodes: list[Node], ctx: Context, in_turn: bool = False) -> Alternative:
            compare_in_turn = index == 0 and not in_turn and self.ctx.options.in_turn is None

            def lower(_ctx: Context, given: HandOver, out: Out) -> HandOver:
                if in_turn and unpaired:
                    # (Up to its first pair in turn, this sequence lowers what the plain one did.)
                    done[index] = done[0]
                    return lowered(*unpaired[0])(ctx, given, out)
                done[index] = []
                following = nodes[1:] + [after]
                pairs = False
                i = 0
                while i < len(nodes):
                    node, start = nodes[i], len(out.lir)
                    pair = i + 1 < len(nodes) and conv.depthwise_follows(node, nodes[i + 1], ctx)
                    if pair and in_turn:
                        trial = out.fork()
                        try:
                            given = conv.lower_with_depthwise(node, nodes[i + 1], ctx, given, trial)
                        except ScheduleError:
                            pass
                        else:
                            out.lir.extend(trial.lir)
                            out.consts.commit(trial.consts)
                            # (The pair's instructions are one stream: counted as the first's.)
                            done[index] += [(node, len(out.lir) - start, nodes[i + 1]), (nodes[i + 1], 0, node)]
                            i += 2
                            continue
                    elif pair and compare_in_turn and not pairs:
                        try:
                            conv.in_turn_plans(node, nodes[i + 1], ctx, given, out.fork().consts)
                            pairs = True
                        except ScheduleError:
                            pass
                    given = lower_node(node, ctx.before(following[i]), given, out)
                    done[index].append((node, len(out.lir) - start, None))
                    i += 1
                if compare_in_turn and not pairs:
                    unpaired.append((out, given, decisions_so_far()))
                return given

            return lower

        alternatives = [sequence(0, bands, self.ctx, in_turn=bool(in_turn))]
        if in_turn is None:
            alternatives.append(sequence(1, bands, self.ctx, in_turn=True))
        compare = self.ctx.options.row_bands is None and not certain
        if compare and all(conv.output in self.ctx.place for conv in convs):  # (their maps fit DRAM0)
            alternatives.append(sequence(len(alternatives), convs, self.plain))
        won: list[int] = []
        alone = replace(self.ctx.before(after), looking_ahead=self.ctx.options.look_ahead)
        self.left = cheapest(alternatives, alone, self.left, self.out, won=won, measure=self._chain_cycles())
        return done[won[0]]

    def _chain_cycles(self) -> Callable[[LIR, HandOver], int]:
        """How a chain's alternatives are measured: where the interleave pass will run on the
        program (its option, or the program so far within the pass's size limit), as the pass
        leaves each one, since it recovers more at the many node boundaries of bands than in
        convs whole (MobileNet-v2's 56x56 chain on pynqz1_12x12: bands 7.7% slower as lowered,
        faster once interleaved); an alternative that lowered the same program is measured once."""
        interleave = self.ctx.options.interleave
        if interleave is False or (interleave is None and len(self.out.lir) > AUTO_LIMIT):
            return cycles_with
        return partial(interleaved_cycles, memo={})

    def finish(self) -> None:
        """After the last node: issue the stores still carried."""
        self.left = self.left.issue(self.out.lir)
