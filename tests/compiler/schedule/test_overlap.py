"""Deferred DRAM moves: the pieces they are cut into."""

from tvm_tensil.arch import PRESETS
from tvm_tensil.compiler.latency import beats_per_vector
from tvm_tensil.compiler.lir import LIR
from tvm_tensil.compiler.schedule.overlap import Overlap
from tvm_tensil.isa.instructions import Direction


def pieces(preset: str, urgent: bool) -> list[int]:
    arch = PRESETS[preset]
    lir = LIR(arch)
    overlap = Overlap(lir, arch)
    overlap.defer(Direction.DRAM1_TO_LOCAL, 0, 0, 1200, urgent=urgent)
    overlap.drain()
    return [int(row[6]) + 1 for row in lir.pending_rows()]


def test_weights_go_whole_after_a_first_piece_where_reads_have_a_clock_of_their_own():
    """Each move pays the reader's latency once: urgent weights go as a first piece of 128 vectors
    (what the first loads wait for) and the rest whole; other reads in pieces of 128 (finer pacing).
    With one bus beat per vector reads and writes share one clock and a long read would hold the
    writes up, so weights go in pieces of 128 too."""
    assert beats_per_vector(PRESETS["ultra96v2_300mhz"]) == 2 and beats_per_vector(PRESETS["arty_a7_35"]) == 1
    assert pieces("ultra96v2_300mhz", urgent=True) == [128, 1072]
    assert pieces("ultra96v2_300mhz", urgent=False) == [128] * 9 + [48]
    assert pieces("arty_a7_35", urgent=True) == [128] * 9 + [48]
