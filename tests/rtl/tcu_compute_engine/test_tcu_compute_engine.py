"""tcu_compute_engine: random MatMuls (strides, zeroes, accumulate, swaps, back to back) against a
model of their vectors.

Driver: commands whenever the engine takes one, with random gaps; `weights_loaded` drops at random.
Local memory model: a read's vector is on local_rd_data the next cycle. Array model: vectors come
out in order after a random delay (never shorter than the one before), and `downstream_busy` is high
while it holds any. Monitors: local reads, vectors into the array, accumulator writes. Checker:
every read address, array vector and accumulator write (address, data, accumulate flag) against the
instruction's vectors in order; a swap only on a swapping MatMul's first vector, and that vector
issued only while `weights_loaded`; the engine idle only when every write is out. The test requires
MatMuls that followed one in flight with no gap between their vectors.
"""

import os
import random

import cocotb
import numpy as np
import pytest
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge, Timer

from tvm_tensil.rtl.testbench import pack_lanes, unpack_lanes

LOCAL_ADDR_BITS = 6
ACC_ADDR_BITS = 5
COMMANDS = 300


@cocotb.test()
async def vectors_match_the_instructions(dut):
    n, w = (int(os.environ[f"PARAM_{k}"]) for k in ("ARRAY_SIZE", "DATA_WIDTH"))
    rng = random.Random(n * w + 1)
    np_rng = np.random.default_rng(n * w + 1)
    local = np_rng.integers(-(1 << (w - 1)), 1 << (w - 1), (1 << LOCAL_ADDR_BITS, n))
    zero = [0] * n

    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.s_cmd_valid.value = 0
    dut.weights_loaded.value = 1
    dut.s_array_valid.value = 0
    dut.downstream_busy.value = 0
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0

    issues, arrivals, writes = [], [], []  # what each monitor should see next, in order
    array = []  # the array model: (cycle it comes out, vector)
    read_at = {}  # cycle -> local address read then
    commands = followed = swap_waits = gapless = 0
    last_issue = -2
    cycle = 0
    while commands < COMMANDS or issues or arrivals or writes or array:
        await FallingEdge(dut.clk)
        cycle += 1
        loaded = rng.random() < 0.7
        dut.weights_loaded.value = int(loaded)
        await Timer(1, unit="ns")  # s_cmd_ready may depend on weights_loaded (the last vector issuing)
        start = commands < COMMANDS and int(dut.s_cmd_ready.value) and rng.random() < 0.7
        if start:
            commands += 1
            followed += int(dut.busy.value)
            count = rng.choice([1, 2, n, rng.randint(1, 2 * n + 3)])
            lstride, astride = rng.choice([0, 1, 1, 2]), rng.choice([0, 1, 1, 2])
            zeroes, accumulate, swap = rng.random() < 0.2, rng.random() < 0.5, rng.random() < 0.3
            laddr = rng.randrange(1 << LOCAL_ADDR_BITS)
            aaddr = rng.randrange(1 << ACC_ADDR_BITS)
            for k in range(count):
                la = (laddr + (k << lstride)) % (1 << LOCAL_ADDR_BITS)
                aa = (aaddr + (k << astride)) % (1 << ACC_ADDR_BITS)
                vec = zero if zeroes else local[la].tolist()
                first_swap = swap and k == 0
                issues.append((None if zeroes else la, first_swap, k == 0))
                arrivals.append((vec, first_swap))
                writes.append((aa, vec, accumulate))
            dut.s_cmd_valid.value = 1
            dut.s_cmd_zeroes.value = int(zeroes)
            dut.s_cmd_accumulate.value = int(accumulate)
            dut.s_cmd_swap.value = int(swap)
            dut.s_cmd_local_addr.value = laddr
            dut.s_cmd_local_step.value = 1 << lstride
            dut.s_cmd_acc_addr.value = aaddr
            dut.s_cmd_acc_step.value = 1 << astride
            dut.s_cmd_count.value = count
        else:
            dut.s_cmd_valid.value = 0
        if cycle - 1 in read_at:
            dut.local_rd_data.value = pack_lanes(local[read_at.pop(cycle - 1)], w)
        out = array and array[0][0] <= cycle
        dut.s_array_valid.value = int(bool(out))
        if out:
            dut.s_array_data.value = pack_lanes(array.pop(0)[1], w)
        dut.downstream_busy.value = int(bool(array))
        await ReadOnly()
        if int(dut.issuing.value):
            assert issues, "a vector issued that no instruction asked for"
            addr, first_swap, first = issues.pop(0)
            assert int(dut.m_local_rd_valid.value) == (addr is not None), "local read with zeroes or none without"
            if addr is not None:
                assert int(dut.m_local_rd_addr.value) == addr, f"read {int(dut.m_local_rd_addr.value)}, want {addr}"
                read_at[cycle] = addr
            assert loaded or not first_swap, "a swapping MatMul's first vector did not wait for its weights"
            gapless += int(first and last_issue == cycle - 1)
            last_issue = cycle
        else:
            assert not int(dut.m_local_rd_valid.value), "a local read without a vector issued"
        swap_waits += int(bool(issues) and issues[0][1] and not loaded and int(dut.busy.value))
        if int(dut.m_array_valid.value):
            vec, first_swap = arrivals.pop(0)
            got = unpack_lanes(int(dut.m_array_data.value), n, w)
            assert got == vec, f"array vector {got}, want {vec}"
            assert int(dut.m_array_swap.value) == int(first_swap), "swap on the wrong vector"
            delay = rng.randint(1, n + 2)
            array.append((max(cycle + delay, array[-1][0] if array else 0), got))
        else:
            assert not int(dut.m_array_swap.value), "swap without a vector"
        if int(dut.m_acc_wr_valid.value):
            assert writes, "an accumulator write nobody asked for"
            addr, vec, accumulate = writes.pop(0)
            got = unpack_lanes(int(dut.m_acc_wr_data.value), n, w)
            assert (int(dut.m_acc_wr_addr.value), got, int(dut.m_acc_wr_accumulate.value)) == (
                addr,
                vec,
                int(accumulate),
            ), "accumulator write differs"
        if not int(dut.busy.value):
            assert not writes or start, f"idle with {len(writes)} writes to come"
            assert int(dut.quiet.value), "idle but not quiet"
        await RisingEdge(dut.clk)
    assert followed > COMMANDS // 10, f"only {followed} MatMuls followed one in flight: back to back went untested"
    assert gapless > COMMANDS // 20, f"only {gapless} MatMuls issued right behind the one before"
    assert swap_waits > 0, "weights_loaded never held a swap back: the wait went untested"


SWEEP = [(4, 16)]
FULL_SWEEP = SWEEP + [(8, 32)]


@pytest.mark.parametrize("n, width", FULL_SWEEP)
def test_tcu_compute_engine(n, width, full):
    from rtl_runner import run_cocotb, skip_unless_swept

    skip_unless_swept((n, width), SWEEP, full)

    run_cocotb(
        "tcu_compute_engine",
        __file__,
        {"ARRAY_SIZE": n, "DATA_WIDTH": width, "LOCAL_ADDR_BITS": LOCAL_ADDR_BITS, "ACC_ADDR_BITS": ACC_ADDR_BITS},
    )
