"""Layout operations: reshape, transpose, slice, concatenate (all copy into Y).

- reshape:     Y.flat = X.flat in row-major order of the logical dims
- transpose:   Y.dims[k] = X.dims[p[k]],  Y[..i_k..] = X[..] with axis p[k] -> k
- slice:       Y = X[s0:e0, ..., sn:en]
- concatenate: Y = [X_0 | X_1 | ...] along ``axis``
"""

from __future__ import annotations

import numpy as np


def reshape(x: np.ndarray, out_dims) -> np.ndarray:
    return np.ascontiguousarray(x).reshape(tuple(out_dims))


def transpose(x: np.ndarray, permutation) -> np.ndarray:
    return np.transpose(x, tuple(permutation))


def slice_(x: np.ndarray, starts, ends) -> np.ndarray:
    return x[tuple(slice(s, e) for s, e in zip(starts, ends))]


def concatenate(xs: list, axis: int) -> np.ndarray:
    return np.concatenate(xs, axis=axis)
