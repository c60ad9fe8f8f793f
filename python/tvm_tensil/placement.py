"""Where a feature map lives in DRAM0: the placement every part shares (compiler, model files,
runtime). Block-major: the channel axis cut into blocks of N (one vector each), and a block's
vectors for every pixel of every image contiguous, ``[block][n][h][w]``."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Patches:
    """An input the host writes as the windows of the conv that reads it (im2col): pixel (y, x) of
    the stored map holds the window of that conv's output pixel (y, x), tap by tap ((ky, kx) in
    order), each tap the input's ``c`` channels (zeros where the window is in the padding). The
    conv then is a 1x1 conv over ``kh * kw * c`` channels: for an RGB input, a few channel blocks
    in place of one nearly empty block per tap."""

    source: tuple[int, int, int, int]  # the input's (n, h, w, c)
    kernel: tuple[int, int]
    strides: tuple[int, int]
    padding: tuple[int, int, int, int]  # top, left, bottom, right
    dilation: tuple[int, int]

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """The stored map's (n, oh, ow, kh * kw * c)."""
        n, h, w, c = self.source
        (kh, kw), (sy, sx), (dy, dx) = self.kernel, self.strides, self.dilation
        t, left, b, r = self.padding
        oh = (h + t + b - dy * (kh - 1) - 1) // sy + 1
        ow = (w + left + r - dx * (kw - 1) - 1) // sx + 1
        return n, oh, ow, kh * kw * c

    def gather(self, x: np.ndarray) -> np.ndarray:
        """The input (n, h, w, c) -> the stored map (any dtype; the padding is zero)."""
        if tuple(x.shape) != self.source:
            raise ValueError(f"patches of a {self.source} map: got shape {tuple(x.shape)}")
        (kh, kw), (sy, sx), (dy, dx) = self.kernel, self.strides, self.dilation
        t, left, b, r = self.padding
        _, oh, ow, _ = self.shape
        padded = np.pad(x, ((0, 0), (t, b), (left, r), (0, 0)))
        taps = [
            padded[:, ky * dy : ky * dy + sy * (oh - 1) + 1 : sy, kx * dx : kx * dx + sx * (ow - 1) + 1 : sx]
            for ky in range(kh)
            for kx in range(kw)
        ]
        return np.concatenate(taps, axis=3)

    def to_json(self) -> dict:
        return {
            "source": list(self.source), "kernel": list(self.kernel), "strides": list(self.strides),
            "padding": list(self.padding), "dilation": list(self.dilation),
        }  # fmt: skip

    @classmethod
    def from_json(cls, d: dict) -> "Patches":
        return cls(*(tuple(int(v) for v in d[k]) for k in ("source", "kernel", "strides", "padding", "dilation")))


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
    # An input stored as a conv's windows (``shape`` is then the stored map's).
    patches: Patches | None = None

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
    def rows_whole(self) -> bool:
        """Whether a tile of whole rows is one run of a channel block (not for a phase of a map; for
        a band of whole rows, yes)."""
        if self.interleave is None:
            return True
        sy, sx, _, px, _, w = self.interleave
        return sy == 1 and sx == 1 and px == 0 and w == self.shape[2]

    @property
    def channels_padded(self) -> int:
        """Channels rounded up to whole blocks (the last block's extra lanes are zero)."""
        return self.blocks * self.array_size

    def to_json(self) -> dict:
        return {"base": self.base, "shape": list(self.shape)} | (
            {"patches": self.patches.to_json()} if self.patches else {}
        )

    @classmethod
    def from_json(cls, d: dict, array_size: int) -> "TensorPlacement":
        patches = Patches.from_json(d["patches"]) if "patches" in d else None
        return cls(int(d["base"]), tuple(int(v) for v in d["shape"]), array_size, patches=patches)
