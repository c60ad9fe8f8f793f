"""Calibrated weight rounding: a layer's weights rounded so that its *outputs* stay close to float.

Rounding each weight to its nearest value makes each weight's error as small as it can be, but
what the network feels is the layer's output error. For a layer ``y = W x`` whose inputs over the
calibration samples have the Gram matrix ``H = sum x x^T``, the output error of rounded weights
``Q`` is ``tr((Q - W) H (Q - W)^T)``. Rounding the input columns one at a time and moving each
column's rounding error onto the columns not yet rounded, in proportion to how the inputs
correlate (the inverse of ``H``), makes that error smaller than nearest rounding's:
the optimal brain surgeon's update as GPTQ applies it (Frantar et al., "GPTQ: Accurate Post-Training
Quantization for Generative Pre-trained Transformers", ICLR 2023). The hardware does not change,
and no weight leaves the data type's grid: only which neighbouring grid value each weight takes.

In a chain of layers whose activations have alike ranges every weight keeps about the data type's
own fractional bits (a layer's weight shift is its output's shift less its input's), so at FP16BP8
the weights of a trained network's 1x1 layers keep 4-5 significant bits: this is where the
network's error comes from, and what this module recovers.

``LayerInputs`` accumulates each layer's ``H`` from interpreted samples; ``round_weights`` returns,
for each layer weight it may change (one used by a single layer), the weights as rounded at the
layer's shift, divided back to the model's scale (exact: powers of two).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..numbers import DataType
from .graph import Graph, Node, grouped
from .interpret import _window

# Added to H's diagonal, relative to its mean: keeps the inverse finite for inputs that never vary.
DAMPING = 0.01
BLOCK = 128  # columns rounded together before their error reaches the rest (the result is the same)
# Layers with more inputs than this (a 3x3 conv over 512 channels has 4608) keep nearest rounding:
# the fit's time grows with the cube of the inputs and its memory with their square (a dense layer
# reading a flattened 19x24x28 map, 12768 inputs, took minutes).
MAX_INPUTS = 4608


def _layers(graph: Graph) -> list[tuple[int, Node]]:
    """Convs and dense layers with weights, by node index (a transposed conv's weights serve
    several phases, each with other inputs, and a grouped conv's several groups: they keep nearest
    rounding)."""
    return [
        (i, n)
        for i, n in enumerate(graph.nodes)
        if n.op == "conv2d"
        and n.attrs.weight is not None
        and not n.attrs.transposed
        and not grouped(graph.constants, n.attrs)
    ]


def _depthwise(node: Node) -> bool:
    return node.attrs.groups != 1


def _windows(node: Node, x: np.ndarray, w_shape, out_shape) -> np.ndarray:
    """The layer's input windows as rows: (rows, in_channels * kh * kw), the weights' own order
    (for a depthwise layer: (rows, channels, kh * kw))."""
    a = node.attrs
    if a.layout == "KM":
        return x.reshape(-1, x.shape[-1])
    taps = [
        tap
        for _, _, tap in _window(
            x, a.padding, 0.0, out_shape[1:3], w_shape[2:], a.strides,
            a.dilation,
        )
    ]  # fmt: skip
    p = np.stack(taps, axis=-1)  # (n, oh, ow, c, kh * kw)
    p = p.reshape(-1, p.shape[3], p.shape[4])
    return p if _depthwise(node) else p.reshape(p.shape[0], -1)


@dataclass
class LayerInputs:
    """Each layer's input Gram matrix ``H`` (a depthwise layer's: one per channel) and how many
    input windows it was summed over, accumulated over samples."""

    graph: Graph
    grams: dict[int, np.ndarray] = field(default_factory=dict)
    rows: dict[int, int] = field(default_factory=dict)
    # Each layer's rounding at a weight scale, once: calibration's candidates share most of them;
    # and its inverse factor, whatever the scale.
    _rounded: dict[tuple[int, float, DataType], tuple[np.ndarray, float, float]] = field(
        default_factory=dict, repr=False
    )
    _factors: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    def factor(self, layer: int) -> np.ndarray:
        """The upper Cholesky factor of layer ``layer``'s damped inverse ``H``."""
        if layer not in self._factors:
            self._factors[layer] = _inverse_factor(np.asarray(self.grams[layer], dtype=np.float64))
        return self._factors[layer]

    def add(self, values: dict[str, np.ndarray]) -> None:
        """One sample's interpreted tensors (``interpret``'s result). Layers with more than
        ``MAX_INPUTS`` inputs are not collected."""
        self._rounded.clear()
        self._factors.clear()
        for i, node in _layers(self.graph):
            w_shape = np.shape(self.graph.constants[node.attrs.weight])
            if (w_shape[0] if node.attrs.layout == "KM" else int(np.prod(w_shape[1:]))) > MAX_INPUTS:
                continue
            x = _windows(node, values[node.inputs[0]], w_shape, self.graph.tensors[node.output].shape)
            h = x.transpose(1, 2, 0) @ x.transpose(1, 0, 2) if x.ndim == 3 else x.T @ x  # (c, i, j) or (i, j)
            self.grams[i] = self.grams.get(i, 0.0) + h
            self.rows[i] = self.rows.get(i, 0) + x.shape[0]


def _inverse_factor(h: np.ndarray) -> np.ndarray:
    """The upper Cholesky factor of the damped ``H``'s inverse (stacked over a leading axis)."""
    h = h.copy()
    d = h.shape[-1]
    diagonal = np.diagonal(h, axis1=-2, axis2=-1)
    dead = diagonal <= 0  # an input that is always zero: its weights round on their own
    idx = np.arange(d)
    h[..., idx, idx] = np.where(dead, 1.0, diagonal)
    damp = DAMPING * np.mean(np.where(dead, 1.0, diagonal), axis=-1, keepdims=True)
    for _ in range(6):
        try:
            damped = h.copy()
            damped[..., idx, idx] += damp
            inverse = np.linalg.inv(damped)
            inverse = (inverse + np.swapaxes(inverse, -1, -2)) / 2
            return np.swapaxes(np.linalg.cholesky(inverse), -1, -2)
        except np.linalg.LinAlgError:
            damp = damp * 10
    raise np.linalg.LinAlgError("the layer's input Gram matrix stays singular")


def round_to_outputs(w: np.ndarray, h: np.ndarray, dt: DataType, factor: np.ndarray | None = None) -> np.ndarray:
    """``w`` (out, in), or stacked (c, out, in) with ``h`` (c, in, in), rounded to ``dt``'s grid
    for the smallest output error over inputs with Gram matrix ``h`` (``factor``: its
    ``_inverse_factor``, if known)."""
    u = _inverse_factor(np.asarray(h, dtype=np.float64)) if factor is None else factor
    w = np.array(w, dtype=np.float64)
    q = np.zeros_like(w)
    d = w.shape[-1]

    def grid(v):
        return dt.to_float(dt.from_float(v))

    for lo in range(0, d, BLOCK):
        hi = min(lo + BLOCK, d)
        errors = np.zeros(w.shape[:-1] + (hi - lo,))
        for j in range(lo, hi):
            q[..., j] = grid(w[..., j])
            e = (w[..., j] - q[..., j]) / u[..., j, j, None]
            w[..., j:hi] -= e[..., :, None] * u[..., None, j, j:hi]
            errors[..., j - lo] = e
        w[..., hi:] -= errors @ u[..., lo:hi, hi:]
    return q


def output_error(w: np.ndarray, q: np.ndarray, h: np.ndarray) -> float:
    """The layer's RMS output error from ``q`` in place of ``w``, relative to its RMS output, over
    the inputs of Gram matrix ``h`` (shapes as ``round_to_outputs``)."""
    e = q - w
    # (a @ h) * a summed: the quadratic forms through BLAS (einsum's loop over a 4,608-input
    # layer took seconds per call, per scale candidate)
    num = float(np.sum((e @ h) * e))
    den = float(np.sum((w @ h) * w))
    return float(np.sqrt(max(num, 0.0) / den)) if den > 0 else 0.0


def _as_rows(node: Node, w: np.ndarray) -> np.ndarray:
    """The weights as ``round_to_outputs`` takes them: (out, in) or, depthwise, (c, 1, kh * kw)."""
    if node.attrs.layout == "KM":
        return w.T
    if _depthwise(node):
        return w.reshape(w.shape[0], 1, -1)
    return w.reshape(w.shape[0], -1)


def _from_rows(node: Node, rows: np.ndarray, shape) -> np.ndarray:
    return rows.T if node.attrs.layout == "KM" else rows.reshape(shape)


@dataclass(frozen=True)
class RoundedWeights:
    """Layer weights rounded for their outputs: constant index -> the weights at the model's scale
    (on the data type's grid once multiplied by their layer's weight shift), and each rounded
    layer's output error (relative RMS on the calibration inputs), nearest rounding's beside it."""

    weights: dict[int, np.ndarray]
    errors: dict[int, tuple[float, float]]  # constant index -> (this rounding, nearest rounding)


def round_weights(graph: Graph, shifts: dict[str, int], inputs: LayerInputs, dt: DataType) -> RoundedWeights:
    """Each layer's weights rounded for its outputs at ``shifts`` (the layer's weights are scaled by
    its output's shift less its input's). Weights a second layer or a bias also uses keep nearest
    rounding (one rounding cannot suit two layers), as do layers with more than ``MAX_INPUTS``
    inputs."""
    uses: dict[int, int] = {}
    for node in graph.nodes:
        for index in (node.attrs.weight, node.attrs.bias) if node.op in ("conv2d", "bias_add") else ():
            if index is not None:
                uses[index] = uses.get(index, 0) + 1
    weights, errors = {}, {}
    for i, node in _layers(graph):
        index = node.attrs.weight
        if uses[index] != 1 or i not in inputs.grams:
            continue
        source = np.asarray(graph.constants[index], dtype=np.float64)
        scale = 2.0 ** (shifts.get(node.output, 0) - shifts.get(node.inputs[0], 0))
        if (i, scale, dt) not in inputs._rounded:
            w = _as_rows(node, source * scale)
            h = inputs.grams[i]
            q = round_to_outputs(w, h, dt, inputs.factor(i))
            nearest = dt.to_float(dt.from_float(w))
            rounded = (_from_rows(node, q, source.shape) / scale).astype(np.float32)
            inputs._rounded[i, scale, dt] = (rounded, output_error(w, q, h), output_error(w, nearest, h))
        weights[index], *pair = inputs._rounded[i, scale, dt]
        errors[index] = tuple(pair)
    return RoundedWeights(weights, errors)


def with_weights(graph: Graph, weights: dict[int, np.ndarray]) -> Graph:
    """``graph`` with the constants ``weights`` (by index) in place of its own."""
    if not weights:
        return graph
    constants = [weights.get(i, c) for i, c in enumerate(graph.constants)]
    return Graph(graph.tensors, graph.nodes, graph.inputs, graph.outputs, constants, graph.views)
