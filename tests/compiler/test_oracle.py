"""The programs oracle: every zoo network built for every preset gives the same `.tprog` and weight
image bytes as recorded in programs.json.

Programs are deterministic, so a change that means to keep what the compiler emits (a refactor, a
new op elsewhere) proves it here; a change that means to alter programs updates the record, and
its commit says why:

    python tests/compiler/test_oracle.py --update
"""

from __future__ import annotations

import hashlib
import json
import sys
import warnings
from pathlib import Path

import pytest

RECORD = Path(__file__).with_name("programs.json")
PRESETS = sorted(p.stem for p in (Path(__file__).parents[2] / "python/tvm_tensil/presets").glob("*.tarch"))


def networks():
    from tvm_tensil import zoo

    return {
        "mlp": lambda: zoo.mlp(),
        "small_cnn": lambda: zoo.small_cnn(),
        "resnet20v2": lambda: zoo.resnet20v2(),
        "mobilenetv2_64": lambda: zoo.mobilenetv2(64),
        "yolov4_tiny_64": lambda: zoo.yolov4_tiny(64),
        "elementwise_ops": lambda: zoo.elementwise_ops(),
    }


def digests(network: str, preset: str) -> dict[str, str]:
    """sha256 of each partition's program and weight image."""
    from tvm.relax.frontend.onnx import from_onnx

    from tvm_tensil.byoc.build import offload

    mod = from_onnx(networks()[network](), keep_params_in_input=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, report = offload(mod, preset)
    out = {}
    for i, part in enumerate(report.compiled.values()):  # symbols hash the model: name by order
        model = part.model(part.constants)
        out[f"{i}.tprog"] = hashlib.sha256(model.program.data).hexdigest()
        out[f"{i}.tdata"] = hashlib.sha256(b"".join(d.tobytes() for _, d in model.consts)).hexdigest()
    return out


@pytest.mark.parametrize("network", list(networks()))
def test_programs_are_the_recorded_ones(network):
    record = json.loads(RECORD.read_text())
    for preset in PRESETS:
        assert digests(network, preset) == record[network][preset], f"{network} on {preset}"


if __name__ == "__main__" and sys.argv[1:] == ["--update"]:
    RECORD.write_text(
        json.dumps({n: {p: digests(n, p) for p in PRESETS} for n in networks()}, indent=1, sort_keys=True) + "\n"
    )
    print(f"wrote {RECORD}")
