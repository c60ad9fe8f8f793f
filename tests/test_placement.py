"""Where feature maps live in DRAM0: an input written as a conv's windows."""

import numpy as np
import pytest

from tvm_tensil.placement import Patches


@pytest.mark.parametrize(
    "source, kernel, strides, padding, dilation",
    [
        ((1, 9, 10, 3), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
        ((2, 11, 12, 3), (7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),  # ResNet's stem, a batch of 2
        ((1, 9, 8, 2), (3, 2), (2, 1), (2, 0, 1, 1), (2, 1)),  # asymmetric, dilated
    ],
)
def test_windows_are_the_convs_taps_in_order(source, kernel, strides, padding, dilation):
    rng = np.random.default_rng(0)
    x = rng.integers(-100, 100, source)
    p = Patches(source, kernel, strides, padding, dilation)
    got = p.gather(x)
    n, oh, ow, c = p.shape
    assert got.shape == p.shape and c == kernel[0] * kernel[1] * source[3]
    want = np.zeros(p.shape, dtype=x.dtype)
    for y in range(oh):
        for xo in range(ow):
            for ky in range(kernel[0]):
                for kx in range(kernel[1]):
                    iy = y * strides[0] - padding[0] + ky * dilation[0]
                    ix = xo * strides[1] - padding[1] + kx * dilation[1]
                    if 0 <= iy < source[1] and 0 <= ix < source[2]:
                        t = ky * kernel[1] + kx
                        want[:, y, xo, t * source[3] : (t + 1) * source[3]] = x[:, iy, ix]
    np.testing.assert_array_equal(got, want)
    assert Patches.from_json(p.to_json()) == p


def test_windows_of_a_map_of_another_shape_are_refused():
    p = Patches((1, 8, 8, 3), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1))
    with pytest.raises(ValueError, match=r"\(1, 8, 8, 3\)"):
        p.gather(np.zeros((1, 8, 9, 3)))
