"""Emulator speed: instructions per second on a program of 10^6 instructions.

The program is a realistic mix, the shape a compiled convolution layer takes: DRAM loads,
LoadWeights, MatMuls over runs of vectors, a SIMD ReLU per vector, stores. It is repeated
until it reaches the requested length. Results go to benchmarks/results/emulator_speed.json.

    python benchmarks/emulator_speed.py [--instructions 1000000] [--arch pynqz1]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from tvm_tensil.arch import load_arch
from tvm_tensil.isa import Program, assemble
from tvm_tensil.runtime import Emulator

RESULTS = Path(__file__).parent / "results" / "emulator_speed.json"


def layer_block(n: int, vectors: int) -> str:
    """One tile: load inputs and weights, matmul, ReLU each vector, store."""
    lines = [
        f"datamove dram0_to_local local=0x100 dram0=0x1000 size={vectors}",
        f"datamove dram1_to_local local=0 dram1=0 size={n + 1}",
        f"loadweights local=0 size={n + 1}",
        f"matmul local=0x100 acc=0 size={vectors}",
        f"matmul accumulate local=0x100 acc=0 size={vectors}",
        "simd zero dest=r1",
    ]
    lines += [f"simd max read write dest=out left=in right=r1 acc_write={i} acc_read={i}" for i in range(vectors)]
    lines += [
        f"datamove acc_to_local local=0x400 acc=0 size={vectors}",
        f"datamove local_to_dram0 local=0x400 dram0=0x2000 size={vectors}",
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--instructions", type=int, default=1_000_000)
    p.add_argument("--arch", default="pynqz1")
    p.add_argument("--vectors", type=int, default=32, help="vectors per tile")
    args = p.parse_args()

    arch = load_arch(args.arch)
    block = layer_block(arch.array_size, args.vectors)
    per_block = len(block.splitlines())
    tile = assemble(block, arch.layout)
    program = Program(tile.data * max(1, args.instructions // per_block), arch.layout)

    emu = Emulator(arch)
    rng = np.random.default_rng(0)
    emu.write_dram(0, 0x1000, rng.integers(-512, 512, (args.vectors, arch.array_size)))
    emu.write_dram(1, 0, rng.integers(-64, 64, (arch.array_size + 1, arch.array_size)))
    t0 = time.perf_counter()
    stats = emu.execute(program)
    seconds = time.perf_counter() - t0
    result = {
        "arch": arch.name,
        "instructions": len(program),
        "vectors_per_tile": args.vectors,
        "seconds": round(seconds, 3),
        "instructions_per_second": round(len(program) / seconds),
        "per_opcode": {k: v for k, v in stats.per_opcode.items() if v},
        "machine": f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}, numpy {np.__version__}",
        "date": time.strftime("%Y-%m-%d"),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
