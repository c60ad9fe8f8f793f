"""tcu_dram_engine: random DataMoves between a bank and local memory (both directions, strides on
either side, runs and single vectors) against a model of program order.

Driver: commands whenever the engine is ready. Bank model: reads answered in order after random
delays, at most one vector per VECTOR_BEATS cycles, random backpressure on requests and writes.
Local memory model: the port-B arbiter grants reads and writes at random; a write that is urgent
(its queue half full) is always granted, as the core's arbiter does. Checker: after each move, local
memory and the bank equal the model's; the response queue never overflows.
"""

import os
import random

import numpy as np
import pytest

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

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
    want_local, want_bank = local.copy(), bank.copy()

    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.s_cmd_valid.value = 0
    dut.m_dram_rd_ready.value = 0
    dut.s_dram_rd_valid.value = 0
    dut.m_dram_wr_ready.value = 0
    dut.dram_wr_pending.value = 0
    dut.local_rd_grant.value = 0
    dut.local_wr_grant.value = 0
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0

    responses = []  # (cycle due, bank address)
    read_data = None  # a granted local read's vector, on local_rd_data the next cycle
    write_pending = 0  # cycles until the last accepted write's response
    moves = 0
    cycle = 0
    max_queue = 0
    while moves < 150:
        await FallingEdge(dut.clk)
        cycle += 1
        # A new move whenever the engine is free.
        idle = int(dut.s_cmd_ready.value)
        if idle and not responses and write_pending == 0:
            np.testing.assert_array_equal(local, want_local, err_msg=f"local memory after move {moves}")
            np.testing.assert_array_equal(bank, want_bank, err_msg=f"bank after move {moves}")
            moves += 1
            count = rng.choice([1, 2, 3, rng.randint(1, 12)])
            local_stride = rng.choice([0, 0, 1, 2])
            dram_stride = rng.choice([0, 0, 0, 1, 3])
            to_dram = rng.random() < 0.5
            la = rng.randrange(LOCAL_DEPTH - (count - 1) * (1 << local_stride))
            da = rng.randrange(BANK_DEPTH - (count - 1) * (1 << dram_stride))
            for k in range(count):
                li, di = la + k * (1 << local_stride), da + k * (1 << dram_stride)
                if to_dram:
                    want_bank[di] = want_local[li]
                else:
                    want_local[li] = want_bank[di]
            dut.s_cmd_valid.value = 1
            dut.s_cmd_to_dram.value = int(to_dram)
            dut.s_cmd_local_addr.value = la
            dut.s_cmd_local_step.value = 1 << local_stride
            dut.s_cmd_dram_addr.value = da
            dut.s_cmd_dram_step.value = 1 << dram_stride
            dut.s_cmd_count.value = count
        else:
            dut.s_cmd_valid.value = 0
        # Bank inputs for this cycle.
        dut.m_dram_rd_ready.value = int(rng.random() < 0.7)
        dut.m_dram_wr_ready.value = int(rng.random() < 0.7)
        due = responses and responses[0][0] <= cycle
        dut.s_dram_rd_valid.value = int(bool(due))
        if due:
            dut.s_dram_rd_data.value = pack_lanes(bank[responses[0][1]], w)
        dut.dram_wr_pending.value = int(write_pending > 0)
        write_pending = max(0, write_pending - 1)
        if read_data is not None:
            dut.local_rd_data.value = pack_lanes(read_data, w)
            read_data = None
        # The arbiter (requests come from registers, so they are settled now): an urgent write always
        # wins, otherwise grants at random.
        wr_valid = int(dut.m_local_wr_valid.value)
        grant_wr = wr_valid and (int(dut.m_local_wr_urgent.value) or rng.random() < 0.5)
        grant_rd = int(dut.m_local_rd_valid.value) and not grant_wr and rng.random() < 0.6
        dut.local_wr_grant.value = int(bool(grant_wr))
        dut.local_rd_grant.value = int(bool(grant_rd))
        await ReadOnly()
        if due:
            responses.pop(0)
        if int(dut.m_dram_rd_valid.value) and int(dut.m_dram_rd_ready.value):
            addr, run = int(dut.m_dram_rd_addr.value), int(dut.m_dram_rd_count.value)
            for k in range(run):
                last = responses[-1][0] if responses else cycle
                responses.append((max(last + beats - 1, cycle) + rng.randint(1, 3), addr + k))
        if int(dut.m_dram_wr_valid.value) and int(dut.m_dram_wr_ready.value):
            bank[int(dut.m_dram_wr_addr.value)] = unpack_lanes(int(dut.m_dram_wr_data.value), n, w)
            write_pending = rng.randint(0, 6)
        if grant_wr:
            local[int(dut.m_local_wr_addr.value)] = unpack_lanes(int(dut.m_local_wr_data.value), n, w)
        if grant_rd:
            read_data = local[int(dut.m_local_rd_addr.value)].copy()
        max_queue = max(max_queue, int(dut.rq_count.value))
        await RisingEdge(dut.clk)
    assert max_queue <= 8, f"the response queue held {max_queue} vectors"
    assert max_queue >= 2, "responses never queued: the write arbitration went untested"


SWEEP = [(4, 16, 2), (4, 16, 1)]
FULL_SWEEP = SWEEP + [(8, 16, 2), (12, 16, 3), (8, 32, 4)]


@pytest.mark.parametrize("n, width, beats", FULL_SWEEP)
def test_tcu_dram_engine(n, width, beats, full):
    if (n, width, beats) not in SWEEP and not full:
        pytest.skip("long sweep: run with --full")
    from rtl_runner import run_cocotb

    run_cocotb("tcu_dram_engine", __file__,
               {"ARRAY_SIZE": n, "DATA_WIDTH": width, "LOCAL_ADDR_BITS": 6, "LOCAL_DEPTH": LOCAL_DEPTH,
                "DEPTH_BITS": 8},
               extra_env={"PARAM_VECTOR_BEATS": str(beats)})
