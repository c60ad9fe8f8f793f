"""tvm_tensil: TVM bring-your-own-codegen for the Tensil compute unit (TCU).

Layers, bottom up: ``numbers`` (fixed point), ``arch`` (the hardware description),
``isa`` (instructions and programs), ``model`` (Tensil model files), ``runtime`` (devices:
the emulator, the Verilated RTL, boards).
"""

from . import numbers
from .arch import PRESETS, Architecture, ArchitectureError, load_arch
from .model import ModelError, TensilModel
from .runtime import Emulator, device, get_device
from .runtime import bridge as _bridge  # registers the functions compiled models call

try:  # one version source: the installed distribution's (pyproject.toml)
    from importlib.metadata import PackageNotFoundError as _NotInstalled
    from importlib.metadata import version as _version

    __version__ = _version("tvm-tensil")
except _NotInstalled:  # pragma: no cover - a checkout that was never installed
    __version__ = "0+unknown"

__all__ = [
    "numbers",
    "Architecture",
    "ArchitectureError",
    "PRESETS",
    "load_arch",
    "TensilModel",
    "ModelError",
    "device",
    "get_device",
    "Emulator",
    "build",
    "partition_for_tensil",
    "last_report",
    "last_run_stats",
]

# The TVM-facing parts load TVM (about 2 s): import them on first use.
_LAZY = {"build": "build", "partition_for_tensil": "partition_for_tensil", "offload": "offload"}


def __getattr__(name):
    if name in _LAZY:
        from . import byoc

        return getattr(byoc, _LAZY[name])
    raise AttributeError(f"module 'tvm_tensil' has no attribute {name!r}")


def last_report():
    """The report of the most recent ``build`` in this process."""
    import importlib

    return importlib.import_module("tvm_tensil.byoc.driver").LAST_REPORT


def last_run_stats(report=None):
    """Per partition, the statistics of its most recent run on a device (only ``report``'s
    partitions if a build report is given, e.g. ``last_report()`` after a build)."""
    return _bridge.last_run_stats(report)
