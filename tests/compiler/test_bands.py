"""Row bands: a chain of convs whose maps between them do not fit local memory, band by band."""

from dataclasses import replace

import numpy as np
import pytest

from reference import conv2d_nhwc
from tvm_tensil.arch import PRESETS
from tvm_tensil.compiler import CompileOptions, Graph, Node, Tensor, compile_graph, schedule
from tvm_tensil.compiler import bands as bands_module
from tvm_tensil.compiler.bands import chains, with_bands
from tvm_tensil.compiler.compile import fuse
from tvm_tensil.compiler.memory import CapacityError
from tvm_tensil.isa.instructions import Direction, Opcode
from tvm_tensil.runtime import Emulator

# Small memories, so that a 20x12 map of 32 channels (960 vectors) does not fit and bands of a few
# rows do.
ARCH = replace(PRESETS["pynqz1"], local_depth=1024, accumulator_depth=256)
WINDOW = replace(PRESETS["pynqz1"], local_depth=1024, accumulator_depth=256, window_matmul=True)


def block(shape, expand: int, stride: int, residual: bool, kernel: int = 3, seed: int = 0):
    """An inverted residual block: 1x1 expansion + ReLU, depthwise ``kernel`` x ``kernel`` conv +
    ReLU, 1x1 projection (+ the input)."""
    rng = np.random.default_rng(seed)
    n, h, w, c = shape
    e = c * expand
    pad = kernel // 2
    oh, ow = (h + 2 * pad - kernel) // stride + 1, (w + 2 * pad - kernel) // stride + 1
    consts = [
        rng.integers(-8, 8, (e, c, 1, 1)) / 64,
        rng.integers(-8, 8, (e,)) / 16,
        rng.integers(-8, 8, (e, 1, kernel, kernel)) / 32,
        rng.integers(-8, 8, (c, e, 1, 1)) / 64,
    ]
    t = {
        "x": Tensor("x", shape), "a": Tensor("a", (n, h, w, e)), "ra": Tensor("ra", (n, h, w, e)),
        "b": Tensor("b", (n, oh, ow, e)), "rb": Tensor("rb", (n, oh, ow, e)), "y": Tensor("y", (n, oh, ow, c)),
    }  # fmt: skip
    nodes = [
        Node("conv2d", ["x"], "a", dict(weight=0, bias=1)),
        Node("relu", ["a"], "ra"),
        Node("conv2d", ["ra"], "b", dict(weight=2, strides=(stride, stride), padding=(pad,) * 4, groups=e)),
        Node("relu", ["b"], "rb"),
        Node("conv2d", ["rb", "x"] if residual else ["rb"], "y", dict(weight=3, residual=residual)),
    ]
    graph = Graph(t, nodes, ["x"], ["y"], consts)
    x = rng.integers(-16, 16, shape) / 16
    a = np.maximum(conv2d_nhwc(x, consts[0], consts[1]), 0)
    b = np.maximum(conv2d_nhwc(a, consts[2], None, (stride, stride), (pad,) * 4, groups=e), 0)
    y = conv2d_nhwc(b, consts[3], None) + (x if residual else 0)
    return graph, x, y


def run(graph, x, arch, bands):
    part = compile_graph(graph, arch, "t", options=CompileOptions(row_bands=bands))
    out = Emulator(arch).run_model(part.model(graph.constants), {"x": x})["y"]
    return out, part


def stores(part) -> int:
    f = part.program.fields()
    moves = (f.opcode == Opcode.DATAMOVE) & (f.flags == Direction.LOCAL_TO_DRAM0)
    return int((f.operand2[moves] + 1).sum())


@pytest.mark.parametrize("arch", [ARCH, WINDOW], ids=["diagonal", "window"])
@pytest.mark.parametrize(
    "shape, expand, stride, residual, kernel",
    [
        ((1, 20, 12, 8), 4, 1, True, 3),  # a residual block
        ((1, 21, 12, 8), 4, 2, False, 3),  # stride 2, odd rows: the last band shorter
        ((1, 40, 6, 8), 4, 1, False, 5),  # two halo rows a side
    ],
)
def test_a_block_in_bands_computes_exactly_what_the_whole_layers_do(arch, shape, expand, stride, residual, kernel):
    graph, x, want = block(shape, expand, stride, residual, kernel)
    (chain,) = chains(fuse(graph), arch)
    banded, part = run(graph, x, arch, True)
    whole, plain = run(graph, x, arch, False)
    np.testing.assert_array_equal(banded, whole)  # bit for bit
    np.testing.assert_allclose(banded, want, atol=0.1)  # (the data type's rounding of a and b)
    # The maps inside the chain never reach DRAM0. (After a stride 2, the depthwise conv's result
    # fits whole: the chain ends there, its result stored, and the projection reads it whole.)
    _, oh, ow, c = want.shape
    blocks = -(-c * expand // arch.array_size)
    if stride == 1:
        assert chain.nodes == ("ra", "rb", "y")
        assert stores(part) == oh * ow < stores(plain)
    else:
        assert chain.nodes == ("ra", "rb")
        assert stores(part) == oh * ow * (1 + blocks) < stores(plain)


def test_bands_are_the_fewest_that_fit_and_read_their_halo_rows():
    graph, _, _ = block((1, 20, 12, 8), 4, 1, True)
    graph = fuse(graph)  # (the ReLUs become the convs' epilogues: ra, rb are the convs' results)
    (chain,) = chains(graph, ARCH)
    # A band's expanded map (its rows + 2 halo rows, 12 wide, 2 blocks of 16) in half of 1024
    # vectors and one tile in half the accumulators (128 pixels): at most 8 rows (7 and 2 halo rows
    # do not fit), so the 20 rows in 3 bands of 7.
    assert chain.rows == 7
    banded = with_bands(graph, [chain])
    bands, convs, certain = banded.chains["ra.rows0-7"]
    assert not certain  # (the expanded map, 960 vectors, is not twice local memory)
    assert [n.output for n in convs] == ["ra", "rb", "y"]
    assert [n.output for n in bands] == [
        "ra.rows0-7", "rb.rows0-6", "y.rows0-6",
        "ra.rows6-14", "rb.rows7-13", "y.rows7-13",
        "ra.rows13-19", "rb.rows14-19", "y.rows14-19",
    ]  # fmt: skip
    dw = {n.output: n.attrs.padding for n in bands if n.output.startswith("rb.")}
    # Zero padding at the map's edges only; inside, the halo rows are real rows of the band's map.
    assert dw == {"rb.rows0-6": (1, 1, 0, 1), "rb.rows7-13": (0, 1, 0, 1), "rb.rows14-19": (0, 1, 1, 1)}
    second = next(n for n in bands if n.output == "ra.rows6-14")
    assert second.inputs == ["x.rows6-14"] and banded.graph.views["x.rows6-14"][0] == "x"
    last = next(n for n in bands if n.output == "y.rows7-13")
    assert last.inputs == ["rb.rows7-13", "x.rows7-13"]  # the shortcut's rows, read in place
    assert banded.layer["ra.rows6-14"] == "ra" and banded.layer["y.rows7-13"] == "y"
    assert banded.plain.nodes == graph.nodes  # the other alternative: the convs whole


def test_no_bands_where_the_maps_fit_or_another_node_reads_them():
    graph, _, _ = block((1, 6, 6, 8), 4, 1, True)
    assert chains(fuse(graph), ARCH) == []  # 72 vectors a map: handed over whole already
    graph, _, _ = block((1, 20, 12, 8), 4, 1, True)
    graph = fuse(graph)
    read_twice = replace(graph, outputs=["y", "ra"])  # the expanded map is an output too
    assert [c.nodes for c in chains(read_twice, ARCH)] == [("rb", "y")]


@pytest.mark.parametrize(
    "arch, shape, expand, residual",
    [
        (WINDOW, (1, 20, 12, 8), 4, True),
        # Bands take 22% and 19% fewer cycles; measured before the pass, the convs whole looked faster.
        (WINDOW, (1, 40, 24, 8), 4, False),
        (ARCH, (1, 24, 24, 8), 6, False),
    ],
    ids=["residual", "window", "diagonal"],
)
def test_the_latency_model_keeps_bands_or_whole_convs_whichever_is_faster(arch, shape, expand, residual):
    """Each way is measured as the interleave pass leaves it (it recovers more at the bands' many
    node boundaries): the final program's cycles are the faster way's."""
    graph, x, _ = block(shape, expand, 1, residual)
    cycles = {}
    for bands in (True, False, None):
        out, part = run(graph, x, arch, bands)
        cycles[bands] = part.report["cycles"]["total"]
        # The report names the model's layers, each once, whichever way they ran.
        assert [n["output"] for n in part.report["nodes"]] == ["ra", "rb", "y"]
    assert cycles[None] == min(cycles[True], cycles[False])


def test_a_chain_whose_whole_maps_do_not_fit_dram0_runs_in_bands():
    """The whole convs need DRAM0 for their expanded maps (2,400 vectors here); bands do not (1,248):
    on 1,536 vectors the build takes bands without trying the whole convs, and is exact."""
    graph, x, _ = block((1, 20, 12, 8), 4, 1, True)
    small = replace(WINDOW, dram0_depth=1536)
    with pytest.raises(CapacityError, match="2400 vectors of DRAM0"):
        run(graph, x, small, False)
    out, part = run(graph, x, small, None)
    np.testing.assert_array_equal(out, run(graph, x, WINDOW, False)[0])
    assert part.report["cycles"]["total"] == run(graph, x, small, True)[1].report["cycles"]["total"]


def two_blocks(h=20, w=12, c=8, e=32):
    """Two blocks without their first block's ReLUs, the second without a shortcut: x -> a (1x1,
    e channels) -> b (depthwise) -> p (1x1, c) -> q (1x1, e) -> r (depthwise) -> y (1x1, c)."""
    rng = np.random.default_rng(5)
    shapes = {"x": c, "a": e, "b": e, "p": c, "q": e, "r": e, "y": c}
    tensors = {name: Tensor(name, (1, h, w, ch)) for name, ch in shapes.items()}
    consts, nodes = [], []
    for src, dst in zip("xabpqr", "abpqry"):
        cin, cout = shapes[src], shapes[dst]
        depthwise = dst in "br"
        consts.append(rng.integers(-8, 8, (cout, 1, 3, 3) if depthwise else (cout, cin, 1, 1)) / 32)
        attrs = dict(weight=len(consts) - 1)
        if depthwise:
            attrs.update(padding=(1,) * 4, groups=cout)
        nodes.append(Node("conv2d", [src], dst, attrs))
    return Graph(tensors, nodes, ["x"], ["y"], consts), rng.integers(-16, 16, (1, h, w, c)) / 16


def test_where_no_bands_fit_a_whole_chain_its_longest_tail_runs_in_bands():
    """The six convs need bands too thin for the expanded map a (more than a quarter of its rows
    computed twice); without a, the five after it fit bands of 7 rows. That tail is compared with
    its convs whole (the rule for bands without comparing was measured on whole chains); forced,
    it is exact."""
    graph, x = two_blocks()
    (chain,) = chains(fuse(graph), ARCH)
    assert chain.nodes == ("b", "p", "q", "r", "y") and chain.rows == 7 and not chain.certain
    banded, part = run(graph, x, ARCH, True)
    np.testing.assert_array_equal(banded, run(graph, x, ARCH, False)[0])
    # Stored: y, a (read by b's bands) and b's bands (each two tiles beside a's rows: 8 + 9 + 7 rows
    # of 4 blocks); p, q and r stay in local memory.
    assert stores(part) == 20 * 12 + 20 * 12 * 4 + 24 * 12 * 4


def test_a_patched_first_conv_starts_a_chain():
    """An RGB input's 3x3 stride 2 conv, written by the host as its windows (a 1x1 conv over them),
    heads the chain of the block after it: its bands read rows of the windows in place."""
    from tvm_tensil.compiler.compile import with_input_patches

    graph, _, _ = block((1, 20, 12, 8), 4, 1, False)
    rng = np.random.default_rng(2)
    tensors = {**graph.tensors, "img": Tensor("img", (1, 40, 24, 3))}
    consts = list(graph.constants) + [rng.integers(-8, 8, (8, 3, 3, 3)) / 32]
    first = Node("conv2d", ["img"], "x", dict(weight=len(consts) - 1, strides=(2, 2), padding=(1, 0, 0, 1)))
    graph = Graph(tensors, [first] + graph.nodes, ["img"], ["y"], consts)
    patched, stored = with_input_patches(fuse(graph), WINDOW)
    assert "img" in stored
    (chain,) = chains(patched, WINDOW)
    assert chain.nodes == ("x", "ra", "rb", "y")
    img = rng.integers(-16, 16, (1, 40, 24, 3)) / 16
    outs = [
        Emulator(WINDOW).run_model(part.model(graph.constants), {"img": img})["y"]
        for part in (compile_graph(graph, WINDOW, "t", options=CompileOptions(row_bands=b)) for b in (True, False))
    ]
    np.testing.assert_array_equal(*outs)


@pytest.mark.parametrize(
    "arch, shape, expand, stride, residual, kernel",
    [
        (WINDOW, (1, 20, 12, 8), 4, 1, True, 3),  # every band in turn
        (WINDOW, (1, 21, 12, 8), 4, 2, False, 3),  # the last band's do not fit beside each other
        (ARCH, (1, 40, 6, 8), 4, 1, False, 5),  # diagonal weight blocks, two halo rows a side
    ],
    ids=["residual", "stride2", "diagonal5x5"],
)
def test_an_expansion_and_its_depthwise_conv_in_turn_compute_what_they_do_in_order(
    arch, shape, expand, stride, residual, kernel
):
    """Where both fit in local memory and a bank, the expansion's blocks and the depthwise conv's
    go in turn (``conv.emit_in_turn``): bit for bit what they compute one after the other, and the
    block's float result within the data type's rounding."""
    graph, x, want = block(shape, expand, stride, residual, kernel)
    options = {t: CompileOptions(row_bands=True, in_turn=t) for t in (True, False)}
    parts = {t: compile_graph(graph, arch, "t", options=o) for t, o in options.items()}
    outs = {t: Emulator(arch).run_model(p.model(graph.constants), {"x": x})["y"] for t, p in parts.items()}
    np.testing.assert_array_equal(outs[True], outs[False])  # bit for bit
    np.testing.assert_allclose(outs[True], want, atol=0.1)  # (the data type's rounding of a and b)
    layers = {n["output"]: n for n in parts[True].report["nodes"]}
    assert layers["ra"]["in_turn_with"] == "rb" and layers["rb"]["in_turn_with"] == "ra"
    assert not any("in_turn_with" in n for n in parts[False].report["nodes"])
    assert parts[True].program.data != parts[False].program.data


@pytest.mark.parametrize("shape, pairs", [((1, 40, 24, 8), False), ((1, 40, 12, 8), True)], ids=["apart", "in-turn"])
def test_the_bands_are_lowered_in_turn_only_where_a_pair_fits(monkeypatch, shape, pairs):
    """Comparing the bands in turn with the bands one conv at a time lowers them a second time only
    where some conv and its depthwise conv fit together (``conv.in_turn_plans``): up to its first
    pair the in-turn sequence is the other one, so with none it is the same program."""
    graph, _, _ = block(shape, 4, 1, False)
    lowered, conv2d = [], schedule.LOWERINGS["conv2d"]
    monkeypatch.setitem(schedule.LOWERINGS, "conv2d", lambda node, *a: (lowered.append(node), conv2d(node, *a))[1])
    calls, parts = {}, {}
    for in_turn in (None, False):
        lowered.clear()
        parts[in_turn] = compile_graph(graph, ARCH, "t", options=CompileOptions(row_bands=True, in_turn=in_turn))
        calls[in_turn] = len(lowered)
    assert any("in_turn_with" in n for n in parts[None].report["nodes"]) == pairs
    if pairs:
        assert calls[None] > calls[False]
    else:
        assert calls[None] == calls[False] and parts[None].program.data == parts[False].program.data


def depthwise_first(shape, c_out: int = 8, seed: int = 0):
    """A chain that starts with a depthwise 3x3 conv (+ ReLU) reading the graph's input, then a 1x1
    conv: the first conv's input rows come from DRAM0 beside its band's map."""
    rng = np.random.default_rng(seed)
    n, h, w, c = shape
    consts = [rng.integers(-8, 8, (c, 1, 3, 3)) / 32, rng.integers(-8, 8, (c_out, c, 1, 1)) / 64]
    t = {
        "x": Tensor("x", shape), "b": Tensor("b", (n, h, w, c)), "rb": Tensor("rb", (n, h, w, c)),
        "y": Tensor("y", (n, h, w, c_out)),
    }  # fmt: skip
    nodes = [
        Node("conv2d", ["x"], "b", dict(weight=0, padding=(1,) * 4, groups=c)),
        Node("relu", ["b"], "rb"),
        Node("conv2d", ["rb"], "y", dict(weight=1)),
    ]
    x = rng.integers(-16, 16, shape) / 16
    b = np.maximum(conv2d_nhwc(x, consts[0], None, padding=(1,) * 4, groups=c), 0)
    return Graph(t, nodes, ["x"], ["y"], consts), x, conv2d_nhwc(b, consts[1], None)


def test_a_chains_first_map_fits_beside_its_input_rows_for_one_band_more(monkeypatch):
    """Two bands of 10 rows fit the maps between the convs, but not the first conv's input rows
    (12 rows of 32 channels from DRAM0) beside its map: its band would run as two tiles and the map
    go to DRAM0 and back. Three bands of 7 rows fit: the map stays in local memory (only the
    output is stored), in fewer cycles, the same bits."""
    graph, x, want = depthwise_first((1, 20, 12, 32))
    (chain,) = chains(fuse(graph), WINDOW)
    assert chain.rows == 7
    part = compile_graph(graph, WINDOW, "t", options=CompileOptions(row_bands=True))
    out = Emulator(WINDOW).run_model(part.model(graph.constants), {"x": x})["y"]
    assert stores(part) == 20 * 12  # y only
    monkeypatch.setattr(bands_module, "FIRST_SHARE", float("inf"))  # the first map as if it always fit
    (spilling,) = chains(fuse(graph), WINDOW)
    assert spilling.rows == 10
    spilled = compile_graph(graph, WINDOW, "t", options=CompileOptions(row_bands=True))
    assert stores(spilled) == 20 * 12 * (1 + 4)  # and the whole first map (four blocks of 32 channels)
    assert part.report["cycles"]["total"] < spilled.report["cycles"]["total"]
    np.testing.assert_array_equal(out, Emulator(WINDOW).run_model(spilled.model(graph.constants), {"x": x})["y"])
    np.testing.assert_allclose(out, want, atol=0.1)
