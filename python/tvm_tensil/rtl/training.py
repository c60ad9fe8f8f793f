"""The workload the simulation library is trained on (profile-guided optimisation in ``rtl.sim.build``).

The Verilated core is one very large function per clock edge; which of its branches are hot decides
how the C++ compiler lays it out, and an instrumented run tells it. The program here keeps every engine
busy the way compiled models do: weights DRAM1 -> local, feature vectors DRAM0 -> local, LoadWeights
beside the MatMuls of the previous block, MatMul runs (plain and accumulating) into alternating
accumulator halves, one ReLU per vector (SIMD), gathers (accumulators -> local) and stores (local ->
DRAM0). Values are small random numbers, so saturation is as rare as in a model.

Run in a subprocess by the build (the instrumented library writes its profile when the process exits):

    python -m tvm_tensil.rtl.training LIBRARY ARCH_JSON
"""

from __future__ import annotations

import json
import sys

import numpy as np

from ..arch import Architecture
from ..isa.instructions import SIMD, DataMove, Direction, LoadWeights, MatMul, SIMDOp
from ..isa.layout import layout_of
from ..isa.program import Program

ROUNDS = 64  # about 72 k cycles on pynqz1: a fraction of a second
TAPS = 4


def program(arch: Architecture, rounds: int = ROUNDS, taps: int = TAPS) -> Program:
    """``rounds`` conv-like output blocks of ``taps`` accumulating MatMuls each, for ``arch`` (every
    address within its memories)."""
    n = arch.array_size
    run = max(1, min(128, arch.accumulator_depth // 2, arch.local_depth // 4, arch.dram0_depth // 2))
    rows = n + 1
    taps = max(1, min(taps, arch.local_depth // (4 * rows), arch.dram1_depth // rows))
    weights, inputs, outputs = 0, arch.local_depth // 4, arch.local_depth // 2
    relu_zero = 1 if arch.simd_registers_depth else 0  # register 1 is zero after reset
    relu = SIMDOp.MAX if relu_zero else SIMDOp.MOVE
    code = []
    for r in range(rounds):
        acc = (r % 2) * (arch.accumulator_depth // 2)
        code += [
            DataMove(Direction.DRAM1_TO_LOCAL, weights, 0, taps * rows),
            DataMove(Direction.DRAM0_TO_LOCAL, inputs, 0, run),
        ]
        for t in range(taps):
            code += [LoadWeights(weights + t * rows, rows), MatMul(inputs, acc, run, accumulate=t > 0)]
        for i in range(run):
            code.append(SIMD(relu, left=0, right=relu_zero, acc_read=acc + i, acc_write=acc + i, read=True, write=True))
        code += [
            DataMove(Direction.ACC_TO_LOCAL, outputs, acc, run),
            DataMove(Direction.LOCAL_TO_DRAM0, outputs, run, run),
        ]
    return Program.from_instructions(code, layout_of(arch), name="training")


def run(library: str, arch: Architecture) -> int:
    """Run the training program on the harness ``library``; the cycles it took."""
    from ..runtime.verilator import Verilator

    dev = Verilator(arch, library=library)
    rng = np.random.default_rng(0)
    dt = arch.data_type
    for bank, depth in ((0, min(arch.dram0_depth, 4096)), (1, min(arch.dram1_depth, 4096))):
        dev.write_dram(bank, 0, dt.from_float(rng.uniform(-1, 1, (depth, arch.array_size))))
    stats = dev.execute(program(arch))
    dev.close()
    return stats.cycles


def main(argv: list[str] | None = None) -> None:
    library, arch_json = argv if argv is not None else sys.argv[1:]
    run(library, Architecture.from_dict(json.loads(arch_json)))


if __name__ == "__main__":
    main()
