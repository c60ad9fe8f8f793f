"""tcu_dram_axi against cocotbext-axi's AxiRam: vector writes land at offset * 64 KiB +
vector * vector_bytes (little-endian, sign-extended storage), reads return them in order with
several bursts outstanding and random AXI backpressure."""

import os
import random

import pytest

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge
from cocotbext.axi import AxiBus, AxiRam


def pack(vec, w):
    return sum((int(v) & ((1 << w) - 1)) << (i * w) for i, v in enumerate(vec))


def unpack(value, n, w):
    vals = [(value >> (i * w)) & ((1 << w) - 1) for i in range(n)]
    return [v - (1 << w) if v >> (w - 1) else v for v in vals]


@cocotb.test()
async def writes_then_reads(dut):
    n, w, sb, bus = (int(os.environ[f"PARAM_{k}"]) for k in ("ARRAY_SIZE", "DATA_WIDTH", "STORAGE_BYTES",
                                                              "AXI_DATA_WIDTH"))
    rng = random.Random(n * w + bus)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=1 << 18)
    ram.write_if.b_channel.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
    ram.read_if.r_channel.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
    ram.read_if.ar_channel.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
    dut.rst.value = 1
    dut.offset.value = 2  # the bank starts at 128 KiB
    dut.cache.value = 3
    dut.s_rd_valid.value = 0
    dut.s_wr_valid.value = 0
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    vector_bytes = n * sb
    lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
    model = {}
    addrs = rng.sample(range(0, (1 << 16) // vector_bytes), 40)
    # Vectors that straddle a 4 KiB boundary when they can (24-byte vectors): split bursts.
    addrs += [a for a in ((4096 * k - 8) // vector_bytes for k in (1, 2, 3)) if a not in addrs]
    for a in addrs:  # writes
        vec = [rng.randint(lo, hi) for _ in range(n)]
        model[a] = vec
        await FallingEdge(dut.clk)
        dut.s_wr_valid.value, dut.s_wr_addr.value, dut.s_wr_data.value = 1, a, pack(vec, w)
        while True:
            await ReadOnly()
            taken = int(dut.s_wr_ready.value)
            await RisingEdge(dut.clk)
            if taken:
                break
            await FallingEdge(dut.clk)
        dut.s_wr_valid.value = 0
    while True:
        await ReadOnly()
        if not int(dut.wr_pending.value):
            break
        await RisingEdge(dut.clk)
    for a, vec in model.items():  # the bytes in memory
        raw = ram.read((2 << 16) + a * vector_bytes, vector_bytes)
        got = [int.from_bytes(raw[i * sb:(i + 1) * sb], "little", signed=True) for i in range(n)]
        assert got == vec, f"vector {a}"
    order = list(model)
    rng.shuffle(order)
    got, sent = [], 0
    await FallingEdge(dut.clk)
    while len(got) < len(order):
        dut.s_rd_valid.value = int(sent < len(order))
        if sent < len(order):
            dut.s_rd_addr.value = order[sent]
        await ReadOnly()
        if sent < len(order) and int(dut.s_rd_ready.value):
            sent += 1
        if int(dut.m_rd_valid.value):
            got.append(unpack(int(dut.m_rd_data.value), n, w))
        await FallingEdge(dut.clk)
    assert got == [model[a] for a in order]


@pytest.mark.parametrize("n, width, sb, bus", [(8, 16, 2, 64), (8, 16, 2, 128), (12, 16, 2, 64), (4, 18, 4, 64)])
def test_tcu_dram_axi(n, width, sb, bus):
    from rtl_runner import run_cocotb

    run_cocotb("tcu_dram_axi", __file__, {"ARRAY_SIZE": n, "DATA_WIDTH": width, "STORAGE_BYTES": sb,
                                          "AXI_DATA_WIDTH": bus, "DEPTH_BITS": 16})
