"""The "emulator" device, the default: the TCU's bit-exact model with a compiled instruction loop.

The machine state and its meaning are the reference model's (``reference.py``); here the whole
loop over the program (decoding each instruction's bytes, every opcode, the exactly rounded MAC
chain, saturation and its counts) is one numba kernel over the program's bytes and the memories:
no per-instruction arrays are ever built, so a program of millions of instructions costs only its
own bytes. The machine code is cached on disk, so only the first run on a machine pays for
compiling it. The kernel trusts its input: ``Device.check`` validates every address and field
(once per program) before it runs, as it does for every device.
"""

from __future__ import annotations

import numba
import numpy as np

from ..isa.instructions import ConfigRegister, Direction, LoadWeightsFlag, MatMulFlag, Opcode, SIMDFlag, SIMDOp
from ..isa.layout import layout_of
from ..isa.program import Program
from ..numbers import SaturationCounter
from .reference import ReferenceEmulator

__all__ = ["Emulator"]

# numba folds module-level ints into the machine code as constants.
_NOOP, _MATMUL, _DATAMOVE = int(Opcode.NOOP), int(Opcode.MATMUL), int(Opcode.DATAMOVE)
_LOADWEIGHTS, _SIMD, _CONFIGURE = int(Opcode.LOADWEIGHTS), int(Opcode.SIMD), int(Opcode.CONFIGURE)
_DRAM0_TO_LOCAL, _LOCAL_TO_DRAM0 = int(Direction.DRAM0_TO_LOCAL), int(Direction.LOCAL_TO_DRAM0)
_DRAM1_TO_LOCAL, _LOCAL_TO_DRAM1 = int(Direction.DRAM1_TO_LOCAL), int(Direction.LOCAL_TO_DRAM1)
_ACC_TO_LOCAL, _LOCAL_TO_ACC = int(Direction.ACC_TO_LOCAL), int(Direction.LOCAL_TO_ACC)
_MM_ACCUMULATE, _MM_ZEROES = int(MatMulFlag.ACCUMULATE), int(MatMulFlag.ZEROES)
_MM_WINDOW, _CFG_WINDOW = int(MatMulFlag.WINDOW), int(ConfigRegister.WINDOW)
_LW_ZEROES = int(LoadWeightsFlag.ZEROES)
_SIMD_READ, _SIMD_WRITE, _SIMD_ACCUMULATE = int(SIMDFlag.READ), int(SIMDFlag.WRITE), int(SIMDFlag.ACCUMULATE)
_SIMD_RELU = int(SIMDFlag.RELU)
(
    _OP_NOOP,
    _OP_ZERO,
    _OP_MOVE,
    _OP_NOT,
    _OP_AND,
    _OP_OR,
    _OP_INCREMENT,
    _OP_DECREMENT,
    _OP_ADD,
    _OP_SUBTRACT,
    _OP_MULTIPLY,
    _OP_ABS,
    _OP_GREATER_THAN,
    _OP_GREATER_THAN_EQUAL,
    _OP_MIN,
    _OP_MAX,
) = (int(op) for op in SIMDOp)
# Indices into the kernel's saturation counts.
_SAT_MATMUL, _SAT_DATAMOVE, _SAT_SIMD = 0, 1, 2


@numba.njit(cache=True, nogil=True, inline="always")
def _saturate(v, lo, hi, sats, unit):
    if v < lo:
        sats[unit] += 1
        return lo
    if v > hi:
        sats[unit] += 1
        return hi
    return v


@numba.njit(cache=True, nogil=True, inline="always")
def _round_shift(m, bp):
    """``m >> bp`` rounded half to even: adding ``2**(bp-1) - 1`` plus the kept lsb carries into the
    kept bits exactly when the dropped bits exceed half, or equal it with an odd lsb."""
    return (m + ((np.int64(1) << (bp - 1)) - 1) + ((m >> bp) & 1)) >> bp


@numba.njit(cache=True, nogil=True, inline="always")
def _mac(x, y, z, bp, lo, hi, sats, unit):
    """``x*y + z`` shifted right by bp with round-half-to-even, saturated (``DataType.mac``)."""
    return _saturate(_round_shift(x * y + (z << bp), bp), lo, hi, sats, unit)


@numba.njit(cache=True, nogil=True, inline="always")
def _widen(v, width, storage_bits):
    """A DRAM scalar as int64, sign-extended from ``width`` bits (FP18BP10 lives in 32)."""
    v = np.int64(v)
    if width < storage_bits:
        v &= (1 << width) - 1
        if v >= (1 << (width - 1)):
            v -= 1 << width
    return v


@numba.njit(cache=True, nogil=True)
def _simd_lane(code, left, right, x, one, bp, lo, hi, sats):
    if code == _OP_NOOP:
        return x
    if code == _OP_ZERO:
        return 0
    if code == _OP_MOVE:
        return left
    if code == _OP_NOT:
        return one if left == 0 else 0
    if code == _OP_AND:
        return one if (left != 0 and right != 0) else 0
    if code == _OP_OR:
        return one if (left != 0 or right != 0) else 0
    if code == _OP_INCREMENT:
        return _saturate(left + one, lo, hi, sats, _SAT_SIMD)
    if code == _OP_DECREMENT:
        return _saturate(left - one, lo, hi, sats, _SAT_SIMD)
    if code == _OP_ADD:
        return _saturate(left + right, lo, hi, sats, _SAT_SIMD)
    if code == _OP_SUBTRACT:
        return _saturate(left - right, lo, hi, sats, _SAT_SIMD)
    if code == _OP_MULTIPLY:
        return _mac(left, right, 0, bp, lo, hi, sats, _SAT_SIMD)
    if code == _OP_ABS:
        return _saturate(abs(left), lo, hi, sats, _SAT_SIMD)
    if code == _OP_GREATER_THAN:
        return one if left > right else 0
    if code == _OP_GREATER_THAN_EQUAL:
        return one if left >= right else 0
    if code == _OP_MIN:
        return min(left, right)
    return max(left, right)  # _OP_MAX


@numba.njit(cache=True, nogil=True, inline="always")
def _operand(prog, pc, start, nbytes):
    """A little-endian operand of ``nbytes`` bytes from instruction ``pc``'s bytes."""
    v = np.int64(0)
    for k in range(nbytes):
        v |= np.int64(prog[pc, start + k]) << (8 * k)
    return v


@numba.njit(cache=True, nogil=True)
def _run_kernel(
    prog,
    local,
    acc,
    dram0,
    dram1,
    weights,
    regs,
    config,
    sats,
    width,
    bp,
    storage_bits,
    simd_operand_bits,
    operand_bytes,
    address_bits,
    stride_bits,
):
    n = local.shape[1]
    b0, b1, b2 = operand_bytes[0], operand_bytes[1], operand_bytes[2]
    abits0, abits1 = address_bits[0], address_bits[1]
    amask0, amask1 = (np.int64(1) << abits0) - 1, (np.int64(1) << abits1) - 1
    smask0, smask1 = (np.int64(1) << stride_bits[0]) - 1, (np.int64(1) << stride_bits[1]) - 1
    header = b0 + b1 + b2
    lo = -(1 << (width - 1))
    hi = (1 << (width - 1)) - 1
    one = np.int64(1) << bp
    rmask = (1 << simd_operand_bits) - 1
    out = np.empty(n, dtype=np.int64)
    shifted = np.empty_like(weights)
    for pc in range(prog.shape[0]):
        op = np.int64(prog[pc, header]) >> 4
        fl = np.int64(prog[pc, header]) & 0xF
        if op == _NOOP:
            continue
        raw0 = _operand(prog, pc, 0, b0)
        raw1 = _operand(prog, pc, b0, b1)
        operand2 = _operand(prog, pc, b0 + b1, b2)
        addr0, stride0 = raw0 & amask0, (raw0 >> abits0) & smask0
        addr1, stride1 = raw1 & amask1, (raw1 >> abits1) & smask1
        if op == _SIMD:
            sub = operand2
            dest = sub & rmask
            right = (sub >> simd_operand_bits) & rmask
            left = (sub >> (2 * simd_operand_bits)) & rmask
            code = sub >> (3 * simd_operand_bits)
            read = (fl & _SIMD_READ) != 0
            src = addr1
            for i in range(n):
                x = acc[src, i] if read else 0
                lv = x if left == 0 else regs[left - 1, i]
                rv = x if right == 0 else regs[right - 1, i]
                out[i] = _simd_lane(code, lv, rv, x, one, bp, lo, hi, sats)
                if fl & _SIMD_RELU and out[i] < 0:
                    out[i] = 0
            if dest != 0 and code != _OP_NOOP:
                for i in range(n):
                    regs[dest - 1, i] = out[i]
            if fl & _SIMD_WRITE:
                dst = addr0
                if fl & _SIMD_ACCUMULATE:
                    for i in range(n):
                        acc[dst, i] = _saturate(acc[dst, i] + out[i], lo, hi, sats, _SAT_SIMD)
                else:
                    for i in range(n):
                        acc[dst, i] = out[i]
            continue
        if op == _CONFIGURE:  # register | value << 4, across the operands
            config[raw0 & 0xF] = (raw0 >> 4) | (raw1 << (8 * b0 - 4)) | (operand2 << (8 * (b0 + b1) - 4))
            continue
        if op == _LOADWEIGHTS:  # shift in, highest address first: vector k lands in row k
            cnt = raw1 + 1
            step = np.int64(1) << stride0
            a0 = addr0
            rows = n + 1
            shifted[:, :] = weights
            for r in range(rows):
                for i in range(n):
                    if r < cnt:
                        weights[r, i] = 0 if fl & _LW_ZEROES else local[a0 + r * step, i]
                    else:
                        weights[r, i] = shifted[r - cnt, i]
            continue
        cnt = operand2 + 1
        st0 = np.int64(1) << stride0
        st1 = np.int64(1) << stride1
        a0 = addr0
        a1 = addr1
        if op == _DATAMOVE:
            dram = dram1 if fl == _DRAM1_TO_LOCAL or fl == _LOCAL_TO_DRAM1 else dram0
            for k in range(cnt):
                la = a0 + k * st0
                oa = a1 + k * st1
                if fl == _DRAM0_TO_LOCAL or fl == _DRAM1_TO_LOCAL:
                    for i in range(n):
                        local[la, i] = _widen(dram[oa, i], width, storage_bits)
                elif fl == _LOCAL_TO_DRAM0 or fl == _LOCAL_TO_DRAM1:
                    for i in range(n):
                        dram[oa, i] = local[la, i]
                elif fl == _ACC_TO_LOCAL:
                    for i in range(n):
                        local[la, i] = acc[oa, i]
                elif fl == _LOCAL_TO_ACC:
                    for i in range(n):
                        acc[oa, i] = local[la, i]
                else:  # LOCAL_TO_ACC_ACCUMULATE
                    for i in range(n):
                        acc[oa, i] = _saturate(acc[oa, i] + local[la, i], lo, hi, sats, _SAT_DATAMOVE)
            continue
        # MatMul: per output o, acc = bias[o], then acc = mac(x[j], w[j][o], acc) for j = 0..n-1,
        # computed for all outputs at once (the loop over o vectorises).
        zeroes = (fl & _MM_ZEROES) != 0
        accumulate = (fl & _MM_ACCUMULATE) != 0
        # (ours) a window MatMul: output k, lane o = bias, then mac(stream[k*stride + j][o], w[j+1][o])
        # for its taps j, the stream being its reads between lead and trail zero vectors.
        windowed = (fl & _MM_WINDOW) != 0
        win = config[_CFG_WINDOW]
        taps, lead = (win & 0xFF) + 1, (win >> 8) & 0xFF
        stride = np.int64(1) << ((win >> 24) & 3)
        reads = (cnt - 1) * stride + taps - lead - ((win >> 16) & 0xFF)
        clipped = 0
        for k in range(cnt):
            la = a0 + k * st0
            da = a1 + k * st1
            for o in range(n):
                out[o] = weights[0, o]
            # (Zero inputs: every product is 0, the output is the bias exactly.)
            if windowed and not zeroes:
                for j in range(taps):
                    r = k * stride + j - lead  # the vector read, if the stream holds one here
                    if r < 0 or r >= reads:
                        continue  # a zero input leaves the sum exactly as it is
                    lw = a0 + r * st0
                    for o in range(n):
                        q = _round_shift(local[lw, o] * weights[j + 1, o] + (out[o] << bp), bp)
                        z = min(max(q, lo), hi)
                        clipped += q != z
                        out[o] = z
            elif not zeroes:
                for j in range(n):
                    xj = local[la, j]
                    for o in range(n):
                        q = _round_shift(xj * weights[j + 1, o] + (out[o] << bp), bp)
                        z = min(max(q, lo), hi)  # branch-free saturation: the loop over o vectorises
                        clipped += q != z
                        out[o] = z
            if accumulate:
                for o in range(n):
                    acc[da, o] = _saturate(acc[da, o] + out[o], lo, hi, sats, _SAT_MATMUL)
            else:
                for o in range(n):
                    acc[da, o] = out[o]
        sats[_SAT_MATMUL] += clipped


class Emulator(ReferenceEmulator):
    """Bit-exact TCU model, the reference's state with the instruction loop compiled."""

    name = "emulator"

    def __init__(self, arch):
        super().__init__(arch)
        # Load (or compile) the instruction loop now, so that no run's time includes it.
        empty = Program.from_instructions([], layout_of(arch))
        self._run(empty, {name: SaturationCounter() for name in ("matmul", "datamove", "simd")})

    def _run(self, program, counters) -> None:
        arch = self.arch
        lay = layout_of(arch)
        dt = arch.data_type
        config = np.zeros(16, dtype=np.int64)
        for reg, value in self.config.items():
            config[int(reg)] = value
        sats = np.zeros(3, dtype=np.int64)
        prog = np.frombuffer(program.data, dtype=np.uint8).reshape(len(program), lay.instruction_bytes)
        _run_kernel(
            prog,
            self.local,
            self.acc,
            self.dram0,
            self.dram1,
            self.weights,
            self.registers,
            config,
            sats,
            dt.width,
            dt.binary_point,
            8 * dt.storage_bytes,
            lay.simd_operand_bits,
            np.array(lay.operand_bytes, dtype=np.int64),
            np.array([lay.operand0_address_bits, lay.operand1_address_bits], dtype=np.int64),
            np.array([lay.stride0_bits, lay.stride1_bits], dtype=np.int64),
        )
        for reg in ConfigRegister:
            self.config[reg] = int(config[int(reg)])
        for name, index in (("matmul", _SAT_MATMUL), ("datamove", _SAT_DATAMOVE), ("simd", _SAT_SIMD)):
            counters[name].count += int(sats[index])
