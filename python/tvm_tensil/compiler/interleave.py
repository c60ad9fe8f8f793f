"""The engines' instruction streams interleaved: list scheduling over windows of the program.

The core dispatches in program order, each instruction once its engine takes it. A node's schedule
keeps its own engines busy together, but one node's epilogue (SIMD instructions and moves on the
accumulator engine) and the next node's MatMuls (the array) follow each other in the program: the
array idles through the epilogue. Once a partition is scheduled (and its loads prefetched, its
stores sunk), each window of the program is list-scheduled: its instructions form one stream per
engine (the array's MatMuls, LoadWeights and window Configures; SIMD; moves between local memory
and the accumulators; each DRAM bank's reads and writes), each kept in program order, and the
streams are merged again. An instruction goes after every instruction of another stream that it
depends on: one that writes local memory, accumulators or DRAM it reads or writes, or reads what
it writes (address ranges, strides taken as the whole span). Other Configures and NoOps end a
window. So the program computes exactly what it did.

The merge picks, among the streams' next instructions whose dependencies are issued, one the latency
model dispatches within ``slack`` cycles of the earliest, the one with the longest chain of work
after it in the window (a critical-path priority). The merge steps the model's guide
(``Simulation.guide``: responses a LoadWeights holds back under a DRAM stream drain under it):
stepping the core's rule, where they stay queued to the stream's end, it would see each read
dispatch late and let the reads fall behind the MatMuls that wait for them. A window keeps the
fastest of the merges over ``SLACKS`` and its own order, by the latency model itself (everything
it started ended). A second pass
over windows shifted by half a window (``OFFSETS``) merges across the first one's window edges.
"""

from __future__ import annotations

import copy
import os
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from ..arch import Architecture
from ..isa.instructions import Opcode
from ..isa.layout import layout_of
from ..isa.program import Program, window_stream
from . import latency
from .latency import Simulation, beats_per_vector

# Instructions per window, and the slacks (cycles) whose merges each window tries.
WINDOW = 2048
SLACKS = (0, 16, 64, 1024)
# Where each pass's windows start in a stretch of the program: the second pass merges across the
# first one's window edges.
OFFSETS = (0, WINDOW // 2)
# The largest program the pass runs on unless asked (``CompileOptions.interleave``): it takes a few
# microseconds an instruction on two cores (docs/results.md has the compile seconds).
AUTO_LIMIT = 1_500_000

_MATMUL, _DATAMOVE, _LOADWEIGHTS, _SIMD, _CONFIGURE = (
    int(o) for o in (Opcode.MATMUL, Opcode.DATAMOVE, Opcode.LOADWEIGHTS, Opcode.SIMD, Opcode.CONFIGURE)
)
# Streams: the array, SIMD, moves local <-> accumulators, DRAM0 reads, writes, DRAM1 reads, writes.
_STREAMS = 7
_ARRAY, _SIMD_STREAM, _ACC_MOVES = 0, 1, 2
_DISPATCH_AT = latency._DISPATCH


class _Instructions:
    """What each instruction of a program touches, as arrays (one entry per instruction)."""

    def __init__(self, program: Program, arch: Architecture):
        layout = program.layout
        f = program.fields()
        op, fl = f.opcode, f.flags
        n = len(op)
        streamed = window_stream(f, layout, None)[0]
        outputs = f.operand2 + 1
        window_config = (op == _CONFIGURE) & ((f.raw0 & 0xF) == 12)
        move = op == _DATAMOVE
        acc_move = move & (fl >= 12)
        dram = move & (fl < 4)
        self.stream = np.full(n, -1, dtype=np.int64)  # -1: ends a window
        self.stream[(op == _MATMUL) | (op == _LOADWEIGHTS) | window_config] = _ARRAY
        self.stream[op == _SIMD] = _SIMD_STREAM
        self.stream[acc_move] = _ACC_MOVES
        for direction in range(4):  # DRAM0 read, write, DRAM1 read, write
            self.stream[move & (fl == direction)] = 3 + direction
        # Local memory: the span each instruction reads or writes (wrapping addresses: all of it).
        size = np.where(op == _LOADWEIGHTS, f.raw1 + 1, np.where(op == _MATMUL, streamed, outputs))
        lo = f.addr0
        hi = lo + (size - 1) * (np.int64(1) << f.stride0)
        wraps = hi >= arch.local_depth
        self.local_lo = np.where(wraps, 0, lo)
        self.local_hi = np.where(wraps, arch.local_depth - 1, hi)
        zeroes = ((op == _MATMUL) & ((fl & 2) != 0)) | ((op == _LOADWEIGHTS) & ((fl & 1) != 0))
        self.uses_local = ((op == _MATMUL) | (op == _LOADWEIGHTS) | move) & ~zeroes
        self.writes_local = move & np.isin(fl, (0, 2, 12))
        # Accumulators: a written (or accumulated) span and a read span.
        span = f.addr1 + (outputs - 1) * (np.int64(1) << f.stride1)
        wraps = span >= arch.accumulator_depth
        acc_lo, acc_hi = np.where(wraps, 0, f.addr1), np.where(wraps, arch.accumulator_depth - 1, span)
        none = np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64)
        self.write_lo, self.write_hi = none[0].copy(), none[1].copy()
        self.read_lo, self.read_hi = none[0].copy(), none[1].copy()
        writes = (op == _MATMUL) | (acc_move & (fl != 12))
        self.write_lo[writes], self.write_hi[writes] = acc_lo[writes], acc_hi[writes]
        reads = acc_move & (fl == 12)
        self.read_lo[reads], self.read_hi[reads] = acc_lo[reads], acc_hi[reads]
        simd_writes = (op == _SIMD) & ((fl & 2) != 0)  # (accumulating: a write too)
        simd_reads = (op == _SIMD) & ((fl & 1) != 0)
        self.write_lo[simd_writes] = self.write_hi[simd_writes] = f.raw0[simd_writes]
        self.read_lo[simd_reads] = self.read_hi[simd_reads] = f.raw1[simd_reads]
        # DRAM: the bank, span and whether it is written.
        self.dram_bank = np.where(dram, fl >> 1, -1)
        self.dram_lo, self.dram_hi = f.addr1, span
        self.writes_dram = dram & ((fl & 1) == 1)
        # Work in cycles, for the priority: the array's vectors, a move's vectors, bus beats.
        self.work = np.ones(n, dtype=np.int64)
        self.work[op == _MATMUL] = streamed[op == _MATMUL]
        self.work[op == _LOADWEIGHTS] = size[op == _LOADWEIGHTS]
        self.work[acc_move] = outputs[acc_move]
        self.work[dram] = outputs[dram] * beats_per_vector(arch)
        self.columns = Simulation.columns(f, layout, None)  # (rows: contiguous)

    def permuted(self, order: np.ndarray) -> "_Instructions":
        """The same instructions in ``order`` (each stream keeps its order, so a window MatMul still
        sees the window register it saw)."""
        other = copy.copy(self)
        for name, values in vars(self).items():
            setattr(other, name, values[..., order])
        return other

    def windows(self, offset: int = 0) -> list[tuple[int, int]]:
        """Runs of at most ``WINDOW`` instructions between the instructions that end a window, the
        first of each stretch between those ``offset`` long (a stretch no longer: none)."""
        ends = np.flatnonzero(self.stream < 0)
        found, start = [], 0
        for stop in list(ends) + [len(self.stream)]:
            if stop - start > offset:
                cuts = [start, *range(start + (offset or WINDOW), stop, WINDOW), stop]
                found += list(zip(cuts, cuts[1:]))
            start = stop + 1
        return found


@numba.njit(cache=True, nogil=True)
def _latest(table, s, a, b, found):
    """The largest of ``found`` and ``table[s, a..b]``."""
    for addr in range(a, b + 1):
        if table[s, addr] > found:
            found = table[s, addr]
    return found


@numba.njit(cache=True, nogil=True)
def _dependencies(lo, hi, stream, local_depth, acc_depth, local_lo, local_hi, uses_local, writes_local, write_lo,
                  write_hi, read_lo, read_hi, dram_bank, dram_lo, dram_hi, writes_dram):  # fmt: skip
    """For each instruction of the window (relative index), the last earlier one of each other
    stream it depends on (-1: none). Local memory and accumulators: each stream's last reader and
    writer of every address; DRAM: the DRAM streams' moves, latest first."""
    w = hi - lo
    deps = np.full((w, _STREAMS), -1, dtype=np.int64)
    local_read = np.full((_STREAMS, local_depth), -1, dtype=np.int64)
    local_written = np.full((_STREAMS, local_depth), -1, dtype=np.int64)
    acc_read = np.full((_STREAMS, acc_depth), -1, dtype=np.int64)
    acc_written = np.full((_STREAMS, acc_depth), -1, dtype=np.int64)
    count = np.zeros(_STREAMS, dtype=np.int64)
    members = np.empty((_STREAMS, w), dtype=np.int64)  # each stream's instructions so far
    for jj in range(w):
        j = lo + jj
        own = stream[j]
        reads_acc, writes_acc = read_lo[j] <= read_hi[j], write_lo[j] <= write_hi[j]
        for s in range(_STREAMS):
            if s == own:
                continue
            d = -1
            if uses_local[j]:  # what wrote its range; what read it, if it writes
                d = _latest(local_written, s, local_lo[j], local_hi[j], d)
                if writes_local[j]:
                    d = _latest(local_read, s, local_lo[j], local_hi[j], d)
            if reads_acc:
                d = _latest(acc_written, s, read_lo[j], read_hi[j], d)
            if writes_acc:
                d = _latest(acc_written, s, write_lo[j], write_hi[j], d)
                d = _latest(acc_read, s, write_lo[j], write_hi[j], d)
            if dram_bank[j] >= 0 and s > _ACC_MOVES:
                for k in range(count[s] - 1, -1, -1):  # the latest first
                    ii = members[s, k]
                    if ii <= d:
                        break
                    i = lo + ii
                    if dram_bank[i] == dram_bank[j] and (writes_dram[i] or writes_dram[j]):
                        if dram_lo[i] <= dram_hi[j] and dram_lo[j] <= dram_hi[i]:
                            d = ii
                            break
            deps[jj, s] = d
        if uses_local[j]:
            table = local_written if writes_local[j] else local_read
            for addr in range(local_lo[j], local_hi[j] + 1):
                table[own, addr] = jj
        if reads_acc:
            for addr in range(read_lo[j], read_hi[j] + 1):
                acc_read[own, addr] = jj
        if writes_acc:
            for addr in range(write_lo[j], write_hi[j] + 1):
                acc_written[own, addr] = jj
        members[own, count[own]] = jj
        count[own] += 1
    return deps


@numba.njit(cache=True, nogil=True)
def _step(j, model, busy, state, out_busy, out_state, copy):
    """The latency model (``model``: the program's columns and the model's parameters, as
    ``_merged`` groups them) advanced by instruction ``j`` from ``busy``/``state`` into
    ``out_busy``/``out_state`` (``copy=False``: the same arrays); returns the cycle it dispatches."""
    columns, core, memory, costs, kind_of, no_node, no_blame = model
    if copy:
        out_state[:] = state
        out_busy[:] = busy
    latency._simulate(columns, core, memory, costs, out_busy, out_state, no_node, kind_of, no_blame, j, j + 1)
    return out_state[_DISPATCH_AT]


@numba.njit(cache=True, nogil=True)
def _issuable(jj, deps, issued):
    """Whether every instruction ``jj`` depends on is issued."""
    for s in range(_STREAMS):
        if deps[jj, s] >= 0 and not issued[deps[jj, s]]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _merge(lo, hi, stream, deps, work, model, busy, state, slack):
    """The window's instructions merged from their streams (relative indices, in the new order);
    ``busy``/``state``: the latency model before the window, advanced through it."""
    w = hi - lo
    count = np.zeros(_STREAMS, dtype=np.int64)
    members = np.full((_STREAMS, w), -1, dtype=np.int64)
    for jj in range(w):
        s = stream[lo + jj]
        members[s, count[s]] = jj
        count[s] += 1
    # Priority: the longest chain of work from an instruction to the window's end.
    after = np.full(w, -1, dtype=np.int64)
    last = np.full(_STREAMS, -1, dtype=np.int64)
    for jj in range(w - 1, -1, -1):
        s = stream[lo + jj]
        after[jj] = last[s]
        last[s] = jj
    longest_after = np.zeros(w, dtype=np.int64)
    priority = np.zeros(w, dtype=np.int64)
    for jj in range(w - 1, -1, -1):
        m = longest_after[jj]
        if after[jj] >= 0 and priority[after[jj]] > m:
            m = priority[after[jj]]
        priority[jj] = work[lo + jj] + m
        for s in range(_STREAMS):
            i = deps[jj, s]
            if i >= 0 and priority[jj] > longest_after[i]:
                longest_after[i] = priority[jj]
    heads = np.zeros(_STREAMS, dtype=np.int64)
    issued = np.zeros(w, dtype=np.bool_)
    order = np.empty(w, dtype=np.int64)
    trial_state = np.empty((_STREAMS, state.shape[0]), dtype=np.int64)
    trial_busy = np.empty((_STREAMS, busy.shape[0]), dtype=np.int64)
    ready = np.full(_STREAMS, -1, dtype=np.int64)
    at = np.zeros(_STREAMS, dtype=np.int64)
    k = 0
    while k < w:
        n_ready = 0
        for s in range(_STREAMS):
            ready[s] = -1
            if heads[s] < count[s] and _issuable(members[s, heads[s]], deps, issued):
                ready[s] = members[s, heads[s]]
                n_ready += 1
        # The most urgent ready instruction (longest work after it) first: where it dispatches
        # within the slack of the next cycle, no other can take its place.
        top = -1
        for s in range(_STREAMS):
            if ready[s] >= 0 and (top < 0 or priority[ready[s]] > priority[ready[top]]):
                top = s
        best = top
        all_tried = False
        if n_ready == 1:
            _step(lo + ready[top], model, busy, state, busy, state, False)
        else:
            at[top] = _step(lo + ready[top], model, busy, state, trial_busy[top], trial_state[top], True)
            if at[top] > state[_DISPATCH_AT] + 1 + slack:  # then the others' dispatch cycles decide
                all_tried = True
                earliest = at[top]
                for s in range(_STREAMS):
                    if ready[s] >= 0 and s != top:
                        at[s] = _step(lo + ready[s], model, busy, state, trial_busy[s], trial_state[s], True)
                        earliest = min(earliest, at[s])
                best = -1
                for s in range(_STREAMS):
                    if ready[s] >= 0 and at[s] <= earliest + slack:
                        if best < 0 or priority[ready[s]] > priority[ready[best]]:
                            best = s
            state[:] = trial_state[best]
            busy[:] = trial_busy[best]
        jj = ready[best]
        order[k] = jj
        issued[jj] = True
        heads[best] += 1
        k += 1
        if best == _SIMD_STREAM and all_tried:
            # More SIMD instructions (a cycle each) while every other stream's next instruction
            # stays beyond the slack: the choice would be the same, without trying them again.
            limit = np.int64(1) << 60
            for s in range(_STREAMS):
                if s != best and ready[s] >= 0:
                    limit = min(limit, at[s] - slack)
            while k < w and heads[best] < count[best] and state[_DISPATCH_AT] + 1 < limit:
                jj = members[best, heads[best]]
                if not _issuable(jj, deps, issued):
                    break
                _step(lo + jj, model, busy, state, busy, state, False)
                order[k] = jj
                issued[jj] = True
                heads[best] += 1
                k += 1
    return order


def interleave(
    program: Program, arch: Architecture, owners: np.ndarray, measure: bool = True, offsets=OFFSETS
) -> tuple[Program, np.ndarray, int]:
    """``program`` with each window's instructions merged across engines where the latency model
    finds it faster (``measure=False``: every window merged, with the first slack), a pass per
    ``offsets``; each instruction's node (``owners``, permuted alike); how many windows were
    reordered."""
    n = len(program)
    if n < 2:
        return program, owners, 0
    ins = _Instructions(program, arch)
    order, changed = np.arange(n), 0
    for offset in offsets:
        merged, count = _merged(ins, arch, measure, offset)
        if count:
            ins, order, changed = ins.permuted(merged), order[merged], changed + count
    if not changed:
        return program, owners, 0
    rows = np.frombuffer(program.data, dtype=np.uint8).reshape(n, layout_of(arch).instruction_bytes)
    return Program(rows[order].tobytes(), program.layout, program.name), owners[order], changed


def _merged(ins: _Instructions, arch: Architecture, measure: bool, offset: int) -> tuple[np.ndarray, int]:
    """One pass of ``interleave`` over windows ``offset`` into each stretch: the new order of the
    instructions and how many windows it changed."""
    sim = Simulation(arch)
    order = np.arange(len(ins.stream))
    arrays = (ins.stream, arch.local_depth, arch.accumulator_depth, ins.local_lo, ins.local_hi, ins.uses_local,
              ins.writes_local, ins.write_lo, ins.write_hi, ins.read_lo, ins.read_hi, ins.dram_bank, ins.dram_lo,
              ins.dram_hi, ins.writes_dram)  # fmt: skip
    none = np.zeros(0, dtype=np.int64), np.zeros((0, 1), dtype=np.int64)  # (no blame kept)
    # The merges step the guide's rule (``Simulation.guide``); each merge is then measured by the core's.
    model = (ins.columns, sim.core, sim.guide().memory, sim.costs, latency._KIND_OF, *none)
    windows = [(lo, hi) for lo, hi in ins.windows(offset) if hi - lo >= 2 and np.unique(ins.stream[lo:hi]).size >= 2]
    done, changed = 0, 0
    with ThreadPoolExecutor(min(len(SLACKS), os.cpu_count() or 1)) as pool:  # (the merges release the GIL)
        # Each window's dependencies are found in the pool while the window before it merges.
        found = pool.submit(_dependencies, *windows[0], *arrays) if windows else None
        for k, (lo, hi) in enumerate(windows):
            sim.run(ins.columns[:, done:lo])
            deps = found.result()

            def merge(slack: int, start: Simulation = sim, lo: int = lo, hi: int = hi, deps: np.ndarray = deps):
                guide = start.guide()
                merged = _merge(lo, hi, ins.stream, deps, ins.work, model, guide.busy, guide.state, slack) + lo
                trial = start.fork()
                trial.run(ins.columns[:, merged])
                return trial, merged

            merges = [pool.submit(merge, slack) for slack in (SLACKS if measure else SLACKS[:1])]
            if k + 1 < len(windows):
                found = pool.submit(_dependencies, *windows[k + 1], *arrays)
            best, best_order = sim.fork(), None
            best.run(ins.columns[:, lo:hi])  # the window's own order
            for trial, merged in (m.result() for m in merges):  # (in the slacks' order)
                if trial.finish < best.finish or not measure:
                    best, best_order = trial, merged
            if best_order is not None:
                order[lo:hi] = best_order
                changed += 1
            sim, done = best, hi
    return order, changed
