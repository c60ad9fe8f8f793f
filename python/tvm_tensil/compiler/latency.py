"""The latency model: estimated cycles of a program on the RTL core, in one place.

It follows the core's execution rule (docs/rtl.md): instructions dispatch in order, at most one
per cycle, onto seven engines each running one instruction at a time -- the compute engine
(MatMul), the accumulator engine (DataMove local <-> accumulators; SIMD beside it), the weights
engine (LoadWeights, into the array's second weight set) and per DRAM bank a reader (DRAM -> local)
and a writer (local -> DRAM); an instruction also waits for another engine's instruction when their
local memory ranges overlap and one of them writes, a bank's reader and writer wait for each other
when their DRAM ranges overlap, and the compute and accumulator engines wait for each other while
the other uses an accumulator bank (lower or upper half) they need (a MatMul's bank stays in use
``BANK_HOLD`` cycles past its end). The total is when the last instruction finishes.

Per instruction of ``size`` vectors (N = array size, B = AXI beats per vector, memory timing from
``arch.MEMORY_TIMING``), calibrated against the Verilated core by ``benchmarks/calibrate_latency.py``
(constants in ``COSTS``):

- MatMul ``size + N + mm``; a MatMul right after a MatMul starts once the earlier one has issued its
  vectors (``size + 1``). The first MatMul after a LoadWeights swaps weight sets: its first vector
  waits until the load has landed (``swap`` cycles after the weights engine's end);
- LoadWeights ``size + lw`` on the weights engine, beside MatMuls; a load that follows a MatMul
  which followed the previous load starts ``lw_after_swap`` cycles after that MatMul's first vector,
  and not before the weight set it overwrites has left the array (``N + set_free`` cycles after the
  last vector of the MatMul before the previous swap). Its reads go first on local memory's
  second port: DRAM -> local responses (one per vector, at the DRAM rate) wait in their reader's
  queue and take their share of the port only once it holds ``RESPONSES_WAITING``; a load whose
  reads were held lands ``lw`` cycles after its last read. Between loads a queue drains only as
  fast as the port is free of responses still arriving (at one beat per vector, not at all): what
  the loads held back drains after the stream, and a load's reads pause that drain too; the reader
  ends that much later;
- local <-> accumulators ``size + move``; while MatMuls stream the move uses local memory's second
  port, after the weights and DRAM engines, including those dispatched after it: each of their
  accesses in the meantime delays the move's end a cycle;
- SIMD: one per cycle after the accumulator engine's moves; a SIMD reading what the previous one
  wrote waits for it (``simd_dependent`` cycles);
- DRAM -> local, DRAM stride 1: ``read_latency + size * B + read``; with a larger stride every vector
  is its own burst and at most ``max_reads`` are in flight: groups of ``max_reads`` bursts an address
  every ``max(B, 2)`` cycles apart, each group a round trip (``read_latency + B``) after the one
  before; with B = 1, DRAM -> local moves of the two banks take
  turns;
- local -> DRAM: ``size * B + write_latency + write``; with a DRAM stride, a burst per vector of at
  least 2 cycles; DRAM streams that together want local port B more than once a cycle (one bus
  beat per vector) share it, and both stretch;
- Configure waits for everything to finish; NoOp costs its dispatch cycle;
- instructions arrive as a byte stream of the AXI width into a buffer of one instruction plus one
  beat: where an instruction is wider than a beat, dispatch runs at most at the stream's rate.

``critical_path`` splits the total into what held the in-order dispatch up: each instruction's own
dispatch cycle, and every wait charged to the instruction waited for (by kind, and by the
compiler's node that emitted it). The parts sum to the total.
"""

from __future__ import annotations

import copy

import numba
import numpy as np

from ..arch import MEMORY_TIMING, Architecture
from ..isa.instructions import (
    RESPONSE_QUEUE_DEPTH,
    ConfigRegister,
    DataMoveBit,
    Direction,
    Engine,
    LoadWeightsFlag,
    MatMulFlag,
    Opcode,
    SIMDFlag,
    TapWindow,
)
from ..isa.layout import InstructionLayout, layout_of
from ..isa.program import Program, ProgramFields, window_register, window_stream

# Fixed overheads in cycles, fitted by benchmarks/calibrate_latency.py (results/latency_calibration.json).
COSTS = {
    "mm": 7,
    "lw": 3,
    "move": 6,
    "simd_drain": 5,
    "simd_dependent": 5,
    "read": 5,
    "write": 7,
    "swap": -1,
    "lw_after_swap": 3,
    "set_free": 2,
}
DEFAULT_AXI_BITS = 64
# Cycles a MatMul's accumulator bank stays in use past its modelled end, while its last writes
# land: a move of that bank behind the next MatMul (of the other bank) waits for both when that one
# starts within them. Measured on the core, not fitted (tests/compiler/test_latency.py: counting
# from the end, the model let such a move pass by a cycle and was 14% fast).
BANK_HOLD = 3


_SIMD, _MATMUL, _LOADWEIGHTS = int(Opcode.SIMD), int(Opcode.MATMUL), int(Opcode.LOADWEIGHTS)
_DATAMOVE, _CONFIGURE = int(Opcode.DATAMOVE), int(Opcode.CONFIGURE)
_WINDOW_REGISTER = int(ConfigRegister.WINDOW)
_ACC_TO_LOCAL = int(Direction.ACC_TO_LOCAL)
_SIMD_READ, _SIMD_WRITE = int(SIMDFlag.READ), int(SIMDFlag.WRITE)
_MATMUL_ZEROES, _LOADWEIGHTS_ZEROES = int(MatMulFlag.ZEROES), int(LoadWeightsFlag.ZEROES)
_TO_DRAM, _DRAM1 = int(DataMoveBit.TO_DRAM), int(DataMoveBit.DRAM1)  # DataMove directions 0-3


# What an instruction is, for the critical-path split: ``KINDS[_KIND_OF[opcode, flags]]``.
KINDS = (
    "matmul",
    "load_weights",
    "dram0_to_local",
    "local_to_dram0",
    "dram1_to_local",
    "local_to_dram1",
    "acc_to_local",
    "local_to_acc",
    "simd",
    "other",
)
_KIND_OF = np.full((16, 16), KINDS.index("other"), dtype=np.int64)
_KIND_OF[_MATMUL, :] = KINDS.index("matmul")
_KIND_OF[_LOADWEIGHTS, :] = KINDS.index("load_weights")
_KIND_OF[_SIMD, :] = KINDS.index("simd")
for _d in Direction:
    _KIND_OF[_DATAMOVE, int(_d)] = KINDS.index(
        "local_to_acc" if _d == Direction.LOCAL_TO_ACC_ACCUMULATE else _d.name.lower()
    )
del _d


def estimate_cycles(program: Program, arch: Architecture, timing: dict | None = None) -> dict[str, int]:
    """Estimated cycles: busy cycles per opcode name, and ``total`` (the program's latency)."""
    busy, state, _ = _run(program, arch, timing, None, 0)
    return _cycles(busy, state)


def estimate_cycles_of(chunks, arch: Architecture) -> dict[str, int]:
    """``estimate_cycles`` of a program given as its fields, a chunk at a time (``LIR.fields``)."""
    sim = Simulation(arch)
    for f in chunks:
        sim.advance(f)
    return _cycles(sim.busy, sim.state)


def instruction_nodes(count: int, node_starts) -> np.ndarray:
    """Each of ``count`` instructions' node: ``k`` for those from ``node_starts[k]`` up to the next
    start (those before the first start: node 0)."""
    starts = np.asarray(node_starts if len(node_starts) else [0], dtype=np.int64)
    return np.maximum(np.searchsorted(starts, np.arange(count), side="right") - 1, 0)


def _owners(program: Program, node_starts, owners) -> np.ndarray:
    """Each instruction's node: ``owners`` as given, else from ``node_starts``."""
    if owners is not None:
        return np.asarray(owners, dtype=np.int64)
    return instruction_nodes(len(program), node_starts)


def critical_path(
    program: Program, arch: Architecture, node_starts=(), timing: dict | None = None, owners=None
) -> dict:
    """The total split by what held dispatch up: ``{"total", "by_kind": {kind: cycles},
    "by_node": [{kind: cycles}, ...], "cycles": estimate_cycles' figures}``, where node ``k`` emitted
    the instructions from ``node_starts[k]`` up to the next start (instructions before the first
    start count as node 0), or those whose ``owners`` entry is ``k``."""
    node = _owners(program, node_starts, owners)
    nodes = max(1, len(node_starts), int(node.max()) + 1 if node.size else 1)
    busy, state, blame = _run(program, arch, timing, node, nodes)
    by_node = [{KINDS[k]: int(blame[i, k]) for k in range(len(KINDS)) if blame[i, k]} for i in range(nodes)]
    totals = blame.sum(axis=0)
    return {
        "total": int(state[_FINISH]),
        "by_kind": {KINDS[k]: int(totals[k]) for k in range(len(KINDS)) if totals[k]},
        "by_node": by_node,
        "cycles": _cycles(busy, state),
    }


# What bounds a stretch of the program from below, each resource alone at its full rate (cycles):
# the array (a MatMul vector a cycle), the weights engine, the accumulator engine (moves and SIMD),
# local memory's port B (every LoadWeights read and DRAM vector: the MatMuls read through port A),
# both ports together (the accumulator engine's moves take whichever is free), each DRAM bank's
# reader and writer (a bus beat a cycle).
RESOURCES = ("array", "weights", "accumulators", "local_port_b", "local_ports", "dram0_read", "dram0_write",
             "dram1_read", "dram1_write")  # fmt: skip


def resource_bounds(program: Program, arch: Architecture, node_starts=(), owners=None) -> list[dict[str, int]]:
    """Per node (instructions from ``node_starts[k]`` up to the next start, or those whose ``owners``
    entry is ``k``), each resource's busy cycles in ``RESOURCES``: no schedule of the node's
    instructions alone runs in fewer cycles than the largest. (A node's share of the critical path
    can be smaller: its work may run under its neighbours'.)"""
    owner = _owners(program, node_starts, owners)
    nodes = max(1, len(node_starts), int(owner.max()) + 1 if owner.size else 1)
    totals = np.zeros((nodes, len(RESOURCES)), dtype=np.int64)
    bpv = beats_per_vector(arch)
    window = None
    for start, f in program.chunks():
        node = owner[start : start + f.opcode.shape[0]]
        op, fl, size, lw_size = f.opcode, f.flags, f.operand2 + 1, f.raw1 + 1
        streamed = window_stream(f, program.layout, window)[0]  # a window MatMul's array cycles
        window = window_register(f, program.layout, window)[1]
        reads = (op == _MATMUL) & ((fl & _MATMUL_ZEROES) == 0)
        weights = (op == _LOADWEIGHTS) & ((fl & _LOADWEIGHTS_ZEROES) == 0)
        move = op == _DATAMOVE
        dram = [move & (fl == d) for d in (0, 1, 2, 3)]  # DRAM0 read, write, DRAM1 read, write
        acc_moves = move & (fl >= _ACC_TO_LOCAL)
        port_b = np.where(weights, lw_size, 0) + np.where(move & (fl < 4), size, 0)
        per = [
            np.where(op == _MATMUL, streamed, 0),
            np.where(op == _LOADWEIGHTS, lw_size, 0),
            np.where(acc_moves, size, 0) + (op == _SIMD),
            port_b,
            port_b + np.where(reads | acc_moves, size, 0),  # halved below: two ports
            *(np.where(d, size * bpv, 0) for d in dram),
        ]
        for r, values in enumerate(per):
            np.add.at(totals[:, r], node, values)
    totals[:, RESOURCES.index("local_ports")] = (totals[:, RESOURCES.index("local_ports")] + 1) // 2
    return [{name: int(v) for name, v in zip(RESOURCES, row)} for row in totals]


def _cycles(busy: np.ndarray, state: np.ndarray) -> dict[str, int]:
    out = {op.name.lower(): int(busy[int(op)]) for op in Opcode if busy[int(op)]}
    out["total"] = int(state[_FINISH])
    return out


class Simulation:
    """The model stopped after some instructions: ``advance`` runs more from there, ``fork`` copies
    it to try alternative continuations (a scheduling pass compares them by ``dispatch`` or
    ``finish``)."""

    def __init__(self, arch: Architecture, timing: dict | None = None, nodes: int = 0):
        t = dict(MEMORY_TIMING, **(timing or {}))
        c = COSTS
        self.busy = np.zeros(16, dtype=np.int64)
        self.state = np.zeros(_STATE_SIZE, dtype=np.int64)
        self.state[_LAST_SIMD_WRITE], self.state[_LAST_SIMD_TIME], self.state[_SWAP_AT] = -1, -10, -(1 << 40)
        self.layout = layout_of(arch)
        self.window: int | None = None  # the window register after the instructions run
        ib, bb = self.layout.instruction_bytes, (arch.axi_data_width or DEFAULT_AXI_BITS) // 8
        self.state[_BUFFERED] = ib + bb  # the instruction buffer starts full
        self.blame = np.zeros((max(nodes, 0), len(KINDS)), dtype=np.int64)
        # The kernel's parameters, grouped: the core's sizes, the memory's timing, the engines' costs.
        self.core = (arch.array_size, beats_per_vector(arch), arch.local_depth, ib, bb, arch.accumulator_depth // 2)
        # (The fourth: 1, the core's rule for the responses a load holds back under a DRAM stream;
        # ``guide`` sets it to 0.)
        self.memory = (t["read_latency"], t["write_latency"], t["max_reads"], 1)
        self.costs = (c["mm"], c["lw"], c["move"], c["simd_drain"], c["simd_dependent"], c["read"], c["write"],
                      c["swap"], c["lw_after_swap"], c["set_free"])  # fmt: skip

    @staticmethod
    def columns(f: ProgramFields, layout: InstructionLayout, window: int | None, seen=None) -> np.ndarray:
        """The fields the model reads, one row each (``run`` takes any selection of columns); a
        window MatMul's size is the vectors it streams (``window``: the window register before ``f``;
        ``seen``: the one each instruction sees, if known)."""
        seen = window_register(f, layout, window)[0] if seen is None else seen
        size, tail = window_stream(f, layout, window, seen)
        # The fourth row: a LoadWeights' size; a window MatMul's stream after its last output's first.
        extra = np.where(f.opcode == _LOADWEIGHTS, f.raw1 + 1, tail)
        # The ninth: the local vectors an instruction touches, for a window MatMul those its window
        # reads (its stream less the padding before and after them).
        local = np.where(f.opcode == _LOADWEIGHTS, extra, size)
        if layout.arch.window_matmul:
            _, lead, trail, _ = TapWindow.fields(np.maximum(seen, 0))
            windowed = (f.opcode == _MATMUL) & ((f.flags & MatMulFlag.WINDOW) != 0) & (seen >= 0)
            local = np.where(windowed, size - lead - trail, local)
        return np.stack([f.opcode, f.flags, size, extra, f.addr0, f.stride0, f.addr1, f.stride1, local])

    def advance(self, f: ProgramFields, node: np.ndarray | None = None) -> None:
        """Run the instructions ``f`` (with ``node``, each one's node for the blame)."""
        seen, after = window_register(f, self.layout, self.window)
        self.run(self.columns(f, self.layout, self.window, seen), node)
        self.window = after

    def run(self, columns: np.ndarray, node: np.ndarray | None = None) -> None:
        """Run the instructions given as ``columns``."""
        node = np.zeros(0, dtype=np.int64) if node is None else node
        rows = np.ascontiguousarray(columns, dtype=np.int64)
        _simulate(
            rows,
            self.core,
            self.memory,
            self.costs,
            self.busy,
            self.state,
            node,
            _KIND_OF,
            self.blame,
            0,
            rows.shape[1],
        )

    def fork(self) -> "Simulation":
        other = copy.copy(self)
        other.busy, other.state, other.blame = self.busy.copy(), self.state.copy(), self.blame.copy()
        return other

    def guide(self) -> "Simulation":
        """A fork whose responses held back by a load drain under the stream, not after it: the
        rule a greedy scheduling pass steps (``interleave``). Stepping the core's rule it sees a read
        dispatch late wherever loads run beside the read before it, so it lets the reads fall behind
        and the MatMuls wait for them (docs/compiler.md, "The engines' streams merged again")."""
        other = self.fork()
        other.memory = self.memory[:3] + (0,)
        return other

    @property
    def dispatch(self) -> int:
        """The cycle the last instruction run so far was dispatched."""
        return int(self.state[_DISPATCH])

    @property
    def finish(self) -> int:
        """The cycle everything run so far has ended."""
        return int(self.state[_FINISH])


def _run(program: Program, arch: Architecture, timing, owners, nodes: int):
    """The model over ``program``; with ``owners`` (each instruction's node), the blame by node."""
    sim = Simulation(arch, timing, nodes)
    for start, f in program.chunks():  # a huge program is never decoded whole
        sim.advance(f, None if owners is None else owners[start : start + f.opcode.shape[0]])
    busy, state, blame = sim.busy, sim.state, sim.blame
    if owners is not None:  # the tail after the last dispatch: whichever engine ends last
        ends = [(state[_END + e], state[_OWNER + e]) for e in range(_ENGINES)]
        ends.append((state[_SIMD_END], state[_S_OWNER]))
        owner = max(ends)[1]
        tail = state[_FINISH] - state[_DISPATCH]
        blame[owner // len(KINDS), owner % len(KINDS)] += tail
    return busy, state, blame


def accumulator_cycles(rows: np.ndarray) -> int:
    """Cycles instruction rows (``LIR`` rows: opcode, flags, ..., operand 2) keep the accumulator
    engine busy: a SIMD instruction one, a move between local memory and the accumulators its
    vectors and the move's fixed cost."""
    ops, flags = rows[:, 0], rows[:, 1]
    moves = (ops == _DATAMOVE) & (flags >= _ACC_TO_LOCAL)
    return int(np.count_nonzero(ops == _SIMD) + (rows[moves, 6] + 1 + COSTS["move"]).sum())


def beats_per_vector(arch: Architecture) -> int:
    return max(1, arch.vector_bytes * 8 // (arch.axi_data_width or DEFAULT_AXI_BITS))


def dram_move_cycles(arch: Architecture, direction: Direction, size: int) -> int:
    """Estimated cycles of one contiguous DRAM <-> local DataMove (what the scheduler paces by)."""
    t, c = MEMORY_TIMING, COSTS
    return int(
        _dram_cycles(
            size,
            int(direction) & 1,
            0,
            beats_per_vector(arch),
            t["read_latency"],
            t["write_latency"],
            t["max_reads"],
            c["read"],
            c["write"],
        )
    )


@numba.njit(cache=True, nogil=True)
def _dram_cycles(k, to_dram, dram_stride, bpv, rl, wl, max_reads, read, write):
    """A DataMove of ``k`` vectors: a write is one burst; a read is one burst at stride 1, else every
    vector is its own burst with at most ``max_reads`` in flight."""
    if to_dram:  # a strided write is a burst per vector: its address and data take 2 cycles
        return k * (bpv if dram_stride == 0 else max(bpv, 2)) + wl + write
    if dram_stride == 0:
        return rl + k * bpv + read
    # Up to ``max_reads`` bursts go out back to back (an address every max(B, 2) cycles); the next
    # group waits for the first group's responses (one round trip, read_latency + B, per group).
    return rl + bpv + read + (k - 1) // max_reads * (rl + bpv) + (k - 1) % max_reads * max(bpv, 2)


# The simulation's state between chunks of a program: indices into one int64 array. Per engine
# (compute, weights, DRAM0, DRAM1): when its instruction ends, whom a wait for it is charged to
# (node * kinds + kind), and that instruction's local memory range (has one, lo, hi, writes).
_C, _O, _W = int(Engine.COMPUTE), int(Engine.MOVE), int(Engine.WEIGHTS)
_D0R, _D0W, _D1R, _D1W = (int(e) for e in (Engine.DRAM0_READER, Engine.DRAM0_WRITER, Engine.DRAM1_READER,
                                           Engine.DRAM1_WRITER))  # fmt: skip
_ENGINES = len(Engine)
(
    _DISPATCH,
    _FINISH,
    _SIMD_END,
    _S_OWNER,
    _LAST_SIMD_WRITE,
    _LAST_SIMD_TIME,
    _C_ISSUED,
    _LW_SINCE_MM,
    _MM_SINCE_LW,
    _SWAP_AT,
    _BUFFERED,
    _C_BANKS,
    _M_BANKS,
    _S_BANKS,
    _O_PORT_B_END,
    _LW_END,
    _SET_FREE,
) = range(17)
(_END, _OWNER, _HAS, _LO, _HI, _WRITES, _STREAM_LO, _STREAM_HI, _STREAM_PERIOD, _DRAM_LO, _DRAM_HI, _RQ) = (
    17 + k * _ENGINES for k in range(12)
)
_STATE_SIZE = 17 + 12 * _ENGINES
# A reader's response queue level is kept in 1/_RQ_UNIT vectors (the state is integers).
_RQ_UNIT = 1024
# DRAM -> local responses a reader's queue holds before they take port B from LoadWeights reads
# (tcu_dram_reader's RQ / 2: the queue is then urgent).
RESPONSES_WAITING = RESPONSE_QUEUE_DEPTH // 2
_READERS, _WRITERS = (1 << _D0R) | (1 << _D1R), (1 << _D0W) | (1 << _D1W)


@numba.njit(cache=True, nogil=True)
def _simulate(columns, core, memory, costs, busy, state, node, kind_of, blame, first_i, last_i):
    """The dispatch rule above, one instruction at a time, from and back to ``state``; adds each
    opcode's busy cycles to ``busy``. With ``node`` (each instruction's node), charges every cycle
    dispatch advances to ``blame[node, kind_of[opcode, flags]]`` of the instruction that held it up.
    ``columns``: the instructions' decoded fields, a row each (``Simulation.columns``; those from
    ``first_i`` up to ``last_i`` run); ``core``, ``memory``, ``costs``: as
    ``Simulation`` groups them. Each engine's entries are read and written in ``state`` itself (a
    call costs little: the interleave pass steps the model an instruction at a time)."""
    n, bpv, depth, ib, bb, half = core
    rl, wl, max_reads, held_stay = memory
    mm, lw, move, simd_drain, simd_dependent, read, write, swap, lw_after_swap, set_free = costs
    track = node.shape[0] > 0
    nk = blame.shape[1]
    # Each reader's responses waiting for port B after the last LoadWeights, which ended at lw_end.
    rq = np.empty(_ENGINES)
    for e in range(_ENGINES):
        rq[e] = state[_RQ + e] / _RQ_UNIT
    lw_end = state[_LW_END]
    dispatch, finish = state[_DISPATCH], state[_FINISH]
    simd_end, s_owner = state[_SIMD_END], state[_S_OWNER]
    last_simd_write, last_simd_time = state[_LAST_SIMD_WRITE], state[_LAST_SIMD_TIME]
    # When the compute engine's last MatMul issued its last vector.
    c_issued = state[_C_ISSUED]
    # Weight sets: a load since the last MatMul (the next MatMul swaps), a MatMul since the last load
    # (the next load is a new one), when the last swapping vector issued.
    lw_since_mm, mm_since_lw, swap_at = state[_LW_SINCE_MM] != 0, state[_MM_SINCE_LW] != 0, state[_SWAP_AT]
    # When the last vector using the inactive weight set (the MatMul before the last swap) has left
    # the array: a load into that set waits for it.
    inactive_free = state[_SET_FREE]
    # Bytes of the instruction stream buffered after the last dispatch (capacity: one instruction
    # and one beat; a beat a cycle while it fits).
    buffered, capacity = state[_BUFFERED], ib + bb
    # Accumulator banks (bit k: bank k) of the MatMuls in flight, of the move, of the SIMD pipeline.
    c_banks, m_banks, s_banks = state[_C_BANKS], state[_M_BANKS], state[_S_BANKS]
    # Until when the accumulator engine's move uses local port B (while MatMuls stream): port-B users
    # dispatched later still go first, and each of their accesses meanwhile delays the move a cycle.
    o_port_b_end = state[_O_PORT_B_END]
    for i in range(first_i, last_i):
        ready = dispatch + 1
        if buffered + bb < ib:
            ready = dispatch + (ib - buffered + bb - 1) // bb
        # (Read as scalars: unpacking the rows would cost a reference count each call.)
        op, fl, count, lw_count = columns[0, i], columns[1, i], columns[2, i], columns[3, i]
        a0, s0, a1, s1 = columns[4, i], columns[5, i], columns[6, i], columns[7, i]
        me = node[i] * nk + kind_of[op, fl] if track else 0
        held = me  # whom the cycles from the previous dispatch to this one are charged to
        start = ready
        if op == _SIMD:
            banks = ((1 << (a1 >= half)) if fl & _SIMD_READ else 0) | ((1 << (a0 >= half)) if fl & _SIMD_WRITE else 0)
            if state[_END + _O] > start:
                start, held = state[_END + _O], state[_OWNER + _O]
            if banks & c_banks and state[_END + _C] > start:
                start, held = state[_END + _C], state[_OWNER + _C]
            if banks & c_banks and start >= state[_END + _C]:
                c_banks = 0  # it went with the compute engine idle: the next MatMul's banks start afresh
            if fl & _SIMD_READ and a1 == last_simd_write and start - last_simd_time < simd_dependent:
                start, held = last_simd_time + simd_dependent, s_owner
            s_banks = (s_banks if simd_end > start else 0) | banks
            s_owner = me
            last_simd_write = a0 if fl & _SIMD_WRITE else -1
            last_simd_time = start
            simd_end = start + simd_drain
            busy[op] += 1
            finish = max(finish, simd_end)
        elif op == _CONFIGURE and (a0 & 0xF) == _WINDOW_REGISTER:
            busy[op] += 1  # the window MatMuls after it take its value as they dispatch: no drain
        elif op == _CONFIGURE:
            for e in range(_ENGINES):
                if state[_END + e] > start:
                    start, held = state[_END + e], state[_OWNER + e]
            if simd_end > start:
                start, held = simd_end, s_owner
            busy[op] += 1
        elif op == _MATMUL or op == _LOADWEIGHTS or op == _DATAMOVE:
            k = lw_count if op == _LOADWEIGHTS else count
            zeros = (op == _MATMUL and (fl & _MATMUL_ZEROES) != 0) or (
                op == _LOADWEIGHTS and (fl & _LOADWEIGHTS_ZEROES) != 0
            )
            to_dram = op == _DATAMOVE and fl < _ACC_TO_LOCAL and (fl & _TO_DRAM) != 0
            writes = op == _DATAMOVE and (fl == _ACC_TO_LOCAL or (fl < _ACC_TO_LOCAL and not to_dram))
            lo, hi = _local_range(a0, s0, columns[8, i], depth)
            banks = 0
            if op == _LOADWEIGHTS:
                eng = _W
            elif op == _DATAMOVE and fl < _ACC_TO_LOCAL:
                eng = (_D1W if to_dram else _D1R) if fl & _DRAM1 else (_D0W if to_dram else _D0R)
            else:
                eng = _C if op == _MATMUL else _O
                banks = _acc_banks(a1, s1, k, half)
            # The engine itself.
            if eng == _C:
                # A MatMul streams in right behind a MatMul; it waits for the accumulator engine only
                # where they would share an accumulator bank.
                if c_issued > start:
                    start, held = c_issued, state[_OWNER + _C]
                if banks & m_banks and state[_END + _O] > start:
                    start, held = state[_END + _O], state[_OWNER + _O]
                if banks & s_banks and simd_end > start:
                    start, held = simd_end, s_owner
            elif eng == _O:
                if state[_END + _O] > start:
                    start, held = state[_END + _O], state[_OWNER + _O]
                if simd_end > start:
                    start, held = simd_end, s_owner
                if banks & c_banks and state[_END + _C] > start:
                    start, held = state[_END + _C], state[_OWNER + _C]
                if banks & c_banks and start >= state[_END + _C]:
                    c_banks = 0
            elif state[_END + eng] > start:
                start, held = state[_END + eng], state[_OWNER + eng]
            if eng >= _D0R:
                # With one beat per vector, DRAM -> local moves of the two banks take turns.
                if bpv == 1 and writes:
                    other = _D1R if eng == _D0R else _D0R
                    if state[_END + other] > start:
                        start, held = state[_END + other], state[_OWNER + other]
                # A bank's reader and writer run side by side unless their DRAM ranges overlap.
                partner = eng + 1 if eng in (_D0R, _D1R) else eng - 1
                d_hi = a1 + (k - 1) * (1 << s1)
                if (
                    state[_END + partner] > start
                    and a1 <= state[_DRAM_HI + partner]
                    and state[_DRAM_LO + partner] <= d_hi
                ):
                    start, held = state[_END + partner], state[_OWNER + partner]
                state[_DRAM_LO + eng], state[_DRAM_HI + eng] = a1, d_hi
            # Local memory hazards with the other engines.
            if not zeros:
                for e in range(_ENGINES):
                    if (
                        e != eng
                        and state[_END + e] > start
                        and state[_HAS + e] != 0
                        and (writes or state[_WRITES + e] != 0)
                        and lo <= state[_HI + e]
                        and state[_LO + e] <= hi
                    ):
                        start, held = state[_END + e], state[_OWNER + e]
            # The engine's own timing.
            if op == _MATMUL:
                first = start  # its vectors start issuing the cycle after dispatch
                if lw_since_mm:
                    first = max(start, state[_END + _W] + swap)
                    swap_at = first
                    inactive_free = c_issued + n + set_free
                # (A window MatMul's last output takes its last taps in the array's first stages:
                # its writes end taps - 1 cycles before its stream's last vector would.)
                cost = k + n + mm - lw_count
                done = first + cost
                if state[_END + _O] > first and not zeros:
                    # A move beside MatMuls takes port B; a writer asking every cycle holds it off
                    # while both this MatMul issues and the writer reads.
                    for e in (_D0W, _D1W):
                        if state[_STREAM_PERIOD + e] == 1:
                            held_off = min(first + k, state[_STREAM_HI + e], state[_END + _O]) - max(
                                first, state[_STREAM_LO + e]
                            )
                            if held_off > 0:
                                state[_END + _O] += held_off
                                o_port_b_end += held_off
                                finish = max(finish, state[_END + _O])
                c_issued = first + k  # the next MatMul dispatches as this one issues its last vector
                # The banks of the MatMuls still in flight (a bank stays held BANK_HOLD cycles past
                # its MatMul's modelled end, when its last accumulator writes land), and its own.
                c_banks = (c_banks if state[_END + _C] + BANK_HOLD > start else 0) | banks
                lw_since_mm, mm_since_lw = False, True
            elif op == _LOADWEIGHTS:
                first = start
                if mm_since_lw:
                    first = max(start, swap_at + lw_after_swap, inactive_free)
                reads_end = _weight_reads(first, k, *_streams(state), rq, lw_end)
                lw_end = reads_end
                for e in (_D0W, _D1W):
                    # A writer asking every cycle waits for the load's reads (they go first).
                    if state[_STREAM_PERIOD + e] == 1:
                        taken = min(k, min(reads_end, state[_STREAM_HI + e]) - max(first, state[_STREAM_LO + e]))
                        if taken > 0:
                            state[_END + e] += taken
                            state[_STREAM_HI + e] += taken
                            finish = max(finish, state[_END + e])
                for e in (_D0R, _D1R):
                    period, stream_end = state[_STREAM_PERIOD + e], state[_STREAM_HI + e]
                    if period == 0 or state[_END + e] <= first:
                        continue
                    if stream_end <= first:
                        # Its stream is over but its queue still drains: the load's reads go first.
                        if held_stay and first < state[_END + e] - read:
                            state[_END + e] += reads_end - first
                            finish = max(finish, state[_END + e])
                    elif stream_end <= reads_end:
                        # Its responses end while the load reads: the last ones, below the urgent
                        # level, wait in its queue for the load's reads (with those left from the
                        # loads before: between loads the queue drains only as fast as the port is
                        # free of responses still arriving).
                        came = (stream_end - max(first, state[_STREAM_LO + e])) // period
                        if came > 0:
                            waiting = int(np.ceil(min(rq[e], RESPONSES_WAITING - 1.0)))
                            state[_END + e] = max(
                                state[_END + e], reads_end + max(waiting, min(came, RESPONSES_WAITING - 1)) + read
                            )
                            finish = max(finish, state[_END + e])
                    elif held_stay:
                        # Its responses go on after the load: those the load held back drain only as
                        # fast as the port is free of new ones (never, at one a cycle), so what is
                        # left of them at the stream's end drains after it.
                        left = rq[e] - (stream_end - reads_end) * (1.0 - 1.0 / period)
                        if left > 0:
                            state[_END + e] = max(state[_END + e], stream_end + int(np.ceil(left)) + read)
                            finish = max(finish, state[_END + e])
                done = reads_end + lw
                cost = done - first
                lw_since_mm, mm_since_lw = True, False
            elif eng == _O:
                # While MatMuls stream, a move shares port B with the DRAM engines (after them).
                done = start + k + move
                if c_issued > start:
                    done = max(
                        done,
                        _shared_port_reads(start, k, *_streams(state), _READERS | _WRITERS) + move,
                    )
                cost = done - start
                m_banks = banks
                o_port_b_end = done - move if c_issued > start else 0
            else:
                cost = _dram_cycles(k, to_dram, s1, bpv, rl, wl, max_reads, read, write)
                done = start + cost
                if writes:  # a reader: responses into local memory
                    state[_STREAM_LO + eng], state[_STREAM_HI + eng] = start + rl, done - read
                    state[_STREAM_PERIOD + eng] = bpv if s1 == 0 else max(bpv, (rl + bpv) // max_reads)
                else:  # a writer: local reads at the bus rate
                    state[_STREAM_LO + eng], state[_STREAM_HI + eng] = start, done - wl - write
                    state[_STREAM_PERIOD + eng] = bpv if s1 == 0 else max(bpv, 2)
                # This move's port-B accesses and another DRAM engine's share the port: where they
                # want more than one a cycle (only with one bus beat per vector), both streams stretch.
                for e in range(_D0R, _ENGINES):
                    if e == eng or state[_STREAM_PERIOD + e] == 0:
                        continue
                    window = min(state[_STREAM_HI + e], state[_STREAM_HI + eng]) - max(
                        state[_STREAM_LO + e], state[_STREAM_LO + eng]
                    )
                    if window <= 0:
                        continue
                    extra = int(window / state[_STREAM_PERIOD + e] + window / state[_STREAM_PERIOD + eng]) - window
                    if extra > 0:
                        state[_STREAM_HI + eng] += extra
                        done += extra
                        cost += extra
                        state[_STREAM_HI + e] += extra
                        state[_END + e] += extra
                        finish = max(finish, state[_END + e])
            if eng != _C and eng != _O and not zeros and o_port_b_end > start and state[_END + _O] > start:
                if eng == _W:
                    t0, per = first, 1
                else:
                    t0, per = state[_STREAM_LO + eng], state[_STREAM_PERIOD + eng]
                if per == 1 and to_dram:
                    # A writer asking every cycle: the move gets no port-B slot while it reads and
                    # MatMuls issue (without them the move goes through port A).
                    taken = max(0, min(state[_STREAM_HI + eng], c_issued) - t0) if o_port_b_end > t0 else 0
                else:
                    taken = min(k, max(0, (o_port_b_end - t0 + per - 1) // per))
                state[_END + _O] += taken
                o_port_b_end += taken
                finish = max(finish, state[_END + _O])
            state[_END + eng], state[_OWNER + eng] = done, me
            state[_HAS + eng], state[_LO + eng], state[_HI + eng], state[_WRITES + eng] = not zeros, lo, hi, writes
            busy[op] += cost
            finish = max(finish, done)
        else:
            busy[op] += 1
        if track:
            blame[held // nk, held % nk] += start - dispatch
        buffered = min(capacity, buffered + bb * (start - dispatch)) - ib
        dispatch = start
        finish = max(finish, start + 1)
    state[_DISPATCH], state[_FINISH], state[_SIMD_END], state[_S_OWNER] = dispatch, finish, simd_end, s_owner
    state[_LAST_SIMD_WRITE], state[_LAST_SIMD_TIME] = last_simd_write, last_simd_time
    state[_C_ISSUED] = c_issued
    state[_LW_SINCE_MM], state[_MM_SINCE_LW], state[_SWAP_AT] = lw_since_mm, mm_since_lw, swap_at
    state[_BUFFERED] = buffered
    state[_C_BANKS], state[_M_BANKS], state[_S_BANKS] = c_banks, m_banks, s_banks
    state[_O_PORT_B_END] = o_port_b_end
    for e in range(_ENGINES):
        state[_RQ + e] = np.int64(rq[e] * _RQ_UNIT)
    state[_LW_END] = lw_end
    state[_SET_FREE] = inactive_free


@numba.njit(cache=True, nogil=True, inline="always")
def _streams(state):
    """Each DRAM engine's last DRAM <-> local move: the cycles it uses local memory's port B (from,
    to, one per ``period`` cycles; period 0: none)."""
    return (
        state[_STREAM_LO : _STREAM_LO + _ENGINES],
        state[_STREAM_HI : _STREAM_HI + _ENGINES],
        state[_STREAM_PERIOD : _STREAM_PERIOD + _ENGINES],
    )


@numba.njit(cache=True, nogil=True, inline="always")
def _acc_banks(addr, stride, size, half):
    """The accumulator banks (bit k: bank k, the halves) a strided run touches (both if it wraps)."""
    end = addr + (size - 1) * (1 << stride)
    if end >= 2 * half:
        return 3
    return (1 if addr < half else 0) | (2 if end >= half else 0)


@numba.njit(cache=True, nogil=True)
def _weight_reads(first, k, lo, hi, period, rq, since):
    """When a LoadWeights' ``k`` reads from cycle ``first`` are done on port B. Its reads go first
    while each DRAM reader's responses (streams ``lo``..``hi``, one per ``period`` cycles) wait in
    its queue; once a queue holds ``RESPONSES_WAITING`` its responses take their share of the port
    (``_shared_port_reads``). Between loads (from ``since``) the queues drain a vector a cycle.
    Updates the queue levels ``rq``."""
    level = np.zeros(rq.shape[0])
    fill = float(k)  # reads at the full rate before some queue is urgent
    for e in range(rq.shape[0]):
        if (_READERS >> e) & 1 and period[e] != 0:
            gap = max(0.0, float(first - since))
            came = max(0.0, min(float(first), float(hi[e])) - max(float(since), float(lo[e]))) / period[e]
            # A drained queue under a stream: the load reads urgent-free for (period + 1) / 2
            # cycles fewer on average than from an empty queue (a response may have come just before).
            floor = (period[e] + 1.0) / (2.0 * period[e]) if lo[e] < first <= hi[e] else 0.0
            level[e] = max(floor, rq[e] + came - gap)
            # When the queue fills while the load reads (responses arrive from lo on, until hi).
            at = max(float(first), float(lo[e])) + (RESPONSES_WAITING - level[e]) * period[e]
            if at < float(hi[e]):
                fill = min(fill, max(0.0, at - first))
    if fill >= k:
        end = first + k
    else:
        start = int(np.floor(first + fill))
        end = _shared_port_reads(start, k - (start - first), lo, hi, period, _READERS)
    for e in range(rq.shape[0]):
        rq[e] = 0.0
        if (_READERS >> e) & 1 and period[e] != 0:
            came = max(0.0, min(float(end), float(hi[e])) - max(float(first), float(lo[e]))) / period[e]
            rq[e] = min(level[e] + came, float(RESPONSES_WAITING))
    return int(np.ceil(end))


@numba.njit(cache=True, nogil=True)
def _shared_port_reads(first, k, lo, hi, period, engines):
    """When ``k`` accesses from cycle ``first`` are done on local memory's port B, which the DRAM
    engines in the bit mask ``engines`` (streams ``lo``..``hi``, one access per ``period`` cycles)
    use first."""
    t = float(first)
    left = float(k)
    for _ in range(8):  # at most four stream edges
        busy = 0.0
        edge = 1e18
        for e in range(lo.shape[0]):
            if period[e] == 0 or not (engines >> e) & 1:
                continue
            if lo[e] <= t < hi[e]:
                busy += 1.0 / period[e]
                edge = min(edge, float(hi[e]))
            elif t < lo[e]:
                edge = min(edge, float(lo[e]))
        rate = 1.0 - min(busy, 1.0)
        if rate > 0.0 and t + left / rate <= edge:
            return int(np.ceil(t + left / rate))
        if edge >= 1e18:
            break
        left -= (edge - t) * rate
        t = edge
    return int(np.ceil(t + left))


@numba.njit(cache=True, nogil=True, inline="always")
def _local_range(addr, stride, size, depth):
    """The local memory addresses a strided run touches (all of it when it wraps)."""
    end = addr + (size - 1) * (1 << stride)
    if end >= depth:
        return 0, depth - 1
    return addr, end
