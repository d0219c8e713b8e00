"""Convolution for PyTorch on opendnn graphs: conv1d, conv2d, conv3d (groups, depthwise,
stride, padding incl. 'same' / 'valid', dilation, optional bias).

Custom ops (namespace ``opendnn``), each with a fake implementation and autograd:

- ``conv_forward(x [N, C, *in], weight [K, C/G, *f], bias [K]?, stride, pre_padding,
  post_padding, dilation, groups) -> y [N, K, *out]`` with, per spatial axis,
  ``out = (in + pre + post - dilation * (f - 1) - 1) // stride + 1``: one graph,
  ``conv_fprop`` with the bias ``[1, K, 1, ...]`` added in its epilogue.
- ``conv_backward_input(dy, weight, input_size, ...) -> dx``: one ``conv_dgrad`` graph.
- ``conv_backward_weight(dy, x, weight_size, ...) -> dw``: one ``conv_wgrad`` graph.
- The bias gradient ``db[k] = sum over n, spatial of dy[n, k, ...]`` is
  ``opendnn::sum_to_size`` (a reduction graph, ``linear.py``).

Groups are the weight's channel dimension (G = C / weight.shape[1], cuDNN's graph API);
``groups`` is checked against it as PyTorch does. 1-D convolutions run as 3-D tensors
(the graph takes ranks 3 to 5). Padding is pre / post per axis: 'same' with an odd total
puts the extra element after, as PyTorch's F.pad does.

Layouts follow PyTorch: the output (and dx, dw) is channels-last (``channels_last`` 4-D,
``channels_last_3d`` 5-D) when the input or the weight suggests it, else contiguous. The
backward makes dy contiguous in that format first, as PyTorch's cuDNN backward does.
The backward ops have autograd too (both are linear in each argument), so double
backward works: d(dgrad) = (conv, wgrad), d(wgrad) = (conv, dgrad).

float32 convolutions follow ``opendnn.backends.allow_tf32``; under autocast (CUDA, CPU)
``conv_forward`` casts its floating inputs to the autocast dtype, as PyTorch does.
"""

from typing import Optional, Sequence

import torch

from ..errors import BadParamError, GraphNotSupportedError, Status
from . import _graphs
from .linear import (
    check_inputs,
    compute_type,
    graph_tensor,
    keep_precision,
    mark_output,
    memory_format,
    register_lower_precision_autocast,
    run_graph,
    sum_to_size,
)


def _name(rank: int) -> str:
    return f"conv{rank - 2}d" if 3 <= rank <= 5 else "conv"


def _out_shape(op, x_shape, w_shape, stride, pre, post, dilation, groups) -> list:
    """[N, K, *out] of the convolution, checking every PyTorch rule with a typed error."""
    rank = len(x_shape)
    nsp = rank - 2
    if not 1 <= nsp <= 3:
        raise BadParamError(
            f"input {list(x_shape)} must have 3 to 5 dims (N, C, 1-3 spatial)",
            op=op,
            tensor="input",
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    if len(w_shape) != rank:
        raise BadParamError(
            f"weight {list(w_shape)} must have {rank} dims [K, C/groups, "
            f"*kernel] for input {list(x_shape)}",
            op=op,
            tensor="weight",
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    for name, v, low in (
        ("stride", stride, 1),
        ("padding", pre, 0),
        ("padding", post, 0),
        ("dilation", dilation, 1),
    ):
        if len(v) != nsp:
            raise BadParamError(
                f"{name} {list(v)} needs {nsp} values (one per spatial dim)",
                op=op,
                status=Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        if any(a < low for a in v):
            raise BadParamError(
                f"{name} {list(v)} must be >= {low}", op=op, status=Status.BAD_PARAM_OUT_OF_BOUND
            )
    if groups < 1:
        raise BadParamError(
            f"groups {groups} must be >= 1", op=op, status=Status.BAD_PARAM_OUT_OF_BOUND
        )
    c, k, cg = x_shape[1], w_shape[0], w_shape[1]
    if cg * groups != c:
        raise BadParamError(
            f"weight {list(w_shape)} with groups={groups} expects "
            f"{cg * groups} input channels (weight.shape[1] * groups), but "
            f"input {list(x_shape)} has {c}",
            op=op,
            tensor="weight",
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    if k % groups:
        raise BadParamError(
            f"groups={groups} does not divide the {k} output channels of weight {list(w_shape)}",
            op=op,
            tensor="weight",
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    out = []
    for i in range(nsp):
        f = w_shape[2 + i]
        if f < 1:
            raise BadParamError(
                f"kernel size {list(w_shape[2:])} must be >= 1",
                op=op,
                tensor="weight",
                status=Status.BAD_PARAM_OUT_OF_BOUND,
            )
        padded, span = x_shape[2 + i] + pre[i] + post[i], dilation[i] * (f - 1) + 1
        if padded < span:
            raise BadParamError(
                f"padded input size {padded} (spatial dim {i}) is smaller "
                f"than the dilated kernel {span}",
                op=op,
                tensor="input",
                status=Status.BAD_PARAM_OUT_OF_BOUND,
            )
        out.append((padded - span) // stride[i] + 1)
    return [x_shape[0], k] + out


def _channel_view(t: torch.Tensor, nsp: int) -> torch.Tensor:
    """[K] -> [1, K, 1, ...] (a view, any stride)."""
    return t[(None, slice(None)) + (None,) * nsp]


def _params(stride, pre, post, dilation) -> dict:
    return dict(
        stride=list(stride), pre_padding=list(pre), post_padding=list(post), dilation=list(dilation)
    )


# ---- forward ---------------------------------------------------------------------------------
def _forward_shape(x, weight, bias, stride, pre, post, dilation, groups):
    op = _name(x.dim())
    check_inputs(op, {"input": x, "weight": weight, "bias": bias})
    shape = _out_shape(op, x.shape, weight.shape, stride, pre, post, dilation, groups)
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != weight.shape[0]):
        raise BadParamError(
            f"bias {list(bias.shape)} must be 1-D with {weight.shape[0]} "
            "elements (output channels)",
            op=op,
            tensor="bias",
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    return op, shape


@torch.library.custom_op("opendnn::conv_forward", mutates_args=())
def conv_forward(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    stride: Sequence[int],
    pre_padding: Sequence[int],
    post_padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
) -> torch.Tensor:
    """y [N, K, *out] = conv(x [N, C, *in], weight [K, C/groups, *f]) + bias [K]."""
    op, shape = _forward_shape(x, weight, bias, stride, pre_padding, post_padding, dilation, groups)
    y = torch.empty(shape, dtype=x.dtype, device=x.device, memory_format=memory_format(x, weight))
    if y.numel() == 0:
        return y
    if x.numel() == 0:  # no input channels or an empty image under padding: PyTorch's
        raise GraphNotSupportedError(  # results there are its own (no convolution runs)
            f"empty input {list(x.shape)} with a non-empty output {shape}",
            op=op,
            tensor="input",
            status=Status.NOT_SUPPORTED_SHAPE,
        )
    b = None if bias is None else _channel_view(bias, x.dim() - 2)
    p = _params(stride, pre_padding, post_padding, dilation)

    def build(g):
        t = {"x": graph_tensor(g, x, "x"), "w": graph_tensor(g, weight, "w")}
        out = g.conv_fprop(t["x"], t["w"], **p, **compute_type(x.dtype))
        if b is not None:
            t["b"] = graph_tensor(g, b, "bias")
            out = g.bias(keep_precision(out, x.dtype), t["b"], **compute_type(x.dtype))
        t["y"] = mark_output(out, y)
        return t

    key = (
        "opendnn.conv_fwd",
        *map(tuple, p.values()),
        _graphs.meta(x),
        _graphs.meta(weight),
        _graphs.meta(b),
        _graphs.meta(y),
    )
    bufs = {"x": x, "w": weight, "y": y}
    if b is not None:
        bufs["b"] = b
    run_graph(op, key, x.device, build, bufs)
    return y


@conv_forward.register_fake
def _(x, weight, bias, stride, pre_padding, post_padding, dilation, groups):
    _, shape = _forward_shape(x, weight, bias, stride, pre_padding, post_padding, dilation, groups)
    return torch.empty(
        shape, dtype=x.dtype, device=x.device, memory_format=memory_format(x, weight)
    )


def _forward_setup(ctx, inputs, output):
    x, weight, bias, *params = inputs
    ctx.save_for_backward(x, weight)
    ctx.params = params
    ctx.has_bias = bias is not None
    ctx.fmt = memory_format(x, weight)


def _forward_backward(ctx, dy):
    x, weight = ctx.saved_tensors
    dy = dy.contiguous(memory_format=ctx.fmt)
    dx = dw = db = None
    if ctx.needs_input_grad[0]:
        dx = conv_backward_input(dy, weight, list(x.shape), *ctx.params)
    if ctx.needs_input_grad[1]:
        dw = conv_backward_weight(dy, x, list(weight.shape), *ctx.params)
    if ctx.has_bias and ctx.needs_input_grad[2]:
        db = sum_to_size(dy, [weight.shape[0]] + [1] * (x.dim() - 2)).view(-1)
    return (dx, dw, db) + (None,) * 5


conv_forward.register_autograd(_forward_backward, setup_context=_forward_setup)
register_lower_precision_autocast("conv_forward")


# ---- backward data (dgrad) -----------------------------------------------------------------
def _grad_check(op, dy, x_shape, w_shape, stride, pre, post, dilation, groups, roles):
    check_inputs(op, roles)
    want = _out_shape(op, x_shape, w_shape, stride, pre, post, dilation, groups)
    if list(dy.shape) != want:
        raise BadParamError(
            f"grad_output {list(dy.shape)} differs from the convolution's output {want}",
            op=op,
            tensor="grad_output",
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        )


def _dgrad_out(dy, weight, input_size, stride, pre, post, dilation, groups):
    """(op name, the empty dx) after the argument checks (implementation and fake)."""
    op = _name(len(input_size))
    _grad_check(
        op,
        dy,
        input_size,
        weight.shape,
        stride,
        pre,
        post,
        dilation,
        groups,
        {"grad_output": dy, "weight": weight},
    )
    return op, torch.empty(
        list(input_size), dtype=dy.dtype, device=dy.device, memory_format=memory_format(dy, weight)
    )


def _wgrad_out(dy, x, weight_size, stride, pre, post, dilation, groups):
    """(op name, the empty dw) after the argument checks (implementation and fake)."""
    op = _name(x.dim())
    _grad_check(
        op,
        dy,
        x.shape,
        weight_size,
        stride,
        pre,
        post,
        dilation,
        groups,
        {"grad_output": dy, "input": x},
    )
    return op, torch.empty(
        list(weight_size), dtype=dy.dtype, device=dy.device, memory_format=memory_format(x, dy)
    )


@torch.library.custom_op("opendnn::conv_backward_input", mutates_args=())
def conv_backward_input(
    grad_output: torch.Tensor,
    weight: torch.Tensor,
    input_size: Sequence[int],
    stride: Sequence[int],
    pre_padding: Sequence[int],
    post_padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
) -> torch.Tensor:
    """dx [input_size] from dy [N, K, *out] and weight [K, C/groups, *f]."""
    op, dx = _dgrad_out(
        grad_output, weight, input_size, stride, pre_padding, post_padding, dilation, groups
    )
    if dx.numel() == 0:
        return dx
    if grad_output.numel() == 0 or weight.numel() == 0:
        return dx.zero_()
    p = _params(stride, pre_padding, post_padding, dilation)

    def build(g):
        t = {"dy": graph_tensor(g, grad_output, "dy"), "w": graph_tensor(g, weight, "w")}
        t["dx"] = mark_output(g.conv_dgrad(t["dy"], t["w"], **p, **compute_type(dx.dtype)), dx)
        return t

    key = (
        "opendnn.conv_dgrad",
        *map(tuple, p.values()),
        _graphs.meta(grad_output),
        _graphs.meta(weight),
        _graphs.meta(dx),
    )
    run_graph(op, key, dx.device, build, {"dy": grad_output, "w": weight, "dx": dx})
    return dx


@conv_backward_input.register_fake
def _(grad_output, weight, input_size, stride, pre_padding, post_padding, dilation, groups):
    return _dgrad_out(
        grad_output, weight, input_size, stride, pre_padding, post_padding, dilation, groups
    )[1]


def _dgrad_setup(ctx, inputs, output):
    dy, weight, _, *params = inputs
    ctx.save_for_backward(dy, weight)
    ctx.params = params


def _dgrad_backward(ctx, g_dx):
    dy, weight = ctx.saved_tensors
    g_dy = g_w = None
    if ctx.needs_input_grad[0]:
        g_dy = conv_forward(g_dx, weight, None, *ctx.params)
    if ctx.needs_input_grad[1]:
        g_w = conv_backward_weight(dy, g_dx, list(weight.shape), *ctx.params)
    return (g_dy, g_w) + (None,) * 6


conv_backward_input.register_autograd(_dgrad_backward, setup_context=_dgrad_setup)


# ---- backward filter (wgrad) ---------------------------------------------------------------
@torch.library.custom_op("opendnn::conv_backward_weight", mutates_args=())
def conv_backward_weight(
    grad_output: torch.Tensor,
    x: torch.Tensor,
    weight_size: Sequence[int],
    stride: Sequence[int],
    pre_padding: Sequence[int],
    post_padding: Sequence[int],
    dilation: Sequence[int],
    groups: int,
) -> torch.Tensor:
    """dw [weight_size] from dy [N, K, *out] and x [N, C, *in]."""
    op, dw = _wgrad_out(
        grad_output, x, weight_size, stride, pre_padding, post_padding, dilation, groups
    )
    if dw.numel() == 0:
        return dw
    if grad_output.numel() == 0 or x.numel() == 0:
        return dw.zero_()
    p = _params(stride, pre_padding, post_padding, dilation)

    def build(g):
        t = {"dy": graph_tensor(g, grad_output, "dy"), "x": graph_tensor(g, x, "x")}
        t["dw"] = mark_output(g.conv_wgrad(t["x"], t["dy"], **p, **compute_type(dw.dtype)), dw)
        return t

    key = (
        "opendnn.conv_wgrad",
        *map(tuple, p.values()),
        _graphs.meta(grad_output),
        _graphs.meta(x),
        _graphs.meta(dw),
    )
    run_graph(op, key, dw.device, build, {"dy": grad_output, "x": x, "dw": dw})
    return dw


@conv_backward_weight.register_fake
def _(grad_output, x, weight_size, stride, pre_padding, post_padding, dilation, groups):
    return _wgrad_out(
        grad_output, x, weight_size, stride, pre_padding, post_padding, dilation, groups
    )[1]


def _wgrad_setup(ctx, inputs, output):
    dy, x, _, *params = inputs
    ctx.save_for_backward(dy, x)
    ctx.params = params


def _wgrad_backward(ctx, g_dw):
    dy, x = ctx.saved_tensors
    g_dy = g_x = None
    if ctx.needs_input_grad[0]:
        g_dy = conv_forward(x, g_dw, None, *ctx.params)
    if ctx.needs_input_grad[1]:
        g_x = conv_backward_input(dy, g_dw, list(x.shape), *ctx.params)
    return (g_dy, g_x) + (None,) * 6


conv_backward_weight.register_autograd(_wgrad_backward, setup_context=_wgrad_setup)


# ---- functional ----------------------------------------------------------------------------
def _vec(op, name, v, nsp) -> list:
    if isinstance(v, int) and not isinstance(v, bool):
        return [v] * nsp
    if isinstance(v, (tuple, list)) and all(isinstance(a, int) for a in v):
        if len(v) == 1:
            return list(v) * nsp
        if len(v) == nsp:
            return list(v)
    raise BadParamError(
        f"expected {name} to be a single integer value or a list of {nsp} "
        f"values to match the convolution dimensions, but got {name}={v!r}",
        op=op,
        status=Status.BAD_PARAM,
    )


def _conv(op, nsp, input, weight, bias, stride, padding, dilation, groups):
    for role, t in (("input", input), ("weight", weight)):
        if not isinstance(t, torch.Tensor):
            raise BadParamError(
                f"{role} must be a tensor, got {type(t).__name__}",
                op=op,
                tensor=role,
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )
    if input.dim() not in (nsp + 1, nsp + 2):
        raise BadParamError(
            f"expected {nsp + 1}-D (unbatched) or {nsp + 2}-D (batched) input, "
            f"got input of size {list(input.shape)}",
            op=op,
            tensor="input",
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    if weight.dim() != nsp + 2:
        raise BadParamError(
            f"expected {nsp + 2}-D weight [K, C/groups, *kernel], got {list(weight.shape)}",
            op=op,
            tensor="weight",
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    if not isinstance(groups, int) or isinstance(groups, bool):
        raise BadParamError(
            f"groups must be an int, got {groups!r}", op=op, status=Status.BAD_PARAM_ATTRIBUTE_TYPE
        )
    stride, dilation = _vec(op, "stride", stride, nsp), _vec(op, "dilation", dilation, nsp)
    if isinstance(padding, str):
        if padding == "valid":
            pre = post = [0] * nsp
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise BadParamError(
                    f"padding='same' is not supported for strided convolutions (stride={stride})",
                    op=op,
                    status=Status.BAD_PARAM,
                )
            total = [d * (f - 1) for d, f in zip(dilation, weight.shape[2:])]
            pre = [t // 2 for t in total]
            post = [t - p for t, p in zip(total, pre)]
        else:
            raise BadParamError(
                f"invalid padding string {padding!r}, should be one of ['valid', 'same']",
                op=op,
                status=Status.BAD_PARAM,
            )
    else:
        pre = post = _vec(op, "padding", padding, nsp)
    batched = input.dim() == nsp + 2
    y = conv_forward(
        input if batched else input.unsqueeze(0), weight, bias, stride, pre, post, dilation, groups
    )
    return y if batched else y.squeeze(0)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``torch.nn.functional.conv1d``: input [N, C, L] or [C, L], weight [K, C/groups, f]."""
    return _conv("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``torch.nn.functional.conv2d``: input [N, C, H, W] or [C, H, W], weight
    [K, C/groups, R, S]; channels-last in, channels-last out."""
    return _conv("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``torch.nn.functional.conv3d``: input [N, C, D, H, W] or [C, D, H, W], weight
    [K, C/groups, T, R, S]; channels_last_3d in, channels_last_3d out."""
    return _conv("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


# eager calls that need no dispatcher skip it (_graphs.direct; the ops stay registered)
conv_forward, conv_backward_input, conv_backward_weight = map(
    _graphs.direct, (conv_forward, conv_backward_input, conv_backward_weight)
)
