"""Choosing between alternative lowerings of a node by the latency model.

Each alternative is lowered into its own ``Out`` (a fresh LIR, a fork of the constant table) from
the same hand-over; the results are compared as values and the fastest is kept (its instructions
appended, its constants committed). Nothing of the losers remains.

What a search decided is a value too (``Choice``): where a lowering records its decisions (a
``Trail``), the same lowering met again (the next channel group of a depthwise conv) replays them,
lowering only the alternatives kept (``decided_once``).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from itertools import chain
from typing import Callable, Hashable, Iterator

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
class Choice:
    """One decision of a search: the alternative kept and, in order, the decisions made lowering it."""

    index: int
    within: tuple["Choice", ...] = ()


class ReplayMismatch(Exception):
    """A replayed lowering met a search its recording does not have (it is searched instead)."""


class Trail:
    """The decisions a lowering makes, in order: recorded as its searches make them, or replayed
    from a recording (``replay``), each search then taking the next one."""

    def __init__(self, replay: tuple[Choice, ...] | None = None):
        self.made: list[Choice] = []
        self.replay = replay

    def next(self, alternatives: int) -> Choice:
        """The next decision replayed, for a search of ``alternatives``."""
        if len(self.made) >= len(self.replay) or self.replay[len(self.made)].index >= alternatives:
            raise ReplayMismatch
        self.made.append(self.replay[len(self.made)])
        return self.made[-1]

    @property
    def replayed_all(self) -> bool:
        return len(self.made) == len(self.replay)


# The trail the searches of the lowering under way follow (None: nothing records, nothing replays).
_trail: ContextVar[Trail | None] = ContextVar("tvm_tensil_search_trail", default=None)


@contextmanager
def _following(trail: Trail | None) -> Iterator[Trail | None]:
    token = _trail.set(trail)
    try:
        yield trail
    finally:
        _trail.reset(token)


def decided_once(decisions: dict[Hashable, tuple[Choice, ...]], key: Hashable, lower: Callable[[Out], HandOver],
                 out: Out) -> HandOver:  # fmt: skip
    """``lower(out)``, its searches decided as they were the first time ``key`` was met (recorded
    then into ``decisions``): the key must say all a search's outcome depends on. Where the
    recording does not fit (a search it lacks), searched anew."""
    outer = _trail.get()
    if outer is not None and outer.replay is not None:
        return lower(out)  # (the enclosing replay decides)
    if key in decisions:
        trial = out.fork()
        try:
            with _following(Trail(decisions[key])) as trail:
                left = lower(trial)
            if not trail.replayed_all:
                raise ReplayMismatch
        except ReplayMismatch:
            pass
        else:
            out.consts.commit(trial.consts)
            out.lir.extend(trial.lir)
            if outer is not None:
                outer.made.extend(trail.made)
            return left
    with _following(Trail()) as trail:
        left = lower(out)
    decisions[key] = tuple(trail.made)
    if outer is not None:
        outer.made.extend(trail.made)
    return left


def fastest_of(count: int, cycles: Callable[[int], int]) -> int:
    """The index in ``range(count)`` of least ``cycles`` (a tie: the first), or the one replayed."""
    trail = _trail.get()
    if trail is not None and trail.replay is not None:
        return trail.next(count).index
    with _following(None):
        measured = [cycles(i) for i in range(count)]
    index = measured.index(min(measured))
    if trail is not None:
        trail.made.append(Choice(index))
    return index


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
    trail = _trail.get()
    if trail is not None and trail.replay is not None:
        choice = trail.next(len(alternatives))
        if won is not None:
            won.append(choice.index)
        with _following(Trail(choice.within)) as inner:
            left = alternatives[choice.index](ctx, given, out)
        if not inner.replayed_all:
            raise ReplayMismatch
        return left
    tried: list[Tried] = []
    trails: list[Trail | None] = []
    for i, alternative in enumerate(alternatives):
        trial = out.fork()
        try:
            with _following(None if trail is None else Trail()) as inner:
                left = alternative(ctx, given, trial)
            trails.append(inner)
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
        with _following(None):  # (the next node's decisions belong to its own lowering)
            tried = [replace(tried[i], cycles=cycles_through(ctx, tried[i], further)) for i in index]
    pick = min(range(len(tried)), key=lambda i: tried[i].cycles)
    best = tried[pick]
    if won is not None:
        won.append(index[pick])
    if trail is not None:
        trail.made.append(Choice(index[pick], tuple(trails[index[pick]].made)))
    out.consts.commit(best.out.consts)  # (first: a trial is encoded here, and may not encode)
    out.lir.extend(best.out.lir)
    return best.left


def lowered(done: Out, left: HandOver, decisions: tuple[Choice, ...] = ()) -> Alternative:
    """An alternative already lowered into ``done`` (a fork of the same ``Out``): replayed, and the
    ``decisions`` lowering it made (``decisions_so_far`` then) recorded again where a trail records,
    so that a replay of the recording lowers it anew the same way."""

    def replay(ctx: Context, given: HandOver, out: Out) -> HandOver:
        trail = _trail.get()
        if trail is not None and trail.replay is None:
            trail.made.extend(decisions)
        out.consts.commit(done.consts)
        out.lir.extend(done.lir)
        return left

    return replay


def decisions_so_far() -> tuple[Choice, ...]:
    """The decisions the lowering under way has recorded (none where nothing records)."""
    trail = _trail.get()
    return tuple(trail.made) if trail is not None and trail.replay is None else ()
