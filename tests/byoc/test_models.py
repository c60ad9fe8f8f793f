"""Whole networks: the zoo on the emulator, export/reload, and accuracy on real data."""

import subprocess
import sys
import textwrap

import numpy as np
import tvm
import zoo
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

import tvm_tensil
from tvm_tensil.numbers import FP32BP16

FP32 = tvm_tensil.load_arch("pynqz1").replace(data_type=FP32BP16, name="pynqz1_fp32bp16")


def _logit_errors(compare, model, inputs):
    """Max |TCU - CPU| of the logits for FP32BP16 and FP16BP8, as fractions of the logits' range."""
    cpu32, tcu32, report32, _ = compare(model, inputs, arch=FP32)
    cpu16, tcu16, report16, _ = compare(model, inputs)
    span = float(cpu32.max() - cpu32.min())
    return (float(np.max(np.abs(tcu32 - cpu32))) / span, float(np.max(np.abs(tcu16 - cpu16))) / span, report16)


def test_mlp(compare):
    rng = np.random.default_rng(0)
    logic, rounding, report = _logit_errors(compare, zoo.mlp(batch=4), {"x": rng.standard_normal((4, 64)) * 0.5})
    assert report.cpu_ops == []
    assert logic < 0.01 and rounding < 0.02


def test_small_cnn(compare):
    rng = np.random.default_rng(1)
    logic, rounding, report = _logit_errors(
        compare, zoo.small_cnn(softmax=False), {"x": rng.standard_normal((1, 3, 16, 16))}
    )
    assert report.cpu_ops == []  # the flatten runs in place
    assert len(report.partitions) == 1
    assert logic < 0.01 and rounding < 0.03


def test_resnet20v2_logits(compare):
    """Pre-softmax logits: a wrong residual input (a reused composite reading the first call's
    arguments) showed as 17% of the range here while the probabilities stayed within 0.1."""
    rng = np.random.default_rng(2)
    logic, rounding, report = _logit_errors(
        compare, zoo.resnet20v2(softmax=False), {"x": rng.standard_normal((1, 3, 32, 32))}
    )
    assert report.cpu_ops == []
    assert len(report.partitions) == 1
    offloaded = {op for p in report.partitions.values() for n in p["nodes"] for op in n["relax_ops"]}
    assert {"relax.nn.conv2d", "relax.add", "relax.nn.relu", "relax.matmul"} <= offloaded
    # FP16BP8 through 20 layers (reductions of up to 1152 terms): a few % of the range.
    assert logic < 0.01 and rounding < 0.05, (logic, rounding)


def test_export_and_reload_in_a_fresh_process(tmp_path):
    rng = np.random.default_rng(3)
    mod = from_onnx(zoo.small_cnn(), keep_params_in_input=False)
    ex = tvm_tensil.build(mod, target="tensil", arch="pynqz1")
    x = rng.standard_normal((1, 3, 16, 16)).astype("float32")
    y = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    lib = tmp_path / "model.so"
    ex.export_library(str(lib))
    np.save(tmp_path / "x.npy", x)
    script = textwrap.dedent(f"""
        import numpy as np, tvm
        import tvm_tensil
        from tvm import relax
        vm = relax.VirtualMachine(tvm.runtime.load_module({str(lib)!r}), tvm.cpu())
        x = tvm.runtime.tensor(np.load({str(tmp_path / "x.npy")!r}))
        np.save({str(tmp_path / "y.npy")!r}, vm["main"](x).numpy())
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), y)


def test_reload_without_import_says_what_to_do(tmp_path):
    mod = from_onnx(zoo.mlp(batch=1), keep_params_in_input=False)
    lib = tmp_path / "mlp.so"
    tvm_tensil.build(mod, target="tensil").export_library(str(lib))
    script = textwrap.dedent(f"""
        import numpy as np, tvm
        from tvm import relax
        vm = relax.VirtualMachine(tvm.runtime.load_module({str(lib)!r}), tvm.cpu())
        vm["main"](tvm.runtime.tensor(np.zeros((1, 64), "float32")))
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "import tvm_tensil" in r.stderr


def test_tvm_compile_with_the_tensil_pipeline():
    rng = np.random.default_rng(4)
    mod = from_onnx(zoo.mlp(batch=2), keep_params_in_input=False)
    x = tvm.runtime.tensor(rng.standard_normal((2, 64)).astype("float32"))
    pipeline = tvm_tensil.tensil_pipeline("pynqz1")
    with tvm_tensil.device("emulator") as session:
        a = relax.VirtualMachine(tvm.compile(mod, target="tensil", relax_pipeline=pipeline), tvm.cpu())["main"](x)
        named = relax.VirtualMachine(tvm.compile(mod, target="tensil", relax_pipeline="tensil"), tvm.cpu())["main"](x)
        ex = tvm_tensil.build(mod, target="tensil")
        b = relax.VirtualMachine(ex, tvm.cpu())["main"](x)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(named.numpy(), b.numpy())
    assert pipeline.report.to_json() == ex.tensil_report.to_json()
    assert set(session.last_run_stats(ex.tensil_report)) == set(ex.tensil_report.partitions)  # they ran


def test_trained_digits_network_keeps_its_accuracy():
    """A network trained here on scikit-learn's digits (real 8x8 images) loses at most
    1 point of top-1 accuracy on its test split when run on the TCU (FP16BP8)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.3, random_state=0)
    clf = MLPClassifier(hidden_layer_sizes=(32,), max_iter=400, random_state=0).fit(x_train, y_train)
    b = zoo.OnnxBuilder()
    h = b.op("Relu", [b.op("Gemm", ["x", b.const(clf.coefs_[0]), b.const(clf.intercepts_[0])])])
    logits = b.op("Gemm", [h, b.const(clf.coefs_[1]), b.const(clf.intercepts_[1])])
    model = b.model({"x": [len(x_test), 64]}, logits)
    mod = from_onnx(model, keep_params_in_input=False)
    xt = tvm.runtime.tensor(x_test)
    float_pred = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](xt).numpy().argmax(1)
    ex = tvm_tensil.build(mod, target="tensil")
    assert ex.tensil_report.cpu_ops == []
    tcu_pred = relax.VirtualMachine(ex, tvm.cpu())["main"](xt).numpy().argmax(1)
    float_acc = np.mean(float_pred == y_test)
    tcu_acc = np.mean(tcu_pred == y_test)
    assert float_acc > 0.9  # the network really learned
    assert tcu_acc >= float_acc - 0.01, (float_acc, tcu_acc)
