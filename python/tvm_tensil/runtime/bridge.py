"""The runtime side of compiled models: what the C++ stubs call.

``import tvm_tensil`` registers three global functions with TVM's FFI:

- ``tvm_tensil.runtime.register(symbol, description)``: a stub's compiled partition (once);
- ``tvm_tensil.runtime.init(symbol, constants)``: the partition's weights (once, at load);
- ``tvm_tensil.runtime.invoke(symbol, *inputs, *outputs)``: one call; runs the Tensil
  program on the current session's device (``tvm_tensil.device(...)`` / ``$TVM_TENSIL_DEVICE``)
  and records its statistics in the session.

``PARTITIONS`` is what loaded libraries need to find their partitions: keyed by symbol, which
names the model (its structure and weights) and the architecture, so two builds never share an
entry unless they compiled the same model for the same architecture.

Importing TVM itself is not needed here: the tensors are DLPack-capable FFI objects.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

import numpy as np
import tvm_ffi

from ..model import TensilModel, from_user_layout, to_user_layout
from ..partition import CompiledPartition
from . import current_session


@dataclass
class Partition:
    compiled: CompiledPartition
    inputs: list[str]
    outputs: list[str]
    model: TensilModel | None = None
    description: dict | None = None


def _program_of(description: dict | None) -> dict:
    """What of a partition's description decides its results (not the report, which may differ)."""
    return {k: v for k, v in (description or {}).items() if k != "report"}


PARTITIONS: dict[str, Partition] = {}
_LOCK = threading.Lock()


def _to_numpy(t) -> np.ndarray:
    return np.from_dlpack(t) if hasattr(t, "__dlpack__") else t.numpy()


@tvm_ffi.register_global_func("tvm_tensil.runtime.register", override=True)
def register(symbol: str, description: str) -> int:
    with _LOCK:
        d = json.loads(str(description))
        if symbol in PARTITIONS:
            if _program_of(PARTITIONS[symbol].description) != _program_of(d):
                raise RuntimeError(
                    f"Tensil partition {symbol} is already loaded from another library with a different "
                    "program; build the two libraries with the same tvm_tensil, or load them in separate processes"
                )
        else:
            compiled = CompiledPartition.from_json(d)
            if not compiled.user_shapes:  # a library built before the shapes had their own key
                compiled.user_shapes = {k: tuple(v) for k, v in d["relax_shapes"].items()}
            PARTITIONS[symbol] = Partition(compiled, d["input_order"], d["output_order"], description=d)
    return 0


@tvm_ffi.register_global_func("tvm_tensil.runtime.init", override=True)
def init(symbol: str, *args) -> int:
    consts = list(args[0]) if args else []
    part = PARTITIONS[str(symbol)]
    part.model = part.compiled.model([_to_numpy(c).astype(np.float32) for c in consts])
    return 0


@tvm_ffi.register_global_func("tvm_tensil.runtime.invoke", override=True)
def invoke(symbol: str, *tensors) -> int:
    part = PARTITIONS[str(symbol)]
    if part.model is None:  # a partition without constants gets no __init_ call
        part.model = part.compiled.model([])
    n_in = len(part.inputs)
    session = current_session()
    session.last_error = None
    try:
        _run(str(symbol), part, session, tensors[:n_in], tensors[n_in:])
    except BaseException as e:
        session.last_error = e
        raise
    return 0


def _run(symbol: str, part: Partition, session, ins, outs) -> None:
    dev = session.device_for(part.compiled.arch)
    shapes = part.compiled.user_shapes
    feeds = {k: from_user_layout(_to_numpy(t).astype(np.float64), shapes[k]) for k, t in zip(part.inputs, ins)}
    results = dev.run_model(part.model, feeds)
    session.run_stats[symbol] = dev.last_stats
    for k, out in zip(part.outputs, outs):
        y = to_user_layout(results[k], shapes[k]).astype(np.float32)
        out.copyfrom(np.ascontiguousarray(y))
