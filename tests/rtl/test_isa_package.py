"""rtl/tcu_isa_pkg.sv is generated from the Python enums: the committed file must be current, and
it names every opcode, direction, SIMD operation and Configure register."""

from tvm_tensil.isa.instructions import ConfigRegister, Direction, Opcode, SIMDOp
from tvm_tensil.rtl.isa_package import package_path, render


def test_the_committed_package_is_current():
    assert package_path().read_text() == render(), (
        "rtl/tcu_isa_pkg.sv is stale: regenerate it with python -m tvm_tensil.rtl.isa_package")


def test_every_enum_member_has_a_constant():
    text = render()
    for prefix, enum in (("OPCODE", Opcode), ("DIRECTION", Direction), ("SIMD_OP", SIMDOp), ("CONFIG", ConfigRegister)):
        for member in enum:
            assert f"{prefix}_{member.name} = 4'd{int(member)};" in text
    assert "localparam int DIRECTION_TO_DRAM_BIT = 0;" in text and "localparam int DIRECTION_DRAM1_BIT = 1;" in text


def test_the_rtl_names_directions_and_opcodes():
    """No bare 4-bit literal stands for an opcode or a direction in the core's dispatch."""
    import re

    from tvm_tensil.rtl.toolchain import RTL_DIR

    core = (RTL_DIR / "tcu_core.sv").read_text()
    assert not re.search(r"4'd1[2-5]|4'h[0-9A-F]\b", core)


def test_the_datamove_bits_describe_the_direction_encoding():
    from tvm_tensil.rtl.isa_package import DataMoveBit

    for d in (d for d in Direction if int(d) < 4):
        assert bool(int(d) & DataMoveBit.TO_DRAM) == (not d.to_local)
        assert bool(int(d) & DataMoveBit.DRAM1) == (d.memory == "dram1")
