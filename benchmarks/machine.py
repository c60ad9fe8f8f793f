"""What a benchmark ran on, for its result file: timings are only comparable on the same processor."""

from __future__ import annotations

import os
import platform


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown processor"


def describe() -> str:
    """For example 'AMD EPYC, x86_64, 2 cores, CPython 3.11.7'."""
    return f"{cpu_model()}, {platform.machine()}, {os.cpu_count()} cores, CPython {platform.python_version()}"


def write_results(path, rows: list) -> None:
    """A benchmark's rows with what they ran on and when, as JSON at ``path``."""
    import json
    import time
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"results": rows, "machine": describe(), "date": time.strftime("%Y-%m-%d")}
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")
