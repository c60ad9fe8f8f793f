"""The code passes ruff's lint and is formatted as ruff formats it (configuration: pyproject.toml)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATHS = ["python", "tests", "benchmarks", "setup.py"]


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args, *PATHS], cwd=ROOT, capture_output=True, text=True)


def test_ruff_check_is_clean():
    r = ruff("check")
    assert r.returncode == 0, "ruff check found problems (ruff check --fix fixes some):\n" + r.stdout[-3000:]


def test_ruff_format_is_clean():
    r = ruff("format", "--check")
    assert r.returncode == 0, "files ruff would reformat (run ruff format):\n" + r.stdout[-3000:]
