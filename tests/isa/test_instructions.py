"""Instruction encode/decode: the worked example, round trips, and field validation."""

import random

import numpy as np
import pytest

from tvm_tensil.arch import PRESETS, Architecture
from tvm_tensil.isa import (
    SIMD,
    ConfigRegister,
    Configure,
    DataMove,
    Direction,
    InvalidInstruction,
    LoadWeights,
    MatMul,
    NoOp,
    Program,
    SIMDOp,
    decode_word,
)
from tvm_tensil.isa.asm import assemble, disassemble
from tvm_tensil.isa.fuzz import random_instruction, random_program
from tvm_tensil.isa.instructions import TapWindow
from tvm_tensil.isa.layout import layout_of


def arch(**kw):
    base = dict(
        data_type="FP16BP8",
        array_size=8,
        dram0_depth=1 << 20,
        dram1_depth=1 << 20,
        local_depth=8192,
        accumulator_depth=2048,
    )
    base.update(kw)
    return Architecture(**base)


ARCHS = {
    "pynqz1": PRESETS["pynqz1"],
    "ultra96v2": PRESETS["ultra96v2"],
    "zcu104": PRESETS["zcu104"],
    "n2_tiny": arch(
        array_size=2,
        dram0_depth=128,
        dram1_depth=128,
        local_depth=128,
        accumulator_depth=128,
        stride0_depth=2,
        stride1_depth=2,
    ),
    "n12": PRESETS["pynqz1_12x12"],
    "n256_fp32_stride4": arch(
        array_size=256, data_type="FP32BP16", local_depth=4096, accumulator_depth=1024, stride0_depth=4, stride1_depth=4
    ),
    "fp32_stride4_regs4": arch(
        data_type="FP32BP16",
        stride0_depth=4,
        stride1_depth=4,
        simd_registers_depth=4,
        dram0_depth=1 << 32,
        dram1_depth=1 << 24,
    ),
    "fp8_no_regs": arch(data_type="FP8BP4", simd_registers_depth=0, stride0_depth=1, stride1_depth=1),
}


def test_worked_example_pynqz1():
    lay = layout_of(PRESETS["pynqz1"])
    inst = MatMul(local=0x100, acc=0x20, size=8, accumulate=True)
    assert inst.to_bytes(lay) == bytes.fromhex("0001200000070011")
    assert decode_word(int.from_bytes(bytes.fromhex("0001200000070011"), "little"), lay) == inst


def test_configure_packs_register_and_value_across_operands():
    lay = layout_of(PRESETS["pynqz1"])
    word = Configure(ConfigRegister.DRAM1_OFFSET, 0x12345).encode(lay)
    assert word == (0xF << 60) | (0x12345 << 4) | 4


@pytest.mark.parametrize("name", list(ARCHS))
def test_random_round_trip(name):
    a = ARCHS[name]
    lay = layout_of(a)
    rng = random.Random(name)
    insts = [random_instruction(rng, a, max_size=1 << 16) for _ in range(2000)]
    for inst in insts:
        data = inst.to_bytes(lay)
        assert len(data) == lay.instruction_bytes
        back = decode_word(int.from_bytes(data, "little"), lay)
        assert back == inst
        assert back.to_bytes(lay) == data
    prog = Program.from_instructions(insts, lay)
    assert prog.instructions() == insts
    assert not prog.invalid_mask().any()


L = layout_of(PRESETS["pynqz1"])


@pytest.mark.parametrize(
    "inst, field, text",
    [
        (MatMul(8192, 0, 1), "local", "local addresses are 0..8191 (local_depth = 8192)"),
        (MatMul(0, 2047, 2), "acc", "end at 2048, beyond accumulator_depth = 2048"),
        (MatMul(0, 0, 0), "size", "size counts vectors and must be at least 1"),
        (MatMul(0, 0, 4, local_stride=8), "local_stride", "encodes 0..7"),
        (MatMul(0, 0, 4, accumulate=1), "accumulate", "not a boolean"),
        (DataMove(7, 0, 0, 1), "direction", "7 is not a DataMove direction"),
        (DataMove(Direction.DRAM0_TO_LOCAL, 0, 1 << 20, 1), "address", "dram0 addresses are 0..1048575"),
        (DataMove(Direction.LOCAL_TO_ACC, 0, 0, 2049), "size", "1..2048"),
        (LoadWeights(8190, 9), "local", "beyond local_depth"),
        (SIMD(SIMDOp.ADD, dest=2), "dest", "1..1 the registers"),
        (SIMD(SIMDOp.ADD, acc_read=5000, read=True), "acc_read", "accumulator"),
        (SIMD(16), "op", "not a SIMD op"),
        (Configure(3, 0), "register", "3 is not a configuration register"),
        (Configure(ConfigRegister.TIMEOUT, 1 << 52), "value", "52 bits"),
    ],
)
def test_invalid_fields_are_named(inst, field, text):
    with pytest.raises(InvalidInstruction) as e:
        inst.to_bytes(L)
    assert e.value.field == field
    assert text in str(e.value)
    assert str(e.value).startswith(inst.name)


def test_program_error_names_the_pc():
    with pytest.raises(InvalidInstruction, match=r"^pc 2: MatMul: field 'size'"):
        Program.from_instructions([NoOp(), NoOp(), MatMul(0, 0, 0)], L)


def test_unused_addresses_are_not_range_checked():
    # zeroes: the local address is ignored; SIMD without read: the read address is ignored.
    MatMul(0, 0, 8, zeroes=True).to_bytes(L)
    SIMD(SIMDOp.ZERO, dest=1).to_bytes(L)


@pytest.mark.parametrize("name", ["pynqz1", "n2_tiny", "fp32_stride4_regs4"])
def test_vectorised_validation_agrees_with_decoder(name):
    """Random words: the vectorised mask and the scalar decoder reject exactly the same ones."""
    a = ARCHS[name]
    lay = layout_of(a)
    rng = np.random.default_rng(11)
    n = 20000
    raw = rng.integers(0, 256, (n, lay.instruction_bytes), dtype=np.uint8)
    # Bias towards plausible words: valid opcodes, small fields, zero high bytes.
    raw[:, -1] = rng.choice(
        [
            0x00,
            0x10,
            0x11,
            0x12,
            0x13,
            0x20,
            0x21,
            0x2C,
            0x2D,
            0x2F,
            0x27,
            0x30,
            0x31,
            0x40,
            0x43,
            0x47,
            0x48,
            0x50,
            0xF0,
            0x90,
        ],
        n,
    )
    raw[rng.random((n, lay.instruction_bytes)) < 0.6] = 0
    raw[:, -1] = np.where(rng.random(n) < 0.3, raw[:, -1], rng.choice([0x10, 0x20, 0x30, 0x40, 0xF0], n))
    prog = Program(raw.tobytes(), lay)
    mask = prog.invalid_mask()
    for pc in range(n):
        try:
            decode_word(prog.word(pc), lay)
            ok = True
        except InvalidInstruction:
            ok = False
        assert ok != mask[pc], (
            f"pc {pc}: {prog.data[pc * lay.instruction_bytes : (pc + 1) * lay.instruction_bytes].hex()}"
        )
    assert 0.05 < mask.mean() < 0.95  # both kinds were exercised


def test_decode_rejects_nonzero_padding_and_unknown_opcode():
    lay = L
    with pytest.raises(InvalidInstruction, match="unknown opcode"):
        decode_word(0x7 << lay.opcode_shift, lay)
    word = MatMul(0, 0, 1).encode(lay) | (1 << (16 + 23))  # operand1: 20 address + 3 stride bits, 1 padding
    with pytest.raises(InvalidInstruction, match="padding bits"):
        decode_word(word, lay)


# -- the window MatMul (ours) --------------------------------------------------------------------

WINDOWED = PRESETS["pynqz1"].replace(window_matmul=True, name="pynqz1_window")
WL = layout_of(WINDOWED)


def test_tap_window_register_value_round_trips():
    for w in (TapWindow(3, 1, 1, 1), TapWindow(8, 7, 0, 8), TapWindow(1), TapWindow(5, 2, 2, 2)):
        assert w.problem(8) is None
        assert TapWindow.from_value(w.value) == w
    assert TapWindow(3, 1, 1, 2).reads(4) == 7  # a 7-wide row, pad 1, stride 2: 4 outputs
    assert TapWindow(3, 1, 0, 2).fitting(8, 4) == TapWindow(3, 1, 0, 2)  # 8 wide: the last tap is inside
    assert TapWindow(3, 1, 0, 1).fitting(6, 6) == TapWindow(3, 1, 1, 1)
    assert "taps" in TapWindow(9).problem(8)
    assert "padding" in TapWindow(3, 3).problem(8)
    assert "stride" in TapWindow(3, stride=3).problem(8)


def test_window_matmuls_round_trip_and_need_the_extension():
    inst = MatMul(16, 4, 6, 0, 1, accumulate=True, window=True)
    data = inst.to_bytes(WL)
    assert decode_word(int.from_bytes(data, "little"), WL) == inst
    with pytest.raises(InvalidInstruction, match="no window MatMul") as e:
        inst.to_bytes(L)  # plain Tensil has no window flag ...
    assert e.value.field == "window"
    with pytest.raises(InvalidInstruction, match="undefined bits"):
        decode_word(int.from_bytes(data, "little"), L)  # ... nor does its decoder
    with pytest.raises(InvalidInstruction, match="no window MatMul"):
        Configure(ConfigRegister.WINDOW, TapWindow(3, 1, 1).value).to_bytes(L)
    with pytest.raises(InvalidInstruction, match="not a tap window: 9 taps"):
        Configure(ConfigRegister.WINDOW, TapWindow(9).value).to_bytes(WL)


def test_a_window_matmul_reads_what_its_window_says():
    """Program-level validation: the run a window MatMul reads depends on the register."""
    win = Configure(ConfigRegister.WINDOW, TapWindow(3, 1, 1, 2).value)
    ok = [win, MatMul(8192 - 7, 0, 4, window=True)]  # 4 outputs of stride 2 read 7 vectors: fits
    assert not Program.from_instructions(ok, WL).invalid_mask().any()
    Program.from_instructions(ok, WL).check()
    over = [win, MatMul(8192 - 6, 0, 4, window=True)]
    assert list(Program.from_instructions(over, WL).invalid_mask()) == [False, True]
    unset = [NoOp(), MatMul(0, 0, 4, window=True)]  # no window configured in the program
    assert list(Program.from_instructions(unset, WL).invalid_mask()) == [False, True]
    # The register carries from one chunk of a program to the next.
    prog = Program.from_instructions(ok + [MatMul(0, 0, 4, window=True)], WL)
    f = prog.fields()
    first, rest = prog.fields(0, 2), prog.fields(2, 3)
    assert not prog.invalid_mask(rest, prog.window_after(first)).any()
    assert prog.invalid_mask(rest).all()
    assert not prog.invalid_mask(f).any()


@pytest.mark.parametrize("name", ["pynqz1", "n2_tiny"])  # (n2_tiny: a window value spans all three operands)
def test_random_window_programs_round_trip(name):
    a = ARCHS[name].replace(window_matmul=True)
    rng = random.Random(5)
    prog = random_program(rng, a, 3000, max_size=64)
    assert any(getattr(i, "window", False) for i in prog)
    p = Program.from_instructions(prog, layout_of(a))
    assert p.instructions() == prog
    assert not p.invalid_mask().any()


# -- the SIMD ReLU flag (ours) --------------------------------------------------------------------

RELU = PRESETS["pynqz1"].replace(simd_relu=True, name="pynqz1_relu")
RL = layout_of(RELU)


def test_the_simd_relu_flag_round_trips_and_needs_the_extension():
    inst = SIMD(SIMDOp.MIN, dest=0, left=0, right=1, acc_write=3, acc_read=2, read=True, write=True, relu=True)
    data = inst.to_bytes(RL)
    assert decode_word(int.from_bytes(data, "little"), RL) == inst
    assert assemble(disassemble(Program.from_instructions([inst], RL)), RL).instructions() == [inst]
    assert "relu" in disassemble(Program.from_instructions([inst], RL))
    with pytest.raises(InvalidInstruction, match="no SIMD ReLU flag") as e:
        inst.to_bytes(L)  # plain Tensil has no ReLU flag ...
    assert e.value.field == "relu"
    with pytest.raises(InvalidInstruction, match="undefined bits"):
        decode_word(int.from_bytes(data, "little"), L)  # ... nor does its decoder
    Program(data, RL).check()
    with pytest.raises(InvalidInstruction, match="undefined bits"):
        Program(data, L).check()  # ... nor does a program's check
