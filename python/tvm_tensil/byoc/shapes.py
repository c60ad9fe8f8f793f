"""Input shapes: a model's symbolic dimensions made static before partitioning.

The TCU needs static shapes. Models from zoos and ``torch.onnx.export(dynamic_axes=...)`` often have
a symbolic batch (and sometimes height and width): ``bind_input_shapes`` binds them from
``input_shapes``, binds a symbolic batch alone to 1 with a warning, and names the input whose shape
is needed otherwise.
"""

from __future__ import annotations

import re
import warnings
from typing import Mapping, Sequence

import tvm
from tvm import relax
from tvm.ir.expr import Var as SymbolicVar
from tvm.ir.prim.expr import IntImm


class InputShapeError(ValueError):
    """An input's shape is needed, or the one given does not fit the model."""


class InputShapeWarning(UserWarning):
    """A symbolic dimension was bound to a default."""


def shape_text(dims) -> str:
    """A shape as users write it: ``(batch, 3, 224, 224)``."""
    return "(" + ", ".join(str(int(d)) if isinstance(d, IntImm) else str(d) for d in dims) + ")"


def _dims(param) -> list | None:
    ty = getattr(param, "ty", None)
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    return list(ty.shape.values)


def _lookup(given: dict, name: str):
    for key in (name, *[k for k in given if re.sub(r"\W", "_", k) == name]):
        if key in given:
            return given.pop(key)
    return None


def bind_input_shapes(mod: tvm.IRModule, input_shapes: Mapping[str, Sequence[int]] | None = None) -> tvm.IRModule:
    """``mod`` with the symbolic dimensions of ``main``'s inputs bound: from ``input_shapes`` (by input
    name; ONNX's ``input.1`` or TVM's ``input_1``), a symbolic batch alone to 1 (with a warning)."""
    given = {str(k): tuple(int(v) for v in shape) for k, shape in (input_shapes or {}).items()}
    main = mod["main"]
    names = [str(p.name) for p in main.params]
    unknown = sorted(k for k in given if k not in names and re.sub(r"\W", "_", k) not in names)
    if unknown:
        raise InputShapeError(f"input_shapes names {unknown}, which the model does not take; its inputs: {names}")
    binding: dict[str, int] = {}
    for param in main.params:
        name, dims = str(param.name), _dims(param)
        if dims is None:
            continue
        want = _lookup(given, name)
        symbolic = [i for i, d in enumerate(dims) if not isinstance(d, IntImm)]
        if want is not None:
            if len(want) != len(dims):
                raise InputShapeError(
                    f"input_shapes gives input '{name}' {len(want)} dimensions {want}; the model's is "
                    f"{shape_text(dims)}"
                )
            for i, (d, w) in enumerate(zip(dims, want)):
                if isinstance(d, IntImm) and int(d) != w:
                    raise InputShapeError(
                        f"input_shapes gives input '{name}' the shape {want}; the model fixes dimension {i} "
                        f"of {shape_text(dims)} to {int(d)}"
                    )
                if isinstance(d, SymbolicVar):
                    if binding.get(d.name, w) != w:
                        raise InputShapeError(f"input_shapes gives '{d.name}' two sizes ({binding[d.name]} and {w})")
                    binding[d.name] = w
        elif symbolic == [0] and isinstance(dims[0], SymbolicVar):
            binding.setdefault(dims[0].name, 1)
            warnings.warn(
                InputShapeWarning(
                    f"input '{name}' {shape_text(dims)} has a symbolic batch '{dims[0].name}': built for "
                    f"batch 1; for another, pass input_shapes={{'{name}': (N, ...)}} (CLI: --input-shape "
                    f"{name}=N,...)"
                ),
                stacklevel=4,  # the caller of build()
            )
        elif symbolic and not all(isinstance(dims[i], SymbolicVar) and dims[i].name in binding for i in symbolic):
            example = ",".join(str(int(d)) if isinstance(d, IntImm) else "?" for d in dims)
            raise InputShapeError(
                f"input '{name}' has the symbolic shape {shape_text(dims)}; the TCU needs static shapes: pass "
                f"input_shapes={{'{name}': (...)}} (CLI: --input-shape {name}={example} with the ? filled in)"
            )
    return relax.transform.BindSymbolicVars(binding)(mod) if binding else mod
