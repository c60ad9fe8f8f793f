"""Calibration: trained networks at FP16BP8 with a scale per tensor, against TVM's CPU build at the
logits; the calibration data's errors; the build that will be wrong says so.

The trained networks (tests/trained_nets.py) learn scikit-learn's digits in seconds. The logit bound
is the target, 1% of the logits' range; measured at FP16BP8 with calibration (benchmarks/calibration.py
gives the current figures, docs/results.md): resnet 0.32%, mobilenet 0.35%, mobilenetv3 0.64%,
efficientnet 0.73%, prelu 0.22%, csp 0.39%, wide_range 0.21%, elu 0.34% (19.5% with the exp sized for
e^max(x)), norms 0.50%.
"""

import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_tensil
from tvm_tensil.runtime.device import SaturationWarning

trained_nets = pytest.importorskip("trained_nets")
BATCH = 16  # the build's batch (its compile time grows with it); the test images run in batches
CALIBRATION = 256  # training images to calibrate on


def _logits(vm_main, x: np.ndarray) -> np.ndarray:
    out = []
    for i in range(0, len(x), BATCH):
        r = vm_main(tvm.runtime.tensor(x[i : i + BATCH]))
        out.append((r[0] if type(r).__name__ == "Array" or isinstance(r, (list, tuple)) else r).numpy())
    return np.concatenate(out)


WINDOW = tvm_tensil.arch.PRESETS["pynqz1"].replace(window_matmul=True, name="pynqz1_window")


@pytest.mark.parametrize(
    "kind, arch",
    [(kind, "pynqz1") for kind in trained_nets.CLASSIFIERS]
    + [(kind, WINDOW) for kind in ("mobilenet", "mobilenetv3")],  # depthwise convs as window MatMuls
    ids=lambda v: getattr(v, "name", v),
)
def test_trained_network_keeps_its_answers_with_calibration(kind, arch):
    """Top-1 on the held-back split within 0.5 point of float, no saturation on it after calibrating on
    the training split, logits within 1% of their range."""
    net, data = trained_nets.trained(kind), trained_nets.digits()
    n = len(data.x_test) // BATCH * BATCH
    x, y = data.x_test[:n], data.y_test[:n]
    mod = trained_nets.relax_module(net, BATCH)
    cpu = _logits(relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"], x)
    ex = tvm_tensil.build(mod, target="tensil", arch=arch, calibration=data.x_train[:CALIBRATION])
    assert ex.tensil_report.cpu_ops == []
    with warnings.catch_warnings():
        warnings.simplefilter("error", SaturationWarning)
        tcu = _logits(relax.VirtualMachine(ex, tvm.cpu())["main"], x)
    float_acc, tcu_acc = np.mean(cpu.argmax(1) == y), np.mean(tcu.argmax(1) == y)
    assert float_acc > 0.95  # the network really learned
    assert tcu_acc >= float_acc - 0.005, (float_acc, tcu_acc)
    assert np.max(np.abs(tcu - cpu)) <= 0.01 * np.ptp(cpu)


def test_a_trained_head_without_bias_rows_keeps_its_logits():
    """At batch 1 a classifier's head is a dense layer of one pixel, whose weight blocks may go
    without their bias rows (the bias then enters the accumulators before the products): forced so,
    the trained network's logits stay within 1% of their range of TVM's CPU build, every top-1 the
    CPU's."""
    from tvm_tensil.compiler import CompileOptions

    net, data = trained_nets.trained("mobilenet"), trained_nets.digits()
    x = data.x_test[:32]
    mod = trained_nets.relax_module(net, 1)
    cpu_main = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"]
    ex = tvm_tensil.build(mod, target="tensil", arch="pynqz1_12x12", calibration=data.x_train[:CALIBRATION],
                          options=CompileOptions(bare_blocks=True))  # fmt: skip
    assert [n["output"] for p in ex.tensil_report.partitions.values() for n in p["nodes"] if n.get("bare_blocks")]
    tcu_main = relax.VirtualMachine(ex, tvm.cpu())["main"]

    def logits(main, image):
        r = main(tvm.runtime.tensor(image[None]))
        return (r[0] if type(r).__name__ == "Array" or isinstance(r, (list, tuple)) else r).numpy()[0]

    cpu = np.stack([logits(cpu_main, image) for image in x])
    tcu = np.stack([logits(tcu_main, image) for image in x])
    assert (tcu.argmax(1) == cpu.argmax(1)).all()
    assert np.max(np.abs(tcu - cpu)) <= 0.01 * np.ptp(cpu)


@pytest.mark.parametrize("calibrated", [False, True])
def test_a_trained_unet_marks_the_pixels_the_cpu_marks(calibrated):
    """The U-Net (ConvTranspose upsampling, skip concats, a sigmoid output) in one partition, nothing
    on the CPU: its thresholded map differs from TVM's CPU build's on at most 1% of the pixels, its
    probabilities within 0.1 (calibrated: 0.05)."""
    net, data = trained_nets.trained("unet"), trained_nets.digits()
    x = data.x_test[: len(data.x_test) // BATCH * BATCH]
    mod = trained_nets.relax_module(net, BATCH)
    cpu = _logits(relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"], x)
    assert np.mean((cpu > 0.5) == trained_nets.ink(x)) > 0.99  # the network really learned
    ex = tvm_tensil.build(mod, target="tensil", arch="pynqz1", calibration=data.x_train[:BATCH] if calibrated else None)
    assert ex.tensil_report.cpu_ops == [] and len(ex.tensil_report.partitions) == 1
    tcu = _logits(relax.VirtualMachine(ex, tvm.cpu())["main"], x)
    assert np.mean((tcu > 0.5) != (cpu > 0.5)) <= 0.01
    assert np.abs(tcu - cpu).max() <= (0.05 if calibrated else 0.1)


def test_a_trained_detection_head_keeps_its_boxes():
    """A YOLO-style head (each cell's share of ink through a sigmoid, the box size through an exp):
    calibrated, one partition with nothing on the CPU; both outputs within 1% of their range of
    TVM's CPU build; the array multiplies no more than the model's products."""
    from helpers import matmul_vectors, model_matmul_vectors

    net, data = trained_nets.trained("detector"), trained_nets.digits()
    x = data.x_test[: len(data.x_test) // BATCH * BATCH]
    share, size = trained_nets.boxes(x)
    mod = trained_nets.relax_module(net, BATCH)

    def outputs(main):
        runs = [main(tvm.runtime.tensor(x[i : i + BATCH])) for i in range(0, len(x), BATCH)]
        return [np.concatenate([r[k].numpy() for r in runs]) for k in range(2)]

    cpu = outputs(relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"])
    # The network really learned: the ink's share per cell and the box's size in cells (1 to 4).
    assert np.abs(cpu[0] - share).mean() < 0.06 and np.abs(cpu[1].mean((2, 3)) - size).mean() < 0.3
    ex = tvm_tensil.build(mod, target="tensil", arch="pynqz1", calibration=data.x_train[:CALIBRATION])
    report = ex.tensil_report
    assert len(report.partitions) == 1 and report.cpu_ops == []
    needed, output_vectors = model_matmul_vectors(mod, report.arch.array_size)
    assert needed <= matmul_vectors(report) <= needed + output_vectors
    with warnings.catch_warnings():
        warnings.simplefilter("error", SaturationWarning)
        tcu = outputs(relax.VirtualMachine(ex, tvm.cpu())["main"])
    for t, c in zip(tcu, cpu):
        assert np.abs(t - c).max() <= 0.01 * np.ptp(c)


def test_a_build_that_will_be_wrong_says_so_and_calibration_fixes_it():
    """The wide-range net without calibration: its inputs saturate and a layer's weights round to zero,
    and the build warns once per such layer, naming it; calibrated, it does not."""
    net, data = trained_nets.trained("wide_range"), trained_nets.digits()
    mod = trained_nets.relax_module(net, BATCH)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        uncalibrated = str(tvm_tensil.build(mod, target="tensil", arch="pynqz1").tensil_report)
    assert "  scales: FP16BP8's own for every tensor (no calibration samples; calibration=samples" in uncalibrated
    lines = [str(w.message) for w in seen if issubclass(w.category, tvm_tensil.PrecisionWarning)]
    assert any(
        "100% of its weights round to zero and 0% saturate at FP16BP8" in line and "calibration=" in line
        for line in lines
    )
    assert all("\n" not in line and line.startswith("conv2d -> t") for line in lines)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ex = tvm_tensil.build(mod, target="tensil", arch="pynqz1", calibration=data.x_train[:BATCH])
    assert not [w for w in seen if issubclass(w.category, tvm_tensil.PrecisionWarning)]
    assert "scales: per tensor from 1 calibration sample, 2^" in str(ex.tensil_report)
    assert "no calibration samples" not in str(ex.tensil_report)
    (part,) = ex.tensil_report.partitions.values()
    for name, scale in part["scales"].items():  # each tensor's scale keeps the range it took
        assert scale["headroom"] is None or scale["headroom"] >= 1.0, name


def test_calibration_data_that_does_not_fit_is_one_clear_error():
    from tvm.relax.frontend.onnx import from_onnx

    from tvm_tensil import zoo

    mod = from_onnx(zoo.small_cnn(), keep_params_in_input=False)
    cases = {
        "has shape (2, 3, 15, 16); the model takes (1, 3, 16, 16)": np.zeros((2, 3, 15, 16), np.float32),
        "no value for input(s) ['x']": [{"y": np.zeros((1, 3, 16, 16), np.float32)}],
        "holds NaN or infinite values": np.full((1, 3, 16, 16), np.nan, np.float32),
        "holds no sample": [],
    }
    for message, data in cases.items():
        with pytest.raises(tvm_tensil.CalibrationError, match=re.escape(message)):
            tvm_tensil.build(mod, target="tensil", calibration=data)


def test_cli_compile_with_calibration_runs_in_a_fresh_process(tmp_path):
    """`compile --calibrate` (a stack of samples) writes a library whose scales survive export: `run`
    in a new process matches TVM's CPU build within the FP16BP8 bound of the uncalibrated build."""
    import onnx
    from tvm.relax.frontend.onnx import from_onnx

    from tvm_tensil import zoo
    from tvm_tensil.compiler import CompileOptions

    model = zoo.small_cnn(softmax=False)
    onnx.save(model, tmp_path / "cnn.onnx")
    rng = np.random.default_rng(0)
    np.save(tmp_path / "cal.npy", rng.standard_normal((8, 3, 16, 16)).astype(np.float32))
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)

    def cli(*args):
        run = [sys.executable, "-m", "tvm_tensil.cli", *(str(a) for a in args)]
        return subprocess.run(run, capture_output=True, text=True, timeout=600)

    # (No error target: the choice with weights rounded for their outputs, see the test below.)
    r = cli("compile", tmp_path / "cnn.onnx", "-o", tmp_path / "out", "--calibrate", tmp_path / "cal.npy",
            "--error-target", "none")  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "calibration samples, 2^" in r.stdout
    r = cli("run", tmp_path / "out" / "cnn.so", "--input", tmp_path / "x.npy", "-o", tmp_path / "y.npy")
    assert r.returncode == 0, r.stderr[-3000:]
    mod = from_onnx(model, keep_params_in_input=False)
    cpu = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert np.max(np.abs(np.load(tmp_path / "y.npy") - cpu)) <= 0.01 * np.ptp(cpu)
    # The library carries the weights as calibration rounded them: the same numbers as built here.
    options = CompileOptions(error_target=None)
    ex = tvm_tensil.build(mod, target="tensil", calibration=np.load(tmp_path / "cal.npy"), options=options)
    assert "rounded for their outputs" in str(ex.tensil_report.partitions)
    here = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert np.array_equal(np.load(tmp_path / "y.npy"), here)
    bad = cli("compile", tmp_path / "cnn.onnx", "-o", tmp_path / "o2", *["--calibrate", tmp_path / "x.npy"] * 2)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "input" in bad.stderr


def test_cli_error_target_puts_weights_in_two_parts_that_survive_export(tmp_path):
    """`compile --error-target 0` gives weights in two parts wherever they lower the simulated error;
    the library run in a new process computes what the same build does here; a bad target is an
    error that names the option."""
    import onnx
    from tvm.relax.frontend.onnx import from_onnx

    from tvm_tensil import zoo
    from tvm_tensil.compiler import CompileOptions

    model = zoo.small_cnn(softmax=False)
    onnx.save(model, tmp_path / "cnn.onnx")
    rng = np.random.default_rng(0)
    cal = rng.standard_normal((8, 3, 16, 16)).astype(np.float32)
    np.save(tmp_path / "cal.npy", cal)
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)

    def cli(*args):
        run = [sys.executable, "-m", "tvm_tensil.cli", *(str(a) for a in args)]
        return subprocess.run(run, capture_output=True, text=True, timeout=600)

    out = tmp_path / "out"
    r = cli("compile", tmp_path / "cnn.onnx", "-o", out, "--calibrate", tmp_path / "cal.npy", "--error-target", "0")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "weights in two parts" in r.stdout
    r = cli("run", out / "cnn.so", "--input", tmp_path / "x.npy", "-o", tmp_path / "y.npy")
    assert r.returncode == 0, r.stderr[-3000:]
    mod = from_onnx(model, keep_params_in_input=False)
    ex = tvm_tensil.build(mod, target="tensil", calibration=cal, options=CompileOptions(error_target=0.0))
    here = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert np.array_equal(np.load(tmp_path / "y.npy"), here)
    bad = cli("compile", tmp_path / "cnn.onnx", "-o", tmp_path / "o2", "--error-target", "lots")
    last = bad.stderr.strip().splitlines()[-1]  # (argparse's usage line, then the error)
    assert bad.returncode == 2 and "--error-target" in last and "percentage" in last


def test_two_builds_of_one_model_with_other_options_each_run_their_own_program():
    """Libraries loaded in one process share the runtime's partitions by symbol: a build with other
    options (here weights in two parts) gets its own symbol and runs its own program and weights, and
    a second library that defines a loaded symbol differently is refused at load."""
    import json

    from tvm.relax.frontend.onnx import from_onnx

    from tvm_tensil import zoo
    from tvm_tensil.compiler import CompileOptions
    from tvm_tensil.model import from_user_layout, to_user_layout
    from tvm_tensil.runtime import Emulator, bridge

    mod = from_onnx(zoo.small_cnn(softmax=False), keep_params_in_input=False)
    rng = np.random.default_rng(3)
    cal = rng.standard_normal((8, 3, 16, 16)).astype(np.float32)
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    results = []
    for target in (None, 0.0):
        ex = tvm_tensil.build(mod, target="tensil", calibration=cal, options=CompileOptions(error_target=target))
        ((symbol, part),) = ex.tensil_report.compiled.items()
        y = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
        ((name, shape_in), (out, shape_out)) = part.user_shapes.items()
        feeds = {name: from_user_layout(x.astype(np.float64), shape_in)}
        own = Emulator(part.arch).run_model(part.model(part.constants), feeds)[out]
        np.testing.assert_array_equal(y, to_user_layout(own, shape_out).astype(np.float32))
        results.append((symbol, part, y))
    (one, _, y1), (two, part, y2) = results
    assert one != two and not np.array_equal(y1, y2)
    assert any(n.get("residue_bits") for n in part.report["nodes"])
    other = json.loads(json.dumps(part.description))
    other["program"] = other["program"][::-1]
    with pytest.raises(RuntimeError, match=f"{two} is already loaded .* different program"):
        bridge.register(two, json.dumps(other))


def test_the_weights_rounded_for_their_outputs_reach_the_device():
    """Calibration rounds a layer's weights for its outputs (closer to float there than nearest
    rounding) and TVM delivers them: the DRAM1 image the runtime packs is the one the build made.
    (Without an error target: with the default one this net's choice has finer accumulators, whose
    weights simulate best at nearest rounding.)"""
    from tvm.relax.frontend.onnx import from_onnx

    from tvm_tensil import zoo
    from tvm_tensil.compiler import CompileOptions
    from tvm_tensil.runtime import bridge

    mod = from_onnx(zoo.small_cnn(softmax=False), keep_params_in_input=False)
    cal = np.random.default_rng(0).standard_normal((8, 3, 16, 16)).astype(np.float32)
    ex = tvm_tensil.build(mod, target="tensil", calibration=cal, options=CompileOptions(error_target=None))
    ((symbol, part),) = ex.tensil_report.compiled.items()
    assert part.rounded
    report = ex.tensil_report.partitions[symbol]
    assert report["calibration"]["weights"] == "rounded for their outputs"
    layers = [n for n in report["nodes"] if "weights_output_error" in n]
    assert layers and all(n["weights_output_error"] <= n["weights_output_error_nearest"] for n in layers)
    assert any(n["weights_output_error"] < n["weights_output_error_nearest"] for n in layers)
    relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(cal[:1]))
    ((_, built),) = part.model(part.constants).consts
    ((_, delivered),) = bridge.PARTITIONS[symbol].model.consts
    assert np.array_equal(built, delivered)


def test_run_time_saturation_names_the_models_input_and_what_to_do():
    """Inputs beyond the data type's range: the warning names the model's own input and says to
    calibrate; built with inputs like these, nothing saturates and the result matches the CPU's."""
    from tvm.relax.frontend.onnx import from_onnx

    from tvm_tensil import zoo

    b = zoo.OnnxBuilder(0)
    mod = from_onnx(b.model({"x": [2, 16]}, b.op("Relu", [b.gemm("x", 16, 8)])), keep_params_in_input=False)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 16)).astype(np.float32) * 100
    for calibration in (None, rng.standard_normal((8, 16)).astype(np.float32) * 100):
        ex = tvm_tensil.build(mod, target="tensil", calibration=calibration)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            y = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
        messages = [str(w.message) for w in seen if issubclass(w.category, SaturationWarning)]
        if calibration is None:
            assert any("input 'x' (model input 'x') has" in m and "calibration=" in m for m in messages)
        else:
            assert not messages
            cpu = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x))
            assert np.max(np.abs(y - cpu.numpy())) <= 0.01 * np.ptp(cpu.numpy())


def test_the_tensil_pipeline_takes_calibration_data():
    from tvm.relax.frontend.onnx import from_onnx

    from tvm_tensil import zoo

    b = zoo.OnnxBuilder(0)
    mod = from_onnx(b.model({"x": [2, 16]}, b.op("Relu", [b.gemm("x", 16, 8)])), keep_params_in_input=False)
    samples = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32) * 100
    pipeline = tvm_tensil.tensil_pipeline("pynqz1", calibration=samples)
    tvm.compile(mod, target="tensil", relax_pipeline=pipeline)
    (part,) = pipeline.report.partitions.values()
    assert part["calibration_samples"] == 4 and part["scales"]


def test_a_transposed_conv_takes_weights_in_two_parts():
    """A ConvTranspose whose coarse input makes its weights coarse (an upsampling head): with the
    error target demanding it, its phases compute the weights in two parts, and its output is
    closer to TVM's CPU build than in one part."""
    from tvm.relax.frontend.onnx import from_onnx
    from zoo import OnnxBuilder

    from tvm_tensil.compiler import CompileOptions

    rng = np.random.default_rng(7)
    b = OnnxBuilder(seed=7)
    up = b.op("ConvTranspose", ["x", b.const(rng.standard_normal((8, 8, 4, 4)) / 12)], strides=[2, 2], pads=[1] * 4)
    model = b.model({"x": [1, 8, 6, 6]}, up)
    cal = (rng.standard_normal((16, 8, 6, 6)) * 4).astype(np.float32)
    x = cal[-1:]
    mod = from_onnx(model, keep_params_in_input=False)
    want = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    errors = []
    for target in (None, 0.0):
        ex = tvm_tensil.build(mod, target="tensil", calibration=cal, options=CompileOptions(error_target=target))
        y = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
        errors.append(float(np.max(np.abs(y - want))))
        (part,) = ex.tensil_report.partitions.values()
        (layer,) = [n for n in part["nodes"] if n["op"] == "conv_transpose"]
        assert bool(layer.get("residue_bits")) == (target == 0.0), layer
    assert errors[1] < 0.5 * errors[0], errors


def test_calibration_samples_of_a_batched_model_stack_either_way():
    """A model of batch 2: samples stacked along a new axis (``np.stack``) or along the batch axis
    give the same samples; a stack that fits neither is an error saying both shapes."""
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    from tvm_tensil.byoc.calibrate import samples_for

    program = torch.export.export(torch.nn.Conv2d(3, 4, 3).eval(), (torch.zeros(2, 3, 16, 16),))
    main = from_exported_program(program, keep_params_as_input=False)["main"]
    x = np.random.default_rng(0).standard_normal((4, 2, 3, 16, 16)).astype(np.float32)
    stacked, along_batch = samples_for(main, x), samples_for(main, x.reshape(8, 3, 16, 16))
    assert len(stacked) == len(along_batch) == 4
    assert all(np.array_equal(a[0], b[0]) and a[0].shape == (2, 3, 16, 16) for a, b in zip(stacked, along_batch))
    message = "the model takes (2, 3, 16, 16) (give samples of that shape, a stack of them (k, 2, 3, 16, 16) or, along"
    with pytest.raises(tvm_tensil.CalibrationError, match=re.escape(message)):
        samples_for(main, x[:, :, :2])
