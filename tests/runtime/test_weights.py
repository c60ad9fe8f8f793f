"""A device writes a model's weights once: partitions and models share DRAM1, each in a region of
its own (programs moved there), the least recently run evicted when it is full."""

import numpy as np
import pytest

import tvm_tensil
from helpers import built
from tvm_tensil.runtime import get_device

pytest.importorskip("tvm")


def test_partitions_of_two_models_stay_resident_and_compute_the_same():
    runs = [built(3, 3), built(2, 4)]
    with tvm_tensil.device("emulator") as session:
        for _ in range(3):
            for vm, _, x, cpu in runs:
                np.testing.assert_array_equal(vm["main"](x).numpy(), cpu)
        (dev,) = session.devices.values()
    assert dev.resident_weights.writes == 5, "each of the five partitions written once"
    regions = sorted((r.lo, r.hi) for r in dev.resident_weights._resident.values())
    assert all(a[1] <= b[0] for a, b in zip(regions, regions[1:])), "regions do not overlap"
    assert all(lo % dev.resident_weights.align == 0 for lo, _ in regions), "moved by whole AXI pages"


def test_a_full_dram1_evicts_the_least_recently_run():
    arch = tvm_tensil.load_arch("pynqz1").replace(dram1_depth=256)  # one AXI page: one conv's weights at a time
    vm, report, x, cpu = built(2, 5, arch=arch)
    assert len(report.partitions) == 2
    with tvm_tensil.device("emulator") as session:
        for _ in range(2):
            np.testing.assert_array_equal(vm["main"](x).numpy(), cpu)
        (dev,) = session.devices.values()
    assert dev.resident_weights.writes == 4, "two partitions that cannot both stay: written on every run"


def test_overwriting_a_models_region_forgets_it(tmp_path):
    vm, report, x, cpu = built(1, 6)
    dev = get_device("emulator", "pynqz1")
    (part,) = report.compiled.values()
    model = part.model(part.constants)
    feeds = {k: np.random.default_rng(0).standard_normal(model.tensor_shape(k)) for k in model.input_names()}
    first = dev.run_model(model, feeds)
    top = model.consts[0][0].size
    dev.write_dram(1, top, np.zeros((4, 8)))  # beside the weights: they stay
    dev.run_model(model, feeds)
    assert dev.resident_weights.writes == 1
    dev.write_dram(1, top - 1, np.zeros((1, 8)))  # over the last vector of the weights
    again = dev.run_model(model, feeds)
    assert dev.resident_weights.writes == 2
    for k in first:
        np.testing.assert_array_equal(first[k], again[k])
