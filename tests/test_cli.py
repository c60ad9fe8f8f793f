"""The tvm-tensil command line, run as a user would (subprocess for one, main() for speed)."""

import subprocess
import sys

import numpy as np
import pytest

from helpers import dense_relu_model
from tvm_tensil.arch import PRESETS
from tvm_tensil.cli import main


def test_arch(capsys):
    assert main(["arch", "pynqz1"]) == 0
    out = capsys.readouterr().out
    assert "instruction          8 bytes" in out and "operand2             16 bits" in out
    assert main(["arch", "--list"]) == 0
    rows = {line.split()[0]: line.split(maxsplit=1)[1] for line in capsys.readouterr().out.splitlines()[1:]}
    assert set(rows) == set(PRESETS)
    assert len(set(rows.values())) == len(rows)  # no two presets look alike (ultra96v2's DRAM1 differs)
    assert main(["arch", "pynqz1", "--json", "--plain"]) == 0
    assert '"tvm_tensil"' not in capsys.readouterr().out


def test_asm_disasm_round_trip(tmp_path, capsys):
    src = tmp_path / "p.tasm"
    src.write_text("loadweights local=0x10 size=9\nmatmul accumulate local=0x100 acc=0x20 size=8\n")
    assert main(["asm", str(src), "--arch", "pynqz1", "-o", str(tmp_path / "p.tprog")]) == 0
    assert (tmp_path / "p.tprog").read_bytes()[8:] == bytes.fromhex("0001200000070011")
    capsys.readouterr()
    assert main(["disasm", str(tmp_path / "p.tprog"), "--arch", "pynqz1"]) == 0
    assert capsys.readouterr().out == (
        "loadweights local=0x0010 size=9\nmatmul accumulate local=0x0100 acc=0x0020 size=8\n"
    )


def test_errors_are_one_line_with_exit_2(tmp_path, capsys):
    src = tmp_path / "p.tasm"
    src.write_text("noop\nmatmul local=0x2000 acc=0 size=1\n")
    assert main(["asm", str(src), "--arch", "pynqz1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tvm-tensil: error: line 2: pc 1: MatMul: field 'local'")
    assert main(["arch", "pynq"]) == 2
    assert "unknown architecture 'pynq'" in capsys.readouterr().err
    assert main(["disasm", str(src)]) == 2
    assert "give --arch" in capsys.readouterr().err


def test_emulate_subprocess(tmp_path):
    rng = np.random.default_rng(0)
    w, b = rng.integers(-16, 16, (8, 8)) / 16, rng.integers(-16, 16, 8) / 16
    model = dense_relu_model(PRESETS["pynqz1"], w, b, 3)
    path = model.save(tmp_path / "m")
    x = rng.integers(-32, 32, (3, 8)) / 16
    np.save(tmp_path / "x.npy", x)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "tvm_tensil.cli",
            "emulate",
            str(path),
            "--input",
            str(tmp_path / "x.npy"),
            "-o",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert "saturated scalars: 0" in r.stdout
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), np.maximum(x @ w + b, 0))
    bad = subprocess.run(
        [sys.executable, "-m", "tvm_tensil.cli", "emulate", str(path), "--input", "x=/nonexistent.npy"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "cannot load input 'x'" in bad.stderr


def test_version_and_python_m(tmp_path):
    """``python -m tvm_tensil`` is the command; ``--version`` is the installed distribution's."""
    from importlib.metadata import version

    r = subprocess.run(
        [sys.executable, "-m", "tvm_tensil", "--version"], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert r.returncode == 0 and r.stdout.strip() == f"tvm-tensil {version('tvm-tensil')}"
    r = subprocess.run(
        [sys.executable, "-m", "tvm_tensil", "arch", "pynqz1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert r.returncode == 0 and "pynqz1" in r.stdout


def test_every_command_shows_examples_and_the_devices():
    from tvm_tensil.cli import build_parser
    from tvm_tensil.runtime import DEVICES

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for name, sub in commands.items():
        text = sub.format_help()
        assert "examples:" in text and f"tvm-tensil {name}" in text, name
        if any("--device" in a.option_strings for a in sub._actions):
            assert all(device in text for device in DEVICES), name
    assert "examples:" in parser.format_help()


def test_an_unknown_device_lists_the_devices(capsys):
    with pytest.raises(SystemExit) as e:
        main(["emulate", "m.tmodel", "--device", "simboard"])
    assert e.value.code == 2
    assert "invalid choice: 'simboard'" in capsys.readouterr().err


def test_socket_is_only_for_the_simulated_board(tmp_path, capsys):
    path = dense_relu_model(PRESETS["pynqz1"], np.eye(8), np.zeros(8), 1).save(tmp_path)
    assert main(["emulate", str(path), "--socket", "/tmp/s.sock"]) == 2
    assert "--socket is for --device sim-board" in capsys.readouterr().err


def test_readable_statistics():
    from tvm_tensil.runtime import Emulator

    dev = Emulator(PRESETS["pynqz1"])
    model = dense_relu_model(PRESETS["pynqz1"], np.eye(8), np.zeros(8), 2)
    dev.run_model(model, {"x": np.ones((2, 8))})
    table = str(dev.last_stats)
    lines = table.splitlines()
    assert lines[1].split() == ["opcode", "instructions", "vectors", "saturated"]
    assert any(line.split()[0] == "matmul" for line in lines[2:-1])
    assert lines[-1].strip() == "saturated scalars: 0"


def test_sweep_command(tmp_path, capsys):
    import json

    from tvm_tensil import zoo

    model = tmp_path / "cnn.onnx"
    model.write_bytes(zoo.small_cnn().SerializeToString())
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"parameters": {"array_size": [4, 8]}, "synthesis": False}))
    # A subprocess, as a user runs it: the pool's spawned workers start from the command's own main.
    r = subprocess.run(
        [sys.executable, "-m", "tvm_tensil", "sweep", str(model), "--space", str(space), "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert "2 points: 2 ok" in r.stdout and "results.csv" in r.stdout
    space.write_text(json.dumps({"parameters": {"array_sise": [4]}}))
    assert main(["sweep", str(model), "--space", str(space), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tvm-tensil: error:") and "'parameters.array_sise' is not a parameter" in err
    assert len(err.strip().splitlines()) == 1
    space.write_text(json.dumps({"parameters": {"array_size": [4]}}))
    assert main(["sweep", str(tmp_path / "none.onnx"), "--space", str(space), "-o", str(tmp_path / "o2")]) == 2
    assert "no such file" in capsys.readouterr().err
