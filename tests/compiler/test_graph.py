"""The compiler graph's helpers."""

import numpy as np
import pytest

from tvm_tensil.compiler.graph import Conv, weight_vectors
from tvm_tensil.packing import PACKERS


@pytest.mark.parametrize("n", [8, 12, 16])
@pytest.mark.parametrize(
    "shape, groups, layout",
    [
        ((24, 20, 3, 3), 1, "OIHW"),  # dense, channels not a multiple of the lanes
        ((40, 1, 3, 3), 40, "OIHW"),  # depthwise
        ((32, 8, 1, 1), 4, "OIHW"),  # grouped
        ((7, 5, 1, 3), 1, "OIHW"),  # a non-square kernel
        ((100, 30), 1, "KM"),  # a dense layer (in features, out features)
    ],
)
def test_weight_vectors_is_what_the_packer_writes(n, shape, groups, layout):
    """The DRAM1 vectors a layer's weights take, known without packing them, as packed."""
    w = np.ones(shape)
    attrs = Conv(weight=0, bias=None, groups=groups, layout=layout)
    packed = PACKERS["conv_weights"]([w], n, weight=0, groups=groups, layout=layout)
    assert weight_vectors([w], attrs, n) == packed.shape[0]
