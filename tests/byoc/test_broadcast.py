"""A constant against a tensor broadcasts as numpy says: only one value per channel is a bias.

A (C,) vector added to an NCHW map varies along W (shapes align on the right), also when C == W;
treating it as a per-channel bias gives silently wrong numbers. One shape class per case, end to
end: a Conv 3->8 on 8x8 plus a constant, at FP32BP16 against TVM's CPU build.
"""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

import tvm_tensil
from tvm_tensil import zoo
from tvm_tensil.byoc.broadcast import broadcast_reason, channel_values
from tvm_tensil.numbers import FP32BP16

X = (1, 8, 8, 8)  # C == H == W: every misreading of a shape type-checks

# shape class -> whether it is one value per channel (a bias the TCU takes)
CASES = {
    "scalar": ((), True),
    "(1,)": ((1,), True),
    "(C,)": ((8,), False),  # numpy: along W
    "(1, C, 1, 1)": ((1, 8, 1, 1), True),
    "(C, 1, 1)": ((8, 1, 1), True),
    "(W,) as (1, 1, 1, W)": ((1, 1, 1, 8), False),
    "(H, W)": ((8, 8), False),
    "full": ((1, 8, 8, 8), False),
}


@pytest.mark.parametrize("name", CASES)
def test_the_rule_is_numpys(name):
    shape, per_channel = CASES[name]
    value = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    assert (broadcast_reason(shape, X) is None) == per_channel
    values = channel_values(value, X)
    if per_channel:  # the vector that, broadcast as (1, C, 1, 1), is what numpy adds
        zeros = np.zeros(X, np.float32)
        np.testing.assert_array_equal(zeros + values.reshape(1, -1, 1, 1), zeros + value)
    else:
        assert values is None


def test_a_dense_layers_bias_is_per_feature_and_a_batch_varying_one_is_not():
    assert broadcast_reason((16,), (4, 16)) is None and broadcast_reason((1, 16), (4, 16)) is None
    assert "varies along N" in broadcast_reason((4, 1), (4, 16))
    assert "does not broadcast" in broadcast_reason((3,), (4, 16))


@pytest.mark.parametrize("conv_bias", [False, True], ids=["conv", "conv_with_bias"])
@pytest.mark.parametrize("name", CASES)
def test_conv_plus_constant_matches_the_cpu(name, conv_bias):
    """Without a bias of its own the conv fuses the add as its bias; with one, the add stands alone."""
    shape, per_channel = CASES[name]
    b = zoo.OnnxBuilder(0)
    constant = b.const(np.arange(np.prod(shape), dtype=np.float32).reshape(shape))
    y = b.op("Add", [b.conv("x", 3, 8, bias=conv_bias), constant])
    mod = from_onnx(b.model({"x": [1, 3, 8, 8]}, b.op("Relu", [y])), keep_params_in_input=False)
    arch = tvm_tensil.load_arch("pynqz1").replace(data_type=FP32BP16, name="pynqz1_fp32")
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    cpu = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    ex = tvm_tensil.build(mod, target="tensil", arch=arch)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert np.max(np.abs(got - cpu)) < 1e-3 * np.ptp(cpu)
    on_cpu = [op for op in ex.tensil_report.cpu_ops if op["op"] == "relax.add"]
    assert bool(on_cpu) != per_channel, ex.tensil_report.cpu_ops
    for op in on_cpu:  # the reason is numpy's reading of the shape
        assert "not per channel" in op["reason"] or "does not broadcast" in op["reason"], op["reason"]


def test_a_sequences_features_are_its_channels():
    """(B, S, K), a transformer's rows: the per-channel axis is K (the last), not S."""
    assert broadcast_reason((16,), (2, 5, 16)) is None and broadcast_reason((1, 1, 16), (2, 5, 16)) is None
    assert "varies along S" in broadcast_reason((5, 1), (2, 5, 16))
    assert "varies along B" in broadcast_reason((2, 1, 1), (2, 5, 16))
    np.testing.assert_array_equal(channel_values(np.arange(16.0), (2, 5, 16)), np.arange(16.0))
