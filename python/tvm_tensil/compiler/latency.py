"""The latency model: estimated cycles per instruction, in one place.

Estimates, not measurements: the RTL device (issue 5) will calibrate these constants
against measured cycles. The model, per instruction of ``size`` vectors:

- MatMul: ``size + N`` cycles (one vector per cycle once the array is full, plus the fill).
- LoadWeights: ``size`` cycles (one vector per cycle).
- SIMD: 1 cycle.
- DataMove local <-> accumulators: ``size`` cycles.
- DataMove local <-> DRAM: ``DRAM_LATENCY`` cycles to the first beat, then
  ``size * vector_bytes / (axi_data_width / 8)`` beats, plus ``DRAM_LATENCY`` again for every
  run that a stride breaks into separate bursts (a strided run moves one vector per burst).
- NoOp, Configure: 1 cycle.

Instructions do not overlap in this model (the spec's program order, executed one at a
time), so the total is a sum: an upper bound for a core that overlaps DRAM traffic.
"""

from __future__ import annotations

import numpy as np

from ..arch import Architecture
from ..isa.instructions import Opcode
from ..isa.program import Program

DRAM_LATENCY = 32  # cycles from an AXI read request to its first beat (a documented default)
DEFAULT_AXI_BITS = 64


def estimate_cycles(program: Program, arch: Architecture) -> dict[str, int]:
    """Estimated cycles per opcode name and in total."""
    f = program.fields()
    op = f.opcode
    size = f.operand2 + 1
    n = arch.array_size
    beats_per_vector = max(1, arch.vector_bytes * 8 // (arch.axi_data_width or DEFAULT_AXI_BITS))
    cycles = np.ones(len(op), dtype=np.int64)
    mm = op == Opcode.MATMUL
    cycles[mm] = size[mm] + n
    lw = op == Opcode.LOADWEIGHTS
    cycles[lw] = f.raw1[lw] + 1
    dm = op == Opcode.DATAMOVE
    dram = dm & (f.flags <= 3)
    onchip = dm & ~dram
    cycles[onchip] = size[onchip]
    # A run whose DRAM stride is not 1 is one burst per vector.
    bursts = np.where(f.stride1 > 0, size, 1)
    cycles[dram] = (bursts * DRAM_LATENCY + size * beats_per_vector)[dram]
    names = {int(o): o.name.lower() for o in Opcode}
    per = {names[k]: int(cycles[op == k].sum()) for k in names if np.any(op == k)}
    per["total"] = int(cycles.sum())
    return per
