"""``tvm_tensil.build``: the relay.build of this stack, plus the ``tensil`` target and pipeline.

    ex = tvm_tensil.build(mod, target="tensil", arch="pynqz1")
    print(ex.tensil_report)                     # what went where, and why

    pipeline = tensil_pipeline("pynqz1")        # the same through tvm.compile
    ex = tvm.compile(mod, target="tensil", relax_pipeline=pipeline)
    print(pipeline.report)

Every op the TCU can run is compiled to Tensil instructions (one runtime module per
partition), everything else is compiled for the host CPU by TVM's default LLVM pipeline.
A build's results are values: the report (with the compiled partitions) rides on the
executable; nothing is left in module globals.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from ..arch import Architecture, load_arch
from ..compiler import CompiledPartition, CompileOptions
from ..compiler.memory import CapacityError
from . import codegen
from .calibrate import partition_inputs, samples_for
from .frontend import shape_of
from .patterns import Rejections, partition_for_tensil
from .shapes import bind_input_shapes
from .split import partition_weight_vectors, split_partition

TARGET = "tensil"
ARCH_ENV = "TVM_TENSIL_ARCH"

# target="tensil": the host's LLVM, marked with a key the pipelines below recognise.
if TARGET not in tvm.target.tag.list_tags():
    tvm.target.tag.register_tag(TARGET, {"kind": "llvm", "keys": [TARGET, "cpu"]})


# A layer losing more than this share of its weights (or of their magnitude) to rounding is reported.
WEIGHT_LOSS_LIMIT = 0.10


class OffloadWarning(UserWarning):
    """A build that runs nothing on the TCU."""


class PrecisionWarning(UserWarning):
    """A build whose numbers will be wrong: weights that the data type rounds away."""


class ReloadWarning(UserWarning):
    """A build whose partitions' weights do not fit DRAM1 together: each run writes some again."""


def weight_losses(report: "BuildReport") -> list[str]:
    """One line per layer that loses more than ``WEIGHT_LOSS_LIMIT`` to rounding: of its weights,
    or, for weights calibration rounded for their outputs, of its outputs (rms); and one per
    calibrated partition whose simulated error stays above the error target."""
    lines = []
    dt = report.arch.data_type.name
    for sym, p in report.partitions.items():
        cal = p.get("calibration", {})
        worst, target = cal.get("simulated_worst", {}).get(cal.get("choice")), cal.get("error_target")
        if worst is not None and target is not None and worst > target:
            lines.append(
                f"{sym}: its outputs err up to {worst:.2%} of their range at {dt} in the simulation on the "
                f"calibration samples (error target {target:.2%}); a wider data type (e.g. FP32BP16) keeps them"
            )
        for node in p["nodes"]:
            name = f"{node['op']} -> {node['output']} (from {', '.join(node['relax_ops'])}) in {sym}"
            if "weights_output_error" in node:
                if node["weights_output_error"] > WEIGHT_LOSS_LIMIT:
                    lines.append(
                        f"{name}: rounding its weights to {dt} leaves its outputs {node['weights_output_error']:.0%} "
                        "off (rms, on the calibration inputs); a wider data type (e.g. FP32BP16) keeps them"
                    )
                continue
            zeroed, error = node.get("weights_zeroed", 0.0), node.get("weights_error", 0.0)
            if zeroed > WEIGHT_LOSS_LIMIT or error > WEIGHT_LOSS_LIMIT:
                fix = (
                    "a wider data type (e.g. FP32BP16) keeps them"
                    if p.get("calibration_samples")
                    else "calibration=sample inputs can give the layer finer weights where its input's range "
                    "allows, a wider data type (e.g. FP32BP16) keeps them"
                )
                lines.append(
                    f"{name}: {zeroed:.0%} of its weights round to zero and {node.get('weights_saturating', 0.0):.0%} "
                    f"saturate at {dt}, {error:.0%} of their magnitude is lost; {fix}"
                )
    return lines


@dataclass
class BuildReport:
    """What went where: per partition the ops, instructions, memory and estimated cycles;
    every op left on the CPU with the reason. ``compiled`` holds the compiled partitions by
    symbol (programs, constant recipes, the weights) for writing model files."""

    arch: Architecture
    partitions: dict[str, dict[str, Any]] = field(default_factory=dict)
    cpu_ops: list[dict[str, Any]] = field(default_factory=list)
    compiled: dict[str, CompiledPartition] = field(default_factory=dict, repr=False)

    @property
    def total_cycles(self) -> int:
        return sum(p["cycles"]["total"] for p in self.partitions.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "arch": self.arch.to_dict(),
            "partitions": self.partitions,
            "cpu_ops": self.cpu_ops,
            "estimated_cycles": self.total_cycles,
        }

    def __repr__(self) -> str:
        layers = sum(len(p["nodes"]) for p in self.partitions.values())
        return (
            f"<BuildReport {self.arch.name or 'custom'}: {len(self.partitions)} partition(s), {layers} layer(s) on "
            f"the TCU, {len(self.cpu_ops)} op(s) on the CPU, ~{self.total_cycles} cycles>"
        )

    def _repr_pretty_(self, printer, cycle) -> None:  # IPython shows the whole report
        printer.text(str(self))

    def __str__(self) -> str:
        a = self.arch
        lines = [
            f"Tensil build for {a.name or 'custom architecture'} ({a.array_size}x{a.array_size} {a.data_type.name})"
        ]
        for sym, p in self.partitions.items():
            mem = p["memory"]
            lines.append(
                f"partition {sym}: {p['instructions']} instructions, ~{p['cycles']['total']:,} cycles (latency model)"
            )
            lines.append(
                f"  memory: DRAM0 {mem['dram0_vectors']} vectors, DRAM1 {mem['dram1_vectors']}, "
                f"local {mem['local_vectors']}/{mem['local_depth']}, accumulators "
                f"{mem['accumulator_vectors']}/{mem['accumulator_depth']}"
            )
            for node in p["nodes"]:
                ep = f" + {'+'.join(node['epilogue'])}" if node["epilogue"] else ""
                two = f", weights in two parts (residue 2^-{node['residue_bits']})" if "residue_bits" in node else ""
                busiest = max(node["busy"].items(), key=lambda kv: kv[1], default=("nothing", 0))
                if "in_turn_with" in node:
                    two += f", in turn with {node['in_turn_with']} (the pair's cycles in the first)"
                if node.get("bare_blocks"):
                    two += ", weight blocks without bias rows"
                lines.append(
                    f"  {node['op']}{ep} -> {node['output']}: {node['instructions']} instructions, "
                    f"~{sum(node['cycles'].values()):,} cycles (busiest: {busiest[0]} {busiest[1]:,}){two} "
                    f"(from {', '.join(node['relax_ops'])})"
                )
            if p.get("calibration_samples"):
                ks = [v["shift"] for v in p["scales"].values()]
                room = min((v["headroom"] for v in p["scales"].values() if v["headroom"]), default=None)
                lines.append(
                    f"  scales: per tensor from {p['calibration_samples']} calibration sample"
                    + ("s" if p["calibration_samples"] != 1 else "")
                    + f", 2^{min(ks)} .. "
                    f"2^{max(ks)}" + (f"; the tightest tensor has {room:.1f}x headroom" if room else "")
                )
                split = sum("residue_bits" in n for n in p["nodes"])
                cal = p["calibration"]
                worst = cal.get("simulated_worst", {}).get(cal["choice"])
                if split:
                    lines.append(
                        f"  weights in two parts (a second MatMul each) in {split} layer(s): the error target "
                        f"{cal['error_target']:.2%} of the outputs' range; simulated {worst:.2%}"
                    )
                elif cal.get("two_parts"):
                    lines.append(f"  weights in two parts: {cal['two_parts']}")
                rounded = [n for n in p["nodes"] if "weights_output_error" in n]
                if rounded:
                    worst = max(rounded, key=lambda n: n["weights_output_error"])
                    lines.append(
                        f"  weights: rounded for their outputs in {len(rounded)} layer(s); the worst layer's "
                        f"outputs {worst['weights_output_error']:.2%} off (rms), nearest rounding "
                        f"{worst['weights_output_error_nearest']:.2%}"
                    )
            else:  # (a trained network's values seldom all suit the data type's one point)
                lines.append(
                    f"  scales: {a.data_type.name}'s own for every tensor (no calibration samples; "
                    "calibration=samples gives each tensor its own)"
                )
            if p.get("weights_saturated"):
                lines.append(f"  warning: {p['weights_saturated']} weights saturated at the {a.data_type.name} range")
        lines += [f"warning: {w}" for w in weight_losses(self)]
        if self.cpu_ops:
            splits = sum(op.get("splits", False) for op in self.cpu_ops)
            between = f" ({splits} between TCU partitions, marked *: each a round trip between the devices)"
            lines.append("on the CPU:" + (between if splits else ""))
            for op in self.cpu_ops:
                mark = "*" if op.get("splits") else " "
                function = f" {op['function']}" if "function" in op else ""
                lines.append(f" {mark}{op['op']}{function} {tuple(op['shape'])}: {op['reason']}")
        else:
            lines.append("on the CPU: nothing")
        if a.clock_mhz:
            ms = self.total_cycles / (a.clock_mhz * 1e3)
            lines.append(f"estimated TCU time: {ms:.3f} ms at {a.clock_mhz:g} MHz (latency model, no overlap)")
        return "\n".join(lines)


def _namespace_symbols(
    mod: tvm.IRModule, arch: Architecture, samples=None, options: CompileOptions = CompileOptions()
) -> tvm.IRModule:
    """Give each Tensil partition a symbol unique to this model, architecture, calibration data and
    compile options: libraries loaded in one process share the runtime's partitions by symbol."""
    key = hashlib.sha1(f"{tvm_ffi.structural_hash(mod)}:{json.dumps(arch.to_dict(), sort_keys=True)}".encode())
    key.update(json.dumps(asdict(options), sort_keys=True).encode())
    for sample in samples or ():
        for x in sample:
            key.update(np.ascontiguousarray(x).tobytes())
    digest = key.hexdigest()[:12]
    for i, (gv, func) in enumerate(_partitions(mod)):
        mod[gv] = func.with_attr("global_symbol", f"tensil_{digest}_{i}")
    return mod


def _weights_not_constant(call, params) -> str | None:
    """Why a conv or dense layer's weights are not constants: a graph input (the model imported with
    ``keep_params_in_input=True``), or a tensor the model computes (a product of two activations)."""
    if call.op.name not in ("relax.nn.conv2d", "relax.matmul") or len(call.args) != 2:
        return None
    w = call.args[1]
    if not isinstance(w, relax.Var):
        return None
    if any(w.same_as(p) for p in params):
        return (
            "its weights are a graph input, not constants: import with "
            "from_onnx(model, keep_params_in_input=False) (PyTorch: from_exported_program(..., "
            "keep_params_as_input=False)) or pass params= to build()"
        )
    return "both operands are tensors the model computes; the TCU multiplies by constant weights"


# TIR functions TVM's ONNX importer emits (``call_tir``) for the ops it has no Relax op for: the
# model's op each one comes from, for the report.
_TIR_FROM_ONNX = {
    "einsum": "Einsum",
    "mirror_pad": "Pad (mode reflect)",
    "replicate_pad": "Pad (mode edge)",
    "circular_pad": "Pad (mode wrap)",
    "tile": "Tile",
    "dyn_tile": "Tile",
    "flip": "CumSum (reverse)",
}


# Ops the TCU could run in principle but this compiler does not yet, and why.
_NOT_YET = {
    "relax.nn.softmax": "softmax is not on the TCU yet: besides exp it needs a maximum and a sum across channels "
    "(a vector's lanes)",
    "relax.nn.log_softmax": "log_softmax is not on the TCU yet: besides exp it needs a log and a sum across "
    "channels (a vector's lanes)",
    "relax.nn.layer_norm": "a layer norm is not on the TCU yet: its statistics are sums across the lanes of a "
    "vector (instance and group norms, over the pixels, run on the TCU)",
    "relax.variance": "a variance not part of an instance or group norm over an NCHW map stays on the CPU",
}


def _call_tir_reason(call: relax.Call) -> tuple[str, str]:
    """The TIR function a ``call_tir`` runs, and why it stays on the CPU (naming the model's op)."""
    function = call.args[0].name_hint if isinstance(call.args[0], tvm.ir.GlobalVar) else str(call.args[0])
    origin = _TIR_FROM_ONNX.get(function)
    where = f", which TVM's ONNX importer emits for {origin}" if origin else ""
    return function, f"no Tensil pattern for the TIR function {function}{where}"


def _cpu_ops(mod: tvm.IRModule, rejections: Rejections) -> list[dict[str, Any]]:
    """Every op left on the CPU with its reason, and whether it splits the TCU's part (a TCU
    partition before it and one after it: a round trip between the devices)."""
    ops = []
    splitting = _splitting(mod)
    for gv, func in mod.functions.items():
        if not isinstance(func, relax.Function) or (func.attrs and "Codegen" in func.attrs):
            continue

        def visit(e):
            if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op):
                try:
                    shape = shape_of(e)
                except ValueError:
                    shape = ()
                name = e.op.name
                reason = rejections.reason(name, shape) or _weights_not_constant(e, func.params)
                reason = reason or _NOT_YET.get(name) or f"no Tensil pattern for {name}"
                op = {"op": name, "shape": list(shape), "reason": reason,
                      "splits": e in splitting or gv in splitting}  # fmt: skip
                if name == "relax.call_tir":
                    op["function"], op["reason"] = _call_tir_reason(e)
                ops.append(op)

        relax.analysis.post_order_visit(func.body, visit)
    return ops


def _splitting(mod: tvm.IRModule) -> set:
    """The calls in ``main`` (CPU ops, and the functions they call) with a TCU partition upstream
    and one downstream."""
    tcu = {gv for gv, _ in _partitions(mod)}
    bindings = [b for block in mod["main"].body.blocks for b in block.bindings]
    uses: dict = {}
    for b in bindings:
        uses[b.var] = [b.value] if isinstance(b.value, relax.Var) else list(relax.analysis.free_vars(b.value))

    def is_tcu(value) -> bool:
        return isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar) and value.op in tcu

    after_tcu, before_tcu = set(), set()
    for b in bindings:
        if is_tcu(b.value) or any(v in after_tcu for v in uses[b.var]):
            after_tcu.add(b.var)
    for b in reversed(bindings):
        if is_tcu(b.value) or b.var in before_tcu:
            before_tcu.update(uses[b.var])
    out = set()
    for b in bindings:
        v = b.value
        if is_tcu(v) or b.var not in before_tcu or not any(u in after_tcu for u in uses[b.var]):
            continue
        if isinstance(v, relax.Call):
            out.add(v)
            if isinstance(v.op, tvm.ir.GlobalVar):
                out.add(v.op)
    return out


def _partitions(mod: tvm.IRModule):
    return [
        (gv, f)
        for gv, f in mod.functions.items()
        if isinstance(f, relax.Function) and f.attrs and f.attrs.get("Codegen") == TARGET
    ]


def _back_to_cpu(func: relax.Function) -> relax.Function:
    """A partition that cannot be compiled, as plain Relax ops again (its composite functions
    inlined), so that the host build compiles it like any other part of the model."""
    sub = tvm.IRModule({"partition": func.without_attr("Codegen").with_attr("global_symbol", "partition")})
    sub = relax.transform.LambdaLift()(sub)
    for gv, f in list(sub.functions.items()):
        if isinstance(f, relax.Function) and f.attrs and "Composite" in f.attrs:
            sub[gv] = f.without_attr("Composite")
    sub = relax.transform.InlinePrivateFunctions()(sub)
    return sub["partition"].without_attr("global_symbol")


def _reject_all(rejections: Rejections, func: relax.Function, reason: str) -> None:
    """Give every op of ``func`` the reason it stays on the CPU."""

    def record(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            rejections.add(expr, reason, replace=True)

    relax.analysis.post_order_visit(func.body, record)


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def _raise_if_interrupted(e: BaseException) -> None:
    """TVM turns a KeyboardInterrupt raised in Python code it called (a pass's callback) into a
    RuntimeError without a message: that is Ctrl-C, not a failure to report and work around."""
    if type(e) is RuntimeError and not str(e).strip():
        raise e


def _argument_sources(mod: tvm.IRModule) -> dict[str, list[str]]:
    """For each partition called from ``main``, where each argument comes from: a model input (by
    its name) or the op that produced it."""
    main = mod["main"]
    params = {p: str(p.name) for p in main.params}
    bound, symbols = {}, {gv: str(f.attrs["global_symbol"]) for gv, f in _partitions(mod)}
    sources: dict[str, list[str]] = {}
    for block in main.body.blocks:
        for binding in block.bindings:
            bound[binding.var] = binding.value
            v = binding.value
            if isinstance(v, relax.Call) and isinstance(v.op, tvm.ir.GlobalVar) and v.op in symbols:
                sources[v.op.name_hint] = [_source(arg, params, bound, symbols) for arg in v.args]
    return sources


def _source(expr, params: dict, bound: dict, symbols: dict) -> str:
    while (
        isinstance(expr, relax.Var)
        and expr not in params
        and isinstance(bound.get(expr), (relax.Var, relax.TupleGetItem))
    ):
        value = bound[expr]
        expr = value.tuple_value if isinstance(value, relax.TupleGetItem) else value
    if expr in params:
        return f"model input '{params[expr]}'"
    value = bound.get(expr)
    if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar) and value.op in symbols:
        return f"an output of TCU partition {symbols[value.op]}"
    if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
        return f"the result of {value.op.name} on the CPU"
    return ""


def _compile_partitions(
    mod: tvm.IRModule,
    arch: Architecture,
    rejections: Rejections,
    samples: list | None = None,
    options: CompileOptions = CompileOptions(),
) -> tuple[tvm.IRModule, dict[str, CompiledPartition]]:
    """Compile every partition now (each function then carries its description for the codegen).
    One whose weights do not fit DRAM1 is cut into consecutive pieces that do (byoc/split.py); one
    that fails otherwise (too big for DRAM0, an op the scheduler cannot place) goes back to the CPU
    with the reason recorded for each of its ops. ``samples``: the model's calibration samples."""
    compiled = {}
    mod = _split_by_estimate(mod, arch)
    sources = _argument_sources(mod)
    seen = _partition_samples(mod, samples)
    queue = _partitions(mod)
    while queue:
        gv, func = queue.pop(0)
        try:
            part = codegen.compile_partition(func, arch, seen.get(gv.name_hint), sources.get(gv.name_hint), options)
        except Exception as e:  # noqa: BLE001 - reported; the partition runs on the CPU instead
            _raise_if_interrupted(e)
            if isinstance(e, CapacityError) and e.bank == 1:
                mod, pieces = split_partition(mod, gv, arch, e.need)
                if pieces:
                    sources, seen = _argument_sources(mod), _partition_samples(mod, samples)
                    queue = [(g, mod[g]) for g in pieces] + queue
                    continue
            mod[gv] = _back_to_cpu(func)
            _reject_all(rejections, mod[gv], f"its partition could not be compiled for the TCU: {e}")
            continue
        compiled[part.name] = part
        mod[gv] = codegen.with_description(func, part)
    return mod, compiled


def _split_by_estimate(mod: tvm.IRModule, arch: Architecture) -> tvm.IRModule:
    """Cut the partitions whose estimated weights exceed DRAM1 before compiling any: a compile
    (calibrated: the slow part) finds it only at its end, and each cut runs the model on the
    calibration samples again for the pieces' inputs."""
    queue = _partitions(mod)
    while queue:
        gv, func = queue.pop(0)
        need = partition_weight_vectors(func, arch)
        if need > arch.dram1_depth:
            mod, pieces = split_partition(mod, gv, arch, need)
            queue = [(g, mod[g]) for g in pieces] + queue
    return mod


def _partition_samples(mod: tvm.IRModule, samples: list | None) -> dict[str, list]:
    """Each partition's arguments for every calibration sample, by global var name."""
    if not samples or not _partitions(mod):
        return {}
    return partition_inputs(mod, dict(_partitions(mod)), samples, _back_to_cpu)


def offload(
    mod: tvm.IRModule,
    arch: "str | Architecture" = "pynqz1",
    calibration=None,
    input_shapes=None,
    options: CompileOptions = CompileOptions(),
) -> tuple[tvm.IRModule, BuildReport]:
    """Partition and compile the Tensil parts; returns the module for the host and the report.
    ``calibration``, ``input_shapes``, ``options``: see ``build``."""
    arch = load_arch(arch)
    mod = bind_input_shapes(mod, input_shapes)
    samples = samples_for(mod["main"], calibration) if calibration is not None else None
    rejections = Rejections()
    try:
        mod = partition_for_tensil(mod, arch, rejections)
    except Exception as e:  # noqa: BLE001 - TVM's partitioning passes themselves failed: all on the CPU
        _raise_if_interrupted(e)
        reason = f"TVM's partitioning failed on this model ({type(e).__name__}: {_first_line(e)[:200]})"
        for func in mod.functions.values():
            if isinstance(func, relax.Function):
                _reject_all(rejections, func, reason)
    mod = _namespace_symbols(mod, arch, samples, options)
    mod, compiled = _compile_partitions(mod, arch, rejections, samples, options)
    report = BuildReport(arch, cpu_ops=_cpu_ops(mod, rejections), compiled=compiled)
    report.partitions = {sym: part.report for sym, part in compiled.items()}
    for line in weight_losses(report):
        warnings.warn(PrecisionWarning(line), stacklevel=3)
    resident = sum(p["memory"]["dram1_vectors"] for p in report.partitions.values())
    if resident > arch.dram1_depth:
        warnings.warn(
            ReloadWarning(
                f"the {len(report.partitions)} TCU partitions' weights need {resident} vectors of DRAM1 together, the "
                f"architecture has {arch.dram1_depth} (dram1_depth): each run writes some of them again"
            ),
            stacklevel=3,
        )
    if not report.partitions:
        first = report.cpu_ops[0]["reason"] if report.cpu_ops else "the model has no ops"
        warnings.warn(OffloadWarning(f"nothing of this model runs on the TCU ({first})"), stacklevel=3)
    mod = relax.transform.RunCodegen({TARGET: {"arch": json.dumps(arch.to_dict())}})(mod)
    return mod, report


def build(
    mod: tvm.IRModule,
    target: str = TARGET,
    arch: "str | os.PathLike | Architecture" = "pynqz1",
    params: dict | None = None,
    model_dir: "str | os.PathLike | None" = None,
    calibration=None,
    input_shapes: "dict[str, tuple[int, ...]] | None" = None,
    options: CompileOptions = CompileOptions(),
):
    """Compile a Relax module for the Tensil compute unit and the host CPU.

    Parameters
    ----------
    mod : tvm.IRModule
        The model, e.g. ``from_onnx(onnx_model, keep_params_in_input=False)``.
    target : str
        ``"tensil"`` (TCU + the host's LLVM) or a CPU target for the host (kind ``llvm`` or ``c``,
        e.g. ``{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}`` for a board); any other kind is an
        error.
    arch : str, path or Architecture
        A preset name (``tvm-tensil arch --list``), a ``.tarch`` path, or an Architecture.
    params : dict, optional
        Weights to bind as constants when the module takes them as inputs.
    model_dir : path, optional
        Also write each partition as Tensil model files (.tmodel/.tprog/.tdata) here.
    calibration : optional
        Sample inputs like those the model will see: an array (samples stacked along a new first
        axis, or along the batch axis, for a one-input model), a dict of such arrays by input name, or an iterable of
        samples (arrays or dicts). TVM's CPU build runs them, and every tensor on the TCU gets a
        power-of-two scale that fits the range it took (docs/compiler.md, "Scales").
    input_shapes : dict, optional
        Static shapes for inputs with symbolic dimensions, by input name, e.g. ``{"x": (1, 3, 224,
        224)}``. A symbolic batch alone is bound to 1 with a warning; other symbolic dimensions need
        a shape here (the TCU needs static shapes).
    options : tvm_tensil.compiler.CompileOptions, optional
        Scheduling choices to turn off, to see what they gain (e.g. ``CompileOptions(look_ahead=0)``).

    Returns
    -------
    tvm.relax.VMExecutable
        Run it with ``relax.VirtualMachine(ex, tvm.cpu())``; ``ex.export_library(path)`` saves it.
        ``ex.tensil_report`` is the build's ``BuildReport`` (``print`` it).
    """
    _check_module(mod)
    _check_cxx()
    arch = load_arch(arch)
    if params:
        mod = relax.transform.BindParams("main", params)(mod)
    host = _host_target(target)
    mod, report = offload(mod, arch, calibration, input_shapes, options)
    if model_dir is not None:
        write_models(report, model_dir)
    ex = tvm.compile(mod, target=host)
    ex.tensil_report = report
    return ex


class ToolchainError(RuntimeError):
    """Something the build needs on this machine is missing."""


def _check_cxx() -> None:
    """Each Tensil partition becomes a C++ source module that TVM compiles with the machine's C++
    compiler (when the executable is loaded or exported): say so before building anything."""
    from tvm.support.cc import get_cc

    cc = get_cc()
    if cc is None or shutil.which(cc.split()[0]) is None:
        where = f"$CXX/$CC names {cc!r}, which is not found" if cc else "none of g++, clang++, c++ is on PATH"
        raise ToolchainError(
            f"tvm_tensil.build needs a C++ compiler ({where}): install one (Debian/Ubuntu: apt-get install g++) "
            "or set CXX to its path"
        )


def _check_module(mod) -> None:
    """``build`` takes a Relax IRModule: say how to get one from what was passed instead."""
    if isinstance(mod, tvm.IRModule):
        return
    kind = type(mod).__module__.split(".")[0] + "." + type(mod).__name__
    if type(mod).__name__ == "ModelProto" or isinstance(mod, (str, os.PathLike)):
        how = (
            "import the ONNX model first: mod = tvm.relax.frontend.onnx.from_onnx(onnx.load(path), "
            "keep_params_in_input=False)"
        )
    elif any(c.__module__.startswith("torch") for c in type(mod).__mro__):
        how = (
            "export the PyTorch model first: mod = tvm.relax.frontend.torch.from_exported_program("
            "torch.export.export(model, (x,)), keep_params_as_input=False)"
        )
    else:
        how = "import the model with a TVM Relax frontend (tvm.relax.frontend.onnx or .torch)"
    raise TypeError(f"tvm_tensil.build takes a Relax IRModule, not {kind}: {how}")


def _host_target(target) -> "str | tvm.target.Target":
    """The CPU target the rest of the model compiles for: "tensil" means the host's LLVM; any other
    target must be a CPU one (kind llvm or c), since only the host runs what the TCU does not."""
    if str(target) == TARGET:
        return "llvm"
    try:
        host = tvm.target.Target(target)
    except Exception as e:  # noqa: BLE001 - TVM's own parse error, restated
        raise ValueError(
            f"target {str(target)!r} is not a TVM target ({str(e).splitlines()[0][:120]}); "
            f'use target="{TARGET}" (the TCU and the host\'s LLVM)'
        ) from None
    kind = host.kind.name
    if kind not in ("llvm", "c"):
        raise ValueError(
            f"target {str(target)!r} (kind {kind}) cannot host a Tensil build: the ops the TCU "
            f'does not run go to the CPU; use target="{TARGET}" or a CPU target such as '
            '{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}'
        )
    return host


def write_models(report: BuildReport, directory: "str | os.PathLike") -> list[Path]:
    """Write every partition of the build ``report`` describes as Tensil model files."""
    paths = []
    for part in report.compiled.values():
        paths.append(part.model(part.constants).save(directory))
    Path(directory, "report.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    Path(directory, "report.txt").write_text(str(report) + "\n")
    return paths


@tvm.transform.module_pass(opt_level=0, name="TensilPipeline")
class TensilPipeline:
    """The Relax pipeline of a Tensil build: offload, then TVM's default LLVM pipeline for the
    rest. After it has run, ``report`` is the build's ``BuildReport``."""

    def __init__(self, arch: "str | Architecture | None" = None, calibration=None):
        self.arch = arch or os.environ.get(ARCH_ENV) or "pynqz1"
        self.calibration = calibration
        self.report: BuildReport | None = None

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        _check_cxx()
        mod, self.report = offload(mod, self.arch, self.calibration)
        return relax.pipeline.get_default_pipeline(tvm.target.Target("llvm"))(mod)


@relax.pipeline.register_pipeline(TARGET)
def tensil_pipeline(arch: "str | Architecture | None" = None, calibration=None) -> TensilPipeline:
    """``tvm.compile(mod, target="tensil", relax_pipeline=tensil_pipeline(arch))`` (or
    ``relax_pipeline="tensil"``): arch from the argument, else ``$TVM_TENSIL_ARCH``, else pynqz1;
    ``calibration`` as for ``build``. Keep the returned pass to read its ``report`` after the build."""
    return TensilPipeline(arch, calibration)


def _offload_under_the_tensil_target() -> None:
    """``tvm.compile(mod, target="tensil")`` runs TVM's "default" Relax pipeline under the target.
    Wrap that pipeline so that under a target with the ``tensil`` key it is the Tensil pipeline
    (instead of a silent CPU-only build); under any other target it is TVM's, unchanged."""
    pipelines = relax.pipeline.PIPELINE_MAP
    default = pipelines["default"]
    if getattr(default, "tensil_wrapped", False):
        return

    def default_or_tensil(**kwargs):
        tvm_default = default(**kwargs)

        @tvm.transform.module_pass(opt_level=0, name="DefaultOrTensilPipeline")
        def dispatch(mod: tvm.IRModule, ctx) -> tvm.IRModule:
            target = tvm.target.Target.current(allow_none=True)
            if target is not None and TARGET in target.keys:
                return TensilPipeline()(mod)
            return tvm_default(mod)

        return dispatch

    default_or_tensil.tensil_wrapped = True
    pipelines["default"] = default_or_tensil


_offload_under_the_tensil_target()
