"""A dense layer of one output vector with its weights streamed through the array: exact against
numpy and bit-identical with the weight-stationary form (the same roundings in the same order), from
DRAM1 alone or from both DRAM banks in turn, in class groups and input pieces where the memories are
small; the latency model chooses it where it is faster; the model's DRAM0 constants are written once
and again only when something wrote over them."""

import numpy as np
import pytest

from helpers import dense_graph, tie_bound, tie_input
from tvm_tensil.arch import PRESETS, Architecture
from tvm_tensil.compiler import CompileOptions, Graph, Node, Tensor, compile_graph
from tvm_tensil.compiler.latency import estimate_cycles
from tvm_tensil.compiler.schedule import dense
from tvm_tensil.isa.instructions import Direction, Opcode
from tvm_tensil.model import ModelError, TensilModel
from tvm_tensil.runtime import Emulator

# 4x4 FP16BP8, a 32-bit bus (two beats a vector): small memories make groups and pieces.
SMALL = Architecture("FP16BP8", 4, 4096, 4096, 1024, 48, stride0_depth=4, stride1_depth=4, name="dense_4x4")
SMALL = SMALL.replace(axi_data_width=32)


def grid(rng, shape, lo=-16, hi=16):
    return rng.integers(lo, hi, shape) / 16


def run(graph, x, arch, stream, **options):
    part = compile_graph(graph, arch, "t", options=CompileOptions(stream_dense=stream, **options))
    model = part.model(graph.constants)
    emu = Emulator(arch)
    y = emu.run_model(model, {"x": x})[graph.outputs[0]]
    return y.reshape(1, -1), part, model, emu


def _reads(program, direction) -> int:
    f = program.fields()
    m = (f.opcode == int(Opcode.DATAMOVE)) & (f.flags == int(direction))
    return int((f.operand2[m] + 1).sum())


@pytest.mark.parametrize(
    "arch, features, classes, bias, relu",
    [
        (PRESETS["ultra96v2_300mhz"], 160, 70, True, False),  # 16 lanes, partial last block
        (PRESETS["pynqz1_12x12"], 100, 50, False, True),  # 12 lanes: the lane moves go one by one
        (PRESETS["pynqz1"], 64, 24, True, True),  # 8 lanes
        (PRESETS["arty_a7_35"], 64, 24, True, False),  # one beat a vector: DRAM1 alone
        (SMALL, 96, 70, True, False),  # class groups and input pieces
        (PRESETS["ultra96v2_300mhz"], 32, 10, True, False),  # fewer classes than lanes (a digits classifier)
    ],
)
def test_a_streamed_dense_layer_is_exact_and_bit_identical_with_the_stationary_form(arch, features, classes, bias,
                                                                                    relu):  # fmt: skip
    graph, x, expected = dense_graph(features, classes, bias, relu)
    stationary, part, _, _ = run(graph, x, arch, False)
    np.testing.assert_array_equal(stationary, expected)
    chunks = -(-features // arch.array_size)
    assert _reads(part.program, Direction.DRAM0_TO_LOCAL) == chunks  # the input only
    choices = [(1,), (0, 1)] if arch.axi_data_width and arch.vector_bytes * 8 > arch.axi_data_width else [(1,)]
    for banks in choices:
        y, part, model, _ = run(graph, x, arch, banks)
        np.testing.assert_array_equal(y, stationary)
        from_dram0 = _reads(part.program, Direction.DRAM0_TO_LOCAL) - chunks
        assert (from_dram0 > 0) == (banks == (0, 1)) == bool(model.dram0_consts)
        if banks == (0, 1):  # every other chunk of the weights from DRAM0, above the feature maps
            assert from_dram0 == (chunks + 1) // 2 * classes
            ((entry, _),) = model.dram0_consts
            assert entry.base + entry.size == arch.dram0_constants_top < arch.dram0_depth - 1
            assert part.report["memory"]["dram0_weight_vectors"] == entry.size


@pytest.mark.parametrize("arch", [PRESETS["ultra96v2_300mhz"], PRESETS["pynqz1_12x12"], SMALL])
def test_with_rounded_products_the_streamed_form_is_the_bare_block_forms_arithmetic(arch):
    """Products that round to a tie (``tie_input``): a MatMul rounds each product into a chain that
    starts from its bias row, and a tie goes to even by the chain's value so far (a bias of an odd
    lsb count flips it). The streamed form (zero bias rows, the bias added exactly last) is then
    bit-identical with the stationary form without bias rows, not with the one whose first block's
    chain starts from the bias; each is within half an lsb a tie of the exact result."""
    graph, _, _ = dense_graph(160, 70, True, seed=1)
    x, w = tie_input(160, seed=2), graph.constants[0]
    graph.constants[1] = bias = (2 * np.random.default_rng(3).integers(-64, 64, 70) + 1) / 256  # odd lsb counts
    exact = x.reshape(1, -1) @ w + bias
    bare, _, _, _ = run(graph, x, arch, False, bare_blocks=True)
    with_rows, _, _, _ = run(graph, x, arch, False, bare_blocks=False)
    assert not np.array_equal(bare, with_rows)  # the ties fall differently: the test can tell
    for y in (bare, with_rows):
        assert (np.abs(y - exact) <= tie_bound(x, w)).all()
    choices = [(1,), (0, 1)] if arch.axi_data_width and arch.vector_bytes * 8 > arch.axi_data_width else [(1,)]
    for banks in choices:
        y, _, _, _ = run(graph, x, arch, banks)
        np.testing.assert_array_equal(y, bare)


def test_small_memories_take_the_classes_in_groups_and_the_input_in_pieces():
    graph, x, expected = dense_graph(96, 70, True)
    y, part, _, _ = run(graph, x, SMALL, (0, 1))
    np.testing.assert_array_equal(y, expected)
    f = part.program.fields()
    matmuls = (f.opcode == int(Opcode.MATMUL)) & (f.operand2 > 0)
    # 24 chunks: lane-0 vectors in pieces of 48 // 4 = 12 chunks (4 MatMuls each); 70 classes in
    # groups of at most 48 * 4 // 5 = 38 -> 36: two groups of every chunk's MatMul.
    lane_zero = (f.operand2[matmuls] + 1 == 12).sum()
    assert lane_zero >= 2 * 4
    assert ((f.operand2[matmuls] + 1) == 36).sum() == 24 and ((f.operand2[matmuls] + 1) == 34).sum() == 24


def test_the_local_layout_stacks_the_buffers_in_order_and_the_plan_fits_it_in_local_memory():
    lay = dense.local_layout(chunks=24, classes=70, group=36, n=4, stride=4)
    starts = [lay.ones, lay.bias_rows, lay.x, lay.xt, lay.slots, lay.results, lay.store, lay.end]
    # 0/1 weights, bias rows (a block of 4 classes each), input, lane-0 input, slots, results, store
    assert np.diff(starts).tolist() == [32, 18, 24, 96, dense.SLOTS * 36, 36, 18]
    assert dense.local_layout(24, 70, 0, 4, 4).end == lay.end - (dense.SLOTS + 1) * 36
    graph, x, expected = dense_graph(96, 70, True)
    _, part, _, _ = run(graph, x, SMALL, (1,))
    f = part.program.fields()
    moves = (f.opcode == int(Opcode.DATAMOVE)) & np.isin(f.flags, [0, 2])  # DRAM -> local
    assert (f.addr0[moves] + f.operand2[moves] + 1).max() <= lay.end  # the plan's 36-class groups
    assert (f.addr0[moves] + f.operand2[moves] + 1).max() <= SMALL.local_depth


def test_the_latency_model_chooses_the_streamed_form_where_it_is_faster():
    """A classifier at batch 1 (1,280 features, 1,000 classes): weight-stationary it moves every
    weight through local memory's second port twice; streamed once, from both DRAM banks."""
    arch = PRESETS["ultra96v2_300mhz"]
    graph, x, _ = dense_graph(1280, 1000, True, seed=3)
    cycles = {}
    for stream in (False, (1,), (0, 1), None):
        y, part, _, _ = run(graph, x, arch, stream)
        cycles[stream] = estimate_cycles(part.program, arch)["total"]
        if stream is False:
            reference = y
        np.testing.assert_array_equal(y, reference)
    assert cycles[(0, 1)] < 0.6 * cycles[False]  # the DRAM banks stream side by side
    assert cycles[None] == min(cycles.values())


def test_a_models_dram0_constants_are_written_once_and_again_after_a_write_over_them(tmp_path):
    arch = PRESETS["ultra96v2_300mhz"]
    graph, x, expected = dense_graph(160, 70, True, seed=5)
    _, _, model, emu = run(graph, x, arch, (0, 1))
    assert emu.resident_dram0.writes == 1
    ((entry, data),) = model.dram0_consts
    np.testing.assert_array_equal(emu.read_dram(0, entry.base, entry.size), data)
    for _ in range(2):  # DRAM0 still holds them: not written again
        np.testing.assert_array_equal(emu.run_model(model, {"x": x})["y"].reshape(1, -1), expected)
    assert emu.resident_dram0.writes == 1
    emu.write_dram(0, entry.base + 3, np.zeros((1, arch.array_size)))  # a write over them: written again
    np.testing.assert_array_equal(emu.run_model(model, {"x": x})["y"].reshape(1, -1), expected)
    assert emu.resident_dram0.writes == 2
    # Another model with constants in the same place overwrites them; each run restores its own.
    other, x2, expected2 = dense_graph(160, 70, True, seed=6)
    other_model = compile_graph(other, arch, "u", options=CompileOptions(stream_dense=(0, 1))).model(other.constants)
    for _ in range(2):
        np.testing.assert_array_equal(emu.run_model(other_model, {"x": x2})["y"].reshape(1, -1), expected2)
        np.testing.assert_array_equal(emu.run_model(model, {"x": x})["y"].reshape(1, -1), expected)
    # Saved and loaded: the DRAM0 constants travel in a file of their own, listed in our extension.
    path = model.save(tmp_path)
    loaded = TensilModel.load(path)
    ((e2, d2),) = loaded.dram0_consts
    assert e2 == entry and np.array_equal(d2, data) and "dram0_consts" not in loaded.extras
    fresh = Emulator(arch)
    np.testing.assert_array_equal(fresh.run_model(loaded, {"x": x})["y"].reshape(1, -1), expected)


def test_dram0_constants_over_a_tensor_are_rejected():
    arch = PRESETS["ultra96v2_300mhz"]
    graph, x, _ = dense_graph(160, 70, True, seed=5)
    _, _, model, _ = run(graph, x, arch, (0, 1))
    ((entry, data),) = model.dram0_consts
    inp = model.inputs[0]
    model.dram0_consts = [(type(entry)(entry.file_name, inp.base, entry.size), data)]
    with pytest.raises(ModelError, match="DRAM0 consts .* overlap tensor 'x'"):
        model.validate()


def test_a_conv_of_one_output_pixel_over_a_larger_map_is_not_streamed():
    """A 3x3 conv, stride 2, of a 2x2 map has one output pixel but reads four: its weights are
    per tap, not a matmul's rows. Not streamed even when asked (ResNet-50 v2 at 32 px has these)."""
    from reference import conv2d_nhwc

    arch = PRESETS["pynqz1"]
    rng = np.random.default_rng(8)
    w, b = grid(rng, (24, 16, 3, 3), -2, 2), grid(rng, 24)
    x = grid(rng, (1, 2, 2, 16), -1, 1)
    attrs = dict(weight=0, bias=1, groups=1, strides=(2, 2), padding=(1, 1, 1, 1))
    graph = Graph(
        {"x": Tensor("x", x.shape), "y": Tensor("y", (1, 1, 1, 24))}, [Node("conv2d", ["x"], "y", attrs)],
        ["x"], ["y"], [w, b],
    )  # fmt: skip
    for stream in (None, (1,), (0, 1)):
        part = compile_graph(graph, arch, "t", options=CompileOptions(stream_dense=stream))
        model = part.model(graph.constants)
        y = Emulator(arch).run_model(model, {"x": x})["y"]
        np.testing.assert_array_equal(y, conv2d_nhwc(x, w, b, strides=(2, 2), padding=(1, 1, 1, 1)))
        assert not model.dram0_consts


def test_a_dense_layer_reading_a_map_flattened_streams_exactly():
    """A dense layer over an NCHW map flattened in place: the chunks are the map's vectors in order,
    the weights' rows permuted to match, streamed from both banks."""
    arch = PRESETS["ultra96v2_300mhz"]
    rng = np.random.default_rng(9)
    c, h, w_, classes = 24, 2, 3, 40
    w, b = grid(rng, (c * h * w_, classes), -4, 4), grid(rng, classes)
    x = grid(rng, (1, h, w_, c), -1, 1)
    attrs = dict(weight=0, bias=1, groups=1, layout="KM", flatten=(c, h, w_))
    graph = Graph(
        {"x": Tensor("x", x.shape), "y": Tensor("y", (1, 1, 1, classes))}, [Node("conv2d", ["x"], "y", attrs)],
        ["x"], ["y"], [w, b],
    )  # fmt: skip
    expected = x.transpose(0, 3, 1, 2).reshape(1, -1) @ w + b
    y, part, model, _ = run(graph, x, arch, (0, 1))
    np.testing.assert_array_equal(y, expected)
    assert model.dram0_consts
