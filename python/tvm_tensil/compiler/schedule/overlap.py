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
from ..latency import dram_move_cycles
from ..lir import LIR


class Overlap:
    PIECE = 128  # vectors per deferred move

    def __init__(self, lir: LIR, arch: Architecture):
        self.lir = lir
        self.arch = arch
        self.pending: deque = deque()
        self.urgent: deque = deque()
        self.busy = 0  # cycles the DRAM engine is still expected to be busy
        self._cost: dict[tuple, int] = {}

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
        queue = self.urgent if urgent else self.pending
        if (local_step, step) != (1, 1):
            queue.append((direction, local, address, size, local_step, step))
            return
        for off in range(0, size, self.PIECE):
            queue.append((direction, local + off, address + off, min(self.PIECE, size - off)))

    def compute(self, cycles: int) -> None:
        """``cycles`` of compute were issued: issue the deferred moves that fit beside them."""
        self.busy -= cycles
        while (self.urgent or self.pending) and self.busy <= 0:
            self._issue()

    def need_urgent(self) -> None:
        """What comes next reads the urgent moves' data: issue them all now."""
        while self.urgent:
            self._issue()

    def drain(self) -> None:
        while self.urgent or self.pending:
            self._issue()
        self.busy = 0

    def _issue(self) -> None:
        move = (self.urgent or self.pending).popleft()
        self.lir.datamove(*move)
        key = (move[0], move[3])
        if key not in self._cost:
            self._cost[key] = dram_move_cycles(self.arch, move[0], move[3])
        self.busy = max(self.busy, 0) + self._cost[key]
