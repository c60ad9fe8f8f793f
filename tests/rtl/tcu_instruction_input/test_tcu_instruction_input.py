"""tcu_instruction_input: random programs through a cocotbext-axi stream source with random
gaps, taken with random backpressure; the words must come out whole and in order."""

import os
import random

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamSource


@cocotb.test()
async def words_come_out_whole_and_in_order(dut):
    bus_bits, nbytes = int(os.environ["PARAM_S_AXIS_DATA_WIDTH"]), int(os.environ["PARAM_INSTRUCTION_BYTES"])
    rng = random.Random(bus_bits * nbytes)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
    source.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
    dut.rst.value = 1
    dut.m_instr_ready.value = 0
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    words = [rng.getrandbits(8 * nbytes) for _ in range(200)]
    stream = b"".join(w.to_bytes(nbytes, "little") for w in words)
    stream += bytes(-len(stream) % (bus_bits // 8))  # NoOp padding to whole beats, as drivers do
    await source.send(stream)
    got = []
    for _ in range(20000):
        dut.m_instr_ready.value = int(rng.random() < 0.7)
        await ReadOnly()
        if int(dut.m_instr_valid.value) and int(dut.m_instr_ready.value):
            got.append(int(dut.m_instr_data.value))
        await RisingEdge(dut.clk)
        if len(got) >= len(words) + len(stream) // nbytes - len(words):
            break
    assert got[: len(words)] == words
    assert all(w == 0 for w in got[len(words) :])  # only the zero padding follows


@pytest.mark.parametrize("bus, nbytes", [(64, 8), (32, 9), (128, 8), (8, 3)])
def test_tcu_instruction_input(bus, nbytes):
    from rtl_runner import run_cocotb

    run_cocotb("tcu_instruction_input", __file__, {"S_AXIS_DATA_WIDTH": bus, "INSTRUCTION_BYTES": nbytes})
