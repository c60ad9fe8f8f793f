"""Tensil's headline workloads: ResNet-50 v2 (224), YOLOv4-tiny (416, and 192: the size Tensil's
published figures fit) and ResNet-20 v2 (CIFAR), plus MobileNet-v2 (224) as the depthwise workload,
built for the three benchmark boards.

For every network and preset, in a fresh process each (so that peak memory is the build's own):
compile seconds, peak resident memory, partitions, ops left on the CPU, instructions, the latency
model's cycles and milliseconds at the preset's clock, the MAC bound (total MACs / N^2 cycles) and
Tensil's published milliseconds. With ``--rtl PRESET``, every workload also runs once on the
verilator device for that preset: measured RTL cycles against the latency model. Last, the
FP16BP8 outputs (logits) of ResNet-50 v2 (64), YOLOv4-tiny (192) and MobileNet-v2 (64) on the emulator
against TVM's CPU build.

    python benchmarks/workloads.py [--arch ...] [--nets ...] [--rtl ultra96v2_300mhz]

Writes benchmarks/results/workloads.json and benchmarks/results/workloads.png; a run of some networks
or presets replaces only their rows (each row says its date). Run it alone: the machine has 2
cores. An RTL run takes up to a few minutes (the simulator runs 0.5-1.5 M cycles/s).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import machine

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "workloads.json"
CHART = HERE / "results" / "workloads.png"
PRESETS = ["arty_a7_35", "pynqz1_12x12", "ultra96v2_300mhz"]
# Workload name -> (zoo network, input size).
NETS = {
    "resnet50v2": ("resnet50v2", 224),
    "yolov4_tiny": ("yolov4_tiny", 416),
    "yolov4_tiny_192": ("yolov4_tiny", 192),
    "resnet20v2": ("resnet20v2", 32),
    "mobilenetv2": ("mobilenetv2", 224),
}
# Tensil's published inference times (ms) on the boards the presets describe. Its YOLOv4-tiny figures
# are below the MAC bound at 416 on every board, so they are set beside the 192 row.
PUBLISHED_MS = {
    "resnet50v2": {"arty_a7_35": 1969, "pynqz1_12x12": 833, "ultra96v2_300mhz": 260},
    "yolov4_tiny_192": {"arty_a7_35": 175, "pynqz1_12x12": 112, "ultra96v2_300mhz": 36},
    "resnet20v2": {"arty_a7_35": 21, "pynqz1_12x12": 14, "ultra96v2_300mhz": 4},
}

CHILD = r"""
import json, resource, sys, time
import numpy as np
sys.path.insert(0, {here!r})
import tvm, tvm_tensil
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx
from tvm_tensil import zoo
name, size, arch_name, rtl = {name!r}, {size}, {arch!r}, {rtl}
kwargs = {{}} if name == "resnet20v2" else {{"size": size}}
model = getattr(zoo, name)(**kwargs)
macs = zoo.count_macs(model)
mod = from_onnx(model, keep_params_in_input=False)
t0 = time.perf_counter()
ex = tvm_tensil.build(mod, target="tensil", arch=arch_name)
compile_s = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
report = ex.tensil_report
arch = tvm_tensil.load_arch(arch_name)
row = {{"net": name, "size": size, "arch": arch_name, "array": arch.array_size, "clock_mhz": arch.clock_mhz,
        "macs": macs, "compile_seconds": round(compile_s, 1), "peak_memory_mb": round(peak / 2**20),
        "partitions": len(report.partitions), "cpu_ops": sorted({{o["op"] for o in report.cpu_ops}}),
        "instructions": sum(p["instructions"] for p in report.partitions.values()),
        "estimated_cycles": report.total_cycles}}
if rtl:
    x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal((1, 3, size, size)).astype("float32"))
    t0 = time.perf_counter()
    with tvm_tensil.device("verilator") as session:
        relax.VirtualMachine(ex, tvm.cpu())["main"](x)
    row["rtl_wall_seconds"] = round(time.perf_counter() - t0)
    row["rtl_cycles"] = sum(s.cycles for s in session.last_run_stats(report).values())
print("RESULT " + json.dumps(row))
"""


def run_one(workload: str, arch: str, rtl: bool) -> dict:
    name, size = NETS[workload]
    code = CHILD.format(here=str(HERE / "models"), name=name, size=size, arch=arch, rtl=rtl)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode or not lines:
        raise RuntimeError(f"{name} on {arch} failed:\n{out.stderr[-3000:]}")
    row = {"workload": workload, **json.loads(lines[-1][len("RESULT ") :])}
    mhz = row["clock_mhz"]
    row["estimated_ms"] = round(row["estimated_cycles"] / (mhz * 1e3), 2)
    row["mac_bound_ms"] = round(row["macs"] / row["array"] ** 2 / (mhz * 1e3), 2)
    row["published_ms"] = PUBLISHED_MS.get(workload, {}).get(arch)
    if "rtl_cycles" in row:
        row["rtl_ms"] = round(row["rtl_cycles"] / (mhz * 1e3), 2)
        row["latency_model_error"] = round((row["estimated_cycles"] - row["rtl_cycles"]) / row["rtl_cycles"], 4)
    return row


ACCURACY_SIZES = {"resnet50v2": 64, "yolov4_tiny": 192, "mobilenetv2": 64}


def accuracy(arch: str) -> list[dict]:
    """FP16BP8 outputs (logits, before any softmax) against TVM's CPU build, small inputs."""
    import numpy as np
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    import tvm_tensil
    from tvm_tensil import zoo

    def outputs(result):
        return [result.numpy()] if hasattr(result, "numpy") else [r.numpy() for r in result]

    rows = []
    for net, size in ACCURACY_SIZES.items():
        kwargs = {"size": size} if net == "yolov4_tiny" else {"size": size, "softmax": False}
        mod = from_onnx(getattr(zoo, net)(**kwargs), keep_params_in_input=False)
        x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal((1, 3, size, size)).astype("float32"))
        cpu = outputs(relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](x))
        ex = tvm_tensil.build(mod, target="tensil", arch=arch)
        with tvm_tensil.device("emulator") as session:
            tcu = outputs(relax.VirtualMachine(ex, tvm.cpu())["main"](x))
        saturated = sum(s.saturated for s in session.last_run_stats(ex.tensil_report).values())
        for i, (c, t) in enumerate(zip(cpu, tcu)):
            span = float(np.ptp(c))
            rows.append(
                {
                    "net": net,
                    "size": size,
                    "arch": arch,
                    "output": i,
                    "range": round(span, 3),
                    "max_error": round(float(np.abs(c - t).max()), 4),
                    "max_error_of_range": round(float(np.abs(c - t).max()) / span, 4),
                    "rms_error": round(float(np.sqrt(np.mean((c - t) ** 2))), 4),
                    "saturated": saturated,
                }
            )
    return rows


def chart(rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nets = [n for n in NETS if any(r["workload"] == n for r in rows)]
    fig, axes = plt.subplots(1, len(nets), figsize=(4 * len(nets), 3.8), squeeze=False)
    for ax, net in zip(axes[0], nets):
        sel = [r for r in rows if r["workload"] == net]
        xs = list(range(len(sel)))
        width = 0.27
        ax.bar([x - width for x in xs], [r["mac_bound_ms"] for r in sel], width, label="MAC bound")
        ax.bar(xs, [r["estimated_ms"] for r in sel], width, label="this compiler, latency model")
        ax.bar([x + width for x in xs], [r["published_ms"] or 0 for r in sel], width, label="Tensil, published")
        rtl = [(x, r["rtl_ms"]) for x, r in zip(xs, sel) if "rtl_ms" in r]
        if rtl:
            ax.plot(
                [x for x, _ in rtl],
                [v for _, v in rtl],
                "k_",
                markersize=14,
                markeredgewidth=2,
                label="this compiler, RTL cycles",
            )
        ax.set_xticks(xs, [r["arch"].replace("_", "\n", 1) for r in sel], fontsize=7)
        ax.set_title(f"{sel[0]['net']} ({sel[0]['size']}x{sel[0]['size']})", fontsize=9)
        ax.set_ylabel("ms per inference")
        ax.set_ylim(bottom=0)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(CHART, dpi=110)


def table(rows: list[dict]) -> str:
    """The recorded rows as docs/results.md's markdown table."""
    lines = [
        "| network | preset | compile s | peak MB | instructions | latency model ms | RTL ms (model error) "
        "| MAC bound ms | Tensil published ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rtl = f"{r['rtl_ms']} ({r['latency_model_error']:+.2%})" if r.get("rtl_ms") is not None else "-"
        lines.append(
            f"| {r['net']} {r['size']} | {r['arch']} | {r['compile_seconds']} | {r['peak_memory_mb']:,} "
            f"| {r['instructions']:,} | {r['estimated_ms']} | {rtl} | {r['mac_bound_ms']} "
            f"| {r['published_ms'] if r.get('published_ms') is not None else '-'} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", nargs="*", default=PRESETS)
    p.add_argument("--nets", nargs="*", default=list(NETS))
    p.add_argument("--rtl", nargs="*", default=[], help="presets on which every workload also runs on the RTL")
    p.add_argument("--chart-only", action="store_true", help="redraw the chart from the recorded results")
    p.add_argument("--accuracy-only", action="store_true", help="only (re)measure the FP16BP8 accuracy")
    p.add_argument("--table", action="store_true", help="print the recorded results as docs/results.md's table")
    args = p.parse_args()
    if args.table:
        print(table(json.loads(RESULTS.read_text())["results"]))
        return
    if args.chart_only:
        chart(json.loads(RESULTS.read_text())["results"])
        return
    if args.accuracy_only:
        recorded = json.loads(RESULTS.read_text())
        recorded["accuracy_fp16bp8"] = [row for a in args.arch for row in accuracy(a)]
        RESULTS.write_text(json.dumps(recorded, indent=2) + "\n")
        return
    unknown = [net for net in args.nets if net not in NETS]
    if unknown:
        p.error(f"unknown workload {unknown[0]!r}; choose from {', '.join(NETS)}")
    rows = []
    for net in args.nets:
        for arch in args.arch:
            rows.append({**run_one(net, arch, arch in args.rtl), "date": time.strftime("%Y-%m-%d")})
            print(json.dumps(rows[-1]), flush=True)
    accuracy_rows = [row for a in args.arch for row in accuracy(a)]
    if RESULTS.exists():  # the rows this run did not measure stay as recorded
        recorded = json.loads(RESULTS.read_text())
        done = {(r["workload"], r["arch"]) for r in rows}
        rows += [r for r in recorded["results"] if (r["workload"], r["arch"]) not in done]
        accuracy_rows += [r for r in recorded.get("accuracy_fp16bp8", []) if r["arch"] not in args.arch]
    order = {(net, arch): k for k, (net, arch) in enumerate((n, a) for n in NETS for a in PRESETS)}
    rows.sort(key=lambda r: order.get((r["workload"], r["arch"]), len(order)))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "results": rows,
                "accuracy_fp16bp8": accuracy_rows,
                "machine": machine.describe(),
                "date": time.strftime("%Y-%m-%d"),
            },
            indent=2,
        )
        + "\n"
    )
    chart(rows)


if __name__ == "__main__":
    main()
