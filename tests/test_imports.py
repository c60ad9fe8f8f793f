"""Every module imports alone in a fresh interpreter (no import order or loop it depends on)."""

import pkgutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import tvm_tensil

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(tvm_tensil.__path__, "tvm_tensil.") if m.name != "tvm_tensil.__main__"
)  # __main__ runs the CLI


def test_every_module_imports_alone():
    def imports(name):
        r = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True)
        return name, r.returncode, r.stderr.strip().splitlines()[-1:] if r.returncode else []

    with ThreadPoolExecutor(2) as pool:
        failed = [(name, err) for name, rc, err in pool.map(imports, MODULES) if rc]
    assert len(MODULES) > 30
    assert not failed, f"modules that do not import alone: {failed}"
