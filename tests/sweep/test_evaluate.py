"""One point's evaluation: the latency model's figures, and every failure as a result, not a raise.

Mirrors python/tvm_tensil/sweep/evaluate.py.
"""

import onnx
import pytest
from tvm.relax.frontend.onnx import from_onnx

from tvm_tensil import offload, zoo
from tvm_tensil.arch import PRESETS
from tvm_tensil.sweep.evaluate import evaluate_point


@pytest.fixture(scope="module")
def cnn() -> bytes:
    return zoo.small_cnn().SerializeToString()


def test_cycles_are_the_builds_latency_model(cnn):
    arch = PRESETS["pynqz1"].replace(array_size=4)
    row = evaluate_point(cnn, arch.to_dict(), synthesis=False, time_limit=600)
    _, report = offload(from_onnx(onnx.load_from_string(cnn), keep_params_in_input=False), arch)
    assert row["status"] == "ok" and row["cycles"] == report.total_cycles > 0
    assert row["ms"] == pytest.approx(report.total_cycles / (arch.clock_mhz * 1e3), abs=1e-4)
    assert (row["partitions"], row["cpu_ops"]) == (1, 1) and "softmax" in row["cpu_reason"]


def test_nothing_offloaded_says_why(cnn):
    arch = PRESETS["pynqz1"].replace(local_depth=3)
    row = evaluate_point(cnn, arch.to_dict(), synthesis=False, time_limit=600)
    assert row["status"] == "not_offloaded" and "local_depth is 3" in row["error"]


def test_failures_are_results(cnn, monkeypatch):
    arch = PRESETS["pynqz1"].to_dict()
    row = evaluate_point(b"not onnx", arch, synthesis=False, time_limit=600)
    assert row["status"] == "compile_error" and row["error"]
    row = evaluate_point(cnn, arch, synthesis=False, time_limit=0.001)
    assert row["status"] == "timeout" and "time limit of 0.001 s" in row["error"]
    monkeypatch.setenv("PATH", "/nonexistent")
    row = evaluate_point(cnn, arch, synthesis=True, time_limit=600, cache=False)
    assert row["status"] == "synthesis_error" and "apt-get install yosys" in row["error"]
    assert row["cycles"] > 0  # what was measured before the failure stays


def test_a_time_limit_holds_when_a_library_swallows_the_alarm(cnn, monkeypatch):
    """TVM's ONNX importer turns errors inside ONNX's checker into warnings: an alarm raised there
    must not let the point pass as "ok"."""
    import time

    from tvm_tensil.sweep import evaluate

    real = evaluate._import_model

    def swallowing_import(model):
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            try:
                time.sleep(0.01)
            except Exception:  # noqa: BLE001, S110 - what such a library does
                pass
        return real(model)

    monkeypatch.setattr(evaluate, "_import_model", swallowing_import)
    row = evaluate_point(cnn, PRESETS["pynqz1"].to_dict(), synthesis=False, time_limit=0.05)
    assert row["status"] == "timeout" and "time limit of 0.05 s" in row["error"]
