"""Local response normalization (cross-channel LRN) and divisive normalization (LCN),
forward and backward: the float64 reference.

Both normalize ``d`` by a power of the sum of squares of ``d`` over a window of ``n``
elements per window axis, centred as cuDNN centres it: along an axis the window of index
c is [c - lo, c + hi] with lo = floor((n - 1) / 2), hi = n - 1 - lo (for n = 4: c-1..c+2),
and elements outside the tensor count as zero.

    S = k + alpha / n**s * sum_{window} d**2          (s = the number of window axes)
    y = d * S**(-beta)

- LRN (cudnnLRNCrossChannelForward): d = x, the window runs over the channel axis (1),
  s = 1.
- Divisive normalization (cudnnDivisiveNormalizationForward, PRECOMPUTED_MEANS):
  d = x - means, the window is a box over every spatial axis (2, 3[, 4]), s = the number
  of spatial axes. cuDNN's documentation describes this as "x / max(c, sigma_x)" over a
  spatial neighbourhood, with lrnAlpha divided by n**(spatial dims) and the LRN window's
  extents in every spatial dim; we implement exactly the LRN formula above on x - means
  over that box (no Gaussian weighting: a user wanting one passes Gaussian-smoothed
  means, as cuDNN's docs suggest).

Backward (from dy): with P = S**(-beta) and R = dy * d * P / S,

    dd_i = dy_i P_i - 2 alpha beta / n**s * d_i * sum_{c : i in window(c)} R_c

where the window of c contains i exactly when c is in [i - hi, i + lo] (the mirrored
window). LRN: dx = dd. Divisive normalization: dx = dd, dmeans = -dd.
"""

from __future__ import annotations

import numpy as np

MIN_N, MAX_N = 1, 16  # CUDNN_LRN_MIN_N, CUDNN_LRN_MAX_N
MIN_K, MIN_BETA = 1e-5, 0.01  # CUDNN_LRN_MIN_K, CUDNN_LRN_MIN_BETA


def extents(n: int) -> tuple[int, int]:
    """(look-behind, look-ahead) of a window of ``n`` elements."""
    lo = (n - 1) // 2
    return lo, n - 1 - lo


def window_sum(v: np.ndarray, axes, lo: int, hi: int) -> np.ndarray:
    """sum over [i - lo, i + hi] along each axis in ``axes`` (zero outside): a box sum."""
    for axis in axes:
        size = v.shape[axis]
        out = np.zeros_like(v)
        for o in range(-lo, hi + 1):
            dst = [slice(None)] * v.ndim
            src = [slice(None)] * v.ndim
            dst[axis] = slice(max(0, -o), min(size, size - o))
            src[axis] = slice(max(0, o), min(size, size + o))
            if dst[axis].start < dst[axis].stop:
                out[tuple(dst)] += v[tuple(src)]
        v = out
    return v


def _scale(d, axes, n, alpha, k):
    return k + alpha / n ** len(axes) * window_sum(d * d, axes, *extents(n))


def forward(
    x: np.ndarray,
    n: int,
    alpha: float,
    beta: float,
    k: float,
    axes,
    means: np.ndarray | None = None,
) -> np.ndarray:
    """y = d * (k + alpha / n**s * window_sum(d**2))**(-beta), d = x (- means)."""
    if x.size == 0:
        return np.empty_like(x)
    d = x if means is None else x - means
    with np.errstate(over="ignore", invalid="ignore"):
        return d * _scale(d, axes, n, alpha, k) ** (-beta)


def backward(
    dy: np.ndarray,
    x: np.ndarray,
    n: int,
    alpha: float,
    beta: float,
    k: float,
    axes,
    means: np.ndarray | None = None,
) -> np.ndarray:
    """dd (= dx; dmeans = -dd) of ``forward`` at x (and means) from dy."""
    if x.size == 0:
        return np.empty_like(x)
    d = x if means is None else x - means
    lo, hi = extents(n)
    with np.errstate(over="ignore", invalid="ignore"):
        s = _scale(d, axes, n, alpha, k)
        p = s ** (-beta)
        r = dy * d * p / s
        return dy * p - 2.0 * alpha * beta / n ** len(axes) * d * window_sum(r, axes, hi, lo)
