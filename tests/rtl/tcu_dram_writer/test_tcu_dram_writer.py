"""tcu_dram_writer: random DataMoves from local memory to a bank (strides on either side, runs and
single vectors) against a model of program order.

Driver: commands whenever the writer is ready. Local memory model: the port-B arbiter grants reads
at random; a granted read's vector is on local_rd_data the next cycle. Bank model: random
backpressure on writes, a write response pending for a random time after each write; a run's first
vector must carry its length. Checker: after each move, the bank equals the model's, and the writer
is ready only after the last write response.
"""

import random

import cocotb
import numpy as np
import pytest
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from tvm_tensil.rtl.testbench import pack_lanes, unpack_lanes

LOCAL_DEPTH = 64
BANK_DEPTH = 256


@cocotb.test()
async def moves_match_program_order(dut):
    import os

    n, w = (int(os.environ[f"PARAM_{k}"]) for k in ("ARRAY_SIZE", "DATA_WIDTH"))
    rng = random.Random(n * w)
    np_rng = np.random.default_rng(n * w)
    lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
    local = np_rng.integers(lo, hi + 1, (LOCAL_DEPTH, n))
    bank = np_rng.integers(lo, hi + 1, (BANK_DEPTH, n))
    want = bank.copy()

    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.s_cmd_valid.value = 0
    dut.m_dram_wr_ready.value = 0
    dut.dram_wr_pending.value = 0
    dut.local_rd_grant.value = 0
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0

    read_data = None
    pending = 0  # cycles until the last write's response
    run_left = 0  # vectors of the current run still to come
    moves = 0
    while moves < 150:
        await FallingEdge(dut.clk)
        if int(dut.s_cmd_ready.value):
            assert pending == 0, "ready before the last write response"
            np.testing.assert_array_equal(bank, want, err_msg=f"bank after move {moves}")
            moves += 1
            count = rng.choice([1, 2, 3, rng.randint(1, 12)])
            local_stride, dram_stride = rng.choice([0, 0, 1, 2]), rng.choice([0, 0, 0, 1, 3])
            la = rng.randrange(LOCAL_DEPTH - (count - 1) * (1 << local_stride))
            da = rng.randrange(BANK_DEPTH - (count - 1) * (1 << dram_stride))
            for k in range(count):
                want[da + k * (1 << dram_stride)] = local[la + k * (1 << local_stride)]
            dut.s_cmd_valid.value = 1
            dut.s_cmd_local_addr.value, dut.s_cmd_local_step.value = la, 1 << local_stride
            dut.s_cmd_dram_addr.value, dut.s_cmd_dram_step.value = da, 1 << dram_stride
            dut.s_cmd_count.value = count
        else:
            dut.s_cmd_valid.value = 0
        dut.m_dram_wr_ready.value = int(rng.random() < 0.7)
        dut.dram_wr_pending.value = int(pending > 0)
        pending = max(0, pending - 1)
        if read_data is not None:
            dut.local_rd_data.value = pack_lanes(read_data, w)
            read_data = None
        grant = int(dut.m_local_rd_valid.value) and rng.random() < 0.6
        dut.local_rd_grant.value = int(bool(grant))
        if grant:
            read_data = local[int(dut.m_local_rd_addr.value)].copy()
        await ReadOnly()
        if int(dut.m_dram_wr_valid.value) and int(dut.m_dram_wr_ready.value):
            run = int(dut.m_dram_wr_run.value)
            assert (run != 0) == (run_left == 0), f"run length {run} with {run_left} vectors of a run to come"
            run_left = (run or run_left) - 1
            bank[int(dut.m_dram_wr_addr.value)] = unpack_lanes(int(dut.m_dram_wr_data.value), n, w)
            pending = rng.randint(0, 6)
        await RisingEdge(dut.clk)


SWEEP = [(8, 32)]
FULL_SWEEP = SWEEP + [(4, 16)]


@pytest.mark.parametrize("n, width", FULL_SWEEP)
def test_tcu_dram_writer(n, width, full):
    from rtl_runner import run_cocotb, skip_unless_swept

    skip_unless_swept((n, width), SWEEP, full)

    run_cocotb(
        "tcu_dram_writer", __file__, {"ARRAY_SIZE": n, "DATA_WIDTH": width, "LOCAL_ADDR_BITS": 6, "DEPTH_BITS": 8}
    )
