"""The compiler's graph: what the frontend hands to the scheduler (the HIR's input).

Independent of TVM: a partition is a list of ``Node``s in topological order over named
``Tensor``s. Every tensor is a feature map ``(n, h, w, c)``: a dense input (B, K) is
(B, 1, 1, K). Constants are referred to by index into the partition's constant list, so the
packing of weights into DRAM1 can be replayed from the constants alone (at build time and
again when the runtime receives the weights).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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


@dataclass
class Node:
    """One operation. ``op`` names it (see ``OPS``); ``attrs`` holds its parameters.

    Constant operands are ``attrs`` entries holding a constant index (``weight``, ``bias``).
    ``epilogue`` lists element-wise ops fused onto the output in the accumulators.
    """

    op: str
    inputs: list[str]
    output: str
    attrs: dict[str, Any] = field(default_factory=dict)
    epilogue: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    source_ops: list[str] = field(default_factory=list)  # the Relax ops this node came from


def layer_kind(node: Node) -> str:
    """What a user calls the node's layer: a dense layer is lowered as a 1x1 conv over a row of
    ``batch`` pixels, but it is still a dense layer."""
    if node.op == "conv2d" and node.attrs.get("layout") == "KM":
        return "dense"
    return node.op


# The node kinds the scheduler lowers, with the attrs each takes.
OPS = {
    "conv2d": "weight (O, I/groups, KH, KW), bias?, strides, dilation, padding (t, l, b, r), groups; "
    "residual: a second input added to the result (a fused residual add)",
    "add": "two tensors of one shape",
    "bias_add": "bias: a constant vector over channels",
    "relu": "",
    "leaky_relu": "alpha",
    "clip": "lo, hi",
    "max_pool2d": "kernel, strides, dilation, padding",
    "avg_pool2d": "kernel, strides, dilation, padding, count_include_pad",
    "global_avg_pool": "mean over h and w",
    "concat": "inputs concatenated along channels",
    "slice": "channels begin .. end-1 of the input",
    "pad": "padding (t, l, b, r) on h and w with a constant value",
    "resize_nearest": "rows, cols: the source row/column of every output row/column",
    "resize_linear": "rows (oh x h), cols (ow x w): separable interpolation matrices",
    "copy": "layout-preserving reshape (no data movement on the host side)",
}

EPILOGUE_OPS = ("relu", "leaky_relu", "clip")


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
    views: dict[str, tuple[str, str]] = field(default_factory=dict)

    def consumers(self, name: str) -> list[Node]:
        return [n for n in self.nodes if name in n.inputs]
