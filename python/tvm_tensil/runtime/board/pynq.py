"""The "pynq" device: the board driver on a Zynq board running PYNQ with a Tensil overlay (docs/boards.md).

Needs the optional ``board`` extra (``pip install tvm-tensil[board]`` on the board). Options:
``bitstream`` (the overlay's .bit, with its .hwh beside it), ``dma`` (the AXI DMA instance feeding
the instruction stream; default ``axi_dma_0``, as in Tensil's PYNQ designs).

The overlay conventions are those of Tensil's PYNQ designs: the TCU's DRAM0/DRAM1 AXI masters on
the PS' high-performance ports (so they see the whole DDR at physical addresses), its instruction
stream fed by an AXI DMA (``axi_dma_0``) from a buffer in DDR. Buffers come from ``pynq.allocate``
(physically contiguous, CMA); a 64 KiB aligned window is carved out of a slightly larger allocation,
because the core's DRAM offsets count 64 KiB units.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from ...arch import Architecture
from .device import BoardDevice
from .driver import WINDOW_ALIGN, Buffer, DriverError, Transport


class PynqBuffer(Buffer):
    """A window of a ``pynq.allocate`` buffer; cache maintenance goes to the whole allocation."""

    def __init__(self, array: np.ndarray, physical_address: int, owner):
        super().__init__(array, physical_address)
        self.owner = owner

    def sync_to_device(self) -> None:
        self.owner.flush()

    def sync_from_device(self) -> None:
        self.owner.invalidate()


def aligned_window(physical_address: int, nbytes: int) -> tuple[int, int]:
    """(offset into an allocation at ``physical_address``, size to allocate) for a 64 KiB aligned
    window of ``nbytes``."""
    offset = (-physical_address) % WINDOW_ALIGN
    return offset, nbytes + WINDOW_ALIGN


class PynqTransport(Transport):
    def __init__(self, arch: Architecture, bitstream: str | None = None, dma: str = "axi_dma_0", poll: float = 1e-4):
        try:
            import pynq
        except ImportError:
            raise DriverError(
                "the 'pynq' device needs the pynq package, which runs on the board: "
                "pip install 'tvm-tensil[board]' there (or use device 'sim-board' here)"
            ) from None
        self.pynq = pynq
        self.overlay = pynq.Overlay(bitstream) if bitstream else pynq.Overlay(pynq.PL.bitfile_name, download=False)
        if not hasattr(self.overlay, dma):
            raise DriverError(
                f"the overlay has no AXI DMA named '{dma}' for the instruction stream; its IP: "
                f"{', '.join(sorted(self.overlay.ip_dict))}"
            )
        self.dma = getattr(self.overlay, dma)
        self.stream_bytes = (arch.axi_data_width or 64) // 8
        self.poll = poll
        self._allocations = []
        self._program = None

    def allocate(self, nbytes: int) -> Buffer:
        raw = self.pynq.allocate(shape=(nbytes + WINDOW_ALIGN,), dtype=np.uint8)
        offset, _ = aligned_window(raw.physical_address, nbytes)
        self._allocations.append(raw)
        return PynqBuffer(np.asarray(raw)[offset : offset + nbytes], raw.physical_address + offset, raw)

    def stream(self, data: bytes) -> None:
        buf = self.pynq.allocate(shape=(len(data),), dtype=np.uint8)
        buf[:] = np.frombuffer(data, dtype=np.uint8)
        buf.flush()
        self._program = buf  # alive until the transfer is done
        self.dma.sendchannel.transfer(buf)

    def wait(self, done: Callable[[], bool], timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise DriverError(
                    f"the core did not complete within {timeout:g} s: check the bitstream "
                    "matches the architecture, and the DRAM ports reach DDR"
                )
            time.sleep(self.poll)
        self.dma.sendchannel.wait()
        self._program.freebuffer()
        self._program = None
        return {}

    def close(self) -> None:
        for raw in self._allocations:
            raw.freebuffer()
        self._allocations = []


class Pynq(BoardDevice):
    name = "pynq"

    def __init__(self, arch: Architecture, bitstream: str | None = None, dma: str = "axi_dma_0", timeout: float = 60.0):
        super().__init__(arch, PynqTransport(arch, bitstream=bitstream, dma=dma), timeout=timeout)

    def reset(self) -> None:
        """On-chip state persists on a board between runs; compiled models never read it before writing."""
