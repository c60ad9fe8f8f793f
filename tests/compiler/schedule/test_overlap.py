"""Deferred DRAM moves: the pieces they are cut into."""

from tvm_tensil.arch import PRESETS
from tvm_tensil.compiler.latency import beats_per_vector
from tvm_tensil.compiler.lir import LIR
from tvm_tensil.compiler.schedule.overlap import Overlap
from tvm_tensil.isa.instructions import Direction


def pieces(preset: str, urgent: bool, direction=Direction.DRAM1_TO_LOCAL, weight_piece=None, size=1200) -> list[int]:
    arch = PRESETS[preset]
    lir = LIR(arch)
    overlap = Overlap(lir, arch, weight_piece)
    overlap.defer(direction, 0, 0, size, urgent=urgent)
    overlap.drain()
    return [int(row[6]) + 1 for row in lir.pending_rows()]


def test_weights_go_whole_after_a_first_piece_where_reads_have_a_clock_of_their_own():
    """Each move pays the reader's latency once: urgent weights go as a first piece of 128 vectors
    (what the first loads wait for) and the rest whole, other reads in pieces of 512, writes in 128
    (finer pacing: the next slab's reads wait for nothing they write). With one bus beat per vector
    reads and writes share one clock and a long read would hold the writes up: all in pieces of 128."""
    assert beats_per_vector(PRESETS["ultra96v2_300mhz"]) == 2 and beats_per_vector(PRESETS["arty_a7_35"]) == 1
    assert pieces("ultra96v2_300mhz", urgent=True) == [128, 1072]
    assert pieces("ultra96v2_300mhz", urgent=False) == [512, 512, 176]
    assert pieces("ultra96v2_300mhz", urgent=False, direction=Direction.LOCAL_TO_DRAM0) == [128] * 9 + [48]
    for urgent in (True, False):
        assert pieces("arty_a7_35", urgent) == [128] * 9 + [48]


def test_weights_may_go_in_pieces_the_loads_follow():
    """Where a layer's weights stream through it, the scheduler also tries weight runs in pieces
    after the first (the loads wait for their piece, not the whole run)."""
    assert pieces("ultra96v2_300mhz", urgent=True, weight_piece=1024, size=2176) == [128, 1024, 1024]
    assert pieces("ultra96v2_300mhz", urgent=True, weight_piece=1024, size=100) == [100]
    assert pieces("ultra96v2_300mhz", urgent=True, size=2176) == [128, 2048]


def test_the_threshold_is_the_compute_that_issues_the_next_move():
    """``threshold``: the cycles of compute after which ``compute`` issues a deferred move (the
    scheduler counts compute up to it in one step): one cycle fewer issues nothing."""
    for preset in ("ultra96v2_300mhz", "arty_a7_35"):
        arch = PRESETS[preset]
        lir = LIR(arch)
        overlap = Overlap(lir, arch)
        assert overlap.threshold() is None
        overlap.defer(Direction.DRAM0_TO_LOCAL, 0, 0, 1200)
        overlap.defer(Direction.LOCAL_TO_DRAM0, 2000, 0, 300)
        overlap.compute(1)  # the first pieces go out
        issued = len(lir)
        assert issued >= 1
        wait = overlap.threshold()
        assert wait > 1
        overlap.compute(wait - 1)
        assert len(lir) == issued
        overlap.compute(1)
        assert len(lir) > issued
