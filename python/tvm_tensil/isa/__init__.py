"""The TCU instruction set: layout, instruction objects, programs, assembly (docs/isa.md)."""

from .asm import AsmError, assemble, disassemble, format_instruction, parse_instruction
from .instructions import (
    SIMD,
    ConfigRegister,
    Configure,
    DataMove,
    Direction,
    Instruction,
    InvalidInstruction,
    LoadLUT,
    LoadWeights,
    MatMul,
    NoOp,
    Opcode,
    SIMDOp,
    decode_word,
)
from .layout import InstructionLayout
from .program import Program, ProgramError, ProgramFields

__all__ = [
    "AsmError",
    "assemble",
    "disassemble",
    "format_instruction",
    "parse_instruction",
    "SIMD",
    "ConfigRegister",
    "Configure",
    "DataMove",
    "Direction",
    "Instruction",
    "InvalidInstruction",
    "LoadLUT",
    "LoadWeights",
    "MatMul",
    "NoOp",
    "Opcode",
    "SIMDOp",
    "decode_word",
    "InstructionLayout",
    "Program",
    "ProgramError",
    "ProgramFields",
]
