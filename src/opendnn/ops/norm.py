"""Row normalizations -- layer, RMS, instance and group norm -- forward and backward: the
geometry every part of the library shares and the float64 reference.

Geometry. X is viewed as rows (normalization groups) of L elements:

- layer / RMS norm: the normalized axes are the axes where SCALE's dim is not 1
  (SCALE has X's rank; each dim is 1 or X's). SCALE [1, C, H, W] normalizes every
  non-batch axis (cudnn-frontend's convention); [1, 1, D] of X [B, S, D] normalizes D
  alone (PyTorch's ``normalized_shape``). MEAN / INV_VARIANCE have X's dims with the
  normalized axes set to 1. SCALE all ones normalizes nothing (rows of one element).
- instance norm: X [N, C, *spatial]; each (n, c) over the spatial axes; SCALE / BIAS
  [1, C, 1, ...] per channel; MEAN / INV_VARIANCE [N, C, 1, ...].
- group norm (``groups`` G dividing C): each (n, g) over (C/G, *spatial) -- X viewed as
  [N, G, C/G, *spatial]; SCALE / BIAS per channel [1, C, 1, ...]; MEAN / INV_VARIANCE
  [N, G, 1, ...]. Instance norm is group norm with G = C.

Math (per row, n = L elements, biased variance, inverse variance 1/sqrt(var + eps)):

    layer:  mu = mean(x), r = 1/sqrt(mean((x - mu)^2) + eps), xh = (x - mu) r
    RMS:    mu = 0,       r = 1/sqrt(mean(x^2) + eps),        xh = x r
    y = xh * scale + bias                          (RMS: bias optional)

Backward, with g = dy * scale (the gradient reaching xh):

    layer:  dx = r (g - mean(g) - xh mean(g xh))
    RMS:    dx = r (g - xh mean(g xh))
    dscale = sum of dy xh, dbias = sum of dy, over every element sharing the parameter
    (all rows, and for instance / group norm also the spatial positions).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

LAYER, RMS, INSTANCE, GROUP = "layer", "rms", "instance", "group"


@dataclasses.dataclass(frozen=True)
class Geometry:
    """How X [dims] splits into rows. ``view`` is X's dims as the kernels and the
    reference see them (group / instance norm insert the group axis), ``axes`` the
    normalized axes of ``view``; ``param_view`` / ``stats_view`` are SCALE's and MEAN's
    dims in that view (size 1 where they broadcast)."""

    view: tuple
    axes: tuple
    param_view: tuple
    stats_view: tuple
    stats_dims: tuple  # MEAN / INV_VARIANCE dims in the user's rank
    groups: int = 1  # parameter groups along the rows (G of group norm, 1 else)

    @property
    def rows(self) -> int:
        return math.prod(d for i, d in enumerate(self.view) if i not in self.axes)

    @property
    def row_length(self) -> int:
        return math.prod(self.view[i] for i in self.axes)


def geometry(norm: str, x_dims, scale_dims, groups: int = 1) -> Geometry | str:
    """The geometry of a norm of X [x_dims] with SCALE [scale_dims], or a string saying
    which rule the dims break."""
    x, s = tuple(x_dims), tuple(scale_dims)
    if len(s) != len(x):
        return f"SCALE has {len(s)} dims, X has {len(x)}: they need the same rank"
    if norm in (LAYER, RMS):
        for i, (a, b) in enumerate(zip(x, s)):
            if b not in (1, a):
                return f"SCALE dim {i} is {b}: it must be 1 or X's {a}"
        axes = tuple(i for i in range(len(x)) if s[i] != 1)
        stats = tuple(1 if i in axes else d for i, d in enumerate(x))
        return Geometry(x, axes, s, stats, stats)
    min_rank = 3 if norm == INSTANCE else 2
    if len(x) < min_rank:
        return f"X needs at least {min_rank} dims (N, C{', spatial' if min_rank == 3 else ''})"
    n, c, sp = x[0], x[1], x[2:]
    want = (1, c) + (1,) * len(sp)
    if s != want:
        return f"SCALE dims {list(s)} must be {list(want)} (one value per channel)"
    g = c if norm == INSTANCE else int(groups)
    if g < 1 or c % g:
        return f"groups {g} must be at least 1 and divide the {c} channels"
    view = (n, g, c // g) + sp
    axes = tuple(range(2, len(view)))
    param_view = (1, g, c // g) + (1,) * len(sp)
    stats_view = (n, g) + (1,) * (len(sp) + 1)
    return Geometry(view, axes, param_view, stats_view, (n, g) + (1,) * len(sp), g)


def check_epsilon(value) -> str | None:
    """Why ``value`` cannot be an epsilon (None when it can)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return f"epsilon must be a number, got {type(value).__name__}"
    if not math.isfinite(v) or v <= 0:
        return f"epsilon {v} must be finite and > 0"
    return None


def forward(geo: Geometry, x, scale, bias, eps: float, rms: bool):
    """(Y, MEAN, INV_VARIANCE) in float64: Y of X's dims, the statistics of
    ``geo.stats_dims`` (MEAN is zeros for RMS norm). ``bias`` may be None."""
    xv = np.asarray(x, np.float64).reshape(geo.view)
    sv = np.asarray(scale, np.float64).reshape(geo.param_view)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if rms:
            mu = np.zeros(geo.stats_view)
            ms = (xv * xv).mean(axis=geo.axes, keepdims=True)
        else:  # shifted by the row's first element (0 if inf or NaN): a constant row's
            # mean is exact, as the kernels' is
            first = xv[tuple(slice(0, 1) if i in geo.axes else slice(None) for i in range(xv.ndim))]
            k = np.where(np.isfinite(first), first, 0.0)
            mu = k + (xv - k).mean(axis=geo.axes, keepdims=True)
            ms = ((xv - mu) ** 2).mean(axis=geo.axes, keepdims=True)
        inv = 1.0 / np.sqrt(ms + eps)
        y = (xv - mu) * inv * sv
        if bias is not None:
            y = y + np.asarray(bias, np.float64).reshape(geo.param_view)
    shape = np.shape(x)
    return y.reshape(shape), mu.reshape(geo.stats_dims), inv.reshape(geo.stats_dims)


def backward(geo: Geometry, dy, x, scale, mean, inv, rms: bool):
    """(DX, DSCALE, DBIAS) in float64; DSCALE / DBIAS have SCALE's dims."""
    xv = np.asarray(x, np.float64).reshape(geo.view)
    dyv = np.asarray(dy, np.float64).reshape(geo.view)
    sv = np.asarray(scale, np.float64).reshape(geo.param_view)
    r = np.asarray(inv, np.float64).reshape(geo.stats_view)
    mu = 0.0 if rms else np.asarray(mean, np.float64).reshape(geo.stats_view)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        xh = (xv - mu) * r
        g = dyv * sv
        c1 = (g * xh).mean(axis=geo.axes, keepdims=True)
        dx = r * (g - xh * c1) if rms else r * (g - g.mean(axis=geo.axes, keepdims=True) - xh * c1)
        shared = tuple(i for i, d in enumerate(geo.param_view) if d == 1)
        dscale = (dyv * xh).sum(axis=shared, keepdims=True)
        dbias = dyv.sum(axis=shared, keepdims=True)
    pshape = np.shape(scale)
    return dx.reshape(np.shape(x)), dscale.reshape(pshape), dbias.reshape(pshape)
