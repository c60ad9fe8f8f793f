"""Helpers of the activations' SIMD sequences."""

import math

import pytest

from tvm_tensil.compiler.simd import powers_of_two
from tvm_tensil.numbers import FP16BP8


@pytest.mark.parametrize("shift", range(-20, 15))
def test_a_rescale_is_exact_powers_the_data_type_holds(shift):
    factors = powers_of_two(shift, FP16BP8)
    assert math.prod(factors) == 2.0**shift
    assert all(2.0**-8 <= f <= 2.0**6 for f in factors)
    assert len(factors) == (0 if shift == 0 else max(1, math.ceil(-shift / 8) if shift < 0 else math.ceil(shift / 6)))
