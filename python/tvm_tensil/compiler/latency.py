"""The latency model: estimated cycles of a program on the RTL core, in one place.

It follows the core's execution rule (docs/rtl.md): instructions dispatch in order, at most one
per cycle, onto a compute engine (MatMul, LoadWeights, DataMove local <-> accumulators; SIMD
beside it) and a DRAM engine (DataMove DRAM <-> local), each running one instruction at a time;
an instruction also waits for the other engine's instruction when their local memory ranges
overlap and one of them writes. The total is when the last instruction finishes.

Per instruction of ``size`` vectors (N = array size, B = AXI beats per vector, memory timing from
``arch.MEMORY_TIMING``), calibrated against the Verilated core by ``benchmarks/calibrate_latency.py``
(constants in ``COSTS``):

- MatMul ``size + N + mm``, LoadWeights ``size + lw``, local <-> accumulators ``size + move``;
  a MatMul or LoadWeights right after a MatMul or LoadWeights starts once the earlier one has issued
  its vectors (``size + 1``; the array's second weight set takes the load), a LoadWeights after a
  MatMul one cycle later (``lw_after_mm``: the MatMul's last vectors enter the array first);
- SIMD: one per cycle behind the compute engine; a SIMD reading what the previous one wrote waits
  for it (``simd_dependent`` cycles);
- DRAM -> local, DRAM stride 1: ``read_latency + size * B + read``; with a larger stride every vector
  is its own burst and at most ``max_reads`` are in flight: ``read_latency + size * max(B,
  (read_latency + 2) / max_reads) + read``;
- local -> DRAM: ``size * B + write_latency + write``;
- Configure waits for everything to finish; NoOp costs its dispatch cycle.

``critical_path`` splits the total into what held the in-order dispatch up: each instruction's own
dispatch cycle, and every wait charged to the instruction waited for (by kind, and by the
compiler's node that emitted it). The parts sum to the total.
"""

from __future__ import annotations

import numba
import numpy as np

from ..arch import MEMORY_TIMING, Architecture
from ..isa.instructions import Direction, Opcode
from ..isa.program import Program

# Fixed overheads in cycles, fitted by benchmarks/calibrate_latency.py (results/latency_calibration.json).
COSTS = {"mm": 7, "lw": 4, "move": 6, "simd_drain": 5, "simd_dependent": 5, "read": 5, "write": 7, "lw_after_mm": 1}
DEFAULT_AXI_BITS = 64


_SIMD, _MATMUL, _LOADWEIGHTS = int(Opcode.SIMD), int(Opcode.MATMUL), int(Opcode.LOADWEIGHTS)
_DATAMOVE, _CONFIGURE = int(Opcode.DATAMOVE), int(Opcode.CONFIGURE)
_ACC_TO_LOCAL = int(Direction.ACC_TO_LOCAL)


# What an instruction is, for the critical-path split: ``KINDS[_KIND_OF[opcode, flags]]``.
KINDS = ("matmul", "load_weights", "dram0_to_local", "local_to_dram0", "dram1_to_local", "local_to_dram1",
         "acc_to_local", "local_to_acc", "simd", "other")
_KIND_OF = np.full((16, 16), KINDS.index("other"), dtype=np.int64)
_KIND_OF[_MATMUL, :] = KINDS.index("matmul")
_KIND_OF[_LOADWEIGHTS, :] = KINDS.index("load_weights")
_KIND_OF[_SIMD, :] = KINDS.index("simd")
for _d in Direction:
    _KIND_OF[_DATAMOVE, int(_d)] = KINDS.index(
        "local_to_acc" if _d == Direction.LOCAL_TO_ACC_ACCUMULATE else _d.name.lower())
del _d


def estimate_cycles(program: Program, arch: Architecture, timing: dict | None = None) -> dict[str, int]:
    """Estimated cycles: busy cycles per opcode name, and ``total`` (the program's latency)."""
    busy, state, _ = _run(program, arch, timing, None, 0)
    return _cycles(busy, state)


def critical_path(program: Program, arch: Architecture, node_starts=(), timing: dict | None = None) -> dict:
    """The total split by what held dispatch up: ``{"total", "by_kind": {kind: cycles},
    "by_node": [{kind: cycles}, ...], "cycles": estimate_cycles' figures}``, where node ``k`` emitted
    the instructions from ``node_starts[k]`` up to the next start (instructions before the first
    start count as node 0)."""
    starts = np.asarray(node_starts, dtype=np.int64)
    nodes = max(1, starts.size)
    busy, state, blame = _run(program, arch, timing, starts, nodes)
    by_node = [{KINDS[k]: int(blame[i, k]) for k in range(len(KINDS)) if blame[i, k]} for i in range(nodes)]
    totals = blame.sum(axis=0)
    return {"total": int(state[_FINISH]),
            "by_kind": {KINDS[k]: int(totals[k]) for k in range(len(KINDS)) if totals[k]},
            "by_node": by_node, "cycles": _cycles(busy, state)}


def _cycles(busy: np.ndarray, state: np.ndarray) -> dict[str, int]:
    out = {op.name.lower(): int(busy[int(op)]) for op in Opcode if busy[int(op)]}
    out["total"] = int(state[_FINISH])
    return out


def _run(program: Program, arch: Architecture, timing, node_starts, nodes: int):
    t = dict(MEMORY_TIMING, **(timing or {}))
    bpv = beats_per_vector(arch)
    c = COSTS
    busy = np.zeros(16, dtype=np.int64)
    state = np.zeros(_STATE_SIZE, dtype=np.int64)
    state[_LAST_SIMD_WRITE], state[_LAST_SIMD_TIME] = -1, -10
    blame = np.zeros((nodes, len(KINDS)), dtype=np.int64)
    for start, f in program.chunks():  # a huge program is never decoded whole
        if node_starts is None:
            node = np.zeros(0, dtype=np.int64)
        else:
            pcs = np.arange(start, start + f.opcode.shape[0])
            node = np.maximum(np.searchsorted(node_starts, pcs, side="right") - 1, 0)
        _simulate(f.opcode, f.flags, f.operand2 + 1, f.raw1 + 1, f.addr0, f.stride0, f.addr1, f.stride1,
                  busy, state, arch.array_size, bpv, arch.local_depth, t["read_latency"], t["write_latency"],
                  t["max_reads"], c["mm"], c["lw"], c["move"], c["simd_drain"], c["simd_dependent"],
                  c["read"], c["write"], c["lw_after_mm"], node, _KIND_OF, blame)
    if node_starts is not None:  # the tail after the last dispatch: whichever engine ends last
        end = max(state[_C_END], state[_D_END], state[_SIMD_END])
        owner = _D_OWNER if state[_D_END] == end else _S_OWNER if state[_SIMD_END] == end else _C_OWNER
        tail = state[_FINISH] - state[_DISPATCH]
        blame[state[owner] // len(KINDS), state[owner] % len(KINDS)] += tail
    return busy, state, blame


def beats_per_vector(arch: Architecture) -> int:
    return max(1, arch.vector_bytes * 8 // (arch.axi_data_width or DEFAULT_AXI_BITS))


def dram_move_cycles(arch: Architecture, direction: Direction, size: int) -> int:
    """Estimated cycles of one contiguous DRAM <-> local DataMove (what the scheduler paces by)."""
    t, c = MEMORY_TIMING, COSTS
    return int(_dram_cycles(size, int(direction) & 1, 0, beats_per_vector(arch), t["read_latency"],
                            t["write_latency"], t["max_reads"], c["read"], c["write"]))


@numba.njit(cache=True, nogil=True)
def _dram_cycles(k, to_dram, dram_stride, bpv, rl, wl, max_reads, read, write):
    """A DataMove of ``k`` vectors: a write is one burst; a read is one burst at stride 1, else every
    vector is its own burst with at most ``max_reads`` in flight."""
    if to_dram:
        return k * bpv + wl + write
    if dram_stride == 0:
        return rl + k * bpv + read
    return rl + int(k * max(bpv, (rl + 2) / max_reads)) + read


# The simulation's state between chunks of a program: indices into one int64 array.
(_DISPATCH, _C_END, _D_END, _SIMD_END, _C_ISSUED, _C_STREAM, _C_HAS, _C_LO, _C_HI, _C_WRITES, _D_HAS, _D_LO,
 _D_HI, _D_WRITES, _LAST_SIMD_WRITE, _LAST_SIMD_TIME, _FINISH, _C_OWNER, _D_OWNER, _S_OWNER) = range(20)
_STATE_SIZE = 20
_STREAM_MM, _STREAM_LW = 1, 2
@numba.njit(cache=True, nogil=True)
def _simulate(ops, flags, size, lw_size, a0, s0, a1, s1, busy, state, n, bpv, depth, rl, wl, max_reads,
              mm, lw, move, simd_drain, simd_dependent, read, write, lw_after_mm, node, kind_of, blame):
    """The dispatch rule above, one instruction at a time, from and back to ``state``; adds each
    opcode's busy cycles to ``busy``. With ``node`` (each instruction's node), charges every cycle
    dispatch advances to ``blame[node, kind_of[opcode, flags]]`` of the instruction that held it up."""
    track = node.shape[0] > 0
    nk = blame.shape[1]
    # (node * kinds + kind) of each engine's last instruction: whom a wait for that engine is charged to.
    c_owner, d_owner, s_owner = state[_C_OWNER], state[_D_OWNER], state[_S_OWNER]
    dispatch = state[_DISPATCH]  # cycle at which the previous instruction dispatched
    c_end, d_end, simd_end = state[_C_END], state[_D_END], state[_SIMD_END]
    # When the compute engine's last instruction issued its last vector, and what it was (a MatMul,
    # a LoadWeights: _STREAM_MM, _STREAM_LW; else 0).
    c_issued, c_stream = state[_C_ISSUED], state[_C_STREAM]
    # Local memory range (lo, hi, writes) of each engine's last instruction, if it has one.
    c_has, c_lo, c_hi, c_writes = state[_C_HAS] != 0, state[_C_LO], state[_C_HI], state[_C_WRITES] != 0
    d_has, d_lo, d_hi, d_writes = state[_D_HAS] != 0, state[_D_LO], state[_D_HI], state[_D_WRITES] != 0
    last_simd_write, last_simd_time = state[_LAST_SIMD_WRITE], state[_LAST_SIMD_TIME]
    finish = state[_FINISH]
    for i in range(ops.shape[0]):
        ready = dispatch + 1
        op = ops[i]
        fl = flags[i]
        me = node[i] * nk + kind_of[op, fl] if track else 0
        held = me  # whom the cycles from the previous dispatch to this one are charged to
        if op == _SIMD:
            start = ready
            if c_end > start:
                start, held = c_end, c_owner
            if fl & 1 and a1[i] == last_simd_write and start - last_simd_time < simd_dependent:
                start, held = last_simd_time + simd_dependent, s_owner
            s_owner = me
            last_simd_write = a0[i] if fl & 2 else -1
            last_simd_time = start
            simd_end = start + simd_drain
            busy[op] += 1
            finish = max(finish, simd_end)
        elif op == _MATMUL or op == _LOADWEIGHTS or (op == _DATAMOVE and fl >= _ACC_TO_LOCAL):
            k = lw_size[i] if op == _LOADWEIGHTS else size[i]
            zeros = (op == _MATMUL and (fl & 2) != 0) or (op == _LOADWEIGHTS and (fl & 1) != 0)
            writes = op == _DATAMOVE and fl == _ACC_TO_LOCAL
            lo, hi = _local_range(a0[i], s0[i], k, depth)
            # A MatMul or LoadWeights streams in right behind either; anything else waits for the
            # array to drain.
            streams = op == _MATMUL or op == _LOADWEIGHTS
            follows = streams and c_stream != 0
            after = c_end
            if follows:
                after = c_issued + (lw_after_mm if op == _LOADWEIGHTS and c_stream == _STREAM_MM else 0)
            start = ready
            if after > start:
                start, held = after, c_owner
            if simd_end > start:
                start, held = simd_end, s_owner
            if (not zeros and d_end > start and d_has and (writes or d_writes)
                    and lo <= d_hi and d_lo <= hi):
                start, held = d_end, d_owner
            c_owner = me
            cost = k + (n + mm if op == _MATMUL else lw if op == _LOADWEIGHTS else move)
            c_end = start + cost
            c_has, c_lo, c_hi, c_writes = not zeros, lo, hi, writes
            c_issued = start + k + 1
            c_stream = _STREAM_MM if op == _MATMUL else _STREAM_LW if op == _LOADWEIGHTS else 0
            busy[op] += cost
            finish = max(finish, c_end)
        elif op == _DATAMOVE:
            k = size[i]
            to_dram = (fl & 1) != 0
            writes = not to_dram
            lo, hi = _local_range(a0[i], s0[i], k, depth)
            start = ready
            if d_end > start:
                start, held = d_end, d_owner
            if c_end > start and c_has and (writes or c_writes) and lo <= c_hi and c_lo <= hi:
                start, held = c_end, c_owner
            d_owner = me
            cost = _dram_cycles(k, to_dram, s1[i], bpv, rl, wl, max_reads, read, write)
            d_end = start + cost
            d_has, d_lo, d_hi, d_writes = True, lo, hi, writes
            busy[op] += cost
            finish = max(finish, d_end)
        elif op == _CONFIGURE:
            start = ready
            for end, owner in ((c_end, c_owner), (d_end, d_owner), (simd_end, s_owner)):
                if end > start:
                    start, held = end, owner
            busy[op] += 1
        else:
            start = ready
            busy[op] += 1
        if track:
            blame[held // nk, held % nk] += start - dispatch
        dispatch = start
        finish = max(finish, start + 1)
    state[_DISPATCH], state[_C_END], state[_D_END], state[_SIMD_END] = dispatch, c_end, d_end, simd_end
    state[_C_ISSUED], state[_C_STREAM] = c_issued, c_stream
    state[_C_HAS], state[_C_LO], state[_C_HI], state[_C_WRITES] = c_has, c_lo, c_hi, c_writes
    state[_D_HAS], state[_D_LO], state[_D_HI], state[_D_WRITES] = d_has, d_lo, d_hi, d_writes
    state[_LAST_SIMD_WRITE], state[_LAST_SIMD_TIME], state[_FINISH] = last_simd_write, last_simd_time, finish
    state[_C_OWNER], state[_D_OWNER], state[_S_OWNER] = c_owner, d_owner, s_owner


@numba.njit(cache=True, nogil=True, inline="always")
def _local_range(addr, stride, size, depth):
    """The local memory addresses a strided run touches (all of it when it wraps)."""
    end = addr + (size - 1) * (1 << stride)
    if end >= depth:
        return 0, depth - 1
    return addr, end
