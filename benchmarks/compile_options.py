"""What the scheduler's look-ahead costs in compile time and gains in cycles.

    python benchmarks/look_ahead.py [--arch ultra96v2_300mhz] [--nets mobilenetv2 resnet20v2]

Each zoo network (random weights) is built in a fresh process with the look-ahead off
(``CompileOptions(look_ahead=False)``, greedy: each conv's tiling chosen on its own) and on:
compile seconds and the latency model's cycles. Writes benchmarks/results/look_ahead.json. Run
it alone (the machine has 2 cores), and twice after the latency model changed: the first build
then also recompiles its numba kernel.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import machine

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "look_ahead.json"
SIZES = {"mobilenetv2": 224, "resnet50v2": 224, "yolov4_tiny": 416}

CHILD = r"""
import json, time
import tvm_tensil
from tvm.relax.frontend.onnx import from_onnx
from tvm_tensil import zoo
from tvm_tensil.compiler import CompileOptions
name, arch, on, size = {name!r}, {arch!r}, {on!r}, {size!r}
mod = from_onnx(getattr(zoo, name)(**({{"size": size}} if size else {{}})), keep_params_in_input=False)
t0 = time.perf_counter()
options = CompileOptions(look_ahead=on)
report = tvm_tensil.build(mod, target="tensil", arch=arch, options=options).tensil_report
print(json.dumps({{"compile_seconds": round(time.perf_counter() - t0, 2), "cycles": report.total_cycles}}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", nargs="*", default=["ultra96v2_300mhz"])
    p.add_argument("--nets", nargs="*", default=["mobilenetv2", "resnet20v2"])
    args = p.parse_args()
    rows = []
    for arch in args.arch:
        for name in args.nets:
            row = {"net": name, "arch": arch}
            for on in (False, True):
                code = CHILD.format(name=name, arch=arch, on=on, size=SIZES.get(name))
                out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
                row["look_ahead" if on else "greedy"] = json.loads(out.stdout.strip().splitlines()[-1])
            print(json.dumps(row), flush=True)
            rows.append(row)
    machine.write_results(RESULTS, rows)


if __name__ == "__main__":
    main()
