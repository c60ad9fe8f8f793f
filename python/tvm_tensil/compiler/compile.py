"""Compile a partition graph into a Tensil model: memory manager -> scheduler -> LIR -> backend."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .. import progress
from ..arch import Architecture
from ..isa.instructions import Direction, InvalidInstruction, MatMulFlag, Opcode, SIMDFlag
from ..isa.program import Program
from ..packing import count_saturated_consts
from ..partition import CompiledPartition
from ..placement import Patches, TensorPlacement
from .bands import chains, with_bands
from .elementwise import HardSigmoid, changes_scale
from .graph import EPILOGUE_OPS, Channels, Graph, Interleave, Node, SecondOutput, Tensor, kernel_size, layer_kind
from .interleave import AUTO_LIMIT, interleave
from .interpret import accumulator_peak, interpret, on_grid
from .latency import critical_path, instruction_nodes, resource_bounds
from .lir import LIR
from .memory import ConstTable, Dram0Allocator
from .prefetch import prefetch_across_nodes
from .rounding import LayerInputs, with_weights
from .scales import ScaleChoice, TensorStats, apply_shifts, choose_scales, with_residues
from .schedule import CompileOptions, GraphSchedule, ScheduleError
from .sink import sink_across_nodes
from .smooth import Smooth


def fuse(graph: Graph) -> Graph:
    """Fold bias adds into the preceding conv and activations into their producer's epilogue. The
    caller's nodes are left as they were (fusing works on copies)."""
    nodes = [
        replace(n, inputs=list(n.inputs), epilogue=list(n.epilogue), source_ops=list(n.source_ops)) for n in graph.nodes
    ]
    # Tensors that must keep their name: outputs, and the storage behind views.
    pinned = set(graph.outputs) | {src for src, _ in graph.views.values()}

    def sole_consumer(name: str) -> Node | None:
        users = [n for n in nodes if name in n.inputs]
        return users[0] if len(users) == 1 and name not in pinned else None

    changed = True
    while changed:
        changed = False
        for node in nodes:
            nxt = sole_consumer(node.output)
            if nxt is None:
                continue
            if node.op == "conv2d" and nxt.op == "bias_add" and node.attrs.bias is None and not node.epilogue:
                node.attrs = replace(node.attrs, bias=nxt.attrs.bias)
            elif (
                node.op == "conv2d"
                and nxt.op == "add"
                and not node.epilogue
                and not node.attrs.residual
                and not node.attrs.transposed
                and len(set(nxt.inputs)) == 2
                and len({graph.tensors[t].shape for t in nxt.inputs + [nxt.output]}) == 1
            ):
                # A residual add: the conv's accumulators start from the other operand (the shortcut).
                # The fused node takes the add's place, after the shortcut's producer.
                node.attrs = replace(node.attrs, residual=True)
                node.inputs = node.inputs + [t for t in nxt.inputs if t != node.output]
                node.source_ops += nxt.source_ops
                node.output = nxt.output
                nodes[nodes.index(nxt)] = node
                nodes.remove(node)
                changed = True
                break
            elif nxt.op in EPILOGUE_OPS and node.op in (
                "conv2d",
                "bias_add",
                "add",
                "sub",
                "max",
                "min",
                "mul",
                "max_pool2d",
                "avg_pool2d",
                "global_avg_pool",
                "concat",
                "slice",
            ):
                node.epilogue.append((nxt.op, nxt.attrs))
            else:
                continue
            node.source_ops += nxt.source_ops
            node.output = nxt.output
            nodes.remove(nxt)
            changed = True
            break
    _fuse_second_outputs(graph, nodes, pinned)
    used = (
        {t for n in nodes for t in n.inputs}
        | {t for n in nodes for t in outputs_of(n)}
        | set(graph.inputs)
        | set(graph.outputs)
        | set(graph.views)
        | {src for src, _ in graph.views.values()}
    )
    tensors = {k: v for k, v in graph.tensors.items() if k in used}
    return Graph(tensors, nodes, graph.inputs, graph.outputs, graph.constants, dict(graph.views))


def _constant(graph: Graph, index) -> np.ndarray | None:
    return None if index is None else np.asarray(graph.constants[index], dtype=np.float64).reshape(-1)


def recognize_activations(graph: Graph) -> Graph:
    """``graph`` with each activation that importers spell as several ops as the one activation it
    is (a HardSwish, a SiLU), before anything else sees the graph (calibration included)."""
    pinned = set(graph.outputs) | {src for src, _ in graph.views.values()}
    nodes = _x_times_functions(_hard_swishes(graph, list(graph.nodes), pinned), pinned)
    if len(nodes) == len(graph.nodes):
        return graph
    used = {t for n in nodes for t in n.inputs + [n.output]} | set(graph.inputs) | set(graph.outputs)
    used |= set(graph.views) | {src for src, _ in graph.views.values()}
    tensors = {k: v for k, v in graph.tensors.items() if k in used}
    return Graph(tensors, nodes, graph.inputs, graph.outputs, graph.constants, dict(graph.views))


# x times a function of x, as importers write them: the function's chain of ops (innermost first) ->
# the one activation it is.
X_TIMES = {("sigmoid",): "silu", ("softplus", "tanh"): "mish"}
_GATES = {op for ops in X_TIMES for op in ops}
_LONGEST = max(len(ops) for ops in X_TIMES)


def _x_times_functions(nodes: list[Node], pinned: set[str]) -> list[Node]:
    """``x * sigmoid(x)`` (how exporters write SiLU/Swish) and ``x * tanh(softplus(x))`` (Mish) as
    the one activation: no product of two maps, and max(x, 0) minus a small part instead of x times
    a fraction (exact where x is large)."""
    producer = {n.output: n for n in nodes}

    def chain(x: str, s: str, reader: Node) -> list[Node] | None:
        """The gate ops from x to s, innermost first, each read only by the next."""
        gates = []
        while s != x:
            gate = producer.get(s)
            if gate is None or gate.op not in _GATES or len(gates) == _LONGEST or s in pinned:
                return None
            if gate.epilogue or gate.attrs.shift:
                return None
            if [n for n in nodes if s in n.inputs] != [reader]:
                return None
            gates.insert(0, gate)
            reader, s = gate, gate.inputs[0]
        return gates

    for product in [n for n in nodes if n.op == "mul" and not n.attrs.shift and len(set(n.inputs)) == 2]:
        for x, s in (product.inputs, product.inputs[::-1]):
            gates = chain(x, s, product)
            function = X_TIMES.get(tuple(g.op for g in gates)) if gates else None
            if function is None:
                continue
            fused = Node(function, [x], product.output, Smooth(function), list(product.epilogue),
                         [op for g in gates for op in g.source_ops] + product.source_ops)  # fmt: skip
            return _x_times_functions(
                [fused if n is product else n for n in nodes if all(n is not g for g in gates)], pinned
            )
    return nodes


def _hard_swishes(graph: Graph, nodes: list[Node], pinned: set[str]) -> list[Node]:
    """HardSwish as importers write it, ``x * (clip(x + 3, 0, 6) / 6)`` (a bias add of 3, a clip, a
    diagonal 1x1 conv by 1/6 and a product), becomes one activation of ``x``: the three layers
    between become a few SIMD instructions per vector, fused into whatever produces ``x``. The
    affine folding may have merged ``x``'s own bias add into the +3 (both then read ``x``'s
    producer, their biases 3 apart). Without its 1/6 (``x * relu6(x + 3)``, the 1/6 folded into what
    follows) it is the activation ``x * clip(x + 3, 0, 6)``."""
    readers: dict[str, list[Node]] = {}
    for n in nodes:
        for t in n.inputs:
            readers.setdefault(t, []).append(n)
    producer = {n.output: n for n in nodes}

    def only(t: str, op: str) -> Node | None:
        users = readers.get(t, [])
        return users[0] if len(users) == 1 and users[0].op == op and t not in pinned else None

    def three_apart(add: Node, x: str) -> bool:
        """``add`` computes x + 3, or reads what x's own bias add reads with a bias 3 larger."""
        plus = _constant(graph, add.attrs.bias)
        if add.inputs[0] == x:
            return plus is not None and np.allclose(plus, 3.0, rtol=0, atol=1e-5)
        own = producer.get(x)
        if own is None or own.op != "bias_add" or own.epilogue or own.inputs != add.inputs:
            return False
        base = _constant(graph, own.attrs.bias)
        if plus is None or base is None:
            return False
        plus, base = np.broadcast_arrays(plus, base)
        return np.allclose(plus - base, 3.0, rtol=0, atol=1e-5 * max(1.0, float(np.abs(base).max())))

    def sixth(node: Node | None) -> bool:
        """A diagonal 1x1 conv by 1/6 (a division by 6 after the affine folding)."""
        a = node.attrs if node is not None and node.op == "conv2d" else None
        if a is None or a.weight is None or a.bias is not None or node.epilogue or a.residual or a.layout != "OIHW":
            return False
        if a.transposed:
            return False
        w = np.shape(graph.constants[a.weight])
        return (
            a.groups == w[0]
            and tuple(w[1:]) == (1, 1, 1)
            and np.allclose(_constant(graph, a.weight), 1 / 6, rtol=1e-6, atol=0)
        )

    def relu6_of_plus_3(t: str, x: str) -> list[Node] | None:
        """The nodes computing clip(x + 3, 0, 6) into ``t`` (one clip, or two: torch's (0, inf), (-inf, 6))."""
        clips, lo, hi = [], -np.inf, np.inf
        node = producer.get(t)
        while node is not None and node.op == "clip" and not node.epilogue and len(clips) < 2:
            clips.append(node)
            lo, hi = max(lo, node.attrs.lo), min(hi, node.attrs.hi)
            node = producer.get(node.inputs[0])
        if not clips or (lo, hi) != (0.0, 6.0) or node is None or node.op != "bias_add" or node.epilogue:
            return None
        chain = [node] + clips[::-1]
        if any(only(n.output, nxt.op) is not nxt for n, nxt in zip(chain, chain[1:])) or not three_apart(node, x):
            return None
        return chain

    for product in [n for n in nodes if n.op == "mul" and not n.attrs.shift]:
        for x, s in (product.inputs, product.inputs[::-1]):
            # ONNX: x * (relu6(x + 3) / 6); torch: (x * relu6(x + 3)) / 6.
            scale, last = producer.get(s), product
            if sixth(scale) and only(s, "mul") is product:
                chain = relu6_of_plus_3(scale.inputs[0], x)
                chain = chain and (chain if only(chain[-1].output, "conv2d") is scale else None)
            else:
                scale = only(product.output, "conv2d")
                chain = relu6_of_plus_3(s, x) if sixth(scale) and only(s, "mul") is product else None
                chain = chain and (chain if only(chain[-1].output, "mul") is product else None)
                last = scale
            attrs = HardSigmoid(swish=True)
            if not chain and only(s, "mul") is product:
                scale, last, attrs = None, product, HardSigmoid(1.0, 3.0, swish=True, hi=6.0)
                chain = relu6_of_plus_3(s, x)
                chain = chain and (chain if only(chain[-1].output, "mul") is product else None)
            if not chain:
                continue
            gone = [n for n in (*chain, scale, product) if n is not None]
            swish = Node("hard_sigmoid", [x], last.output, attrs, list(last.epilogue),
                         [op for n in gone for op in n.source_ops])  # fmt: skip
            nodes = [swish if n is last else n for n in nodes if n is last or all(n is not r for r in gone)]
            break
    return nodes


def outputs_of(node: Node) -> list[str]:
    """The tensors a node writes: its output, and a conv's fused second output."""
    second = node.attrs.second if node.op == "conv2d" else None
    return [node.output] + ([second.output] if second else [])


def _is_channel_affine(node: Node, graph: Graph) -> bool:
    """A depthwise 1x1 conv that only scales and shifts channels (an inference batch norm that had
    no conv to fold into), possibly with an activation."""
    a = node.attrs
    if node.op != "conv2d" or a.weight is None or a.residual or a.second or a.transposed or a.residue:
        return False
    c = graph.tensors[node.output].c
    w = np.shape(graph.constants[a.weight])
    return (
        a.groups == c == graph.tensors[node.inputs[0]].c
        and tuple(w[1:]) == (1, 1, 1)
        and a.strides == (1, 1)
        and not any(a.padding)
        and a.layout == "OIHW"
    )


def _fuse_second_outputs(graph: Graph, nodes: list[Node], pinned: set[str]) -> None:
    """A channel affine (+ activation) reading a conv's result that is also used elsewhere (the
    pre-activation batch norm + ReLU of a ResNet v2 block, reading the previous block's sum) becomes
    the conv's second output: computed from the conv's result while it is still in local memory,
    instead of a layer that reads it back from DRAM0."""
    for node in list(nodes):
        if node.op != "conv2d" or node.attrs.second or node.attrs.flatten or node.attrs.transposed:
            continue
        users = [n for n in nodes if node.output in n.inputs]
        for user in users:
            if (
                _is_channel_affine(user, graph)
                and user.inputs == [node.output]
                and (len(users) > 1 or node.output in pinned)
            ):
                second = SecondOutput(user.output, user.attrs.weight, user.attrs.bias, user.attrs.groups,
                                      tuple(user.epilogue))  # fmt: skip
                node.attrs = replace(node.attrs, second=second)
                node.source_ops += user.source_ops
                nodes.remove(user)
                break


# Calibration samples a choice of scales is simulated on (docs/compiler.md, "Scales").
SIMULATED_SAMPLES = 4


RESCALED = "_rescaled"  # (the suffix of a rescale's result)


def with_rescales(graph: Graph) -> Graph:
    """``graph`` with a rescale after each conv or dense layer's result (and its bias add): its
    accumulators may then keep a finer scale than the tensors it joins (a residual chain, a concat),
    each product rounded finer, and one multiply per vector takes the result to their scale.
    Calibration decides; a rescale that keeps its scale is dropped before fusing
    (``without_identity_rescales``)."""
    pinned = set(graph.outputs) | {src for src, _ in graph.views.values()}
    users: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for t in set(n.inputs):
            users.setdefault(t, []).append(n)
    ends = {}  # a layer's result (after its bias add) -> the rescale's result
    for n in graph.nodes:
        if n.op == "conv2d" and n.attrs.weight is not None and not n.attrs.transposed:
            end, after = n.output, users.get(n.output, [])
            if len(after) == 1 and after[0].op == "bias_add":
                end = after[0].output
            if end not in pinned and users.get(end):
                ends[end] = f"{end}{RESCALED}"
    nodes, tensors = [], dict(graph.tensors)
    for n in graph.nodes:
        nodes.append(replace(n, inputs=[ends.get(t, t) for t in n.inputs]))
        if n.output in ends:
            nodes.append(Node("rescale", [n.output], ends[n.output]))
            tensors[ends[n.output]] = Tensor(ends[n.output], graph.tensors[n.output].shape)
    return Graph(tensors, nodes, graph.inputs, graph.outputs, graph.constants, dict(graph.views))


def without_identity_rescales(graph: Graph) -> Graph:
    """``graph`` less the rescales whose input and result share a scale."""
    same = {n.output: n.inputs[0] for n in graph.nodes if n.op == "rescale" and n.attrs.shift == n.attrs.out_shift}
    if not same:
        return graph
    nodes = [replace(n, inputs=[same.get(t, t) for t in n.inputs]) for n in graph.nodes if n.output not in same]
    tensors = {k: v for k, v in graph.tensors.items() if k not in same}
    return Graph(tensors, nodes, graph.inputs, graph.outputs, graph.constants, dict(graph.views))


def _accumulated_in(graph: Graph, output: str) -> str:
    """The tensor whose scale a fused layer's accumulators (resulting in ``output``) have: the input
    of the first epilogue op that changes the scale, else ``output``."""
    producer = {n.output: n for n in graph.nodes}
    key, t = output, output
    while t in producer and producer[t].op in EPILOGUE_OPS:
        if changes_scale(producer[t].op):
            key = producer[t].inputs[0]
        t = producer[t].inputs[0]
    return key


def tensor_stats(
    graph: Graph, samples, inputs: LayerInputs | None = None, lanes: int | None = None, window_rows: bool = False
) -> dict[str, TensorStats]:
    """Each tensor's largest magnitude and mean square over ``samples`` (each a dict of input values
    by graph input name, (n, h, w, c)); ``inputs``, if given, also collects each layer's inputs;
    ``lanes`` (the array size), if given, also each layer's partial sums as the TCU adds them up (a
    layer's with what fuses into it: its bias and a residual add's shortcut; ``window_rows``: on a
    core with the window MatMul, ``accumulator_peak``)."""
    peak: dict[str, float] = {}
    square: dict[str, float] = {}
    accumulated: dict[str, float] = {}
    layers = [(n, _accumulated_in(graph, n.output)) for n in fuse(graph).nodes if n.op == "conv2d"] if lanes else []
    count = 0
    for sample in samples:
        count += 1
        values = interpret(graph, sample)
        if inputs is not None:
            inputs.add(values)
        for name, value in values.items():
            peak[name] = max(peak.get(name, 0.0), float(np.max(np.abs(value))) if value.size else 0.0)
            square[name] = square.get(name, 0.0) + (float(np.mean(value**2)) if value.size else 0.0)
        for node, key in layers:
            partial = accumulator_peak(node, values, graph, lanes, window_rows)
            accumulated[key] = max(accumulated.get(key, 0.0), partial)
    return {t: TensorStats(peak[t], square[t] / count, accumulated.get(t, 0.0)) for t in peak}


def calibrate(
    graph: Graph, samples: list[dict], arch: Architecture, error_target: float | None = None
) -> tuple[ScaleChoice, dict[str, TensorStats]]:
    """Calibration's choice of scales and weight rounding for ``graph``, and every tensor's range.
    With enough samples the choice is simulated on ones the weight rounding was not fitted to."""
    if len(samples) >= 2 * SIMULATED_SAMPLES:
        fit, held = samples[:-SIMULATED_SAMPLES], samples[-SIMULATED_SAMPLES:]
    else:
        fit, held = samples, samples[:SIMULATED_SAMPLES]
    inputs = LayerInputs(graph)
    stats = tensor_stats(graph, fit, inputs, arch.array_size, arch.window_matmul)
    held_stats = tensor_stats(graph, samples[len(fit) :], lanes=arch.array_size, window_rows=arch.window_matmul)
    for t, s in held_stats.items():  # the ranges of every sample
        n_fit, n_held = len(fit), len(samples) - len(fit)
        mean_square = (stats[t].mean_square * n_fit + s.mean_square * n_held) / len(samples)
        stats[t] = TensorStats(max(stats[t].peak, s.peak), mean_square, max(stats[t].accumulated, s.accumulated))
    return choose_scales(graph, stats, arch, held, inputs, error_target), stats


def place_tensors(
    graph: Graph, arch: Architecture, patches: dict[str, Patches] | None = None
) -> tuple[dict[str, TensorPlacement], Dram0Allocator]:
    """Every tensor's DRAM0 placement (inputs and outputs first, intermediates by lifetime, views
    on their sources' storage) and the allocator, which places the scheduler's temporaries above.
    ``patches``: the inputs the host writes as a conv's windows (``with_input_patches``)."""
    dram0 = Dram0Allocator(arch)
    place: dict[str, TensorPlacement] = {}
    for t in list(graph.inputs) + list(graph.outputs):
        if t not in place and t not in graph.views:
            place[t] = dram0.alloc(graph.tensors[t].shape, f"tensor '{t}'", check=False)
            if patches and t in patches:
                place[t] = replace(place[t], patches=patches[t])
    place.update(dram0.plan({t: graph.tensors[t].shape for t in graph.tensors}, _lifetimes(graph, set(place))))
    for view, (src, kind) in _views_in_order(graph):
        if kind == "flatten":
            place[view] = _flatten_view(place[src], arch)
        elif isinstance(kind, Channels):
            sp = place[src]
            place[view] = TensorPlacement(sp.base + kind.first // arch.array_size * sp.pixels,
                                          graph.tensors[view].shape, arch.array_size)  # fmt: skip
        elif isinstance(kind, Interleave):
            sp = place[src]
            whole = (kind.sy, kind.sx, kind.py, kind.px, sp.shape[1], sp.shape[2])
            place[view] = TensorPlacement(sp.base, graph.tensors[view].shape, arch.array_size, interleave=whole)
        else:
            sp = place[src]
            vp = TensorPlacement(sp.base, graph.tensors[view].shape, arch.array_size)
            if vp.pixels != sp.pixels or vp.shape[3] != sp.shape[3]:
                raise ScheduleError(f"reshape {sp.shape} -> {vp.shape} changes the storage")
            place[view] = vp
    return place, dram0


# An input is written as windows where that takes at most this share of the conv's MatMuls, and
# at most this many times its own DRAM0 vectors (what the host writes).
PATCHES_MATMUL_SHARE = 2 / 3
PATCHES_GROWTH = 8


def with_input_patches(graph: Graph, arch: Architecture) -> tuple[Graph, dict[str, Patches]]:
    """Each partition input read only by a conv whose windows fill far fewer channel blocks than
    its taps take one by one (an RGB image's first conv: 27 channels are 2 blocks of 16, its 9 taps
    9 blocks), stored as those windows: the conv becomes a 1x1 conv over them (``Conv.patches``).
    Returns the graph and the inputs so stored (the caller's graph is left as it was)."""
    n = arch.array_size
    shared = set(graph.outputs) | set(graph.views) | {src for src, _ in graph.views.values()}
    tensors, nodes, stored = dict(graph.tensors), list(graph.nodes), {}
    for t in graph.inputs:
        users = graph.consumers(t)
        if t in shared or len(users) != 1 or users[0].op != "conv2d" or users[0].inputs.count(t) != 1:
            continue
        node = users[0]
        a = node.attrs
        if (
            node.inputs[0] != t or a.weight is None or a.layout != "OIHW" or a.groups != 1 or a.transposed
            or a.phase is not None or a.flatten is not None or a.patches
        ):  # fmt: skip
            continue
        kh, kw = kernel_size(graph.constants, a)
        source = graph.tensors[t].shape
        c = source[3]
        window = Patches(tuple(source), (kh, kw), tuple(a.strides), tuple(a.padding), tuple(a.dilation))
        blocks, before = -(-kh * kw * c // n), kh * kw * -(-c // n)
        shape = window.shape
        grows = (shape[1] * shape[2] * blocks) / (source[1] * source[2] * -(-c // n))
        if blocks > PATCHES_MATMUL_SHARE * before or grows > PATCHES_GROWTH:
            continue
        tensors[t] = Tensor(t, shape)
        nodes[nodes.index(node)] = replace(
            node, attrs=replace(a, patches=True, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1))
        )
        stored[t] = window
    if not stored:
        return graph, {}
    return Graph(tensors, nodes, graph.inputs, graph.outputs, graph.constants, graph.views), stored


def compile_graph(
    graph: Graph,
    arch: Architecture,
    name: str = "partition",
    calibration: list[dict] | None = None,
    options: CompileOptions = CompileOptions(),
) -> CompiledPartition:
    """Compile a partition. ``calibration`` (sample inputs by graph input name, (n, h, w, c)) gives
    every tensor its own power-of-two scale; without it every tensor uses the data type's binary
    point. ``options``: scheduling choices to turn off (for tests and benchmarks). Weights in two
    parts that the architecture's memories cannot hold (their DRAM1 doubles) give way to one part."""
    graph = recognize_activations(graph)
    if calibration:
        graph = with_rescales(graph)
    choice, stats = calibrate(graph, calibration, arch, options.error_target) if calibration else (None, {})
    try:
        return _compile_scaled(graph, arch, name, calibration, options, choice, stats)
    except (MemoryError, InvalidInstruction, ScheduleError):
        if not (choice and choice.residues):
            raise
    part = _compile_scaled(graph, arch, name, calibration, options, choice.one_part, stats)
    part.report["calibration"]["two_parts"] = "do not fit the architecture's memories: one part"
    return part


def _compile_scaled(graph, arch, name, calibration, options, choice: ScaleChoice | None, stats) -> CompiledPartition:
    """``compile_graph`` after calibration's ``choice``."""
    reference, sources = None, graph.constants
    if choice:
        graph = with_residues(graph, choice.residues)
        if choice.rounding is not None and choice.rounding.weights:
            # The model's weights, for the report.
            reference = fuse(without_identity_rescales(apply_shifts(graph, choice.shifts, stats)[0]))
            graph = with_weights(graph, choice.rounding.weights)
            sources = graph.constants
    # Scaled before fusing: an activation fused into a conv may take the accumulators' scale to
    # another (a HardSwish), so each op is scaled for its own input and output first.
    graph, scaling = apply_shifts(graph, choice.shifts if choice else {}, stats)
    graph = fuse(without_identity_rescales(graph))
    graph = channel_views(subsample_views(expand_transposed(mark_flattened(graph))), arch.array_size)
    graph, patches = with_input_patches(graph, arch) if options.input_patches else (graph, {})
    banded = with_bands(graph, chains(graph, arch) if options.row_bands is not False else [])
    graph = banded.graph
    place, dram0 = place_tensors(graph, arch, patches)
    for _, convs, _ in banded.chains.values():  # the chains' maps between convs, computed whole
        shapes = [graph.tensors[conv.output].shape for conv in convs[:-1]]
        if dram0.top + sum(TensorPlacement(0, shape, arch.array_size).size for shape in shapes) <= arch.dram0_depth:
            for conv, shape in zip(convs, shapes):  # (else the chain runs in bands: they fit)
                place[conv.output] = dram0.alloc(shape, f"tensor '{conv.output}'")
    consts = ConstTable(arch)
    lir = LIR(arch)
    sched = GraphSchedule(arch, graph, place, consts, lir, dram0, options, banded)
    in_bands = {node.output for bands, _, _ in banded.chains.values() for node in bands[1:]}
    per_node, node_starts = [], []

    def report(node: Node, instructions: int) -> None:
        per_node.append(_node_entry(node, instructions, graph, arch, reference, consts, scaling, choice))

    # A progress bar for builds that take a while (shown after 2 s, on terminals only).
    for node in progress.bar(graph.nodes, desc=f"tvm_tensil: compiling {name}", unit="op", delay=2):
        start = len(lir)
        if node.output in banded.chains:  # a chain: its bands or its convs whole, the faster
            for lowered, count, partner in sched.lower_chain(node):
                node_starts.append(start)
                report(lowered, count)
                if partner is not None:  # emitted in turn with it: their cycles count in the first
                    per_node[-1]["in_turn_with"] = banded.layer.get(partner.output, partner.output)
                start += count
            continue
        if node.output in in_bands:
            continue
        node_starts.append(start)
        placed = len(consts.recipes)
        try:
            sched.lower(node)
        except InvalidInstruction:
            if consts.top <= arch.dram1_depth:
                raise
            # Weights already overflow DRAM1 (their addresses do not encode): the program cannot
            # exist, but keep placing weights so that the error states the whole need.
            lir.discard()
            try:
                sched.lower(node)
            except InvalidInstruction:  # (a search that encodes its trials fails again, its weights placed)
                lir.discard()
        report(node, len(lir) - start)
        if any(r.args.get("bias_rows") is False for r in consts.recipes[placed:]):
            per_node[-1]["bare_blocks"] = True  # its weight blocks without bias rows (``conv.bare_blocks``)
    sched.finish()
    consts.check()
    consts.check_dram0(dram0.top)
    program = lir.program(name)
    prefetched = sunk = ()
    if options.prefetch:
        program, node_starts, prefetched = prefetch_across_nodes(program, arch, node_starts)
    if options.sink_stores:
        program, node_starts, sunk = sink_across_nodes(program, arch, node_starts)
    # Each instruction's node: after the interleave a node's instructions need not be one run.
    owners = instruction_nodes(len(program), node_starts)
    interleaved = 0
    if options.interleave or (options.interleave is None and len(program) <= AUTO_LIMIT):
        program, owners, interleaved = interleave(program, arch, owners)
    for entry, count in zip(per_node, np.bincount(owners, minlength=len(per_node))):
        entry["instructions"] = int(count)
    path = critical_path(program, arch, owners=owners)
    for entry, cycles, bounds in zip(per_node, path["by_node"], resource_bounds(program, arch, owners=owners)):
        entry["cycles"] = cycles  # the critical path's cycles charged to the node's instructions, by kind
        entry["busy"] = {k: v for k, v in bounds.items() if v}  # each resource's cycles for them alone
    report = {
        "nodes": _layers_merged(per_node, graph, banded.layer),
        "instructions": len(program),
        "cycles": path["cycles"],
        "critical_path": path["by_kind"],
        "prefetched_loads": len(prefetched),
        "sunk_stores": len(sunk),
        "interleaved_windows": interleaved,
        "memory": memory_use(program, arch, dram0.top, consts.top)
        | ({"dram0_weight_vectors": consts.top0} if consts.top0 else {}),
        "weights_saturated": count_saturated_consts(consts.recipes, (reference or graph).constants, arch),
    }
    if calibration:
        report["calibration_samples"] = len(calibration)
        report["calibration"] = {
            "choice": choice.option,
            "weights": "rounded for their outputs" if choice.rounding else "nearest",
            # Each option's simulated error: mean square of the outputs' error over their variance,
            # and the largest error as a share of an output's range.
            "simulated_error": choice.errors,
            "simulated_worst": choice.worst,
            "error_target": options.error_target,
        }
        report["scales"] = {
            t: {
                "shift": k,
                "peak": stats[t].peak,
                # The largest partial sum seen (a layer's output): the accumulators hold it.
                **({"accumulated": stats[t].accumulated} if stats[t].accumulated > stats[t].peak else {}),
                # How many times the largest value seen (partial sums too) fits the data type here.
                "headroom": arch.data_type.max_float / (stats[t].held * 2.0**k) if stats[t].held else None,
            }
            for t, k in scaling.shifts.items()
            if t in graph.tensors and t in stats
        }
    return CompiledPartition(
        name,
        arch,
        program,
        consts.recipes,
        {t: place[t] for t in graph.inputs},
        {t: place[t] for t in graph.outputs},
        report,
        shifts={t: scaling.shifts[t] for t in list(graph.inputs) + list(graph.outputs) if scaling.shifts.get(t)},
        derived=list(scaling.derived),
        constants=list(sources),
        rounded=tuple(sorted(choice.rounding.weights)) if choice and choice.rounding else (),
    )


def _node_entry(node: Node, instructions: int, graph: Graph, arch, reference, consts, scaling, choice) -> dict:
    """A lowered node's line of the report (its cycles are added once the program is whole)."""
    return (
        {
            "op": layer_kind(node),
            "output": node.output,
            "epilogue": [e[0] for e in node.epilogue],
            "relax_ops": node.source_ops,
            "instructions": instructions,
        }
        | ({"in_place": True} if graph.in_place(node) else {})
        | weight_rounding(node, graph, arch, reference, _residue_in(consts, node))
        | _output_error(node, scaling, choice)
    )


def _layers_merged(entries: list[dict], graph: Graph, layers: dict[str, str]) -> list[dict]:
    """The report's layers: a transposed conv's phases (consecutive nodes) and a chain's bands
    (``layers``: band node output -> its layer's) each as the one layer."""
    merged: dict[tuple[str, str], dict] = {}
    for entry in entries:
        src, kind = graph.views.get(entry["output"], (None, None))
        if entry["output"] in layers:
            entry = dict(entry, output=layers[entry["output"]])
        elif isinstance(kind, Interleave):
            entry = dict(entry, output=src)
        last = merged.get((entry["output"], entry["op"]))
        if last is None:
            merged[entry["output"], entry["op"]] = entry
            continue
        last["instructions"] += entry["instructions"]
        if "in_turn_with" in entry:  # (some of its bands)
            last["in_turn_with"] = entry["in_turn_with"]
        for key in ("cycles", "busy"):
            last[key] = {k: last[key].get(k, 0) + entry[key].get(k, 0) for k in last[key] | entry[key]}
    return list(merged.values())


def _residue_in(consts: ConstTable, node: Node) -> int:
    """The extra bits of a layer's weight residue as the program holds it (0: one part; a layer
    whose residue did not fit local memory runs without it)."""
    a = node.attrs
    if node.op != "conv2d" or not a.residue:
        return 0
    held = [r for r in consts.recipes if r.packer == "conv_weights" and r.args.get("weight") == a.weight]
    return a.residue if any(r.args.get("residue") for r in held) else 0


def weight_rounding(
    node: Node, graph: Graph, arch: Architecture, reference: Graph | None = None, residue: int = 0
) -> dict[str, float]:
    """What the data type does to a layer's weights (as scaled): the shares of its nonzero weights
    that round to zero and that saturate, and the share of their magnitude lost to both.
    ``reference``: the graph with the model's own weights when ``graph``'s were rounded already.
    Weights in two parts (``residue`` extra bits, reported as ``residue_bits``) count as rounded
    that many bits finer."""
    index = node.attrs.weight if node.op == "conv2d" else None
    if index is None:
        return {}
    w = np.asarray((reference or graph).constants[index], dtype=np.float64).reshape(-1)
    keep = w != 0
    w = w[keep]
    if not w.size:
        return {}
    dt = arch.data_type
    q = on_grid(dt, np.asarray(graph.constants[index], dtype=np.float64).reshape(-1)[keep], residue)
    return {
        "weights_zeroed": float(np.mean(q == 0)),
        "weights_saturating": float(np.mean(np.abs(w) > dt.max_float)),
        "weights_error": float(np.sum(np.abs(q - w)) / np.sum(np.abs(w))),
    } | ({"residue_bits": residue} if residue else {})


def _output_error(node: Node, scaling, choice: "ScaleChoice | None") -> dict[str, float]:
    """A layer rounded for its outputs: their RMS error from the weights' rounding on the
    calibration inputs, relative to their RMS, and what nearest rounding would have left."""
    index = node.attrs.weight if node.op == "conv2d" else None
    if index is None or choice is None or choice.rounding is None:
        return {}
    source = scaling.source(index)
    if source not in choice.rounding.errors:
        return {}
    rounded, nearest = choice.rounding.errors[source]
    return {"weights_output_error": rounded, "weights_output_error_nearest": nearest}


def _lifetimes(graph: Graph, placed: set[str]) -> dict[str, tuple[int, int]]:
    """(first, last) node index of every intermediate's storage: written by node ``first``,
    last read (directly or through a view of it) by node ``last``."""

    def storage(t: str) -> str:
        while t in graph.views:
            t = graph.views[t][0]
        return t

    spans: dict[str, tuple[int, int]] = {}
    for i, node in enumerate(graph.nodes):
        for written in outputs_of(node):
            out = storage(written)
            if out not in placed:
                spans[out] = (min(spans.get(out, (i, i))[0], i), max(spans.get(out, (i, i))[1], i))
        for t in node.inputs:
            src = storage(t)
            if src in spans:
                spans[src] = (spans[src][0], i)
    return spans


def _views_in_order(graph: Graph):
    """Views whose source is placed first (a view of a view comes after its source)."""
    done: set[str] = set()
    pending = dict(graph.views)
    while pending:
        for view, (src, kind) in list(pending.items()):
            if src not in pending:
                done.add(view)
                del pending[view]
                yield view, (src, kind)


def _flatten_view(src: TensorPlacement, arch: Architecture) -> TensorPlacement:
    """A flattened feature map read in place: each image becomes one pixel of blocks*h*w vectors
    (for a batch, an image's vectors are h*w apart in each of those: a power of two encodes)."""
    n, h, w, c = src.shape
    if n > 1 and (h * w) & (h * w - 1):
        raise ScheduleError(f"flattening a batch of {n} {h}x{w} maps needs h*w to be a power of two")
    return TensorPlacement(
        src.base, (1, 1, n, h * w * src.channels_padded), arch.array_size, flattened_hw=h * w if n > 1 else 0
    )


def expand_transposed(graph: Graph) -> Graph:
    """Each transposed conv as one conv per output phase (sub-pixel convolution): phase (py, px)
    computes the output pixels (sy * q + py, sx * r + px), a conv over the input with the taps of
    the transposed kernel that reach them, and writes them in place (an ``Interleave`` view). The
    TCU then multiplies exactly the transposed conv's products, no inserted zeros."""
    if not any(n.op == "conv2d" and n.attrs.transposed for n in graph.nodes):
        return graph
    tensors, views, nodes = dict(graph.tensors), dict(graph.views), []
    for node in graph.nodes:
        a = node.attrs
        if node.op != "conv2d" or not a.transposed:
            nodes.append(node)
            continue
        n, h, w, _ = graph.tensors[node.inputs[0]].shape
        _, oh, ow, o = graph.tensors[node.output].shape
        _, _, kh, kw = np.shape(graph.constants[a.weight])
        (sy, sx), (pt, pl) = a.strides, a.padding[:2]
        for py in range(min(sy, oh)):
            for px in range(min(sx, ow)):
                phase = (sy, sx, (py + pt) % sy, (px + pl) % sx)
                rows, cols = -(-(oh - py) // sy), -(-(ow - px) // sx)
                jh, jw = kernel_size(graph.constants, replace(a, phase=phase))
                top, left = jh - 1 - (py + pt) // sy, jw - 1 - (px + pl) // sx
                if min(jh, jw) < 1:
                    raise ScheduleError(f"transposed conv '{node.output}': phase ({py}, {px}) has no taps")
                # Negative: the padding cropped whole input rows, the window starts inside the input.
                padding = (top, left, max(0, rows + jh - 1 - h - top), max(0, cols + jw - 1 - w - left))
                name = f"{node.output}.phase{py}{px}"
                tensors[name] = Tensor(name, (n, rows, cols, o))
                views[name] = (node.output, Interleave(sy, sx, py, px))
                sub = replace(a, strides=(1, 1), padding=padding, transposed=False, phase=phase)
                nodes.append(Node("conv2d", list(node.inputs), name, sub, list(node.epilogue), list(node.source_ops)))
    return Graph(tensors, nodes, graph.inputs, graph.outputs, graph.constants, views)


def subsample_views(graph: Graph) -> Graph:
    """Each 1x1 pool with strides and no padding (a ResNet v2 shortcut's subsampling) that only
    convs read, as a view of its input (an ``Interleave``: every sy-th row and sx-th column): the
    convs read the pixels they need in place; the pool's node emits nothing (``Graph.in_place``)."""
    pinned = set(graph.outputs) | set(graph.inputs) | set(graph.views) | {s for s, _ in graph.views.values()}
    views = dict(graph.views)
    for node in graph.nodes:
        a = node.attrs
        if (
            node.op in ("max_pool2d", "avg_pool2d") and a.kernel == (1, 1) and not any(a.padding)
            and not node.epilogue and node.output not in pinned and node.inputs[0] not in graph.views
            and all(user.op == "conv2d" for user in graph.consumers(node.output))
        ):  # fmt: skip
            sy, sx = a.strides
            views[node.output] = (node.inputs[0], Interleave(sy, sx, 0, 0))
    return Graph(graph.tensors, graph.nodes, graph.inputs, graph.outputs, graph.constants, views)


def channel_views(graph: Graph, lanes: int) -> Graph:
    """Channel slices and concats that start and end on channel blocks as views: a slice is read in
    place from its source; a concat's inputs are written in place into it by the nodes that make
    them. Each channel block is a contiguous plane of a map's storage, so neither moves a vector.
    (A tensor has one storage: an input that is already a view, or that another concat takes,
    keeps the concat a copy; so do graph inputs, which the host places.) Their nodes then emit
    nothing (``Graph.in_place``)."""
    views = dict(graph.views)
    made = {node.output for node in graph.nodes}
    channels = {t: tensor.shape[3] for t, tensor in graph.tensors.items()}
    for node in graph.nodes:
        if node.op == "slice" and not node.epilogue and node.output not in graph.outputs:
            src, first, end = node.inputs[0], node.attrs.begin, node.attrs.end
            if _plain(src, views) and first % lanes == 0 and (end % lanes == 0 or end == channels[src]):
                views[node.output] = (src, Channels(first))
        if node.op == "concat" and not node.epilogue:
            parts = node.inputs
            firsts = np.cumsum([0] + [channels[t] for t in parts])[:-1]
            if (
                len(set(parts)) == len(parts) and node.output not in views
                and all(t in made and t not in views and t not in graph.outputs for t in parts)
                and all(int(f) % lanes == 0 for f in firsts)
            ):  # fmt: skip
                for t, f in zip(parts, firsts):
                    views[t] = (node.output, Channels(int(f)))
    return Graph(graph.tensors, graph.nodes, graph.inputs, graph.outputs, graph.constants, views)


def _plain(t: str, views: dict) -> bool:
    """Whether ``t``'s storage is a plain map: its own, or a channel range of a plain map."""
    while t in views:
        t, kind = views[t]
        if not isinstance(kind, Channels):
            return False
    return True


def mark_flattened(graph: Graph) -> Graph:
    """``graph`` with each dense layer that reads a flattened feature map told the map's (c, h, w),
    which its weights' packing follows (the caller's graph is left as it was)."""
    flattened = {view: graph.tensors[src].shape for view, (src, kind) in graph.views.items() if kind == "flatten"}
    if not flattened:
        return graph
    nodes = []
    for node in graph.nodes:
        shapes = [flattened[t] for t in node.inputs if t in flattened]
        if shapes:
            if node.op != "conv2d" or node.attrs.layout != "KM":
                raise ScheduleError(f"a flattened feature map feeds {node.op}; only a dense layer reads one")
            _, h, w, c = shapes[0]
            node = replace(node, attrs=replace(node.attrs, flatten=(c, h, w)))
        nodes.append(node)
    return Graph(graph.tensors, nodes, graph.inputs, graph.outputs, graph.constants, graph.views)


def memory_use(program: Program, arch: Architecture, dram0_vectors: int, dram1_vectors: int) -> dict:
    """Vectors used in each memory (the highest address any instruction touches, plus one)."""
    local = acc = 0
    for _, f in program.chunks():  # a huge program is never decoded whole
        size = f.operand2 + 1
        op = f.opcode
        end0 = f.addr0 + (size - 1) * np.left_shift(1, f.stride0)
        end1 = f.addr1 + (size - 1) * np.left_shift(1, f.stride1)
        local_ops = ((op == Opcode.MATMUL) & ((f.flags & MatMulFlag.ZEROES) == 0)) | (op == Opcode.DATAMOVE)
        simd = op == Opcode.SIMD
        acc_ends = np.concatenate(
            [
                end1[op == Opcode.MATMUL],
                end1[(op == Opcode.DATAMOVE) & (f.flags >= Direction.ACC_TO_LOCAL)],
                f.addr0[simd & ((f.flags & SIMDFlag.WRITE) != 0)],
                f.addr1[simd & ((f.flags & SIMDFlag.READ) != 0)],
            ]
        )
        if local_ops.any():
            local = max(local, int(end0[local_ops].max()) + 1)
        if acc_ends.size:
            acc = max(acc, int(acc_ends.max()) + 1)
    return {
        "dram0_vectors": int(dram0_vectors),
        "dram1_vectors": int(dram1_vectors),
        "local_vectors": local,
        "accumulator_vectors": acc,
        "local_depth": arch.local_depth,
        "accumulator_depth": arch.accumulator_depth,
    }
