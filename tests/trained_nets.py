"""Small networks trained here, in seconds, on scikit-learn's digits (real 8x8 images, upscaled to
16x16): random weights prove the compiler's logic, trained ones its numbers.

- ``resnet``: stem conv, two residual blocks (batch norm, residual adds), a stride-2 conv, GAP, dense;
- ``mobilenet``: depthwise-separable blocks (depthwise 3x3 + pointwise, ReLU6), GAP, dense;
- ``efficientnet``: inverted residual blocks with SiLU and squeeze-and-excitation (sigmoid gates);
- ``mobilenetv3``: the same blocks as MobileNetV3 has them (HardSwish, HardSigmoid gates);
- ``prelu``: MTCNN's pattern, convs with a learned slope per channel and a max pool in ceil mode;
- ``unet``: an encoder-decoder with ConvTranspose upsampling, a skip concat and a sigmoid output,
  trained to mark each digit's ink (the pixels above 0.4): a segmentation map, not logits;
- ``detector``: a detection head's outputs on a 4x4 grid, YOLO-style: each cell's share of ink (a
  sigmoid) and the digit's box size in cells (the exp of the head's values);
- ``csp``: darknet's cross-stage-partial block (a channel half sliced off, two convs, nested concats),
  a 1x1 mix, a stride-2 conv whose residual shortcut is a 1x1 max pool with stride 2, and a head that
  means over H and W without keepdims;
- ``temporal``: keyword spotting's shape, each image a sequence of 16 columns of 16 features: 1-d
  convs (one depthwise) with batch norms, a max pool, a strided conv, an adaptive average pool and
  the classifier (it takes (N, 16, 16); ``relax_module(net, batch, (16, 16))``);
- ``elu``: three convs with batch norms and ELUs (exp on the negative side), GAP, dense;
- ``norms``: style-transfer and detection-head normalizations: convs with instance norms (affine) and
  group norms (4 and 8 groups), ReLUs, GAP, dense;
- ``wide_range``: the MobileNet-style net made awkward the way trained detectors are: a batch norm
  whose scale leaves activations in the thousands, and the next one folding into weights of ~1e-5
  (its running variance ~1e7). The float function is the same network's, up to rounding.

Everything is seeded: the float accuracy is reproducible. ``trained(kind)`` returns the module in
eval mode with the data split; ``relax_module(net, batch)`` imports it through torch.export.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

# The networks that classify the digits (their logits compared with float's).
CLASSIFIERS = ("resnet", "mobilenet", "mobilenetv3", "efficientnet", "prelu", "csp", "wide_range", "elu", "norms")


@dataclass
class Digits:
    x_train: np.ndarray  # (N, 1, 16, 16) float32 in [0, 1]
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


@functools.cache
def digits() -> Digits:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).reshape(-1, 1, 8, 8).astype(np.float32)
    x = np.kron(x, np.ones((1, 1, 2, 2), np.float32))  # 16x16
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.3, random_state=0)
    return Digits(x_train, y_train, x_test, y_test)


def _bn_relu(c: int, six: bool = False) -> list[nn.Module]:
    return [nn.BatchNorm2d(c), nn.ReLU6() if six else nn.ReLU()]


class _Residual(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(c, c, 3, padding=1, bias=False), *_bn_relu(c), nn.Conv2d(c, c, 3, padding=1, bias=False),
            nn.BatchNorm2d(c),
        )  # fmt: skip

    def forward(self, x):
        return torch.relu(x + self.body(x))


class _Head(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.fc = nn.Linear(c, 10)

    def forward(self, x):
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def _resnet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1, bias=False), *_bn_relu(16), _Residual(16),
        nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), *_bn_relu(32), _Residual(32), _Head(32),
    )  # fmt: skip


def _separable(cin: int, cout: int, stride: int) -> list[nn.Module]:
    return [
        nn.Conv2d(cin, cin, 3, stride=stride, padding=1, groups=cin, bias=False), *_bn_relu(cin, six=True),
        nn.Conv2d(cin, cout, 1, bias=False), *_bn_relu(cout, six=True),
    ]  # fmt: skip


def _mobilenet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1, bias=False), *_bn_relu(16, six=True), *_separable(16, 24, 1),
        *_separable(24, 32, 2), *_separable(32, 48, 1), _Head(48),
    )  # fmt: skip


def _plain() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1, bias=False), *_bn_relu(16),
        nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), *_bn_relu(32),
        nn.Conv2d(32, 32, 3, padding=1, bias=False), *_bn_relu(32), _Head(32),
    )  # fmt: skip


def _elu() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ELU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ELU(),
        nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ELU(), _Head(32),
    )  # fmt: skip


def _norms() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.InstanceNorm2d(16, affine=True), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.GroupNorm(4, 32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.GroupNorm(8, 32), nn.ReLU(), _Head(32),
    )  # fmt: skip


def _prelu_net() -> nn.Module:
    """MTCNN's pattern (convs with a learned slope per channel, PReLU; a max pool in ceil mode), with
    batch norms (without them it learns too slowly for the suite)."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.PReLU(16), nn.MaxPool2d(3, 2, ceil_mode=True),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.PReLU(32),
        nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.PReLU(32), _Head(32),
    )  # fmt: skip


class _MBConv(nn.Module):
    """EfficientNet's block (MobileNetV3's with HardSwish, a ReLU squeeze and a HardSigmoid gate):
    1x1 expansion, depthwise 3x3, squeeze-and-excitation, 1x1 projection."""

    def __init__(self, cin: int, cout: int, expand: int, stride: int, act=nn.SiLU, squeeze=nn.SiLU, gate=nn.Sigmoid):
        super().__init__()
        e, mid = cin * expand, max(4, cin // 4)
        self.body = nn.Sequential(
            nn.Conv2d(cin, e, 1, bias=False), nn.BatchNorm2d(e), act(),
            nn.Conv2d(e, e, 3, stride=stride, padding=1, groups=e, bias=False), nn.BatchNorm2d(e), act(),
        )  # fmt: skip
        self.se = nn.Sequential(nn.Conv2d(e, mid, 1), squeeze(), nn.Conv2d(mid, e, 1), gate())
        self.project = nn.Sequential(nn.Conv2d(e, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = cin == cout and stride == 1

    def forward(self, x):
        y = self.body(x)
        y = self.project(y * self.se(y.mean((2, 3), keepdim=True)))
        return x + y if self.residual else y


def _mobilenetv3() -> nn.Module:
    v3 = dict(act=nn.Hardswish, squeeze=nn.ReLU, gate=nn.Hardsigmoid)
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.Hardswish(), _MBConv(16, 16, 2, 1, **v3),
        _MBConv(16, 24, 3, 2, **v3), nn.Conv2d(24, 48, 1, bias=False), nn.BatchNorm2d(48), nn.Hardswish(), _Head(48),
    )  # fmt: skip


def _efficientnet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.SiLU(), _MBConv(16, 16, 2, 1),
        _MBConv(16, 24, 3, 2), nn.Conv2d(24, 48, 1, bias=False), nn.BatchNorm2d(48), nn.SiLU(), _Head(48),
    )  # fmt: skip


def _conv_bn_relu(cin: int, cout: int, k: int = 3) -> nn.Module:
    return nn.Sequential(nn.Conv2d(cin, cout, k, padding=k // 2, bias=False), *_bn_relu(cout))


class _CSP(nn.Module):
    """YOLOv4-tiny's route/route-groups block, then a stride-2 conv with a subsampled shortcut."""

    def __init__(self):
        super().__init__()
        self.stem, self.conv1, self.conv2 = _conv_bn_relu(1, 32), _conv_bn_relu(16, 16), _conv_bn_relu(16, 16)
        self.mix = _conv_bn_relu(64, 32, 1)
        self.down = nn.Sequential(nn.Conv2d(32, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32))
        self.shortcut = nn.MaxPool2d(1, 2)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        a = self.stem(x)
        c = self.conv1(a.chunk(2, 1)[1])
        m = self.mix(torch.cat([a, torch.cat([self.conv2(c), c], 1)], 1))
        y = torch.relu(self.down(m) + self.shortcut(m))
        return self.fc(y.mean((2, 3)))


class _UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1 = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1, bias=False), *_bn_relu(8))
        self.enc2 = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), *_bn_relu(16))
        self.bottom = nn.Sequential(nn.Conv2d(16, 16, 3, stride=2, padding=1, bias=False), *_bn_relu(16))
        self.up1 = nn.Sequential(nn.ConvTranspose2d(16, 16, 2, 2, bias=False), *_bn_relu(16))
        self.dec1 = nn.Sequential(nn.Conv2d(32, 8, 3, padding=1, bias=False), *_bn_relu(8))
        self.up2 = nn.Sequential(nn.ConvTranspose2d(8, 8, 4, 2, padding=1), nn.ReLU())
        self.out = nn.Conv2d(16, 1, 3, padding=1)

    def forward(self, x):
        a = self.enc1(x)
        b = self.enc2(a)
        y = self.dec1(torch.cat([self.up1(self.bottom(b)), b], 1))
        return torch.sigmoid(self.out(torch.cat([self.up2(y), a], 1)))


class _Temporal(nn.Module):
    def __init__(self):
        super().__init__()

        def conv(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> list[nn.Module]:
            return [nn.Conv1d(cin, cout, k, stride, k // 2, groups=groups), nn.BatchNorm1d(cout), nn.ReLU()]

        self.body = nn.Sequential(
            *conv(16, 32, 3), *conv(32, 32, 3, groups=32), *conv(32, 48, 1), nn.MaxPool1d(2),
            *conv(48, 48, 3, stride=2), nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(48, 10),
        )  # fmt: skip

    def forward(self, x):
        return self.body(x.flatten(1, 2) if x.dim() == 4 else x)  # (training: the images as (N, 1, 16, 16))


def ink(x: np.ndarray) -> np.ndarray:
    """The U-Net's target: each pixel of a digit with ink on it."""
    return (x > 0.4).astype(np.float32)


class _Detector(nn.Module):
    """A detection head's outputs, YOLO-style, on a 4x4 grid of cells: each cell's share of ink
    (a sigmoid) and the digit's box width and height in cells (exp of the head's values)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1, bias=False), *_bn_relu(8),
            nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), *_bn_relu(16),
            nn.Conv2d(16, 16, 3, stride=2, padding=1, bias=False), *_bn_relu(16), nn.Conv2d(16, 3, 1),
        )  # fmt: skip

    def forward(self, x):
        y = self.body(x)
        return torch.sigmoid(y[:, :1]), torch.exp(y[:, 1:])


def boxes(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The detector's targets: each 4x4 cell's share of ink, (N, 1, 4, 4); the ink's bounding box
    width and height in cells, (N, 2)."""
    marked = ink(x)[:, 0]
    share = marked.reshape(-1, 4, 4, 4, 4).mean(axis=(2, 4))[:, None]
    rows, cols = marked.any(axis=2), marked.any(axis=1)
    extent = lambda m: (m.shape[1] - m[:, ::-1].argmax(1) - m.argmax(1)) / 4.0  # noqa: E731
    return share.astype(np.float32), np.stack([extent(cols), extent(rows)], 1).astype(np.float32)


def _train_detector(net: nn.Module, data: Digits, epochs: int = 12, seed: int = 0) -> nn.Module:
    """Each cell's ink share (binary cross entropy) and the box size's log (squared error)."""
    share, size = (torch.from_numpy(v) for v in boxes(data.x_train))

    def loss(out, idx):
        p, wh = out
        target = torch.log(size[idx])[:, :, None, None].expand_as(wh)
        return nn.functional.binary_cross_entropy(p, share[idx]) + nn.functional.mse_loss(torch.log(wh), target)

    return _fit(net, data, loss, epochs, seed)


def _train(net: nn.Module, data: Digits, epochs: int = 12, seed: int = 0, segment: bool = False) -> nn.Module:
    """Classes (cross entropy), or with ``segment`` each pixel's ink (binary cross entropy)."""
    y = torch.from_numpy(ink(data.x_train)) if segment else torch.from_numpy(data.y_train).long()
    loss = nn.functional.binary_cross_entropy if segment else nn.functional.cross_entropy
    return _fit(net, data, lambda out, idx: loss(out, y[idx]), epochs, seed)


def _fit(net: nn.Module, data: Digits, loss, epochs: int, seed: int) -> nn.Module:
    """``loss(the net's output on a batch of the training split, the batch's indices)`` minimised by
    Adam over ``epochs``, from a seeded initialisation in a seeded order."""
    torch.manual_seed(seed)
    for m in net.modules():  # seeded initialisation
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()
    x = torch.from_numpy(data.x_train)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(seed)
    net.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=gen).split(64):
            opt.zero_grad()
            loss(net(x[idx]), idx).backward()
            opt.step()
    return net.eval()


def _widen_range(net: nn.Module, factor: float = 4096.0) -> nn.Module:
    """The same function with the first batch norm's output ``factor`` times larger (activations in
    the thousands) and the next batch norm undoing it (running variance times ``factor**2``): folded,
    the second conv's weights are ``factor`` times smaller."""
    bns = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    first, second = bns[0], bns[1]
    with torch.no_grad():
        first.weight *= factor
        first.bias *= factor
        second.running_mean *= factor
        second.running_var.mul_(factor**2).add_(second.eps * (factor**2 - 1))
    return net


@functools.cache
def trained(kind: str) -> nn.Module:
    """A trained network (eval mode): "resnet", "mobilenet", "mobilenetv3", "efficientnet", "prelu",
    "csp", "unet", "detector", "wide_range", "temporal", "elu" or "norms"."""
    torch.set_num_threads(1)
    data = digits()
    if kind == "resnet":
        return _train(_resnet(), data)
    if kind == "mobilenet":
        return _train(_mobilenet(), data)
    if kind == "efficientnet":
        return _train(_efficientnet(), data, epochs=20)
    if kind == "prelu":
        return _train(_prelu_net(), data, epochs=20)
    if kind == "mobilenetv3":
        return _train(_mobilenetv3(), data, epochs=20)
    if kind == "csp":
        return _train(_CSP(), data)
    if kind == "unet":
        return _train(_UNet(), data, epochs=6, segment=True)
    if kind == "detector":
        return _train_detector(_Detector(), data)
    if kind == "wide_range":
        return _widen_range(_train(_plain(), data))
    if kind == "temporal":
        return _train(_Temporal(), data)
    if kind == "elu":
        return _train(_elu(), data)
    if kind == "norms":
        return _train(_norms(), data, epochs=24)
    raise ValueError(kind)


def relax_module(net: nn.Module, batch: int, sample: tuple[int, ...] = (1, 16, 16)):
    from tvm.relax.frontend.torch import from_exported_program

    x = torch.zeros(batch, *sample)
    return from_exported_program(torch.export.export(net, (x,)), keep_params_as_input=False)


def float_logits(net: nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return net(torch.from_numpy(x)).numpy()
