"""Ships the RTL (``rtl/``), the Verilator harness (``src/sim/``) and the partition stub
(``src/codegen/``) inside the package, under ``tvm_tensil/hardware/`` with the repository's layout,
so that an installed wheel can build models, the verilator and sim-board devices and package the
IP (``tvm_tensil/sources.py`` finds them). An editable install uses them in place.
Everything else is in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
HARDWARE = ("rtl", "src/sim", "src/codegen")  # copied to tvm_tensil/hardware/<same path>


class BuildPyWithHardware(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "tvm_tensil" / "hardware"
        shutil.rmtree(dest, ignore_errors=True)
        for path in HARDWARE:
            shutil.copytree(ROOT / path, dest / path, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildPyWithHardware})
