"""Calibrate the compiler's latency model (compiler/latency.py) against the Verilated core, and
report its error on every model of the zoo.

    python benchmarks/calibrate_latency.py [--arch pynqz1]

1. Single-instruction programs of several sizes run on the "verilator" device (default memory
   timing); each fixed overhead in ``latency.COSTS`` is fitted as the median of measured minus the
   model's size-dependent part. The fitted values are printed beside the ones in use.
2. Patterns where engines share local memory's second port: chains of LoadWeights + MatMul with
   the next weight group's DRAM1 run streaming beside them (the compiler's weight-streaming
   layers), MatMuls of several sizes; estimated and measured cycles and the error.
3. The zoo's models (MLP, small CNN, ResNet-20 v2) are compiled and run on the device; estimated and
   measured cycles and the error are recorded.

Writes benchmarks/results/latency_calibration.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "models"))

from tvm_tensil.arch import MEMORY_TIMING, load_arch  # noqa: E402
from tvm_tensil.compiler import latency  # noqa: E402
from tvm_tensil.isa import assemble  # noqa: E402
from tvm_tensil.isa.layout import layout_of  # noqa: E402
from tvm_tensil.runtime import get_device  # noqa: E402


def measure(dev, arch, text):
    """Cycles of ``text`` minus those of an empty program (the device's Configure preamble)."""
    dev.reset()
    empty = dev.execute(assemble("noop", layout_of(arch))).cycles - 1
    dev.reset()
    return dev.execute(assemble(text, layout_of(arch))).cycles - empty


def fit(dev, arch) -> dict:
    n = arch.array_size
    bpv = max(1, arch.vector_bytes * 8 // (arch.axi_data_width or 64))
    rl, wl = MEMORY_TIMING["read_latency"], MEMORY_TIMING["write_latency"]
    sizes = [1, 8, 64, 256]
    fitted = {}
    cases = {
        "mm": (lambda s: f"matmul local=0 acc=0 size={s}", lambda s: s + n),
        "lw": (lambda s: f"loadweights local=0 size={min(s, n + 1)}", lambda s: min(s, n + 1)),
        "move": (lambda s: f"datamove local_to_acc local=0 acc=0 size={s}", lambda s: s),
        "read": (lambda s: f"datamove dram0_to_local local=0 dram0=0 size={s}", lambda s: rl + s * bpv),
        "write": (lambda s: f"datamove local_to_dram0 local=0 dram0=0 size={s}", lambda s: s * bpv + wl),
        # The first MatMul after a load swaps weight sets once the load has landed: what it waits
        # beyond the weights engine's end.
        "swap": (
            lambda s: f"loadweights local=0 size={n + 1}\nmatmul local=0 acc=0 size={s}",
            lambda s: (n + 1) + fitted["lw"] + s + n + fitted["mm"],
        ),
        # A new load after that MatMul waits for its swapping vector to reach the array.
        "lw_after_swap": (
            lambda s: (
                f"loadweights local=0 size={n + 1}\nmatmul local=0 acc=0 size=1\n"
                f"loadweights local=0 size={n + 1}\nmatmul local=0 acc=0 size={s}"
            ),
            lambda s: 2 * ((n + 1) + fitted["lw"] + fitted["swap"]) + s + n + fitted["mm"],
        ),
    }
    for key, (text, model) in cases.items():
        fitted[key] = round(statistics.median(measure(dev, arch, text(s)) - model(s) for s in sizes))
    return fitted


def weights_under_a_stream(arch, matmul: int, pairs: int = 60, stream: int = 512) -> str:
    """``pairs`` LoadWeights (N + 1 vectors) + MatMul (``matmul`` vectors); a DRAM1 -> local move of
    ``stream`` vectors starts under the third load."""
    n = arch.array_size
    lines = []
    for i in range(pairs):
        lines += [
            f"loadweights local={i * (n + 1)} size={n + 1}",
            f"matmul local={arch.local_depth // 2} acc=0 size={matmul}",
        ]
    lines.insert(4, f"datamove dram1_to_local local={3 * arch.local_depth // 4} dram1=0 size={stream}")
    return "\n".join(lines)


def pattern_errors(dev, arch) -> list[dict]:
    rows = []
    n = arch.array_size
    for matmul in (n, 2 * n, 2 * n + n // 2, 3 * n):
        text = weights_under_a_stream(arch, matmul)
        program = assemble(text, layout_of(arch))
        dev.reset()
        measured = dev.execute(program).cycles
        estimated = latency.estimate_cycles(program, arch)["total"]
        rows.append(
            {
                "pattern": f"60 x (LoadWeights {n + 1} + MatMul {matmul}), 512-vector DRAM1 stream",
                "estimated_cycles": estimated,
                "measured_cycles": measured,
                "error": round((estimated - measured) / measured, 4),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def zoo_errors(arch_name: str) -> list[dict]:
    import tvm
    import zoo
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    import tvm_tensil

    rows = []
    for name, model, shape in [
        ("mlp", zoo.mlp(batch=4), (4, 64)),
        ("small_cnn", zoo.small_cnn(), (1, 3, 16, 16)),
        ("resnet20v2", zoo.resnet20v2(), (1, 3, 32, 32)),
    ]:
        ex = tvm_tensil.build(from_onnx(model, keep_params_in_input=False), target="tensil", arch=arch_name)
        report = ex.tensil_report
        x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
        with tvm_tensil.device("verilator") as session:
            relax.VirtualMachine(ex, tvm.cpu())["main"](x)
        measured = sum(s.cycles for s in session.last_run_stats(report).values())
        estimated = report.total_cycles
        rows.append(
            {
                "model": name,
                "estimated_cycles": estimated,
                "measured_cycles": measured,
                "error": round((estimated - measured) / measured, 4),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="pynqz1")
    args = p.parse_args()
    arch = load_arch(args.arch)
    dev = get_device("verilator", arch)
    fitted = fit(dev, arch)
    print("fitted overheads:", fitted, "in use:", {k: latency.COSTS[k] for k in fitted})
    patterns = pattern_errors(dev, arch)
    rows = zoo_errors(args.arch)
    out = {
        "arch": args.arch,
        "memory_timing": MEMORY_TIMING,
        "fitted_costs": fitted,
        "costs_in_use": latency.COSTS,
        "patterns": patterns,
        "models": rows,
        "date": time.strftime("%Y-%m-%d"),
    }
    dest = HERE / "results" / "latency_calibration.json"
    dest.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
