"""Softmax along one axis, forward and backward: the float64 reference.

For a row x (the elements along ``axis``, every other index fixed) with m = max_i x_i:

    softmax:      y_i = exp(x_i - m) / sum_j exp(x_j - m)
    log-softmax:  y_i = x_i - m - log(sum_j exp(x_j - m))

Subtracting m changes nothing mathematically and keeps exp from overflowing (cuDNN's
ACCURATE algorithm; its FAST one skips it). A row of -inf gives NaN, as in PyTorch.

Backward, from the forward's output y and the incoming gradient dy:

    softmax:      dx_i = y_i (dy_i - sum_j dy_j y_j)
    log-softmax:  dx_i = dy_i - exp(y_i) sum_j dy_j
"""

from __future__ import annotations

import numpy as np


def forward(x: np.ndarray, axis: int, log: bool = False) -> np.ndarray:
    """Softmax (or log-softmax) of float64 ``x`` along ``axis``; same shape."""
    if x.size == 0:
        return np.empty_like(x)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m = x.max(axis=axis, keepdims=True)
        e = np.exp(x - m)
        s = e.sum(axis=axis, keepdims=True)
        return x - m - np.log(s) if log else e / s


def backward(dy: np.ndarray, y: np.ndarray, axis: int, log: bool = False) -> np.ndarray:
    """dx of softmax (or log-softmax) from the forward's output ``y``; same shape."""
    if y.size == 0:
        return np.empty_like(y)
    with np.errstate(invalid="ignore", over="ignore"):
        if log:
            return dy - np.exp(y) * dy.sum(axis=axis, keepdims=True)
        return y * (dy - (dy * y).sum(axis=axis, keepdims=True))
