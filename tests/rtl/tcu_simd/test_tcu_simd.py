"""tcu_simd against the emulator: random SIMD instructions (with the ReLU flag where the lanes have
it), outputs and registers compared."""

import os
import random

import cocotb
import numpy as np
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from tvm_tensil.isa.layout import layout_of
from tvm_tensil.rtl.testbench import pack_lanes, unpack_lanes


@cocotb.test()
async def random_instructions_match_the_emulator(dut):
    from tvm_tensil.arch import Architecture
    from tvm_tensil.isa import SIMD, Program, SIMDOp
    from tvm_tensil.runtime import Emulator

    n, w, bp, regs = (int(os.environ[f"PARAM_{k}"]) for k in ("ARRAY_SIZE", "DATA_WIDTH", "BINARY_POINT", "REGISTERS"))
    dtype = {8: "FP8BP4", 16: "FP16BP8", 18: "FP18BP10", 32: "FP32BP16"}[w]
    relu_flag = os.environ.get("PARAM_SIMD_RELU", "0") == "1"
    arch = Architecture(dtype, n, 64, 64, 64, 64, simd_registers_depth=regs, simd_relu=relu_flag)
    emu = Emulator(arch)
    dt = arch.data_type
    rng = random.Random(n + w + regs)
    np_rng = np.random.default_rng(n + w + regs)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.s_in_valid.value = 0
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    dut.rst.value = 0
    specials = np.array([dt.min_int, dt.max_int, 0, dt.one, -dt.one, 1, -1])
    for step in range(400):
        op = SIMDOp(rng.randrange(16))
        left, right, dest = (rng.randint(0, regs) for _ in range(3))
        relu = relu_flag and rng.random() < 0.5
        if rng.random() < 0.3:
            x = np_rng.choice(specials, n)
        else:
            lim = dt.max_int if rng.random() < 0.3 else dt.one * 4
            x = np_rng.integers(-lim, lim + 1, n)
        emu.acc[0] = x
        emu.execute(
            Program.from_instructions(
                [SIMD(op, dest, left, right, acc_write=1, acc_read=0, read=True, write=True, relu=relu)],
                layout_of(arch),
            )
        )
        dut.s_in_valid.value = 1
        dut.s_in_op.value = int(op)
        dut.s_in_relu.value = int(relu)
        dut.s_in_left.value, dut.s_in_right.value, dut.s_in_dest.value = left, right, dest
        dut.s_in_data.value = pack_lanes(x, w)
        await RisingEdge(dut.clk)
        dut.s_in_valid.value = 0
        await ReadOnly()
        got = unpack_lanes(int(dut.m_out_data.value), n, w)
        assert int(dut.m_out_valid.value) == 1
        what = f"step {step}: {op.name} l={left} r={right} d={dest} relu={relu} x={x.tolist()}"
        assert got == emu.acc[1].tolist(), what
        sat = emu.last_stats.saturations["simd"] > 0
        assert int(dut.m_out_saturated.value) == int(sat), f"step {step}: {op.name} saturation flag"
        await RisingEdge(dut.clk)


# (lanes, data width, binary point, registers, the ReLU flag)
SWEEP = [(8, 16, 8, 1, 0), (4, 32, 16, 2, 1)]
FULL_SWEEP = SWEEP + [(2, 16, 8, 0, 0), (12, 16, 8, 1, 1), (16, 8, 4, 4, 0), (8, 18, 10, 16, 1)]


@pytest.mark.parametrize("n, width, bp, regs, relu", FULL_SWEEP)
def test_tcu_simd(n, width, bp, regs, relu, full):
    from rtl_runner import run_cocotb, skip_unless_swept

    skip_unless_swept((n, width, bp, regs, relu), SWEEP, full)

    select = max(1, regs.bit_length())
    run_cocotb(
        "tcu_simd",
        __file__,
        {
            "ARRAY_SIZE": n,
            "DATA_WIDTH": width,
            "BINARY_POINT": bp,
            "REGISTERS": regs,
            "SELECT_BITS": select,
            "SIMD_RELU": relu,
        },  # fmt: skip
        sources=["tcu_mac.sv", "tcu_simd_alu.sv", "tcu_simd.sv"],
    )
