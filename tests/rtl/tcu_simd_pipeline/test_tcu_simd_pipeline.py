"""tcu_simd_pipeline against the emulator: random SIMD instructions on a few accumulator vectors.

Driver: an instruction offered every cycle, taken when `read_hazard` is low (or with a random gap).
Accumulator model: a read's vector on acc_rd_data the next cycle, as the vector stood when the read
was issued; writes land when presented (accumulating ones add with saturation). Reference: the
emulator runs every instruction taken, in order. Checker: every read sees the vector program order
gives it (so `read_hazard` held back every read of a pending write), and after the run the
accumulators equal the emulator's; the pipeline takes one instruction per cycle when nothing
conflicts, and `empty` only when nothing is left to write.
"""

import os
import random

import cocotb
import numpy as np
import pytest
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge, Timer

from tvm_tensil.isa.layout import layout_of
from tvm_tensil.rtl.testbench import pack_lanes, unpack_lanes

ACC_ADDR_BITS = 3  # few vectors, so that instructions read what earlier ones write
INSTRUCTIONS = 600


@cocotb.test()
async def results_match_the_emulator(dut):
    from tvm_tensil.arch import Architecture
    from tvm_tensil.isa import SIMD, Program, SIMDOp
    from tvm_tensil.runtime import Emulator

    n, w, regs = (int(os.environ[f"PARAM_{k}"]) for k in ("ARRAY_SIZE", "DATA_WIDTH", "REGISTERS"))
    dtype = {8: "FP8BP4", 16: "FP16BP8", 18: "FP18BP10", 32: "FP32BP16"}[w]
    depth = 1 << ACC_ADDR_BITS
    arch = Architecture(dtype, n, 64, 64, 64, depth, simd_registers_depth=regs)
    dt = arch.data_type
    emu = Emulator(arch)
    rng = random.Random(n + w + regs)
    np_rng = np.random.default_rng(n + w + regs)
    lim = dt.one * 4
    acc = np_rng.integers(-lim, lim + 1, (depth, n))
    emu.acc[:depth] = acc

    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.s_cmd_valid.value = 0
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0

    reads = {}  # cycle -> accumulator address read then
    taken = hazards = back_to_back = 0
    last_taken = -2
    cycle = 0
    drain = 0
    while taken < INSTRUCTIONS or drain < 8:
        await FallingEdge(dut.clk)
        cycle += 1
        if cycle - 1 in reads:
            dut.acc_rd_data.value = pack_lanes(acc[reads.pop(cycle - 1)], w)
        ins = SIMD(
            SIMDOp(rng.randrange(16)),
            *(rng.randint(0, regs) for _ in range(3)),
            acc_write=rng.randrange(depth),
            acc_read=rng.randrange(depth),
            read=rng.random() < 0.8,
            write=rng.random() < 0.8,
            accumulate=rng.random() < 0.3,
        )
        dut.s_cmd_op.value = int(ins.op)
        dut.s_cmd_dest.value, dut.s_cmd_left.value, dut.s_cmd_right.value = ins.dest, ins.left, ins.right
        dut.s_cmd_read.value, dut.s_cmd_read_addr.value = int(ins.read), ins.acc_read
        dut.s_cmd_write.value, dut.s_cmd_write_addr.value = int(ins.write), ins.acc_write
        dut.s_cmd_accumulate.value = int(ins.accumulate)
        dut.s_cmd_relu.value = int(ins.relu)
        dut.s_cmd_valid.value = 0
        await Timer(1, unit="ns")  # read_hazard depends on the instruction offered
        hazard = int(dut.read_hazard.value)
        hazards += hazard
        take = taken < INSTRUCTIONS and not hazard and rng.random() < 0.9
        dut.s_cmd_valid.value = int(take)
        await ReadOnly()
        if take:
            if ins.read:
                assert int(dut.m_acc_rd_valid.value) and int(dut.m_acc_rd_addr.value) == ins.acc_read
                assert acc[ins.acc_read].tolist() == emu.acc[ins.acc_read].tolist(), (
                    f"instruction {taken}: read of a vector an earlier instruction has yet to write"
                )
                reads[cycle] = ins.acc_read
            emu.execute(Program.from_instructions([ins], layout_of(arch)))
            back_to_back += int(last_taken == cycle - 1)
            last_taken = cycle
            taken += 1
        else:
            assert not int(dut.m_acc_rd_valid.value), "an accumulator read without an instruction"
        if int(dut.m_acc_wr_valid.value):
            addr = int(dut.m_acc_wr_addr.value)
            vec = np.array(unpack_lanes(int(dut.m_acc_wr_data.value), n, w))
            acc[addr] = np.clip(acc[addr] + vec, dt.min_int, dt.max_int) if int(dut.m_acc_wr_accumulate.value) else vec
        drain = drain + 1 if taken >= INSTRUCTIONS else 0
        if drain == 8:
            assert int(dut.empty.value), "not empty long after the last instruction"
        await RisingEdge(dut.clk)
    assert acc.tolist() == emu.acc[:depth].tolist(), "accumulators differ from the emulator's"
    assert hazards > 0 and back_to_back > INSTRUCTIONS // 4, f"hazards {hazards}, back to back {back_to_back}"


SWEEP = [(4, 16, 8, 1), (2, 32, 16, 2)]


@pytest.mark.parametrize("n, width, bp, regs", SWEEP)
def test_tcu_simd_pipeline(n, width, bp, regs):
    from rtl_runner import run_cocotb

    select = max(1, regs.bit_length())
    run_cocotb(
        "tcu_simd_pipeline",
        __file__,
        {
            "ARRAY_SIZE": n,
            "DATA_WIDTH": width,
            "BINARY_POINT": bp,
            "REGISTERS": regs,
            "SELECT_BITS": select,
            "ACC_ADDR_BITS": ACC_ADDR_BITS,
        },
        sources=["tcu_mac.sv", "tcu_simd_alu.sv", "tcu_simd.sv", "tcu_simd_pipeline.sv"],
    )
