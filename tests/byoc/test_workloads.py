"""The headline workloads (ResNet-50 v2, YOLOv4-tiny, MobileNet-v2) built whole for the TCU and right
at the logits: an FP32BP16 variant of the preset against TVM's own CPU build, within 1% of each
output's range (FP32BP16 rounding is ~1e-5 of these values, so anything above is a logic error).

The default run uses small inputs; ``--full`` the sizes the benchmarks use (and builds every
network at full size for the three benchmark boards).
"""

import numpy as np
import pytest

import tvm_tensil
from tvm_tensil import zoo
from tvm_tensil.numbers import FP32BP16

FP32 = tvm_tensil.load_arch("arty_a7_35").replace(data_type=FP32BP16, name="arty_a7_35_fp32bp16")
SMALL = {"resnet50v2": 32, "yolov4_tiny": 64, "mobilenetv2": 32}
FULL = {"resnet50v2": 96, "yolov4_tiny": 192, "mobilenetv2": 96}


def _outputs(result) -> list[np.ndarray]:
    return [result.numpy()] if hasattr(result, "numpy") else [r.numpy() for r in result]


@pytest.mark.parametrize("net", list(SMALL))
def test_workload_matches_the_cpu_at_the_logits(net, full):
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    size = (FULL if full else SMALL)[net]
    kwargs = {"size": size} if net == "yolov4_tiny" else {"size": size, "softmax": False}
    mod = from_onnx(getattr(zoo, net)(**kwargs), keep_params_in_input=False)
    x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal((1, 3, size, size)).astype("float32"))
    cpu = _outputs(relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](x))
    ex = tvm_tensil.build(mod, target="tensil", arch=FP32)
    report = ex.tensil_report
    assert len(report.partitions) == 1 and not report.cpu_ops, str(report)
    tcu = _outputs(relax.VirtualMachine(ex, tvm.cpu())["main"](x))
    for c, t in zip(cpu, tcu, strict=True):
        span = float(np.ptp(c))
        assert span > 0
        err = float(np.abs(c - t).max())
        assert err <= 0.01 * span, f"{net} ({size}): error {err:.4g} is {100 * err / span:.2f}% of the range {span:.4g}"


@pytest.mark.parametrize("preset", ["arty_a7_35", "pynqz1_12x12", "ultra96v2_300mhz"])
def test_workloads_build_whole_and_run_for_the_benchmark_boards(preset, full):
    """Every op but the final softmax on the TCU, in one partition, at the published input sizes; one
    inference on the emulator gives finite, non-constant outputs of the right shapes."""
    if not full:
        pytest.skip("builds ResNet-50 v2 at 224 and YOLOv4-tiny at 416: run with --full")
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    for net, size, shapes in (
        ("resnet50v2", 224, [(1, 1000)]),
        ("yolov4_tiny", 416, [(1, 255, 13, 13), (1, 255, 26, 26)]),
        ("mobilenetv2", 224, [(1, 1000)]),
    ):
        ex = tvm_tensil.build(
            from_onnx(getattr(zoo, net)(size=size), keep_params_in_input=False), target="tensil", arch=preset
        )
        report = ex.tensil_report
        assert len(report.partitions) == 1, (net, str(report))
        assert {o["op"] for o in report.cpu_ops} <= {"relax.nn.softmax"}, (net, str(report))
        x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal((1, 3, size, size)).astype("float32"))
        outs = _outputs(relax.VirtualMachine(ex, tvm.cpu())["main"](x))
        assert [o.shape for o in outs] == shapes
        assert all(np.isfinite(o).all() and np.ptp(o) > 0 for o in outs)
