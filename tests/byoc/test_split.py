"""A partition whose weights do not fit DRAM1 runs as consecutive partitions that each fit."""

import warnings

import numpy as np
import pytest
import tvm
import zoo
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

import tvm_tensil
from tvm_tensil.compiler import CompileOptions
from tvm_tensil.numbers import FP32BP16

# small_cnn(16)'s weights: conv1 81 vectors, conv2 162, the dense layer 576, biases (pynqz1's 8 lanes).
DEPTH = 600  # every layer fits, the three together do not


def _run(ex, x):
    return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def test_weights_too_big_for_dram1_run_in_pieces_that_fit():
    mod = from_onnx(zoo.small_cnn(size=16, softmax=False), keep_params_in_input=False)
    arch = tvm_tensil.load_arch("pynqz1").replace(dram1_depth=DEPTH, data_type=FP32BP16, name="small_dram1")
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype("float32")
    cpu = _run(tvm.compile(mod, target="llvm"), x)
    # (Weights all in DRAM1: a dense layer streamed from both banks would put half in DRAM0.)
    options = CompileOptions(stream_dense=False)
    with pytest.warns(tvm_tensil.ReloadWarning, match=r"need \d+ vectors of DRAM1 together, the architecture has 600"):
        ex = tvm_tensil.build(mod, target="tensil", arch=arch, options=options)
    report = ex.tensil_report
    assert report.cpu_ops == []
    assert len(report.partitions) >= 2
    ops = [n["op"] for p in report.partitions.values() for n in p["nodes"]]
    assert ops.count("conv2d") == 2 and ops.count("dense") == 1  # every layer once, in order
    assert all(p["memory"]["dram1_vectors"] <= DEPTH for p in report.partitions.values())
    # Each run writes the pieces' weights again (they do not fit together): the CPU's logits each time.
    for _ in range(2):
        assert np.abs(_run(ex, x) - cpu).max() <= 1e-3 * np.ptp(cpu)


def test_pieces_are_calibrated_on_what_reaches_them(monkeypatch):
    """The weights' estimate cuts the partition before anything is compiled: no calibrated compile of
    the whole partition is thrown away (each compile of a piece is its last)."""
    from tvm_tensil.byoc import codegen

    compiles = []
    real = codegen.compile_partition

    def counted(*args, **kwargs):
        compiles.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(codegen, "compile_partition", counted)
    mod = from_onnx(zoo.small_cnn(size=16, softmax=False), keep_params_in_input=False)
    arch = tvm_tensil.load_arch("pynqz1").replace(dram1_depth=DEPTH, name="small_dram1")
    rng = np.random.default_rng(1)
    with pytest.warns(tvm_tensil.ReloadWarning):
        ex = tvm_tensil.build(mod, target="tensil", arch=arch, calibration=rng.standard_normal((4, 3, 16, 16)))
    parts = ex.tensil_report.partitions.values()
    assert len(parts) >= 2 and all(p["calibration_samples"] == 4 for p in parts)
    assert len(compiles) == len(parts)


def test_a_value_the_result_takes_from_an_early_piece_comes_from_that_piece():
    """A model output computed before the cut (a feature map the model also returns): the last piece
    does not pass it through (its input and output would share DRAM0); ``main`` takes it from the
    piece that computed it."""
    b = zoo.OnnxBuilder(seed=3)
    early = b.op("Relu", [b.conv("x", 3, 16)])
    late = b.op("Relu", [b.conv(b.op("Relu", [b.conv(early, 16, 16)]), 16, 16)])
    mod = from_onnx(b.model({"x": [1, 3, 8, 8]}, [early, late]), keep_params_in_input=False)
    # Weights: 162 + 324 + 324 vectors (8 lanes): the first two convs in one piece, the last alone.
    arch = tvm_tensil.load_arch("pynqz1").replace(dram1_depth=700, data_type=FP32BP16, name="small_dram1")
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype("float32")

    def run(ex):
        return [t.numpy() for t in relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x))]

    cpu = run(tvm.compile(mod, target="llvm"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tvm_tensil.ReloadWarning)
        ex = tvm_tensil.build(mod, target="tensil", arch=arch)
    assert [op["reason"] for op in ex.tensil_report.cpu_ops] == []
    assert len(ex.tensil_report.partitions) == 2
    for want, got in zip(cpu, run(ex)):
        assert np.abs(got - want).max() <= 1e-3 * np.ptp(want)


@pytest.mark.parametrize("channels, group", [(24, 4), (32, 32), (16, 1)])
def test_the_dram1_estimate_of_a_conv_is_what_the_compiler_packs(channels, group):
    """The split's estimate of a conv's weights (grouped, depthwise, plain; with its bias, which
    rides in the blocks' bias rows) is the partition's DRAM1 use: a grouped conv whose groups
    straddle channel blocks reads more input blocks than its per-group width, and a bias counted
    as a weight made the estimate err high."""
    from tvm_tensil.byoc.split import partition_weight_vectors
    from tvm_tensil.zoo import OnnxBuilder

    b = OnnxBuilder(seed=3)
    y = b.conv("x", channels, channels, group=group, bias=True)
    mod = from_onnx(b.model({"x": [1, channels, 8, 8]}, y), keep_params_in_input=False)
    arch = tvm_tensil.load_arch("pynqz1")
    (part,) = tvm_tensil.build(mod, target="tensil", arch=arch).tensil_report.partitions.values()
    (func,) = (f for f in tvm_tensil.partition_for_tensil(mod, arch).functions.values() if "Codegen" in (f.attrs or {}))
    assert partition_weight_vectors(func, arch) == part["memory"]["dram1_vectors"]
