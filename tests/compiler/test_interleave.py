"""The engines' streams merged again (python/tvm_tensil/compiler/interleave.py): a merged program
computes exactly what the program did, and compiled models run faster by the latency model."""

import warnings

import numpy as np
import pytest

from tvm_tensil.arch import PRESETS, Architecture
from tvm_tensil.compiler import CompileOptions
from tvm_tensil.compiler.interleave import interleave
from tvm_tensil.compiler.latency import estimate_cycles
from tvm_tensil.isa.asm import assemble
from tvm_tensil.isa.fuzz import dump_epilogue
from tvm_tensil.isa.layout import layout_of
from tvm_tensil.isa.program import Program
from tvm_tensil.runtime import Emulator
from tvm_tensil.runtime.differential import random_programs

# Small memories, so that random programs' ranges overlap often; both instruction set extensions.
ARCHS = [
    Architecture("FP16BP8", 4, 256, 256, 64, 32, simd_registers_depth=2, stride0_depth=4, stride1_depth=4,
                 name="il_4x4", window_matmul=True, simd_relu=True),
    Architecture("FP32BP16", 8, 256, 256, 128, 64, stride0_depth=4, stride1_depth=4, name="il_8x8"),
]  # fmt: skip


def final_state(arch, program: Program, dram) -> list[np.ndarray]:
    """DRAM after ``program`` and a dump of local memory and the accumulators."""
    dump = Program.from_instructions(dump_epilogue(arch), layout_of(arch))
    emu = Emulator(arch)
    for bank in (0, 1):
        emu.write_dram(bank, 0, dram[bank])
    emu.execute(Program(program.data + dump.data, program.layout))
    return [emu.read_dram(bank, 0, dram[bank].shape[0]) for bank in (0, 1)]


@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: a.name)
def test_a_merged_random_program_computes_what_it_did(arch, full):
    """Every window merged (not only where faster): the order changes, the results do not."""
    moved = 0
    for _, body, dram in random_programs(arch, 1500 if full else 300, seed=21, length=(20, 60)):
        program = Program.from_instructions(body, layout_of(arch))
        merged, owners, _ = interleave(program, arch, np.arange(len(program)), measure=False)
        assert sorted(owners) == list(range(len(program)))  # a permutation of the instructions
        moved += int((owners != np.arange(len(program))).any())
        want, got = final_state(arch, program, dram), final_state(arch, merged, dram)
        for bank in (0, 1):
            np.testing.assert_array_equal(got[bank], want[bank], err_msg=f"DRAM{bank}\n{program.instructions()}")
    assert moved > 100  # (the merges did reorder)


def test_an_epilogue_runs_beside_the_next_matmuls():
    """Two output blocks: the first block's SIMD epilogue and move out, then the second block's
    MatMuls into the other accumulator bank (independent of it): merged, those MatMuls go first,
    beside the epilogue, and the program is faster."""
    arch = PRESETS["pynqz1"]
    text = ["loadweights local=0 size=9", "matmul local=0x100 acc=0 size=64"]
    text += [f"simd max read write dest=out left=in right=in acc_write={a} acc_read={a}" for a in range(64)]
    text += ["datamove acc_to_local local=0x200 acc=0 size=64", "loadweights local=16 size=9"]
    text += ["matmul local=0x140 acc=0x40 size=64", "datamove acc_to_local local=0x240 acc=0x40 size=64"]
    program = assemble("\n".join(text), layout_of(arch))
    merged, owners, windows = interleave(program, arch, np.zeros(len(program), dtype=np.int64))
    assert windows == 1
    assert estimate_cycles(merged, arch)["total"] < estimate_cycles(program, arch)["total"]
    names = [type(i).__name__ for i in merged.instructions()]
    assert names.index("MatMul", 2) < names.index("DataMove")  # the second MatMul before the first move


def test_what_depends_keeps_its_order():
    """A MatMul reading what a move wrote, a SIMD reading an accumulator a MatMul writes, a store
    of what a move wrote: each stays after what it depends on, whatever the merge prefers."""
    arch = PRESETS["pynqz1"]
    text = """
        datamove dram0_to_local local=0x10 dram0=0 size=8
        loadweights local=0 size=9
        matmul local=0x10 acc=0 size=8
        simd max read write dest=out left=in right=in acc_write=3 acc_read=3
        datamove acc_to_local local=0x20 acc=0 size=8
        datamove local_to_dram0 local=0x20 dram0=0x40 size=8
        datamove dram0_to_local local=0x30 dram0=0x40 size=8
    """
    program = assemble(text, layout_of(arch))
    merged, owners, _ = interleave(program, arch, np.arange(len(program)), measure=False)
    assert list(owners) == list(range(len(program)))  # each depends on the one before


@pytest.mark.parametrize("net", ["mobilenetv2", "resnet20v2"])
def test_compiled_models_compute_the_same_and_run_faster(net):
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    import tvm_tensil
    from tvm_tensil import zoo

    model = zoo.mobilenetv2(size=32) if net == "mobilenetv2" else zoo.resnet20v2()
    mod = from_onnx(model, keep_params_in_input=False)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    outs, cycles = [], []
    for on in (True, False):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ex = tvm_tensil.build(mod, target="tensil", arch="ultra96v2_300mhz", options=CompileOptions(interleave=on))
        out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x))
        outs.append((out[0] if not hasattr(out, "numpy") else out).numpy())
        cycles.append(ex.tensil_report.total_cycles)
        if on:
            (part,) = ex.tensil_report.compiled.values()
            assert part.report["interleaved_windows"] > 0
            assert sum(n["instructions"] for n in part.report["nodes"]) == part.report["instructions"]
    np.testing.assert_array_equal(outs[0], outs[1])
    assert cycles[0] < cycles[1]


def test_the_pass_steps_the_latency_models_own_rules():
    """numba compiles a cached kernel again only when its own file changes, and the pass's kernels
    step the latency model (``latency._simulate``): after an edit of the model they could still hold
    the old one (README, "Developing": clear the caches). Stepped through them one instruction at a
    time, random programs and a window MatMul's padded row take the model's cycles."""
    from tvm_tensil.compiler import interleave as il
    from tvm_tensil.compiler import latency
    from tvm_tensil.isa.instructions import TapWindow

    window = TapWindow(3, 1, 0, 2).fitting(112, 56)
    padded_row = assemble(
        "\n".join(
            ["datamove dram1_to_local local=0 dram1=0 size=9", "loadweights local=0 size=4",
             f"configure window value={window.value}"]
            + [line for i in range(4) for line in (f"matmul window local={64 + i * 224} acc=0 size=56",
                                                   f"datamove acc_to_local local={176 + i * 224} acc=1024 size=56")]
        ),
        layout_of(PRESETS["arty_a7_35"]),
    )  # fmt: skip
    cases = [(PRESETS["arty_a7_35"], padded_row)]
    for arch in ARCHS:
        cases += [(arch, Program.from_instructions(body, layout_of(arch)))
                  for _, body, _ in random_programs(arch, 20, seed=5, length=(20, 60))]  # fmt: skip
    for arch, program in cases:
        sim = latency.Simulation(arch)
        none = np.zeros(0, dtype=np.int64), np.zeros((0, 1), dtype=np.int64)
        columns = latency.Simulation.columns(program.fields(), program.layout, None)
        model = (columns, sim.core, sim.memory, sim.costs, latency._KIND_OF, *none)
        for j in range(len(program)):
            il._step(j, model, sim.busy, sim.state, sim.busy, sim.state, False)
        assert sim.finish == estimate_cycles(program, arch)["total"], program.instructions()
