"""tcu_move_engine: random DataMoves between local memory and the accumulators against program order.

Driver: commands whenever the engine takes one, with random gaps. Models: local memory with port A
(free on random cycles) and port B (requests granted at random), a read's data on the port's
rd_data the next cycle; accumulators answering a read the next cycle, writes landing when presented
(accumulating ones add with saturation, as the accumulators do), `downstream_busy` the cycle after
an accumulating write. Checker: after every move both memories equal the program-order model;
port A is used only when free, port B only when port A is not.
"""

import os
import random

import cocotb
import numpy as np
import pytest
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge, Timer

from tvm_tensil.rtl.testbench import pack_lanes, unpack_lanes

LOCAL_ADDR_BITS = 5
ACC_ADDR_BITS = 5
MOVES = 250


@cocotb.test()
async def memories_follow_program_order(dut):
    n, w = (int(os.environ[f"PARAM_{k}"]) for k in ("ARRAY_SIZE", "DATA_WIDTH"))
    rng = random.Random(n * w + 2)
    np_rng = np.random.default_rng(n * w + 2)
    lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
    local = np_rng.integers(lo, hi + 1, (1 << LOCAL_ADDR_BITS, n))
    acc = np_rng.integers(lo, hi + 1, (1 << ACC_ADDR_BITS, n))
    want_local, want_acc = local.copy(), acc.copy()

    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.s_cmd_valid.value = 0
    dut.port_a_free.value = 1
    dut.local_b_rd_grant.value = 0
    dut.local_b_wr_grant.value = 0
    dut.downstream_busy.value = 0
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0

    reads = {}  # cycle -> (port, local address) of the local reads then
    acc_reads = {}  # cycle -> accumulator address read then
    moves = pending = 0
    accumulated = False
    stats = {"port_b_reads": 0, "port_b_writes": 0, "queued_waits": 0}
    cycle = 0
    while moves < MOVES or pending:
        await FallingEdge(dut.clk)
        cycle += 1
        start = moves < MOVES and not pending and int(dut.s_cmd_ready.value) and rng.random() < 0.6
        if start:
            moves += 1
            pending = 1
            to_acc = rng.random() < 0.5
            accumulate = to_acc and rng.random() < 0.5
            count = rng.choice([1, 2, rng.randint(1, 3 * n)])
            lstride, astride = rng.choice([0, 1, 1, 2]), rng.choice([0, 1, 1, 2])
            laddr, aaddr = rng.randrange(1 << LOCAL_ADDR_BITS), rng.randrange(1 << ACC_ADDR_BITS)
            for k in range(count):
                la = (laddr + (k << lstride)) % (1 << LOCAL_ADDR_BITS)
                aa = (aaddr + (k << astride)) % (1 << ACC_ADDR_BITS)
                if not to_acc:
                    want_local[la] = want_acc[aa]
                elif accumulate:
                    want_acc[aa] = np.clip(want_acc[aa] + want_local[la], lo, hi)
                else:
                    want_acc[aa] = want_local[la]
            dut.s_cmd_valid.value = 1
            dut.s_cmd_to_acc.value = int(to_acc)
            dut.s_cmd_accumulate.value = int(accumulate)
            dut.s_cmd_local_addr.value = laddr
            dut.s_cmd_local_step.value = 1 << lstride
            dut.s_cmd_acc_addr.value = aaddr
            dut.s_cmd_acc_step.value = 1 << astride
            dut.s_cmd_count.value = count
        else:
            dut.s_cmd_valid.value = 0
        free = rng.random() < 0.5
        dut.port_a_free.value = int(free)
        dut.downstream_busy.value = int(accumulated)
        if cycle - 1 in reads:
            port, addr = reads.pop(cycle - 1)
            getattr(dut, f"local_{port}_rd_data").value = pack_lanes(local[addr], w)
        if cycle - 1 in acc_reads:
            dut.acc_rd_data.value = pack_lanes(acc[acc_reads.pop(cycle - 1)], w)
        await Timer(1, unit="ns")  # the port-B requests depend on port_a_free: let them settle
        b_rd, b_wr = int(dut.m_local_b_rd_valid.value), int(dut.m_local_b_wr_valid.value)
        assert not (free and (b_rd or b_wr)), "a port-B request while port A was free"
        grant_rd, grant_wr = b_rd and rng.random() < 0.5, b_wr and rng.random() < 0.5
        dut.local_b_rd_grant.value = int(grant_rd)
        dut.local_b_wr_grant.value = int(grant_wr)
        stats["queued_waits"] += int(b_wr and not grant_wr)
        await ReadOnly()
        a_rd, a_wr = int(dut.m_local_a_rd.value), int(dut.m_local_a_wr.value)
        assert free or not (a_rd or a_wr), "port A used while a MatMul had it"
        if a_rd or grant_rd:
            reads[cycle] = ("a" if a_rd else "b", int(dut.m_local_rd_addr.value))
            stats["port_b_reads"] += int(grant_rd)
        if a_wr or grant_wr:
            local[int(dut.m_local_wr_addr.value)] = unpack_lanes(int(dut.m_local_wr_data.value), n, w)
            stats["port_b_writes"] += int(grant_wr)
        if int(dut.m_acc_rd_valid.value):
            acc_reads[cycle] = int(dut.m_acc_rd_addr.value)
        accumulated = False
        if int(dut.m_acc_wr_valid.value):
            addr = int(dut.m_acc_wr_addr.value)
            vec = np.array(unpack_lanes(int(dut.m_acc_wr_data.value), n, w))
            accumulated = bool(int(dut.m_acc_wr_accumulate.value))
            acc[addr] = np.clip(acc[addr] + vec, lo, hi) if accumulated else vec
        if pending and not start and not int(dut.busy.value):
            assert int(dut.quiet.value), "idle but not quiet"
            assert (local == want_local).all(), f"move {moves}: local memory differs from program order"
            assert (acc == want_acc).all(), f"move {moves}: accumulators differ from program order"
            pending = 0
        await RisingEdge(dut.clk)
    assert all(stats.values()), f"a path went untested: {stats}"


SWEEP = [(8, 32)]
FULL_SWEEP = SWEEP + [(4, 16)]


@pytest.mark.parametrize("n, width", FULL_SWEEP)
def test_tcu_move_engine(n, width, full):
    from rtl_runner import run_cocotb, skip_unless_swept

    skip_unless_swept((n, width), SWEEP, full)

    run_cocotb(
        "tcu_move_engine",
        __file__,
        {"ARRAY_SIZE": n, "DATA_WIDTH": width, "LOCAL_ADDR_BITS": LOCAL_ADDR_BITS, "ACC_ADDR_BITS": ACC_ADDR_BITS},
    )
