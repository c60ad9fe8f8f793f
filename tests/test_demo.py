"""`tvm-tensil demo`, the README's first command: a zoo network built, run on the emulator and the
RTL core, compared with TVM's CPU build. Mirrors python/tvm_tensil/demo.py."""

from tvm_tensil.demo import run_demo


def test_the_demo_builds_runs_on_both_devices_and_compares():
    lines = []
    assert run_demo("pynqz1", "small_cnn", log=lines.append)
    text = "\n".join(lines)
    assert "small_cnn built for pynqz1" in text and "on the CPU: nothing" in text
    assert "emulator: logits within" in text and "verilator: logits within" in text and " cycles = " in text
    assert "RTL core and emulator: bit-identical" in text and lines[-1] == "demo passed"
