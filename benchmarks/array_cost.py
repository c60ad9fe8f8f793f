"""What the array's second weight set costs: Yosys synth_xilinx of `tcu_systolic_array` alone (8x8
FP16BP8, xc7) from this tree and from an earlier commit (default: the last one with one weight set).

    python benchmarks/array_cost.py [--base COMMIT]

Writes benchmarks/results/array_cost.json (LUT, FF, DSP per version). About a minute per version.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from tvm_tensil.rtl.synth import find_yosys, parse_stat
from tvm_tensil.rtl.toolchain import RTL_DIR

HERE = Path(__file__).resolve().parent
ONE_WEIGHT_SET = "80fafed"  # the core before the second weight set
FILES = ("tcu_mac.sv", "tcu_systolic_array.sv")


def synthesize(sources: list[Path], work: Path) -> dict:
    script = (
        f"read_verilog -sv {' '.join(map(str, sources))}\n"
        "chparam -set ARRAY_SIZE 8 -set DATA_WIDTH 16 -set BINARY_POINT 8 tcu_systolic_array\n"
        "synth_xilinx -top tcu_systolic_array -family xc7\nstat\n"
    )
    (work / "array.ys").write_text(script)
    subprocess.run([*find_yosys(), "-q", "-l", "array.log", "-s", "array.ys"], cwd=work, check=True)
    res = parse_stat((work / "array.log").read_text())
    return {"lut": res.lut, "ff": res.ff, "dsp": res.dsp}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", default=ONE_WEIGHT_SET)
    args = p.parse_args()
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        for name in FILES:
            text = subprocess.run(
                ["git", "show", f"{args.base}:rtl/{name}"], cwd=HERE.parent, check=True, capture_output=True, text=True
            ).stdout
            (base / name).write_text(text)
        out[f"one weight set ({args.base})"] = synthesize([base / n for n in FILES], base)
        here = Path(tmp) / "here"
        here.mkdir()
        out["two weight sets (this tree)"] = synthesize([RTL_DIR / n for n in FILES], here)
    dest = HERE / "results" / "array_cost.json"
    dest.write_text(json.dumps({"array": "8x8 FP16BP8", "family": "xc7", "results": out}, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
