"""Matrix multiplication: ``C[..., m, n] = sum_k A[..., m, k] * B[..., k, n]``.

Batch dimensions broadcast (a size-1 batch dimension of A or B repeats). Accumulation is
in float32 in every engine but the reference, which is float64. float32 inputs use IEEE
float32 products unless TF32 is allowed (``opendnn.backends.allow_tf32`` or a compute
type of FAST_FLOAT), in which case inputs are rounded to TF32 (10-bit mantissa) first.
"""

from __future__ import annotations

import numpy as np


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float64 reference with NumPy's batch broadcasting."""
    return np.matmul(a, b)


def flops(m: int, n: int, k: int, batch: int) -> float:
    return 2.0 * m * n * k * batch
