"""cudnnLRNCrossChannelForward/Backward and cudnnDivisiveNormalizationForward/Backward on
the graph API's lrn nodes (math in ``ops/lrn.py``).

    y  = alpha * LRN(x) + beta * y                 (window of lrn_n channels)
    dx = alpha * LRN_backward(dy, x) + beta * dx
    y  = alpha * divnorm(x, means) + beta * y      (lrn_n^s box over the s spatial dims)
    dx = alpha * ddivnorm + beta * dx,  dmeans = alpha * (-ddivnorm) + beta * dmeans

The LRN descriptor keeps cuDNN's defaults (n 5, alpha 1e-4, beta 0.75, k 2.0) and its
ranges (CUDNN_LRN_MIN_N 1, CUDNN_LRN_MAX_N 16, CUDNN_LRN_MIN_K 1e-5, CUDNN_LRN_MIN_BETA
0.01): a value outside is BAD_PARAM with the rule. Tensors are 4-D or 5-D with equal dims
and any strides. ``temp`` and ``temp2`` (cuDNN's scratch tensors, x_desc-shaped) must be
given, as in cuDNN, but are not used: the engine keeps its intermediates in registers or
in its own workspace. In-place calls (y is x) read a copy of x. Graphs are built once per
(call, descriptors, LRN parameters, blend) and kept.
"""

from __future__ import annotations

import enum
import math

import torch

from ..enums import DataType, HeurMode
from ..errors import Status
from ..graph.graph import Graph
from ..ops import lrn as ref
from ..runtime.lru import LRU, legacy_cache_size
from .common import SCALAR, as_float, as_int, buffer, check, prior


class LRNMode(enum.IntEnum):
    CROSS_CHANNEL_DIM1 = 0


class DivNormMode(enum.IntEnum):
    PRECOMPUTED_MEANS = 0


class LRNDescriptor:
    """cudnnLRNDescriptor_t: (lrn_n, lrn_alpha, lrn_beta, lrn_k), cuDNN's defaults."""

    def __init__(self):
        self.lrn_n, self.lrn_alpha, self.lrn_beta, self.lrn_k = 5, 1e-4, 0.75, 2.0

    def params(self) -> tuple:
        return (self.lrn_n, self.lrn_alpha, self.lrn_beta, self.lrn_k)


def create_lrn_descriptor() -> LRNDescriptor:
    """cudnnCreateLRNDescriptor (n = 5, alpha = 1e-4, beta = 0.75, k = 2.0)."""
    return LRNDescriptor()


def set_lrn_descriptor(desc, lrn_n, lrn_alpha, lrn_beta, lrn_k) -> None:
    """cudnnSetLRNDescriptor; BAD_PARAM when a value is outside cuDNN's range."""
    op = "set_lrn_descriptor"
    check(isinstance(desc, LRNDescriptor), "needs a descriptor from create_lrn_descriptor", op)
    lrn_n = as_int(op, "lrn_n", lrn_n)
    lrn_alpha, lrn_beta = as_float(op, "lrn_alpha", lrn_alpha), as_float(op, "lrn_beta", lrn_beta)
    lrn_k = as_float(op, "lrn_k", lrn_k)
    check(
        ref.MIN_N <= lrn_n <= ref.MAX_N,
        f"lrn_n={lrn_n} is outside [CUDNN_LRN_MIN_N={ref.MIN_N}, CUDNN_LRN_MAX_N={ref.MAX_N}]",
        op,
        "lrn_n",
    )
    check(
        math.isfinite(lrn_k) and lrn_k >= ref.MIN_K,
        f"lrn_k={lrn_k} is below CUDNN_LRN_MIN_K={ref.MIN_K}",
        op,
        "lrn_k",
    )
    check(
        math.isfinite(lrn_beta) and lrn_beta >= ref.MIN_BETA,
        f"lrn_beta={lrn_beta} is below CUDNN_LRN_MIN_BETA={ref.MIN_BETA}",
        op,
        "lrn_beta",
    )
    check(math.isfinite(lrn_alpha), f"lrn_alpha={lrn_alpha} is not finite", op, "lrn_alpha")
    desc.lrn_n, desc.lrn_alpha, desc.lrn_beta, desc.lrn_k = lrn_n, lrn_alpha, lrn_beta, lrn_k


def get_lrn_descriptor(desc) -> tuple:
    """cudnnGetLRNDescriptor -> (lrn_n, lrn_alpha, lrn_beta, lrn_k)."""
    return desc.params()


def destroy_lrn_descriptor(desc) -> None:
    """cudnnDestroyLRNDescriptor (nothing to free)."""


_cache = LRU(legacy_cache_size)


def _graph(handle, op, norm_desc, descs: dict, outs: tuple, blend: bool, beta: bool):
    """(graph, input tensors, output tensors, alpha, beta, priors) for one call shape."""
    first = descs["x"]
    for name, d in descs.items():
        check(d.is_set(), "descriptor was never set", op, name)
    for name, d in descs.items():
        check(
            len(d.dims) in (4, 5),
            f"needs 4 or 5 dims, has {len(d.dims)}",
            op,
            name,
            Status.BAD_PARAM_SHAPE_MISMATCH,
        )
        check(
            d.dims == first.dims,
            f"dims {list(d.dims)} must equal x's {list(first.dims)}",
            op,
            name,
            Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    params = norm_desc.params()
    key = (
        op,
        str(handle.device),
        params,
        blend,
        beta,
        tuple((n, d.dims, d.strides, int(d.data_type)) for n, d in descs.items()),
    )
    hit = _cache.get(key)
    if hit is not None:
        return hit
    g = Graph(
        name=op,
        handle=handle,
        intermediate_data_type=DataType.FLOAT,
        compute_data_type=DataType.FLOAT,
    )
    out_desc = {o: descs["dx" if o == "dmeans" else o] for o in outs}
    ins = {
        n: g.tensor(list(d.dims), list(d.strides), d.data_type, name=n)
        for n, d in descs.items()
        if n not in outs
    }
    attrs = dict(zip(("lrn_n", "lrn_alpha", "lrn_beta", "lrn_k"), params), name=op)
    if op == "lrn_cross_channel_forward":
        made = [g.lrn(ins["x"], **attrs)]
    elif op == "lrn_cross_channel_backward":
        made = [g.lrn_backward(ins["dy"], ins["x"], ins["y"], **attrs)]
    elif op == "divisive_normalization_forward":
        made = [g.divisive_normalization(ins["x"], ins["means"], **attrs)]
    else:
        made = g.divisive_normalization_backward(ins["dy"], ins["x"], ins["means"], **attrs)
    alpha_t = g.tensor(name="alpha", **SCALAR) if blend else None
    beta_t = g.tensor(name="beta", **SCALAR) if beta else None
    results, priors = {}, {}
    for o, t in zip(outs, made):
        d = out_desc[o]
        if blend:
            t = g.scale(t, alpha_t)
        if beta:
            priors[o] = g.tensor(list(d.dims), list(d.strides), d.data_type, name=f"{o}_prior")
            t = g.add(t, g.scale(priors[o], beta_t))
        t.set_output(True).set_dim(list(d.dims)).set_stride(list(d.strides))
        t.set_data_type(d.data_type).set_name(o)
        results[o] = t
    g.build([HeurMode.A, HeurMode.FALLBACK])
    hit = _cache[key] = (g, ins, results, alpha_t, beta_t, priors)
    return hit


def _run(built, bufs: dict, outs: dict, alpha, beta) -> None:
    g, ins, results, ta, tb, priors = built
    written = [b for b in outs.values() if isinstance(b, torch.Tensor)]
    pack = {}
    for n, b in bufs.items():
        if isinstance(b, torch.Tensor) and any(_overlaps(b, w) for w in written):
            b = b.clone()  # in place: the window reads x's neighbours
        pack[ins[n]] = b
    for o, b in outs.items():
        pack[results[o]] = b
        if tb is not None:
            pack[priors[o]] = prior(b)
    if ta is not None:
        pack[ta] = float(alpha)
    if tb is not None:
        pack[tb] = float(beta)
    device = next(iter(outs.values())).device
    ws = torch.empty(g.get_workspace_size(), dtype=torch.uint8, device=device)
    g.execute(pack, ws)


def _overlaps(a, b) -> bool:
    sa, sb = a.untyped_storage(), b.untyped_storage()
    return sa.data_ptr() == sb.data_ptr() and a.device == b.device


def _check_lrn(op, handle, norm_desc, mode, mode_type, alpha, beta, bufs: dict) -> tuple:
    """(alpha, beta, {name: tensor}) after checking the descriptor, the mode, the scalars
    and the buffers (``bufs``: name -> (buffer, its descriptor))."""
    check(isinstance(norm_desc, LRNDescriptor), "needs an LRN descriptor", op, "norm_desc")
    try:
        mode_type(mode)
    except ValueError:
        check(False, f"mode {mode!r} is not one of {[m.name for m in mode_type]}", op, "mode")
    alpha, beta = as_float(op, "alpha", alpha), as_float(op, "beta", beta)
    return (
        alpha,
        beta,
        {
            n: buffer(op, n, b, d, handle, output=n in ("y", "dx", "dmeans"))
            for n, (b, d) in bufs.items()
        },
    )


def lrn_cross_channel_forward(
    handle, norm_desc, lrn_mode, alpha, x_desc, x, beta, y_desc, y
) -> None:
    """y = alpha * LRN(x) + beta * y across the channel dim (1)."""
    op = "lrn_cross_channel_forward"
    alpha, beta, b = _check_lrn(
        op, handle, norm_desc, lrn_mode, LRNMode, alpha, beta, {"x": (x, x_desc), "y": (y, y_desc)}
    )
    built = _graph(
        handle, op, norm_desc, {"x": x_desc, "y": y_desc}, ("y",), alpha != 1.0, beta != 0.0
    )
    _run(built, {"x": b["x"]}, {"y": b["y"]}, alpha, beta)


def lrn_cross_channel_backward(
    handle, norm_desc, lrn_mode, alpha, y_desc, y, dy_desc, dy, x_desc, x, beta, dx_desc, dx
) -> None:
    """dx = alpha * (gradient of LRN at x from dy) + beta * dx."""
    op = "lrn_cross_channel_backward"
    alpha, beta, b = _check_lrn(
        op,
        handle,
        norm_desc,
        lrn_mode,
        LRNMode,
        alpha,
        beta,
        {"y": (y, y_desc), "dy": (dy, dy_desc), "x": (x, x_desc), "dx": (dx, dx_desc)},
    )
    built = _graph(
        handle,
        op,
        norm_desc,
        {"x": x_desc, "y": y_desc, "dy": dy_desc, "dx": dx_desc},
        ("dx",),
        alpha != 1.0,
        beta != 0.0,
    )
    _run(built, {"x": b["x"], "y": b["y"], "dy": b["dy"]}, {"dx": b["dx"]}, alpha, beta)


def divisive_normalization_forward(
    handle, norm_desc, mode, alpha, x_desc, x, means, temp, temp2, beta, y_desc, y
) -> None:
    """y = alpha * (x - means) / (k + lrn_alpha/n^s box_sum((x - means)^2))^lrn_beta
    + beta * y; means, temp and temp2 share x_desc."""
    op = "divisive_normalization_forward"
    alpha, beta, b = _check_lrn(
        op,
        handle,
        norm_desc,
        mode,
        DivNormMode,
        alpha,
        beta,
        {
            "x": (x, x_desc),
            "means": (means, x_desc),
            "temp": (temp, x_desc),
            "temp2": (temp2, x_desc),
            "y": (y, y_desc),
        },
    )
    built = _graph(
        handle,
        op,
        norm_desc,
        {"x": x_desc, "means": x_desc, "y": y_desc},
        ("y",),
        alpha != 1.0,
        beta != 0.0,
    )
    _run(built, {"x": b["x"], "means": b["means"]}, {"y": b["y"]}, alpha, beta)


def divisive_normalization_backward(
    handle, norm_desc, mode, alpha, x_desc, x, means, dy, temp, temp2, beta, dx_desc, dx, dmeans
) -> None:
    """dx = alpha * dd + beta * dx and dmeans = -alpha * dd + beta * dmeans, dd the
    gradient at x - means from dy; means, dy, temp, temp2 share x_desc, dmeans dx_desc."""
    op = "divisive_normalization_backward"
    alpha, beta, b = _check_lrn(
        op,
        handle,
        norm_desc,
        mode,
        DivNormMode,
        alpha,
        beta,
        {
            "x": (x, x_desc),
            "means": (means, x_desc),
            "dy": (dy, x_desc),
            "temp": (temp, x_desc),
            "temp2": (temp2, x_desc),
            "dx": (dx, dx_desc),
            "dmeans": (dmeans, dx_desc),
        },
    )
    built = _graph(
        handle,
        op,
        norm_desc,
        {"x": x_desc, "means": x_desc, "dy": x_desc, "dx": dx_desc},
        ("dx", "dmeans"),
        alpha != 1.0,
        beta != 0.0,
    )
    _run(
        built,
        {"x": b["x"], "means": b["means"], "dy": b["dy"]},
        {"dx": b["dx"], "dmeans": b["dmeans"]},
        alpha,
        beta,
    )


__all__ = [
    "LRNMode",
    "DivNormMode",
    "LRNDescriptor",
    "create_lrn_descriptor",
    "set_lrn_descriptor",
    "get_lrn_descriptor",
    "destroy_lrn_descriptor",
    "lrn_cross_channel_forward",
    "lrn_cross_channel_backward",
    "divisive_normalization_forward",
    "divisive_normalization_backward",
]
