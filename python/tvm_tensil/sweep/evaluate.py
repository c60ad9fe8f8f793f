"""What a worker does for one point: compile the model for the architecture (latency model), then
synthesise the core (Yosys); or, for a Pareto point, run the model on the Verilated RTL.

Both take and return plain values (JSON-able dicts), so that a process pool and Ray can carry them;
neither raises for a point that fails: the failure is the result.
"""

from __future__ import annotations

import contextlib
import signal
import time
import traceback
from typing import Any

import numpy as np

from ..arch import Architecture


class PointTimeout(Exception):
    """The point's time limit passed."""


class _Deadline:
    def __init__(self, seconds: float):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def check(self) -> None:
        """Raise PointTimeout if the time is up: a library may have swallowed the alarm's raise
        (TVM's ONNX importer turns any error in ONNX's checker into a warning)."""
        if time.monotonic() >= self.end:
            raise PointTimeout(f"the point took over its time limit of {self.seconds:g} s")


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Raise PointTimeout in this (main) thread after ``seconds``, and again every half second until
    the block ends (a swallowed raise does not let the point run on); a no-op off the main thread.
    Yields the deadline, to check after code that may swallow the raise."""
    deadline = _Deadline(seconds)

    def expire(signum, frame):
        deadline.check()

    try:
        previous = signal.signal(signal.SIGALRM, expire)
    except ValueError:  # not the main thread: rely on the subprocess timeouts alone
        yield deadline
        return
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.5)
    try:
        yield deadline
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _error(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[-1] if text else ''}"[:500]


def _import_model(model: "str | bytes"):
    """An ONNX model from a path (a worker on this machine) or its bytes (a Ray worker anywhere)."""
    import onnx
    from tvm.relax.frontend.onnx import from_onnx

    proto = onnx.load_from_string(model) if isinstance(model, bytes) else onnx.load(model)
    return from_onnx(proto, keep_params_in_input=False)


def evaluate_point(
    model: "str | bytes", arch_dict: dict, synthesis: bool, time_limit: float, cache: bool = True
) -> dict[str, Any]:
    """Compile (latency-model cycles) and synthesise one architecture. Returns the measured fields and
    ``status``: "ok", "compile_error", "synthesis_error" or "timeout" (with ``error``). With ``cache``,
    Yosys results are kept in this machine's cache and reused (``rtl.synth.synthesize``)."""
    from ..byoc import offload
    from ..rtl.synth import SynthesisError, device_for_part, synthesize

    arch = Architecture.from_dict(arch_dict)
    row: dict[str, Any] = {"status": "ok", "error": ""}
    start = time.perf_counter()
    try:
        with _time_limit(time_limit) as deadline:
            t0 = time.perf_counter()
            try:
                _, report = offload(_import_model(model), arch)
            except PointTimeout:
                raise
            except Exception as e:  # noqa: BLE001 - recorded as the point's result
                deadline.check()  # the error may be the alarm's raise, turned into another
                return row | {"status": "compile_error", "error": _error(e)}
            deadline.check()
            row["compile_seconds"] = round(time.perf_counter() - t0, 1)
            row["partitions"] = len(report.partitions)
            row["cpu_ops"] = len(report.cpu_ops)
            row["cpu_reason"] = report.cpu_ops[0]["reason"] if report.cpu_ops else ""
            if not report.partitions:
                return row | {"status": "not_offloaded", "error": f"nothing offloaded: {row['cpu_reason']}"}
            row["cycles"] = report.total_cycles
            row["ms"] = round(report.total_cycles / (arch.clock_mhz * 1e3), 4) if arch.clock_mhz else None
            if not synthesis:
                return row
            device = device_for_part(arch.part)
            t0 = time.perf_counter()
            try:
                remaining = max(1.0, time_limit - (time.perf_counter() - start))
                res = synthesize(arch, timeout=remaining, cache=cache)
            except SynthesisError as e:
                return row | {"status": "synthesis_error", "error": _error(e)}
            row["synthesis_seconds"] = round(time.perf_counter() - t0, 1)
            row.update(lut=res.lut + res.lut_ram, ff=res.ff, dsp=res.dsp, bram36=res.bram36)
            if device is not None:
                util = res.utilisation(device)
                row.update({f"{k}_util": round(v, 4) for k, v in util.items()})
                row["fits"] = all(v <= 1 for v in util.values())
    except PointTimeout as e:
        return row | {"status": "timeout", "error": str(e)}
    except Exception as e:  # noqa: BLE001 - a bug shows in the results, the sweep goes on
        return row | {"status": "error", "error": _error(e) + " | " + traceback.format_exc(limit=3)[-300:]}
    return row


def run_on_rtl(model: "str | bytes", arch_dict: dict, time_limit: float, seed: int = 0) -> dict[str, Any]:
    """The model's cycles on the Verilated core (every partition, one random input)."""
    import tvm
    from tvm import relax

    from ..byoc import build
    from ..byoc.frontend import shape_of
    from ..runtime import device

    arch = Architecture.from_dict(arch_dict)
    try:
        with _time_limit(time_limit) as deadline:
            mod = _import_model(model)
            ex = build(mod, target="tensil", arch=arch)
            deadline.check()
            rng = np.random.default_rng(seed)
            inputs = [
                tvm.runtime.tensor(rng.standard_normal(shape_of(p)).astype("float32")) for p in mod["main"].params
            ]
            with device("verilator") as session:
                relax.VirtualMachine(ex, tvm.cpu())["main"](*inputs)
            stats = session.last_run_stats(ex.tensil_report)
            return {"rtl_cycles": sum(s.cycles for s in stats.values()), "rtl_error": ""}
    except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
        return {"rtl_cycles": None, "rtl_error": _error(e)}
