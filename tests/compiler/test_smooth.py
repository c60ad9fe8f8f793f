"""The smooth functions' SIMD sequences, each within its documented bound over every value."""

import pytest


@pytest.mark.parametrize("function", ["sigmoid", "tanh", "silu", "gelu", "softplus", "mish"])
def test_smooth_functions_within_their_bounds_over_every_value(function):
    """Every FP16BP8 value through the function's SIMD sequence on the emulator, at the data type's
    binary point, for a fine input and result (a calibrated scale) and for a coarse one: within the
    documented bound beyond half a unit of the result; no step saturates."""
    import numpy as np

    from tvm_tensil.arch import PRESETS
    from tvm_tensil.compiler import Graph, Node, Tensor, compile_graph
    from tvm_tensil.compiler.smooth import SMOOTH, Smooth
    from tvm_tensil.runtime import Emulator

    arch = PRESETS["pynqz1"]
    dt, fn = arch.data_type, SMOOTH[function]
    stored = (np.arange(dt.min_int, dt.max_int + 1) / 2**dt.binary_point).reshape(1, 64, 128, 8)
    scales = [(0, 0), (0, 6), (3, 6), (-2, 4)] if fn.form == "odd" else [(0, 0), (3, 3), (-2, -2), (4, 2)]
    for shift, out_shift in scales:
        node = Node(function, ["x"], "y", Smooth(function, shift, out_shift))
        g = Graph({"x": Tensor("x", stored.shape), "y": Tensor("y", stored.shape)}, [node], ["x"], ["y"], [])
        emu = Emulator(arch)
        y = emu.run_model(compile_graph(g, arch, "t").model([]), {"x": stored})["y"] / 2.0**out_shift
        assert emu.last_stats.saturated == 0, (shift, out_shift)
        x = stored / 2.0**shift
        excess = np.abs(y - fn.meaning(x)) - 2.0 ** -(dt.binary_point + out_shift + 1)
        if fn.form != "odd":
            excess = excess / np.maximum(1.0, np.abs(x))
        assert excess.max() <= fn.bound, (shift, out_shift, excess.max())


@pytest.mark.parametrize("function", ["sigmoid", "tanh", "silu", "gelu", "softplus", "mish"])
def test_the_simulation_rounds_a_fine_input_as_the_device_does(function):
    """A fine input (stored 2**5 or 2**6 times its value) reaches the pieces taken to scale 1, on
    the grid: the simulation (``interpret`` with rounding, which calibration trusts) models that, so
    it is nearer the device than the exact function of the unrounded input is."""
    import numpy as np

    from tvm_tensil.arch import PRESETS
    from tvm_tensil.compiler import Graph, Node, Tensor, compile_graph
    from tvm_tensil.compiler.interpret import interpret
    from tvm_tensil.compiler.smooth import SMOOTH, Smooth
    from tvm_tensil.runtime import Emulator

    arch = PRESETS["pynqz1"]
    dt, fn = arch.data_type, SMOOTH[function]
    stored = (np.arange(dt.min_int, dt.max_int + 1) / 2**dt.binary_point).reshape(1, 64, 128, 8)
    shift, out_shift = (5, 6) if fn.form == "odd" else (6, 5)  # no result saturates
    node = Node(function, ["x"], "y", Smooth(function, shift, out_shift))
    g = Graph({"x": Tensor("x", stored.shape), "y": Tensor("y", stored.shape)}, [node], ["x"], ["y"], [])
    device = Emulator(arch).run_model(compile_graph(g, arch, "t").model([]), {"x": stored})["y"]
    simulated = interpret(g, {"x": stored}, rounding=dt)["y"]
    exact = dt.to_float(dt.from_float(fn.meaning(stored / 2.0**shift) * 2.0**out_shift))
    rms = lambda e: float(np.sqrt(np.mean(e**2)))  # noqa: E731
    assert np.abs(device - simulated).max() <= np.abs(device - exact).max()
    # The input's rounding is most of the difference where the function is steep at its scale.
    limit = 0.6 if function in ("sigmoid", "tanh", "softplus") else 1.0
    assert rms(device - simulated) < limit * rms(device - exact), (rms(device - simulated), rms(device - exact))
