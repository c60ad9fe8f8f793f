"""The instruction set extension probes (python/tvm_tensil/runtime/extensions.py): they pass on a core
that has the extensions, and tell a core that lacks them (tests/runtime/board/test_sim_board.py runs
them on a plain core)."""

import numpy as np
import pytest

from tvm_tensil.arch import PRESETS
from tvm_tensil.isa.asm import assemble
from tvm_tensil.isa.layout import layout_of
from tvm_tensil.runtime import DeviceError, Emulator, get_device
from tvm_tensil.runtime.extensions import check_extensions, missing_extensions, probes

BOTH = PRESETS["arty_a7_35"]


def test_every_isa_extension_has_a_probe():
    from tvm_tensil.arch import ISA_EXTENSION_FIELDS

    assert {p.field for p in probes(BOTH)} == set(ISA_EXTENSION_FIELDS) == {"window_matmul", "simd_relu"}
    assert probes(PRESETS["pynqz1"]) == []


@pytest.mark.parametrize("probe", probes(BOTH), ids=lambda p: p.field)
def test_a_probe_without_its_extension_gives_another_result(probe):
    """The emulator's result differs from what the result vectors held before the extension's
    instruction (what a core that skips it leaves) and from the instruction run without the
    extension (a plain MatMul; a SIMD move without the ReLU)."""
    emu = Emulator(BOTH)
    emu.write_dram(0, 0, probe.inputs)
    emu.execute(assemble(probe.text, layout_of(BOTH)))
    got = emu.read_dram(0, *probe.result)
    lines = [line.split(";")[0].strip() for line in probe.text.splitlines()]
    skipped = [line for line in lines if "relu" not in line and "window" not in line]
    flag_ignored = [
        line.replace(" relu", "").replace("matmul window", "matmul") for line in lines if "configure" not in line
    ]
    for plain in ("\n".join(skipped), "\n".join(flag_ignored)):
        emu = Emulator(BOTH)
        emu.write_dram(0, 0, probe.inputs)
        emu.execute(assemble(plain, layout_of(BOTH)))
        assert not np.array_equal(emu.read_dram(0, *probe.result), got)


def test_the_rtl_core_has_both_extensions():
    assert missing_extensions(get_device("verilator", BOTH)) == []


def test_a_failing_probe_names_the_extension_and_the_fix():
    class Plain(Emulator):
        """An emulator that reads every result as zeros."""

        name = "plain"

        def read_dram(self, bank, base, size):
            return np.zeros((size, self.arch.array_size), dtype=np.int64)

    with pytest.raises(DeviceError) as e:
        check_extensions(Plain(BOTH))
    lines = str(e.value).splitlines()
    assert len(lines) == 2
    assert "lacks the SIMD ReLU flag that architecture 'arty_a7_35' has (tvm_tensil.simd_relu" in lines[0]
    assert "lacks the window MatMul" in lines[1] and "load a bitstream built for this architecture" in lines[1]
