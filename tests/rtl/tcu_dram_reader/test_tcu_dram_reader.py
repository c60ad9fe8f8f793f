"""tcu_dram_reader: random DataMoves from a bank to local memory (strides on either side, runs and
single vectors) against a model of program order.

Driver: commands whenever the reader is ready. Bank model: reads answered in order after random
delays, at most one vector per VECTOR_BEATS cycles, random backpressure on requests. Local memory
model: the port-B arbiter grants writes at random, urgent ones (the queue half full) always, as the
core's arbiter does. Checker: after each move, local memory equals the model's; the response queue
never overflows and does fill to its urgent level (the arbitration is exercised).
"""

import os
import random

import cocotb
import numpy as np
import pytest
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from tvm_tensil.isa.instructions import RESPONSE_QUEUE_DEPTH
from tvm_tensil.rtl.testbench import pack_lanes, unpack_lanes

LOCAL_DEPTH = 64
BANK_DEPTH = 256


@cocotb.test()
async def moves_match_program_order(dut):
    n, w, beats = (int(os.environ[f"PARAM_{k}"]) for k in ("ARRAY_SIZE", "DATA_WIDTH", "VECTOR_BEATS"))
    rng = random.Random(n * w + beats)
    np_rng = np.random.default_rng(n * w + beats)
    lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
    local = np_rng.integers(lo, hi + 1, (LOCAL_DEPTH, n))
    bank = np_rng.integers(lo, hi + 1, (BANK_DEPTH, n))
    want = local.copy()

    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.s_cmd_valid.value = 0
    dut.m_dram_rd_ready.value = 0
    dut.s_dram_rd_valid.value = 0
    dut.local_wr_grant.value = 0
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0

    responses = []  # (cycle due, bank address)
    moves = cycle = max_queue = 0
    while moves < 150:
        await FallingEdge(dut.clk)
        cycle += 1
        if int(dut.s_cmd_ready.value) and not responses:
            np.testing.assert_array_equal(local, want, err_msg=f"local memory after move {moves}")
            moves += 1
            count = rng.choice([1, 2, 3, rng.randint(1, 12), rng.randint(RESPONSE_QUEUE_DEPTH // 2, 48)])
            local_stride, dram_stride = rng.choice([0, 0, 1, 2]), rng.choice([0, 0, 0, 1, 3])
            if count > 12:  # a long run (it fills the queue while writes are seldom granted)
                local_stride, dram_stride = 0, rng.choice([0, 0, 1])
            la = rng.randrange(LOCAL_DEPTH - (count - 1) * (1 << local_stride))
            da = rng.randrange(BANK_DEPTH - (count - 1) * (1 << dram_stride))
            for k in range(count):
                want[la + k * (1 << local_stride)] = bank[da + k * (1 << dram_stride)]
            dut.s_cmd_valid.value = 1
            dut.s_cmd_local_addr.value, dut.s_cmd_local_step.value = la, 1 << local_stride
            dut.s_cmd_dram_addr.value, dut.s_cmd_dram_step.value = da, 1 << dram_stride
            dut.s_cmd_count.value = count
        else:
            dut.s_cmd_valid.value = 0
        dut.m_dram_rd_ready.value = int(rng.random() < 0.7)
        due = responses and responses[0][0] <= cycle
        dut.s_dram_rd_valid.value = int(bool(due))
        if due:
            dut.s_dram_rd_data.value = pack_lanes(bank[responses[0][1]], w)
        # The arbiter (requests come from registers, so they are settled now).
        grant = int(dut.m_local_wr_valid.value) and (int(dut.m_local_wr_urgent.value) or rng.random() < 0.15)
        dut.local_wr_grant.value = int(bool(grant))
        await ReadOnly()
        if due:
            responses.pop(0)
        if int(dut.m_dram_rd_valid.value) and int(dut.m_dram_rd_ready.value):
            addr, run = int(dut.m_dram_rd_addr.value), int(dut.m_dram_rd_count.value)
            for k in range(run):
                last = responses[-1][0] if responses else cycle
                responses.append((max(last + beats - 1, cycle) + rng.randint(1, 3), addr + k))
        if grant:
            local[int(dut.m_local_wr_addr.value)] = unpack_lanes(int(dut.m_local_wr_data.value), n, w)
        max_queue = max(max_queue, int(dut.rq_count.value))
        await RisingEdge(dut.clk)
    assert max_queue <= RESPONSE_QUEUE_DEPTH, f"the response queue held {max_queue} vectors"
    assert max_queue >= RESPONSE_QUEUE_DEPTH // 2, "the queue never became urgent: the arbitration went untested"


SWEEP = [(4, 16, 2), (4, 16, 1)]
FULL_SWEEP = SWEEP + [(8, 16, 2), (12, 16, 3), (8, 32, 4)]


@pytest.mark.parametrize("n, width, beats", FULL_SWEEP)
def test_tcu_dram_reader(n, width, beats, full):
    from rtl_runner import run_cocotb, skip_unless_swept

    skip_unless_swept((n, width, beats), SWEEP, full)

    run_cocotb(
        "tcu_dram_reader",
        __file__,
        {"ARRAY_SIZE": n, "DATA_WIDTH": width, "LOCAL_ADDR_BITS": 6, "LOCAL_DEPTH": LOCAL_DEPTH, "DEPTH_BITS": 8},
        extra_env={"PARAM_VECTOR_BEATS": str(beats)},
    )
