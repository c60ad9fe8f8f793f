"""Tensil assembly: a readable text form of programs, with assembler and disassembler.

One instruction a line: a mnemonic, then bare-word flags and ``key=value`` operands in any
order. ``;`` or ``#`` starts a comment. Numbers are decimal or ``0x`` hex. An address may
carry a step as ``ADDR:STEP`` (a power of two; the encoded stride is its log2). Sizes count
vectors. Fields left out are zero. See ``docs/isa.md`` for the grammar and examples::

    loadweights local=0x0010 size=9
    matmul accumulate local=0x0100 acc=0x0020:2 size=8
    datamove dram0_to_local local=0x0000 dram0=0x00100 size=16
    simd max read write dest=r1 left=in right=r1 acc_write=0x011 acc_read=0x010
    configure dram0_offset value=0x10

``disassemble(assemble(text))`` gives the canonical text; ``assemble`` of that gives the
same bytes.
"""

from __future__ import annotations

import re
from typing import Iterable

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
    SIMDOp,
)
from .layout import InstructionLayout
from .program import Program

__all__ = ["AsmError", "assemble", "disassemble", "format_instruction", "parse_instruction"]


class AsmError(ValueError):
    """A syntax or field error in assembly text; names the line."""

    def __init__(self, message: str, line: int | None = None):
        self.line = line
        super().__init__(f"line {line}: {message}" if line is not None else message)


_MNEMONICS = {
    "noop": NoOp,
    "matmul": MatMul,
    "datamove": DataMove,
    "loadweights": LoadWeights,
    "simd": SIMD,
    "loadlut": LoadLUT,
    "configure": Configure,
}
# (allowed flags, allowed keys) per mnemonic; a key naming an address accepts ADDR:STEP.
_SYNTAX = {
    "noop": ((), ()),
    "matmul": (("accumulate", "zeroes", "window"), ("local", "acc", "size")),
    "datamove": (tuple(d.mnemonic for d in Direction), ("local", "dram0", "dram1", "acc", "size")),
    "loadweights": (("zeroes",), ("local", "size")),
    "simd": (
        ("read", "write", "accumulate", "relu") + tuple(o.mnemonic for o in SIMDOp),
        ("dest", "left", "right", "acc_write", "acc_read"),
    ),
    "loadlut": ((), ("local", "table")),
    "configure": (tuple(r.mnemonic for r in ConfigRegister), ("value",)),
}
_STRIDED = {"local", "acc", "dram0", "dram1"}


def _number(text: str, what: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not a number (decimal or 0x hex)") from None


def _address(text: str, key: str) -> tuple[int, int]:
    """``ADDR`` or ``ADDR:STEP`` -> (address, log2 step)."""
    if ":" not in text:
        return _number(text, key), 0
    a, s = text.split(":", 1)
    step = _number(s, f"{key} step")
    if step < 1 or step & (step - 1):
        raise ValueError(f"{key}: step {step} is not a power of two (strides are log2 of the step)")
    return _number(a, key), step.bit_length() - 1


def _register(text: str, key: str) -> int:
    t = text.lower()
    if key == "dest" and t == "out":
        return 0
    if key in ("left", "right") and t == "in":
        return 0
    m = re.fullmatch(r"r(\d+)", t)
    if not m:
        want = "out" if key == "dest" else "in"
        raise ValueError(f"{key}: {text!r} is not '{want}' or a register r1, r2, ...")
    return int(m.group(1))


def parse_instruction(line: str, lineno: int | None = None) -> Instruction | None:
    """One line of assembly -> an instruction object (not yet checked against a layout)."""
    code = re.split(r"[;#]", line, maxsplit=1)[0].strip()
    if not code:
        return None
    tokens = code.split()
    mnemonic = tokens[0].lower()
    if mnemonic not in _MNEMONICS:
        raise AsmError(f"unknown mnemonic {tokens[0]!r}; expected one of {', '.join(_MNEMONICS)}", lineno)
    allowed_flags, allowed_keys = _SYNTAX[mnemonic]
    flags: list[str] = []
    keys: dict[str, str] = {}
    for tok in tokens[1:]:
        if "=" in tok:
            k, v = tok.split("=", 1)
            k = k.lower()
            if k not in allowed_keys:
                raise AsmError(
                    f"{mnemonic}: unknown operand {k!r}; expected {', '.join(allowed_keys) or 'none'}", lineno
                )
            if k in keys:
                raise AsmError(f"{mnemonic}: operand {k!r} given twice", lineno)
            keys[k] = v
        else:
            t = tok.lower()
            if t not in allowed_flags:
                raise AsmError(
                    f"{mnemonic}: unknown word {tok!r}; expected {', '.join(allowed_flags) or 'no flags'} or key=value",
                    lineno,
                )
            if t in flags:
                raise AsmError(f"{mnemonic}: {t!r} given twice", lineno)
            flags.append(t)
    try:
        return _build(mnemonic, flags, keys)
    except ValueError as e:
        raise AsmError(f"{mnemonic}: {e}", lineno) from None


def _build(mnemonic: str, flags: list[str], keys: dict[str, str]) -> Instruction:
    def addr(k):
        return _address(keys[k], k) if k in keys else (0, 0)

    def num(k, default=0):
        return _number(keys[k], k) if k in keys else default

    def size():
        if "size" not in keys:
            raise ValueError("missing operand 'size' (the number of vectors)")
        return num("size")

    if mnemonic == "noop":
        return NoOp()
    if mnemonic == "matmul":
        (la, ls), (aa, as_) = addr("local"), addr("acc")
        return MatMul(la, aa, size(), ls, as_, "accumulate" in flags, "zeroes" in flags, "window" in flags)
    if mnemonic == "datamove":
        if len(flags) != 1:
            raise ValueError("give exactly one direction: " + ", ".join(d.mnemonic for d in Direction))
        direction = Direction[flags[0].upper()]
        memory = direction.memory
        for other in ("dram0", "dram1", "acc"):
            if other != memory and other in keys:
                raise ValueError(f"direction {direction.mnemonic} moves to/from {memory}, not {other}")
        (la, ls), (a, s) = addr("local"), addr(memory)
        return DataMove(direction, la, a, size(), ls, s)
    if mnemonic == "loadweights":
        la, ls = addr("local")
        return LoadWeights(la, size(), ls, "zeroes" in flags)
    if mnemonic == "simd":
        ops = [f for f in flags if f not in ("read", "write", "accumulate", "relu")]
        if len(ops) != 1:
            raise ValueError("give exactly one op: " + ", ".join(o.mnemonic for o in SIMDOp))
        regs = {k: _register(keys[k], k) if k in keys else 0 for k in ("dest", "left", "right")}
        return SIMD(
            SIMDOp[ops[0].upper()],
            regs["dest"],
            regs["left"],
            regs["right"],
            num("acc_write"),
            num("acc_read"),
            "read" in flags,
            "write" in flags,
            "accumulate" in flags,
            "relu" in flags,
        )
    if mnemonic == "loadlut":
        la, ls = addr("local")
        return LoadLUT(la, num("table"), ls)
    # configure
    if len(flags) != 1:
        raise ValueError("give exactly one register: " + ", ".join(r.mnemonic for r in ConfigRegister))
    if "value" not in keys:
        raise ValueError("missing operand 'value'")
    return Configure(ConfigRegister[flags[0].upper()], num("value"))


def assemble(text: str, layout: InstructionLayout, name: str = "program") -> Program:
    """Assembly text -> a validated ``Program`` for ``layout``'s architecture."""
    parts = []
    pc = 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        inst = parse_instruction(line, lineno)
        if inst is None:
            continue
        try:
            parts.append(inst.to_bytes(layout))
        except InvalidInstruction as e:
            raise AsmError(str(e.at(pc)), lineno) from None
        pc += 1
    return Program(b"".join(parts), layout, name)


def _fmt_addr(key: str, address: int, stride: int) -> str:
    return f"{key}={address:#06x}" + (f":{1 << stride}" if stride else "")


def _fmt_reg(value: int, zero: str) -> str:
    return zero if value == 0 else f"r{value}"


def format_instruction(inst: Instruction) -> str:
    """The canonical assembly line of one instruction."""
    if isinstance(inst, NoOp):
        return "noop"
    if isinstance(inst, MatMul):
        words = ["matmul"] + [f for f in ("accumulate", "zeroes", "window") if getattr(inst, f)]
        words += [
            _fmt_addr("local", inst.local, inst.local_stride),
            _fmt_addr("acc", inst.acc, inst.acc_stride),
            f"size={inst.size}",
        ]
        return " ".join(words)
    if isinstance(inst, DataMove):
        d = Direction(inst.direction)
        return " ".join(
            [
                "datamove",
                d.mnemonic,
                _fmt_addr("local", inst.local, inst.local_stride),
                _fmt_addr(d.memory, inst.address, inst.stride),
                f"size={inst.size}",
            ]
        )
    if isinstance(inst, LoadWeights):
        words = ["loadweights"] + (["zeroes"] if inst.zeroes else [])
        words += [_fmt_addr("local", inst.local, inst.local_stride), f"size={inst.size}"]
        return " ".join(words)
    if isinstance(inst, SIMD):
        words = ["simd", SIMDOp(inst.op).mnemonic]
        words += [f for f in ("read", "write", "accumulate", "relu") if getattr(inst, f)]
        words += [
            f"dest={_fmt_reg(inst.dest, 'out')}",
            f"left={_fmt_reg(inst.left, 'in')}",
            f"right={_fmt_reg(inst.right, 'in')}",
            f"acc_write={inst.acc_write:#06x}",
            f"acc_read={inst.acc_read:#06x}",
        ]
        return " ".join(words)
    if isinstance(inst, LoadLUT):
        return f"loadlut {_fmt_addr('local', inst.local, inst.local_stride)} table={inst.table}"
    if isinstance(inst, Configure):
        return f"configure {ConfigRegister(inst.register).mnemonic} value={inst.value:#x}"
    raise TypeError(f"not an instruction: {inst!r}")


def disassemble(program: Program | Iterable[Instruction], with_pc: bool = False) -> str:
    """Program (or instructions) -> assembly text, one canonical line each."""
    insts = program.instructions() if isinstance(program, Program) else list(program)
    lines = []
    for pc, inst in enumerate(insts):
        line = format_instruction(inst)
        lines.append(f"{line:<72} ; pc {pc}" if with_pc else line)
    return "\n".join(lines) + ("\n" if lines else "")
