"""Preparation before partitioning: what is folded in numpy, and that it keeps the numbers.

Mirrors python/tvm_tensil/byoc/prepare.py (its rewrites of imported ops into offloadable ones are
tested through whole builds in test_ops.py and test_onnx_import.py).
"""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

from tvm_tensil.byoc.prepare import fold_clip_bounds, prepare_for_tensil
from tvm_tensil.zoo import OnnxBuilder


def _ops(func) -> list[str]:
    names = []

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op):
            names.append(e.op.name)

    relax.analysis.post_order_visit(func.body, visit)
    return names


@pytest.mark.parametrize("lo, hi", [(-0.5, 1.0), (np.nan, 1.0), (-0.5, np.nan)])
def test_clip_bounds_guarded_against_nan_are_folded_in_numpy(lo, hi):
    """The ONNX importer guards each Clip bound with ``where(isnan(b), +-inf, b)``; folded in numpy
    (not by FoldConstant, which builds an LLVM function for each), a NaN bound is no bound."""
    b = OnnxBuilder(1)
    y = b.op("Clip", ["x", b.const(np.array(lo, np.float32)), b.const(np.array(hi, np.float32))])
    mod = from_onnx(b.model({"x": [1, 4, 3, 3]}, y), keep_params_in_input=False)
    assert "relax.isnan" in _ops(mod["main"])
    assert not {"relax.isnan", "relax.where"} & set(_ops(fold_clip_bounds(mod)["main"]))
    prepared = prepare_for_tensil(mod)
    x = np.linspace(-3, 3, 36, dtype=np.float32).reshape(1, 4, 3, 3)
    vm = relax.VirtualMachine(tvm.compile(prepared, target="llvm"), tvm.cpu())
    expected = np.clip(x, -np.inf if np.isnan(lo) else lo, np.inf if np.isnan(hi) else hi)
    np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(x)).numpy(), expected)


@pytest.mark.parametrize("size, output", [(8, (2, 2)), (12, (6, 3)), (7, (7, 7)), (10, (3, 3))])
def test_an_adaptive_pool_to_a_size_dividing_the_map_is_an_average_pool(size, output):
    """To (2, 2) of 8x8 or (6, 3) of 12x12: the average pool of its windows; to the map's own size
    (VGG's 7x7 head): nothing; on the TCU either way, the same numbers. To (3, 3) of 10x10 (windows
    of 3 and 4 rows): on the CPU, the report saying why."""
    torch = pytest.importorskip("torch")
    from tvm.relax.frontend.torch import from_exported_program

    import tvm_tensil

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 1), torch.nn.AdaptiveAvgPool2d(output)).eval()
    x = torch.randn(1, 3, size, size)
    mod = from_exported_program(torch.export.export(model, (x,)), keep_params_as_input=False)
    whole = size % output[0] == 0 and size % output[1] == 0
    ops = _ops(prepare_for_tensil(mod)["main"])
    assert ("relax.nn.adaptive_avg_pool2d" in ops) == (not whole)
    assert ("relax.nn.avg_pool2d" in ops) == (whole and output != (size, size))
    ex = tvm_tensil.build(mod, target="tensil", arch="pynqz1")
    reasons = [o["reason"] for o in ex.tensil_report.cpu_ops]
    assert reasons == ([] if whole else [f"adaptive average pool of ({size}, {size}) to {output} (only 1x1, or sizes "
                                         "that divide the map, NCHW)"])  # fmt: skip
    with torch.no_grad():
        ref = model(x).numpy()
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy()))
    got = (got[0] if type(got).__name__ == "Array" else got).numpy()
    assert np.max(np.abs(got - ref)) < 0.01 * np.ptp(ref) + 2**-7


@pytest.mark.parametrize(
    "op, attrs, shape",
    [("DepthToSpace", {"mode": "DCR"}, (1, 8, 3, 3)), ("DepthToSpace", {"mode": "CRD"}, (1, 8, 3, 3)),
     ("SpaceToDepth", {}, (1, 3, 6, 4))],
)  # fmt: skip
def test_onnx_depth_to_space_and_back_are_convs_that_move_values_exactly(op, attrs, shape):
    """Either DepthToSpace mode (a reshape, permute, reshape as TVM imports it) is a transposed conv of
    ones, SpaceToDepth a conv: on the TCU at FP16BP8, grid values come out bit for bit."""
    import tvm_tensil

    b = OnnxBuilder(0)
    mod = from_onnx(b.model({"x": list(shape)}, b.op(op, ["x"], blocksize=2, **attrs)), keep_params_in_input=False)
    assert "relax.permute_dims" not in _ops(prepare_for_tensil(mod)["main"])
    x = (np.round(np.random.default_rng(0).uniform(-4, 4, shape) * 256) / 256).astype(np.float32)
    ex = tvm_tensil.build(mod, target="tensil", arch="pynqz1")
    assert ex.tensil_report.cpu_ops == []
    want = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_array_equal(got, want)


def _norm_net(torch, kind: str):
    torch.manual_seed(0)
    norm = {
        "instance": lambda: torch.nn.InstanceNorm2d(16, affine=True),
        "instance_plain": lambda: torch.nn.InstanceNorm2d(16),
        "group": lambda: torch.nn.GroupNorm(4, 16),
        "layer": lambda: torch.nn.GroupNorm(1, 16),
    }[kind]()
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), norm, torch.nn.ReLU(), torch.nn.Conv2d(16, 8, 1))
    with torch.no_grad():
        net[0].weight.mul_(torch.logspace(-1, 1, 16).view(-1, 1, 1, 1))  # channels' deviations 100x apart
        if getattr(norm, "weight", None) is not None:
            norm.weight.uniform_(0.5, 2.0)
            norm.bias.uniform_(-1.0, 1.0)
    return net.eval()


@pytest.mark.parametrize("source", ["torch", "onnx"])
@pytest.mark.parametrize(
    "kind, batch", [("instance", 1), ("instance", 3), ("instance_plain", 2), ("group", 2), ("layer", 1)]
)
def test_instance_and_group_norms_run_on_the_tcu(kind, batch, source):
    """InstanceNorm and GroupNorm as torch.export writes them (a batch's instance norm over a
    (1, N * C) reshape) and as TVM imports their ONNX export (mean, variance, sqrt and divide; a
    group norm over a (N, G, -1) reshape): one partition with the convs around them, within 0.05% of
    TVM's CPU build's range at FP32BP16 (the logic), no op left on the CPU."""
    torch = pytest.importorskip("torch")
    import io

    import onnx
    from tvm.relax.frontend.torch import from_exported_program

    import tvm_tensil
    from tvm_tensil.numbers import FP32BP16

    net = _norm_net(torch, kind)
    x = torch.randn(batch, 3, 8, 8)
    if source == "torch":
        mod = from_exported_program(torch.export.export(net, (x,)), keep_params_as_input=False)
    else:
        f = io.BytesIO()
        torch.onnx.export(net, (x,), f, dynamo=False, opset_version=17)
        mod = from_onnx(onnx.load_from_string(f.getvalue()), keep_params_in_input=False)
    cpu = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x.numpy()))
    arch = tvm_tensil.load_arch("pynqz1").replace(data_type=FP32BP16, name="pynqz1_fp32")
    ex = tvm_tensil.build(mod, target="tensil", arch=arch)
    assert ex.tensil_report.cpu_ops == [] and len(ex.tensil_report.partitions) == 1
    tcu = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy()))
    cpu, tcu = ((r[0] if not hasattr(r, "numpy") else r).numpy() for r in (cpu, tcu))
    assert np.max(np.abs(tcu - cpu)) <= 5e-4 * np.ptp(cpu)


def test_an_rsqrt_without_epsilon_stays_on_the_cpu_saying_why():
    """``x * rsqrt(v)`` with nothing added to v would be infinite at 0: on the CPU, with the reason."""
    from tvm.script import relax as R

    import tvm_tensil

    @tvm.script.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((1, 8, 4, 4), "float32")):
            with R.dataflow():
                m = R.mean(x, axis=[2, 3], keepdims=True)
                d = R.subtract(x, m)
                v = R.mean(R.multiply(d, d), axis=[2, 3], keepdims=True)
                y = R.multiply(d, R.rsqrt(v))
                R.output(y)
            return y

    report = tvm_tensil.build(Mod, target="tensil", arch="pynqz1").tensil_report
    assert [(op["op"], "epsilon" in op["reason"]) for op in report.cpu_ops] == [("relax.rsqrt", True)]


def test_an_rsqrt_whose_constants_crowd_the_accumulators_stays_on_the_cpu():
    """On a core of 128 accumulators, the norm's rsqrt (some 70 constant vectors) stays on the CPU
    with the reason; the rest of the norm runs on the TCU."""
    torch = pytest.importorskip("torch")
    from tvm.relax.frontend.torch import from_exported_program

    import tvm_tensil

    net = _norm_net(torch, "instance")
    mod = from_exported_program(torch.export.export(net, (torch.randn(1, 3, 8, 8),)), keep_params_as_input=False)
    small = tvm_tensil.load_arch("pynqz1").replace(accumulator_depth=128, name="small_acc")
    report = tvm_tensil.build(mod, target="tensil", arch=small).tensil_report
    reasons = {op["op"]: op["reason"] for op in report.cpu_ops}
    assert "constant vectors take over a quarter of the 128 accumulators" in reasons["relax.rsqrt"]


@pytest.mark.parametrize("opset, scale_shape", [(18, 4), (21, 16)])
def test_onnx_group_normalization_runs_on_the_tcu(opset, scale_shape):
    """ONNX GroupNormalization (opset 18: a scale and bias per group; 21: per channel) after a conv:
    one partition, within 0.05% of TVM's CPU build's range at FP32BP16."""
    from onnx import TensorProto, helper, numpy_helper

    import tvm_tensil
    from tvm_tensil.numbers import FP32BP16

    rng = np.random.default_rng(0)
    consts = [
        numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.uniform(0.5, 2, scale_shape).astype(np.float32), "s"),
        numpy_helper.from_array(rng.uniform(-1, 1, scale_shape).astype(np.float32), "b"),
    ]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("GroupNormalization", ["c", "s", "b"], ["y"], num_groups=4, epsilon=1e-5)]  # fmt: skip
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])], consts,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    mod = from_onnx(model, keep_params_in_input=False)
    arch = tvm_tensil.load_arch("pynqz1").replace(data_type=FP32BP16, name="pynqz1_fp32")
    ex = tvm_tensil.build(mod, target="tensil", arch=arch)
    assert ex.tensil_report.cpu_ops == [] and len(ex.tensil_report.partitions) == 1
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    cpu, tcu = (relax.VirtualMachine(e, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
                for e in (tvm.compile(mod, target="llvm"), ex))  # fmt: skip
    assert np.max(np.abs(tcu - cpu)) <= 5e-4 * np.ptp(cpu)
