"""Whole sweeps: on the local pool and on Ray with the same results, resumed, refused, with synthesis.

Mirrors python/tvm_tensil/sweep/__init__.py.
"""

import json
import subprocess
import sys

import onnx
import pytest

from tvm_tensil import zoo
from tvm_tensil.sweep import COLUMNS, LocalRunner, SweepError, sweep

TIMINGS = ("compile_seconds", "synthesis_seconds")
LATENCY_ONLY = {
    "base": "pynqz1",
    "parameters": {"array_size": [4, 8, 1000], "local_depth": [8192, 3]},
    "synthesis": False,
    "rtl": False,
}


def _without_timings(rows):
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in rows]


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "cnn.onnx"
    onnx.save(zoo.small_cnn(), path)
    return path


@pytest.fixture(scope="module")
def local(cnn, tmp_path_factory):
    return sweep(cnn, LATENCY_ONLY, tmp_path_factory.mktemp("local"), jobs=2)


def test_a_latency_sweep_records_every_point(local):
    status = [(r["array_size"], r["local_depth"], r["status"]) for r in local.rows]
    assert status == [
        (4, 8192, "ok"),
        (4, 3, "not_offloaded"),
        (8, 8192, "ok"),
        (8, 3, "not_offloaded"),
        (1000, 8192, "invalid"),
        (1000, 3, "invalid"),
    ]
    ok = [r for r in local.rows if r["status"] == "ok"]
    assert ok[0]["cycles"] > ok[1]["cycles"] > 0, "an 8x8 array runs the CNN in fewer cycles than a 4x4"
    assert all(r["lut"] is None and not r["pareto"] for r in local.rows)  # no synthesis: no front
    csv_header = local.csv.read_text().splitlines()[0]
    assert csv_header == ",".join(COLUMNS) and len(json.loads(local.json.read_text())["rows"]) == 6


def test_a_sweep_run_again_resumes(local, cnn, monkeypatch):
    def nothing_to_run(self, fn, tasks):
        assert not tasks, f"points done before ran again: {tasks}"
        return iter(())

    monkeypatch.setattr(LocalRunner, "run", nothing_to_run)
    again = sweep(cnn, LATENCY_ONLY, local.out_dir, jobs=2)
    assert _without_timings(again.rows) == _without_timings(local.rows)


def test_bad_models_and_folders_are_refused(local, tmp_path):
    other = tmp_path / "mlp.onnx"
    onnx.save(zoo.mlp(), other)
    with pytest.raises(SweepError, match="holds a sweep of another model"):
        sweep(other, LATENCY_ONLY, local.out_dir)
    with pytest.raises(SweepError, match="no such file"):
        sweep(tmp_path / "missing.onnx", LATENCY_ONLY, tmp_path / "out")
    (tmp_path / "text.onnx").write_text("not a model")
    with pytest.raises(SweepError, match="not an ONNX model"):
        sweep(tmp_path / "text.onnx", LATENCY_ONLY, tmp_path / "out")
    with pytest.raises(SweepError, match="cannot make the output folder"):
        sweep(other, LATENCY_ONLY, tmp_path / "text.onnx")


def test_the_same_sweep_on_a_local_ray_instance_gives_the_same_results(local, cnn, tmp_path):
    ray = pytest.importorskip("ray")  # a dev dependency: this skips only in a hand-made environment
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        on_ray = sweep(cnn, LATENCY_ONLY, tmp_path / "ray", ray=True)
    finally:
        ray.shutdown()
    assert _without_timings(on_ray.rows) == _without_timings(local.rows)


def _synthesis_sweep(cnn, out, sizes, parts):
    space = {"base": "pynqz1", "parameters": {"array_size": sizes, "part": parts}, "time_limit": 1800}
    result = sweep(cnn, space, out, jobs=2)
    assert all(r["status"] == "ok" for r in result.rows), [r["error"] for r in result.rows]
    for r in result.rows:
        assert r["dsp"] >= r["array_size"] ** 2 and r["lut"] > 0 and r["fits"] is True
    for r in result.pareto:  # confirmed on the Verilated RTL: the latency model within 1%
        assert r["rtl_cycles"] and abs(r["rtl_vs_model_pct"]) < 1, r
    assert result.plot.exists()
    return result


def test_a_synthesis_point_is_confirmed_on_the_rtl(cnn, tmp_path):
    result = _synthesis_sweep(cnn, tmp_path, [4], ["xc7z020clg400-1"])
    assert [r["pareto"] for r in result.rows] == [True]


def test_a_front_per_part(cnn, tmp_path, full):
    if not full:
        pytest.skip("long: four syntheses; run with --full")
    result = _synthesis_sweep(cnn, tmp_path, [4, 8], ["xc7z020clg400-1", "xczu3eg-sbva484-1-i"])
    for part in ("xc7z020clg400-1", "xczu3eg-sbva484-1-i"):
        mine = [r for r in result.rows if r["part"] == part]
        assert [r["pareto"] for r in mine] == [True, True], "a bigger array is faster and bigger on each part"


def test_a_script_without_a_main_guard_is_told_why(cnn, tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from tvm_tensil.sweep import sweep\n"
        f"sweep({str(cnn)!r}, {{'parameters': {{'array_size': [4]}}, 'synthesis': False}}, {str(tmp_path / 'o')!r})\n"
    )
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    # Said by the script's own process, before any worker starts: one error, no points run.
    assert r.returncode != 0 and r.stderr.count("SweepError: unguarded.py:2 starts a sweep outside") == 1
    assert not (tmp_path / "o" / "points.jsonl").exists()


def test_a_guarded_script_runs_its_sweep(cnn, tmp_path):
    script = tmp_path / "guarded.py"
    script.write_text(
        "from tvm_tensil.sweep import sweep\n\n\n"
        "def main():\n"
        f"    sweep({str(cnn)!r}, {{'parameters': {{'array_size': [4]}}, 'synthesis': False}}, {str(tmp_path / 'o')!r},"
        " jobs=1)\n\n\n"
        "if '__main__' == __name__:\n"
        "    main()\n"
    )
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((tmp_path / "o" / "results.json").read_text())["rows"][0]["status"] == "ok"


def test_one_rtl_run_per_distinct_core():
    from tvm_tensil.arch import PRESETS
    from tvm_tensil.sweep import _core_key

    base = PRESETS["pynqz1"]
    same_core = [base, base.replace(part="xczu3eg-sbva484-1-i", name="x"), base.replace(clock_mhz=300)]
    assert len({_core_key(a.to_dict()) for a in same_core}) == 1
    other_cores = [
        base,
        base.replace(dram0_depth=1 << 16),
        base.replace(axi_data_width=128),
        base.replace(array_size=4),
    ]
    assert len({_core_key(a.to_dict()) for a in other_cores}) == 4


def test_every_swept_parameter_is_a_column(cnn, tmp_path):
    space = {"parameters": {"stride0_depth": [4, 8]}, "synthesis": False, "rtl": False}
    rows = sweep(cnn, space, tmp_path, jobs=1).rows
    assert [r["stride0_depth"] for r in rows] == [4, 8] and all(r["status"] == "ok" for r in rows)
    assert "stride0_depth" in (tmp_path / "results.csv").read_text().splitlines()[0].split(",")


def test_a_latency_only_sweep_needs_no_matplotlib(cnn, tmp_path, monkeypatch):
    """Without synthesis there is no plot: a sweep runs where matplotlib is not installed."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # importing it fails
    space = {"parameters": {"array_size": [4]}, "synthesis": False, "rtl": False}
    result = sweep(cnn, space, tmp_path / "latency", jobs=1)
    assert [r["status"] for r in result.rows] == ["ok"] and result.plot is None
    with pytest.raises(SweepError, match=r"matplotlib.*\"synthesis\": false"):
        sweep(cnn, {"parameters": {"array_size": [4]}}, tmp_path / "synth")


def test_no_yosys_is_said_before_any_point_runs(cnn, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SweepError, match=r"apt-get install yosys.*\"synthesis\": false"):
        sweep(cnn, {"parameters": {"array_size": [4]}}, tmp_path)
    assert not (tmp_path / "points.jsonl").exists()
