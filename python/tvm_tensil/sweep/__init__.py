"""Design-space exploration: one model over many architectures, on this machine or a Ray cluster.

``sweep(model, space, out_dir)`` evaluates every point of the space (compile: latency-model cycles
and ms; Yosys: LUT, FF, DSP, BRAM and whether it fits the part), finds each part's Pareto front
(latency against a resource), confirms the Pareto points' cycles on the Verilated RTL, and writes
``results.csv``, ``results.json`` and ``pareto.png`` to ``out_dir``. Points finish into
``points.jsonl`` as they go: a sweep run again skips the points it already has.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from ..progress import bar
from ..rtl.synth import SynthesisError, find_yosys
from .evaluate import evaluate_point, run_on_rtl
from .results import COLUMNS, RESOURCES, append_row, full_row, pareto_front, plot, read_done, write_tables
from .runners import LocalRunner, RayRunner
from .space import PARAMETERS, Point, Space, SpaceError, SweepError

__all__ = [
    "sweep",
    "SweepResult",
    "Space",
    "SpaceError",
    "SweepError",
    "LocalRunner",
    "RayRunner",
    "pareto_front",
    "COLUMNS",
]

DONE = "ok"


@dataclass
class SweepResult:
    """The rows (one per point of the space, in its order) and the files written."""

    rows: list[dict[str, Any]]
    out_dir: Path
    csv: Path
    json: Path
    plot: Path | None

    @property
    def pareto(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r.get("pareto")]

    def __repr__(self) -> str:
        ok = sum(r.get("status") == DONE for r in self.rows)
        return f"SweepResult({len(self.rows)} points, {ok} ok, {len(self.pareto)} on a Pareto front, {self.out_dir})"


def _model_source(model, out: Path) -> tuple[str, str]:
    """(the path workers load, its sha256): an ONNX path as given, a ModelProto or bytes saved."""
    if isinstance(model, (str, os.PathLike)):
        path = Path(model).resolve()
        if not path.is_file():
            raise SweepError(f"model {model}: no such file; give an ONNX model file")
        data = path.read_bytes()
    else:
        data = model if isinstance(model, bytes) else model.SerializeToString()
        path = out / "model.onnx"
        path.write_bytes(data)
    try:
        onnx.load_model_from_string(data)
    except Exception as e:  # noqa: BLE001 - protobuf's decode errors have no common public base
        raise SweepError(f"model {model}: not an ONNX model ({type(e).__name__}); give an .onnx file") from None
    return str(path), hashlib.sha256(data).hexdigest()


def _point_row(point: Point) -> dict[str, Any]:
    """The point's parameters: every column of the architecture, not only the swept ones."""
    row: dict[str, Any] = {"point": point.id}
    if point.arch is not None:
        d = point.arch.to_dict()
        d = d | d.pop("tvm_tensil", {})
        row.update({k: d.get(k) for k in PARAMETERS})
    return row | point.params


def _needs_run(row: dict | None, space: Space, retry_failed: bool) -> bool:
    if row is None:
        return True
    if row.get("status") == "invalid":
        return False
    if row.get("status") != DONE:
        return retry_failed
    return space.synthesis and row.get("lut") is None  # done before without synthesis


def _core_key(arch: dict[str, Any]) -> str:
    """Points that differ only in their part or clock run the same program on the same core."""
    board = {k: v for k, v in arch.get("tvm_tensil", {}).items() if k not in ("name", "board", "part", "clock_mhz")}
    return json.dumps(arch | {"tvm_tensil": board}, sort_keys=True)


def _is_main_guard(node: ast.AST) -> bool:
    """``if __name__ == "__main__":`` (either way round)."""
    if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and len(node.test.comparators) == 1):
        return False
    sides = [node.test.left, node.test.comparators[0]]
    names = {s.id for s in sides if isinstance(s, ast.Name)}
    strings = {s.value for s in sides if isinstance(s, ast.Constant)}
    return isinstance(node.test.ops[0], ast.Eq) and names == {"__name__"} and strings == {"__main__"}


def _unguarded_line_of_main_script() -> int | None:
    """The line of the running script whose top-level code called sweep() outside a main guard.

    Spawned workers import the script: without the guard each one would start a sweep of its own.
    None when the call is guarded, or there is no script file (a notebook, ``python -c``).
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_globals is vars(main) and frame.f_code.co_name == "<module>"):
        frame = frame.f_back
    if frame is None or not path:
        return None
    try:
        tree = ast.parse(Path(path).read_text(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    line = frame.f_lineno
    for node in ast.walk(tree):
        if _is_main_guard(node) and node.lineno <= line <= (node.end_lineno or node.lineno):
            return None
    return line


def _called_by_a_worker_importing_main() -> bool:
    """True in a spawned worker that runs the user's script as ``__mp_main__`` (no main guard)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == "__mp_main__":
            return True
        frame = frame.f_back
    return False


def sweep(
    model,
    space: "Space | str | os.PathLike | dict",
    out_dir: "str | os.PathLike",
    *,
    jobs: int | None = None,
    ray: "bool | str" = False,
    resource: str = "lut",
    retry_failed: bool = False,
    cache: bool = True,
) -> SweepResult:
    """Evaluate every point of ``space`` for ``model`` (an ONNX path, ModelProto or bytes).

    ``jobs`` processes on this machine (default: one per CPU), or with ``ray`` every point a Ray task:
    ``True`` starts a local Ray instance, a string is the address of a running cluster ("auto",
    "ray://head:10001"). ``resource`` ("lut", "dsp", "ff", "bram36") is the Pareto front's cost axis.
    Failed points are kept as results; ``retry_failed`` runs them again. ``cache`` reuses Yosys
    results of the same RTL and parameters on the machine that runs the point.
    """
    if _called_by_a_worker_importing_main():
        raise SweepError(
            "sweep() was called again by a worker process importing your script: call it under "
            '`if __name__ == "__main__":` (the workers are spawned and import the main module)'
        )
    if not ray and (line := _unguarded_line_of_main_script()) is not None:
        script = Path(sys.modules["__main__"].__file__).name
        raise SweepError(
            f'{script}:{line} starts a sweep outside `if __name__ == "__main__":`; put it under that guard '
            "(the sweep's worker processes are spawned and import your script)"
        )
    if resource not in RESOURCES:
        raise SweepError(f"resource {resource!r} is not one of {', '.join(RESOURCES)}")
    space = space if isinstance(space, Space) else Space.load(space)
    if space.synthesis and importlib.util.find_spec("matplotlib") is None:  # a latency-only sweep draws nothing
        raise SweepError(
            "a sweep with synthesis draws its Pareto plot with matplotlib: pip install matplotlib (or the "
            'package\'s [sweep] extra), or set "synthesis": false in the space for a latency-only sweep'
        )
    if space.synthesis and not ray:
        try:  # every point would fail the same way; on Ray it is each worker machine's Yosys that counts
            find_yosys()
        except SynthesisError as e:
            raise SweepError(f'{e} (or set "synthesis": false in the space for a latency-only sweep)') from None
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SweepError(f"cannot make the output folder {out}: {e.strerror}; give another -o") from None
    model_path, model_hash = _model_source(model, out)
    meta = {"model": Path(model_path).name, "model_sha256": model_hash, "resource": resource, "space": space.source}
    meta_path = out / "sweep.json"
    if meta_path.exists():
        before = json.loads(meta_path.read_text())
        if before.get("model_sha256") != model_hash:
            raise SweepError(
                f"{out} holds a sweep of another model ({before.get('model')}); give a new output directory"
            )
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")

    points = space.points()
    jsonl = out / "points.jsonl"
    done = read_done(jsonl)
    rows: dict[str, dict[str, Any]] = {}
    todo = []
    for p in points:
        if p.arch is None:
            rows[p.id] = _point_row(p) | {"status": "invalid", "error": p.invalid}
            if done.get(p.id, {}).get("status") != "invalid":
                append_row(jsonl, rows[p.id])
        elif _needs_run(done.get(p.id), space, retry_failed):
            todo.append(p)
        else:
            rows[p.id] = done[p.id] | _point_row(p)

    runner = RayRunner(ray if isinstance(ray, str) else None, jobs) if ray else LocalRunner(jobs)
    try:
        shared_model = runner.share(Path(model_path).read_bytes()) if ray else model_path
        tasks = [(p.id, (shared_model, p.arch.to_dict(), space.synthesis, space.time_limit, cache)) for p in todo]
        by_id = {p.id: p for p in points}
        with bar(total=len(tasks), desc=f"tvm_tensil: sweeping {len(tasks)} points ({runner.name})", unit="point") as b:
            for n, (key, result) in enumerate(runner.run(evaluate_point, tasks), 1):
                rows[key] = _point_row(by_id[key]) | result
                append_row(jsonl, rows[key])
                b.update(1)
                b.set_postfix_str(f"{by_id[key].params} {result.get('status')}")
                if b.disable:  # no bar (a log, a pipe): a line per point instead
                    print(
                        f"tvm_tensil: point {n}/{len(tasks)} {by_id[key].params}: {result.get('status')}",
                        file=sys.stderr,
                        flush=True,
                    )

        ordered = [full_row(rows[p.id]) for p in points]  # every column, in the schema's order
        for row in ordered:
            row["pareto"] = False
        for part in {r.get("part") for r in ordered}:
            mine = [r for r in ordered if r.get("part") == part]
            for i in pareto_front(mine, resource):
                mine[i]["pareto"] = True

        if space.rtl:
            _confirm_on_rtl(runner, shared_model, ordered, space, retry_failed, jsonl)
    finally:
        runner.close()
    for row in ordered:
        append_row(jsonl, row)  # the Pareto marks, so that points.jsonl alone holds the result
    title = f"{meta['model']}: latency vs {resource.upper()} ({len(ordered)} architectures)"
    csv_path, json_path = write_tables(out, ordered, meta)
    return SweepResult(ordered, out, csv_path, json_path, plot(out, ordered, resource, title))


def _confirm_on_rtl(runner, model, rows: list[dict], space: Space, retry_failed: bool, jsonl: Path) -> None:
    """Run each Pareto point (once per distinct core) on the Verilated RTL; compare with the model."""
    archs = {p.id: p.arch.to_dict() for p in space.points() if p.arch is not None}
    wanted = [
        r for r in rows if r.get("pareto") and r.get("rtl_cycles") is None and (retry_failed or not r.get("rtl_error"))
    ]
    runs: dict[str, dict] = {}
    for r in wanted:
        runs.setdefault(_core_key(archs[r["point"]]), archs[r["point"]])
    tasks = [(key, (model, arch, space.time_limit)) for key, arch in runs.items()]
    with bar(total=len(tasks), desc="tvm_tensil: Pareto points on the RTL", unit="point") as b:
        for key, result in runner.run(run_on_rtl, tasks):
            result = result if "rtl_cycles" in result else {"rtl_cycles": None, "rtl_error": result.get("error")}
            for r in wanted:
                if _core_key(archs[r["point"]]) == key:
                    r.update(result)
                    if r["rtl_cycles"] and r.get("cycles"):
                        r["rtl_vs_model_pct"] = round(100 * (r["rtl_cycles"] - r["cycles"]) / r["cycles"], 3)
                    append_row(jsonl, r)
            b.update(1)
