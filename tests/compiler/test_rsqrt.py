"""rsqrt's SIMD sequence within its documented bound over every value, at coarse and fine scales."""

import numpy as np
import pytest

from helpers import activation_on_emulator


@pytest.mark.parametrize(
    "eps, shift, out_shift",
    [(1e-5, 0, 0), (1e-5, 4, 0), (1e-5, -3, 2), (1e-5, 8, -2), (0.0, 0, 3), (1e-3, 10, -4), (1e-5, -1, -1)],
)
def test_rsqrt_within_its_bound_over_every_value(eps, shift, out_shift):
    """Every FP16BP8 value through rsqrt's SIMD sequence on the emulator: where the result fits,
    within ``RSQRT_UNITS`` units plus ``RSQRT_SHARE`` of it beyond half a unit, no step saturating
    (a negative input reads as 0); below, the result at the top of the data type, the device
    counting the saturation (the user is warned)."""
    from tvm_tensil.arch import PRESETS
    from tvm_tensil.compiler.rsqrt import RSQRT_SHARE, RSQRT_UNITS, RSqrt

    arch = PRESETS["pynqz1"]
    dt = arch.data_type
    stored = np.arange(dt.min_int, dt.max_int + 1) / dt.one

    def target_of(x):
        with np.errstate(divide="ignore"):
            return 2.0**out_shift / np.sqrt(np.maximum(x / 2.0**shift, 0) + eps)

    fits = target_of(stored) < dt.max_float - 4 * dt.resolution
    checked = 0
    for inside in (True, False):
        x = stored[fits == inside]
        if not len(x):
            continue
        y, stats = activation_on_emulator("rsqrt", RSqrt(eps, shift, out_shift), x, arch)
        if inside:
            target = target_of(x)
            assert stats.saturated == 0
            assert np.all(np.abs(y - target) - dt.resolution / 2 <= RSQRT_UNITS * dt.resolution + RSQRT_SHARE * target)
        else:
            near = target_of(x) < dt.max_float * 1.1  # (saturating from a unit or two below the top)
            assert stats.saturated > 0
            assert np.all(y[~near] >= dt.max_float * (1 - 2.0**-8)) and np.all(y[near] >= dt.max_float * 0.97)
        checked += len(x)
    assert checked == dt.max_int - dt.min_int + 1


def test_rsqrt_refuses_what_it_cannot_compute():
    from tvm_tensil.compiler.rsqrt import RSqrt, rsqrt_constants
    from tvm_tensil.numbers import data_type

    with pytest.raises(ValueError, match="do not fit"):
        rsqrt_constants(RSqrt(0.0, 0, 20), data_type("FP16BP8"), 8)
    with pytest.raises(ValueError, match="16-bit"):
        rsqrt_constants(RSqrt(1e-5, 0, 0), data_type("FP8BP4"), 8)
