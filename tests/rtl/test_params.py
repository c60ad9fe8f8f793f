"""Parameters generated from a .tarch (python/tvm_tensil/rtl/params.py): the one source of the RTL's
configuration for simulation, synthesis and Vivado."""

import subprocess
import sys

from tvm_tensil.arch import PRESETS
from tvm_tensil.isa.layout import layout_of
from tvm_tensil.rtl.params import TOP_PARAMETERS, core_parameters, top_parameters, write_vivado_params


def test_parameters_follow_the_architecture_and_its_layout():
    arch = PRESETS["ultra96v2"]
    p = core_parameters(arch)
    lay = layout_of(arch)
    assert (p["ARRAY_SIZE"], p["LOCAL_DEPTH"], p["ACC_DEPTH"]) == (
        arch.array_size,
        arch.local_depth,
        arch.accumulator_depth,
    )
    assert (p["DATA_WIDTH"], p["BINARY_POINT"]) == (arch.data_type.width, arch.data_type.binary_point)
    assert p["OPERAND0_BITS"] + p["OPERAND1_BITS"] + p["OPERAND2_BITS"] + 8 == lay.instruction_bits
    assert p["AXI_DATA_WIDTH"] == 128


def test_top_parameters_are_what_tcu_top_takes():
    top = top_parameters(PRESETS["pynqz1"], stream_width=32)
    assert set(top) == set(TOP_PARAMETERS) | {"S_AXIS_DATA_WIDTH"}
    assert top["S_AXIS_DATA_WIDTH"] == 32
    assert top_parameters(PRESETS["pynqz1"])["S_AXIS_DATA_WIDTH"] == 64  # defaults to the AXI width


def test_generated_files(tmp_path):
    tcl = write_vivado_params(PRESETS["ultra96v2"], tmp_path / "params.tcl").read_text()
    assert "set TCU_PART {xczu3eg-sbva484-1-i}" in tcl and "ARRAY_SIZE 16" in tcl and "S_AXIS_DATA_WIDTH 128" in tcl


def test_ip_command_writes_params_and_prints_the_vivado_steps(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "tvm_tensil.cli", "ip", "--arch", "pynqz1", "-o", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "params.tcl").exists()
    assert "package_ip.tcl" in r.stdout and "block_design.tcl" in r.stdout
