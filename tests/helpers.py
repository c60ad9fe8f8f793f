"""Shared test helpers: a hand-assembled one-layer Tensil model (dense + bias + ReLU), and one
compiled model run under several devices."""

from dataclasses import dataclass

import numpy as np

from tvm_tensil.arch import Architecture
from tvm_tensil.isa import assemble
from tvm_tensil.model import ConstsEntry, TensilModel, TensorEntry


def dense_relu_model(
    arch: Architecture, weights: np.ndarray, bias: np.ndarray, batch: int, name: str = "dense_relu"
) -> TensilModel:
    """y = relu(x @ weights + bias) for x of shape (batch, N), written in Tensil assembly."""
    n = arch.array_size
    dt = arch.data_type
    consts = dt.from_float(np.vstack([bias[None, :], weights]))
    x_base, y_base = 0, 64
    text = f"""
        datamove dram1_to_local local=0 dram1=0 size={n + 1}
        loadweights local=0 size={n + 1}
        datamove dram0_to_local local=0x100 dram0={x_base} size={batch}
        matmul local=0x100 acc=0 size={batch}
        simd zero dest=r1
    """
    for i in range(batch):
        text += f"simd max read write dest=out left=in right=r1 acc_write={i} acc_read={i}\n"
    text += f"""
        datamove acc_to_local local=0x200 acc=0 size={batch}
        datamove local_to_dram0 local=0x200 dram0={y_base} size={batch}
    """
    return TensilModel(
        name=name,
        arch=arch,
        program=assemble(text, arch.layout),
        consts=[(ConstsEntry(f"{name}.tdata", 0, n + 1), consts)],
        inputs=[TensorEntry("x", x_base, batch)],
        outputs=[TensorEntry("y", y_base, batch)],
        extras={"inputs": {"x": {"shape": [batch, n]}}, "outputs": {"y": {"shape": [batch, n]}}},
    )


@dataclass
class DeviceRuns:
    outputs: dict  # device name -> the model's output
    report: object  # the build's BuildReport
    stats: dict  # device name -> {partition symbol: RunStats}


def outputs_on_devices(onnx_model, shape, devices, arch="pynqz1", seed=0) -> DeviceRuns:
    """Build ``onnx_model`` with tvm_tensil and run the same executable under each device."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    import tvm_tensil

    ex = tvm_tensil.build(from_onnx(onnx_model, keep_params_in_input=False), target="tensil", arch=arch)
    x = tvm.runtime.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    runs = DeviceRuns({}, ex.tensil_report, {})
    for name in devices:
        with tvm_tensil.device(name) as session:
            runs.outputs[name] = vm["main"](x).numpy()
        runs.stats[name] = session.last_run_stats(ex.tensil_report)
    return runs
