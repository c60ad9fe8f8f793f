"""The sources of what is built from C++ and SystemVerilog are found: the checkout's in a checkout
(the wheel's are checked by test_wheel.py)."""

from tvm_tensil import sources


def test_the_sources_are_where_the_repository_keeps_them():
    assert sources.PARTITION_STUB.parts[-3:] == ("src", "codegen", "tensil_stub.cc")
    assert sources.SIM_HARNESS.parts[-3:] == ("src", "sim", "tcu_sim.cc")
    for path in (sources.PARTITION_STUB, sources.SIM_HARNESS, sources.RTL_DIR / "tcu_top.sv"):
        assert path.is_file(), path
    assert "@DESCRIPTION@" in sources.PARTITION_STUB.read_text()
