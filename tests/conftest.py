"""Suite-wide options: ``--full`` runs the long sweeps (RTL parameters, 500+ differential programs,
preset synthesis) that CI leaves out. Every test that takes the ``full`` fixture carries the
``full`` marker, so ``pytest --full -m full`` runs only the tests the long sweep changes."""

import pytest


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true", help="run the long sweeps (RTL, differential, synthesis)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "full" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.full)


@pytest.fixture
def full(request) -> bool:
    return request.config.getoption("--full")
