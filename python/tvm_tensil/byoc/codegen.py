"""``relax.ext.tensil``: compile each Tensil partition and wrap it in a runtime module.

Called by ``relax.transform.RunCodegen`` with the partition functions. ``build`` has compiled
each one already and attached the result's description (program, constant recipes, DRAM0 map)
as the function attribute ``DESCRIPTION_ATTR``; a function without it (RunCodegen called
directly) goes through the frontend and the compiler here. The description is embedded in the
C++ stub ``src/codegen/tensil_stub.cc`` as JSON and becomes a ``CSourceModule`` whose constants (the
partition's weights, delivered once via ``__init_<symbol>``) are the ones RunCodegen named.
"""

from __future__ import annotations

import json
import re

import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..arch import Architecture, load_arch
from ..compiler import CompiledPartition, CompileOptions, compile_graph
from ..model import from_user_layout
from ..sources import PARTITION_STUB
from .frontend import collect_constants, relax_to_graph

STUB = PARTITION_STUB
# The partition function attribute holding its compiled description (JSON).
DESCRIPTION_ATTR = "tensil.description"


def _arch_from_options(options) -> Architecture:
    if options is not None and "arch" in options:
        return load_arch(json.loads(str(options["arch"])))
    return load_arch("pynqz1")


def description(part: CompiledPartition) -> dict:
    d = part.to_json()
    d["input_order"] = list(part.inputs)
    d["output_order"] = list(part.outputs)
    return d


def io_names(func, n_outputs: int) -> tuple[list[str], list[str]]:
    """The partition's input names: its parameters' (a model input keeps the framework's name, e.g.
    ONNX's); its outputs: ``output``, or ``output_0``, ``output_1``, ... Unique, usable as file names."""
    taken: set[str] = set()

    def unique(name: str) -> str:
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "input"
        base, i = name, 1
        while name in taken:
            name, i = f"{base}_{i}", i + 1
        taken.add(name)
        return name

    inputs = [unique(str(p.name)) for p in func.params]
    outputs = [unique("output" if n_outputs == 1 else f"output_{i}") for i in range(n_outputs)]
    return inputs, outputs


def stub_source(symbol: str, desc: dict) -> str:
    text = json.dumps(desc, separators=(",", ":"))
    if ")TVM_TENSIL" in text:  # cannot happen with JSON of base64 and names; guard the raw literal
        raise ValueError("description would end the raw string literal")
    return STUB.read_text().replace("@SYMBOL@", symbol).replace("@DESCRIPTION@", text)


def compile_partition(
    func, arch: Architecture, samples=None, sources=None, options: CompileOptions = CompileOptions()
) -> CompiledPartition:
    """Compile one partition function. ``samples``: calibration data, a list of tuples of the
    function's arguments (numpy, the framework's layout); each tensor then gets its own scale.
    ``sources``: where each argument comes from in the model (for messages). ``options``: the
    scheduler's (``CompileOptions``).
    Raises whatever the frontend or the compiler raises."""
    symbol = str(func.attrs["global_symbol"])
    graph, io_shapes = relax_to_graph(func)
    if not graph.nodes:
        raise ValueError("only reshapes (views of its input): nothing for the TCU to compute")
    feeds = [
        {t: from_user_layout(np.asarray(v, dtype=np.float64), io_shapes[t]) for t, v in zip(graph.inputs, args)}
        for args in samples or ()
    ]
    part = compile_graph(graph, arch, name=symbol, calibration=feeds, options=options)
    # The model's inputs and outputs under the names and in the layout the user knows.
    in_names, out_names = io_names(func, len(graph.outputs))
    part.inputs = {name: part.inputs[t] for name, t in zip(in_names, graph.inputs)}
    part.outputs = {name: part.outputs[t] for name, t in zip(out_names, graph.outputs)}
    part.user_shapes = {
        name: tuple(io_shapes[t]) for name, t in zip(in_names + out_names, list(graph.inputs) + list(graph.outputs))
    }
    renamed = dict(zip(graph.inputs, in_names)) | dict(zip(graph.outputs, out_names))
    part.shifts = {renamed[t]: k for t, k in part.shifts.items()}
    part.sources = dict(zip(in_names, sources or ()))
    external = dict(zip(graph.outputs, out_names))
    for node in part.report["nodes"]:
        node["output"] = external.get(node["output"], node["output"])
    part.model(None).validate()  # the DRAM0 maps: e.g. an output that is a view of an input
    part.description = description(part)
    return part


def with_description(func, part: CompiledPartition):
    """``func`` carrying its compiled description for the codegen, and the weights calibration
    rounded for their layers' outputs in place of the model's (TVM delivers them to the runtime)."""
    if part.rounded:
        originals = collect_constants(func)
        table = []
        for i in part.rounded:
            old = originals[i]
            if old.value.dtype != "float32":
                raise ValueError(f"calibrated weight rounding needs float32 weights, not {old.value.dtype}")
            table.append((old, relax.const(np.asarray(part.constants[i], dtype=np.float32))))
        func = _ConstantSwap(table).visit_expr(func)
    return func.with_attr(DESCRIPTION_ATTR, json.dumps(part.description, separators=(",", ":")))


@mutator
class _ConstantSwap(PyExprMutator):
    """Replaces constants (by identity) with others."""

    def __init__(self, table):
        super().__init__()
        self.table = table

    def visit_generic_const_(self, op):
        return next((new for old, new in self.table if op.same_as(old)), op)


@tvm_ffi.register_global_func("relax.ext.tensil", override=True)
def tensil_codegen(functions, options, constant_names):
    arch = _arch_from_options(options)
    create = tvm.get_global_func("runtime.CSourceModuleCreate")
    modules = []
    for func in functions:
        symbol = str(func.attrs["global_symbol"])
        if DESCRIPTION_ATTR in func.attrs:
            desc = json.loads(str(func.attrs[DESCRIPTION_ATTR]))
        else:  # RunCodegen called directly, not through build()/offload()
            desc = compile_partition(func, arch).description
        names = [str(constant_names[c]) for c in collect_constants(func)]
        modules.append(create(stub_source(symbol, desc), "cc", [symbol], names))
    return modules
