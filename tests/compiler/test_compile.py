"""The compiler on graphs built by hand, run on the emulator, against float numpy.

Values on a 1/16 grid make every product exact in FP16BP8, so those results must match the
float reference exactly: any wrong tap, transposed weight or padding off-by-one shows.
"""

from dataclasses import replace

import numpy as np
import pytest

from helpers import conv_plan
from reference import conv2d_nhwc, conv_transpose2d_nhwc, pool_nhwc
from tvm_tensil.arch import PRESETS, Architecture
from tvm_tensil.compiler import CompileOptions, Graph, Node, Tensor, compile_graph
from tvm_tensil.isa.instructions import Opcode
from tvm_tensil.runtime import Emulator

ARCH = PRESETS["pynqz1"]


def grid(rng, shape, lo=-16, hi=16):
    return rng.integers(lo, hi, shape) / 16


def run(graph, inputs, arch=ARCH, options=CompileOptions()):
    part = compile_graph(graph, arch, "t", options=options)
    model = part.model(graph.constants)
    emu = Emulator(arch)
    out = emu.run_model(model, inputs)
    return out, part, emu


def conv_graph(x_shape, w, bias, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, epilogue=()):
    n, h, wd, ci = x_shape
    co, _, kh, kw = w.shape
    oh = (h + padding[0] + padding[2] - (kh - 1) * dilation[0] - 1) // strides[0] + 1
    ow = (wd + padding[1] + padding[3] - (kw - 1) * dilation[1] - 1) // strides[1] + 1
    consts = [w] + ([bias] if bias is not None else [])
    nodes = [
        Node(
            "conv2d",
            ["x"],
            "y",
            dict(
                weight=0,
                bias=1 if bias is not None else None,
                strides=strides,
                padding=padding,
                dilation=dilation,
                groups=groups,
            ),
        )
    ]
    tensors = {"x": Tensor("x", x_shape), "y": Tensor("y", (n, oh, ow, co))}
    last = "y"
    for i, (op, attrs) in enumerate(epilogue):
        nxt = f"e{i}"
        nodes.append(Node(op, [last], nxt, dict(attrs)))
        tensors[nxt] = Tensor(nxt, (n, oh, ow, co))
        last = nxt
    return Graph(tensors, nodes, ["x"], [last], consts), last


@pytest.mark.parametrize(
    "x_shape, co, k, strides, padding, dilation",
    [
        ((1, 6, 7, 3), 5, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # partial blocks both sides
        ((2, 9, 8, 16), 16, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),  # batch 2, stride 2
        ((1, 8, 8, 8), 12, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),  # pointwise fast path
        ((1, 10, 9, 4), 8, (5, 3), (1, 2), (2, 0, 1, 1), (1, 1)),  # asymmetric kernel/pad/stride
        ((1, 9, 9, 8), 8, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),  # dilation
        ((1, 5, 5, 24), 20, (2, 2), (3, 3), (0, 0, 0, 0), (1, 1)),  # stride 3: per-vector runs
    ],
)
def test_conv2d_exact(x_shape, co, k, strides, padding, dilation):
    rng = np.random.default_rng(sum(x_shape) + co)
    w = grid(rng, (co, x_shape[3], *k), -4, 4)
    bias = grid(rng, co)
    x = grid(rng, x_shape)
    g, out = conv_graph(x_shape, w, bias, strides, padding, dilation)
    y, part, emu = run(g, {"x": x})
    ref = conv2d_nhwc(x, w, bias, strides, padding, dilation)
    np.testing.assert_array_equal(y[out], ref)
    assert emu.last_stats.saturated == 0


@pytest.mark.parametrize(
    "x_shape, co, k, strides, padding, out_pad",
    [
        ((1, 5, 6, 8), 20, (2, 2), (2, 2), (0, 0), (0, 0)),  # a segmentation head's upsampling
        ((2, 5, 6, 3), 5, (4, 4), (2, 2), (1, 1), (0, 0)),  # U-Net/GAN: two taps per phase, batch 2
        ((1, 5, 6, 3), 5, (3, 3), (2, 2), (1, 1), (1, 1)),  # phases of 1 and 2 taps, output padding
        ((1, 4, 5, 17), 6, (3, 2), (2, 1), (1, 0), (1, 0)),  # asymmetric; two input blocks
        ((1, 3, 3, 8), 8, (5, 5), (3, 3), (1, 1), (2, 2)),  # stride 3: per-vector stores
        ((1, 5, 6, 4), 3, (2, 3), (2, 3), (1, 2), (0, 0)),  # padding that crops whole input rows
    ],
)
def test_transposed_conv_exact(x_shape, co, k, strides, padding, out_pad):
    """One conv per output phase, each writing its pixels in place: exact on grid values, the
    report shows the one layer."""
    rng = np.random.default_rng(sum(x_shape) + co)
    w = grid(rng, (x_shape[3], co, *k), -4, 4)
    bias = grid(rng, co)
    x = grid(rng, x_shape)
    n, h, wd, _ = x_shape
    out_hw = tuple((i - 1) * s - 2 * p + kk + o for i, s, p, kk, o in zip((h, wd), strides, padding, k, out_pad))
    attrs = dict(weight=0, bias=1, strides=strides, padding=(*padding, *padding), transposed=True)
    tensors = {"x": Tensor("x", x_shape), "y": Tensor("y", (n, *out_hw, co)), "z": Tensor("z", (n, *out_hw, co))}
    g = Graph(tensors, [Node("conv2d", ["x"], "y", attrs), Node("relu", ["y"], "z")], ["x"], ["z"], [w, bias])
    y, part, emu = run(g, {"x": x})
    ref = np.maximum(conv_transpose2d_nhwc(x, w, bias, strides, padding, out_hw), 0)
    np.testing.assert_array_equal(y["z"], ref)
    assert emu.last_stats.saturated == 0
    assert [(e["op"], e["output"], e["epilogue"]) for e in part.report["nodes"]] == [("conv_transpose", "z", ["relu"])]
    # The array multiplies the model's products only (per pair of channel blocks): input pixel
    # times tap where the output pixel exists; at most a bias-starting MatMul per output vector more.
    products = sum(
        0 <= i * strides[0] - padding[0] + ky < out_hw[0] and 0 <= j * strides[1] - padding[1] + kx < out_hw[1]
        for i in range(h) for j in range(wd) for ky in range(k[0]) for kx in range(k[1])
    )  # fmt: skip
    blocks_in, blocks_out = -(-x_shape[3] // ARCH.array_size), -(-co // ARCH.array_size)
    matmuls = int(part.program.check().vectors[Opcode.MATMUL])
    assert (
        products * n * blocks_in * blocks_out
        <= matmuls
        <= (products + out_hw[0] * out_hw[1]) * n * blocks_in * blocks_out
    )


@pytest.mark.parametrize("channels, out, groups", [(16, 16, 2), (32, 32, 4), (24, 24, 3), (8, 16, 8)])
def test_grouped_conv_exact_and_only_the_blocks_its_groups_read(channels, out, groups):
    """A grouped conv as a dense conv over zero-padded groups, but the array sees only the input
    blocks each output block's groups read: exact, and its MatMul vectors and weights are those of
    the blocks (pixels x taps x block pairs read), not of every block pair."""
    from tvm_tensil.packing import group_blocks

    rng = np.random.default_rng(channels + groups)
    x_shape = (1, 6, 5, channels)
    w = grid(rng, (out, channels // groups, 3, 3), -4, 4)
    x = grid(rng, x_shape)
    g, last = conv_graph(x_shape, w, None, padding=(1, 1, 1, 1), groups=groups)
    y, part, _ = run(g, {"x": x})
    np.testing.assert_array_equal(y[last], conv2d_nhwc(x, w, None, padding=(1, 1, 1, 1), groups=groups))
    pairs = sum(len(r) for r in group_blocks(out, channels, groups, ARCH.array_size))
    assert pairs <= -(-channels // ARCH.array_size) * -(-out // ARCH.array_size)
    # Output pixel x tap pairs that read a real input pixel (padding 1): 2 taps on each edge, else 3.
    products = (2 * 2 + 3 * (6 - 2)) * (2 * 2 + 3 * (5 - 2))
    assert int(part.program.check().vectors[Opcode.MATMUL]) == pairs * products
    # DRAM1 holds the weight blocks of those pairs only (RegNet's and ResNeXt's many narrow groups
    # packed densely would not fit it).
    (weights,) = [r for r in part.recipes if r.packer == "conv_weights"]
    assert weights.size == pairs * 9 * (ARCH.array_size + 1)


def test_depthwise_and_relu_epilogue():
    rng = np.random.default_rng(1)
    x_shape = (1, 7, 7, 12)
    w = grid(rng, (12, 1, 3, 3), -4, 4)
    bias = grid(rng, 12)
    x = grid(rng, x_shape)
    g, out = conv_graph(x_shape, w, bias, (1, 1), (1, 1, 1, 1), groups=12, epilogue=[("relu", {})])
    y, part, _ = run(g, {"x": x})
    np.testing.assert_array_equal(y[out], np.maximum(conv2d_nhwc(x, w, bias, padding=(1, 1, 1, 1), groups=12), 0))
    assert [n["op"] for n in part.report["nodes"]] == ["conv2d"]  # relu fused
    assert part.report["nodes"][0]["epilogue"] == ["relu"]


def test_a_relu6_is_one_simd_instruction_a_vector_with_the_relu_flag():
    """A ReLU6 imported as min(x, 6) and max(x, 0) (two clips): on a core with the SIMD ReLU flag
    one MIN with the flag per vector, on plain Tensil a MIN and a MAX; the same results."""
    rng = np.random.default_rng(2)
    x_shape = (1, 6, 5, 8)
    w = grid(rng, (8, 8, 3, 3), -16, 16)
    x = grid(rng, x_shape, -16, 16)
    clips = [("clip", {"lo": -np.inf, "hi": 6.0}), ("clip", {"lo": 0.0, "hi": np.inf})]
    g, out = conv_graph(x_shape, w, None, (1, 1), (1, 1, 1, 1), epilogue=clips)
    want = np.clip(conv2d_nhwc(x, w, None, padding=(1, 1, 1, 1)), 0, 6)
    simd = {}
    for relu in (False, True):
        y, part, _ = run(g, {"x": x}, ARCH.replace(simd_relu=relu))
        np.testing.assert_allclose(y[out], want, atol=1 / 256)
        simd[relu] = y[out], int((part.program.fields().opcode == Opcode.SIMD).sum())
    np.testing.assert_array_equal(simd[True][0], simd[False][0])
    assert simd[False][1] - simd[True][1] == 6 * 5 + 1  # a MAX a vector (one a pixel), and loading its 0


def test_dense_as_pointwise_row():
    rng = np.random.default_rng(2)
    w = grid(rng, (10, 20), -4, 4)  # (in, out) matmul weight
    bias = grid(rng, 20)
    x = grid(rng, (5, 10))
    g = Graph(
        {"x": Tensor("x", (1, 1, 5, 10)), "y": Tensor("y", (1, 1, 5, 20))},
        [Node("conv2d", ["x"], "y", dict(weight=0, bias=1, groups=1, layout="KM"))],
        ["x"],
        ["y"],
        [w, bias],
    )
    # The matmul weight layout is handled by the packer: give it the 4-D view instead.
    g.nodes[0].attrs = replace(g.nodes[0].attrs, layout="OIHW")
    g.constants[0] = w.T[:, :, None, None]
    y, _, _ = run(g, {"x": x[None, None]})
    np.testing.assert_array_equal(y["y"][0, 0], x @ w + bias)


def test_residual_add_relu_and_tiling_over_small_memories():
    """An architecture with tiny memories forces many tiles."""
    arch = Architecture("FP16BP8", 4, 4096, 4096, 96, 24)
    rng = np.random.default_rng(3)
    x_shape = (1, 9, 11, 6)
    w = grid(rng, (6, 6, 3, 3), -2, 2)
    x = grid(rng, x_shape)
    g = Graph(
        {"x": Tensor("x", x_shape), "c": Tensor("c", x_shape), "s": Tensor("s", x_shape), "r": Tensor("r", x_shape)},
        [
            Node("conv2d", ["x"], "c", dict(weight=0, bias=None, padding=(1, 1, 1, 1), groups=1)),
            Node("add", ["c", "x"], "s"),
            Node("relu", ["s"], "r"),
        ],
        ["x"],
        ["r"],
        [w],
    )
    y, part, _ = run(g, {"x": x}, arch)
    ref = np.maximum(conv2d_nhwc(x, w, None, padding=(1, 1, 1, 1)) + x, 0)
    np.testing.assert_array_equal(y["r"], ref)
    assert part.report["memory"]["local_vectors"] <= 96 and part.report["memory"]["accumulator_vectors"] <= 24


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize(
    "kernel, strides, padding",
    [((2, 2), (2, 2), (0, 0, 0, 0)), ((3, 3), (2, 2), (1, 1, 1, 1)), ((3, 2), (1, 1), (1, 0, 1, 1))],
)
def test_pools(kind, kernel, strides, padding):
    rng = np.random.default_rng(4)
    x_shape = (1, 8, 9, 10)
    x = grid(rng, x_shape)
    ref = pool_nhwc(x, kernel, strides, padding, kind)
    g = Graph(
        {"x": Tensor("x", x_shape), "y": Tensor("y", (1, *ref.shape[1:]))},
        [Node(f"{kind}_pool2d", ["x"], "y", dict(kernel=kernel, strides=strides, padding=padding))],
        ["x"],
        ["y"],
        [],
    )
    y, _, _ = run(g, {"x": x})
    if kind == "max":
        np.testing.assert_array_equal(y["y"], ref)
    else:  # the divisor is a rounded reciprocal: within 1/count's rounding plus one lsb
        assert np.max(np.abs(y["y"] - ref)) <= np.max(np.abs(x)) * 2**-9 * 9 + 2**-8


@pytest.mark.parametrize("batch", [1, 2])
def test_a_strided_1x1_pool_read_only_by_convs_is_a_view(batch):
    """A ResNet v2 shortcut's 1x1/2 subsampling: the conv reading it as its input and the conv
    adding it as a residual read every other pixel of its source in place; the pool emits nothing."""
    rng = np.random.default_rng(5)
    x_shape, sub = (batch, 9, 10, 12), (batch, 5, 5, 12)
    w1, w2 = grid(rng, (12, 12, 3, 3), -2, 2), grid(rng, (12, 12, 1, 1), -2, 2)
    x = grid(rng, x_shape)
    tensors = {t: Tensor(t, sub) for t in ("p", "c", "s", "d")} | {"x": Tensor("x", x_shape)}
    g = Graph(
        tensors,
        [
            Node("max_pool2d", ["x"], "p", dict(kernel=(1, 1), strides=(2, 2), padding=(0, 0, 0, 0))),
            Node("conv2d", ["x"], "c", dict(weight=0, bias=None, strides=(2, 2), padding=(1, 1, 1, 1))),
            Node("add", ["c", "p"], "s"),
            Node("conv2d", ["p"], "d", dict(weight=1, bias=None)),
        ],
        ["x"],
        ["s", "d"],
        [w1, w2],
    )
    y, part, _ = run(g, {"x": x})
    p = x[:, ::2, ::2]
    np.testing.assert_array_equal(y["s"], conv2d_nhwc(x, w1, None, (2, 2), (1, 1, 1, 1)) + p)
    np.testing.assert_array_equal(y["d"], conv2d_nhwc(p, w2, None))
    pool = part.report["nodes"][0]
    assert pool["op"] == "max_pool2d" and pool["in_place"] and pool["instructions"] == 0


def test_a_strided_1x1_pool_another_op_reads_stays_a_node():
    rng = np.random.default_rng(6)
    x = grid(rng, (1, 8, 8, 8))
    g = Graph(
        {"x": Tensor("x", x.shape), "p": Tensor("p", (1, 4, 4, 8)), "r": Tensor("r", (1, 4, 4, 8))},
        [
            Node("max_pool2d", ["x"], "p", dict(kernel=(1, 1), strides=(2, 2), padding=(0, 0, 0, 0))),
            Node("add", ["p", "p"], "r"),
        ],
        ["x"],
        ["r"],
        [],
    )
    y, part, _ = run(g, {"x": x})
    np.testing.assert_array_equal(y["r"], 2 * x[:, ::2, ::2])
    assert part.report["nodes"][0]["instructions"] > 0 and "in_place" not in part.report["nodes"][0]


def test_block_aligned_slices_and_concats_are_views():
    """A CSP block (darknet's route groups=2 and route layers): the slice is read in place, each
    concat's inputs are written into it by their convs (a concat inside a concat too); the unaligned
    slice stays a copy. Exact on a 1/16 grid."""
    rng = np.random.default_rng(7)
    n = ARCH.array_size
    x_shape = (1, 6, 7, 5)
    # Later layers' weights sparse -1/0/1: every value stays on the 1/256 grid, inside the range.
    sparse = lambda s: rng.choice([-1.0, 0.0, 1.0], s, p=[0.05, 0.9, 0.05])  # noqa: E731
    ws = [grid(rng, (2 * n, 5, 3, 3), -2, 2)] + [sparse(s) for s in [(n, n, 3, 3), (n, n, 3, 3), (2 * n, 2 * n, 1, 1),
                                                                     (3, 4 * n, 1, 1)]]  # fmt: skip
    x = grid(rng, x_shape)
    shape = lambda c: (1, 6, 7, c)  # noqa: E731
    conv = lambda w, i, o, k: Node("conv2d", [i], o, dict(weight=w, bias=None, padding=(k,) * 4))  # noqa: E731
    g = Graph(
        {t: Tensor(t, shape(c)) for t, c in
         [("x", 5), ("a", 2 * n), ("h", n), ("b", n), ("c", n), ("bc", 2 * n), ("d", 2 * n), ("e", 4 * n),
          ("f", 3), ("u", 3)]},  # fmt: skip
        [
            conv(0, "x", "a", 1), Node("slice", ["a"], "h", dict(begin=n, end=2 * n)),
            conv(1, "h", "b", 1), conv(2, "b", "c", 1), Node("concat", ["c", "b"], "bc"),
            conv(3, "bc", "d", 0), Node("concat", ["a", "d"], "e"), conv(4, "e", "f", 0),
            Node("slice", ["e"], "u", dict(begin=1, end=4)),
        ],
        ["x"],
        ["f", "u"],
        ws,
    )  # fmt: skip
    y, part, _ = run(g, {"x": x})
    a = conv2d_nhwc(x, ws[0], None, padding=(1,) * 4)
    b = conv2d_nhwc(a[..., n:], ws[1], None, padding=(1,) * 4)
    c = conv2d_nhwc(b, ws[2], None, padding=(1,) * 4)
    e = np.concatenate([a, conv2d_nhwc(np.concatenate([c, b], -1), ws[3], None)], -1)
    np.testing.assert_array_equal(y["f"], conv2d_nhwc(e, ws[4], None))
    assert np.abs(y["f"]).max() > 1 and np.abs(e[..., 2 * n :]).max() > 1
    np.testing.assert_array_equal(y["u"], e[..., 1:4])
    nodes = {entry["output"]: entry for entry in part.report["nodes"]}
    assert all(nodes[t].get("in_place") and nodes[t]["instructions"] == 0 for t in ("h", "bc", "e"))
    assert not nodes["u"].get("in_place") and nodes["u"]["instructions"] > 0


def test_global_avg_pool():
    rng = np.random.default_rng(5)
    x = grid(rng, (2, 8, 8, 20))
    g = Graph(
        {"x": Tensor("x", x.shape), "y": Tensor("y", (2, 1, 1, 20))},
        [Node("global_avg_pool", ["x"], "y", {})],
        ["x"],
        ["y"],
        [],
    )
    y, _, _ = run(g, {"x": x})
    # 64 pixels: six halving levels, each within one lsb (1/256) of the exact mean of its pair.
    err = np.abs(y["y"] - x.mean(axis=(1, 2), keepdims=True))
    assert err.max() <= 6 / 256


@pytest.mark.parametrize("held", [False, True], ids=["from-dram0", "handed-over"])
def test_a_global_avg_pool_of_more_blocks_than_the_accumulators_hold_goes_in_groups(held):
    """Channel blocks go through the halving levels together in groups as large as the accumulators
    hold, each group as two halves in the two accumulator banks, one half's gathers beside the
    other's MatMuls (a half's first level writes half its vectors to its bank): 13 blocks of a 7x7
    map, 32 vectors each, in 136 accumulators (68 a bank, one holding the factor 64/49) are groups
    of 4, 4, 4 (halves of 2) and 1. The same bits as the whole map in one group (2,048
    accumulators) and as one block at a time (64), read from DRAM0 or where the conv before left
    the map."""
    from tvm_tensil.isa.instructions import Direction, Opcode

    rng = np.random.default_rng(13)
    x_shape, c = (1, 7, 7, 8), 13 * 8
    w = grid(rng, (c, 8, 1, 1), -2, 2)
    x = grid(rng, x_shape)
    t = {"x": Tensor("x", x_shape), "c": Tensor("c", (1, 7, 7, c)), "y": Tensor("y", (1, 1, 1, c))}
    conv = Node("conv2d", ["x"], "c", dict(weight=0, bias=None, groups=1))
    g = Graph(t, [conv, Node("global_avg_pool", ["c"], "y", {})], ["x"], ["y"], [w])
    options = CompileOptions(pool_hand_over=held, interleave=False)  # (the pool's instructions last)
    arty = PRESETS["arty_a7_35"]
    y, part, _ = run(g, {"x": x}, arch=arty.replace(accumulator_depth=136, name="small_accumulators"), options=options)
    for depth in (2048, 64):
        other, _, _ = run(g, {"x": x}, arch=arty.replace(accumulator_depth=depth, name=f"acc{depth}"), options=options)
        np.testing.assert_array_equal(y["y"], other["y"])
    f = part.program.fields()
    dram_reads = int((f.operand2[(f.opcode == Opcode.DATAMOVE) & (f.flags == Direction.DRAM0_TO_LOCAL)] + 1).sum())
    assert (dram_reads == 49) == held  # x only where the pool reads c in local memory
    gathers = (f.opcode == Opcode.DATAMOVE) & (f.flags == Direction.ACC_TO_LOCAL)
    pool = np.arange(len(f.opcode)) >= len(f.opcode) - part.report["nodes"][-1]["instructions"]
    # Five levels' gathers and the means' for each half of the three groups of four, and the last block.
    assert int((gathers & pool).sum()) == 3 * 2 * 6 + 6
    mean = conv2d_nhwc(x, w, None).mean(axis=(1, 2), keepdims=True)
    assert np.abs(y["y"] - mean).max() <= (0.5 + 2 * 6 + 0.5) / 256 + np.abs(mean).max() * 2**-9


@pytest.mark.parametrize("hw", [1, 3, 5, 12, 33])
def test_global_avg_pool_of_any_size_within_its_bound(hw):
    """Odd and non-power-of-two pixel counts (a missing partner counts as zero; the final factor
    T / pixels in [1, 2) corrects the mean), chunks of pixels when a map exceeds local memory."""
    rng = np.random.default_rng(hw)
    x = rng.uniform(-100, 100, (1, hw, hw, 12))
    g = Graph(
        {"x": Tensor("x", x.shape), "y": Tensor("y", (1, 1, 1, 12))},
        [Node("global_avg_pool", ["x"], "y", {})],
        ["x"],
        ["y"],
        [],
    )
    arch = ARCH.replace(local_depth=256, name="small_local")
    y, _, _ = run(g, {"x": x}, arch=arch)
    levels = (hw * hw - 1).bit_length()
    mean = x.mean(axis=(1, 2), keepdims=True)
    bound = (0.5 + 2 * levels + 0.5) / 256 + np.abs(mean).max() * 2**-9
    assert np.abs(y["y"] - mean).max() <= bound


@pytest.mark.parametrize(
    "local_depth, mode", [(4096, "resident"), (800, "input blocks"), (120, "blocks"), (46, "one block")]
)
@pytest.mark.parametrize("padding", [(1, 1, 1, 1), (3, 3, 3, 3)])  # the second: no tap covers every pixel
def test_weights_streamed_in_every_mode(local_depth, mode, padding):
    """Resident weights, two slots of several input blocks, two slots of one block, one slot: the
    same exact results whichever way the weights reach the array."""
    from helpers import conv_plan

    arch = Architecture("FP16BP8", 4, 4096, 4096, local_depth, 24)
    rng = np.random.default_rng(5)
    x_shape = (1, 5, 6, 16)
    w = grid(rng, (12, 16, 3, 3), -2, 2)
    b = grid(rng, (12,))
    x = grid(rng, x_shape)
    g, out = conv_graph(x_shape, w, b, padding=padding)
    y, part, _ = run(g, {"x": x}, arch)
    np.testing.assert_array_equal(y[out], conv2d_nhwc(x, w, b, padding=padding))
    assert conv_plan(g, arch).weights.mode == mode


def _half_even_sixteenths(v):
    """Integers ``v / 16`` rounded half to even (the SIMD unit's multiply by 2**-4)."""
    q, r = np.divmod(v, 16)
    return q + ((r > 8) | ((r == 8) & (q % 2 == 1)))


KINDS = [
    ("dense", 1),
    ("dense", 3),
    ("grouped", 1),
    ("depthwise", 1),
    ("depthwise", 3),
    ("pointwise", 0),
    ("residual", 1),
    ("clipped", 0),
]
# The local memory (vectors) that makes each kind's weights take each mode (fewer weights, less memory).
TWO_PART_MODES = {
    "resident": dict.fromkeys(("dense", "grouped", "depthwise", "pointwise", "residual", "clipped"), 4096),
    "input blocks": {
        "dense": 800,
        "grouped": 800,
        "depthwise": 400,
        "pointwise": 200,
        "residual": 800,
        "clipped": 200,
    },  # fmt: skip
    "blocks": {"dense": 120, "grouped": 120, "depthwise": 120, "pointwise": 40, "residual": 120, "clipped": 40},
    "one block": {"dense": 46, "depthwise": 46},  # (a residual conv does not fit one block at all)
}


def _two_part_conv(kind: str, padding: int, rng):
    """A conv with weights in two parts (residue 4 bits) on integer inputs, and its exact result:
    the residue's sum rounded half to even at the output's scale, plus the rounded weights' sum and
    the bias (and the shortcut)."""
    c = 16
    x_shape = (1, 5, 6, c)
    k = 1 if kind in ("pointwise", "clipped") else 3
    # (grouped: two groups of 8 channels, each output block reading two of the four input blocks)
    groups = {"depthwise": c, "grouped": 2}.get(kind, 1)
    shape = (12 if kind in ("dense", "pointwise", "clipped") else c, c // groups, k, k)
    hi, m = rng.integers(-64, 64, shape), rng.integers(-8, 8, shape)  # (a residue of +8 rounds up)
    b = rng.integers(-64, 64, shape[0]) / 256
    x = rng.integers(-3, 4, x_shape).astype(float)
    pad = (padding,) * 4
    g, out = conv_graph(x_shape, hi / 256 + m / 4096, b, padding=pad, groups=groups)
    g.nodes[0].attrs = replace(g.nodes[0].attrs, residue=4)
    residue = np.rint(conv2d_nhwc(x, m.astype(float), np.zeros(shape[0]), padding=pad, groups=groups)).astype(int)
    want = conv2d_nhwc(x, hi / 256, b, padding=pad, groups=groups) + _half_even_sixteenths(residue) / 256
    if kind == "residual":
        g.nodes.append(Node("add", ["y", "x"], "s"))
        g.tensors["s"] = Tensor("s", x_shape)
        g, out, want = Graph(g.tensors, g.nodes, ["x"], ["s"], g.constants), "s", want + x
    if kind == "clipped":  # an epilogue whose SIMD registers the next block's rescale must not take
        g.nodes.append(Node("clip", ["y"], "s", dict(lo=0.0, hi=1.5)))
        g.tensors["s"] = Tensor("s", g.tensors["y"].shape)
        g, out, want = Graph(g.tensors, g.nodes, ["x"], ["s"], g.constants), "s", np.clip(want, 0.0, 1.5)
    one_part = conv2d_nhwc(x, np.floor((hi / 256 + m / 4096) * 256 + 0.5) / 256, b, padding=pad, groups=groups)
    one_part = np.clip(one_part, 0.0, 1.5) if kind == "clipped" else one_part
    return g, out, x, want, one_part + (x if kind == "residual" else 0)


@pytest.mark.parametrize(
    "mode, kind, padding", [(m, *k) for m in TWO_PART_MODES for k in KINDS if k[0] in TWO_PART_MODES[m]]
)  # padding 3: no tap covers every pixel (a MatMul of zeroes starts the residue)
def test_weights_in_two_parts_are_exact_in_every_mode(mode, kind, padding):
    """Weights in two parts: the residue's MatMuls at 2**4 the output's scale, the SIMD unit's
    rescale (rounded half to even), then the rounded weights, the bias and any shortcut, exactly
    (integer inputs keep every product on the grid)."""
    arch = Architecture("FP16BP8", 4, 4096, 4096, TWO_PART_MODES[mode][kind], 24)
    g, out, x, want, _ = _two_part_conv(kind, padding, np.random.default_rng(7))
    y, part, _ = run(g, {"x": x}, arch)
    np.testing.assert_array_equal(y[out], want)
    assert part.report["nodes"][0]["residue_bits"] == 4
    assert conv_plan(g, arch).weights.mode == mode


def test_a_rescale_waits_for_the_epilogue_of_the_block_before():
    """With accumulator banks the block before's epilogue runs beside this block's MatMuls; the
    residue's rescale, which also uses the SIMD registers, comes after all of it."""
    g, out, x, want, _ = _two_part_conv("clipped", 0, np.random.default_rng(7))
    y, part, _ = run(g, {"x": x}, ARCH)
    np.testing.assert_array_equal(y[out], want)


def test_a_residue_without_room_runs_in_one_part():
    """A residual conv with a residue takes its shortcut through the array; where local memory has
    no room for the identity weights as well, the conv runs in one part, and the report says so."""
    arch = Architecture("FP16BP8", 4, 4096, 4096, 50, 24)
    g, out, x, _, one_part = _two_part_conv("residual", 1, np.random.default_rng(7))
    y, part, _ = run(g, {"x": x}, arch)
    np.testing.assert_array_equal(y[out], one_part)
    assert "residue_bits" not in part.report["nodes"][0]
    y, part, _ = run(g, {"x": x}, arch.replace(local_depth=52, name="room"))
    assert part.report["nodes"][0]["residue_bits"] == 4


@pytest.mark.parametrize("arch", [ARCH, Architecture("FP16BP8", 4, 4096, 4096, 300, 64)])
def test_channel_affine_becomes_a_second_output(arch):
    """ResNet v2's pre-activation batch norm + ReLU reads a conv's result that is also the next
    shortcut: it becomes the conv's second output (or, when the second store buffer would shrink the
    tiles, a layer of its own, whichever the latency model prefers); exact either way."""
    rng = np.random.default_rng(6)
    x_shape = (1, 6, 7, 8)
    w = grid(rng, (8, 8, 3, 3), -2, 2)
    scale, shift = rng.integers(-2, 3, (8, 1, 1, 1)).astype(float), grid(rng, (8,))  # products stay exact
    x = grid(rng, x_shape)
    t = {k: Tensor(k, x_shape) for k in ("x", "c", "s", "a", "r", "y")}
    g = Graph(
        t,
        [
            Node("conv2d", ["x"], "c", dict(weight=0, bias=None, padding=(1, 1, 1, 1), groups=1)),
            Node("add", ["c", "x"], "s"),
            Node("conv2d", ["s"], "a", dict(weight=1, bias=2, groups=8)),
            Node("relu", ["a"], "r"),
            Node("add", ["r", "s"], "y"),
        ],
        ["x"],
        ["y"],
        [w, scale, shift],
    )
    y, part, _ = run(g, {"x": x}, arch)
    s = conv2d_nhwc(x, w, None, padding=(1, 1, 1, 1)) + x
    np.testing.assert_array_equal(y["y"], np.maximum(s * scale.reshape(-1) + shift, 0) + s)
    assert [n["op"] for n in part.report["nodes"]] == ["conv2d", "add"]


def test_a_whole_map_passes_to_the_next_conv_in_local_memory():
    """A conv whose result is one whole tile hands it to the next conv in local memory: an
    intermediate that only the next conv reads never goes to DRAM0, and one that others read too is
    stored beside the next conv's compute. Exact either way."""
    from tvm_tensil.isa.instructions import Direction, Opcode

    rng = np.random.default_rng(7)
    x_shape = (1, 6, 5, 8)
    # Exact in FP16BP8: a on the 1/256 grid, then sparse weights of +-1 keep it there.
    w1 = grid(rng, (8, 8, 3, 3), -16, 16)
    w2, w3 = (rng.choice([-1.0, 1.0], (8, 8, 3, 3)) * (rng.random((8, 8, 3, 3)) < 0.1) for _ in range(2))
    x = grid(rng, x_shape, -4, 4)
    t = {k: Tensor(k, x_shape) for k in ("x", "a", "b", "c", "r", "y")}
    conv = dict(bias=None, padding=(1, 1, 1, 1), groups=1)
    g = Graph(
        t,
        [
            Node("conv2d", ["x"], "a", dict(weight=0, **conv)),  # read only by the next conv
            Node("conv2d", ["a"], "b", dict(weight=1, **conv)),  # read by the next conv and the add
            Node("conv2d", ["b"], "c", dict(weight=2, **conv)),
            Node("relu", ["c"], "r"),
            Node("add", ["r", "b"], "y"),
        ],
        ["x"],
        ["y"],
        [w1, w2, w3],
    )
    y, part, _ = run(g, {"x": x})
    a = conv2d_nhwc(x, w1, None, padding=(1, 1, 1, 1))
    b = conv2d_nhwc(a, w2, None, padding=(1, 1, 1, 1))
    np.testing.assert_array_equal(y["y"], np.maximum(conv2d_nhwc(b, w3, None, padding=(1, 1, 1, 1)), 0) + b)
    f = part.program.fields()
    stores = (f.opcode == Opcode.DATAMOVE) & (f.flags == Direction.LOCAL_TO_DRAM0)
    pixels = 6 * 5  # vectors per map (8 channels: one block)
    assert int((f.operand2[stores] + 1).sum()) == 3 * pixels  # b, r and y; never a
    loads = (f.opcode == Opcode.DATAMOVE) & (f.flags == Direction.DRAM0_TO_LOCAL)
    assert int((f.operand2[loads] + 1).sum()) == 3 * pixels  # x, and r, b for the add; never a or b for a conv


def test_a_conv_keeps_its_map_whole_when_the_next_conv_gains_more():
    """Tiled in bands, a stride-2 conv overlaps its own loads best, and the next conv then reads the
    map back from DRAM0; as one whole tile it hands the map over. The choice looks through the next
    conv, so the pair is never slower than the greedy choice, and the result stays exact. (Which one
    wins depends on the memory timing: with the next slab's reads in pieces of 512 vectors here the
    bands and the read back win either way.)"""
    from tvm_tensil.isa.instructions import Direction, Opcode

    arch = ARCH.replace(array_size=16, name="pynqz1_16x16")
    rng = np.random.default_rng(3)
    x_shape = (1, 32, 32, 64)
    w1 = rng.choice([-1.0, 1.0], (64, 64, 1, 1)) * (rng.random((64, 64, 1, 1)) < 0.1)
    w2 = rng.choice([-1.0, 1.0], (64, 64, 3, 3)) * (rng.random((64, 64, 3, 3)) < 0.02)
    x = grid(rng, x_shape, -4, 4)
    t = {"x": Tensor("x", x_shape), "a": Tensor("a", (1, 16, 16, 64)), "y": Tensor("y", (1, 16, 16, 64))}
    g = Graph(
        t,
        [
            Node("conv2d", ["x"], "a", dict(weight=0, bias=None, strides=(2, 2), groups=1), [("relu", {})]),
            Node("conv2d", ["a"], "y", dict(weight=1, bias=None, padding=(1, 1, 1, 1), groups=1), [("relu", {})]),
        ],
        ["x"],
        ["y"],
        [w1, w2],
    )
    y, part, _ = run(g, {"x": x}, arch)
    a = np.maximum(conv2d_nhwc(x, w1, None, strides=(2, 2)), 0)
    np.testing.assert_array_equal(y["y"], np.maximum(conv2d_nhwc(a, w2, None, padding=(1, 1, 1, 1)), 0))

    def loaded(program):  # vectors read from DRAM0
        f = program.fields()
        loads = (f.opcode == Opcode.DATAMOVE) & (f.flags == Direction.DRAM0_TO_LOCAL)
        return int((f.operand2[loads] + 1).sum())

    greedy = compile_graph(g, arch, "t", options=CompileOptions(look_ahead=False))
    assert part.report["cycles"]["total"] <= greedy.report["cycles"]["total"]
    if loaded(part.program) <= 32 * 32 * 4:  # x's rows (every other one) and never a: handed over
        assert loaded(greedy.program) >= loaded(part.program) + 16 * 16 * 4  # greedy: a read back


@pytest.mark.parametrize("kernel, strides", [(3, 1), (1, 2)])
def test_a_tiled_conv_reads_a_whole_map_left_in_local_memory_in_place(kernel, strides):
    """The conv before keeps its result whole; this conv's output does not fit local memory as one
    tile, so its tiles read that map where it lies (no slab loaded): the map, read by nobody else,
    never goes to DRAM0. Exact, with a padded 3x3 window and a strided 1x1."""
    from tvm_tensil.isa.instructions import Direction

    arch = ARCH.replace(local_depth=1024, name="pynqz1_1k")
    rng = np.random.default_rng(11)
    x_shape, pad = (1, 12, 12, 8), (kernel // 2,) * 4
    out_hw = 12 // strides
    w1 = grid(rng, (8, 8, 1, 1), -16, 16)
    w2 = rng.choice([-1.0, 1.0], (64, 8, kernel, kernel)) * (rng.random((64, 8, kernel, kernel)) < 0.2)
    x = grid(rng, x_shape, -4, 4)
    t = {"x": Tensor("x", x_shape), "a": Tensor("a", x_shape), "y": Tensor("y", (1, out_hw, out_hw, 64))}
    conv2 = dict(weight=1, bias=None, padding=pad, strides=(strides, strides), groups=1)
    g = Graph(
        t,
        [
            Node("conv2d", ["x"], "a", dict(weight=0, bias=None, groups=1)),
            Node("conv2d", ["a"], "y", conv2, [("relu", {})]),
        ],
        ["x"],
        ["y"],
        [w1, w2],
    )
    y, part, _ = run(g, {"x": x}, arch)
    a = conv2d_nhwc(x, w1, None)
    expect = np.maximum(conv2d_nhwc(a, w2, None, strides=(strides, strides), padding=pad), 0)
    np.testing.assert_array_equal(y["y"], expect)
    f = part.program.fields()
    moved = {
        d: int((f.operand2[(f.opcode == Opcode.DATAMOVE) & (f.flags == d)] + 1).sum())
        for d in (Direction.DRAM0_TO_LOCAL, Direction.LOCAL_TO_DRAM0)
    }
    assert moved == {Direction.DRAM0_TO_LOCAL: 12 * 12, Direction.LOCAL_TO_DRAM0: 8 * out_hw * out_hw}  # x in, y out


def test_a_whole_map_stays_in_local_memory_for_a_later_conv(monkeypatch):
    """m (kept whole by the conv that makes it) is read only by the last conv, after two convs that
    do not read it: they lay their buffers out beside it, and the last conv reads it where it lies
    (a projection after the block's other convs). Its stores go out, it is never read back. Exact;
    with nothing kept, the last conv reads m back from DRAM0."""
    from tvm_tensil.compiler.schedule import conv as conv_schedule
    from tvm_tensil.isa.instructions import Direction

    rng = np.random.default_rng(13)
    x_shape = (1, 8, 8, 48)  # (48 channels: few DRAM vectors per MatMul, each conv one tile)
    w = [rng.choice([-1.0, 1.0], shape) * (rng.random(shape) < 0.05) for shape in
         [(48, 48, 3, 3), (48, 48, 3, 3), (48, 48, 3, 3), (32, 48, 1, 1)]]  # fmt: skip
    x = grid(rng, x_shape, -4, 4)
    t = {k: Tensor(k, x_shape) for k in ("x", "m", "p", "q")} | {"r": Tensor("r", (1, 4, 4, 32))}
    same = dict(bias=None, padding=(1, 1, 1, 1), groups=1)
    g = Graph(
        t,
        [
            Node("conv2d", ["x"], "m", dict(weight=0, **same)),
            Node("conv2d", ["x"], "p", dict(weight=1, **same)),
            Node("conv2d", ["p"], "q", dict(weight=2, **same)),
            Node("conv2d", ["m"], "r", dict(weight=3, bias=None, strides=(2, 2), groups=1)),
        ],
        ["x"],
        ["q", "r"],
        w,
    )
    m = conv2d_nhwc(x, w[0], None, padding=(1,) * 4)
    q = conv2d_nhwc(conv2d_nhwc(x, w[1], None, padding=(1,) * 4), w[2], None, padding=(1,) * 4)

    def loaded(part):
        f = part.program.fields()
        return int((f.operand2[(f.opcode == Opcode.DATAMOVE) & (f.flags == Direction.DRAM0_TO_LOCAL)] + 1).sum())

    y, kept, _ = run(g, {"x": x})
    np.testing.assert_array_equal(y["q"], q)
    np.testing.assert_array_equal(y["r"], conv2d_nhwc(m, w[3], None, strides=(2, 2)))
    monkeypatch.setattr(conv_schedule, "kept_maps", lambda *args: ())
    y, dropped, _ = run(g, {"x": x})
    np.testing.assert_array_equal(y["r"], conv2d_nhwc(m, w[3], None, strides=(2, 2)))
    x_vectors = 8 * 8 * 6
    assert loaded(kept) <= 2 * x_vectors  # x, by the two convs that read it; m never
    assert loaded(dropped) > loaded(kept)  # m read back


def test_output_blocks_alternate_accumulator_banks_and_interleave_epilogues():
    """A conv whose tiles fit half the accumulators puts consecutive output blocks in the two halves,
    and one block's ReLU runs between the next block's MatMuls (the core overlaps them); the result
    is still exact, with a residual add and a bias."""
    from tvm_tensil.isa.instructions import Opcode

    rng = np.random.default_rng(5)
    x_shape = (1, 6, 6, 24)  # 3 input and 3 output blocks on 8x8
    w = grid(rng, (24, 24, 3, 3), -2, 2)
    bias = grid(rng, 24)
    x = grid(rng, x_shape)
    g = Graph(
        {"x": Tensor("x", x_shape), "c": Tensor("c", x_shape), "s": Tensor("s", x_shape), "r": Tensor("r", x_shape)},
        [
            Node("conv2d", ["x"], "c", dict(weight=0, bias=1, padding=(1, 1, 1, 1), groups=1)),
            Node("add", ["c", "x"], "s"),
            Node("relu", ["s"], "r"),
        ],
        ["x"],
        ["r"],
        [w, bias],
    )
    y, part, _ = run(g, {"x": x})
    np.testing.assert_array_equal(y["r"], np.maximum(conv2d_nhwc(x, w, bias, padding=(1, 1, 1, 1)) + x, 0))
    f = part.program.fields()
    half = ARCH.accumulator_depth // 2
    mm = f.opcode == int(Opcode.MATMUL)
    banks = set((f.addr1[mm] >= half).tolist())
    assert banks == {False, True}, "every output block used the same accumulator half"
    # Some SIMD comes after a MatMul of another bank and before a later MatMul.
    order = [
        (int(op), bool(a1 >= half) if op == int(Opcode.MATMUL) else bool(a0 >= half))
        for op, a0, a1 in zip(f.opcode, f.addr0, f.addr1)
        if op in (int(Opcode.MATMUL), int(Opcode.SIMD))
    ]
    interleaved = any(
        order[i][0] == int(Opcode.SIMD)
        and order[i - 1][0] == int(Opcode.MATMUL)
        and order[i - 1][1] != order[i][1]
        and any(op == int(Opcode.MATMUL) for op, _ in order[i + 1 :])
        for i in range(1, len(order))
    )
    assert interleaved, "no epilogue was interleaved with the next block's MatMuls"


def test_a_whole_map_passes_to_the_global_average_pool_in_local_memory():
    """A conv whose result is one whole tile hands it to a global average pool in local memory: the
    pool's first level reads it there, and a result only the pool reads never goes to DRAM0. The
    means are bit-identical to the pool's from DRAM0, and within the halving bound of the exact mean."""
    from tvm_tensil.isa.instructions import Direction, Opcode

    rng = np.random.default_rng(11)
    x_shape = (1, 6, 5, 16)  # 30 pixels (a 32-wide tree), two channel blocks on 8x8
    w = grid(rng, (16, 16, 3, 3), -2, 2)
    x = grid(rng, x_shape)
    t = {
        "x": Tensor("x", x_shape),
        "c": Tensor("c", x_shape),
        "r": Tensor("r", x_shape),
        "y": Tensor("y", (1, 1, 1, 16)),
    }

    def graph(outputs):
        return Graph(
            t,
            [
                Node("conv2d", ["x"], "c", dict(weight=0, bias=None, padding=(1, 1, 1, 1), groups=1)),
                Node("relu", ["c"], "r"),
                Node("global_avg_pool", ["r"], "y", {}),
            ],
            ["x"],
            outputs,
            [w],
        )

    y, part, _ = run(graph(["y"]), {"x": x})
    f = part.program.fields()

    def moved(direction):
        return int((f.operand2[(f.opcode == Opcode.DATAMOVE) & (f.flags == direction)] + 1).sum())

    assert moved(Direction.DRAM0_TO_LOCAL) == 30 * 2  # x only: the pool read r in local memory
    assert moved(Direction.LOCAL_TO_DRAM0) == 2  # the means only: nobody else reads r
    both, part2, _ = run(graph(["y", "r"]), {"x": x})
    f = part2.program.fields()
    stored = int((f.operand2[(f.opcode == Opcode.DATAMOVE) & (f.flags == Direction.LOCAL_TO_DRAM0)] + 1).sum())
    assert stored == 30 * 2 + 2  # r is an output too: stored beside the pool
    from_dram, part3, _ = run(graph(["y"]), {"x": x}, options=CompileOptions(pool_hand_over=False))
    f = part3.program.fields()
    assert int((f.operand2[(f.opcode == Opcode.DATAMOVE) & (f.flags == Direction.DRAM0_TO_LOCAL)] + 1).sum()) > 60
    np.testing.assert_array_equal(y["y"], from_dram["y"])
    np.testing.assert_array_equal(both["y"], y["y"])
    mean = np.maximum(conv2d_nhwc(x, w, None, padding=(1, 1, 1, 1)), 0).mean(axis=(1, 2), keepdims=True)
    levels = (30 - 1).bit_length()
    assert np.abs(y["y"] - mean).max() <= (0.5 + 2 * levels + 0.5) / 256 + np.abs(mean).max() * 2**-9


def test_a_residual_shortcut_enters_the_accumulators_by_a_move_or_the_array():
    """A fused residual's shortcut starts each output block's accumulators either by a move or by a
    MatMul with identity weights (exact); the scheduler keeps the faster. Forced either way, the
    result is exact and the program uses the path asked for."""
    from tvm_tensil.isa.instructions import Direction, Opcode

    rng = np.random.default_rng(12)
    x_shape = (1, 7, 6, 16)  # two channel blocks on 8x8
    w = grid(rng, (16, 16, 1, 1), -2, 2)
    x = grid(rng, x_shape)
    g = Graph(
        {"x": Tensor("x", x_shape), "c": Tensor("c", x_shape), "s": Tensor("s", x_shape), "r": Tensor("r", x_shape)},
        [
            Node("conv2d", ["x"], "c", dict(weight=0, bias=None, groups=1)),
            Node("add", ["c", "x"], "s"),
            Node("relu", ["s"], "r"),
        ],
        ["x"],
        ["r"],
        [w],
    )
    counts = {}
    for through_array in (False, True):
        y, part, _ = run(g, {"x": x}, options=CompileOptions(shortcut="array" if through_array else "move"))
        np.testing.assert_array_equal(y["r"], np.maximum(conv2d_nhwc(x, w, None) + x, 0))
        assert [n["op"] for n in part.report["nodes"]] == ["conv2d"]
        f = part.program.fields()
        counts[through_array] = (
            int(((f.opcode == Opcode.DATAMOVE) & (f.flags == Direction.LOCAL_TO_ACC)).sum()),
            int((f.opcode == Opcode.MATMUL).sum()),
        )
    (moves, matmuls), (moves_array, matmuls_array) = counts[False], counts[True]
    assert moves >= 2 and moves_array == 0  # one per output block and tile, or none
    # Per output block and tile: two input blocks' MatMuls and the move, or a third MatMul instead
    # (the two builds may cut the map into different tiles).
    assert matmuls == 2 * moves and matmuls_array % 3 == 0 and matmuls_array >= 6


def test_a_shortcut_loaded_block_by_block_computes_the_same():
    """A residual conv in several single-buffered tiles: its shortcut loads deferred beside the
    MatMuls or all before them, the result is exact either way."""
    rng = np.random.default_rng(21)
    arch = Architecture("FP16BP8", 8, 8192, 1024, 1024, 512)
    x_shape = (1, 16, 16, 32)
    w = grid(rng, (32, 32, 1, 1), -2, 2)  # products on the data type's grid: exact
    x = grid(rng, x_shape)
    g = Graph(
        {"x": Tensor("x", x_shape), "c": Tensor("c", x_shape), "y": Tensor("y", x_shape)},
        [Node("conv2d", ["x"], "c", dict(weight=0, bias=None, groups=1)), Node("add", ["c", "x"], "y")],
        ["x"],
        ["y"],
        [w],
    )
    want = conv2d_nhwc(x, w, None) + x
    for deferred in (True, False):
        y, part, _ = run(g, {"x": x}, arch, CompileOptions(defer_shortcut=deferred))
        np.testing.assert_array_equal(y["y"], want)
        assert len(part.report["nodes"]) == 1


def test_compiling_leaves_the_graph_as_it_was():
    """Fusion works on copies: the same graph compiles twice to the same program."""
    rng = np.random.default_rng(13)
    x_shape = (1, 4, 4, 8)
    g = Graph(
        {k: Tensor(k, x_shape) for k in ("x", "c", "s", "r")},
        [
            Node("conv2d", ["x"], "c", dict(weight=0, bias=None, groups=1)),
            Node("add", ["c", "x"], "s"),
            Node("relu", ["s"], "r"),
        ],
        ["x"],
        ["r"],
        [grid(rng, (8, 8, 1, 1))],
    )
    before = [(n.op, list(n.inputs), n.output, n.attrs, list(n.epilogue)) for n in g.nodes]
    first = compile_graph(g, ARCH, "t").program.data
    assert [(n.op, list(n.inputs), n.output, n.attrs, list(n.epilogue)) for n in g.nodes] == before
    assert compile_graph(g, ARCH, "t").program.data == first


@pytest.mark.parametrize("preset", ["arty_a7_35", "pynqz1"])
def test_every_weight_placed_in_dram1_is_read(preset):
    """The scheduler tries alternatives (band counts, residual adds by move or by MatMul) and keeps
    the fastest: the weights only a losing alternative placed must not stay in DRAM1."""
    from tvm.relax.frontend.onnx import from_onnx

    from tvm_tensil import offload, zoo
    from tvm_tensil.isa.instructions import Direction, Opcode

    _, report = offload(from_onnx(zoo.resnet20v2(), keep_params_in_input=False), preset)
    (part,) = report.compiled.values()
    read = np.zeros(part.arch.dram1_depth + 1, dtype=bool)
    for _, f in part.program.chunks():
        moves = (f.opcode == Opcode.DATAMOVE) & (f.flags == Direction.DRAM1_TO_LOCAL)
        for first, size, stride in zip(f.addr1[moves], f.operand2[moves], f.stride1[moves]):
            read[first : first + (int(size) + 1) * (1 << int(stride)) : 1 << int(stride)] = True
    unread = [r for r in part.recipes if not read[r.base : r.base + r.size].any()]
    assert not unread, f"{len(unread)} DRAM1 recipes no instruction reads: {unread[:3]}"


def matmul_vectors_of(part) -> int:
    return sum(i.size + 1 for i in part.program.instructions() if i.opcode == Opcode.MATMUL)


@pytest.mark.parametrize("arch", ["pynqz1", "ultra96v2_300mhz"])
def test_an_rgb_input_is_written_as_its_first_convs_windows(arch):
    """ResNet's stem (7x7, stride 2, 3 channels): the host writes the input as the conv's windows,
    147 channels in a few blocks, and the conv is a 1x1 conv over them: exact, and far fewer
    MatMul vectors than one nearly empty block per tap."""
    arch = PRESETS[arch]
    rng = np.random.default_rng(7)
    w, bias, x = grid(rng, (8, 3, 7, 7), -4, 4), grid(rng, 8), grid(rng, (2, 13, 12, 3))
    g, out = conv_graph(x.shape, w, bias, (2, 2), (3, 3, 3, 3), epilogue=[("relu", {})])
    ref = np.maximum(conv2d_nhwc(x, w, bias, (2, 2), (3, 3, 3, 3), (1, 1)), 0)
    y, part, emu = run(g, {"x": x}, arch)
    y_plain, plain, _ = run(g, {"x": x}, arch, CompileOptions(input_patches=False))
    np.testing.assert_array_equal(y[out], ref)
    np.testing.assert_array_equal(y_plain[out], ref)
    patches = part.inputs["x"].patches
    assert patches is not None and plain.inputs["x"].patches is None
    assert patches.kernel == (7, 7) and part.inputs["x"].shape == (2, 7, 6, 147)
    assert matmul_vectors_of(part) * 2 < matmul_vectors_of(plain)
    # The model file says how the host writes it; the input keeps its own shape.
    model = part.model(g.constants)
    assert model.patches("x") == patches and model.tensor_shape("x") == (2, 13, 12, 3)


@pytest.mark.parametrize("case", ["wide input", "read twice", "depthwise", "pointwise"])
def test_an_input_stays_a_map_where_windows_do_not_pay(case):
    from tvm_tensil.compiler.compile import with_input_patches

    rng = np.random.default_rng(1)
    c = 16 if case == "wide input" else 3
    k = 1 if case == "pointwise" else 3
    groups = 3 if case == "depthwise" else 1
    w = grid(rng, (3 if groups == 3 else 8, c // groups, k, k))
    g, _ = conv_graph((1, 8, 8, c), w, None, padding=(k // 2,) * 4, groups=groups)
    if case == "read twice":
        g.nodes.append(Node("conv2d", ["x"], "z", dict(weight=0, padding=(1, 1, 1, 1))))
        g.tensors["z"] = Tensor("z", g.tensors["y"].shape)
        g.outputs.append("z")
    graph, stored = with_input_patches(g, PRESETS["ultra96v2_300mhz"])
    assert stored == {} and graph is g


def test_a_tiles_last_epilogue_runs_beside_the_next_tiles_matmuls():
    """One output block, many tiles, a ReLU6: with banks and two buffers each tile's epilogue and
    gather wait for the next tile's MatMuls (the array is not idle while the SIMD unit works) and
    the tile's stores go out once its gather has: exact either way."""
    rng = np.random.default_rng(9)
    x_shape = (1, 40, 40, 16)
    w, bias, x = grid(rng, (8, 16, 1, 1), -2, 2), grid(rng, 8), grid(rng, x_shape)
    clip = [("clip", {"lo": 0.0, "hi": 6.0})]
    g, out = conv_graph(x_shape, w, bias, epilogue=clip)
    ref = np.clip(conv2d_nhwc(x, w, bias), 0, 6)
    y, part, _ = run(g, {"x": x}, options=CompileOptions(pipeline_tiles=True))
    y_plain, plain, _ = run(g, {"x": x})
    np.testing.assert_array_equal(y[out], ref)
    np.testing.assert_array_equal(y_plain[out], ref)
    f = part.program.fields()
    ops = f.opcode.tolist()
    # Some SIMD (an epilogue) comes after a MatMul that starts a later tile than its own: the
    # MatMuls' accumulator addresses restart at a bank's base while SIMDs of the other bank follow.
    half = ARCH.accumulator_depth // 2
    banks = [(op, (a1 if op == int(Opcode.MATMUL) else a0) >= half) for op, a0, a1 in zip(ops, f.addr0, f.addr1)]
    switches = [
        i for i in range(1, len(banks))
        if banks[i][0] == int(Opcode.SIMD) and banks[i - 1][0] == int(Opcode.MATMUL) and banks[i][1] != banks[i - 1][1]
    ]  # fmt: skip
    assert switches, "no epilogue ran beside another bank's MatMuls"


def test_a_conv_whose_tile_fills_the_accumulators_runs_banked_and_paced():
    """A 1x1 conv of one input block with a ReLU6 over a 64x64 map: its largest tile takes most of
    the accumulators, and each output vector costs the accumulator engine three cycles (two SIMD
    instructions and its gather) against one MatMul vector. The build takes tiles that fit half the
    accumulators (one block's epilogue beside the next block's MatMuls) and paces its DRAM moves by
    both engines, so they go out between pieces of the epilogues: faster by the latency model than
    the same plans paced by the MatMuls alone, and exact either way."""
    from tvm_tensil.compiler.latency import estimate_cycles

    rng = np.random.default_rng(12)
    x_shape = (1, 64, 64, 8)
    w, bias, x = grid(rng, (24, 8, 1, 1), -2, 2), grid(rng, 24), grid(rng, x_shape)
    g, out = conv_graph(x_shape, w, bias, epilogue=[("clip", {"lo": 0.0, "hi": 6.0})])
    assert not conv_plan(g, ARCH).banked  # the largest tile needs more than half the accumulators
    ref = np.clip(conv2d_nhwc(x, w, bias), 0, 6)
    # (The scheduler's own order: the interleave pass merges the engines' streams after it.)
    built = {
        pace: run(g, {"x": x}, options=CompileOptions(paced_epilogues=pace, interleave=False)) for pace in (None, False)
    }
    for y, _, _ in built.values():
        np.testing.assert_array_equal(y[out], ref)
    chosen, unpaced = (built[pace][1].program for pace in (None, False))
    assert estimate_cycles(chosen, ARCH)["total"] < estimate_cycles(unpaced, ARCH)["total"]

    def between_simds(program) -> bool:
        """A DRAM move with a SIMD instruction on either side."""
        f = program.fields()
        simd = f.opcode == int(Opcode.SIMD)
        dram = (f.opcode == int(Opcode.DATAMOVE)) & (f.flags < 4)
        return bool((dram[1:-1] & simd[:-2] & simd[2:]).any())

    f = chosen.fields()
    written = f.addr0[f.opcode == int(Opcode.SIMD)]
    half = ARCH.accumulator_depth // 2
    assert (written < half).any() and (written >= half).any()  # epilogues in both banks
    assert between_simds(chosen) and not between_simds(unpaced)


def test_the_next_blocks_shortcut_enters_its_bank_before_this_blocks_gather():
    """Banked, a residual conv moves the next output block's shortcut into the other bank while
    this block's MatMuls finish (the next block's MatMuls then start at once): each block's shortcut
    move but the first of a tile comes before the gather of the block before it. Exact."""
    from tvm_tensil.isa.instructions import Direction

    rng = np.random.default_rng(14)
    x_shape = (1, 7, 6, 32)  # four channel blocks on 8x8
    w = grid(rng, (32, 32, 1, 1), -2, 2)
    x = grid(rng, x_shape)
    g = Graph(
        {"x": Tensor("x", x_shape), "c": Tensor("c", x_shape), "s": Tensor("s", x_shape)},
        [Node("conv2d", ["x"], "c", dict(weight=0, bias=None, groups=1)), Node("add", ["c", "x"], "s")],
        ["x"],
        ["s"],
        [w],
    )
    y, part, _ = run(g, {"x": x}, options=CompileOptions(shortcut="move"))
    np.testing.assert_array_equal(y["s"], conv2d_nhwc(x, w, None) + x)
    f = part.program.fields()
    moves = (f.opcode == int(Opcode.DATAMOVE)) & (f.flags == int(Direction.LOCAL_TO_ACC))
    gathers = (f.opcode == int(Opcode.DATAMOVE)) & (f.flags == int(Direction.ACC_TO_LOCAL))
    order = [("move" if m else "gather") for m, gth in zip(moves, gathers) if m or gth]
    assert order == ["move", "move", "gather", "move", "gather", "move", "gather", "gather"]


def test_second_outputs_run_in_pairs_of_blocks(monkeypatch):
    """A second output's MatMul reads its block's gather: block by block the array waits for it.
    Banked, output blocks go in pairs: MatMuls (a), MatMuls (b), second outputs (a, b), each gather
    beside the other block's MatMuls. Between one pair's shortcut moves: the second block's four
    MatMuls and both second outputs. Exact, and faster by the latency model than block by block."""
    import tvm_tensil.compiler.schedule.conv as conv
    from tvm_tensil.compiler.latency import estimate_cycles
    from tvm_tensil.isa.instructions import Direction

    rng = np.random.default_rng(15)
    x_shape = (1, 7, 6, 32)  # four channel blocks on 8x8
    w = grid(rng, (32, 32, 1, 1), -2, 2)
    scale, shift = rng.integers(-2, 3, (32, 1, 1, 1)).astype(float), grid(rng, (32,))
    x = grid(rng, x_shape)
    t = {k: Tensor(k, x_shape) for k in ("x", "c", "s", "a", "r", "y")}
    g = Graph(
        t,
        [
            Node("conv2d", ["x"], "c", dict(weight=0, bias=None, groups=1)),
            Node("add", ["c", "x"], "s"),
            Node("conv2d", ["s"], "a", dict(weight=1, bias=2, groups=32)),
            Node("relu", ["a"], "r"),
            Node("add", ["r", "s"], "y"),
        ],
        ["x"],
        ["y"],
        [w, scale, shift],
    )
    s = conv2d_nhwc(x, w, None) + x
    expected = np.maximum(s * scale.reshape(-1) + shift, 0) + s
    cycles = {}
    for paired in (True, False):
        if not paired:
            monkeypatch.setattr(conv, "_pairs_second_outputs", lambda node, p: False)
        y, part, _ = run(g, {"x": x}, options=CompileOptions(shortcut="move", interleave=False))  # (its own order)
        np.testing.assert_array_equal(y["y"], expected)
        assert [n["op"] for n in part.report["nodes"]] == ["conv2d", "add"]  # the affine is a second output
        cycles[paired] = estimate_cycles(part.program, ARCH)["total"]
        f = part.program.fields()
        moves = (f.opcode == int(Opcode.DATAMOVE)) & (f.flags == int(Direction.LOCAL_TO_ACC))
        segments = np.split(f.opcode == int(Opcode.MATMUL), np.flatnonzero(moves))
        if paired:
            assert [int(seg.sum()) for seg in segments[1:5]] == [4, 6, 4, 6]
    assert cycles[True] < cycles[False]


def test_streamed_weights_may_go_in_pieces_the_loads_follow(monkeypatch):
    """A dense layer of one row streams its weights through local memory: per weight block one
    LoadWeights and a MatMul of one vector, so the loads keep up with the DRAM1 reads. A weight
    group's run in one move after its first piece makes the group's loads wait for all of it; in
    pieces they follow it. The scheduler tries both where weights stream and keeps the faster
    (here the pieces); exact either way."""
    import tvm_tensil.compiler.schedule.conv as conv
    from tvm_tensil.compiler.latency import estimate_cycles
    from tvm_tensil.isa.instructions import Direction

    rng = np.random.default_rng(16)
    arch = PRESETS["ultra96v2_300mhz"]  # a weight group per output block: 2,176 vectors on 16x16
    w = grid(rng, (256, 2048, 1, 1), -2, 2)
    x = grid(rng, (1, 1, 1, 2048), -1, 1)
    g = Graph(
        {"x": Tensor("x", x.shape), "y": Tensor("y", (1, 1, 1, 256))},
        [Node("conv2d", ["x"], "y", dict(weight=0, bias=None, groups=1))],
        ["x"],
        ["y"],
        [w],
    )
    cycles, largest = {}, {}
    for tried in (True, False):
        if not tried:
            monkeypatch.setattr(conv, "_streams_weights", lambda ctx, p: False)
        y, part, _ = run(g, {"x": x}, arch, CompileOptions(stream_dense=False))  # weight-stationary
        np.testing.assert_array_equal(y["y"], conv2d_nhwc(x, w, None))
        cycles[tried] = estimate_cycles(part.program, arch)["total"]
        f = part.program.fields()
        weights = (f.opcode == int(Opcode.DATAMOVE)) & (f.flags == int(Direction.DRAM1_TO_LOCAL))
        largest[tried] = int(f.operand2[weights].max()) + 1
    assert largest[False] > conv.WEIGHT_PIECE >= largest[True]
    assert cycles[True] < cycles[False]


@pytest.mark.parametrize("preset, bias", [("pynqz1_12x12", True), ("ultra96v2_300mhz", False), ("pynqz1", True)])
def test_a_dense_layers_weight_blocks_go_without_bias_rows(preset, bias):
    """A dense layer's weight blocks may go without their bias rows (``bare_blocks``): a block of N
    rows is read and a zero shifted in after it, the bias starts each output block through a MatMul
    of one zero vector. Exact against numpy either way, a vector a block fewer read from DRAM1 and
    into the array; the scheduler keeps whichever the latency model finds faster."""
    from tvm_tensil.isa.instructions import Direction, LoadWeightsFlag

    arch = PRESETS[preset]
    n = arch.array_size
    rng = np.random.default_rng(17)
    w = grid(rng, (5 * n - 3, 7 * n + 1, 1, 1), -2, 2)
    b = grid(rng, 5 * n - 3) if bias else None
    x = grid(rng, (1, 1, 1, 7 * n + 1), -1, 1)
    g, out = conv_graph(x.shape, w, b)
    reads, programs = {}, {}
    for bare in (False, True):
        y, part, _ = run(g, {"x": x}, arch, CompileOptions(bare_blocks=bare, stream_dense=False))
        np.testing.assert_array_equal(y[out], conv2d_nhwc(x, w, b))
        f = part.program.fields()
        loads = (f.opcode == int(Opcode.LOADWEIGHTS)) & ((f.flags & int(LoadWeightsFlag.ZEROES)) == 0)
        weights = (f.opcode == int(Opcode.DATAMOVE)) & (f.flags == int(Direction.DRAM1_TO_LOCAL))
        reads[bare] = np.array([(f.raw1[loads] + 1).sum(), (f.operand2[weights] + 1).sum()])
        programs[bare] = part.program.data
        assert part.report["nodes"][0].get("bare_blocks", False) == bare  # the report says which
    # 5 x 8 blocks: a read fewer each, but the 5 output blocks' bias rows read on their own.
    assert (reads[False] - reads[True] == 5 * 8 - (5 if bias else 0)).all()
    y, part, _ = run(g, {"x": x}, arch, CompileOptions(stream_dense=False))  # the faster, by the latency model
    np.testing.assert_array_equal(y[out], conv2d_nhwc(x, w, b))
    assert part.program.data in programs.values()


# -- depthwise convs as window MatMuls (a core with the window MatMul) -------------------------------

WINDOW_ARCH = ARCH.replace(window_matmul=True, name="pynqz1_window")


def _window_matmuls(part) -> tuple[int, int]:
    """(window MatMuls, other MatMuls reading local memory) of a compiled partition."""
    from tvm_tensil.isa.instructions import MatMulFlag

    f = part.program.fields()
    mm = f.opcode == Opcode.MATMUL
    window = mm & ((f.flags & MatMulFlag.WINDOW) != 0)
    return int(window.sum()), int((mm & ~window & ((f.flags & MatMulFlag.ZEROES) == 0)).sum())


@pytest.mark.parametrize(
    "x_shape, k, strides, padding, arch",
    [
        ((1, 7, 7, 12), (3, 3), (1, 1), (1, 1, 1, 1), WINDOW_ARCH),  # a partial channel block
        ((2, 9, 8, 16), (3, 3), (2, 2), (1, 1, 1, 1), WINDOW_ARCH),  # batch 2, stride 2, even width
        ((1, 9, 9, 8), (3, 3), (2, 2), (1, 1, 1, 1), WINDOW_ARCH),  # odd width: the last tap is padding
        ((1, 10, 9, 4), (5, 3), (1, 2), (2, 0, 1, 1), WINDOW_ARCH),  # asymmetric kernel, padding, stride
        ((1, 6, 11, 8), (5, 5), (1, 1), (2, 2, 2, 2), WINDOW_ARCH),  # 5 taps a row
        ((1, 5, 6, 8), (3, 3), (1, 1), (3, 1, 3, 1), WINDOW_ARCH),  # no kernel row covers every output row
        # Tiles narrower than the map: each tile's window pads only at the map's edges.
        (
            (1, 12, 40, 8),
            (3, 3),
            (1, 1),
            (1, 1, 1, 1),
            Architecture("FP16BP8", 8, 4096, 4096, 160, 64, window_matmul=True),
        ),
        (
            (1, 12, 40, 8),
            (3, 3),
            (2, 2),
            (1, 1, 1, 1),
            Architecture("FP16BP8", 8, 4096, 4096, 160, 64, window_matmul=True),
        ),
    ],
)
def test_depthwise_convs_run_as_window_matmuls_exactly(x_shape, k, strides, padding, arch):
    """A window MatMul per kernel row and output row, exact on grid values (every product exact), the
    same as the diagonal blocks the core would otherwise run (``CompileOptions(window_matmul=False)``)."""
    rng = np.random.default_rng(sum(x_shape) + k[0])
    c = x_shape[3]
    w = grid(rng, (c, 1, *k), -4, 4)
    bias = grid(rng, c)
    x = grid(rng, x_shape)
    g, out = conv_graph(x_shape, w, bias, strides, padding, groups=c, epilogue=[("relu", {})])
    want = np.maximum(conv2d_nhwc(x, w, bias, strides, padding, groups=c), 0)
    y, part, emu = run(g, {"x": x}, arch)
    np.testing.assert_array_equal(y[out], want)
    windows, others = _window_matmuls(part)
    assert windows > 0 and others == 0
    plan = conv_plan(g, arch)
    assert plan.window_rows and plan.taps == tuple((ky, 0) for ky in range(k[0]))
    if arch.local_depth == 160:
        assert plan.cols < g.tensors[out].shape[2]  # (the case it stands for)
    diagonal, dpart, _ = run(g, {"x": x}, arch, CompileOptions(window_matmul=False))
    np.testing.assert_array_equal(diagonal[out], want)
    assert _window_matmuls(dpart)[0] == 0
    assert part.report["cycles"]["total"] < dpart.report["cycles"]["total"]


@pytest.mark.parametrize(
    "mode, local_depth", [("resident", 4096), ("input blocks", 200), ("blocks", 120), ("one block", 46)]
)
def test_depthwise_weights_in_two_parts_run_as_window_matmuls(mode, local_depth):
    """Two-part weights (residue, then the rounded weights and the bias) in every weight mode:
    exact as window MatMuls too (a block a kernel row: the modes need less local memory)."""
    arch = Architecture("FP16BP8", 4, 4096, 4096, local_depth, 24, window_matmul=True)
    g, out, x, want, _ = _two_part_conv("depthwise", 1, np.random.default_rng(7))
    y, part, _ = run(g, {"x": x}, arch)
    np.testing.assert_array_equal(y[out], want)
    assert _window_matmuls(part)[0] > 0
    assert conv_plan(g, arch).weights.mode == mode


@pytest.mark.parametrize("k", [(1, 1), (3, 1)])
def test_depthwise_kernels_one_tap_wide_stay_diagonal_blocks(k):
    """A window of one tap gains nothing over a diagonal block (a 1x1 one streams the whole tile in
    one MatMul): those stay diagonal, exact, on a core with the window MatMul (a squeeze-excite's
    per-channel scale is one)."""
    rng = np.random.default_rng(4)
    x_shape = (3, 5, 4, 12)
    w = grid(rng, (12, 1, *k), -4, 4)
    x = grid(rng, x_shape)
    pad = (k[0] // 2, 0, k[0] // 2, 0)
    g, out = conv_graph(x_shape, w, None, padding=pad, groups=12)
    y, part, _ = run(g, {"x": x}, WINDOW_ARCH)
    np.testing.assert_array_equal(y[out], conv2d_nhwc(x, w, np.zeros(12), padding=pad, groups=12))
    assert _window_matmuls(part)[0] == 0 and not conv_plan(g, WINDOW_ARCH).window_rows
