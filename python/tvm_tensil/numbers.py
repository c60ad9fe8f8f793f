"""Fixed-point numbers of the TCU, bit-exact (docs/isa.md, "Numbers").

A value of type ``FPwBPb`` is a w-bit two's complement integer q standing for q / 2**b.
All arithmetic here works on ``int64`` numpy arrays holding those integers; memories keep
them in the narrower storage type (``DataType.storage``). Every function is vectorised:
no Python loop runs per scalar.

The one primitive is ``mac(x, y, z)``: ``m = x*y + (z << b)``, shifted right by b with
round-half-to-even, then saturated to w bits. ``times``, ``plus``, ``minus`` and the
sequential matrix step are all defined through it, exactly as the hardware computes them.

Saturation is silent in hardware. Pass a ``SaturationCounter`` to any function to count
the scalars that were clipped; the emulator uses this to report overflow to users.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "DataType",
    "SaturationCounter",
    "DATA_TYPES",
    "FP8BP4",
    "FP16BP8",
    "FP18BP10",
    "FP32BP16",
    "data_type",
]

# Largest number of int64 scalars the vectorised matrix step materialises at once.
_MATMUL_CHUNK_ELEMENTS = 1 << 21


class SaturationCounter:
    """Counts scalars clipped by saturation (overflow is silent in hardware)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def __repr__(self) -> str:
        return f"SaturationCounter(count={self.count})"


@dataclass(frozen=True, eq=False)
class DataType:
    """A fixed-point format ``FP<width>BP<binary_point>``."""

    name: str
    width: int
    binary_point: int
    storage_bytes: int

    def __post_init__(self) -> None:
        if not 2 <= self.binary_point < self.width <= 32:
            raise ValueError(f"{self.name}: need 2 <= binary point < width <= 32")

    # -- derived constants -------------------------------------------------------------
    @property
    def min_int(self) -> int:
        return -(1 << (self.width - 1))

    @property
    def max_int(self) -> int:
        return (1 << (self.width - 1)) - 1

    @property
    def one(self) -> int:
        """The integer that stands for 1.0."""
        return 1 << self.binary_point

    @property
    def resolution(self) -> float:
        """The value of one least significant bit."""
        return 1.0 / self.one

    @property
    def storage(self) -> np.dtype:
        """Numpy type a scalar occupies in memory and in ``.tdata`` files (little-endian)."""
        return np.dtype({1: "<i1", 2: "<i2", 4: "<i4"}[self.storage_bytes])

    @property
    def max_float(self) -> float:
        return self.max_int / self.one

    @property
    def min_float(self) -> float:
        return self.min_int / self.one

    def __repr__(self) -> str:
        return self.name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DataType) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    # -- conversions ---------------------------------------------------------------------
    def saturate(self, r: np.ndarray, sat: SaturationCounter | None = None) -> np.ndarray:
        """Clip int64 values to the w-bit range, counting clipped scalars."""
        r = np.asarray(r, dtype=np.int64)
        if sat is not None:
            sat.count += int(np.count_nonzero((r < self.min_int) | (r > self.max_int)))
        return np.clip(r, self.min_int, self.max_int)

    def from_float(self, f, sat: SaturationCounter | None = None) -> np.ndarray:
        """float -> fixed: ``floor(f * 2**b + 0.5)``, saturated. Returns int64."""
        f = np.asarray(f, dtype=np.float64)
        if np.isnan(f).any():
            raise ValueError(f"cannot convert NaN to {self.name}: the input holds NaN values")
        scaled = np.floor(f * float(self.one) + 0.5)
        # Clip in float first: values beyond int64 would be undefined on the cast.
        clipped = np.clip(scaled, self.min_int - 1, self.max_int + 1).astype(np.int64)
        return self.saturate(clipped, sat)

    def to_float(self, q) -> np.ndarray:
        """fixed -> float64 (exact)."""
        return np.asarray(q, dtype=np.float64) / float(self.one)

    def to_storage(self, q) -> np.ndarray:
        """int64 fixed values (already in range) -> the memory storage type."""
        q = np.asarray(q)
        if q.size and (q.min() < self.min_int or q.max() > self.max_int):
            raise ValueError(f"value out of {self.name} range [{self.min_int}, {self.max_int}]")
        return q.astype(self.storage)

    def to_bytes(self, q) -> bytes:
        return self.to_storage(q).tobytes()

    def from_bytes(self, data: bytes) -> np.ndarray:
        """Little-endian storage bytes -> int64 values (sign-extended from w bits)."""
        if len(data) % self.storage_bytes:
            raise ValueError(
                f"{len(data)} bytes is not a whole number of {self.storage_bytes}-byte {self.name} scalars"
            )
        raw = np.frombuffer(data, dtype=self.storage).astype(np.int64)
        return self.sign_extend(raw)

    def sign_extend(self, raw: np.ndarray) -> np.ndarray:
        """Interpret the low w bits as two's complement (matters for FP18BP10 in 4 bytes)."""
        if self.width == 8 * self.storage_bytes:
            return raw
        mask = (1 << self.width) - 1
        raw = raw & mask
        return np.where(raw >= (1 << (self.width - 1)), raw - (1 << self.width), raw)

    # -- arithmetic ----------------------------------------------------------------------
    def _round_shift(self, m: np.ndarray) -> np.ndarray:
        """``(m >> b) + adj``, adj = round half to even on the b dropped bits."""
        b = self.binary_point
        q = m >> b
        half = (m >> (b - 1)) & 1
        sticky = (m & ((1 << (b - 1)) - 1)) != 0
        return q + (half & (sticky | (q & 1)))

    def mac(self, x, y, z, sat: SaturationCounter | None = None) -> np.ndarray:
        """Multiply-accumulate ``x*y + z`` with the hardware's rounding and saturation."""
        x = np.asarray(x, dtype=np.int64)
        y = np.asarray(y, dtype=np.int64)
        z = np.asarray(z, dtype=np.int64)
        m = x * y + (z << self.binary_point)
        return self.saturate(self._round_shift(m), sat)

    def times(self, x, y, sat: SaturationCounter | None = None) -> np.ndarray:
        return self.mac(x, y, 0, sat)

    def plus(self, x, y, sat: SaturationCounter | None = None) -> np.ndarray:
        """Exact saturating add (``mac(x, 1 << b, y)``)."""
        x = np.asarray(x, dtype=np.int64)
        y = np.asarray(y, dtype=np.int64)
        return self.saturate(x + y, sat)

    def minus(self, x, y, sat: SaturationCounter | None = None) -> np.ndarray:
        """``plus(x, -y)``: the negation is exact (wide), the sum saturates."""
        return self.plus(x, -np.asarray(y, dtype=np.int64), sat)

    def matmul(self, x, weights, bias, sat: SaturationCounter | None = None) -> np.ndarray:
        """The array's matrix step for a batch of input vectors.

        ``x``: (k, N) inputs; ``weights``: (N, N), row j = weights of input channel j;
        ``bias``: (N,). For each output o: ``acc = bias[o]``, then for j in 0..N-1
        ``acc = mac(x[j], weights[j][o], acc)``, rounding and saturating at every step.

        Fast path (exact while no partial sum leaves the w-bit range): step j adds
        ``t_j = floor(p_j / 2**b)`` plus 1 when the dropped bits exceed half an lsb. On an
        exact tie the hardware rounds the accumulator itself to even, so the step's
        adjustment depends on the accumulator's parity. After a tie the accumulator is
        always even, which gives a closed form: with ``P_j`` the prefix sum of the
        unadjusted steps (bias included), the adjustment at tie j is
        ``(P_j + P_k) & 1`` where k is the previous tie (``P_k = 0`` before the first).
        Rows whose partial sums saturate are recomputed step by step.
        """
        x = np.asarray(x, dtype=np.int64)
        w = np.asarray(weights, dtype=np.int64)
        bias = np.asarray(bias, dtype=np.int64)
        if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[0] or bias.shape != (w.shape[1],):
            raise ValueError(f"matmul shapes do not fit: x {x.shape}, weights {w.shape}, bias {bias.shape}")
        k, n_in = x.shape
        n_out = w.shape[1]
        out = np.empty((k, n_out), dtype=np.int64)
        chunk = max(1, _MATMUL_CHUNK_ELEMENTS // max(1, n_in * n_out))
        b = self.binary_point
        low_mask = (1 << b) - 1
        half = 1 << (b - 1)
        # Products of <= 16-bit operands and their sums over <= 256 steps fit int32.
        work = np.int32 if self.width <= 16 else np.int64
        w = w.astype(work)
        bias = bias.astype(work)
        # Encodes a tie at step j as 2j + 2 + parity, so a running maximum forward-fills
        # the parity of the latest tie (0: no tie yet, which acts as an even prefix).
        tie_code = (2 * np.arange(n_in, dtype=work) + 2)[None, :, None]
        for start in range(0, k, chunk):
            xs = x[start : start + chunk].astype(work)
            prod = xs[:, :, None] * w[None, :, :]  # (k, n_in, n_out)
            low = prod & low_mask
            partial = (prod >> b) + (low > half)
            np.cumsum(partial, axis=1, out=partial)
            partial += bias
            tie = low == half
            if tie.any():
                latest = np.maximum.accumulate(np.where(tie, tie_code + (partial & 1), 0), axis=1)
                prev_parity = np.zeros_like(latest)
                prev_parity[:, 1:] = latest[:, :-1] & 1
                adjust = tie & (((partial ^ prev_parity) & 1) != 0)
                partial += np.cumsum(adjust, axis=1, dtype=work)
            out[start : start + chunk] = partial[:, -1, :]
            if partial.min() < self.min_int or partial.max() > self.max_int:
                slow = ((partial < self.min_int) | (partial > self.max_int)).any(axis=(1, 2))
                rows = np.nonzero(slow)[0]
                out[start + rows] = self._matmul_sequential(x[start + rows], weights, bias, sat)
        return out

    def window_matmul(self, stream, taps, bias, stride: int = 1, sat: SaturationCounter | None = None) -> np.ndarray:
        """The array's window step (a MatMul with the window flag): ``stream`` (T, N) vectors,
        ``taps`` (K, N) weight rows, ``bias`` (N,). Output i, lane o: ``acc = bias[o]``, then for j in
        0..K-1 ``acc = mac(stream[i*stride + j][o], taps[j][o], acc)``; (T - K) // stride + 1 outputs."""
        stream = np.asarray(stream, dtype=np.int64)
        taps = np.asarray(taps, dtype=np.int64)
        count = (stream.shape[0] - taps.shape[0]) // stride + 1
        acc = np.broadcast_to(np.asarray(bias, dtype=np.int64), (count, stream.shape[1])).copy()
        for j in range(taps.shape[0]):
            acc = self.mac(stream[j : j + (count - 1) * stride + 1 : stride], taps[j][None, :], acc, sat)
        return acc

    def _matmul_sequential(self, x, w, bias, sat) -> np.ndarray:
        x = np.asarray(x, dtype=np.int64)
        w = np.asarray(w, dtype=np.int64)
        acc = np.broadcast_to(np.asarray(bias, dtype=np.int64), (x.shape[0], w.shape[1])).copy()
        for j in range(w.shape[0]):
            acc = self.mac(x[:, j : j + 1], w[j][None, :], acc, sat)
        return acc


def _make(name: str, width: int, bp: int) -> DataType:
    storage = 1 if width <= 8 else 2 if width <= 16 else 4
    return DataType(name, width, bp, storage)


FP8BP4 = _make("FP8BP4", 8, 4)
FP16BP8 = _make("FP16BP8", 16, 8)
FP18BP10 = _make("FP18BP10", 18, 10)
FP32BP16 = _make("FP32BP16", 32, 16)

DATA_TYPES: dict[str, DataType] = {t.name: t for t in (FP8BP4, FP16BP8, FP18BP10, FP32BP16)}


def data_type(name: str | DataType) -> DataType:
    """Look up a data type by name (``"FP16BP8"``), with a clear error for unknown names."""
    if isinstance(name, DataType):
        return name
    try:
        return DATA_TYPES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown data type {name!r}; allowed: {', '.join(DATA_TYPES)}") from None
