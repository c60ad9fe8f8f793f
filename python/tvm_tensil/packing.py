"""DRAM1 contents as recipes: a packing function (by name) and its arguments, which refer to a
partition's constants by index. The same recipe produces the ``.tdata`` at build time and again in
the runtime, when TVM delivers the weights to the module; so the packers live here, below both."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .arch import Architecture
from .numbers import SaturationCounter

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


def phase_kernel(w, phase: Sequence[int]) -> np.ndarray:
    """One output phase of a transposed conv as a conv kernel (O, I, J, J'): from the transposed
    weight (I, O, KH, KW), the taps ``ky = ry + sy * j`` in reverse order (a correlation over the
    input where the transposed conv scatters), ``phase`` = (sy, sx, ry, rx)."""
    sy, sx, ry, rx = (int(v) for v in phase)
    w = np.asarray(w)
    return w[:, :, ry::sy, rx::sx][:, :, ::-1, ::-1].transpose(1, 0, 2, 3)


def group_blocks(out_channels: int, in_channels: int, groups: int, n: int) -> list[list[int]]:
    """A grouped conv's input blocks for each output block: those holding the input channels of the
    groups its output channels belong to."""
    per_out, per_in = out_channels // groups, in_channels // groups
    out = []
    for o0 in range(0, out_channels, n):
        g0, g1 = o0 // per_out, (min(o0 + n, out_channels) - 1) // per_out
        out.append(list(range(g0 * per_in // n, ((g1 + 1) * per_in - 1) // n + 1)))
    return out


def weight_blocks(out_channels: int, in_per_group: int, groups: int, n: int) -> int:
    """Weight blocks (N x N, each N + 1 vectors in DRAM1 with its bias row) per tap of a conv of
    ``groups`` groups: every (output block, input block) pair, a depthwise conv's diagonal blocks
    (one per output block), a grouped conv's only the input blocks its groups read."""
    if groups == 1:
        return math.ceil(out_channels / n) * math.ceil(in_per_group / n)
    if in_per_group == 1 and groups == out_channels:
        return math.ceil(out_channels / n)
    return sum(len(r) for r in group_blocks(out_channels, in_per_group * groups, groups, n))


def patch_kernel(w: np.ndarray) -> np.ndarray:
    """A conv's weight (O, I, KH, KW) as the 1x1 conv over its windows: (O, KH * KW * I, 1, 1),
    input channel ``(ky * KW + kx) * I + i`` (``placement.Patches``' order)."""
    o, i, kh, kw = np.shape(w)
    return np.asarray(w).transpose(0, 2, 3, 1).reshape(o, kh * kw * i, 1, 1)


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
    phase: Sequence[int] | None = None,
    residue: Sequence[int] | None = None,
    patches: bool = False,
    window: bool = False,
    bias_rows: bool = True,
    blocks: Sequence[int] | None = None,
) -> np.ndarray:
    """Weight blocks of N+1 vectors (a bias row, then row j = input channel j). The bias row is zero,
    except with ``bias`` and ``bias_tap`` = (ky, kx): the blocks of that tap and the first input
    block then carry the bias, so the MatMul that starts each output block adds it. Without
    ``bias_rows`` (a dense conv, no ``bias``) the blocks are their N rows of weights only: a load
    reads them and then shifts in a zero bias row.

    Dense conv: blocks ordered (output block, part, input block, kh, kw); a grouped conv packs only
    the input blocks each output block reads (``group_blocks``), in the same order.
    Depthwise (groups = channels): blocks (block, part, kh, kw) with diagonal weights.
    ``residue`` = (bits, binary point): two parts (``split_residue``), the residue first; the bias
    is in the second. Without it, one part.
    ``layout`` "KM" takes a matmul weight (in features, out features) as a 1x1 conv.
    ``flatten`` = (C, H, W): the matmul's input is one NCHW feature map flattened in (c, h, w) order
    but stored block-major (vector ``(c // N) * H * W + y * W + x``, lane ``c % N``); the weight rows
    are permuted to match. (C, H, W, blocks per pixel): a library built before the block-major
    layout, whose program reads the map as (h, w, c padded to that many blocks) lanes.
    ``phase``: the weight is a transposed conv's; its phase's kernel is packed (``phase_kernel``).
    ``patches``: the conv reads its input as its windows; packed as a 1x1 conv (``patch_kernel``).
    ``window`` (depthwise): blocks (block, part, kh) for window MatMuls, row 1 + kx = tap kx of
    that kernel row, lane by lane (``bias_tap`` = (ky, 0)); rows past the row's taps are zero.
    ``blocks`` = (first, end) (depthwise): only those channel blocks' weights.
    """
    w = np.asarray(consts[weight], dtype=np.float64)
    if patches:
        w = patch_kernel(w)
    if phase is not None:
        w = phase_kernel(w, phase)
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
    reads = None  # a grouped conv's input blocks per output block: only their blocks are packed
    if groups != 1 and not (ci_g == 1 and groups == co):  # grouped: as a dense conv, zeros between groups
        reads = group_blocks(co, ci_g * groups, groups, n)
        full = np.zeros((co, ci_g * groups, kh, kw))
        for o in range(co):
            g = o // (co // groups)
            full[o, g * ci_g : (g + 1) * ci_g] = w[o]
        w, ci_g, groups = full, ci_g * groups, 1
    parts = split_residue(w, *residue) if residue else [w]
    if groups == 1:
        cbi = math.ceil(ci_g / n)
        out = np.zeros((cbo, len(parts), cbi, kh, kw, n + 1, n))
        for k, part in enumerate(parts):
            wp = np.zeros((cbo * n, cbi * n, kh, kw))
            wp[:co, :ci_g] = part
            # (ob, o, ib, j, kh, kw) -> (ob, ib, kh, kw, j, o)
            out[:, k, ..., 1:, :] = wp.reshape(cbo, n, cbi, n, kh, kw).transpose(0, 2, 4, 5, 3, 1)
        if bias is not None:  # in the first input block each output block reads
            rows = _bias_rows(consts, bias, cbo, n)
            for ob in range(cbo):
                out[ob, -1, reads[ob][0] if reads else 0, bias_tap[0], bias_tap[1], 0, :] = rows[ob]
        if not bias_rows:
            if bias is not None:
                raise ValueError("blocks without bias rows carry no bias")
            out = out[..., 1:, :]
        if reads:  # (output block, part, its input blocks, kh, kw)
            return np.concatenate([out[ob][:, ibs].reshape(-1, n) for ob, ibs in enumerate(reads)])
        return out.reshape(-1, n)
    if ci_g != 1 or groups != co:
        raise ValueError("only groups = 1 and depthwise (groups = channels) convolutions pack")
    if window and kw > n:
        raise ValueError(f"a window MatMul holds at most {n} taps a row; this kernel has {kw}")
    # Blocks (b, part, kh, kw) of diagonal weights, or (b, part, kh) of a row's taps as rows 1..kw.
    out = np.zeros((cbo, len(parts), kh) + (() if window else (kw,)) + (n + 1, n))
    idx = np.arange(n)
    for k, part in enumerate(parts):
        wp = np.zeros((cbo * n, kh, kw))
        wp[:co] = part[:, 0]
        lanes = wp.reshape(cbo, n, kh, kw).transpose(0, 2, 3, 1)  # (b, kh, kw, lane)
        part_blocks = out[:, k]  # (a view: an integer beside the index arrays would move their axis first)
        if window:
            part_blocks[:, :, 1 : kw + 1, :] = lanes
        else:
            part_blocks[..., 1 + idx, idx] = lanes
    if bias is not None:
        tap = tuple(bias_tap[:1] if window else bias_tap)
        out[(slice(None), -1, *tap, 0)] = _bias_rows(consts, bias, cbo, n)
    if blocks is not None:
        out = out[blocks[0] : blocks[1]]
    return out.reshape(-1, n)


def split_residue(w, bits: int, binary_point: int) -> list[np.ndarray]:
    """``w`` as [residue, rounded]: ``rounded`` is ``w`` on the data type's grid (as the packing
    rounds it), ``residue`` what that rounding left times ``2**bits``, so that
    ``rounded + residue / 2**bits`` is ``w`` within half a unit of a grid ``2**bits`` times finer."""
    scaled = np.asarray(w, dtype=np.float64) * 2.0**binary_point
    grid = np.floor(scaled + 0.5)
    return [(scaled - grid) * 2.0 ** (bits - binary_point), grid / 2.0**binary_point]


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
def pack_channel_vectors(
    consts, n: int, channels: int, values: int | None = None, fill: float = 0.0, blocks: Sequence[int] | None = None
) -> np.ndarray:
    """One vector per channel block: a constant (e.g. a bias) or ``fill`` everywhere; ``blocks`` =
    (first, end): only those."""
    count = math.ceil(channels / n)
    out = np.zeros(count * n)
    if values is None:
        out[:channels] = fill
    else:
        out[:channels] = np.asarray(consts[values], dtype=np.float64).reshape(-1)
    out = out.reshape(count, n)
    return out[blocks[0] : blocks[1]] if blocks is not None else out


@packer("streamed_dense")
def pack_streamed_dense(
    consts, n: int, weight: int, chunks: Sequence[int], layout: str = "OIHW", flatten: Sequence[int] | None = None
) -> np.ndarray:
    """A dense layer's weights as streamed MatMul inputs (``compiler/schedule/dense.py``): for each
    chunk ``c`` of ``chunks`` (N input features), one vector per output feature ``k`` holding
    ``W[cN + j, k]`` in lane ``j``."""
    blocks = pack_conv_weights(consts, n, weight, 1, layout, flatten, bias_rows=False)
    w = np.asarray(consts[weight])
    classes = w.shape[1] if layout == "KM" else w.shape[0]
    cbo = math.ceil(classes / n)
    grid = blocks.reshape(cbo, -1, n, n)  # (output block, input block, row j, lane o)
    rows = [grid[:, c].transpose(0, 2, 1).reshape(cbo * n, n)[:classes] for c in chunks]
    return np.concatenate(rows) if rows else np.zeros((0, n))


@packer("lane_moves")
def pack_lane_moves(consts, n: int) -> np.ndarray:
    """2N blocks of N rows of 0/1 weights (a bias row of zeros is shifted in after them): block
    ``j`` moves input lane ``j`` to output lane 0, block ``N + j`` input lane 0 to output lane ``j``."""
    out = np.zeros((2 * n, n, n))
    idx = np.arange(n)
    out[idx, idx, 0] = 1.0
    out[n + idx, 0, idx] = 1.0
    return out.reshape(-1, n)


@packer("fill")
def pack_fill(consts, n: int, values: Sequence) -> np.ndarray:
    """One vector per value (constants for SIMD operands): a number in every lane, or a list of
    lane values (per-channel constants)."""
    out = np.zeros((len(values), n))
    for i, v in enumerate(values):
        out[i] = v if np.isscalar(v) else np.asarray(v, dtype=np.float64)[:n]
    return out


@dataclass(frozen=True)
class ConstRecipe:
    packer: str
    args: dict[str, Any]
    base: int
    size: int
    bank: int = 1  # the DRAM bank that holds it (0: beside the feature maps, a second stream of weights)

    def to_json(self) -> dict:
        d = {"packer": self.packer, "args": self.args, "base": self.base, "size": self.size}
        return d | ({"bank": self.bank} if self.bank != 1 else {})

    @classmethod
    def from_json(cls, d: dict) -> "ConstRecipe":
        return cls(d["packer"], d["args"], d["base"], d["size"], int(d.get("bank", 1)))


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
    recipes: Sequence[ConstRecipe], consts: Sequence[np.ndarray], arch: Architecture, sat=None, bank: int = 1
) -> tuple[int, np.ndarray]:
    """DRAM ``bank``'s constants as (vectors, N) fixed-point integers, and the vector they start at
    (DRAM1's at 0)."""
    mine = [r for r in recipes if r.bank == bank]
    start = min((r.base for r in mine), default=0) if bank == 0 else 0
    total = max((r.base + r.size for r in mine), default=start) - start
    out = np.zeros((total, arch.array_size), dtype=np.int64)
    for r, block in _packed_blocks(mine, consts, arch, sat):
        out[r.base - start : r.base - start + r.size] = block
    return start, out


def count_saturated_consts(recipes: Sequence[ConstRecipe], consts: Sequence[np.ndarray], arch: Architecture) -> int:
    """How many constant scalars the data type clips (without holding the packed DRAM1 image)."""
    sat = SaturationCounter()
    for _ in _packed_blocks(recipes, consts, arch, sat):
        pass
    return sat.count


def derive_constants(constants: Sequence[np.ndarray], derived: Sequence[Sequence[int]]) -> list:
    """The model's constants followed by the derived ones (as ``apply_shifts`` made them)."""
    out = list(constants)
    for source, shift in derived:
        out.append(np.asarray(out[int(source)], dtype=np.float32) * np.float32(2.0 ** int(shift)))
    return out
