"""A sweep's results: one row per point with a stable set of columns, the Pareto front, the files.

``points.jsonl`` gets a line as each point finishes (a sweep started again skips the points it
holds); ``results.csv`` and ``results.json`` are written from it at the end, with ``pareto.png``.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Sequence

from .space import PARAMETERS

SCHEMA_VERSION = 1
# Every row has every column (empty when a step did not run); parameters come first, by name.
COLUMNS = (
    "point",
    "status",
    "error",
    *PARAMETERS,
    "partitions",
    "cpu_ops",
    "cpu_reason",
    "cycles",
    "ms",
    "lut",
    "ff",
    "dsp",
    "bram36",
    "lut_util",
    "ff_util",
    "dsp_util",
    "bram36_util",
    "fits",
    "pareto",
    "rtl_cycles",
    "rtl_vs_model_pct",
    "rtl_error",
    "compile_seconds",
    "synthesis_seconds",
)
RESOURCES = ("lut", "dsp", "ff", "bram36")


def comparable(rows: Sequence[dict[str, Any]]) -> list[int]:
    """Indices of the finished rows whose latency compares: those that leave no more ops on the CPU
    than the best row (an architecture that offloads less is not faster, it just times less)."""
    ok = [i for i, r in enumerate(rows) if r.get("status") == "ok" and r.get("ms") is not None]
    least = min((rows[i].get("cpu_ops") or 0 for i in ok), default=0)
    return [i for i in ok if (rows[i].get("cpu_ops") or 0) == least]


def pareto_front(rows: Sequence[dict[str, Any]], resource: str = "lut") -> list[int]:
    """Indices of the rows no other row beats: lower or equal ``ms`` and ``resource``, one of them
    strictly lower. Only comparable rows (``comparable``) with a ``resource`` value that fit their
    part (or whose fit is unknown) count."""
    candidates = [i for i in comparable(rows) if rows[i].get(resource) is not None and rows[i].get("fits") is not False]

    def beats(a: dict, b: dict) -> bool:
        return a["ms"] <= b["ms"] and a[resource] <= b[resource] and (a["ms"] < b["ms"] or a[resource] < b[resource])

    return [i for i in candidates if not any(beats(rows[j], rows[i]) for j in candidates if j != i)]


def full_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with every column, in order (missing values None)."""
    return {c: row.get(c) for c in COLUMNS}


def read_done(path: Path) -> dict[str, dict[str, Any]]:
    """The points a previous run finished, by point id (a torn last line is ignored)."""
    done = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and "point" in row:
                done[row["point"]] = row
    return done


def append_row(path: Path, row: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")
        f.flush()


def write_tables(out: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> tuple[Path, Path]:
    """results.csv (the columns) and results.json (the rows plus what was swept), atomically."""
    csv_path, json_path = out / "results.csv", out / "results.json"
    tmp = out / ".results.csv.tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in full_row(row).items()})
    tmp.replace(csv_path)
    tmp = out / ".results.json.tmp"
    tmp.write_text(json.dumps({"schema": SCHEMA_VERSION, **meta, "rows": [full_row(r) for r in rows]}, indent=1) + "\n")
    tmp.replace(json_path)
    return csv_path, json_path


def plot(out: Path, rows: list[dict[str, Any]], resource: str, title: str) -> Path | None:
    """ms against ``resource``: fitting points as dots, others as crosses, each part's front joined.
    None when no point has the resource (a latency-only sweep: matplotlib is then not needed)."""
    shown = [rows[i] for i in comparable(rows) if rows[i].get(resource) is not None]
    if not shown:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hidden = sum(r.get("ms") is not None for r in rows) - len(shown)
    if hidden:
        title += f"\n{hidden} not shown: they leave more ops on the CPU"
    fig, ax = plt.subplots(figsize=(7, 4.5))
    parts = sorted({str(r.get("part")) for r in shown})
    colours = dict(zip(parts, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4))
    for k, part in enumerate(parts):
        mine = [r for r in shown if str(r.get("part")) == part]
        for fits, marker in ((True, "o"), (False, "x")):
            pts = [r for r in mine if bool(r.get("fits")) is fits]
            if pts:
                ax.scatter(
                    [r[resource] for r in pts],
                    [r["ms"] for r in pts],
                    marker=marker,
                    color=colours[part],
                    label=f"{part} ({'fits' if fits else 'does not fit'})",
                )
        for r in mine:
            n = r.get("array_size")
            below = k % 2  # parts alternate above and below: the same array on two parts would overlap
            ax.annotate(
                f"{n}x{n}",
                (r[resource], r["ms"]),
                fontsize=7,
                xytext=(4, -10 if below else 4),
                textcoords="offset points",
                color=colours[part],
            )
        front = sorted((r for r in mine if r.get("pareto")), key=lambda r: r[resource])
        if front:
            ax.step(
                [r[resource] for r in front],
                [r["ms"] for r in front],
                where="post",
                color=colours[part],
                lw=1,
                ls="--",
                label=f"{part} Pareto front",
            )
    ax.set_xlim(0, 1.1 * max(r[resource] for r in shown))
    ax.set_ylim(0, 1.1 * max(r["ms"] for r in shown))
    ax.set_xlabel(f"{resource.upper()} (Yosys synth_xilinx)")
    ax.set_ylabel("latency (ms, latency model)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "pareto.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
