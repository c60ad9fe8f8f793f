import numpy as np
import pytest

tvm = pytest.importorskip("tvm")  # a hard dependency; this only gives a clear message if missing


@pytest.fixture
def compare():
    """Build an ONNX model for the CPU and for the TCU; return both outputs and the report."""
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    import tvm_tensil

    def run(model, inputs: dict, arch="pynqz1"):
        mod = from_onnx(model, keep_params_in_input=False)
        args = [tvm.runtime.tensor(np.asarray(v, dtype=np.float32)) for v in inputs.values()]
        cpu = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](*args).numpy()
        ex = tvm_tensil.build(mod, target="tensil", arch=arch)
        tcu = relax.VirtualMachine(ex, tvm.cpu())["main"](*args).numpy()
        return cpu, tcu, ex.tensil_report, ex

    return run
