"""One-dimensional layers (keyword spotting, audio, sensors) computed as two-dimensional ones of height 1."""

import warnings

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax

import tvm_tensil
from tvm_tensil.byoc.prepare import prepare_for_tensil
from tvm_tensil.numbers import FP32BP16
from tvm_tensil.runtime.device import SaturationWarning

torch = pytest.importorskip("torch")
from tvm.relax.frontend.torch import from_exported_program  # noqa: E402

nn, F = torch.nn, torch.nn.functional
trained_nets = pytest.importorskip("trained_nets")
ONE_D = ("conv1d", "conv1d_transpose", "max_pool1d", "avg_pool1d", "adaptive_avg_pool1d", "batch_norm")
FP32 = tvm_tensil.arch.PRESETS["pynqz1"].replace(data_type=FP32BP16, name="pynqz1_fp32bp16")


class Sequence(nn.Module):
    """Every 1-d layer the pass lifts, and the ops between them: bias-free and depthwise convs, batch
    norms, PReLU, pools (ceil mode too), a channel split, a concat, a slice, a transposed conv, a mean
    over time kept as a second output, and an op it does not lift (a transpose) on the way out."""

    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv1d(16, 32, 3, padding=1, bias=False), nn.BatchNorm1d(32)
        self.dw, self.act = nn.Conv1d(16, 16, 5, padding=2, groups=16), nn.PReLU(16)
        self.c2 = nn.Conv1d(32, 24, 3, stride=2, padding=1, dilation=1)
        self.up, self.b2 = nn.ConvTranspose1d(24, 8, 2, stride=2), nn.BatchNorm1d(8)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = F.max_pool1d(F.relu(self.b1(self.c1(x))), 2)
        a, b = x.chunk(2, 1)
        x = torch.cat([a, self.act(self.dw(b))], 1)
        x = F.avg_pool1d(F.hardswish(self.c2(x)), 2, ceil_mode=False)[:, :24]
        x = F.leaky_relu(self.b2(self.up(x)), 0.1)
        return self.fc(F.adaptive_avg_pool1d(x, 1).flatten(1)), x.mean(-1), x.transpose(1, 2)


def _randomised(model: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    for m in model.modules():
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()
        if isinstance(m, nn.BatchNorm1d):  # non-trivial statistics, so that folding matters
            with torch.no_grad():
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
    return model.eval()


def _outputs(ex, x: np.ndarray) -> list[np.ndarray]:
    r = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x))
    return [t.numpy() for t in r] if type(r).__name__ == "Array" or isinstance(r, (list, tuple)) else [r.numpy()]


def _ops(mod: tvm.IRModule) -> set[str]:
    found = set()
    relax.analysis.post_order_visit(
        mod["main"], lambda e: found.add(e.op.name) if isinstance(e, relax.Call) and hasattr(e.op, "name") else None
    )
    return found


def test_every_one_dimensional_layer_becomes_two_dimensional_computing_the_same():
    model, x = _randomised(Sequence()), np.random.default_rng(0).standard_normal((1, 16, 20)).astype("float32")
    mod = from_exported_program(torch.export.export(model, (torch.from_numpy(x),)), keep_params_as_input=False)
    assert {f"relax.nn.{name}" for name in ONE_D} & _ops(mod)
    prepared = prepare_for_tensil(mod)
    assert not {f"relax.nn.{name}" for name in ONE_D} & _ops(prepared)
    assert {"relax.nn.conv2d", "relax.nn.conv2d_transpose", "relax.nn.max_pool2d"} <= _ops(prepared)
    before = _outputs(tvm.compile(mod, target="llvm"), x)
    after = _outputs(tvm.compile(prepared, target="llvm"), x)
    for a, b in zip(before, after):
        assert a.shape == b.shape
        np.testing.assert_allclose(b, a, atol=1e-5 * float(np.ptp(a)), rtol=1e-5)


def test_a_sequence_model_runs_on_the_tcu_but_its_layout_change_in():
    """Built whole for the TCU at FP32BP16: only the input's (N, C, W) -> (N, C, 1, W) and the
    transposed output stay on the CPU; every output within 1% of its range of TVM's CPU build."""
    model, x = _randomised(Sequence()), np.random.default_rng(1).standard_normal((1, 16, 20)).astype("float32")
    mod = from_exported_program(torch.export.export(model, (torch.from_numpy(x),)), keep_params_as_input=False)
    ex = tvm_tensil.build(mod, target="tensil", arch=FP32)
    cpu_ops = [o["op"] for o in ex.tensil_report.cpu_ops]
    assert set(cpu_ops) <= {"relax.expand_dims", "relax.squeeze", "relax.permute_dims"}, cpu_ops
    layers = [n["op"] for p in ex.tensil_report.partitions.values() for n in p["nodes"]]
    assert {"conv2d", "conv_transpose", "max_pool2d", "dense"} <= set(layers), layers
    for ref, got in zip(_outputs(tvm.compile(mod, target="llvm"), x), _outputs(ex, x)):
        assert np.max(np.abs(got - ref)) < 0.01 * float(np.ptp(ref))


def test_an_onnx_one_dimensional_model_runs_on_the_tcu():
    """The ONNX importer's 1-d Conv, MaxPool and GlobalAveragePool: on the TCU, within 1% at FP32BP16."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from tvm.relax.frontend.onnx import from_onnx

    rng = np.random.default_rng(2)

    def init(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype("float32"), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3], pads=[1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2], strides=[2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], kernel_shape=[3], strides=[2], pads=[1, 1], group=8),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wd", "bd"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "kws", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12, 30])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        [init("w1", 16, 12, 3), init("b1", 16), init("w2", 16, 2, 3), init("wd", 5, 16), init("bd", 5)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    mod = from_onnx(model, keep_params_in_input=False)
    x = rng.standard_normal((1, 12, 30)).astype("float32")
    ex = tvm_tensil.build(mod, target="tensil", arch=FP32)
    assert {o["op"] for o in ex.tensil_report.cpu_ops} <= {"relax.expand_dims"}, ex.tensil_report.cpu_ops
    ref, got = _outputs(tvm.compile(mod, target="llvm"), x)[0], _outputs(ex, x)[0]
    assert np.max(np.abs(got - ref)) < 0.01 * float(np.ptp(ref))


def test_a_trained_temporal_network_keeps_its_answers_with_calibration():
    """Trained on the digits as sequences of 16 columns (tests/trained_nets.py), at FP16BP8
    calibrated: top-1 within 0.5 point of float, no saturation, logits within 1% of their range of
    TVM's CPU build (measured 0.25% on pynqz1); on the CPU only the input's layout change."""
    batch = 16
    net, data = trained_nets.trained("temporal"), trained_nets.digits()
    n = len(data.x_test) // batch * batch
    x, y = data.x_test[:n].reshape(n, 16, 16), data.y_test[:n]
    mod = trained_nets.relax_module(net, batch, (16, 16))
    ex = tvm_tensil.build(mod, target="tensil", arch="pynqz1", calibration=data.x_train[:256].reshape(-1, 16, 16))
    assert [o["op"] for o in ex.tensil_report.cpu_ops] == ["relax.expand_dims"]
    cpu_ex = tvm.compile(mod, target="llvm")
    cpu = np.concatenate([_outputs(cpu_ex, x[i : i + batch])[0] for i in range(0, n, batch)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", SaturationWarning)
        tcu = np.concatenate([_outputs(ex, x[i : i + batch])[0] for i in range(0, n, batch)])
    float_acc, tcu_acc = np.mean(cpu.argmax(1) == y), np.mean(tcu.argmax(1) == y)
    assert float_acc > 0.95
    assert tcu_acc >= float_acc - 0.005, (float_acc, tcu_acc)
    assert np.max(np.abs(tcu - cpu)) <= 0.01 * np.ptp(cpu)


class Recogniser(torch.nn.Module):
    """A text recogniser's neck: a 2-d backbone whose map is one row high, squeezed to a sequence."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, (4, 3), padding=(0, 1))

    def forward(self, x):
        return torch.relu(self.conv(x).squeeze(2)).permute(0, 2, 1) * 0.5


def test_a_height_one_map_of_a_two_dimensional_model_is_left_as_it_is():
    """Only what 1-d layers make gets a twin: a 2-d model's squeezed row (CRNN's) keeps its ops."""
    from tvm_tensil.byoc.lift_1d import lift_1d

    mod = from_exported_program(torch.export.export(Recogniser().eval(), (torch.zeros(1, 3, 4, 10),)),
                                keep_params_as_input=False)  # fmt: skip
    plain = relax.transform.DeadCodeElimination()(relax.transform.CanonicalizeBindings()(mod))
    assert tvm_ffi.structural_equal(lift_1d(mod), plain)


class RawAudio(nn.Module):
    """M5's shape (a keyword spotter on raw samples): a 1x80 conv of stride 16 over the waveform, then
    convs and max pools, an average pool over what is left, the classifier as torch's tutorial has it
    (a permute to (N, 1, C), then log-softmax)."""

    def __init__(self, channels: int = 16, classes: int = 12):
        super().__init__()

        def block(cin, cout, k, stride=1):
            return [nn.Conv1d(cin, cout, k, stride), nn.BatchNorm1d(cout), nn.ReLU(), nn.MaxPool1d(4)]

        self.body = nn.Sequential(*block(1, channels, 80, 16), *block(channels, channels, 3),
                                  *block(channels, 2 * channels, 3))  # fmt: skip
        self.fc = nn.Linear(2 * channels, classes)

    def forward(self, x):
        x = self.body(x)
        x = F.avg_pool1d(x, x.shape[-1]).permute(0, 2, 1)
        return F.log_softmax(self.fc(x), dim=2)


def test_a_raw_audio_network_is_one_partition():
    """4000 samples in: every conv, pool and the classifier on the TCU in one partition (the pooled
    (N, C, 1) map squeezed and flattened is the free (N, C, 1, 1) -> (N, C)); the CPU keeps the
    input's layout change and the log-softmax. Within 1% at FP32BP16."""
    model, x = _randomised(RawAudio()), np.random.default_rng(3).standard_normal((1, 1, 4000)).astype("float32")
    mod = from_exported_program(torch.export.export(model, (torch.from_numpy(x),)), keep_params_as_input=False)
    ex = tvm_tensil.build(mod, target="tensil", arch=FP32)
    assert [o["op"] for o in ex.tensil_report.cpu_ops] == ["relax.expand_dims", "relax.nn.log_softmax"]
    assert len(ex.tensil_report.partitions) == 1
    ref, got = _outputs(tvm.compile(mod, target="llvm"), x)[0], _outputs(ex, x)[0]
    assert np.max(np.abs(got - ref)) < 0.01 * float(np.ptp(ref))
