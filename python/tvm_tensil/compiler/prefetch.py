"""A node's first loads issued under the node before it.

Each node's schedule starts by loading its first weights and input tiles from DRAM, and its first
MatMul waits for them: nothing of the node's own hides them. The node before ends with work that
leaves the DRAM readers idle (its last MatMuls, epilogues and stores). Once a partition is
scheduled, each node's leading DRAM -> local moves (those before its first MatMul) move up into the
node before, past every instruction they do not depend on; how far, among a few positions, the
latency model decides. The program computes the same: a load only passes instructions that neither
read nor write its local memory range nor write its DRAM range, and no Configure or NoOp.

A DRAM0 load may also pass LoadWeights where two DRAM readers' responses alone fill local memory's
port B (two bus beats per vector): the latency model, which picks the position, stays within 1% of
the RTL there (benchmarks/prefetch_port_b.py measures the pass with such loads kept behind the
LoadWeights and free to pass them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arch import Architecture
from ..isa.instructions import Direction, LoadWeightsFlag, MatMulFlag, Opcode
from ..isa.layout import InstructionLayout, layout_of
from ..isa.program import Program, ProgramFields, window_register, window_stream
from .latency import Simulation

# A node's leading loads: those before its first MatMul, within its first LEADING instructions.
LEADING = 4096
# How far up (instructions) a load may move, and how many instructions after the node's first
# MatMul a trial runs: what the choice of a position is measured on.
REACH = 1024
AFTER_FIRST_MATMUL = 64
# Positions tried per load, evenly from the earliest it may take to where it was.
POSITIONS = 9

_LOADS = (int(Direction.DRAM0_TO_LOCAL), int(Direction.DRAM1_TO_LOCAL))
_STORES = {int(Direction.LOCAL_TO_DRAM0): 0, int(Direction.LOCAL_TO_DRAM1): 1}
_MATMUL, _DATAMOVE, _LOADWEIGHTS, _SIMD = (int(o) for o in (Opcode.MATMUL, Opcode.DATAMOVE, Opcode.LOADWEIGHTS,
                                                           Opcode.SIMD))  # fmt: skip


@dataclass(frozen=True)
class Prefetch:
    """The load at ``pc`` (of node ``node``) now issued ``ahead`` instructions earlier."""

    node: int
    pc: int
    ahead: int


def windows_seen(program: Program) -> np.ndarray | None:
    """The window register each instruction sees (-1: none), or None on a core without the window
    MatMul. Moving loads and stores never moves a Configure (a barrier), so it stays right."""
    if not program.layout.arch.window_matmul:
        return None
    parts, window = [], None
    for _, f in program.chunks():
        seen, window = window_register(f, program.layout, window)
        parts.append(seen)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def window_at(seen: np.ndarray | None, pc: int) -> int | None:
    """The window register before instruction ``pc`` (``windows_seen``), None if not set."""
    return None if seen is None or pc >= len(seen) or seen[pc] < 0 else int(seen[pc])


class Window:
    """The decoded instructions of one boundary's window and what each touches."""

    def __init__(
        self, f: ProgramFields, depth: int, dram0_behind_loads: bool, layout: InstructionLayout, window: int | None
    ):
        """``window``: the window register before ``f`` (a window MatMul's reads depend on it)."""
        self.f = f
        self.dram0_behind_loads = dram0_behind_loads
        op, fl = f.opcode, f.flags
        # (A window MatMul reads fewer vectors than it streams: its stream bounds the run it reads.)
        size = np.where(op == _LOADWEIGHTS, f.raw1 + 1, window_stream(f, layout, window)[0])
        lo = f.addr0
        hi = lo + (size - 1) * (np.int64(1) << f.stride0)
        wraps = hi >= depth
        self.local_lo, self.local_hi = np.where(wraps, 0, lo), np.where(wraps, depth - 1, hi)
        zeros = ((op == _MATMUL) & ((fl & int(MatMulFlag.ZEROES)) != 0)) | (
            (op == _LOADWEIGHTS) & ((fl & int(LoadWeightsFlag.ZEROES)) != 0)
        )
        # Every MatMul, LoadWeights (but of zeroes) and DataMove uses local memory; a SIMD does not.
        self.uses_local = ((op == _MATMUL) | (op == _LOADWEIGHTS) | (op == _DATAMOVE)) & ~zeros
        self.barrier = ~np.isin(op, (_MATMUL, _DATAMOVE, _LOADWEIGHTS, _SIMD))
        dram_size = f.operand2 + 1
        self.dram_lo, self.dram_hi = f.addr1, f.addr1 + (dram_size - 1) * (np.int64(1) << f.stride1)
        self.store_bank = np.full(len(op), -1)
        for direction, bank in _STORES.items():
            self.store_bank[(op == _DATAMOVE) & (fl == direction)] = bank
        self.load = (op == _DATAMOVE) & np.isin(fl, _LOADS)
        self.store = self.store_bank >= 0
        # The DRAM bank a DataMove reads or writes (-1: none), and what writes local memory.
        self.dram_bank = np.where((op == _DATAMOVE) & (fl < 4), fl >> 1, -1)
        self.writes_local = (op == _DATAMOVE) & np.isin(fl, _LOADS + (int(Direction.ACC_TO_LOCAL),))
        self.columns = Simulation.columns(f, layout, window)  # what a trial runs, in any order

    def fastest(
        self, sim: Simulation, order: np.ndarray, at: int, first: int, last: int, common: int, finish: bool
    ) -> tuple[int, np.ndarray]:
        """The instruction at ``order[at]`` tried at POSITIONS positions from ``first`` to ``last``
        (in the order without it), ``sim`` having run nothing of the window; the instructions before
        ``common`` precede every position and run once. The fastest: its cycles (the window's end,
        everything started included, if ``finish``; else its last dispatch) and the order."""
        before = sim.fork()
        before.run(self.columns[:, order[:common]])
        rest, x, tried = np.delete(order, at), order[at], []
        for p in sorted(set(np.linspace(first, last, POSITIONS).astype(int).tolist())):
            o = np.concatenate([rest[:p], [x], rest[p:]])
            trial = before.fork()
            trial.run(self.columns[:, o[common:]])
            tried.append((trial.finish if finish else trial.dispatch, p, o))
        cycles, _, o = min(tried, key=lambda t: t[0])
        return cycles, o

    def _local_overlap(self, x: int, ys: np.ndarray) -> np.ndarray:
        return (self.local_lo[ys] <= self.local_hi[x]) & (self.local_lo[x] <= self.local_hi[ys])

    def _dram_overlap(self, x: int, ys: np.ndarray) -> np.ndarray:
        return (self.dram_lo[ys] <= self.dram_hi[x]) & (self.dram_lo[x] <= self.dram_hi[ys])

    def holds_load(self, x: int, ys: np.ndarray) -> np.ndarray:
        """Which of the instructions ``ys`` load ``x`` may not pass."""
        local = self.uses_local[ys] & self._local_overlap(x, ys)
        bank = int(self.f.flags[x] == int(Direction.DRAM1_TO_LOCAL))
        dram = (self.store_bank[ys] == bank) & self._dram_overlap(x, ys)
        held = self.barrier[ys] | local | dram
        if self.dram0_behind_loads and self.f.flags[x] == int(Direction.DRAM0_TO_LOCAL):
            held |= self.f.opcode[ys] == _LOADWEIGHTS
        return held

    def holds_store(self, x: int, ys: np.ndarray) -> np.ndarray:
        """Which of the instructions ``ys`` (after it) store ``x`` may not move past: what writes
        its local range, reads or writes its DRAM range, a barrier."""
        local = self.writes_local[ys] & self._local_overlap(x, ys)
        dram = (self.dram_bank[ys] == self.store_bank[x]) & self._dram_overlap(x, ys)
        return self.barrier[ys] | local | dram


def prefetch_across_nodes(
    program: Program,
    arch: Architecture,
    node_starts: list[int],
    measure: bool = True,
    dram0_behind_loads: bool = False,
) -> tuple[Program, list[int], tuple[Prefetch, ...]]:
    """``program`` with each node's leading loads moved into the node before where the latency
    model finds it faster (``measure=False``: each as early as it may go); the nodes' new starts
    (a moved load counts in the node it moved into); the moves made. ``dram0_behind_loads``: a
    DRAM0 load never passes a LoadWeights (benchmarks/prefetch_port_b.py measures what that costs)."""
    n, ib = len(program), layout_of(arch).instruction_bytes
    rows = np.frombuffer(program.data, dtype=np.uint8).reshape(n, ib).copy()
    starts = list(node_starts)
    ends = starts[1:] + [n]
    sim, simulated = Simulation(arch), 0
    seen = windows_seen(program)
    moves: list[Prefetch] = []
    for k in range(1, len(starts)):
        head_end = min(ends[k], starts[k] + LEADING)
        f_head = program.fields(starts[k], head_end)  # node k's instructions are not moved yet
        matmuls = np.flatnonzero(f_head.opcode == _MATMUL)
        if not len(matmuls):
            continue
        first_mm = starts[k] + int(matmuls[0])
        a = max(starts[k - 1], starts[k] - REACH, simulated)
        z = min(ends[k], first_mm + 1 + AFTER_FIRST_MATMUL)
        if a >= starts[k]:
            continue
        if measure:  # the simulation up to the window: the program before it is final
            sim.advance(Program(rows[simulated:a].tobytes(), program.layout).fields())
            simulated = a
        f = Program(rows[a:z].tobytes(), program.layout).fields()
        win = Window(f, arch.local_depth, dram0_behind_loads, program.layout, window_at(seen, a))
        order = np.arange(z - a)
        heads = [i for i in range(starts[k] - a, first_mm - a) if win.load[i]]
        if measure:
            trial = sim.fork()
            trial.run(win.columns)
            best = trial.dispatch
        moved = 0
        for x in heads:
            at = int(np.flatnonzero(order == x)[0])
            blocked = np.flatnonzero(win.holds_load(x, order[:at]))
            earliest = int(blocked[-1]) + 1 if len(blocked) else 0
            if earliest >= at:
                continue
            if measure:
                cycles, o = win.fastest(sim, order, at, earliest, at - 1, earliest, finish=False)
                if cycles >= best:
                    continue
                best = cycles
            else:
                rest = np.delete(order, at)
                o = np.concatenate([rest[:earliest], [x], rest[earliest:]])
            moves.append(Prefetch(k, x + a, at - int(np.flatnonzero(o == x)[0])))
            order = o
            moved += 1
        if moved:
            rows[a:z] = rows[a:z][order]
            starts[k] += moved
    return Program(rows.tobytes(), program.layout, program.name), starts, tuple(moves)
