"""Device sessions: inside ``with tvm_tensil.device(name, **options)`` one device per architecture,
created with the options, serves every partition of every model run in the block."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_tensil
from tvm_tensil.runtime import DeviceError, DeviceSession


def conv_chain(convs: int, seed: int):
    """Convs with a softmax between each two: the softmaxes stay on the CPU, so each conv is a
    partition of its own."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for i in range(convs):
        inits.append(numpy_helper.from_array(rng.uniform(-0.5, 0.5, (8, 8, 3, 3)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
        x = f"c{i}"
        if i + 1 < convs:
            nodes.append(helper.make_node("Softmax", [x], [f"s{i}"], axis=1))
            x = f"s{i}"
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
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    ex = tvm_tensil.build(from_onnx(conv_chain(convs, seed), keep_params_in_input=False), target="tensil")
    report = tvm_tensil.last_report()
    return relax.VirtualMachine(ex, tvm.cpu()), report, tvm


def test_two_models_share_one_simulator():
    vm1, report1, tvm = built(1, 1)
    vm2, report2, _ = built(2, 2)
    assert len(report1.partitions) == 1 and len(report2.partitions) == 2
    x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal((1, 8, 6, 6)).astype(np.float32))
    want1, want2 = vm1["main"](x).numpy(), vm2["main"](x).numpy()  # the emulator
    with tvm_tensil.device("verilator") as session:
        got = [(vm1["main"](x).numpy(), vm2["main"](x).numpy()) for _ in range(2)]
        assert len(session.devices) == 1, "one simulator for the architecture"
    for y1, y2 in got:
        np.testing.assert_array_equal(y1, want1)
        np.testing.assert_array_equal(y2, want2)
    assert not session.devices, "the session closes its devices when the block ends"


def test_three_partitions_use_one_simulated_board():
    vm, report, tvm = built(3, 3)
    assert len(report.partitions) == 3
    x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal((1, 8, 6, 6)).astype(np.float32))
    want = vm["main"](x).numpy()
    with tvm_tensil.device("sim-board") as session:
        np.testing.assert_array_equal(vm["main"](x).numpy(), want)
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
