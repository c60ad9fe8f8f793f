"""What the board devices share: a ``Device`` on top of the board driver (``driver.py``).

The devices differ only in their transport: ``pynq`` (a real board) and ``sim-board`` (a
``tvm-tensil serve`` process). The driver code between is the same object.
"""

from __future__ import annotations

import time

import numpy as np

from ...arch import Architecture
from ...isa.program import Program
from ..device import Device, RunStats, as_vectors
from ..extensions import check_extensions
from .driver import Driver, Transport


class BoardDevice(Device):
    """A TCU reached through a transport; DRAM windows live in memory shared with the core."""

    name = "board"

    def __init__(self, arch: Architecture, transport: Transport, timeout: float = 60.0):
        super().__init__(arch)
        self.transport = transport
        self.driver = Driver(arch, transport, timeout=timeout)
        try:
            check_extensions(self)  # a core without them would run a model to wrong numbers
        except Exception:
            self.close()
            raise

    def write_dram(self, bank: int, base: int, vectors: np.ndarray) -> None:
        vectors = as_vectors(vectors, self.arch.array_size)
        self._check_range(bank, base, vectors.shape[0])  # ValueError, as on every device
        self._overwritten(bank, base, vectors.shape[0])
        self.driver.write(bank, base, vectors)  # and the driver's own window (the probe's vectors)

    def read_dram(self, bank: int, base: int, size: int) -> np.ndarray:
        self._check_range(bank, base, size)
        return self.driver.read(bank, base, size)

    def execute(self, program: Program) -> RunStats:
        start = time.perf_counter()
        summary = self.check(program)
        measured = self.driver.run(program)
        stats = RunStats.for_program(summary, self.arch)
        stats.cycles = measured.get("cycles")
        stats.seconds = time.perf_counter() - start
        self.last_stats = stats
        return stats

    def close(self) -> None:
        self.driver.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass
