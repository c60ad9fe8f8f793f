"""What a scheduler option costs in compile time and gains in cycles.

    python benchmarks/compile_options.py [--option look_ahead] [--arch ultra96v2_300mhz] [--nets mobilenetv2 resnet20v2]
        [--size yolov4_tiny=192]

Each zoo network (random weights) is built in a fresh process with the ``CompileOptions`` field
``--option`` off and on (its default): compile seconds and the latency model's cycles.
``look_ahead`` off: each conv's tiling chosen greedily on its own (``one_node``: measured through
the next node only); ``prefetch`` off: no node's first loads move into the node before;
``sink_stores`` off: no node's last stores move into the node after; ``shortcut_in_place`` off: a
residual conv loads its shortcut from DRAM0 even where the conv before left it in local memory;
``defer_shortcut`` off: a tile's shortcut is loaded whole before its first MatMul; ``window_matmul``
off: depthwise convs as diagonal blocks on a core that has the window MatMul; ``row_bands`` off: no
chain of convs runs band by band (``always``: every chain found does, not only where the latency
model finds it faster); ``interleave`` off: the engines' instruction streams are not merged again
(``always``: also in programs above the pass's size limit). Writes
benchmarks/results/options_<option>.json. Run it alone (the machine has 2 cores), and twice after
the latency model changed: the first build then also recompiles its numba kernel.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import machine

HERE = Path(__file__).parent
OPTIONS = ("look_ahead", "prefetch", "sink_stores", "shortcut_in_place", "defer_shortcut", "window_matmul", "row_bands",
           "interleave", "in_turn")  # fmt: skip
SIZES = {"mobilenetv2": 224, "resnet50v2": 224, "yolov4_tiny": 416}

CHILD = r"""
import json, time
import tvm_tensil
from tvm.relax.frontend.onnx import from_onnx
from tvm_tensil import zoo
from tvm_tensil.compiler import CompileOptions
name, arch, option, on, size = {name!r}, {arch!r}, {option!r}, {on!r}, {size!r}
mod = from_onnx(getattr(zoo, name)(**({{"size": size}} if size else {{}})), keep_params_in_input=False)
t0 = time.perf_counter()
options = CompileOptions(**({{}} if on is True else {{option: True if on == "always" else on}}))  # on: the default
report = tvm_tensil.build(mod, target="tensil", arch=arch, options=options).tensil_report
print(json.dumps({{"compile_seconds": round(time.perf_counter() - t0, 2), "cycles": report.total_cycles}}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--option", choices=OPTIONS, default="look_ahead")
    p.add_argument("--arch", nargs="*", default=["ultra96v2_300mhz"])
    p.add_argument("--nets", nargs="*", default=["mobilenetv2", "resnet20v2"])
    p.add_argument("--size", nargs="*", default=[], metavar="NET=PIXELS", help="an input size other than the default")
    args = p.parse_args()
    sizes = dict(SIZES)
    for item in args.size:
        net, _, pixels = item.partition("=")
        if not pixels.isdigit():
            p.error(f"--size {item}: give NET=PIXELS, e.g. yolov4_tiny=192")
        sizes[net] = int(pixels)
    rows = []
    for arch in args.arch:
        for name in args.nets:
            row = {"net": name, "arch": arch, "size": sizes.get(name)}
            # look_ahead is a depth: also through one node only (1).
            values = {"off": False, "on": True} | ({"one_node": 1} if args.option == "look_ahead" else {})
            values |= {"always": "always"} if args.option in ("row_bands", "interleave", "in_turn") else {}
            for key, on in values.items():
                code = CHILD.format(name=name, arch=arch, option=args.option, on=on, size=sizes.get(name))
                out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
                row[key] = json.loads(out.stdout.strip().splitlines()[-1])
            print(json.dumps(row), flush=True)
            rows.append(row)
    machine.write_results(HERE / "results" / f"options_{args.option}.json", rows)


if __name__ == "__main__":
    main()
