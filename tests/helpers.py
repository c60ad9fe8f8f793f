"""Shared test helpers: a hand-assembled one-layer Tensil model (dense + bias + ReLU), and one
compiled model run under several devices."""

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tvm_tensil.arch import Architecture
from tvm_tensil.isa import assemble
from tvm_tensil.isa.layout import layout_of
from tvm_tensil.model import ConstsEntry, TensilModel, TensorEntry


def dense_relu_model(
    arch: Architecture, weights: np.ndarray, bias: np.ndarray, batch: int, name: str = "dense_relu"
) -> TensilModel:
    """y = relu(x @ weights + bias) for x of shape (batch, N), written in Tensil assembly."""
    n = arch.array_size
    dt = arch.data_type
    consts = dt.from_float(np.vstack([bias[None, :], weights]))
    x_base, y_base = 0, 64
    text = f"""
        datamove dram1_to_local local=0 dram1=0 size={n + 1}
        loadweights local=0 size={n + 1}
        datamove dram0_to_local local=0x100 dram0={x_base} size={batch}
        matmul local=0x100 acc=0 size={batch}
        simd zero dest=r1
    """
    for i in range(batch):
        text += f"simd max read write dest=out left=in right=r1 acc_write={i} acc_read={i}\n"
    text += f"""
        datamove acc_to_local local=0x200 acc=0 size={batch}
        datamove local_to_dram0 local=0x200 dram0={y_base} size={batch}
    """
    return TensilModel(
        name=name,
        arch=arch,
        program=assemble(text, layout_of(arch)),
        consts=[(ConstsEntry(f"{name}.tdata", 0, n + 1), consts)],
        inputs=[TensorEntry("x", x_base, batch)],
        outputs=[TensorEntry("y", y_base, batch)],
        extras={"inputs": {"x": {"shape": [batch, n]}}, "outputs": {"y": {"shape": [batch, n]}}},
    )


@dataclass
class DeviceRuns:
    outputs: dict  # device name -> the model's output
    report: object  # the build's BuildReport
    stats: dict  # device name -> {partition symbol: RunStats}


def outputs_on_devices(onnx_model, shape, devices, arch="pynqz1", seed=0, calibration=None, options=None) -> DeviceRuns:
    """Build ``onnx_model`` with tvm_tensil (and ``calibration`` samples, compile ``options``) and run
    the same executable under each device."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    import tvm_tensil

    mod = from_onnx(onnx_model, keep_params_in_input=False)
    ex = tvm_tensil.build(
        mod, target="tensil", arch=arch, calibration=calibration, **({"options": options} if options else {})
    )
    x = tvm.runtime.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    runs = DeviceRuns({}, ex.tensil_report, {})
    for name in devices:
        with tvm_tensil.device(name) as session:
            runs.outputs[name] = vm["main"](x).numpy()
        runs.stats[name] = session.last_run_stats(ex.tensil_report)
    return runs


def conv_chain(convs: int, seed: int):
    """Convs with a Neg between each two (Neg stays on the CPU, so each conv is a partition of its
    own). Exact in FP16BP8: the first conv's weights and the input on a 1/16 grid make products on
    the 1/256 grid; the later convs' weights are sparse +-1, which keeps them there."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for i in range(convs):
        if i == 0:
            w = rng.integers(-8, 9, (8, 8, 3, 3)) / 16
        else:
            w = rng.choice([-1.0, 1.0], (8, 8, 3, 3)) * (rng.random((8, 8, 3, 3)) < 0.1)
        inits.append(numpy_helper.from_array(w.astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
        x = f"c{i}"
        if i + 1 < convs:
            nodes.append(helper.make_node("Neg", [x], [f"a{i}"]))
            x = f"a{i}"
    shape = [1, 8, 6, 6]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def built(convs: int, seed: int, arch="pynqz1"):
    """``conv_chain(convs, seed)`` on the TCU: its VM, build report, an input and TVM's CPU output."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    import tvm_tensil

    mod = from_onnx(conv_chain(convs, seed), keep_params_in_input=False)
    ex = tvm_tensil.build(mod, target="tensil", arch=arch)
    report = ex.tensil_report
    x = tvm.runtime.tensor(np.random.default_rng(seed).integers(-16, 17, (1, 8, 6, 6)).astype(np.float32) / 16)
    cpu = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](x).numpy()
    return relax.VirtualMachine(ex, tvm.cpu()), report, x, cpu


def schedule_context(graph, arch: Architecture, options=None, read_once: bool = False):
    """The scheduler's ``Context`` for ``graph`` as ``compile_graph`` makes it (fused, placed), and
    the fused graph (``read_once``: with the intermediates only one node reads, else none)."""
    from tvm_tensil.compiler import CompileOptions, fuse
    from tvm_tensil.compiler.compile import mark_flattened, place_tensors
    from tvm_tensil.compiler.schedule import Context, _read_once

    fused = mark_flattened(fuse(graph))
    place, dram0 = place_tensors(fused, arch)
    once = _read_once(fused) if read_once else frozenset()
    return Context(arch, fused, place, once, dram0, options or CompileOptions()), fused


def conv_plan(
    graph, arch: Architecture, node: int = 0, given=None, buffers: int = 1, read_once: bool = False, **kwargs
):
    """The plan the scheduler makes for the graph's ``node``-th node (a conv) after ``given``."""
    from tvm_tensil.compiler.memory import ConstTable
    from tvm_tensil.compiler.schedule import NOTHING, conv

    ctx, fused = schedule_context(graph, arch, read_once=read_once)
    return conv.plan(fused.nodes[node], ctx, given or NOTHING, ConstTable(arch), buffers, **kwargs)


def matmul_vectors(report) -> int:
    """The MatMul vectors every partition of a build's report runs (one array pass each)."""
    from tvm_tensil.isa import Opcode

    return sum(int(part.program.check().vectors[Opcode.MATMUL]) for part in report.compiled.values())


def model_matmul_vectors(mod, array_size: int) -> tuple[int, int]:
    """What a Relax module's convs and dense layers need of an array of ``array_size``: the MatMul
    vectors of their products (output pixel x tap pairs that read a real input pixel, per pair of
    channel blocks; a depthwise conv's blocks pair with themselves), and the output vectors (at most
    one MatMul each more starts the accumulators from the bias). A conv that alone reads a model
    input it pays to write as its windows (``compile.with_input_patches``' rule) is a 1x1 conv over
    them: every output pixel times its windows' blocks."""
    import tvm
    from tvm import relax

    from tvm_tensil.byoc.frontend import shape_of

    def blocks(c: int) -> int:
        return -(-c // array_size)

    def reach(size, out, kernel, stride, pad, dilation) -> int:
        return sum(0 <= o * stride - pad + k * dilation < size for o in range(out) for k in range(kernel))

    from tvm_tensil.compiler.compile import PATCHES_GROWTH, PATCHES_MATMUL_SHARE

    needed = outputs = 0
    params = {v for v in mod["main"].params}
    reads: dict = {}

    def count(e):
        if isinstance(e, relax.Call):
            for a in e.args:
                if a in params:
                    reads[a] = reads.get(a, 0) + 1

    relax.analysis.post_order_visit(mod["main"], count)

    def windows(e, c, kh, kw, h, w, oh, ow) -> bool:
        by_block, by_tap = blocks(kh * kw * c), kh * kw * blocks(c)
        grows = oh * ow * by_block / (h * w * blocks(c))
        return (
            e.args[0] in params
            and reads[e.args[0]] == 1
            and (by_block <= PATCHES_MATMUL_SHARE * by_tap and grows <= PATCHES_GROWTH)
        )

    def visit(e):
        nonlocal needed, outputs
        if not isinstance(e, relax.Call) or not isinstance(e.op, tvm.ir.Op):
            return
        shape = lambda t: list(shape_of(t))  # noqa: E731
        if e.op.name == "relax.nn.conv2d":
            (n, c, h, w), (co, cg, kh, kw), (_, _, oh, ow) = shape(e.args[0]), shape(e.args[1]), shape(e)
            a = e.attrs
            s, p, d = [int(v) for v in a.strides], [int(v) for v in a.padding], [int(v) for v in a.dilation]
            taps = reach(h, oh, kh, s[0], p[0], d[0]) * reach(w, ow, kw, s[1], p[1], d[1])
            depthwise = int(a.groups) == c > 1
            assert int(a.groups) == 1 or depthwise and cg == 1 and co == c, "grouped: not counted"
            pairs = blocks(c) if depthwise else blocks(c) * blocks(co)
            if int(a.groups) == 1 and windows(e, c, kh, kw, h, w, oh, ow):
                taps, pairs = oh * ow, blocks(kh * kw * c) * blocks(co)
            needed += n * taps * pairs
            outputs += n * oh * ow * blocks(co)
        elif e.op.name == "relax.matmul":
            (rows, k), (_, m) = shape(e.args[0]), shape(e.args[1])
            needed += rows * blocks(k) * blocks(m)
            outputs += rows * blocks(m)

    relax.analysis.post_order_visit(mod["main"], visit)
    return needed, outputs


def dense_graph(features: int, classes: int, bias: bool, relu: bool = False, seed: int = 0):
    """A dense layer (a matmul's (K, M) weight, one input vector) on a 1/16 grid, so that FP16BP8
    computes it exactly: (graph, input, the exact output (1, classes))."""
    from tvm_tensil.compiler import Graph, Node, Tensor

    rng = np.random.default_rng(seed)
    w = rng.integers(-4, 4, (features, classes)) / 16
    consts = [w] + ([rng.integers(-16, 16, classes) / 16] if bias else [])
    nodes = [Node("conv2d", ["x"], "y", dict(weight=0, bias=1 if bias else None, groups=1, layout="KM"))]
    tensors = {"x": Tensor("x", (1, 1, 1, features)), "y": Tensor("y", (1, 1, 1, classes))}
    if relu:
        nodes.append(Node("relu", ["y"], "r"))
        tensors["r"] = Tensor("r", (1, 1, 1, classes))
    graph = Graph(tensors, nodes, ["x"], ["r" if relu else "y"], consts)
    x = rng.integers(-1, 1, (1, 1, 1, features)) / 16
    expected = x.reshape(1, -1) @ w + (consts[1] if bias else 0)
    return graph, x, np.maximum(expected, 0) if relu else expected


def tie_input(features: int, seed: int = 0) -> np.ndarray:
    """An input for ``dense_graph``'s weights (multiples of 1/16) whose products with them round:
    odd multiples of 1/32, so at FP16BP8 a product with an odd number of sixteenths ends in exactly
    half an lsb (a tie, rounded to even by the MatMul's chain so far) and every other is exact."""
    return (2 * np.random.default_rng(seed).integers(-8, 8, (1, 1, 1, features)) + 1) / 32


def tie_bound(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Per output, how far FP16BP8 may be from ``x @ w`` for a ``tie_input``: half an lsb (2**-9)
    for each product that is a tie, the others being exact."""
    raw = np.rint(x.reshape(-1, 1) * 256).astype(np.int64) * np.rint(w * 256).astype(np.int64)
    return (np.abs(raw) % 256 == 128).sum(axis=0) / 512


def activation_on_emulator(op: str, attrs, values: np.ndarray, arch):
    """``values`` (any number) through activation ``op`` as a layer of its own on the emulator:
    the results (in the values' order) and the run's stats (its saturation count)."""
    import warnings

    from tvm_tensil.compiler import Graph, Node, Tensor, compile_graph
    from tvm_tensil.runtime import Emulator

    n = len(values)
    x = np.concatenate([values, np.full(-n % 8, values[0])]).reshape(1, 1, -1, 8)
    g = Graph({"x": Tensor("x", x.shape), "y": Tensor("y", x.shape)}, [Node(op, ["x"], "y", attrs)], ["x"], ["y"], [])
    emu = Emulator(arch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = emu.run_model(compile_graph(g, arch, "t").model([]), {"x": x})["y"]
    return np.asarray(y).reshape(-1)[:n], emu.last_stats
