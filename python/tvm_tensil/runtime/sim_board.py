"""The "sim-board" device: the board driver over a simulated board (``tvm-tensil serve``).

The Verilated core runs in another process; DRAM is a shared-memory region both map, instructions
and completion go over a Unix socket (``tvm_tensil.driver.simboard``). Without a socket path, a
private server is started for the device and stopped with it.
"""

from __future__ import annotations

from ..arch import Architecture
from ..driver.simboard import SimBoardTransport
from .board import BoardDevice


class SimBoard(BoardDevice):
    name = "sim-board"

    def __init__(self, arch: Architecture, socket_path: str | None = None, timeout: float = 300.0, **server_options):
        super().__init__(arch, SimBoardTransport(arch, socket_path, **server_options), timeout=timeout)

    def reset(self) -> None:
        """A fresh core on the server (local memory, accumulators, registers zero)."""
        if self.transport.conn is not None:
            self.transport.reset()
