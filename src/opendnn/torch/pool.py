"""Pooling for PyTorch on opendnn graphs (the resample node, engines/pool):
``max_pool1d/2d/3d``, ``avg_pool1d/2d/3d`` and ``adaptive_avg_pool1d/2d/3d`` with
``torch.nn.functional``'s signatures, their custom ops and autograd.

Geometry per spatial axis (input n, window k, stride s, padding p): PyTorch's output
size o = floor((n + 2p - k [+ s - 1 with ceil_mode]) / s) + 1, less one when ceil_mode's
last window would start in the right padding. The graph pads p before and
q = max(p, (o - 1) s + k - n - p) after (ceil_mode's extra windows read past the end).

- max: y = max over the window's real elements (padding never wins), NaN propagates. The
  argmax is the first maximum in window order, as PyTorch's (ties go to the first; with
  several NaN in a window PyTorch's index is the last NaN's, opendnn's the first's: the
  indices and where that window's gradient goes differ, y does not). When autograd will
  need it, the forward also writes the argmax as a window offset (int8 for windows up to
  128 elements, else int32) and the backward routes dy through it; ``return_indices``
  turns the offsets into PyTorch's flat indices into the input plane (int64, a few index
  operations in PyTorch).
  ``opendnn::max_pool`` (no offsets) recomputes the argmax from x in its backward.
- avg: the sum of the window's real elements over a divisor. count_include_pad: k^d
  (AVGPOOL_INCLUDE_PADDING), else the real elements (EXCLUDE). With ceil_mode PyTorch's
  include-padding divisor leaves out the extra windows' overhang: without padding that
  is the EXCLUDE divisor; with padding on any axis (and an extra window) it is no
  pooling mode's, GraphNotSupportedError. divisor_override d: INCLUDE scaled by k^d / d.
- adaptive_avg_pool: windows of n / o with stride n / o when o divides n (ResNet's global
  pooling: o = 1); other sizes are GraphNotSupportedError.

Not supported (GraphNotSupportedError, naming the operation, for ``enable()`` to fall back
on): dilation > 1, integer data (PyTorch pools integers on the CPU), and the cases above.
Outputs keep the input's layout (channels-innermost in, channels-innermost out).
"""

from __future__ import annotations

import math

import torch

from ..errors import BadParamError, GraphNotSupportedError, Status
from ._pool_ops import avg_pool, max_pool, max_pool_with_index


# ---- arguments and the functional functions -----------------------------------------------
def _bad(op, rule, status=Status.BAD_PARAM, tensor=None):
    return BadParamError(rule, op=op, tensor=tensor, status=status)


def _tuple(op, name, v, nsp) -> tuple:
    if isinstance(v, int) and not isinstance(v, bool):
        return (int(v),) * nsp
    v = tuple(int(a) for a in v)
    if len(v) == 1:
        return v * nsp
    if len(v) != nsp:
        raise _bad(
            op, f"{name} {list(v)} must be one int or {nsp} ints", Status.BAD_PARAM_SHAPE_MISMATCH
        )
    return v


def _batched(op, x: torch.Tensor, nsp: int) -> tuple[torch.Tensor, bool]:
    """``x`` with its batch dim (PyTorch takes unbatched [C, *spatial] too)."""
    if x.dim() not in (nsp + 1, nsp + 2):
        raise _bad(
            op,
            f"expected a {nsp + 1}-D or {nsp + 2}-D (batched) input, got "
            f"{x.dim()}-D {list(x.shape)}",
            Status.BAD_PARAM_SHAPE_MISMATCH,
            "input",
        )
    if not x.is_floating_point():  # PyTorch pools integers too: not an error of the call
        raise GraphNotSupportedError(
            f"is {x.dtype}: the pooling engines take floating data",
            op=op,
            tensor="input",
            status=Status.NOT_SUPPORTED_DATA_TYPE,
        )
    unbatched = x.dim() == nsp + 1
    x = x.unsqueeze(0) if unbatched else x
    if any(d == 0 for d in x.shape[1:]):
        raise _bad(
            op,
            f"input {list(x.shape)} has a zero-size non-batch dim",
            Status.BAD_PARAM_SHAPE_MISMATCH,
            "input",
        )
    return x, unbatched


def _geometry(op, x, nsp, kernel_size, stride, padding, dilation, ceil_mode):
    """(window, stride, pre, post, extra) with PyTorch's rules and output sizes; ``extra``:
    per axis, whether ceil_mode added a window past the padded end."""
    k = _tuple(op, "kernel_size", kernel_size, nsp)
    s = (
        k
        if stride is None or (not isinstance(stride, int) and len(stride) == 0)
        else _tuple(op, "stride", stride, nsp)
    )
    p = _tuple(op, "padding", padding, nsp)
    d = _tuple(op, "dilation", dilation, nsp)
    for name, v in (("kernel_size", k), ("stride", s), ("dilation", d)):
        if any(a <= 0 for a in v):
            raise _bad(
                op, f"{name} {list(v)} must be greater than zero", Status.BAD_PARAM_OUT_OF_BOUND
            )
    if any(a < 0 or a > ((kk - 1) * dd + 1) // 2 for a, kk, dd in zip(p, k, d)):
        raise _bad(
            op,
            f"padding {list(p)} should be at least zero and at most half of the "
            f"effective kernel size {list(k)}",
            Status.BAD_PARAM_OUT_OF_BOUND,
        )
    if any(dd != 1 for dd in d):
        raise GraphNotSupportedError(
            f"dilation {list(d)}: the pooling node has no dilation",
            op=op,
            status=Status.NOT_SUPPORTED,
        )
    post, extra = [], []
    for n, kk, ss, pp in zip(x.shape[2:], k, s, p):
        out = (n + 2 * pp - kk + (ss - 1 if ceil_mode else 0)) // ss + 1
        if ceil_mode and (out - 1) * ss >= n + pp:
            out -= 1
        if out < 1:
            raise _bad(
                op,
                f"output size is too small: input {list(x.shape[2:])}, kernel "
                f"{list(k)}, stride {list(s)}, padding {list(p)}",
                Status.BAD_PARAM_OUT_OF_BOUND,
                "input",
            )
        q = (out - 1) * ss + kk - n - pp
        post.append(max(pp, q))
        extra.append(q > pp)
    return list(k), list(s), list(p), post, extra


def _flat_indices(index, y_shape, x_shape, window, stride, pre) -> torch.Tensor:
    """PyTorch's indices (flat over each input plane, int64) from window offsets."""
    rem = index.long()
    flat = torch.zeros_like(rem)
    mult = 1
    for ax in reversed(range(len(window))):
        k = rem % window[ax]
        rem = rem // window[ax]
        shape = [1] * len(y_shape)
        shape[ax + 2] = y_shape[ax + 2]
        o = torch.arange(y_shape[ax + 2], device=index.device).view(shape)
        flat = flat + (o * stride[ax] - pre[ax] + k) * mult
        mult *= x_shape[ax + 2]
    return flat


def _max(op, nsp, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    x, unbatched = _batched(op, input, nsp)
    k, s, p, q, _ = _geometry(op, x, nsp, kernel_size, stride, padding, dilation, ceil_mode)
    grad = torch.is_grad_enabled() and x.requires_grad
    if return_indices or grad:
        y, index = max_pool_with_index(x, k, s, p, q)
    else:
        y, index = max_pool(x, k, s, p, q), None
    if return_indices:
        idx = _flat_indices(index, y.shape, x.shape, k, s, p)
        return (y[0], idx[0]) if unbatched else (y, idx)
    return y[0] if unbatched else y


def _avg(
    op, nsp, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
):
    x, unbatched = _batched(op, input, nsp)
    k, s, p, q, extra = _geometry(op, x, nsp, kernel_size, stride, padding, 1, ceil_mode)
    scale, include = 1.0, bool(count_include_pad)
    if divisor_override is not None:
        if int(divisor_override) == 0:
            raise _bad(op, "divisor_override must not be zero", Status.BAD_PARAM_OUT_OF_BOUND)
        scale, include = math.prod(k) / int(divisor_override), True
    elif include and any(extra):
        if any(pp > 0 for pp in p):
            raise GraphNotSupportedError(
                f"ceil_mode with count_include_pad and padding {p}: PyTorch divides a window "
                "past the padded end by its part inside the padded input, and the others by "
                "the whole window, which no pooling mode computes",
                op=op,
                status=Status.NOT_SUPPORTED,
            )
        include = False  # no padding: PyTorch's divisor is the real elements
    y = avg_pool(x, k, s, p, q, include, scale)
    return y[0] if unbatched else y


def max_pool1d(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    """``torch.nn.functional.max_pool1d`` on opendnn."""
    return _max(
        "max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices
    )


def max_pool2d(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    """``torch.nn.functional.max_pool2d`` on opendnn."""
    return _max(
        "max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices
    )


def max_pool3d(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    """``torch.nn.functional.max_pool3d`` on opendnn."""
    return _max(
        "max_pool3d", 3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices
    )


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """``torch.nn.functional.avg_pool1d`` on opendnn."""
    return _avg(
        "avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None
    )


def avg_pool2d(
    input,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    """``torch.nn.functional.avg_pool2d`` on opendnn."""
    return _avg(
        "avg_pool2d",
        2,
        input,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
    )


def avg_pool3d(
    input,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    """``torch.nn.functional.avg_pool3d`` on opendnn."""
    return _avg(
        "avg_pool3d",
        3,
        input,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
    )


def _adaptive_avg(op, nsp, input, output_size):
    x, unbatched = _batched(op, input, nsp)
    sizes = _tuple(
        op,
        "output_size",
        [(-1 if v is None else v) for v in output_size]
        if not isinstance(output_size, int)
        else output_size,
        nsp,
    )
    sizes = [n if o == -1 else o for n, o in zip(x.shape[2:], sizes)]
    if any(o <= 0 for o in sizes):
        raise _bad(op, f"output_size {sizes} must be positive", Status.BAD_PARAM_OUT_OF_BOUND)
    if any(n % o for n, o in zip(x.shape[2:], sizes)):
        raise GraphNotSupportedError(
            f"output size {sizes} does not divide the input's {list(x.shape[2:])}: adaptive "
            "windows of varying size are not a pooling node",
            op=op,
            status=Status.NOT_SUPPORTED,
        )
    k = [n // o for n, o in zip(x.shape[2:], sizes)]
    zero = [0] * nsp
    y = avg_pool(x, k, k, zero, zero, True, 1.0)
    return y[0] if unbatched else y


def adaptive_avg_pool1d(input, output_size):
    """``torch.nn.functional.adaptive_avg_pool1d`` on opendnn (output size dividing the
    input's)."""
    return _adaptive_avg("adaptive_avg_pool1d", 1, input, output_size)


def adaptive_avg_pool2d(input, output_size):
    """``torch.nn.functional.adaptive_avg_pool2d`` on opendnn (output size dividing the
    input's; ResNet's global pooling)."""
    return _adaptive_avg("adaptive_avg_pool2d", 2, input, output_size)


def adaptive_avg_pool3d(input, output_size):
    """``torch.nn.functional.adaptive_avg_pool3d`` on opendnn (output size dividing the
    input's)."""
    return _adaptive_avg("adaptive_avg_pool3d", 3, input, output_size)


__all__ = [
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
]
