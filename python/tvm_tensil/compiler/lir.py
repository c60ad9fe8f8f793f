"""LIR: instructions on concrete addresses, with runs of vectors expressed as strides.

The scheduler asks for "``size`` vectors from here with step s to there with step t"; this
emitter turns each request into as few instructions as the architecture allows: one
instruction when both steps are encodable powers of two and the run fits the size field,
chunks of the largest encodable size otherwise, one instruction per vector when a step
cannot be encoded at all. It is the one place that knows how strides and sizes encode.
"""

from __future__ import annotations

from ..arch import Architecture
from ..isa.instructions import (
    SIMD,
    ConfigRegister,
    Configure,
    DataMove,
    Direction,
    Instruction,
    LoadWeights,
    MatMul,
    NoOp,
    SIMDOp,
)
from ..isa.program import Program

_DEPTH = {"dram0": "dram0_depth", "dram1": "dram1_depth", "acc": "accumulator_depth", "local": "local_depth"}


class LIR:
    def __init__(self, arch: Architecture):
        self.arch = arch
        self.layout = arch.layout
        self.instructions: list[Instruction] = []
        self.comments: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.instructions)

    def comment(self, text: str) -> None:
        """Attach a comment to the next instruction (kept for listings and reports)."""
        self.comments[len(self.instructions)] = text

    def _emit(self, inst: Instruction) -> None:
        self.instructions.append(inst)

    def _stride(self, step: int, depth_key: str) -> int | None:
        """log2(step) if ``step`` is a power of two the architecture encodes, else None."""
        if step < 1 or step & (step - 1):
            return None
        e = step.bit_length() - 1
        return e if e < getattr(self.arch, depth_key) else None

    def _max_run(self, *memories: str) -> int:
        limit = 1 << self.layout.operand2_address_bits
        for m in memories:
            limit = min(limit, getattr(self.arch, _DEPTH[m]))
        return limit

    def _runs(self, size: int, steps: tuple[int, ...], strides: tuple[int | None, ...], limit: int):
        """Yield (offset_index, count) pieces of a run of ``size`` vectors."""
        if any(s is None for s in strides):
            for i in range(size):
                yield i, 1
            return
        for start in range(0, size, limit):
            yield start, min(limit, size - start)

    # -- instructions ---------------------------------------------------------------------------
    def datamove(self, direction: Direction, local: int, address: int, size: int,
                 local_step: int = 1, step: int = 1) -> None:
        if size <= 0:
            return
        ls, s = self._stride(local_step, "stride0_depth"), self._stride(step, "stride1_depth")
        limit = self._max_run("local", direction.memory)
        for i, n in self._runs(size, (local_step, step), (ls, s), limit):
            self._emit(DataMove(direction, local + i * local_step, address + i * step, n,
                                ls if n > 1 else 0, s if n > 1 else 0))

    def matmul(self, local: int, acc: int, size: int, local_step: int = 1, acc_step: int = 1,
               accumulate: bool = False, zeroes: bool = False) -> None:
        if size <= 0:
            return
        ls = 0 if zeroes else self._stride(local_step, "stride0_depth")
        s = self._stride(acc_step, "stride1_depth")
        limit = self._max_run("local", "acc")
        for i, n in self._runs(size, (local_step, acc_step), (ls, s), limit):
            self._emit(MatMul(0 if zeroes else local + i * local_step, acc + i * acc_step, n,
                              ls if n > 1 else 0, s if n > 1 else 0, accumulate, zeroes))

    def load_weights(self, local: int, size: int, local_step: int = 1, zeroes: bool = False) -> None:
        ls = 0 if zeroes else self._stride(local_step, "stride0_depth")
        if ls is None:  # cannot happen for the scheduler's contiguous blocks; keep it exact anyway
            raise ValueError(f"LoadWeights step {local_step} is not encodable")
        self._emit(LoadWeights(0 if zeroes else local, size, ls if size > 1 else 0, zeroes))

    def simd(self, op: SIMDOp, dest: int = 0, left: int = 0, right: int = 0,
             write: int | None = None, read: int | None = None, accumulate: bool = False) -> None:
        self._emit(SIMD(op, dest, left, right, write or 0, read or 0,
                        read is not None, write is not None, accumulate))

    def configure(self, register: ConfigRegister, value: int) -> None:
        self._emit(Configure(register, value))

    def noop(self) -> None:
        self._emit(NoOp())

    # -- backend --------------------------------------------------------------------------------
    def program(self, name: str = "program") -> Program:
        return Program.from_instructions(self.instructions, self.layout, name)
