"""The constant packers (packing.py), against the layouts the programs read."""

import math

import numpy as np
import pytest

from tvm_tensil.packing import PACKERS


@pytest.mark.parametrize("old_library", [False, True])
def test_a_flattened_map_meets_its_dense_weights(old_library):
    """A dense layer over an NCHW flatten, its input read in place: the packed weights applied to the
    map as stored (block-major; or, for a library built before that layout, (h, w, padded c) lanes)
    give the matmul of the flattened map."""
    n, c, h, w, out = 4, 5, 2, 3, 3
    rng = np.random.default_rng(0)
    x = rng.standard_normal((c, h, w))
    weight = rng.standard_normal((c * h * w, out))  # KM: (in features, out features)
    blocks = math.ceil(c / n) + (1 if old_library else 0)  # an old library padded the blocks per pixel
    stored = np.zeros((blocks * h * w, n))
    for ch in range(c):
        for y in range(h):
            for xx in range(w):
                vec = (y * w + xx) * blocks + ch // n if old_library else (ch // n) * h * w + y * w + xx
                stored[vec, ch % n] = x[ch, y, xx]
    flatten = [c, h, w, blocks] if old_library else [c, h, w]
    packed = PACKERS["conv_weights"]([weight], n, weight=0, groups=1, layout="KM", flatten=flatten)
    cbo, cbi = math.ceil(out / n), stored.shape[0]
    packed = packed.reshape(cbo, cbi, n + 1, n)
    result = sum(stored[ib] @ packed[:, ib, 1:, :] for ib in range(cbi)).reshape(-1)[:out]
    np.testing.assert_allclose(result, x.reshape(-1) @ weight)


def test_blocks_without_bias_rows_are_the_blocks_weight_rows():
    """``bias_rows=False``: each block's N weight rows, its (zero) bias row left out; a bias cannot
    ride in them."""
    n, rng = 4, np.random.default_rng(1)
    consts = [rng.standard_normal((6, 9, 3, 3)), rng.standard_normal(6)]
    full = PACKERS["conv_weights"](consts, n, weight=0, groups=1).reshape(-1, n + 1, n)
    bare = PACKERS["conv_weights"](consts, n, weight=0, groups=1, bias_rows=False).reshape(-1, n, n)
    np.testing.assert_array_equal(bare, full[:, 1:])
    assert not full[:, 0].any()
    with pytest.raises(ValueError, match="bias"):
        PACKERS["conv_weights"](consts, n, weight=0, groups=1, bias_rows=False, bias=1, bias_tap=[1, 1])
