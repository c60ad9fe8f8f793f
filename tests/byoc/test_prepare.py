"""Preparation before partitioning: what is folded in numpy, and that it keeps the numbers.

Mirrors python/tvm_tensil/byoc/prepare.py (its rewrites of imported ops into offloadable ones are
tested through whole builds in test_ops.py and test_onnx_import.py).
"""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

from tvm_tensil.byoc.prepare import fold_clip_bounds, prepare_for_tensil
from tvm_tensil.zoo import OnnxBuilder


def _ops(func) -> list[str]:
    names = []

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op):
            names.append(e.op.name)

    relax.analysis.post_order_visit(func.body, visit)
    return names


@pytest.mark.parametrize("lo, hi", [(-0.5, 1.0), (np.nan, 1.0), (-0.5, np.nan)])
def test_clip_bounds_guarded_against_nan_are_folded_in_numpy(lo, hi):
    """The ONNX importer guards each Clip bound with ``where(isnan(b), +-inf, b)``; folded in numpy
    (not by FoldConstant, which builds an LLVM function for each), a NaN bound is no bound."""
    b = OnnxBuilder(1)
    y = b.op("Clip", ["x", b.const(np.array(lo, np.float32)), b.const(np.array(hi, np.float32))])
    mod = from_onnx(b.model({"x": [1, 4, 3, 3]}, y), keep_params_in_input=False)
    assert "relax.isnan" in _ops(mod["main"])
    assert not {"relax.isnan", "relax.where"} & set(_ops(fold_clip_bounds(mod)["main"]))
    prepared = prepare_for_tensil(mod)
    x = np.linspace(-3, 3, 36, dtype=np.float32).reshape(1, 4, 3, 3)
    vm = relax.VirtualMachine(tvm.compile(prepared, target="llvm"), tvm.cpu())
    expected = np.clip(x, -np.inf if np.isnan(lo) else lo, np.inf if np.isnan(hi) else hi)
    np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(x)).numpy(), expected)
