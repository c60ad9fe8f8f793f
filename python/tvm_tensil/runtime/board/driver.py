"""The board driver (docs/boards.md) over a small transport interface.

``Driver`` places DRAM0 and DRAM1 in memory the core can reach (64 KiB aligned windows), writes
constants and inputs, streams the program (Configure preamble, the program, the completion probe,
NoOps to whole bus words) and knows when the core is done. What differs between a real board and
the simulated one is only the ``Transport``:

- ``pynq.PynqTransport``: ``pynq.allocate`` buffers and the AXI DMA of a Tensil PYNQ overlay;
- ``sim_board.SimBoardTransport``: a ``tvm-tensil serve`` process (``serve.py``) whose Verilated
  core's memory is a shared-memory region.

Completion, on a transport that cannot see the core's `idle` (a Tensil PYNQ overlay), is the reference
flow's probe: the driver puts a marker in DRAM0's last vector and appends DataMove DRAM0[last] ->
local[last] -> DRAM0[last - 1]; the program is done when the marker appears in DRAM0[last - 1] (DRAM
moves complete in program order on the core). Those two DRAM0 vectors are then the driver's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...arch import Architecture
from ...isa.instructions import ConfigRegister, Configure, DataMove, Direction
from ...isa.layout import layout_of
from ...isa.program import Program, pad_to_beats
from ..device import DeviceError, as_vectors

WINDOW_ALIGN = 1 << 16  # Configure offsets count 64 KiB units


class DriverError(DeviceError):
    """The board could not run a program: a timeout, a transport failure, a bad size."""


@dataclass
class Buffer:
    """Memory the core can reach: a byte view for the host and the address the core uses."""

    array: np.ndarray  # uint8, host view
    physical_address: int

    def sync_to_device(self) -> None:  # caches: overridden by transports that need it
        pass

    def sync_from_device(self) -> None:
        pass


class Transport(ABC):
    """How the driver reaches a core: shared buffers, an instruction stream, completion."""

    #: bytes per beat of the core's instruction stream
    stream_bytes: int
    #: True when completion can only be seen through the DRAM probe
    needs_probe: bool = True

    @abstractmethod
    def allocate(self, nbytes: int) -> Buffer:
        """A physically contiguous buffer of at least ``nbytes``, 64 KiB aligned."""

    @abstractmethod
    def stream(self, data: bytes) -> None:
        """Start sending instructions (whole stream beats) to the core."""

    @abstractmethod
    def wait(self, done: Callable[[], bool], timeout: float) -> dict:
        """Return (with whatever the transport measured, e.g. cycles) once ``done()`` holds;
        raise ``DriverError`` after ``timeout`` seconds."""

    def close(self) -> None:
        pass


class Driver:
    """Runs Tensil programs for one architecture on a core behind ``transport``."""

    def __init__(self, arch: Architecture, transport: Transport, timeout: float = 60.0, probe: bool | None = None):
        self.arch = arch
        self.transport = transport
        self.timeout = timeout
        self.use_probe = transport.needs_probe if probe is None else probe
        vb = arch.vector_bytes
        if arch.dram0_depth < 2:
            raise DriverError("DRAM0 needs at least two vectors for the completion probe")
        self.dram = [transport.allocate(arch.dram0_depth * vb), transport.allocate(arch.dram1_depth * vb)]
        for bank, buf in enumerate(self.dram):
            if buf.physical_address % WINDOW_ALIGN:
                raise DriverError(
                    f"DRAM{bank} window at {buf.physical_address:#x} is not 64 KiB aligned: "
                    "the transport must align its buffers (Configure offsets are 64 KiB units)"
                )
        self._views = [self._vectors(b, d) for b, d in zip(self.dram, (arch.dram0_depth, arch.dram1_depth))]
        self._marker = 0

    def _vectors(self, buf: Buffer, depth: int) -> np.ndarray:
        dt = self.arch.data_type
        store = np.dtype(dt.storage).newbyteorder("<")
        return buf.array[: depth * self.arch.vector_bytes].view(store).reshape(depth, self.arch.array_size)

    # -- DRAM ------------------------------------------------------------------------------------
    def _check(self, bank: int, base: int, size: int) -> None:
        if bank not in (0, 1):
            raise DriverError(f"DRAM bank must be 0 or 1, got {bank!r}")
        reserved = 2 if bank == 0 and self.use_probe else 0  # DRAM0's last two: the probe's
        depth = self._views[bank].shape[0] - reserved
        if base < 0 or size < 0 or base + size > depth:
            raise DriverError(
                f"DRAM{bank} access of {size} vectors at {base} is outside the window of "
                f"{depth} vectors" + (" (the last two hold the completion probe)" if reserved else "")
            )

    def write(self, bank: int, base: int, vectors: np.ndarray) -> None:
        try:
            vectors = as_vectors(vectors, self.arch.array_size)
        except ValueError as e:
            raise DriverError(str(e)) from None
        self._check(bank, base, vectors.shape[0])
        self._views[bank][base : base + vectors.shape[0]] = self.arch.data_type.to_storage(vectors)

    def read(self, bank: int, base: int, size: int) -> np.ndarray:
        self._check(bank, base, size)
        self.dram[bank].sync_from_device()
        return self.arch.data_type.sign_extend(self._views[bank][base : base + size].astype(np.int64))

    # -- programs ----------------------------------------------------------------------------------
    def preamble(self) -> list:
        """Configure: the DRAM windows' offsets; no timeout flag (the driver has its own)."""
        return [
            Configure(ConfigRegister.DRAM0_OFFSET, self.dram[0].physical_address // WINDOW_ALIGN),
            Configure(ConfigRegister.DRAM1_OFFSET, self.dram[1].physical_address // WINDOW_ALIGN),
            Configure(ConfigRegister.TIMEOUT, 0),
        ]

    def probe(self) -> list:
        last = self.arch.dram0_depth - 1
        local = self.arch.local_depth - 1
        return [
            DataMove(Direction.DRAM0_TO_LOCAL, local, last, 1),
            DataMove(Direction.LOCAL_TO_DRAM0, local, last - 1, 1),
        ]

    def stream_bytes_for(self, program: Program) -> bytes:
        """Preamble + program + probe, padded with whole NoOps to whole stream beats."""
        lay = layout_of(self.arch)
        head = Program.from_instructions(self.preamble(), lay).data
        tail = Program.from_instructions(self.probe(), lay).data if self.use_probe else b""
        return pad_to_beats(head + program.data + tail, self.transport.stream_bytes, lay.instruction_bytes)

    def run(self, program: Program) -> dict:
        """Stream ``program`` and wait for its completion; returns what the transport measured."""
        if program.layout.arch != self.arch:
            raise DriverError(f"{program.name} was encoded for another architecture than this driver's")
        done = lambda: True  # noqa: E731 - the transport saw the core finish
        if self.use_probe:
            # A marker that differs from run to run, so that a stale copy is never taken for completion.
            self._marker = self._marker % min(1000, self.arch.data_type.max_int) + 1
            last = self.arch.dram0_depth - 1
            view = self._views[0]
            view[last] = self._marker
            view[last - 1] = 0
            want = view[last].copy()

            def done() -> bool:
                self.dram[0].sync_from_device()
                return bool(np.array_equal(view[last - 1], want))

        for buf in self.dram:
            buf.sync_to_device()

        self.transport.stream(self.stream_bytes_for(program))
        return self.transport.wait(done, self.timeout)

    def close(self) -> None:
        self.transport.close()
