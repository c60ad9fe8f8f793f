"""Device selection: the context manager, the environment variable, clear errors."""

import pytest

import tvm_tensil
from tvm_tensil.runtime import DeviceError, Emulator, current_device_name, get_device


def test_default_is_emulator(monkeypatch):
    monkeypatch.delenv("TVM_TENSIL_DEVICE", raising=False)
    assert current_device_name() == "emulator"
    assert isinstance(get_device(arch="pynqz1"), Emulator)


def test_context_manager_and_env(monkeypatch):
    monkeypatch.setenv("TVM_TENSIL_DEVICE", "emulator")
    with tvm_tensil.device("emulator"):
        assert current_device_name() == "emulator"
    monkeypatch.setenv("TVM_TENSIL_DEVICE", "emulatr")
    with pytest.raises(DeviceError, match="unknown device 'emulatr'; did you mean 'emulator'"):
        current_device_name()


def test_unknown_device():
    with pytest.raises(DeviceError, match="Available devices: emulator"):
        with tvm_tensil.device("fpga"):
            pass
