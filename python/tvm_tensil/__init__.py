"""tvm_tensil: TVM bring-your-own-codegen for the Tensil compute unit (TCU).

Layers, bottom up: ``numbers`` (fixed point), ``arch`` (the hardware description),
``isa`` (instructions and programs), ``model`` (Tensil model files), ``compiler``, ``byoc`` (TVM
Relax: ``build``, ``partition_for_tensil``, the ``tensil`` target and pipeline), ``runtime``
(devices: the emulator, the Verilated RTL, boards).

``import tvm_tensil`` registers the ``tensil`` target, Relax pipeline and patterns with TVM, and the
functions compiled models call.
"""

from . import numbers
from .arch import PRESETS, Architecture, ArchitectureError, load_arch
from .model import ModelError, TensilModel
from .runtime import bridge as _bridge  # noqa: F401 - registers the functions compiled models call
from .runtime import current_session, device, get_device

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
    "byoc",
    "build",
    "import_onnx",
    "CalibrationError",
    "InputShapeError",
    "OffloadWarning",
    "PrecisionWarning",
    "ReloadWarning",
    "offload",
    "partition_for_tensil",
    "tensil_pipeline",
    "last_run_stats",
]

# The TVM side: importing it registers the "tensil" target, the "tensil" Relax pipeline and the
# tensil.* patterns with TVM. A board may run models without TVM (the devices need only tvm_ffi).
try:
    import tvm as _tvm  # noqa: F401
except ImportError:  # pragma: no cover - TVM is a dependency; a hand-made board environment lacks it
    _MISSING = ("build", "partition_for_tensil", "offload", "tensil_pipeline")
else:
    from . import byoc
    from .byoc import (
        CalibrationError,
        InputShapeError,
        OffloadWarning,
        PrecisionWarning,
        ReloadWarning,
        build,
        import_onnx,
        offload,
        partition_for_tensil,
        tensil_pipeline,
    )


def __getattr__(name):
    if name == "Emulator":  # loaded on first use, like every device (it compiles numba kernels)
        from .runtime import Emulator

        return Emulator
    if name in globals().get("_MISSING", ()):
        raise ImportError(f"tvm_tensil.{name} needs TVM (apache-tvm); install it or compile on a host")
    raise AttributeError(f"module 'tvm_tensil' has no attribute {name!r}")


def last_run_stats(report=None):
    """Per partition, the statistics of its most recent run in the current device session (only
    ``report``'s partitions if a build report is given, e.g. ``ex.tensil_report``)."""
    return current_session().last_run_stats(report)
