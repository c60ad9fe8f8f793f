"""Architecture files, presets, validation messages and derived values."""

import json

import pytest

from tvm_tensil.arch import BENCHMARK_PRESETS, PRESETS, TARCH_KEYS, Architecture, ArchitectureError, load_arch
from tvm_tensil.isa.layout import layout_of
from tvm_tensil.numbers import FP16BP8


def test_spec_presets_have_the_public_values():
    expect = {
        "pynqz1": (8, 1048576, 8192, 2048),
        "artya7100t": (8, 1048576, 8192, 2048),
        "ultra96v2": (16, 2097152, 20480, 4096),
        "zcu104": (32, 2097152, 16384, 4096),
    }
    for name, (n, dram, local, acc) in expect.items():
        a = PRESETS[name]
        assert (a.array_size, a.dram0_depth, a.dram1_depth, a.local_depth, a.accumulator_depth) == (
            n,
            dram,
            dram,
            local,
            acc,
        )
        assert a.data_type == FP16BP8 and a.simd_registers_depth == 1
        assert (a.stride0_depth, a.stride1_depth, a.number_of_threads, a.thread_queue_depth) == (8, 8, 1, 8)


def test_benchmark_presets_match_the_published_table():
    want = {"arty_a7_35": (8, 150), "pynqz1_12x12": (12, 150), "ultra96v2_300mhz": (16, 300)}
    assert set(BENCHMARK_PRESETS) == set(want)
    for name, (n, mhz) in want.items():
        a = PRESETS[name]
        assert (a.array_size, a.clock_mhz) == (n, mhz)
    # The depths were chosen to fit each board's block RAM (Arty A7-35: 50, Zynq-7020: 140, ZU3EG: 216).
    budget = {"arty_a7_35": 50, "pynqz1_12x12": 140, "ultra96v2_300mhz": 216}
    for name, brams in budget.items():
        assert PRESETS[name].bram36_estimate()["total"] <= brams


def test_benchmark_presets_fit_their_boards_ddr_and_resnet50_weights():
    ddr_mb = {"arty_a7_35": 256, "pynqz1_12x12": 512, "ultra96v2_300mhz": 2048}
    for name, mb in ddr_mb.items():
        a = PRESETS[name]
        assert (a.dram0_depth + a.dram1_depth) * a.vector_bytes <= mb * 2**20 // 2, name
        assert a.dram1_depth >= 3_700_000  # ResNet-50 v2's weights on an 8x8 array: 3.61 M vectors


def test_the_layout_table_in_the_docs_is_current():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "isa.md").read_text()
    for name, a in PRESETS.items():
        lay = layout_of(a)
        mb = (a.dram0_depth + a.dram1_depth) * a.vector_bytes / 2**20
        row = (
            f"| {name} | {a.array_size}x{a.array_size} | {a.local_depth} | {a.accumulator_depth} | "
            f"2^{a.dram0_depth.bit_length() - 1} | 2^{a.dram1_depth.bit_length() - 1} | "
            f"{lay.operand0_bits} / {lay.operand1_bits} / {lay.operand2_bits} | {lay.instruction_bytes} | {mb:g} MB |"
        )
        assert row in text, f"docs/isa.md: the layout row of {name} should read {row}"


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_round_trip(name, tmp_path):
    a = PRESETS[name]
    assert Architecture.from_dict(a.to_dict()) == a
    path = tmp_path / f"{name}.tarch"
    a.save(path)
    b = Architecture.load(path)
    assert b == a and b.clock_mhz == a.clock_mhz and b.board == a.board
    plain = a.to_dict(plain=True)
    # (an instruction set extension stays: a program using it cannot run without it)
    assert list(plain) == list(TARCH_KEYS) + (["tvm_tensil"] if a.window_matmul else [])
    assert Architecture.from_dict(plain) == a


def test_the_window_matmul_extension_stays_with_the_architecture(tmp_path):
    """An instruction set extension is part of the architecture: it tells archs apart and a model
    file's plain architecture keeps it (a program using it cannot run without it)."""
    a = PRESETS["pynqz1"].replace(window_matmul=True)
    assert a != PRESETS["pynqz1"]
    assert a.to_dict(plain=True)["tvm_tensil"] == {"window_matmul": True}
    assert Architecture.from_dict(a.to_dict(plain=True)) == a
    assert "tvm_tensil" not in PRESETS["pynqz1"].to_dict(plain=True)


def test_layout_pynqz1_and_wide_architectures():
    lay = layout_of(PRESETS["pynqz1"])
    assert (lay.operand0_bits, lay.operand1_bits, lay.operand2_bits, lay.instruction_bytes) == (16, 24, 16, 8)
    # ultra96v2: local 20480 -> 15 bits, dram 2^21 -> 21 bits.
    lay = layout_of(PRESETS["ultra96v2"])
    assert (lay.operand0_bits, lay.operand1_bits, lay.operand2_bits) == (24, 24, 16)
    a = PRESETS["pynqz1"].replace(data_type="FP32BP16", stride0_depth=4, stride1_depth=4, simd_registers_depth=4)
    assert a.vector_bytes == 32
    assert layout_of(a).simd_instruction_bits == 3 * 3 + 4
    assert layout_of(a).stride0_bits == 2


def _base():
    return PRESETS["pynqz1"].to_dict(plain=True)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"array_size": 300}, "key 'array_size': 300 is out of range; allowed: integers 2..256"),
        ({"array_size": "8"}, "key 'array_size': '8' is not an integer"),
        ({"array_size": 8.0}, "key 'array_size': 8.0 is not an integer"),
        (
            {"data_type": "FP16"},
            "key 'data_type': 'FP16' is not a data type; allowed: FP8BP4, FP16BP8, FP18BP10, FP32BP16",
        ),
        ({"local_depth": 1 << 17}, "key 'local_depth'"),
        ({"simd_registers_depth": 17}, "key 'simd_registers_depth'"),
        ({"number_of_threads": 2}, "multi-threaded TCUs are not supported"),
        ({"stride0_depth": 0}, "key 'stride0_depth'"),
        ({"array_sise": 8}, "unknown key 'array_sise'; did you mean 'array_size'?"),
        ({"tvm_tensil": {"clock": 1}}, "unknown key 'tvm_tensil.clock'"),
        ({"tvm_tensil": {"axi_data_width": 48}}, "axi_data_width"),
        ({"tvm_tensil": {"window_matmul": 1}}, "key 'tvm_tensil.window_matmul': 1 is not true or false"),
    ],
)
def test_invalid_values_name_the_key(change, message):
    d = _base()
    d.update(change)
    with pytest.raises(ArchitectureError) as e:
        Architecture.from_dict(d, source="my.tarch")
    assert message in str(e.value)
    assert str(e.value).startswith("my.tarch: ")


def test_missing_keys_are_listed(tmp_path):
    d = _base()
    del d["local_depth"], d["stride1_depth"]
    with pytest.raises(ArchitectureError, match="missing keys 'local_depth', 'stride1_depth'"):
        Architecture.from_dict(d)


def test_file_errors(tmp_path):
    bad = tmp_path / "bad.tarch"
    bad.write_text('{"data_type": "FP16BP8",\n "array_size": }')
    with pytest.raises(ArchitectureError, match=r"bad.tarch: not valid JSON \(line 2"):
        Architecture.load(bad)
    with pytest.raises(ArchitectureError, match="cannot read architecture file"):
        Architecture.load(tmp_path / "none.tarch")
    with pytest.raises(ArchitectureError, match="did you mean 'pynqz1'"):
        load_arch("pynq_z1")
    good = tmp_path / "mine.tarch"
    good.write_text(json.dumps(_base()))
    assert load_arch(str(good)).name == "mine"


def test_describe_shows_layout():
    text = layout_of(PRESETS["pynqz1"]).describe()
    assert "instruction          8 bytes" in text and "operand1             24 bits" in text
