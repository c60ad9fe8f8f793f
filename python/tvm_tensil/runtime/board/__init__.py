"""Boards: the TCU reached through memory it shares with the host (docs/boards.md).

``driver.py`` drives the core (DRAM windows, the Configure preamble, the completion probe, padding to
whole bus words) over a small ``Transport``; the devices differ only in their transport:

- ``pynq.py``: the "pynq" device, a Zynq board running PYNQ with a Tensil overlay;
- ``sim_board.py``: the "sim-board" device, a ``tvm-tensil serve`` process (``serve.py``) running the
  Verilated core behind shared memory and a Unix socket.

``device.py`` is the ``Device`` both share. The devices are imported on first use (a board's needs
``pynq``).
"""

from .device import BoardDevice
from .driver import WINDOW_ALIGN, Buffer, Driver, DriverError, Transport

__all__ = ["BoardDevice", "Buffer", "Driver", "DriverError", "Transport", "WINDOW_ALIGN"]
