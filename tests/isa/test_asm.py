"""Assembly text: syntax, error messages, and lossless round trips with the binary form."""

import random

import pytest

from tvm_tensil.arch import PRESETS
from tvm_tensil.isa import (
    SIMD,
    AsmError,
    DataMove,
    Direction,
    MatMul,
    Program,
    SIMDOp,
    assemble,
    disassemble,
    format_instruction,
)
from tvm_tensil.isa.fuzz import random_program
from tvm_tensil.isa.layout import layout_of

L = layout_of(PRESETS["pynqz1"])

SOURCE = """
; a matmul layer, hand-written
configure dram0_offset value=0x10     # comments with either marker
datamove dram1_to_local local=0x0000 dram1=0x0000 size=9
loadweights local=0x0000 size=9
datamove dram0_to_local local=0x0100 dram0=0x0040:4 size=16
MatMul Accumulate local=0x100 acc=0x20:2 size=16
simd zero write dest=r1 acc_write=0
simd max read write dest=out left=in right=r1 acc_write=0x20 acc_read=0x20
datamove acc_to_local local=0x200 acc=0x20 size=16
datamove local_to_dram0 local=0x200 dram0=0x1000 size=16
noop
"""


def test_assemble_known_fields():
    prog = assemble(SOURCE, L)
    insts = prog.instructions()
    assert len(insts) == 10
    assert insts[3] == DataMove(Direction.DRAM0_TO_LOCAL, 0x100, 0x40, 16, 0, 2)
    assert insts[4] == MatMul(0x100, 0x20, 16, 0, 1, accumulate=True)
    assert insts[6] == SIMD(SIMDOp.MAX, dest=0, left=0, right=1, acc_write=0x20, acc_read=0x20, read=True, write=True)


def test_canonical_text_round_trips():
    prog = assemble(SOURCE, L)
    text = disassemble(prog)
    assert assemble(text, L).data == prog.data
    assert disassemble(assemble(text, L)) == text
    # Annotated listings assemble too (the pc is a comment).
    assert assemble(disassemble(prog, with_pc=True), L).data == prog.data


@pytest.mark.parametrize("name", ["pynqz1", "ultra96v2", "zcu104", "pynqz1_12x12"])
def test_random_programs_round_trip(name):
    arch = PRESETS[name]
    insts = random_program(random.Random(name), arch, 3000, max_size=1 << 16)
    prog = Program.from_instructions(insts, layout_of(arch))
    text = disassemble(prog)
    assert assemble(text, layout_of(arch)).data == prog.data
    assert [format_instruction(i) for i in insts] == text.splitlines()


@pytest.mark.parametrize(
    "text, message",
    [
        ("matmull local=0 acc=0 size=1", "line 1: unknown mnemonic 'matmull'"),
        ("\nmatmul lcoal=0 acc=0 size=1", "line 2: matmul: unknown operand 'lcoal'; expected local, acc, size"),
        ("matmul local=0 acc=0", "missing operand 'size'"),
        ("matmul local=zero acc=0 size=1", "local: 'zero' is not a number"),
        ("matmul local=0:3 acc=0 size=1", "step 3 is not a power of two"),
        ("datamove local=0 dram0=0 size=1", "give exactly one direction"),
        ("datamove dram0_to_local local=0 acc=0 size=1", "moves to/from dram0, not acc"),
        ("simd read write dest=out", "give exactly one op"),
        ("simd add dest=x1", "dest: 'x1' is not 'out' or a register"),
        ("matmul local=0 acc=0 size=0", "line 1: pc 0: MatMul: field 'size'"),
        (
            "noop\nnoop\ndatamove local_to_dram1 local=0 dram1=0x100000 size=1",
            "line 3: pc 2: DataMove: field 'address'",
        ),
        ("configure timeout", "missing operand 'value'"),
        ("matmul accumulate accumulate local=0 acc=0 size=1", "'accumulate' given twice"),
    ],
)
def test_errors_name_the_line(text, message):
    with pytest.raises(AsmError) as e:
        assemble(text, L)
    assert message in str(e.value)
