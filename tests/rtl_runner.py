"""Build a Verilator model per parameter sweep point and run cocotb tests on it."""

import fcntl
import hashlib
import os
import re
from contextlib import contextmanager
from pathlib import Path

from tvm_tensil.isa.layout import layout_of
from tvm_tensil.rtl.toolchain import RTL_DIR, apply_verilator_env

BUILD_ROOT = Path(__file__).resolve().parents[1] / "build" / "rtl"
# Verilator's generated C++ for a bench builds unoptimised: a bench's run time is cocotb's, not the
# model's, and at Verilator's -Os the array and MAC benches took 20-30 s to compile (-O0: 7-9 s).
BENCH_MAKE_VARIABLES = "OPT_FAST=-O0 OPT_SLOW=-O0 OPT_GLOBAL=-O0"
DATA_TYPES_BY_WIDTH = {8: "FP8BP4", 16: "FP16BP8", 18: "FP18BP10", 32: "FP32BP16"}


def sweep_arch(n: int, width: int, regs: int = 1):
    """A small architecture for an RTL sweep point: memories and DRAM kept small so that random
    programs hit the same addresses often, and the dumps stay short."""
    from tvm_tensil.arch import Architecture

    return Architecture(
        DATA_TYPES_BY_WIDTH[width], n, 256, 256, 64, 32, simd_registers_depth=regs, stride0_depth=4, stride1_depth=4
    )


def skip_unless_swept(point: tuple, sweep: list, full: bool) -> None:
    """A bench's parameter point runs in CI when it is in ``sweep``, every point with ``--full``."""
    if point not in sweep and not full:
        import pytest

        pytest.skip("long sweep: run with --full")


def run_cocotb(
    toplevel: str, test_file: str, parameters: dict, sources: list[str] | None = None, extra_env: dict | None = None
) -> None:
    """Build ``toplevel`` with ``parameters`` and run the cocotb tests in ``test_file``."""
    apply_verilator_env()
    test_path = Path(test_file)
    point = "-".join(f"{k}{v}" for k, v in sorted(parameters.items()))
    if len(point) > 100:  # file names stop at 255 bytes: keep the main values, hash the rest
        main = "-".join(f"{k}{parameters[k]}" for k in ("ARRAY_SIZE", "DATA_WIDTH") if k in parameters)
        point = f"{main}-{hashlib.sha1(point.encode()).hexdigest()[:12]}"
    build_dir = BUILD_ROOT / toplevel / point
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test workers may build the same point
        _build_and_test(toplevel, test_path, parameters, sources, extra_env, build_dir)


def _build_and_test(toplevel, test_path: Path, parameters: dict, sources, extra_env, build_dir: Path) -> None:
    from cocotb_tools.runner import get_runner

    # The named constants come first: every module may import them.
    srcs = [RTL_DIR / s for s in ["tcu_isa_pkg.sv", *(sources or [f"{toplevel}.sv"])]]
    runner = get_runner("verilator")
    with _make_variables(BENCH_MAKE_VARIABLES):
        runner.build(
            sources=srcs,
            hdl_toplevel=toplevel,
            parameters=parameters,
            build_dir=build_dir,
            build_args=["-Wall", "-Wno-fatal", "--x-assign", "unique", "--x-initial", "unique"],
            always=False,
        )
    env = {f"PARAM_{k}": str(v) for k, v in parameters.items()}
    env.update(extra_env or {})
    results = runner.test(
        hdl_toplevel=toplevel,
        test_module=test_path.stem,
        test_dir=test_path.parent,
        build_dir=build_dir,
        extra_env=env,
    )
    from cocotb_tools.check_results import get_results

    tests, failed = get_results(Path(results))
    assert tests > 0, f"no cocotb test ran in {test_path.name}"
    assert failed == 0, f"{failed} of {tests} cocotb tests failed, see {results}"


@contextmanager
def _make_variables(assignments: str):
    """``make`` run meanwhile (the runner's build) also gets these variable assignments."""
    before = os.environ.get("MAKEFLAGS")
    os.environ["MAKEFLAGS"] = f"{before} {assignments}" if before else assignments
    try:
        yield
    finally:
        if before is None:
            del os.environ["MAKEFLAGS"]
        else:
            os.environ["MAKEFLAGS"] = before


def core_params(n: int, width: int, regs: int = 1, beats: int = 2, window: bool = False) -> tuple[dict, dict]:
    """tcu_core's parameters for a sweep point (``sweep_arch``) with ``beats`` bus beats per vector
    (``window``: with our instruction set extensions, the window MatMul and the SIMD ReLU flag), and
    the bench environment naming the architecture."""
    from tvm_tensil.rtl import core_parameters
    from tvm_tensil.rtl.testbench import arch_env

    arch = sweep_arch(n, width, regs).replace(window_matmul=window, simd_relu=window)
    p = core_parameters(arch)
    given = {"SIMD_REGISTERS": regs, "VECTOR_BEATS": beats, "INSTRUCTION_BITS": layout_of(arch).instruction_bits}
    return {k: given[k] if k in given else p[k] for k in module_parameters("tcu_core")}, arch_env(arch)


def module_parameters(module: str) -> list[str]:
    """The parameter names ``rtl/<module>.sv`` declares, in order."""
    return re.findall(r"^\s*parameter\s+(\w+)\s*=", (RTL_DIR / f"{module}.sv").read_text(), re.M)
