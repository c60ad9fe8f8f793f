"""The training workload of the profile-guided simulation build (python/tvm_tensil/rtl/training.py):
valid on every architecture, the same bits on the emulator and the core, and a build that uses it."""

import numpy as np
import pytest

from tvm_tensil.arch import Architecture, load_arch, preset_names
from tvm_tensil.isa import Direction
from tvm_tensil.rtl import sim, training
from tvm_tensil.runtime import Emulator, get_device

TINY = Architecture("FP16BP8", 4, 256, 256, 64, 32, stride0_depth=4, stride1_depth=4, name="train_4x4")
NO_REGISTERS = TINY.replace(simd_registers_depth=0, name="train_4x4_r0")


@pytest.mark.parametrize("name", preset_names())
def test_the_workload_fits_every_preset(name):
    arch = load_arch(name)
    prog = training.program(arch, rounds=2)  # from_instructions checks every address and size
    kinds = {type(i).__name__ for i in prog}
    assert {"DataMove", "LoadWeights", "MatMul", "SIMD"} <= kinds
    directions = {i.direction for i in prog if type(i).__name__ == "DataMove"}
    assert {
        Direction.DRAM0_TO_LOCAL,
        Direction.DRAM1_TO_LOCAL,
        Direction.ACC_TO_LOCAL,
        Direction.LOCAL_TO_DRAM0,
    } <= directions


@pytest.mark.parametrize("arch", [TINY, NO_REGISTERS], ids=lambda a: a.name)
def test_the_workload_gives_the_same_bits_on_the_core(arch):
    prog = training.program(arch, rounds=3)
    rng = np.random.default_rng(1)
    banks = [
        arch.data_type.from_float(rng.uniform(-1, 1, (depth, arch.array_size)))
        for depth in (arch.dram0_depth, arch.dram1_depth)
    ]
    devices = [Emulator(arch), get_device("verilator", arch)]
    for dev in devices:
        for bank, data in enumerate(banks):
            dev.write_dram(bank, 0, data)
        dev.execute(prog)
    emulated, rtl = (d.read_dram(0, 0, arch.dram0_depth) for d in devices)
    assert emulated.any()
    np.testing.assert_array_equal(rtl, emulated)


def test_a_fresh_build_is_profile_guided(tmp_path, monkeypatch, capfd):
    """Instrumented build, training run, optimised build: no fallback message, a working library."""
    monkeypatch.setenv("TVM_TENSIL_CACHE", str(tmp_path))
    monkeypatch.delenv("TVM_TENSIL_PGO", raising=False)
    lib = sim.build(TINY)
    err = capfd.readouterr().err
    assert "training run" in err and "skipped" not in err, err
    assert lib.exists() and not (lib.parent / "obj").exists()
    assert training.run(str(lib), TINY) > 0
    monkeypatch.setenv("TVM_TENSIL_PGO", "0")
    assert sim.build(TINY, quiet=True) != lib  # a one-step build is cached apart
