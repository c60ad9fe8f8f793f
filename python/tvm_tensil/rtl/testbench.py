"""What cocotb benches of the core share: vectors as the RTL's lane-packed integers, and the
architecture a bench was built for (passed in the environment as .tarch JSON)."""

from __future__ import annotations

import os

from ..arch import Architecture, load_arch

ARCH_ENV = "TCU_ARCH"


def pack_lanes(vec, width: int) -> int:
    """Scalars -> one integer, lane 0 in the least significant ``width`` bits (two's complement)."""
    mask = (1 << width) - 1
    return sum((int(v) & mask) << (i * width) for i, v in enumerate(vec))


def unpack_lanes(value: int, n: int, width: int) -> list[int]:
    """The inverse of ``pack_lanes``: ``n`` signed scalars."""
    lanes = [(value >> (i * width)) & ((1 << width) - 1) for i in range(n)]
    return [v - (1 << width) if v >> (width - 1) else v for v in lanes]


def arch_env(arch: Architecture) -> dict[str, str]:
    """Environment for a bench process: the architecture as .tarch JSON."""
    return {ARCH_ENV: arch.to_json()}


def arch_from_env() -> Architecture:
    """The architecture of ``arch_env`` (or a preset name / .tarch path in the variable)."""
    value = os.environ[ARCH_ENV]
    if value.lstrip().startswith("{"):
        import json

        return Architecture.from_dict(json.loads(value))
    return load_arch(value)
