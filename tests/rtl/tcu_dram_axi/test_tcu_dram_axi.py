"""tcu_dram_axi against cocotbext-axi's AxiRam: runs of vector writes land at offset * 64 KiB +
vector * vector_bytes (little-endian, sign-extended storage), runs of reads return them in order with
several bursts outstanding and random AXI backpressure; runs become bursts of up to 256 beats that
never cross 4 KiB."""

import os
import random

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge
from cocotbext.axi import AxiBus, AxiRam

from tvm_tensil.rtl.testbench import pack_lanes, unpack_lanes


async def watch_bursts(dut, bus_bytes, bursts):
    """Every AR/AW burst: at most 256 beats, never across a 4 KiB boundary (AXI's rules)."""
    while True:
        await RisingEdge(dut.clk)
        await ReadOnly()
        for ch in ("ar", "aw"):
            if int(getattr(dut, f"m_axi_{ch}valid").value) and int(getattr(dut, f"m_axi_{ch}ready").value):
                addr = int(getattr(dut, f"m_axi_{ch}addr").value)
                beats = int(getattr(dut, f"m_axi_{ch}len").value) + 1
                assert addr % bus_bytes == 0, f"{ch} burst at {addr:#x} not aligned"
                assert addr // 4096 == (addr + beats * bus_bytes - 1) // 4096, f"{ch} burst crosses 4 KiB"
                bursts[ch] += 1


def make_runs(rng, limit):
    """Disjoint runs of consecutive vectors: single vectors, short runs, and runs past 256 beats."""
    runs, pos = [], 0
    while True:
        start = pos + rng.randint(0, 40)
        length = rng.choice([1, 1, 1, 2, 5, 37, 140, 300])
        if start + length > limit:
            return runs
        runs.append((start, length))
        pos = start + length


async def handshake(dut, prefix):
    while True:
        await ReadOnly()
        taken = int(getattr(dut, f"{prefix}_ready").value)
        await RisingEdge(dut.clk)
        if taken:
            return
        await FallingEdge(dut.clk)


@cocotb.test()
async def runs_written_then_read(dut):
    n, w, sb, bus = (
        int(os.environ[f"PARAM_{k}"]) for k in ("ARRAY_SIZE", "DATA_WIDTH", "STORAGE_BYTES", "AXI_DATA_WIDTH")
    )
    rng = random.Random(n * w + bus)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=1 << 18)
    ram.write_if.b_channel.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
    ram.write_if.w_channel.set_pause_generator(iter(lambda: rng.random() < 0.2, None))
    ram.read_if.r_channel.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
    ram.read_if.ar_channel.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
    bursts = {"ar": 0, "aw": 0}
    cocotb.start_soon(watch_bursts(dut, bus // 8, bursts))
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
    runs = make_runs(rng, (1 << 16) // vector_bytes)
    model = {}
    for start, length in runs:  # writes: the first vector of a run carries its length
        for k in range(length):
            vec = [rng.randint(lo, hi) for _ in range(n)]
            model[start + k] = vec
            await FallingEdge(dut.clk)
            dut.s_wr_valid.value, dut.s_wr_addr.value, dut.s_wr_data.value = 1, start + k, pack_lanes(vec, w)
            dut.s_wr_run.value = length if k == 0 else 0
            await handshake(dut, "s_wr")
            dut.s_wr_valid.value = 0
    while True:
        await ReadOnly()
        if not int(dut.wr_pending.value):
            break
        await RisingEdge(dut.clk)
    for a, vec in model.items():  # the bytes in memory
        raw = ram.read((2 << 16) + a * vector_bytes, vector_bytes)
        got = [int.from_bytes(raw[i * sb : (i + 1) * sb], "little", signed=True) for i in range(n)]
        assert got == vec, f"vector {a}"
    vectors = sum(length for _, length in runs)
    assert bursts["aw"] < vectors, f"{bursts['aw']} write bursts for {vectors} vectors: runs were not merged"

    # Reads: the runs in shuffled order, some split in two, one request each.
    reads = []
    for start, length in runs:
        cut = rng.randint(1, length - 1) if length > 1 and rng.random() < 0.3 else length
        reads += [(start, cut)] + ([(start + cut, length - cut)] if cut < length else [])
    rng.shuffle(reads)
    want = [model[start + k] for start, length in reads for k in range(length)]
    got, sent = [], 0
    bursts["ar"] = 0
    await FallingEdge(dut.clk)
    while len(got) < len(want):
        dut.s_rd_valid.value = int(sent < len(reads))
        if sent < len(reads):
            dut.s_rd_addr.value, dut.s_rd_count.value = reads[sent]
        await ReadOnly()
        if sent < len(reads) and int(dut.s_rd_ready.value):
            sent += 1
        if int(dut.m_rd_valid.value):
            got.append(unpack_lanes(int(dut.m_rd_data.value), n, w))
        await FallingEdge(dut.clk)
    dut.s_rd_valid.value = 0
    assert got == want
    assert bursts["ar"] < vectors, f"{bursts['ar']} read bursts for {vectors} vectors: runs were not merged"


SWEEP = [(8, 16, 2, 64), (4, 18, 4, 64)]
FULL_SWEEP = SWEEP + [(8, 16, 2, 128), (12, 16, 2, 64)]


@pytest.mark.parametrize("n, width, sb, bus", FULL_SWEEP)
def test_tcu_dram_axi(n, width, sb, bus, full):
    from rtl_runner import run_cocotb, skip_unless_swept

    skip_unless_swept((n, width, sb, bus), SWEEP, full)

    run_cocotb(
        "tcu_dram_axi",
        __file__,
        {"ARRAY_SIZE": n, "DATA_WIDTH": width, "STORAGE_BYTES": sb, "AXI_DATA_WIDTH": bus, "DEPTH_BITS": 16},
    )
