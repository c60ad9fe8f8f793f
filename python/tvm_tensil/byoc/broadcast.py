"""How a constant broadcasts against a tensor: numpy's rule, the one Relax and ONNX follow.

Every decision that a constant is *per channel* (a bias, a batch-norm scale, an affine shift)
goes through ``per_channel``: shapes are aligned on the right, so a ``(C,)`` vector against an
NCHW map varies along W, not along channels, even when C == W. The channels are the axis the TCU
lays along its lanes: C of NCHW, K of (B, K) and of a sequence's (B, S, K).
"""

from __future__ import annotations

import numpy as np

# The ranks the TCU takes, each with its channel axis and the names of its axes.
LAYOUTS = {2: (1, "NC"), 3: (2, "BSK"), 4: (1, "NCHW")}


def channel_axis(rank: int) -> int:
    return LAYOUTS[rank][0]


def _aligned(const_shape: tuple, x_shape: tuple) -> tuple | None:
    """``const_shape`` padded with leading ones to ``x_shape``'s rank, or None if it has more axes."""
    if len(const_shape) > len(x_shape):
        return None
    return (1,) * (len(x_shape) - len(const_shape)) + tuple(const_shape)


def broadcast_reason(const_shape: tuple, x_shape: tuple) -> str | None:
    """None if a constant of ``const_shape`` added to (or multiplying) an NCHW, (N, C) or (B, S, K)
    tensor of ``x_shape`` is one value per channel (or one value), else what it is instead."""
    const_shape, x_shape = tuple(const_shape), tuple(x_shape)
    if len(x_shape) not in LAYOUTS:
        return f"a rank-{len(x_shape)} tensor (the TCU takes NCHW, (B, K) or (B, S, K))"
    aligned = _aligned(const_shape, x_shape)
    if aligned is None or any(d not in (1, n) for d, n in zip(aligned, x_shape)):
        return f"a constant of shape {const_shape} does not broadcast to {x_shape}"
    channel, axes = LAYOUTS[len(x_shape)]
    varying = [axes[i] for i, d in enumerate(aligned) if d != 1 and i != channel]
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
    shape = canonical_shape(x_shape)
    return np.broadcast_to(aligned, shape).reshape(max(shape))


def canonical_shape(x_shape: tuple) -> tuple:
    """The shape a per-channel constant takes on the TCU path: (1, C, 1, 1), (1, C) or (1, 1, K)."""
    axis = channel_axis(len(x_shape))
    return tuple(x_shape[axis] if i == axis else 1 for i in range(len(x_shape)))
