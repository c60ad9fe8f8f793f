"""Which models' weights a device's DRAM1 holds, and where: a model's constants are written once per
device, not once per run, while DRAM1 has room for every model run on it.

Compiled models all place their constants from DRAM1 vector 0, so a second model (another partition
of the same network, or another network in the same device session) is moved: its program's DRAM1
addresses are shifted (``Program.with_dram1_offset``) to a free region at the same offset within the
AXI 4 KiB pages as its compiled place, so its bursts split exactly as compiled. When DRAM1 is full
the least recently run model is evicted and written again on its next run.
"""

from __future__ import annotations

import math
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..arch import Architecture
from ..isa.program import Program
from ..model import TensilModel

__all__ = ["ResidentDram0Consts", "ResidentWeights"]

AXI_PAGE_BYTES = 4096  # an AXI burst never crosses this boundary


@dataclass
class _Resident:
    model: weakref.ref
    lo: int  # DRAM1 region [lo, hi) where the model now sits
    hi: int
    program: Program  # the model's program for that region


class ResidentWeights:
    """The models whose weights a device's DRAM1 holds."""

    def __init__(self, arch: Architecture):
        self.depth = arch.dram1_depth
        # Moves keep a region's offset within the AXI pages: a multiple of both the page and a vector.
        self.align = math.lcm(arch.vector_bytes, AXI_PAGE_BYTES) // arch.vector_bytes
        self._resident: OrderedDict[int, _Resident] = OrderedDict()  # by id(model), least recent first
        self.writes = 0  # models whose weights were written (for tests and statistics)

    def program_for(self, model: TensilModel, write: Callable[[int, np.ndarray], None]) -> Program:
        """The program to run for ``model``, with its weights in DRAM1 (written by ``write(base,
        vectors)`` unless they are there already)."""
        key = id(model)
        entry = self._resident.get(key)
        if entry is not None and entry.model() is model:
            self._resident.move_to_end(key)
            return entry.program
        self._resident.pop(key, None)  # a dead model's id reused
        region = self._region(model)
        if region is None:
            return model.program
        lo, hi = region
        start = self._place(lo, hi - lo)
        delta = start - lo
        for const, data in model.consts:
            write(const.base + delta, data)
        self.writes += 1
        program = model.program.with_dram1_offset(delta)
        self._resident[key] = _Resident(weakref.ref(model), start, start + hi - lo, program)
        return program

    def forget(self, base: int, size: int) -> None:
        """DRAM1 vectors ``base .. base+size-1`` were overwritten by something else."""
        for key in [k for k, r in self._resident.items() if r.lo < base + size and base < r.hi]:
            del self._resident[key]

    def clear(self) -> None:
        self._resident.clear()

    # -- placement ---------------------------------------------------------------------------------
    @staticmethod
    def _region(model: TensilModel) -> tuple[int, int] | None:
        """The DRAM1 vectors the model owns: its constants and whatever its program touches."""
        spans = [(e.base, e.base + e.size) for e, _ in model.consts if e.size]
        touched = model.program.dram1_span()
        if touched is not None:
            spans.append(touched)
        if not spans:
            return None
        return min(s[0] for s in spans), max(s[1] for s in spans)

    def _free(self, start: int, size: int) -> bool:
        return (
            0 <= start
            and start + size <= self.depth
            and all(r.hi <= start or start + size <= r.lo for r in self._resident.values())
        )

    def _place(self, lo: int, size: int) -> int:
        """Where a region compiled at ``lo`` goes: its own place if free, else the lowest free place at
        the same page offset, evicting the least recently run models until one is free."""
        for key in [k for k, r in self._resident.items() if r.model() is None]:  # models gone: room
            del self._resident[key]
        while True:
            phase = lo % self.align
            candidates = [lo, phase] + [
                phase + math.ceil(max(r.hi - phase, 0) / self.align) * self.align for r in self._resident.values()
            ]
            free = [c for c in candidates if self._free(c, size)]
            if free:
                return lo if lo in free else min(free)
            if not self._resident:
                return lo  # the region alone does not fit: the program's own check reports it
            self._resident.popitem(last=False)


class ResidentDram0Consts:
    """The models whose DRAM0 constants (weights streamed from DRAM0 beside DRAM1's) a device's
    DRAM0 holds. They sit where compiled, at the top of DRAM0, so models' regions may overlap: a
    model's are written before it runs unless they are still there, and any write over them (another
    model's constants, a program's stores, ``write_dram``) forgets them."""

    def __init__(self):
        self._resident: dict[int, tuple[weakref.ref, int, int]] = {}  # by id(model): (model, lo, hi)
        self.writes = 0  # models whose DRAM0 constants were written (for tests and statistics)

    def ensure(self, model: TensilModel, write: Callable[[int, np.ndarray], None]) -> None:
        """Write ``model``'s DRAM0 constants by ``write(base, vectors)`` unless DRAM0 holds them."""
        if not model.dram0_consts:
            return
        held = self._resident.get(id(model))
        if held is not None and held[0]() is model:
            return
        for const, data in model.dram0_consts:
            write(const.base, data)  # (forgets whatever it overwrites)
        lo = min(e.base for e, _ in model.dram0_consts)
        hi = max(e.base + e.size for e, _ in model.dram0_consts)
        self._resident[id(model)] = (weakref.ref(model), lo, hi)
        self.writes += 1

    def forget(self, base: int, size: int) -> None:
        """DRAM0 vectors ``base .. base+size-1`` were overwritten by something else."""
        for key in [k for k, (_, lo, hi) in self._resident.items() if lo < base + size and base < hi]:
            del self._resident[key]

    def clear(self) -> None:
        self._resident.clear()
