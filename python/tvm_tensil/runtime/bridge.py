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

from ..compiler.compile import CompiledPartition
from ..model import TensilModel
from . import current_session


@dataclass
class Partition:
    compiled: CompiledPartition
    relax_shapes: dict[str, tuple[int, ...]]
    inputs: list[str]
    outputs: list[str]
    model: TensilModel | None = None


PARTITIONS: dict[str, Partition] = {}
_LOCK = threading.Lock()


def _to_numpy(t) -> np.ndarray:
    return np.from_dlpack(t) if hasattr(t, "__dlpack__") else t.numpy()


def to_internal(x: np.ndarray, relax_shape) -> np.ndarray:
    """Relax NCHW / (B, K) -> (n, h, w, c) as the compiled partition stores it."""
    if len(relax_shape) == 4:
        return np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    return x.reshape(1, 1, *x.shape)


def from_internal(y: np.ndarray, relax_shape) -> np.ndarray:
    if len(relax_shape) == 4:
        n, c, h, w = relax_shape
        return y.reshape(n, h, w, c).transpose(0, 3, 1, 2)
    return y.reshape(relax_shape)


@tvm_ffi.register_global_func("tvm_tensil.runtime.register", override=True)
def register(symbol: str, description: str) -> int:
    with _LOCK:
        if symbol not in PARTITIONS:
            d = json.loads(str(description))
            PARTITIONS[symbol] = Partition(
                CompiledPartition.from_json(d),
                {k: tuple(v) for k, v in d["relax_shapes"].items()},
                d["input_order"],
                d["output_order"],
            )
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
    ins, outs = tensors[:n_in], tensors[n_in:]
    session = current_session()
    dev = session.device_for(part.compiled.arch)
    feeds = {k: to_internal(_to_numpy(t).astype(np.float64), part.relax_shapes[k]) for k, t in zip(part.inputs, ins)}
    results = dev.run_model(part.model, feeds)
    session.run_stats[str(symbol)] = dev.last_stats
    for k, out in zip(part.outputs, outs):
        y = from_internal(results[k], part.relax_shapes[k]).astype(np.float32)
        out.copyfrom(np.ascontiguousarray(y))
    return 0
