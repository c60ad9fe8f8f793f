"""Programs and .tprog files."""

import pytest

from tvm_tensil.arch import PRESETS
from tvm_tensil.isa import MatMul, NoOp, Program, ProgramError, assemble

L = PRESETS["pynqz1"].layout


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
        Program(data, PRESETS["ultra96v2"].layout)  # 9-byte instructions


def test_missing_file():
    with pytest.raises(ProgramError, match="cannot read program"):
        Program.load("/nonexistent/p.tprog", L)
