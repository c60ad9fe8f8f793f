"""Row bands: a chain of convs whose maps between them are too large for local memory, computed
band by band so that those maps never leave it.

A chain is pointwise and depthwise convs each of whose result only the next one reads
(MobileNet-v2's expansion -> depthwise -> projection: the expanded map is six times the block's
input). The last conv's output
rows are cut into bands; each band is the chain again over the input rows it needs (a conv's
halo rows are computed by every band that needs them), its maps small enough to be one tile in
the accumulators and to stay in local memory, where the next conv reads them (the scheduler's
hand-over of a whole map). The first conv reads its rows of the chain's input in place and the
last writes its rows of the output in place (``Interleave`` views of one row phase), so nothing
else of the graph changes. Every band computes exactly the values the whole layer would, so the
results are the same bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..arch import Architecture
from .graph import Graph, Interleave, Node, Tensor, kernel_size

# Share of local memory one band's map between two convs may take, and with the next conv's result
# beside it (that conv's store buffer, or the next map): the rest holds weights.
MAP_SHARE = 0.5
PAIR_SHARE = 0.8
# Share the chain's first conv may take for its input rows (read from DRAM0) and its band's map:
# its slab and store buffer, beside its weights. (Where they did not fit, its band ran as two
# tiles and the map went to DRAM0 and back.)
FIRST_SHARE = 0.9
# Rows of a map between two convs that bands may compute more than once (their halos), as a share
# of its rows.
MAX_RECOMPUTED = 0.25
# A chain whose largest map between convs is at least this many times local memory runs in bands
# without the latency model comparing (each whole map's DRAM0 round trip then costs more than the
# bands' halos: MobileNet-v2's were faster in bands on every benchmark preset; lowering the whole
# convs too costs most compile time there).
CERTAIN = 2.0


@dataclass(frozen=True)
class Chain:
    """Convs ``nodes`` (each reading the one before's result) cut into bands of ``rows`` output
    rows of the last."""

    nodes: tuple[str, ...]  # their outputs
    rows: int
    certain: bool = False  # bands without comparing (``CERTAIN``)


def _window(graph: Graph, node: Node):
    a = node.attrs
    kh, _ = kernel_size(graph.constants, a)
    return kh, a.strides[0], a.padding[0], a.dilation[0]


def _input_rows(graph: Graph, node: Node, lo: int, hi: int) -> tuple[int, int]:
    """The rows of ``node``'s input its output rows ``lo..hi`` read (padding excluded)."""
    kh, s, pt, d = _window(graph, node)
    h = graph.tensors[node.inputs[0]].h
    return max(0, lo * s - pt), min(h - 1, hi * s - pt + (kh - 1) * d)


def _bandable(graph: Graph, node: Node) -> bool:
    """A conv a chain may hold: pointwise or depthwise (an inverted residual block's: their MACs are
    few, so a band's halo rows cost little; chains of dense 3x3 convs, measured on YOLOv4-tiny and
    ResNet-50, gained at most 0.3% for a quarter more compile time), or an input's conv written as
    its windows (a 1x1 conv over them: MobileNet-v2's first conv)."""
    a = node.attrs
    if not (
        node.op == "conv2d" and a.weight is not None and a.layout == "OIHW" and not a.transposed
        and a.phase is None and a.flatten is None and a.second is None
        and graph.tensors[node.output].n == 1
    ):  # fmt: skip
        return False
    depthwise = a.groups > 1 and a.groups == graph.tensors[node.inputs[0]].c == graph.tensors[node.output].c
    return depthwise or kernel_size(graph.constants, a) == (1, 1)


def chains(graph: Graph, arch: Architecture) -> list[Chain]:
    """The chains worth cutting into bands: two or more convs, each result between them read only
    by the next conv (as its input) and too large to stay whole in local memory, cut into the
    fewest bands whose maps between the convs each fit one tile and ``MAP_SHARE`` of local memory.
    Where no bands fit a chain, its longest tail that they fit (compared with its convs whole)."""
    pinned = set(graph.inputs) | set(graph.outputs) | set(graph.views) | {s for s, _ in graph.views.values()}
    readers: dict[str, list[Node]] = {}
    for node in graph.nodes:
        for t in set(node.inputs):
            readers.setdefault(t, []).append(node)
    producer = {node.output: node for node in graph.nodes}

    def next_in_chain(node: Node) -> Node | None:
        users = readers.get(node.output, [])
        if node.output in pinned or len(users) != 1:
            return None
        nxt = users[0]
        if not _bandable(graph, nxt) or nxt.inputs[0] != node.output or node.output in nxt.inputs[1:]:
            return None
        return nxt

    found, taken = [], set()
    for node in graph.nodes:
        if node.output in taken or not _bandable(graph, node):
            continue
        before = producer.get(node.inputs[0])
        if before is not None and _bandable(graph, before) and next_in_chain(before) is node:
            continue  # not the chain's first conv
        run = [node]
        while (nxt := next_in_chain(run[-1])) is not None:
            run.append(nxt)
        taken.update(n.output for n in run)
        # Cut where a map between two convs fits whole already (the next conv reads it there):
        # a chain's bands then recompute the halo of one conv's window, not of several.
        pieces, piece = [], [run[0]]
        for conv, nxt in zip(run, run[1:]):
            if _fits(arch, graph.tensors[conv.output], graph.tensors[conv.output].h):
                pieces.append(piece)
                piece = []
            piece.append(nxt)
        for piece in pieces + [piece]:
            chain = next(filter(None, (_cut(graph, arch, piece[k:]) for k in range(len(piece) - 1))), None)
            if chain is not None:
                if chain.nodes[0] != piece[0].output:  # (CERTAIN was measured on whole chains)
                    chain = replace(chain, certain=False)
                found.append(chain)
    return found


def _fits(arch: Architecture, t: Tensor, rows: int) -> bool:
    """Whether ``rows`` rows of map ``t`` are one tile in the accumulators and stay in local memory."""
    pixels = rows * t.w
    return pixels <= arch.accumulator_depth // 2 and pixels * -(-t.c // arch.array_size) <= MAP_SHARE * arch.local_depth


def _band_ranges(graph: Graph, run: list[Node], lo: int, hi: int) -> list[tuple[int, int]]:
    """Each conv's output rows for the last conv's rows ``lo..hi``."""
    ranges = [(lo, hi)]
    for node in reversed(run[1:]):
        ranges.insert(0, _input_rows(graph, node, *ranges[0]))
    return ranges


def _cut(graph: Graph, arch: Architecture, run: list[Node]) -> Chain | None:
    """The chain ``run`` cut into the fewest bands that fit, or None: nothing to gain (every map
    between its convs fits whole already, or there is no chain) or no band fits. The first map
    fits beside the first conv's input rows too where that takes at most one band more (its map
    then stays in local memory, not a DRAM0 round trip; more bands, more halo rows and per-band
    work: on arty_a7_35's small local memory it would take MobileNet-v2's 7x7 chains from four
    bands to seven, 14k cycles slower in all by the latency model; on pynqz1_12x12 its 56x56
    chain from six to seven, 73k faster)."""
    plain = _cut_as(graph, arch, run, False)
    beside = _cut_as(graph, arch, run, True) if plain is not None else None
    if beside is not None and _bands(graph, run, beside.rows) <= _bands(graph, run, plain.rows) + 1:
        return beside
    return plain


def _bands(graph: Graph, run: list[Node], rows: int) -> int:
    return -(-graph.tensors[run[-1].output].h // rows)


def _cut_as(graph: Graph, arch: Architecture, run: list[Node], beside_input: bool) -> Chain | None:
    """``_cut`` with or without the first map beside the first conv's input rows."""
    if len(run) < 2 or run[0].inputs[0] in graph.views or run[-1].output in graph.views:
        return None
    if any(t in graph.views for node in run for t in node.inputs[1:]):
        return None
    inner = [graph.tensors[node.output] for node in run[:-1]]

    def vectors(rows: int, t: Tensor) -> int:
        return rows * t.w * -(-t.c // arch.array_size)

    def fits(band: list[tuple[int, int]]) -> bool:
        """Each map of the band one tile that stays in local memory, with the next conv's result,
        and the first one beside the first conv's input rows."""
        rows = [b - a + 1 for a, b in band]
        first, last_row = _input_rows(graph, run[0], *band[0])
        slab = vectors(last_row - first + 1, graph.tensors[run[0].inputs[0]])
        return (
            all(_fits(arch, t, r) for t, r in zip(inner, rows))
            and all(
                vectors(r, t) + vectors(r_next, t_next) <= PAIR_SHARE * arch.local_depth
                for t, r, t_next, r_next in zip(inner, rows, inner[1:] + [last], rows[1:])
            )
            and (not beside_input or slab + vectors(rows[0], inner[0]) <= FIRST_SHARE * arch.local_depth)
        )

    last = graph.tensors[run[-1].output]
    if all(_fits(arch, t, t.h) for t in inner):
        return None  # the whole maps stay in local memory already
    out_h = last.h
    for count in range(2, out_h + 1):  # the fewest bands, as even as rows allow
        rows = -(-out_h // count)
        bands = [(lo, min(out_h, lo + rows) - 1) for lo in range(0, out_h, rows)]
        ranges = [_band_ranges(graph, run, lo, hi) for lo, hi in bands]
        if not all(fits(band) for band in ranges):
            continue
        computed = [sum(band[i][1] - band[i][0] + 1 for band in ranges) for i in range(len(inner))]
        if all(rows_computed <= (1 + MAX_RECOMPUTED) * t.h for rows_computed, t in zip(computed, inner)):
            largest = max(vectors(t.h, t) for t in inner)
            return Chain(tuple(node.output for node in run), rows, largest >= CERTAIN * arch.local_depth)
        return None  # more bands: more rows computed twice
    return None


def _padding(graph: Graph, node: Node, lo: int, hi: int, first: int, last: int) -> tuple[int, int, int, int]:
    """``node``'s padding for its output rows ``lo..hi`` read from its input rows ``first..last``."""
    kh, s, pt, d = _window(graph, node)
    a = node.attrs
    return (first - (lo * s - pt), a.padding[1], hi * s - pt + (kh - 1) * d - last, a.padding[3])


@dataclass
class Banded:
    """A graph with its chains cut into bands (``graph``), the same graph with each chain's convs
    whole at the place of its bands (``plain``: the other alternative, a schedule's choice), and
    for each chain, its bands' nodes, its convs and whether bands are certain to be faster (by the
    output of the first band's first node)."""

    graph: Graph
    plain: Graph
    chains: dict[str, tuple[list[Node], list[Node], bool]] = field(default_factory=dict)
    layer: dict[str, str] = field(default_factory=dict)  # band node output -> its conv's output


def with_bands(graph: Graph, cut: list[Chain]) -> Banded:
    """``graph`` with each chain of ``cut`` computed band by band at the place of its last conv."""
    if not cut:
        return Banded(graph, graph)
    tensors, views, layer = dict(graph.tensors), dict(graph.views), {}
    by_last = {c.nodes[-1]: c for c in cut}
    in_chain = {name for c in cut for name in c.nodes}
    nodes_by_output = {node.output: node for node in graph.nodes}
    nodes: list[Node] = []
    plain: list[Node] = []
    found: dict[str, tuple[list[Node], list[Node], bool]] = {}

    def rows_view(src: str, lo: int, hi: int) -> str:
        t = graph.tensors[src]
        if (lo, hi) == (0, t.h - 1):
            return src
        name = f"{src}.rows{lo}-{hi}"
        if name not in tensors:
            tensors[name] = Tensor(name, (t.n, hi - lo + 1, t.w, t.c))
            views[name] = (src, Interleave(1, 1, lo, 0))
        return name

    for node in graph.nodes:
        if node.output not in in_chain:
            nodes.append(node)
            plain.append(node)
            continue
        chain = by_last.get(node.output)
        if chain is None:
            continue  # emitted with its chain's last conv
        run = [nodes_by_output[name] for name in chain.nodes]
        out_h = graph.tensors[run[-1].output].h
        bands: list[Node] = []
        for lo in range(0, out_h, chain.rows):
            hi = min(out_h, lo + chain.rows) - 1
            ranges = _band_ranges(graph, run, lo, hi)
            first, last = _input_rows(graph, run[0], *ranges[0])
            source = rows_view(run[0].inputs[0], first, last)
            for i, (conv, (a, b)) in enumerate(zip(run, ranges)):
                if i:
                    first, last = ranges[i - 1]  # (all the conv before computed)
                out = conv.output
                if i == len(run) - 1:
                    name = rows_view(out, a, b)
                else:
                    t = graph.tensors[out]
                    name = f"{out}.rows{a}-{b}"
                    tensors[name] = Tensor(name, (t.n, b - a + 1, t.w, t.c))
                inputs = [source] + [rows_view(t, a, b) for t in conv.inputs[1:]]
                attrs = replace(conv.attrs, padding=_padding(graph, conv, a, b, first, last))
                bands.append(Node(conv.op, inputs, name, attrs, list(conv.epilogue), list(conv.source_ops)))
                layer[name] = out
                source = name
        found[bands[0].output] = (bands, run, chain.certain)
        nodes += bands
        plain += run
    g = Graph(tensors, nodes, graph.inputs, graph.outputs, graph.constants, views)
    return Banded(g, replace(graph, nodes=plain), found, layer)
