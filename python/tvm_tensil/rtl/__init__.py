"""The Python side of the RTL core: the Verilator toolchain and parameters generated from a .tarch."""

from .params import core_parameters, write_config_package
from .toolchain import RTL_DIR, rtl_sources, verilator_env

__all__ = ["core_parameters", "write_config_package", "RTL_DIR", "rtl_sources", "verilator_env"]
