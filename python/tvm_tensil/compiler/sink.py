"""A node's last stores issued under the node after it.

Each node's schedule ends by storing its last output tiles to DRAM after its last MatMul, and the
next node's first MatMuls wait behind them in the instruction stream: the DRAM writer works while
the array idles. Once a partition is scheduled (and its loads prefetched), each node's trailing
local -> DRAM moves (those after its last MatMul) move down into the node after, past every
instruction they do not depend on; how far, among a few positions, the latency model decides. The
program computes the same: a store only passes instructions that neither write its local memory
range nor read or write its DRAM range, and no Configure or NoOp.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arch import Architecture
from ..isa.instructions import Opcode
from ..isa.layout import layout_of
from ..isa.program import Program
from .latency import Simulation
from .prefetch import Window, window_at, windows_seen

# A node's trailing stores: those after its last MatMul, within its last TRAILING instructions.
TRAILING = 4096
# How far down (instructions) a store may move, and how many instructions after the farthest
# position a trial runs: what the choice of a position is measured on (to the end of all it started).
REACH = 1024
AFTER_LAST_POSITION = 64


@dataclass(frozen=True)
class Sink:
    """The store at ``pc`` (of node ``node``) now issued ``behind`` instructions later."""

    node: int
    pc: int
    behind: int


def sink_across_nodes(
    program: Program, arch: Architecture, node_starts: list[int], measure: bool = True
) -> tuple[Program, list[int], tuple[Sink, ...]]:
    """``program`` with each node's trailing stores moved into the node after where the latency
    model finds it faster (``measure=False``: each as late as it may go); the nodes' new starts (a
    moved store counts in the node it moved into); the moves made."""
    n, ib = len(program), layout_of(arch).instruction_bytes
    rows = np.frombuffer(program.data, dtype=np.uint8).reshape(n, ib).copy()
    starts = list(node_starts)
    sim, simulated = Simulation(arch), 0
    seen = windows_seen(program)
    moves: list[Sink] = []
    for k in range(1, len(starts)):
        end = starts[k + 1] if k + 1 < len(starts) else n
        lo = max(starts[k - 1], starts[k] - TRAILING, simulated)
        tail = Program(rows[lo : starts[k]].tobytes(), program.layout).fields()
        matmuls = np.flatnonzero(tail.opcode == int(Opcode.MATMUL))
        a = max(lo + (int(matmuls[-1]) + 1 if len(matmuls) else 0), starts[k] - REACH)
        z = min(end, starts[k] + REACH + AFTER_LAST_POSITION)
        if a >= starts[k] or starts[k] >= z:
            continue
        f = Program(rows[a:z].tobytes(), program.layout).fields()
        win = Window(f, arch.local_depth, False, program.layout, window_at(seen, a))
        tails = [i for i in range(starts[k] - a) if win.store[i]]
        if not tails:
            continue
        if measure:  # the simulation up to the window: the program before it is final
            sim.advance(Program(rows[simulated:a].tobytes(), program.layout).fields())
            simulated = a
            trial = sim.fork()
            trial.run(win.columns)
            best = trial.finish
        order = np.arange(z - a)
        limit = min(z, starts[k] + REACH) - a  # positions past it are not tried
        first_of_next = starts[k] - a
        for x in reversed(tails):  # the last store first: each moves past the ones moved before it
            at = int(np.flatnonzero(order == x)[0])
            passable = order[at + 1 : limit]
            blocked = np.flatnonzero(win.holds_store(x, passable))
            latest = at + (int(blocked[0]) if len(blocked) else len(passable))
            if latest <= at:
                continue
            if measure:
                cycles, o = win.fastest(sim, order, at, at + 1, latest, at, finish=True)
                if cycles >= best:
                    continue
                best = cycles
            else:
                rest = np.delete(order, at)
                o = np.concatenate([rest[:latest], [x], rest[latest:]])
            moves.append(Sink(k - 1, x + a, int(np.flatnonzero(o == x)[0]) - at))
            order = o
        if len(order) and not np.array_equal(order, np.arange(z - a)):
            rows[a:z] = rows[a:z][order]
            starts[k] = a + int(np.flatnonzero(order == first_of_next)[0])
    return Program(rows.tobytes(), program.layout, program.name), starts, tuple(moves)
