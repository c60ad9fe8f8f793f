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


def test_a_burst_records_the_rows_the_lir_emits():
    """Requests recorded in a ``Burst`` (weight loads, MatMuls, window MatMuls, Configures, a run
    longer than the size field) are the LIR's rows, each with its clock cost and kind; a request of
    several instructions is its rows, all but the last CONTINUED."""
    from tvm_tensil.compiler.lir import CONFIGURE, CONTINUED, LOAD, Burst
    from tvm_tensil.isa.instructions import TapWindow

    arch = PRESETS["ultra96v2_300mhz"]
    lir, burst = LIR(arch), Burst(arch)
    long = arch.accumulator_depth + 5  # two MatMuls
    window = TapWindow(3, 1, 1).value
    lir.load_weights(7, 9)
    lir.matmul(16, 40, 7, local_step=2, accumulate=True)
    lir.matmul(0, 3, 4, zeroes=True)
    lir.configure(ConfigRegister.WINDOW, window)
    lir.window_matmul(100, 8, 5, accumulate=True)
    lir.load_weights(30, 1)
    lir.matmul(0, 0, long)
    burst.load_weights(3, 5)
    burst.clear()
    burst.load_weights(7, 9)
    burst.matmul(16, 40, 7, 2, 8, accumulate=True)
    burst.matmul(0, 3, 4, 1, 5, zeroes=True)
    burst.configure(ConfigRegister.WINDOW, window)
    burst.window_matmul(100, 8, 5, 7, accumulate=True)
    burst.load_weights(30, 1)
    burst.matmul(0, 0, long, 1, long + 1)
    assert bytes(burst.rows) == bytes(lir._rows)
    assert burst.kinds == [LOAD, 7, 4, CONFIGURE, 7, LOAD, CONTINUED, long]
    assert burst.costs == [13, 8, 5, 0, 8, 5, 0, long + 1]
    played = LIR(arch)
    played.emit_burst(burst, 0, 3)
    played.emit_burst(burst, 3, 6)
    assert bytes(played._rows) == bytes(lir._rows)[: 6 * 7 * 8]


def test_fields_of_rows_not_encoded_are_the_decoded_ones(monkeypatch):
    """``LIR.fields`` (what a search measures its trials by, without encoding them) gives what
    decoding the encoded program gives, chunk by chunk."""
    from tvm_tensil.isa.instructions import TapWindow

    monkeypatch.setattr(LIR, "CHUNK", 4)
    lir = LIR(PRESETS["ultra96v2_300mhz"])  # (a core with the window register)
    emit_all(lir)
    lir.configure(ConfigRegister.WINDOW, TapWindow(3, 2, 1).value)
    chunks = list(lir.fields())
    assert len(chunks) > 1 and lir._rows  # encoded chunks and rows still pending
    decoded = lir.program().fields()
    for name in decoded.__dataclass_fields__:
        got = [v for f in chunks for v in getattr(f, name).tolist()]
        assert got == getattr(decoded, name).tolist(), name


def test_a_burst_template_filled_in_is_the_burst_recorded_there():
    """``Burst.template`` then ``fill(t, weights, local, acc)``: the rows recorded with the weights at
    ``weights``, the MatMuls reading from ``local`` and writing from ``acc`` (a MatMul of zeroes reads
    nothing; a Configure moves with nothing)."""
    from tvm_tensil.compiler.lir import Burst
    from tvm_tensil.isa.instructions import TapWindow

    arch = PRESETS["ultra96v2_300mhz"]

    def record(burst, weights, local, acc):
        burst.load_weights(weights + 17, 17)
        burst.matmul(0, acc + 3, 8, 1, 9, zeroes=True)
        burst.matmul(local + 40, acc + 3, 8, 2, 12, accumulate=True)
        burst.configure(ConfigRegister.WINDOW, TapWindow(3, 1, 1).value)
        burst.window_matmul(local + 7, acc + 5, 4, 6, accumulate=False)

    at_zero, there, filled = Burst(arch), Burst(arch), Burst(arch)
    record(at_zero, 0, 0, 0)
    record(there, 1000, 300, 2048)
    filled.fill(at_zero.template(), 1000, 300, 2048)
    assert bytes(filled.rows) == bytes(there.rows)
    assert (filled.costs, filled.kinds) == (there.costs, there.kinds)
