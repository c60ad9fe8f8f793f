"""Calibrated weight rounding: on the data type's grid, closer to float at the layer's outputs than
nearest rounding (on held-out inputs too), and the windows it fits to are the conv's own."""

import numpy as np

from tvm_tensil.compiler import Graph, Node, Tensor
from tvm_tensil.compiler.interpret import interpret
from tvm_tensil.compiler.rounding import LayerInputs, output_error, round_to_outputs, round_weights
from tvm_tensil.numbers import FP16BP8

DT = FP16BP8


def correlated_inputs(rows: int, d: int, seed: int) -> np.ndarray:
    """Rows of d inputs that correlate (as a conv's neighbouring pixels and channels do)."""
    rng = np.random.default_rng(seed)
    mix = np.random.default_rng(99).standard_normal((d, d)) / np.sqrt(d) + np.eye(d)
    return np.maximum(rng.standard_normal((rows, d)) @ mix, 0.0)  # after a ReLU: a mean, and zeros


def nearest(w):
    return DT.to_float(DT.from_float(w))


def test_rounded_weights_are_on_the_grid_and_closer_at_the_outputs_than_nearest():
    d, out = 96, 24
    w = np.random.default_rng(0).standard_normal((out, d)) * 0.04  # He-like: ~10 grid steps rms
    fit, held = correlated_inputs(4000, d, 1), correlated_inputs(4000, d, 2)
    q = round_to_outputs(w, fit.T @ fit, DT)
    assert np.array_equal(q, nearest(q))  # grid values
    assert np.max(np.abs(q - w)) < 8 * DT.resolution  # neighbours of the weights, not others
    for x in (fit, held):  # on the inputs it was fitted to and on new ones from the same distribution
        h = x.T @ x
        assert output_error(w, q, h) < 0.8 * output_error(w, nearest(w), h)  # 0.71 when written


def test_an_input_that_never_varies_keeps_its_weights_rounded_to_nearest():
    d = 16
    x = correlated_inputs(500, d, 3)
    x[:, 5] = 0.0  # a dead channel: nothing says what its weights should absorb
    w = np.random.default_rng(4).standard_normal((8, d)) * 0.05
    q = round_to_outputs(w, x.T @ x, DT)
    assert np.array_equal(q[:, 5], nearest(w[:, 5]))


def test_stacked_layers_round_as_each_alone():
    """A depthwise layer: one Gram matrix per channel, all channels at once."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((3, 1, 9)) * 0.1
    xs = [correlated_inputs(300, 9, s) for s in (6, 7, 8)]
    h = np.stack([x.T @ x for x in xs])
    q = round_to_outputs(w, h, DT)
    for c in range(3):
        assert np.array_equal(q[c], round_to_outputs(w[c], h[c], DT))


def conv_graph() -> Graph:
    """A strided, padded 3x3 conv, a depthwise conv, two 1x1 convs sharing one weight constant, and a
    dense layer reading the map as rows."""
    rng = np.random.default_rng(10)
    consts = [
        (rng.standard_normal((6, 4, 3, 3)) * 0.1).astype(np.float32),
        (rng.standard_normal((6, 1, 3, 3)) * 0.2).astype(np.float32),
        (rng.standard_normal((6, 5)) * 0.2).astype(np.float32),
        (rng.standard_normal((6, 6, 1, 1)) * 0.2).astype(np.float32),
    ]
    shapes = {"x": (1, 9, 9, 4), "a": (1, 5, 5, 6), "b": (1, 5, 5, 6), "c": (1, 5, 5, 6), "d": (1, 5, 5, 6)}
    shapes |= {"e": (1, 5, 5, 6), "f": (1, 1, 25, 6), "g": (1, 1, 25, 5)}
    conv = dict(dilation=(1, 1), bias=None)
    nodes = [
        Node("conv2d", ["x"], "a", dict(weight=0, strides=(2, 2), padding=(1, 1, 1, 1), groups=1, **conv)),
        Node("conv2d", ["a"], "b", dict(weight=1, strides=(1, 1), padding=(1, 1, 1, 1), groups=6, **conv)),
        Node("conv2d", ["b"], "c", dict(weight=3, strides=(1, 1), padding=(0, 0, 0, 0), groups=1, **conv)),
        Node("conv2d", ["c"], "d", dict(weight=3, strides=(1, 1), padding=(0, 0, 0, 0), groups=1, **conv)),
        Node("relu", ["d"], "e"),
        Node("copy", ["e"], "f"),
        Node("conv2d", ["f"], "g", dict(weight=2, groups=1, layout="KM", **conv)),
    ]
    return Graph({k: Tensor(k, v) for k, v in shapes.items()}, nodes, ["x"], ["g"], consts)


def test_the_windows_are_the_layers_own():
    """Each layer's Gram matrix, with its weights, gives the mean square of its interpreted output."""
    graph = conv_graph()
    x = {"x": np.random.default_rng(11).standard_normal((1, 9, 9, 4))}
    values = interpret(graph, x)
    inputs = LayerInputs(graph)
    inputs.add(values)
    for i, node in enumerate(graph.nodes):
        if node.op != "conv2d":
            continue
        w = np.asarray(graph.constants[node.attrs.weight], dtype=np.float64)
        if node.attrs.layout == "KM":
            rows = w.T
        elif node.attrs.groups != 1:
            rows = w.reshape(w.shape[0], 1, -1)
        else:
            rows = w.reshape(w.shape[0], -1)
        energy = np.sum(np.einsum("...oi,...ij,...oj->...", rows, inputs.grams[i], rows))
        assert np.isclose(energy, np.sum(values[node.output] ** 2)), node.output


def test_round_weights_leaves_shared_weights_to_nearest_and_scales_back_exactly():
    graph = conv_graph()
    rng = np.random.default_rng(12)
    inputs = LayerInputs(graph)
    for _ in range(4):
        inputs.add(interpret(graph, {"x": rng.standard_normal((1, 9, 9, 4))}))
    shifts = dict.fromkeys(graph.tensors, 0) | {"a": 3, "b": 3}  # layer a's weights at 2**3
    rounded = round_weights(graph, shifts, inputs, DT)
    assert set(rounded.weights) == {0, 1, 2}  # constant 3 serves two layers
    q = rounded.weights[0].astype(np.float64) * 2.0**3
    assert np.array_equal(q, nearest(q))  # on the grid at the layer's own weight shift
    for index, (err, err_nearest) in rounded.errors.items():
        assert err <= err_nearest, index


def test_a_layer_with_too_many_inputs_keeps_nearest_rounding():
    """The fit costs the cube of a layer's inputs: past MAX_INPUTS the layer is not collected."""
    from tvm_tensil.compiler.rounding import MAX_INPUTS

    k = MAX_INPUTS + 1
    w = (np.random.default_rng(13).standard_normal((k, 4)) * 0.01).astype(np.float32)
    graph = Graph(
        {"x": Tensor("x", (1, 1, 2, k)), "y": Tensor("y", (1, 1, 2, 4))},
        [Node("conv2d", ["x"], "y", dict(weight=0, bias=None, groups=1, layout="KM"))],
        ["x"],
        ["y"],
        [w],
    )
    inputs = LayerInputs(graph)
    inputs.add(interpret(graph, {"x": np.random.default_rng(14).standard_normal((1, 1, 2, k))}))
    assert inputs.grams == {}
    assert round_weights(graph, {}, inputs, DT).weights == {}


def test_a_layer_rounds_once_per_weight_scale_until_more_inputs_come(monkeypatch):
    """Calibration's candidates share most layers' weight scales: each layer is fitted once per
    scale (the same result), its inputs' inverse factor once whatever the scale, and both again
    once another sample changes its inputs."""
    from tvm_tensil.compiler import rounding

    inverse_factor = rounding._inverse_factor

    graph = conv_graph()
    rng = np.random.default_rng(15)
    inputs = LayerInputs(graph)
    inputs.add(interpret(graph, {"x": rng.standard_normal((1, 9, 9, 4))}))
    fits = []
    factors = []
    monkeypatch.setattr(rounding, "round_to_outputs", lambda *a: fits.append(1) or round_to_outputs(*a))
    monkeypatch.setattr(rounding, "_inverse_factor", lambda h: factors.append(1) or inverse_factor(h))
    shifts = dict.fromkeys(graph.tensors, 0)
    first = round_weights(graph, shifts, inputs, DT)
    layers = len(fits)
    again = round_weights(graph, shifts | {"a": 3, "b": 3}, inputs, DT)  # layer a at another scale only
    assert len(fits) == layers + 1 and len(factors) == layers  # (one inverse per layer, any scale)
    assert all(np.array_equal(again.weights[i], first.weights[i]) for i in first.weights if i != 0)
    inputs.add(interpret(graph, {"x": rng.standard_normal((1, 9, 9, 4))}))
    round_weights(graph, shifts, inputs, DT)
    assert len(fits) == 2 * layers + 1 and len(factors) == 2 * layers
