"""Choosing between alternative lowerings of a node by the latency model.

Each alternative is lowered into its own ``Out`` (a fresh LIR, a fork of the constant table) from
the same hand-over; the results are compared as values and the fastest is kept (its instructions
appended, its constants committed). Nothing of the losers remains.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import chain
from typing import Callable

import numpy as np

from ...isa.instructions import InvalidInstruction
from ..interleave import OFFSETS, interleave
from ..latency import estimate_cycles_of
from ..lir import LIR
from .context import Context, HandOver, Out

# An alternative: lowers its node from a hand-over into an Out, returns what it leaves.
Alternative = Callable[[Context, HandOver, Out], HandOver]

# The ops that take what the conv before them left in local memory (the others start by issuing
# its carried stores).
TAKES_HAND_OVER = ("conv2d", "bias_add", "global_avg_pool")


@dataclass(frozen=True)
class Tried:
    """One alternative as lowered: its cycles (alone or through the next node), output and hand-over."""

    cycles: int
    out: Out
    left: HandOver


def cycles_with(lir: LIR, left: HandOver, *more: LIR) -> int:
    """Latency-model cycles of ``lir`` (and ``more`` after it) followed by the stores it still
    carries."""
    stores = LIR(lir.arch)
    left.issue(stores)
    return estimate_cycles_of(chain(*(x.fields() for x in (lir, *more, stores))), lir.arch)["total"]


def interleaved_cycles(lir: LIR, left: HandOver, memo: dict[bytes, int] | None = None) -> int:
    """``cycles_with`` of the program as the interleave pass's first pass leaves it (the second
    one, across the first one's window edges, gains little more and would double the cost).
    ``memo``: cycles by program, so that alternatives that lowered the same one run it once."""
    whole = LIR(lir.arch)
    whole.extend(lir)
    left.issue(whole)
    program = whole.program()
    if memo is not None and program.data in memo:
        return memo[program.data]
    merged, _, _ = interleave(program, lir.arch, np.zeros(len(program), dtype=np.int64), offsets=OFFSETS[:1])
    cycles = estimate_cycles_of([merged.fields()], lir.arch)["total"]
    if memo is not None:
        memo[program.data] = cycles
    return cycles


def cycles_through(ctx: Context, tried: Tried, further: bool = False) -> int:
    """Cycles of an alternative and then the next node lowered after it. ``further``: the next node
    chooses through the node after it, and that node is lowered too, so what the next node hands
    over (a map left whole, its stores carried) is measured as it is used, not as stores all issued
    at its end. The lowerings are kept by what they were handed: a search meets the same hand-over
    again in its nested comparisons."""
    key = (ctx.following.output, ctx.following.op, ctx.looking_ahead, further, tried.left.key)
    if key not in ctx.looked_ahead:
        ahead = Out(LIR(ctx.arch), tried.out.consts.fork())
        after = ctx.node_after(ctx.following) if further else None
        depth = ctx.looking_ahead + 1 if after is not None else ctx.options.look_ahead
        left = ctx.lower_next(ctx.following, replace(ctx, following=after, looking_ahead=depth), tried.left, ahead)
        if after is not None:
            last = replace(ctx, following=None, looking_ahead=ctx.options.look_ahead)
            left = ctx.lower_next(after, last, left, ahead)
        ctx.looked_ahead[key] = (ahead.lir, left)
    lir, left = ctx.looked_ahead[key]
    return cycles_with(tried.out.lir, left, lir)


def cheapest(
    alternatives: list[Alternative],
    ctx: Context,
    given: HandOver,
    out: Out,
    stop_when_worse: bool = False,
    won: list[int] | None = None,
    measure: Callable[[LIR, HandOver], int] = cycles_with,
) -> HandOver:
    """Lower the alternative the latency model finds fastest into ``out`` (each is lowered once to
    measure it; with ``stop_when_worse``, from the third on, the search stops at the first one
    slower than the one before it). ``won`` gets the index of the one kept. ``measure``: an
    alternative's cycles from its instructions and what it leaves.

    What a node leaves to the next one counts too: the stores it carries, and, when the fastest
    alternative does not leave an input of the next conv (its input, or a residual's shortcut) in
    local memory but another does, that conv itself: those are then measured with the next node
    lowered after them (a greedy choice would keep the faster tiling of this node and pay a DRAM
    round trip of its whole output in the next). A hand-over that is fastest on its own is kept
    without looking."""
    if len(alternatives) == 1:
        if won is not None:
            won.append(0)
        return alternatives[0](ctx, given, out)
    tried: list[Tried] = []
    for i, alternative in enumerate(alternatives):
        trial = out.fork()
        try:
            left = alternative(ctx, given, trial)
            tried.append(Tried(measure(trial.lir, left), trial, left))
        except InvalidInstruction:
            # Weights beyond DRAM1 (their addresses do not encode): kept, so that the compile goes
            # on placing them and its error states the whole need.
            if trial.consts.top > ctx.arch.dram1_depth:
                out.consts.commit(trial.consts)
            raise
        if stop_when_worse and i >= 2 and tried[-1].cycles > tried[-2].cycles:
            break
    nxt = ctx.following
    hands = [nxt is not None and any(name in t.left.in_local for name in nxt.inputs) for t in tried]
    fastest = min(range(len(tried)), key=lambda i: tried[i].cycles)
    index = list(range(len(tried)))
    if (
        ctx.looking_ahead < ctx.options.look_ahead
        and ctx.lower_next is not None
        and not hands[fastest]  # a hand-over that is fastest on its own is kept
        and any(hands)
        and nxt.op in TAKES_HAND_OVER
    ):
        # The next node costs about the same after any alternative that does not hand over: only
        # the fastest (of all) is looked through, beside each one that does. Where one leaves the
        # next conv's shortcut (its second input) to use in place, that conv pays only with its
        # result kept whole too: the next conv is then measured choosing through the node after it.
        index = [fastest] + [i for i, h in enumerate(hands) if h]
        further = ctx.looking_ahead + 1 < ctx.options.look_ahead and any(
            name in t.left.in_local for t in tried for name in nxt.inputs[1:]
        )
        tried = [replace(tried[i], cycles=cycles_through(ctx, tried[i], further)) for i in index]
    pick = min(range(len(tried)), key=lambda i: tried[i].cycles)
    best = tried[pick]
    if won is not None:
        won.append(index[pick])
    out.consts.commit(best.out.consts)  # (first: a trial is encoded here, and may not encode)
    out.lir.extend(best.out.lir)
    return best.left


def lowered(done: Out, left: HandOver) -> Alternative:
    """An alternative already lowered into ``done`` (a fork of the same ``Out``): replayed."""

    def replay(ctx: Context, given: HandOver, out: Out) -> HandOver:
        out.consts.commit(done.consts)
        out.lir.extend(done.lir)
        return left

    return replay
