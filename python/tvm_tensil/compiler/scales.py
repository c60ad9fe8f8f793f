"""Per-tensor power-of-two scales: every tensor its own binary point within the data type.

A tensor with shift ``k`` is stored as ``value * 2**k`` in the architecture's fixed-point type.
The hardware does not change: a MatMul of an input at shift ``a`` by weights multiplied by
``2**(c - a)`` leaves its accumulators at shift ``c``, so a conv or dense layer moves its result
to any shift for free, through its weights and bias (exact: powers of two). Every other op keeps
its input's shift (moves, comparisons, adds of two tensors, pools, selections), so the tensors
it joins form a *group* that shares one shift (``scale_groups``). ``choose_scales`` picks the
groups' shifts from calibration: the largest that keep each range, with headroom, inside the data
type, or a balance of activation bits against weight bits, whichever a simulation on calibration
samples finds closer to float (docs/compiler.md, "Scales"), each with its layers' weights rounded
for their outputs (``rounding.py``). ``apply_shifts`` rewrites the graph:
scaled copies of the weights and biases, the constants of clips and pads, and the shift of each
partition input and output (the runtime converts with it).

Scaled weights are *derived constants*: ``(source constant index, shift)``. The runtime receives
the partition's float weights (as ``rounding.py`` rounded them, when it did) and derives the same
arrays before packing them, so the weight image it builds is the one built here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from ..arch import Architecture
from .elementwise import ACTIVATIONS, changes_scale
from .elementwise import scaled as scaled_epilogue
from .graph import Graph, Node, kernel_terms, weight_vectors
from .interpret import interpret
from .rounding import LayerInputs, RoundedWeights, round_weights, with_weights

# Values stay below the data type's largest by this factor: room for partial sums, which can
# exceed the final result, and for inputs a little beyond those seen in calibration.
HEADROOM = 2.0
# Calibration also tries this smaller factor, kept where the simulation finds it better.
TIGHT_HEADROOM = 1.25
_TIGHT = f", headroom {TIGHT_HEADROOM:g}"  # (the suffixes of those options' names)
_FINER = ", finer accumulators"
# Shifts are kept within this many powers of two of the data type's own binary point.
MAX_SHIFT = 24


@dataclass(frozen=True)
class Scaling:
    """Each tensor's shift (``value * 2**shift`` is stored), and the derived constants the scaled
    graph refers to: entry ``j`` is constant ``len(constants) + j``, ``source * 2**shift``."""

    shifts: dict[str, int] = field(default_factory=dict)
    derived: tuple[tuple[int, int], ...] = ()
    base: int = 0  # the number of the model's own constants

    def source(self, index: int) -> int:
        """The model's constant a (possibly derived) constant index comes from."""
        return self.derived[index - self.base][0] if self.derived and index >= self.base else index


def scale_groups(graph: Graph, finer: bool = False) -> dict[str, str]:
    """Tensor -> a representative of the tensors that must share its shift. A rescale (a layer's
    accumulators at a finer scale than its result's) joins its input and result unless ``finer``."""
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
        if node.op == "mul":  # a product's scale is its inputs' scales times each other
            continue
        if node.op in ACTIVATIONS and changes_scale(node.op) and (finer or node.op != "rescale"):
            continue  # its constants take x from its scale to the result's
        if node.op != "conv2d":
            union(node.output, *node.inputs)
        elif node.attrs.residual:  # the accumulators start from the shortcut
            union(node.output, node.inputs[1])
        elif node.attrs.weight is None:  # an identity with bias
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
    """What calibration saw of a tensor: its largest magnitude and its mean square, and (made by a
    conv or dense layer) the largest its accumulators reach while they sum the layer's terms: they
    hold the partial sums at the tensor's scale and saturate there."""

    peak: float
    mean_square: float
    accumulated: float = 0.0

    @property
    def held(self) -> float:
        """The largest magnitude the tensor's scale must hold."""
        return max(self.peak, self.accumulated)


def candidate_shifts(
    graph: Graph,
    stats: dict[str, TensorStats],
    arch: Architecture,
    headrooms: tuple[float, ...] = (HEADROOM,),
    finer: bool = False,
) -> dict[str, dict[str, int]]:
    """Two choices of every tensor's shift from calibration ``stats`` per headroom, one shift per
    group (named ``largest`` and ``balanced``, with ``, headroom h`` for any but ``HEADROOM``, and
    ``, finer accumulators`` with ``finer``: each rescale's input its own group, at most as coarse
    as its result):

    - ``largest``: the largest shifts such that a group's peak (and any bias added in its
      accumulators), times the headroom, fits the data type, no layer's scaled weights saturate and
      no factor of a HardSwish computed as x times it does;
    - ``balanced``: from there, shifts come down where the modelled rounding noise says a layer's
      weights gain more than its input loses."""
    group = scale_groups(graph, finer)
    layers = [
        _Layer(n, group, graph, stats, arch)
        for n in graph.nodes
        if n.op == "conv2d" and n.attrs.weight is not None and _max_abs(graph.constants[n.attrs.weight]) > 0
    ]
    signal: dict[str, float] = {}
    for t, g in group.items():
        signal[g] = max(signal.get(g, 0.0), stats[t].mean_square if t in stats else 0.0)
    # (input group, output group, most): the output's shift at most the input's plus ``most``.
    bounds = [(layer.gin, layer.gout, layer.highest) for layer in layers]
    for n in graph.nodes:
        if n.op == "hard_sigmoid" and n.attrs.swish and not n.attrs.symmetric:  # its factor's top fits
            bounds.append((group[n.inputs[0]], group[n.output], _shift_for(arch.data_type.max_float, n.attrs.hi)))
        if n.op == "rescale":  # to a coarser scale only: one multiply rounds once
            bounds.append((group[n.inputs[0]], group[n.output], 0))
    options = {}
    for headroom in headrooms:
        largest = _bounded(_top_shifts(graph, group, stats, arch, headroom), bounds)
        balanced = _bounded(_balanced(largest, layers, signal), bounds)
        suffix = ("" if headroom == HEADROOM else f", headroom {headroom:g}") + (_FINER if finer else "")
        for name, shifts in (("largest", largest), ("balanced", balanced)):
            options[name + suffix] = {t: shifts[g] for t, g in group.items()}
    return options


@dataclass(frozen=True)
class ScaleChoice:
    """Calibration's decision: every tensor's shift, the layer weights rounded for their outputs
    at those shifts (``rounding``; None: nearest rounding), the layers computed with weights in two
    parts (``residues``: layer output -> the residue's extra bits), which option it was, and each
    option's simulated error (relative mean square of the outputs' error), the reason for the
    choice, and its largest error as a share of the outputs' range (``worst``)."""

    option: str
    shifts: dict[str, int]
    rounding: RoundedWeights | None
    errors: dict[str, float]
    residues: dict[str, int] = field(default_factory=dict)
    worst: dict[str, float] = field(default_factory=dict)
    # With residues: the choice without them, for when the program's weights do not fit DRAM1.
    one_part: ScaleChoice | None = None


def choose_scales(
    graph: Graph,
    stats: dict[str, TensorStats],
    arch: Architecture,
    samples=(),
    inputs: LayerInputs | None = None,
    error_target: float | None = None,
) -> ScaleChoice:
    """Of the ``candidate_shifts`` and no shifts at all (the data type as it is), each with nearest
    rounding and, when ``inputs`` gives the layers' calibration inputs, with weights rounded for
    their outputs, the one with the smallest simulated error on ``samples`` (inputs by graph input
    name): calibration is never worse than none there. Without samples, the balanced candidate.
    When the largest simulated error misses ``error_target`` (a share of the outputs' range) over
    ``RESIDUE_MARGIN``, also the candidates with finer accumulators (each rescale's input its own
    group), when the graph has rescales; and when those with the usual headroom still miss it, those
    with the tighter one (``TIGHT_HEADROOM``), which saturate sooner on inputs beyond the samples'.
    Never without a target.

    When the choice's largest simulated error misses that too, layers get weights in two parts
    (``choose_residues``)."""
    if not samples:
        return ScaleChoice("balanced", candidate_shifts(graph, stats, arch)["balanced"], None, {})
    options: dict[str, tuple[dict[str, int], RoundedWeights | None]] = {}
    errors: dict[str, float] = {}
    worst: dict[str, float] = {}
    wants = [interpret(graph, sample) for sample in samples]

    def simulated(candidates: dict[str, dict[str, int]]) -> None:
        for name, shifts in candidates.items():
            if any(shifts == s for s, _ in options.values()):
                continue
            names = [f"{name}, nearest rounding"]
            if inputs:
                options[name] = (shifts, round_weights(graph, shifts, inputs, arch.data_type))
                names.insert(0, name)
            options[names[-1]] = (shifts, None)
            for n in names:
                shifts, rounded = options[n]
                e = simulate(graph, shifts, arch, samples, rounded.weights if rounded else None, wants, stats)
                errors[n], worst[n] = e.mean_square, e.worst

    simulated(candidate_shifts(graph, stats, arch, (HEADROOM, TIGHT_HEADROOM)))
    # The scales as they are, where they hold every range: the simulation saturates node results
    # but not the partial sums the accumulators (and a window MatMul's array) hold on the way.
    if all(s.held <= arch.data_type.max_float for s in stats.values()):
        simulated({"none": dict.fromkeys(graph.tensors, 0)})
    usual = lambda: min((n for n in errors if _TIGHT not in n), key=errors.get)  # noqa: E731
    best = usual()
    if error_target is not None and worst[best] > error_target / RESIDUE_MARGIN:
        if any(n.op == "rescale" for n in graph.nodes):
            simulated(candidate_shifts(graph, stats, arch, (HEADROOM, TIGHT_HEADROOM), finer=True))
            best = usual()
        if worst[best] > error_target / RESIDUE_MARGIN:  # the tighter headroom only as the last resort
            best = min(errors, key=errors.get)
    choice = ScaleChoice(best, *options[best], errors, {}, worst)
    if error_target is None or worst[best] <= error_target / RESIDUE_MARGIN:
        return choice
    return choose_residues(graph, stats, arch, samples, wants, choice, options, error_target)


# Calibration aims for the error target over this: the simulation sees a few samples, the inputs a
# build serves more (and a few of them err more).
RESIDUE_MARGIN = 2.0
# A residue's extra bits: fewer gain little; more would not fit the partial sums of most layers.
RESIDUE_BITS = (2, 6)
# The share of DRAM1 kept for constants other than layer weights when residues are placed.
OTHER_CONSTANTS = 0.05


def residue_bits(node: Node, graph: Graph, shifts: dict[str, int], stats: dict[str, TensorStats], dt) -> int:
    """The extra bits of ``node``'s weight residue at ``shifts``: as many (up to 6) as keep its
    result, estimated from the residue and its input's range (each weight's rounding an
    independent error), within the data type with the headroom and the output's own ratio of peak
    to RMS; 0 when fewer than 2 fit."""
    a = node.attrs
    if node.op != "conv2d" or a.weight is None or a.residue:
        return 0
    if node.inputs[0] not in stats or node.output not in stats or not stats[node.output].mean_square:
        return 0
    # The residue's sum at the output's scale: as large as the error the weights' rounding leaves.
    rms = math.sqrt(_weight_noise(node, graph, shifts, stats, dt)) * 2.0 ** shifts.get(node.output, 0)
    out = stats[node.output]
    if rms <= 0:
        return 0
    peak_ratio = max(4.0, out.peak / math.sqrt(out.mean_square))
    bits = min(RESIDUE_BITS[1], _shift_for(dt.max_float / (HEADROOM * peak_ratio), rms))
    return bits if bits >= RESIDUE_BITS[0] else 0


def with_residues(graph: Graph, residues: dict[str, int]) -> Graph:
    """``graph`` with the layers producing ``residues``' tensors in two parts of those bits."""
    if not residues:
        return graph
    nodes = [
        replace(n, attrs=replace(n.attrs, residue=residues[n.output])) if n.output in residues else n
        for n in graph.nodes
    ]
    return Graph(graph.tensors, nodes, graph.inputs, graph.outputs, graph.constants, graph.views)


def _weight_noise(node: Node, graph: Graph, shifts: dict[str, int], stats: dict[str, TensorStats], dt) -> float:
    """The variance a layer's weight rounding at ``shifts`` adds to its output (each weight's
    rounding an independent error): K weights' mean square error times the input's mean square."""
    w = np.asarray(graph.constants[node.attrs.weight], dtype=np.float64)
    unit = 2.0 ** (shifts.get(node.output, 0) - shifts.get(node.inputs[0], 0) + dt.binary_point)
    error = np.floor(w * unit + 0.5) / unit - w
    return kernel_terms(graph.constants, node.attrs) * float(np.mean(error**2)) * stats[node.inputs[0]].mean_square


def _residue_gain(node: Node, graph: Graph, shifts: dict[str, int], stats: dict[str, TensorStats], dt) -> float:
    """What a residue removes, per MAC: the modelled noise of the layer's weight rounding relative to
    its output's mean square, over the MACs the residue adds."""
    noise = _weight_noise(node, graph, shifts, stats, dt)
    macs = kernel_terms(graph.constants, node.attrs) * float(np.prod(graph.tensors[node.output].shape))
    return noise / stats[node.output].mean_square / macs


def choose_residues(graph, stats, arch, samples, wants, choice: ScaleChoice, options, error_target) -> ScaleChoice:
    """Weights in two parts, a MatMul each (the rounded weights, then what their rounding left at a
    finer scale, ``Conv.residue``): from the largest shifts (the weights' bits then cost the
    activations none), every layer that can take one first; if that errs less than ``choice``, the
    fewest layers, most gain per MAC first, that bring the simulated error within the target over
    ``RESIDUE_MARGIN`` (all of them when even all miss that). Only as many layers as DRAM1 holds the
    residues of (each as large as its layer's weights) are candidates. Layers without a residue
    keep their weights rounded for their outputs when the option had them. Else ``choice``."""
    dt = arch.data_type
    errors, worst = dict(choice.errors), dict(choice.worst)

    def trial(name: str, residues: dict[str, int]):
        shifts, rounded = options[name]
        others = _without_layers(rounded, graph, residues)
        others = others.weights if others else None
        label = f"{name}, residues on {len(residues)} layer{'s' if len(residues) != 1 else ''}"
        e = simulate(with_residues(graph, residues), shifts, arch, samples, others, wants, stats)
        errors[label], worst[label] = e.mean_square, e.worst
        return label, e.worst

    by_node = {n.output: n for n in graph.nodes}
    lanes = arch.array_size
    # DRAM1 left for residues (each as large as its layer's weights), less a share for the
    # program's other constants (identity and selection blocks).
    weights = sum(weight_vectors(graph.constants, m.attrs, lanes) for m in graph.nodes if m.op == "conv2d")
    room = arch.dram1_depth * (1 - OTHER_CONSTANTS) - weights
    tried = []
    for base in (f"largest{_TIGHT}", "largest", f"largest{_TIGHT}{_FINER}", f"largest{_FINER}"):
        name = next((n for n in (base, f"{base}, nearest rounding") if n in options), None)
        if name is None:  # (the same shifts as another candidate)
            continue
        shifts = options[name][0]
        bits = {m.output: residue_bits(m, graph, shifts, stats, dt) for m in graph.nodes}
        ranked, used = [], 0  # most gain per MAC first, as many as DRAM1 holds
        gain = {t: _residue_gain(by_node[t], graph, shifts, stats, dt) for t, b in bits.items() if b}
        for t in sorted(gain, key=lambda t: -gain[t]):
            size = weight_vectors(graph.constants, by_node[t].attrs, lanes)
            if used + size <= room:
                ranked.append(t)
                used += size
        eligible = {t: bits[t] for t in ranked}
        if eligible:
            tried.append((*trial(name, eligible), name, eligible, ranked))
    if not tried:
        return replace(choice, errors=errors, worst=worst)
    label, best_worst, name, eligible, ranked = min(tried, key=lambda t: t[1])
    if best_worst >= worst[choice.option]:
        return replace(choice, errors=errors, worst=worst)
    goal = error_target / RESIDUE_MARGIN
    lo, hi, found = 0, len(ranked), (label, eligible)  # the fewest layers whose error is within the goal
    while hi - lo > 1 and best_worst <= goal:  # (when all of them miss it, all of them)
        mid = (lo + hi) // 2
        subset = {t: eligible[t] for t in ranked[:mid]}
        mid_label, mid_worst = trial(name, subset)
        if mid_worst <= goal:
            hi, found = mid, (mid_label, subset)
        else:
            lo = mid
    label, residues = found
    shifts, rounded = options[name]
    one_part = replace(choice, errors=errors, worst=worst)
    return ScaleChoice(label, shifts, _without_layers(rounded, graph, residues), errors, residues, worst, one_part)


def _without_layers(rounded: RoundedWeights | None, graph: Graph, layers) -> RoundedWeights | None:
    """``rounded`` less the weights of ``layers`` (by output tensor): weights in two parts keep the
    model's own."""
    if rounded is None:
        return None
    own = {n.attrs.weight for n in graph.nodes if n.output in layers}
    return replace(rounded, weights={i: w for i, w in rounded.weights.items() if i not in own},
                   errors={i: e for i, e in rounded.errors.items() if i not in own})  # fmt: skip


def choose_shifts(graph: Graph, stats: dict[str, TensorStats], arch: Architecture, samples=()) -> dict[str, int]:
    """Every tensor's shift as ``choose_scales`` chooses them with nearest rounding."""
    return choose_scales(graph, stats, arch, samples).shifts


def _top_shifts(graph: Graph, group: dict[str, str], stats: dict[str, TensorStats], arch: Architecture, headroom):
    peak: dict[str, float] = {}
    for t, g in group.items():
        peak[g] = max(peak.get(g, 0.0), stats[t].held if t in stats else 0.0)
    for node in graph.nodes:
        if node.op in ("conv2d", "bias_add") and node.attrs.bias is not None:
            g = group[node.output]
            peak[g] = max(peak[g], _max_abs(graph.constants[node.attrs.bias]))
    return {g: _shift_for(arch.data_type.max_float / headroom, v) for g, v in peak.items()}


class _Layer:
    """A conv or dense layer: its groups, its weights' bounds, and its share of the rounding noise as
    a function of its input's and output's shifts (the standard model: each rounding an independent
    error, uniform over one unit: K products, K weights times the input's mean square, the input's
    own rounding times the weights' sum of squares)."""

    SAMPLE = 1 << 16  # weights sampled for the weight-rounding term of large layers

    def __init__(self, node: Node, group: dict[str, str], graph: Graph, stats: dict[str, TensorStats], arch):
        self.gin, self.gout = group[node.inputs[0]], group[node.output]
        w = np.abs(np.asarray(graph.constants[node.attrs.weight], dtype=np.float64))
        self.terms = kernel_terms(graph.constants, node.attrs)
        flat = w.reshape(-1)
        self.w_peak, self.w_mean_square = float(flat.max()), float(np.mean(flat**2))
        self.w = np.random.default_rng(0).choice(flat, self.SAMPLE, replace=False) if flat.size > self.SAMPLE else flat
        self.x_ms = stats[node.inputs[0]].mean_square if node.inputs[0] in stats else 0.0
        dt = arch.data_type
        self.bp, self.max_int = dt.binary_point, dt.max_int
        self.highest = _shift_for(dt.max_float, self.w_peak)  # weight shifts that do not saturate
        self._rounding: dict[int, float] = {}

    def weight_rounding(self, shift: int) -> float:
        """Mean square error of the weights times ``2**shift``, rounded (inf where they saturate)."""
        if shift not in self._rounding:
            unit = 2.0 ** (shift + self.bp)
            error = np.floor(self.w * unit + 0.5) / unit - self.w
            self._rounding[shift] = math.inf if shift > self.highest else float(np.mean(error**2))
        return self._rounding[shift]

    def noise(self, k_in: int, k_out: int) -> float:
        ulp_in, ulp_out = 2.0 ** -(k_in + self.bp), 2.0 ** -(k_out + self.bp)
        products = self.terms * ulp_out**2 / 12
        weights = self.terms * self.x_ms * self.weight_rounding(k_out - k_in)
        inputs = self.terms * self.w_mean_square * ulp_in**2 / 12
        return products + weights + inputs


def _bounded(shift: dict[str, int], bounds: list[tuple[str, str, int]]) -> dict[str, int]:
    """Lower shifts until every bound holds (a layer's weight shift, a HardSwish's factor). Each
    bound ties one shift to another plus a constant, so this finds the largest solution (shifts
    only come down).
    Bounds that no shifts satisfy (weights beyond the data type in a layer whose input and output
    share a group, as in ``conv(x) + x``) stop at ``-MAX_SHIFT``: those weights saturate, and the
    build's report says so."""

    def lower(g: str, to: int) -> bool:
        to = max(to, -MAX_SHIFT)
        if shift[g] > to:
            shift[g] = to
            return True
        return False

    changed = True
    while changed:
        changed = False
        for gin, gout, most in bounds:
            changed |= lower(gout, shift[gin] + most)
    return shift


def _balanced(start: dict[str, int], layers: list[_Layer], signal: dict[str, float], sweeps: int = 4):
    """Coordinate descent from ``start``, each group's shift at most its start: the modelled noise of
    the layers around a group, relative to the signal each joins (a residual branch's small result
    joins the larger sum), as small as it gets."""
    shift = dict(start)
    touching: dict[str, list[_Layer]] = {g: [] for g in shift}
    for layer in layers:
        touching[layer.gin].append(layer)
        if layer.gout != layer.gin:
            touching[layer.gout].append(layer)

    def cost(g: str, k: int) -> float:
        trial = {**shift, g: k}
        return sum(
            layer.noise(trial[layer.gin], trial[layer.gout]) / max(signal[layer.gout], 1e-30) for layer in touching[g]
        )

    for _ in range(sweeps):
        moved = False
        for g in shift:
            if touching[g]:
                best = min(range(start[g], start[g] - 12, -1), key=lambda k: (cost(g, k), -k))
                if cost(g, best) < cost(g, shift[g]):
                    shift[g], moved = best, True
        if not moved:
            break
    return shift


@dataclass(frozen=True)
class Simulated:
    """A simulation's error: the outputs' mean square error relative to their spread (mean over
    samples and outputs), and the largest error as a share of an output's range over the samples."""

    mean_square: float
    worst: float


def simulate(
    graph: Graph, shifts: dict[str, int], arch: Architecture, samples, weights=None, wants=None, stats=None
) -> Simulated:
    """The outputs' error when every tensor, weight and bias is rounded to the data type at
    ``shifts`` (``interpret``'s model of the TCU), over ``samples``; ``weights``: layer weights (by
    constant index) in place of the graph's, as ``round_weights`` gives them; ``wants``: the
    samples' float values, if computed already."""
    scaled, _ = apply_shifts(with_weights(graph, weights or {}), shifts, stats)
    wants = wants if wants is not None else [interpret(graph, sample) for sample in samples]
    # An output's range: over every sample (a sample's own can be tiny: two logits that nearly tie).
    span = {o: float(np.ptp(np.concatenate([w[o].ravel() for w in wants]))) or 1.0 for o in graph.outputs}
    errors, worst = [], 0.0
    for want, sample in zip(wants, samples):
        got = interpret(scaled, {k: v * 2.0 ** shifts.get(k, 0) for k, v in sample.items()}, rounding=arch.data_type)
        for o in graph.outputs:
            error = got[o] / 2.0 ** shifts.get(o, 0) - want[o]
            spread = float(np.mean((want[o] - want[o].mean()) ** 2)) or 1.0
            errors.append(float(np.mean(error**2)) / spread)
            worst = max(worst, float(np.max(np.abs(error))) / span[o])
    return Simulated(float(np.mean(errors)), worst)


def simulated_error(
    graph: Graph, shifts: dict[str, int], arch: Architecture, samples, weights=None, wants=None, stats=None
) -> float:
    """``simulate``'s mean square error."""
    return simulate(graph, shifts, arch, samples, weights, wants, stats).mean_square


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


def _product_split(node: Node, shift: int, shifts: dict[str, int], stats: dict[str, TensorStats] | None) -> int:
    """How many of a shrinking product's ``-shift`` powers of two its first operand takes before the
    product: both operands' stored typical magnitudes (root mean squares) then end up alike, which
    keeps most of the bits of both (shrinking one by all of them leaves it a few)."""
    if shift >= 0 or not stats or any(t not in stats for t in node.inputs):
        return 0
    a, b = (math.sqrt(stats[t].mean_square) * 2.0 ** shifts[t] for t in node.inputs)
    if a <= 0 or b <= 0:
        return 0
    return int(np.clip(round((-shift + math.log2(a / b)) / 2), 0, -shift))


def _scaled_node(node: Node, shifts: dict[str, int], derived: _Derived, stats=None) -> Node:
    a = node.attrs
    k = shifts[node.output]
    if node.op == "conv2d":
        a = replace(a, weight=derived.ref(a.weight, k - shifts[node.inputs[0]]), bias=derived.ref(a.bias, k))
        if a.second:
            s = a.second
            k2 = shifts[s.output]
            s = replace(
                s, weight=derived.ref(s.weight, k2 - k), bias=derived.ref(s.bias, k2),
                epilogue=tuple(scaled_epilogue(s.epilogue, k2)),
            )  # fmt: skip
            a = replace(a, second=s)
    elif node.op == "bias_add":
        a = replace(a, bias=derived.ref(a.bias, k))
    elif node.op == "pad":
        a = replace(a, value=a.value * 2.0**k)
    elif node.op == "mul":  # stored product = stored inputs' product * 2**shift
        shift = a.shift + k - shifts[node.inputs[0]] - shifts[node.inputs[1]]
        a = replace(a, shift=shift, first=_product_split(node, shift, shifts, stats))
    elif node.op in ACTIVATIONS:
        a = ACTIVATIONS[node.op].scaled(a, shifts[node.inputs[0]], k)
    return replace(node, attrs=a, epilogue=scaled_epilogue(node.epilogue, k))


def apply_shifts(graph: Graph, shifts: dict[str, int], stats=None) -> tuple[Graph, Scaling]:
    """The graph computing every tensor at its shift (``stats``: what calibration saw, which splits a
    product's shrinking between its operands). With every shift 0 it is ``graph`` itself."""
    shifts = {t: int(shifts.get(t, 0)) for t in graph.tensors}
    if not any(shifts.values()):
        return graph, Scaling(shifts)
    derived = _Derived(graph.constants)
    nodes = [_scaled_node(n, shifts, derived, stats) for n in graph.nodes]
    scaled = Graph(graph.tensors, nodes, graph.inputs, graph.outputs, derived.constants, dict(graph.views))
    return scaled, Scaling(shifts, tuple(derived.entries), derived.base)
