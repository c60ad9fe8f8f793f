"""Memory manager: where tensors live in DRAM0 and how constants are packed into DRAM1.

DRAM0 tensors are block-major: the channel axis cut into blocks of N (one vector each), and a
block's vectors for every pixel of every image contiguous, ``[block][n][h][w]``. Walking a row
of pixels in one block is stride 1 (or the conv's stride), so no block count is ever padded;
any reshape that keeps the pixel order and the channels keeps the storage.

DRAM1 constants are described by recipes: a packing function (by name) and its arguments,
which refer to the partition's constants by index. The same recipe produces the ``.tdata``
at build time and again in the runtime, when TVM delivers the weights to the module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..arch import Architecture
from ..numbers import SaturationCounter


@dataclass(frozen=True)
class TensorPlacement:
    """A feature map (n, h, w, c) in DRAM0 starting at vector ``base``."""

    base: int
    shape: tuple[int, int, int, int]
    array_size: int
    # A batch of NCHW maps of h*w pixels flattened for a dense layer, read in place: "pixel" i is
    # image i, "block" k is (map block k // hw, map pixel k % hw), so pixels are hw apart.
    flattened_hw: int = 0

    @property
    def blocks(self) -> int:
        return math.ceil(self.shape[3] / self.array_size)

    @property
    def pixels(self) -> int:
        """Pixels of all images: the vectors of one channel block (its stride in DRAM0)."""
        n, h, w, _ = self.shape
        return n * h * w

    @property
    def size(self) -> int:
        return self.pixels * self.blocks

    def address(self, n: int, y: int, x: int, block: int) -> int:
        _, h, w, _ = self.shape
        if self.flattened_hw:
            hw = self.flattened_hw
            return self.base + (block // hw) * self.pixels * hw + ((n * h + y) * w + x) * hw + block % hw
        return self.base + block * self.pixels + (n * h + y) * w + x

    @property
    def pixel_step(self) -> int:
        """DRAM0 vectors from one pixel to the next in a channel block."""
        return self.flattened_hw or 1

    @property
    def channels_padded(self) -> int:
        """Channels rounded up to whole blocks (the last block's extra lanes are zero)."""
        return self.blocks * self.array_size

    def to_json(self) -> dict:
        return {"base": self.base, "shape": list(self.shape)}


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
            raise MemoryError(
                f"the partition needs {need} vectors of DRAM0, the architecture has "
                f"{self.arch.dram0_depth} (dram0_depth)"
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


# -- constant packing ---------------------------------------------------------------------------

PACKERS: dict[str, Callable[..., np.ndarray]] = {}


def packer(name: str):
    def register(fn):
        PACKERS[name] = fn
        return fn

    return register


def _bias_rows(consts, bias: int, blocks: int, n: int) -> np.ndarray:
    """A bias vector as one row per output channel block (zero-padded)."""
    b = np.zeros(blocks * n)
    values = np.asarray(consts[bias], dtype=np.float64).reshape(-1)
    b[: values.size] = values
    return b.reshape(blocks, n)


@packer("conv_weights")
def pack_conv_weights(
    consts,
    n: int,
    weight: int,
    groups: int,
    layout: str = "OIHW",
    flatten: Sequence[int] | None = None,
    bias: int | None = None,
    bias_tap: Sequence[int] | None = None,
) -> np.ndarray:
    """Weight blocks of N+1 vectors (a bias row, then row j = input channel j). The bias row is zero,
    except with ``bias`` and ``bias_tap`` = (ky, kx): the blocks of that tap and the first input
    block then carry the bias, so the MatMul that starts each output block adds it.

    Dense conv: blocks ordered (output block, input block, kh, kw).
    Depthwise (groups = channels): blocks (block, kh, kw) with diagonal weights.
    ``layout`` "KM" takes a matmul weight (in features, out features) as a 1x1 conv.
    ``flatten`` = (C, H, W): the matmul's input is one NCHW feature map flattened in (c, h, w) order
    but stored block-major (vector ``(c // N) * H * W + y * W + x``, lane ``c % N``); the weight rows
    are permuted to match. (C, H, W, blocks per pixel): a library built before the block-major
    layout, whose program reads the map as (h, w, c padded to that many blocks) lanes.
    """
    w = np.asarray(consts[weight], dtype=np.float64)
    if flatten is not None:
        c, h, wd = (int(v) for v in flatten[:3])
        ch = np.arange(c)[:, None, None]
        pixel = (np.arange(h)[:, None] * wd + np.arange(wd)[None, :])[None]
        blocks = int(flatten[3]) if len(flatten) == 4 else math.ceil(c / n)
        rows = pixel * blocks * n + ch if len(flatten) == 4 else ((ch // n) * h * wd + pixel) * n + ch % n
        permuted = np.zeros((blocks * h * wd * n, w.shape[1]))
        permuted[rows.reshape(-1)] = w
        w = permuted
    if layout == "KM":
        w = w.T[:, :, None, None]
    co, ci_g, kh, kw = w.shape
    cbo = math.ceil(co / n)
    if groups == 1:
        cbi = math.ceil(ci_g / n)
        wp = np.zeros((cbo * n, cbi * n, kh, kw))
        wp[:co, :ci_g] = w
        # (ob, o, ib, j, kh, kw) -> (ob, ib, kh, kw, j, o)
        blocks = wp.reshape(cbo, n, cbi, n, kh, kw).transpose(0, 2, 4, 5, 3, 1)
        out = np.zeros((cbo, cbi, kh, kw, n + 1, n))
        out[..., 1:, :] = blocks
        if bias is not None:
            out[:, 0, bias_tap[0], bias_tap[1], 0, :] = _bias_rows(consts, bias, cbo, n)
        return out.reshape(-1, n)
    if ci_g != 1 or groups != co:
        raise ValueError("only groups = 1 and depthwise (groups = channels) convolutions pack")
    wp = np.zeros((cbo * n, kh, kw))
    wp[:co] = w[:, 0]
    blocks = wp.reshape(cbo, n, kh, kw).transpose(0, 2, 3, 1)  # (b, kh, kw, j)
    out = np.zeros((cbo, kh, kw, n + 1, n))
    idx = np.arange(n)
    out[..., 1 + idx, idx] = blocks
    if bias is not None:
        out[:, bias_tap[0], bias_tap[1], 0, :] = _bias_rows(consts, bias, cbo, n)
    return out.reshape(-1, n)


@packer("identity_weights")
def pack_identity_weights(consts, n: int, channels: int, bias: int | None = None) -> np.ndarray:
    """Depthwise 1x1 blocks with ones on the diagonal, and ``bias`` in the bias rows: x -> x + bias,
    exactly."""
    blocks = math.ceil(channels / n)
    out = np.zeros((blocks, n + 1, n))
    idx = np.arange(n)
    out[:, 1 + idx, idx] = 1.0
    if bias is not None:
        out[:, 0, :] = _bias_rows(consts, bias, blocks, n)
    return out.reshape(-1, n)


def selection_blocks(segments: Sequence[Sequence[int]], n: int) -> list[tuple[int, int, int]]:
    """(segment, output block, input block) for every pair of blocks a channel selection connects.

    A segment ``(input, first, count, to)`` moves channels ``first .. first+count-1`` of an input
    to output channels ``to ..``: a concat is one segment per input, a slice one segment."""
    pairs = []
    for k, (_, first, count, to) in enumerate(segments):
        for ib in range(first // n, (first + count - 1) // n + 1):
            lo, hi = max(first, ib * n), min(first + count, (ib + 1) * n)  # input channels in this block
            for ob in range((lo - first + to) // n, (hi - 1 - first + to) // n + 1):
                pairs.append((k, ob, ib))
    return pairs


@packer("channel_selection")
def pack_channel_selection(consts, n: int, segments: Sequence[Sequence[int]]) -> np.ndarray:
    """0/1 weight blocks moving each selected input lane to its output lane (exact: x * 1.0)."""
    pairs = selection_blocks(segments, n)
    out = np.zeros((len(pairs), n + 1, n))
    for p, (k, ob, ib) in enumerate(pairs):
        _, first, count, to = segments[k]
        for j in range(n):
            ch = ib * n + j
            o = ch - first + to
            if first <= ch < first + count and o // n == ob:
                out[p, 1 + j, o % n] = 1.0
    return out.reshape(-1, n)


@packer("diagonal_weights")
def pack_diagonal_weights(consts, n: int, values: Sequence[float]) -> np.ndarray:
    """One weight block per value: zero bias row, then value * identity (x -> value * x)."""
    out = np.zeros((len(values), n + 1, n))
    idx = np.arange(n)
    out[:, 1 + idx, idx] = np.asarray(values, dtype=np.float64)[:, None]
    return out.reshape(-1, n)


@packer("channel_vectors")
def pack_channel_vectors(consts, n: int, channels: int, values: int | None = None, fill: float = 0.0) -> np.ndarray:
    """One vector per channel block: a constant (e.g. a bias) or ``fill`` everywhere."""
    blocks = math.ceil(channels / n)
    out = np.zeros(blocks * n)
    if values is None:
        out[:channels] = fill
    else:
        out[:channels] = np.asarray(consts[values], dtype=np.float64).reshape(-1)
    return out.reshape(blocks, n)


@packer("fill")
def pack_fill(consts, n: int, values: Sequence[float]) -> np.ndarray:
    """One vector per value, every lane holding it (constants for SIMD operands)."""
    return np.repeat(np.asarray(values, dtype=np.float64)[:, None], n, axis=1)


@dataclass(frozen=True)
class ConstRecipe:
    packer: str
    args: dict[str, Any]
    base: int
    size: int

    def to_json(self) -> dict:
        return {"packer": self.packer, "args": self.args, "base": self.base, "size": self.size}

    @classmethod
    def from_json(cls, d: dict) -> "ConstRecipe":
        return cls(d["packer"], d["args"], d["base"], d["size"])


class ConstTable:
    """DRAM1 contents as recipes; ``pack`` turns them into vectors. Placement never fails: ``check``
    compares the total with DRAM1 once everything is placed, so the error states the whole need."""

    def __init__(self, arch: Architecture):
        self.arch = arch
        self.recipes: list[ConstRecipe] = []
        self.top = 0
        self._cache: dict[str, ConstRecipe] = {}

    def add(self, packer_name: str, consts: Sequence[np.ndarray], **args) -> ConstRecipe:
        """Place the packer's output in DRAM1 (identical requests share one placement)."""
        key = repr((packer_name, sorted(args.items())))
        if key in self._cache:
            return self._cache[key]
        size = PACKERS[packer_name](consts, self.arch.array_size, **args).shape[0]
        recipe = ConstRecipe(packer_name, dict(args), self.top, size)
        self.top += size
        self.recipes.append(recipe)
        self._cache[key] = recipe
        return recipe

    def fork(self) -> "ConstTable":
        """A table that starts as this one and places on its own (an alternative's constants);
        ``commit`` keeps its placements here, otherwise they are forgotten."""
        child = ConstTable(self.arch)
        child.recipes, child.top, child._cache = list(self.recipes), self.top, dict(self._cache)
        return child

    def commit(self, fork: "ConstTable") -> None:
        """Keep the placements of ``fork`` (made from this table, which placed nothing since)."""
        if fork.recipes[: len(self.recipes)] != self.recipes:
            raise ValueError("commit: the fork was not made from this table as it is")
        self.recipes, self.top, self._cache = fork.recipes, fork.top, fork._cache

    def check(self) -> None:
        if self.top > self.arch.dram1_depth:
            raise MemoryError(
                f"the partition needs {self.top} vectors of DRAM1 for its weights, the "
                f"architecture has {self.arch.dram1_depth} (dram1_depth)"
            )


def _packed_blocks(recipes: Sequence[ConstRecipe], consts: Sequence[np.ndarray], arch: Architecture, sat=None):
    """Each recipe with its vectors as fixed-point integers."""
    n = arch.array_size
    for r in recipes:
        block = PACKERS[r.packer](consts, n, **r.args)
        if block.shape != (r.size, n):
            raise ValueError(
                f"constant recipe {r.packer} produced {block.shape[0]} vectors, expected {r.size} "
                "(were the weights delivered for another model?)"
            )
        yield r, arch.data_type.from_float(block, sat)


def pack_consts(
    recipes: Sequence[ConstRecipe], consts: Sequence[np.ndarray], arch: Architecture, sat=None
) -> np.ndarray:
    """All of DRAM1's constants as (vectors, N) fixed-point integers."""
    total = max((r.base + r.size for r in recipes), default=0)
    out = np.zeros((total, arch.array_size), dtype=np.int64)
    for r, block in _packed_blocks(recipes, consts, arch, sat):
        out[r.base : r.base + r.size] = block
    return out


def count_saturated_consts(recipes: Sequence[ConstRecipe], consts: Sequence[np.ndarray], arch: Architecture) -> int:
    """How many constant scalars the data type clips (without holding the packed DRAM1 image)."""
    sat = SaturationCounter()
    for _ in _packed_blocks(recipes, consts, arch, sat):
        pass
    return sat.count
