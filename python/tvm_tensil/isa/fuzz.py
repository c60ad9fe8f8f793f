"""Random valid instructions and programs, for round-trip and differential testing.

Every instruction drawn here passes ``check(layout)``: addresses, strides and sizes are drawn
so that each strided run stays inside its memory. ``max_size`` keeps runs short enough for
fast simulation.
"""

from __future__ import annotations

import random
from dataclasses import replace

from ..arch import Architecture
from .instructions import (
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
    TapWindow,
)
from .layout import layout_of

__all__ = [
    "random_instruction",
    "random_program",
    "power_on_preamble",
    "dump_epilogue",
    "hand_written_programs",
    "every_simd_op_program",
]


def _run(rng: random.Random, arch: Architecture, size: int, memory: str, stride_depth: int) -> tuple[int, int]:
    """(address, stride) such that ``size`` vectors with that stride fit ``memory``."""
    depth = arch.depth(memory)
    strides = [s for s in range(stride_depth) if (size - 1) * (1 << s) < depth]
    stride = rng.choice(strides)
    span = (size - 1) * (1 << stride)
    return rng.randrange(0, depth - span), stride


def _size(rng: random.Random, arch: Architecture, memories, max_size: int) -> int:
    limit = min(arch.depth(m) for m in memories)
    limit = min(limit, 1 << layout_of(arch).operand2_address_bits, max_size)
    return rng.randint(1, limit)


def random_window(rng: random.Random, arch: Architecture) -> TapWindow:
    """A random valid tap window (mostly short ones, as depthwise convs use) whose register value
    the architecture's Configure can hold."""
    bits = layout_of(arch).configure_value_bits
    while True:
        taps = rng.randint(1, min(arch.array_size, rng.choice((3, 5, 256))))
        window = TapWindow(taps, rng.randrange(taps), rng.randrange(taps), rng.choice(TapWindow.STRIDES))
        if window.value >> bits == 0:
            return window


def random_instruction(
    rng: random.Random,
    arch: Architecture,
    max_size: int = 64,
    kinds: tuple[str, ...] | None = None,
    window: TapWindow | None = None,
) -> Instruction:
    """One random valid instruction (LoadLUT excluded: no TCU has lookup tables). ``window``: the
    window register's value, if set (a window MatMul is drawn only then)."""
    kinds = kinds or ("noop", "matmul", "datamove", "loadweights", "simd", "configure")
    kind = rng.choice(kinds)
    s0, s1 = arch.stride0_depth, arch.stride1_depth
    if kind == "noop":
        return NoOp()
    if kind == "matmul" and window is not None and rng.random() < 0.4:
        # At least one vector read; at most max_size outputs and reads inside local memory.
        short = window.lead + window.trail - window.taps + 1  # reads(1) = 1 - short
        least = 1 + max(0, -(-short // window.stride))
        most = min(arch.accumulator_depth, max_size, (arch.local_depth - 1 + short) // window.stride + 1)
        outputs = rng.randint(least, max(least, most))
        zeroes = rng.random() < 0.1
        local, ls = _run(rng, arch, window.reads(outputs), "local", s0)
        acc, as_ = _run(rng, arch, outputs, "acc", s1)
        return MatMul(0 if zeroes else local, acc, outputs, 0 if zeroes else ls, as_, rng.random() < 0.5, zeroes, True)
    if kind == "configure" and window is not None and rng.random() < 0.5:
        return Configure(ConfigRegister.WINDOW, random_window(rng, arch).value)
    if kind == "matmul":
        size = _size(rng, arch, ("local", "acc"), max_size)
        zeroes = rng.random() < 0.2
        local, ls = _run(rng, arch, size, "local", s0)
        acc, as_ = _run(rng, arch, size, "acc", s1)
        if zeroes:
            local, ls = 0, 0
        return MatMul(local, acc, size, ls, as_, rng.random() < 0.5, zeroes)
    if kind == "datamove":
        direction = rng.choice(list(Direction))
        size = _size(rng, arch, ("local", direction.memory), max_size)
        local, ls = _run(rng, arch, size, "local", s0)
        addr, st = _run(rng, arch, size, direction.memory, s1)
        return DataMove(direction, local, addr, size, ls, st)
    if kind == "loadweights":
        zeroes = rng.random() < 0.2
        size = rng.randint(1, min(arch.array_size + 1, arch.local_depth, max_size + 1))
        if zeroes:
            return LoadWeights(0, size, 0, True)
        local, ls = _run(rng, arch, size, "local", s0)
        return LoadWeights(local, size, ls)
    if kind == "simd":
        r = arch.simd_registers_depth
        read, write = rng.random() < 0.8, rng.random() < 0.8
        return SIMD(
            rng.choice(list(SIMDOp)),
            dest=rng.randint(0, r),
            left=rng.randint(0, r),
            right=rng.randint(0, r),
            acc_write=rng.randrange(arch.accumulator_depth) if write else 0,
            acc_read=rng.randrange(arch.accumulator_depth) if read else 0,
            read=read,
            write=write,
            accumulate=write and rng.random() < 0.3,
            relu=arch.simd_relu and rng.random() < 0.3,
        )
    # configure: registers with no effect on data (DRAM offsets stay 0 so addresses are stable)
    reg = rng.choice(
        [
            ConfigRegister.DRAM0_CACHE,
            ConfigRegister.DRAM1_CACHE,
            ConfigRegister.TIMEOUT,
            ConfigRegister.TRACEPOINT,
            ConfigRegister.SAMPLE_INTERVAL,
        ]
    )
    return Configure(reg, rng.randrange(1 << min(16, layout_of(arch).configure_value_bits)))


def random_program(rng: random.Random, arch: Architecture, length: int, max_size: int = 64) -> list[Instruction]:
    """``length`` random instructions; with the window MatMul, the first sets the window."""
    body: list[Instruction] = []
    window = None
    if arch.window_matmul and length:
        window = random_window(rng, arch)
        body.append(Configure(ConfigRegister.WINDOW, window.value))
    while len(body) < length:
        inst = random_instruction(rng, arch, max_size, window=window)
        if isinstance(inst, Configure) and inst.register is ConfigRegister.WINDOW:
            window = TapWindow.from_value(inst.value)
        body.append(inst)
    return body


def power_on_preamble(arch: Architecture) -> list[Instruction]:
    """Instructions that put a core in the emulator's power-on state: weights, accumulators,
    local memory and SIMD registers all zero (hardware memories start with arbitrary values)."""
    from .instructions import SIMD

    n = arch.array_size
    acc = arch.accumulator_depth
    out: list[Instruction] = [LoadWeights(0, n + 1, zeroes=True), MatMul(0, 0, acc, zeroes=True)]
    out += [SIMD(SIMDOp.ZERO, dest=k) for k in range(1, arch.simd_registers_depth + 1)]
    for start in range(0, arch.local_depth, acc):
        out.append(DataMove(Direction.ACC_TO_LOCAL, start, 0, min(acc, arch.local_depth - start)))
    return out


def dump_epilogue(arch: Architecture) -> list[Instruction]:
    """Copy local memory to DRAM1[0, L) and the accumulators to DRAM1[L, L + A), so that comparing
    DRAM compares every memory. Needs dram1_depth >= L + A."""
    a, l = arch.accumulator_depth, arch.local_depth
    return [
        DataMove(Direction.LOCAL_TO_DRAM1, 0, 0, l),
        DataMove(Direction.ACC_TO_LOCAL, 0, 0, a),
        DataMove(Direction.LOCAL_TO_DRAM1, 0, l, a),
    ]


def hand_written_programs(arch: Architecture) -> dict[str, str]:
    """Small programs (assembly) that exercise each unit: for differential tests of a core."""
    n = arch.array_size
    relu = (
        [
            "datamove dram0_to_local local=0 dram0=0 size=4",
            "datamove local_to_acc local=0 acc=0 size=4",
            "simd zero dest=r1",
        ]
        if arch.simd_registers_depth
        else []
    )
    relu += [
        f"simd max read write dest=out left=in right=r1 acc_write={i + 4} acc_read={i}"
        for i in range(4)
        if arch.simd_registers_depth
    ]
    programs = {
        "matmul with bias and accumulate": f"""
            datamove dram1_to_local local=0 dram1=0 size={n + 1}
            loadweights local=0 size={n + 1}
            datamove dram0_to_local local=16 dram0=3 size=6
            matmul local=16 acc=2 size=6
            matmul accumulate local=16 acc=2 size=6
            matmul zeroes accumulate acc=8:2 size=3
        """,
        "relu via simd": "\n".join(relu),
        "every datamove direction with strides": """
            datamove dram0_to_local local=0:2 dram0=5:4 size=5
            datamove local_to_acc local=0:2 acc=1 size=5
            datamove dram1_to_local local=20 dram1=7 size=5
            datamove local_to_acc_accumulate local=20 acc=1 size=5
            datamove acc_to_local local=30:4 acc=1 size=5
            datamove local_to_dram0 local=30:4 dram0=100:2 size=5
            datamove local_to_dram1 local=20 dram1=200 size=5
        """,
    }
    if arch.window_matmul:  # windows back to back, each after another, and a plain MatMul right after
        k = min(3, n)
        w3, w2 = TapWindow(k, 1 % k, 1 % k, 1).value, TapWindow(k, 1 % k, 0, 2).value
        wide = TapWindow(n, n - 1, 0, 1).value
        programs["window matmuls"] = f"""
            datamove dram1_to_local local=0 dram1=0 size={n + 1}
            loadweights local=0 size={n + 1}
            datamove dram0_to_local local=20 dram0=0 size=16
            configure window value={w3}
            matmul window local=20 acc=0 size=7
            matmul window accumulate local=21 acc=0 size=7
            configure window value={w2}
            matmul window local=20:2 acc=8 size=4
            matmul local=20 acc=12 size=3
            configure window value={wide}
            matmul window local=22 acc=16:2 size=5
            loadweights local=1 size={k + 1}
            matmul window zeroes accumulate local=0 acc=20 size=2
            matmul window local=28 acc=24 size=4
            datamove acc_to_local local=36 acc=0 size=28
            datamove local_to_dram0 local=36 dram0=40 size=28
        """
    return programs


def every_simd_op_program(arch: Architecture) -> list[Instruction]:
    """Every SIMD op once, reading a register and the input, writing (and sometimes accumulating)."""
    from .instructions import SIMD

    r = min(1, arch.simd_registers_depth)
    body: list[Instruction] = [DataMove(Direction.DRAM0_TO_LOCAL, 0, 0, 8), DataMove(Direction.LOCAL_TO_ACC, 0, 0, 8)]
    for op in SIMDOp:
        body.append(SIMD(SIMDOp.MOVE, dest=r, left=0, read=True, acc_read=1))
        body.append(
            SIMD(
                op,
                dest=r,
                left=0,
                right=r,
                acc_write=8 + int(op) % 8,
                acc_read=2,
                read=True,
                write=True,
                accumulate=op.value % 3 == 0,
            )
        )
        if arch.simd_relu:  # and again with the ReLU flag
            body.append(replace(body[-1], acc_write=16 + int(op) % 8, relu=True))
    return body
