"""Cycles of the element-wise layers between two maps (latency model; the RTL agrees within its
documented bound, docs/results.md).

    python benchmarks/elementwise.py [--arch pynqz1 ultra96v2_300mhz]

Each of Add, Sub, Mul, Max, Min on a (1, 64, 28, 28) map with a second map of the same shape and
with a per-channel (1, 64, 1, 1) vector (a squeeze-excitation gate), alone in a model: the layer's
cycles and cycles per output vector. Writes benchmarks/results/elementwise.json.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import machine

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "elementwise.json"
SHAPE = [1, 64, 28, 28]


def layer_cycles(op: str, second: list[int], arch: str) -> dict:
    from tvm.relax.frontend.onnx import from_onnx

    import tvm_tensil
    from tvm_tensil.zoo import OnnxBuilder

    b = OnnxBuilder(seed=0)
    model = b.model({"x": SHAPE, "y": second}, b.op(op, ["x", "y"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = from_onnx(model, keep_params_in_input=False)
        report = tvm_tensil.build(mod, target="tensil", arch=arch).tensil_report
    (part,) = report.partitions.values()
    (node,) = part["nodes"]
    cycles = sum(node["cycles"].values())
    arch_ = tvm_tensil.load_arch(arch)
    vectors = SHAPE[0] * SHAPE[2] * SHAPE[3] * -(-SHAPE[1] // arch_.array_size)
    return {"op": op, "second": second, "arch": arch, "cycles": cycles, "cycles_per_vector": round(cycles / vectors, 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", nargs="*", default=["pynqz1", "ultra96v2_300mhz"])
    args = p.parse_args()
    rows = []
    for arch in args.arch:
        for op in ("Add", "Sub", "Mul", "Max", "Min"):
            for second in (SHAPE, [1, SHAPE[1], 1, 1]):
                row = layer_cycles(op, second, arch)
                print(json.dumps(row), flush=True)
                rows.append(row)
    machine.write_results(RESULTS, rows)


if __name__ == "__main__":
    main()
