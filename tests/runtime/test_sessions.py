"""Device sessions: inside ``with tvm_tensil.device(name, **options)`` one device per architecture,
created with the options, serves every partition of every model run in the block."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_tensil
from tvm_tensil.runtime import DeviceError, DeviceSession


def conv_chain(convs: int, seed: int):
    """Convs with an Abs between each two (Abs stays on the CPU, so each conv is a partition of its
    own). Exact in FP16BP8: the first conv's weights and the input on a 1/16 grid make products on
    the 1/256 grid; the later convs' weights are sparse +-1, which keeps them there."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for i in range(convs):
        if i == 0:
            w = rng.integers(-8, 9, (8, 8, 3, 3)) / 16
        else:
            w = rng.choice([-1.0, 1.0], (8, 8, 3, 3)) * (rng.random((8, 8, 3, 3)) < 0.1)
        inits.append(numpy_helper.from_array(w.astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
        x = f"c{i}"
        if i + 1 < convs:
            nodes.append(helper.make_node("Abs", [x], [f"a{i}"]))
            x = f"a{i}"
    shape = [1, 8, 6, 6]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def built(convs: int, seed: int):
    """The model on the TCU, its build report, and its output from TVM's CPU build for the input."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    mod = from_onnx(conv_chain(convs, seed), keep_params_in_input=False)
    ex = tvm_tensil.build(mod, target="tensil")
    report = ex.tensil_report
    x = tvm.runtime.tensor(np.random.default_rng(seed).integers(-16, 17, (1, 8, 6, 6)).astype(np.float32) / 16)
    cpu = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](x).numpy()
    return relax.VirtualMachine(ex, tvm.cpu()), report, x, cpu


def test_two_models_share_one_simulator():
    vm1, report1, x1, cpu1 = built(1, 1)
    vm2, report2, x2, cpu2 = built(2, 2)
    assert len(report1.partitions) == 1 and len(report2.partitions) == 2
    with tvm_tensil.device("verilator") as session:
        got = [(vm1["main"](x1).numpy(), vm2["main"](x2).numpy()) for _ in range(2)]
        assert len(session.devices) == 1, "one simulator for the architecture"
    for y1, y2 in got:  # exact: every value is on the 1/256 grid (see conv_chain)
        np.testing.assert_array_equal(y1, cpu1)
        np.testing.assert_array_equal(y2, cpu2)
    assert not session.devices, "the session closes its devices when the block ends"


def test_three_partitions_use_one_simulated_board():
    vm, report, x, cpu = built(3, 3)
    assert len(report.partitions) == 3
    with tvm_tensil.device("sim-board") as session:
        np.testing.assert_array_equal(vm["main"](x).numpy(), cpu)
        (board,) = session.devices.values()
        assert type(board).__name__ == "SimBoard"


def test_options_reach_the_device():
    with tvm_tensil.device("verilator", read_latency=7) as session:
        dev = session.device_for(tvm_tensil.load_arch("pynqz1"))
        assert dev.read_latency == 7
        assert session.device_for(tvm_tensil.load_arch("pynqz1")) is dev


def test_an_unknown_option_is_named():
    with pytest.raises(DeviceError, match=r"device 'emulator' has no option 'socket'"):
        DeviceSession("emulator", socket="/tmp/s")
