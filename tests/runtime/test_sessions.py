"""Device sessions: inside ``with tvm_tensil.device(name, **options)`` one device per architecture,
created with the options, serves every partition of every model run in the block."""

import numpy as np
import pytest

import tvm_tensil
from helpers import built
from tvm_tensil.runtime import DeviceError, DeviceSession


def test_two_models_share_one_simulator():
    vm1, report1, x1, cpu1 = built(1, 1)
    vm2, report2, x2, cpu2 = built(2, 2)
    assert len(report1.partitions) == 1 and len(report2.partitions) == 2
    with tvm_tensil.device("verilator") as session:
        got = [(vm1["main"](x1).numpy(), vm2["main"](x2).numpy()) for _ in range(2)]
        assert len(session.devices) == 1, "one simulator for the architecture"
        (dev,) = session.devices.values()
        assert dev.resident_weights.writes == 3, "each partition's weights written once, in a place of its own"
    for y1, y2 in got:  # exact: every value is on the 1/256 grid (see conv_chain)
        np.testing.assert_array_equal(y1, cpu1)
        np.testing.assert_array_equal(y2, cpu2)
    assert not session.devices, "the session closes its devices when the block ends"


def test_three_partitions_use_one_simulated_board():
    vm, report, x, cpu = built(3, 3)
    assert len(report.partitions) == 3
    with tvm_tensil.device("sim-board") as session:
        for _ in range(2):
            np.testing.assert_array_equal(vm["main"](x).numpy(), cpu)
        (board,) = session.devices.values()
        assert type(board).__name__ == "SimBoard"
        assert board.resident_weights.writes == 3


def test_options_reach_the_device():
    with tvm_tensil.device("verilator", read_latency=7) as session:
        dev = session.device_for(tvm_tensil.load_arch("pynqz1"))
        assert dev.read_latency == 7
        assert session.device_for(tvm_tensil.load_arch("pynqz1")) is dev


def test_an_unknown_option_is_named():
    with pytest.raises(DeviceError, match=r"device 'emulator' has no option 'socket'"):
        DeviceSession("emulator", socket="/tmp/s")
