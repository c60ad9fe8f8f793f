"""Differential runs: the same program and DRAM on two devices, memories compared bit for bit,
and a failing program shrunk to the shortest one that still differs.

Used by the test suite (emulator against the Verilated RTL) and usable by hand on any two devices.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..isa.asm import disassemble
from ..isa.fuzz import dump_epilogue, random_program
from ..isa.instructions import Instruction
from ..isa.layout import layout_of
from ..isa.program import Program
from .device import Device


@dataclass
class Difference:
    """Where two devices disagree after the same program."""

    bank: int
    vectors: list[int]  # first differing DRAM vectors
    a: list
    b: list

    def __str__(self) -> str:
        return f"DRAM{self.bank} differs at vectors {self.vectors}: first {self.a[:2]} vs {self.b[:2]}"


def random_dram(arch, seed: int) -> list[np.ndarray]:
    """DRAM contents of moderate magnitude (saturation happens, but not everywhere)."""
    rng = np.random.default_rng(seed)
    one = arch.data_type.one
    return [rng.integers(-one * 4, one * 4, (depth, arch.array_size)) for depth in (arch.dram0_depth, arch.dram1_depth)]


def compare(a: Device, b: Device, body: Sequence[Instruction], dram: Sequence[np.ndarray]) -> Difference | None:
    """Run ``body`` plus a dump of local memory and accumulators to DRAM on both devices, from
    their power-on state and the same DRAM; the first difference, or None."""
    arch = a.arch
    program = Program.from_instructions(list(body) + dump_epilogue(arch), layout_of(arch), name="differential")
    for dev in (a, b):
        dev.reset()
        for bank in (0, 1):
            dev.write_dram(bank, 0, dram[bank])
        dev.execute(program)
    for bank in (0, 1):
        depth = dram[bank].shape[0]
        x, y = a.read_dram(bank, 0, depth), b.read_dram(bank, 0, depth)
        bad = np.nonzero((x != y).any(axis=1))[0]
        if bad.size:
            return Difference(bank, bad[:8].tolist(), x[bad[:3]].tolist(), y[bad[:3]].tolist())
    return None


def shrink(body: list[Instruction], differs: Callable[[list[Instruction]], bool]) -> list[Instruction]:
    """The shortest program found (by deleting chunks, then single instructions) that still differs."""
    chunk = max(1, len(body) // 2)
    while chunk >= 1:
        i = 0
        while i < len(body):
            trial = body[:i] + body[i + chunk :]
            if trial and differs(trial):
                body = trial
            else:
                i += chunk
        chunk //= 2
    return body


def random_programs(arch, count: int, seed: int = 0, max_size: int = 12, length: tuple[int, int] = (5, 30)):
    """(index, body, dram) for ``count`` random valid programs (all opcodes, strides, sizes, flags)."""
    rng = random.Random(seed)
    for i in range(count):
        body = random_program(rng, arch, rng.randint(*length), max_size=max_size)
        yield i, body, random_dram(arch, seed * 100003 + i)


def report(a: Device, b: Device, body: list[Instruction], dram, diff: Difference) -> str:
    """A failure report with the shrunk program."""
    short = shrink(list(body), lambda t: compare(a, b, t, dram) is not None)
    diff2 = compare(a, b, short, dram)
    return (
        f"{a.name} and {b.name} differ: {diff}\nshortest program that still differs "
        f"({len(short)} of {len(body)} instructions): {diff2}\n"
        + disassemble(Program.from_instructions(short, layout_of(a.arch)), with_pc=True)
    )
