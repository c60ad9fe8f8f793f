"""Random networks against TVM's own CPU build, at the logits (the suite's main correctness net).

Each network (tests/random_nets.py) is built for two variants of the pynqz1 preset:
- FP32BP16: rounding is ~1e-5 of these networks' values, so any error above 1% of an output's
  range is a logic error (a wrong address, a wrong operand, a wrong op);
- FP16BP8, the preset itself: the error must stay within the network's rounding-error bound
  (8 standard deviations of the modelled error, docs/compiler.md "Error bounds").
A failure shrinks to a minimal network, saved as ONNX under build/random_net_failures/.
``--full`` runs 300 networks instead of 30.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

import tvm_tensil
from random_nets import build_net, calibration_inputs, random_net, random_steps, sample_input, shrink
from tvm_tensil.numbers import FP32BP16

PRESET = "pynqz1"
FAILURES = Path(__file__).resolve().parents[2] / "build" / "random_net_failures"
FP32 = tvm_tensil.load_arch(PRESET).replace(data_type=FP32BP16, name=f"{PRESET}_fp32bp16")
FP16 = tvm_tensil.load_arch(PRESET)


def pytest_generate_tests(metafunc):
    if "seed" in metafunc.fixturenames:
        count = 300 if metafunc.config.getoption("--full") else 30
        metafunc.parametrize("seed", range(count))


def _outputs(result) -> list[np.ndarray]:
    if isinstance(result, (list, tuple)) or type(result).__name__ == "Array":
        return [r.numpy() for r in result]
    return [result.numpy()]


def _input(net) -> np.ndarray:
    return sample_input(net)


@lru_cache(maxsize=2)
def _cpu_vm(model: bytes):
    """TVM's CPU build of a network, made once for the several inputs and checks that run it."""
    mod = from_onnx(onnx.load_from_string(model), keep_params_in_input=False)
    return relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())


def cpu_outputs(net, x: np.ndarray | None = None) -> list[np.ndarray]:
    vm = _cpu_vm(net.model.SerializeToString())
    return _outputs(vm["main"](tvm.runtime.tensor(_input(net) if x is None else x)))


def output_ranges(net, calibration: np.ndarray) -> list[float]:
    """Each output's range over the test input and the calibration inputs (its distribution's): one
    input's own can be tiny (two logits that nearly tie)."""
    batch = net.input_shape[0]
    runs = [cpu_outputs(net)]
    runs += [cpu_outputs(net, calibration[i : i + batch]) for i in range(0, len(calibration) - batch + 1, batch)]
    return [max(float(np.ptp(np.concatenate([r[k].ravel() for r in runs]))), 1e-3) for k in range(len(runs[0]))]


def tcu_outputs(net, arch, device="emulator", calibration=None) -> list[np.ndarray]:
    mod = from_onnx(net.model, keep_params_in_input=False)
    ex = tvm_tensil.build(mod, target="tensil", arch=arch, calibration=calibration)
    with tvm_tensil.device(device):
        return _outputs(relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(_input(net))))


def logic_error(net) -> str | None:
    """FP32BP16 against the CPU: None, or what is wrong."""
    for i, (c, t) in enumerate(zip(cpu_outputs(net), tcu_outputs(net, FP32))):
        span = max(float(c.max() - c.min()), 1e-3)
        err = float(np.max(np.abs(c - t)))
        if not err < 0.01 * span:
            return f"output {i}: FP32BP16 error {err:.4g} is {100 * err / span:.1f}% of its range {span:.4g}"
    return None


def rounding_error(net) -> str | None:
    """FP16BP8 against the CPU, within the network's rounding-error bound."""
    bound = net.bound(FP16.data_type.resolution)
    for i, (c, t) in enumerate(zip(cpu_outputs(net), tcu_outputs(net, FP16))):
        err = float(np.max(np.abs(c - t)))
        if not err <= bound:
            return f"output {i}: FP16BP8 error {err:.4g} above the bound {bound:.4g}"
    return None


def _save_shrunk(seed: int, check) -> str:
    top, steps = random_steps(seed)
    small = build_net(top, shrink(top, steps, lambda net: check(net) is not None))
    FAILURES.mkdir(parents=True, exist_ok=True)
    path = FAILURES / f"seed{seed}_{check.__name__}.onnx"
    onnx.save(small.model, path)
    return f"{check(small)}; minimal network ({len(small.steps)} steps) saved as {path}"


def calibrated_rounding_error(net) -> str | None:
    """FP16BP8 with a scale per tensor, calibrated on 16 inputs of the test input's distribution:
    within the same rounding-error bound (its model assumes the unscaled 1/256 everywhere, which
    calibration refines where it helps and keeps where it does not), and within the error target
    of 1% of each output's range (over the test and calibration inputs)."""
    bound = net.bound(FP16.data_type.resolution)
    calibration = calibration_inputs(net)
    ranges = output_ranges(net, calibration)
    for i, (c, t, span) in enumerate(zip(cpu_outputs(net), tcu_outputs(net, FP16, calibration=calibration), ranges)):
        err = float(np.max(np.abs(c - t)))
        if not err <= bound:
            return f"output {i}: calibrated FP16BP8 error {err:.4g} above the bound {bound:.4g}"
        if err > 0.01 * span:
            return f"output {i}: calibrated FP16BP8 error {err:.4g} above 1% of the output's range {span:.4g}"
    return None


def test_random_net_against_the_cpu(seed, request):
    net = random_net(seed)
    # Calibrated builds on every third network (all of them with --full): each costs a CPU run and
    # a float and a rounded simulation of the partition.
    calibrated = (calibrated_rounding_error,) if seed % 3 == 0 or request.config.getoption("--full") else ()
    for check in (logic_error, rounding_error, *calibrated):
        if check(net) is not None:
            pytest.fail(f"seed {seed}: {_save_shrunk(seed, check)}")


@pytest.mark.parametrize("rtl_seed", [3, 7, 11])
def test_random_nets_on_the_rtl_match_the_emulator_bit_for_bit(rtl_seed):
    net = random_net(rtl_seed)
    emulated = tcu_outputs(net, FP16, "emulator")
    on_rtl = tcu_outputs(net, FP16, "verilator")
    for e, r in zip(emulated, on_rtl):
        np.testing.assert_array_equal(r, e)
