"""LIR: instructions on concrete addresses, with runs of vectors expressed as strides.

The scheduler asks for "``size`` vectors from here with step s to there with step t"; this
emitter turns each request into as few instructions as the architecture allows: one
instruction when both steps are encodable powers of two and the run fits the size field,
chunks of the largest encodable size otherwise, one instruction per vector when a step
cannot be encoded at all. It is the one place that knows how strides and sizes encode.

Instructions are kept as rows of plain integers (opcode, flags, address and stride of
operands 0 and 1, operand 2), not objects: a large network has millions of them. Every
``CHUNK`` rows are encoded to bytes and validated in one vectorised pass (field widths here,
then ``Program.invalid_mask``, the devices' own check), so an invalid instruction is reported
with its program counter and memory stays proportional to the encoded program.
"""

from __future__ import annotations

from array import array
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from ..arch import Architecture
from ..isa.instructions import (
    ConfigRegister,
    Configure,
    Direction,
    InvalidInstruction,
    LoadWeightsFlag,
    MatMulFlag,
    Opcode,
    SIMDFlag,
    SIMDOp,
)
from ..isa.layout import layout_of
from ..isa.program import Program, ProgramFields, fields_of_operands

_MEMORY = {d: d.memory for d in Direction}
_ROW = 7  # opcode, flags, addr0, stride0, addr1, stride1, operand2
_MATMUL, _DATAMOVE, _LOADWEIGHTS = int(Opcode.MATMUL), int(Opcode.DATAMOVE), int(Opcode.LOADWEIGHTS)
_SIMD, _CONFIGURE, _NOOP = int(Opcode.SIMD), int(Opcode.CONFIGURE), int(Opcode.NOOP)
# Flag bits as plain integers (enum arithmetic per instruction costs compile time).
_ACCUMULATE, _ZEROES, _WINDOW = int(MatMulFlag.ACCUMULATE), int(MatMulFlag.ZEROES), int(MatMulFlag.WINDOW)
_LOAD_ZEROES = int(LoadWeightsFlag.ZEROES)


def no_rows() -> np.ndarray:
    """An empty block of instruction rows (what ``pending_rows`` returns for no instructions)."""
    return np.zeros((0, _ROW), dtype=np.int64)


# A burst row's kind, where it is not a MatMul's (a MatMul's kind is the vectors it streams, >= 0):
# a weight load, a Configure, or a row of a request that goes on in the next row.
LOAD, CONFIGURE, CONTINUED = -1, -2, -3


class BurstTemplate(NamedTuple):
    """Rows recorded once (``Burst.template``) and which of them move with which base address."""

    rows: np.ndarray  # flat
    loads: np.ndarray  # where a weight load's local address is (it moves with the weights; not of zeroes)
    reads: np.ndarray  # where a MatMul's local address is (not one of zeroes)
    matmuls: np.ndarray  # where a MatMul's accumulator address is
    costs: tuple[int, ...]
    kinds: tuple[int, ...]
    filled: dict  # the rows filled in, by (weights, local, acc)


class Burst:
    """Compute instructions recorded to go out together (the scheduler plays them into a program
    in runs, between the moves it paces beside them): requests to an ``LIR`` of their own, each
    row with the compute cycles the scheduler's clock counts for it (``costs``) and its kind
    (``kinds``); a request of several instructions (a run longer than the size field) is its rows,
    all but the last ``CONTINUED`` and costing nothing."""

    def __init__(self, arch: Architecture):
        self.lir = LIR(arch)
        self.lir.CHUNK = 1 << 62  # (a burst is played, never encoded)
        self.costs: list[int] = []
        self.kinds: list[int] = []

    @property
    def rows(self) -> array:
        return self.lir._rows

    def __len__(self) -> int:
        return len(self.costs)

    def clear(self) -> None:
        self.lir._rows = array("q")
        self.costs, self.kinds = [], []

    def template(self) -> "BurstTemplate":
        """What was recorded, for ``fill`` to record again with addresses moved (recorded with the
        weights, the slab and the accumulators at 0)."""
        rows = np.frombuffer(self.rows, dtype=np.int64).reshape(-1, _ROW)
        op, zeroes = rows[:, 0], (rows[:, 1] & _ZEROES) != 0
        matmul, loads = op == _MATMUL, (op == _LOADWEIGHTS) & ((rows[:, 1] & _LOAD_ZEROES) == 0)
        return BurstTemplate(
            rows.ravel().copy(), np.flatnonzero(loads) * _ROW + 2,
            np.flatnonzero(matmul & ~zeroes) * _ROW + 2, np.flatnonzero(matmul) * _ROW + 4,
            tuple(self.costs), tuple(self.kinds), {},
        )  # fmt: skip

    def fill(self, t: "BurstTemplate", weights: int, local: int, acc: int) -> None:
        """Record ``t`` again, its weight loads from ``weights`` on, its MatMuls reading from ``local``
        on (not those of zeroes) and writing from ``acc`` on."""
        data = t.filled.get((weights, local, acc))
        if data is None:  # (a stream meets few: two weight slots, slabs, banks)
            rows = t.rows.copy()
            rows[t.loads] += weights
            rows[t.reads] += local
            rows[t.matmuls] += acc
            data = t.filled[weights, local, acc] = rows.tobytes()
        self.rows.frombytes(data)
        self.costs.extend(t.costs)
        self.kinds.extend(t.kinds)

    def _recorded(self, before: int, cost: int, kind: int) -> None:
        """The rows after ``before`` are one request's."""
        n = len(self.rows) // _ROW - before
        if not n:
            raise ValueError("a burst request of no instructions")
        self.costs.extend([0] * (n - 1) + [cost])
        self.kinds.extend([CONTINUED] * (n - 1) + [kind])

    def matmul(self, local: int, acc: int, size: int, local_step: int, cost: int, accumulate=False, zeroes=False):
        """``LIR.matmul(local, acc, size, local_step, accumulate=, zeroes=)``, counted as ``cost``."""
        before = len(self.rows) // _ROW
        self.lir.matmul(local, acc, size, local_step, 1, accumulate, zeroes)
        self._recorded(before, cost, size)

    def window_matmul(self, local: int, acc: int, outputs: int, streams: int, accumulate: bool) -> None:
        """``LIR.window_matmul(local, acc, outputs, accumulate=)``, streaming ``streams`` vectors."""
        before = len(self.rows) // _ROW
        self.lir.window_matmul(local, acc, outputs, accumulate=accumulate)
        self._recorded(before, streams + 1, streams)

    def load_weights(self, local: int, size: int, zeroes: bool = False) -> None:
        """``LIR.load_weights(local, size, zeroes=)``."""
        before = len(self.rows) // _ROW
        self.lir.load_weights(local, size, zeroes=zeroes)
        self._recorded(before, size + 4, LOAD)

    def configure(self, register: ConfigRegister, value: int) -> None:
        before = len(self.rows) // _ROW
        self.lir.configure(register, value)
        self._recorded(before, 0, CONFIGURE)


@lru_cache(maxsize=16)
def _encoding(arch: Architecture):
    """(layout, stride0 codes, stride1 codes, run limits, SIMD operand bits) of ``arch`` (the same
    for every LIR of it: a search makes many short ones)."""
    lay = layout_of(arch)
    size_limit = 1 << lay.operand2_address_bits
    stride0 = {1 << e: e for e in range(arch.stride0_depth)}
    stride1 = {1 << e: e for e in range(arch.stride1_depth)}
    run_limit = {m: min(size_limit, arch.depth("local"), arch.depth(m)) for m in ("dram0", "dram1", "acc", "local")}
    return lay, stride0, stride1, run_limit, lay.simd_operand_bits


class LIR:
    CHUNK = 1 << 18  # rows encoded and validated at a time

    def __init__(self, arch: Architecture):
        self.arch = arch
        self.comments: dict[int, str] = {}
        self._rows = array("q")
        self._encoded: list[bytes] = []
        self._done = 0  # instructions already encoded
        self.layout, self._stride0, self._stride1, self._run_limit, self._simd_bits = _encoding(arch)
        self._discarding = False
        self._window: int | None = None  # the window register after the instructions encoded

    def __len__(self) -> int:
        return self._done + len(self._rows) // _ROW

    def comment(self, text: str) -> None:
        """Attach a comment to the next instruction (kept for listings and reports)."""
        self.comments[len(self)] = text

    def discard(self) -> None:
        """Drop every instruction from here on (the program is known to be impossible; the
        scheduler runs on only to measure what it would need)."""
        self._discarding = True
        self._rows = array("q")

    def _emit(self, opcode: int, flags: int, a0: int, s0: int, a1: int, s1: int, o2: int) -> None:
        self._rows.extend((opcode, flags, a0, s0, a1, s1, o2))
        if len(self._rows) >= _ROW * self.CHUNK:
            self._spill()

    def _spill(self) -> None:
        """A chunk of rows is pending: encode it (or, when discarding, only count it)."""
        if self._discarding:
            self._done += len(self._rows) // _ROW
            self._rows = array("q")
        else:
            self._flush()

    def _runs(self, size: int, encodable: bool, limit: int):
        """(offset_index, count) pieces of a run of ``size`` vectors."""
        if not encodable:
            return ((i, 1) for i in range(size))
        return ((start, min(limit, size - start)) for start in range(0, size, limit))

    # -- instructions ---------------------------------------------------------------------------
    def datamove(
        self, direction: Direction, local: int, address: int, size: int, local_step: int = 1, step: int = 1
    ) -> None:
        if size <= 0:
            return
        ls, s = self._stride0.get(local_step), self._stride1.get(step)
        limit = self._run_limit[_MEMORY[direction]]
        fl = int(direction)
        if ls is not None and s is not None and size <= limit:  # the common case: one instruction
            self._emit(_DATAMOVE, fl, local, ls if size > 1 else 0, address, s if size > 1 else 0, size - 1)
            return
        for i, n in self._runs(size, ls is not None and s is not None, limit):
            self._emit(
                _DATAMOVE, fl, local + i * local_step, ls if n > 1 else 0, address + i * step, s if n > 1 else 0, n - 1
            )

    def matmul(
        self,
        local: int,
        acc: int,
        size: int,
        local_step: int = 1,
        acc_step: int = 1,
        accumulate: bool = False,
        zeroes: bool = False,
    ) -> None:
        if size <= 0:
            return
        ls = 0 if zeroes else self._stride0.get(local_step)
        s = self._stride1.get(acc_step)
        limit = self._run_limit["acc"]
        fl = (_ACCUMULATE if accumulate else 0) | (_ZEROES if zeroes else 0)
        if ls is not None and s is not None and size <= limit:
            self._emit(_MATMUL, fl, 0 if zeroes else local, ls if size > 1 else 0, acc, s if size > 1 else 0, size - 1)
            return
        for i, n in self._runs(size, ls is not None and s is not None, limit):
            self._emit(
                _MATMUL,
                fl,
                0 if zeroes else local + i * local_step,
                ls if n > 1 else 0,
                acc + i * acc_step,
                s if n > 1 else 0,
                n - 1,
            )

    def window_matmul(
        self, local: int, acc: int, outputs: int, local_step: int = 1, acc_step: int = 1, accumulate: bool = False
    ) -> None:
        """A MatMul with the window flag (ours): ``outputs`` outputs of the window last configured
        (``configure(ConfigRegister.WINDOW, ...)``), which sets how many vectors it reads."""
        ls, s = self._stride0.get(local_step), self._stride1.get(acc_step)
        if ls is None or s is None or outputs > self._run_limit["acc"]:
            raise ValueError(f"window MatMul of {outputs} outputs, steps {local_step}/{acc_step}: not encodable")
        fl = _WINDOW | (_ACCUMULATE if accumulate else 0)
        self._emit(_MATMUL, fl, local, ls, acc, s if outputs > 1 else 0, outputs - 1)

    def load_weights(self, local: int, size: int, local_step: int = 1, zeroes: bool = False) -> None:
        ls = 0 if zeroes else self._stride0.get(local_step)
        if ls is None:  # cannot happen for the scheduler's contiguous blocks; keep it exact anyway
            raise ValueError(f"LoadWeights step {local_step} is not encodable")
        self._emit(
            _LOADWEIGHTS,
            _LOAD_ZEROES if zeroes else 0,
            0 if zeroes else local,
            ls if size > 1 else 0,
            size - 1,
            0,
            0,
        )

    def simd(
        self,
        op: SIMDOp,
        dest: int = 0,
        left: int = 0,
        right: int = 0,
        write: int | None = None,
        read: int | None = None,
        accumulate: bool = False,
    ) -> None:
        b = self._simd_bits
        fl = int(
            SIMDFlag.READ * (read is not None) | SIMDFlag.WRITE * (write is not None) | SIMDFlag.ACCUMULATE * accumulate
        )
        self._emit(_SIMD, fl, write or 0, 0, read or 0, 0, dest | right << b | left << (2 * b) | int(op) << (3 * b))

    def simd_run(
        self, op: SIMDOp, first: int, count: int, dest: int = 0, left: int = 0, right: int = 0, relu: bool = False
    ) -> None:
        """``count`` SIMD instructions, the i-th reading and writing accumulator ``first + i``
        (an element-wise op over a run of vectors; ``relu``: with the ReLU flag), emitted at once."""
        self.simd_runs(first, count, [(op, dest, left, right, "v", "v", False, relu)])

    def simd_runs(self, first: int, count: int, steps) -> None:
        """For each vector ``v = first + i`` of a run, the SIMD instructions ``steps`` in order,
        emitted at once. A step is ``(op, dest, left, right, read, write[, accumulate])``: ``read``
        is ``"v"`` (vector v), ``("v", k)`` (vector v + k), an int (that fixed accumulator address,
        e.g. a constant or a scratch vector) or ``None``; ``write`` the same (not ``None``: the
        output is written there, saturating-added with ``accumulate``); a last ``relu``: with the
        ReLU flag (ours)."""
        if count <= 0:
            return
        b = self._simd_bits
        v = np.arange(first, first + count)
        rows = np.zeros((count, len(steps), _ROW), dtype=np.int64)
        rows[:, :, 0] = _SIMD

        def address(a):
            return 0 if a is None else v if a == "v" else v + a[1] if isinstance(a, tuple) else a

        for k, (op, dest, left, right, read, write, *more) in enumerate(steps):
            accumulate, relu = (list(more) + [False, False])[:2]
            flags = SIMDFlag.READ * (read is not None) | SIMDFlag.WRITE * (write is not None)
            rows[:, k, 1] = int(flags | SIMDFlag.ACCUMULATE * bool(accumulate) | SIMDFlag.RELU * bool(relu))
            rows[:, k, 2] = address(write)
            rows[:, k, 4] = address(read)
            rows[:, k, 6] = dest | right << b | left << (2 * b) | int(op) << (3 * b)
        self._rows.frombytes(rows.tobytes())
        if len(self._rows) >= _ROW * self.CHUNK:
            self._spill()

    def configure(self, register: ConfigRegister, value: int) -> None:
        lay = self.layout
        word = Configure(register, value).encode(lay)  # rare: the object checks the value
        self._emit(
            _CONFIGURE,
            0,
            word & ((1 << lay.operand0_bits) - 1),
            0,
            (word >> lay.operand1_shift) & ((1 << lay.operand1_bits) - 1),
            0,
            (word >> lay.operand2_shift) & ((1 << lay.operand2_bits) - 1),
        )

    def noop(self) -> None:
        self._emit(_NOOP, 0, 0, 0, 0, 0, 0)

    def fields(self):
        """The instructions' fields a chunk at a time, as decoding the program would give them (the
        rows not encoded yet are not encoded for it: a search reads every trial's, keeps one)."""
        for data in self._encoded:
            yield Program(data, self.layout, "lir").fields()
        if self._rows:
            yield _fields(np.frombuffer(self._rows, dtype=np.int64).reshape(-1, _ROW).copy(), self.layout)

    def emit_burst(self, burst: Burst, lo: int, hi: int) -> None:
        """Append ``burst``'s rows ``lo`` to ``hi`` (exclusive)."""
        if hi > lo:
            self._rows.extend(burst.rows[lo * _ROW : hi * _ROW])
            if len(self._rows) >= _ROW * self.CHUNK:
                self._spill()

    def pending_rows(self) -> np.ndarray:
        """The instructions emitted so far, as rows (opcode, flags, addr0, stride0, addr1, stride1,
        operand2), for a short side program (nothing encoded yet) that ``emit_rows`` replays later."""
        if self._done:
            raise ValueError("pending_rows: the side program already spilled encoded chunks")
        return np.frombuffer(self._rows, dtype=np.int64).reshape(-1, _ROW).copy()

    def emit_rows(self, rows: np.ndarray) -> None:
        """Append rows taken from ``pending_rows`` (of a program for the same architecture)."""
        if len(rows):
            self._rows.frombytes(np.ascontiguousarray(rows, dtype=np.int64).tobytes())
            if len(self._rows) >= _ROW * self.CHUNK:
                self._spill()

    def extend(self, other: "LIR") -> None:
        """Append ``other``'s instructions (emitted for the same architecture) after this one's."""
        self._flush()
        other._flush()
        offset = len(self)
        self._encoded.extend(other._encoded)
        self._done += other._done
        self.comments.update({pc + offset: text for pc, text in other.comments.items()})

    # -- backend --------------------------------------------------------------------------------
    def _flush(self) -> None:
        """Encode and validate the pending rows."""
        if not self._rows:
            return
        rows = np.frombuffer(self._rows, dtype=np.int64).reshape(-1, _ROW)
        self._encoded.append(self._encode(rows, self._done))
        self._done += rows.shape[0]
        self._rows = array("q")

    def _encode(self, rows: np.ndarray, first_pc: int) -> bytes:
        lay = self.layout
        op, fl, a0, s0, a1, s1, o2 = rows.T
        # Field widths (a value too wide would spill into the next field); Configure rows hold
        # whole operands.
        plain = op != _CONFIGURE
        for values, bits, name in (
            (a0, lay.operand0_address_bits, "operand0 address"),
            (s0, lay.stride0_bits, "operand0 stride"),
            (a1, lay.operand1_address_bits, "operand1 address"),
            (s1, lay.stride1_bits, "operand1 stride"),
            (o2, lay.operand2_bits, "operand2"),
        ):
            bad = plain & ((values < 0) | (values >= (1 << bits)))
            if bad.any():
                i = int(np.argmax(bad))
                raise InvalidInstruction(
                    Opcode(int(op[i])).name.title(),
                    name,
                    f"{int(values[i])} does not fit its {bits} bits",
                    pc=first_pc + i,
                )
        o0 = np.where(plain, a0 | (s0 << lay.operand0_address_bits), a0)
        o1 = np.where(plain, a1 | (s1 << lay.operand1_address_bits), a1)
        out = np.empty((rows.shape[0], lay.instruction_bytes), dtype=np.uint8)
        col = 0
        for value, nbytes in zip((o0, o1, o2), lay.operand_bytes):
            for k in range(nbytes):
                out[:, col] = (value >> (8 * k)) & 0xFF
                col += 1
        out[:, col] = fl | (op << 4)
        data = out.tobytes()
        chunk = Program(data, lay, "lir")
        f = chunk.fields()
        bad = chunk.invalid_mask(f, self._window)  # (a window MatMul needs its Configure in this LIR)
        self._window = chunk.window_after(f, self._window)
        if bad.any():
            i = int(np.argmax(bad))
            try:
                chunk.instruction(i)
            except InvalidInstruction as e:
                raise e.at(first_pc + i) from None
        return data

    def program(self, name: str = "program") -> Program:
        self._flush()
        return Program(b"".join(self._encoded), self.layout, name)


def _fields(rows: np.ndarray, lay) -> ProgramFields:
    """``Program.fields`` of ``rows`` once encoded (rows that fit their fields, as ``_encode`` checks)."""
    op, fl, a0, s0, a1, s1, o2 = rows.T
    plain = op != _CONFIGURE
    raw0 = np.where(plain, a0 | (s0 << lay.operand0_address_bits), a0)
    raw1 = np.where(plain, a1 | (s1 << lay.operand1_address_bits), a1)
    return fields_of_operands(op, fl, raw0, raw1, o2, lay)
