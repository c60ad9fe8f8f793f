"""Yosys synth_xilinx on the whole core: no latches, no check problems, resources that make sense.

Mirrors python/tvm_tensil/rtl/synth.py. The presets' full table comes from
benchmarks/rtl_resources.py (minutes per preset); CI synthesises a small architecture.
"""

import pytest

from tvm_tensil.arch import PRESETS, Architecture
from tvm_tensil.cli import main
from tvm_tensil.rtl.synth import (
    SynthesisError,
    device_for_part,
    find_yosys,
    parse_stat,
    synthesis_key,
    synthesize,
)


def test_a_small_core_synthesises_clean_once(tmp_path, monkeypatch):
    monkeypatch.setenv("TVM_TENSIL_CACHE", str(tmp_path / "cache"))
    arch = Architecture("FP16BP8", 4, 256, 256, 256, 64, stride0_depth=4, stride1_depth=4, name="small")
    res = synthesize(arch, workdir=tmp_path / "work", cache=True)  # raises on latches or check problems
    assert res.dsp >= 4 * 4, "every MAC of the array maps to a DSP"
    assert res.bram36 >= 1, "local memory maps to block RAM"
    assert res.lut > 0 and res.ff > 0
    assert "End of script" in (tmp_path / "work" / "synth.log").read_text()  # the log is kept in workdir
    # The same core again comes from the cache: no Yosys needed.
    monkeypatch.setenv("PATH", "/nonexistent")
    assert synthesize(arch.replace(name="renamed"), cache=True) == res
    (tmp_path / "small.tarch").write_text(arch.to_json())  # `tvm-tensil synth` shares the sweeps' cache
    assert main(["synth", "--arch", str(tmp_path / "small.tarch")]) == 0
    with pytest.raises(SynthesisError, match="Yosys was not found"):  # a new core is synthesised
        synthesize(arch.replace(local_depth=512), cache=True)


def test_the_synthesis_key_follows_the_core_and_the_family():
    arch = PRESETS["pynqz1"]
    key = synthesis_key(arch, "xc7")
    assert synthesis_key(arch.replace(name="x", clock_mhz=100), "xc7") == key  # not part of the core
    assert synthesis_key(arch, "xcup") != key
    assert synthesis_key(arch.replace(array_size=4), "xc7") != key
    assert synthesis_key(arch.replace(accumulator_depth=1024), "xc7") != key


@pytest.mark.parametrize("preset", ["pynqz1", "ultra96v2"])
def test_presets_synthesise_clean(preset, tmp_path, full):
    if not full:
        pytest.skip("long: minutes per preset; run with --full (or benchmarks/rtl_resources.py)")
    res = synthesize(PRESETS[preset], workdir=tmp_path)
    util = res.utilisation(device_for_part(PRESETS[preset].part))
    assert all(v <= 1 for v in util.values()), util


def test_parse_stat_counts_resources_and_latches():
    log = """
   Number of cells:                 12
     CARRY4                          3
     DSP48E1                         2
     FDRE                           10
     FDSE                            1
     LDCE                            1
     LUT2                            4
     LUT6                            5
     RAM32M                          2
     RAMB18E1                        1
     RAMB36E1                        2

   Estimated number of LCs:         9
Found and reported 0 problems.
"""
    r = parse_stat(log)
    assert (r.lut, r.lut_ram, r.ff, r.dsp, r.bram36, r.carry, r.latches) == (9, 8, 11, 2, 2.5, 3, 1)


def test_presets_name_known_parts():
    for name, arch in PRESETS.items():
        assert device_for_part(arch.part) is not None, name
    assert device_for_part("xc7z020clg400-1").family == "xc7"
    assert device_for_part("xczu3eg-sbva484-1-i").family == "xcup"
    assert device_for_part("lfe5u-25f") is None


def test_missing_yosys_says_how_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SynthesisError, match="apt-get install yosys"):
        find_yosys()


def test_a_killed_yosys_is_named_as_such(tmp_path, monkeypatch):
    """The kernel's out-of-memory killer ends Yosys with SIGKILL and no message of its own."""
    fake = tmp_path / "bin" / "yosys"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nkill -9 $$\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    arch = Architecture("FP16BP8", 4, 256, 256, 256, 64, stride0_depth=4, stride1_depth=4, name="small")
    with pytest.raises(SynthesisError, match="killed by signal 9 .*out of memory"):
        synthesize(arch, workdir=tmp_path / "work")
