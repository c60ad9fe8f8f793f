"""Programs and .tprog files."""

import pytest

from tvm_tensil.arch import PRESETS
from tvm_tensil.isa import MatMul, NoOp, Program, ProgramError, assemble
from tvm_tensil.isa.layout import layout_of

L = layout_of(PRESETS["pynqz1"])


def test_tprog_save_load(tmp_path):
    prog = Program.from_instructions([NoOp(), MatMul(1, 2, 3)], L)
    path = tmp_path / "p.tprog"
    prog.save(path)
    assert path.read_bytes() == prog.data  # no file header: instructions back to back
    back = Program.load(path, L)
    assert back.instructions() == prog.instructions()
    assert len(back) == 2


def test_truncated_program_names_the_pc(tmp_path):
    data = assemble("noop\nmatmul local=0 acc=0 size=1\nnoop", L).data[:-3]
    with pytest.raises(ProgramError, match=r"truncated: 21 bytes .* pc 2 has only 5 bytes") as e:
        Program(data, L, name="p.tprog")
    assert e.value.pc == 2


def test_wrong_architecture_is_caught_by_length_or_validation():
    data = assemble("matmul local=0 acc=0 size=1\n" * 3, L).data  # 24 bytes
    with pytest.raises(ProgramError, match="is the architecture right"):
        Program(data, layout_of(PRESETS["ultra96v2"]))  # 9-byte instructions


def test_missing_file():
    with pytest.raises(ProgramError, match="cannot read program"):
        Program.load("/nonexistent/p.tprog", L)


def test_moving_dram1_changes_only_dram1_addresses():
    from tvm_tensil.isa import DataMove, Direction, LoadWeights

    d = Direction
    prog = Program.from_instructions(
        [
            DataMove(d.DRAM1_TO_LOCAL, 0, 5, 4, stride=1),  # reads DRAM1 5, 7, 9, 11
            DataMove(d.DRAM0_TO_LOCAL, 4, 5, 3),
            LoadWeights(0, 2),
            DataMove(d.LOCAL_TO_DRAM1, 4, 20, 1),
            MatMul(0, 5, 1),
        ],
        L,
    )
    assert prog.dram1_span() == (5, 21)
    moved = prog.with_dram1_offset(1000)
    want = prog.instructions()
    want[0] = DataMove(d.DRAM1_TO_LOCAL, 0, 1005, 4, stride=1)
    want[3] = DataMove(d.LOCAL_TO_DRAM1, 4, 1020, 1)
    assert moved.instructions() == want
    assert moved.dram1_span() == (1005, 1021)
    assert moved.with_dram1_offset(-1000).data == prog.data
    assert prog.with_dram1_offset(0) is prog
    with pytest.raises(ProgramError, match=r"outside DRAM1 \(dram1_depth"):
        prog.with_dram1_offset(-6)
    with pytest.raises(ProgramError, match="outside DRAM1"):
        prog.with_dram1_offset(L.arch.dram1_depth - 20)
    assert Program.from_instructions([MatMul(0, 5, 1)], L).dram1_span() is None
