"""How a constant broadcasts against a tensor: numpy's rule, the one Relax and ONNX follow.

Every decision that a constant is *per channel* (a bias, a batch-norm scale, an affine shift)
goes through ``per_channel``: shapes are aligned on the right, so a ``(C,)`` vector against an
NCHW map varies along W, not along channels, even when C == W.
"""

from __future__ import annotations

import numpy as np


def _aligned(const_shape: tuple, x_shape: tuple) -> tuple | None:
    """``const_shape`` padded with leading ones to ``x_shape``'s rank, or None if it has more axes."""
    if len(const_shape) > len(x_shape):
        return None
    return (1,) * (len(x_shape) - len(const_shape)) + tuple(const_shape)


def broadcast_reason(const_shape: tuple, x_shape: tuple) -> str | None:
    """None if a constant of ``const_shape`` added to (or multiplying) an NCHW or (N, C) tensor of
    ``x_shape`` is one value per channel (or one value), else what it is instead."""
    const_shape, x_shape = tuple(const_shape), tuple(x_shape)
    if len(x_shape) not in (2, 4):
        return f"a rank-{len(x_shape)} tensor (the TCU takes NCHW or 2-D)"
    aligned = _aligned(const_shape, x_shape)
    if aligned is None or any(d not in (1, n) for d, n in zip(aligned, x_shape)):
        return f"a constant of shape {const_shape} does not broadcast to {x_shape}"
    axes = "NCHW" if len(x_shape) == 4 else "NC"
    varying = [axes[i] for i, d in enumerate(aligned) if d != 1 and i != 1]
    if varying:
        return f"a constant of shape {const_shape} varies along {', '.join(varying)} of {x_shape}, not per channel"
    return None


def per_channel(const_shape: tuple, x_shape: tuple) -> bool:
    return broadcast_reason(const_shape, x_shape) is None


def channel_values(value: np.ndarray, x_shape: tuple) -> np.ndarray | None:
    """The one value per channel of constant ``value`` broadcast against ``x_shape``, or None when
    it is not per channel."""
    value = np.asarray(value)
    if not per_channel(value.shape, x_shape):
        return None
    aligned = value.reshape(_aligned(value.shape, x_shape))
    return np.broadcast_to(aligned, (1, x_shape[1]) + (1,) * (len(x_shape) - 2)).reshape(x_shape[1])


def canonical_shape(x_shape: tuple) -> tuple:
    """The shape a per-channel constant takes on the TCU path: (1, C, 1, 1) or (1, C)."""
    return (1, x_shape[1]) + (1,) * (len(x_shape) - 2)
