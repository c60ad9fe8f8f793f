"""``tvm-tensil``: the command line.

examples:
  tvm-tensil compile model.onnx --arch pynqz1 -o out/      # library, .tmodel files, report
  tvm-tensil run out/model.so --input x.npy               # on the emulator (--device verilator: the RTL)
  tvm-tensil emulate out/model.tmodel --input x.npy -o results/
  tvm-tensil arch --list                                   # the presets
  tvm-tensil asm prog.tasm --arch pynqz1 -o prog.tprog
  tvm-tensil disasm out/model.tmodel --pc
  tvm-tensil synth --arch ultra96v2                        # LUT/FF/DSP/BRAM estimate (Yosys)
  tvm-tensil sweep model.onnx --space space.json -o sweep/  # architectures: latency vs resources
  tvm-tensil serve --arch pynqz1 --socket /tmp/tcu.sock    # a simulated board (device "sim-board")
  tvm-tensil selftest --device pynq --arch pynqz1          # first thing to run on a new board
  tvm-tensil COMMAND --help                                # each command's options and examples
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
import threading
import warnings
from pathlib import Path

import numpy as np

from .arch import MEMORY_TIMING, PRESETS, ArchitectureError, load_arch
from .isa.asm import AsmError, assemble, disassemble
from .isa.instructions import InvalidInstruction
from .isa.layout import layout_of
from .isa.program import Program, ProgramError
from .model import ModelError, TensilModel, from_user_layout, to_user_layout
from .rtl.synth import SynthesisError
from .runtime import DEVICES, DeviceError, get_device
from .sweep.space import SweepError

# Exit codes: bad input (a file, an option, a model) and a device that failed are told apart.
EXIT_USAGE = 2
EXIT_DEVICE = 3


class UsageError(ValueError):
    """Options that do not go together."""


_USER_ERRORS = (
    UsageError,
    ArchitectureError,
    ModelError,
    ProgramError,
    InvalidInstruction,
    AsmError,
    DeviceError,
    SynthesisError,
    SweepError,
)


def _cmd_arch(args) -> int:
    if args.list:
        print(f"{'preset':<18} {'array':^7} {'data':<9} {'clock':<8} {'memories (vectors)':<44} board")
        for name, arch in PRESETS.items():
            clock = f"{arch.clock_mhz:g} MHz" if arch.clock_mhz else ""
            memories = (
                f"local {arch.local_depth} acc {arch.accumulator_depth} "
                f"DRAM0 {_vectors(arch.dram0_depth)} DRAM1 {_vectors(arch.dram1_depth)}"
            )
            print(
                f"{name:<18} {arch.array_size:>3}x{arch.array_size:<3} {arch.data_type.name:<9} "
                f"{clock:<8} {memories:<44} {arch.board or ''}"
            )
        return 0
    if not args.arch:
        raise ArchitectureError("give a preset name or a .tarch path (or --list)")
    arch = load_arch(args.arch)
    if args.json:
        sys.stdout.write(arch.to_json(plain=args.plain))
    else:
        print(arch.describe())
        print(layout_of(arch).describe())
    return 0


def _input_shapes(specs: list[str]) -> dict[str, tuple[int, ...]]:
    """``--input-shape NAME=1,3,224,224`` options."""
    shapes = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        try:
            shape = tuple(int(d) for d in dims.split(","))
        except ValueError:
            shape = ()
        if not sep or not name or not shape or min(shape) < 1:
            raise UsageError(f"--input-shape {spec!r}: write NAME=D0,D1,... with positive sizes, e.g. x=1,3,224,224")
        shapes[name] = shape
    return shapes


def _vectors(n: int) -> str:
    return f"{n >> 20}M" if n >= 1 << 20 and not n % (1 << 20) else f"{n >> 10}K" if not n % 1024 else str(n)


def _program_and_arch(path: Path, arch_arg: str | None):
    if path.suffix == ".tmodel":
        model = TensilModel.load(path)
        return model.program, model.arch
    if not arch_arg:
        raise ArchitectureError(f"{path}: give --arch (a preset name or .tarch) to decode a .tprog")
    arch = load_arch(arch_arg)
    return Program.load(path, layout_of(arch)), arch


def _cmd_asm(args) -> int:
    arch = load_arch(args.arch)
    src = Path(args.source)
    try:
        text = src.read_text()
    except OSError as e:
        raise AsmError(f"cannot read {src}: {e.strerror}") from None
    program = assemble(text, layout_of(arch), name=str(src))
    out = Path(args.output) if args.output else src.with_suffix(".tprog")
    program.save(out)
    print(f"{out}: {len(program)} instructions, {len(program.data)} bytes")
    return 0


def _cmd_disasm(args) -> int:
    program, _ = _program_and_arch(Path(args.program), args.arch)
    text = disassemble(program, with_pc=args.pc)
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _cmd_emulate(args) -> int:
    model = TensilModel.load(args.model)
    names = model.input_names()
    inputs = {}
    for spec in args.input or []:
        name, sep, path = spec.rpartition("=")
        if not sep:
            if len(names) != 1:
                raise ModelError(f"model '{model.name}' has inputs {names}: give each as NAME=file.npy")
            name, path = names[0], spec
        value = _load_input(name, path)
        # Inputs come in the framework's layout (e.g. NCHW) when the model records it, else the model's.
        user, own = model.user_shape(name), model.tensor_shape(name)
        if user is not None and value.shape == user:
            value = from_user_layout(value, user)
        elif user is not None and value.shape != own:
            raise ModelError(
                f"input '{name}' has shape {value.shape}; the model takes {user} (the framework's layout) "
                f"or {own} (its own (n, h, w, c))"
            )
        inputs[name] = value
    dev = get_device(args.device, model.arch, **_device_options(args))
    outputs = dev.run_model(model, inputs)
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, value in outputs.items():
        user = model.user_shape(name, outputs=True)
        if user is not None:
            value = to_user_layout(value, user)
        path = out_dir / f"{_safe_name(name)}.npy"
        np.save(path, value)
        print(f"{name}: {tuple(value.shape)} -> {path}")
    print(dev.last_stats.summary())
    if dev.last_stats.cycles is not None:
        print(_timing(dev.last_stats))
    return 0


def _timing(stats) -> str:
    """Cycles as latency at the architecture's clock, for devices that count cycles."""
    if stats is None or stats.cycles is None:
        return ""
    if stats.milliseconds is None:
        return f"  {stats.cycles} cycles (no clock in the architecture: add tvm_tensil.clock_mhz for a latency)"
    return f"  {stats.cycles} cycles = {stats.milliseconds:.3f} ms at {stats.clock_mhz:g} MHz"


_DEFAULT_TARGET = object()  # --error-target not given: the compiler's own default


def _error_target(text: str) -> float | None:
    """``--error-target``: a percentage (as a share), or None for 'none'."""
    if text.strip().lower() == "none":
        return None
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        value = -1.0
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage from 0 to 100 or 'none'")
    return value / 100


def _cmd_compile(args) -> int:
    import onnx

    from .byoc import CalibrationError, InputShapeError, ToolchainError, build, import_onnx
    from .compiler import CompileOptions

    src = Path(args.model)
    try:
        model = onnx.load(str(src))
    except Exception as e:  # noqa: BLE001 - onnx raises many types for a bad file
        raise ModelError(f"cannot read ONNX model {src}: {e}") from None
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    arch = load_arch(args.arch)
    with warnings.catch_warnings(record=True) as noted:  # the importer warns, then fails: one message
        warnings.simplefilter("always")
        try:
            # Static input shapes, and shape arithmetic folded, before TVM's importer sees the model.
            mod = import_onnx(model, _input_shapes(args.input_shape or []))
        except InputShapeError as e:
            raise ModelError(str(e)) from None
        except Exception as e:  # noqa: BLE001 - the importer raises many types for models it cannot take
            raise ModelError(f"TVM's ONNX importer cannot import {src}: {_first_line(e)}") from None
    if _INTERRUPTS:  # Ctrl-C that ONNX's shape inference swallowed: stop before the build
        raise KeyboardInterrupt
    for w in noted:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    params = [str(p.name) for p in mod["main"].params]
    target = args.error_target
    options = CompileOptions() if target is _DEFAULT_TARGET else CompileOptions(error_target=target)
    calibration = _run_inputs(args.calibrate, params) if args.calibrate else None
    if calibration is not None:
        calibration = dict(zip(params, calibration))  # each file a stack of samples
    try:
        ex = build(
            mod,
            target="tensil",
            arch=arch,
            model_dir=out,
            calibration=calibration,
            options=options,
        )
    except (CalibrationError, ToolchainError, InputShapeError) as e:
        raise ModelError(str(e)) from None
    if args.require_offload and not ex.tensil_report.partitions:
        raise ModelError(f"nothing of {src.name} runs on the TCU (--require-offload); see the report in {out}")
    if _INTERRUPTS:  # Ctrl-C that a code path inside the build swallowed: write nothing
        raise KeyboardInterrupt
    lib = out / f"{src.stem}.so"
    tmp = out / f".{src.stem}.so.tmp"
    ex.export_library(str(tmp))
    tmp.replace(lib)
    print(ex.tensil_report)
    print(f"wrote {lib}, Tensil model files and report.txt/report.json to {out}")
    return 0


def _cmd_run(args) -> int:
    import tvm
    from tvm import relax

    lib = Path(args.library)
    if not lib.exists():
        raise ModelError(f"no compiled model at {lib} (make one with `tvm-tensil compile`)")
    try:
        vm = relax.VirtualMachine(tvm.runtime.load_module(str(lib)), tvm.cpu())
        params = [vm._get_function_param_name("main", i) for i in range(vm._get_function_arity("main"))]
    except Exception as e:  # noqa: BLE001 - TVM's loader raises several types
        raise ModelError(f"cannot load {lib} as a compiled model: {_first_line(e)}") from None
    arrays = _run_inputs(args.input or [], params)
    from .runtime import device as select

    with select(args.device, **_device_options(args)) as session:
        session.last_error = None
        try:
            result = vm["main"](*[tvm.runtime.tensor(a) for a in arrays])
        except (ModelError, DeviceError):
            raise
        except Exception as e:  # noqa: BLE001 - a device's error (TVM hands it on), or the VM's input checks
            failure = session.last_error
            if isinstance(failure, (ModelError, DeviceError, KeyboardInterrupt)):
                raise failure from None
            if failure is not None:
                raise DeviceError(f"the {args.device} device failed: {_first_line(failure)}") from None
            raise ModelError(_input_mismatch(e, params, arrays)) from None
    outs = [result] if hasattr(result, "numpy") else list(result)  # one tensor, or TVM's Array of them
    for i, o in enumerate(outs):
        value = o.numpy()
        if args.output:
            path = Path(args.output) if len(outs) == 1 else Path(args.output).with_suffix(f".{i}.npy")
            np.save(path, value)
            print(f"output {i}: {value.shape} -> {path}")
        else:
            print(f"output {i}: {value.shape}\n{value}")
    for sym, stats in session.last_run_stats().items():
        print(f"{sym} on {args.device}: {stats.summary()}")
        if stats.cycles is not None:
            print(_timing(stats))
    return 0


def _device_options(args) -> dict:
    """The options of the device a command runs on: --socket reaches a running `tvm-tensil serve`."""
    if getattr(args, "socket", None):
        if args.device != "sim-board":
            raise UsageError(f"--socket is for --device sim-board (a `tvm-tensil serve` server), not {args.device}")
        return {"socket_path": args.socket}
    return {}


def _add_device(parser, default: str) -> None:
    parser.add_argument(
        "--device", default=default, choices=list(DEVICES), help=f"where the Tensil program runs (default: {default})"
    )
    parser.add_argument(
        "--socket", help="with --device sim-board: the socket of a running `tvm-tensil serve` (default: start one)"
    )


def _first_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return lines[-1] if lines else type(e).__name__


def _load_input(name: str, path: str) -> np.ndarray:
    """An input from a .npy file: numbers, or a ModelError naming the input and the file."""
    try:
        value = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot load input '{name}' from {path}: {e}") from None
    if not np.issubdtype(value.dtype, np.number):
        raise ModelError(f"input '{name}' from {path} holds {value.dtype} values, not numbers")
    return value


def _run_inputs(specs: list[str], params: list[str]) -> list[np.ndarray]:
    """The ``--input [NAME=]FILE.npy`` arrays in the order of the model's parameters."""
    usage = f"the model takes {len(params)} input(s) ({', '.join(params)}): give each with --input [NAME=]FILE.npy"
    if len(specs) != len(params):
        raise ModelError(f"{len(specs)} input(s) given; {usage}")
    arrays: list = [None] * len(params)
    for i, spec in enumerate(specs):
        name, sep, path = spec.rpartition("=")
        if sep and name:
            # TVM's importers make names identifiers: ONNX's "input.1" is the parameter "input_1".
            name = name if name in params else re.sub(r"\W", "_", name)
            if name not in params:
                raise ModelError(f"no input named '{spec.rpartition('=')[0]}'; {usage}")
            i = params.index(name)
        arrays[i] = _load_input(params[i], path).astype(np.float32)
    if any(a is None for a in arrays):
        raise ModelError(f"an input was given twice; {usage}")
    return arrays


def _input_mismatch(e: BaseException, params: list[str], arrays: list[np.ndarray]) -> str:
    """TVM's complaint about an input (its shape check names the parameter and the expected type)."""
    text = str(e)
    m = re.search(r"param=(\w+), annotation=R\.Tensor\(\((.*?)\), dtype=\"(\w+)\"\)", text)
    if m and m.group(1) in params:
        name, want = m.group(1), tuple(int(d) for d in m.group(2).split(",") if d.strip())
        got = tuple(arrays[params.index(name)].shape)
        return (
            f"input '{name}' has shape {got}; the model expects {want} {m.group(3)} (the layout the model was "
            "exported with, e.g. NCHW for ONNX)"
        )
    return f"the model rejected its inputs: {_first_line(e)}"


def _cmd_demo(args) -> int:
    from .demo import run_demo

    return 0 if run_demo(args.arch, args.network, rtl=not args.no_rtl) else 1


def _cmd_synth(args) -> int:
    from .rtl.synth import device_for_part, synthesize

    arch = load_arch(args.arch)
    device = device_for_part(arch.part)
    print(
        f"synthesising tcu_top for '{arch.name or args.arch}' with Yosys synth_xilinx "
        f"({device.family if device else 'xc7'}); this takes minutes...",
        flush=True,
    )
    # The same cache as sweeps: a core synthesised once, here or in a sweep, is not synthesised again.
    res = synthesize(arch, workdir=args.workdir, cache=True)
    used = {"LUT": res.lut + res.lut_ram, "FF": res.ff, "DSP": res.dsp, "BRAM36": res.bram36}
    util = res.utilisation(device) if device else {}
    for (label, value), key in zip(used.items(), ("lut", "ff", "dsp", "bram36")):
        share = f"  {util[key]:6.1%} of {device.name}" if device else ""
        print(f"  {label:<7}{value:>9g}{share}")
    if device:
        print("fits" if all(v <= 1 for v in util.values()) else f"does NOT fit {device.name}")
    return 0


def _cmd_sweep(args) -> int:
    from .sweep import sweep

    result = sweep(
        args.model,
        args.space,
        args.output,
        jobs=args.jobs,
        ray=(args.ray or True) if args.ray is not None else False,
        resource=args.resource,
        retry_failed=args.retry_failed,
        cache=not args.no_cache,
    )
    counts: dict[str, int] = {}
    for row in result.rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    print(f"{len(result.rows)} points: " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
    for row in result.pareto:
        rtl = f", RTL {row['rtl_cycles']} cycles ({row['rtl_vs_model_pct']:+.2f}%)" if row.get("rtl_cycles") else ""
        print(
            f"  Pareto: {row['array_size']}x{row['array_size']} {row['part']}: {row['ms']} ms, "
            f"{row[args.resource]} {args.resource.upper()}{rtl}"
        )
    print(f"wrote {result.csv}, {result.json}" + (f", {result.plot}" if result.plot else ""))
    return 0


def _cmd_serve(args) -> int:
    from .runtime.board.serve import SimBoardServer

    arch = load_arch(args.arch)
    server = SimBoardServer(
        arch,
        args.socket,
        memory_bytes=args.memory,
        read_latency=args.read_latency,
        write_latency=args.write_latency,
        stall_limit=args.stall_limit,
    )
    import signal

    def terminate(*_):
        # Clean up (socket file), then leave without the interpreter's teardown of TVM (imported with
        # tvm_tensil): a second or more of CPU that kept terminated servers alive for many under load.
        server.close()
        sys.stderr.flush()
        os._exit(0)

    signal.signal(signal.SIGTERM, terminate)
    try:
        server.serve_forever(max_clients=1 if args.once else None)
    except KeyboardInterrupt:
        pass
    return 0


def _cmd_selftest(args) -> int:
    from .selftest import run_selftest

    options = _device_options(args)
    if args.bitstream:
        if args.device != "pynq":
            raise UsageError("--bitstream is for --device pynq")
        options["bitstream"] = args.bitstream
    dev = get_device(args.device, args.arch, **options)
    try:
        return 0 if run_selftest(dev, model=not args.no_model) else 1
    finally:
        close = getattr(dev, "close", None)
        if close:
            close()


def _cmd_ip(args) -> int:
    from .rtl.params import write_vivado_params

    arch = load_arch(args.arch)
    if not arch.part:
        raise ArchitectureError(f"architecture '{arch.name}' names no FPGA part: add tvm_tensil.part to the .tarch")
    out = Path(args.output)
    params = write_vivado_params(arch, out / "params.tcl")
    from .rtl.toolchain import RTL_DIR

    here = RTL_DIR / "vivado"
    print(
        f"wrote {params}\nthen, with Vivado:\n"
        f"  vivado -mode batch -source {here / 'package_ip.tcl'} -tclargs {params} {out}\n"
        f"  vivado -mode batch -source {here / 'block_design.tcl'} -tclargs {params} {out}"
    )
    return 0


# Tensil's own command line (``tensil compile -a ARCH -m MODEL -o DIR``) takes short options ours spell out.
_TENSIL_STYLE = {"-a": "--arch ARCH", "-m": "the model as the first argument", "-s": "nothing (always summarised)"}


class _Parser(argparse.ArgumentParser):
    """argparse, plus a hint for options written as for Tensil's own command line."""

    def error(self, message: str):
        used = [flag for flag in _TENSIL_STYLE if re.search(rf"(^|\s){flag}(\s|$)", message)]
        if used:
            message += "; Tensil's " + ", ".join(f"{f} is {_TENSIL_STYLE[f]}" for f in used) + " here"
            message += " (e.g. tvm-tensil compile model.onnx --arch pynqz1 -o out)"
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    p = _Parser(
        prog="tvm-tensil",
        description="Tensil compute unit tools: compile ONNX models, run them on the emulator, the RTL or a board.",
        epilog=__doc__.split("\n", 2)[2].rstrip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"tvm-tensil {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")

    def command(name: str, help: str, examples: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=help,
            description=help[0].upper() + help[1:] + ".",
            epilog="examples:\n" + "\n".join(f"  {line}" for line in examples.strip().splitlines()),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    a = command(
        "arch",
        "print a preset or .tarch with its derived instruction layout",
        "tvm-tensil arch --list\ntvm-tensil arch pynqz1\ntvm-tensil arch my.tarch --json",
    )
    a.add_argument("arch", nargs="?", help="preset name or .tarch path")
    a.add_argument("--list", action="store_true", help="list the presets")
    a.add_argument("--json", action="store_true", help="print the .tarch JSON")
    a.add_argument("--plain", action="store_true", help="with --json: only the Tensil keys")
    a.set_defaults(func=_cmd_arch)

    s = command(
        "asm", "assemble Tensil assembly text into a .tprog", "tvm-tensil asm prog.tasm --arch pynqz1 -o prog.tprog"
    )
    s.add_argument("source", help="assembly file (.tasm)")
    s.add_argument("--arch", required=True, help="preset name or .tarch path")
    s.add_argument("-o", "--output", help="output .tprog (default: source with .tprog)")
    s.set_defaults(func=_cmd_asm)

    d = command(
        "disasm",
        "disassemble a .tprog (or a .tmodel's program)",
        "tvm-tensil disasm prog.tprog --arch pynqz1\ntvm-tensil disasm out/model.tmodel --pc",
    )
    d.add_argument("program", help=".tprog or .tmodel")
    d.add_argument("--arch", help="preset name or .tarch path (not needed for a .tmodel)")
    d.add_argument("--pc", action="store_true", help="annotate each line with its program counter")
    d.add_argument("-o", "--output", help="write the text here instead of stdout")
    d.set_defaults(func=_cmd_disasm)

    e = command(
        "emulate",
        "run a .tmodel on float inputs from .npy files",
        "tvm-tensil emulate out/model.tmodel --input x.npy -o results/\n"
        "tvm-tensil emulate out/model.tmodel --input x=x.npy --device verilator",
    )
    e.add_argument("model", help=".tmodel file")
    e.add_argument(
        "-i",
        "--input",
        action="append",
        metavar="[NAME=]FILE.npy",
        help="an input, in the model's framework layout (e.g. NCHW); NAME= may be left out for one input",
    )
    e.add_argument("-o", "--output-dir", default=".", help="where to write <output>.npy files")
    _add_device(e, "emulator")
    e.set_defaults(func=_cmd_emulate)

    c = command(
        "compile",
        "compile an ONNX model: library, Tensil model files, report",
        "tvm-tensil compile model.onnx --arch pynqz1 -o out/\ntvm-tensil compile model.onnx --arch my_board.tarch",
    )
    c.add_argument("model", help=".onnx file (static input shapes, weights as initializers)")
    c.add_argument("--arch", default="pynqz1", help="preset name or .tarch path (default: pynqz1)")
    c.add_argument("-o", "--output", default="out", help="output folder (default: out)")
    c.add_argument(
        "--input-shape",
        action="append",
        metavar="NAME=D0,D1,...",
        help="a static shape for an input with symbolic dimensions (a symbolic batch alone is built for 1)",
    )
    c.add_argument("--require-offload", action="store_true", help="exit 2 when nothing of the model runs on the TCU")
    c.add_argument(
        "--calibrate",
        action="append",
        metavar="[NAME=]FILE.npy",
        help="sample inputs like the model will see, stacked along the first axis (one per model input): "
        "every tensor on the TCU gets its own scale (docs/compiler.md, Scales)",
    )
    c.add_argument(
        "--error-target",
        type=_error_target,
        default=_DEFAULT_TARGET,
        metavar="PERCENT",
        help="with --calibrate: the largest output error, in percent of an output's range, that calibration "
        "aims for by computing some layers' weights in two parts (their MACs doubled); 'none': never "
        "(default: 1)",
    )
    c.set_defaults(func=_cmd_compile)

    r = command(
        "run",
        "run a compiled model library on inputs from .npy files",
        "tvm-tensil run out/model.so --input x.npy -o y.npy\n"
        "tvm-tensil run out/model.so --input x=x.npy --device verilator\n"
        "tvm-tensil run out/model.so --input x.npy --device sim-board --socket /tmp/tcu.sock",
    )
    r.add_argument("library", help="the .so written by `tvm-tensil compile`")
    r.add_argument("-i", "--input", action="append", metavar="[NAME=]FILE.npy", help="an input (in order, or by name)")
    _add_device(r, "emulator")
    r.add_argument("-o", "--output", help="write the output to this .npy")
    r.set_defaults(func=_cmd_run)

    v = command(
        "serve",
        "run a simulated board: the Verilated core behind shared memory and a socket",
        "tvm-tensil serve --arch pynqz1 --socket /tmp/tcu.sock\n"
        "tvm-tensil run out/model.so --input x.npy --device sim-board --socket /tmp/tcu.sock   # in another shell",
    )
    v.add_argument("--arch", required=True, help="preset name or .tarch path")
    v.add_argument("--socket", required=True, help="Unix socket path to listen on")
    v.add_argument("--memory", type=int, help="bytes of board memory (default: both DRAM windows)")
    v.add_argument(
        "--read-latency",
        type=int,
        default=MEMORY_TIMING["read_latency"],
        help="DRAM read latency in cycles (default %(default)s)",
    )
    v.add_argument(
        "--write-latency",
        type=int,
        default=MEMORY_TIMING["write_latency"],
        help="DRAM write response latency in cycles (default %(default)s)",
    )
    v.add_argument(
        "--stall-limit",
        type=int,
        default=1_000_000,
        help="cycles without progress before a run is reported hung (default 1000000)",
    )
    v.add_argument("--once", action="store_true", help="exit when the first client disconnects (private servers)")
    v.set_defaults(func=_cmd_serve)

    t = command(
        "selftest",
        "check a board (or any device) step by step: DRAM, a move, a matmul, a model",
        "tvm-tensil selftest --device pynq --arch pynqz1 --bitstream tcu.bit   # on the board\n"
        "tvm-tensil selftest --device sim-board --socket /tmp/tcu.sock",
    )
    _add_device(t, "pynq")
    t.add_argument("--arch", default="pynqz1", help="preset name or .tarch path the bitstream was built for")
    t.add_argument("--bitstream", help="overlay .bit to load (pynq; default: the one loaded)")
    t.add_argument("--no-model", action="store_true", help="skip the compiled-model step")
    t.set_defaults(func=_cmd_selftest)

    i = command(
        "ip",
        "Vivado parameters for packaging the core and a Zynq block design (docs/boards.md)",
        "tvm-tensil ip --arch pynqz1 -o ip/",
    )
    i.add_argument("--arch", required=True, help="preset name or .tarch path")
    i.add_argument("-o", "--output", required=True, help="output folder (params.tcl; Vivado writes here too)")
    i.set_defaults(func=_cmd_ip)

    m = command(
        "demo",
        "build a zoo network, run it on the emulator and the RTL core, compare with TVM's CPU build",
        "tvm-tensil demo\ntvm-tensil demo --arch ultra96v2 --network mobilenetv2",
    )
    m.add_argument("--arch", default="pynqz1", help="preset name or .tarch path (default: pynqz1)")
    m.add_argument("--network", default="resnet20v2", choices=["resnet20v2", "small_cnn", "mobilenetv2"])
    m.add_argument("--no-rtl", action="store_true", help="the emulator only (no Verilator build)")
    m.set_defaults(func=_cmd_demo)

    y = command(
        "synth",
        "estimate LUT/FF/DSP/BRAM of the core for an architecture (Yosys)",
        "tvm-tensil synth --arch ultra96v2\ntvm-tensil synth --arch my.tarch --workdir synth/",
    )
    y.add_argument("--arch", default="pynqz1", help="preset name or .tarch path (default: pynqz1)")
    y.add_argument("--workdir", help="keep the Yosys script and log here")
    y.set_defaults(func=_cmd_synth)

    w = command(
        "sweep",
        "evaluate a model over a space of architectures: latency model, Yosys, Pareto front (docs/sweep.md)",
        "tvm-tensil sweep resnet20v2.onnx --space space.json -o sweep/ --jobs 2\n"
        "tvm-tensil sweep resnet20v2.onnx --space space.json -o sweep/ --ray auto   # on a Ray cluster",
    )
    w.add_argument("model", help="ONNX model file")
    w.add_argument("--space", required=True, help="space JSON: base preset and the values per parameter")
    w.add_argument("-o", "--output", required=True, help="results folder (a sweep run again resumes in it)")
    w.add_argument("--jobs", type=int, help="worker processes (default: one per CPU; with --ray: local Ray's CPUs)")
    w.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run the points as Ray tasks: on a local Ray instance, or the cluster at ADDRESS ('auto', ray://...)",
    )
    w.add_argument("--resource", default="lut", choices=("lut", "dsp", "ff", "bram36"), help="Pareto cost axis")
    w.add_argument("--retry-failed", action="store_true", help="run the points that failed before again")
    w.add_argument("--no-cache", action="store_true", help="synthesise every point even if cached on the worker")
    w.set_defaults(func=_cmd_sweep)
    return p


# Ctrl-C seen during the current command (a code path may swallow the KeyboardInterrupt: TVM turns it
# into a RuntimeError inside its callbacks, and an op's check rejects on any error).
_INTERRUPTS: list = []


@contextlib.contextmanager
def _noting_interrupts():
    """Ctrl-C raises KeyboardInterrupt as usual and is also noted in the list this yields: TVM turns
    a KeyboardInterrupt raised inside its callbacks into a RuntimeError."""
    noted = _INTERRUPTS
    noted.clear()
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum, frame):
        noted.append(signum)
        raise KeyboardInterrupt

    if previous is signal.default_int_handler:
        signal.signal(signal.SIGINT, handler)
    try:
        yield noted
    finally:
        if previous is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous)


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as one line each, named by their kind (not Python's file:line and source line)."""
    print(f"tvm-tensil: {category.__name__}: {message}", file=file or sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    shown, warnings.showwarning = warnings.showwarning, _one_line_warning
    try:
        with _noting_interrupts() as interrupted:
            code = _run(args, interrupted)
    finally:
        warnings.showwarning = shown
    if code == 130 and argv is None and threading.current_thread() is threading.main_thread():
        # The process is ending on Ctrl-C. Python's teardown gives Ctrl-C its default action back, so
        # one pressed again meanwhile would kill the process silently, without this exit code.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return code


def _run(args, interrupted: list) -> int:
    try:
        code = args.func(args)
        sys.stdout.flush()  # inside the try: a closed pipe is met here, not at interpreter exit
        return 130 if interrupted else code
    except _USER_ERRORS as e:
        if interrupted:
            return 130
        print(f"tvm-tensil: error: {e}", file=sys.stderr)
        return EXIT_DEVICE if isinstance(e, DeviceError) else EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C: the shell's convention, no traceback
        return 130
    except BrokenPipeError:  # `tvm-tensil ... | head` closed the pipe: nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception:
        if interrupted:  # Ctrl-C inside TVM reaches Python as another error
            return 130
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
