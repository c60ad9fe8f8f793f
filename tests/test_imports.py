"""Every module imports alone (no import order or loop it depends on).

Importing any module runs the package's ``__init__`` first, so each module is imported in a fresh
process forked from one that ran only that: the state a fresh interpreter reaches, without paying
for TVM's import once per module."""

import pkgutil
import subprocess
import sys

import tvm_tensil

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(tvm_tensil.__path__, "tvm_tensil.") if m.name != "tvm_tensil.__main__"
)  # __main__ runs the CLI

CHILD = r"""
import importlib, multiprocessing, sys, traceback
import tvm_tensil

def imports(name):
    try:
        importlib.import_module(name)
        return ""
    except BaseException as e:  # noqa: BLE001 - reported by the test
        return f"{name}: {type(e).__name__}: {e}"

if __name__ == "__main__":
    with multiprocessing.get_context("fork").Pool(2, maxtasksperchild=1) as pool:
        failed = [f for f in pool.map(imports, sys.argv[1:], chunksize=1) if f]
    print("\n".join(failed))
    sys.exit(1 if failed else 0)
"""


def test_every_module_imports_alone():
    r = subprocess.run([sys.executable, "-c", CHILD, *MODULES], capture_output=True, text=True, timeout=600)
    assert len(MODULES) > 30
    assert r.returncode == 0, f"modules that do not import alone:\n{r.stdout}{r.stderr[-2000:]}"


def test_a_module_that_does_not_import_is_named():
    r = subprocess.run([sys.executable, "-c", CHILD, "tvm_tensil.no_such_module"], capture_output=True, text=True)
    assert r.returncode == 1 and "tvm_tensil.no_such_module: ModuleNotFoundError" in r.stdout
