"""tcu_top, the whole core: instructions through an AXI4-Stream source, DRAM0 and DRAM1 as
cocotbext-axi AxiRam at the offsets the program configures; every program also runs on the
emulator and every DRAM word is compared. Invalid instructions raise the error flag and are
skipped; reset returns the core to idle."""

import os
import random

import cocotb
import numpy as np
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge
from cocotbext.axi import AxiBus, AxiRam, AxiStreamBus, AxiStreamSink, AxiStreamSource

from tvm_tensil.isa.layout import layout_of
from tvm_tensil.rtl.testbench import arch_from_env

DRAM0_OFFSET, DRAM1_OFFSET = 1, 3  # in 64 KiB units


def pad_with_noops(stream: bytes, instruction_bytes: int) -> bytes:
    """Whole NoOps until the stream fills whole beats (docs/boards.md); zero bytes alone would
    leave part of an instruction in the core's input buffer."""
    from tvm_tensil.isa.program import pad_to_beats

    return pad_to_beats(stream, int(os.environ["PARAM_S_AXIS_DATA_WIDTH"]) // 8, instruction_bytes)


class Bench:
    def __init__(self, dut, arch, seed):
        self.dut, self.arch = dut, arch
        self.rng = random.Random(seed)
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
        self.source = AxiStreamSource(
            AxiStreamBus.from_prefix(dut, "s_axis_instr"), dut.clk, dut.rst_n, reset_active_level=False
        )
        self.rams = [
            AxiRam(
                AxiBus.from_prefix(dut, f"m_axi_dram{b}"), dut.clk, dut.rst_n, reset_active_level=False, size=1 << 20
            )
            for b in (0, 1)
        ]
        for ram in self.rams:
            for ch in (ram.read_if.r_channel, ram.write_if.b_channel, ram.read_if.ar_channel):
                ch.set_pause_generator(iter(lambda: self.rng.random() < 0.2, None))
        self.vector_bytes = arch.array_size * arch.data_type.storage_bytes

    async def reset(self):
        self.dut.rst_n.value = 0
        for _ in range(4):
            await RisingEdge(self.dut.clk)
        self.dut.rst_n.value = 1
        await RisingEdge(self.dut.clk)

    def load(self, bank, data):
        base = (DRAM0_OFFSET if bank == 0 else DRAM1_OFFSET) << 16
        self.rams[bank].write(base, self.arch.data_type.to_bytes(data))

    def dump(self, bank, vectors):
        base = (DRAM0_OFFSET if bank == 0 else DRAM1_OFFSET) << 16
        raw = self.rams[bank].read(base, vectors * self.vector_bytes)
        return self.arch.data_type.from_bytes(raw).reshape(vectors, self.arch.array_size)

    async def run(self, program, max_cycles=300000):
        from tvm_tensil.isa import ConfigRegister, Configure, Program

        lay = layout_of(self.arch)
        head = Program.from_instructions(
            [
                Configure(ConfigRegister.DRAM0_OFFSET, DRAM0_OFFSET),
                Configure(ConfigRegister.DRAM1_OFFSET, DRAM1_OFFSET),
                Configure(ConfigRegister.TIMEOUT, 0),
            ],
            lay,
        )
        stream = pad_with_noops(head.data + program.data, lay.instruction_bytes)
        await self.source.send(stream)
        # Done when every instruction streamed (padding NoOps included) has retired.
        total = int(self.dut.program_counter.value) + len(stream) // lay.instruction_bytes
        for cycle in range(max_cycles):
            await RisingEdge(self.dut.clk)
            await ReadOnly()
            if int(self.dut.program_counter.value) == total and int(self.dut.idle.value):
                await RisingEdge(self.dut.clk)
                return cycle
        raise AssertionError(f"not idle after {max_cycles} cycles (pc {int(self.dut.program_counter.value)})")

    async def check(self, body, name):
        from tvm_tensil.isa import Program, disassemble
        from tvm_tensil.isa.fuzz import dump_epilogue, power_on_preamble
        from tvm_tensil.runtime import Emulator

        arch = self.arch
        program = Program.from_instructions(power_on_preamble(arch) + list(body) + dump_epilogue(arch), layout_of(arch))
        np_rng = np.random.default_rng(self.rng.randrange(1 << 30))
        dt = arch.data_type
        d = [
            np_rng.integers(-dt.one * 4, dt.one * 4, (depth, arch.array_size))
            for depth in (arch.dram0_depth, arch.dram1_depth)
        ]
        emu = Emulator(arch)
        for b in (0, 1):
            emu.write_dram(b, 0, d[b])
            self.load(b, d[b])
        emu.execute(program)
        await self.run(program)
        for b, depth in ((0, arch.dram0_depth), (1, arch.dram1_depth)):
            got, want = self.dump(b, depth), emu.read_dram(b, 0, depth)
            bad = np.nonzero((got != want).any(axis=1))[0]
            if bad.size:
                raise AssertionError(
                    f"{name}: DRAM{b} differs at vectors {bad[:8].tolist()}\n" + disassemble(body, True)
                )
        assert int(self.dut.error.value) == 0, f"{name}: error flag"


@cocotb.test()
async def hand_written_programs_and_every_simd_op(dut):
    from tvm_tensil.isa import assemble
    from tvm_tensil.isa.fuzz import every_simd_op_program, hand_written_programs

    arch = arch_from_env()
    bench = Bench(dut, arch, 1)
    await bench.reset()
    for name, text in hand_written_programs(arch).items():
        await bench.check(assemble(text, layout_of(arch)).instructions(), name)
    await bench.check(every_simd_op_program(arch), "every simd op")


@cocotb.test()
async def random_programs(dut):
    from tvm_tensil.isa.fuzz import random_instruction

    arch = arch_from_env()
    bench = Bench(dut, arch, 2)
    await bench.reset()
    for i in range(int(os.environ.get("TCU_RANDOM_PROGRAMS", "8"))):
        body = [random_instruction(bench.rng, arch, max_size=12) for _ in range(bench.rng.randint(5, 25))]
        await bench.check(body, f"random program {i}")


@cocotb.test()
async def invalid_instructions_raise_error_and_are_skipped(dut):
    from tvm_tensil.isa import DataMove, Direction, Program

    arch = arch_from_env()
    bench = Bench(dut, arch, 3)
    await bench.reset()
    lay = layout_of(arch)
    bad_direction = (0x2 << lay.opcode_shift) | (7 << lay.flags_shift)
    bad_opcode = 0x9 << lay.opcode_shift
    good = Program.from_instructions(
        [DataMove(Direction.DRAM0_TO_LOCAL, 0, 0, 1), DataMove(Direction.LOCAL_TO_DRAM0, 0, 9, 1)], lay
    )
    words = b"".join(w.to_bytes(lay.instruction_bytes, "little") for w in (bad_direction, bad_opcode))
    bench.load(0, np.full((4, arch.array_size), 77))
    await bench.run(Program(words + good.data, lay))
    assert int(dut.error.value) == 1
    assert bench.dump(0, 10)[9].tolist() == [77] * arch.array_size  # the valid instructions after still ran
    # 3 configure + 2 invalid + 2 valid instructions, plus the NoOp padding to whole stream beats
    padded = pad_with_noops(bytes(7 * lay.instruction_bytes), lay.instruction_bytes)
    assert int(dut.program_counter.value) == len(padded) // lay.instruction_bytes
    await bench.reset()  # reset clears the flag and returns to idle
    await ReadOnly()
    assert int(dut.error.value) == 0 and int(dut.idle.value) == 1 and int(dut.program_counter.value) == 0


@cocotb.test()
async def timeout_tracepoint_and_sample_stream(dut):
    """Configure's timeout, tracepoint and sample interval registers (docs/isa.md, docs/rtl.md)."""
    from tvm_tensil.isa import ConfigRegister, Configure, MatMul, Program

    arch = arch_from_env()
    bench = Bench(dut, arch, 4)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis_sample"), dut.clk, dut.rst_n, reset_active_level=False)
    await bench.reset()
    lay = layout_of(arch)
    long_matmul = MatMul(0, 0, 30, zeroes=True)  # 30 vectors: longer than 20 cycles

    # No timeout set (the bench configures 0): the flag stays low.
    await bench.run(Program.from_instructions([long_matmul], lay))
    assert int(dut.timeout.value) == 0
    # A 20-cycle timeout: the long instruction raises it, it stays up, the program still completes.
    await bench.run(Program.from_instructions([Configure(ConfigRegister.TIMEOUT, 20), long_matmul], lay))
    assert int(dut.timeout.value) == 1
    await bench.reset()
    assert int(dut.timeout.value) == 0

    # Tracepoint: up exactly while the program counter equals the register.
    seen = []

    async def watch():
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            if int(dut.tracepoint.value):
                seen.append(int(dut.program_counter.value))

    watcher = cocotb.start_soon(watch())
    await bench.run(
        Program.from_instructions(
            [
                Configure(ConfigRegister.TRACEPOINT, 5),
                long_matmul,
                long_matmul,
                Configure(ConfigRegister.SAMPLE_INTERVAL, 7),
                long_matmul,
                long_matmul,
                Configure(ConfigRegister.SAMPLE_INTERVAL, 0),
            ],
            lay,
        )
    )
    watcher.cancel()
    assert seen and set(seen) == {5}, seen

    # Samples every 7 cycles while the two MatMuls ran: program counter, array activity.
    words = []
    while not sink.empty():
        frame = await sink.recv()
        words.append(int.from_bytes(bytes(frame.tdata), "little"))
    assert len(words) >= 60 // 7, len(words)
    pcs = [w & 0xFFFFFFFF for w in words]
    assert all(pc == 0xFFFFFFFF or 7 <= pc <= 11 for pc in pcs), pcs
    array_valid = [(w >> 32) & 1 for w in words]
    assert sum(array_valid) >= len(words) // 2, "the array was busy in most samples"
    assert all((w >> 48) == 0 for w in words)


def top_params(n, width, regs=1, bus=64, axi=64):
    from rtl_runner import sweep_arch
    from tvm_tensil.rtl import top_parameters
    from tvm_tensil.rtl.testbench import arch_env

    arch = sweep_arch(n, width, regs)
    return top_parameters(arch, axi_data_width=axi, stream_width=bus), arch_env(arch)


SWEEP = [(4, 16, 1, 64, 64)]
FULL_SWEEP = SWEEP + [(8, 16, 1, 32, 128), (4, 32, 2, 64, 64), (12, 16, 1, 64, 64)]


@pytest.mark.parametrize("n, width, regs, bus, axi", FULL_SWEEP)
def test_tcu_top(n, width, regs, bus, axi, full):
    from rtl_runner import run_cocotb, skip_unless_swept
    from tvm_tensil.rtl.toolchain import rtl_sources

    skip_unless_swept((n, width, regs, bus, axi), SWEEP, full)

    params, env = top_params(n, width, regs, bus=bus, axi=axi)
    env["TCU_RANDOM_PROGRAMS"] = "30" if full else "8"
    run_cocotb("tcu_top", __file__, params, extra_env=env, sources=[p.name for p in rtl_sources()])
