"""Programs: sequences of encoded instructions, ``.tprog`` files, vectorised decoding.

A ``.tprog`` file is instructions back to back, each ``layout.instruction_bytes`` long,
little-endian, with no file header. ``Program`` keeps the raw bytes; it decodes them into
objects on demand, or into numpy field arrays in one vectorised pass (``fields()``) for
the emulator, validating every instruction without a Python loop.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from .instructions import (
    ConfigRegister,
    Direction,
    Instruction,
    InvalidInstruction,
    LoadWeightsFlag,
    MatMulFlag,
    Opcode,
    SIMDFlag,
    TapWindow,
    decode_word,
)
from .layout import InstructionLayout

__all__ = ["Program", "ProgramFields", "ProgramError"]


class ProgramError(ValueError):
    """A program that cannot be decoded or executed; names the program counter."""

    def __init__(self, message: str, pc: int | None = None):
        self.pc = pc
        super().__init__(message)


@dataclass
class ProgramFields:
    """Every instruction's fields as int64 arrays (one entry per instruction)."""

    opcode: np.ndarray
    flags: np.ndarray
    raw0: np.ndarray  # whole operands, as encoded
    raw1: np.ndarray
    operand2: np.ndarray
    addr0: np.ndarray  # operand0/1 split into address and stride
    stride0: np.ndarray
    addr1: np.ndarray
    stride1: np.ndarray
    pad0: np.ndarray  # bits above address and stride are set (must be zero)
    pad1: np.ndarray

    def __len__(self) -> int:
        return len(self.opcode)


@dataclass(frozen=True)
class ProgramSummary:
    """What a validated program does, per opcode (``Program.check``)."""

    instructions: int
    counts: np.ndarray  # instructions per opcode value (16)
    vectors: np.ndarray  # vectors moved or processed per opcode value (a SIMD instruction: 1)
    writes_dram1: bool  # some DataMove stores to DRAM1
    first_loadlut: int | None  # pc of the first LoadLUT, if any
    dram0_writes: tuple[int, int] | None = None  # (first, end) of the DRAM0 vectors it stores to


def _operand(rows: np.ndarray, start: int, nbytes: int) -> np.ndarray:
    """Little-endian integer from ``nbytes`` bytes of each row (nbytes <= 8)."""
    out = np.zeros(rows.shape[0], dtype=np.uint64)
    for i in range(nbytes):
        out |= rows[:, start + i].astype(np.uint64) << np.uint64(8 * i)
    return out


class Program:
    """A TCU program for one architecture."""

    def __init__(self, data: bytes, layout: InstructionLayout, name: str = "program"):
        self.data = bytes(data)
        self.layout = layout
        self.name = name
        size = layout.instruction_bytes
        if len(self.data) % size:
            whole = len(self.data) // size
            raise ProgramError(
                f"{name} is truncated: {len(self.data)} bytes is not a whole number of "
                f"{size}-byte instructions for this architecture; the instruction at pc {whole} "
                f"has only {len(self.data) - whole * size} bytes (is the architecture right?)",
                pc=whole,
            )

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_instructions(
        cls, instructions: Iterable[Instruction], layout: InstructionLayout, name: str = "program"
    ) -> "Program":
        parts = []
        for pc, inst in enumerate(instructions):
            try:
                parts.append(inst.to_bytes(layout))
            except InvalidInstruction as e:
                raise e.at(pc) from None
        return cls(b"".join(parts), layout, name)

    @classmethod
    def load(cls, path: str | os.PathLike, layout: InstructionLayout) -> "Program":
        path = Path(path)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise ProgramError(f"cannot read program {path}: {e.strerror}") from None
        return cls(data, layout, name=str(path))

    def save(self, path: str | os.PathLike) -> None:
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        tmp.write_bytes(self.data)
        os.replace(tmp, path)

    # -- access ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.data) // self.layout.instruction_bytes

    def word(self, pc: int) -> int:
        n = self.layout.instruction_bytes
        return int.from_bytes(self.data[pc * n : (pc + 1) * n], "little")

    def instruction(self, pc: int) -> Instruction:
        try:
            return decode_word(self.word(pc), self.layout)
        except InvalidInstruction as e:
            raise e.at(pc) from None

    def instructions(self) -> list[Instruction]:
        """Decode every instruction into an object (validated)."""
        self.validate()
        return [decode_word(self.word(pc), self.layout) for pc in range(len(self))]

    def __iter__(self):
        return iter(self.instructions())

    # -- vectorised decode and validation ---------------------------------------------------
    def fields(self, start: int = 0, stop: int | None = None) -> ProgramFields:
        """Fields of instructions ``start .. stop-1`` (all by default)."""
        lay = self.layout
        n = len(self)
        rows = np.frombuffer(self.data, dtype=np.uint8).reshape(n, lay.instruction_bytes)[start:stop]
        b0, b1, b2 = lay.operand_bytes
        o0 = _operand(rows, 0, b0).astype(np.int64)
        o1 = _operand(rows, b0, b1).astype(np.int64)
        o2 = _operand(rows, b0 + b1, b2).astype(np.int64)
        header = rows[:, -1].astype(np.int64)
        return fields_of_operands(header >> 4, header & 0xF, o0, o1, o2, lay)

    def window_after(self, f: ProgramFields, window: int | None = None) -> int | None:
        """The window register's value after ``f`` (``window`` before it; None: never set)."""
        return window_register(f, self.layout, window)[1]

    def invalid_mask(self, f: ProgramFields | None = None, window: int | None = None) -> np.ndarray:
        """True for every instruction ``decode_word`` would reject, in one vectorised pass; a window
        MatMul also needs the window register set earlier in the program (``window``: its value
        before ``f``'s first instruction, None if not set yet) and its reads inside local memory."""
        f = self.fields() if f is None else f
        lay = self.layout
        arch = lay.arch
        op, fl, o2 = f.opcode, f.flags, f.operand2
        a0, s0, a1, s1 = f.addr0, f.stride0, f.addr1, f.stride1
        L, A = arch.local_depth, arch.accumulator_depth
        count = o2 + 1
        size_max = 1 << lay.operand2_address_bits
        bad_s0 = s0 >= arch.stride0_depth
        bad_s1 = s1 >= arch.stride1_depth

        def run_bad(addr, stride, cnt, depth):
            return (addr >= depth) | (addr + (cnt - 1) * np.left_shift(1, stride) >= depth)

        verdicts = {
            Opcode.NOOP: (fl != 0) | (f.raw0 != 0) | (f.raw1 != 0) | (o2 != 0),
        }
        zeroes = (fl & MatMulFlag.ZEROES) != 0
        windowed = (fl & MatMulFlag.WINDOW) != 0
        reads = count
        win_values = np.full(len(op), -1, dtype=np.int64)
        if arch.window_matmul:
            win_values = window_register(f, lay, window)[0]
            taps, lead, trail, stride = TapWindow.fields(np.maximum(win_values, 0))
            reads = np.where(windowed, (count - 1) * stride + taps - lead - trail, count)
        verdicts[Opcode.MATMUL] = (
            (fl > (7 if arch.window_matmul else 3))
            | f.pad0
            | f.pad1
            | bad_s0
            | bad_s1
            | (count > min(L, A, size_max))
            | (windowed & ((win_values < 0) | (reads < 1)))
            | (~zeroes & run_bad(a0, s0, np.maximum(reads, 1), L))
            | run_bad(a1, s1, count, A)
        )
        other = np.select(
            [
                np.isin(fl, (Direction.DRAM0_TO_LOCAL, Direction.LOCAL_TO_DRAM0)),
                np.isin(fl, (Direction.DRAM1_TO_LOCAL, Direction.LOCAL_TO_DRAM1)),
            ],
            [arch.dram0_depth, arch.dram1_depth],
            default=A,
        )
        verdicts[Opcode.DATAMOVE] = (
            ~np.isin(fl, [int(d) for d in Direction])
            | f.pad0
            | f.pad1
            | bad_s0
            | bad_s1
            | (count > np.minimum(np.minimum(other, L), size_max))
            | run_bad(a0, s0, count, L)
            | run_bad(a1, s1, count, other)
        )
        lw_count = f.raw1 + 1  # operand1 holds size - 1
        verdicts[Opcode.LOADWEIGHTS] = (
            (fl > 1)
            | f.pad0
            | bad_s0
            | (o2 != 0)
            | (lw_count > L)
            | (((fl & LoadWeightsFlag.ZEROES) == 0) & run_bad(a0, s0, lw_count, L))
        )
        rb = lay.simd_operand_bits
        sel = (1 << rb) - 1
        simd = (fl > (15 if arch.simd_relu else 7)) | f.pad0 | f.pad1 | (s0 != 0) | (s1 != 0)
        simd |= (o2 >> lay.simd_instruction_bits) != 0
        for shift in (0, rb, 2 * rb):
            simd |= ((o2 >> shift) & sel) > arch.simd_registers_depth
        simd |= (((fl & SIMDFlag.READ) != 0) & (a1 >= A)) | (((fl & SIMDFlag.WRITE) != 0) & (a0 >= A))
        verdicts[Opcode.SIMD] = simd
        verdicts[Opcode.LOADLUT] = (fl != 0) | (o2 != 0) | f.pad0 | bad_s0 | (a0 >= L)
        verdicts[Opcode.CONFIGURE] = (fl != 0) | ~np.isin(f.raw0 & 0xF, [int(r) for r in ConfigRegister])
        set_window = (f.raw0 & 0xF) == ConfigRegister.WINDOW
        if arch.window_matmul:  # taps <= N, each side's padding < taps, nothing above the window's bits
            value = _configure_values(f, lay)
            taps, lead, trail, _ = TapWindow.fields(value)
            set_window &= (taps > arch.array_size) | (lead >= taps) | (trail >= taps) | ((value >> TapWindow.BITS) != 0)
        verdicts[Opcode.CONFIGURE] |= set_window

        bad = np.ones(len(op), dtype=bool)  # unknown opcodes stay bad
        for code, verdict in verdicts.items():
            m = op == code
            bad[m] = verdict[m]
        return bad

    def chunks(self, size: int = 1 << 20):
        """(first pc, fields) of ``size`` instructions at a time (for passes over huge programs)."""
        for start in range(0, len(self), size):
            yield start, self.fields(start, start + size)

    def check(self) -> "ProgramSummary":
        """Validate the whole program (raising ``InvalidInstruction`` with the pc of the first bad
        instruction) and summarise it. Done once per program, a chunk at a time, so that a program of
        millions of instructions is never decoded whole; the result is cached (the bytes are immutable)."""
        cached = getattr(self, "_summary", None)
        if cached is not None and cached[0] is self.data:
            return cached[1]
        counts = np.zeros(16, dtype=np.int64)
        vectors = np.zeros(16, dtype=np.int64)
        writes_dram1, first_loadlut = False, None
        lo0 = hi0 = None
        window = None
        for start, f in self.chunks():
            self._raise_first_invalid(self.invalid_mask(f, window), start)
            window = self.window_after(f, window)
            counts += np.bincount(f.opcode, minlength=16)
            sizes = np.where(
                f.opcode == Opcode.LOADWEIGHTS,
                f.raw1 + 1,
                np.where(
                    np.isin(f.opcode, (Opcode.MATMUL, Opcode.DATAMOVE)),
                    f.operand2 + 1,
                    (f.opcode == Opcode.SIMD).astype(np.int64),
                ),
            )
            vectors += np.bincount(f.opcode, weights=sizes, minlength=16).astype(np.int64)
            writes_dram1 |= bool(np.any((f.opcode == Opcode.DATAMOVE) & (f.flags == Direction.LOCAL_TO_DRAM1)))
            stores = (f.opcode == Opcode.DATAMOVE) & (f.flags == Direction.LOCAL_TO_DRAM0)
            if stores.any():
                first = f.addr1[stores]
                last = first + f.operand2[stores] * np.left_shift(1, f.stride1[stores])
                lo0 = int(first.min()) if lo0 is None else min(lo0, int(first.min()))
                hi0 = int(last.max()) + 1 if hi0 is None else max(hi0, int(last.max()) + 1)
            lut = np.nonzero(f.opcode == Opcode.LOADLUT)[0]
            if first_loadlut is None and lut.size:
                first_loadlut = start + int(lut[0])
        summary = ProgramSummary(
            len(self), counts, vectors, writes_dram1, first_loadlut, None if lo0 is None else (lo0, hi0)
        )
        self._summary = (self.data, summary)
        return summary

    # -- DRAM1 placement (a loader putting a model's weights elsewhere) -------------------------
    @staticmethod
    def _dram1_moves(f: ProgramFields) -> np.ndarray:
        return (f.opcode == Opcode.DATAMOVE) & np.isin(f.flags, (Direction.DRAM1_TO_LOCAL, Direction.LOCAL_TO_DRAM1))

    def dram1_span(self) -> tuple[int, int] | None:
        """(first, end) of the DRAM1 vectors the program reads or writes; None if it touches none.
        The program must be valid (``check()``)."""
        lo, hi = None, None
        for _, f in self.chunks():
            m = self._dram1_moves(f)
            if m.any():
                first = f.addr1[m]
                last = first + f.operand2[m] * np.left_shift(1, f.stride1[m])
                lo = int(first.min()) if lo is None else min(lo, int(first.min()))
                hi = int(last.max()) + 1 if hi is None else max(hi, int(last.max()) + 1)
        return None if lo is None else (lo, hi)

    def with_dram1_offset(self, delta: int) -> "Program":
        """This program with every DRAM1 address moved by ``delta`` vectors (strides and sizes
        unchanged). Raises ProgramError if an access would leave DRAM1."""
        if delta == 0:
            return self
        span = self.dram1_span()
        depth = self.layout.arch.dram1_depth
        if span is not None and (span[0] + delta < 0 or span[1] + delta > depth):
            raise ProgramError(
                f"{self.name}: moving DRAM1 by {delta} vectors puts vectors {span[0] + delta}..{span[1] + delta - 1} "
                f"outside DRAM1 (dram1_depth = {depth})"
            )
        lay = self.layout
        rows = np.frombuffer(self.data, dtype=np.uint8).reshape(len(self), lay.instruction_bytes).copy()
        b0, b1, _ = lay.operand_bytes
        for start, f in self.chunks():
            m = self._dram1_moves(f)
            # A valid instruction's padding bits are zero: operand1 is address | stride << address bits.
            raw = (f.addr1[m] + delta) | (f.stride1[m] << lay.operand1_address_bits)
            idx = start + np.nonzero(m)[0]
            for i in range(b1):
                rows[idx, b0 + i] = (raw >> (8 * i)) & 0xFF
        return Program(rows.tobytes(), lay, self.name)

    def validate(self, f: ProgramFields | None = None) -> None:
        """Raise ``InvalidInstruction`` (with the pc) for the first invalid instruction."""
        self._raise_first_invalid(self.invalid_mask(f), 0)

    def _raise_first_invalid(self, bad: np.ndarray, first_pc: int) -> None:
        """``bad``: the invalid mask of instructions from ``first_pc`` on."""
        if bad.any():
            pc = first_pc + int(np.argmax(bad))
            self.instruction(pc)  # raises, naming the instruction and the field
            raise ProgramError(f"{self.name}: pc {pc}: invalid instruction", pc=pc)


def _configure_values(f: ProgramFields, layout: InstructionLayout) -> np.ndarray:
    """Each instruction's value as a Configure's: the operands above the register's 4 bits (a small
    core's window register value spans all three)."""
    o0, o1 = layout.operand0_bits, layout.operand1_bits
    return (f.raw0 >> 4) | (f.raw1 << (o0 - 4)) | (f.operand2 << (o0 + o1 - 4))


def fields_of_operands(opcode, flags, raw0, raw1, operand2, layout: InstructionLayout) -> ProgramFields:
    """Instructions' fields from their opcodes, flags and whole operands (operands 0 and 1 split
    into address, stride and the bits above them)."""

    def split(raw, abits, sbits):
        return raw & ((1 << abits) - 1), (raw >> abits) & ((1 << sbits) - 1), (raw >> (abits + sbits)) != 0

    addr0, stride0, pad0 = split(raw0, layout.operand0_address_bits, layout.stride0_bits)
    addr1, stride1, pad1 = split(raw1, layout.operand1_address_bits, layout.stride1_bits)
    return ProgramFields(
        opcode=opcode, flags=flags, raw0=raw0, raw1=raw1, operand2=operand2, addr0=addr0, stride0=stride0,
        addr1=addr1, stride1=stride1, pad0=pad0, pad1=pad1,
    )  # fmt: skip


def window_register(f: ProgramFields, layout: InstructionLayout, window: int | None) -> tuple[np.ndarray, int | None]:
    """The window register's value each instruction of ``f`` sees (-1: not set) and its value after
    ``f``, from ``window`` before it (None: not set)."""
    before = -1 if window is None else window
    if not layout.arch.window_matmul or not len(f):
        return np.full(len(f), before, dtype=np.int64), window
    is_window = (f.opcode == Opcode.CONFIGURE) & ((f.raw0 & 0xF) == ConfigRegister.WINDOW)
    values = _configure_values(f, layout) & ((1 << TapWindow.BITS) - 1)
    last = np.maximum.accumulate(np.where(is_window, np.arange(len(f)), -1))
    through = np.where(last >= 0, values[np.maximum(last, 0)], before)
    after = int(through[-1])
    return np.concatenate([[before], through[:-1]]).astype(np.int64), None if after < 0 else after


def window_stream(
    f: ProgramFields, layout: InstructionLayout, window: int | None, seen: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Each instruction's size, but for a window MatMul the vectors it streams through the array
    (its reads and padding: ``(outputs - 1) * stride + taps``; a window MatMul without a window set
    counts its outputs); and for each window MatMul the vectors it streams after its last output's
    first (``taps - 1``: that output takes them in the array's first stages), 0 elsewhere."""
    size = f.operand2 + 1
    if not layout.arch.window_matmul:
        return size, np.zeros(len(size), dtype=np.int64)
    seen = window_register(f, layout, window)[0] if seen is None else seen
    taps, _, _, stride = TapWindow.fields(np.maximum(seen, 0))
    windowed = (f.opcode == Opcode.MATMUL) & ((f.flags & MatMulFlag.WINDOW) != 0) & (seen >= 0)
    return np.where(windowed, (size - 1) * stride + taps, size), np.where(windowed, taps - 1, 0).astype(np.int64)


def pad_to_beats(stream: bytes, beat_bytes: int, instruction_bytes: int) -> bytes:
    """``stream`` followed by whole NoOps (all-zero instructions) up to a whole number of bus beats:
    zero bytes alone would leave part of an instruction waiting in the core's input (docs/boards.md)."""
    while len(stream) % beat_bytes:
        stream += bytes(instruction_bytes)
    return stream
