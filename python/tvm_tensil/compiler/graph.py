"""The compiler's graph: what the frontend hands to the scheduler (the HIR's input).

Independent of TVM: a partition is a list of ``Node``s in topological order over named
``Tensor``s. Every tensor is a feature map ``(n, h, w, c)``: a dense input (B, K) is
(B, 1, 1, K). Constants are referred to by index into the partition's constant list, so the
packing of weights into DRAM1 can be replayed from the constants alone (at build time and
again when the runtime receives the weights).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..packing import patch_kernel, phase_kernel, weight_blocks
from .elementwise import ACTIVATIONS, NoAttrs


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, int, int, int]  # (n, h, w, c)

    @property
    def n(self) -> int:
        return self.shape[0]

    @property
    def h(self) -> int:
        return self.shape[1]

    @property
    def w(self) -> int:
        return self.shape[2]

    @property
    def c(self) -> int:
        return self.shape[3]


@dataclass(frozen=True)
class SecondOutput:
    """A channel affine (a depthwise 1x1 conv with bias) and its activations, applied to a conv's
    result while it is still in local memory: a second output of the conv."""

    output: str
    weight: int
    bias: int | None
    groups: int
    epilogue: tuple = ()


@dataclass(frozen=True)
class Conv:
    """A conv (also a dense layer, a depthwise conv, and a standalone bias add: no weight).

    ``weight``/``bias``: constant indices (the weight (O, I/groups, KH, KW), or (K, M) for a dense
    layer's matmul: ``layout == "KM"``). ``residual``: a second input added to the result (a fused
    residual add). ``flatten``: (c, h, w) of an NCHW map the dense layer reads flattened in place.
    ``patches``: the input is stored as this conv's windows (``placement.Patches``): a 1x1 conv
    over ``kh * kw * c`` channels, its weight's rows in that order (``packing.patch_kernel``).

    ``transposed``: a transposed conv: the weight is (I, O, KH, KW) and output pixel ``y`` receives
    input pixel ``i`` through tap ``ky`` where ``y = i * stride - pad_top + ky``. Before scheduling it
    becomes one conv per output phase (``expand_transposed``): ``phase`` = (sy, sx, ry, rx) is such
    a conv, over the taps ``ky = ry + sy * j`` of the transposed weight, flipped.

    ``residue``: the weights in two parts, each a MatMul: the weights rounded to the data type,
    and what that rounding left, ``2**residue`` times finer, whose result the SIMD unit brings to
    the output's scale before the first part adds to it (0: one part).
    """

    weight: int | None
    bias: int | None = None
    strides: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    groups: int = 1
    layout: str = "OIHW"
    residual: bool = False
    flatten: tuple[int, int, int] | None = None
    second: SecondOutput | None = None
    transposed: bool = False
    phase: tuple[int, int, int, int] | None = None
    residue: int = 0
    patches: bool = False
    # The output channel blocks [first, end) this conv computes: a depthwise conv lowered a group of
    # channel blocks at a time (``schedule.conv``), its weights and bias packed for those blocks only.
    blocks: tuple[int, int] | None = None


def conv_kernel(constants, attrs: Conv) -> np.ndarray:
    """The weight a conv multiplies by: (O, I/groups, KH, KW), or (K, M) for a dense layer; a
    transposed conv's phase picks its taps from the transposed weight."""
    w = np.asarray(constants[attrs.weight])
    if attrs.patches:
        return patch_kernel(w)
    return phase_kernel(w, attrs.phase) if attrs.phase is not None else w


def grouped(constants, attrs: Conv) -> bool:
    """A grouped conv: several groups, not one input channel per output channel (depthwise)."""
    if attrs.weight is None or attrs.groups == 1:
        return False
    o, i_g = np.shape(constants[attrs.weight])[:2]
    return not (i_g == 1 and attrs.groups == o)


def kernel_size(constants, attrs: Conv) -> tuple[int, int]:
    """(KH, KW) of the conv's window (a dense layer's: 1x1)."""
    if attrs.layout == "KM" or attrs.patches:
        return 1, 1
    kh, kw = np.shape(constants[attrs.weight])[2:]
    if attrs.phase is not None:
        sy, sx, ry, rx = attrs.phase
        return -(-(kh - ry) // sy), -(-(kw - rx) // sx)
    return int(kh), int(kw)


def kernel_terms(constants, attrs: Conv) -> float:
    """Products summed into each output value (a transposed conv's: on average over its phases)."""
    w = np.shape(constants[attrs.weight])
    if attrs.layout == "KM":
        return float(w[0])
    if attrs.transposed:
        return float(w[0] * w[2] * w[3]) / (attrs.strides[0] * attrs.strides[1])
    if attrs.patches:
        return float(w[1] * w[2] * w[3])
    kh, kw = kernel_size(constants, attrs)
    return float(w[1] * kh * kw)


def average_pool_shift(kh: int, kw: int) -> int:
    """The TCU sums an average pool's values pre-scaled by ``2**-s`` (``2**s`` >= the window), so
    no partial sum leaves the data type's range; returns ``s``."""
    return max(0, math.ceil(math.log2(kh * kw)))


def weight_vectors(constants, attrs: Conv, n: int) -> int:
    """DRAM1 vectors a conv's weights take in one part on an ``n``-wide array: blocks of n + 1
    vectors per (output block, input block, tap); a depthwise conv's blocks are diagonal (one
    per output block and tap); a grouped conv's only for the input blocks its groups read."""
    if attrs.weight is None:
        return 0
    w = np.shape(conv_kernel(constants, attrs) if attrs.patches else constants[attrs.weight])
    if attrs.layout == "KM":  # (K, M): a 1x1 conv of K inputs and M outputs
        return math.ceil(w[1] / n) * math.ceil(w[0] / n) * (n + 1)
    if attrs.transposed:  # (I, O, KH, KW); its phases share the taps out
        return math.ceil(w[1] / n) * math.ceil(w[0] / n) * w[2] * w[3] * (n + 1)
    kh, kw = kernel_size(constants, attrs)
    return weight_blocks(w[0], w[1], attrs.groups, n) * kh * kw * (n + 1)


@dataclass(frozen=True)
class Interleave:
    """A view: one phase of a larger map, pixel (y, x) of the view being pixel
    (sy * y + py, sx * x + px) of its source (a transposed conv's phases write their results in
    place; a strided 1x1 pool's readers read its input in place)."""

    sy: int
    sx: int
    py: int
    px: int


@dataclass(frozen=True)
class Channels:
    """A view: channels ``first`` on of its source, starting on a channel block (a slice read in
    place, or a concat's input written in place)."""

    first: int


@dataclass(frozen=True)
class Product:
    """Two maps multiplied element by element (the second may be a per-channel vector (n, 1, 1, c)
    broadcast over h and w). ``shift``: the product's power of two, when its inputs and result are
    stored at scales whose exponents do not add up (2**shift times the product is stored)."""

    shift: int = 0
    # Of a shrinking product's powers of two (shift < 0), how many the first operand takes before
    # the product (the second takes the rest): the one with more bits to spare gives more.
    first: int = 0


@dataclass(frozen=True)
class Pool:
    kernel: tuple[int, int]
    strides: tuple[int, int]
    padding: tuple[int, int, int, int]
    dilation: tuple[int, int] = (1, 1)
    count_include_pad: bool = False


@dataclass(frozen=True)
class Pad:
    padding: tuple[int, int, int, int]
    value: float


@dataclass(frozen=True)
class Slice:
    begin: int
    end: int


@dataclass(frozen=True)
class ResizeNearest:
    """The source row and column of every output row and column."""

    rows: tuple[int, ...]
    cols: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class ResizeLinear:
    """Separable interpolation matrices: rows (oh x h), cols (ow x w)."""

    rows: Any
    cols: Any


# The ops a graph holds and each one's attributes (what ``Node.attrs`` holds). "add", "sub", "max",
# "min" and "mul" combine two maps element by element (the second of the same shape, or a
# per-channel vector (n, 1, 1, c) broadcast over h and w); "bias_add" adds a constant vector over
# channels; "concat" joins its inputs along channels; "global_avg_pool" means over h and w; "copy"
# is a layout-preserving reshape.
ATTRS: dict[str, type] = {
    "conv2d": Conv,
    "bias_add": Conv,
    "add": NoAttrs,
    "sub": NoAttrs,
    "max": NoAttrs,
    "min": NoAttrs,
    "mul": Product,
    **{op: activation.attrs for op, activation in ACTIVATIONS.items()},
    "max_pool2d": Pool,
    "avg_pool2d": Pool,
    "global_avg_pool": NoAttrs,
    "concat": NoAttrs,
    "slice": Slice,
    "pad": Pad,
    "resize_nearest": ResizeNearest,
    "gather": ResizeNearest,  # (pixels picked by row and column: a crop, a flip, a reflect pad)
    "resize_linear": ResizeLinear,
    "copy": NoAttrs,
}


def attrs_for(op: str, given) -> Any:
    """``given`` (the op's attributes, or a mapping of them) as the op's attribute value."""
    cls = ATTRS.get(op)
    if cls is None:
        raise ValueError(f"unknown graph op {op!r}; known: {', '.join(ATTRS)}")
    if isinstance(given, cls):
        return given
    values = dict(given or {})
    if cls is Conv:
        for key in ("strides", "dilation", "padding", "flatten"):
            if values.get(key) is not None:
                values[key] = tuple(values[key])
        if isinstance(values.get("second"), dict):
            second = dict(values["second"])
            second.epilogue = tuple((op2, attrs_for(op2, a2)) for op2, a2 in second.epilogue)
            values["second"] = SecondOutput(**second)
        values.setdefault("weight", None)
    if cls is ResizeNearest:
        values = {k: tuple(int(v) for v in values[k]) for k in ("rows", "cols")}
    if cls is Pool:
        for key in ("kernel", "strides", "padding", "dilation"):
            if key in values:
                values[key] = tuple(values[key])
    try:
        return cls(**values)
    except TypeError as e:
        raise ValueError(f"graph op {op!r}: {e}") from None


@dataclass
class Node:
    """One operation. ``op`` names it (a key of ``ATTRS``); ``attrs`` holds its parameters, a value of the
    op's class in ``ATTRS`` (a mapping given here is read into it).

    Constant operands are attributes holding a constant index (``weight``, ``bias``).
    ``epilogue`` lists element-wise ops fused onto the output in the accumulators: (op, attrs).
    """

    op: str
    inputs: list[str]
    output: str
    attrs: Any = None
    epilogue: list[tuple[str, Any]] = field(default_factory=list)
    source_ops: list[str] = field(default_factory=list)  # the Relax ops this node came from

    def __post_init__(self):
        self.attrs = attrs_for(self.op, self.attrs)
        self.epilogue = [(op, attrs_for(op, a)) for op, a in self.epilogue]


def layer_kind(node: Node) -> str:
    """What a user calls the node's layer: a dense layer is lowered as a 1x1 conv over a row of
    ``batch`` pixels, but it is still a dense layer."""
    if node.op == "conv2d" and node.attrs.layout == "KM":
        return "dense"
    if node.op == "conv2d" and (node.attrs.transposed or node.attrs.phase):
        return "conv_transpose"
    return node.op


EPILOGUE_OPS = tuple(ACTIVATIONS)  # what fuses onto the op that produces its input


@dataclass
class Graph:
    """A partition: tensors, nodes in topological order, inputs and outputs."""

    tensors: dict[str, Tensor]
    nodes: list[Node]
    inputs: list[str]
    outputs: list[str]
    constants: list[Any]  # numpy arrays (float32), indexed by the nodes' attrs
    # Views: tensor -> (the tensor whose DRAM0 storage it shares, "reshape" or "flatten").
    # "reshape": the same pixels and channels under another shape ((n,1,1,c) <-> (1,1,n,c)).
    # "flatten": an NCHW feature map flattened for a dense layer (see compile._flatten_view).
    # An ``Interleave``: one phase of its source (written in place by the conv that makes it, or
    # read in place). ``Channels``: a channel range of its source (likewise).
    views: dict[str, tuple[str, Any]] = field(default_factory=dict)

    def consumers(self, name: str) -> list[Node]:
        return [n for n in self.nodes if name in n.inputs]

    def in_place(self, node: Node) -> bool:
        """Whether ``node``'s result is a view and it has nothing to compute: a slice or a strided
        1x1 pool read in place from its input, a concat whose inputs were written into it."""
        if node.op in ("slice", "max_pool2d", "avg_pool2d"):
            return self.views.get(node.output, (None,))[0] == node.inputs[0]
        if node.op == "concat":
            return all(self.views.get(t, (None,))[0] == node.output for t in node.inputs)
        return False
