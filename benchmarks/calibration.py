"""What calibration (a power-of-two scale per tensor) does to the error at FP16BP8.

For the suite's trained digits networks and zoo networks: the largest logit error against TVM's CPU
build, as a share of the logits' range, without and with calibration (16 samples for the zoo, 256
training images for the trained nets), top-1 agreement, and saturation warnings on the test inputs.
Writes results/calibration.json and prints a table.

    python benchmarks/calibration.py [--arch pynqz1] [--data-type FP8BP4] [--full-size]

``--random-nets N`` measures the suite's random networks 0..N-1 instead (one test input each, the
suite's; 16 calibration inputs of the same distribution) and counts those within 1% of their
outputs' range (over the test and calibration inputs; also counted against the test input's own),
``--jobs K`` networks at a time.

``--error-target SHARE`` gives the calibrated builds that error target (weights in two parts where
the simulation needs them; docs/compiler.md, "Scales"), written to ``..._target<SHARE>.json``.

``--only PREFIX`` measures the networks whose name starts with PREFIX and replaces their rows in the
output file (the other rows stay as they were measured).

``--full-size`` builds the zoo networks at their published input sizes (ResNet-50 v2 224, YOLOv4-tiny
416, MobileNet-v2 224) instead of ResNet-20 v2 and small MobileNet-v2 / YOLOv4-tiny inputs.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

import tvm_tensil
from tvm_tensil import zoo
from tvm_tensil.compiler import CompileOptions
from tvm_tensil.numbers import data_type
from tvm_tensil.runtime.device import SaturationWarning

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import trained_nets  # noqa: E402
from machine import describe  # noqa: E402

HERE = Path(__file__).resolve().parent


def _run(main, xs, batch):
    out = []
    for i in range(0, len(xs), batch):
        r = main(tvm.runtime.tensor(xs[i : i + batch]))
        out.append((r[0] if type(r).__name__ == "Array" or isinstance(r, (list, tuple)) else r).numpy())
    return np.concatenate(out)


def measure(name, mod, batch, cal, test, arch, labels=None, options=CompileOptions()) -> dict:
    cpu = _run(relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"], test, batch)
    row = {"network": name}
    for label, data in (("default", None), ("calibrated", cal)):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            ex = tvm_tensil.build(mod, target="tensil", arch=arch, calibration=data, options=options)
            got = _run(relax.VirtualMachine(ex, tvm.cpu())["main"], test, batch)
        row[label] = {
            "error_of_range": float(np.max(np.abs(got - cpu)) / np.ptp(cpu)),
            "top1_agreement": float(np.mean(got.argmax(-1) == cpu.argmax(-1))),
            "saturation_warnings": sum(issubclass(w.category, SaturationWarning) for w in seen),
            "precision_warnings": sum(issubclass(w.category, tvm_tensil.PrecisionWarning) for w in seen),
            "cycles": ex.tensil_report.total_cycles,
            "ops_on_cpu": len(ex.tensil_report.cpu_ops),
            "two_part_layers": _two_part_layers(ex.tensil_report),
        }
        if labels is not None:
            row[label]["top1"] = float(np.mean(got.argmax(-1) == labels))
    if labels is not None:
        row["float_top1"] = float(np.mean(cpu.argmax(-1) == labels))
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="pynqz1")
    p.add_argument("--data-type", help="the architecture with another data type, e.g. FP8BP4")
    p.add_argument("--full-size", action="store_true", help="the zoo at its published input sizes")
    p.add_argument("--random-nets", type=int, metavar="N", help="the suite's random networks 0..N-1 instead")
    p.add_argument(
        "--error-target", type=float, metavar="SHARE",
        help="calibrated builds with CompileOptions(error_target=SHARE), e.g. 0.01 (weights in two parts)",
    )  # fmt: skip
    p.add_argument(
        "--only", help="measure the networks whose name starts with this (e.g. YOLOv4, 'digits prelu') and "
        "replace their rows in the output, keeping the others",
    )  # fmt: skip
    p.add_argument("--jobs", type=int, default=1, help="random networks measured at once (processes)")
    p.add_argument("-o", "--output", help="default: results/calibration[_<data type>][_full|_random].json")
    args = p.parse_args()
    arch = tvm_tensil.load_arch(args.arch)
    if args.data_type:
        arch = arch.replace(data_type=data_type(args.data_type), name=f"{arch.name}_{args.data_type.lower()}")
    suffix = (f"_{args.data_type.lower()}" if args.data_type else "") + ("_full" if args.full_size else "")
    suffix += "_random" if args.random_nets else ""
    suffix += f"_target{args.error_target:g}" if args.error_target is not None else ""
    options = CompileOptions(error_target=args.error_target)
    output = Path(args.output or HERE / "results" / f"calibration{suffix}.json")
    if args.random_nets:
        return random_nets(args.random_nets, arch, output, options, args.jobs)
    rows = []
    data = trained_nets.digits()
    n = len(data.x_test) // 64 * 64
    chosen = lambda name: not args.only or name.startswith(args.only)  # noqa: E731
    for kind in () if args.full_size else trained_nets.CLASSIFIERS:
        if not chosen(f"digits {kind}"):
            continue
        mod = trained_nets.relax_module(trained_nets.trained(kind), 64)
        cal, test = data.x_train[:256], data.x_test[:n]
        rows.append(measure(f"digits {kind}", mod, 64, cal, test, arch, data.y_test[:n], options))
    rng = np.random.default_rng(0)
    small = (
        ("ResNet-20 v2 (32)", lambda: zoo.resnet20v2(softmax=False), (3, 32, 32)),
        ("MobileNet-v2 (96)", lambda: zoo.mobilenetv2(96, softmax=False), (3, 96, 96)),
        ("YOLOv4-tiny (128)", lambda: zoo.yolov4_tiny(128), (3, 128, 128)),
    )
    full = (
        ("ResNet-50 v2 (224)", lambda: zoo.resnet50v2(softmax=False), (3, 224, 224)),
        ("YOLOv4-tiny (416)", lambda: zoo.yolov4_tiny(416), (3, 416, 416)),
        ("MobileNet-v2 (224)", lambda: zoo.mobilenetv2(softmax=False), (3, 224, 224)),
    )
    for name, model, shape in full if args.full_size else small:
        if not chosen(name):
            continue
        xs = rng.standard_normal((20, *shape)).astype(np.float32)
        mod = from_onnx(model(), keep_params_in_input=False)
        rows.append(measure(name, mod, 1, xs[:16], xs[16:], arch, None, options))
    if args.only and output.exists():  # the other networks' rows as they were
        fresh = {r["network"]: r for r in rows}
        kept = json.loads(output.read_text())["rows"]
        rows = [fresh.pop(r["network"], r) for r in kept] + list(fresh.values())
    result = {"arch": arch.name, "data_type": arch.data_type.name, "error_target": options.error_target,
              "machine": describe(), "rows": rows}  # fmt: skip
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'network':24} {'default':>9} {'calibrated':>11}  top-1 (float / default / calibrated)")
    for r in rows:
        d, c = r["default"], r["calibrated"]
        top = f"{r['float_top1']:.3f} / {d['top1']:.3f} / {c['top1']:.3f}" if "float_top1" in r else ""
        print(f"{r['network']:24} {d['error_of_range']:9.2%} {c['error_of_range']:11.2%}  {top}")


def random_nets(count: int, arch, output: Path, options=CompileOptions(), jobs: int = 1) -> None:
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    rows = []
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
        for row in pool.map(_random_net_row, range(count), [arch] * count, [options] * count):
            rows.append(row)
            print(f"seed {row['seed']}: {row['default']:.2%} -> {row['calibrated']:.2%}"
                  f" ({row['two_part_layers']} layers in two parts)", flush=True)  # fmt: skip
    within = {k: sum(r[k] <= 0.01 for r in rows) for k in ("default", "calibrated")}
    within |= {f"{k} (of the input's range)": sum(r[f"{k}_of_the_input's_range"] <= 0.01 for r in rows)
               for k in ("default", "calibrated")}  # fmt: skip
    result = {"arch": arch.name, "data_type": arch.data_type.name, "error_target": options.error_target,
              "machine": describe(), "rows": rows, "within_1_percent": within}  # fmt: skip
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"within 1% of the outputs' range: {within['default']} of {count} default, {within['calibrated']} calibrated")


def _random_net_row(seed: int, arch, options: CompileOptions) -> dict:
    """One random network's error without and with calibration, as shares of its outputs' range."""
    from random_nets import calibration_inputs, random_net, sample_input

    net = random_net(seed)
    mod = from_onnx(net.model, keep_params_in_input=False)
    x, cal = sample_input(net), calibration_inputs(net)
    cpu_vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    cpu = _outputs(cpu_vm["main"](tvm.runtime.tensor(x)))
    # Each output's range over the test and calibration inputs (one input's own can be tiny: two
    # logits that nearly tie); the error as a share of the test input's own range beside it.
    batch = x.shape[0]
    runs = [cpu] + [_outputs(cpu_vm["main"](tvm.runtime.tensor(cal[i : i + batch])))
                    for i in range(0, len(cal) - batch + 1, batch)]  # fmt: skip
    spans = [max(float(np.ptp(np.concatenate([r[k].ravel() for r in runs]))), 1e-3) for k in range(len(cpu))]
    row = {"seed": seed}
    for label, data in (("default", None), ("calibrated", cal)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ex = tvm_tensil.build(mod, target="tensil", arch=arch, calibration=data, options=options)
            got = _outputs(relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)))
        row[label] = max(float(np.max(np.abs(c - g))) / span for c, g, span in zip(cpu, got, spans))
        row[f"{label}_of_the_input's_range"] = max(
            float(np.max(np.abs(c - g)) / max(np.ptp(c), 1e-3)) for c, g in zip(cpu, got)
        )
        row[f"{label}_cycles"] = ex.tensil_report.total_cycles
    row["two_part_layers"] = _two_part_layers(ex.tensil_report)
    return row


def _two_part_layers(report) -> int:
    """Layers whose weights run in two parts (a residue MatMul beside the rounded weights')."""
    return sum("residue_bits" in n for p in report.partitions.values() for n in p["nodes"])


def _outputs(result) -> list:
    if isinstance(result, (list, tuple)) or type(result).__name__ == "Array":
        return [r.numpy() for r in result]
    return [result.numpy()]


if __name__ == "__main__":
    main()
