"""A node's last stores moved into the node after: only past what they do not depend on, the same
results bit for bit, fewer cycles.

Mirrors python/tvm_tensil/compiler/sink.py.
"""

import random

import numpy as np
import pytest

from tvm_tensil.arch import load_arch
from tvm_tensil.compiler.latency import estimate_cycles
from tvm_tensil.compiler.lir import LIR
from tvm_tensil.compiler.sink import sink_across_nodes
from tvm_tensil.isa import ConfigRegister, DataMove, Direction, Program
from tvm_tensil.isa.fuzz import random_instruction
from tvm_tensil.isa.layout import layout_of
from tvm_tensil.runtime import Emulator
from tvm_tensil.runtime.differential import random_dram

from .test_prefetch import SMALL, _memories

_STORES = (Direction.LOCAL_TO_DRAM0, Direction.LOCAL_TO_DRAM1)
_LOADS = (Direction.DRAM0_TO_LOCAL, Direction.DRAM1_TO_LOCAL)


def _random_store(rng):
    while True:
        inst = random_instruction(rng, SMALL, max_size=12)
        if isinstance(inst, DataMove) and inst.direction in _STORES:
            return inst


def _reading_back(rng, store: DataMove) -> DataMove:
    """A load of what ``store`` writes (part of it or more), or a store over the same range."""
    local = rng.randrange(SMALL.local_depth - store.size + 1)
    if rng.random() < 0.5:
        return DataMove(_LOADS[_STORES.index(store.direction)], local, store.address, store.size, 0, store.stride)
    return DataMove(store.direction, local, store.address, store.size, 0, store.stride)


def _overwriting(rng, store: DataMove) -> DataMove:
    """A load or accumulator move into the local range ``store`` reads."""
    direction = rng.choice((*_LOADS, Direction.ACC_TO_LOCAL))
    depth = {"dram0": SMALL.dram0_depth, "dram1": SMALL.dram1_depth, "acc": SMALL.accumulator_depth}[direction.memory]
    return DataMove(direction, store.local, rng.randrange(depth - store.size + 1), store.size, store.local_stride, 0)


def test_stores_moved_as_late_as_they_may_go_leave_every_memory_the_same():
    """Random programs cut into random nodes, each node ending with a few stores and the next one
    often reading them back or overwriting their local range; every trailing store moved as far
    down as the dependency rule lets it (past everything the latency model could pick): local
    memory, accumulators and both DRAMs end the same, and many stores did move."""
    rng = random.Random(7)
    emu, layout = Emulator(SMALL), layout_of(SMALL)
    moved = crossed = 0
    for i in range(400):
        body, starts, tail = [], [], []
        for _ in range(rng.randint(2, 5)):  # nodes, each ending with a few stores (as the compiler's do)
            starts.append(len(body))
            head = [random_instruction(rng, SMALL, max_size=12) for _ in range(rng.randint(3, 12))]
            for store in tail:  # what the node before stored, read back or overwritten
                if rng.random() < 0.4:
                    head.insert(rng.randrange(len(head) + 1), _reading_back(rng, store))
                if rng.random() < 0.3:
                    head.insert(rng.randrange(len(head) + 1), _overwriting(rng, store))
            tail = [_random_store(rng) for _ in range(rng.randint(0, 3))]
            body += head + tail
        program = Program.from_instructions(body, layout)
        after, new_starts, moves = sink_across_nodes(program, SMALL, starts, measure=False)
        assert len(after) == len(program) and sorted(new_starts) == new_starts
        dram = random_dram(SMALL, i)
        for bank, (want, got) in enumerate(zip(_memories(emu, program, dram), _memories(emu, after, dram))):
            assert np.array_equal(want, got), f"program {i}: DRAM{bank} differs after {moves}"
        moved += len(moves)
        crossed += sum(s != t for s, t in zip(starts, new_starts))
    assert moved > 100 and crossed > 50, (moved, crossed)


def _two_nodes(arch):
    """Node 0 ends with stores: one node 1 reads back, one whose local range node 1 overwrites, one
    over a DRAM range node 1 also stores to, and one free to move; node 1 computes at length."""
    lir = LIR(arch)
    lir.datamove(Direction.DRAM0_TO_LOCAL, 100, 0, 64)
    lir.load_weights(0, 9)
    lir.matmul(100, 0, 64)
    lir.datamove(Direction.ACC_TO_LOCAL, 200, 0, 256)
    lir.datamove(Direction.LOCAL_TO_DRAM0, 200, 1000, 64)  # read back by node 1
    lir.datamove(Direction.LOCAL_TO_DRAM0, 264, 2000, 64)  # its local range overwritten by node 1
    lir.datamove(Direction.LOCAL_TO_DRAM1, 328, 500, 64)  # node 1 stores over it
    lir.datamove(Direction.LOCAL_TO_DRAM0, 392, 4000, 64)  # free
    second = len(lir)
    lir.datamove(Direction.DRAM1_TO_LOCAL, 600, 18, 9)
    lir.load_weights(600, 9)
    for k in range(8):
        lir.matmul(100, 0, 64, accumulate=k > 0)
    lir.datamove(Direction.DRAM0_TO_LOCAL, 700, 1000, 64)
    lir.datamove(Direction.DRAM0_TO_LOCAL, 264, 3000, 64)
    lir.datamove(Direction.LOCAL_TO_DRAM1, 700, 530, 64)
    for k in range(8):
        lir.matmul(100, 0, 64, accumulate=True)
    return lir.program(), [0, second]


@pytest.mark.parametrize("measure", [False, True])
def test_a_store_passes_only_what_it_does_not_depend_on(measure):
    arch = load_arch("pynqz1")
    program, starts = _two_nodes(arch)
    after, new_starts, moves = sink_across_nodes(program, arch, starts, measure=measure)
    at = {(i.direction, i.address): pc for pc, i in enumerate(after.instructions()) if isinstance(i, DataMove)}
    load_back, load_over, store_over = (at[k] for k in [(_LOADS[0], 1000), (_LOADS[0], 3000), (_STORES[1], 530)])
    assert at[_STORES[0], 1000] < load_back, "a store passed a load of what it writes"
    assert at[_STORES[0], 2000] < load_over, "a store passed a load into its local range"
    assert at[_STORES[1], 500] < store_over, "a store passed a store over its DRAM range"
    assert at[_STORES[0], 4000] >= new_starts[1] > 0, "an independent store stayed in node 0"
    node0 = [at[_STORES[0], 1000], at[_STORES[0], 2000], at[_STORES[1], 500], at[_STORES[0], 4000]]
    assert new_starts[1] == starts[1] - sum(pc >= new_starts[1] for pc in node0)
    if measure:  # (as late as possible is not always faster)
        assert estimate_cycles(after, arch)["total"] < estimate_cycles(program, arch)["total"]


def test_a_store_never_passes_a_configure():
    arch = load_arch("pynqz1")
    lir = LIR(arch)
    lir.matmul(0, 0, 64)
    lir.datamove(Direction.LOCAL_TO_DRAM0, 400, 0, 64)
    second = len(lir)
    lir.configure(ConfigRegister.DRAM0_OFFSET, 1)
    lir.matmul(400, 0, 64)
    _, _, moves = sink_across_nodes(lir.program(), arch, [0, second], measure=False)
    assert moves == ()
