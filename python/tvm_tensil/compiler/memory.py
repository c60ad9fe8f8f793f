"""Memory manager: where a partition's tensors go in DRAM0 and its constants in DRAM1.

DRAM0 tensors are block-major (``placement.TensorPlacement``): walking a row of pixels in one
block is stride 1 (or the conv's stride), so no block count is ever padded; any reshape that keeps
the pixel order and the channels keeps the storage. DRAM1 constants are recipes
(``packing.ConstRecipe``) placed one after another as the scheduler asks for them.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..arch import Architecture
from ..packing import PACKERS, ConstRecipe
from ..placement import TensorPlacement


class CapacityError(MemoryError):
    """A partition needs more vectors of DRAM ``bank`` (0: feature maps, 1: weights) than the
    architecture has: ``need`` of them."""

    def __init__(self, bank: int, need: int, message: str):
        super().__init__(message)
        self.bank, self.need = bank, need


class Dram0Allocator:
    """Feature maps in DRAM0.

    Partition inputs and outputs get places of their own (the runtime writes and reads them
    around the program). Intermediates share space by liveness: a tensor occupies its range
    from the node that writes it to the last node that reads it, both included (a node never
    writes over an input it is still reading), and a dead tensor's range is reused, first fit.
    Scheduler temporaries go above everything planned.
    """

    def __init__(self, arch: Architecture):
        self.arch = arch
        self.top = 0  # high-water mark: DRAM0 vectors this partition needs

    def _check(self, need: int) -> None:
        if need > self.arch.dram0_depth:
            raise CapacityError(
                0,
                need,
                f"the partition needs {need} vectors of DRAM0, the architecture has "
                f"{self.arch.dram0_depth} (dram0_depth): a smaller input or batch fits, or an "
                f"architecture with dram0_depth >= {need}",
            )

    def alloc(self, shape: tuple[int, int, int, int], what: str, check: bool = True) -> TensorPlacement:
        """A place of its own, above everything allocated so far (``check=False``: the caller
        checks the total later, so the error can name the whole need)."""
        p = TensorPlacement(self.top, tuple(int(s) for s in shape), self.arch.array_size)
        if check:
            self._check(p.base + p.size)
        self.top += p.size
        return p

    def plan(
        self, tensors: dict[str, tuple[int, int, int, int]], lifetimes: dict[str, tuple[int, int]]
    ) -> dict[str, TensorPlacement]:
        """Places for tensors live over [first, last] steps (inclusive), reusing dead ones' space."""
        n = self.arch.array_size
        sizes = {t: TensorPlacement(0, tuple(int(v) for v in tensors[t]), n).size for t in lifetimes}
        base0 = self.top
        free: list[tuple[int, int]] = []  # (start, size), sorted, merged
        active: list[tuple[int, str, int]] = []  # (last step, tensor, start)
        places: dict[str, TensorPlacement] = {}
        top = base0
        for t in sorted(lifetimes, key=lambda k: (lifetimes[k][0], -sizes[k])):
            first, _ = lifetimes[t]
            for item in [a for a in active if a[0] < first]:  # dead before t is written
                active.remove(item)
                free.append((item[2], sizes[item[1]]))
                free = _merge(free)
            size = sizes[t]
            start = next((f for f, fs in free if fs >= size), None)
            if start is None:
                if free and free[-1][0] + free[-1][1] == top:  # grow the last free range
                    start = free.pop()[0]
                else:
                    start = top
                top = max(top, start + size)
            else:
                i = next(i for i, (f, _) in enumerate(free) if f == start)
                fs = free[i][1]
                free[i : i + 1] = [(start + size, fs - size)] if fs > size else []
            places[t] = TensorPlacement(start, tuple(int(v) for v in tensors[t]), n)
            active.append((lifetimes[t][1], t, start))
        self._check(top)
        self.top = top
        return places


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, size in sorted(ranges):
        if out and out[-1][0] + out[-1][1] == start:
            out[-1] = (out[-1][0], out[-1][1] + size)
        else:
            out.append((start, size))
    return out


class ConstTable:
    """DRAM1 contents as recipes; ``pack`` turns them into vectors. Placement never fails: ``check``
    compares the total with DRAM1 once everything is placed, so the error states the whole need.

    A recipe asked for in DRAM0 (a second stream of weights, read beside DRAM1's) goes below
    ``arch.dram0_constants_top``, the next one below it (``top0`` vectors in all): the feature maps
    grow from the bottom."""

    def __init__(self, arch: Architecture):
        self.arch = arch
        self.recipes: list[ConstRecipe] = []
        self.top = 0
        self.top0 = 0
        self._cache: dict[str, ConstRecipe] = {}

    def add(self, packer_name: str, consts: Sequence[np.ndarray], bank: int = 1, **args) -> ConstRecipe:
        """Place the packer's output in DRAM ``bank`` (identical requests share one placement)."""
        key = repr((packer_name, bank, sorted(args.items())))
        if key in self._cache:
            return self._cache[key]
        size = PACKERS[packer_name](consts, self.arch.array_size, **args).shape[0]
        if bank == 0:
            self.top0 += size
            recipe = ConstRecipe(packer_name, dict(args), self.arch.dram0_constants_top - self.top0, size, 0)
        else:
            recipe = ConstRecipe(packer_name, dict(args), self.top, size)
            self.top += size
        self.recipes.append(recipe)
        self._cache[key] = recipe
        return recipe

    def fork(self) -> "ConstTable":
        """A table that starts as this one and places on its own (an alternative's constants);
        ``commit`` keeps its placements here, otherwise they are forgotten."""
        child = ConstTable(self.arch)
        child.recipes, child.top, child.top0, child._cache = list(self.recipes), self.top, self.top0, dict(self._cache)
        return child

    def commit(self, fork: "ConstTable") -> None:
        """Keep the placements of ``fork`` (made from this table, which placed nothing since)."""
        if fork.recipes[: len(self.recipes)] != self.recipes:
            raise ValueError("commit: the fork was not made from this table as it is")
        self.recipes, self.top, self.top0, self._cache = fork.recipes, fork.top, fork.top0, fork._cache

    def check_dram0(self, maps: int) -> None:
        """The feature maps (``maps`` vectors from the bottom) and DRAM0's constants both fit."""
        if self.top0 and maps + self.top0 > self.arch.dram0_constants_top:
            need = maps + self.top0 + self.arch.dram0_depth - self.arch.dram0_constants_top
            raise CapacityError(
                0,
                need,
                f"the partition needs {maps} vectors of DRAM0 for its feature maps and {self.top0} for "
                f"weights streamed from DRAM0, the architecture has {self.arch.dram0_depth} (dram0_depth): "
                f"an architecture with dram0_depth >= {need} holds them",
            )

    def check(self) -> None:
        if self.top > self.arch.dram1_depth:
            raise CapacityError(
                1,
                self.top,
                f"the partition needs {self.top} vectors of DRAM1 for its weights, the "
                f"architecture has {self.arch.dram1_depth} (dram1_depth): an architecture with "
                f"dram1_depth >= {self.top} holds them",
            )
