"""The custom ops behind ``pool``'s max / average pooling (forward and backward on the
resample nodes) with their fake implementations and autograd; see ``pool`` for the
geometry and the math."""

from __future__ import annotations

import math

import torch

from ..enums import ResampleMode
from ..legacy.common import SCALAR
from . import _graphs
from ._bind import desc, output

MAX, INCLUDE, EXCLUDE = (
    ResampleMode.MAXPOOL,
    ResampleMode.AVGPOOL_INCLUDE_PADDING,
    ResampleMode.AVGPOOL_EXCLUDE_PADDING,
)


# ---- layouts and the graphs ---------------------------------------------------------------
def channels_last(x: torch.Tensor) -> bool:
    """Whether ``x`` keeps its channels innermost (NHWC-like: stride 1 on C)."""
    return x.dim() >= 3 and x.shape[1] > 1 and x.stride(1) == 1 and not x.is_contiguous()


def _empty(shape, cl: bool, like: torch.Tensor, dtype=None) -> torch.Tensor:
    """[N, C, *spatial] with the channels innermost when ``cl``, else contiguous."""
    dtype = dtype or like.dtype
    if not cl:
        return torch.empty(shape, dtype=dtype, device=like.device)
    r = len(shape)
    t = torch.empty([shape[0], *shape[2:], shape[1]], dtype=dtype, device=like.device)
    return t.permute(0, r - 1, *range(1, r - 1))


def _out_shape(x_shape, window, stride, pre, post) -> list:
    return list(x_shape[:2]) + [
        (n + a + b - k) // s + 1 for n, k, s, a, b in zip(x_shape[2:], window, stride, pre, post)
    ]


def _index_dtype(window) -> torch.dtype:
    return torch.int8 if math.prod(window) <= 128 else torch.int32


def _forward(op, x, mode, window, stride, pre, post, index: bool, scale: float = 1.0):
    """(y, index or None) of pooling ``x``; y scaled by ``scale`` (divisor_override)."""
    cl = channels_last(x)
    shape = _out_shape(x.shape, window, stride, pre, post)
    y = _empty(shape, cl, x)
    idx = _empty(shape, cl, x, _index_dtype(window)) if index else None
    if x.numel() == 0:
        return y, idx
    key = (
        op,
        _graphs.meta(x),
        int(mode),
        tuple(window),
        tuple(stride),
        tuple(pre),
        tuple(post),
        index,
        scale != 1.0,
    )

    def build(g):
        t = {"x": desc(g, x, "x")}
        ty, ti = g.resample(
            t["x"], mode, window, stride, pre_padding=pre, post_padding=post, generate_index=index
        )
        if scale != 1.0:
            t["scale"] = g.tensor(name="scale", **SCALAR)
            ty = g.scale(ty, t["scale"])
        t["y"] = output(ty, y, "y")
        if index:
            t["index"] = output(ti, idx, "index")
        return t

    bufs = {"x": x, "y": y}
    if index:
        bufs["index"] = idx
    if scale != 1.0:
        bufs["scale"] = scale
    _graphs.run(_graphs.built(key, x.device, build), bufs)
    return y, idx


def _backward(
    op, dy, x_shape, cl, mode, window, stride, pre, post, x=None, index=None, scale: float = 1.0
):
    """dx [x_shape] of pooling: max through ``index`` or the argmax of ``x``."""
    dx = torch.empty_like(x) if x is not None else _empty(list(x_shape), cl, dy)
    if dx.numel() == 0:
        return dx
    if dy.numel() == 0:
        return dx.zero_()
    key = (
        op,
        _graphs.meta(dy),
        _graphs.meta(x),
        _graphs.meta(index),
        _graphs.meta(dx),
        int(mode),
        tuple(window),
        tuple(stride),
        tuple(pre),
        tuple(post),
        scale != 1.0,
    )

    def build(g):
        t = {"dy": desc(g, dy, "dy")}
        loss = t["dy"]
        if scale != 1.0:
            t["scale"] = g.tensor(name="scale", **SCALAR)
            loss = g.scale(loss, t["scale"])
        if x is not None:
            t["x"] = desc(g, x, "x")
        if index is not None:
            t["index"] = desc(g, index, "index")
        out = g.resample_backward(
            loss,
            mode,
            window,
            stride,
            pre_padding=pre,
            post_padding=post,
            index=t.get("index"),
            input=t.get("x"),
        )
        t["dx"] = output(out, dx, "dx")
        return t

    bufs = {"dy": dy, "dx": dx}
    for name, v in (("x", x), ("index", index)):
        if v is not None:
            bufs[name] = v
    if scale != 1.0:
        bufs["scale"] = scale
    _graphs.run(_graphs.built(key, dy.device, build), bufs)
    return dx


# ---- custom ops ---------------------------------------------------------------------------
@torch.library.custom_op("opendnn::max_pool", mutates_args=())
def max_pool(
    input: torch.Tensor,
    window: list[int],
    stride: list[int],
    pre_padding: list[int],
    post_padding: list[int],
) -> torch.Tensor:
    """Max pooling of [N, C, *spatial] (1-3 spatial axes); backward recomputes the argmax."""
    return _forward(
        "opendnn.max_pool", input, MAX, window, stride, pre_padding, post_padding, False
    )[0]


@max_pool.register_fake
def _(input, window, stride, pre_padding, post_padding):
    return _empty(
        _out_shape(input.shape, window, stride, pre_padding, post_padding),
        channels_last(input),
        input,
    )


@torch.library.custom_op("opendnn::max_pool_backward", mutates_args=())
def max_pool_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    window: list[int],
    stride: list[int],
    pre_padding: list[int],
    post_padding: list[int],
) -> torch.Tensor:
    """dx of max pooling: dy routed to the argmax recomputed from ``input``."""
    return _backward(
        "opendnn.max_pool_backward",
        grad_output,
        input.shape,
        False,
        MAX,
        window,
        stride,
        pre_padding,
        post_padding,
        x=input,
    )


@max_pool_backward.register_fake
def _(grad_output, input, window, stride, pre_padding, post_padding):
    return torch.empty_like(input)


def _max_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.attrs = inputs[1:]


def _max_backward(ctx, dy):
    (x,) = ctx.saved_tensors
    return (max_pool_backward(dy, x, *ctx.attrs), None, None, None, None)


max_pool.register_autograd(_max_backward, setup_context=_max_setup)


@torch.library.custom_op("opendnn::max_pool_with_index", mutates_args=())
def max_pool_with_index(
    input: torch.Tensor,
    window: list[int],
    stride: list[int],
    pre_padding: list[int],
    post_padding: list[int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, argmax as window offsets) of max pooling."""
    return _forward(
        "opendnn.max_pool_with_index", input, MAX, window, stride, pre_padding, post_padding, True
    )


@max_pool_with_index.register_fake
def _(input, window, stride, pre_padding, post_padding):
    shape = _out_shape(input.shape, window, stride, pre_padding, post_padding)
    cl = channels_last(input)
    return _empty(shape, cl, input), _empty(shape, cl, input, _index_dtype(window))


@torch.library.custom_op("opendnn::max_pool_index_backward", mutates_args=())
def max_pool_index_backward(
    grad_output: torch.Tensor,
    index: torch.Tensor,
    input_size: list[int],
    channels_last: bool,
    window: list[int],
    stride: list[int],
    pre_padding: list[int],
    post_padding: list[int],
) -> torch.Tensor:
    """dx [input_size] of max pooling: dy routed through the forward's window offsets."""
    return _backward(
        "opendnn.max_pool_index_backward",
        grad_output,
        input_size,
        channels_last,
        MAX,
        window,
        stride,
        pre_padding,
        post_padding,
        index=index,
    )


@max_pool_index_backward.register_fake
def _(grad_output, index, input_size, channels_last, window, stride, pre_padding, post_padding):
    return _empty(list(input_size), channels_last, grad_output)


def _maxi_setup(ctx, inputs, output):
    x = inputs[0]
    ctx.save_for_backward(output[1])
    ctx.mark_non_differentiable(output[1])
    ctx.size, ctx.cl, ctx.attrs = list(x.shape), channels_last(x), inputs[1:]


def _maxi_backward(ctx, dy, _didx):
    (index,) = ctx.saved_tensors
    return (
        max_pool_index_backward(dy, index, ctx.size, ctx.cl, *ctx.attrs),
        None,
        None,
        None,
        None,
    )


max_pool_with_index.register_autograd(_maxi_backward, setup_context=_maxi_setup)


def _avg_mode(include_pad: bool):
    return INCLUDE if include_pad else EXCLUDE


@torch.library.custom_op("opendnn::avg_pool", mutates_args=())
def avg_pool(
    input: torch.Tensor,
    window: list[int],
    stride: list[int],
    pre_padding: list[int],
    post_padding: list[int],
    include_pad: bool,
    scale: float,
) -> torch.Tensor:
    """Average pooling (divisor k^d with ``include_pad``, else the real elements), times
    ``scale``."""
    return _forward(
        "opendnn.avg_pool",
        input,
        _avg_mode(include_pad),
        window,
        stride,
        pre_padding,
        post_padding,
        False,
        scale,
    )[0]


@avg_pool.register_fake
def _(input, window, stride, pre_padding, post_padding, include_pad, scale):
    return _empty(
        _out_shape(input.shape, window, stride, pre_padding, post_padding),
        channels_last(input),
        input,
    )


@torch.library.custom_op("opendnn::avg_pool_backward", mutates_args=())
def avg_pool_backward(
    grad_output: torch.Tensor,
    input_size: list[int],
    channels_last: bool,
    window: list[int],
    stride: list[int],
    pre_padding: list[int],
    post_padding: list[int],
    include_pad: bool,
    scale: float,
) -> torch.Tensor:
    """dx [input_size] of average pooling."""
    return _backward(
        "opendnn.avg_pool_backward",
        grad_output,
        input_size,
        channels_last,
        _avg_mode(include_pad),
        window,
        stride,
        pre_padding,
        post_padding,
        scale=scale,
    )


@avg_pool_backward.register_fake
def _(
    grad_output,
    input_size,
    channels_last,
    window,
    stride,
    pre_padding,
    post_padding,
    include_pad,
    scale,
):
    return _empty(list(input_size), channels_last, grad_output)


def _avg_setup(ctx, inputs, output):
    x = inputs[0]
    ctx.size, ctx.cl, ctx.attrs = list(x.shape), channels_last(x), inputs[1:]


def _avg_backward(ctx, dy):
    return (avg_pool_backward(dy, ctx.size, ctx.cl, *ctx.attrs),) + (None,) * 6


avg_pool.register_autograd(_avg_backward, setup_context=_avg_setup)


# eager calls skip the dispatcher (_graphs.direct; the ops stay registered)
(
    max_pool,
    max_pool_backward,
    max_pool_with_index,
    max_pool_index_backward,
    avg_pool,
    avg_pool_backward,
) = map(
    _graphs.direct,
    (
        max_pool,
        max_pool_backward,
        max_pool_with_index,
        max_pool_index_backward,
        avg_pool,
        avg_pool_backward,
    ),
)
