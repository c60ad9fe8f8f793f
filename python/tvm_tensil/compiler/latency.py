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
  a MatMul right after a MatMul starts once the earlier one has issued its vectors (``size + 1``);
- SIMD: one per cycle behind the compute engine; a SIMD reading what the previous one wrote waits
  for it (``simd_dependent`` cycles);
- DRAM -> local, DRAM stride 1: ``read_latency + size * B + read``; with a larger stride every vector
  is its own burst and at most ``max_reads`` are in flight: ``read_latency + size * max(B,
  (read_latency + 2) / max_reads) + read``;
- local -> DRAM: ``size * B + write_latency + write``;
- Configure waits for everything to finish; NoOp costs its dispatch cycle.
"""

from __future__ import annotations

import numpy as np

from ..arch import MEMORY_TIMING, Architecture
from ..isa.instructions import Opcode
from ..isa.program import Program

# Fixed overheads in cycles, fitted by benchmarks/calibrate_latency.py (results/latency_calibration.json).
COSTS = {"mm": 7, "lw": 4, "move": 6, "simd_drain": 5, "simd_dependent": 5, "read": 5, "write": 7}
DEFAULT_AXI_BITS = 64


def estimate_cycles(program: Program, arch: Architecture, timing: dict | None = None) -> dict[str, int]:
    """Estimated cycles: busy cycles per opcode name, and ``total`` (the program's latency)."""
    t = dict(MEMORY_TIMING, **(timing or {}))
    rl, wl, max_reads = t["read_latency"], t["write_latency"], t["max_reads"]
    f = program.fields()
    n = arch.array_size
    bpv = max(1, arch.vector_bytes * 8 // (arch.axi_data_width or DEFAULT_AXI_BITS))
    depth = arch.local_depth
    c = COSTS
    ops, flags = f.opcode.tolist(), f.flags.tolist()
    size = (f.operand2 + 1).tolist()
    lw_size = (f.raw1 + 1).tolist()
    a0, s0, a1, s1 = f.addr0.tolist(), f.stride0.tolist(), f.addr1.tolist(), f.stride1.tolist()
    busy = {o.name.lower(): 0 for o in Opcode}

    dispatch = 0  # cycle at which the previous instruction dispatched
    c_end = d_end = simd_end = 0
    c_issued, c_was_mm = 0, False  # when the compute engine's last instruction issued its last vector
    c_range = d_range = None  # (lo, hi, writes) of each engine's last instruction
    last_simd_write, last_simd_time = -1, -10
    finish = 0

    def conflicts(r, other):
        return other is not None and (r[2] or other[2]) and r[0] <= other[1] and other[0] <= r[1]

    for i, op in enumerate(ops):
        ready = dispatch + 1
        fl = flags[i]
        if op == Opcode.SIMD:
            start = max(ready, c_end)
            if fl & 1 and a1[i] == last_simd_write and start - last_simd_time < c["simd_dependent"]:
                start = last_simd_time + c["simd_dependent"]
            last_simd_write = a0[i] if fl & 2 else -1
            last_simd_time = start
            simd_end = start + c["simd_drain"]
            busy["simd"] += 1
            finish = max(finish, simd_end)
        elif op in (Opcode.MATMUL, Opcode.LOADWEIGHTS) or (op == Opcode.DATAMOVE and fl >= 12):
            k = lw_size[i] if op == Opcode.LOADWEIGHTS else size[i]
            zeros = (op == Opcode.MATMUL and fl & 2) or (op == Opcode.LOADWEIGHTS and fl & 1)
            r = _range(a0[i], s0[i], k, depth, writes=op == Opcode.DATAMOVE and fl == 12)
            # A MatMul streams in right behind a MatMul; anything else waits for the array to drain.
            follows = op == Opcode.MATMUL and c_was_mm
            start = max(ready, c_issued if follows else c_end, simd_end)
            if not zeros and d_end > start and conflicts(r, d_range):
                start = d_end
            cost = k + (n + c["mm"] if op == Opcode.MATMUL else c["lw"] if op == Opcode.LOADWEIGHTS else c["move"])
            c_end, c_range = start + cost, (None if zeros else r)
            c_issued, c_was_mm = start + k + 1, op == Opcode.MATMUL
            busy[Opcode(op).name.lower()] += cost
            finish = max(finish, c_end)
        elif op == Opcode.DATAMOVE:
            k = size[i]
            to_dram = fl & 1
            r = _range(a0[i], s0[i], k, depth, writes=not to_dram)
            start = max(ready, d_end)
            if c_end > start and c_range is not None and conflicts(r, c_range):
                start = c_end
            if to_dram:
                cost = k * bpv + wl + c["write"]
            elif s1[i] == 0:
                cost = rl + k * bpv + c["read"]
            else:
                cost = rl + int(k * max(bpv, (rl + 2) / max_reads)) + c["read"]
            d_end, d_range = start + cost, r
            busy["datamove"] += cost
            finish = max(finish, d_end)
        elif op == Opcode.CONFIGURE:
            start = max(ready, c_end, d_end, simd_end)
            busy["configure"] += 1
        else:
            start = ready
            busy[Opcode(op).name.lower()] += 1
        dispatch = start
        finish = max(finish, start + 1)
    out = {k: v for k, v in busy.items() if v}
    out["total"] = int(finish)
    return out


def _range(addr: int, stride: int, size: int, depth: int, writes: bool):
    end = addr + (size - 1) * (1 << stride)
    return (0, depth - 1, writes) if end >= depth else (addr, end, writes)

