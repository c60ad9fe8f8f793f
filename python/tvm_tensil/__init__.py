"""tvm_tensil: TVM bring-your-own-codegen for the Tensil compute unit (TCU).

Layers, bottom up: ``numbers`` (fixed point), ``arch`` (the hardware description),
``isa`` (instructions and programs), ``model`` (Tensil model files), ``runtime`` (devices:
the emulator, the Verilated RTL, boards).
"""

from . import numbers
from .arch import Architecture, ArchitectureError, PRESETS, load_arch
from .model import TensilModel, ModelError
from .runtime import device, get_device, Emulator

__version__ = "0.1.0"

__all__ = [
    "numbers", "Architecture", "ArchitectureError", "PRESETS", "load_arch",
    "TensilModel", "ModelError", "device", "get_device", "Emulator",
]
