"""Calibration: what each Tensil partition receives when the model runs on sample inputs.

``partition_inputs(mod, samples)`` takes a partitioned module, turns every partition back into
plain Relax ops, makes ``main`` also return each partition call's arguments, builds that for
the CPU with TVM and runs it on the samples. The compiler then computes every tensor inside a
partition from its inputs (``compiler.interpret``) to find the ranges that set the scales.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import tvm
from tvm import relax

from .frontend import FrontendError, shape_of


class CalibrationError(ValueError):
    """Calibration data that does not fit the model."""


def _param_shapes(main: relax.Function) -> list[tuple[str, tuple[int, ...] | None]]:
    shapes = []
    for p in main.params:
        try:
            shape = shape_of(p)
        except FrontendError:
            shape = None
        shapes.append((str(p.name), shape))
    return shapes


def _split(name: str, value, shape: tuple[int, ...] | None) -> list[np.ndarray]:
    """One input's samples: an array of the input's shape is one; several are a stack of them along
    a new first axis (``np.stack``) or along the batch axis (a multiple of the model's batch)."""
    x = np.asarray(value, dtype=np.float32)
    if shape is None or x.shape == shape:
        return [x]
    if x.ndim == len(shape) + 1 and x.shape[1:] == shape:
        return list(x)
    if x.ndim == len(shape) and x.shape[1:] == shape[1:] and shape[0] and x.shape[0] % shape[0] == 0:
        return [x[i : i + shape[0]] for i in range(0, x.shape[0], shape[0])]
    batches = f"(k*{shape[0]}, {', '.join(map(str, shape[1:]))})" if shape else "(k,)"
    raise CalibrationError(
        f"calibration input '{name}' has shape {x.shape}; the model takes {shape} (give samples of that shape, "
        f"a stack of them (k, {', '.join(map(str, shape))}) or, along its batch axis, {batches})"
    )


def samples_for(main: relax.Function, calibration: Any) -> list[list[np.ndarray]]:
    """The calibration data as a list of samples, each the list of ``main``'s arguments.

    ``calibration``: an array (a stack of samples of a one-input model), a dict of arrays by input
    name (stacks), or an iterable of samples, each an array or a dict of arrays by input name."""
    params = _param_shapes(main)
    names = [n for n, _ in params]

    def by_name(d: dict) -> list[list[np.ndarray]]:
        aliases = {k.replace(".", "_"): k for k in d}
        missing = [n for n in names if n not in d and n not in aliases]
        if missing:
            raise CalibrationError(f"calibration data has no value for input(s) {missing}; the model takes {names}")
        columns = [_split(n, d[n] if n in d else d[aliases[n]], s) for n, s in params]
        if len({len(c) for c in columns}) != 1:
            raise CalibrationError("calibration inputs hold different numbers of samples")
        return [list(row) for row in zip(*columns)]

    def positional(x) -> list[list[np.ndarray]]:
        if len(params) != 1:
            raise CalibrationError(
                f"the model takes {len(params)} inputs {names}: give calibration samples as dicts by input name"
            )
        return [[s] for s in _split(names[0], x, params[0][1])]

    if isinstance(calibration, dict):
        out = by_name(calibration)
    elif isinstance(calibration, np.ndarray):
        out = positional(calibration)
    elif isinstance(calibration, Iterable):
        out = []
        for item in calibration:
            out += by_name(item) if isinstance(item, dict) else positional(item)
    else:
        raise CalibrationError(
            f"calibration data must be arrays or dicts of arrays by input name, not {type(calibration).__name__}"
        )
    if not out:
        raise CalibrationError("calibration data holds no sample")
    for sample in out:
        for name, x in zip(names, sample):
            if not np.isfinite(x).all():
                raise CalibrationError(f"calibration input '{name}' holds NaN or infinite values")
    return out


def _with_partition_args(main: relax.Function, partitions: set) -> tuple[relax.Function, list]:
    """``main`` returning ``(its result, args of partition call 1, ...)``; the partitions called."""
    calls, order = [], []
    for block in main.body.blocks:
        for binding in block.bindings:
            v = binding.value
            if isinstance(v, relax.Call) and isinstance(v.op, tvm.ir.GlobalVar) and v.op in partitions:
                calls.append(relax.Tuple(list(v.args)))
                order.append(v.op)
    body = relax.BlockBuilder().normalize(relax.SeqExpr(main.body.blocks, relax.Tuple([main.body.body, *calls])))
    return relax.Function(main.params, body, is_pure=main.is_pure, attrs=main.attrs), order


def partition_inputs(mod: tvm.IRModule, partitions: dict, samples: list[list[np.ndarray]], plain) -> dict[str, list]:
    """Each partition's arguments (numpy, the framework's layout) for every sample, by global var
    name. ``partitions``: global var -> partition function; ``plain(func)`` turns one into plain
    Relax ops."""
    cal = tvm.IRModule(dict(mod.functions.items()))
    for gv, func in partitions.items():
        cal[gv] = plain(func)
    cal = relax.transform.ToNonDataflow()(cal)
    main, order = _with_partition_args(cal["main"], set(partitions))
    cal["main"] = main
    vm = relax.VirtualMachine(tvm.compile(cal, target="llvm"), tvm.cpu())
    seen: dict[str, list] = {gv.name_hint: [] for gv in partitions}
    for sample in samples:
        result = vm["main"](*[tvm.runtime.tensor(x) for x in sample])
        for gv, args in zip(order, list(result)[1:]):
            seen[gv.name_hint].append(tuple(a.numpy() for a in args))
    return seen
