"""TCU instructions as objects, with exact encode/decode (docs/isa.md).

Conventions used by every instruction object:

- ``size`` is the number of vectors moved or processed (at least 1). The binary field holds
  ``size - 1`` (docs/isa.md).
- ``*_stride`` is the encoded stride: log2 of the step between vectors (0 = consecutive).
- Addresses count vectors in the memory named by the field.

``check(layout)`` raises ``InvalidInstruction`` naming the instruction and the field for any
value the hardware cannot encode or that reaches outside a memory.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import IntEnum, IntFlag
from typing import TYPE_CHECKING, ClassVar

from ..arch import DEPTH_FIELDS

if TYPE_CHECKING:
    from .layout import InstructionLayout

__all__ = [
    "Opcode",
    "Direction",
    "MatMulFlag",
    "LoadWeightsFlag",
    "SIMDFlag",
    "SIMDOp",
    "ConfigRegister",
    "TapWindow",
    "InvalidInstruction",
    "Instruction",
    "NoOp",
    "MatMul",
    "DataMove",
    "LoadWeights",
    "SIMD",
    "LoadLUT",
    "Configure",
    "decode_word",
]


class Opcode(IntEnum):
    NOOP = 0x0
    MATMUL = 0x1
    DATAMOVE = 0x2
    LOADWEIGHTS = 0x3
    SIMD = 0x4
    LOADLUT = 0x5
    CONFIGURE = 0xF


class Direction(IntEnum):
    """DataMove directions (the DataMove flags field)."""

    DRAM0_TO_LOCAL = 0
    LOCAL_TO_DRAM0 = 1
    DRAM1_TO_LOCAL = 2
    LOCAL_TO_DRAM1 = 3
    ACC_TO_LOCAL = 12
    LOCAL_TO_ACC = 13
    LOCAL_TO_ACC_ACCUMULATE = 15

    @property
    def memory(self) -> str:
        """The memory of operand1: ``dram0``, ``dram1`` or ``acc``."""
        return _DIRECTION_MEMORY[self]

    @property
    def to_local(self) -> bool:
        return self in (Direction.DRAM0_TO_LOCAL, Direction.DRAM1_TO_LOCAL, Direction.ACC_TO_LOCAL)

    @property
    def mnemonic(self) -> str:
        return self.name.lower()


_DIRECTION_MEMORY = {
    Direction.DRAM0_TO_LOCAL: "dram0",
    Direction.LOCAL_TO_DRAM0: "dram0",
    Direction.DRAM1_TO_LOCAL: "dram1",
    Direction.LOCAL_TO_DRAM1: "dram1",
    Direction.ACC_TO_LOCAL: "acc",
    Direction.LOCAL_TO_ACC: "acc",
    Direction.LOCAL_TO_ACC_ACCUMULATE: "acc",
}


class DataMoveBit(IntFlag):
    """The bits of a DataMove direction between DRAM and local memory (directions 0-3)."""

    TO_DRAM = 1  # local -> DRAM (else DRAM -> local)
    DRAM1 = 2  # DRAM1 (else DRAM0)


class MatMulFlag(IntFlag):
    """MatMul flag bits."""

    ACCUMULATE = 1  # add to the accumulators instead of overwriting them
    ZEROES = 2  # feed zero vectors (local memory is not read): the output is the bias row
    WINDOW = 4  # (ours) a 1-D depthwise window over the vectors read (``TapWindow``)


class LoadWeightsFlag(IntFlag):
    """LoadWeights flag bits."""

    ZEROES = 1  # shift in zero vectors instead of reading local memory


class SIMDFlag(IntFlag):
    """SIMD flag bits."""

    READ = 1  # the input is the accumulator at operand1 (else zeros)
    WRITE = 2  # the result goes to the accumulator at operand0
    ACCUMULATE = 4  # ... added to it instead of overwriting it
    RELU = 8  # (ours) the result is max(result, 0): an op and a ReLU as one instruction


class SIMDOp(IntEnum):
    NOOP = 0
    ZERO = 1
    MOVE = 2
    NOT = 3
    AND = 4
    OR = 5
    INCREMENT = 6
    DECREMENT = 7
    ADD = 8
    SUBTRACT = 9
    MULTIPLY = 10
    ABS = 11
    GREATER_THAN = 12
    GREATER_THAN_EQUAL = 13
    MIN = 14
    MAX = 15

    @property
    def unary(self) -> bool:
        return self in _UNARY

    @property
    def mnemonic(self) -> str:
        return self.name.lower()


_UNARY = {SIMDOp.MOVE, SIMDOp.NOT, SIMDOp.INCREMENT, SIMDOp.DECREMENT, SIMDOp.ABS}


class ConfigRegister(IntEnum):
    DRAM0_OFFSET = 0
    DRAM0_CACHE = 1
    DRAM1_OFFSET = 4
    DRAM1_CACHE = 5
    TIMEOUT = 8
    TRACEPOINT = 9
    PROGRAM_COUNTER = 10
    SAMPLE_INTERVAL = 11
    WINDOW = 12  # (ours) the tap window of MatMuls with the window flag (``TapWindow``)

    @property
    def mnemonic(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class TapWindow:
    """The window of a MatMul with the window flag (ours; docs/isa.md, "Window MatMul").

    The MatMul reads ``reads(outputs)`` vectors ``in[0..]``; the stream is ``lead`` zero vectors,
    those vectors, then ``trail`` zero vectors; output ``i`` is, lane by lane, the bias plus
    ``W[j+1] * stream[i*stride + j]`` for ``j`` in ``0..taps-1``, accumulated one tap at a time
    like a plain MatMul's inputs (each lane ``o`` uses lane ``o`` of every vector: a depthwise
    convolution along the vectors, ``taps`` wide)."""

    taps: int
    lead: int = 0
    trail: int = 0
    stride: int = 1

    # Register bits: taps - 1 (8), lead (8), trail (8), log2 stride (2); nothing above.
    STRIDES: ClassVar[tuple[int, ...]] = (1, 2, 4, 8)
    BITS: ClassVar[int] = 26

    def problem(self, array_size: int) -> str | None:
        """Why this window is not one the array can run, or None."""
        if not 1 <= self.taps <= min(array_size, 256):
            return f"{self.taps} taps: a window has 1..{min(array_size, 256)} taps (one per weight row)"
        if not (0 <= self.lead < self.taps and 0 <= self.trail < self.taps):
            return f"padding {self.lead}/{self.trail} with {self.taps} taps: each side pads 0..taps-1 vectors"
        if self.stride not in self.STRIDES:
            return f"stride {self.stride}: allowed {', '.join(map(str, self.STRIDES))}"
        return None

    @property
    def value(self) -> int:
        return (self.taps - 1) | self.lead << 8 | self.trail << 16 | self.STRIDES.index(self.stride) << 24

    @staticmethod
    def fields(value):
        """(taps, lead, trail, stride) of register values: an int, or a numpy array of them (bits
        above ``BITS`` ignored)."""
        return (value & 0xFF) + 1, (value >> 8) & 0xFF, (value >> 16) & 0xFF, 1 << ((value >> 24) & 3)

    @classmethod
    def from_value(cls, value: int) -> "TapWindow":
        """The window a register value holds."""
        return cls(*cls.fields(value))

    def reads(self, outputs: int) -> int:
        """Vectors read from local memory for ``outputs`` outputs (at least 1 for a valid MatMul)."""
        return (outputs - 1) * self.stride + self.taps - self.lead - self.trail

    def fitting(self, length: int, outputs: int) -> "TapWindow":
        """This window with ``trail`` set so that ``outputs`` outputs read at most ``length`` vectors
        (exactly, unless the last outputs do not reach the end)."""
        trail = max(0, (outputs - 1) * self.stride + self.taps - self.lead - length)
        return TapWindow(self.taps, self.lead, trail, self.stride)


# Vectors a DRAM reader's response queue holds. Half full, its responses go first on local memory's
# port B; until then the weights engine's reads do, so a LoadWeights under a DRAM stream reads at full
# rate while up to half a queue of responses wait (the RTL package and the latency model have it).
RESPONSE_QUEUE_DEPTH = 32

# Configure registers' values after reset (the others are 0): a timeout of 100 cycles, no tracepoint.
CONFIG_RESET_VALUES = {ConfigRegister.TIMEOUT: 100, ConfigRegister.TRACEPOINT: 0xFFFFFFFF}


class Engine(IntEnum):
    """The core's engines, each running one instruction at a time; the values are their bit
    positions in the dispatcher's start, ready and busy vectors (the RTL package has them). The DRAM
    engines come last, each bank's reader before its writer: the dispatcher and the latency model
    find a DRAM engine's partner and the other bank's by that order."""

    COMPUTE = 0  # MatMul
    MOVE = 1  # DataMove between local memory and the accumulators (the SIMD pipeline beside it)
    WEIGHTS = 2  # LoadWeights
    DRAM0_READER = 3  # DataMove DRAM0 -> local
    DRAM0_WRITER = 4  # DataMove local -> DRAM0
    DRAM1_READER = 5
    DRAM1_WRITER = 6

    @classmethod
    def of_datamove(cls, direction: "Direction") -> "Engine":
        """The engine that runs a DataMove in ``direction``."""
        return _DATAMOVE_ENGINE.get(Direction(direction), cls.MOVE)


_DATAMOVE_ENGINE = {
    Direction.DRAM0_TO_LOCAL: Engine.DRAM0_READER,
    Direction.LOCAL_TO_DRAM0: Engine.DRAM0_WRITER,
    Direction.DRAM1_TO_LOCAL: Engine.DRAM1_READER,
    Direction.LOCAL_TO_DRAM1: Engine.DRAM1_WRITER,
}


class InvalidInstruction(ValueError):
    """An instruction field the TCU cannot encode or execute.

    ``instruction`` is the instruction's name, ``field`` the offending field, ``pc`` the
    program counter when known.
    """

    def __init__(self, instruction: str, field: str, message: str, pc: int | None = None):
        self.instruction = instruction
        self.field = field
        self.reason = message
        self.pc = pc
        super().__init__(self._text())

    def _text(self) -> str:
        where = f"pc {self.pc}: " if self.pc is not None else ""
        return f"{where}{self.instruction}: field '{self.field}': {self.reason}"

    def at(self, pc: int) -> "InvalidInstruction":
        return InvalidInstruction(self.instruction, self.field, self.reason, pc)


# -- field helpers ----------------------------------------------------------------------------


def _depth(layout: "InstructionLayout", memory: str) -> int:
    return layout.arch.depth(memory)


def _check_int(name: str, field: str, value, lo: int, hi: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInstruction(name, field, f"{value!r} is not an integer")
    if not lo <= value <= hi:
        raise InvalidInstruction(name, field, f"{value} is out of range; {what}")


def _check_address(layout, name: str, field: str, memory: str, address, stride, size, used=True):
    """Address/stride of one operand; when ``used``, the whole strided run must fit."""
    depth = _depth(layout, memory)
    stride_field = "stride0" if field in ("local", "acc_write") else "stride1"
    stride_depth = getattr(layout.arch, f"{stride_field}_depth")
    stride_name = f"{field}_stride"
    _check_int(
        name,
        stride_name,
        stride,
        0,
        stride_depth - 1,
        f"strides are log2 of the step and this architecture encodes 0..{stride_depth - 1} "
        f"({stride_field}_depth = {stride_depth}), i.e. steps 1..{1 << (stride_depth - 1)}",
    )
    if not used:
        bits = layout.operand0_address_bits if stride_field == "stride0" else layout.operand1_address_bits
        _check_int(name, field, address, 0, (1 << bits) - 1, f"the field holds {bits} bits")
        return
    _check_int(
        name,
        field,
        address,
        0,
        depth - 1,
        f"{memory} addresses are 0..{depth - 1} ({DEPTH_FIELDS[memory]} = {depth})",
    )
    last = address + (size - 1) * (1 << stride)
    if last >= depth:
        raise InvalidInstruction(
            name,
            field,
            f"{size} vectors from {memory} address {address} with step {1 << stride} end at "
            f"{last}, beyond {DEPTH_FIELDS[memory]} = {depth}",
        )


def _check_size(layout, name: str, size, memories: tuple[str, ...]) -> None:
    limit = min(_depth(layout, m) for m in memories)
    field_max = 1 << layout.operand2_address_bits
    hi = min(limit, field_max)
    if isinstance(size, int) and not isinstance(size, bool) and size < 1:
        raise InvalidInstruction(name, "size", f"{size} vectors: size counts vectors and must be at least 1")
    _check_int(
        name,
        "size",
        size,
        1,
        hi,
        f"size counts vectors: 1..{hi} here (bounded by the depth of {' and '.join(memories)})",
    )


def _check_flag(name: str, field: str, value) -> None:
    if not isinstance(value, bool):
        raise InvalidInstruction(name, field, f"{value!r} is not a boolean flag")


def _as_member(instruction: "Instruction", field: str, enum) -> None:
    """A plain value of an enum field becomes the member, once, at construction (the instructions are
    frozen); a value that is no member stays as given for ``check`` to name."""
    value = getattr(instruction, field)
    if not isinstance(value, enum):
        try:
            object.__setattr__(instruction, field, enum(value))
        except (ValueError, TypeError):
            pass


def _pack_operand(address: int, stride: int, address_bits: int) -> int:
    return address | (stride << address_bits)


# -- instructions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    """Base class. Subclasses define ``opcode`` and their fields."""

    opcode: ClassVar[Opcode]
    name: ClassVar[str]

    def check(self, layout: "InstructionLayout") -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def flags(self) -> int:
        return 0

    def operands(self, layout: "InstructionLayout") -> tuple[int, int, int]:
        return (0, 0, 0)

    def encode(self, layout: "InstructionLayout") -> int:
        """The instruction as one unsigned integer (validated first)."""
        self.check(layout)
        o0, o1, o2 = self.operands(layout)
        return (
            o0 << layout.operand0_shift
            | o1 << layout.operand1_shift
            | o2 << layout.operand2_shift
            | self.flags() << layout.flags_shift
            | int(self.opcode) << layout.opcode_shift
        )

    def to_bytes(self, layout: "InstructionLayout") -> bytes:
        return self.encode(layout).to_bytes(layout.instruction_bytes, "little")

    def field_values(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class NoOp(Instruction):
    opcode: ClassVar[Opcode] = Opcode.NOOP
    name: ClassVar[str] = "NoOp"

    def check(self, layout) -> None:
        return None


@dataclass(frozen=True)
class MatMul(Instruction):
    """Feed ``size`` local vectors (or zeros) through the array into the accumulators."""

    local: int
    acc: int
    size: int
    local_stride: int = 0
    acc_stride: int = 0
    accumulate: bool = False
    zeroes: bool = False
    # (ours) a depthwise window over the vectors read (``TapWindow``, set by Configure): ``size``
    # counts the outputs; how many vectors it reads depends on the window register.
    window: bool = False

    opcode: ClassVar[Opcode] = Opcode.MATMUL
    name: ClassVar[str] = "MatMul"

    def check(self, layout) -> None:
        _check_flag(self.name, "accumulate", self.accumulate)
        _check_flag(self.name, "zeroes", self.zeroes)
        _check_flag(self.name, "window", self.window)
        if self.window and not layout.arch.window_matmul:
            raise InvalidInstruction(
                self.name, "window", "this architecture has no window MatMul (set tvm_tensil.window_matmul)"
            )
        _check_size(layout, self.name, self.size, ("local", "acc"))
        # A window MatMul's read run depends on the window register: checked over the program.
        _check_address(
            layout, self.name, "local", "local", self.local, self.local_stride,
            1 if self.window else self.size, used=not self.zeroes,
        )  # fmt: skip
        _check_address(layout, self.name, "acc", "acc", self.acc, self.acc_stride, self.size)

    def flags(self) -> int:
        return int(
            MatMulFlag.ACCUMULATE * self.accumulate | MatMulFlag.ZEROES * self.zeroes | MatMulFlag.WINDOW * self.window
        )

    def operands(self, layout):
        return (
            _pack_operand(self.local, self.local_stride, layout.operand0_address_bits),
            _pack_operand(self.acc, self.acc_stride, layout.operand1_address_bits),
            self.size - 1,
        )


@dataclass(frozen=True)
class DataMove(Instruction):
    """Copy ``size`` vectors between local memory and DRAM0, DRAM1 or the accumulators."""

    direction: Direction
    local: int
    address: int
    size: int
    local_stride: int = 0
    stride: int = 0

    opcode: ClassVar[Opcode] = Opcode.DATAMOVE
    name: ClassVar[str] = "DataMove"

    def __post_init__(self) -> None:
        _as_member(self, "direction", Direction)

    def check(self, layout) -> None:
        if not isinstance(self.direction, Direction):
            raise InvalidInstruction(
                self.name,
                "direction",
                f"{self.direction!r} is not a DataMove direction; allowed: "
                + ", ".join(f"{d.value} ({d.mnemonic})" for d in Direction),
            )
        memory = self.direction.memory
        _check_size(layout, self.name, self.size, ("local", memory))
        _check_address(layout, self.name, "local", "local", self.local, self.local_stride, self.size)
        _check_address(layout, self.name, "address", memory, self.address, self.stride, self.size)

    def flags(self) -> int:
        return int(self.direction)

    def operands(self, layout):
        return (
            _pack_operand(self.local, self.local_stride, layout.operand0_address_bits),
            _pack_operand(self.address, self.stride, layout.operand1_address_bits),
            self.size - 1,
        )


@dataclass(frozen=True)
class LoadWeights(Instruction):
    """Shift ``size`` vectors (normally N+1: bias row, then one row per input) into the array."""

    local: int
    size: int
    local_stride: int = 0
    zeroes: bool = False

    opcode: ClassVar[Opcode] = Opcode.LOADWEIGHTS
    name: ClassVar[str] = "LoadWeights"

    def check(self, layout) -> None:
        _check_flag(self.name, "zeroes", self.zeroes)
        depth = layout.arch.local_depth
        if isinstance(self.size, int) and not isinstance(self.size, bool) and self.size < 1:
            raise InvalidInstruction(
                self.name, "size", f"{self.size} vectors: size counts vectors and must be at least 1"
            )
        _check_int(self.name, "size", self.size, 1, depth, f"size counts vectors: 1..{depth} (local_depth = {depth})")
        _check_address(
            layout, self.name, "local", "local", self.local, self.local_stride, self.size, used=not self.zeroes
        )

    def flags(self) -> int:
        return int(LoadWeightsFlag.ZEROES * self.zeroes)

    def operands(self, layout):
        return (
            _pack_operand(self.local, self.local_stride, layout.operand0_address_bits),
            self.size - 1,
            0,
        )


@dataclass(frozen=True)
class SIMD(Instruction):
    """One vector through the SIMD ALUs: ``op(left, right)`` to a register and/or accumulators.

    Sources: 0 = the input (``acc[acc_read]`` when ``read``, else zeros), k = register k.
    Destination: 0 = output only, k = output and register k.
    """

    op: SIMDOp
    dest: int = 0
    left: int = 0
    right: int = 0
    acc_write: int = 0
    acc_read: int = 0
    read: bool = False
    write: bool = False
    accumulate: bool = False
    # (ours) the result is max(result, 0), before it reaches the register and the accumulators.
    relu: bool = False

    opcode: ClassVar[Opcode] = Opcode.SIMD
    name: ClassVar[str] = "SIMD"

    def __post_init__(self) -> None:
        _as_member(self, "op", SIMDOp)

    def check(self, layout) -> None:
        if not isinstance(self.op, SIMDOp):
            raise InvalidInstruction(self.name, "op", f"{self.op!r} is not a SIMD op (0..15)")
        for f in ("read", "write", "accumulate", "relu"):
            _check_flag(self.name, f, getattr(self, f))
        if self.relu and not layout.arch.simd_relu:
            raise InvalidInstruction(
                self.name, "relu", "this architecture has no SIMD ReLU flag (set tvm_tensil.simd_relu)"
            )
        r = layout.arch.simd_registers_depth
        for f in ("dest", "left", "right"):
            _check_int(
                self.name,
                f,
                getattr(self, f),
                0,
                r,
                f"0 is the {'output' if f == 'dest' else 'input'}, 1..{r} the registers (simd_registers_depth = {r})",
            )
        _check_address(layout, self.name, "acc_write", "acc", self.acc_write, 0, 1, used=self.write)
        _check_address(layout, self.name, "acc_read", "acc", self.acc_read, 0, 1, used=self.read)

    def flags(self) -> int:
        return int(
            SIMDFlag.READ * self.read | SIMDFlag.WRITE * self.write | SIMDFlag.ACCUMULATE * self.accumulate
            | SIMDFlag.RELU * self.relu
        )  # fmt: skip

    def sub_instruction(self, layout) -> int:
        b = layout.simd_operand_bits
        return self.dest | self.right << b | self.left << (2 * b) | int(self.op) << (3 * b)

    def operands(self, layout):
        return (self.acc_write, self.acc_read, self.sub_instruction(layout))


@dataclass(frozen=True)
class LoadLUT(Instruction):
    """Load a lookup table (part of the ISA; no TCU preset has lookup tables)."""

    local: int
    table: int
    local_stride: int = 0

    opcode: ClassVar[Opcode] = Opcode.LOADLUT
    name: ClassVar[str] = "LoadLUT"

    def check(self, layout) -> None:
        _check_address(layout, self.name, "local", "local", self.local, self.local_stride, 1)
        _check_int(
            self.name,
            "table",
            self.table,
            0,
            (1 << layout.operand1_bits) - 1,
            f"the field holds {layout.operand1_bits} bits",
        )

    def operands(self, layout):
        return (_pack_operand(self.local, self.local_stride, layout.operand0_address_bits), self.table, 0)


@dataclass(frozen=True)
class Configure(Instruction):
    """Set a configuration register (docs/isa.md)."""

    register: ConfigRegister
    value: int

    opcode: ClassVar[Opcode] = Opcode.CONFIGURE
    name: ClassVar[str] = "Configure"

    def __post_init__(self) -> None:
        _as_member(self, "register", ConfigRegister)

    def check(self, layout) -> None:
        if not isinstance(self.register, ConfigRegister):
            raise InvalidInstruction(
                self.name,
                "register",
                f"{self.register!r} is not a configuration register; allowed: "
                + ", ".join(f"{r.value} ({r.mnemonic})" for r in ConfigRegister),
            )
        bits = layout.configure_value_bits
        _check_int(self.name, "value", self.value, 0, (1 << bits) - 1, f"the value field holds {bits} bits")
        if self.register is ConfigRegister.WINDOW:
            if not layout.arch.window_matmul:
                raise InvalidInstruction(
                    self.name, "register", "this architecture has no window MatMul (set tvm_tensil.window_matmul)"
                )
            problem = TapWindow.from_value(self.value).problem(layout.arch.array_size)
            if problem or self.value >> TapWindow.BITS:
                raise InvalidInstruction(self.name, "value", f"not a tap window: {problem or 'bits above 25 set'}")

    def encode(self, layout) -> int:
        self.check(layout)
        return int(self.register) | self.value << 4 | int(self.opcode) << layout.opcode_shift


INSTRUCTION_CLASSES: dict[Opcode, type[Instruction]] = {
    cls.opcode: cls for cls in (NoOp, MatMul, DataMove, LoadWeights, SIMD, LoadLUT, Configure)
}


# -- decoding -----------------------------------------------------------------------------------


def _split(raw: int, address_bits: int, stride_bits: int, total_bits: int, name: str, operand: str):
    address = raw & ((1 << address_bits) - 1)
    stride = (raw >> address_bits) & ((1 << stride_bits) - 1)
    if raw >> (address_bits + stride_bits):
        raise InvalidInstruction(
            name,
            operand,
            f"padding bits {address_bits + stride_bits}..{total_bits - 1} are not zero",
        )
    return address, stride


def _require_zero(value: int, name: str, operand: str, what: str = "is unused and must be zero"):
    if value:
        raise InvalidInstruction(name, operand, f"{what} (holds {value:#x})")


def decode_word(word: int, layout: "InstructionLayout") -> Instruction:
    """Decode one instruction from its integer form; raises ``InvalidInstruction``."""
    opcode = (word >> layout.opcode_shift) & 0xF
    flags = (word >> layout.flags_shift) & 0xF
    o0 = (word >> layout.operand0_shift) & ((1 << layout.operand0_bits) - 1)
    o1 = (word >> layout.operand1_shift) & ((1 << layout.operand1_bits) - 1)
    o2 = (word >> layout.operand2_shift) & ((1 << layout.operand2_bits) - 1)
    a0, s0, a1, s1 = (
        layout.operand0_address_bits,
        layout.stride0_bits,
        layout.operand1_address_bits,
        layout.stride1_bits,
    )
    try:
        op = Opcode(opcode)
    except ValueError:
        raise InvalidInstruction(
            f"opcode {opcode:#x}",
            "opcode",
            "unknown opcode; valid: " + ", ".join(f"{o.value:#x} ({INSTRUCTION_CLASSES[o].name})" for o in Opcode),
        ) from None
    cls = INSTRUCTION_CLASSES[op]
    name = cls.name

    def flag_bits(allowed: int):
        if flags & ~allowed:
            raise InvalidInstruction(
                name, "flags", f"flag bits {flags:#06b} include undefined bits (allowed mask {allowed:#06b})"
            )

    if op is Opcode.NOOP:
        flag_bits(0)
        _require_zero(o0 | o1 | o2, name, "operands", "NoOp has no operands; they must be zero")
        inst: Instruction = NoOp()
    elif op is Opcode.MATMUL:
        flag_bits(0b111 if layout.arch.window_matmul else 0b11)
        local, ls = _split(o0, a0, s0, layout.operand0_bits, name, "operand0")
        acc, as_ = _split(o1, a1, s1, layout.operand1_bits, name, "operand1")
        inst = MatMul(
            local, acc, o2 + 1, ls, as_, bool(flags & MatMulFlag.ACCUMULATE), bool(flags & MatMulFlag.ZEROES),
            bool(flags & MatMulFlag.WINDOW),
        )  # fmt: skip
    elif op is Opcode.DATAMOVE:
        try:
            direction = Direction(flags)
        except ValueError:
            raise InvalidInstruction(
                name,
                "direction",
                f"{flags} is not a DataMove direction; allowed: "
                + ", ".join(f"{d.value} ({d.mnemonic})" for d in Direction),
            ) from None
        local, ls = _split(o0, a0, s0, layout.operand0_bits, name, "operand0")
        addr, st = _split(o1, a1, s1, layout.operand1_bits, name, "operand1")
        inst = DataMove(direction, local, addr, o2 + 1, ls, st)
    elif op is Opcode.LOADWEIGHTS:
        flag_bits(0b1)
        local, ls = _split(o0, a0, s0, layout.operand0_bits, name, "operand0")
        _require_zero(o2, name, "operand2")
        inst = LoadWeights(local, o1 + 1, ls, bool(flags & LoadWeightsFlag.ZEROES))
    elif op is Opcode.SIMD:
        flag_bits(0b1111 if layout.arch.simd_relu else 0b111)
        write_addr, ws = _split(o0, a0, s0, layout.operand0_bits, name, "operand0")
        read_addr, rs = _split(o1, a1, s1, layout.operand1_bits, name, "operand1")
        _require_zero(ws, name, "acc_write_stride", "SIMD addresses take no stride")
        _require_zero(rs, name, "acc_read_stride", "SIMD addresses take no stride")
        b = layout.simd_operand_bits
        m = (1 << b) - 1
        if o2 >> layout.simd_instruction_bits:
            raise InvalidInstruction(name, "operand2", "bits above the sub-instruction are not zero")
        inst = SIMD(
            SIMDOp((o2 >> (3 * b)) & 0xF),
            dest=o2 & m,
            right=(o2 >> b) & m,
            left=(o2 >> (2 * b)) & m,
            acc_write=write_addr,
            acc_read=read_addr,
            read=bool(flags & SIMDFlag.READ),
            write=bool(flags & SIMDFlag.WRITE),
            accumulate=bool(flags & SIMDFlag.ACCUMULATE),
            relu=bool(flags & SIMDFlag.RELU),
        )
    elif op is Opcode.LOADLUT:
        flag_bits(0)
        local, ls = _split(o0, a0, s0, layout.operand0_bits, name, "operand0")
        _require_zero(o2, name, "operand2")
        inst = LoadLUT(local, o1, ls)
    else:  # CONFIGURE
        flag_bits(0)
        args = word & ((1 << layout.operands_bits) - 1)
        try:
            reg = ConfigRegister(args & 0xF)
        except ValueError:
            raise InvalidInstruction(
                name,
                "register",
                f"{args & 0xF} is not a configuration register; allowed: "
                + ", ".join(f"{r.value} ({r.mnemonic})" for r in ConfigRegister),
            ) from None
        inst = Configure(reg, args >> 4)
    inst.check(layout)
    return inst
