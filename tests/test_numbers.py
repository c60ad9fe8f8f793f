"""Fixed-point arithmetic against plain-integer references of docs/isa.md, "Numbers"."""

from fractions import Fraction

import numpy as np
import pytest

from tvm_tensil.numbers import DATA_TYPES, FP8BP4, FP16BP8, SaturationCounter, data_type


def sat(v, dt):
    return max(dt.min_int, min(dt.max_int, v))


def mac_bits(x, y, z, dt):
    """The spec's rule, literally, on Python integers."""
    b = dt.binary_point
    m = x * y + (z << b)
    r = m >> b
    half = (m >> (b - 1)) & 1
    below = m & ((1 << (b - 1)) - 1)
    bit_b = (m >> b) & 1
    if half and (below or bit_b):
        r += 1
    return sat(r, dt)


def mac_fraction(x, y, z, dt):
    """An independent formulation: exact rational value, Python's round-half-to-even."""
    return sat(round(Fraction(x * y, 1 << dt.binary_point) + z), dt)


def test_bit_rule_is_round_half_to_even():
    rng = np.random.default_rng(1)
    for dt in DATA_TYPES.values():
        for _ in range(3000):
            x, y, z = (int(v) for v in rng.integers(dt.min_int, dt.max_int + 1, 3))
            assert mac_bits(x, y, z, dt) == mac_fraction(x, y, z, dt)


@pytest.mark.parametrize("z", [-128, -77, -1, 0, 1, 5, 127])
def test_mac_exhaustive_8bit(z):
    dt = FP8BP4
    x, y = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij")
    got = dt.mac(x, y, z)
    ref = np.array([[mac_bits(int(a), int(b), z, dt) for b in range(-128, 128)] for a in range(-128, 128)])
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("name", ["FP16BP8", "FP18BP10", "FP32BP16"])
def test_mac_random_wide(name):
    dt = data_type(name)
    rng = np.random.default_rng(7)
    # Mix full-range operands (saturation) with small ones (rounding) and exact ties.
    x = np.concatenate([rng.integers(dt.min_int, dt.max_int + 1, 20000), rng.integers(-300, 300, 20000)])
    y = np.concatenate([rng.integers(dt.min_int, dt.max_int + 1, 20000), rng.integers(-300, 300, 20000)])
    z = rng.integers(dt.min_int, dt.max_int + 1, x.size)
    got = dt.mac(x, y, z)
    ref = [mac_bits(int(a), int(b), int(c), dt) for a, b, c in zip(x, y, z)]
    np.testing.assert_array_equal(got, ref)


def test_rounding_ties_go_to_even():
    dt = FP16BP8
    half = 1 << 7  # 0.5 in the product's dropped bits
    assert dt.mac(1, half, 0) == 0  # 0.5 lsb -> 0 (even)
    assert dt.mac(3, half, 0) == 2  # 1.5 lsb -> 2 (even)
    assert dt.mac(5, half, 0) == 2  # 2.5 lsb -> 2 (even)
    assert dt.mac(-1, half, 0) == 0  # -0.5 lsb -> 0
    assert dt.mac(-3, half, 0) == -2  # -1.5 lsb -> -2
    assert dt.mac(1, half, 1) == 2  # 1 + 0.5 -> 2 (parity includes z)
    assert dt.mac(1, half, 2) == 2  # 2 + 0.5 -> 2
    assert dt.mac(1, half + 1, 0) == 1  # just above the tie rounds up


def test_saturation_edges_and_counting():
    dt = FP16BP8
    c = SaturationCounter()
    assert dt.mac(dt.max_int, dt.one, dt.max_int, c) == dt.max_int
    assert dt.mac(dt.min_int, dt.one, dt.min_int, c) == dt.min_int
    assert dt.mac(dt.max_int, dt.one, 0, c) == dt.max_int  # exact, not saturated
    assert c.count == 2
    assert dt.minus(0, dt.min_int, c) == dt.max_int  # the negation is wide, the sum saturates
    assert dt.plus(dt.max_int, 1, c) == dt.max_int
    assert c.count == 4
    assert dt.times(dt.min_int, dt.min_int) == dt.max_int


def test_plus_is_mac_with_one():
    rng = np.random.default_rng(3)
    for dt in DATA_TYPES.values():
        x, y = rng.integers(dt.min_int, dt.max_int + 1, (2, 5000))
        np.testing.assert_array_equal(dt.plus(x, y), dt.mac(x, dt.one, y))
        np.testing.assert_array_equal(dt.minus(x, y), dt.mac(-y, dt.one, x))


def test_float_conversion_rounds_half_up_and_saturates():
    dt = FP16BP8
    lsb = 1 / 256
    got = dt.from_float([0.5 * lsb, -0.5 * lsb, 1.5 * lsb, -1.5 * lsb, 0.25 * lsb, 1.0, -1.0, 1e9, -1e9, np.inf])
    np.testing.assert_array_equal(got, [1, 0, 2, -1, 0, 256, -256, dt.max_int, dt.min_int, dt.max_int])
    c = SaturationCounter()
    dt.from_float([200.0, -200.0, 3.0], c)
    assert c.count == 2
    np.testing.assert_array_equal(dt.to_float(dt.from_float([0.75, -2.5])), [0.75, -2.5])
    with pytest.raises(ValueError, match="NaN"):
        dt.from_float([1.0, np.nan])


def test_storage_bytes_round_trip_sign_extension():
    for dt in DATA_TYPES.values():
        q = np.array([dt.min_int, -1, 0, 1, dt.max_int])
        np.testing.assert_array_equal(dt.from_bytes(dt.to_bytes(q)), q)
    assert data_type("FP18BP10").storage_bytes == 4
    with pytest.raises(ValueError, match="out of FP8BP4 range"):
        FP8BP4.to_storage(np.array([200]))
    with pytest.raises(ValueError, match="allowed: FP8BP4"):
        data_type("FP16BP7")


def matmul_reference(x, w, bias, dt):
    out = []
    for row in x.tolist():
        res = []
        for o in range(w.shape[1]):
            acc = int(bias[o])
            for j in range(w.shape[0]):
                acc = mac_bits(row[j], int(w[j, o]), acc, dt)
            res.append(acc)
        out.append(res)
    return np.array(out, dtype=np.int64).reshape(x.shape[0], w.shape[1])


@pytest.mark.parametrize("name", list(DATA_TYPES))
@pytest.mark.parametrize("n", [2, 8, 12])
@pytest.mark.parametrize("scale", ["small", "ties", "saturating"])
def test_matmul_matches_sequential_reference(name, n, scale):
    dt = data_type(name)
    rng = np.random.default_rng(hash((name, n, scale)) % 2**32)
    k = 40
    if scale == "small":
        hi = dt.one * 2
    elif scale == "saturating":
        hi = dt.max_int
    else:
        hi = 4
    x = rng.integers(-hi, hi + 1, (k, n))
    w = rng.integers(-hi, hi + 1, (n, n))
    if scale == "ties":  # products land exactly on half an lsb
        w = np.where(rng.random((n, n)) < 0.5, 1 << (dt.binary_point - 1), w)
    bias = rng.integers(-hi, hi + 1, n)
    c = SaturationCounter()
    got = dt.matmul(x, w, bias, c)
    np.testing.assert_array_equal(got, matmul_reference(x, w, bias, dt))
    if scale == "saturating":
        assert c.count > 0


def test_matmul_saturates_midway_not_only_at_the_end():
    dt = FP16BP8
    # Step 1 gives 2*max, clipped to max; step 2 subtracts max: 0. A wide dot product
    # would give max instead, so this catches an implementation that saturates only once.
    x = np.array([[dt.max_int, dt.max_int]])
    w = np.array([[dt.one * 2], [-dt.one]])
    bias = np.array([0])
    c = SaturationCounter()
    assert dt.matmul(x, w, bias, c)[0, 0] == 0
    assert c.count == 1
    assert matmul_reference(x, w, bias, dt)[0, 0] == 0
