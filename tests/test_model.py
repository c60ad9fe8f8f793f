"""Tensil model files: keys and units compatible with Tensil tools, errors, layout helpers."""

import json

import numpy as np
import pytest

from helpers import dense_relu_model
from tvm_tensil.arch import PRESETS
from tvm_tensil.isa import assemble
from tvm_tensil.isa.layout import layout_of
from tvm_tensil.model import (
    ModelError,
    TensilModel,
    TensorEntry,
    tensor_to_vectors,
    vectors_for_shape,
    vectors_to_tensor,
)
from tvm_tensil.runtime import Emulator, SaturationWarning

ARCH = PRESETS["pynqz1"]
N = 8


def make(batch=4, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.integers(-16, 16, (N, N)) / 16
    b = rng.integers(-16, 16, N) / 16
    return dense_relu_model(ARCH, w, b, batch), w, b


def test_file_format_matches_tensil(tmp_path):
    model, w, b = make()
    path = model.save(tmp_path)
    d = json.loads(path.read_text())
    assert set(d) == {"name", "prog", "consts", "inputs", "outputs", "arch", "load_consts_to_local", "tvm_tensil"}
    assert d["prog"] == {"file_name": "dense_relu.tprog", "size": len(model.program.data)}  # bytes
    assert d["consts"] == [{"file_name": "dense_relu.tdata", "base": 0, "size": N + 1}]  # vectors
    assert d["inputs"] == [{"name": "x", "base": 0, "size": 4}]
    assert d["arch"] == ARCH.to_dict(plain=True)
    assert d["load_consts_to_local"] is False
    tdata = (tmp_path / "dense_relu.tdata").read_bytes()
    assert len(tdata) == (N + 1) * N * 2
    # Little-endian FP16BP8, bias vector first.
    np.testing.assert_array_equal(np.frombuffer(tdata[: 2 * N], "<i2"), np.floor(b * 256 + 0.5))
    assert not list(tmp_path.glob(".*tmp*"))  # no temporary files left


def test_save_load_run(tmp_path):
    model, w, b = make(batch=5)
    back = TensilModel.load(model.save(tmp_path))
    assert back.program.data == model.program.data
    assert back.inputs == model.inputs and back.outputs == model.outputs
    x = np.random.default_rng(1).integers(-32, 32, (5, N)) / 16
    y = Emulator(ARCH).run_model(back, {"x": x})["y"]
    np.testing.assert_array_equal(y, np.maximum(x @ w + b, 0))


def test_split_tensor_entries_are_concatenated():
    model, w, b = make(batch=4)
    model.inputs = [TensorEntry("x", 0, 2), TensorEntry("x", 2, 2)]
    model.extras = {}
    x = np.random.default_rng(2).integers(-32, 32, (4, N)) / 16
    y = Emulator(ARCH).run_model(model, {"x": x})["y"]
    assert y.shape == (4, N)  # no shape recorded: vectors
    np.testing.assert_array_equal(y, np.maximum(x @ w + b, 0))


def test_constants_are_written_once_per_model():
    """A second run of the same model leaves DRAM1 alone, and so does another model (it gets a region
    of its own); anything that overwrites DRAM1 (the user, a program storing to it) makes the next
    run write the constants again."""
    model, w, b = make(batch=2)
    dev = Emulator(ARCH)
    writes = []
    write = dev.write_dram
    dev.write_dram = lambda bank, base, v: (writes.append(bank), write(bank, base, v))
    x = np.random.default_rng(3).integers(-32, 32, (2, N)) / 16
    want = np.maximum(x @ w + b, 0)

    def run():
        writes.clear()
        np.testing.assert_array_equal(dev.run_model(model, {"x": x})["y"], want)
        return writes.count(1)

    assert run() == 1
    assert run() == 0
    write(1, 0, np.zeros((N + 1, N)))  # the weights overwritten by hand
    assert run() == 1
    other, w2, b2 = make(batch=2, seed=5)
    np.testing.assert_array_equal(dev.run_model(other, {"x": x})["y"], np.maximum(x @ w2 + b2, 0))
    assert run() == 0
    dev.execute(assemble("datamove local_to_dram1 local=0 dram1=0 size=1", layout_of(ARCH)))
    assert run() == 1


def test_saturation_is_reported():
    w = np.eye(N) * 100
    model = dense_relu_model(ARCH, w, np.zeros(N), 1)
    dev = Emulator(ARCH)
    with pytest.warns(SaturationWarning, match="values saturated at the FP16BP8 range"):
        y = dev.run_model(model, {"x": np.ones((1, N)) * 2})["y"]
    assert dev.last_stats.saturations["matmul"] == N
    np.testing.assert_array_equal(y, np.full((1, N), 32767 / 256))


def test_bad_inputs_write_nothing():
    model, _, _ = make()
    dev = Emulator(ARCH)
    with pytest.raises(ModelError, match=r"input 'x' has shape \(3, 8\); the model expects \(4, 8\)"):
        dev.run_model(model, {"x": np.zeros((3, N))})
    with pytest.raises(ModelError, match="missing \\['x'\\]; unknown \\['y'\\]"):
        dev.run_model(model, {"y": np.zeros((4, N))})
    with pytest.raises(ValueError, match="NaN"):
        dev.run_model(model, {"x": np.full((4, N), np.nan)})
    assert not dev.dram1.any() and not dev.dram0.any()


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d, p: d.pop("prog"), "missing key 'prog'"),
        (lambda d, p: d["prog"].update(size=7), "prog size is 7 bytes but dense_relu.tprog has"),
        (lambda d, p: d["consts"][0].update(size=10), "consts[0]: dense_relu.tdata has 144 bytes; 10 vectors"),
        (lambda d, p: d["inputs"][0].update(base=1 << 20), "input 'x' at vector 1048576"),
        (lambda d, p: d["arch"].update(array_size=1), "key 'array_size': 1 is out of range"),
        (lambda d, p: d["inputs"][0].update(size="4"), "inputs[0]: key 'size' must be an integer"),
        (lambda d, p: d.update(load_consts_to_local=True), "load_consts_to_local is true"),
        (lambda d, p: (p / "dense_relu.tdata").unlink(), "cannot read"),
        (lambda d, p: d["outputs"][0].update(base=2), "input 'x' (DRAM0 0..3) and output 'y' (2..5) overlap"),
        (lambda d, p: d.update(outputs=[]), "has no outputs"),
    ],
)
def test_malformed_model_files(tmp_path, mutate, message):
    model, _, _ = make()
    path = model.save(tmp_path)
    d = json.loads(path.read_text())
    mutate(d, tmp_path)
    path.write_text(json.dumps(d))
    with pytest.raises(ModelError) as e:
        TensilModel.load(path)
    assert message in str(e.value)


def test_truncated_program_file(tmp_path):
    model, _, _ = make()
    path = model.save(tmp_path)
    prog = tmp_path / "dense_relu.tprog"
    prog.write_bytes(prog.read_bytes()[:-3])
    d = json.loads(path.read_text())
    d["prog"].pop("size")  # older files may omit it: the length check still catches it
    path.write_text(json.dumps(d))
    with pytest.raises(ModelError, match="truncated"):
        TensilModel.load(path)


def test_not_json(tmp_path):
    p = tmp_path / "m.tmodel"
    p.write_bytes(b"\x00\x01garbage")
    with pytest.raises(ModelError, match="not a .tmodel JSON file"):
        TensilModel.load(p)


def test_invalid_model_is_not_saved(tmp_path):
    model, _, _ = make()
    model.outputs = [TensorEntry("y", (1 << 20) - 1, 4)]
    with pytest.raises(ModelError, match="does not fit DRAM0"):
        model.save(tmp_path / "out")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_tensor_layout_channel_blocks():
    x = np.arange(2 * 3 * 10).reshape(2, 3, 10)
    v = tensor_to_vectors(x, 8)
    assert v.shape == (2 * 3 * 2, 8) == (vectors_for_shape(x.shape, 8), 8)
    np.testing.assert_array_equal(v[0], x[0, 0, :8])  # channel block fastest
    np.testing.assert_array_equal(v[1], [8, 9, 0, 0, 0, 0, 0, 0])  # zero padded
    np.testing.assert_array_equal(v[2], x[0, 1, :8])
    np.testing.assert_array_equal(vectors_to_tensor(v, x.shape, 8), x)
    with pytest.raises(ModelError, match="do not hold a tensor of shape"):
        vectors_to_tensor(v[:-1], x.shape, 8)


def test_an_input_written_as_windows_survives_files_and_counts_saturation_once(tmp_path):
    """A model whose input the host writes as its first conv's windows: saved and loaded (and its
    partition through JSON) it still takes the input in its own shape; a value beyond the range
    is counted once, not once per window it falls in."""
    from tvm_tensil.compiler import Graph, Node, Tensor, compile_graph
    from tvm_tensil.partition import CompiledPartition

    rng = np.random.default_rng(3)
    w = rng.integers(-4, 4, (8, 3, 3, 3)) / 16
    g = Graph(
        {"x": Tensor("x", (1, 6, 6, 3)), "y": Tensor("y", (1, 6, 6, 8))},
        [Node("conv2d", ["x"], "y", dict(weight=0, padding=(1, 1, 1, 1)))],
        ["x"], ["y"], [w],
    )  # fmt: skip
    part = compile_graph(g, ARCH, "win")
    assert part.inputs["x"].patches is not None
    assert CompiledPartition.from_json(part.to_json()).inputs == part.inputs
    part.model(g.constants).save(tmp_path)
    model = TensilModel.load(tmp_path / "win.tmodel")
    x = rng.integers(-16, 16, (1, 6, 6, 3)) / 16
    x[0, 2, 2, 0] = 1000.0  # in 9 windows
    with pytest.warns(SaturationWarning, match="input 'x' has 1 values outside"):
        y = Emulator(ARCH).run_model(model, {"x": x})["y"]
    clipped = np.minimum(x, ARCH.data_type.max_float)
    padded = np.pad(clipped, ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = sum(padded[:, ky : ky + 6, kx : kx + 6] @ w[:, :, ky, kx].T for ky in range(3) for kx in range(3))
    np.testing.assert_allclose(y, want, atol=2**-8 * 27)
    with pytest.raises(ModelError, match="malformed 'patches'"):
        model.extras["inputs"]["x"]["patches"] = {"source": [1, 6, 6, 3]}
        model.patches("x")
