"""Float references in NHWC, written with plain numpy (no code from tvm_tensil)."""

import numpy as np


def conv2d_nhwc(x, w, bias, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """x (n, h, w, ci); w (co, ci/groups, kh, kw); padding (top, left, bottom, right)."""
    n, h, wd, ci = x.shape
    co, cig, kh, kw = w.shape
    sh, sw = strides
    dh, dw = dilation
    pt, pl, pb, pr = padding
    xp = np.zeros((n, h + pt + pb, wd + pl + pr, ci))
    xp[:, pt : pt + h, pl : pl + wd] = x
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + pl + pr - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, oh, ow, co))
    cog = co // groups
    for g in range(groups):
        for y in range(kh):
            for x_ in range(kw):
                patch = xp[
                    :,
                    y * dh : y * dh + (oh - 1) * sh + 1 : sh,
                    x_ * dw : x_ * dw + (ow - 1) * sw + 1 : sw,
                    g * cig : (g + 1) * cig,
                ]
                out[..., g * cog : (g + 1) * cog] += patch @ w[g * cog : (g + 1) * cog, :, y, x_].T
    return out + (0 if bias is None else bias)


def conv_transpose2d_nhwc(x, w, bias, strides, padding, out_hw):
    """x (n, h, w, ci); w (ci, co, kh, kw); output pixel i * stride - pad + k gets x[i] * w[k]."""
    n, h, wd, _ = x.shape
    _, co, kh, kw = w.shape
    out = np.zeros((n, *out_hw, co))
    for i in range(h):
        for j in range(wd):
            for ky in range(kh):
                for kx in range(kw):
                    y, xo = i * strides[0] - padding[0] + ky, j * strides[1] - padding[1] + kx
                    if 0 <= y < out_hw[0] and 0 <= xo < out_hw[1]:
                        out[:, y, xo] += x[:, i, j] @ w[:, :, ky, kx]
    return out + bias


def pool_nhwc(x, kernel, strides, padding, kind, count_include_pad=False):
    n, h, w, c = x.shape
    kh, kw = kernel
    sh, sw = strides
    pt, pl, pb, pr = padding
    oh = (h + pt + pb - kh) // sh + 1
    ow = (w + pl + pr - kw) // sw + 1
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            ys = [i * sh - pt + a for a in range(kh)]
            xs = [j * sw - pl + b for b in range(kw)]
            vals = [x[:, y, xx] for y in ys for xx in xs if 0 <= y < h and 0 <= xx < w]
            if kind == "max":
                out[:, i, j] = np.max(vals, axis=0)
            else:
                div = kh * kw if count_include_pad else len(vals)
                out[:, i, j] = np.sum(vals, axis=0) / div
    return out
