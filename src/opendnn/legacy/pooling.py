"""cuDNN's pooling descriptor and calls on the graph API's resample nodes.

    y  = alpha * pool(x) + beta * y
    dx = alpha * pool_backward(dy; x, y) + beta * dx

Modes (cuDNN's numbers): MAX, AVERAGE_COUNT_INCLUDE_PADDING (divide by the window's
size), AVERAGE_COUNT_EXCLUDE_PADDING (by the real elements in it), MAX_DETERMINISTIC.
Padding is symmetric, the output size floor((in + 2 pad - window) / stride) + 1. Max
pooling's NaN option: NOT_PROPAGATE_NAN skips NaN elements, PROPAGATE_NAN gives NaN for a
window holding one. The backward of both max modes routes each gradient to its window's
first maximum, recomputed from x (y is checked, not read), with one deterministic gather
kernel (each input sums the gradients of the windows that picked it; no atomics), so MAX
and MAX_DETERMINISTIC give the same bits. The graphs are built once per (call,
descriptors, blend) and kept.
"""

from __future__ import annotations

import enum

import torch

from ..enums import DataType, HeurMode, ResampleMode
from ..graph.graph import Graph
from ..ops.pool import output_size
from ..runtime.lru import LRU, legacy_cache_size
from .common import (
    SCALAR,
    NanPropagation,
    Status,
    as_enum,
    as_float,
    as_int,
    as_ints,
    buffer,
    check,
    prior,
)


class PoolingMode(enum.IntEnum):
    MAX = 0
    AVERAGE_COUNT_INCLUDE_PADDING = 1
    AVERAGE_COUNT_EXCLUDE_PADDING = 2
    MAX_DETERMINISTIC = 3


_RESAMPLE = {
    PoolingMode.MAX: ResampleMode.MAXPOOL,
    PoolingMode.MAX_DETERMINISTIC: ResampleMode.MAXPOOL,
    PoolingMode.AVERAGE_COUNT_INCLUDE_PADDING: ResampleMode.AVGPOOL_INCLUDE_PADDING,
    PoolingMode.AVERAGE_COUNT_EXCLUDE_PADDING: ResampleMode.AVGPOOL_EXCLUDE_PADDING,
}


class PoolingDescriptor:
    """cudnnPoolingDescriptor_t: mode, NaN option, window / padding / stride per axis."""

    def __init__(self):
        self.mode = PoolingMode.MAX
        self.nan_opt = NanPropagation.NOT_PROPAGATE_NAN
        self.window: tuple = ()
        self.padding: tuple = ()
        self.stride: tuple = ()

    def is_set(self) -> bool:
        return bool(self.window)


def create_pooling_descriptor() -> PoolingDescriptor:
    return PoolingDescriptor()


def destroy_pooling_descriptor(desc) -> None:
    desc.window = ()


def set_pooling_2d_descriptor(
    desc, mode, max_pooling_nan_opt, window_h, window_w, v_pad, h_pad, v_stride, h_stride
) -> None:
    set_pooling_nd_descriptor(
        desc,
        mode,
        max_pooling_nan_opt,
        2,
        [window_h, window_w],
        [v_pad, h_pad],
        [v_stride, h_stride],
    )


def set_pooling_nd_descriptor(desc, mode, nan_opt, nb_dims, window, padding, stride) -> None:
    """Window, padding and stride of ``nb_dims`` (1-3) spatial axes."""
    op = "set_pooling_nd_descriptor"
    nb_dims = as_int(op, "nb_dims", nb_dims)
    check(
        1 <= nb_dims <= 3,
        f"nb_dims {nb_dims} must be 1..3 (spatial axes)",
        op,
        status=Status.BAD_PARAM_OUT_OF_BOUND,
    )
    window, padding = as_ints(op, "window", window), as_ints(op, "padding", padding)
    stride = as_ints(op, "stride", stride)
    check(
        len(window) == len(padding) == len(stride) == nb_dims,
        f"window, padding and stride need nb_dims={nb_dims} values each (got "
        f"{len(window)}, {len(padding)}, {len(stride)})",
        op,
        status=Status.BAD_PARAM_SHAPE_MISMATCH,
    )
    check(
        all(w >= 1 for w in window),
        f"window {list(window)} must be >= 1",
        op,
        status=Status.BAD_PARAM_OUT_OF_BOUND,
    )
    check(
        all(s >= 1 for s in stride),
        f"stride {list(stride)} must be >= 1",
        op,
        status=Status.BAD_PARAM_OUT_OF_BOUND,
    )
    check(
        all(p >= 0 for p in padding),
        f"padding {list(padding)} must be >= 0",
        op,
        status=Status.BAD_PARAM_OUT_OF_BOUND,
    )
    check(
        all(p < w for p, w in zip(padding, window)),
        f"padding {list(padding)} must be smaller than the window {list(window)}",
        op,
        status=Status.BAD_PARAM_OUT_OF_BOUND,
    )
    desc.mode = as_enum(op, "mode", PoolingMode, mode)
    desc.nan_opt = as_enum(op, "max_pooling_nan_opt", NanPropagation, nan_opt)
    desc.window, desc.padding, desc.stride = window, padding, stride


def get_pooling_2d_descriptor(desc) -> tuple:
    """(mode, nan_opt, window_h, window_w, v_pad, h_pad, v_stride, h_stride)."""
    check(len(desc.window) == 2, "not a 2-D pooling descriptor", "get_pooling_2d_descriptor")
    return (desc.mode, desc.nan_opt, *desc.window, *desc.padding, *desc.stride)


def get_pooling_nd_descriptor(desc, nb_dims_requested: int | None = None) -> tuple:
    """(mode, nan_opt, nb_dims, window, padding, stride)."""
    op = "get_pooling_nd_descriptor"
    n = len(desc.window)
    check(desc.is_set(), "descriptor was never set", op)
    check(
        nb_dims_requested is None or as_int(op, "nb_dims_requested", nb_dims_requested) >= n,
        f"nb_dims_requested {nb_dims_requested} < the descriptor's {n}",
        op,
        status=Status.BAD_PARAM_OUT_OF_BOUND,
    )
    return desc.mode, desc.nan_opt, n, list(desc.window), list(desc.padding), list(desc.stride)


def _output_dims(op, desc, x_desc) -> list[int]:
    check(desc.is_set(), "pooling descriptor was never set", op)
    check(x_desc.is_set(), "descriptor was never set", op, "x")
    nsp = len(desc.window)
    check(
        len(x_desc.dims) == nsp + 2,
        f"input has {len(x_desc.dims)} dims; a {nsp}-D pooling "
        f"descriptor needs {nsp + 2} (N, C, spatial)",
        op,
        "x",
        Status.BAD_PARAM_SHAPE_MISMATCH,
    )
    out = list(x_desc.dims[:2])
    for n, w, p, s in zip(x_desc.dims[2:], desc.window, desc.padding, desc.stride):
        check(
            w <= n + 2 * p,
            f"window {list(desc.window)} is larger than the padded input "
            f"{list(x_desc.dims[2:])} + 2 x {list(desc.padding)}",
            op,
            "x",
            Status.BAD_PARAM_OUT_OF_BOUND,
        )
        out.append(output_size(n, w, s, p, p))
    return out


def get_pooling_2d_forward_output_dim(desc, x_desc) -> tuple:
    """(n, c, h, w) of the output."""
    check(
        len(desc.window) == 2, "not a 2-D pooling descriptor", "get_pooling_2d_forward_output_dim"
    )
    return tuple(_output_dims("get_pooling_2d_forward_output_dim", desc, x_desc))


def get_pooling_nd_forward_output_dim(desc, x_desc, nb_dims) -> list:
    op = "get_pooling_nd_forward_output_dim"
    check(
        as_int(op, "nb_dims", nb_dims) == len(x_desc.dims),
        f"nb_dims {nb_dims} differs from the input's {len(x_desc.dims)} dims",
        op,
        "x",
        Status.BAD_PARAM_SHAPE_MISMATCH,
    )
    return _output_dims(op, desc, x_desc)


_cache = LRU(legacy_cache_size)


def _graph(handle, op, pdesc, descs: dict, out: str, blend: bool, beta: bool):
    forward = op == "pooling_forward"
    for name, d in descs.items():
        check(d.is_set(), "descriptor was never set", op, name)
    want = _output_dims(op, pdesc, descs["x"])
    for name, d in descs.items():
        check(
            d.data_type == descs["x"].data_type,
            f"data type {d.data_type.name} differs from x's {descs['x'].data_type.name}",
            op,
            name,
            Status.BAD_PARAM,
        )
        dims = want if name in ("y", "dy") else list(descs["x"].dims)
        check(
            list(d.dims) == dims,
            f"dims {list(d.dims)} must be {dims} (the pooling "
            f"{'output' if name in ('y', 'dy') else 'input'})",
            op,
            name,
            Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    key = (
        op,
        str(handle.device),
        int(pdesc.mode),
        int(pdesc.nan_opt),
        pdesc.window,
        pdesc.padding,
        pdesc.stride,
        blend,
        beta,
        tuple((n, d.dims, d.strides, int(d.data_type)) for n, d in descs.items()),
    )
    hit = _cache.get(key)
    if hit is not None:
        return hit
    mode = _RESAMPLE[pdesc.mode]
    is_max = mode == ResampleMode.MAXPOOL
    # the graph's inputs: the average backward reads dy alone (x and y give dims only)
    read = ("x",) if forward else ("dy", "x", "y") if is_max else ("dy",)
    g = Graph(
        name=op,
        handle=handle,
        intermediate_data_type=DataType.FLOAT,
        compute_data_type=DataType.FLOAT,
    )
    ins = {
        n: g.tensor(list(descs[n].dims), list(descs[n].strides), descs[n].data_type, name=n)
        for n in read
    }
    geo = dict(window=pdesc.window, stride=pdesc.stride, padding=pdesc.padding)
    nan = pdesc.nan_opt == NanPropagation.PROPAGATE_NAN
    if forward:
        t, _ = g.resample(ins["x"], mode, name="pool", nan_propagation=nan, **geo)
    else:
        t = g.resample_backward(
            ins["dy"],
            mode,
            input=ins.get("x"),
            output=ins.get("y"),
            nan_propagation=nan,
            name="pool",
            **geo,
        )
        t.set_dim(list(descs["dx"].dims)).set_stride(list(descs["dx"].strides))
    alpha = beta_t = prior_t = None
    if blend:
        alpha = g.tensor(name="alpha", **SCALAR)
        t = g.scale(t, alpha)
    d_out = descs[out]
    if beta:
        prior_t = g.tensor(
            list(d_out.dims), list(d_out.strides), d_out.data_type, name=f"{out}_prior"
        )
        beta_t = g.tensor(name="beta", **SCALAR)
        t = g.add(t, g.scale(prior_t, beta_t))
    t.set_output(True).set_dim(list(d_out.dims)).set_stride(list(d_out.strides))
    t.set_data_type(d_out.data_type).set_name(out)
    g.build([HeurMode.A, HeurMode.FALLBACK])
    hit = _cache[key] = (g, ins, t, alpha, beta_t, prior_t)
    return hit


def _run(built, bufs: dict, out, alpha, beta) -> None:
    g, ins, t, ta, tb, prior_t = built
    pack = {ins[n]: b for n, b in bufs.items() if n in ins}
    pack[t] = out
    if ta is not None:
        pack[ta] = float(alpha)
    if tb is not None:
        pack[prior_t] = prior(out)
        pack[tb] = float(beta)
    ws = torch.empty(g.get_workspace_size(), dtype=torch.uint8, device=out.device)
    g.execute(pack, ws)


def pooling_forward(handle, pooling_desc, alpha, x_desc, x, beta, y_desc, y) -> None:
    """y = alpha * pool(x) + beta * y."""
    op = "pooling_forward"
    alpha, beta = as_float(op, "alpha", alpha), as_float(op, "beta", beta)
    x, y = buffer(op, "x", x, x_desc, handle), buffer(op, "y", y, y_desc, handle, output=True)
    built = _graph(
        handle, op, pooling_desc, {"x": x_desc, "y": y_desc}, "y", alpha != 1.0, beta != 0.0
    )
    _run(built, {"x": x}, y, alpha, beta)


def pooling_backward(
    handle, pooling_desc, alpha, y_desc, y, dy_desc, dy, x_desc, x, beta, dx_desc, dx
) -> None:
    """dx = alpha * (the gradient of pool at x, given dy) + beta * dx."""
    op = "pooling_backward"
    alpha, beta = as_float(op, "alpha", alpha), as_float(op, "beta", beta)
    y, dy = buffer(op, "y", y, y_desc, handle), buffer(op, "dy", dy, dy_desc, handle)
    x = buffer(op, "x", x, x_desc, handle)
    dx = buffer(op, "dx", dx, dx_desc, handle, output=True)
    built = _graph(
        handle,
        op,
        pooling_desc,
        {"x": x_desc, "y": y_desc, "dy": dy_desc, "dx": dx_desc},
        "dx",
        alpha != 1.0,
        beta != 0.0,
    )
    _run(built, {"x": x, "y": y, "dy": dy}, dx, alpha, beta)


__all__ = [
    "PoolingMode",
    "PoolingDescriptor",
    "create_pooling_descriptor",
    "destroy_pooling_descriptor",
    "set_pooling_2d_descriptor",
    "set_pooling_nd_descriptor",
    "get_pooling_2d_descriptor",
    "get_pooling_nd_descriptor",
    "get_pooling_2d_forward_output_dim",
    "get_pooling_nd_forward_output_dim",
    "pooling_forward",
    "pooling_backward",
]
