"""The board self-test (python/tvm_tensil/selftest.py) passes over the simulated board and
fails, naming the step, on a device that corrupts data."""

import subprocess
import sys

from tvm_tensil.arch import PRESETS
from tvm_tensil.runtime import Emulator
from tvm_tensil.selftest import run_selftest


def test_selftest_passes_on_the_simulated_board_from_the_command_line():
    r = subprocess.run(
        [sys.executable, "-m", "tvm_tensil.cli", "selftest", "--device", "sim-board", "--arch", "pynqz1"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert r.stdout.count("[PASS]") == 5, r.stdout
    assert "self-test passed on the sim-board device, architecture pynqz1 (8x8 FP16BP8)" in r.stdout, r.stdout


class FlippedBit(Emulator):
    """An emulator whose DRAM reads flip one bit: a broken board."""

    name = "broken"

    def read_dram(self, bank, base, size):
        out = super().read_dram(bank, base, size)
        out[0, 0] ^= 1
        return out


def test_selftest_names_the_failing_step():
    lines = []
    assert not run_selftest(FlippedBit(PRESETS["pynqz1"]), log=lines.append, model=False)
    assert lines[0].startswith("[FAIL] DRAM round trip")
    assert lines[-1] == "self-test FAILED on the broken device, architecture pynqz1 (8x8 FP16BP8)"
