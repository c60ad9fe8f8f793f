"""The conv's plan: its decisions read directly (weight mode, buffers and bands, accumulator banks,
the covering tap, the hand-over from the conv before)."""

import numpy as np
import pytest

from helpers import conv_plan
from tvm_tensil.arch import PRESETS, Architecture
from tvm_tensil.compiler import Graph, Node, Tensor
from tvm_tensil.compiler.schedule import HandOver, ScheduleError

ARCH = PRESETS["pynqz1"]  # 8x8


def conv(x_shape, co, k=3, padding=1, residual=False, bias=True):
    """x -> conv (k x k, same padding) -> y (+ x, when ``residual``)."""
    n, h, w, ci = x_shape
    rng = np.random.default_rng(0)
    attrs = dict(weight=0, bias=1 if bias else None, padding=(padding,) * 4, groups=1)
    oh, ow = h + 2 * padding - k + 1, w + 2 * padding - k + 1
    nodes = [Node("conv2d", ["x"], "c", attrs)]
    tensors = {"x": Tensor("x", x_shape), "c": Tensor("c", (n, oh, ow, co))}
    if residual:
        nodes.append(Node("add", ["c", "x"], "y"))
        tensors["y"] = Tensor("y", (n, oh, ow, co))
    consts = [rng.standard_normal((co, ci, k, k)).astype("float32"), rng.standard_normal(co).astype("float32")]
    return Graph(tensors, nodes, ["x"], ["y" if residual else "c"], consts)


@pytest.mark.parametrize("local_depth, mode, slots", [(4096, "resident", 0), (800, "input blocks", 2),
                                                      (120, "blocks", 2), (46, "one block", 1)])  # fmt: skip
def test_weight_mode_follows_local_memory(local_depth, mode, slots):
    arch = Architecture("FP16BP8", 4, 4096, 4096, local_depth, 24)
    p = conv_plan(conv((1, 5, 6, 16), 12), arch)
    assert (p.weights.mode, p.weights.slots) == (mode, slots)
    loads = [load for groups in p.weights.groups for g in groups for load in g.loads]
    blocks_in, blocks_out = 4, 3  # 16 and 12 channels on a 4x4 array
    assert len(loads) == blocks_in * blocks_out * 9  # every (input block, output block, tap) once
    assert p.weights.staging <= local_depth // 2 or mode != "resident"


def test_a_covering_tap_starts_the_accumulators_and_carries_the_bias():
    p = conv_plan(conv((1, 6, 6, 8), 8, padding=1), ARCH)
    assert p.covering == 4 and p.order[0] == 4  # the centre tap reads a pixel for every output
    assert p.recipes.bias is None  # the bias rides in the covering tap's weights
    cut = conv_plan(conv((1, 6, 6, 8), 8, padding=3), ARCH)  # every tap misses some output pixel
    assert cut.covering is None and cut.recipes.bias is not None
    assert all(groups[0].loads[0][0] is None for groups in cut.weights.groups)  # a bias row first


def test_two_buffers_and_bands():
    x = (1, 32, 32, 16)
    single = conv_plan(conv(x, 16), ARCH)
    double = conv_plan(conv(x, 16), ARCH, buffers=2)
    assert (single.buffers, double.buffers) == (1, 2)
    assert double.rows * double.cols <= single.rows * single.cols  # two slabs: smaller tiles
    assert len(double.memory.slabs) == len(double.memory.stores) == 2
    banded = conv_plan(conv(x, 16), ARCH, buffers=2, max_rows=8)
    assert banded.rows <= 8 and len(banded.tiles) >= 4
    one_tile = conv_plan(conv((1, 4, 4, 8), 8), ARCH, buffers=2)
    assert len(one_tile.tiles) == 1 and one_tile.buffers == 1  # nothing to overlap with


def test_output_blocks_alternate_banks_when_a_tile_fits_half_the_accumulators():
    small = conv_plan(conv((1, 6, 6, 24), 24), ARCH)  # 36 pixels, 3 output blocks
    assert small.banked
    arch = ARCH.replace(accumulator_depth=64, name="small_acc")
    big = conv_plan(conv((1, 7, 7, 24), 24), arch)  # 49 pixels do not fit half of 64
    assert not big.banked


def test_a_whole_input_left_in_local_memory_becomes_the_slab():
    g = conv((1, 6, 5, 8), 8)
    held = HandOver({"x": (1000, 30)}, (("x", ()),))
    p = conv_plan(g, ARCH, given=held)
    assert p.memory.handed and p.memory.slabs == (1000,)
    own_end = max(p.memory.stores) + 30  # weights and the store buffer sit below or above x
    assert own_end <= 1000 or p.memory.weights >= 1030
    elsewhere = conv_plan(g, ARCH, given=HandOver({"z": (1000, 30)}))
    assert not elsewhere.memory.handed and elsewhere.memory.slabs != (1000,)


def test_tiles_smaller_than_a_held_map_read_it_in_place():
    """The conv before left x whole (120 vectors at 700); the tiles planned over all of local memory
    (8 output blocks) do not fit beside it, so that plan reads x back from DRAM0. In place, every
    tile's slab is the held map read as a whole (no slab of its own), and the conv's own buffers
    sit below or above it."""
    g = conv((1, 12, 10, 8), 64)
    arch = ARCH.replace(local_depth=1400, name="pynqz1_1400")
    held = HandOver({"x": (700, 120)}, (("x", ()),))
    loaded = conv_plan(g, arch, given=held)
    assert not loaded.memory.handed
    p = conv_plan(g, arch, given=held, in_place=True)
    m = p.memory
    assert len(p.tiles) > 1 and m.handed and m.slabs == (700,) and m.geometry == (0, 0, 10, 120)
    own = [(m.weights, m.weights + p.weights.staging)] + [(b, b + p.rows * p.cols * 8) for b in m.stores]
    assert all(hi <= 700 or lo >= 820 for lo, hi in own)
    with pytest.raises(ScheduleError, match="not whole in local memory"):
        conv_plan(g, arch, given=HandOver({"z": (700, 120)}), in_place=True)
    cramped = ARCH.replace(local_depth=130, name="pynqz1_130")  # 5 vectors free below x and above
    with pytest.raises(ScheduleError):
        conv_plan(g, cramped, given=HandOver({"x": (5, 120)}, (("x", ()),)), in_place=True)


def test_a_residual_whose_shortcut_is_still_carried_is_not_handed_over():
    """The shortcut would be read from DRAM0 before its store was issued."""
    g = conv((1, 6, 5, 8), 8, residual=True)
    p = conv_plan(g, ARCH, given=HandOver({"x": (1000, 30)}, (("x", ()),)))
    assert p.memory.handed is False


def projection(x_shape, co):
    """x -> conv 3x3 -> c; x -> conv 1x1 (the projection) -> s; y = c + s (the residual conv's
    shortcut is s, which only it reads)."""
    n, h, w, ci = x_shape
    rng = np.random.default_rng(0)
    nodes = [
        Node("conv2d", ["x"], "c", dict(weight=2, bias=3, padding=(1,) * 4, groups=1)),
        Node("conv2d", ["x"], "s", dict(weight=0, bias=1, padding=(0,) * 4, groups=1)),
        Node("add", ["c", "s"], "y"),
    ]
    tensors = {t: Tensor(t, (n, h, w, co)) for t in ("s", "c", "y")} | {"x": Tensor("x", x_shape)}
    consts = [rng.standard_normal(shape).astype("float32") for shape in [(co, ci, 1, 1), co, (co, ci, 3, 3), co]]
    return Graph(tensors, nodes, ["x"], ["y"], consts)


def test_a_shortcut_left_whole_in_local_memory_is_the_store_buffer():
    """The result overwrites it block by block, each block's shortcut taken first; nothing else of
    the conv's overlaps it. Where another node also reads the shortcut (its stores must go out) or
    it does not fit beside, the shortcut is loaded into a store buffer of the conv's own."""
    g = projection((1, 6, 5, 8), 16)
    held = HandOver({"s": (1000, 60)}, (("s", ()),))
    p = conv_plan(g, ARCH, node=1, given=held, read_once=True)
    m = p.memory
    assert m.shortcut_handed and m.stores == (1000,)
    slab = 6 * 5 * 1  # the input's whole map: one block
    assert max(m.slabs[0] + slab, m.identity) <= 1000 or m.weights >= 1060
    assert not conv_plan(g, ARCH, node=1, given=HandOver({"x": (1000, 30)}), read_once=True).memory.shortcut_handed
    # y = conv(x) + x: the result would overwrite the input the later output blocks' MatMuls read.
    own_input = conv((1, 6, 5, 16), 16, residual=True)
    taken = HandOver({"x": (1000, 60)}, (("x", ()),))
    assert not conv_plan(own_input, ARCH, given=taken, read_once=True).memory.shortcut_handed
    two_readers = Graph(g.tensors | {"z": Tensor("z", (1, 6, 5, 16))}, g.nodes + [Node("relu", ["s"], "z")], ["x"],
                        ["y", "z"], g.constants)  # fmt: skip
    assert not conv_plan(two_readers, ARCH, node=1, given=held, read_once=True).memory.shortcut_handed
    cramped = ARCH.replace(local_depth=400, name="cramped")  # the conv's 192 vectors fit neither side
    middle = HandOver({"s": (150, 60)}, (("s", ()),))
    p = conv_plan(g, cramped, node=1, given=middle, read_once=True)
    assert not p.memory.shortcut_handed and p.memory.weights + 192 + 60 <= 400


@pytest.mark.parametrize("early", [True, False])
def test_with_one_store_buffer_a_blocks_stores_follow_its_gather(early):
    """Early: an output block's stores go out beside the next blocks' MatMuls, before the tile's
    last block; otherwise all of a tile's stores follow its last block."""
    from helpers import schedule_context
    from tvm_tensil.compiler.lir import LIR
    from tvm_tensil.compiler.memory import ConstTable
    from tvm_tensil.compiler.schedule import NOTHING, Out
    from tvm_tensil.compiler.schedule import conv as lowering
    from tvm_tensil.isa.asm import disassemble

    arch = Architecture("FP16BP8", 8, 1024, 1024, 1024, 512)
    graph = conv((1, 16, 16, 8), 24, k=1, padding=0)
    ctx, fused = schedule_context(graph, arch)
    out = Out(LIR(arch), ConstTable(arch))
    p = lowering.plan(fused.nodes[0], ctx, NOTHING, out.consts, 1)
    assert p.buffers == 1 and len(p.tiles) > 1 and len(p.weights.groups) == 3
    lowering.emit(fused.nodes[0], ctx, NOTHING, out, p, early=early)
    lines = [ln.split()[:2] for ln in disassemble(out.lir.program("t")).splitlines()]
    matmuls = [i for i, ln in enumerate(lines) if ln[0] == "matmul"]
    first_store = next(i for i, ln in enumerate(lines) if ln[1:] == ["local_to_dram0"])
    last_of_first_tile = matmuls[len(matmuls) // len(p.tiles) - 1]
    assert (first_store < last_of_first_tile) == early


@pytest.mark.parametrize("defer", [True, False])
def test_a_tiles_shortcut_goes_out_block_by_block_beside_its_matmuls(defer):
    """Deferred, each block's shortcut load goes out before the block's move into the accumulators
    and the later blocks' loads beside the first blocks' MatMuls; else all before the first MatMul.
    The latency model finds the deferred program faster."""
    from helpers import schedule_context
    from tvm_tensil.compiler import CompileOptions
    from tvm_tensil.compiler.latency import estimate_cycles
    from tvm_tensil.compiler.lir import LIR
    from tvm_tensil.compiler.memory import ConstTable
    from tvm_tensil.compiler.schedule import NOTHING, Out
    from tvm_tensil.compiler.schedule import conv as lowering
    from tvm_tensil.isa.asm import disassemble

    arch = Architecture("FP16BP8", 8, 8192, 1024, 1024, 512)
    graph = conv((1, 16, 16, 32), 32, k=1, padding=0, residual=True)
    cycles = {}
    for deferred in (True, False):
        ctx, fused = schedule_context(graph, arch, CompileOptions(defer_shortcut=deferred))
        out = Out(LIR(arch), ConstTable(arch))
        p = lowering.plan(fused.nodes[0], ctx, NOTHING, out.consts, 1)
        assert p.buffers == 1 and len(p.tiles) > 1 and len(p.weights.groups) == 4
        lowering.emit(fused.nodes[0], ctx, NOTHING, out, p)
        program = out.lir.program("t")
        cycles[deferred] = estimate_cycles(program, arch)["total"]
        if deferred != defer:
            continue
        lines = [ln.split() for ln in disassemble(program).splitlines() if not ln.startswith(";")]
        store = p.memory.stores[0]
        count = p.tiles[0].pixels
        loaded_at = {}  # store buffer block -> line of its latest shortcut load
        first_matmul, after_matmul = None, 0
        for k, ln in enumerate(lines):
            if ln[0] == "matmul" and first_matmul is None:
                first_matmul = k
            if ln[:2] == ["datamove", "dram0_to_local"]:
                local = int(ln[2].split("=")[1], 16)
                if store <= local < store + 4 * count:
                    loaded_at[(local - store) // count] = k
                    after_matmul += first_matmul is not None and k < len(lines) // len(p.tiles)
            if ln[:2] == ["datamove", "local_to_acc"]:
                block = (int(ln[2].split("=")[1], 16) - store) // count
                assert block in loaded_at  # its shortcut is in
        assert (after_matmul > 0) == defer
    assert cycles[True] < cycles[False]


def depthwise(x_shape, k=3):
    """x -> depthwise conv (k x k, same padding, a ReLU6) -> y."""
    n, h, w, c = x_shape
    rng = np.random.default_rng(1)
    attrs = dict(weight=0, bias=1, padding=(k // 2,) * 4, groups=c)
    nodes = [Node("conv2d", ["x"], "c", attrs), Node("clip", ["c"], "y", dict(lo=0.0, hi=6.0))]
    tensors = {"x": Tensor("x", x_shape), "c": Tensor("c", x_shape), "y": Tensor("y", x_shape)}
    consts = [rng.standard_normal((c, 1, k, k)).astype("float32"), rng.standard_normal(c).astype("float32")]
    return Graph(tensors, nodes, ["x"], ["y"], consts)


@pytest.mark.parametrize("preset", ["arty_a7_35", "ultra96v2_300mhz"])
@pytest.mark.parametrize("graph", ["conv", "residual", "depthwise"])
def test_played_runs_are_the_instructions_one_by_one(monkeypatch, preset, graph):
    """The stream plays a weight group's MatMuls and loads in runs between the deferred moves, and
    reuses a group's recording and a block's epilogue at other addresses: the program is the one
    the same instructions make played one at a time, each recorded where it goes (for every plan
    the search weighs: buffers, bands, banks, pipelined, paced; a core with one clock for DRAM reads
    and writes, and one with two and the window MatMul)."""
    from helpers import schedule_context
    from tvm_tensil.compiler.lir import CONTINUED, LIR, LOAD
    from tvm_tensil.compiler.memory import ConstTable
    from tvm_tensil.compiler.schedule import NOTHING, Out
    from tvm_tensil.compiler.schedule import conv as lowering

    class Forgetful(dict):
        def __setitem__(self, key, value):
            pass

    class OneByOne(lowering._Stream):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._queued = Forgetful()

        def loads_key(self, group):
            return 0, ()  # (no single part: recorded in place, never reused)

        def play(self):
            burst, i = self.burst, 0
            while i < len(burst):
                e = i
                while burst.kinds[e] == CONTINUED:
                    e += 1
                kind = burst.kinds[e]
                if kind >= 0:
                    self._before_matmul()
                self.lir.emit_burst(burst, i, e + 1)
                if kind >= 0:
                    self.clock.compute(burst.costs[e])
                    self._earn(kind)
                elif kind == LOAD:
                    self.clock.compute(burst.costs[e])
                    self._release_earned()
                i = e + 1
            burst.clear()

    arch = PRESETS[preset].replace(local_depth=2048)  # (several tiles)
    g = {"conv": lambda: conv((1, 20, 20, 24), 40), "residual": lambda: conv((1, 20, 20, 32), 32, residual=True),
         "depthwise": lambda: depthwise((1, 24, 24, 48))}[graph]()  # fmt: skip
    ctx, fused = schedule_context(g, arch)
    node = fused.nodes[0]
    programs = {}
    for stream in (lowering._Stream, OneByOne):
        monkeypatch.setattr(lowering, "_Stream", stream)
        for buffers in (1, 2):
            for pipelined, paced in ((False, False), (True, False), (False, True), (True, True)):
                out = Out(LIR(arch), ConstTable(arch))
                p = lowering.plan(node, ctx, NOTHING, out.consts, buffers)
                lowering.emit(node, ctx, NOTHING, out, p, pipelined, paced=paced)
                programs.setdefault((buffers, pipelined, paced), []).append(out.lir.program("t").data)
    assert len(programs) == 8
    for key, (played, one_by_one) in programs.items():
        assert played == one_by_one, key


def _depthwise_relu(h: int, channels: int, stride: int) -> tuple[Graph, np.ndarray]:
    """A 3x3 depthwise conv (padding 1) and a ReLU over an h x h map, weights and input on a 1/16
    grid; the graph and an input."""
    rng = np.random.default_rng(2)
    w, b = rng.integers(-8, 8, (channels, 1, 3, 3)) / 16, rng.integers(-8, 8, channels) / 16
    x = rng.integers(-16, 16, (1, h, h, channels)) / 16
    oh = (h + 2 - 3) // stride + 1
    attrs = dict(weight=0, bias=1, groups=channels, padding=(1, 1, 1, 1), strides=(stride, stride))
    graph = Graph(
        {"x": Tensor("x", x.shape), "y": Tensor("y", (1, oh, oh, channels)), "r": Tensor("r", (1, oh, oh, channels))},
        [Node("conv2d", ["x"], "y", attrs), Node("relu", ["y"], "r")],
        ["x"],
        ["r"],
        [w, b],
    )
    return graph, x


@pytest.mark.parametrize("channels", [576, 200])  # (200: the last group narrower, its own recording)
def test_a_depthwise_convs_later_channel_groups_replay_the_first_ones_decisions(channels, monkeypatch):
    """The groups differ only in where their maps and weights lie: each later group as wide replays
    the first one's decisions (``search.decided_once``), giving the program that searching every
    group gives."""
    from tvm_tensil.compiler import compile_graph
    from tvm_tensil.compiler.schedule import conv as conv_module

    arch, (graph, _) = PRESETS["arty_a7_35"], _depthwise_relu(14, channels, 1)
    replayed, decide = [], conv_module.decided_once

    def counted(decisions, key, lower, out):
        replayed.append(key in decisions)
        return decide(decisions, key, lower, out)

    monkeypatch.setattr(conv_module, "decided_once", counted)
    with_replays = compile_graph(graph, arch, "t").program.data
    monkeypatch.setattr(conv_module, "decided_once", lambda decisions, key, lower, out: lower(out))
    assert replayed.count(True) >= replayed.count(False) > 0
    assert compile_graph(graph, arch, "t").program.data == with_replays


@pytest.mark.parametrize(
    "h, channels, stride, gain",
    [(14, 576, 1, 0.5), (14, 200, 2, 1.0)],  # MobileNet-v2's 14x14 depthwise on arty_a7_35; a partial block
)
def test_a_depthwise_conv_larger_than_local_memory_goes_a_group_of_channel_blocks_at_a_time(h, channels, stride, gain):
    """Each output block of a depthwise conv reads only its own input block: where the map of all
    blocks is more than local memory holds, a group of blocks at a time gets tiles of the group's
    whole map (read once, in runs of whole rows) instead of tiles of a few pixels of every block.
    Exact either way, and the latency model keeps the groups."""
    from reference import conv2d_nhwc
    from tvm_tensil.compiler import compile_graph
    from tvm_tensil.compiler.latency import estimate_cycles
    from tvm_tensil.compiler.schedule import conv as conv_module
    from tvm_tensil.runtime import Emulator

    arch = PRESETS["arty_a7_35"]  # 4,096 vectors of local memory
    graph, x = _depthwise_relu(h, channels, stride)
    w, b = graph.constants
    expected = np.maximum(conv2d_nhwc(x, w, b, strides=(stride, stride), padding=(1, 1, 1, 1), groups=channels), 0)
    sizes, original = [], conv_module.block_group_sizes
    cycles = {}
    for in_groups in (True, False):
        ways = (lambda node, ctx: sizes.append(original(node, ctx)) or sizes[-1]) if in_groups else (lambda n, c: [])
        conv_module.block_group_sizes = ways
        try:
            part = compile_graph(graph, arch, "t")
        finally:
            conv_module.block_group_sizes = original
        y = Emulator(arch).run_model(part.model(graph.constants), {"x": x})["r"]
        np.testing.assert_array_equal(y, expected)
        cycles[in_groups] = estimate_cycles(part.program, arch)["total"]
    # Groups whose input map takes a quarter or an eighth of local memory, fewer than all blocks.
    assert sizes[0] == sorted({arch.local_depth // (k * h * h) for k in (4, 8)})
    assert all(1 <= s < -(-channels // arch.array_size) for s in sizes[0])
    assert cycles[True] <= gain * cycles[False]


def test_a_conv_of_many_weights_and_few_pixels_stores_through_a_ring_of_blocks():
    """MobileNet-v2's last 1x1 conv (320 -> 1280 channels at 7x7) on arty_a7_35: a store buffer of
    every output block (7,840 vectors) cuts the map into tiles of a few pixels, each loading all
    6,400 weight blocks again. With the store buffer a ring of ``STORE_SLOTS`` blocks, each block
    stored as soon as it is gathered, one tile takes the whole map and loads each block once.
    Exact, and the latency model keeps the ring."""
    from reference import conv2d_nhwc
    from tvm_tensil.compiler import compile_graph
    from tvm_tensil.compiler.latency import estimate_cycles
    from tvm_tensil.compiler.schedule import conv as conv_module
    from tvm_tensil.isa.instructions import Direction, Opcode
    from tvm_tensil.runtime import Emulator

    arch = PRESETS["arty_a7_35"]
    rng = np.random.default_rng(3)
    h, ci, co = 7, 320, 1280
    w, b = rng.integers(-4, 5, (co, ci, 1, 1)) / 16, rng.integers(-8, 8, co) / 16
    x = rng.integers(-16, 17, (1, h, h, ci)) / 16
    graph = Graph(
        {"x": Tensor("x", x.shape), "y": Tensor("y", (1, h, h, co)), "r": Tensor("r", (1, h, h, co))},
        [Node("conv2d", ["x"], "y", dict(weight=0, bias=1, groups=1)), Node("relu", ["y"], "r")],
        ["x"],
        ["r"],
        [w, b],
    )
    expected = np.maximum(conv2d_nhwc(x, w, b), 0)
    original, weights, cycles = conv_module._ring_plan, {}, {}
    for ring in (True, False):
        conv_module._ring_plan = original if ring else (lambda *args: None)
        try:
            part = compile_graph(graph, arch, "t")
        finally:
            conv_module._ring_plan = original
        np.testing.assert_array_equal(Emulator(arch).run_model(part.model(graph.constants), {"x": x})["r"], expected)
        cycles[ring] = estimate_cycles(part.program, arch)["total"]
        f = part.program.fields()
        reads = (f.opcode == int(Opcode.DATAMOVE)) & (f.flags == int(Direction.DRAM1_TO_LOCAL))
        weights[ring] = int((f.operand2[reads] + 1).sum())
    blocks = (ci // 8) * (co // 8)
    assert blocks * 8 <= weights[True] < 1.2 * blocks * 9  # each weight block read once
    assert weights[False] > 2 * blocks * 8  # a tile of a few pixels at a time: read again per tile
    assert cycles[True] < 0.6 * cycles[False]
