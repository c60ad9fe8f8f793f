"""``build``'s results are values: the report rides on the executable, run statistics on the device
session, and two builds in one process never mix."""

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

from tvm import relax  # noqa: E402
from tvm.relax.frontend.onnx import from_onnx  # noqa: E402

import tvm_tensil  # noqa: E402
from tvm_tensil import zoo  # noqa: E402


def test_two_models_of_one_structure_loaded_side_by_side_keep_their_own_weights(tmp_path):
    """Same graph, different weights: each library, loaded in one process and run interleaved on
    one device, computes its own model (checked against TVM's CPU build of each)."""
    x = tvm.runtime.tensor(np.random.default_rng(0).integers(-16, 17, (2, 64)).astype(np.float32) / 16)
    vms, cpus, reports = [], [], []
    for seed in (1, 2):
        mod = from_onnx(zoo.mlp(batch=2, seed=seed, grid=True), keep_params_in_input=False)
        cpus.append(relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](x).numpy())
        ex = tvm_tensil.build(mod, target="tensil", arch="pynqz1")
        reports.append(ex.tensil_report)
        ex.export_library(str(tmp_path / f"mlp{seed}.so"))
    assert not np.allclose(cpus[0], cpus[1])
    assert set(reports[0].partitions).isdisjoint(reports[1].partitions), "each build names its own partitions"
    for seed in (1, 2):
        vms.append(relax.VirtualMachine(tvm.runtime.load_module(str(tmp_path / f"mlp{seed}.so")), tvm.cpu()))
    with tvm_tensil.device("emulator") as session:
        for _ in range(2):
            for vm, cpu, report in zip(vms, cpus, reports):
                np.testing.assert_allclose(vm["main"](x).numpy(), cpu, atol=1 / 64)
                assert set(session.last_run_stats(report)) == set(report.partitions)


def test_the_report_rides_on_the_executable_with_its_partitions(tmp_path):
    mod = from_onnx(zoo.small_cnn(), keep_params_in_input=False)
    ex = tvm_tensil.build(mod, target="tensil", arch="pynqz1")
    report = ex.tensil_report
    assert report.partitions and set(report.compiled) == set(report.partitions)
    assert [o["op"] for o in report.cpu_ops] == ["relax.nn.softmax"]
    assert "compiled" not in report.to_json()  # the JSON report holds no programs or weights
    paths = tvm_tensil.byoc.write_models(report, tmp_path)
    assert sorted(p.name for p in paths) == sorted(f"{s}.tmodel" for s in report.partitions)


def test_run_statistics_belong_to_the_session_that_ran():
    mod = from_onnx(zoo.mlp(batch=2), keep_params_in_input=False)
    ex = tvm_tensil.build(mod, target="tensil", arch="pynqz1")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    x = tvm.runtime.tensor(np.zeros((2, 64), np.float32))
    with tvm_tensil.device("emulator") as first:
        vm["main"](x)
    with tvm_tensil.device("reference") as second:
        assert second.last_run_stats() == {}
        vm["main"](x)
    assert set(first.last_run_stats()) == set(second.last_run_stats()) == set(ex.tensil_report.partitions)
    assert all(s.cycles is None and s.instructions for s in second.run_stats.values())


def test_import_alone_registers_the_target_the_pipeline_and_the_patterns():
    import subprocess
    import sys

    script = """
import numpy as np, tvm_tensil
from tvm_tensil import zoo
import tvm
from tvm import relax
from tvm.relax.backend.pattern_registry import get_patterns_with_prefix
from tvm.relax.frontend.onnx import from_onnx
names = [p.name for p in get_patterns_with_prefix("tensil")]
assert names and all(n.startswith("tensil.") for n in names), names
assert "tensil.conv2d_bias_relu" in names
mod = from_onnx(zoo.mlp(batch=2), keep_params_in_input=False)
ex = tvm.compile(mod, target="tensil", relax_pipeline="tensil")
with tvm_tensil.device("emulator") as session:
    relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(np.zeros((2, 64), "float32")))
assert session.run_stats, "the pipeline offloaded nothing"
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_tvm_compile_for_the_tensil_target_offloads_and_other_targets_do_not():
    mod = from_onnx(zoo.mlp(batch=2, seed=3), keep_params_in_input=False)
    x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32))
    with tvm_tensil.device("emulator") as session:
        on_tcu = relax.VirtualMachine(tvm.compile(mod, target="tensil"), tvm.cpu())["main"](x).numpy()
    assert session.run_stats, "target='tensil' ran nothing on the TCU"
    built = relax.VirtualMachine(tvm_tensil.build(mod, target="tensil"), tvm.cpu())["main"](x).numpy()
    np.testing.assert_array_equal(on_tcu, built)
    with tvm_tensil.device("emulator") as session:
        relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](x)
    assert not session.run_stats, "an LLVM build must stay on the CPU"


def test_a_missing_cxx_compiler_is_one_line_before_anything_is_built(monkeypatch):
    """Every partition is a C++ source module: without a C++ compiler the build says what to
    install instead of TVM's TypeError after the report."""
    from tvm_tensil.byoc import ToolchainError

    monkeypatch.setenv("CXX", "/nonexistent/g++")
    mod = from_onnx(zoo.small_cnn(), keep_params_in_input=False)
    with pytest.raises(ToolchainError, match=r"needs a C\+\+ compiler .*/nonexistent/g\+\+.*apt-get install g\+\+"):
        tvm_tensil.build(mod, target="tensil")
    monkeypatch.delenv("CXX")
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ToolchainError, match=r"none of g\+\+, clang\+\+, c\+\+ is on PATH"):
        tvm_tensil.build(mod, target="tensil")


def test_the_report_marks_the_cpu_ops_that_split_the_tcu_part():
    """A softmax between two convs is a round trip between the devices (marked); a log-softmax at
    the end is not."""
    from zoo import OnnxBuilder

    b = OnnxBuilder(seed=11)
    y = b.op("Softmax", [b.conv("x", 4, 8, bias=True)], axis=1)
    y = b.op("LogSoftmax", [b.conv(y, 8, 4, bias=True)], axis=1)
    ex = tvm_tensil.build(from_onnx(b.model({"x": [1, 4, 6, 6]}, y), keep_params_in_input=False), target="tensil")
    report = ex.tensil_report
    assert len(report.partitions) == 2
    splits = {op["op"]: op["splits"] for op in report.cpu_ops}
    assert splits == {"relax.nn.softmax": True, "relax.nn.log_softmax": False}
    text = str(report)
    assert "(1 between TCU partitions, marked *" in text and " *relax.nn.softmax" in text
    assert "  relax.nn.log_softmax" in text
