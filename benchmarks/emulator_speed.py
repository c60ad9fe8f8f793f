"""Emulator speed: instructions per second and ResNet-20 v2 per preset, against the reference model.

Three measurements, written to benchmarks/results/emulator_speed.json:

1. Instruction mix: a program of 10^6 instructions shaped like compiled convolution tiles (per
   40 instructions: 2 DRAM loads, a LoadWeights, 2 MatMuls of 32 vectors, 33 SIMD for a ReLU,
   2 stores), random data. Steady state (the program already decoded and validated once, the
   kernel compiled), best of ``--repeats``; the reference model runs a tenth of the program.
2. ResNet-20 v2 (``zoo.resnet20v2``, random weights), one inference through the compiled
   executable, per preset: steady state (best of ``--repeats``) on the emulator and one run on
   the reference.
3. The first call in a fresh process (ResNet-20 v2, pynqz1): with an empty numba cache (the
   kernel is compiled) and again with the cache that run left (machine code loaded from disk).
   "extra" is that first call minus the same process's steady state.

    python benchmarks/emulator_speed.py [--arch pynqz1 ultra96v2 ...] [--repeats 5]

Run it alone: the machine has 2 cores and other work changes the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import machine

sys.path.insert(0, str(Path(__file__).parent / "models"))

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


def instruction_mix(arch_name: str, instructions: int, repeats: int) -> dict:
    from tvm_tensil.arch import load_arch
    from tvm_tensil.isa import Program, assemble
    from tvm_tensil.isa.layout import layout_of
    from tvm_tensil.runtime import Emulator, ReferenceEmulator

    arch = load_arch(arch_name)
    block = layer_block(arch.array_size, 32)
    tile = assemble(block, layout_of(arch))
    per_block = len(block.splitlines())
    program = Program(tile.data * max(1, instructions // per_block), layout_of(arch))
    short = Program(tile.data * max(1, instructions // per_block // 10), layout_of(arch))
    rng = np.random.default_rng(0)
    row = {"arch": arch_name, "instructions": len(program)}
    for device, prog, runs in ((Emulator(arch), program, repeats + 1), (ReferenceEmulator(arch), short, 1)):
        device.write_dram(0, 0x1000, rng.integers(-512, 512, (32, arch.array_size)))
        device.write_dram(1, 0, rng.integers(-64, 64, (arch.array_size + 1, arch.array_size)))
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            device.execute(prog)
            times.append(time.perf_counter() - t0)
        best = min(times[1:]) if runs > 1 else times[0]  # the emulator's first run decodes and validates
        row[f"{device.name}_instructions_per_second"] = round(len(prog) / best)
    row["speedup"] = round(row["emulator_instructions_per_second"] / row["reference_instructions_per_second"], 1)
    return row


def resnet20(arch_name: str, repeats: int) -> dict:
    import tvm
    import zoo
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    import tvm_tensil

    mod = from_onnx(zoo.resnet20v2(softmax=False), keep_params_in_input=False)
    x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32"))
    ex = tvm_tensil.build(mod, target="tensil", arch=arch_name)
    report = ex.tensil_report
    vm = relax.VirtualMachine(ex, tvm.cpu())
    row = {"arch": arch_name, "instructions": sum(p["instructions"] for p in report.partitions.values())}
    for device, runs in (("emulator", repeats + 1), ("reference", 1)):
        with tvm_tensil.device(device):
            times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                vm["main"](x).numpy()
                times.append(time.perf_counter() - t0)
        first, best = times[0], min(times[1:]) if runs > 1 else times[0]
        row[f"{device}_ms"] = round(1e3 * best, 1)
        if device == "emulator":
            row["emulator_first_call_ms"] = round(1e3 * first, 1)
    row["speedup"] = round(row["reference_ms"] / row["emulator_ms"], 1)
    return row


FIRST_CALL = """
import json, sys
sys.path.insert(0, {bench!r})
from emulator_speed import resnet20
row = resnet20("pynqz1", 3)
print(json.dumps(row))
"""


def first_call(cache_dir: str) -> dict:
    """ResNet-20 v2 on pynqz1 in a fresh process with NUMBA_CACHE_DIR = ``cache_dir``."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    code = FIRST_CALL.format(bench=str(Path(__file__).parent))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    return {
        "first_call_ms": row["emulator_first_call_ms"],
        "steady_ms": row["emulator_ms"],
        "extra_ms": round(row["emulator_first_call_ms"] - row["emulator_ms"], 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", nargs="*", default=["pynqz1", "pynqz1_12x12", "ultra96v2", "zcu104"])
    p.add_argument("--instructions", type=int, default=1_000_000)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()

    import numba

    mix = [instruction_mix(a, args.instructions, args.repeats) for a in args.arch]
    for row in mix:
        print(json.dumps(row))
    nets = [resnet20(a, args.repeats) for a in args.arch]
    for row in nets:
        print(json.dumps(row))
    with tempfile.TemporaryDirectory() as cache:
        jit = {"cold_cache": first_call(cache), "warm_cache": first_call(cache)}
    print(json.dumps(jit))
    result = {
        "instruction_mix": mix,
        "resnet20v2": nets,
        "first_call_resnet20v2_pynqz1": jit,
        "machine": f"{machine.describe()}, numpy {np.__version__}, numba {numba.__version__}",
        "date": time.strftime("%Y-%m-%d"),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
