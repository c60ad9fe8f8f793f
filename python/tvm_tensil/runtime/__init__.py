"""Devices that run Tensil programs, behind one interface (``Device``).

One switch selects the device: ``with tvm_tensil.device("verilator", **options) as session:`` for
a block of code, or the ``TVM_TENSIL_DEVICE`` environment variable for a whole process. The emulator
is the default. A session holds one device per architecture, made with the session's options and
shared by every partition of every model run inside it (one simulator, one server, one overlay).
One file per device; each registers itself in ``DEVICES``.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import importlib
import inspect
import os
import threading
from typing import Iterator

from ..arch import Architecture, load_arch
from .device import Device, DeviceError, RunStats, SaturationWarning

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
    "DeviceSession",
    "current_device_name",
    "current_session",
    "get_device",
]

# name -> "module:Class" (imported on first use: a board needs pynq, etc.) or a Device class.
DEVICES: dict[str, "str | type[Device]"] = {
    "emulator": "tvm_tensil.runtime.emulator:Emulator",
    "reference": "tvm_tensil.runtime.reference:ReferenceEmulator",
    "verilator": "tvm_tensil.runtime.verilator:Verilator",
    "sim-board": "tvm_tensil.runtime.board.sim_board:SimBoard",
    "pynq": "tvm_tensil.runtime.board.pynq:Pynq",
}
DEFAULT_DEVICE = "emulator"
ENV_VAR = "TVM_TENSIL_DEVICE"

_current: contextvars.ContextVar[DeviceSession | None] = contextvars.ContextVar("tvm_tensil_device", default=None)


def __getattr__(name: str):
    """The emulators load on first use like every device (the emulator compiles numba kernels)."""
    if name in ("Emulator", "ReferenceEmulator"):
        return _device_class("emulator" if name == "Emulator" else "reference")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check_name(name: str) -> str:
    if name not in DEVICES:
        hint = difflib.get_close_matches(str(name), DEVICES, n=1)
        raise DeviceError(
            f"unknown device {name!r}"
            + (f"; did you mean {hint[0]!r}?" if hint else "")
            + f" Available devices: {', '.join(DEVICES)}"
        )
    return name


def _device_class(name: str) -> type:
    entry = DEVICES[_check_name(name)]
    if isinstance(entry, type):
        return entry
    module, cls = entry.split(":")
    return getattr(importlib.import_module(module), cls)


class DeviceSession:
    """The devices Tensil programs run on inside ``with device(name, **options)``: one per
    architecture, made on first use with ``options`` and shared by every partition of every model
    run in the block; closed when the block ends. ``run_stats`` holds, per partition symbol, the
    statistics of its most recent run in the session."""

    def __init__(self, name: str, **options):
        self.name = _check_name(name)
        self.options = options
        params = inspect.signature(_device_class(self.name)).parameters
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            known = [k for k in params if k != "arch"]
            for key in options:
                if key not in known:
                    raise DeviceError(
                        f"device {self.name!r} has no option {key!r}; its options: {', '.join(known) or 'none'}"
                    )
        self.devices: dict[Architecture, Device] = {}
        self.run_stats: dict[str, RunStats] = {}
        # The error a device (or the model's conversion) raised in the latest run: TVM hands it on
        # as a RuntimeError with the same message, so callers that care about the kind look here.
        self.last_error: BaseException | None = None
        self._lock = threading.Lock()

    def device_for(self, arch: "str | Architecture") -> Device:
        """The session's device for ``arch`` (made on first use)."""
        arch = load_arch(arch)
        with self._lock:
            dev = self.devices.get(arch)
            if dev is None:
                dev = self.devices[arch] = get_device(self.name, arch, **self.options)
            return dev

    def last_run_stats(self, report=None) -> dict[str, RunStats]:
        """Per partition symbol, its most recent run in this session; only the partitions of
        ``report`` (a build's ``BuildReport``) if given."""
        keep = None if report is None else set(report.partitions)
        return {k: v for k, v in self.run_stats.items() if keep is None or k in keep}

    def close(self) -> None:
        with self._lock:
            devices, self.devices = list(self.devices.values()), {}
        for dev in devices:
            close = getattr(dev, "close", None)
            if close is not None:
                close()


# Outside any ``with device(...)`` block: one session per device name for the whole process.
_default_sessions: dict[str, DeviceSession] = {}
_default_lock = threading.Lock()


def current_device_name() -> str:
    """The device selected by ``device(...)``, else ``$TVM_TENSIL_DEVICE``, else the emulator."""
    session = _current.get()
    return session.name if session is not None else _check_name(os.environ.get(ENV_VAR) or DEFAULT_DEVICE)


def current_session() -> DeviceSession:
    """The session of the enclosing ``with device(...)`` block, else the process's for the device
    ``current_device_name()`` names."""
    session = _current.get()
    if session is not None:
        return session
    name = current_device_name()
    with _default_lock:
        if name not in _default_sessions:
            _default_sessions[name] = DeviceSession(name)
        return _default_sessions[name]


@contextlib.contextmanager
def device(name: str, **options) -> Iterator[DeviceSession]:
    """Run Tensil programs inside the ``with`` block on device ``name``, made with ``options`` (the
    device class's keyword arguments, e.g. ``read_latency`` for "verilator", ``socket_path`` for
    "sim-board", ``bitstream`` for "pynq"). Yields the session."""
    session = DeviceSession(name, **options)
    token = _current.set(session)
    try:
        yield session
    finally:
        _current.reset(token)
        session.close()


def get_device(name: str | None = None, arch: "str | Architecture" = "pynqz1", **options) -> Device:
    """A new device instance for ``arch`` (``name`` defaults to the current device)."""
    name = _check_name(name) if name else current_device_name()
    return _device_class(name)(load_arch(arch), **options)
