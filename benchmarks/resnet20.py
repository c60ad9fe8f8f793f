"""ResNet-20 v2 through tvm_tensil: compile time, instructions, cycles on the RTL core, emulator time.

    python benchmarks/resnet20.py [--arch pynqz1 ...] [--no-rtl]

For each architecture: the compiler's estimate (compiler/latency.py), the cycles measured on the
Verilated core ("verilator" device, default memory timing of docs/verilator.md), the latency they
mean at 150 MHz and at the preset's clock, the simulation's speed and wall time, the MAC-bound limit
(total MACs / N^2 cycles) and the published Tensil figures (21 / 14 / 4 ms on the three benchmark
boards). Writes benchmarks/results/resnet20.json.
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
    p.add_argument("--no-rtl", action="store_true", help="skip the Verilator device")
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
        row["mac_bound_ms_at_clock"] = round(row["mac_bound_cycles"] / (arch.clock_mhz * 1e3), 3)
        if not args.no_rtl:
            from tvm_tensil.runtime import bridge

            with tvm_tensil.device("verilator"):
                vm["main"](x)  # first run on the device also builds the Verilated core (cached)
                t0 = time.perf_counter()
                vm["main"](x)
                wall = time.perf_counter() - t0
            stats = bridge.last_run_stats(report).values()
            rtl = sum(s.cycles for s in stats)
            sim_s = sum(s.seconds for s in stats)
            row.update({
                "rtl_cycles": rtl,
                "rtl_ms_at_150mhz": round(rtl / 150e3, 3),
                "rtl_ms_at_clock": round(rtl / (arch.clock_mhz * 1e3), 3),
                "rtl_wall_seconds": round(wall, 2),
                "sim_cycles_per_second": round(rtl / sim_s),
                "latency_model_error": round((cycles - rtl) / rtl, 4),
                "mac_utilisation": round(row["mac_bound_cycles"] / rtl, 3),
            })
        results.append(row)
        print(json.dumps(row))
    out = {"model": "resnet20v2 (random weights)", "macs": macs, "results": results,
           "machine": f"{platform.machine()}, CPython {platform.python_version()}",
           "date": time.strftime("%Y-%m-%d")}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
