"""The whole core is `verilator --lint-only -Wall` clean for the shipped presets (parameters
generated from each .tarch, as a build would)."""

import subprocess

import pytest

from tvm_tensil.arch import PRESETS
from tvm_tensil.rtl import rtl_sources, top_parameters
from tvm_tensil.rtl.toolchain import verilator_env


@pytest.mark.parametrize("preset", ["pynqz1", "ultra96v2", "pynqz1_12x12"])
def test_core_lints_clean(preset):
    args = [f"-G{k}={v}" for k, v in top_parameters(PRESETS[preset]).items()]
    r = subprocess.run(
        ["verilator", "--lint-only", "-Wall", "--top-module", "tcu_top", *args, *map(str, rtl_sources())],
        capture_output=True,
        text=True,
        env=verilator_env(),
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    assert "%Warning" not in r.stderr


def test_an_illegal_configuration_fails_at_elaboration():
    """A vector that is not a whole number of AXI beats stops elaboration with a message."""
    params = top_parameters(PRESETS["pynqz1"].replace(array_size=2), axi_data_width=128)
    args = [f"-G{k}={v}" for k, v in params.items()]
    r = subprocess.run(
        ["verilator", "--lint-only", "--top-module", "tcu_top", *args, *map(str, rtl_sources())],
        capture_output=True,
        text=True,
        env=verilator_env(),
        timeout=600,
    )
    assert r.returncode != 0 and "whole number of AXI beats" in r.stderr
