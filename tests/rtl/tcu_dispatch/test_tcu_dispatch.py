"""tcu_dispatch: random instruction streams against the dispatch rule, with engines modelled.

Driver: random valid instructions (tvm_tensil.isa.fuzz), invalid words and Configures, offered with
random gaps. Engine models: each engine is busy for a random time after its dispatch (the compute
engine takes the next MatMul before it is done, as once it has issued its last vector); a SIMD
pipeline model holds each SIMD's write for three stages and reports reads of pending writes; the
accumulator write the dispatcher sees comes from that pipeline or, at random, from a busy move.
Model: the rule of docs/rtl.md computed from the instruction objects (local memory ranges with
strides and wrap-around, accumulator banks, DRAM ranges, turns between readers). Checker: every
cycle, `s_instr_ready` equals the rule's answer for the instruction offered (never early, never
late); each dispatch starts exactly its engine with the instruction's fields; Configure registers,
program counter, error, timeout and idle follow the instructions.
"""

import os
import random

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from tvm_tensil.isa.instructions import Engine
from tvm_tensil.isa.layout import layout_of
from tvm_tensil.rtl.testbench import arch_from_env

COMPUTE, MOVE, WEIGHTS = Engine.COMPUTE, Engine.MOVE, Engine.WEIGHTS
D0R, D0W, D1R, D1W = Engine.DRAM0_READER, Engine.DRAM0_WRITER, Engine.DRAM1_READER, Engine.DRAM1_WRITER
ENGINES = len(Engine)
INSTRUCTIONS = 2000
KINDS = ("noop", "matmul", "datamove", "datamove", "datamove", "loadweights", "simd", "configure")


def engine_of(ins):
    from tvm_tensil.isa import DataMove, LoadWeights, MatMul

    if isinstance(ins, MatMul):
        return COMPUTE
    if isinstance(ins, LoadWeights):
        return WEIGHTS
    if isinstance(ins, DataMove):
        return Engine.of_datamove(ins.direction)
    return None


def local_range(ins, depth):
    """(lo, hi, writes) of the local memory an instruction uses, or None."""
    from tvm_tensil.isa import DataMove, LoadWeights, MatMul

    if isinstance(ins, (MatMul, LoadWeights)) and ins.zeroes or not isinstance(ins, (MatMul, LoadWeights, DataMove)):
        return None
    hi = ins.local + ((ins.size - 1) << ins.local_stride)
    lo, hi = (0, depth - 1) if hi >= depth else (ins.local, hi)
    return lo, hi, isinstance(ins, DataMove) and ins.direction.to_local


def acc_banks(ins, depth):
    """The accumulator banks (bit k: bank k) an instruction touches."""
    from tvm_tensil.isa import SIMD, DataMove, MatMul

    half = depth // 2
    if isinstance(ins, SIMD):
        return ((1 << (ins.acc_read >= half)) if ins.read else 0) | ((1 << (ins.acc_write >= half)) if ins.write else 0)
    if isinstance(ins, MatMul) or isinstance(ins, DataMove) and engine_of(ins) == MOVE:
        addr = ins.acc if isinstance(ins, MatMul) else ins.address
        stride = ins.acc_stride if isinstance(ins, MatMul) else ins.stride
        end = addr + ((ins.size - 1) << stride)
        return 3 if end >= depth else (int(addr < half) | (int(end >= half) << 1))
    return 0


@cocotb.test()
async def dispatch_follows_the_rule(dut):
    from tvm_tensil.isa import SIMD, ConfigRegister, Configure, DataMove, MatMul, NoOp
    from tvm_tensil.isa.fuzz import random_instruction
    from tvm_tensil.isa.instructions import CONFIG_RESET_VALUES

    arch = arch_from_env()
    layout = layout_of(arch)
    beats = int(os.environ["PARAM_VECTOR_BEATS"])
    rng = random.Random(beats)
    local_depth, acc_depth = arch.local_depth, arch.accumulator_depth
    half = acc_depth // 2

    def next_instruction():
        r = rng.random()
        if r < 0.02:  # an opcode no TCU knows
            return None, rng.choice([5, 6, 7, 10, 14]) << (layout.instruction_bits - 4) | rng.getrandbits(16)
        if r < 0.03:  # a DataMove direction that does not exist
            flags = rng.choice([4, 5, 8, 11, 14])
            return None, (2 << 4 | flags) << (layout.instruction_bits - 8) | rng.getrandbits(16)
        if r < 0.05:
            reg = rng.choice([r for r in ConfigRegister if r != ConfigRegister.WINDOW])  # (a plain core's)
            ins = Configure(reg, rng.randrange(1 << 12) if reg != ConfigRegister.TIMEOUT else rng.randrange(3, 40))
        else:
            # DataMoves thrice as often as the rest: seven engines, five of them moves'
            ins = random_instruction(rng, arch, max_size=rng.choice([2, 6, 12]), kinds=KINDS)
        return ins, ins.encode(layout)

    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.s_instr_valid.value = 0
    for name in (
        "engine_ready",
        "engine_busy",
        "engine_busy_cycles",
        "simd_read_hazard",
        "acc_wr_valid",
        "acc_wr_accumulate",
        "acc_wr_addr",
    ):
        getattr(dut, name).value = 0
    dut.engine_ready.value = (1 << ENGINES) - 1
    dut.simd_empty.value = 1
    dut.compute_quiet.value = dut.move_quiet.value = 1
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0

    # Engine models: busy until `until`; the compute engine takes a MatMul again from `issued`.
    until = [0] * ENGINES
    issued = 0
    started_at = [0] * ENGINES
    held = [None] * ENGINES  # the local range each engine's instruction holds (cleared a cycle after busy)
    dram_range = [None] * ENGINES
    compute_banks = move_banks = simd_banks = 0
    simd_stages = [None, None, None, None]  # p1, p2, p3, write: (write, address, accumulate) or None
    config = {r: CONFIG_RESET_VALUES.get(r, 0) for r in ConfigRegister}
    pc = error = timeout = 0
    lw_since_mm = mm_since_lw = continues = 0
    turn_waits = 0
    done = 0
    seen = {k: 0 for k in ("waits", "starts", "config", "errors", "simd_hazards", "bank_waits", "dram_waits")}
    ins, word = next_instruction()
    cycle = 0
    while done < INSTRUCTIONS:
        await FallingEdge(dut.clk)
        cycle += 1
        busy = [until[e] >= cycle for e in range(ENGINES)]
        ready = [not busy[e] for e in range(ENGINES)]
        ready[COMPUTE] = not busy[COMPUTE] or cycle >= issued
        dut.engine_busy.value = sum(int(b) << e for e, b in enumerate(busy))
        dut.engine_ready.value = sum(int(r) << e for e, r in enumerate(ready))
        waited = [cycle - started_at[e] - 1 if busy[e] else 0 for e in range(ENGINES)]
        dut.engine_busy_cycles.value = sum(w << (32 * e) for e, w in enumerate(waited))
        dut.compute_quiet.value = int(not busy[COMPUTE])
        dut.move_quiet.value = int(not busy[MOVE])
        empty = all(s is None for s in simd_stages)
        dut.simd_empty.value = int(empty)
        write = simd_stages[3]
        if write is None and busy[MOVE] and rng.random() < 0.3:  # a move's write
            write = (True, rng.randrange(acc_depth), rng.random() < 0.5)
        dut.acc_wr_valid.value = int(write is not None)
        if write is not None:
            dut.acc_wr_addr.value, dut.acc_wr_accumulate.value = write[1], int(write[2])
        pending = {s[1] for s in simd_stages if s is not None and s[0]}
        read_hazard = isinstance(ins, SIMD) and ins.read and ins.acc_read in pending
        dut.simd_read_hazard.value = int(read_hazard)
        offered = rng.random() < 0.85
        dut.s_instr_valid.value = int(offered)
        dut.s_instr_data.value = word

        # The rule.
        engine = engine_of(ins)
        rng_local = local_range(ins, local_depth) if ins is not None else None
        banks = acc_banks(ins, acc_depth) if ins is not None else 0
        compute_live = compute_banks if busy[COMPUTE] else 0
        acc_live = (move_banks if busy[MOVE] else 0) | (0 if empty else simd_banks)

        def local_hazard():
            if rng_local is None:
                return False
            lo, hi, writes = rng_local
            return any(
                held[e] is not None and e != engine and (writes or held[e][2]) and lo <= held[e][1] and held[e][0] <= hi
                for e in range(ENGINES)
            )

        if ins is None or isinstance(ins, NoOp):
            may = True
        elif isinstance(ins, SIMD):
            acc_port = ins.read and write is not None and write[2] and (write[1] >= half) == (ins.acc_read >= half)
            may = not busy[MOVE] and not read_hazard and not acc_port and not banks & compute_live
            seen["simd_hazards"] += int(read_hazard or acc_port)
        elif isinstance(ins, Configure):
            may = not any(busy) and empty
        elif engine == COMPUTE:
            may = ready[COMPUTE] and not local_hazard() and not banks & acc_live
            seen["bank_waits"] += int(bool(banks & acc_live))
        elif engine == MOVE:
            may = ready[MOVE] and empty and not local_hazard() and not banks & compute_live
        elif engine == WEIGHTS:
            may = ready[WEIGHTS] and not local_hazard()
        else:
            partner = engine + 1 if engine in (D0R, D1R) else engine - 1
            lo, hi = ins.address, ins.address + ((ins.size - 1) << ins.stride)
            dram = (
                busy[partner]
                and dram_range[partner] is not None
                and lo <= dram_range[partner][1]
                and dram_range[partner][0] <= hi
            )
            turns = beats == 1 and engine in (D0R, D1R) and busy[D1R if engine == D0R else D0R]
            may = ready[engine] and not local_hazard() and not dram and not turns
            seen["dram_waits"] += int(dram)
            turn_waits += int(turns and not dram and ready[engine] and not local_hazard())
        await ReadOnly()
        assert int(dut.s_instr_ready.value) == int(may), (
            f"cycle {cycle}, instruction {done} ({ins}): ready {int(dut.s_instr_ready.value)}, the rule says {int(may)}"
        )
        start = offered and may
        starts = int(dut.m_start.value)
        assert starts == ((1 << engine) if start and engine is not None else 0), f"cycle {cycle}: m_start {starts:07b}"
        assert int(dut.m_simd_start.value) == int(start and isinstance(ins, SIMD))
        if start and engine is not None:
            seen["starts"] += 1
            assert int(dut.cmd_flags.value) == word >> (layout.instruction_bits - 8) & 0xF
            if isinstance(ins, MatMul):
                fields = (ins.local, 1 << ins.local_stride, ins.acc, 1 << ins.acc_stride, ins.size)
            elif isinstance(ins, DataMove):
                fields = (ins.local, 1 << ins.local_stride, ins.address, 1 << ins.stride, ins.size)
            else:
                fields = None
                assert int(dut.cmd_lw_count.value) == ins.size
                if not ins.zeroes:
                    assert int(dut.cmd_lw_top.value) == ins.local + ((ins.size - 1) << ins.local_stride)
            if fields:
                got = tuple(int(getattr(dut, f"cmd_{k}").value) for k in ("addr0", "step0", "addr1", "step1", "count"))
                assert got == fields, f"cycle {cycle}: fields {got}, want {fields}"
        if start and isinstance(ins, SIMD):
            assert (int(dut.cmd_addr0.value), int(dut.cmd_addr1.value)) == (ins.acc_write, ins.acc_read)
        seen["waits"] += int(offered and not may)
        assert int(dut.idle.value) == int(not offered and not any(busy) and empty), f"cycle {cycle}: idle"
        assert int(dut.program_counter.value) == pc and int(dut.error.value) == error
        assert int(dut.timeout.value) == timeout, f"cycle {cycle}: timeout {int(dut.timeout.value)}, want {timeout}"
        for reg, name in (
            (ConfigRegister.DRAM0_OFFSET, "dram0_offset"),
            (ConfigRegister.DRAM1_CACHE, "dram1_cache"),
            (ConfigRegister.SAMPLE_INTERVAL, "sample_interval"),
        ):
            assert int(getattr(dut, name).value) == config[reg] & ((1 << len(getattr(dut, name))) - 1)
        assert int(dut.tracepoint.value) == int(pc == config[ConfigRegister.TRACEPOINT])
        assert int(dut.load_continues.value) == continues
        if start and engine == COMPUTE:
            assert int(dut.cmd_swap.value) == lw_since_mm, "a MatMul's swap differs from 'a LoadWeights since'"

        # The clock edge: the model advances as the RTL does.
        limit = config[ConfigRegister.TIMEOUT]
        if limit and any(busy[e] and cycle - started_at[e] - 1 >= limit for e in range(ENGINES)):
            timeout = 1
        for e in range(ENGINES):
            if held[e] is not None and not busy[e]:
                held[e] = None
        simd_stages = [None] + simd_stages[:3]
        simd_stages[3] = simd_stages[3] if simd_stages[3] is not None and simd_stages[3][0] else None
        if start:
            pc += 1
            if ins is None:
                error = 1
                seen["errors"] += 1
            elif isinstance(ins, Configure):
                seen["config"] += 1
                if ins.register == ConfigRegister.PROGRAM_COUNTER:
                    pc = ins.value
                config[ins.register] = ins.value
            elif isinstance(ins, SIMD):
                simd_banks = (simd_banks if not empty else 0) | banks
                simd_stages[0] = (ins.write, ins.acc_write, ins.accumulate)
            elif engine is not None:
                length = rng.randint(1, 12)
                if engine == COMPUTE:
                    compute_banks = (compute_banks if busy[COMPUTE] else 0) | banks
                    issued = cycle + 1 + rng.randrange(length)
                    lw_since_mm, mm_since_lw = 0, 1
                if engine == WEIGHTS:
                    continues = int(not mm_since_lw)
                    lw_since_mm, mm_since_lw = 1, 0
                if engine == MOVE:
                    move_banks = banks
                until[engine] = cycle + length
                started_at[engine] = cycle
                held[engine] = rng_local
                if engine >= D0R:
                    dram_range[engine] = (ins.address, ins.address + ((ins.size - 1) << ins.stride))
            done += 1
            ins, word = next_instruction()
        await RisingEdge(dut.clk)
    assert all(seen.values()), f"a path went untested: {seen}"
    assert turn_waits > 0 or beats > 1, "DRAM -> local moves never had to take turns"


@pytest.mark.parametrize("beats", [2, 1])
def test_tcu_dispatch(beats):
    from rtl_runner import core_params, module_parameters, run_cocotb

    params, env = core_params(4, 16, beats=beats)  # the dispatcher takes some of the core's
    run_cocotb("tcu_dispatch", __file__, {k: params[k] for k in module_parameters("tcu_dispatch")}, extra_env=env)
