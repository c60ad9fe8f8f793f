"""tvm-tensil compile / run / emulate on an ONNX model, as a user runs them."""

import json
import subprocess
import sys

import numpy as np
import onnx
import zoo


def cli(*args, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "tvm_tensil.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def test_compile_run_and_emulate_the_model_files(tmp_path):
    onnx.save(zoo.mlp(batch=2), tmp_path / "mlp.onnx")
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = cli("compile", str(tmp_path / "mlp.onnx"), "--arch", "ultra96v2", "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "on the CPU: nothing" in r.stdout
    out = tmp_path / "out"
    assert (out / "mlp.so").exists() and (out / "report.json").exists()
    r = cli("run", str(out / "mlp.so"), "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npy"))
    assert r.returncode == 0, r.stderr[-3000:]
    y = np.load(tmp_path / "y.npy")
    # The partition's own model files run with the foundation's emulator command too.
    tmodel = next(out.glob("*.tmodel"))
    inputs = [e["name"] for e in json.loads(tmodel.read_text())["inputs"]]
    np.save(tmp_path / "xi.npy", x[None, None])  # the partition's internal layout: (1, 1, B, K)
    r = cli("emulate", str(tmodel), "--input", f"{inputs[0]}={tmp_path / 'xi.npy'}", "-o", str(tmp_path / "em"))
    assert r.returncode == 0, r.stderr[-3000:]
    em = np.load(next((tmp_path / "em").glob("*.npy")))
    np.testing.assert_array_equal(em.reshape(y.shape), y)


def test_compile_errors_are_one_line(tmp_path):
    (tmp_path / "bad.onnx").write_bytes(b"not an onnx file")
    r = cli("compile", str(tmp_path / "bad.onnx"))
    assert r.returncode == 2 and r.stderr.startswith("tvm-tensil: error: cannot read ONNX model")
    onnx.save(zoo.mlp(), tmp_path / "m.onnx")
    r = cli("compile", str(tmp_path / "m.onnx"), "--arch", "nosuch")
    assert r.returncode == 2 and "unknown architecture 'nosuch'" in r.stderr
    r = cli("run", str(tmp_path / "missing.so"))
    assert r.returncode == 2 and "no compiled model" in r.stderr


def test_run_on_the_rtl_device_prints_cycles_and_latency(tmp_path):
    onnx.save(zoo.mlp(batch=2), tmp_path / "mlp.onnx")
    np.save(tmp_path / "x.npy", np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32))
    r = cli("compile", str(tmp_path / "mlp.onnx"), "--arch", "pynqz1", "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr[-3000:]
    outs = {}
    for dev in ("emulator", "verilator"):
        r = cli(
            "run",
            str(tmp_path / "out" / "mlp.so"),
            "--input",
            str(tmp_path / "x.npy"),
            "--device",
            dev,
            "-o",
            str(tmp_path / f"{dev}.npy"),
        )
        assert r.returncode == 0, r.stderr[-3000:]
        outs[dev] = np.load(tmp_path / f"{dev}.npy")
    assert " cycles = " in r.stdout and "ms at 150 MHz" in r.stdout, r.stdout
    np.testing.assert_array_equal(outs["emulator"], outs["verilator"])


def _one_line_error(r, *fragments):
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert r.stderr.startswith("tvm-tensil: error: ") and "Traceback" not in r.stderr, r.stderr[-2000:]
    line = r.stderr.strip().splitlines()[-1]
    for fragment in fragments:
        assert fragment in line, line


def test_run_and_emulate_input_errors_are_one_line(tmp_path):
    onnx.save(zoo.mlp(batch=2), tmp_path / "mlp.onnx")
    r = cli("compile", str(tmp_path / "mlp.onnx"), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr[-3000:]
    lib = str(tmp_path / "out" / "mlp.so")
    np.save(tmp_path / "wrong.npy", np.zeros((64, 2), np.float32))
    np.save(tmp_path / "text.npy", np.array(["a", "b"]))
    _one_line_error(cli("run", lib), "0 input(s) given", "takes 1 input(s) (x)")
    _one_line_error(cli("run", lib, "-i", str(tmp_path / "wrong.npy")), "input 'x' has shape (64, 2)", "(2, 64)")
    _one_line_error(cli("run", lib, "-i", f"y={tmp_path / 'wrong.npy'}"), "no input named 'y'")
    _one_line_error(cli("run", lib, "-i", str(tmp_path / "text.npy")), "holds <U1 values, not numbers")
    _one_line_error(cli("run", str(tmp_path / "mlp.onnx")), "cannot load", "as a compiled model")
    tmodel = str(next((tmp_path / "out").glob("*.tmodel")))
    _one_line_error(cli("emulate", tmodel, "-i", str(tmp_path / "text.npy")), "holds <U1 values, not numbers")


def test_tensil_style_options_get_a_hint(tmp_path):
    r = cli("compile", "-a", "pynqz1", "-m", str(tmp_path / "m.onnx"))
    assert r.returncode == 2
    assert "Tensil's -a is --arch ARCH, -m is the model as the first argument" in r.stderr.splitlines()[-1]


def test_a_model_the_importer_cannot_take_is_one_line(tmp_path):
    from onnx import TensorProto, helper

    node = helper.make_node("NoSuchOp", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "odd.onnx")
    _one_line_error(cli("compile", str(tmp_path / "odd.onnx"), "-o", str(tmp_path / "out")), "cannot import")


def test_model_files_carry_the_onnx_names_and_layout(tmp_path):
    """The .tmodel's tensors are named as in the ONNX model (outputs: output, output_1, ...) and
    record the NCHW shape; emulate takes and writes NCHW, and agrees with the library bit for bit."""
    from tvm_tensil.model import TensilModel

    onnx.save(zoo.small_cnn(softmax=False), tmp_path / "cnn.onnx")
    r = cli("compile", str(tmp_path / "cnn.onnx"), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "dense -> output:" in r.stdout  # the report calls the Gemm a dense layer
    (path,) = (tmp_path / "out").glob("*.tmodel")
    model = TensilModel.load(path)
    assert model.input_names() == ["x"] and model.output_names() == ["output"]
    assert model.user_shape("x") == (1, 3, 16, 16) and model.tensor_shape("x") == (1, 16, 16, 3)
    assert model.user_shape("output", outputs=True) == (1, 10)
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = cli("emulate", str(path), "-i", str(tmp_path / "x.npy"), "-o", str(tmp_path / "em"))
    assert r.returncode == 0, r.stderr[-3000:]
    r = cli("run", str(tmp_path / "out" / "cnn.so"), "-i", str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npy"))
    assert r.returncode == 0, r.stderr[-3000:]
    em, y = np.load(tmp_path / "em" / "output.npy"), np.load(tmp_path / "y.npy")
    assert em.shape == y.shape == (1, 10)
    np.testing.assert_array_equal(em.astype(np.float32), y)


def test_run_and_emulate_reach_a_running_simulated_board(tmp_path):
    """After `tvm-tensil serve --socket S`, run and emulate with --socket S use that server (its log
    names each client and its runs), and give the emulator's numbers."""
    import os
    import time

    onnx.save(zoo.mlp(batch=2), tmp_path / "mlp.onnx")
    r = cli("compile", str(tmp_path / "mlp.onnx"), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr[-3000:]
    np.save(tmp_path / "x.npy", np.random.default_rng(5).standard_normal((2, 64)).astype(np.float32))
    sock = str(tmp_path / "board.sock")
    with open(tmp_path / "server.log", "w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "tvm_tensil.cli", "serve", "--arch", "pynqz1", "--socket", sock], stderr=log
        )
    try:
        deadline = time.monotonic() + 300
        while not os.path.exists(sock):
            assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "server.log").read_text()
            time.sleep(0.05)
        lib, x = str(tmp_path / "out" / "mlp.so"), str(tmp_path / "x.npy")
        for device, output in (("sim-board", "board.npy"), ("emulator", "emulator.npy")):
            extra = ["--socket", sock] if device == "sim-board" else []
            r = cli("run", lib, "-i", x, "--device", device, *extra, "-o", str(tmp_path / output))
            assert r.returncode == 0, r.stderr[-3000:]
        tmodel = str(next((tmp_path / "out").glob("*.tmodel")))
        r = cli("emulate", tmodel, "-i", x, "--device", "sim-board", "--socket", sock, "-o", str(tmp_path / "em"))
        assert r.returncode == 0, r.stderr[-3000:]
    finally:
        server.terminate()
        server.wait(30)
    np.testing.assert_array_equal(np.load(tmp_path / "board.npy"), np.load(tmp_path / "emulator.npy"))
    log = (tmp_path / "server.log").read_text()
    for client in (1, 2):
        assert f"client {client} connected (pid" in log and f"client {client} left after 1 run(s)" in log, log


def test_a_closed_pipe_and_ctrl_c_end_quietly(tmp_path):
    """Output into a closed pipe (`tvm-tensil ... | head` after head is done) and Ctrl-C during a
    compile: no traceback; the exit codes shells expect (141, 130)."""
    import os
    import signal
    import threading
    import time

    cmd = [sys.executable, "-m", "tvm_tensil.cli"]
    closed = subprocess.Popen([*cmd, "arch", "--list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    closed.stdout.close()  # the reader is gone before the first line
    assert closed.wait(timeout=600) == 141
    assert closed.stderr.read() == b""
    onnx.save(zoo.resnet50v2(), tmp_path / "r50.onnx")
    # As a shell starts a foreground command: Ctrl-C not ignored. (A command started ignoring it, as a
    # shell's background job is, keeps ignoring it; so would this one if the test's own process had
    # come to ignore it.)
    inherited = signal.getsignal(signal.SIGINT)
    compile_ = subprocess.Popen(
        [*cmd, "compile", str(tmp_path / "r50.onnx"), "--arch", "ultra96v2_300mhz", "-o", str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, TVM_TENSIL_PROGRESS="1"),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    # Ctrl-C once the build is compiling (its progress bar shows), however long the imports took
    # under load.
    chunks: list[bytes] = []

    def read_stderr():
        while chunk := compile_.stderr.read1(4096):
            chunks.append(chunk)

    reader = threading.Thread(target=read_stderr)
    reader.start()
    deadline = time.monotonic() + 600
    while b"tvm_tensil: compiling" not in b"".join(chunks) and time.monotonic() < deadline:
        assert compile_.poll() is None, b"".join(chunks)[-3000:]
        time.sleep(0.2)
    compile_.send_signal(signal.SIGINT)
    compile_.wait(timeout=120)  # promptly: not after the rest of the build
    reader.join()
    err = b"".join(chunks)
    assert compile_.returncode == 130, (inherited, err[-3000:])
    assert b"Traceback" not in err and not (tmp_path / "out" / "r50.so").exists()


def test_compile_without_a_cxx_compiler_is_one_line(tmp_path):
    import os

    onnx.save(zoo.mlp(batch=2), tmp_path / "mlp.onnx")
    env = dict(os.environ, CXX="/nonexistent/g++")
    r = subprocess.run(
        [sys.executable, "-m", "tvm_tensil.cli", "compile", str(tmp_path / "mlp.onnx"), "-o", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "needs a C++ compiler" in r.stderr and not (tmp_path / "out" / "mlp.so").exists()


def test_an_onnx_input_is_given_by_its_onnx_name(tmp_path):
    """ONNX's "input.1" is the parameter input_1 after TVM's import; both names are accepted."""
    model = zoo.mlp(batch=2)
    old = model.graph.input[0].name
    for node in model.graph.node:
        node.input[:] = ["input.1" if i == old else i for i in node.input]
    model.graph.input[0].name = "input.1"
    onnx.save(model, tmp_path / "dot.onnx")
    np.save(tmp_path / "x.npy", np.zeros((2, 64), np.float32))
    assert cli("compile", str(tmp_path / "dot.onnx"), "-o", str(tmp_path / "out")).returncode == 0
    for name in ("input.1", "input_1"):
        r = cli("run", str(tmp_path / "out" / "dot.so"), "--input", f"{name}={tmp_path / 'x.npy'}")
        assert r.returncode == 0 and "output 0: (2, 10)" in r.stdout, r.stderr[-2000:]
    r = cli("run", str(tmp_path / "out" / "dot.so"), "--input", f"inp.1={tmp_path / 'x.npy'}")
    assert r.returncode == 2 and "no input named 'inp.1'" in r.stderr and "(input_1)" in r.stderr


def test_a_device_failing_inside_the_model_is_a_device_error(tmp_path):
    """A missing sim-board server is the device's failure, not the inputs': its own message and
    exit code 3 (bad inputs exit 2)."""
    onnx.save(zoo.mlp(batch=2), tmp_path / "mlp.onnx")
    np.save(tmp_path / "x.npy", np.zeros((2, 64), np.float32))
    assert cli("compile", str(tmp_path / "mlp.onnx"), "-o", str(tmp_path / "out")).returncode == 0
    sock = tmp_path / "nobody.sock"
    r = cli("run", str(tmp_path / "out" / "mlp.so"), "-i", str(tmp_path / "x.npy"), "--device", "sim-board",
            "--socket", str(sock))  # fmt: skip
    assert r.returncode == 3, (r.returncode, r.stderr[-2000:])
    assert r.stderr.count("\n") == 1 and str(sock) in r.stderr and "rejected its inputs" not in r.stderr


def test_run_saves_every_output_of_a_model_with_several(tmp_path):
    """A model with two outputs (TVM returns them as an Array): one .npy each, as computed in process."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    import tvm_tensil

    b = zoo.OnnxBuilder(seed=12)
    c = b.conv("x", 4, 8, bias=True)
    model = b.model({"x": [1, 4, 6, 6]}, [b.op("Relu", [c]), b.op("Sigmoid", [c])])
    x = np.random.default_rng(12).standard_normal((1, 4, 6, 6)).astype(np.float32)
    ex = tvm_tensil.build(from_onnx(model, keep_params_in_input=False), target="tensil")
    ex.export_library(str(tmp_path / "two.so"))
    want = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x))
    np.save(tmp_path / "x.npy", x)
    r = cli("run", str(tmp_path / "two.so"), "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npy"))
    assert r.returncode == 0, r.stderr[-3000:]
    for i in range(2):
        np.testing.assert_array_equal(np.load(tmp_path / f"y.{i}.npy"), want[i].numpy())
