"""Per-tensor power-of-two scales: every tensor its own binary point within the data type.

A tensor with shift ``k`` is stored as ``value * 2**k`` in the architecture's fixed-point type.
The hardware does not change: a MatMul of an input at shift ``a`` by weights multiplied by
``2**(c - a)`` leaves its accumulators at shift ``c``, so a conv or dense layer moves its result
to any shift for free, through its weights and bias (exact: powers of two). Every other op keeps
its input's shift (moves, comparisons, adds of two tensors, pools, selections), so the tensors
it joins form a *group* that shares one shift (``scale_groups``). A group's shift is the largest
that keeps its calibrated range, with headroom, inside the data type (``choose_shifts``);
``apply_shifts`` rewrites the compiled graph: scaled copies of the weights and biases, the
constants of clips and pads, and the shift of each partition input and output (the runtime
converts with it).

Scaled weights are *derived constants*: ``(source constant index, shift)``. The runtime receives
the model's own float weights and derives the same arrays before packing them, so the weight
image it builds is the one built here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from ..arch import Architecture
from .graph import Graph, Node

# Values stay below the data type's largest by this factor: room for partial sums, which can
# exceed the final result, and for inputs a little beyond those seen in calibration.
HEADROOM = 2.0
# Shifts are kept within this many powers of two of the data type's own binary point.
MAX_SHIFT = 24


@dataclass(frozen=True)
class Scaling:
    """Each tensor's shift (``value * 2**shift`` is stored), and the derived constants the scaled
    graph refers to: entry ``j`` is constant ``len(constants) + j``, ``source * 2**shift``."""

    shifts: dict[str, int] = field(default_factory=dict)
    derived: tuple[tuple[int, int], ...] = ()

    @property
    def trivial(self) -> bool:
        return not any(self.shifts.values())


def scale_groups(graph: Graph) -> dict[str, str]:
    """Tensor -> a representative of the tensors that must share its shift."""
    parent = {t: t for t in graph.tensors}

    def find(t: str) -> str:
        while parent[t] != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t

    def union(*ts: str) -> None:
        roots = [find(t) for t in ts]
        for r in roots[1:]:
            parent[r] = roots[0]

    for view, (src, _) in graph.views.items():
        union(view, src)
    for node in graph.nodes:
        if node.op != "conv2d":
            union(node.output, *node.inputs)
        elif node.attrs.get("residual"):  # the accumulators start from the shortcut
            union(node.output, node.inputs[1])
        elif node.attrs.get("weight") is None:  # an identity with bias
            union(node.output, node.inputs[0])
    return {t: find(t) for t in graph.tensors}


def _max_abs(a) -> float:
    a = np.asarray(a, dtype=np.float64)
    return float(np.max(np.abs(a))) if a.size else 0.0


def _shift_for(limit: float, value: float) -> int:
    """The largest k with ``value * 2**k <= limit`` (0 for a zero value)."""
    if value <= 0:
        return 0
    return int(np.clip(math.floor(math.log2(limit / value)), -MAX_SHIFT, MAX_SHIFT))


@dataclass(frozen=True)
class TensorStats:
    """What calibration saw of a tensor: its largest magnitude and its mean square."""

    peak: float
    mean_square: float


def choose_shifts(graph: Graph, stats: dict[str, TensorStats], arch: Architecture) -> dict[str, int]:
    """Each tensor's shift from calibration ``stats``, one per group: the largest shifts such that

    - a group's peak (and any bias added in its accumulators), times ``HEADROOM``, fits the data
      type;
    - no layer's scaled weights saturate;
    - no layer's weights keep fewer bits than at the data type's own binary point (shift 0 on both
      sides), unless their largest still uses all but two bits of the data type.

    Each condition bounds one shift by another plus a constant (a layer's weights are multiplied
    by ``2**(out - in)``), so the largest solution is found by lowering shifts until all hold."""
    limit = arch.data_type.max_float
    bp, width = arch.data_type.binary_point, arch.data_type.width
    group = scale_groups(graph)
    peak: dict[str, float] = {}
    for t, g in group.items():
        peak[g] = max(peak.get(g, 0.0), stats[t].peak if t in stats else 0.0)
    for node in graph.nodes:
        if node.op in ("conv2d", "bias_add") and node.attrs.get("bias") is not None:
            g = group[node.output]
            peak[g] = max(peak[g], _max_abs(graph.constants[node.attrs["bias"]]))
    shift = {g: _shift_for(limit / HEADROOM, v) for g, v in peak.items()}
    # (input group, output group, smallest and largest weight shift out - in)
    bounds = []
    for n in graph.nodes:
        if n.op == "conv2d" and n.attrs.get("weight") is not None:
            w = _max_abs(graph.constants[n.attrs["weight"]])
            if w > 0:
                lowest = min(0, math.floor(math.log2(2.0 ** (width - 2) / (w * 2.0**bp))))
                bounds.append((group[n.inputs[0]], group[n.output], lowest, _shift_for(limit, w)))
    changed = True
    while changed:  # shifts only come down, and every bound can hold at once: this ends
        changed = False
        for gin, gout, lowest, highest in bounds:
            if shift[gout] > shift[gin] + highest:
                shift[gout], changed = shift[gin] + highest, True
            if shift[gin] > shift[gout] - lowest:
                shift[gin], changed = shift[gout] - lowest, True
    return {t: shift[g] for t, g in group.items()}


class _Derived:
    """Derived constants, each ``(source, shift)`` once."""

    def __init__(self, constants: Sequence[np.ndarray]):
        self.constants = list(constants)
        self.base = len(constants)
        self.entries: list[tuple[int, int]] = []

    def ref(self, index: int | None, shift: int) -> int | None:
        if index is None or shift == 0:
            return index
        key = (int(index), int(shift))
        if key not in self.entries:
            self.entries.append(key)
            self.constants.append(np.asarray(self.constants[index], dtype=np.float32) * np.float32(2.0**shift))
        return self.base + self.entries.index(key)


def _scaled_epilogue(epilogue, k: int):
    out = []
    for op, attrs in epilogue:
        if op == "clip":
            attrs = {**attrs, "lo": attrs["lo"] * 2.0**k, "hi": attrs["hi"] * 2.0**k}
        out.append((op, attrs))
    return out


def _scaled_node(node: Node, shifts: dict[str, int], derived: _Derived) -> Node:
    a = dict(node.attrs)
    k = shifts[node.output]
    if node.op == "conv2d":
        a["weight"] = derived.ref(a.get("weight"), k - shifts[node.inputs[0]])
        a["bias"] = derived.ref(a.get("bias"), k)
        if a.get("second"):
            s = dict(a["second"])
            k2 = shifts[s["output"]]
            s["weight"] = derived.ref(s["weight"], k2 - k)
            s["bias"] = derived.ref(s.get("bias"), k2)
            s["epilogue"] = _scaled_epilogue(s["epilogue"], k2)
            a["second"] = s
    elif node.op == "bias_add":
        a["bias"] = derived.ref(a["bias"], k)
    elif node.op == "pad":
        a["value"] = a["value"] * 2.0**k
    elif node.op == "clip":
        a["lo"], a["hi"] = a["lo"] * 2.0**k, a["hi"] * 2.0**k
    return replace(node, attrs=a, epilogue=_scaled_epilogue(node.epilogue, k))


def apply_shifts(graph: Graph, shifts: dict[str, int]) -> tuple[Graph, Scaling]:
    """The graph computing every tensor at its shift. With every shift 0 it is ``graph`` itself."""
    shifts = {t: int(shifts.get(t, 0)) for t in graph.tensors}
    if not any(shifts.values()):
        return graph, Scaling(shifts)
    derived = _Derived(graph.constants)
    nodes = [_scaled_node(n, shifts, derived) for n in graph.nodes]
    scaled = Graph(graph.tensors, nodes, graph.inputs, graph.outputs, derived.constants, dict(graph.views))
    return scaled, Scaling(shifts, tuple(derived.entries))


def derive_constants(constants: Sequence[np.ndarray], derived: Sequence[Sequence[int]]) -> list:
    """The model's constants followed by the derived ones (as ``apply_shifts`` made them)."""
    out = list(constants)
    for source, shift in derived:
        out.append(np.asarray(out[int(source)], dtype=np.float32) * np.float32(2.0 ** int(shift)))
    return out
