"""The latency model (compiler/latency.py) against the Verilated core's measured cycles."""

import numpy as np
import pytest

import zoo


@pytest.mark.parametrize("model", ["mlp", "small_cnn", "yolov4_tiny"])
def test_the_estimate_is_within_one_percent_of_the_rtl(model):
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    import tvm_tensil
    from tvm_tensil.runtime import bridge

    onnx_model, shape = {"mlp": (zoo.mlp(batch=4), (4, 64)), "small_cnn": (zoo.small_cnn(), (1, 3, 16, 16)),
                         "yolov4_tiny": (zoo.yolov4_tiny(size=32), (1, 3, 32, 32))}[model]
    ex = tvm_tensil.build(from_onnx(onnx_model, keep_params_in_input=False), target="tensil", arch="pynqz1")
    report = tvm_tensil.last_report()
    x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    with tvm_tensil.device("verilator"):
        relax.VirtualMachine(ex, tvm.cpu())["main"](x)
    measured = sum(s.cycles for s in bridge.last_run_stats(report).values())
    assert abs(report.total_cycles - measured) <= 0.01 * measured, (report.total_cycles, measured)
