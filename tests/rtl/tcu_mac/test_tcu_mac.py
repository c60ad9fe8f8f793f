"""tcu_mac against tvm_tensil.numbers (the reference model) for every data type."""

import os
import random

import cocotb
import pytest
from cocotb.triggers import Timer


def _signed(v: int, w: int) -> int:
    return v - (1 << w) if v >> (w - 1) else v


@cocotb.test()
async def mac_matches_the_reference(dut):
    from tvm_tensil.numbers import DATA_TYPES, SaturationCounter

    w, bp = int(os.environ["PARAM_DATA_WIDTH"]), int(os.environ["PARAM_BINARY_POINT"])
    dt = next(t for t in DATA_TYPES.values() if t.width == w and t.binary_point == bp)
    rng = random.Random(w)
    lo, hi = dt.min_int, dt.max_int
    edges = [lo, lo + 1, -1, 0, 1, hi - 1, hi, dt.one, -dt.one, 1 << (bp - 1), 3 << (bp - 1)]
    cases = [(a, b, c) for a in edges for b in edges for c in (lo, -1, 0, 1, hi)]
    cases += [(rng.randint(lo, hi), rng.randint(lo, hi), rng.randint(lo, hi)) for _ in range(3000)]
    small = 1 << (bp + 1)  # small operands: rounding, including exact ties
    cases += [(rng.randint(-small, small), rng.randint(-small, small), rng.randint(lo, hi)) for _ in range(3000)]
    mask = (1 << w) - 1
    for x, y, z in cases:
        dut.x.value, dut.y.value, dut.z.value = x & mask, y & mask, z & mask
        await Timer(1, unit="ns")
        sat = SaturationCounter()
        want = int(dt.mac(x, y, z, sat))
        got = _signed(int(dut.r.value), w)
        assert got == want, f"mac({x}, {y}, {z}) = {got}, want {want}"
        assert int(dut.saturated.value) == sat.count, f"mac({x}, {y}, {z}): saturated flag"


SWEEP = [(8, 4), (16, 8)]  # the presets' data types
FULL_SWEEP = SWEEP + [(18, 10), (32, 16)]


@pytest.mark.parametrize("width, bp", FULL_SWEEP)
def test_tcu_mac(width, bp, full):
    from rtl_runner import run_cocotb, skip_unless_swept

    skip_unless_swept((width, bp), SWEEP, full)

    run_cocotb("tcu_mac", __file__, {"DATA_WIDTH": width, "BINARY_POINT": bp})
