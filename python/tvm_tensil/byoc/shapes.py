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
    return "(" + ", ".join("?" if d is None else str(d) for d in dims) + ")"


def check_names(given: Mapping, names: Sequence[str]) -> None:
    """Every name in ``given`` an input of the model (as written in ONNX, or as TVM names it)."""
    unknown = sorted(k for k in given if k not in names and re.sub(r"\W", "_", k) not in names)
    if unknown:
        raise InputShapeError(f"input_shapes names {unknown}, which the model does not take; its inputs: {list(names)}")


def given_shape(given: Mapping, name: str) -> tuple[int, ...] | None:
    """The shape ``given`` holds for input ``name`` (``input.1`` also found as ``input_1``)."""
    for key, shape in given.items():
        if key == name or re.sub(r"\W", "_", key) == name:
            return tuple(int(v) for v in shape)
    return None


def static_shape(name: str, dims: list, want: tuple[int, ...] | None, known: dict, stacklevel: int) -> tuple[int, ...]:
    """Input ``name``'s static shape. ``dims``: its dimensions, ints for fixed ones, a name for a
    symbolic one, None for one that is neither; ``want``: the shape the user gave, if any; ``known``:
    sizes of symbolic names bound so far (updated). A symbolic batch alone is bound to 1 with a warning."""
    if want is not None:
        if len(want) != len(dims):
            raise InputShapeError(
                f"input_shapes gives input '{name}' {len(want)} dimensions {want}; the model's is {shape_text(dims)}"
            )
        for i, (d, w) in enumerate(zip(dims, want)):
            if isinstance(d, int) and d != w:
                raise InputShapeError(
                    f"input_shapes gives input '{name}' the shape {want}; the model fixes dimension {i} "
                    f"of {shape_text(dims)} to {d}"
                )
            if isinstance(d, str):
                if known.get(d, w) != w:
                    raise InputShapeError(f"input_shapes gives '{d}' two sizes ({known[d]} and {w})")
                known[d] = w
        return want
    open_dims = [i for i, d in enumerate(dims) if not isinstance(d, int) and d not in known]
    if open_dims == [0]:
        warnings.warn(
            InputShapeWarning(
                f"input '{name}' {shape_text(dims)} has a symbolic batch: built for batch 1; for another, pass "
                f"input_shapes={{'{name}': (N, ...)}} (CLI: --input-shape {name}=N,...)"
            ),
            stacklevel=stacklevel + 1,
        )
        if dims[0] is not None:
            known[dims[0]] = 1
        return (1, *(d if isinstance(d, int) else known[d] for d in dims[1:]))
    if open_dims:
        example = ",".join(str(d) if isinstance(d, int) else "?" for d in dims)
        raise InputShapeError(
            f"input '{name}' has the symbolic shape {shape_text(dims)}; the TCU needs static shapes: pass "
            f"input_shapes={{'{name}': (...)}} (CLI: --input-shape {name}={example} with the ? filled in)"
        )
    return tuple(d if isinstance(d, int) else known[d] for d in dims)


def bind_input_shapes(mod: tvm.IRModule, input_shapes: Mapping[str, Sequence[int]] | None = None) -> tvm.IRModule:
    """``mod`` with the symbolic dimensions of ``main``'s inputs bound: from ``input_shapes`` (by input
    name; ONNX's ``input.1`` or TVM's ``input_1``), a symbolic batch alone to 1 (with a warning)."""
    given = dict(input_shapes or {})
    main = mod["main"]
    check_names(given, [str(p.name) for p in main.params])
    known: dict[str, int] = {}
    for param in main.params:
        ty = getattr(param, "ty", None)
        if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
            continue
        dims = [int(d) if isinstance(d, IntImm) else d.name if isinstance(d, SymbolicVar) else None
                for d in ty.shape.values]  # fmt: skip
        static_shape(str(param.name), dims, given_shape(given, str(param.name)), known, stacklevel=4)
    return relax.transform.BindSymbolicVars(known)(mod) if known else mod
