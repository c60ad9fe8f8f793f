"""Build errors: one clear message each; unsupported ops never raise, they stay on the CPU."""

import re

import numpy as np
import pytest
import zoo
from tvm.relax.frontend.onnx import from_onnx

import tvm_tensil
from tvm_tensil.arch import ArchitectureError
from tvm_tensil.numbers import FP32BP16


def _cpu_and_tcu(mod, arch, x):
    import tvm
    from tvm import relax

    cpu = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    ex = tvm_tensil.build(mod, target="tensil", arch=arch)
    tcu = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    return cpu, tcu, ex.tensil_report


def test_model_too_big_for_dram0_stays_on_the_cpu_with_the_reason():
    mod = from_onnx(zoo.small_cnn(size=32), keep_params_in_input=False)
    tiny = tvm_tensil.load_arch("pynqz1").replace(dram0_depth=64, name="tiny")
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    cpu, tcu, report = _cpu_and_tcu(mod, tiny, x)
    assert report.partitions == {}
    conv = next(o for o in report.cpu_ops if o["op"] == "relax.nn.conv2d")
    # input 4096 (written as its conv's 3x3 windows: 27 channels, 4 blocks of 8) + output 2 + the
    # two largest maps alive together (conv1 1024, its pool 256)
    assert "needs 5378 vectors of DRAM0, the architecture has 64 (dram0_depth)" in conv["reason"]
    assert conv["reason"].endswith("or an architecture with dram0_depth >= 5378")
    np.testing.assert_allclose(tcu, cpu, rtol=1e-5, atol=1e-6)


def test_weights_too_big_for_dram1_stay_on_the_cpu_with_the_reason():
    mod = from_onnx(zoo.mlp(features=64, hidden=64), keep_params_in_input=False)
    tiny = tvm_tensil.load_arch("pynqz1").replace(dram1_depth=32, name="tiny")
    x = np.random.default_rng(0).standard_normal((4, 64)).astype("float32")
    cpu, tcu, report = _cpu_and_tcu(mod, tiny, x)
    assert report.partitions == {}
    assert any(
        "vectors of DRAM1 for its weights, the architecture has 32 (dram1_depth): an architecture with "
        "dram1_depth >=" in o["reason"]
        for o in report.cpu_ops
    )
    np.testing.assert_allclose(tcu, cpu, rtol=1e-5, atol=1e-6)


def test_conv_weights_too_big_for_dram1_say_so_even_when_tilings_are_compared():
    """A conv whose tilings the scheduler compares (each lowered and encoded to time it) reports the
    whole need, not the encoder's complaint about an address."""
    mod = from_onnx(zoo.small_cnn(size=16, softmax=False), keep_params_in_input=False)
    tiny = tvm_tensil.load_arch("pynqz1").replace(dram1_depth=64, data_type=FP32BP16, name="tiny")
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype("float32")
    cpu, tcu, report = _cpu_and_tcu(mod, tiny, x)
    # The partition is cut into pieces (byoc/split.py); the convs that still do not fit say so.
    reasons = {o["reason"] for o in report.cpu_ops if o["op"] == "relax.nn.conv2d"}
    need = "vectors of DRAM1 for its weights, the architecture has 64 (dram1_depth)"
    assert reasons and all(need in r for r in reasons)
    assert np.abs(tcu - cpu).max() <= 1e-3 * np.ptp(cpu)  # logits; the first conv on the TCU (FP32BP16)


def test_wrong_arch_name():
    mod = from_onnx(zoo.mlp(), keep_params_in_input=False)
    with pytest.raises(ArchitectureError, match="unknown architecture 'pynq-z1'; did you mean 'pynqz1'"):
        tvm_tensil.build(mod, target="tensil", arch="pynq-z1")


def test_unsupported_dtype_stays_on_cpu_with_the_reason():
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 8])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    mod = from_onnx(model, keep_params_in_input=False)
    report = tvm_tensil.build(mod, target="tensil").tensil_report
    assert report.partitions == {}
    assert report.cpu_ops[0]["reason"].startswith("data type float16")


def test_saturation_at_run_time_is_reported():
    import tvm
    from tvm import relax

    from tvm_tensil.runtime import SaturationWarning

    b = zoo.OnnxBuilder()
    y = b.op("Gemm", ["x", b.const(np.eye(8) * 100), b.const(np.zeros(8))], transB=1)
    mod = from_onnx(b.model({"x": [1, 8]}, y), keep_params_in_input=False)
    ex = tvm_tensil.build(mod, target="tensil")
    with pytest.warns(SaturationWarning, match="values saturated at the FP16BP8 range"):
        out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(np.full((1, 8), 2.0, "float32")))
    np.testing.assert_array_equal(out.numpy(), np.full((1, 8), 32767 / 256, "float32"))


@pytest.mark.parametrize(
    "target, message",
    [
        ("cuda", "target 'cuda' (kind cuda) cannot host a Tensil build"),
        ("no-such-target", "target 'no-such-target' is not a TVM target"),
    ],
)
def test_a_target_that_cannot_host_the_build_is_refused(target, message):
    mod = from_onnx(zoo.mlp(), keep_params_in_input=False)
    with pytest.raises(ValueError, match=re.escape(message)):
        tvm_tensil.build(mod, target=target, arch="pynqz1")


def test_a_cpu_target_hosts_the_build():
    import tvm
    from tvm import relax

    mod = from_onnx(zoo.mlp(batch=4), keep_params_in_input=False)
    x = np.random.default_rng(0).standard_normal((4, 64)).astype("float32")
    ex = tvm_tensil.build(mod, target={"kind": "llvm", "opt-level": 2}, arch="pynqz1")
    assert ex.tensil_report.partitions  # the dense layers still run on the TCU
    assert relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy().shape == (4, 10)


def test_build_says_how_to_import_a_model_it_cannot_take(tmp_path):
    import onnx

    model = zoo.mlp()
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    for wrong, hint in ((model, "from_onnx"), (str(path), "from_onnx"), (path, "from_onnx"), ([1], "frontend")):
        with pytest.raises(TypeError, match=f"takes a Relax IRModule, not .*{hint}"):
            tvm_tensil.build(wrong, target="tensil", arch="pynqz1")


def test_build_says_how_to_import_a_torch_module():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="torch.export.export"):
        tvm_tensil.build(torch.nn.Linear(4, 2), target="tensil", arch="pynqz1")


def test_reasons_say_what_the_op_is():
    """A product of two computed tensors is not 'weights that are a graph input'; an identity
    reshape is free (offloaded, right), not one that 'reorders data'."""
    b = zoo.OnnxBuilder(0)
    h = b.op("Relu", [b.gemm("x", 8, 8)])
    square = b.op("MatMul", [h, b.op("Transpose", [h], perm=[1, 0])])  # (2, 2): activation x activation
    same = b.op("Reshape", [b.gemm(square, 2, 2), b.const(np.array([2, 2]), "s", dtype=np.int64)])
    mod = from_onnx(b.model({"x": [2, 8]}, b.op("Relu", [same])), keep_params_in_input=False)
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    cpu, tcu, report = _cpu_and_tcu(mod, "pynqz1", x)
    np.testing.assert_allclose(tcu, cpu, atol=0.05 * np.ptp(cpu))
    reasons = {o["op"]: o["reason"] for o in report.cpu_ops}
    assert "the TCU multiplies by constant weights" in reasons["relax.matmul"], reasons
    assert "relax.reshape" not in reasons, reasons


def test_an_identity_reshape_of_a_map_is_free_and_right():
    b = zoo.OnnxBuilder(0)
    same = b.op("Reshape", [b.conv("x", 3, 8), b.const(np.array([1, 8, 8, 8]), "s", dtype=np.int64)])
    mod = from_onnx(b.model({"x": [1, 3, 8, 8]}, b.op("Relu", [b.conv(same, 8, 4)])), keep_params_in_input=False)
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    cpu, tcu, report = _cpu_and_tcu(mod, "pynqz1", x)
    assert report.cpu_ops == []
    np.testing.assert_allclose(tcu, cpu, atol=0.02 * np.ptp(cpu))
