"""The LIR emitter (compiler/lir.py): rows of integers encoded in chunks, byte for byte what the
instruction objects encode, with the instruction's pc in every error."""

import pytest

from tvm_tensil.arch import PRESETS
from tvm_tensil.compiler.lir import LIR
from tvm_tensil.isa import SIMD, DataMove, Direction, InvalidInstruction, LoadWeights, MatMul, Program, SIMDOp
from tvm_tensil.isa.instructions import ConfigRegister, Configure, NoOp
from tvm_tensil.isa.layout import layout_of

ARCH = PRESETS["pynqz1"]


def emit_all(lir: LIR) -> list:
    """The same program through the LIR and as instruction objects."""
    lir.datamove(Direction.DRAM0_TO_LOCAL, 16, 1000, 9, local_step=2, step=4)
    lir.datamove(Direction.LOCAL_TO_ACC_ACCUMULATE, 3, 5, 3)
    lir.load_weights(0, 9)
    lir.load_weights(0, 9, zeroes=True)
    lir.matmul(16, 40, 7, acc_step=2, accumulate=True)
    lir.matmul(0, 0, 4, zeroes=True)
    lir.simd(SIMDOp.MAX, dest=1, left=0, right=1, write=7, read=6, accumulate=True)
    lir.simd(SIMDOp.ZERO, dest=1)
    lir.configure(ConfigRegister.SAMPLE_INTERVAL, 1000)
    lir.noop()
    lir.datamove(Direction.DRAM1_TO_LOCAL, 0, 7, 3, step=3)  # step 3 is not encodable: one per vector
    return [
        DataMove(Direction.DRAM0_TO_LOCAL, 16, 1000, 9, 1, 2),
        DataMove(Direction.LOCAL_TO_ACC_ACCUMULATE, 3, 5, 3),
        LoadWeights(0, 9),
        LoadWeights(0, 9, 0, True),
        MatMul(16, 40, 7, 0, 1, True, False),
        MatMul(0, 0, 4, 0, 0, False, True),
        SIMD(SIMDOp.MAX, 1, 0, 1, 7, 6, True, True, True),
        SIMD(SIMDOp.ZERO, 1),
        Configure(ConfigRegister.SAMPLE_INTERVAL, 1000),
        NoOp(),
        *[DataMove(Direction.DRAM1_TO_LOCAL, i, 7 + 3 * i, 1) for i in range(3)],
    ]


def test_rows_encode_as_the_instruction_objects_do(monkeypatch):
    monkeypatch.setattr(LIR, "CHUNK", 4)  # several chunks
    lir = LIR(ARCH)
    want = emit_all(lir)
    assert len(lir) == len(want)
    assert lir.program().data == Program.from_instructions(want, layout_of(ARCH)).data


def test_an_invalid_instruction_names_its_pc(monkeypatch):
    monkeypatch.setattr(LIR, "CHUNK", 4)
    lir = LIR(ARCH)
    emit_all(lir)
    lir.matmul(ARCH.local_depth - 2, 0, 4)  # runs past local memory
    with pytest.raises(InvalidInstruction, match=r"^pc 13: MatMul: field 'local'"):
        lir.program()
    lir = LIR(ARCH)
    lir.noop()
    lir.datamove(Direction.DRAM0_TO_LOCAL, 0, 1 << 24, 1)  # does not fit the operand's address bits
    with pytest.raises(InvalidInstruction, match=r"^pc 1: .*operand1 address.*does not fit"):
        lir.program()


def test_discarding_keeps_counting_but_holds_nothing(monkeypatch):
    monkeypatch.setattr(LIR, "CHUNK", 4)
    lir = LIR(ARCH)
    lir.discard()
    for _ in range(10):
        lir.datamove(Direction.DRAM0_TO_LOCAL, 0, 1 << 24, 1)  # invalid, but never encoded
    assert len(lir) == 10 and not lir._encoded
