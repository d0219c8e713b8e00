"""Reductions: ``Y = reduce(X)`` over the axes where Y has size 1 and X does not.

Modes (cuDNN's ``cudnnReduceTensorOp_t``): ADD sum, MUL product, MIN, MAX, AMAX max |x|,
AVG mean, NORM1 sum |x|, NORM2 sqrt(sum x^2), MUL_NO_ZEROS product of the nonzero
elements. An empty reduction gives the identity (0 for sums, 1 for products, +inf / -inf
for MIN / MAX, 0 for AMAX, NaN for AVG of nothing), taken in the output's type: into a
BOOLEAN output MAX of nothing is False and MIN of nothing True (the identities of
torch.any / torch.all; -inf would be a nonzero value, True), the others as their
float identity converts (AVG's NaN is True).

Each mode is a pre-map ``f`` on elements, a combine ``(+, *, min, max)`` and a post-map
``g`` on the combined value: ``Y = g(combine_i f(X_i))``. Engines use the same table.
"""

from __future__ import annotations

import numpy as np

from ..enums import DataType
from ..enums import ReductionMode as R

# mode -> (pre-map name, combine, identity, post-map name)
TABLE = {
    R.ADD: ("x", "add", 0.0, "y"),
    R.MUL: ("x", "mul", 1.0, "y"),
    R.MIN: ("x", "min", float("inf"), "y"),
    R.MAX: ("x", "max", float("-inf"), "y"),
    R.AMAX: ("abs", "max", 0.0, "y"),
    R.AVG: ("x", "add", 0.0, "mean"),
    R.NORM1: ("abs", "add", 0.0, "y"),
    R.NORM2: ("square", "add", 0.0, "sqrt"),
    R.MUL_NO_ZEROS: ("nonzero_or_one", "mul", 1.0, "y"),
}


def identity(mode: R, data_type=None) -> float:
    """The value a reduction of nothing starts from, in the output type ``data_type``
    (None: float): a BOOLEAN output's MAX starts from False, its MIN from True."""
    ident = TABLE[mode][2]
    if data_type == DataType.BOOLEAN and TABLE[mode][1] in ("max", "min"):
        return 1.0 if ident > 0 else 0.0
    return ident


def reference(mode: R, x: np.ndarray, out_dims, data_type=None) -> np.ndarray:
    """float64 reference; ``out_dims`` has 1 on the reduced axes; ``data_type`` is the
    output's (an empty reduction's identity depends on it)."""
    axes = tuple(i for i, (a, b) in enumerate(zip(x.shape, out_dims)) if b == 1 and a != 1)
    pre, combine, _, post = TABLE[mode]
    ident = identity(mode, data_type)
    v = {"x": x, "abs": np.abs(x), "square": x * x, "nonzero_or_one": np.where(x == 0, 1.0, x)}[pre]
    if x.size == 0 or any(x.shape[a] == 0 for a in axes):
        y = np.full(tuple(out_dims), ident, dtype=np.float64)
        count = 0
    else:
        fn = {"add": np.sum, "mul": np.prod, "min": np.min, "max": np.max}[combine]
        y = fn(v, axis=axes, keepdims=True) if axes else v.copy()
        count = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    if post == "mean":
        with np.errstate(all="ignore"):
            y = y / count if count else np.full_like(y, np.nan)
    elif post == "sqrt":
        y = np.sqrt(y)
    return np.broadcast_to(y, tuple(out_dims)).astype(np.float64)
