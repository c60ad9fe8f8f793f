"""Space files: what they may say, the points they make, ids that stay put.

Mirrors python/tvm_tensil/sweep/space.py.
"""

import json

import pytest

from tvm_tensil.arch import PRESETS
from tvm_tensil.sweep.space import Space, SpaceError


def test_every_combination_in_order_with_stable_ids(tmp_path):
    d = {"base": "pynqz1", "parameters": {"array_size": [4, 8], "part": ["xc7z020clg400-1", "xczu3eg-sbva484-1-i"]}}
    path = tmp_path / "space.json"
    path.write_text(json.dumps(d))
    points = Space.load(path).points()
    assert [(p.params["array_size"], p.params["part"][:7]) for p in points] == [
        (4, "xc7z020"),
        (4, "xczu3eg"),
        (8, "xc7z020"),
        (8, "xczu3eg"),
    ]
    assert all(p.arch.array_size == p.params["array_size"] and p.arch.part == p.params["part"] for p in points)
    assert all(p.arch.local_depth == PRESETS["pynqz1"].local_depth for p in points)  # the rest from the base
    assert [p.id for p in points] == [p.id for p in Space.load(d).points()]  # file or dict, any run
    assert len({p.id for p in points}) == 4
    other_base = Space.load(d | {"base": "ultra96v2"}).points()
    assert not {p.id for p in points} & {p.id for p in other_base}


def test_a_combination_no_architecture_allows_is_an_invalid_point():
    points = Space.load({"parameters": {"array_size": [8, 1000]}}).points()
    assert points[0].arch is not None and points[0].invalid is None
    assert points[1].arch is None and "array_size" in points[1].invalid


@pytest.mark.parametrize(
    "space, message",
    [
        ({"parameters": {"array_size": [4]}, "bogus": 1}, "unknown key"),
        ({"parameters": {"array_sise": [4]}}, "'parameters.array_sise' is not a parameter"),
        ({"parameters": {"array_size": []}}, "non-empty list"),
        ({"parameters": {}}, "'parameters' must map"),
        ({"base": "nosuchboard", "parameters": {"array_size": [4]}}, "key 'base'"),
        ({"parameters": {"array_size": [4]}, "time_limit": 0}, "'time_limit' must be a positive number"),
        ({"parameters": {"array_size": [4]}, "synthesis": "yes"}, "'synthesis' must be true or false"),
    ],
)
def test_bad_spaces_name_the_key(space, message):
    with pytest.raises(SpaceError, match=message):
        Space.load(space)


def test_unreadable_and_non_json_files(tmp_path):
    with pytest.raises(SpaceError, match="cannot read the space file"):
        Space.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{array_size: 4")
    with pytest.raises(SpaceError, match="is not JSON"):
        Space.load(tmp_path / "bad.json")
