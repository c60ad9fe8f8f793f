"""rtl/tcu_isa_pkg.sv is generated from the Python enums: the committed file must be current, and
it names every opcode, direction, SIMD operation and Configure register."""

from tvm_tensil.isa.instructions import CONFIG_RESET_VALUES, ConfigRegister, Direction, Opcode, SIMDOp
from tvm_tensil.rtl.isa_package import PACKAGE, package_path, render


def test_the_committed_package_is_current():
    assert package_path().read_text() == render(), (
        "rtl/tcu_isa_pkg.sv is stale: regenerate it with python -m tvm_tensil.rtl.isa_package"
    )


def test_every_enum_member_has_a_constant():
    text = render()
    for prefix, enum in (("OPCODE", Opcode), ("DIRECTION", Direction), ("SIMD_OP", SIMDOp), ("CONFIG", ConfigRegister)):
        for member in enum:
            assert f"{prefix}_{member.name} = 4'd{int(member)};" in text
    assert "localparam int DIRECTION_TO_DRAM_BIT = 0;" in text and "localparam int DIRECTION_DRAM1_BIT = 1;" in text


def test_the_rtl_names_its_constants():
    """No bare 4-bit literal stands for an opcode, direction, SIMD op or Configure register, and no
    module hard-codes a Configure register's reset value: they come from the package."""
    import re

    from tvm_tensil.rtl.toolchain import RTL_DIR, rtl_sources

    for source in rtl_sources():
        if source.stem == PACKAGE:
            continue
        text = source.read_text()
        assert not re.search(r"4'[dh][0-9A-Fa-f]+\b", text), f"{source.name}: a bare 4-bit constant"
        for value in CONFIG_RESET_VALUES.values():
            assert not re.search(rf"32'd{value}\b|32'h0*{value:X}\b", text), f"{source.name}: a reset value by hand"
    assert "CONFIG_RESET_TIMEOUT" in (RTL_DIR / "tcu_dispatch.sv").read_text()


def test_the_datamove_bits_describe_the_direction_encoding():
    from tvm_tensil.rtl.isa_package import DataMoveBit

    for d in (d for d in Direction if int(d) < 4):
        assert bool(int(d) & DataMoveBit.TO_DRAM) == (not d.to_local)
        assert bool(int(d) & DataMoveBit.DRAM1) == (d.memory == "dram1")
