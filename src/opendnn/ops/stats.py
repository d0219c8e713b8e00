"""genstats: per-channel batch-norm statistics of X (N, C, ...):
``SUM[c] = sum_{n,spatial} X[n, c, ...]`` and ``SQ_SUM[c] = sum X[n, c, ...]^2``."""

from __future__ import annotations

import numpy as np


def reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    axes = tuple(i for i in range(x.ndim) if i != 1)
    return x.sum(axis=axes, keepdims=True), (x * x).sum(axis=axes, keepdims=True)
