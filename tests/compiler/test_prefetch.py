"""A node's first loads moved into the node before: only past what they do not depend on, the
same results bit for bit, fewer cycles.

Mirrors python/tvm_tensil/compiler/prefetch.py.
"""

import random

import numpy as np
import pytest

from tvm_tensil.arch import Architecture, load_arch
from tvm_tensil.compiler.latency import estimate_cycles
from tvm_tensil.compiler.lir import LIR
from tvm_tensil.compiler.prefetch import prefetch_across_nodes
from tvm_tensil.isa import DataMove, Direction, Program
from tvm_tensil.isa.fuzz import dump_epilogue, random_instruction
from tvm_tensil.isa.layout import layout_of
from tvm_tensil.runtime import Emulator
from tvm_tensil.runtime.differential import random_dram

SMALL = Architecture("FP16BP8", 4, 512, 512, 128, 64, stride0_depth=4, stride1_depth=4, name="small")


def _memories(emu, program: Program, dram) -> list[np.ndarray]:
    """Every memory after ``program`` (local memory and accumulators dumped to DRAM1)."""
    dump = Program.from_instructions(dump_epilogue(emu.arch), program.layout)
    emu.reset()
    for bank in (0, 1):
        emu.write_dram(bank, 0, dram[bank])
    emu.execute(Program(program.data + dump.data, program.layout))
    return [emu.read_dram(bank, 0, dram[bank].shape[0]) for bank in (0, 1)]


def _random_load(rng, body):
    """A random DRAM -> local move; every other one reads back what a store before it wrote."""
    kinds = (Direction.LOCAL_TO_DRAM0, Direction.LOCAL_TO_DRAM1)
    stores = [i for i in body if isinstance(i, DataMove) and i.direction in kinds]
    while True:
        inst = random_instruction(rng, SMALL, max_size=12)
        if isinstance(inst, DataMove) and inst.direction in (Direction.DRAM0_TO_LOCAL, Direction.DRAM1_TO_LOCAL):
            break
    if stores and rng.random() < 0.5:
        store = rng.choice(stores)
        back = Direction.DRAM1_TO_LOCAL if store.direction == Direction.LOCAL_TO_DRAM1 else Direction.DRAM0_TO_LOCAL
        local = rng.randrange(SMALL.local_depth - store.size + 1)
        inst = DataMove(back, local, store.address, store.size, 0, store.stride)
    return inst


def test_loads_moved_as_early_as_they_may_go_leave_every_memory_the_same():
    """Random programs cut into random nodes, each node's leading loads moved as far up as the
    dependency rule lets them (past everything the latency model could pick): local memory,
    accumulators and both DRAMs end the same, and many loads did move."""
    rng = random.Random(5)
    emu, layout = Emulator(SMALL), layout_of(SMALL)
    moved = passed_stores = 0
    for i in range(400):
        body, starts = [], []
        for _ in range(rng.randint(2, 5)):  # nodes, each starting with a few loads (as the compiler's do)
            starts.append(len(body))
            body += [_random_load(rng, body) for _ in range(rng.randint(0, 3))]
            body += [random_instruction(rng, SMALL, max_size=12) for _ in range(rng.randint(3, 12))]
        program = Program.from_instructions(body, layout)
        after, new_starts, moves = prefetch_across_nodes(program, SMALL, starts, measure=False)
        assert len(after) == len(program) and sorted(new_starts) == new_starts
        dram = random_dram(SMALL, i)
        for bank, (want, got) in enumerate(zip(_memories(emu, program, dram), _memories(emu, after, dram))):
            assert np.array_equal(want, got), f"program {i}: DRAM{bank} differs after {moves}"
        moved += len(moves)
        f = program.fields()
        passed_stores += sum(
            any(f.opcode[p] == 2 and f.flags[p] in (1, 3) for p in range(m.pc - m.ahead, m.pc)) for m in moves
        )
    assert moved > 100 and passed_stores > 10, (moved, passed_stores)


def _two_nodes(arch):
    """Node 0 computes a tile and stores it; node 1 loads what node 0 stored, weights into the
    range node 0's first LoadWeights reads, and (free to move) weights and a slab of its own."""
    lir = LIR(arch)
    lir.datamove(Direction.DRAM1_TO_LOCAL, 0, 0, 9)
    lir.datamove(Direction.DRAM0_TO_LOCAL, 100, 0, 64)
    lir.load_weights(0, 9)
    lir.matmul(100, 0, 64)
    lir.datamove(Direction.ACC_TO_LOCAL, 200, 0, 64)
    lir.datamove(Direction.LOCAL_TO_DRAM0, 200, 1000, 64)
    for k in range(8):  # a long tail: MatMuls that have nothing to do with node 1's loads
        lir.matmul(100, 64, 64, accumulate=True)
    second = len(lir)
    lir.datamove(Direction.DRAM0_TO_LOCAL, 400, 1000, 64)  # what node 0 stored
    lir.datamove(Direction.DRAM1_TO_LOCAL, 0, 9, 9)  # where node 0's first weights were
    lir.datamove(Direction.DRAM1_TO_LOCAL, 600, 18, 9)  # free
    lir.datamove(Direction.DRAM0_TO_LOCAL, 700, 3000, 64)  # free
    lir.load_weights(600, 9)
    lir.matmul(700, 128, 64)
    lir.load_weights(0, 9)
    lir.matmul(400, 0, 64)
    return lir.program(), [0, second]


@pytest.mark.parametrize("measure", [False, True])
def test_a_load_passes_only_what_it_does_not_depend_on(measure):
    arch = load_arch("pynqz1")
    program, starts = _two_nodes(arch)
    after, new_starts, moves = prefetch_across_nodes(program, arch, starts, measure=measure)
    where = {m.pc: m.pc - m.ahead for m in moves}
    stored, weights, free = starts[1], starts[1] + 1, (starts[1] + 2, starts[1] + 3)
    assert where.get(stored, stored) > 5, "a load passed the store of what it reads"
    assert where.get(weights, weights) >= 3, "weights passed the LoadWeights that reads their range"
    assert set(free) <= set(where), "independent loads stayed behind node 0's tail"
    assert new_starts == [0, starts[1] + len(moves)]
    if measure:  # (as early as possible is not always faster)
        assert estimate_cycles(after, arch)["total"] < estimate_cycles(program, arch)["total"]


def test_a_load_never_passes_a_configure():
    from tvm_tensil.isa import ConfigRegister

    arch = load_arch("pynqz1")
    lir = LIR(arch)
    lir.matmul(0, 0, 64)
    lir.configure(ConfigRegister.DRAM0_OFFSET, 1)
    second = len(lir)
    lir.datamove(Direction.DRAM0_TO_LOCAL, 400, 0, 64)
    lir.matmul(400, 0, 64)
    _, _, moves = prefetch_across_nodes(lir.program(), arch, [0, second], measure=False)
    assert moves == ()


@pytest.mark.parametrize("preset, behind", [("ultra96v2_300mhz", False), ("ultra96v2_300mhz", True),
                                             ("pynqz1_12x12", False)])  # fmt: skip
def test_a_dram0_load_passes_load_weights_unless_asked_to_stay_behind(preset, behind):
    """A DRAM0 load may pass the node's LoadWeights, also at two bus beats per vector (where two
    readers' responses fill local port B: the model keeps within 1% there); asked to, it stays
    behind the last one (what benchmarks/prefetch_port_b.py compares)."""
    passes = not behind
    arch = load_arch(preset)
    lir = LIR(arch)
    for k in range(4):
        lir.load_weights(17 * k, arch.array_size + 1)
        lir.matmul(1000, 0, 64)
    second = len(lir)
    lir.datamove(Direction.DRAM0_TO_LOCAL, 2000, 0, 64)
    lir.matmul(2000, 0, 64)
    _, _, moves = prefetch_across_nodes(lir.program(), arch, [0, second], measure=False, dram0_behind_loads=behind)
    assert [m.ahead for m in moves] == [second if passes else 1]
