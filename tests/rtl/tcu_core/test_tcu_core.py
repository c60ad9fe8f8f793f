"""tcu_core against the emulator: hand-written and random programs, DRAM compared word for word.

DRAM banks are Python models behind the core's vector ports (reads name a run of consecutive
vectors), answering in order after random delays and with random backpressure. A preamble zeroes
weights, accumulators, local memory and SIMD registers (the emulator's power-on state); an epilogue
copies local memory and accumulators out to DRAM, so the comparison covers every memory.
"""

import os
import random

import cocotb
import numpy as np
import pytest
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from tvm_tensil.isa.layout import layout_of
from tvm_tensil.rtl.testbench import arch_from_env, pack_lanes, unpack_lanes


def preamble(arch):
    from tvm_tensil.isa.fuzz import power_on_preamble

    return power_on_preamble(arch)


def epilogue(arch):
    from tvm_tensil.isa.fuzz import dump_epilogue

    return dump_epilogue(arch)


async def run_on_core(dut, arch, program, dram0, dram1, rng, max_cycles=200000):
    n, w = arch.array_size, arch.data_type.width
    beats = int(os.environ["PARAM_VECTOR_BEATS"])
    words = [program.word(pc) for pc in range(len(program))]
    banks = {0: dram0, 1: dram1}
    queues = {0: [], 1: []}
    dut.s_instr_valid.value = 0
    for b in (0, 1):
        getattr(dut, f"m_dram{b}_rd_ready").value = 0
        getattr(dut, f"m_dram{b}_wr_ready").value = 0
        getattr(dut, f"s_dram{b}_rd_valid").value = 0
        getattr(dut, f"dram{b}_wr_pending").value = 0
    pc = 0
    for cycle in range(max_cycles):
        await FallingEdge(dut.clk)
        dut.s_instr_valid.value = int(pc < len(words))
        if pc < len(words):
            dut.s_instr_data.value = words[pc]
        for b in (0, 1):
            getattr(dut, f"m_dram{b}_rd_ready").value = int(rng.random() < 0.7)
            getattr(dut, f"m_dram{b}_wr_ready").value = int(rng.random() < 0.7)
            q = queues[b]
            ready = q and q[0][0] <= cycle
            getattr(dut, f"s_dram{b}_rd_valid").value = int(bool(ready))
            if ready:
                getattr(dut, f"s_dram{b}_rd_data").value = pack_lanes(banks[b][q[0][1]], w)
        await ReadOnly()
        if pc < len(words) and int(dut.s_instr_ready.value):
            pc += 1
        for b in (0, 1):
            q = queues[b]
            if q and q[0][0] <= cycle:
                q.pop(0)
            if int(getattr(dut, f"m_dram{b}_rd_valid").value) and int(getattr(dut, f"m_dram{b}_rd_ready").value):
                # A run of consecutive vectors, answered one by one after random delays, at most one
                # per VECTOR_BEATS cycles (a vector is that many bus beats).
                addr = int(getattr(dut, f"m_dram{b}_rd_addr").value)
                for k in range(int(getattr(dut, f"m_dram{b}_rd_count").value)):
                    last = q[-1][0] if q else cycle
                    q.append((max(last + beats - 1, cycle) + rng.randint(1, 4), (addr + k) % len(banks[b])))
            if int(getattr(dut, f"m_dram{b}_wr_valid").value) and int(getattr(dut, f"m_dram{b}_wr_ready").value):
                addr = int(getattr(dut, f"m_dram{b}_wr_addr").value)
                banks[b][addr] = unpack_lanes(int(getattr(dut, f"m_dram{b}_wr_data").value), n, w)
        done = pc == len(words) and int(dut.idle.value) and not queues[0] and not queues[1]
        await RisingEdge(dut.clk)
        if done:
            return cycle
    raise AssertionError(f"core did not finish in {max_cycles} cycles (pc {int(dut.program_counter.value)})")


async def reset(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0


async def check_program(dut, arch, body, rng, name):
    from tvm_tensil.isa import Program
    from tvm_tensil.runtime import Emulator

    insts = preamble(arch) + body + epilogue(arch)
    program = Program.from_instructions(insts, layout_of(arch))
    np_rng = np.random.default_rng(rng.randrange(1 << 30))
    dt = arch.data_type
    d0 = np_rng.integers(-dt.one * 4, dt.one * 4, (arch.dram0_depth, arch.array_size))
    d1 = np_rng.integers(-dt.one * 4, dt.one * 4, (arch.dram1_depth, arch.array_size))
    emu = Emulator(arch)
    emu.write_dram(0, 0, d0)
    emu.write_dram(1, 0, d1)
    emu.execute(program)
    rtl0, rtl1 = d0.tolist(), d1.tolist()
    await run_on_core(dut, arch, program, rtl0, rtl1, rng)
    for bank, got in ((0, np.array(rtl0)), (1, np.array(rtl1))):
        want = emu.read_dram(bank, 0, got.shape[0])
        bad = np.nonzero((got != want).any(axis=1))[0]
        if bad.size:
            from tvm_tensil.isa import disassemble

            raise AssertionError(
                f"{name}: DRAM{bank} differs at vectors {bad[:8].tolist()}: rtl "
                f"{got[bad[:3]].tolist()} emulator {want[bad[:3]].tolist()}\nprogram:\n"
                + disassemble(body, with_pc=True)
            )
    assert int(dut.error.value) == 0


@cocotb.test()
async def hand_written_programs(dut):
    from tvm_tensil.isa import assemble
    from tvm_tensil.isa.fuzz import hand_written_programs as programs

    arch = arch_from_env()
    rng = random.Random(1)
    await reset(dut)
    for name, text in programs(arch).items():
        await check_program(dut, arch, assemble(text, layout_of(arch)).instructions(), rng, name)


@cocotb.test()
async def every_simd_op(dut):
    from tvm_tensil.isa.fuzz import every_simd_op_program

    arch = arch_from_env()
    rng = random.Random(2)
    await reset(dut)
    await check_program(dut, arch, every_simd_op_program(arch), rng, "every simd op")


# Each pair: a DRAM move and a compute instruction, dependent (the later one must wait) or not (they
# overlap). Addresses are in a 64-vector local memory.
OVERLAP_PROGRAM = """
    datamove dram1_to_local local=0 dram1=0 size={w}
    loadweights local=0 size={w}
    datamove dram0_to_local local=8 dram0=0 size=8
    matmul local=8 acc=0 size=8
    datamove dram0_to_local local=16 dram0=8 size=8
    matmul local=8 acc=8 size=8
    datamove local_to_dram0 local=16 dram0=100 size=8
    datamove acc_to_local local=16 acc=8 size=8
    datamove local_to_dram0 local=16 dram0=120 size=8
    datamove dram0_to_local local=40 dram0=16 size=8
    datamove acc_to_local local=44 acc=0 size=8
    datamove dram0_to_local local=24:2 dram0=30 size=6
    matmul local=25:2 acc=16 size=6
    datamove local_to_dram1 local=32 dram1=60 size=8
    datamove local_to_acc local=33 acc=20 size=4
    simd max read write dest=out left=in right=r1 acc_write=1 acc_read=1
    datamove dram1_to_local local=56 dram1=40 size=8
    simd add read write dest=out left=in right=in acc_write=2 acc_read=2
"""


@cocotb.test()
async def dram_moves_overlap_compute_only_without_hazards(dut):
    """Read-after-write, write-after-read and write-after-write on local memory between the engines
    give the program-order result, and independent DRAM moves do run beside compute."""
    from tvm_tensil.isa import assemble

    arch = arch_from_env()
    rng = random.Random(4)
    await reset(dut)
    both_busy = 0

    async def watch():
        nonlocal both_busy
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            if int(dut.c_busy.value) and any(int(getattr(dut, f"d{b}{r}_busy").value) for b in (0, 1) for r in "rw"):
                both_busy += 1

    watcher = cocotb.start_soon(watch())
    body = assemble(OVERLAP_PROGRAM.format(w=arch.array_size + 1), layout_of(arch)).instructions()
    await check_program(dut, arch, body, rng, "overlap and hazards")
    watcher.cancel()
    assert both_busy >= 8, f"the engines overlapped for only {both_busy} cycles"


@cocotb.test()
async def random_programs(dut):
    from tvm_tensil.isa.fuzz import random_program

    arch = arch_from_env()
    rng = random.Random(3)
    await reset(dut)
    count = int(os.environ.get("TCU_RANDOM_PROGRAMS", "10"))
    for i in range(count):
        body = random_program(rng, arch, rng.randint(5, 30), max_size=12)
        await check_program(dut, arch, body, rng, f"random program {i}")


# (array size, data width, SIMD registers, bus beats per vector, the window MatMul): with one beat
# both banks could answer every cycle, so DRAM -> local moves take turns. CI builds two cores: two
# beats without the window MatMul, and one beat with it (as arty_a7_35 has them).
SWEEP = [(4, 16, 1, 2, False), (4, 16, 1, 1, True)]
FULL_SWEEP = SWEEP + [
    (4, 16, 1, 1, False), (4, 16, 1, 2, True), (2, 16, 1, 2, False), (8, 16, 2, 2, False), (4, 32, 1, 4, False),
    (12, 16, 1, 3, False), (8, 16, 1, 2, True),
]  # fmt: skip


@pytest.mark.parametrize("n, width, regs, beats, window", FULL_SWEEP)
def test_tcu_core(n, width, regs, beats, window, full):
    from rtl_runner import core_params, run_cocotb, skip_unless_swept

    skip_unless_swept((n, width, regs, beats, window), SWEEP, full)

    params, env = core_params(n, width, regs, beats, window)
    env["TCU_RANDOM_PROGRAMS"] = "40" if full else "10"
    from tvm_tensil.rtl.toolchain import rtl_sources

    sources = [
        p.name
        for p in rtl_sources()
        if p.stem not in ("tcu_isa_pkg", "tcu_top", "tcu_dram_axi", "tcu_instruction_input")
    ]
    run_cocotb("tcu_core", __file__, params, extra_env=env, sources=sources)
