"""The activations table: HardSigmoid, HardSwish, PReLU and LeakyReLU within their bounds."""

import math

import pytest


@pytest.mark.parametrize("swish", [True, False])
@pytest.mark.parametrize("calibrated", [False, True])
def test_hard_sigmoid_and_hard_swish_within_their_bounds(swish, calibrated):
    """Every FP16BP8 value in [-8, 8) (and in [-64, 64) beside): a HardSigmoid within 2^-8 of the
    exact value of the input the device holds, a HardSwish within 2^-8 + 4e-4 (its documented bound
    at a result of scale 1 or finer), at the data type's binary point and at a calibrated scale. No
    step saturates: the device would count it and the user be warned."""
    import numpy as np

    from tvm_tensil.arch import PRESETS
    from tvm_tensil.compiler import Graph, Node, Tensor, compile_graph
    from tvm_tensil.runtime import Emulator

    arch = PRESETS["pynqz1"]
    for top in (8, 64):
        x = (np.arange(-top * 256, top * 256) / 256).reshape(1, 1, -1, 8)
        g = Graph({"x": Tensor("x", x.shape), "y": Tensor("y", x.shape)},
                  [Node("hard_sigmoid", ["x"], "y", {"swish": swish})], ["x"], ["y"], [])  # fmt: skip
        part = compile_graph(g, arch, "t", calibration=[{"x": x}] if calibrated else None)
        assert bool(part.shifts) == calibrated or top > 8  # calibrated: x in [-64, 64) may keep scale 1
        emu = Emulator(arch)
        y = emu.run_model(part.model(g.constants), {"x": x})["y"]
        assert emu.last_stats.saturated == 0
        # The input as the device holds it (calibrated, +-64 takes a scale of 2^-1 at headroom 2).
        k = part.shifts.get("x", 0)
        held = arch.data_type.to_float(arch.data_type.from_float(x * 2.0**k)) / 2.0**k
        h = np.clip(held / 6 + 0.5, 0, 1)
        bound = 2.0**-8 + 4e-4 if swish else 2.0**-8
        assert np.all(np.abs(y - (held * h if swish else h)) <= bound), top


@pytest.mark.parametrize("form", [(1 / 6, 0.5, 1.0), (1.0, 3.0, 6.0), (0.2, 0.5, 1.0)])
def test_hard_swish_within_its_bound_over_every_value_at_many_scales(form):
    """``x * clip(alpha x + beta, 0, hi)`` for the forms importers write (ONNX's and torch's
    HardSwish; ``x * relu6(x + 3)``, its 1/6 folded into the next layer; ONNX HardSigmoid's
    defaults as a factor): every FP16BP8 input whose result fits, at input and result scales from
    coarse to fine, within one unit of the result plus 4e-4 hi (the small quadratic's rounding), no
    step saturating."""
    import numpy as np

    from tvm_tensil.arch import PRESETS
    from tvm_tensil.compiler import Graph, Node, Tensor, compile_graph
    from tvm_tensil.compiler.elementwise import HardSigmoid
    from tvm_tensil.runtime import Emulator

    arch = PRESETS["pynqz1"]
    dt, (alpha, beta, hi) = arch.data_type, form
    stored = np.arange(dt.min_int, dt.max_int + 1) / 2**dt.binary_point
    below = -math.ceil(math.log2(hi))  # a result at least hi times x's scale
    for shift, out_shift in [(0, below), (3, 3 + below), (6, 6 + below), (-3, -6 + below), (4, 1 + below),
                             (1, 3 + below), (8, 8 + below)]:  # fmt: skip
        x = stored / 2.0**shift
        want = x * np.clip(alpha * x + beta, 0, hi)
        keep = np.abs(want) * 2.0**out_shift < dt.max_float / 2  # results that fit, with room for their error
        x, want = x[keep], want[keep]
        attrs = HardSigmoid(alpha, beta, swish=True, shift=shift, out_shift=out_shift, hi=hi)
        g = Graph({"x": Tensor("x", (1, 1, x.size, 1)), "y": Tensor("y", (1, 1, x.size, 1))},
                  [Node("hard_sigmoid", ["x"], "y", attrs)], ["x"], ["y"], [])  # fmt: skip
        emu = Emulator(arch)
        got = emu.run_model(compile_graph(g, arch, "t").model([]), {"x": (x * 2.0**shift).reshape(1, 1, -1, 1)})
        assert emu.last_stats.saturated == 0, (shift, out_shift)
        error = np.abs(got["y"].ravel() / 2.0**out_shift - want)
        assert error.max() <= 2.0 ** -(dt.binary_point + out_shift) + 4e-4 * hi, (shift, out_shift, error.max())


@pytest.mark.parametrize("calibrated", [False, True])
def test_hard_swish_without_its_sixth_within_its_bound(calibrated):
    """``x * clip(x + 3, 0, 6)`` (six HardSwishes: the 1/6 folded into the next layer): every FP16BP8
    value in [-8, 8) within its bound (a unit of the result plus 6 * 4e-4), no step saturating."""
    import numpy as np

    from tvm_tensil.arch import PRESETS
    from tvm_tensil.compiler import Graph, Node, Tensor, compile_graph
    from tvm_tensil.compiler.elementwise import HardSigmoid
    from tvm_tensil.runtime import Emulator

    arch = PRESETS["pynqz1"]
    x = (np.arange(-8 * 256, 8 * 256) / 256).reshape(1, 1, -1, 8)
    six = Node("hard_sigmoid", ["x"], "y", HardSigmoid(1.0, 3.0, swish=True, hi=6.0))
    g = Graph({"x": Tensor("x", x.shape), "y": Tensor("y", x.shape)}, [six], ["x"], ["y"], [])
    part = compile_graph(g, arch, "t", calibration=[{"x": x}] if calibrated else None)
    emu = Emulator(arch)
    y = emu.run_model(part.model(g.constants), {"x": x})["y"]
    assert emu.last_stats.saturated == 0
    assert np.all(np.abs(y - x * np.clip(x + 3, 0, 6)) <= 2.0**-8 + 6 * 4e-4)


def test_a_hard_swish_result_too_fine_for_the_data_type_is_an_error_not_a_wrong_number():
    """A HardSwish whose factor does not rise symmetrically (computed as x times the factor), for a
    result stored 7+ powers of two finer than its input, would need the factor's 1 at 2^7+
    (saturated at FP16BP8): the compile says so instead of computing a clipped factor."""
    from tvm_tensil.arch import PRESETS
    from tvm_tensil.compiler import Graph, Node, Tensor, compile_graph
    from tvm_tensil.compiler.elementwise import HardSigmoid

    shape = (1, 1, 4, 8)
    attrs = HardSigmoid(1 / 6, 0.4, swish=True, out_shift=7)
    g = Graph({"x": Tensor("x", shape), "y": Tensor("y", shape)},
              [Node("hard_sigmoid", ["x"], "y", attrs)], ["x"], ["y"], [])  # fmt: skip
    with pytest.raises(ValueError, match="7 powers of two finer than its input does not fit FP16BP8"):
        compile_graph(g, PRESETS["pynqz1"], "t")


SLOPES = [(-0.5, 0.0, 0.1, 0.25, 0.3, 0.9, 1.0, -2.0), (1.0, 1.5, 3.0, 1.1, 2.0, 1.25, 4.0, 1.0),
          (-0.5, 0.1, 0.9, 1.5, 3.0, -2.0, 0.0, 1.25), (0.01, 0.02, 0.1, 0.25, 0.003, 0.05, 0.0, 0.15),
          (1.01, 0.99, 0.2, 1.5, 1.1, 0.9, 1.0, 0.95)]  # fmt: skip


@pytest.mark.parametrize("slopes", SLOPES)
def test_prelu_keeps_its_slopes_bits_over_every_value(slopes):
    """PReLU on a conv (an identity 1x1), every FP16BP8 value in [-16, 16) in every channel: within
    a unit (the product's rounding, and its bringing down's for a slope scaled up) plus |x v| 2^-8 of
    x where positive and alpha x else, v the slope (alpha - 1 with slopes on both sides of 1): a
    small one keeps its bits (0.01 on the grid would be 0.0117); slopes at most 1, at least 1, and
    on both sides of 1."""
    import numpy as np

    from tvm_tensil.arch import PRESETS
    from tvm_tensil.compiler import Graph, Node, Tensor, compile_graph
    from tvm_tensil.runtime import Emulator

    arch = PRESETS["pynqz1"]
    x = np.repeat((np.arange(-16 * 256, 16 * 256) / 256)[:, None], 8, axis=1).reshape(1, 1, -1, 8)
    conv = dict(weight=0, bias=None, strides=(1, 1), dilation=(1, 1), groups=1, padding=(0, 0, 0, 0))
    nodes = [Node("conv2d", ["x"], "t", conv), Node("prelu", ["t"], "y", {"alpha": slopes})]
    tensors = {k: Tensor(k, x.shape) for k in ("x", "t", "y")}
    g = Graph(tensors, nodes, ["x"], ["y"], [np.eye(8, dtype=np.float32).reshape(8, 8, 1, 1)])
    part = compile_graph(g, arch, "t")
    emu = Emulator(arch)
    y = emu.run_model(part.model(g.constants), {"x": x})["y"]
    alpha = np.asarray(slopes)
    v = alpha - 1 if min(slopes) < 1 < max(slopes) else alpha
    assert emu.last_stats.saturated == 0
    error = np.abs(y - np.where(x > 0, x, np.clip(alpha * x, -128, 127.99609375)))
    assert np.all(error <= 2.0**-8 + np.abs(x * v) * 2.0**-8), float(error.max())


@pytest.mark.parametrize("alpha", [0.1, 0.01, 0.2, 0.3, 0.25])
def test_leaky_relu_keeps_its_slope_off_the_grid(alpha):
    """LeakyReLU on a conv (an identity 1x1), every FP16BP8 value in [-64, 64): within a unit (the
    scaled slope's product and its bringing down each round) plus |x| alpha 2^-8 (the scaled slope in
    [0.5, 1] on the grid) of max(x, alpha x). The slope as the grid holds it would be 0.0117 for
    0.01: 0.11 off at x = -64."""
    import numpy as np

    from tvm_tensil.arch import PRESETS
    from tvm_tensil.compiler import Graph, Node, Tensor, compile_graph
    from tvm_tensil.compiler.elementwise import LeakyRelu
    from tvm_tensil.runtime import Emulator

    arch = PRESETS["pynqz1"]
    x = np.repeat((np.arange(-64 * 256, 64 * 256) / 256)[:, None], 8, axis=1).reshape(1, 1, -1, 8)
    conv = dict(weight=0, bias=None, strides=(1, 1), dilation=(1, 1), groups=1, padding=(0, 0, 0, 0))
    nodes = [Node("conv2d", ["x"], "t", conv), Node("leaky_relu", ["t"], "y", LeakyRelu(alpha))]
    tensors = {k: Tensor(k, x.shape) for k in ("x", "t", "y")}
    g = Graph(tensors, nodes, ["x"], ["y"], [np.eye(8, dtype=np.float32).reshape(8, 8, 1, 1)])
    part = compile_graph(g, arch, "t")
    emu = Emulator(arch)
    y = emu.run_model(part.model(g.constants), {"x": x})["y"]
    assert emu.last_stats.saturated == 0
    error = np.abs(y - np.maximum(x, alpha * x))
    assert np.all(error <= 2.0**-8 + np.abs(x) * alpha * 2.0**-8), float(error.max())
