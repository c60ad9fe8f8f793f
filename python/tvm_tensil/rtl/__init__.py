"""The Python side of the RTL core: the Verilator toolchain and parameters generated from a .tarch."""

from .params import TOP_PARAMETERS, core_parameters, top_parameters, write_vivado_params
from .toolchain import RTL_DIR, rtl_sources, verilator_env

__all__ = [
    "TOP_PARAMETERS",
    "core_parameters",
    "top_parameters",
    "write_vivado_params",
    "RTL_DIR",
    "rtl_sources",
    "verilator_env",
]
