"""Why a DRAM0 load is not moved past a LoadWeights where two readers fill local port B.

    python benchmarks/prefetch_port_b.py [--arch ultra96v2_300mhz pynqz1_12x12] [--model resnet20v2]

Builds a zoo model (random weights) without the prefetch pass, then applies the pass with DRAM0
loads kept behind the node before's LoadWeights and with them free to pass, and runs each program on
the "verilator" device: RTL cycles, the latency model's cycles and its error. Where a vector is two
bus beats the free moves beside a DRAM1 weight stream make the model fast (it does not count how
two readers' responses and the loads share port B), and the pass chooses by that model. Writes
benchmarks/results/prefetch_port_b.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from tvm.relax.frontend.onnx import from_onnx

import machine
import tvm_tensil
from tvm_tensil import zoo
from tvm_tensil.compiler import CompileOptions
from tvm_tensil.compiler.latency import beats_per_vector, estimate_cycles
from tvm_tensil.compiler.prefetch import prefetch_across_nodes
from tvm_tensil.runtime import get_device

RESULTS = Path(__file__).parent / "results" / "prefetch_port_b.json"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", nargs="*", default=["ultra96v2_300mhz", "pynqz1_12x12"])
    p.add_argument("--model", default="resnet20v2")
    args = p.parse_args()
    rows = []
    for name in args.arch:
        arch = tvm_tensil.load_arch(name)
        mod = from_onnx(getattr(zoo, args.model)(), keep_params_in_input=False)
        report = tvm_tensil.build(
            mod, target="tensil", arch=arch, options=CompileOptions(prefetch=False, sink_stores=False)
        ).tensil_report
        (part,) = report.compiled.values()
        starts = [int(s) for s in np.cumsum([0] + [n["instructions"] for n in part.report["nodes"]])[:-1]]
        row = {"arch": name, "model": args.model, "beats_per_vector": beats_per_vector(arch)}
        dev = get_device("verilator", arch)
        try:
            for key, program in [
                ("no_prefetch", part.program),
                ("dram0_behind_loads", prefetch_across_nodes(part.program, arch, starts, dram0_behind_loads=True)[0]),
                ("dram0_free", prefetch_across_nodes(part.program, arch, starts, dram0_behind_loads=False)[0]),
            ]:
                dev.reset()
                rtl = dev.execute(program).cycles
                model = estimate_cycles(program, arch)["total"]
                row[key] = {"rtl_cycles": rtl, "model_cycles": model, "model_error": round((model - rtl) / rtl, 4)}
        finally:
            dev.close()
        print(json.dumps(row), flush=True)
        rows.append(row)
    machine.write_results(RESULTS, rows)


if __name__ == "__main__":
    main()
