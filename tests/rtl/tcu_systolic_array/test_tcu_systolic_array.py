"""tcu_systolic_array: weights shifted in, vectors streamed with gaps and backpressure,
outputs against DataType.matmul (the sequential, rounded matrix step)."""

import os
import random

import numpy as np
import pytest

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from tvm_tensil.rtl.testbench import pack_lanes, unpack_lanes


@cocotb.test()
async def streams_match_the_reference(dut):
    from tvm_tensil.numbers import DATA_TYPES

    n, w, bp = (int(os.environ[f"PARAM_{k}"]) for k in ("ARRAY_SIZE", "DATA_WIDTH", "BINARY_POINT"))
    dt = next(t for t in DATA_TYPES.values() if t.width == w and t.binary_point == bp)
    rng = random.Random(n * w)
    np_rng = np.random.default_rng(n * w)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.s_weights_valid.value = 0
    dut.s_in_valid.value = 0
    dut.m_out_ready.value = 1
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0

    for trial in range(3):
        lim = dt.one * 2 if trial < 2 else dt.max_int  # the last trial saturates
        weights = np_rng.integers(-lim, lim + 1, (n + 1, n))  # row 0 = bias
        for row in reversed(range(n + 1)):  # highest row first, as LoadWeights shifts them in
            dut.s_weights_data.value = pack_lanes(weights[row], w)
            dut.s_weights_valid.value = 1
            await RisingEdge(dut.clk)
        dut.s_weights_valid.value = 0
        count = 3 * n + 5
        inputs = np_rng.integers(-lim, lim + 1, (count, n))
        want = dt.matmul(inputs, weights[1:], weights[0])
        got = []
        sent = 0
        while len(got) < count:
            dut.m_out_ready.value = int(rng.random() < 0.8)
            send = sent < count and rng.random() < 0.7
            dut.s_in_valid.value = int(send)
            if send:
                dut.s_in_data.value = pack_lanes(inputs[sent], w)
            await ReadOnly()
            if send and int(dut.s_in_ready.value):
                sent += 1
            if int(dut.m_out_valid.value) and int(dut.m_out_ready.value):
                got.append(unpack_lanes(int(dut.m_out_data.value), n, w))
            await RisingEdge(dut.clk)
        dut.s_in_valid.value = 0
        np.testing.assert_array_equal(np.array(got), want)
        # Drain before the next weights (the caller's contract).
        dut.m_out_ready.value = 1
        while True:
            await ReadOnly()
            if not int(dut.busy.value):
                break
            await RisingEdge(dut.clk)
        await RisingEdge(dut.clk)


SWEEP = [(2, 16, 8), (8, 16, 8), (8, 32, 16)]
FULL_SWEEP = SWEEP + [(12, 16, 8), (16, 16, 8), (16, 32, 16), (4, 8, 4), (8, 18, 10)]


@pytest.mark.parametrize("n, width, bp", FULL_SWEEP)
def test_tcu_systolic_array(n, width, bp, full):
    if (n, width, bp) not in SWEEP and not full:
        pytest.skip("long sweep: run with --full")
    from rtl_runner import run_cocotb

    run_cocotb("tcu_systolic_array", __file__, {"ARRAY_SIZE": n, "DATA_WIDTH": width, "BINARY_POINT": bp},
               sources=["tcu_mac.sv", "tcu_systolic_array.sv"])
