"""``tvm-tensil demo``: the main job end to end, as a first command on a new machine.

Builds a zoo network for a preset (TVM's ONNX import, the Tensil build), runs it on the emulator
and on the RTL core (the verilator device), and prints the build report, the agreement with TVM's
CPU build of the same module, the agreement of the two devices, and the cycles and latency.
"""

from __future__ import annotations

import time
import warnings

import numpy as np


def run_demo(arch: str = "pynqz1", network: str = "resnet20v2", rtl: bool = True, log=print) -> bool:
    """True when the TCU's result matches TVM's CPU build and the RTL matches the emulator."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from . import zoo
    from .byoc import build
    from .runtime import device

    models = {
        "resnet20v2": (lambda: zoo.resnet20v2(softmax=False), (1, 3, 32, 32)),
        "small_cnn": (lambda: zoo.small_cnn(softmax=False), (1, 3, 16, 16)),
        "mobilenetv2": (lambda: zoo.mobilenetv2(96, softmax=False), (1, 3, 96, 96)),
    }
    make, shape = models[network]
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    calibration = rng.standard_normal((4, *shape[1:])).astype(np.float32)
    mod = from_onnx(make(), keep_params_in_input=False)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the report below says what matters
        ex = build(mod, target="tensil", arch=arch, calibration=calibration)
    log(f"{network} built for {arch} in {time.perf_counter() - start:.1f} s (calibrated on 4 samples)")
    log(str(ex.tensil_report))
    cpu = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    vm = relax.VirtualMachine(ex, tvm.cpu())
    outputs, ok = {}, True
    for name in ("emulator", "verilator") if rtl else ("emulator",):
        with device(name) as session:
            start = time.perf_counter()
            outputs[name] = vm["main"](tvm.runtime.tensor(x)).numpy()
            seconds = time.perf_counter() - start
        error = float(np.max(np.abs(outputs[name] - cpu)) / np.ptp(cpu))
        ok &= error < 0.05
        stats = list(session.last_run_stats(ex.tensil_report).values())
        cycles = sum(s.cycles or 0 for s in stats)
        timing = ""
        if cycles:
            clock = ex.tensil_report.arch.clock_mhz
            timing = f", {cycles} cycles" + (f" = {cycles / (clock * 1e3):.3f} ms at {clock:g} MHz" if clock else "")
        log(f"{name}: logits within {error:.2%} of their range of TVM's CPU build ({seconds:.1f} s here{timing})")
    if rtl:
        same = np.array_equal(outputs["emulator"], outputs["verilator"])
        ok &= same
        log("RTL core and emulator: " + ("bit-identical" if same else "DIFFERENT (a bug: please report it)"))
    log("demo " + ("passed" if ok else "FAILED"))
    return ok
