"""Instruction layout: every field width, derived from an architecture (docs/isa.md).

The instruction is one unsigned integer packed least significant bit first:
operand0 | operand1 | operand2 | flags (4 bits) | opcode (4 bits), stored little-endian.
Every operand is a whole number of bytes, so operands start on byte boundaries.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..arch import Architecture


def _bits(depth: int) -> int:
    return 0 if depth <= 1 else (depth - 1).bit_length()


def _round8(x: int) -> int:
    return (x + 7) // 8 * 8


class InstructionLayout:
    """Field widths and positions for one architecture. Immutable."""

    HEADER_BITS = 8
    FLAGS_BITS = 4
    OPCODE_BITS = 4
    SIMD_OP_BITS = 4

    def __init__(self, arch: "Architecture") -> None:
        self.arch = arch
        self.local_bits = _bits(arch.local_depth)
        self.accumulator_bits = _bits(arch.accumulator_depth)
        self.dram0_bits = _bits(arch.dram0_depth)
        self.dram1_bits = _bits(arch.dram1_depth)
        self.stride0_bits = _bits(arch.stride0_depth)
        self.stride1_bits = _bits(arch.stride1_depth)

        self.operand0_address_bits = max(self.local_bits, self.accumulator_bits)
        self.operand0_bits = _round8(self.operand0_address_bits + self.stride0_bits)
        self.operand1_address_bits = max(self.local_bits, self.dram0_bits, self.dram1_bits, self.accumulator_bits)
        self.operand1_bits = _round8(self.operand1_address_bits + self.stride1_bits)

        self.simd_operand_bits = _bits(arch.simd_registers_depth + 1)
        self.simd_instruction_bits = 3 * self.simd_operand_bits + self.SIMD_OP_BITS
        self.operand2_address_bits = max(
            min(self.local_bits, self.accumulator_bits),
            min(self.local_bits, self.dram0_bits),
            min(self.local_bits, self.dram1_bits),
            self.simd_instruction_bits,
        )
        self.operand2_bits = _round8(self.operand2_address_bits)

        self.operands_bits = self.operand0_bits + self.operand1_bits + self.operand2_bits
        self.instruction_bits = self.HEADER_BITS + self.operands_bits
        self.instruction_bytes = self.instruction_bits // 8

        # Bit positions in the packed integer.
        self.operand0_shift = 0
        self.operand1_shift = self.operand0_bits
        self.operand2_shift = self.operand0_bits + self.operand1_bits
        self.flags_shift = self.operands_bits
        self.opcode_shift = self.operands_bits + self.FLAGS_BITS
        # Configure's value spans every operand bit above the 4-bit register number.
        self.configure_value_bits = self.operands_bits - 4

    @property
    def operand_bytes(self) -> tuple[int, int, int]:
        return (self.operand0_bits // 8, self.operand1_bits // 8, self.operand2_bits // 8)

    def as_dict(self) -> dict[str, int]:
        keys = (
            "instruction_bytes",
            "operand0_bits",
            "operand0_address_bits",
            "stride0_bits",
            "operand1_bits",
            "operand1_address_bits",
            "stride1_bits",
            "operand2_bits",
            "operand2_address_bits",
            "simd_operand_bits",
            "simd_instruction_bits",
        )
        return {k: getattr(self, k) for k in keys}

    def describe(self) -> str:
        d = self.as_dict()
        return "\n".join(
            [
                f"  instruction          {d['instruction_bytes']} bytes ({self.instruction_bits} bits, header 8)",
                f"  operand0             {self.operand0_bits} bits: address "
                f"{self.operand0_address_bits}, stride {self.stride0_bits}",
                f"  operand1             {self.operand1_bits} bits: address "
                f"{self.operand1_address_bits}, stride {self.stride1_bits}",
                f"  operand2             {self.operand2_bits} bits: size "
                f"{self.operand2_address_bits} (SIMD sub-instruction {self.simd_instruction_bits}: "
                f"3 x {self.simd_operand_bits} + 4)",
            ]
        )

    def __repr__(self) -> str:
        return (
            f"InstructionLayout(bytes={self.instruction_bytes}, o0={self.operand0_bits}, "
            f"o1={self.operand1_bits}, o2={self.operand2_bits})"
        )


@functools.lru_cache(maxsize=64)
def layout_of(arch: "Architecture") -> InstructionLayout:
    """The instruction layout of ``arch`` (an ``Architecture`` is a value: one layout per value)."""
    return InstructionLayout(arch)
