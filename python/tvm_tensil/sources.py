"""Where the sources of what is built from C, C++ and SystemVerilog are: ``rtl/`` (the core),
``src/sim/`` (the Verilator harness) and ``src/codegen/`` (the C++ stub each partition becomes).

An installed package carries them under ``tvm_tensil/hardware/`` with the repository's layout (put
there by setup.py); an editable install uses the checkout's own.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def sources_root() -> Path:
    shipped = Path(str(files("tvm_tensil"))) / "hardware"
    if (shipped / "rtl").is_dir():
        return shipped
    return Path(__file__).resolve().parents[2]


ROOT = sources_root()
RTL_DIR = ROOT / "rtl"
SIM_HARNESS = ROOT / "src" / "sim" / "tcu_sim.cc"
PARTITION_STUB = ROOT / "src" / "codegen" / "tensil_stub.cc"
