"""The latency model against the Verilated core, layer by layer: where does the estimate go wrong?

    python benchmarks/latency_by_layer.py [--arch ultra96v2_300mhz] [--model resnet20v2] [--size 192]

Compiles a zoo model (random weights) for the architecture and runs growing prefixes of its program
on the "verilator" device: the program up to the end of each compiled node (a layer, with what was
fused into it). A node's cycles are the growth of the prefix's total, on the RTL and in the latency
model; the difference says which layers the model misjudges (a prefix's end waits for everything in
flight, so a node's figure includes what its predecessors leave running). Beside them, the resource
the node's instructions keep busiest and its cycles: no schedule of the node runs in fewer. DRAM contents do not
matter for cycles; the programs run on zeroed memory.

Writes benchmarks/results/latency_by_layer_<arch>_<model>[_<size>].json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from tvm.relax.frontend.onnx import from_onnx

import machine
import tvm_tensil
from tvm_tensil import zoo
from tvm_tensil.compiler.latency import estimate_cycles
from tvm_tensil.isa.layout import layout_of
from tvm_tensil.isa.program import Program
from tvm_tensil.runtime import get_device

HERE = Path(__file__).parent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="ultra96v2_300mhz")
    p.add_argument("--model", default="resnet20v2", help="a function of tvm_tensil.zoo")
    p.add_argument("--size", type=int, help="the input size, for a zoo model that takes one")
    args = p.parse_args()
    arch = tvm_tensil.load_arch(args.arch)
    sized = {} if args.size is None else {"size": args.size}
    mod = from_onnx(getattr(zoo, args.model)(**sized), keep_params_in_input=False)
    report = tvm_tensil.build(mod, target="tensil", arch=arch).tensil_report
    dev = get_device("verilator", arch)
    ib = layout_of(arch).instruction_bytes
    partitions = []
    for symbol, compiled in report.compiled.items():
        nodes = compiled.report["nodes"]
        ends = np.cumsum([n["instructions"] for n in nodes])
        rows, before = [], (0, 0)
        for node, end in zip(nodes, ends):
            prefix = Program(compiled.program.data[: int(end) * ib], layout_of(arch))
            dev.reset()
            rtl = dev.execute(prefix).cycles if end else 0
            model = estimate_cycles(prefix, arch)["total"] if end else 0
            row = {
                "output": node["output"],
                "ops": "+".join(dict.fromkeys(o.split(".")[-1] for o in node["relax_ops"])),
                "instructions": node["instructions"],
                "rtl_cycles": rtl - before[0],
                "model_cycles": model - before[1],
            }
            row["model_minus_rtl"] = row["model_cycles"] - row["rtl_cycles"]
            # The resource the node's instructions keep busiest, alone (``latency.resource_bounds``).
            row["busiest"], row["busiest_cycles"] = max(node["busy"].items(), key=lambda kv: kv[1])
            rows.append(row)
            before = (rtl, model)
            print(json.dumps(row), flush=True)
        partitions.append({"partition": symbol, "rtl_cycles": before[0], "model_cycles": before[1], "nodes": rows})
    dev.close()
    out = {
        "arch": args.arch,
        "model": args.model,
        "size": args.size,
        "partitions": partitions,
        "machine": machine.describe(),
        "date": time.strftime("%Y-%m-%d"),
    }
    name = args.model + ("" if args.size is None else f"_{args.size}")
    dest = HERE / "results" / f"latency_by_layer_{args.arch}_{name}.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
