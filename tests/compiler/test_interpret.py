"""The float interpreter's model of the TCU's rounding (compiler/interpret.py)."""

import numpy as np
import pytest


@pytest.mark.parametrize("shape", [(1, 4, 4, 8), (2, 7, 7, 16), (3, 16, 16, 8), (1, 5, 3, 12)])
def test_the_global_pool_is_simulated_bit_for_bit(shape):
    """``halving_mean`` (calibration's simulation of a global average pool) gives the emulator's
    values exactly, on values of a few units where each halving level's rounding shows (a mean
    rounded once differs from them by up to two units here)."""
    from tvm_tensil.arch import PRESETS
    from tvm_tensil.compiler import Graph, Node, Tensor, compile_graph
    from tvm_tensil.compiler.interpret import halving_mean
    from tvm_tensil.runtime import Emulator

    arch = PRESETS["pynqz1"]
    dt = arch.data_type
    rng = np.random.default_rng(0)
    x = dt.to_float(dt.from_float(rng.integers(-3, 4, shape) / dt.one * rng.integers(1, 40, shape)))
    out = (shape[0], 1, 1, shape[3])
    g = Graph({"x": Tensor("x", shape), "y": Tensor("y", out)}, [Node("global_avg_pool", ["x"], "y", {})],
              ["x"], ["y"], [])  # fmt: skip
    y = Emulator(arch).run_model(compile_graph(g, arch, "t").model([]), {"x": x})["y"]
    np.testing.assert_array_equal(np.asarray(y).reshape(out), halving_mean(x, dt))
