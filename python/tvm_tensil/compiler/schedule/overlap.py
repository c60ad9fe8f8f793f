"""DRAM moves deferred into the compute instructions that follow them.

The core dispatches in order: a DRAM move issued while the DRAM engine is still busy holds up
every compute instruction behind it. So deferred moves are cut into pieces and each piece is
issued only once the compute instructions issued since the previous piece are expected to have
covered its duration (the latency model's costs). Urgent moves (the next weights) go first.
"""

from __future__ import annotations

from collections import deque

from ...arch import Architecture
from ...isa.instructions import Direction
from ..latency import beats_per_vector, dram_move_cycles
from ..lir import LIR


class Overlap:
    """Deferred moves in three queues: the urgent ones (the next weights) and the other reads
    pace by the DRAM readers' clock, the writes by the writers' (separate engines). A move is
    never issued before an earlier-deferred one that touches the same local memory."""

    PIECE = 128  # vectors per deferred move
    READ_PIECE = 512  # per deferred read, where reads have a clock of their own

    def __init__(self, lir: LIR, arch: Architecture, weight_piece: int | None = None):
        self.lir = lir
        self.arch = arch
        # Urgent runs (weights) after their first piece: whole (None), or in pieces of this size,
        # which the loads can follow as they land.
        self.weight_piece = weight_piece
        # Entries (seq, move, local lo, local hi): ``seq`` orders moves across the queues.
        self.urgent: deque = deque()
        self.reads: deque = deque()
        self.writes: deque = deque()
        self.read_busy = 0  # cycles the DRAM readers are still expected to be busy
        self.write_busy = 0  # and the writers
        self._seq = 0
        self._cost: dict[tuple, int] = {}
        # A vector a bus beat: a read's responses and a write's local reads would each want local
        # memory's port B every cycle, so reads and writes pace by one clock.
        self.shared = beats_per_vector(arch) == 1

    def defer(
        self,
        direction: Direction,
        local: int,
        address: int,
        size: int,
        local_step: int = 1,
        step: int = 1,
        urgent: bool = False,
    ) -> None:
        """A run, queued in pieces (a strided one whole)."""
        queue = self.urgent if urgent else self.writes if _writes(direction) else self.reads
        if (local_step, step) != (1, 1):
            self._queue(queue, (direction, local, address, size, local_step, step))
            return
        if urgent and not self.shared:
            # Weights: the reader's latency is paid per move, so after a first piece (what the
            # first loads wait for) the rest goes whole. (With one clock for reads and writes, a
            # long read would hold the writes up: there they go in pieces like the rest.)
            rest = self.weight_piece or max(size - self.PIECE, 1)
            pieces = [(0, min(self.PIECE, size))]
            pieces += [(off, min(rest, size - off)) for off in range(self.PIECE, size, rest)]
            for off, n in pieces:
                self._queue(queue, (direction, local + off, address + off, n))
            return
        piece = self.PIECE if self.shared or _writes(direction) else self.READ_PIECE
        for off in range(0, size, piece):
            self._queue(queue, (direction, local + off, address + off, min(piece, size - off)))

    def defer_moves(self, moves) -> None:
        """Moves as ``LIR.datamove`` takes them, each whole."""
        for move in moves:
            self._queue(self.writes if _writes(move[0]) else self.reads, tuple(move))

    def _queue(self, queue: deque, move: tuple) -> None:
        local, size = move[1], move[3]
        local_step = move[4] if len(move) > 4 else 1
        queue.append((self._seq, move, local, local + (size - 1) * local_step + 1))
        self._seq += 1

    @property
    def pending(self) -> bool:
        return bool(self.urgent or self.reads or self.writes)

    def threshold(self) -> int | None:
        """The cycles of compute after which ``compute`` issues a deferred move (None: nothing is
        deferred). Until then it only counts them down: compute(a) then compute(b) is compute(a + b)."""
        if self.shared:
            return max(self.read_busy, self.write_busy) if self.pending else None
        reads = self.read_busy if self.urgent or self.reads else None
        if not self.writes:
            return reads
        return self.write_busy if reads is None else min(reads, self.write_busy)

    def compute(self, cycles: int) -> None:
        """``cycles`` of compute were issued: issue the deferred moves that fit beside them."""
        if self.shared:  # one clock: reads and writes take turns
            self.read_busy = self.write_busy = max(self.read_busy, self.write_busy)
        self.read_busy -= cycles
        self.write_busy -= cycles
        if self.shared:  # in the order they were deferred, the urgent ones first
            while self.read_busy <= 0 and self.pending:
                self._issue(self._first())
            return
        while self.read_busy <= 0 and (self.urgent or self.reads):
            self._issue(self.urgent or self.reads)
        while self.write_busy <= 0 and self.writes:
            self._issue(self.writes)

    def _first(self) -> deque:
        """The urgent queue if it holds a move, else the queue whose first move was deferred first."""
        if self.urgent:
            return self.urgent
        reads, writes = self.reads, self.writes
        if reads and writes:
            return reads if reads[0][0] < writes[0][0] else writes
        return reads or writes

    def need_urgent(self) -> None:
        """What comes next reads the urgent moves' data: issue them all now (what comes next
        then starts when they have landed: the readers are free by then)."""
        if not self.urgent:
            return
        while self.urgent:
            self._issue(self.urgent)
        if not self.shared:  # (with one clock, the writes it also counts may still be running)
            self.read_busy = 0

    def settle(self, lo: int, hi: int) -> None:
        """What comes next uses local memory ``[lo, hi)``: issue the deferred moves that touch it
        (and what they wait for)."""
        for queue in (self.urgent, self.reads, self.writes):
            last = max((k for k, e in enumerate(queue) if e[2] < hi and lo < e[3]), default=-1)
            for _ in range(last + 1):
                if queue:  # (issuing another queue's move may have issued this one's first)
                    self._issue(queue)

    def drain(self) -> None:
        while self.pending:
            self._issue(min((q for q in (self.urgent, self.reads, self.writes) if q), key=lambda q: q[0][0]))
        self.read_busy = self.write_busy = 0

    def _issue(self, queue: deque) -> None:
        seq, move, lo, hi = queue[0]
        for other in (self.urgent, self.reads, self.writes):  # earlier moves on the same local memory
            while other and other is not queue and other[0][0] < seq and _earlier(other, seq, lo, hi):
                self._issue(other)
        queue.popleft()
        self.lir.datamove(*move)
        key = (move[0], move[3])
        if key not in self._cost:
            self._cost[key] = dram_move_cycles(self.arch, move[0], move[3])
        if self.shared:
            self.read_busy = self.write_busy = max(self.read_busy, self.write_busy, 0) + self._cost[key]
        elif _writes(move[0]):
            self.write_busy = max(self.write_busy, 0) + self._cost[key]
        else:
            self.read_busy = max(self.read_busy, 0) + self._cost[key]


def _earlier(queue: deque, seq: int, lo: int, hi: int) -> bool:
    """Whether a move deferred before ``seq`` in ``queue`` touches ``[lo, hi)``."""
    for s, _, a, b in queue:
        if s > seq:
            return False
        if a < hi and lo < b:
            return True
    return False


_WRITES = frozenset({int(Direction.LOCAL_TO_DRAM0), int(Direction.LOCAL_TO_DRAM1)})


def _writes(direction: Direction) -> bool:
    return direction in _WRITES
