"""The "reference" device: the TCU's functional model in readable numpy, one op per line.

It executes a program one instruction at a time, in program order, with the numbers of
``tvm_tensil.numbers``: the result the RTL core must reproduce bit for bit. The default
"emulator" device (``emulator.py``) keeps this machine state and compiles the same loop;
the two are tested against each other bit for bit.

A program is decoded and validated completely in one vectorised pass (``Program.fields``)
before its first instruction runs, so an invalid program raises (naming the program counter)
and changes nothing.
"""

from __future__ import annotations

import time

import numpy as np

from ..arch import Architecture
from ..isa.instructions import (
    CONFIG_RESET_VALUES,
    ConfigRegister,
    Direction,
    LoadWeightsFlag,
    MatMulFlag,
    Opcode,
    SIMDFlag,
    SIMDOp,
    TapWindow,
)
from ..isa.layout import layout_of
from ..isa.program import Program
from ..numbers import SaturationCounter
from .device import HostDramDevice, RunStats

__all__ = ["ReferenceEmulator"]


class ReferenceEmulator(HostDramDevice):
    """Bit-exact TCU model. DRAM banks are numpy arrays in the data type's storage format."""

    name = "reference"

    def __init__(self, arch: Architecture):
        super().__init__(arch)
        n = arch.array_size
        self._make_banks()
        self.local = np.zeros((arch.local_depth, n), dtype=np.int64)
        self.acc = np.zeros((arch.accumulator_depth, n), dtype=np.int64)
        self.reset()

    def reset(self) -> None:
        """Clear on-chip state (local memory, accumulators, array, registers, config)."""
        n = self.arch.array_size
        self.local[:] = 0
        self.acc[:] = 0
        self.weights = np.zeros((n + 1, n), dtype=np.int64)  # row 0 = bias
        self.registers = np.zeros((self.arch.simd_registers_depth, n), dtype=np.int64)
        self.config = {r: CONFIG_RESET_VALUES.get(r, 0) for r in ConfigRegister}

    # -- execution -------------------------------------------------------------------------------
    def execute(self, program: Program) -> RunStats:
        start = time.perf_counter()
        summary = self.check(program)
        counters = {name: SaturationCounter() for name in ("matmul", "datamove", "simd")}
        self._run(program, counters)
        stats = RunStats.for_program(summary, self.arch)
        stats.saturations = {k: c.count for k, c in counters.items()}
        stats.seconds = time.perf_counter() - start
        self.last_stats = stats
        return stats

    def _run(self, program: Program, counters) -> None:
        """The interpreter loop: fields are plain Python ints here for speed."""
        f = program.fields()
        arch = self.arch
        dt = arch.data_type
        n = arch.array_size
        local, acc, dram0, dram1 = self.local, self.acc, self.dram0, self.dram1
        regs = self.registers
        zeros_vec = np.zeros(n, dtype=np.int64)
        one = dt.one
        sat_mm, sat_dm, sat_simd = counters["matmul"], counters["datamove"], counters["simd"]
        plus, minus, times, saturate = dt.plus, dt.minus, dt.times, dt.saturate
        matmul = dt.matmul
        widen = dt.sign_extend
        one_vec = np.full(n, one, dtype=np.int64)

        def flag(c):
            return np.where(c, one, 0).astype(np.int64)

        simd_ops = {
            SIMDOp.NOOP: lambda l, r, x: x,
            SIMDOp.ZERO: lambda l, r, x: zeros_vec,
            SIMDOp.MOVE: lambda l, r, x: l,
            SIMDOp.NOT: lambda l, r, x: flag(l == 0),
            SIMDOp.AND: lambda l, r, x: flag((l != 0) & (r != 0)),
            SIMDOp.OR: lambda l, r, x: flag((l != 0) | (r != 0)),
            SIMDOp.INCREMENT: lambda l, r, x: plus(l, one_vec, sat_simd),
            SIMDOp.DECREMENT: lambda l, r, x: minus(l, one_vec, sat_simd),
            SIMDOp.ADD: lambda l, r, x: plus(l, r, sat_simd),
            SIMDOp.SUBTRACT: lambda l, r, x: minus(l, r, sat_simd),
            SIMDOp.MULTIPLY: lambda l, r, x: times(l, r, sat_simd),
            SIMDOp.ABS: lambda l, r, x: saturate(np.abs(l), sat_simd),
            SIMDOp.GREATER_THAN: lambda l, r, x: flag(l > r),
            SIMDOp.GREATER_THAN_EQUAL: lambda l, r, x: flag(l >= r),
            SIMDOp.MIN: lambda l, r, x: np.minimum(l, r),
            SIMDOp.MAX: lambda l, r, x: np.maximum(l, r),
        }
        simd_table = [simd_ops[SIMDOp(i)] for i in range(16)]
        rbits = layout_of(self.arch).simd_operand_bits
        rmask = (1 << rbits) - 1
        weights = self.weights
        config = self.config

        ops = f.opcode.tolist()
        fls = f.flags.tolist()
        a0s, s0s, a1s, s1s = f.addr0.tolist(), f.stride0.tolist(), f.addr1.tolist(), f.stride1.tolist()
        o2s = f.operand2.tolist()
        raw0s, raw1s = f.raw0.tolist(), f.raw1.tolist()

        for pc in range(len(ops)):
            op = ops[pc]
            if op == Opcode.NOOP:
                continue
            fl = fls[pc]
            if op == Opcode.SIMD:
                sub = o2s[pc]
                x = acc[a1s[pc]] if fl & SIMDFlag.READ else zeros_vec
                d = sub & rmask
                r = (sub >> rbits) & rmask
                l_ = (sub >> (2 * rbits)) & rmask
                code = sub >> (3 * rbits)
                left = x if l_ == 0 else regs[l_ - 1]
                right = x if r == 0 else regs[r - 1]
                result = simd_table[code](left, right, x)
                if fl & SIMDFlag.RELU:
                    result = np.maximum(result, 0)
                if d and code:
                    regs[d - 1] = result
                if fl & SIMDFlag.WRITE:
                    w = a0s[pc]
                    acc[w] = plus(acc[w], result, sat_simd) if fl & SIMDFlag.ACCUMULATE else result
                continue
            cnt = o2s[pc] + 1
            if op == Opcode.DATAMOVE:
                st0 = 1 << s0s[pc]
                st1 = 1 << s1s[pc]
                a0 = a0s[pc]
                a1 = a1s[pc]
                ls = slice(a0, a0 + (cnt - 1) * st0 + 1, st0)
                os_ = slice(a1, a1 + (cnt - 1) * st1 + 1, st1)
                if fl == Direction.DRAM0_TO_LOCAL:
                    local[ls] = widen(dram0[os_].astype(np.int64))
                elif fl == Direction.LOCAL_TO_DRAM0:
                    dram0[os_] = local[ls]
                elif fl == Direction.DRAM1_TO_LOCAL:
                    local[ls] = widen(dram1[os_].astype(np.int64))
                elif fl == Direction.LOCAL_TO_DRAM1:
                    dram1[os_] = local[ls]
                elif fl == Direction.ACC_TO_LOCAL:
                    local[ls] = acc[os_]
                elif fl == Direction.LOCAL_TO_ACC:
                    acc[os_] = local[ls]
                else:  # Direction.LOCAL_TO_ACC_ACCUMULATE
                    acc[os_] = plus(acc[os_], local[ls], sat_dm)
            elif op == Opcode.MATMUL:
                st1 = 1 << s1s[pc]
                a1 = a1s[pc]
                dst = slice(a1, a1 + (cnt - 1) * st1 + 1, st1)
                if fl & MatMulFlag.WINDOW:  # (ours) a depthwise window along the vectors read
                    win = TapWindow.from_value(config[ConfigRegister.WINDOW])
                    reads = win.reads(cnt)
                    st0 = 1 << s0s[pc]
                    a0 = a0s[pc]
                    stream = np.zeros((win.lead + reads + win.trail, n), dtype=np.int64)
                    if not fl & MatMulFlag.ZEROES:
                        stream[win.lead : win.lead + reads] = local[a0 : a0 + (reads - 1) * st0 + 1 : st0]
                    out = dt.window_matmul(stream, weights[1 : win.taps + 1], weights[0], win.stride, sat_mm)
                elif fl & MatMulFlag.ZEROES:  # every product is 0, the output is the bias row exactly
                    out = np.broadcast_to(weights[0], (cnt, n))
                else:
                    st0 = 1 << s0s[pc]
                    a0 = a0s[pc]
                    out = matmul(local[a0 : a0 + (cnt - 1) * st0 + 1 : st0], weights[1:], weights[0], sat_mm)
                if fl & MatMulFlag.ACCUMULATE:
                    acc[dst] = plus(acc[dst], out, sat_mm)
                else:
                    acc[dst] = out
            elif op == Opcode.LOADWEIGHTS:  # shift in, highest address first
                cnt = raw1s[pc] + 1
                if fl & LoadWeightsFlag.ZEROES:
                    vecs = np.zeros((cnt, n), dtype=np.int64)
                else:
                    st0 = 1 << s0s[pc]
                    a0 = a0s[pc]
                    vecs = local[a0 : a0 + (cnt - 1) * st0 + 1 : st0]
                if cnt >= n + 1:
                    weights[:] = vecs[: n + 1]
                else:
                    weights[cnt:] = weights[: n + 1 - cnt].copy()
                    weights[:cnt] = vecs
            elif op == Opcode.CONFIGURE:
                args = (
                    raw0s[pc]
                    | (raw1s[pc] << layout_of(self.arch).operand0_bits)
                    | (o2s[pc] << (layout_of(self.arch).operand0_bits + layout_of(self.arch).operand1_bits))
                )
                config[ConfigRegister(args & 0xF)] = args >> 4
