"""Pareto fronts, the stable columns, resuming from points.jsonl.

Mirrors python/tvm_tensil/sweep/results.py.
"""

import csv
import json

from tvm_tensil.sweep.results import COLUMNS, append_row, comparable, pareto_front, plot, read_done, write_tables


def _row(ms, lut, status="ok", fits=True, cpu_ops=1, **kw):
    return {"status": status, "ms": ms, "lut": lut, "dsp": kw.pop("dsp", None), "fits": fits, "cpu_ops": cpu_ops} | kw


def test_pareto_front_of_a_hand_made_set():
    rows = [
        _row(10.0, 100),  # 0: cheapest
        _row(5.0, 200),  # 1: front
        _row(6.0, 300),  # 2: beaten by 1 (slower and bigger)
        _row(5.0, 250),  # 3: beaten by 1 (as fast, bigger)
        _row(2.0, 400),  # 4: fastest that fits
        _row(1.0, 900, fits=False),  # 5: faster, but does not fit its part
        _row(None, 50, status="synthesis_error"),  # 6: failed
        _row(0.5, 80, cpu_ops=3),  # 7: leaves more ops on the CPU: its latency does not compare
        _row(10.0, 100),  # 8: ties 0 exactly: neither beats the other
        _row(3.0, None),  # 9: no resource figure
    ]
    assert pareto_front(rows, "lut") == [0, 1, 4, 8]
    assert comparable(rows) == [0, 1, 2, 3, 4, 5, 8, 9]
    rows_dsp = [_row(4.0, 1, dsp=20), _row(3.0, 1, dsp=20), _row(1.0, 1, dsp=80)]
    assert pareto_front(rows_dsp, "dsp") == [1, 2]
    assert pareto_front([], "lut") == []


def test_resume_reads_the_last_line_of_a_point_and_skips_a_torn_line(tmp_path):
    path = tmp_path / "points.jsonl"
    append_row(path, {"point": "a", "status": "timeout"})
    append_row(path, {"point": "b", "status": "ok"})
    append_row(path, {"point": "a", "status": "ok", "cycles": 7})
    with open(path, "a") as f:
        f.write('{"point": "c", "sta')  # a run killed mid-write
    done = read_done(path)
    assert set(done) == {"a", "b"} and done["a"]["cycles"] == 7


def test_tables_have_every_column_in_order_and_the_plot_is_written(tmp_path):
    rows = [
        _row(2.0, 100, point="p1", part="xc7z020clg400-1", array_size=4, pareto=True),
        _row(1.0, 300, point="p2", part="xc7z020clg400-1", array_size=8, pareto=True),
        _row(0.5, 90000, point="p3", part="xc7z020clg400-1", array_size=16, fits=False),
        _row(None, None, point="p4", status="invalid", error="array_size 1000 is out of range"),
    ]
    csv_path, json_path = write_tables(tmp_path, rows, {"model": "m.onnx"})
    with open(csv_path) as f:
        table = list(csv.reader(f))
    assert tuple(table[0]) == COLUMNS and len(table) == 5
    assert table[4][COLUMNS.index("error")] == "array_size 1000 is out of range"
    data = json.loads(json_path.read_text())
    assert data["schema"] == 1 and data["model"] == "m.onnx" and list(data["rows"][0]) == list(COLUMNS)
    png = plot(tmp_path, rows, "lut", "test")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".*.tmp"))  # written whole, then renamed
