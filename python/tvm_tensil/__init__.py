"""tvm_tensil: TVM bring-your-own-codegen for the Tensil compute unit (TCU).

Layers, bottom up: ``numbers`` (fixed point), ``arch`` (the hardware description),
``isa`` (instructions and programs), ``model`` (Tensil model files), ``runtime`` (devices:
the emulator, the Verilated RTL, boards).
"""

from . import numbers
from .arch import PRESETS, Architecture, ArchitectureError, load_arch
from .model import ModelError, TensilModel
from .runtime import Emulator, current_session, device, get_device
from .runtime import bridge as _bridge  # noqa: F401 - registers the functions compiled models call

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
    "current_session",
    "build",
    "partition_for_tensil",
    "tensil_pipeline",
    "last_run_stats",
]

# The TVM-facing parts load TVM (about 2 s): import them on first use.
_LAZY = {
    "build": "build",
    "partition_for_tensil": "partition_for_tensil",
    "offload": "offload",
    "tensil_pipeline": "tensil_pipeline",
}


def __getattr__(name):
    if name in _LAZY:
        from . import byoc

        return getattr(byoc, _LAZY[name])
    raise AttributeError(f"module 'tvm_tensil' has no attribute {name!r}")


def last_run_stats(report=None):
    """Per partition, the statistics of its most recent run in the current device session (only
    ``report``'s partitions if a build report is given, e.g. ``ex.tensil_report``)."""
    return current_session().last_run_stats(report)
