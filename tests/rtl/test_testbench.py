"""Bench helpers (python/tvm_tensil/rtl/testbench.py): lane packing as the RTL's ports hold vectors,
and the architecture handed to a bench process."""

import pytest

from tvm_tensil.arch import PRESETS
from tvm_tensil.rtl.testbench import ARCH_ENV, arch_env, arch_from_env, pack_lanes, unpack_lanes


def test_lanes_round_trip_with_lane_zero_lowest():
    vec = [-1, 2, -32768, 32767]
    value = pack_lanes(vec, 16)
    assert value & 0xFFFF == 0xFFFF and (value >> 16) & 0xFFFF == 2
    assert unpack_lanes(value, 4, 16) == vec
    assert unpack_lanes(pack_lanes([-3, 5], 18), 2, 18) == [-3, 5]


@pytest.mark.parametrize("how", ["json", "name"])
def test_the_bench_gets_the_same_architecture(monkeypatch, how):
    arch = PRESETS["pynqz1_12x12"]
    monkeypatch.setenv(ARCH_ENV, arch_env(arch)[ARCH_ENV] if how == "json" else "pynqz1_12x12")
    got = arch_from_env()
    assert got == arch and got.axi_data_width == arch.axi_data_width
