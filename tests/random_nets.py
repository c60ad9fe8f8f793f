"""Random ONNX networks for differential testing against TVM's own CPU build.

A network is a list of *steps* drawn from a seed. Each step adapts to the tensor it receives
(channel counts, spatial size), so any sub-list of steps is again a valid network: that is how
a failure shrinks (``shrink`` drops steps while the failure persists).

Every tensor carries two numbers of a rounding-error model for fixed-point builds (see
docs/compiler.md, "Error bounds"): ``ms``, its mean square, and ``var``, the variance of its
accumulated rounding error in units of ``ulp**2``. Rounding errors are modelled as independent
and uniform (variance 1/12 ulp^2 each); a K-term dot product adds K such errors from its
products plus K from its weights' quantisation (scaled by the input's mean square), and passes
on its input's error scaled by the sum of its squared weights. ``net.bound(ulp)`` is 8 standard
deviations of the output's error under that model plus half a unit of final rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

STEP_KINDS = ("conv", "conv", "conv", "pool", "res", "concat", "sppf", "branch", "csp", "upsample", "se", "convt")
# A conv's activation: those of CNNs and of the networks users bring (MobileNetV3, EfficientNet,
# YOLOv5+, face detectors), as exporters write them.
ACTIVATIONS = ("relu", "relu", "leaky", "clip", "none", "hardswish", "silu", "prelu", "sigmoid", "tanh", "mish")


@dataclass
class T:
    """A tensor of the network being built."""

    name: str
    c: int
    h: int
    w: int
    ms: float  # mean square of its values
    var: float  # variance of its rounding error, in ulp^2


@dataclass
class Net:
    model: onnx.ModelProto
    input_shape: tuple[int, ...]
    steps: list
    out_vars: list[float] = field(default_factory=list)
    depth: int = 0  # the longest reduction (terms summed into one output)

    def bound(self, ulp: float) -> float:
        """8 standard deviations of the modelled rounding error of the worst output, plus one
        final rounding (half a unit)."""
        return ulp * (8 * math.sqrt(max(self.out_vars)) + 0.5)


def random_steps(seed: int) -> tuple[dict, list]:
    rng = np.random.default_rng(seed)
    top = {
        "batch": int(rng.choice([1, 1, 2])),
        "c": int(rng.integers(1, 13)),
        "hw": int(rng.choice([6, 8, 11, 16])),
        "head": str(rng.choice(["gap_gemm", "flatten_gemm", "none"])),
        "classes": int(rng.integers(2, 13)),
    }
    steps = []
    for i in range(int(rng.integers(2, 7))):
        kind = str(rng.choice(STEP_KINDS))
        steps.append((kind, int(rng.integers(1 << 30))))
    return top, steps


class _Builder:
    def __init__(self, top: dict):
        self.nodes, self.inits, self.count = [], [], 0
        self.top = top
        self.depth = 0

    def name(self, p):
        self.count += 1
        return f"{p}{self.count}"

    def const(self, v, dtype=np.float32):
        n = self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(v, dtype=dtype), n))
        return n

    def op(self, kind, ins, **attrs):
        out = self.name(kind.lower())
        self.nodes.append(helper.make_node(kind, ins, [out], **attrs))
        return out

    # -- layers, each returning the new tensor with its error model -------------------------------
    def conv(self, x: T, rng, k=None, stride=None, cout=None, groups=None, pads=None, act=None, bn=None) -> T:
        k = k or int(rng.choice([1, 3, 5]))
        stride = stride or int(rng.choice([1, 1, 2]))
        cout = cout or int(rng.integers(1, 21))
        if groups is None:
            groups = str(rng.choice(["1", "1", "1", "2", "3", "dw"]))
        if groups == "dw":
            g, cout = x.c, x.c
        else:
            g = int(groups)
            if x.c % g or cout % g:
                cout = g * max(1, cout // g)
                if x.c % g:
                    g = 1
        if pads is None:
            pads = [int(v) for v in rng.integers(0, k // 2 + 1, 4)]  # asymmetric: top, left, bottom, right
        oh = (x.h + pads[0] + pads[2] - k) // stride + 1
        ow = (x.w + pads[1] + pads[3] - k) // stride + 1
        if oh < 1 or ow < 1:
            return x
        fan_in = x.c // g * k * k
        w = rng.standard_normal((cout, x.c // g, k, k)) * math.sqrt(2.0 / fan_in)
        b = rng.standard_normal(cout) * 0.1
        ins = [x.name, self.const(w), self.const(b)]
        y = self.op(
            "Conv",
            ins,
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[pads[0], pads[1], pads[2], pads[3]],
            group=g,
        )
        scale = np.ones(cout)
        shift = b
        if bn if bn is not None else rng.random() < 0.5:
            gamma, beta = rng.uniform(0.7, 1.3, cout), rng.standard_normal(cout) * 0.1
            mean, var = rng.standard_normal(cout) * 0.1, rng.uniform(0.6, 1.4, cout)
            y = self.op("BatchNormalization", [y] + [self.const(v) for v in (gamma, beta, mean, var)], epsilon=1e-5)
            scale = gamma / np.sqrt(var + 1e-5)
            shift = (b - mean) * scale + beta
        folded = w * scale[:, None, None, None]
        sq = float(np.max(np.sum(folded.reshape(cout, -1) ** 2, axis=1)))
        terms = x.c // g * k * k
        self.depth = max(self.depth, terms)
        ms = sq * x.ms + float(np.max(shift**2))
        var = sq * x.var + (terms + 1 + terms * x.ms * 1) / 12  # products, bias, weight quantisation
        out = T(y, cout, oh, ow, ms, var)
        return self.act(out, act if act is not None else str(rng.choice(ACTIVATIONS)), rng)

    def act(self, x: T, kind: str, rng) -> T:
        """``x`` through an activation. Error model: the input's error times the largest slope
        squared, plus the activation's own (its documented bound, in units, squared: it is not a
        uniform rounding)."""
        big = max(1.0, 3 * math.sqrt(x.ms))  # (the bounds of x times a function grow with |x|)
        if kind == "relu":
            return T(self.op("Relu", [x.name]), x.c, x.h, x.w, x.ms, x.var)
        if kind == "leaky":
            return T(self.op("LeakyRelu", [x.name], alpha=0.1), x.c, x.h, x.w, x.ms, x.var + 1 / 12)
        if kind == "clip":
            y = self.op("Clip", [x.name, self.const(np.array(0.0)), self.const(np.array(6.0))])
            return T(y, x.c, x.h, x.w, x.ms, x.var)
        if kind == "hardswish":
            return T(self.op("HardSwish", [x.name]), x.c, x.h, x.w, x.ms, 2.25 * x.var + 1.7**2)
        if kind == "prelu":
            slopes = rng.uniform(-0.25, 1.5, (x.c, 1, 1))
            y = self.op("PRelu", [x.name, self.const(slopes)])
            return T(y, x.c, x.h, x.w, x.ms * max(1.0, float(np.max(slopes**2))), x.var * 2.25 + 1 / 12)
        if kind == "sigmoid":
            return T(self.op("Sigmoid", [x.name]), x.c, x.h, x.w, 1.0, x.var / 16 + 0.7**2)
        if kind == "tanh":
            return T(self.op("Tanh", [x.name]), x.c, x.h, x.w, 1.0, x.var + 1.1**2)
        if kind == "silu":  # x * sigmoid(x), as exporters write SiLU
            y = self.op("Mul", [x.name, self.op("Sigmoid", [x.name])])
            return T(y, x.c, x.h, x.w, x.ms, 1.21 * x.var + (0.5 + 0.36 * big) ** 2)
        if kind == "mish":  # x * tanh(softplus(x)), as exporters before opset 18 write Mish
            y = self.op("Mul", [x.name, self.op("Tanh", [self.op("Softplus", [x.name])])])
            return T(y, x.c, x.h, x.w, x.ms, 1.21 * x.var + (0.5 + 0.49 * big) ** 2)
        return x

    def squeeze_excite(self, x: T, rng) -> T:
        """MobileNetV3's and EfficientNet's squeeze-and-excitation: the map times a per-channel gate
        (global average pool, 1x1 conv down, ReLU, 1x1 conv up, a hard or a smooth sigmoid)."""
        g = T(self.op("GlobalAveragePool", [x.name]), x.c, 1, 1, x.ms, x.var + 4 * (x.h * x.w - 1).bit_length() / 12)
        g = self.conv(g, rng, k=1, stride=1, cout=max(1, x.c // 4), groups="1", pads=[0] * 4, act="relu", bn=False)
        g = self.conv(g, rng, k=1, stride=1, cout=x.c, groups="1", pads=[0] * 4, act="none", bn=False)
        if rng.random() < 0.5:
            gate = T(self.op("HardSigmoid", [g.name], alpha=1 / 6, beta=0.5), x.c, 1, 1, 1.0, g.var / 36 + 1.0)
        else:
            gate = self.act(g, "sigmoid", rng)  # (draws nothing)
        # The product's rounding, the map's error through the gate (at most 1), the gate's times the map.
        return T(self.op("Mul", [x.name, gate.name]), x.c, x.h, x.w, x.ms, x.var + x.ms * 9 * gate.var + 1 / 12)

    def transposed(self, x: T, rng) -> T:
        """A ConvTranspose upsampling 2x (a segmentation or detection head's), then an activation."""
        if x.h * x.w > 16 * 16:
            return x
        k = int(rng.choice([2, 3, 4]))
        pad, extra = {2: (0, 0), 3: (1, 1), 4: (1, 0)}[k]
        cout = int(rng.integers(1, 17))
        taps = math.ceil(k / 2) ** 2  # the taps that reach one output pixel, at most
        w = rng.standard_normal((x.c, cout, k, k)) * math.sqrt(2.0 / (x.c * taps))
        b = rng.standard_normal(cout) * 0.1
        y = self.op("ConvTranspose", [x.name, self.const(w), self.const(b)], kernel_shape=[k, k], strides=[2, 2],
                    pads=[pad] * 4, output_padding=[extra, extra])  # fmt: skip
        sq = float(np.max(np.sum(w**2, axis=(0, 2, 3))))
        terms = x.c * taps
        self.depth = max(self.depth, terms)
        out = T(
            y, cout, 2 * x.h, 2 * x.w, sq * x.ms + float(np.max(b**2)), sq * x.var + (terms + 1 + terms * x.ms) / 12
        )
        return self.act(out, str(rng.choice(ACTIVATIONS)), rng)

    def pool(self, x: T, rng) -> T:
        kind = str(rng.choice(["MaxPool", "AveragePool"]))
        k = int(rng.choice([2, 3]))
        stride = int(rng.choice([1, 2]))
        pads = [int(v) for v in rng.integers(0, k // 2 + 1, 4)]
        pads = [min(p, k - 1) for p in pads]
        oh = (x.h + pads[0] + pads[2] - k) // stride + 1
        ow = (x.w + pads[1] + pads[3] - k) // stride + 1
        if oh < 1 or ow < 1:
            return x
        attrs = dict(kernel_shape=[k, k], strides=[stride, stride], pads=pads)
        if kind == "MaxPool" and stride > 1 and rng.random() < 0.5:  # the face detectors' ceil mode
            attrs["ceil_mode"] = 1
            oh = -(-(x.h + pads[0] + pads[2] - k) // stride) + 1
            ow = -(-(x.w + pads[1] + pads[3] - k) // stride) + 1
        var = x.var
        if kind == "AveragePool":
            attrs["count_include_pad"] = int(rng.integers(0, 2))
            shift = (k * k - 1).bit_length()
            var = x.var + (2**shift) ** 2 / 12 + 2 / 12  # terms at scale 2^-shift, scaled back
        return T(self.op(kind, [x.name], **attrs), x.c, oh, ow, x.ms, var)

    def residual(self, x: T, rng) -> T:
        """One to three identical pre-activation residual blocks (the same composite reused)."""
        act = str(rng.choice(["relu", "leaky", "clip"]))
        for _ in range(int(rng.integers(1, 4))):
            y = self.conv(x, rng, k=3, stride=1, cout=x.c, groups="1", pads=[1, 1, 1, 1], act=act, bn=True)
            y = self.conv(y, rng, k=3, stride=1, cout=x.c, groups="1", pads=[1, 1, 1, 1], act="none", bn=False)
            x = T(self.op("Add", [x.name, y.name]), x.c, x.h, x.w, x.ms + y.ms, x.var + y.var)
        return x

    def concat(self, x: T, others: list[T]) -> T:
        same = [o for o in others if (o.h, o.w) == (x.h, x.w) and o.name != x.name]
        if not same:
            return x
        o = same[-1]
        return T(self.op("Concat", [o.name, x.name], axis=1), o.c + x.c, x.h, x.w, max(o.ms, x.ms), max(o.var, x.var))

    def sppf(self, x: T) -> T:
        """YOLOv5's SPPF: three chained 5x5 max-pools (the same composite three times), concat."""
        outs = [x]
        for _ in range(3):
            outs.append(
                T(
                    self.op("MaxPool", [outs[-1].name], kernel_shape=[5, 5], strides=[1, 1], pads=[2] * 4),
                    x.c,
                    x.h,
                    x.w,
                    x.ms,
                    x.var,
                )
            )
        return T(self.op("Concat", [o.name for o in outs], axis=1), 4 * x.c, x.h, x.w, x.ms, x.var)

    def csp(self, x: T, rng) -> T:
        """YOLOv4-tiny's route groups: Split along channels (or Slice), a conv on one part, concat."""
        if x.c < 2:
            return x
        first = int(rng.integers(1, x.c))
        if rng.random() < 0.5:
            split = self.const(np.array([first, x.c - first]), np.int64)
            parts = [self.name("split") for _ in range(2)]
            self.nodes.append(helper.make_node("Split", [x.name, split], parts, axis=1))
        else:
            parts = [
                self.op(
                    "Slice",
                    [
                        x.name,
                        self.const(np.array([lo]), np.int64),
                        self.const(np.array([hi]), np.int64),
                        self.const(np.array([1]), np.int64),
                    ],
                )
                for lo, hi in ((0, first), (first, x.c))
            ]
        keep = T(parts[0], first, x.h, x.w, x.ms, x.var)
        y = self.conv(
            T(parts[1], x.c - first, x.h, x.w, x.ms, x.var), rng, k=3, stride=1, groups="1", pads=[1, 1, 1, 1]
        )
        if (y.h, y.w) != (x.h, x.w):
            return y
        return T(
            self.op("Concat", [y.name, keep.name], axis=1), y.c + first, x.h, x.w, max(y.ms, x.ms), max(y.var, x.var)
        )

    def upsample(self, x: T) -> T:
        """Nearest 2x upsampling (YOLO's second head)."""
        if x.h * x.w > 16 * 16:
            return x
        scales = self.const(np.array([1, 1, 2, 2], dtype=np.float32))
        return T(self.op("Resize", [x.name, "", scales], mode="nearest"), x.c, 2 * x.h, 2 * x.w, x.ms, x.var)

    def head(self, x: T, rng, kind: str, classes: int) -> T:
        if kind == "none":
            return x
        if kind == "gap_gemm":
            levels = max(0, (x.h * x.w - 1).bit_length())
            g = self.op("GlobalAveragePool", [x.name])
            x = T(self.op("Flatten", [g]), x.c, 1, 1, x.ms, x.var + 4 * levels / 12 + 1)
        else:
            x = T(self.op("Flatten", [x.name]), x.c * x.h * x.w, 1, 1, x.ms, x.var)
        w = rng.standard_normal((classes, x.c)) * math.sqrt(1.0 / x.c)
        y = self.op("Gemm", [x.name, self.const(w), self.const(rng.standard_normal(classes) * 0.1)], transB=1)
        sq = float(np.max(np.sum(w**2, axis=1)))
        self.depth = max(self.depth, x.c)
        return T(y, classes, 1, 1, sq * x.ms, sq * x.var + (2 * x.c + 1) / 12)


def build_net(top: dict, steps: list) -> Net:
    b = _Builder(top)
    shape = (top["batch"], top["c"], top["hw"], top["hw"])
    x = T("x", top["c"], top["hw"], top["hw"], 1.0, 1 / 12)
    seen, outputs = [x], []
    for kind, seed in steps:
        rng = np.random.default_rng(seed)
        if kind == "conv":
            x = b.conv(x, rng)
        elif kind == "pool":
            x = b.pool(x, rng)
        elif kind == "res":
            x = b.residual(x, rng)
        elif kind == "concat":
            x = b.concat(x, seen)
        elif kind == "sppf":
            x = b.sppf(x)
        elif kind == "csp":
            x = b.csp(x, rng)
        elif kind == "upsample":
            x = b.upsample(x)
        elif kind == "se":
            x = b.squeeze_excite(x, rng)
        elif kind == "convt":
            x = b.transposed(x, rng)
        elif kind == "branch" and x.name != "x":
            outputs.append(x)
        seen.append(x)
    x = b.head(x, np.random.default_rng(top["classes"]), top["head"], top["classes"])
    outputs = list({o.name: o for o in outputs if o.name != x.name}.values()) + [x]
    if outputs[-1].name == "x":  # nothing at all: one conv so the net computes something
        outputs[-1] = b.conv(
            x, np.random.default_rng(0), k=1, stride=1, cout=3, groups="1", pads=[0] * 4, act="none", bn=False
        )
    g = helper.make_graph(
        b.nodes,
        "random_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info(o.name, TensorProto.FLOAT, None) for o in outputs],
        b.inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    m = onnx.shape_inference.infer_shapes(m)
    inferred = {v.name: v for v in m.graph.value_info}
    for out in m.graph.output:
        if out.name in inferred:
            out.CopyFrom(inferred[out.name])
    onnx.checker.check_model(m)
    return Net(m, shape, list(steps), [o.var for o in outputs], b.depth)


def random_net(seed: int) -> Net:
    top, steps = random_steps(seed)
    return build_net(top, steps)


def sample_input(net: Net) -> np.ndarray:
    """The input a network is checked on, normal, from a generator no weight uses (the head's
    weights come from one seeded by the class count, which is often a small network's step count:
    an input drawn from that seed was the head's own weights, and the output 18 times what any
    other input gives)."""
    return np.random.default_rng(2000 + len(net.steps)).standard_normal(net.input_shape).astype(np.float32)


def calibration_inputs(net: Net, count: int = 16) -> np.ndarray:
    """``count`` calibration samples from the test input's distribution (another generator)."""
    rng = np.random.default_rng(1000 + len(net.steps))
    return rng.standard_normal((count, *net.input_shape[1:])).astype(np.float32)


def shrink(top: dict, steps: list, fails) -> list:
    """The shortest sub-list of ``steps`` (removing one step at a time) on which ``fails(net)``
    still holds."""
    steps = list(steps)
    changed = True
    while changed:
        changed = False
        for i in range(len(steps)):
            trial = steps[:i] + steps[i + 1 :]
            try:
                still = fails(build_net(top, trial))
            except Exception:  # noqa: BLE001 - a trial that breaks differently is not this failure
                still = False
            if still:
                steps, changed = trial, True
                break
    return steps
