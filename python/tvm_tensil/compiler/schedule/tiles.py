"""Tile geometry: pure functions of shapes, windows and placements (no instructions).

A *tile* is a block of output pixels whose vectors, for one output channel block, fit the
accumulators; its *slab* is every input row and column the tile's window touches, all channel
blocks, loaded into local memory block-major (block ``b`` at ``slab + b * plane``).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from ...isa.instructions import Direction
from ...placement import TensorPlacement
from .context import ScheduleError, Tile, Window


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def slab_size(rows: int, cols: int, window: Window, in_blocks: int, whole_width: int | None = None) -> int:
    """Local vectors of the slab of a tile; ``whole_width``: the input's width, when the tile spans
    every output column (its slab then holds whole input rows)."""
    width = whole_width or (cols - 1) * window.sw + (window.kw - 1) * window.dw + 1
    return ((rows - 1) * window.sh + (window.kh - 1) * window.dh + 1) * width * in_blocks


def plan_tiles(
    out_shape,
    window: Window,
    in_blocks: int,
    local_free: int,
    acc_free: int,
    extra_acc_per_col: int = 0,
    store_blocks: int = 1,
    max_rows: int | None = None,
    in_w: int | None = None,
    acc_plane: bool = False,
    slab_room: bool = True,
) -> tuple[int, int]:
    """The largest tile (rows, cols) whose accumulator vectors, store buffer and input slab fit
    (``acc_plane``: one channel block of the slab in the accumulators too; ``slab_room=False``: the
    input is read where it lies, only the store buffer takes room)."""
    _, oh, ow, _ = out_shape
    cols = ow
    while cols >= 1:
        for rows in range(min(oh, max_rows or oh), 0, -1):
            vectors = rows * cols
            slab = slab_size(rows, cols, window, in_blocks, in_w if cols == ow else None)
            acc = vectors + extra_acc_per_col * cols + (slab // in_blocks if acc_plane else 0)
            if acc <= acc_free and vectors * store_blocks + (slab if slab_room else 0) <= local_free:
                return rows, cols
        cols = cols // 2 if cols > 1 else 0
    raise ScheduleError(
        "one output pixel's input window does not fit local memory "
        f"(window {window.kh}x{window.kw}, {in_blocks} channel blocks, {local_free} vectors free); "
        "use an architecture with a larger local_depth"
    )


def tiles(out_shape, rows: int, cols: int) -> list[Tile]:
    n, oh, ow, _ = out_shape
    return [
        Tile(img, y0, min(rows, oh - y0), x0, min(cols, ow - x0))
        for img in range(n)
        for y0 in range(0, oh, rows)
        for x0 in range(0, ow, cols)
    ]


def tile_runs(place: TensorPlacement, tile: Tile, buf: int, blocks=None) -> Iterator[tuple]:
    """DataMove arguments after the direction, (local, DRAM0 address, vectors[, local step, DRAM0
    step]), between a tile of ``place`` (its channel blocks ``blocks``, else all, block-major) and a
    local buffer: per block, whole rows are one run, else one per row (a phase of a map: its pixels
    strided)."""
    count = tile.pixels
    whole = count == place.pixels and place.pixel_step == 1 and not place.interleave
    if whole and blocks is None:  # the whole (single) map: one run
        yield buf, place.base, count * place.blocks
        return
    for b in range(place.blocks) if blocks is None else blocks:
        if tile.cols == place.shape[2] and place.rows_whole:
            yield buf + b * count, place.address(tile.image, tile.y0, 0, b), count
            continue
        for r in range(tile.rows):
            local, address = buf + b * count + r * tile.cols, place.address(tile.image, tile.y0 + r, tile.x0, b)
            yield (local, address, tile.cols) + ((1, place.pixel_step) if place.interleave else ())


def slab_geometry(inp_shape, tile: Tile, window: Window, padding, whole_width: bool = False):
    """The rows and columns of the input ``tile``'s window reads: ``(y_lo, y_hi, x_lo, cols)``."""
    pt, pl = padding[0], padding[1]
    _, h, w, _ = inp_shape
    y_lo = max(0, tile.y0 * window.sh - pt)
    y_hi = min(h - 1, (tile.y0 + tile.rows - 1) * window.sh - pt + (window.kh - 1) * window.dh)
    x_lo = max(0, tile.x0 * window.sw - pl)
    x_hi = min(w - 1, (tile.x0 + tile.cols - 1) * window.sw - pl + (window.kw - 1) * window.dw)
    if whole_width:
        x_lo, x_hi = 0, w - 1
    return y_lo, y_hi, x_lo, max(0, x_hi - x_lo + 1)


def slab_moves(inp: TensorPlacement, tile: Tile, window: Window, padding, slab: int, whole_width: bool = False):
    """The DRAM0 -> local moves that load ``tile``'s slab at ``slab``, and its geometry
    ``(y_lo, x_lo, cols, plane)``. ``whole_width`` (the tile spans every output column): whole
    input rows, so each block's rows are one run."""
    y_lo, y_hi, x_lo, cols = slab_geometry(inp.shape, tile, window, padding, whole_width)
    rows = max(0, y_hi - y_lo + 1)
    plane = rows * cols
    geometry = (y_lo, x_lo, cols, plane)
    step = inp.pixel_step
    if plane == inp.pixels and step == 1 and not inp.interleave:  # the whole (single) map: every block in one run
        return [(Direction.DRAM0_TO_LOCAL, slab, inp.address(tile.image, 0, 0, 0), plane * inp.blocks)], geometry
    moves = []
    for b in range(inp.blocks if plane else 0):
        if cols == inp.shape[2] and step == 1 and inp.rows_whole:  # whole rows are one contiguous run
            moves.append((Direction.DRAM0_TO_LOCAL, slab + b * plane, inp.address(tile.image, y_lo, 0, b), plane))
            continue
        for y in range(y_lo, y_hi + 1):
            local = slab + b * plane + (y - y_lo) * cols
            moves.append((Direction.DRAM0_TO_LOCAL, local, inp.address(tile.image, y, x_lo, b), cols, 1, step))
    return moves, geometry


def tap_runs(tile: Tile, inp_shape, window: Window, padding, tap):
    """For one kernel tap: (row in tile, input y, first col, input x of it, count) runs."""
    pt, pl = padding[0], padding[1]
    _, h, w, _ = inp_shape
    ky, kx = tap
    for r in range(tile.rows):
        y = (tile.y0 + r) * window.sh - pt + ky * window.dh
        if not 0 <= y < h:
            continue
        off = kx * window.dw - pl
        first = max(tile.x0, ceil_div(-off, window.sw))
        last = min(tile.x0 + tile.cols - 1, (w - 1 - off) // window.sw)
        if first > last:
            continue
        yield r, y, first - tile.x0, first * window.sw + off, last - first + 1


def merge_runs(runs, local_step: int) -> list[tuple[int, int, int, int]]:
    """(local, acc, count) runs as (local, acc, count, runs joined): each run that continues the one
    before in both memories is joined to it, one MatMul instead of one per row (a "same" conv's
    taps without a column shift on a slab of whole rows)."""
    out: list[tuple[int, int, int, int]] = []
    for local, acc, count in runs:
        if out and out[-1][0] + out[-1][2] * local_step == local and out[-1][1] + out[-1][2] == acc:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + count, out[-1][3] + 1)
        else:
            out.append((local, acc, count, 1))
    return out


def covering_tap(in_shape, out_shape, window: Window, padding, taps) -> int | None:
    """Index of a tap that reads an input pixel for every output pixel (the centre first)."""
    _, h, w, _ = in_shape
    _, oh, ow, _ = out_shape
    pt, pl = padding[0], padding[1]
    centre = (window.kh // 2, window.kw // 2)
    for t in sorted(range(len(taps)), key=lambda t: taps[t] != centre):
        ky, kx = taps[t]
        if (
            0 <= ky * window.dh - pt
            and (oh - 1) * window.sh - pt + ky * window.dh < h
            and 0 <= kx * window.dw - pl
            and (ow - 1) * window.sw - pl + kx * window.dw < w
        ):
            return t
    return None


def pool_counts(in_shape, out_shape, window: Window, padding, include_pad: bool) -> np.ndarray:
    """Elements each output pixel averages over (ONNX count_include_pad semantics)."""
    pt, pl, pb, pr = padding
    _, h, w, _ = in_shape
    _, oh, ow, _ = out_shape

    def valid(o, s, k, d, pad, size, pad_end):
        idx = o * s - pad + np.arange(k) * d
        lo, hi = (-pad, size - 1 + pad_end) if include_pad else (0, size - 1)
        return int(np.count_nonzero((idx >= lo) & (idx <= hi)))

    ys = np.array([valid(o, window.sh, window.kh, window.dh, pt, h, pb) for o in range(oh)])
    xs = np.array([valid(o, window.sw, window.kw, window.dw, pl, w, pr) for o in range(ow)])
    return ys[:, None] * xs[None, :]
