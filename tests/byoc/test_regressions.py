"""Minimal networks for defects that once computed a wrong result or aborted a build. Each is
compared with TVM's CPU build: offloaded within the bound, or left on the CPU with a reason."""

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

import tvm_tensil
from tvm_tensil.numbers import FP32BP16
from tvm_tensil.zoo import OnnxBuilder

FP32 = tvm_tensil.load_arch("pynqz1").replace(data_type=FP32BP16, name="pynqz1_fp32bp16")


def _model(b, inputs, outputs, opset=17):
    g = helper.make_graph(
        b.nodes,
        "g",
        [helper.make_tensor_value_info(k, t, s) for k, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        b.inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _both(model, x, arch=FP32, **build):
    mod = from_onnx(model, keep_params_in_input=build.pop("keep_params_in_input", False))
    arg = tvm.runtime.tensor(x)
    cpu = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](arg).numpy()
    ex = tvm_tensil.build(mod, target="tensil", arch=arch)
    tcu = relax.VirtualMachine(ex, tvm.cpu())["main"](arg).numpy()
    return cpu, tcu, ex.tensil_report


def _float(shape):
    return {"x": (TensorProto.FLOAT, shape)}


def _rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_two_identical_residual_blocks_each_read_their_own_input():
    b = OnnxBuilder(1)
    x = "x"
    for _ in range(2):  # the partitioner reuses one composite for both adds (and both convs)
        x = b.op("Add", [x, b.op("Relu", [b.conv(x, 8, 8)])])
    cpu, tcu, report = _both(_model(b, _float([1, 8, 8, 8]), [x]), _rand((1, 8, 8, 8)))
    assert report.cpu_ops == []
    assert np.max(np.abs(tcu - cpu)) < 0.01 * np.ptp(cpu)


def test_sppf_chained_max_pools_each_pool_the_previous_one():
    b = OnnxBuilder(1)
    pools = ["x"]
    for _ in range(3):
        pools.append(b.op("MaxPool", [pools[-1]], kernel_shape=[5, 5], pads=[2] * 4, strides=[1, 1]))
    y = b.op("Concat", pools, axis=1)
    cpu, tcu, report = _both(_model(b, _float([1, 8, 8, 8]), [y]), _rand((1, 8, 8, 8)))
    assert report.cpu_ops == []
    np.testing.assert_allclose(tcu, cpu, atol=1e-4)


def test_batch_norm_in_training_mode_stays_on_the_cpu():
    b = OnnxBuilder(1)
    r = b.rng
    ins = ["x"] + [
        b.const(v) for v in (r.uniform(0.8, 1.2, 8), r.standard_normal(8), r.standard_normal(8), r.uniform(0.8, 1.2, 8))
    ]
    y = b.op("BatchNormalization", ins, epsilon=1e-5, training_mode=1)
    cpu, tcu, report = _both(_model(b, _float([2, 8, 4, 4]), [y]), _rand((2, 8, 4, 4)))
    assert [o["op"] for o in report.cpu_ops] == ["relax.nn.batch_norm"]
    np.testing.assert_allclose(tcu, cpu, atol=1e-5)


def test_elementwise_on_a_1d_tensor_does_not_abort():
    b = OnnxBuilder(1)
    y = b.op("Mul", ["x", b.const(np.array(2.0))])
    y = b.op("Sub", [y, b.const(np.ones(16))])
    y = b.op("Div", [y, b.const(np.full(16, 4.0))])
    cpu, tcu, report = _both(_model(b, _float([16]), [y]), _rand((16,)))
    assert report.partitions == {}
    np.testing.assert_allclose(tcu, cpu, atol=1e-6)


def test_int8_clip_with_constant_bounds_does_not_abort():
    b = OnnxBuilder(1)
    b.inits += [
        helper.make_tensor("lo", TensorProto.INT8, [], [-5]),
        helper.make_tensor("hi", TensorProto.INT8, [], [7]),
    ]
    y = b.op("Clip", ["x", "lo", "hi"])
    model = _model(b, {"x": (TensorProto.INT8, [1, 4, 3, 3])}, [y])
    x = np.arange(-18, 18, dtype=np.int8).reshape(1, 4, 3, 3)
    cpu, tcu, report = _both(model, x)
    assert report.partitions == {}
    np.testing.assert_array_equal(tcu, cpu)


def test_a_dynamic_batch_with_a_reshape_runs_for_the_batch_given():
    """A symbolic batch (and a Reshape keeping it) is bound from input_shapes: offloaded and right."""
    b = OnnxBuilder(1)
    y = b.op("Relu", [b.conv("x", 8, 8)])
    b.inits.append(helper.make_tensor("shape", TensorProto.INT64, [2], [0, -1]))
    y = b.op("Reshape", [y, "shape"])
    model = _model(b, _float(["N", 8, 8, 8]), [y])
    mod = from_onnx(model, keep_params_in_input=False)
    ex = tvm_tensil.build(mod, target="tensil", arch=FP32, input_shapes={"x": (3, 8, 8, 8)})
    report = ex.tensil_report
    assert report.partitions
    x = _rand((3, 8, 8, 8))
    cpu = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    tcu = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert np.max(np.abs(tcu - cpu)) < 0.01 * np.ptp(cpu)  # FP32BP16: a logic error would be far above


def test_dram0_space_of_dead_tensors_is_reused():
    """Six 16-channel 64x64 maps: 57344 vectors if never reused, 32768 with two alive at a time."""
    b = OnnxBuilder(1)
    y = "x"
    for _ in range(6):
        y = b.op("Relu", [b.conv(y, 16, 16)])
    arch = FP32.replace(dram0_depth=32768, name="dram0_32k")
    cpu, tcu, report = _both(_model(b, _float([1, 16, 64, 64]), [y]), _rand((1, 16, 64, 64)), arch)
    assert report.cpu_ops == []
    assert next(iter(report.partitions.values()))["memory"]["dram0_vectors"] == 32768
    assert np.max(np.abs(tcu - cpu)) < 0.01 * np.ptp(cpu)


def test_weights_given_as_graph_inputs_are_named_as_the_reason():
    b = OnnxBuilder(1)
    y = b.op("Relu", [b.conv("x", 8, 8)])
    ex = tvm_tensil.build(from_onnx(_model(b, _float([1, 8, 8, 8]), [y]), keep_params_in_input=True), target="tensil")
    conv = next(o for o in ex.tensil_report.cpu_ops if o["op"] == "relax.nn.conv2d")
    assert "weights are a graph input" in conv["reason"] and "keep_params_in_input=False" in conv["reason"]
    assert "keep_params_as_input=False" in conv["reason"]  # the PyTorch importer's name for it


def test_inputs_outside_the_range_warn_with_the_name_and_count():
    from tvm_tensil.runtime import SaturationWarning

    b = OnnxBuilder(1)
    y = b.op("Relu", [b.conv("x", 8, 8, k=1, pad=0)])
    model = _model(b, _float([1, 8, 2, 2]), [y])
    ex = tvm_tensil.build(from_onnx(model, keep_params_in_input=False), target="tensil")
    x = np.zeros((1, 8, 2, 2), np.float32)
    x[0, :3, 0, 0] = [500.0, -300.0, 129.0]
    with pytest.warns(SaturationWarning, match=r"input 'x' \(model input 'x'\) has 3 values outside its range \[-128"):
        relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x))


@pytest.mark.parametrize("preset", ["pynqz1", "pynqz1_12x12"])
def test_channel_split_and_slice_at_any_offset_are_exact(preset):
    """YOLOv4-tiny's route groups: a split and a slice cut channel blocks anywhere; 0/1 selection is
    exact, so values on a 1/16 grid come back unchanged in FP16BP8, and the whole net is offloaded."""
    b = OnnxBuilder(1)
    first, second = b.ops("Split", ["x", b.const(np.array([5, 22]), "s", np.int64)], 2, axis=1)
    part = b.op(
        "Slice",
        [
            second,
            b.const(np.array([3]), "b", np.int64),
            b.const(np.array([-2]), "e", np.int64),
            b.const(np.array([1]), "a", np.int64),
        ],
    )
    y = b.op("Concat", [part, first, part], axis=1)
    x = np.round(_rand((1, 27, 5, 6)) * 16) / 16
    cpu, tcu, report = _both(_model(b, _float([1, 27, 5, 6]), [y]), x, arch=preset)
    assert report.cpu_ops == [] and len(report.partitions) == 1
    np.testing.assert_array_equal(tcu, cpu)
