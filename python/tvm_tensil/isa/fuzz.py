"""Random valid instructions and programs, for round-trip and differential testing.

Every instruction drawn here passes ``check(layout)``: addresses, strides and sizes are drawn
so that each strided run stays inside its memory. ``max_size`` keeps runs short enough for
fast simulation.
"""

from __future__ import annotations

import random

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
)

__all__ = ["random_instruction", "random_program", "power_on_preamble", "dump_epilogue"]

_DEPTHS = {"local": "local_depth", "acc": "accumulator_depth", "dram0": "dram0_depth", "dram1": "dram1_depth"}


def _run(rng: random.Random, arch: Architecture, size: int, memory: str, stride_depth: int) -> tuple[int, int]:
    """(address, stride) such that ``size`` vectors with that stride fit ``memory``."""
    depth = getattr(arch, _DEPTHS[memory])
    strides = [s for s in range(stride_depth) if (size - 1) * (1 << s) < depth]
    stride = rng.choice(strides)
    span = (size - 1) * (1 << stride)
    return rng.randrange(0, depth - span), stride


def _size(rng: random.Random, arch: Architecture, memories, max_size: int) -> int:
    limit = min(getattr(arch, _DEPTHS[m]) for m in memories)
    limit = min(limit, 1 << arch.layout.operand2_address_bits, max_size)
    return rng.randint(1, limit)


def random_instruction(rng: random.Random, arch: Architecture, max_size: int = 64,
                       kinds: tuple[str, ...] | None = None) -> Instruction:
    """One random valid instruction (LoadLUT excluded: no TCU has lookup tables)."""
    kinds = kinds or ("noop", "matmul", "datamove", "loadweights", "simd", "configure")
    kind = rng.choice(kinds)
    s0, s1 = arch.stride0_depth, arch.stride1_depth
    if kind == "noop":
        return NoOp()
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
            dest=rng.randint(0, r), left=rng.randint(0, r), right=rng.randint(0, r),
            acc_write=rng.randrange(arch.accumulator_depth) if write else 0,
            acc_read=rng.randrange(arch.accumulator_depth) if read else 0,
            read=read, write=write, accumulate=write and rng.random() < 0.3,
        )
    # configure: registers with no effect on data (DRAM offsets stay 0 so addresses are stable)
    reg = rng.choice([ConfigRegister.DRAM0_CACHE, ConfigRegister.DRAM1_CACHE, ConfigRegister.TIMEOUT,
                      ConfigRegister.TRACEPOINT, ConfigRegister.SAMPLE_INTERVAL])
    return Configure(reg, rng.randrange(1 << min(16, arch.layout.configure_value_bits)))


def random_program(rng: random.Random, arch: Architecture, length: int, max_size: int = 64) -> list[Instruction]:
    return [random_instruction(rng, arch, max_size) for _ in range(length)]


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
    return [DataMove(Direction.LOCAL_TO_DRAM1, 0, 0, l), DataMove(Direction.ACC_TO_LOCAL, 0, 0, a),
            DataMove(Direction.LOCAL_TO_DRAM1, 0, l, a)]
