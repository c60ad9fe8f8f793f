"""import_onnx: static input shapes and shape arithmetic folded before TVM imports the model.
Mirrors python/tvm_tensil/byoc/onnx_import.py."""

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

import tvm_tensil
from tvm_tensil import zoo


def computed_reshape(batch: str = "N") -> onnx.ModelProto:
    """A Reshape target computed at run time the way Paddle2ONNX writes it, under a symbolic batch:
    conv -> relu -> Reshape(x, Concat(Cast(Slice(Cast(Shape(x)))), [-1])) -> dense."""
    b = zoo.OnnxBuilder(0)
    y = b.op("Relu", [b.conv("x", 3, 8)])
    s = b.op("Cast", [b.op("Shape", [y])], to=TensorProto.FLOAT)
    ends = [b.const(np.array([v]), name, dtype=np.int64) for v, name in ((0, "starts"), (1, "ends"))]
    s = b.op("Cast", [b.op("Slice", [s, *ends])], to=TensorProto.INT64)
    s = b.op("Concat", [s, b.const(np.array([-1]), "rest", dtype=np.int64)], axis=0)
    y = b.gemm(b.op("Reshape", [y, s]), 8 * 8 * 8, 10)
    model = b.model({"x": [1, 3, 8, 8]}, y)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = batch
    return model


def test_tvms_importer_alone_cannot_take_a_computed_reshape():
    with pytest.raises(Exception, match="Reshape requires the input new shape to be Shape"):
        from_onnx(computed_reshape(), shape_dict={"x": [2, 3, 8, 8]}, keep_params_in_input=False)


def test_folded_it_imports_offloads_whole_and_computes_the_onnx_answer():
    model = computed_reshape()
    mod = tvm_tensil.import_onnx(model, {"x": (2, 3, 8, 8)})
    ex = tvm_tensil.build(mod, target="tensil")
    assert ex.tensil_report.cpu_ops == []
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]  # the onnx package's own meaning
    tcu = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert np.max(np.abs(tcu - want)) < 0.02 * np.ptp(want)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"  # the caller's model as it was


def test_import_onnx_names_the_input_whose_shape_is_needed(tmp_path):
    model = computed_reshape()
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "h"
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(tvm_tensil.InputShapeError, match=r"input 'x' has the symbolic shape \(N, 3, h, 8\)"):
        tvm_tensil.import_onnx(tmp_path / "m.onnx")
    with pytest.warns(tvm_tensil.byoc.InputShapeWarning, match="symbolic batch: built for batch 1"):
        mod = tvm_tensil.import_onnx(computed_reshape())
    assert [int(v) for v in mod["main"].params[0].ty.shape.values] == [1, 3, 8, 8]
