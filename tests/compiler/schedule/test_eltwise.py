"""Element-wise ops of two maps on the emulator against their values (compiler/schedule/eltwise.py)."""

import warnings

import numpy as np
import pytest


@pytest.mark.parametrize("shift", [-3, 0, 2, 9])
@pytest.mark.parametrize("broadcast", [False, True])
def test_a_product_at_any_shift_is_every_vector_s(shift, broadcast):
    """A map times a map or a per-channel vector, stored at ``2**shift`` times the product: every
    vector of every chunk gets its own product (a growing product's rescale once took the
    broadcast vector's register, so every vector after a chunk's first was wrong)."""
    from tvm_tensil.arch import PRESETS
    from tvm_tensil.compiler import Graph, Node, Tensor, compile_graph
    from tvm_tensil.compiler.graph import Product
    from tvm_tensil.runtime import Emulator

    arch = PRESETS["pynqz1"]
    dt = arch.data_type
    rng = np.random.default_rng(0)
    shape = (2, 12, 12, 16)
    x = dt.to_float(dt.from_float(rng.uniform(-1, 1, shape)))
    v = dt.to_float(dt.from_float(rng.uniform(-1, 1, (2, 1, 1, 16) if broadcast else shape)))
    g = Graph({"x": Tensor("x", shape), "v": Tensor("v", v.shape), "y": Tensor("y", shape)},
              [Node("mul", ["x", "v"], "y", Product(shift))], ["x", "v"], ["y"], [])  # fmt: skip
    emu = Emulator(arch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = emu.run_model(compile_graph(g, arch, "t").model([]), {"x": x, "v": v}, warn_saturation=False)["y"]
    want = np.clip(x * v * 2.0**shift, -dt.max_float, dt.max_float)
    assert np.max(np.abs(np.asarray(y).reshape(shape) - want)) <= 2 * dt.resolution * max(1.0, 2.0**shift)
