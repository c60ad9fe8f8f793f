"""The first thing to run on a new board: ``tvm-tensil selftest --device pynq --arch pynqz1``.

Step by step, each stopping with what was wrong:

1. DRAM round trip: vectors written through the driver and read back (buffers, cache maintenance).
2. One DataMove through the core: DRAM0 -> local -> DRAM1 (instruction stream, completion, both DRAM
   ports, Configure offsets).
3. A small matrix multiply with bias on the array, against numpy (float, within the fixed-point
   step) and against the emulator (bit for bit).
4. A compiled model (a small CNN, random weights) against the emulator, bit for bit.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from .arch import Architecture
from .isa.instructions import DataMove, Direction, LoadWeights, MatMul
from .isa.layout import layout_of
from .isa.program import Program


def _check(name: str, ok: bool, detail: str, log: Callable[[str], None]) -> bool:
    log(f"[{'PASS' if ok else 'FAIL'}] {name}" + ("" if ok else f": {detail}"))
    return ok


def run_selftest(device, log: Callable[[str], None] = print, model: bool = True) -> bool:
    """Run the steps on ``device`` (a Device); True if all passed."""
    from .runtime.emulator import Emulator

    arch: Architecture = device.arch
    n, dt = arch.array_size, arch.data_type
    rng = np.random.default_rng(0)
    ok = True

    # 1. DRAM round trip
    data = rng.integers(dt.min_int, dt.max_int + 1, (16, n))
    device.write_dram(0, 5, data)
    back = device.read_dram(0, 5, 16)
    ok &= _check(
        "DRAM round trip",
        np.array_equal(back, data),
        f"read back {back[0].tolist()} for {data[0].tolist()}: buffers or cache maintenance",
        log,
    )

    # 2. one move through the core
    lay = layout_of(arch)
    device.reset()
    device.write_dram(0, 0, data)
    prog = Program.from_instructions(
        [DataMove(Direction.DRAM0_TO_LOCAL, 0, 0, 16), DataMove(Direction.LOCAL_TO_DRAM1, 0, 64, 16)],
        lay,
        name="selftest-move",
    )
    t0 = time.perf_counter()
    try:
        device.execute(prog)
        moved = device.read_dram(1, 64, 16)
        ok &= _check(
            "DataMove DRAM0 -> local -> DRAM1",
            np.array_equal(moved, data),
            "data did not arrive: check the DRAM ports reach DDR and the offsets",
            log,
        )
    except Exception as e:  # noqa: BLE001 - report and stop: later steps need this one
        _check("DataMove DRAM0 -> local -> DRAM1", False, f"{e}", log)
        return False
    log(f"       ({(time.perf_counter() - t0) * 1e3:.1f} ms round trip)")

    # 3. matrix multiply with bias
    x = rng.standard_normal((8, n)) * 0.5
    w = rng.standard_normal((n, n)) * 0.5
    b = rng.standard_normal(n) * 0.5
    weights = dt.from_float(np.vstack([b, w]))  # bias row first: row 0 of LoadWeights
    xs = dt.from_float(x)
    body = [
        DataMove(Direction.DRAM1_TO_LOCAL, 0, 0, n + 1),
        LoadWeights(0, n + 1),
        DataMove(Direction.DRAM0_TO_LOCAL, 32, 0, 8),
        MatMul(32, 0, 8),
        DataMove(Direction.ACC_TO_LOCAL, 48, 0, 8),
        DataMove(Direction.LOCAL_TO_DRAM0, 48, 16, 8),
    ]
    prog = Program.from_instructions(body, lay, name="selftest-matmul")
    results = {}
    for dev in (device, Emulator(arch)):
        dev.reset()
        dev.write_dram(1, 0, weights)
        dev.write_dram(0, 0, xs)
        dev.execute(prog)
        results[dev.name] = dev.read_dram(0, 16, 8)
    got = dt.to_float(results[device.name])
    want = x @ w + b
    tolerance = (n + 2) * 2.0**-dt.binary_point * (1 + np.abs(want).max())
    ok &= _check(
        "MatMul with bias vs numpy",
        bool(np.abs(got - want).max() <= tolerance),
        f"max error {np.abs(got - want).max():.4g} > {tolerance:.4g}",
        log,
    )
    ok &= _check(
        "MatMul with bias vs emulator (bits)",
        np.array_equal(results[device.name], results["emulator"]),
        "the array's rounding differs from the emulator's (docs/isa.md)",
        log,
    )

    # 4. a compiled model
    if model and ok:
        ok &= _model_step(device, log)
    what = f"on the {device.name} device, architecture {arch.name or 'custom'} ({n}x{n} {dt.name})"
    log(f"self-test {'passed' if ok else 'FAILED'} {what}")
    return ok


def _model_step(device, log) -> bool:
    import tempfile
    from pathlib import Path

    from .model import TensilModel
    from .runtime.emulator import Emulator
    from .zoo import small_cnn

    try:
        from tvm.relax.frontend.onnx import from_onnx

        from .byoc import build
    except ImportError:
        log("[SKIP] compiled model: TVM is not installed here (compile on a host, copy the .tmodel files)")
        return True
    with tempfile.TemporaryDirectory() as tmp:
        build(from_onnx(small_cnn(), keep_params_in_input=False), target="tensil", arch=device.arch, model_dir=tmp)
        model = TensilModel.load(next(Path(tmp).glob("*.tmodel")))
        feeds = {k: np.random.default_rng(1).standard_normal(model.tensor_shape(k)) for k in model.input_names()}
        outs = {dev.name: dev.run_model(model, feeds) for dev in (device, Emulator(device.arch))}
    same = all(np.array_equal(outs[device.name][k], outs["emulator"][k]) for k in outs["emulator"])
    return _check("compiled small CNN vs emulator (bits)", same, "outputs differ", log)
