"""Every offloaded op, alone, against TVM's CPU build of the same ONNX model.

Tolerance: inputs and weights lie on a 1/16 grid and stay small, so every product and sum is
exact in FP16BP8 and the TCU must match the CPU bit for bit (bound 0). Ops that multiply by a
reciprocal (average pooling) round once more: the bound is then |max input| * 2^-9 * k + 2^-8.
A wrong tap, a transposed weight or an off-by-one in padding changes outputs by multiples of
1/256 and fails the exact comparison.
"""

import numpy as np
import pytest
from zoo import OnnxBuilder


def grid(rng, shape, lo=-16, hi=16):
    return rng.integers(lo, hi, shape) / 16


def offloaded(report) -> list[str]:
    return [op for p in report.partitions.values() for n in p["nodes"] for op in n["relax_ops"]]


def cpu_ops(report) -> list[str]:
    return [o["op"] for o in report.cpu_ops]


@pytest.mark.parametrize(
    "cin, cout, k, stride, pads, dilation, group",
    [
        (3, 8, 3, 1, [1, 1, 1, 1], 1, 1),
        (5, 12, 3, 2, [1, 1, 1, 1], 1, 1),  # partial channel blocks, stride 2
        (8, 8, 5, 1, [2, 1, 0, 2], 1, 1),  # asymmetric padding (top, left, bottom, right)
        (4, 6, 3, 1, [2, 2, 2, 2], 2, 1),  # dilation
        (16, 16, 3, 1, [1, 1, 1, 1], 1, 16),  # depthwise
        (8, 16, 1, 1, [0, 0, 0, 0], 1, 1),  # pointwise
    ],
)
def test_conv2d(compare, cin, cout, k, stride, pads, dilation, group):
    b = OnnxBuilder(seed=cin + cout + k, grid=True)
    rng = np.random.default_rng(k)
    w = rng.integers(-4, 4, (cout, cin // group, k, k)) / 16
    y = b.op(
        "Conv",
        ["x", b.const(w), b.const(rng.integers(-8, 8, cout) / 16)],
        kernel_shape=[k, k],
        strides=[stride, stride],
        pads=pads,
        dilations=[dilation, dilation],
        group=group,
    )
    m = b.model({"x": [1, cin, 9, 10]}, y)
    cpu, tcu, report, _ = compare(m, {"x": grid(rng, (1, cin, 9, 10))})
    np.testing.assert_array_equal(tcu, cpu)
    assert offloaded(report) == ["relax.nn.conv2d", "relax.add"] and cpu_ops(report) == []


def test_gemm_bias_relu_batch(compare):
    b = OnnxBuilder(seed=1, grid=True)
    rng = np.random.default_rng(1)
    w = rng.integers(-4, 4, (20, 12)) / 16
    y = b.op("Relu", [b.op("Gemm", ["x", b.const(w), b.const(rng.integers(-8, 8, 20) / 16)], transB=1)])
    cpu, tcu, report, _ = compare(b.model({"x": [3, 12]}, y), {"x": grid(rng, (3, 12))})
    np.testing.assert_array_equal(tcu, cpu)
    assert cpu_ops(report) == [] and "relax.nn.relu" in offloaded(report)


def test_matmul_without_bias_and_bias_add(compare):
    b = OnnxBuilder(seed=2, grid=True)
    rng = np.random.default_rng(2)
    y = b.op(
        "Add", [b.op("MatMul", ["x", b.const(rng.integers(-4, 4, (9, 7)) / 16)]), b.const(rng.integers(-8, 8, 7) / 16)]
    )
    cpu, tcu, report, _ = compare(b.model({"x": [2, 9]}, y), {"x": grid(rng, (2, 9))})
    np.testing.assert_array_equal(tcu, cpu)
    assert cpu_ops(report) == []


def test_batchnorm_folds_into_conv_with_bias(compare):
    b = OnnxBuilder(seed=3)
    rng = np.random.default_rng(3)
    y = b.op("Relu", [b.bn(b.conv("x", 4, 8), 8)])
    cpu, tcu, report, _ = compare(b.model({"x": [1, 4, 8, 8]}, y), {"x": rng.standard_normal((1, 4, 8, 8))})
    # Random float weights: within the FP16BP8 error bound for 36-term dot products.
    assert np.max(np.abs(tcu - cpu)) < 36 * 3 * 2**-9
    nodes = [n for p in report.partitions.values() for n in p["nodes"]]
    assert [n["op"] for n in nodes] == ["conv2d"] and nodes[0]["epilogue"] == ["relu"]
    assert cpu_ops(report) == []


def test_standalone_batchnorm_is_a_depthwise_scale(compare):
    b = OnnxBuilder(seed=4)
    rng = np.random.default_rng(4)
    y = b.bn("x", 6)
    cpu, tcu, report, _ = compare(b.model({"x": [1, 6, 5, 5]}, y), {"x": rng.standard_normal((1, 6, 5, 5))})
    assert np.max(np.abs(tcu - cpu)) < 4 * 2**-8
    assert cpu_ops(report) == []


def test_residual_add_relu(compare):
    b = OnnxBuilder(seed=5, grid=True)
    rng = np.random.default_rng(5)
    c = b.conv("x", 8, 8, bias=False, scale=0.1)
    y = b.op("Relu", [b.op("Add", [c, "x"])])
    cpu, tcu, report, _ = compare(b.model({"x": [1, 8, 6, 6]}, y), {"x": grid(rng, (1, 8, 6, 6))})
    np.testing.assert_array_equal(tcu, cpu)
    assert sorted(offloaded(report)) == ["relax.add", "relax.nn.conv2d", "relax.nn.relu"]


@pytest.mark.parametrize("kind", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("k, s, pads", [(2, 2, [0, 0, 0, 0]), (3, 2, [1, 1, 1, 1]), (3, 1, [0, 1, 1, 0])])
def test_pools(compare, kind, k, s, pads):
    b = OnnxBuilder(seed=6, grid=True)
    rng = np.random.default_rng(6)
    y = b.op(kind, ["x"], kernel_shape=[k, k], strides=[s, s], pads=pads)
    x = grid(rng, (1, 10, 9, 9))
    cpu, tcu, report, _ = compare(b.model({"x": [1, 10, 9, 9]}, y), {"x": x})
    if kind == "MaxPool":
        np.testing.assert_array_equal(tcu, cpu)
    else:
        assert np.max(np.abs(tcu - cpu)) <= np.max(np.abs(x)) * 2**-9 * k * k + 2**-8
    assert cpu_ops(report) == []


@pytest.mark.parametrize("k, s, pads, size", [(3, 2, [0] * 4, 10), (2, 2, [0] * 4, 9), (3, 2, [1] * 4, 8)])
def test_max_pool_in_ceil_mode(compare, k, s, pads, size):
    """ceil_mode (MTCNN's pools): the last windows hang over the bottom and right edge; on the TCU
    as padding there that never wins the max, exact."""
    b = OnnxBuilder(seed=6, grid=True)
    rng = np.random.default_rng(6)
    shape = [1, 10, size, size]
    y = b.op("MaxPool", ["x"], kernel_shape=[k, k], strides=[s, s], pads=pads, ceil_mode=1)
    cpu, tcu, report, _ = compare(b.model({"x": shape}, y), {"x": grid(rng, shape)})
    assert cpu.shape[2] == -(-(size + pads[0] + pads[2] - k) // s) + 1  # the ceil, one more than the floor
    np.testing.assert_array_equal(tcu, cpu)
    assert cpu_ops(report) == []


def test_average_pool_in_ceil_mode_stays_on_the_cpu_with_its_reason(compare):
    b = OnnxBuilder(seed=6, grid=True)
    y = b.op("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    x = grid(np.random.default_rng(6), (1, 10, 10, 10))
    _, _, report, _ = compare(b.model({"x": [1, 10, 10, 10]}, y), {"x": x})
    reasons = [op["reason"] for op in report.cpu_ops]
    assert reasons == ["ceil_mode average pooling (its last windows count fewer values)"]


@pytest.mark.parametrize(
    "op, keepdims, batch",
    [("GlobalAveragePool", 1, 1), ("ReduceMean", 1, 1), ("ReduceMean", 0, 1), ("ReduceMean", 0, 2)],
)
def test_global_average(compare, op, keepdims, batch):
    """Without keepdims the mean is (n, c), the layout dense layers read."""
    b = OnnxBuilder(seed=7, grid=True)
    rng = np.random.default_rng(7)
    attrs = {"axes": [2, 3], "keepdims": keepdims} if op == "ReduceMean" else {}
    y = b.op(op, ["x"], **attrs)
    shape = [batch, 12, 8, 8]
    cpu, tcu, report, _ = compare(b.model({"x": shape}, y), {"x": grid(rng, shape)})
    assert cpu.shape == ((batch, 12, 1, 1) if keepdims else (batch, 12))
    # 64 pixels: six halving levels, at most one unit in the last place (1/256) each.
    assert np.max(np.abs(tcu - cpu)) <= 6 / 256
    assert cpu_ops(report) == []


@pytest.mark.parametrize("hw, lo, hi", [(16, 8, 12), (32, 2, 4), (7, -100, 100), (1, -3, 3)])
def test_global_average_never_overflows(compare, hw, lo, hi):
    """Inputs and mean well inside FP16BP8's range, but a sum of the window far outside it."""
    b = OnnxBuilder(seed=7)
    y = b.op("GlobalAveragePool", ["x"])
    x = np.random.default_rng(7).uniform(lo, hi, (1, 8, hw, hw))
    cpu, tcu, report, _ = compare(b.model({"x": [1, 8, hw, hw]}, y), {"x": x})
    levels = max(0, (hw * hw - 1).bit_length())
    # Rounding the input, then one unit per level, times the final factor (< 2), plus its rounding.
    bound = (0.5 + 2 * levels + 1) / 256 + np.max(np.abs(cpu)) * 2**-9
    assert np.max(np.abs(tcu - cpu)) <= bound
    assert cpu_ops(report) == []


@pytest.mark.parametrize("k, lo, hi, pads", [(3, 10, 20, 0), (2, 30, 50, 0), (3, 60, 120, 1), (4, -120, 120, 0)])
def test_average_pool_never_overflows(compare, k, lo, hi, pads):
    b = OnnxBuilder(seed=9)
    y = b.op("AveragePool", ["x"], kernel_shape=[k, k], strides=[1, 1], pads=[pads] * 4)
    x = np.random.default_rng(9).uniform(lo, hi, (1, 8, 9, 9))
    cpu, tcu, report, _ = compare(b.model({"x": [1, 8, 9, 9]}, y), {"x": x})
    shift = (k * k - 1).bit_length()
    # Input rounding (half a unit); count products rounded (half a unit each) at scale 2^-shift,
    # scaled back by 2^shift / count: 2^(shift-1) units; the final product's rounding; the factor's.
    bound = (0.5 + 2 ** (shift - 1) + 0.5) / 256 + np.max(np.abs(cpu)) * 2**-9
    assert np.max(np.abs(tcu - cpu)) <= bound
    assert cpu_ops(report) == []


@pytest.mark.parametrize(
    "op, attrs, bound", [("Relu", {}, 0), ("LeakyRelu", {"alpha": 0.125}, 0), ("Clip", None, 0), ("Abs", {}, 0)]
)
def test_activations(compare, op, attrs, bound):
    b = OnnxBuilder(seed=8, grid=True)
    rng = np.random.default_rng(8)
    if op == "Clip":
        y = b.op("Clip", ["x", b.const(np.array(-0.5)), b.const(np.array(1.0))])
    else:
        y = b.op(op, ["x"], **attrs)
    cpu, tcu, report, _ = compare(b.model({"x": [1, 9, 4, 5]}, y), {"x": grid(rng, (1, 9, 4, 5), -40, 40)})
    np.testing.assert_array_equal(tcu, cpu)
    assert cpu_ops(report) == []


@pytest.mark.parametrize("op, opset, function", [("Softplus", 13, "softplus"), ("Mish", 18, "mish")])
@pytest.mark.parametrize("after_conv", [True, False])
def test_softplus_and_mish_are_one_activation(compare, op, opset, function, after_conv):
    """Softplus and Mish as TVM imports them (max(x, 0) + log(1 + exp(-|x|)); x * tanh(log(1 +
    exp(x)))) become one smooth function, fused into the conv that makes x: on their own within
    their bound beyond half a unit (test_smooth.py sweeps every value), after a conv at FP16BP8
    within 1% of the output range (the conv's weights round too)."""
    from tvm_tensil.compiler.smooth import SMOOTH

    m, inputs = _activation_model(10, op, opset, after_conv, 20)
    cpu, tcu, report, _ = compare(m, inputs)
    (part,) = report.partitions.values()
    assert [(n["op"], n["epilogue"]) for n in part["nodes"]] == (
        [("conv2d", [function])] if after_conv else [(function, [])]
    )
    if after_conv:
        assert np.abs(tcu - cpu).max() <= 0.01 * np.ptp(cpu)
    else:
        bound = 2.0**-9 + SMOOTH[function].bound * np.maximum(1.0, np.abs(inputs["x"]))
        assert np.all(np.abs(tcu - cpu) <= bound)


@pytest.mark.parametrize("after_conv", [True, False])
def test_exp_is_one_activation(compare, after_conv):
    """Exp fused into the conv that makes x: on its own, at the data type's scales, within its bound
    (test_exp.py sweeps every value at many scales), where results fit; after a conv at
    FP16BP8 as close as the conv alone is (in log: its error is exp's relative error); at FP32BP16
    within the bound in its units; an 8-bit data type keeps it on the CPU with the reason."""
    from tvm_tensil.arch import PRESETS
    from tvm_tensil.compiler.exp import EXP_SHARE, EXP_UNITS
    from tvm_tensil.numbers import data_type

    m, inputs = _activation_model(12, "Exp", 13, after_conv, 8)
    # Results up to e^4.8 fit FP16BP8 at its own point (uncalibrated).
    inputs["x"] = inputs["x"] / 2 if after_conv else np.minimum(inputs["x"], 4.75)
    cpu, tcu, report, _ = compare(m, inputs)
    (part,) = report.partitions.values()
    assert [(n["op"], n["epilogue"]) for n in part["nodes"]] == ([("conv2d", ["exp"])] if after_conv else [("exp", [])])
    if after_conv:  # the conv's own error at FP16BP8 (the same conv alone) is exp's relative error
        conv, _ = _activation_model(12, "Identity", 13, True, 8)
        conv_cpu, conv_tcu, _, _ = compare(conv, inputs)
        slack = np.abs(conv_tcu - conv_cpu).max() + 2.0**-8
        fits = cpu > 2.0**-4  # (below, units of the result)
        assert np.all(np.abs(np.log(tcu[fits]) - np.log(cpu[fits])) <= slack)
    else:
        assert np.all(np.abs(tcu - cpu) <= (0.5 + EXP_UNITS) * 2.0**-8 + EXP_SHARE * cpu)
    if not after_conv:  # FP32BP16 (its own pieces, 23 of them): within the bound in its units
        fp32 = PRESETS["pynqz1"].replace(data_type=data_type("FP32BP16"), name="pynqz1_fp32bp16")
        cpu, tcu, report, _ = compare(m, inputs, arch=fp32)
        assert report.cpu_ops == []
        assert np.all(np.abs(tcu - cpu) <= (0.5 + EXP_UNITS) * 2.0**-16 + EXP_SHARE * cpu + 1e-6 * cpu)
    fp8 = PRESETS["pynqz1"].replace(data_type=data_type("FP8BP4"), name="pynqz1_fp8bp4")
    _, _, report, _ = compare(m, inputs, arch=fp8)
    assert [op["reason"] for op in report.cpu_ops if op["op"] == "relax.exp"] == [
        "exp's cubic pieces need 16-bit data or wider (FP8BP4's coefficients would be off by percents)"
    ]


def test_a_smooth_function_whose_pieces_the_data_type_cannot_hold_stays_on_the_cpu(compare):
    """At FP8BP4 (up to 7.94) Mish's pieces, over x + 10 up to 16, would compute another function
    (mish(-1.19) came out 0, not -0.31): its softplus stays on the CPU with the reason; tanh, whose
    pieces end at 4.5, runs on the TCU."""
    from tvm_tensil.arch import PRESETS
    from tvm_tensil.numbers import data_type

    b = OnnxBuilder(seed=11, grid=True)
    rng = np.random.default_rng(11)
    m = b.model({"x": [1, 8, 4, 4]}, b.op("Mish", ["x"]), opset=18)
    fp8 = PRESETS["pynqz1"].replace(data_type=data_type("FP8BP4"), name="pynqz1_fp8bp4")
    cpu, tcu, report, _ = compare(m, {"x": grid(rng, (1, 8, 4, 4), -4, 4)}, arch=fp8)
    reasons = {op["op"]: op["reason"] for op in report.cpu_ops}
    assert reasons["relax.nn.softplus"] == "softplus's cubic pieces run to 8, beyond FP8BP4's range (up to 7.9375)"
    assert "relax.tanh" in offloaded(report)


def test_softplus_with_another_beta_stays_on_the_cpu_with_its_reason(compare):
    from tvm import relax

    import tvm_tensil

    x = relax.Var("x", relax.TensorType((1, 4, 3, 3), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.softplus(relax.op.nn.relu(x), beta=2.0))
        bb.emit_func_output(y)
    report = tvm_tensil.build(bb.get(), target="tensil", arch="pynqz1").tensil_report
    assert [(c["op"], c["reason"]) for c in report.cpu_ops] == [
        ("relax.nn.softplus", "softplus with beta 2 (the TCU's has beta 1)")
    ]


def test_softmax_stays_on_cpu_with_reason(compare):
    b = OnnxBuilder(seed=9, grid=True)
    rng = np.random.default_rng(9)
    y = b.op("Softmax", [b.op("Relu", ["x"])], axis=1)
    cpu, tcu, report, _ = compare(b.model({"x": [2, 8]}, y), {"x": grid(rng, (2, 8))})
    np.testing.assert_allclose(tcu, cpu, atol=1e-6)
    assert report.cpu_ops == [
        {
            "op": "relax.nn.softmax",
            "shape": [2, 8],
            "reason": "softmax is not on the TCU yet: besides exp it needs a maximum and a sum across channels "
            "(a vector's lanes)",
            "splits": False,
        }
    ]


def test_a_layer_norm_stays_on_the_cpu_saying_why(compare):
    """LayerNormalization over the last axis (a transformer's): on the CPU, the reason naming the
    sums across lanes it needs."""
    b = OnnxBuilder(seed=9, grid=True)
    rng = np.random.default_rng(9)
    ones, zeros = b.const(np.ones(8, np.float32)), b.const(np.zeros(8, np.float32))
    y = b.op("LayerNormalization", [b.op("Relu", ["x"]), ones, zeros], axis=-1)
    cpu, tcu, report, _ = compare(b.model({"x": [2, 8]}, y, opset=17), {"x": grid(rng, (2, 8))})
    np.testing.assert_allclose(tcu, cpu, atol=1e-5)
    reasons = {op["op"]: op["reason"] for op in report.cpu_ops}
    assert "sums across the lanes of a vector" in reasons["relax.nn.layer_norm"]


def test_an_op_the_importer_makes_a_tir_function_is_named_with_the_models_op(compare):
    """TVM's ONNX importer emits TIR functions (``call_tir``) for ops it has no Relax op for (Tile,
    Einsum): the report names the function and the model's op, not call_tir."""
    b = OnnxBuilder(seed=11, grid=True)
    rng = np.random.default_rng(11)
    conv = b.op("Conv", ["x", b.const(rng.standard_normal((8, 4, 1, 1)))])
    y = b.op("Tile", [conv, b.const([1, 1, 2, 2], dtype=np.int64)])
    cpu, tcu, report, _ = compare(b.model({"x": [1, 4, 4, 4]}, y), {"x": grid(rng, (1, 4, 4, 4))})
    np.testing.assert_array_equal(tcu, cpu)
    assert [(op["op"], op.get("function")) for op in report.cpu_ops] == [("relax.call_tir", "tile")]
    assert report.cpu_ops[0]["reason"].endswith("the TIR function tile, which TVM's ONNX importer emits for Tile")
    assert "relax.call_tir tile (1, 8, 8, 8): no Tensil pattern" in str(report)


@pytest.mark.parametrize(
    "op, inputs, attrs",
    [
        ("Pad", ([0, 0, 1, 2, 0, 0, 2, 1],), {"mode": "reflect"}),
        ("Pad", ([0, 0, 0, 3, 0, 0, 2, 0],), {"mode": "edge"}),
        ("Slice", ([1, -1], [5, 0], [2, 3], [2, -2]), {}),  # a crop of every other row, columns reversed
    ],
)
def test_ops_that_pick_pixels_are_gathers_on_the_tcu(compare, op, inputs, attrs):
    """Reflect and edge pads (TIR functions as TVM imports them) and crops of H and W with steps copy
    rows of the map through local memory: bit for bit, nothing on the CPU."""
    b = OnnxBuilder(seed=17, grid=True)
    rng = np.random.default_rng(17)
    y = b.op("Relu", [b.op(op, ["x", *(b.const(np.array(v), dtype=np.int64) for v in inputs)], **attrs)])
    cpu, tcu, report, _ = compare(b.model({"x": [1, 10, 6, 7]}, y), {"x": grid(rng, (1, 10, 6, 7))})
    np.testing.assert_array_equal(tcu, cpu)
    assert cpu_ops(report) == []
    assert "gather" in [n["op"] for p in report.partitions.values() for n in p["nodes"]]


def test_a_take_along_channels_stays_on_the_cpu_with_its_reason(compare):
    b = OnnxBuilder(seed=18, grid=True)
    rng = np.random.default_rng(18)
    y = b.op("Relu", [b.op("Gather", ["x", b.const(np.array([3, 1, 2]), dtype=np.int64)], axis=1)])
    cpu, tcu, report, _ = compare(b.model({"x": [1, 4, 3, 3]}, y), {"x": grid(rng, (1, 4, 3, 3))})
    np.testing.assert_array_equal(tcu, cpu)
    assert [o["reason"] for o in report.cpu_ops] == ["take of other than constant indices along H or W"]


@pytest.mark.parametrize("channels, out, group", [(8, 8, 2), (24, 24, 3), (12, 24, 12), (32, 16, 8)])
def test_grouped_conv_runs_on_the_tcu(compare, channels, out, group):
    """Groups of any count (ResNeXt, ShuffleNet; a depthwise conv with a channel multiplier): a dense
    conv that multiplies only the channel blocks its groups read; exact on grid values."""
    b = OnnxBuilder(seed=10, grid=True)
    rng = np.random.default_rng(10)
    y = b.conv("x", channels, out, group=group, bias=True)
    cpu, tcu, report, _ = compare(b.model({"x": [1, channels, 5, 5]}, y), {"x": grid(rng, (1, channels, 5, 5))})
    np.testing.assert_array_equal(tcu, cpu)
    assert report.cpu_ops == [] and len(report.partitions) == 1


@pytest.mark.parametrize("batch, hw", [(1, 3), (2, 4)])
def test_flatten_then_dense(compare, batch, hw):
    """An NCHW flatten feeding a Gemm runs in place: the weights are permuted instead."""
    b = OnnxBuilder(seed=11, grid=True)
    rng = np.random.default_rng(11)
    c = 10
    y = b.op(
        "Gemm",
        [
            b.op("Flatten", ["x"]),
            b.const(rng.integers(-4, 4, (7, c * hw * hw)) / 16),
            b.const(rng.integers(-8, 8, 7) / 16),
        ],
        transB=1,
    )
    cpu, tcu, report, _ = compare(b.model({"x": [batch, c, hw, hw]}, y), {"x": grid(rng, (batch, c, hw, hw))})
    np.testing.assert_array_equal(tcu, cpu)
    assert cpu_ops(report) == []


def test_flatten_of_a_batch_with_odd_maps_stays_on_cpu(compare):
    b = OnnxBuilder(seed=12, grid=True)
    rng = np.random.default_rng(12)
    y = b.op("Gemm", [b.op("Flatten", ["x"]), b.const(rng.integers(-4, 4, (5, 4 * 9)) / 16)], transB=1)
    cpu, tcu, report, _ = compare(b.model({"x": [2, 4, 3, 3]}, y), {"x": grid(rng, (2, 4, 3, 3))})
    np.testing.assert_array_equal(tcu, cpu)
    assert any("h*w not a power of two" in o["reason"] or "reorders data" in o["reason"] for o in report.cpu_ops)


@pytest.mark.parametrize("channels", [(8, 16), (3, 5, 10), (12, 4)])
def test_concat_channels(compare, channels):
    """Block-aligned and unaligned channel offsets; the inputs come from convs in the partition."""
    b = OnnxBuilder(seed=13, grid=True)
    rng = np.random.default_rng(13)
    parts = [b.op("Relu", [b.conv("x", 4, c, k=1, pad=0, scale=0.25)]) for c in channels]
    y = b.op("Concat", parts, axis=1)
    cpu, tcu, report, _ = compare(b.model({"x": [1, 4, 5, 6]}, y), {"x": grid(rng, (1, 4, 5, 6))})
    np.testing.assert_array_equal(tcu, cpu)
    assert cpu_ops(report) == [] and "relax.concat" in offloaded(report)


def _pad(b, x, pads, value=None):
    from onnx import numpy_helper

    name = b.name("pads")
    b.inits.append(numpy_helper.from_array(np.array(pads, dtype=np.int64), name))
    ins = [x, name]
    if value is not None:
        ins.append(b.const(np.array(value)))
    return b.op("Pad", ins, mode="constant")


def test_pad_merges_into_the_following_conv(compare):
    b = OnnxBuilder(seed=14, grid=True)
    rng = np.random.default_rng(14)
    y = b.conv(_pad(b, "x", [0, 0, 1, 2, 0, 0, 0, 1]), 4, 8, k=3, pad=0, scale=0.25)
    cpu, tcu, report, _ = compare(b.model({"x": [1, 4, 6, 7]}, y), {"x": grid(rng, (1, 4, 6, 7))})
    np.testing.assert_array_equal(tcu, cpu)
    nodes = [n for p in report.partitions.values() for n in p["nodes"]]
    assert [n["op"] for n in nodes] == ["conv2d"] and cpu_ops(report) == []


def test_standalone_pad_with_a_value(compare):
    b = OnnxBuilder(seed=15, grid=True)
    rng = np.random.default_rng(15)
    y = b.op("Relu", [_pad(b, "x", [0, 0, 2, 0, 0, 0, 1, 3], value=-0.5)])
    cpu, tcu, report, _ = compare(b.model({"x": [1, 10, 3, 4]}, y), {"x": grid(rng, (1, 10, 3, 4))})
    np.testing.assert_array_equal(tcu, cpu)
    assert cpu_ops(report) == [] and "relax.nn.pad" in offloaded(report)


@pytest.mark.parametrize("scales, mode", [((2, 2), "asymmetric"), ((2, 3), "half_pixel"), ((0.5, 0.75), "half_pixel")])
def test_resize_nearest(compare, scales, mode):
    b = OnnxBuilder(seed=16, grid=True)
    rng = np.random.default_rng(16)
    from onnx import numpy_helper

    sname = b.name("scales")
    b.inits.append(numpy_helper.from_array(np.array([1, 1, *scales], dtype=np.float32), sname))
    y = b.op("Resize", ["x", "", sname], mode="nearest", coordinate_transformation_mode=mode)
    cpu, tcu, report, _ = compare(b.model({"x": [1, 10, 4, 6]}, y, opset=13), {"x": grid(rng, (1, 10, 4, 6))})
    np.testing.assert_array_equal(tcu, cpu)
    assert cpu_ops(report) == []


@pytest.mark.parametrize("scales, mode", [((2, 2), "half_pixel"), ((2, 3), "asymmetric"), ((0.5, 1.5), "half_pixel")])
def test_resize_bilinear(compare, scales, mode):
    """Bilinear (align_corners false = half_pixel). Weights like 0.25/0.75 round each product:
    within 2 lsb of float per output (two rounded terms per pass, two passes)."""
    b = OnnxBuilder(seed=17, grid=True)
    rng = np.random.default_rng(17)
    from onnx import numpy_helper

    sname = b.name("scales")
    b.inits.append(numpy_helper.from_array(np.array([1, 1, *scales], dtype=np.float32), sname))
    y = b.op("Resize", ["x", "", sname], mode="linear", coordinate_transformation_mode=mode)
    cpu, tcu, report, _ = compare(b.model({"x": [1, 10, 4, 6]}, y), {"x": grid(rng, (1, 10, 4, 6))})
    assert np.max(np.abs(tcu - cpu)) <= 4 * 2**-8
    assert cpu_ops(report) == []


def test_pool_flatten_dense_with_a_batch(compare):
    """(n, c, 1, 1) -> (n, c) is the same storage under another shape: a batch of 3 must
    reach the dense layer as 3 pixels (a regression: it once read only the first)."""
    b = OnnxBuilder(seed=18, grid=True)
    rng = np.random.default_rng(18)
    h = b.op("Flatten", [b.op("GlobalAveragePool", ["x"])])
    y = b.op("Gemm", [h, b.const(rng.integers(-4, 4, (5, 8)) / 16)], transB=1)
    x = rng.integers(-16, 16, (3, 8, 4, 4)) / 16 * 0 + rng.integers(-16, 16, (3, 8, 1, 1)) / 16  # exact means
    cpu, tcu, report, _ = compare(b.model({"x": [3, 8, 4, 4]}, y), {"x": x})
    np.testing.assert_array_equal(tcu, cpu)
    assert cpu_ops(report) == []


def test_batchnorm_after_gemm_folds_into_the_dense(compare):
    b = OnnxBuilder(seed=19)
    rng = np.random.default_rng(19)
    y = b.op("Relu", [b.bn(b.gemm("x", 12, 16), 16)])
    cpu, tcu, report, _ = compare(b.model({"x": [4, 12]}, y), {"x": rng.standard_normal((4, 12))})
    assert np.max(np.abs(tcu - cpu)) < 12 * 3 * 2**-9
    nodes = [n for p in report.partitions.values() for n in p["nodes"]]
    assert [n["op"] for n in nodes] == ["dense"] and nodes[0]["epilogue"] == ["relu"]


def test_standalone_bias_add(compare):
    """A per-channel constant add that follows no conv: an identity depthwise conv with bias."""
    b = OnnxBuilder(seed=20, grid=True)
    rng = np.random.default_rng(20)
    y = b.op("Add", [b.op("Relu", ["x"]), b.const(rng.integers(-16, 16, (1, 6, 1, 1)) / 16)])
    cpu, tcu, report, _ = compare(b.model({"x": [1, 6, 4, 5]}, y), {"x": grid(rng, (1, 6, 4, 5))})
    np.testing.assert_array_equal(tcu, cpu)
    nodes = [n["op"] for p in report.partitions.values() for n in p["nodes"]]
    assert "bias_add" in nodes and cpu_ops(report) == []


@pytest.mark.parametrize("op", ["Sub", "Mul", "Max", "Min", "Add"])
@pytest.mark.parametrize("second", ["map", "vector", "vector first"])
def test_two_maps(compare, op, second):
    """Two maps of one shape, or a map and a per-channel vector (N, C, 1, 1) broadcast over H and W
    (a squeeze-excitation gate), on either side: on the 1/16 grid every result is exact."""
    b = OnnxBuilder(seed=5, grid=True)
    rng = np.random.default_rng(5)
    x_shape, y_shape = [1, 12, 5, 6], [1, 12, 5, 6] if second == "map" else [1, 12, 1, 1]
    inputs = ["y", "x"] if second == "vector first" else ["x", "y"]
    m = b.model({"x": x_shape, "y": y_shape}, b.op(op, inputs))
    cpu, tcu, report, _ = compare(m, {"x": grid(rng, x_shape), "y": grid(rng, y_shape)})
    np.testing.assert_array_equal(tcu, cpu)
    assert cpu_ops(report) == [] and len(report.partitions) == 1


def test_a_map_times_a_constant_is_not_two_maps(compare):
    """A product with a full-shape constant stays on the CPU, and says why."""
    b = OnnxBuilder(seed=6, grid=True)
    rng = np.random.default_rng(6)
    m = b.model({"x": [1, 4, 3, 3]}, b.op("Mul", ["x", b.const(grid(rng, (1, 4, 3, 3)))]))
    cpu, tcu, report, _ = compare(m, {"x": grid(rng, (1, 4, 3, 3))})
    np.testing.assert_array_equal(tcu, cpu)
    assert [o["reason"] for o in report.cpu_ops] == [
        "multiply by a constant of shape (1, 4, 3, 3) (the TCU folds per-channel constants into convs)"
    ]


def test_a_product_of_far_apart_ranges_keeps_its_precision_with_calibration():
    """x around 100 times y around 0.01: at one binary point y keeps two significant bits; with a
    scale per tensor the product is rescaled by exact powers of two and stays within 0.5% of its range."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    import tvm_tensil

    b = OnnxBuilder(seed=7)
    m = b.model({"x": [1, 8, 4, 4], "y": [1, 8, 4, 4]}, b.op("Mul", ["x", "y"]))
    mod = from_onnx(m, keep_params_in_input=False)
    rng = np.random.default_rng(7)

    def sample():
        return {"x": rng.uniform(-100, 100, (1, 8, 4, 4)).astype("float32"),
                "y": rng.uniform(-0.01, 0.01, (1, 8, 4, 4)).astype("float32")}  # fmt: skip

    test = sample()
    args = [tvm.runtime.tensor(v) for v in test.values()]
    want = test["x"] * test["y"]
    errors = {}
    for calibration in (None, [sample() for _ in range(8)]):
        ex = tvm_tensil.build(mod, target="tensil", arch="pynqz1", calibration=calibration)
        got = relax.VirtualMachine(ex, tvm.cpu())["main"](*args).numpy()
        errors[calibration is not None] = np.abs(got - want).max() / np.ptp(want)
    assert errors[True] < 0.005 < errors[False]


def _activation_model(seed: int, op: str, opset: int, after_conv: bool, reach: float):
    """An activation of a (1, 8, 10, 10) input on its own (grid values in [-reach, reach)) or after a
    3x3 conv to 16 channels (normal inputs): the ONNX model and its inputs."""
    b = OnnxBuilder(seed=seed, grid=not after_conv)
    rng = np.random.default_rng(seed)
    x = "x"
    if after_conv:
        w, bias = rng.standard_normal((16, 8, 3, 3)) / 4, rng.standard_normal(16) / 4
        x = b.op("Conv", ["x", b.const(w), b.const(bias)], pads=[1, 1, 1, 1])
    m = b.model({"x": [1, 8, 10, 10]}, b.op(op, [x]), opset=opset)
    shape = (1, 8, 10, 10)
    return m, {"x": rng.standard_normal(shape) if after_conv else grid(rng, shape, -reach, reach)}


@pytest.mark.parametrize("after_conv", [True, False])
def test_hard_swish_is_one_activation(compare, after_conv):
    """HardSwish as TVM imports it (x times clip(x + 3, 0, 6) / 6, four ops) becomes one activation,
    fused into the conv that produces x: within (|x| + 2) * 2^-9 of TVM's CPU build on its own
    (test_elementwise.py), within 1% of the output range after a conv at FP16BP8 (the conv's
    weights round too)."""
    m, inputs = _activation_model(8, "HardSwish", 14, after_conv, 128)
    cpu, tcu, report, _ = compare(m, inputs)
    (part,) = report.partitions.values()
    assert [(n["op"], n["epilogue"]) for n in part["nodes"]] == (
        [("conv2d", ["hard_sigmoid"])] if after_conv else [("hard_sigmoid", [])]
    )
    if after_conv:
        assert np.abs(tcu - cpu).max() <= 0.01 * np.ptp(cpu)
    else:
        assert np.all(np.abs(tcu - cpu) <= (np.abs(inputs["x"]) + 2) * 2.0**-9)


def test_hard_swish_without_its_sixth_is_one_activation(compare):
    """``x * relu6(x + 3)`` with the 1/6 folded into what follows (PaddleOCR's PP-LCNet: the next
    op's scale) is one activation on the conv too, not a clip, a product and a layer of its own."""
    from dataclasses import replace

    from tvm_tensil.arch import PRESETS
    from tvm_tensil.numbers import FP32BP16

    b = OnnxBuilder(seed=9)
    rng = np.random.default_rng(9)
    w, bias = rng.standard_normal((16, 8, 3, 3)) / 4, rng.standard_normal(16) / 4
    x = b.op("Conv", ["x", b.const(w), b.const(bias)], pads=[1, 1, 1, 1])
    relu6 = b.op("Clip", [b.op("Add", [x, b.const(np.array(3.0))]), b.const(np.array(0.0)), b.const(np.array(6.0))])
    scale = b.const((rng.uniform(0.5, 1, (1, 16, 1, 1)) / 6).astype("float32"))
    m = b.model({"x": [1, 8, 10, 10]}, b.op("Mul", [b.op("Mul", [x, relu6]), scale]), opset=14)
    inputs = {"x": rng.standard_normal((1, 8, 10, 10))}
    cpu, tcu, report, _ = compare(m, inputs)
    (part,) = report.partitions.values()
    assert [(n["op"], n["epilogue"]) for n in part["nodes"]][0] == ("conv2d", ["hard_sigmoid"])
    assert "mul" not in [n["op"] for n in part["nodes"]]
    # At FP16BP8 the scale (>= 1/12) rounds by up to 1/512, 2.3% of itself; at FP32BP16 the logic.
    assert np.all(np.abs(tcu - cpu) <= 0.025 * np.abs(cpu) + 0.005 * np.ptp(cpu))
    _, tcu32, _, _ = compare(m, inputs, arch=replace(PRESETS["pynqz1"], data_type=FP32BP16))
    assert np.abs(tcu32 - cpu).max() <= 1e-3 * np.ptp(cpu)


@pytest.mark.parametrize("slopes", ["channels", "one", "above_one", "both_sides"])
def test_onnx_prelu_on_the_conv(compare, slopes):
    """ONNX PRelu fused into the conv: a slope per channel (shaped (C, 1, 1)) or one for all;
    slopes above 1 as min(x, alpha x), on both sides of 1 as x + (alpha - 1) min(x, 0). Within one
    unit (1/256) of TVM's CPU build: the slope's product rounding (grid inputs and weights, slopes
    in eighths)."""
    b = OnnxBuilder(seed=10, grid=True)
    rng = np.random.default_rng(10)
    x = b.conv("x", 8, 16, bias=True, scale=0.1)
    alpha = {"channels": rng.integers(-4, 8, (16, 1, 1)) / 8, "one": np.array([0.25]),
             "above_one": rng.integers(9, 16, (16, 1, 1)) / 8,
             "both_sides": rng.integers(-4, 16, (16, 1, 1)) / 8}[slopes]  # fmt: skip
    m = b.model({"x": [1, 8, 6, 6]}, b.op("PRelu", [x, b.const(alpha)]))
    cpu, tcu, report, _ = compare(m, {"x": grid(rng, (1, 8, 6, 6), -4, 4)})
    (part,) = report.partitions.values()
    assert [(n["op"], n["epilogue"]) for n in part["nodes"]] == [("conv2d", ["prelu"])]
    assert cpu_ops(report) == []
    np.testing.assert_allclose(tcu, cpu, rtol=0, atol=2**-8)


@pytest.mark.parametrize("producer", ["Add", "MaxPool", "input"])
def test_onnx_prelu_after_other_ops(compare, producer):
    """A PReLU on a sum of two maps, on a max pool, on the model's input: fused into that op (one
    vector of slopes per channel block, its runs split by block) or a layer of its own."""
    b = OnnxBuilder(seed=13, grid=True)
    rng = np.random.default_rng(13)
    x = {"Add": lambda: b.op("Add", ["x", "y"]), "input": lambda: "x",
         "MaxPool": lambda: b.op("MaxPool", ["x"], kernel_shape=[2, 2], strides=[2, 2])}[producer]()  # fmt: skip
    alpha = rng.integers(-4, 16, (16, 1, 1)) / 8
    inputs = {"x": [1, 16, 6, 6]} | ({"y": [1, 16, 6, 6]} if producer == "Add" else {})
    m = b.model(inputs, b.op("PRelu", [x, b.const(alpha)]))
    cpu, tcu, report, _ = compare(m, {k: grid(rng, tuple(v), -4, 4) for k, v in inputs.items()})
    assert cpu_ops(report) == []
    np.testing.assert_allclose(tcu, cpu, rtol=0, atol=2**-8)


def test_onnx_dense_layers_on_a_sequence(compare):
    """ONNX MatMul of a (B, S, K) sequence by a (K, N) constant, its bias (N,) along the features
    (not along S, though S == N here), a sigmoid, a per-feature scale, a reshape to (B * S, N) and
    a second layer: one partition, matching TVM's CPU build at FP32BP16."""
    from dataclasses import replace

    from tvm_tensil.arch import PRESETS
    from tvm_tensil.numbers import FP32BP16

    b = OnnxBuilder(seed=4)
    rng = np.random.default_rng(4)
    w1, w2 = rng.standard_normal((16, 12)) / 4, rng.standard_normal((12, 8)) / 4
    y = b.op("Add", [b.op("MatMul", ["x", b.const(w1)]), b.const(np.arange(12.0) / 6 - 1)])
    y = b.op("Mul", [b.op("Sigmoid", [y]), b.const(rng.uniform(0.5, 2, 12))])
    y = b.op("Reshape", [y, b.const(np.array([-1, 12]), dtype=np.int64)])
    m = b.model({"x": [3, 12, 16]}, b.op("MatMul", [y, b.const(w2)]))
    inputs = {"x": rng.standard_normal((3, 12, 16))}
    cpu, tcu, report, _ = compare(m, inputs, arch=replace(PRESETS["pynqz1"], data_type=FP32BP16))
    assert report.cpu_ops == [] and len(report.partitions) == 1, report.cpu_ops
    assert np.abs(tcu - cpu).max() <= 1e-3 * np.ptp(cpu) + 1e-3  # sigmoid's pieces: within 5e-4


def test_a_partition_of_reshapes_alone_stays_on_the_cpu_with_its_reason(compare):
    """A reshape that keeps the TCU layout ((B, S, K) -> (B * S, K)) between two CPU ops would be a
    partition computing nothing (its output a view of its input): it stays on the CPU, saying so."""
    b = OnnxBuilder(seed=5)
    y = b.op("Reshape", [b.op("Softmax", ["x"], axis=-1), b.const(np.array([-1, 6]), dtype=np.int64)])
    m = b.model({"x": [2, 4, 6]}, b.op("Softmax", [y], axis=-1))
    inputs = {"x": np.random.default_rng(5).standard_normal((2, 4, 6))}
    import tvm_tensil

    with pytest.warns(tvm_tensil.OffloadWarning):
        cpu, tcu, report, _ = compare(m, inputs)
    np.testing.assert_allclose(tcu, cpu, rtol=1e-6)
    (reshape,) = [op for op in report.cpu_ops if op["op"] == "relax.reshape"]
    assert "nothing for the TCU to compute" in reshape["reason"]
