"""The PyTorch path: torch.export -> TVM's Relax frontend -> tvm_tensil.build."""

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_tensil

torch = pytest.importorskip("torch")
from tvm.relax.frontend.torch import from_exported_program  # noqa: E402


class SmallCNN(torch.nn.Module):
    """The zoo's small CNN, in PyTorch: (conv-bn-relu-maxpool) x 2, dense (the logits), softmax."""

    def __init__(self, softmax: bool = True):
        super().__init__()
        self.softmax = softmax
        self.c1, self.b1 = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
        self.c2, self.b2 = torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16)
        self.fc = torch.nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.b1(self.c1(x))), 2)
        x = torch.nn.functional.max_pool2d(torch.relu(self.b2(self.c2(x))), 2)
        logits = self.fc(torch.flatten(x, 1))
        return torch.softmax(logits, 1) if self.softmax else logits


def _small_cnn(softmax: bool):
    torch.manual_seed(0)
    model = SmallCNN(softmax).eval()
    with torch.no_grad():  # non-trivial batch-norm statistics, so that folding matters
        for bn in (model.b1, model.b2):
            bn.running_mean.uniform_(-0.2, 0.2)
            bn.running_var.uniform_(0.5, 1.5)
    return model


def test_small_cnn_through_torch_export():
    """The softmax stays on the CPU, everything else runs on the TCU; the logits, checked against
    PyTorch itself, are within 1% of their range at FP32BP16 (no logic error) and, at FP16BP8,
    within 8 standard deviations of the dense layer's modelled rounding noise (docs/compiler.md:
    K products and K weights each rounded to +-ulp/2, variance (K + sum x^2) ulp^2 / 12; the
    logits of this randomly initialised net span only about 1, so a % of the range says little)."""
    from tvm_tensil.numbers import FP16BP8, FP32BP16

    torch.manual_seed(1)
    x = torch.randn(1, 3, 16, 16)
    model = _small_cnn(softmax=True)
    ex = tvm_tensil.build(
        from_exported_program(torch.export.export(model, (x,)), keep_params_as_input=False),
        target="tensil",
        arch="pynqz1",
    )
    assert [o["op"] for o in ex.tensil_report.cpu_ops] == ["relax.nn.softmax"]
    probs = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy()))[0].numpy()
    assert np.isclose(probs.sum(), 1.0, atol=1e-5)

    model = _small_cnn(softmax=False)
    with torch.no_grad():
        ref = model(x).numpy()
        features = torch.flatten(
            torch.nn.functional.max_pool2d(
                torch.relu(model.b2(model.c2(torch.nn.functional.max_pool2d(torch.relu(model.b1(model.c1(x))), 2)))), 2
            ),
            1,
        ).numpy()
    ulp = 2.0**-FP16BP8.binary_point
    sigma = ulp * np.sqrt((features.size + float(np.sum(features**2))) / 12)
    mod = from_exported_program(torch.export.export(model, (x,)), keep_params_as_input=False)
    fp32 = tvm_tensil.load_arch("pynqz1").replace(data_type=FP32BP16, name="pynqz1_fp32bp16")
    for arch, bound in ((fp32, 0.01 * float(np.ptp(ref))), ("pynqz1", 8 * sigma)):
        ex = tvm_tensil.build(mod, target="tensil", arch=arch)
        assert ex.tensil_report.cpu_ops == []
        logits = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy()))[0].numpy()
        error = float(np.max(np.abs(logits - ref)))
        assert error < bound, (arch, error, bound)


def test_trained_digits_cnn_keeps_its_accuracy():
    """A CNN trained here on scikit-learn's digits (8x8 images) loses at most one point of
    top-1 accuracy on its test split on the TCU (FP16BP8)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    torch.manual_seed(0)
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.3, random_state=0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.BatchNorm2d(32),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 10),
    )
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    for _ in range(30):
        for i in range(0, len(xt), 64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(xt[i : i + 64]), yt[i : i + 64]).backward()
            opt.step()
    net.eval()
    sample = torch.from_numpy(x_test)
    float_pred = net(sample).argmax(1).numpy()
    mod = from_exported_program(torch.export.export(net, (sample,)), keep_params_as_input=False)
    ex = tvm_tensil.build(mod, target="tensil", arch="pynqz1")
    assert ex.tensil_report.cpu_ops == []  # everything on the TCU
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x_test))
    tcu_pred = out[0].numpy().argmax(1)
    float_acc, tcu_acc = np.mean(float_pred == y_test), np.mean(tcu_pred == y_test)
    assert float_acc > 0.9
    assert tcu_acc >= float_acc - 0.01, (float_acc, tcu_acc)


def test_torch_onnx_export_to_tensil():
    """The other PyTorch route: torch.onnx.export (its default exporter needs onnxscript) -> ONNX ->
    from_onnx -> the TCU; logits within 1% of their range of PyTorch's at FP32BP16."""
    from tvm.relax.frontend.onnx import from_onnx

    fp32 = tvm_tensil.load_arch("pynqz1").replace(data_type="FP32BP16", name="pynqz1_fp32")
    torch.manual_seed(2)
    model = _small_cnn(softmax=False)
    x = torch.randn(1, 3, 16, 16)
    onnx_model = torch.onnx.export(model, (x,), dynamo=True, verbose=False).model_proto
    ex = tvm_tensil.build(from_onnx(onnx_model, keep_params_in_input=False), target="tensil", arch=fp32)
    assert ex.tensil_report.cpu_ops == []
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy())).numpy()
    with torch.no_grad():
        want = model(x).numpy()
    assert np.abs(got - want).max() < 0.01 * np.ptp(want)


def test_hard_swish_through_torch_export_is_one_activation():
    """torch.export writes HardSwish as (x * clip(clip(x + 3, 0, inf), -inf, 6)) / 6 (ONNX's import:
    x * (clip(x + 3, 0, 6) / 6)); either way it becomes one activation fused into the conv, and the
    result, checked against TVM's CPU build, is within (|x| + 2) * 2^-9 plus the conv's own rounding
    (inputs and weights on the 1/16 grid: the conv is exact, so only the activation's bound is left)."""
    torch.manual_seed(2)
    conv = torch.nn.Conv2d(4, 8, 3, padding=1)
    with torch.no_grad():
        conv.weight.copy_(torch.round(conv.weight * 16) / 16)
        conv.bias.copy_(torch.round(conv.bias * 16) / 16)
    model = torch.nn.Sequential(conv, torch.nn.Hardswish()).eval()
    x = torch.round(torch.randn(1, 4, 8, 8) * 16) / 16
    mod = from_exported_program(torch.export.export(model, (x,)), keep_params_as_input=False)
    ex = tvm_tensil.build(mod, target="tensil", arch="pynqz1")
    (part,) = ex.tensil_report.partitions.values()
    assert [(n["op"], n["epilogue"]) for n in part["nodes"]] == [("conv2d", ["hard_sigmoid"])]
    args = [tvm.runtime.tensor(x.numpy())]
    tcu = relax.VirtualMachine(ex, tvm.cpu())["main"](*args)[0].numpy()
    cpu = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](*args)[0].numpy()
    with torch.no_grad():
        pre = conv(x).numpy()
    assert np.all(np.abs(tcu - cpu) <= (np.abs(pre) + 2) * 2.0**-9)


class PermutedDense(torch.nn.Module):
    """MTCNN's R-Net tail: a conv, its map permuted NCHW -> NWHC and flattened, a dense layer."""

    def __init__(self):
        super().__init__()
        self.conv, self.fc = torch.nn.Conv2d(3, 8, 3), torch.nn.Linear(8 * 4 * 3, 5)

    def forward(self, x):
        x = torch.relu(self.conv(x)).permute(0, 3, 2, 1).contiguous()
        return self.fc(x.view(x.shape[0], -1))


def _at_fp32bp16(model, x, atol=0.0):
    """``model`` exported and built for pynqz1's array at FP32BP16 (logic, not rounding); returns the
    report and the TCU's and TVM's CPU build's outputs, asserting they agree within 0.1% of the range
    (the rounding of 16 fractional bits) plus ``atol`` (a smooth function's own error)."""
    from dataclasses import replace

    from tvm_tensil.arch import PRESETS
    from tvm_tensil.numbers import FP32BP16

    mod = from_exported_program(torch.export.export(model, (x,)), keep_params_as_input=False)
    ex = tvm_tensil.build(mod, target="tensil", arch=replace(PRESETS["pynqz1"], data_type=FP32BP16))
    args = [tvm.runtime.tensor(x.numpy())]
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](*args)[0].numpy()
    want = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](*args)[0].numpy()
    assert np.abs(got - want).max() <= 1e-3 * np.ptp(want) + atol
    return ex.tensil_report


def _nodes(report) -> list:
    (part,) = report.partitions.values()
    return [(n["op"], n["epilogue"]) for n in part["nodes"]]


class MishSoftplus(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 1)

    def forward(self, x):
        return torch.nn.functional.softplus(self.c2(torch.nn.functional.mish(self.c1(x))))


def test_mish_and_softplus_from_torch_are_activations_of_their_convs():
    """torch.export writes softplus as where(x > 20, x, log(1 + exp(x))) and Mish as x times the
    tanh of that: each one smooth function on the conv that makes x, nothing on the CPU."""
    from tvm_tensil.compiler.smooth import SMOOTH

    torch.manual_seed(3)
    report = _at_fp32bp16(MishSoftplus().eval(), torch.randn(1, 4, 6, 6), atol=4 * SMOOTH["mish"].bound)
    assert report.cpu_ops == [] and _nodes(report) == [("conv2d", ["mish"]), ("conv2d", ["softplus"])]


def test_a_permute_before_a_dense_layer_folds_into_its_weights():
    """The permute never reaches the CPU: the dense layer reads the map as it is stored, its weight
    rows reordered; exact at FP32BP16 (the same products), one partition."""
    torch.manual_seed(2)
    report = _at_fp32bp16(PermutedDense().eval(), torch.randn(1, 3, 6, 5))
    assert report.cpu_ops == [] and len(report.partitions) == 1


@pytest.mark.parametrize("act", [torch.nn.ELU(0.7), torch.nn.SELU()], ids=["elu", "selu"])
def test_elu_and_selu_from_torch_run_on_the_tcu(act):
    """TVM's importers write ELU as ``relu(x) - alpha * relu(1 - exp(x))`` (SELU scaled): the
    ``1 - exp(x)`` is an affine of the exp (a depthwise conv of -1 and bias 1), so nothing stays on the
    CPU (it cut the partition in two)."""
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), act, torch.nn.Conv2d(8, 4, 1)).eval()
    report = _at_fp32bp16(model, torch.randn(1, 3, 8, 8))
    assert report.cpu_ops == [] and len(report.partitions) == 1
    assert "exp" in [op for op, _ in _nodes(report)]


def _channel_shuffle(x, groups: int):
    n, c, h, w = x.shape
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).contiguous().view(n, c, h, w)


class ShuffleUnit(torch.nn.Module):
    """ShuffleNet v2's unit: half the channels through a branch, concatenated, shuffled."""

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups
        self.stem, self.branch, self.head = (torch.nn.Conv2d(*a) for a in ((3, 24, 3), (12, 12, 1), (24, 8, 1)))

    def forward(self, x):
        a, b = torch.relu(self.stem(x)).chunk(2, 1)
        y = _channel_shuffle(torch.cat([a, torch.relu(self.branch(b))], 1), self.groups)
        return self.head(y), y


@pytest.mark.parametrize("groups", [2, 3])
def test_a_channel_shuffle_is_a_conv_that_picks_channels(groups):
    """torch's view-transpose-view of the channel axis (one op per shuffle on the CPU, a partition
    cut each time) is a 1x1 conv with weights of 1: one partition; the shuffled map is exact."""
    from tvm_tensil.arch import PRESETS

    torch.manual_seed(4)
    model, x = ShuffleUnit(groups).eval(), torch.randn(1, 3, 8, 8)
    report = _at_fp32bp16(model, x)
    assert report.cpu_ops == [] and len(report.partitions) == 1
    assert [op for op, _ in _nodes(report)].count("conv2d") == 4  # stem, branch, the shuffle, head
    # At the boards' data type: the shuffle moves values, rounding none (grid inputs, 1x1 pick).
    grid = np.round(np.random.default_rng(4).uniform(-4, 4, (1, 24, 5, 5)) * 256) / 256
    shuffle = from_exported_program(
        torch.export.export(_Shuffle(groups), (torch.zeros(1, 24, 5, 5),)), keep_params_as_input=False
    )
    ex = tvm_tensil.build(shuffle, target="tensil", arch=PRESETS["pynqz1"])
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(grid.astype(np.float32)))[0].numpy()
    np.testing.assert_array_equal(got, _channel_shuffle(torch.from_numpy(grid.astype(np.float32)), groups).numpy())
    assert ex.tensil_report.cpu_ops == []


class _Shuffle(torch.nn.Module):
    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, x):
        return _channel_shuffle(x, self.groups)


class _Rearrange(torch.nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, x):
        return self.f(x)


class SuperResolution(torch.nn.Module):
    """ESPCN's shape: convs, then a pixel shuffle to twice the size, another conv, a pixel unshuffle."""

    def __init__(self, r: int):
        super().__init__()
        self.r = r
        self.c1, self.c2, self.c3 = (
            torch.nn.Conv2d(*a, padding=1) for a in ((1, 16, 3), (16, 4 * r * r, 3), (4, 8, 3))
        )

    def forward(self, x):
        y = torch.nn.functional.pixel_shuffle(self.c2(torch.tanh(self.c1(x))), self.r)
        return torch.nn.functional.pixel_unshuffle(self.c3(y), self.r)


@pytest.mark.parametrize("r", [2, 3])
def test_a_pixel_shuffle_and_its_inverse_are_convs_of_ones(r):
    """torch's pixel shuffle (a reshape, permute, reshape moving channels into pixels) is a transposed
    conv whose kernel is its stride, its inverse a conv: one partition, nothing on the CPU; each moves
    values without rounding (grid inputs, FP16BP8: bit for bit)."""
    from tvm_tensil.arch import PRESETS

    torch.manual_seed(5)
    report = _at_fp32bp16(SuperResolution(r).eval(), torch.randn(1, 1, 6, 6))
    assert report.cpu_ops == [] and len(report.partitions) == 1
    assert [op for op, _ in _nodes(report)] == ["conv2d", "conv2d", "conv_transpose", "conv2d", "conv2d"]
    grid = (np.round(np.random.default_rng(5).uniform(-4, 4, (1, 4 * r * r, 5, 5)) * 256) / 256).astype(np.float32)
    for f, x in ((lambda t: torch.nn.functional.pixel_shuffle(t, r), grid),
                 (lambda t: torch.nn.functional.pixel_unshuffle(t, r), grid.reshape(1, 4, 5 * r, 5 * r))):  # fmt: skip
        mod = from_exported_program(
            torch.export.export(_Rearrange(f), (torch.from_numpy(x),)), keep_params_as_input=False
        )
        ex = tvm_tensil.build(mod, target="tensil", arch=PRESETS["pynqz1"])
        assert ex.tensil_report.cpu_ops == []
        got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x))[0].numpy()
        np.testing.assert_array_equal(got, f(torch.from_numpy(x)).numpy())


_GATHERS = {
    "reflect": lambda t: torch.nn.functional.pad(t, (1, 2, 2, 1), mode="reflect"),
    "replicate": lambda t: torch.nn.functional.pad(t, (3, 0, 1, 2), mode="replicate"),
    "ReflectionPad2d": torch.nn.ReflectionPad2d(2),
    "crop": lambda t: t[:, :, 1:-1:2, 2:],
    "flip": lambda t: t.flip(3),
}


@pytest.mark.parametrize("name", list(_GATHERS))
def test_pads_crops_and_flips_from_torch_are_gathers_on_the_tcu(name):
    """torch.export writes a reflect or replicate pad as ``take`` of indices computed from ``arange``
    (folded in numpy: constant indices), a crop as strided slices, a flip as ``flip``: each copies
    rows of the map, bit for bit on grid values at FP16BP8, nothing on the CPU."""
    from tvm_tensil.arch import PRESETS

    x = (np.round(np.random.default_rng(6).uniform(-4, 4, (1, 10, 6, 7)) * 256) / 256).astype(np.float32)
    model = _Rearrange(_GATHERS[name])
    mod = from_exported_program(torch.export.export(model, (torch.from_numpy(x),)), keep_params_as_input=False)
    ex = tvm_tensil.build(mod, target="tensil", arch=PRESETS["pynqz1"])
    assert ex.tensil_report.cpu_ops == []
    assert {op for op, _ in _nodes(ex.tensil_report)} == {"gather"}
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x))[0].numpy()
    np.testing.assert_array_equal(got, model(torch.from_numpy(x)).numpy())


class PReluNet(torch.nn.Module):
    """MTCNN's pattern: conv, PReLU (one slope per channel), conv."""

    def __init__(self, slopes=(-0.5, 0.9)):
        super().__init__()
        self.c1, self.act, self.c2 = torch.nn.Conv2d(3, 12, 3), torch.nn.PReLU(12), torch.nn.Conv2d(12, 4, 1)
        with torch.no_grad():
            self.act.weight.uniform_(*slopes)

    def forward(self, x):
        return self.c2(self.act(self.c1(x)))


@pytest.mark.parametrize("slopes", [(-0.5, 0.9), (-0.5, 1.5)])
def test_prelu_is_one_epilogue_not_a_second_conv(slopes):
    """torch.export writes PReLU as where(x > 0, x, alpha * x); the affine folding used to fold
    alpha * x into a copy of the conv (the TCU ran it twice, the where on the CPU between). Now one
    partition, the conv's epilogue, as many convs as the model has: slopes at most 1 (negative too:
    max(x, alpha x)) and on both sides of 1 (MTCNN's P-Net: x + (alpha - 1) min(x, 0))."""
    torch.manual_seed(3)
    report = _at_fp32bp16(PReluNet(slopes).eval(), torch.randn(1, 3, 10, 10))
    assert report.cpu_ops == [] and _nodes(report) == [("conv2d", ["prelu"]), ("conv2d", [])]


class PNet(torch.nn.Module):
    """MTCNN's first stage: three convs with PReLUs (a max pool between), two heads."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 10, 3), torch.nn.PReLU(10), torch.nn.MaxPool2d(2, 2, ceil_mode=True),
            torch.nn.Conv2d(10, 16, 3), torch.nn.PReLU(16), torch.nn.Conv2d(16, 32, 3), torch.nn.PReLU(32),
        )  # fmt: skip
        self.face, self.box = torch.nn.Conv2d(32, 2, 1), torch.nn.Conv2d(32, 4, 1)
        with torch.no_grad():
            for m in self.body:
                if isinstance(m, torch.nn.PReLU):
                    m.weight.uniform_(-0.5, 1.5)

    def forward(self, x):
        y = self.body(x)
        return torch.sigmoid(self.face(y)), self.box(y)


def test_a_prelu_net_multiplies_no_more_than_the_model():
    """The array runs the model's products and no more: MatMul vectors of the whole build within the
    convs' own (pixel x tap pairs per block pair) and one bias-starting vector per output vector."""
    from dataclasses import replace

    from helpers import matmul_vectors, model_matmul_vectors
    from tvm_tensil.arch import PRESETS
    from tvm_tensil.compiler.smooth import SMOOTH
    from tvm_tensil.numbers import FP32BP16

    torch.manual_seed(6)
    x = torch.randn(1, 3, 24, 24)
    mod = from_exported_program(torch.export.export(PNet().eval(), (x,)), keep_params_as_input=False)
    arch = replace(PRESETS["pynqz1"], data_type=FP32BP16)
    ex = tvm_tensil.build(mod, target="tensil", arch=arch)
    report = ex.tensil_report
    assert report.cpu_ops == [] and len(report.partitions) == 1
    needed, outputs = model_matmul_vectors(mod, arch.array_size)
    assert needed <= matmul_vectors(report) <= needed + outputs
    args = [tvm.runtime.tensor(x.numpy())]
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](*args)
    want = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](*args)
    for g, w in zip(got, want):
        assert np.abs(g.numpy() - w.numpy()).max() <= 1e-3 * np.ptp(w.numpy()) + SMOOTH["sigmoid"].bound


class MaxMinPRelu(torch.nn.Module):
    """PReLU written out: relu(x) + alpha * min(x, 0), per channel."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.alpha = torch.nn.Parameter(torch.linspace(-0.5, 1.5, 8).reshape(1, 8, 1, 1), requires_grad=False)

    def forward(self, x):
        y = self.conv(x)
        return torch.clamp(y, min=0) + self.alpha * torch.clamp(y, max=0)


def test_prelu_written_as_max_plus_scaled_min_is_one_epilogue():
    torch.manual_seed(5)
    report = _at_fp32bp16(MaxMinPRelu().eval(), torch.randn(1, 3, 8, 8))
    assert report.cpu_ops == [] and _nodes(report) == [("conv2d", ["prelu"])]


class SegmentationHead(torch.nn.Module):
    """A DBNet-style head: conv-bn-relu, a stride-2 ConvTranspose with batch norm and ReLU, another
    ConvTranspose, a sigmoid; and a U-Net's 4x4 stride-2 upsampling."""

    def __init__(self):
        super().__init__()
        self.c1, self.b1 = torch.nn.Conv2d(8, 12, 3, padding=1, bias=False), torch.nn.BatchNorm2d(12)
        self.t1, self.b2 = torch.nn.ConvTranspose2d(12, 12, 2, 2), torch.nn.BatchNorm2d(12)
        self.t2 = torch.nn.ConvTranspose2d(12, 6, 4, 2, padding=1)
        self.t3 = torch.nn.ConvTranspose2d(6, 1, 3, 2, padding=1, output_padding=1)
        with torch.no_grad():
            for bn in (self.b1, self.b2):
                bn.running_mean.uniform_(-0.2, 0.2)
                bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        x = torch.relu(self.b1(self.c1(x)))
        x = torch.relu(self.b2(self.t1(x)))
        return torch.sigmoid(self.t3(torch.relu(self.t2(x))))


def test_transposed_convs_run_on_the_tcu_with_their_batch_norms_folded():
    """Every ConvTranspose (with its batch norm folded into its weights and its ReLU fused) and the
    sigmoid (within its documented error) in the one partition, nothing on the CPU."""
    from tvm_tensil.compiler.smooth import SMOOTH

    torch.manual_seed(6)
    report = _at_fp32bp16(SegmentationHead().eval(), torch.randn(1, 8, 5, 6), atol=SMOOTH["sigmoid"].bound)
    assert report.cpu_ops == []
    assert _nodes(report) == [
        ("conv2d", ["relu"]), ("conv_transpose", ["relu"]), ("conv_transpose", ["relu"]),
        ("conv_transpose", ["sigmoid"]),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "conv, reason",
    [
        (torch.nn.ConvTranspose2d(4, 4, 1, 2), "kernel 1x1 smaller than its stride"),
        (torch.nn.ConvTranspose2d(4, 4, 3, 2, dilation=2), "dilated transposed convolution"),
        (torch.nn.ConvTranspose2d(4, 4, 3, 2, groups=2), "grouped transposed convolution (groups = 2)"),
    ],
)
def test_a_transposed_conv_the_tcu_cannot_run_stays_on_the_cpu_with_the_reason(conv, reason):
    x = torch.randn(1, 4, 5, 5)
    mod = from_exported_program(torch.export.export(conv.eval(), (x,)), keep_params_as_input=False)
    ex = tvm_tensil.build(mod, target="tensil", arch="pynqz1")
    (op,) = [o for o in ex.tensil_report.cpu_ops if o["op"] == "relax.nn.conv2d_transpose"]
    assert reason in op["reason"]
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy()))[0].numpy()
    # The bias add after it runs on the TCU at FP16BP8: within a unit of its 8 fractional bits.
    np.testing.assert_allclose(got, conv(x).detach().numpy(), rtol=0, atol=2**-8)


class MBConv(torch.nn.Module):
    """EfficientNet's block: 1x1 expansion, depthwise 3x3 (each with batch norm and SiLU),
    squeeze-and-excitation with a sigmoid gate, 1x1 projection and the residual; then a head with
    tanh and GELU."""

    def __init__(self, c=8, e=24):
        super().__init__()
        bn_silu = lambda k: (torch.nn.BatchNorm2d(k), torch.nn.SiLU())  # noqa: E731
        self.expand = torch.nn.Sequential(torch.nn.Conv2d(c, e, 1, bias=False), *bn_silu(e))
        self.dw = torch.nn.Sequential(torch.nn.Conv2d(e, e, 3, padding=1, groups=e, bias=False), *bn_silu(e))
        self.se1, self.se2 = torch.nn.Conv2d(e, 6, 1), torch.nn.Conv2d(6, e, 1)
        self.project = torch.nn.Sequential(torch.nn.Conv2d(e, c, 1, bias=False), torch.nn.BatchNorm2d(c))
        self.head = torch.nn.Sequential(
            torch.nn.Conv2d(c, 4, 1), torch.nn.Tanh(), torch.nn.Conv2d(4, 3, 1), torch.nn.GELU()
        )

    def forward(self, x):
        y = self.dw(self.expand(x))
        gate = torch.sigmoid(self.se2(torch.nn.functional.silu(self.se1(y.mean((2, 3), keepdim=True)))))
        return self.head(x + self.project(y * gate))


def test_sigmoid_silu_tanh_gelu_run_on_the_tcu_in_one_partition():
    """torch.export writes SiLU as x * sigmoid(x): one activation, fused into the conv before it;
    the gate's sigmoid fused into its conv, tanh and GELU too; nothing on the CPU."""
    torch.manual_seed(7)
    report = _at_fp32bp16(MBConv().eval(), torch.randn(1, 8, 8, 8), atol=3e-3)  # four functions in a row
    assert report.cpu_ops == [] and len(report.partitions) == 1
    assert _nodes(report) == [
        ("conv2d", ["silu"]), ("conv2d", ["silu"]), ("global_avg_pool", []), ("conv2d", ["silu"]),
        ("conv2d", ["sigmoid"]), ("mul", []), ("conv2d", []), ("conv2d", ["tanh"]), ("conv2d", ["gelu"]),
    ]  # fmt: skip


class SequenceMLP(torch.nn.Module):
    """A transformer's feed-forward block on a (B, S, K) sequence: Linear, GELU, Linear, the
    residual add, then HardSwish, a PReLU and a projection."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.out = torch.nn.Linear(24, 40), torch.nn.Linear(40, 24), torch.nn.Linear(24, 12)
        self.act = torch.nn.PReLU()

    def forward(self, x):
        y = self.fc2(torch.nn.functional.gelu(self.fc1(x))) + x
        return self.out(self.act(torch.nn.functional.hardswish(y)))


def test_dense_layers_on_a_sequence_are_one_partition():
    """torch.export writes Linear on (B, S, K) as reshape to (B * S, K), matmul, reshape back: the
    dense layers run on the rows themselves (no reshape splits them, each activation fused into its
    layer), and the outputs match TVM's CPU build at FP32BP16 (GELU's own error added)."""
    torch.manual_seed(0)
    report = _at_fp32bp16(SequenceMLP().eval(), torch.randn(2, 10, 24), atol=0.02)
    assert report.cpu_ops == []
    assert _nodes(report) == [("dense", ["gelu"]), ("dense", ["hard_sigmoid"]), ("dense", ["prelu"]), ("dense", [])]
