"""Cycles of the element-wise layers between two maps, of the activations with SIMD sequences of
their own and of transposed convs (latency model; the RTL agrees within its documented bound,
docs/results.md).

    python benchmarks/elementwise.py [--arch pynqz1 ultra96v2_300mhz]

Each of Add, Sub, Mul, Max, Min on a (1, 64, 28, 28) map with a second map of the same shape and
with a per-channel (1, 64, 1, 1) vector (a squeeze-excitation gate), alone in a model: the layer's
cycles and cycles per output vector. Each of HardSigmoid, HardSwish, Sigmoid, Tanh, SiLU (as
x * sigmoid(x)), Gelu, Softplus, Mish and Exp after a 1x1 conv 64 -> 64 on that map: the cycles it adds to the conv (its
epilogue), per vector. ConvTranspose 64 -> 64 (2x2 stride 2; 4x4 stride 2 padding 1) of a
(1, 64, 14, 14) map: cycles, and cycles per MatMul the model's products need. Writes
benchmarks/results/elementwise.json.
"""

from __future__ import annotations

import argparse
import json
import math
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


def _conv_cycles(arch: str, act: str | None) -> int:
    """Cycles of a 1x1 conv 64 -> 64 on the map, with ``act`` after it (fused)."""
    import numpy as np
    from tvm.relax.frontend.onnx import from_onnx

    import tvm_tensil
    from tvm_tensil.zoo import OnnxBuilder

    b = OnnxBuilder(seed=0)
    y = b.op("Conv", ["x", b.const(np.random.default_rng(0).standard_normal((64, 64, 1, 1)) / 8)])
    if act == "SiLU":
        y = b.op("Mul", [y, b.op("Sigmoid", [y])])
    elif act:
        y = b.op(act, [y])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = from_onnx(b.model({"x": SHAPE}, y, opset=20), keep_params_in_input=False)
        report = tvm_tensil.build(mod, target="tensil", arch=arch).tensil_report
    (part,) = report.partitions.values()
    return part["cycles"]["total"]


def activation_cycles(act: str, arch: str) -> dict:
    import tvm_tensil

    added = _conv_cycles(arch, act) - _conv_cycles(arch, None)
    vectors = SHAPE[0] * SHAPE[2] * SHAPE[3] * -(-SHAPE[1] // tvm_tensil.load_arch(arch).array_size)
    return {"op": act, "after": "conv 1x1", "arch": arch, "cycles_added": added,
            "cycles_per_vector": round(added / vectors, 2)}  # fmt: skip


def transposed_cycles(kernel: int, padding: int, arch: str) -> dict:
    import numpy as np
    from tvm.relax.frontend.onnx import from_onnx

    import tvm_tensil
    from tvm_tensil.zoo import OnnxBuilder

    c, h = 64, 14
    b = OnnxBuilder(seed=0)
    w = b.const(np.random.default_rng(0).standard_normal((c, c, kernel, kernel)) / 8)
    y = b.op("ConvTranspose", ["x", w], strides=[2, 2], pads=[padding] * 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = from_onnx(b.model({"x": [1, c, h, h]}, y), keep_params_in_input=False)
        report = tvm_tensil.build(mod, target="tensil", arch=arch).tensil_report
    (part,) = report.partitions.values()
    n = tvm_tensil.load_arch(arch).array_size
    out = (h - 1) * 2 - 2 * padding + kernel
    # MatMul vectors the model's products need: every output pixel, its taps, per block pair.
    taps = (kernel // 2) ** 2
    needed = out * out * taps * math.ceil(c / n) ** 2
    cycles = part["cycles"]["total"]
    return {"op": f"ConvTranspose {kernel}x{kernel} stride 2 pad {padding}", "arch": arch, "cycles": cycles,
            "matmul_vectors_needed": needed, "cycles_per_needed_vector": round(cycles / needed, 2)}  # fmt: skip


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
        for act in ("HardSigmoid", "HardSwish", "Sigmoid", "Tanh", "SiLU", "Gelu", "Softplus", "Mish", "Exp"):
            row = activation_cycles(act, arch)
            print(json.dumps(row), flush=True)
            rows.append(row)
        for kernel, padding in ((2, 0), (4, 1)):
            row = transposed_cycles(kernel, padding, arch)
            print(json.dumps(row), flush=True)
            rows.append(row)
    machine.write_results(RESULTS, rows)


if __name__ == "__main__":
    main()
