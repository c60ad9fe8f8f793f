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
