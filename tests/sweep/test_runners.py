"""Runners: every task's result comes back; a worker that dies is that task's failure, not the sweep's.

Mirrors python/tvm_tensil/sweep/runners.py. The Ray runner runs a whole sweep in test_sweep.py.
"""

import os

import pytest

from tvm_tensil.sweep.runners import DIED, LocalRunner, RayRunner
from tvm_tensil.sweep.space import SweepError


def square(x: int) -> dict:
    return {"status": "ok", "value": x * x}


def die_on(x: int, fatal: int) -> dict:
    if x == fatal:
        os._exit(9)  # as the kernel's OOM killer would leave it: no exception, no result
    return {"status": "ok", "value": x}


def raise_on(x: int) -> dict:
    raise ValueError(f"bad {x}")


def test_local_runner_returns_every_result():
    results = dict(LocalRunner(jobs=2).run(square, [(str(i), (i,)) for i in range(5)]))
    assert results == {str(i): {"status": "ok", "value": i * i} for i in range(5)}


def test_a_dying_worker_fails_its_task_only():
    results = dict(LocalRunner(jobs=2).run(die_on, [(str(i), (i, 2)) for i in range(4)]))
    assert results["2"] == {"status": "error", "error": DIED}
    assert {k: v["value"] for k, v in results.items() if k != "2"} == {"0": 0, "1": 1, "3": 3}


def test_an_exception_in_a_task_is_its_result():
    results = dict(LocalRunner(jobs=1).run(raise_on, [("a", (1,))]))
    assert results["a"]["status"] == "error" and "ValueError: bad 1" in results["a"]["error"]


def test_a_ray_address_nothing_answers_at_fails_at_once():
    pytest.importorskip("ray")  # a dev dependency: this skips only in a hand-made environment
    with pytest.raises(SweepError, match="nothing answers at the Ray address '127.0.0.1:1'"):
        RayRunner("127.0.0.1:1")
