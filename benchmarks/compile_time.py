"""Compile seconds of the zoo's networks at this checkout against another commit, back to back.

    python benchmarks/compile_time.py --against 7f53961 [--arch ultra96v2_300mhz ...] [--nets mobilenetv2 ...]

Single compile times on a shared machine vary by 15-30% from one run to the next, so figures taken
at different times do not compare: each network is built here in a fresh process at both commits,
one after the other (the other commit checked out with ``git worktree`` into a temporary directory
and imported from there; the same installed TVM and packages), ``--repeat`` times each, the
smallest kept. Also the latency model's cycles of each build. Writes
benchmarks/results/compile_time.json. Run it alone (the machine has 2 cores); a first build after
the latency model changed also compiles its numba kernels, so one warm-up build of each commit
runs first.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import machine

HERE = Path(__file__).parent
ROOT = HERE.parent
SIZES = {"mobilenetv2": 224, "resnet50v2": 224, "yolov4_tiny": 192}

CHILD = r"""
import json, sys, time, warnings
if {source!r}:
    sys.path.insert(0, {source!r})
warnings.filterwarnings("ignore")
import tvm_tensil
from tvm.relax.frontend.onnx import from_onnx
from tvm_tensil import zoo
name, arch, size = {name!r}, {arch!r}, {size!r}
mod = from_onnx(getattr(zoo, name)(**({{"size": size}} if size else {{}})), keep_params_in_input=False)
t0 = time.perf_counter()
report = tvm_tensil.build(mod, target="tensil", arch=arch).tensil_report
print(json.dumps({{"compile_seconds": round(time.perf_counter() - t0, 2), "cycles": report.total_cycles,
                  "module": tvm_tensil.__file__}}))
"""


def build(source: str, name: str, arch: str) -> dict:
    code = CHILD.format(source=source, name=name, arch=arch, size=SIZES.get(name))
    run = [sys.executable, "-c", code]
    out = subprocess.run(run, capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--against", required=True, help="the commit to compare with")
    p.add_argument("--arch", nargs="*", default=["arty_a7_35", "pynqz1_12x12", "ultra96v2_300mhz"])
    p.add_argument("--nets", nargs="*", default=["mobilenetv2", "resnet20v2", "yolov4_tiny", "resnet50v2"])
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", args.against], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()  # fmt: skip
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip
    changed = subprocess.run(["git", "status", "--porcelain", "python"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()  # fmt: skip
    if changed:  # (this checkout's uncommitted changes are what is measured)
        head += "+changes"
    if head == commit:
        p.error(f"--against {args.against} is this checkout itself: nothing to compare")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=ROOT, check=True,
                       capture_output=True)  # fmt: skip
        try:
            sources = {commit: str(tree / "python"), head: str(ROOT / "python")}
            for source in sources.values():  # warm-up: numba kernels compiled and cached
                build(source, "resnet20v2", args.arch[0])
            for arch in args.arch:
                for name in args.nets:
                    row = {"net": name, "arch": arch}
                    for label, source in sources.items():
                        runs = [build(source, name, arch) for _ in range(args.repeat)]
                        assert all(r["module"].startswith(source) for r in runs), runs[0]["module"]
                        row[label] = {"compile_seconds": min(r["compile_seconds"] for r in runs),
                                      "cycles": runs[0]["cycles"]}  # fmt: skip
                    row["ratio"] = round(row[head]["compile_seconds"] / row[commit]["compile_seconds"], 2)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    machine.write_results(HERE / "results" / "compile_time.json", rows)


if __name__ == "__main__":
    main()
