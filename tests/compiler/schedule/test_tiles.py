"""Tile geometry: the MatMul runs of a conv's taps."""

from tvm_tensil.compiler.schedule.context import Tile, Window
from tvm_tensil.compiler.schedule.tiles import merge_runs, tap_runs


def _runs(tile, shape, window, padding, tap, scols, y_lo=0, x_lo=0):
    rows = [((y - y_lo) * scols + (x - x_lo), r * tile.cols + c0, cnt) for r, y, c0, x, cnt in
            tap_runs(tile, shape, window, padding, tap)]  # fmt: skip
    return merge_runs(rows, window.sw)


def test_taps_without_a_column_shift_on_whole_rows_are_one_matmul():
    """A 3x3 "same" conv on an 8x8 map, one tile, a slab of whole rows: the three taps of the centre
    column run over every row at once (the top and bottom ones skip a row of padding); the shifted
    taps stay a MatMul per row, since a run across a row's end would read the next row."""
    tile, window, shape = Tile(0, 0, 8, 0, 8), Window(3, 3), (1, 8, 8, 16)
    pad = (1, 1, 1, 1)
    assert _runs(tile, shape, window, pad, (1, 1), 8) == [(0, 0, 64, 8)]
    assert _runs(tile, shape, window, pad, (0, 1), 8) == [(0, 8, 56, 7)]
    assert _runs(tile, shape, window, pad, (2, 1), 8) == [(8, 0, 56, 7)]
    shifted = _runs(tile, shape, window, pad, (1, 0), 8)
    assert len(shifted) == 8 and all(run[2:] == (7, 1) for run in shifted)


def test_rows_of_a_slab_wider_than_the_tile_are_not_joined():
    """A tile of 4 of the 8 columns reads a slab of 6 columns: its rows do not continue each other."""
    tile, window, shape = Tile(0, 0, 4, 0, 4), Window(3, 3), (1, 8, 8, 16)
    runs = _runs(tile, shape, window, (1, 1, 1, 1), (1, 1), 5)
    assert len(runs) == 4 and all(run[3] == 1 for run in runs)


def test_strided_rows_join_only_where_the_slab_continues_them():
    """Stride 2 both ways: output row r reads slab row 2r, so the next row's run starts 2 slab rows
    on and is not joined; stride 2 along rows only (a slab of whole rows, 4 outputs reading 8
    columns): each row's run ends where the next one starts, and the tap is one MatMul."""
    tile, shape, pad = Tile(0, 0, 4, 0, 4), (1, 8, 8, 16), (0, 0, 0, 0)
    runs = _runs(tile, shape, Window(1, 1, 2, 2), pad, (0, 0), 8)
    assert [run[:3] for run in runs] == [(0, 0, 4), (16, 4, 4), (32, 8, 4), (48, 12, 4)]
    assert _runs(tile, shape, Window(1, 1, 1, 2), pad, (0, 0), 8) == [(0, 0, 16, 4)]
