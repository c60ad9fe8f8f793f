"""The emulator and the reference model on hand-written programs, each checked against numpy
written here. Every test runs on both devices (the ``Emulator`` fixture).

The references below do not call ``tvm_tensil.numbers``: where rounding cannot occur they use
float numpy; where it can, a plain-integer loop of the spec's rule.
"""

import numpy as np
import pytest

from tvm_tensil.arch import PRESETS, Architecture
from tvm_tensil.isa import DataMove, Direction, InvalidInstruction, Program, ProgramError, SIMDOp, assemble
from tvm_tensil.isa.layout import layout_of
from tvm_tensil.runtime import Emulator as CompiledEmulator
from tvm_tensil.runtime import ReferenceEmulator

ARCH = PRESETS["pynqz1"]
N = ARCH.array_size
ONE = 256


@pytest.fixture(params=[CompiledEmulator, ReferenceEmulator], ids=["emulator", "reference"])
def Emulator(request):  # noqa: N802 - stands for the class under test
    return request.param


def small_arch(**kw):
    base = dict(
        data_type="FP16BP8", array_size=8, dram0_depth=4096, dram1_depth=4096, local_depth=1024, accumulator_depth=256
    )
    base.update(kw)
    return Architecture(**base)


def run(emu, text):
    return emu.execute(assemble(text, layout_of(emu.arch)))


def fixed(x):
    return np.floor(np.asarray(x) * ONE + 0.5).astype(np.int64)


def mac_ref(x, y, z, w=16, b=8):
    m = x * y + (z << b)
    r = m >> b
    if (m >> (b - 1)) & 1 and ((m & ((1 << (b - 1)) - 1)) or (m >> b) & 1):
        r += 1
    return max(-(1 << (w - 1)), min((1 << (w - 1)) - 1, r))


def test_matmul_with_bias_exact_values(Emulator):
    """Values on a 1/16 grid: every product is exact in FP16BP8, so float numpy is the reference."""
    rng = np.random.default_rng(0)
    emu = Emulator(small_arch())
    k = 20
    x = rng.integers(-32, 32, (k, N)) / 16
    w = rng.integers(-32, 32, (N, N)) / 16
    bias = rng.integers(-64, 64, N) / 16
    emu.write_dram(1, 0, fixed(np.vstack([bias, w])))
    emu.write_dram(0, 100, fixed(x))
    run(
        emu,
        f"""
        datamove dram1_to_local local=0 dram1=0 size={N + 1}
        loadweights local=0 size={N + 1}
        datamove dram0_to_local local=0x40 dram0=100 size={k}
        matmul local=0x40 acc=0 size={k}
        datamove acc_to_local local=0x80 acc=0 size={k}
        datamove local_to_dram0 local=0x80 dram0=500 size={k}
    """,
    )
    got = emu.read_dram(0, 500, k) / ONE
    np.testing.assert_array_equal(got, x @ w + bias)


def test_matmul_accumulate_and_rounding(Emulator):
    """Random fixed-point data: rounding happens; the reference is the spec's rule per step."""
    rng = np.random.default_rng(1)
    emu = Emulator(small_arch())
    k = 16
    x1, x2 = rng.integers(-600, 600, (2, k, N))
    w1, w2 = rng.integers(-600, 600, (2, N + 1, N))  # row 0 is the bias
    emu.write_dram(1, 0, np.vstack([w1, w2]))
    emu.write_dram(0, 0, np.vstack([x1, x2]))
    run(
        emu,
        f"""
        datamove dram1_to_local local=0 dram1=0 size={2 * (N + 1)}
        datamove dram0_to_local local=0x100 dram0=0 size={2 * k}
        loadweights local=0 size={N + 1}
        matmul local=0x100 acc=0 size={k}
        loadweights local={N + 1} size={N + 1}
        matmul accumulate local={0x100 + k} acc=0 size={k}
    """,
    )

    def layer(x, w):
        out = np.zeros((k, N), dtype=np.int64)
        for i in range(k):
            for o in range(N):
                acc = int(w[0, o])
                for j in range(N):
                    acc = mac_ref(int(x[i, j]), int(w[j + 1, o]), acc)
                out[i, o] = acc
        return out

    want = np.clip(layer(x1, w1) + layer(x2, w2), -32768, 32767)
    np.testing.assert_array_equal(emu.acc[:k], want)
    stats = emu.last_stats
    assert stats.per_opcode["matmul"] == 2 and stats.vectors["matmul"] == 2 * k
    assert stats.per_opcode["loadweights"] == 2 and stats.per_opcode["datamove"] == 2


def test_matmul_zeroes_gives_the_bias(Emulator):
    emu = Emulator(small_arch())
    bias = np.arange(N) * 3 - 7
    emu.local[0] = bias
    emu.local[1 : N + 1] = 99
    run(emu, f"loadweights local=0 size={N + 1}\nmatmul zeroes acc=0x10 size=4")
    np.testing.assert_array_equal(emu.acc[0x10:0x14], np.tile(bias, (4, 1)))


def test_relu_via_simd(Emulator):
    """ReLU as compiled for the TCU: Zero into r1, then Max(input, r1) per vector."""
    rng = np.random.default_rng(2)
    emu = Emulator(small_arch())
    x = rng.integers(-2000, 2000, (6, N))
    emu.acc[:6] = x
    lines = ["simd zero dest=r1"]
    for i in range(6):
        lines.append(f"simd max read write dest=out left=in right=r1 acc_write={0x20 + i} acc_read={i}")
    run(emu, "\n".join(lines))
    np.testing.assert_array_equal(emu.acc[0x20:0x26], np.maximum(x, 0))
    np.testing.assert_array_equal(emu.acc[:6], x)  # the input is untouched


def test_datamove_round_trip_all_directions(Emulator):
    rng = np.random.default_rng(3)
    emu = Emulator(small_arch())
    a = rng.integers(-30000, 30000, (12, N))
    b = rng.integers(-3000, 3000, (12, N))
    a[0], b[0] = 32000, 2000  # these saturate on the accumulate
    emu.write_dram(0, 10, a)
    emu.write_dram(1, 20, b)
    run(
        emu,
        """
        datamove dram0_to_local local=0 dram0=10 size=12
        datamove local_to_acc local=0 acc=0 size=12
        datamove dram1_to_local local=0x20 dram1=20 size=12
        datamove local_to_acc_accumulate local=0x20 acc=0 size=12
        datamove acc_to_local local=0x40 acc=0 size=12
        datamove local_to_dram1 local=0x40 dram1=100 size=12
        datamove dram1_to_local local=0x60 dram1=100 size=12
        datamove local_to_dram0 local=0x60 dram0=200 size=12
    """,
    )
    want = np.clip(a + b, -32768, 32767)  # saturating accumulate
    np.testing.assert_array_equal(emu.read_dram(0, 200, 12), want)
    np.testing.assert_array_equal(emu.read_dram(1, 100, 12), want)
    np.testing.assert_array_equal(emu.read_dram(0, 10, 12), a)  # sources unchanged
    assert emu.last_stats.saturations["datamove"] == int(np.count_nonzero(np.abs(a + b) > 32767)) > 0


def test_strided_moves(Emulator):
    rng = np.random.default_rng(4)
    emu = Emulator(small_arch())
    src = rng.integers(-100, 100, (64, N))
    emu.write_dram(0, 0, src)
    run(
        emu,
        """
        datamove dram0_to_local local=0x10:2 dram0=0x3:4 size=8
        datamove local_to_dram1 local=0x10:2 dram1=0x100:8 size=8
    """,
    )
    np.testing.assert_array_equal(emu.local[0x10:0x20:2], src[3:35:4])
    np.testing.assert_array_equal(emu.local[0x11:0x20:2], 0)  # gaps untouched
    np.testing.assert_array_equal(emu.read_dram(1, 0x100, 57)[::8], src[3:35:4])
    np.testing.assert_array_equal(emu.read_dram(1, 0x101, 7), 0)


def test_strided_matmul_and_loadweights(Emulator):
    rng = np.random.default_rng(5)
    emu = Emulator(small_arch())
    w = rng.integers(-16, 16, (N + 1, N)) * 16  # 1/16 grid: exact products with small inputs
    emu.local[0 : 2 * (N + 1) : 2] = w
    x = rng.integers(-16, 16, (5, N)) * 16
    emu.local[0x100 : 0x100 + 5 * 4 : 4] = x
    run(emu, f"loadweights local=0:2 size={N + 1}\nmatmul local=0x100:4 acc=0x10:2 size=5")
    want = (x / ONE) @ (w[1:] / ONE) + w[0] / ONE
    np.testing.assert_array_equal(emu.acc[0x10 : 0x10 + 10 : 2] / ONE, want)


def test_partial_loadweights_shifts_rows(Emulator):
    """Loading k < N+1 vectors shifts the previous rows down by k (a shift register)."""
    emu = Emulator(small_arch(array_size=4))
    rows = np.arange(5 * 4).reshape(5, 4) + 1
    emu.local[0:5] = rows
    emu.local[10:12] = [[-1] * 4, [-2] * 4]
    run(emu, "loadweights local=0 size=5\nloadweights local=10 size=2")
    np.testing.assert_array_equal(emu.weights, np.vstack([[[-1] * 4, [-2] * 4], rows[:3]]))
    run(emu, "loadweights zeroes size=1")
    np.testing.assert_array_equal(emu.weights[0], 0)
    np.testing.assert_array_equal(emu.weights[1:], np.vstack([[[-1] * 4, [-2] * 4], rows[:2]]))


def simd_reference(op, l, r, x):
    one = ONE

    def sat(v):
        return np.clip(v, -32768, 32767)

    def times(a, b):
        return np.array([mac_ref(int(p), int(q), 0) for p, q in zip(a, b)])

    return {
        "noop": x,
        "zero": np.zeros_like(x),
        "move": l,
        "not": np.where(l == 0, one, 0),
        "and": np.where((l != 0) & (r != 0), one, 0),
        "or": np.where((l != 0) | (r != 0), one, 0),
        "increment": sat(l + one),
        "decrement": sat(l - one),
        "add": sat(l + r),
        "subtract": sat(l - r),
        "multiply": times(l, r),
        "abs": sat(np.abs(l)),
        "greater_than": np.where(l > r, one, 0),
        "greater_than_equal": np.where(l >= r, one, 0),
        "min": np.minimum(l, r),
        "max": np.maximum(l, r),
    }[op]


@pytest.mark.parametrize("op", [o.mnemonic for o in SIMDOp])
def test_every_simd_op(op, Emulator):
    emu = Emulator(small_arch(simd_registers_depth=2))
    x = np.array([0, 1, -1, 300, -300, 32767, -32768, 256])
    reg = np.array([0, 0, 5, 300, 200, 32767, 1, -256])
    emu.acc[3] = x
    emu.acc[4] = 1000
    emu.registers[1] = reg
    # left = input, right = register 2; result to the output and register 1; accumulate into acc[4].
    run(
        emu,
        f"simd {op} read write dest=r1 left=in right=r2 acc_write=7 acc_read=3\n"
        f"simd {op} read write accumulate dest=out left=in right=r2 acc_write=4 acc_read=3",
    )
    want = simd_reference(op, x, reg, x)
    np.testing.assert_array_equal(emu.acc[7], want)
    np.testing.assert_array_equal(emu.acc[4], np.clip(1000 + want, -32768, 32767))
    if op == "noop":  # NoOp never writes a register
        np.testing.assert_array_equal(emu.registers[0], 0)
    else:
        np.testing.assert_array_equal(emu.registers[0], want)


def test_simd_without_read_sees_zeros_and_registers_chain(Emulator):
    emu = Emulator(small_arch())
    emu.acc[0] = 500
    run(
        emu,
        """
        simd increment dest=r1 left=in
        simd add write dest=r1 left=r1 right=r1 acc_write=1
        simd add read write dest=out left=in right=r1 acc_write=2 acc_read=0
    """,
    )
    np.testing.assert_array_equal(emu.acc[1], 2 * ONE)
    np.testing.assert_array_equal(emu.acc[2], 500 + 2 * ONE)


def test_invalid_program_changes_nothing(Emulator):
    emu = Emulator(small_arch())
    emu.write_dram(0, 0, np.full((4, N), 7))
    lay = layout_of(emu.arch)
    good = Program.from_instructions(
        [DataMove(Direction.DRAM0_TO_LOCAL, 0, 0, 4), DataMove(Direction.LOCAL_TO_DRAM0, 0, 100, 4)], lay
    )
    bad_word = (0x2 << lay.opcode_shift) | (7 << lay.flags_shift)  # DataMove direction 7
    prog = Program(good.data + bad_word.to_bytes(lay.instruction_bytes, "little"), lay, "bad.tprog")
    with pytest.raises(InvalidInstruction, match=r"^pc 2: DataMove: field 'direction'") as e:
        emu.execute(prog)
    assert e.value.pc == 2
    np.testing.assert_array_equal(emu.read_dram(0, 100, 4), 0)  # the first two never ran
    np.testing.assert_array_equal(emu.local[:4], 0)


def test_out_of_range_run_and_unknown_opcode_name_the_pc(Emulator):
    emu = Emulator(small_arch())
    lay = layout_of(emu.arch)

    def program(*words):
        return Program(b"".join(w.to_bytes(lay.instruction_bytes, "little") for w in words), lay)

    # MatMul of 8 vectors from accumulator 250: runs past accumulator_depth = 256.
    matmul = (0x1 << lay.opcode_shift) | (250 << lay.operand1_shift) | (7 << lay.operand2_shift)
    with pytest.raises(InvalidInstruction, match="pc 0: MatMul: field 'acc': 8 vectors .* end at 257"):
        emu.execute(program(matmul))
    with pytest.raises(InvalidInstruction, match="pc 1: opcode 0x9: field 'opcode': unknown opcode"):
        emu.execute(program(0, 0x9 << lay.opcode_shift))


def test_loadlut_is_rejected_before_running(Emulator):
    emu = Emulator(small_arch())
    with pytest.raises(ProgramError, match="pc 1: LoadLUT: the TCU has no lookup tables"):
        run(emu, "datamove local_to_dram0 local=0 dram0=0 size=1\nloadlut local=0 table=0")


def test_configure_sets_registers(Emulator):
    emu = Emulator(small_arch())
    run(emu, "configure dram0_offset value=0x10\nconfigure sample_interval value=1000")
    from tvm_tensil.isa import ConfigRegister

    assert emu.config[ConfigRegister.DRAM0_OFFSET] == 0x10
    assert emu.config[ConfigRegister.SAMPLE_INTERVAL] == 1000


def test_fp32_and_large_array_matmul(Emulator):
    arch = small_arch(data_type="FP32BP16", array_size=16)
    emu = Emulator(arch)
    rng = np.random.default_rng(9)
    x = rng.integers(-(1 << 20), 1 << 20, (3, 16))
    w = rng.integers(-(1 << 20), 1 << 20, (17, 16))
    emu.local[:17] = w
    emu.local[32:35] = x
    run(emu, "loadweights local=0 size=17\nmatmul local=32 acc=0 size=3")
    for i in range(3):
        for o in range(16):
            acc = int(w[0, o])
            for j in range(16):
                acc = mac_ref(int(x[i, j]), int(w[j + 1, o]), acc, 32, 16)
            assert emu.acc[i, o] == acc


# -- the compiled emulator against the reference model, bit for bit ------------------------------

DIFFERENTIAL_ARCHS = [
    Architecture(
        dt, n, 256, 256, 128, 64, simd_registers_depth=2, stride0_depth=4, stride1_depth=4, name=f"diff_{dt}_{n}x{n}"
    )
    for dt, n in (("FP16BP8", 4), ("FP32BP16", 8), ("FP8BP4", 4), ("FP18BP10", 6))
]


def _coverage(body) -> set:
    """What a program exercises: opcodes with their flags, and SIMD ops."""
    from tvm_tensil.isa.instructions import SIMD

    seen = set()
    for inst in body:
        seen.add((inst.opcode.name, inst.flags()))
        if isinstance(inst, SIMD):
            seen.add(("simd op", inst.op.name))
    return seen


@pytest.mark.parametrize("arch", DIFFERENTIAL_ARCHS, ids=lambda a: a.name)
def test_the_emulator_matches_the_reference_on_random_programs(arch, full):
    """Every memory and the saturation counts equal after each of 500 random programs (5000 with
    --full) per data type; the programs cover every opcode, flag combination and SIMD op."""
    from tvm_tensil.isa.instructions import Direction as D
    from tvm_tensil.runtime.differential import compare, random_programs, report

    fast, ref = CompiledEmulator(arch), ReferenceEmulator(arch)
    seen = set()
    for _, body, dram in random_programs(arch, 5000 if full else 500, seed=11):
        seen |= _coverage(body)
        diff = compare(fast, ref, body, dram)
        assert diff is None, report(fast, ref, body, dram, diff)
        assert fast.last_stats.saturations == ref.last_stats.saturations, (
            f"saturation counts differ: {fast.last_stats.saturations} vs {ref.last_stats.saturations}"
        )
    want = (
        {("MATMUL", f) for f in range(4)}
        | {("LOADWEIGHTS", f) for f in range(2)}
        | {("DATAMOVE", int(d)) for d in D}
        | {("SIMD", f) for f in (0, 1, 2, 3, 6, 7)}
        | {("simd op", op.name) for op in SIMDOp}
    )
    assert want <= seen, f"the random programs never drew {sorted(want - seen)}"


@pytest.mark.parametrize("data_type", ["FP16BP8", "FP32BP16"])
@pytest.mark.parametrize("model", ["small_cnn", "resnet20v2"])
def test_compiled_models_are_bit_identical_to_the_reference(model, data_type):
    """A whole compiled model, the same executable under both devices: outputs equal bit for bit."""
    import zoo

    from helpers import outputs_on_devices
    from tvm_tensil.arch import load_arch

    arch = load_arch("pynqz1").replace(data_type=data_type, name=f"pynqz1_{data_type.lower()}")
    onnx_model, shape = {
        "small_cnn": (zoo.small_cnn(), (1, 3, 16, 16)),
        "resnet20v2": (zoo.resnet20v2(softmax=False), (1, 3, 32, 32)),
    }[model]
    outs = outputs_on_devices(onnx_model, shape, ("emulator", "reference"), arch=arch).outputs
    assert np.array_equal(outs["emulator"], outs["reference"])
    assert np.ptp(outs["emulator"]) > 0  # a real output, not all zeros or all saturated


def test_the_instruction_loop_is_loaded_when_the_emulator_is_made():
    """Loading numba's compiled loop belongs to making the device, not to the first run's time."""
    import subprocess
    import sys

    script = (
        "import tvm_tensil\n"
        "from tvm_tensil.runtime import emulator\n"
        "assert not emulator._run_kernel.signatures\n"
        "emulator.Emulator(tvm_tensil.load_arch('pynqz1'))\n"
        "print(len(emulator._run_kernel.signatures))\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr[-2000:]


# -- the window MatMul (ours) ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "taps, lead, trail, stride", [(3, 1, 1, 1), (3, 1, 0, 2), (5, 2, 2, 1), (1, 0, 0, 4), (8, 0, 7, 2)]
)
def test_window_matmul_is_a_depthwise_conv_along_the_vectors(Emulator, taps, lead, trail, stride):
    """Values on a 1/16 grid (every product exact): output i, lane o = bias[o] + sum over taps j of
    W[j+1][o] * stream[i*stride + j][o], the stream padded with ``lead`` and ``trail`` zero vectors.
    Weight rows past the taps are not used."""
    from tvm_tensil.isa.instructions import TapWindow

    rng = np.random.default_rng(taps * 7 + stride)
    emu = Emulator(small_arch(window_matmul=True))
    win = TapWindow(taps, lead, trail, stride)
    outputs = 6
    reads = win.reads(outputs)
    x = rng.integers(-32, 32, (reads, N)) / 16
    w = rng.integers(-32, 32, (N + 1, N)) / 16  # row 0: the bias
    emu.write_dram(1, 0, fixed(w))
    emu.write_dram(0, 100, fixed(x))
    run(
        emu,
        f"""
        datamove dram1_to_local local=0 dram1=0 size={N + 1}
        loadweights local=0 size={N + 1}
        datamove dram0_to_local local=0x40 dram0=100 size={reads}
        datamove dram0_to_local local=0x80 dram0=100 size={outputs}
        datamove local_to_acc local=0x80 acc=0x20 size={outputs}
        configure window value={win.value}
        matmul window local=0x40 acc=0 size={outputs}
        matmul window accumulate local=0x40 acc=0x20 size={outputs}
        datamove acc_to_local local=0x100 acc=0 size={outputs}
        datamove acc_to_local local=0x140 acc=0x20 size={outputs}
        datamove local_to_dram0 local=0x100 dram0=500 size={outputs}
        datamove local_to_dram0 local=0x140 dram0=600 size={outputs}
        """,
    )
    stream = np.vstack([np.zeros((lead, N)), x, np.zeros((trail, N))])
    want = np.array([w[0] + sum(w[j + 1] * stream[i * stride + j] for j in range(taps)) for i in range(outputs)])
    np.testing.assert_array_equal(emu.read_dram(0, 500, outputs) / ONE, want)
    np.testing.assert_array_equal(emu.read_dram(0, 600, outputs) / ONE, want + x[:outputs])


def test_window_matmul_rounds_like_a_matmul_one_tap_at_a_time(Emulator):
    """Off the grid, each tap's product is rounded into the running sum (half to even on the sum's
    parity), as the array does for a plain MatMul's input channels."""
    from tvm_tensil.isa.instructions import TapWindow

    rng = np.random.default_rng(3)
    emu = Emulator(small_arch(window_matmul=True))
    win = TapWindow(3, 1, 1, 1)
    x = rng.integers(-3000, 3000, (5, N))
    w = rng.integers(-600, 600, (N + 1, N))
    emu.local[0 : N + 1] = w
    emu.local[0x40:0x45] = x
    run(
        emu,
        f"loadweights local=0 size={N + 1}\nconfigure window value={win.value}\nmatmul window local=0x40 acc=0 size=5",
    )
    stream = np.vstack([np.zeros((1, N), np.int64), x, np.zeros((1, N), np.int64)])
    for i in range(5):
        for o in range(N):
            z = int(w[0, o])
            for j in range(3):
                z = mac_ref(int(stream[i + j, o]), int(w[j + 1, o]), z)
            assert emu.acc[i, o] == z


# (with both of our instruction set extensions: the window MatMul and the SIMD ReLU flag)
WINDOW_ARCHS = [a.replace(window_matmul=True, simd_relu=True, name=f"{a.name}_window") for a in DIFFERENTIAL_ARCHS[:2]]


@pytest.mark.parametrize("arch", WINDOW_ARCHS, ids=lambda a: a.name)
def test_the_emulator_matches_the_reference_on_random_window_programs(arch, full):
    from tvm_tensil.runtime.differential import compare, random_programs, report

    fast, ref = CompiledEmulator(arch), ReferenceEmulator(arch)
    seen = set()
    for _, body, dram in random_programs(arch, 2000 if full else 300, seed=12):
        seen |= _coverage(body)
        diff = compare(fast, ref, body, dram)
        assert diff is None, report(fast, ref, body, dram, diff)
        assert fast.last_stats.saturations == ref.last_stats.saturations
    assert {("MATMUL", f) for f in range(8)} <= seen
    assert {("SIMD", f) for f in (9, 11, 15)} <= seen  # the ReLU flag, reading, writing, accumulating


# -- the SIMD ReLU flag (ours) --------------------------------------------------------------------


def test_the_simd_relu_flag_zeroes_what_the_op_gives_below_zero(Emulator):
    """``max(op(l, r), 0)``: what the accumulators (written or added to) and the register take."""
    rng = np.random.default_rng(3)
    emu = Emulator(small_arch(simd_relu=True))
    x = rng.integers(-64, 64, (4, N)) / 16
    emu.write_dram(0, 100, fixed(x))
    run(
        emu,
        """
        datamove dram0_to_local local=0 dram0=100 size=4
        datamove local_to_acc local=0 acc=0 size=4
        simd move read dest=r1 left=in acc_read=1                     ; r1 = x1
        simd min read write relu dest=out left=in right=r1 acc_write=8 acc_read=0
        simd subtract read write relu dest=r1 left=in right=r1 acc_write=9 acc_read=2
        simd move write dest=out left=r1 acc_write=10                   ; the register took the ReLU too
        simd add read write accumulate relu dest=out left=in right=in acc_write=3 acc_read=0
        datamove acc_to_local local=0x10 acc=8 size=3
        datamove acc_to_local local=0x13 acc=3 size=1
        datamove local_to_dram0 local=0x10 dram0=500 size=4
        """,
    )
    got = emu.read_dram(0, 500, 4) / ONE
    relu = lambda v: np.maximum(v, 0)  # noqa: E731
    np.testing.assert_array_equal(got[0], relu(np.minimum(x[0], x[1])))
    np.testing.assert_array_equal(got[1], relu(x[2] - x[1]))
    np.testing.assert_array_equal(got[2], relu(x[2] - x[1]))
    np.testing.assert_array_equal(got[3], x[3] + relu(x[0] + x[0]))  # added after the ReLU
