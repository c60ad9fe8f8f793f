"""Symbolic input dimensions: bound from input_shapes, a batch alone to 1 with a warning, otherwise a
one-line error naming the input; a build that offloads nothing says so. Mirrors byoc/shapes.py."""

import subprocess
import sys
import warnings

import numpy as np
import onnx
import pytest
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

import tvm_tensil
from tvm_tensil import zoo


def _dynamic(*symbolic: tuple[int, str]) -> onnx.ModelProto:
    model = zoo.small_cnn(softmax=False)
    for axis, name in symbolic:
        model.graph.input[0].type.tensor_type.shape.dim[axis].dim_param = name
    return model


def test_a_symbolic_batch_is_built_for_1_with_a_warning_or_as_given():
    mod = from_onnx(_dynamic((0, "batch")), keep_params_in_input=False)
    with pytest.warns(tvm_tensil.byoc.InputShapeWarning, match=r"input 'x' \(batch, 3, 16, 16\) .* batch 1"):
        ex = tvm_tensil.build(mod, target="tensil")
    assert ex.tensil_report.cpu_ops == []  # everything on the TCU
    x = np.random.default_rng(0).standard_normal((3, 3, 16, 16)).astype(np.float32)
    cpu = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ex = tvm_tensil.build(mod, target="tensil", input_shapes={"x": (3, 3, 16, 16)})
    tcu = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert ex.tensil_report.cpu_ops == [] and np.max(np.abs(tcu - cpu)) < 0.02 * np.ptp(cpu)


@pytest.mark.parametrize(
    "shapes, message",
    [
        (None, r"input 'x' has the symbolic shape \(batch, 3, h, w\).*--input-shape x=\?,3,\?,\?"),
        ({"x": (1, 3, 16)}, r"gives input 'x' 3 dimensions \(1, 3, 16\); the model's is \(batch, 3, h, w\)"),
        ({"x": (1, 4, 16, 16)}, r"fixes dimension 1 of \(batch, 3, h, w\) to 3"),
        ({"y": (1, 3, 16, 16)}, r"names \['y'\], which the model does not take; its inputs: \['x'\]"),
    ],
)
def test_shapes_that_are_missing_or_do_not_fit_are_one_line(shapes, message):
    mod = from_onnx(_dynamic((0, "batch"), (2, "h"), (3, "w")), keep_params_in_input=False)
    with pytest.raises(tvm_tensil.InputShapeError, match=message):
        tvm_tensil.build(mod, target="tensil", input_shapes=shapes)


def test_a_build_that_offloads_nothing_says_so():
    b = zoo.OnnxBuilder(0)
    mod = from_onnx(b.model({"x": [1, 10]}, b.op("Softmax", ["x"], axis=1)), keep_params_in_input=False)
    with pytest.warns(tvm_tensil.OffloadWarning, match=r"nothing of this model runs on the TCU \(softmax is not on"):
        tvm_tensil.build(mod, target="tensil")


def test_the_cli_takes_input_shapes_and_can_require_offload(tmp_path):
    onnx.save(_dynamic((0, "batch"), (2, "h"), (3, "w")), tmp_path / "dyn.onnx")

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "tvm_tensil.cli", *(str(a) for a in args)],
            capture_output=True,
            text=True,
            timeout=600,
        )

    r = cli("compile", tmp_path / "dyn.onnx", "-o", tmp_path / "a")
    assert r.returncode == 2 and "--input-shape x=?,3,?,?" in r.stderr and r.stderr.count("\n") == 1
    r = cli("compile", tmp_path / "dyn.onnx", "-o", tmp_path / "b", "--input-shape", "x=2,3,16,16", "--require-offload")
    assert r.returncode == 0 and "on the CPU: nothing" in r.stdout, r.stderr[-2000:]
    assert cli("compile", tmp_path / "dyn.onnx", "-o", tmp_path / "c", "--input-shape", "x=2,3").returncode == 2
    b = zoo.OnnxBuilder(0)
    onnx.save(b.model({"x": [1, 10]}, b.op("Softmax", ["x"], axis=1)), tmp_path / "soft.onnx")
    r = cli("compile", tmp_path / "soft.onnx", "-o", tmp_path / "d", "--require-offload")
    assert r.returncode == 2 and "nothing of soft.onnx runs on the TCU" in r.stderr


def test_the_cli_prints_a_warning_as_one_line(tmp_path):
    onnx.save(_dynamic((0, "batch")), tmp_path / "dyn.onnx")
    r = subprocess.run(
        [sys.executable, "-m", "tvm_tensil.cli", "compile", str(tmp_path / "dyn.onnx"), "-o", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stderr.splitlines() == [
        "tvm-tensil: InputShapeWarning: input 'x' (batch, 3, 16, 16) has a symbolic batch: built for batch 1; "
        "for another, pass input_shapes={'x': (N, ...)} (CLI: --input-shape x=N,...)"
    ]
