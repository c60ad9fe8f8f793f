"""tcu_weights_engine: random LoadWeights (strides, zeroes, any size) against a model of the beats.

Driver: commands whenever the engine is ready. Local memory model: the arbiter grants reads at
random; a granted read's vector is on local_rd_data the next cycle. `load_allowed` goes low at
random. Monitor: every weight beat, in order. Checker: the beats are the instruction's vectors from
the highest address down (zero vectors with `zeroes`); no load's first read starts while
`load_allowed` is low; the engine is ready again only after its last beat.
"""

import os
import random

import cocotb
import numpy as np
import pytest
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge, Timer

from tvm_tensil.rtl.testbench import pack_lanes, unpack_lanes

LOCAL_DEPTH = 64


@cocotb.test()
async def beats_match_the_instruction(dut):
    n, w = (int(os.environ[f"PARAM_{k}"]) for k in ("ARRAY_SIZE", "DATA_WIDTH"))
    rng = random.Random(n * w)
    np_rng = np.random.default_rng(n * w)
    local = np_rng.integers(-(1 << (w - 1)), 1 << (w - 1), (LOCAL_DEPTH, n))

    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.s_cmd_valid.value = 0
    dut.load_allowed.value = 1
    dut.local_rd_grant.value = 0
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0

    expected = []  # beats still to come
    granted = {}  # cycle -> vector whose read was granted then
    cycle = 0
    loads = 0
    first_waits = 0
    while loads < 200 or expected:
        await FallingEdge(dut.clk)
        cycle += 1
        start = int(dut.s_cmd_ready.value) and not expected and loads < 200
        if start:
            loads += 1
            count = rng.choice([1, 2, n + 1, rng.randint(1, 2 * n)])
            stride = rng.choice([0, 0, 1, 2])
            zeroes = rng.random() < 0.2
            base = rng.randrange(LOCAL_DEPTH - (count - 1) * (1 << stride))
            top = base + (count - 1) * (1 << stride)
            rows = [
                np.zeros(n, dtype=np.int64) if zeroes else local[base + k * (1 << stride)]
                for k in reversed(range(count))
            ]
            expected.extend(rows)
            dut.s_cmd_valid.value = 1
            dut.s_cmd_zeroes.value = int(zeroes)
            dut.s_cmd_local_top.value = top
            dut.s_cmd_local_step.value = 1 << stride
            dut.s_cmd_count.value = count
        else:
            dut.s_cmd_valid.value = 0
        allowed = rng.random() < 0.7
        dut.load_allowed.value = int(allowed)
        if cycle - 1 in granted:
            dut.local_rd_data.value = pack_lanes(granted[cycle - 1], w)
        await Timer(1, unit="ns")  # the request depends on load_allowed: let it settle
        requesting = int(dut.m_local_rd_valid.value)
        assert allowed or not requesting or not first_read(dut), "a load's first read did not wait for load_allowed"
        first_waits += int(not allowed and first_read(dut) and int(dut.busy.value))
        grant = requesting and rng.random() < 0.6
        dut.local_rd_grant.value = int(grant)
        if grant:
            granted[cycle] = local[int(dut.m_local_rd_addr.value)].copy()
        await ReadOnly()
        if int(dut.m_weights_valid.value):
            assert expected, "a beat nobody asked for"
            want = expected.pop(0)
            got = unpack_lanes(int(dut.m_weights_data.value), n, w)
            assert got == list(want), f"load {loads}: beat {got}, want {list(want)}"
        if int(dut.s_cmd_ready.value):
            assert not expected or start, f"load {loads}: ready with {len(expected)} beats to come"
        await RisingEdge(dut.clk)
    assert first_waits > 0, "load_allowed never held a load back: the wait went untested"


def first_read(dut) -> bool:
    """The engine's next read would be its load's first."""
    return int(dut.issued.value) == 0


SWEEP = [(4, 16)]
FULL_SWEEP = SWEEP + [(8, 32)]


@pytest.mark.parametrize("n, width", FULL_SWEEP)
def test_tcu_weights_engine(n, width, full):
    from rtl_runner import run_cocotb, skip_unless_swept

    skip_unless_swept((n, width), SWEEP, full)

    run_cocotb("tcu_weights_engine", __file__, {"ARRAY_SIZE": n, "DATA_WIDTH": width, "LOCAL_ADDR_BITS": 6})
