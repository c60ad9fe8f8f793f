"""Where a feature map lives in DRAM0: the placement every part shares (compiler, model files,
runtime). Block-major: the channel axis cut into blocks of N (one vector each), and a block's
vectors for every pixel of every image contiguous, ``[block][n][h][w]``."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class TensorPlacement:
    """A feature map (n, h, w, c) in DRAM0 starting at vector ``base``."""

    base: int
    shape: tuple[int, int, int, int]
    array_size: int
    # A batch of NCHW maps of h*w pixels flattened for a dense layer, read in place: "pixel" i is
    # image i, "block" k is (map block k // hw, map pixel k % hw), so pixels are hw apart.
    flattened_hw: int = 0
    # One phase of a larger map (a transposed conv's output, written in place): pixel (y, x) is
    # pixel (sy * y + py, sx * x + px) of the (h, w) map at ``base``: (sy, sx, py, px, h, w).
    interleave: tuple[int, int, int, int, int, int] | None = None

    @property
    def blocks(self) -> int:
        return math.ceil(self.shape[3] / self.array_size)

    @property
    def pixels(self) -> int:
        """Pixels of all images: the vectors of one channel block (its stride in DRAM0)."""
        n, h, w, _ = self.shape
        return n * h * w

    @property
    def size(self) -> int:
        return self.pixels * self.blocks

    def address(self, n: int, y: int, x: int, block: int) -> int:
        _, h, w, _ = self.shape
        if self.interleave:
            sy, sx, py, px, h, w = self.interleave
            return self.base + block * self.shape[0] * h * w + (n * h + sy * y + py) * w + sx * x + px
        if self.flattened_hw:
            hw = self.flattened_hw
            return self.base + (block // hw) * self.pixels * hw + ((n * h + y) * w + x) * hw + block % hw
        return self.base + block * self.pixels + (n * h + y) * w + x

    @property
    def pixel_step(self) -> int:
        """DRAM0 vectors from one pixel to the next in a row of a channel block."""
        return self.interleave[1] if self.interleave else self.flattened_hw or 1

    @property
    def channels_padded(self) -> int:
        """Channels rounded up to whole blocks (the last block's extra lanes are zero)."""
        return self.blocks * self.array_size

    def to_json(self) -> dict:
        return {"base": self.base, "shape": list(self.shape)}
