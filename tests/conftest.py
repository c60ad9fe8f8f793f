"""Suite-wide options: ``--full`` runs the long sweeps (RTL parameters, 500+ differential programs,
preset synthesis) that CI leaves out."""

import pytest


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true", help="run the long sweeps (RTL, differential, synthesis)")


@pytest.fixture
def full(request) -> bool:
    return request.config.getoption("--full")
