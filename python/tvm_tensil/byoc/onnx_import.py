"""``import_onnx``: an ONNX model into Relax with static input shapes and its shape arithmetic folded.

Exporters compute Reshape targets and the like at run time (Paddle2ONNX: ``Shape -> Cast -> Slice ->
Cast -> Concat``); TVM's importer cannot take those, and the TCU needs static shapes anyway. Once
every input's shape is fixed, each such computation has one value: the onnx package's reference
evaluator computes it, and it becomes a constant before TVM imports the model.
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .shapes import check_names, given_shape, static_shape

# Ops whose value depends only on their inputs: a node of these with known inputs is folded.
_NOT_FOLDED = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
# Computed values larger than this (elements) stay in the graph: shape arithmetic is small.
_FOLD_LIMIT = 1 << 16


def import_onnx(model: "str | os.PathLike | onnx.ModelProto", input_shapes: Mapping[str, Sequence[int]] | None = None):
    """The model as a Relax IRModule for ``tvm_tensil.build``: inputs given static shapes (from
    ``input_shapes`` by ONNX name; a symbolic batch alone becomes 1, with a warning), shape
    computations folded to constants, weights as constants."""
    from tvm.relax.frontend.onnx import from_onnx

    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    model = onnx.ModelProto.FromString(model.SerializeToString())  # the caller's model is left as it was
    shapes = _static_input_shapes(model, dict(input_shapes or {}))
    for inp in _graph_inputs(model):
        dims = inp.type.tensor_type.shape.dim
        for d, size in zip(dims, shapes[inp.name]):
            d.Clear()
            d.dim_value = size
    model = fold_shape_computations(model)
    return from_onnx(model, shape_dict={k: list(v) for k, v in shapes.items()}, keep_params_in_input=False)


def _graph_inputs(model: onnx.ModelProto):
    initialised = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initialised]


def _static_input_shapes(model: onnx.ModelProto, given: dict) -> dict[str, tuple[int, ...]]:
    inputs = _graph_inputs(model)
    check_names(given, [i.name for i in inputs])
    known: dict[str, int] = {}
    shapes = {}
    for inp in inputs:
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or None)
                for d in inp.type.tensor_type.shape.dim]  # fmt: skip
        shapes[inp.name] = static_shape(inp.name, dims, given_shape(given, inp.name), known, stacklevel=4)
    return shapes


def fold_shape_computations(model: onnx.ModelProto) -> onnx.ModelProto:
    """Nodes whose outputs are determined by the static input shapes and the constants (Shape of a
    tensor of static shape, and what is computed from it and from constants) replaced by
    constants."""
    from onnx.reference import ReferenceEvaluator

    del model.graph.value_info[:]  # shapes inferred before the inputs were fixed
    model = onnx.shape_inference.infer_shapes(model)
    known: dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    static = {}
    for vi in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        dims = vi.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            static[vi.name] = [d.dim_value for d in dims]
    opset = [o for o in model.opset_import]
    folded, kept = [], []
    for node in model.graph.node:
        value = None
        if node.op_type == "Constant":
            value = [numpy_helper.to_array(a.t) for a in node.attribute if a.name == "value"]
            value = value or None
        elif node.op_type == "Shape" and node.input[0] in static and not node.attribute:
            value = [np.array(static[node.input[0]], dtype=np.int64)]
        elif node.op_type not in _NOT_FOLDED and node.input and all(i == "" or i in known for i in node.input):
            value = _evaluate(ReferenceEvaluator, node, known, opset)
        if value is not None and all(v.size <= _FOLD_LIMIT for v in value):
            for name, v in zip(node.output, value):
                known[name] = v
            folded.append(node)
        else:
            kept.append(node)
    if not any(n.op_type != "Constant" for n in folded):
        return model
    needed = {i for n in kept for i in n.input} | {o.name for o in model.graph.output}
    existing = {i.name for i in model.graph.initializer}
    new_inits = [
        numpy_helper.from_array(np.asarray(known[n]), n) for n in sorted(needed) if n in known and n not in existing
    ]
    del model.graph.node[:]
    model.graph.node.extend(kept)
    model.graph.initializer.extend(new_inits)
    del model.graph.value_info[:]
    return onnx.shape_inference.infer_shapes(model)


def _evaluate(evaluator, node, known: dict, opset) -> list[np.ndarray] | None:
    """One node run by the onnx package's reference evaluator on known inputs (None if it cannot)."""
    inputs = [i for i in node.input if i]
    graph = helper.make_graph(
        [node],
        "fold",
        [
            helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(known[i].dtype), known[i].shape)
            for i in inputs
        ],
        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.output if o],
    )
    try:
        outputs = evaluator(helper.make_model(graph, opset_imports=opset)).run(None, {i: known[i] for i in inputs})
    except Exception:  # noqa: BLE001 - an op the evaluator cannot run stays in the graph for TVM
        return None
    return [np.asarray(v) for v in outputs]
