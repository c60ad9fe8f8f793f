"""ResNet-20 v2 through tvm_tensil: compile time, instructions, cycles on the RTL core, emulator time.

    python benchmarks/resnet20.py [--arch pynqz1 ...] [--no-rtl] [--chart-only]

For each architecture: the compiler's estimate (compiler/latency.py), the cycles measured on the
Verilated core ("verilator" device, default memory timing of docs/verilator.md), the latency they
mean at 150 MHz and at the preset's clock, the simulation's speed and wall time, the MAC-bound limit
(total MACs / N^2 cycles) and the published Tensil figures (21 / 14 / 4 ms on the three benchmark
boards), and where the cycles go: the latency model's critical path split by instruction kind and
by layer (compiler/latency.py ``critical_path``). Writes benchmarks/results/resnet20.json and the
chart benchmarks/results/resnet20_cycles.png.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

import machine
import tvm_tensil
from tvm_tensil import zoo

RESULTS = Path(__file__).parent / "results" / "resnet20.json"
CHART = RESULTS.with_name("resnet20_cycles.png")
PUBLISHED_MS = {"arty_a7_35": 21, "pynqz1_12x12": 14, "ultra96v2_300mhz": 4}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", nargs="*", default=["pynqz1", "arty_a7_35", "pynqz1_12x12", "ultra96v2_300mhz"])
    p.add_argument("--runs", type=int, default=2, help="emulator runs to time")
    p.add_argument("--no-rtl", action="store_true", help="skip the Verilator device")
    p.add_argument("--chart-only", action="store_true", help="redraw the chart from the recorded results")
    args = p.parse_args()
    if args.chart_only:
        chart(json.loads(RESULTS.read_text())["results"])
        return

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
        report = ex.tensil_report
        vm = relax.VirtualMachine(ex, tvm.cpu())
        emulated = vm["main"](x).numpy()  # first run also packs the weights
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            vm["main"](x)
            times.append(time.perf_counter() - t0)
        cycles = report.total_cycles
        (part,) = report.partitions.values()
        row = {
            "arch": name,
            "array": f"{arch.array_size}x{arch.array_size}",
            "clock_mhz": arch.clock_mhz,
            "compile_seconds": round(compile_s, 2),
            "instructions": sum(p["instructions"] for p in report.partitions.values()),
            "estimated_cycles": cycles,
            "estimated_ms": round(cycles / (arch.clock_mhz * 1e3), 3) if arch.clock_mhz else None,
            "mac_bound_cycles": macs // (arch.array_size**2),
            "published_ms": PUBLISHED_MS.get(name),
            "emulator_seconds": round(min(times), 2),
            "cpu_ops": [o["op"] for o in report.cpu_ops],
            "critical_path_by_kind": part["critical_path"],
            "critical_path_by_layer": [
                {
                    "op": "+".join(dict.fromkeys(o.removeprefix("relax.").removeprefix("nn.") for o in n["relax_ops"])),
                    "output": n["output"],
                    "cycles": n["cycles"],
                }
                for n in part["nodes"]
            ],
        }
        row["mac_bound_ms_at_clock"] = round(row["mac_bound_cycles"] / (arch.clock_mhz * 1e3), 3)
        if not args.no_rtl:
            with tvm_tensil.device("verilator") as session:
                vm["main"](x)  # first run on the device also builds the Verilated core (cached)
                t0 = time.perf_counter()
                on_rtl = vm["main"](x).numpy()
                wall = time.perf_counter() - t0
            stats = session.last_run_stats(report).values()
            rtl = sum(s.cycles for s in stats)
            sim_s = sum(s.seconds for s in stats)
            row.update(
                {
                    "rtl_bit_exact_with_emulator": bool(np.array_equal(on_rtl, emulated)),
                    "rtl_cycles": rtl,
                    "rtl_ms_at_150mhz": round(rtl / 150e3, 3),
                    "rtl_ms_at_clock": round(rtl / (arch.clock_mhz * 1e3), 3),
                    "rtl_wall_seconds": round(wall, 2),
                    "sim_cycles_per_second": round(rtl / sim_s),
                    "latency_model_error": round((cycles - rtl) / rtl, 4),
                    "mac_utilisation": round(row["mac_bound_cycles"] / rtl, 3),
                }
            )
        results.append(row)
        print(json.dumps(row))
    out = {
        "model": "resnet20v2 (random weights)",
        "macs": macs,
        "results": results,
        "machine": machine.describe(),
        "date": time.strftime("%Y-%m-%d"),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    chart(results)


KIND_LABELS = {
    "matmul": "MatMul",
    "load_weights": "LoadWeights",
    "dram0_to_local": "DRAM0 -> local",
    "local_to_dram0": "local -> DRAM0",
    "dram1_to_local": "DRAM1 -> local (weights)",
    "local_to_dram1": "local -> DRAM1",
    "acc_to_local": "acc -> local",
    "local_to_acc": "local -> acc",
    "simd": "SIMD",
    "other": "other",
}


def chart(rows: list[dict]) -> None:
    """Stacked bars: per preset, the critical path by instruction kind (ms at the preset's clock,
    with the MAC bound and the RTL measurement); per preset, the cycles by layer and kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [k for k in KIND_LABELS if any(k in r["critical_path_by_kind"] for r in rows)]
    colours = dict(zip(kinds, plt.get_cmap("tab10").colors))
    fig, axes = plt.subplots(
        1 + len(rows), 1, figsize=(11, 3.2 + 2.6 * len(rows)), gridspec_kw={"height_ratios": [1.4] + [1] * len(rows)}
    )
    ax = axes[0]
    for y, r in enumerate(rows):
        per_ms = 1 / (r["clock_mhz"] * 1e3)
        left = 0.0
        for k in kinds:
            v = r["critical_path_by_kind"].get(k, 0) * per_ms
            ax.barh(y, v, left=left, color=colours[k], label=KIND_LABELS[k] if y == 0 else None)
            left += v
        ax.plot(
            [r["mac_bound_ms_at_clock"]] * 2, [y - 0.4, y + 0.4], "k--", lw=1, label="MAC bound" if y == 0 else None
        )
        if "rtl_ms_at_clock" in r:
            ax.plot(
                [r["rtl_ms_at_clock"]] * 2, [y - 0.45, y + 0.45], "r-", lw=2, label="RTL, measured" if y == 0 else None
            )
    ax.set_yticks(range(len(rows)), [f"{r['arch']} ({r['array']}, {r['clock_mhz']} MHz)" for r in rows], fontsize=8)
    ax.set_xlim(left=0)
    ax.set_xlabel("ms per inference at the preset's clock")
    ax.set_title("ResNet-20 v2: where the cycles go (latency model's critical path, by instruction kind)", fontsize=10)
    ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.3))
    for ax, r in zip(axes[1:], rows):
        layers = r["critical_path_by_layer"]
        bottom = [0.0] * len(layers)
        for k in kinds:
            v = [n["cycles"].get(k, 0) / 1e3 for n in layers]
            ax.bar(range(len(layers)), v, bottom=bottom, color=colours[k], width=0.8)
            bottom = [b + x for b, x in zip(bottom, v)]
        ax.set_xticks(range(len(layers)), [f"{i} {n['op']}" for i, n in enumerate(layers)], rotation=90, fontsize=5)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("k cycles")
        ax.set_title(f"{r['arch']}: critical-path cycles by layer (compiler node; fused ops joined by +)", fontsize=9)
    fig.tight_layout()
    fig.savefig(CHART, dpi=100)


if __name__ == "__main__":
    main()
