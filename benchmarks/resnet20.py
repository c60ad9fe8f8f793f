"""ResNet-20 v2 through tvm_tensil: compile time, instructions, estimated cycles, emulator time.

    python benchmarks/resnet20.py [--arch pynqz1 ...]

Writes benchmarks/results/resnet20.json. Cycles come from the compiler's latency model
(compiler/latency.py: no overlap between instructions), not from hardware; the published
Tensil figures (21 / 14 / 4 ms on the three benchmark boards) are listed beside them.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent / "models"))
import tvm  # noqa: E402
from tvm import relax  # noqa: E402
from tvm.relax.frontend.onnx import from_onnx  # noqa: E402

import tvm_tensil  # noqa: E402
import zoo  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "resnet20.json"
PUBLISHED_MS = {"arty_a7_35": 21, "pynqz1_12x12": 14, "ultra96v2_300mhz": 4}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", nargs="*", default=["pynqz1", "arty_a7_35", "pynqz1_12x12", "ultra96v2_300mhz"])
    p.add_argument("--runs", type=int, default=2, help="emulator runs to time")
    args = p.parse_args()

    model = zoo.resnet20v2()
    macs = zoo.count_macs(model)
    mod = from_onnx(model, keep_params_in_input=False)
    x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32"))
    results = []
    for name in args.arch:
        arch = tvm_tensil.load_arch(name)
        t0 = time.perf_counter()
        ex = tvm_tensil.build(mod, target="tensil", arch=arch)
        compile_s = time.perf_counter() - t0
        report = tvm_tensil.last_report()
        vm = relax.VirtualMachine(ex, tvm.cpu())
        vm["main"](x)  # first run also packs the weights
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            vm["main"](x)
            times.append(time.perf_counter() - t0)
        cycles = report.total_cycles
        row = {
            "arch": name,
            "array": f"{arch.array_size}x{arch.array_size}",
            "clock_mhz": arch.clock_mhz,
            "compile_seconds": round(compile_s, 2),
            "instructions": sum(p["instructions"] for p in report.partitions.values()),
            "estimated_cycles": cycles,
            "estimated_ms": round(cycles / (arch.clock_mhz * 1e3), 3) if arch.clock_mhz else None,
            "mac_bound_cycles": macs // (arch.array_size ** 2),
            "published_ms": PUBLISHED_MS.get(name),
            "emulator_seconds": round(min(times), 2),
            "cpu_ops": [o["op"] for o in report.cpu_ops],
        }
        results.append(row)
        print(json.dumps(row))
    out = {"model": "resnet20v2 (random weights)", "macs": macs, "results": results,
           "machine": f"{platform.machine()}, CPython {platform.python_version()}",
           "date": time.strftime("%Y-%m-%d")}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
