"""The compiler's graph computed in float: every tensor's real value, for calibration.

``interpret(graph, inputs)`` runs a partition graph (before or after ``fuse``) on float inputs
in the graph's (n, h, w, c) layout and returns every tensor's value. It follows the meaning of
each node as the frontend wrote it (the Relax op), not the TCU's rounding: calibration needs
the values the fixed-point program has to represent.
"""

from __future__ import annotations

import numpy as np

from .elementwise import ACTIVATIONS
from .elementwise import meaning as activation_meaning
from .graph import Channels, Conv, Graph, Interleave, Node, average_pool_shift, conv_kernel, grouped, kernel_terms


def _window(x: np.ndarray, pad: tuple, fill: float, out_hw: tuple, kernel, strides, dilation):
    """Each tap's input pixels: ``(ky, kx, view (n, oh, ow, c))`` over ``x`` padded with ``fill``."""
    t, left = pad[0], pad[1]
    oh, ow = out_hw
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilation
    rows = (oh - 1) * sh + (kh - 1) * dh + 1
    cols = (ow - 1) * sw + (kw - 1) * dw + 1
    n, h, w, c = x.shape
    xp = np.full((n, max(rows, t + h), max(cols, left + w), c), fill, dtype=x.dtype)
    xp[:, t : t + h, left : left + w] = x
    for ky in range(kh):
        for kx in range(kw):
            y0, x0 = ky * dh, kx * dw
            yield ky, kx, xp[:, y0 : y0 + (oh - 1) * sh + 1 : sh, x0 : x0 + (ow - 1) * sw + 1 : sw]


def _transposed_conv(x: np.ndarray, w: np.ndarray, a: Conv, out_shape) -> np.ndarray:
    """Each input pixel scattered through every tap: output y = i * stride - pad + ky."""
    (sy, sx), (pt, pl) = a.strides, a.padding[:2]
    n, h, wd, _ = x.shape
    _, oh, ow, _ = out_shape
    _, _, kh, kw = w.shape
    big = np.zeros((n, (h - 1) * sy + kh, (wd - 1) * sx + kw, w.shape[1]))
    for ky in range(kh):
        for kx in range(kw):
            big[:, ky : ky + (h - 1) * sy + 1 : sy, kx : kx + (wd - 1) * sx + 1 : sx] += x @ w[:, :, ky, kx]
    y = np.zeros(out_shape)
    rows, cols = min(oh, big.shape[1] - pt), min(ow, big.shape[2] - pl)
    y[:, :rows, :cols] = big[:, pt : pt + rows, pl : pl + cols]
    return y


def _conv_terms(node: Node, x: np.ndarray, graph: Graph, out_shape, lanes: int | None = None):
    """A conv's or dense layer's products as ``(output channels, sum)`` pairs to add up, tap by tap
    over all input channels; with ``lanes``, in the order the TCU adds them: input block by input
    block of ``lanes`` channels, tap by tap, the centre tap first (a depthwise conv: tap by tap)."""
    a = node.attrs
    every = slice(None)
    if a.layout == "KM":  # a dense layer: (1, 1, B, K) @ (K, M)
        w = np.asarray(graph.constants[a.weight], dtype=np.float64)
        rows = x.reshape(-1, x.shape[-1])
        for k in range(0, w.shape[0], lanes or w.shape[0]):
            yield every, (rows[:, k : k + (lanes or w.shape[0])] @ w[k : k + (lanes or w.shape[0])]).reshape(out_shape)
        return
    w = conv_kernel(graph.constants, a).astype(np.float64)
    kh, kw = w.shape[2:]
    window = {
        (ky, kx): tap for ky, kx, tap in _window(x, a.padding, 0.0, out_shape[1:3], (kh, kw), a.strides, a.dilation)
    }
    taps = sorted(window, key=lambda t: t != (kh // 2, kw // 2)) if lanes else list(window)
    if a.groups != 1 and not grouped(graph.constants, a):  # depthwise: each channel its own sum
        for t in taps:
            yield every, window[t] * w[:, 0, t[0], t[1]]
        return
    per_in, per_out = w.shape[1], w.shape[0] // a.groups
    for g in range(a.groups):  # each group's outputs from its inputs (one group: a dense conv)
        outs, first = slice(g * per_out, (g + 1) * per_out), g * per_in
        # The array's input blocks this group reads (a block's channels sum in one MatMul).
        starts = range(first, first + per_in, lanes) if lanes else [first]
        blocks = [(c, min(first + per_in, (c // lanes + 1) * lanes if lanes else first + per_in)) for c in starts]
        for c0, c1 in blocks:
            for t in taps:
                yield outs, window[t][..., c0:c1] @ w[outs, c0 - first : c1 - first, t[0], t[1]].T


def _conv(node: Node, x: np.ndarray, graph: Graph, out_shape) -> np.ndarray:
    a = node.attrs
    if a.transposed:
        y = _transposed_conv(x, np.asarray(graph.constants[a.weight], dtype=np.float64), a, out_shape)
    elif a.weight is None:  # an identity (a bias add lowered as a depthwise conv)
        y = x.copy()
    elif a.layout == "KM":
        y = next(_conv_terms(node, x, graph, out_shape))[1]
    else:
        y = np.zeros(out_shape)
        for outs, term in _conv_terms(node, x, graph, out_shape):
            y[..., outs] += term
    if a.bias is not None:
        y = y + np.asarray(graph.constants[a.bias], dtype=np.float64).reshape(-1)
    return y


def _window_rows_peak(node: Node, x: np.ndarray, graph: Graph, start: np.ndarray, bias) -> float:
    """A depthwise conv's largest partial sum as window MatMuls add it up: each kernel row's taps
    summed in the array (the centre row's from the bias, the others' from zero), each row then added
    to the accumulators (holding ``start``: the shortcut), the centre row first."""
    a = node.attrs
    w = conv_kernel(graph.constants, a).astype(np.float64)
    kh, kw = w.shape[2:]
    taps = {(ky, kx): t for ky, kx, t in _window(x, a.padding, 0.0, start.shape[1:3], (kh, kw), a.strides, a.dilation)}
    peak, acc = 0.0, start
    for ky in sorted(range(kh), key=lambda r: r != kh // 2):
        row = bias if ky == kh // 2 else 0.0
        for kx in range(kw):
            row = row + taps[ky, kx] * w[:, 0, ky, kx]
            peak = max(peak, float(np.max(np.abs(row))))
        acc = acc + row
        peak = max(peak, float(np.max(np.abs(acc))))
    return peak


def accumulator_peak(
    node: Node, values: dict[str, np.ndarray], graph: Graph, lanes: int, window_rows: bool = False
) -> float:
    """The largest magnitude a (fused) conv's accumulators reach while the TCU sums its terms, where
    they saturate as the result does: from the shortcut (a residual) and the bias, then the
    products in the TCU's order (``_conv_terms``). The result alone for a transposed conv.
    ``window_rows`` (a core with the window MatMul): a depthwise conv's kernel rows may run as
    window MatMuls, whose partial sums (``_window_rows_peak``) count too."""
    a = node.attrs
    out_shape = graph.tensors[node.output].shape
    if a.transposed or a.weight is None:
        return float(np.max(np.abs(values[node.output])))
    y = np.zeros(out_shape)
    if a.residual:
        y = y + values[node.inputs[1]].reshape(out_shape)
    if a.bias is not None:
        y = y + np.asarray(graph.constants[a.bias], dtype=np.float64).reshape(-1)
    peak = float(np.max(np.abs(y))) if y.size else 0.0
    if (
        window_rows
        and a.groups != 1
        and not grouped(graph.constants, a)
        and 1 < conv_kernel(graph.constants, a).shape[3] <= lanes
    ):
        start = values[node.inputs[1]].reshape(out_shape) if a.residual else np.zeros(out_shape)
        bias = np.asarray(graph.constants[a.bias], dtype=np.float64).reshape(-1) if a.bias is not None else 0.0
        peak = max(peak, _window_rows_peak(node, values[node.inputs[0]], graph, start, bias))
    for outs, term in _conv_terms(node, values[node.inputs[0]], graph, out_shape, lanes):
        y[..., outs] += term
        peak = max(peak, float(np.max(np.abs(y[..., outs]))))
    return peak


def _pool(node: Node, x: np.ndarray, out_shape) -> np.ndarray:
    a = node.attrs
    is_max = node.op == "max_pool2d"
    taps = [
        tap
        for _, _, tap in _window(
            x, a.padding, -np.inf if is_max else np.nan, out_shape[1:3], a.kernel, a.strides, a.dilation
        )
    ]
    stack = np.stack(taps)
    if is_max:
        return stack.max(0)
    counted = stack
    if a.count_include_pad:  # explicit padding counts; a ceil-mode overhang does not
        t, left, b, r = a.padding
        box = np.ones((1, x.shape[1] + t + b, x.shape[2] + left + r, 1))
        window = _window(box, (0, 0, 0, 0), np.nan, out_shape[1:3], a.kernel, a.strides, a.dilation)
        counted = np.stack([tap for _, _, tap in window])
    return np.nansum(stack, 0) / np.sum(~np.isnan(counted), 0)


def halving_mean(x: np.ndarray, dt) -> np.ndarray:
    """The mean over h and w as the TCU's global pool computes it at data type ``dt``: pairs of
    vectors i and i + T/2 (T the next power of two of the pixels, zeros beyond them) replaced by
    the sum of their halves, each rounded (a MatMul with diagonal weights 1/2 each), down to one,
    then times T / pixels. Values of a few units lose up to a unit a level: a channel's small
    variance can vanish (rounded once, it would not)."""
    n, h, w, c = x.shape
    total = 1 << max(0, h * w - 1).bit_length()
    v = np.zeros((n, total, c), dtype=np.int64)
    v[:, : h * w] = dt.from_float(x.reshape(n, h * w, c))
    while v.shape[1] > 1:  # (half of each, rounded half to even: ``dt.times(v, 0.5)``, no sum can overflow)
        q = v >> 1
        halves = q + (v & q & 1)
        k = v.shape[1] // 2
        v = halves[:, :k] + halves[:, k:]
    if total != h * w:
        v = dt.times(v, dt.from_float(total / (h * w)))
    return dt.to_float(v).reshape(n, 1, 1, c)


def _resize_linear(node: Node, x: np.ndarray) -> np.ndarray:
    mh = np.asarray(node.attrs.rows, dtype=np.float64)
    mw = np.asarray(node.attrs.cols, dtype=np.float64)
    return np.einsum("oh,nhwc,pw->nopc", mh, x, mw, optimize=True)  # (in two contractions, not one loop)


# Two maps element by element (numpy broadcasts a per-channel vector (n, 1, 1, c) over h and w).
_BINARY = {"add": np.add, "sub": np.subtract, "max": np.maximum, "min": np.minimum, "mul": np.multiply}


def _node(node: Node, args: list[np.ndarray], graph: Graph, rounding=None) -> np.ndarray:
    out_shape = graph.tensors[node.output].shape
    a, op, x = node.attrs, node.op, args[0]
    if op == "conv2d":
        y = _conv(node, x, graph, out_shape)
        if a.residual:
            y = y + args[1]
    elif op == "bias_add":
        y = x + np.asarray(graph.constants[a.bias], dtype=np.float64).reshape(-1)
    elif op in _BINARY:
        y = _BINARY[op](x, args[1])
        if op == "mul" and a.shift:
            y = y * 2.0**a.shift
            if a.shift < 0 and rounding is not None:  # each operand rounded after its share of the shrink
                first, second = (rounding.to_float(rounding.from_float(v * 2.0**-k))
                                 for v, k in zip(args, (a.first, -a.shift - a.first)))  # fmt: skip
                y = first * second
    elif op in ACTIVATIONS:
        y = activation_meaning(op, x, a, rounding)
    elif op == "avg_pool2d" and rounding is not None:
        # The TCU sums each value pre-scaled by 2**-s (2**s >= the window), each rounded there.
        s = average_pool_shift(*a.kernel)
        y = _pool(node, rounding.to_float(rounding.from_float(x * 2.0**-s)), out_shape) * 2.0**s
    elif op in ("max_pool2d", "avg_pool2d"):
        y = _pool(node, x, out_shape)
    elif op == "global_avg_pool":
        y = x.mean(axis=(1, 2), keepdims=True) if rounding is None else halving_mean(x, rounding)
    elif op == "concat":
        y = np.concatenate(args, axis=3)
    elif op == "slice":
        y = x[..., a.begin : a.end]
    elif op == "pad":
        t, left, b, r = a.padding
        y = np.pad(x, ((0, 0), (t, b), (left, r), (0, 0)), constant_values=a.value)
    elif op in ("resize_nearest", "gather"):
        y = x[:, a.rows][:, :, a.cols]
    elif op == "resize_linear":
        y = _resize_linear(node, x)
    elif op == "copy":
        y = x.reshape(out_shape)
    else:
        raise ValueError(f"no float meaning for graph op {op!r}")
    for ep, ea in node.epilogue:
        y = activation_meaning(ep, y, ea, rounding)
    return y.reshape(out_shape)


def _view(graph: Graph, values: dict[str, np.ndarray], view: str) -> np.ndarray:
    src, kind = graph.views[view]
    x = values[src]
    shape = graph.tensors[view].shape
    if kind == "flatten":  # NCHW flatten of an (n, h, w, c) map: (n, c*h*w) as one row of n pixels
        return x.transpose(0, 3, 1, 2).reshape(shape)
    if isinstance(kind, Interleave):
        return x[:, kind.py :: kind.sy, kind.px :: kind.sx][:, : shape[1], : shape[2]]
    if isinstance(kind, Channels):
        return x[..., kind.first : kind.first + shape[3]]
    return x.reshape(shape)


def on_grid(dt, value, extra_bits: int = 0) -> np.ndarray:
    """``value`` on ``dt``'s grid made ``2**extra_bits`` times finer, saturated."""
    if not extra_bits:
        return dt.to_float(dt.from_float(value))
    unit = 2.0 ** (dt.binary_point + extra_bits)
    return np.clip(np.floor(np.asarray(value, dtype=np.float64) * unit + 0.5) / unit, dt.min_float, dt.max_float)


def interpret(graph: Graph, inputs: dict[str, np.ndarray], rounding=None) -> dict[str, np.ndarray]:
    """Every tensor's float value (float64, (n, h, w, c)) for ``inputs`` given by graph tensor name.

    ``rounding`` (a ``DataType``): also round every input, constant and node result to it, saturating,
    and add to each conv's result the rounding of its products as noise of the same variance (K
    products each uniform over one unit; seeded): a model of the TCU's numbers, not bit-exact."""
    noise = np.random.default_rng(0)
    if rounding is not None:
        # A layer's weights in two parts (``Conv.residue``) keep that many more bits.
        finer = {n.attrs.weight: n.attrs.residue for n in graph.nodes if n.op == "conv2d" and n.attrs.residue}
        constants = [on_grid(rounding, c, finer.get(i, 0)) for i, c in enumerate(graph.constants)]
        graph = Graph(graph.tensors, graph.nodes, graph.inputs, graph.outputs, constants, graph.views)
        inputs = {k: rounding.to_float(rounding.from_float(v)) for k, v in inputs.items()}
    values = {name: np.asarray(inputs[name], dtype=np.float64).reshape(graph.tensors[name].shape)
              for name in graph.inputs}  # fmt: skip
    pending_views = dict(graph.views)

    def resolve(name: str) -> np.ndarray:
        if name not in values and name in pending_views:
            src = pending_views.pop(name)[0]
            resolve(src)
            values[name] = _view(graph, values, name)
        return values[name]

    # Views a node writes (a phase, a concat's input): computed in place, into their source.
    in_place = {v: (src, k) for v, (src, k) in graph.views.items() if isinstance(k, (Interleave, Channels))}
    written = {node.output for node in graph.nodes}
    while True:  # and a view whose own views are written (a concat within a concat)
        more = {src for v, (src, _) in in_place.items() if v in written and src in in_place} - written
        if not more:
            break
        written |= more
    phases = {v: view for v, view in in_place.items() if v in written}
    for v in phases:
        pending_views.pop(v)

    def write_phase(name: str) -> None:
        src, k = phases[name]
        if src not in values:
            values[src] = np.zeros(graph.tensors[src].shape)
        if isinstance(k, Channels):
            values[src][..., k.first : k.first + values[name].shape[3]] = values[name]
        else:
            values[src][:, k.py :: k.sy, k.px :: k.sx] = values[name]
        if src in phases:  # a view of a view: on into its source
            write_phase(src)

    for node in graph.nodes:
        args = [resolve(t) for t in node.inputs]
        values[node.output] = _node(node, args, graph, rounding)
        if rounding is not None:
            y = values[node.output]
            if node.op == "conv2d" and node.attrs.weight is not None:
                terms = kernel_terms(graph.constants, node.attrs)
                y = y + noise.standard_normal(y.shape) * (rounding.resolution * np.sqrt(terms / 12))
            values[node.output] = rounding.to_float(rounding.from_float(y))
        second = node.attrs.second if node.op == "conv2d" else None
        if second:
            sub = Node("conv2d", [node.output], second.output, Conv(second.weight, second.bias, groups=second.groups),
                       epilogue=list(second.epilogue))  # fmt: skip
            values[second.output] = _node(sub, [values[node.output]], graph)
        if node.output in phases:
            write_phase(node.output)
    for name in list(pending_views):
        resolve(name)
    return values
