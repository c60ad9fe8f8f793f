"""cocotb bench for benchmarks/rtl_cycles.py: cycles from the first instruction's acceptance until the
core is idle again (every write landed, write responses included)."""

import json
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge
from cocotbext.axi import AxiBus, AxiRam, AxiStreamBus, AxiStreamSource

from tvm_tensil.isa.layout import layout_of


@cocotb.test()
async def measure(dut):
    from tvm_tensil.isa import assemble
    from tvm_tensil.isa.program import pad_to_beats
    from tvm_tensil.rtl.testbench import arch_from_env

    arch = arch_from_env()
    lay = layout_of(arch)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    source = AxiStreamSource(
        AxiStreamBus.from_prefix(dut, "s_axis_instr"), dut.clk, dut.rst_n, reset_active_level=False
    )
    for b in (0, 1):
        AxiRam(AxiBus.from_prefix(dut, f"m_axi_dram{b}"), dut.clk, dut.rst_n, reset_active_level=False, size=1 << 22)
    dut.rst_n.value = 0
    for _ in range(4):
        await RisingEdge(dut.clk)
    dut.rst_n.value = 1
    vectors_4k = 4096 // arch.vector_bytes
    n = arch.array_size
    half = arch.accumulator_depth // 2  # the upper accumulator bank starts here
    cases = {
        "matmul_256": "matmul local=0x0 acc=0x0 size=256",
        "loadweights": f"loadweights local=0x0 size={n + 1}",
        # A second MatMul streams in behind the first without waiting for the array to drain.
        "matmul_256_twice": "matmul local=0x0 acc=0x0 size=256\nmatmul local=0x100 acc=0x100 size=256",
        "dram0_to_local_4KiB": f"datamove dram0_to_local local=0x0 dram0=0x0 size={vectors_4k}",
        "local_to_dram0_4KiB": f"datamove local_to_dram0 local=0x0 dram0=0x0 size={vectors_4k}",
        "local_to_acc_256": "datamove local_to_acc local=0x0 acc=0x0 size=256",
        # A DRAM load into one half of local memory beside a MatMul on the other: they overlap.
        "dram0_to_local_4KiB_beside_matmul_256": f"datamove dram0_to_local local=0x1000 dram0=0x0 size={vectors_4k}\n"
        "matmul local=0x0 acc=0x0 size=256",
        # The MatMul reads what the load writes: it waits (read-after-write interlock).
        "dram0_to_local_4KiB_then_dependent_matmul": f"datamove dram0_to_local local=0x0 dram0=0x0 size={vectors_4k}\n"
        f"matmul local=0x0 acc=0x0 size={vectors_4k}",
        # ReLU as compiled: each vector read and written in place, no dependency between them.
        "simd_x64_independent": "\n".join(
            f"simd max read write dest=out left=in right=r1 acc_write={i} acc_read={i}" for i in range(64)
        ),
        # Each instruction reads what the previous one wrote: the hazard interlock stalls.
        "simd_x64_dependent": "\n".join(["simd max read write dest=out left=in right=r1 acc_write=0 acc_read=0"] * 64),
        # A LoadWeights between two MatMuls fills the array's other weight set beside the first one:
        # the second MatMul streams right behind the first.
        "loadweights_beside_matmul_256": f"matmul local=0x0 acc=0x0 size=256\nloadweights local=0x300 size={n + 1}\n"
        "matmul local=0x100 acc=0x100 size=256",
        # The two DRAM engines: a DRAM1 load beside a DRAM0 load.
        "dram1_to_local_4KiB_beside_dram0_to_local_4KiB": f"datamove dram0_to_local local=0x0 dram0=0x0 "
        f"size={vectors_4k}\n"
        f"datamove dram1_to_local local=0x1000 dram1=0x0 size={vectors_4k}",
        # SIMD on the lower accumulator bank beside a MatMul writing the upper one.
        "simd_x256_beside_matmul_512": f"matmul local=0x0 acc={half} size=512\n"
        + "\n".join(f"simd max read write dest=out left=in right=r1 acc_write={i} acc_read={i}" for i in range(256)),
        # An accumulators -> local move from the lower bank beside a MatMul writing the upper one.
        "acc_to_local_256_beside_matmul_512": f"matmul local=0x0 acc={half} size=512\n"
        "datamove acc_to_local local=0x400 acc=0x0 size=256",
    }
    beat = int(os.environ["S_AXIS_BYTES"])
    results = {}
    for name, text in cases.items():
        prog = assemble(text, lay)
        count = len(prog)
        stream = pad_to_beats(prog.data, beat, lay.instruction_bytes)
        start_pc = int(dut.program_counter.value)
        await source.send(stream)
        # From the first instruction's acceptance until everything has landed.
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            if int(dut.core_inst.s_instr_valid.value) and int(dut.core_inst.s_instr_ready.value):
                break
        cycles = 1
        while True:
            await RisingEdge(dut.clk)
            cycles += 1
            await ReadOnly()
            if int(dut.program_counter.value) >= start_pc + count and int(dut.idle.value):
                break
        results[name] = {"cycles": cycles, "instructions": count}
        while not (int(dut.idle.value) and source.empty()):
            await RisingEdge(dut.clk)
            await ReadOnly()
        await RisingEdge(dut.clk)
    with open(os.environ["TCU_RESULTS"], "w") as f:
        json.dump(results, f)
