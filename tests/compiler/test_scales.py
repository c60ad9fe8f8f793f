"""Per-tensor scales: groups, the choice from calibration, the scaled graph, and what it computes."""

import warnings

import numpy as np
import pytest

from reference import conv2d_nhwc
from tvm_tensil import Emulator, load_arch
from tvm_tensil.compiler import CompileOptions, Graph, Node, Tensor, compile_graph
from tvm_tensil.compiler.compile import tensor_stats
from tvm_tensil.compiler.interpret import interpret
from tvm_tensil.compiler.scales import (
    HEADROOM,
    RESIDUE_BITS,
    RESIDUE_MARGIN,
    TIGHT_HEADROOM,
    apply_shifts,
    candidate_shifts,
    choose_scales,
    choose_shifts,
    residue_bits,
    scale_groups,
    simulated_error,
)
from tvm_tensil.numbers import FP32BP16
from tvm_tensil.packing import derive_constants

FP16 = load_arch("pynqz1")
FP32 = FP16.replace(data_type=FP32BP16, name="pynqz1_fp32bp16")


def wide_range_graph(seed: int = 0) -> Graph:
    """x (activations in the hundreds) -> conv with weights ~1e-3 + bias -> relu -> 1x1 conv, plus the
    relu's output (a residual add) -> clip -> 2x2 max pool."""
    rng = np.random.default_rng(seed)
    shapes = {"x": (1, 8, 8, 4), "t1": (1, 8, 8, 8), "t2": (1, 8, 8, 8), "t3": (1, 8, 8, 8), "t4": (1, 8, 8, 8)}
    shapes |= {"t5": (1, 8, 8, 8), "t6": (1, 4, 4, 8)}
    consts = [
        (rng.standard_normal((8, 4, 3, 3)) * 2e-3).astype(np.float32),
        (rng.standard_normal(8) * 0.1).astype(np.float32),
        (rng.standard_normal((8, 8, 1, 1)) * 0.3).astype(np.float32),
    ]
    conv = dict(strides=(1, 1), dilation=(1, 1), groups=1)
    nodes = [
        Node("conv2d", ["x"], "t1", dict(weight=0, bias=1, padding=(1, 1, 1, 1), **conv)),
        Node("relu", ["t1"], "t2"),
        Node("conv2d", ["t2"], "t3", dict(weight=2, bias=None, padding=(0, 0, 0, 0), **conv)),
        Node("add", ["t3", "t2"], "t4"),
        Node("clip", ["t4"], "t5", dict(lo=-1.0, hi=2.5)),
        Node("max_pool2d", ["t5"], "t6", dict(kernel=(2, 2), strides=(2, 2), dilation=(1, 1), padding=(0, 0, 0, 0))),
    ]
    return Graph({k: Tensor(k, v) for k, v in shapes.items()}, nodes, ["x"], ["t6"], consts)


def samples(count: int, seed: int = 1) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 8, 8, 4)) * 300} for _ in range(count)]


def run(graph, arch, x, calibration=None) -> np.ndarray:
    part = compile_graph(graph, arch, "t", calibration=calibration)
    return Emulator(arch).run_model(part.model(part.constants), x, warn_saturation=False)["t6"]


def test_ops_that_keep_a_scale_join_their_tensors_in_one_group():
    groups = scale_groups(wide_range_graph())
    assert len({groups[t] for t in ("t1", "t2", "t3", "t4", "t5", "t6")}) == 1  # relu, add, clip, pool
    assert groups["x"] != groups["t1"]  # a conv moves its result to any scale


def test_no_shifts_leave_the_graph_as_it_was():
    """The default (no calibration) compiles exactly what it compiled before scales existed."""
    graph = wide_range_graph()
    scaled, scaling = apply_shifts(graph, {})
    assert scaled is graph and not any(scaling.shifts.values()) and scaling.derived == ()


def test_chosen_shifts_fit_every_range_and_every_weight():
    graph = wide_range_graph()
    stats = tensor_stats(graph, samples(4))
    shifts = choose_shifts(graph, stats, FP16)
    limit = FP16.data_type.max_float
    for t, s in stats.items():
        assert s.peak * 2.0 ** shifts[t] * HEADROOM <= limit, t
    for node in graph.nodes:
        if node.op == "conv2d":
            w = np.abs(graph.constants[node.attrs.weight]).max()
            assert w * 2.0 ** (shifts[node.output] - shifts[node.inputs[0]]) <= limit
            assert shifts[node.output] >= shifts[node.inputs[0]]  # weights never coarser than unscaled
    assert shifts["x"] < 0 < shifts["t1"]  # inputs in the hundreds; tiny weights get the difference


def test_balancing_gives_tiny_weights_bits_from_a_wide_input():
    """The largest shifts leave the 1e-3 weights a few bits while the inputs keep all of theirs; the
    balanced choice moves bits from the inputs to the weights, simulates better on samples it was not
    chosen on, and is the one chosen (or the same with a tighter headroom)."""
    graph = wide_range_graph()
    cal = samples(8)
    stats = tensor_stats(graph, cal)
    options = candidate_shifts(graph, stats, FP16)
    largest, balanced = options["largest"], options["balanced"]
    assert largest["x"] == _largest_input_shift(stats) > balanced["x"]
    assert simulated_error(graph, balanced, FP16, cal[4:]) < simulated_error(graph, largest, FP16, cal[4:]) / 4
    tight = candidate_shifts(graph, stats, FP16, (TIGHT_HEADROOM,))["balanced, headroom 1.25"]
    assert choose_shifts(graph, stats, FP16, cal[:4]) in (balanced, tight)


def test_calibration_also_tries_a_tighter_headroom_and_keeps_what_simulates_best():
    """The candidates with headroom 1.25 fit every range with that margin, give no tensor fewer
    bits than headroom 2 does and some more; the choice simulates each of them."""
    graph = wide_range_graph()
    cal = samples(8)
    stats = tensor_stats(graph, cal)
    options = candidate_shifts(graph, stats, FP16, (HEADROOM, TIGHT_HEADROOM))
    usual, tight = options["largest"], options["largest, headroom 1.25"]
    for t, s in stats.items():
        assert s.peak * 2.0 ** tight[t] * TIGHT_HEADROOM <= FP16.data_type.max_float, t
        assert tight[t] >= usual[t], t
    assert any(tight[t] > usual[t] for t in stats)
    choice = choose_scales(graph, stats, FP16, cal[4:])
    # (the scales as they are only where they hold every range: not this graph's)
    assert any(s.held > FP16.data_type.max_float for s in stats.values())
    assert {name.split(", nearest")[0] for name in choice.errors} == set(options)


def test_the_tighter_headroom_only_where_the_usual_one_misses_the_target():
    """A tighter headroom saturates sooner on inputs beyond the samples': its options are kept only
    when the others' best misses the error target (over the margin), never without a target."""
    graph = wide_range_graph()
    cal = samples(8)
    stats = tensor_stats(graph, cal)
    tight = f"headroom {TIGHT_HEADROOM:g}"

    def best(choice, tight_too: bool) -> float:
        return min(e for n, e in choice.errors.items() if "residues" not in n and (tight_too or tight not in n))

    usual = choose_scales(graph, stats, FP16, cal[4:])
    assert tight not in usual.option and usual.errors[usual.option] == best(usual, False)
    assert best(usual, True) < best(usual, False)  # (a tight option would have been kept before)
    aimed = usual.worst[usual.option] * RESIDUE_MARGIN  # (calibration aims for the target over the margin)
    met = choose_scales(graph, stats, FP16, cal[4:], error_target=aimed)
    assert met.option == usual.option
    missed = choose_scales(graph, stats, FP16, cal[4:], error_target=aimed / 2)
    one_part = missed.one_part or missed
    assert tight in one_part.option and one_part.errors[one_part.option] == best(one_part, True)


def _largest_input_shift(stats) -> int:
    return int(np.floor(np.log2(FP16.data_type.max_float / HEADROOM / stats["x"].peak)))


def test_derived_constants_are_rebuilt_from_the_models_own_weights():
    graph = wide_range_graph()
    scaled, scaling = apply_shifts(graph, choose_shifts(graph, tensor_stats(graph, samples(2)), FP16))
    rebuilt = derive_constants(graph.constants, scaling.derived)
    assert len(rebuilt) == len(scaled.constants) > len(graph.constants)
    for a, b in zip(rebuilt, scaled.constants):
        assert np.array_equal(a, b)


def test_a_scaled_program_computes_the_graph():
    """FP32BP16 separates logic from rounding: with every tensor at its own scale (shifts far from 0),
    the TCU's result equals the graph's float value within 0.1% of its range (the 2e-3 weights keep
    about 11 bits at FP32BP16 from a shift of 6)."""
    graph = wide_range_graph()
    x = samples(1, seed=9)[0]
    want = interpret(graph, x)["t6"]
    got = run(graph, FP32, x, samples(4))
    assert np.max(np.abs(got - want)) < 1e-3 * np.ptp(want)


def test_calibration_keeps_the_answer_the_single_format_loses():
    """At FP16BP8 the unscaled build saturates the inputs (+-128) and rounds the 1e-3 weights to 0 or
    1/256 (over 20% of the output's range off); with scales from calibration, the inputs' scale
    balanced against the tiny weights', the output is within 1% of its range."""
    graph = wide_range_graph()
    x = samples(1, seed=9)[0]
    want = interpret(graph, x)["t6"]
    default = np.max(np.abs(run(graph, FP16, x) - want)) / np.ptp(want)
    calibrated = np.max(np.abs(run(graph, FP16, x, samples(8)) - want)) / np.ptp(want)
    assert default > 0.2
    assert calibrated < 0.01, (default, calibrated)


def _cancelling_graph(channels: int) -> Graph:
    """A 3x3 conv whose centre tap (summed first) brings in the input and whose right-hand tap takes
    99% of it away again: the accumulators hold values fifty times the result's."""
    w = np.zeros((channels, channels, 3, 3), np.float32)
    w[:, :, 1, 1], w[:, :, 1, 2] = 1.0 / channels, -0.99 / channels
    shapes = {"x": (1, 6, 6, channels), "y": (1, 4, 4, channels)}
    conv = dict(weight=0, bias=None, strides=(1, 1), dilation=(1, 1), padding=(0, 0, 0, 0), groups=1)
    return Graph({k: Tensor(k, v) for k, v in shapes.items()}, [Node("conv2d", ["x"], "y", conv)], ["x"], ["y"], [w])


@pytest.mark.parametrize("channels", [1, 20])
def test_partial_sums_beyond_the_result_set_its_scale(channels):
    """The TCU's accumulators hold a layer's partial sums at its output's scale and saturate there:
    calibration measures them (input block by block, tap by tap, as the TCU adds them up) and the
    scale holds them, so the build computes what the graph does (a scale for the result alone
    saturates the centre tap's sum, and the result is off by more than its range)."""
    graph = _cancelling_graph(channels)
    rng = np.random.default_rng(0)
    cal = [{"x": 40 + rng.standard_normal((1, 6, 6, channels))} for _ in range(8)]
    stats = tensor_stats(graph, cal, lanes=FP16.array_size)
    # The most: the centre tap of the first input block (its share of the channels).
    first_block = max(c["x"][:, 1:5, 1:5].max() for c in cal) * min(FP16.array_size, channels) / channels
    assert stats["y"].accumulated == pytest.approx(first_block, rel=0.05)
    assert stats["y"].accumulated > 10 * stats["y"].peak
    x = cal[0]
    want = interpret(graph, x)["y"]
    part = compile_graph(graph, FP16, "t", calibration=cal)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a saturation warning fails the test
        got = Emulator(FP16).run_model(part.model(part.constants), x)["y"]
    # (The cancellation magnifies the inputs' rounding; a saturated sum is off by more than the range.)
    assert np.max(np.abs(got - want)) < 0.03 * np.ptp(want)


def test_weights_no_scale_can_hold_end_the_search():
    """conv(x) + x with weights beyond the data type: input and output share a shift, so no choice
    fits the weights; the choice ends (they saturate, and the report says so)."""
    w = np.full((4, 4, 1, 1), 300.0, np.float32)
    shapes = {"x": (1, 2, 2, 4), "c": (1, 2, 2, 4), "y": (1, 2, 2, 4)}
    conv = dict(weight=0, bias=None, strides=(1, 1), dilation=(1, 1), padding=(0, 0, 0, 0), groups=1)
    nodes = [Node("conv2d", ["x"], "c", conv), Node("add", ["c", "x"], "y")]
    graph = Graph({k: Tensor(k, v) for k, v in shapes.items()}, nodes, ["x"], ["y"], [w])
    x = {"x": np.random.default_rng(0).standard_normal((1, 2, 2, 4)) * 1e-3}
    shifts = choose_shifts(graph, tensor_stats(graph, [x]), FP16, [x])
    assert len(set(shifts.values())) == 1


@pytest.mark.parametrize("op", ["avg_pool2d", "global_avg_pool"])
def test_interpret_pools(op):
    """The float meaning of the pools (calibration's reference) against numpy written out by hand."""
    x = np.arange(2 * 4 * 4 * 3, dtype=np.float64).reshape(2, 4, 4, 3)
    if op == "global_avg_pool":
        node = Node(op, ["x"], "y")
        shape, want = (2, 1, 1, 3), x.mean(axis=(1, 2), keepdims=True)
    else:
        attrs = dict(kernel=(3, 3), strides=(1, 1), dilation=(1, 1), padding=(1, 1, 1, 1), count_include_pad=False)
        node = Node(op, ["x"], "y", attrs)
        shape = (2, 4, 4, 3)
        xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=np.nan)
        want = np.stack([np.nanmean(xp[:, i : i + 3, j : j + 3], axis=(1, 2)) for i in range(4) for j in range(4)], 1)
        want = want.reshape(2, 4, 4, 3)
    graph = Graph({"x": Tensor("x", x.shape), "y": Tensor("y", shape)}, [node], ["x"], ["y"], [])
    assert np.allclose(interpret(graph, {"x": x})["y"], want)


def test_the_simulation_rounds_an_average_pool_as_the_tcu_does():
    """The TCU sums an average pool's values pre-scaled by 2**-s (2**s >= the window), each rounded
    there: four fractional bits of a 3x3 window's inputs are lost, which the simulation models
    (but for how ties round) and float does not."""
    rng = np.random.default_rng(4)
    x = np.round(rng.standard_normal((1, 6, 6, 8)) * 256) / 256  # on the grid
    attrs = dict(kernel=(3, 3), strides=(1, 1), dilation=(1, 1), padding=(1, 1, 1, 1), count_include_pad=False)
    node = Node("avg_pool2d", ["x"], "y", attrs)
    graph = Graph({t: Tensor(t, x.shape) for t in ("x", "y")}, [node], ["x"], ["y"], [])
    got = Emulator(FP16).run_model(compile_graph(graph, FP16, "t").model([]), {"x": x})["y"]
    unit = FP16.data_type.resolution
    model = interpret(graph, {"x": x}, rounding=FP16.data_type)["y"]
    rms = lambda e: float(np.sqrt(np.mean(e**2)))  # noqa: E731
    assert np.max(np.abs(got - model)) <= 4 * unit  # (ties at 2**-s round apart: up to 2**s / count each)
    assert rms(got - model) < rms(got - interpret(graph, {"x": x})["y"]) / 2


def _chain(peaks_weights: list[float]) -> Graph:
    """x -> 1x1 conv -> ... each by a diagonal weight, so each tensor's peak is known."""
    n = len(peaks_weights)
    shapes = {f"t{i}": (1, 4, 4, 8) for i in range(n + 1)}
    consts = [np.full((8, 1, 1, 1), w, np.float32) for w in peaks_weights]
    conv = dict(strides=(1, 1), dilation=(1, 1), groups=8, padding=(0, 0, 0, 0), bias=None)
    nodes = [Node("conv2d", [f"t{i}"], f"t{i + 1}", dict(weight=i, **conv)) for i in range(n)]
    return Graph({k: Tensor(k, v) for k, v in shapes.items()}, nodes, ["t0"], [f"t{n}"], consts)


def test_a_wide_tensor_deep_in_a_network_leaves_the_others_their_scales():
    """x (peak 1) -> weights 0.01 -> 0.01 -> weights 1e5 -> 1000: the last tensor needs a low shift,
    which must not pull the input and the small tensor between down with it (a detector's neck in
    the thousands once left its input image a few bits)."""
    graph = _chain([0.01, 1e5])
    stats = tensor_stats(graph, [{"t0": np.ones((1, 4, 4, 8))}])
    options = candidate_shifts(graph, stats, FP16)
    assert options["largest"]["t0"] == 5 and options["largest"]["t1"] >= 12  # 1 and 0.01 twice over in 128
    for name, shifts in options.items():
        assert shifts["t2"] <= -4, name  # 1000 twice over within 128
        assert shifts["t0"] >= 0 and shifts["t1"] >= 6, name  # with the old rule: both at -4


@pytest.mark.parametrize("beta", [3.0, 2.5])
def test_a_hard_swish_keeps_its_input_scale_and_its_factor_fits(beta):
    """x * relu6(x + 3) reaches six times x's range: its result gets its own (lower) shift. A form
    computed as x times its factor (beta not hi / 2) gets no shift that puts the factor's top (6 at
    the factor's scale) beyond the data type."""
    from tvm_tensil.compiler.elementwise import HardSigmoid

    six = HardSigmoid(1.0, beta, swish=True, hi=6.0)
    tensors = {k: Tensor(k, (1, 4, 4, 8)) for k in ("x", "y")}
    graph = Graph(tensors, [Node("hard_sigmoid", ["x"], "y", six)], ["x"], ["y"], [])
    x = np.round(np.linspace(-2, 20, 128) * 512).reshape(1, 4, 4, 8) / 512  # on x's grid at its shift
    stats = tensor_stats(graph, [{"x": x}])
    for name, shifts in candidate_shifts(graph, stats, FP16).items():
        assert shifts["x"] == 1 and shifts["y"] == -1, name  # 20 and 120, twice over within 128
        assert 6 * 2.0 ** (shifts["y"] - shifts["x"]) <= FP16.data_type.max_float
    part = compile_graph(graph, FP16, "t", calibration=[{"x": x}])
    y = Emulator(FP16).run_model(part.model(part.constants), {"x": x}, warn_saturation=False)["y"]
    bound = 2.0**-7 + 6 * 4e-4 if six.symmetric else 6 * (20 + 2) * 2.0**-9
    assert np.abs(y - x * np.clip(x + beta, 0, 6)).max() <= bound


def residual_chain(seed: int = 0, blocks: int = 3) -> Graph:
    """x -> (conv 3x3 with weights of RMS 0.1, + its input, relu) x ``blocks``: every conv's input and
    output share one scale (the residual adds), so its weights keep the data type's 8 fractional
    bits whatever the shifts (about 1% of each layer's output lost to their rounding)."""
    rng = np.random.default_rng(seed)
    shape = (1, 8, 8, 16)
    tensors, nodes, consts, x = {"x": Tensor("x", shape)}, [], [], "x"
    conv = dict(bias=None, strides=(1, 1), dilation=(1, 1), padding=(1, 1, 1, 1), groups=1)
    for i in range(blocks):
        consts.append((rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32))
        nodes += [Node("conv2d", [x], f"c{i}", dict(weight=i, **conv)), Node("add", [f"c{i}", x], f"s{i}"),
                  Node("relu", [f"s{i}"], f"r{i}")]  # fmt: skip
        tensors |= {t: Tensor(t, shape) for t in (f"c{i}", f"s{i}", f"r{i}")}
        x = f"r{i}"
    return Graph(tensors, nodes, ["x"], [x], consts)


def chain_samples(count: int, seed: int = 1) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 8, 8, 16))} for _ in range(count)]


def test_weights_in_two_parts_only_where_the_error_target_needs_them():
    """Above the error target, layers get a residue (weights in two parts), from the largest shifts,
    and the simulated error drops; a target the one-part choice meets, or none, adds none."""
    graph = residual_chain()
    cal = chain_samples(8)
    stats = tensor_stats(graph, cal)
    plain = choose_scales(graph, stats, FP16, cal[4:])
    assert not plain.residues and plain.worst[plain.option] > 0.004
    assert choose_scales(graph, stats, FP16, cal[4:], error_target=1.0).residues == {}
    two = choose_scales(graph, stats, FP16, cal[4:], error_target=0.002)
    assert two.residues and set(two.residues) <= {"c0", "c1", "c2"}
    assert all(RESIDUE_BITS[0] <= b <= RESIDUE_BITS[1] for b in two.residues.values())
    assert two.option.startswith("largest") and f"residues on {len(two.residues)} layers" in two.option
    assert two.worst[two.option] < plain.worst[plain.option] / 3
    x = chain_samples(1, seed=9)[0]
    want = interpret(graph, x)["r2"]
    errors = {}
    for target in (None, 0.002):
        # (Interleaving merges the plain chain's epilogues and MatMuls better than the rescaled one's.)
        options = CompileOptions(error_target=target, interleave=False)
        part = compile_graph(graph, FP16, "t", calibration=cal, options=options)
        got = Emulator(FP16).run_model(part.model(part.constants), x, warn_saturation=False)["r2"]
        errors[target] = np.max(np.abs(got - want)) / np.ptp(want)
        assert sum("residue_bits" in n for n in part.report["nodes"]) == (len(two.residues) if target else 0)
    assert errors[0.002] < errors[None] / 3, errors


def test_finer_accumulators_where_the_shared_scale_misses_the_target():
    """A residual chain's convs share their input's scale with their result (the adds): the weights
    keep 8 fractional bits and each product rounds at the chain's scale. A layer's accumulators at
    a scale of their own (a rescale before the add: one SIMD multiply per vector, the add then its
    own op) give both more bits; calibration takes that only where the shared scale misses the
    target, and a rescale that keeps its scale leaves the program as it was."""
    graph = residual_chain()
    cal = chain_samples(8)
    x = chain_samples(1, seed=9)[0]
    want = interpret(graph, x)["r2"]
    errors, parts = {}, {}
    for target in (None, 0.01):
        # (Interleaving merges the plain chain's epilogues and MatMuls better than the rescaled one's.)
        options = CompileOptions(error_target=target, interleave=False)
        part = compile_graph(graph, FP16, "t", calibration=cal, options=options)
        got = Emulator(FP16).run_model(part.model(part.constants), x, warn_saturation=False)["r2"]
        errors[target], parts[target] = np.max(np.abs(got - want)) / np.ptp(want), part
    plain, finer = parts[None], parts[0.01]
    assert "finer" not in plain.report["calibration"]["choice"]
    assert all(n["op"] == "conv2d" and "rescale" not in n.get("epilogue", []) for n in plain.report["nodes"])
    assert (
        "finer accumulators" in finer.report["calibration"]["choice"]
        and "residues" not in finer.report["calibration"]["choice"]
    )
    rescaled = [n for n in finer.report["nodes"] if "rescale" in n.get("epilogue", [])]
    assert len(rescaled) == 3 and sum(n["op"] == "add" for n in finer.report["nodes"]) == 3
    assert errors[0.01] < 0.01 < errors[None] and errors[0.01] < errors[None] / 3, errors
    assert finer.report["cycles"]["total"] < 1.5 * plain.report["cycles"]["total"]  # (residues: twice the MACs)


def test_finer_accumulators_before_the_tighter_headroom():
    """Where the usual candidates miss the target and finer accumulators with the usual headroom
    meet it, those are the choice, though one with the tighter headroom simulates better: the
    tighter headroom saturates sooner on inputs beyond the samples' (a random net's test input did)."""
    from tvm_tensil.compiler.compile import with_rescales

    graph = with_rescales(residual_chain())
    cal = chain_samples(8)
    stats = tensor_stats(graph, cal, lanes=FP16.array_size)
    tight = f"headroom {TIGHT_HEADROOM:g}"
    every = choose_scales(graph, stats, FP16, cal[4:], error_target=1e-6)  # every candidate simulated
    one_part = {n: e for n, e in every.errors.items() if "residues" not in n}
    finer = min((n for n in one_part if "finer" in n and tight not in n), key=one_part.get)
    usual = min((n for n in one_part if "finer" not in n and tight not in n), key=one_part.get)
    assert min((n for n in one_part if tight in n), key=one_part.get) != finer
    assert min(one_part.values()) < one_part[finer]  # a tight option simulates better
    aimed = every.worst[finer] * RESIDUE_MARGIN * 1.01
    assert every.worst[usual] > aimed / RESIDUE_MARGIN  # the usual candidates miss it
    assert choose_scales(graph, stats, FP16, cal[4:], error_target=aimed).option == finer


def test_residues_only_as_many_as_dram1_holds(monkeypatch):
    """A residue takes as much DRAM1 as its layer's weights: with room for one, one layer gets it;
    with room for none, the one-part choice stays. Where the program still does not fit (here the
    room is misjudged on purpose), the build is the one-part choice's and the report says why."""
    from tvm_tensil.compiler import compile as compile_module
    from tvm_tensil.compiler import scales

    graph = residual_chain()
    cal = chain_samples(8)
    stats = tensor_stats(graph, cal)
    plain = choose_scales(graph, stats, FP16, cal[4:], error_target=0.002).one_part
    layer = 4 * 9 * 9  # 16 -> 16 channels, 3x3, on 8 lanes: 2 x 2 blocks of 9 vectors per tap
    one = FP16.replace(dram1_depth=int((3 * layer + 1.5 * layer) / (1 - scales.OTHER_CONSTANTS)), name="room1")
    assert len(choose_scales(graph, stats, one, cal[4:], error_target=0.002).residues) == 1
    none = FP16.replace(dram1_depth=int(3.5 * layer / (1 - scales.OTHER_CONSTANTS)), name="room0")
    kept = choose_scales(graph, stats, none, cal[4:], error_target=0.002)
    assert not kept.residues and kept.option == plain.option
    tight = FP16.replace(dram1_depth=3 * layer + 100, name="tight")
    monkeypatch.setattr(scales, "OTHER_CONSTANTS", -1.0)  # room for all three residues, wrongly
    x = chain_samples(1, seed=9)[0]
    options = CompileOptions(error_target=0.002)
    part = compile_graph(graph, tight, "t", calibration=cal, options=options)
    assert "do not fit" in part.report["calibration"]["two_parts"]
    assert not any("residue_bits" in n for n in part.report["nodes"])
    graph = compile_module.with_rescales(graph)  # (as compile_graph calibrates it)
    choice, ranges = compile_module.calibrate(graph, cal, tight, options.error_target)
    assert choice.residues and part.report["calibration"]["choice"] == choice.one_part.option
    alone = compile_module._compile_scaled(graph, tight, "t", cal, options, choice.one_part, ranges)
    outs = [Emulator(tight).run_model(p.model(p.constants), x, warn_saturation=False)["r2"] for p in (part, alone)]
    np.testing.assert_array_equal(*outs)


@pytest.mark.parametrize("channels, scale", [(16, 0.1), (64, 0.05), (64, 1e-3)])
def test_a_residue_keeps_its_sum_within_the_data_type(channels, scale):
    """A residue's extra bits leave its sums room: on the samples, the residue's result times
    ``2**bits`` (as the accumulators hold it) stays within the data type with the headroom."""
    rng = np.random.default_rng(3)
    shape = (1, 8, 8, channels)
    w = (rng.standard_normal((channels, channels, 3, 3)) * scale).astype(np.float32)
    conv = dict(weight=0, bias=None, strides=(1, 1), dilation=(1, 1), padding=(1, 1, 1, 1), groups=1)
    graph = Graph({t: Tensor(t, shape) for t in ("x", "c")}, [Node("conv2d", ["x"], "c", conv)], ["x"], ["c"], [w])
    cal = [{"x": rng.standard_normal(shape)} for _ in range(4)]
    stats = tensor_stats(graph, cal)
    shifts = candidate_shifts(graph, stats, FP16)["largest"]
    dt = FP16.data_type
    bits = residue_bits(graph.nodes[0], graph, shifts, stats, dt)
    assert RESIDUE_BITS[0] <= bits <= RESIDUE_BITS[1]
    stored = w.astype(np.float64) * 2.0 ** (shifts["c"] - shifts["x"] + dt.binary_point)
    residue = (stored - np.floor(stored + 0.5)) / 2.0**dt.binary_point  # the weights' rounding, as stored
    for sample in cal:
        x = sample["x"] * 2.0 ** shifts["x"]
        sums = conv2d_nhwc(x[0:1], residue, np.zeros(channels), padding=(1, 1, 1, 1))
        assert np.max(np.abs(sums)) * 2.0**bits * HEADROOM <= dt.max_float


def test_a_window_matmuls_partial_sums_set_its_scale():
    from tvm_tensil.isa.instructions import MatMulFlag, Opcode

    """On a core with the window MatMul a depthwise conv's kernel rows sum in the array: the centre
    row's two outer taps reach 160 before the other rows bring the sum back (the diagonal blocks'
    order, centre tap first, peaks at 120). Calibration measures the rows' sums too, so the scale
    holds them and the build computes what the graph does (a scale for 120 saturates the row)."""
    arch = FP16.replace(window_matmul=True, name="pynqz1_window")
    w = np.zeros((2, 1, 3, 3))
    w[:, 0, 1, 0] = w[:, 0, 1, 2] = 2.0
    w[:, 0, 0, 0], w[:, 0, 2, 0] = -3.0, -1.0
    shapes = {"x": (1, 6, 6, 2), "y": (1, 4, 4, 2)}  # (no padding: every output sums all nine taps)
    conv = dict(weight=0, bias=None, strides=(1, 1), dilation=(1, 1), padding=(0, 0, 0, 0), groups=2)
    graph = Graph({k: Tensor(k, v) for k, v in shapes.items()}, [Node("conv2d", ["x"], "y", conv)], ["x"], ["y"], [w])
    rng = np.random.default_rng(0)
    cal = [{"x": 40 + rng.standard_normal((1, 6, 6, 2))} for _ in range(8)]
    plain = tensor_stats(graph, cal, lanes=arch.array_size)["y"].accumulated
    rows = tensor_stats(graph, cal, lanes=arch.array_size, window_rows=True)["y"].accumulated
    top = max(c["x"].max() for c in cal)
    assert plain <= 3 * top < 3.5 * top < rows <= 4 * top  # ~120 and ~160
    x = cal[0]
    want = interpret(graph, x)["y"]
    part = compile_graph(graph, arch, "t", calibration=cal)
    f = part.program.fields()
    assert ((f.opcode == Opcode.MATMUL) & ((f.flags & MatMulFlag.WINDOW) != 0)).any()  # (it runs as windows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a saturation warning fails the test
        got = Emulator(arch).run_model(part.model(part.constants), x)["y"]
    assert np.max(np.abs(got - want)) < 0.03 * np.ptp(want)
