"""The "pynq" device: the board driver on a Zynq board running PYNQ with a Tensil overlay.

Needs the optional ``board`` extra (``pip install tvm-tensil[board]`` on the board). Options:
``bitstream`` (the overlay's .bit, with its .hwh beside it), ``dma`` (the AXI DMA instance feeding
the instruction stream; default ``axi_dma_0``, as in Tensil's PYNQ designs).
"""

from __future__ import annotations

from ..arch import Architecture
from ..driver.pynq import PynqTransport
from .board import BoardDevice


class Pynq(BoardDevice):
    name = "pynq"

    def __init__(self, arch: Architecture, bitstream: str | None = None, dma: str = "axi_dma_0", timeout: float = 60.0):
        super().__init__(arch, PynqTransport(arch, bitstream=bitstream, dma=dma), timeout=timeout)

    def reset(self) -> None:
        """On-chip state persists on a board between runs; compiled models never read it before writing."""
