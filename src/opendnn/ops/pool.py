"""Pooling (cuDNN's resample node in its pooling modes), forward and backward: the float64
reference.

X is [N, C, *in] with S = 1..3 spatial axes; window w, stride s, pre padding a and post
padding b per spatial axis. Output o covers the input positions

    i = o * s - a + k,   k in [0, w)            (per axis; k is the window offset)

and the output size is out = floor((in + a + b - w) / s) + 1 (cuDNN's formula; the legacy
API's symmetric padding p is a = b = p). Positions outside [0, in) are padding: with
a, b < w every window holds at least one real element.

- MAXPOOL: y[o] = max over the window's real elements; Index[o] = the window offset of the
  first maximum in window order (row-major over the window's axes, padding positions
  counted, as cuDNN's index tensor). NaN: with propagation a NaN in the window gives NaN
  (the index of the first NaN); without it NaN elements are skipped (a window of NaN
  only gives -inf, the index of its first real element).
- AVGPOOL_INCLUDE_PADDING: y[o] = sum of the real elements / prod(w).
- AVGPOOL_EXCLUDE_PADDING: y[o] = sum of the real elements / their count.

Backward (dy has Y's dims), as a sum over the windows containing each input i:

    max:  dx[i] = sum over o with i = start(o) + Index[o] of dy[o]
    avg:  dx[i] = sum over o containing i of dy[o] / count(o)

(count = prod(w) or the real elements of o). Several windows may pick the same input:
their gradients add.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..enums import ResampleMode

POOL_MODES = (
    ResampleMode.MAXPOOL,
    ResampleMode.AVGPOOL_INCLUDE_PADDING,
    ResampleMode.AVGPOOL_EXCLUDE_PADDING,
)


def output_size(n: int, window: int, stride: int, pre: int, post: int) -> int:
    """Output extent of one spatial axis (may be < 1 when the window does not fit)."""
    return (n + pre + post - window) // stride + 1


def output_dims(x_dims, window, stride, pre, post) -> list[int]:
    """[N, C, *out] for an input [N, C, *in]."""
    return list(x_dims[:2]) + [
        output_size(n, w, s, a, b) for n, w, s, a, b in zip(x_dims[2:], window, stride, pre, post)
    ]


def _windows(x_shape, out_shape, window, stride, pre):
    """For each window offset k (window order): k's flat index, and per axis the slice of
    the padded input it reads for every output."""
    for flat, k in enumerate(itertools.product(*(range(w) for w in window))):
        sl = tuple(slice(kk, kk + s * (o - 1) + 1, s) for kk, s, o in zip(k, stride, out_shape[2:]))
        yield flat, (slice(None), slice(None)) + sl


def _padded(x: np.ndarray, pre, post, fill: float):
    pad = [(0, 0), (0, 0)] + [(a, b) for a, b in zip(pre, post)]
    xp = np.pad(x, pad, constant_values=fill)
    valid = np.pad(np.ones(x.shape[2:], dtype=bool), pad[2:], constant_values=False)
    return xp, valid[None, None]


def forward(x: np.ndarray, mode, window, stride, pre, post, nan_propagation: bool = True):
    """(y, index) of float64 ``x`` [N, C, *in]; index (int64, window offsets) only for
    MAXPOOL, else None."""
    mode = ResampleMode(mode)
    out = output_dims(x.shape, window, stride, pre, post)
    if 0 in x.shape or 0 in out:
        return np.zeros(out), (
            np.zeros(out, dtype=np.int64) if mode == ResampleMode.MAXPOOL else None
        )
    xp, valid = _padded(x, pre, post, 0.0)
    with np.errstate(invalid="ignore"):
        if mode == ResampleMode.MAXPOOL:
            m = np.full(out, -np.inf)
            idx = np.full(out, -1, dtype=np.int64)
            for flat, sl in _windows(x.shape, out, window, stride, pre):
                v, ok = xp[sl], np.broadcast_to(valid[sl], out)
                if nan_propagation:
                    take = (v > m) | (np.isnan(v) & ~np.isnan(m))
                else:
                    v = np.where(np.isnan(v), -np.inf, v)
                    take = v > m
                take = ok & (take | (idx < 0))
                m = np.where(take, v, m)
                idx = np.where(take, flat, idx)
            return m, idx
        total = np.zeros(out)
        count = np.zeros(out)
        for _, sl in _windows(x.shape, out, window, stride, pre):
            total = total + xp[sl]  # padding holds zeros
            count = count + valid[sl]
        if mode == ResampleMode.AVGPOOL_INCLUDE_PADDING:
            count = np.full(out, float(np.prod(window)))
        return total / count, None


def backward(dy: np.ndarray, x_dims, mode, window, stride, pre, post, index=None):
    """dx [N, C, *in] from dy [N, C, *out]; MAXPOOL needs ``index`` (window offsets, as
    ``forward`` returns)."""
    mode = ResampleMode(mode)
    x_dims = tuple(x_dims)
    if 0 in x_dims or 0 in dy.shape:
        return np.zeros(x_dims)
    padded = x_dims[:2] + tuple(n + a + b for n, a, b in zip(x_dims[2:], pre, post))
    dxp = np.zeros(padded)
    out = dy.shape
    if mode == ResampleMode.MAXPOOL:
        for flat, sl in _windows(x_dims, out, window, stride, pre):
            dxp[sl] += np.where(index == flat, dy, 0.0)
    else:
        if mode == ResampleMode.AVGPOOL_INCLUDE_PADDING:
            count = float(np.prod(window))
        else:
            _, valid = _padded(np.zeros((1, 1) + x_dims[2:]), pre, post, 0.0)
            count = np.zeros(out[2:])
            for _, sl in _windows(x_dims, out, window, stride, pre):
                count = count + valid[sl][0, 0]
        g = dy / count
        for _, sl in _windows(x_dims, out, window, stride, pre):
            dxp[sl] += g
    crop = (slice(None), slice(None)) + tuple(slice(a, a + n) for a, n in zip(pre, x_dims[2:]))
    return dxp[crop]
