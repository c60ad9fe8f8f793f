"""Trained networks from other projects on the TCU against TVM's CPU build, at the preset's data type.

Six networks, not shipped here (no downloads at run time): PaddleOCR's PP-OCR text detector
(PP-OCRv4, DBNet head on PP-LCNetV3), recogniser (PP-OCRv4, SVTR-LCNet) and direction classifier
(MobileNetV3), as the ONNX files in the `rapidocr-onnxruntime` 1.4.4 wheel, and the three nets of
MTCNN's cascaded face detector (P-, R-, O-Net, PyTorch weights in the `facenet-pytorch` 2.6.0 wheel).
Get them once:

    pip download --no-deps rapidocr-onnxruntime==1.4.4 facenet-pytorch==2.6.0 -d wheels
    cd wheels && for w in *.whl; do unzip -q -o $w; done

The OCR models have symbolic shapes that TVM's ONNX importer cannot bind (a Reshape fed by Shape
ops): this script fixes them with onnx-simplifier (`pip install onnxsim`) when it is installed,
else give already simplified files with the same names plus ``_static``.

Inputs are made here: words rendered with DejaVu Sans (the detector: six lines on a 320x320 page; the
recogniser: one word on 48x320; the classifier: words on 48x192, half turned by 180 degrees), and
the face nets take crops of matplotlib's and scikit-learn's sample photos. Each network is built
without and with calibration (16 other inputs of the same kind) and compared on 20 test inputs
(the detector: 5 pages) by what its users read from it:

- detector: the share of pixels whose text/no-text decision (probability > 0.3) differs;
- recogniser: the words whose greedy CTC decoding differs from the CPU's;
- classifier: the inputs whose predicted orientation differs;
- face nets: box regression rms error as a share of its range, and face decisions (> 0.6) that differ.

    python benchmarks/real_networks.py --models wheels [--arch pynqz1] [--only det,rec]

Writes results/real_networks_<arch>.json.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

import tvm_tensil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import write_results  # noqa: E402

HERE = Path(__file__).resolve().parent
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
WORDS = (
    "tensor compile board array systolic vector memory channel kernel layer scale offset weight signal "
    "filter buffer window stream gradient matrix pixel detect render quantum binary decimal digital "
    "network python verilog market river garden mountain silver yellow orange purple candle winter "
    "summer autumn spring engine rocket planet harbor"
).split()
OCR = {
    "det": ("ch_PP-OCRv4_det_infer.onnx", (1, 3, 320, 320)),
    "rec": ("ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320)),
    "cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192)),
}
FACES = {"pnet": (48, 64), "rnet": (24, 24), "onet": (48, 48)}


def _font(size: int):
    from PIL import ImageFont

    return ImageFont.truetype(FONT, size)


def _line(word: str, w: int, h: int, turned: bool = False) -> np.ndarray:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (w, h), (255, 255, 255))
    ImageDraw.Draw(img).text((4, (h - 32) // 2 - 2), word, fill=(0, 0, 0), font=_font(32))
    a = np.asarray(img, np.float32)
    return a[::-1, ::-1] if turned else a


def _page(rng, w: int = 320, h: int = 320) -> np.ndarray:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (w, h), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    for k in range(6):
        words = " ".join(rng.choice(WORDS, 2))
        at = (int(rng.integers(0, 120)), 10 + 50 * k + int(rng.integers(0, 10)))
        draw.text(at, words, fill=(0, 0, 0), font=_font(int(rng.integers(16, 30))))
    return np.asarray(img, np.float32)


def _paddle_line(a):  # PaddleOCR's recogniser and classifier: (x / 255 - 0.5) / 0.5, NCHW
    return ((a / 255 - 0.5) / 0.5).transpose(2, 0, 1)[None].astype(np.float32)


def _paddle_page(a):  # the detector: ImageNet mean and std
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    return ((a / 255 - mean) / std).transpose(2, 0, 1)[None].astype(np.float32)


def ocr_inputs(kind: str):
    """(test, calibration) inputs, disjoint."""
    if kind == "cls":
        make = [_paddle_line(_line(w, 192, 48, turned=bool(i % 2))) for i, w in enumerate(WORDS[:36])]
        return make[:20], make[20:]
    if kind == "rec":
        test = [_paddle_line(_line(w, 320, 48)) for w in WORDS[:20]]
        return test, [_paddle_line(_line(f"{a} {b}", 320, 48)) for a, b in zip(WORDS[20:36], WORDS[-16:])]
    rng = np.random.default_rng(1)
    pages = [_paddle_page(_page(rng)) for _ in range(21)]
    return pages[:5], pages[5:]


def ocr_module(models: Path, kind: str):
    import onnx
    import onnx.version_converter
    from tvm.relax.frontend.onnx import from_onnx

    name, shape = OCR[kind]
    path = next(models.rglob(name), None)
    static = next(models.rglob(name.replace(".onnx", "_static.onnx")), None)
    if static is not None:
        model = onnx.load(static)
    elif path is None:
        raise SystemExit(f"{name} not found under {models}: see this script's docstring for how to get it")
    else:
        try:
            import onnxsim
        except ImportError:
            raise SystemExit(f"{name} has symbolic shapes: pip install onnxsim (or give {name[:-5]}_static.onnx)")
        model = onnx.load(path)
        opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        if opset < 13:  # onnxsim 0.8's reference runner refuses the classifier's opset-11 Constants
            model = onnx.version_converter.convert_version(model, 13)
        model, ok = onnxsim.simplify(model, overwrite_input_shapes={model.graph.input[0].name: list(shape)})
        assert ok, f"onnxsim could not check its simplification of {name}"
    return from_onnx(model, keep_params_in_input=False)


def face_module(models: Path, kind: str):
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    source = next(models.rglob("facenet_pytorch/models/mtcnn.py"), None)
    if source is None:
        raise SystemExit(f"facenet_pytorch not found under {models}: see this script's docstring")
    # The three nets' classes without the package (its __init__ imports what the nets do not need).
    text = source.read_text().split("class MTCNN")[0].replace("from .utils.detect_face import", "# ")
    text = text.replace("os.path.dirname(__file__), '../data/", f"'{source.parents[1] / 'data'}', '")
    scope: dict = {}
    exec(compile(text, str(source), "exec"), scope)
    net = scope[{"pnet": "PNet", "rnet": "RNet", "onet": "ONet"}[kind]]().eval()
    h, w = FACES[kind]
    with torch.no_grad():
        exported = torch.export.export(net, (torch.zeros(1, 3, h, w),))
    return from_exported_program(exported, keep_params_as_input=False)


def face_inputs(kind: str):
    import matplotlib
    import sklearn
    from PIL import Image

    photos = [
        Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg",
        Path(sklearn.__file__).parent / "datasets" / "images" / "china.jpg",
        Path(sklearn.__file__).parent / "datasets" / "images" / "flower.jpg",
    ]
    images = [np.asarray(Image.open(p).convert("RGB")) for p in photos]
    rng = np.random.default_rng(0)
    h, w = FACES[kind]
    crops = []
    for i in range(36):
        a = images[0] if i % 2 == 0 else images[1 + (i // 2) % 2]
        side = int(rng.integers(min(a.shape[:2]) // 4, min(a.shape[:2])))
        y, x = int(rng.integers(0, a.shape[0] - side + 1)), int(rng.integers(0, a.shape[1] - side + 1))
        crop = np.asarray(Image.fromarray(a[y : y + side, x : x + side]).resize((w, h)), np.float32)
        crops.append(((crop - 127.5) / 128).transpose(2, 0, 1)[None].astype(np.float32))  # MTCNN's scaling
    return crops[:20], crops[20:]


def _outputs(ex, x) -> list[np.ndarray]:
    r = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x))
    return [t.numpy() for t in r] if type(r).__name__ == "Array" or isinstance(r, (list, tuple)) else [r.numpy()]


def _ctc(probs: np.ndarray) -> list[int]:
    best = probs[0].argmax(-1)
    return [int(c) for i, c in enumerate(best) if c != 0 and (i == 0 or c != best[i - 1])]


def agreement(kind: str, want: list, got: list) -> dict:
    """What a user reads from the outputs, TCU against CPU."""
    if kind == "det":
        a = np.concatenate([w[0].ravel() for w in want]) > 0.3
        b = np.concatenate([g[0].ravel() for g in got]) > 0.3
        return {"text_pixels_cpu": float(a.mean()), "text_pixels_tcu": float(b.mean()),
                "pixels_differing": float((a != b).mean())}  # fmt: skip
    if kind == "rec":
        return {"words_read_alike": sum(_ctc(w[0]) == _ctc(g[0]) for w, g in zip(want, got)), "words": len(want)}
    if kind == "cls":
        return {"orientations_alike": sum(int(w[0].argmax() == g[0].argmax()) for w, g in zip(want, got)),
                "inputs": len(want)}  # fmt: skip
    box = np.concatenate([w[0].ravel() for w in want])
    box_tcu = np.concatenate([g[0].ravel() for g in got])
    face = np.concatenate([w[-1][:, 1].ravel() for w in want]) > 0.6
    face_tcu = np.concatenate([g[-1][:, 1].ravel() for g in got]) > 0.6
    return {"box_rms_of_range": float(np.sqrt(np.mean((box - box_tcu) ** 2)) / np.ptp(box)),
            "face_decisions_differing": float((face != face_tcu).mean())}  # fmt: skip


def measure(kind: str, mod, test: list, calibration: list, arch) -> dict:
    cpu = tvm.compile(mod, target="llvm")
    want = [_outputs(cpu, x) for x in test]
    row = {"network": kind}
    for label, data in (("default", None), ("calibrated", np.concatenate(calibration))):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            start = time.perf_counter()
            ex = tvm_tensil.build(mod, target="tensil", arch=arch, calibration=data)
            seconds = time.perf_counter() - start
            got = [_outputs(ex, x) for x in test]
        report = ex.tensil_report
        row[label] = {
            **agreement(kind, want, got),
            "partitions": len(report.partitions),
            "ops_on_cpu": len(report.cpu_ops),
            "build_seconds": round(seconds, 1),
            "saturation_warnings": sum(w.category.__name__ == "SaturationWarning" for w in seen),
            "precision_warnings": sum(issubclass(w.category, tvm_tensil.PrecisionWarning) for w in seen),
        }
        print(kind, label, row[label], flush=True)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", required=True, type=Path, help="where the two wheels were unpacked")
    p.add_argument("--arch", default="pynqz1")
    p.add_argument("--only", help="a comma-separated subset of det,rec,cls,pnet,rnet,onet")
    p.add_argument("-o", "--output", type=Path)
    args = p.parse_args()
    arch = tvm_tensil.load_arch(args.arch)
    kinds = args.only.split(",") if args.only else [*OCR, *FACES]
    rows = []
    for kind in kinds:
        if kind in OCR:
            rows.append(measure(kind, ocr_module(args.models, kind), *ocr_inputs(kind), arch))
        else:
            rows.append(measure(kind, face_module(args.models, kind), *face_inputs(kind), arch))
    write_results(args.output or HERE / "results" / f"real_networks_{arch.name}.json", rows)
    print(table(rows))


def _read(kind: str, r: dict) -> str:
    if kind == "det":
        return f"{r['pixels_differing']:.2%} of pixels decided differently"
    if kind == "rec":
        return f"{r['words_read_alike']}/{r['words']} words read alike"
    if kind == "cls":
        return f"{r['orientations_alike']}/{r['inputs']} orientations alike"
    return f"boxes {r['box_rms_of_range']:.2%} rms, {r['face_decisions_differing']:.2%} face decisions differ"


def table(rows: list[dict]) -> str:
    """The rows as a markdown table (docs/results.md)."""
    out = ["| network | default | calibrated | partitions (default / calibrated) |", "|---|---|---|---|"]
    for row in rows:
        kind, d, c = row["network"], row["default"], row["calibrated"]
        out.append(f"| {kind} | {_read(kind, d)} | {_read(kind, c)} | {d['partitions']} / {c['partitions']} |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
