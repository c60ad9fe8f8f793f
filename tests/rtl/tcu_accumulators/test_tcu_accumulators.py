"""tcu_accumulators: random back-to-back writes, accumulates and reads on few addresses (so
every forwarding path is hit) against a plain model of program order."""

import os
import random

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from tvm_tensil.rtl.testbench import pack_lanes, unpack_lanes


@cocotb.test()
async def program_order_with_forwarding(dut):
    n, w, depth = (int(os.environ[f"PARAM_{k}"]) for k in ("ARRAY_SIZE", "DATA_WIDTH", "DEPTH"))
    lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
    rng = random.Random(n * w)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.s_write_valid.value = 0
    dut.s_read_valid.value = 0
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    dut.rst.value = 0
    model = {}
    addrs = [0, 1, 2, depth - 1]
    # Initialise the addresses used.
    for a in addrs:
        model[a] = [0] * n
        dut.s_write_valid.value, dut.s_write_addr.value = 1, a
        dut.s_write_data.value, dut.s_write_accumulate.value = 0, 0
        await RisingEdge(dut.clk)
    pending = []  # (cycle due, expected vector)
    cycle = 0
    sat_events = 0
    for _ in range(3000):
        await FallingEdge(dut.clk)
        kind = rng.random()
        dut.s_write_valid.value = 0
        dut.s_read_valid.value = 0
        a = rng.choice(addrs)
        if kind < 0.6:
            big = rng.random() < 0.3
            vec = [rng.randint(lo, hi) if big else rng.randint(-100, 100) for _ in range(n)]
            acc = rng.random() < 0.6
            dut.s_write_valid.value, dut.s_write_addr.value = 1, a
            dut.s_write_data.value, dut.s_write_accumulate.value = pack_lanes(vec, w), int(acc)
            if acc:
                new = [max(lo, min(hi, x + y)) for x, y in zip(model[a], vec)]
                sat_events += any(not lo <= x + y <= hi for x, y in zip(model[a], vec))
                model[a] = new
            else:
                model[a] = vec
        elif kind < 0.9:
            dut.s_read_valid.value, dut.s_read_addr.value = 1, a
            pending.append((cycle + 1, list(model[a])))
        await RisingEdge(dut.clk)
        cycle += 1
        await ReadOnly()
        if pending and pending[0][0] == cycle:
            assert int(dut.m_read_valid.value) == 1
            assert unpack_lanes(int(dut.m_read_data.value), n, w) == pending.pop(0)[1]
    assert sat_events > 0


SWEEP = [(4, 16, 16)]
FULL_SWEEP = SWEEP + [(8, 32, 64)]


@pytest.mark.parametrize("n, width, depth", FULL_SWEEP)
def test_tcu_accumulators(n, width, depth, full):
    from rtl_runner import run_cocotb, skip_unless_swept

    skip_unless_swept((n, width, depth), SWEEP, full)

    run_cocotb(
        "tcu_accumulators",
        __file__,
        {"ARRAY_SIZE": n, "DATA_WIDTH": width, "DEPTH": depth, "ADDR_WIDTH": max(1, (depth - 1).bit_length())},
        sources=["tcu_ram.sv", "tcu_accumulators.sv"],
    )
