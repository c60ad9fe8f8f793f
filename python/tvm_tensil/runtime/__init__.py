"""Devices that run Tensil programs, behind one interface (``Device``).

One switch selects the device: ``with tvm_tensil.device("emulator"):`` for a block of code,
or the ``TVM_TENSIL_DEVICE`` environment variable for a whole process. The emulator is the
default. One file per device; each registers itself in ``DEVICES``.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import importlib
import os
from typing import Iterator

from ..arch import Architecture, load_arch
from .device import Device, DeviceError, RunStats, SaturationWarning
from .emulator import Emulator
from .reference import ReferenceEmulator

__all__ = [
    "Device",
    "DeviceError",
    "RunStats",
    "SaturationWarning",
    "Emulator",
    "ReferenceEmulator",
    "DEVICES",
    "DEFAULT_DEVICE",
    "ENV_VAR",
    "device",
    "current_device_name",
    "get_device",
]

# name -> "module:Class"; modules are imported on first use (a board needs pynq, etc.).
DEVICES: dict[str, str] = {
    "emulator": "tvm_tensil.runtime.emulator:Emulator",
    "reference": "tvm_tensil.runtime.reference:ReferenceEmulator",
    "verilator": "tvm_tensil.runtime.verilator:Verilator",
    "sim-board": "tvm_tensil.runtime.sim_board:SimBoard",
    "pynq": "tvm_tensil.runtime.pynq:Pynq",
}
DEFAULT_DEVICE = "emulator"
ENV_VAR = "TVM_TENSIL_DEVICE"

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("tvm_tensil_device", default=None)


def _check_name(name: str) -> str:
    if name not in DEVICES:
        hint = difflib.get_close_matches(str(name), DEVICES, n=1)
        raise DeviceError(
            f"unknown device {name!r}"
            + (f"; did you mean {hint[0]!r}?" if hint else "")
            + f" Available devices: {', '.join(DEVICES)}"
        )
    return name


def current_device_name() -> str:
    """The device selected by ``device(...)``, else ``$TVM_TENSIL_DEVICE``, else the emulator."""
    name = _current.get() or os.environ.get(ENV_VAR) or DEFAULT_DEVICE
    return _check_name(name)


@contextlib.contextmanager
def device(name: str) -> Iterator[str]:
    """Select the device that runs Tensil programs inside the ``with`` block."""
    token = _current.set(_check_name(name))
    try:
        yield name
    finally:
        _current.reset(token)


def get_device(name: str | None = None, arch: "str | Architecture" = "pynqz1", **options) -> Device:
    """A new device instance for ``arch`` (``name`` defaults to the current device)."""
    name = _check_name(name) if name else current_device_name()
    module, cls = DEVICES[name].split(":")
    return getattr(importlib.import_module(module), cls)(load_arch(arch), **options)
