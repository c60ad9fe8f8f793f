"""Exp's SIMD sequence within its documented bound over every value, at coarse and fine scales."""

import numpy as np
import pytest

from helpers import activation_on_emulator


@pytest.mark.parametrize("shift, out_shift", [(0, 0), (0, 3), (-2, -3), (-6, -12), (3, 0), (4, 2), (9, 2), (12, -3)])
def test_exp_within_its_bound_over_every_value(shift, out_shift):
    """Every FP16BP8 value through exp's SIMD sequence on the emulator, at coarse and fine input
    scales: where the result fits, within ``EXP_UNITS`` units plus ``EXP_SHARE`` of it beyond half
    a unit, no step saturating; beyond, the result at the top of the data type, the device counting
    the saturation (the user is warned)."""
    from tvm_tensil.arch import PRESETS
    from tvm_tensil.compiler.exp import EXP_SHARE, EXP_UNITS, Exp

    arch = PRESETS["pynqz1"]
    dt = arch.data_type
    stored = np.arange(dt.min_int, dt.max_int + 1) / dt.one
    fits = np.exp(stored / 2.0**shift) * 2.0**out_shift < dt.max_float - dt.resolution / 2
    for inside in (True, False):
        x = stored[fits == inside]
        if not len(x):  # (a fine input's results all fit)
            continue
        y, stats = activation_on_emulator("exp", Exp(shift, out_shift), x, arch)
        if inside:
            target = np.exp(x / 2.0**shift) * 2.0**out_shift
            assert stats.saturated == 0
            assert np.all(np.abs(y - target) - dt.resolution / 2 <= EXP_UNITS * dt.resolution + EXP_SHARE * target)
        else:
            assert stats.saturated > 0 and np.all(y >= dt.max_float * (1 - 2.0**-8))
