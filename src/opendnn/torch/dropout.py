"""Dropout for PyTorch (``torch.nn.functional.dropout`` with its signature) on opendnn's
dropout graph nodes (the dropout engine's Philox stream, ``ops/dropout.py``).

Custom ops (namespace ``opendnn``), deterministic functions of their inputs:

- ``dropout(x, p, rng) -> y``: y = x * mask / (1 - p), mask_i = [u_i >= p] with u_i the
  uniform of element i (row-major logical index, whatever the layout) from Philox-4x32-10
  keyed by ``rng[0]`` with counters from ``rng[1]``; y is laid out as x;
- ``dropout_(x, p, rng)``: the same written over x;
- ``dropout_backward(grad, p, rng) -> dx`` = grad * mask / (1 - p), the mask regenerated
  from the same ``rng``: nothing of the mask is stored between forward and backward.

``rng`` is a two-element int64 tensor (seed, offset) on x's device, which the functional
layer draws per call from PyTorch's default generator of that device
(``torch.randint``): ``torch.manual_seed`` (or ``torch.cuda.manual_seed``) makes runs
repeat, and the draw is one small kernel with no host synchronization (CUDA graphs can
capture it). p = 0, ``training=False`` and zero-size inputs return the input itself, as
PyTorch does; p = 1 gives x * 0 (zeros; NaN stays NaN, as in PyTorch).
"""

from __future__ import annotations

import torch

from ..errors import BadParamError, Status
from . import _graphs
from .activation import check_input, graph_tensor, mark_output

RNG_HIGH = 2**62  # seed and offset are drawn from [0, RNG_HIGH)


def draw_rng(device: torch.device) -> torch.Tensor:
    """(seed, offset) for one dropout call from PyTorch's default generator of ``device``."""
    return torch.randint(0, RNG_HIGH, (2,), dtype=torch.int64, device=device)


def _check_rng(op: str, x: torch.Tensor, rng: torch.Tensor) -> None:
    if rng.dtype != torch.int64 or rng.shape != (2,) or rng.device != x.device:
        raise BadParamError(
            f"rng must be a two-element int64 tensor (seed, offset) on "
            f"{x.device}, got {rng.dtype} {list(rng.shape)} on {rng.device}",
            op=op,
            tensor="rng",
            status=Status.BAD_PARAM,
        )


def _check_p(op: str, p) -> float:
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise BadParamError(
            f"dropout probability has to be between 0 and 1, but got {p}",
            op=op,
            status=Status.BAD_PARAM_OUT_OF_BOUND,
        )
    return p


def _run(kind: str, data: torch.Tensor, out: torch.Tensor, p: float, rng: torch.Tensor):
    """The kept dropout / dropout_backward graph from ``data`` into ``out``."""
    seed, offset = rng[0:1], rng[1:2]
    key = (kind, p, _graphs.meta(data), _graphs.meta(out), _graphs.meta(seed))

    def builder(g):
        td, ts, to = (
            graph_tensor(g, t, r) for t, r in ((data, "data"), (seed, "seed"), (offset, "offset"))
        )
        if kind == "opendnn.dropout":
            y, _ = g.dropout(td, p, ts, to, generate_mask=False)
        else:
            y = g.dropout_backward(td, p, ts, to)
        return {"data": td, "seed": ts, "offset": to, "out": mark_output(y, out)}

    b = _graphs.built(key, data.device, builder)
    _graphs.run(b, {"data": data, "seed": seed, "offset": offset, "out": out})


def _forward(
    x: torch.Tensor,
    p: float,
    rng: torch.Tensor,
    op: str,
    kind: str = "opendnn.dropout",
    role: str = "input",
) -> torch.Tensor:
    """x (or, ``kind`` "opendnn.dropout_backward", dy) * mask(rng) / (1 - p), new tensor."""
    check_input(op, x, role)
    p = _check_p(op, p)
    _check_rng(op, x, rng)
    y = torch.empty_like(x)
    if x.numel():
        _run(kind, x.reshape(1) if x.dim() == 0 else x, y.view(1) if x.dim() == 0 else y, p, rng)
    return y


@torch.library.custom_op("opendnn::dropout", mutates_args=())
def dropout_op(x: torch.Tensor, p: float, rng: torch.Tensor) -> torch.Tensor:
    """y [x's shape and layout] = x * mask(rng) / (1 - p)."""
    return _forward(x, p, rng, "opendnn::dropout")


@dropout_op.register_fake
def _(x, p, rng):
    return torch.empty_like(x)


@torch.library.custom_op("opendnn::dropout_", mutates_args=("x",))
def dropout_inplace_op(x: torch.Tensor, p: float, rng: torch.Tensor) -> None:
    """x = x * mask(rng) / (1 - p) (the dropout node may not write over its input: it
    writes a temporary that is copied back)."""
    x.copy_(_forward(x, p, rng, "opendnn::dropout_"))


@dropout_inplace_op.register_fake
def _(x, p, rng):
    return None


@torch.library.custom_op("opendnn::dropout_backward", mutates_args=())
def dropout_backward_op(grad: torch.Tensor, p: float, rng: torch.Tensor) -> torch.Tensor:
    """dx [grad's shape and layout] = grad * mask(rng) / (1 - p), the forward's mask."""
    return _forward(grad, p, rng, "opendnn::dropout_backward", "opendnn.dropout_backward", "grad")


@dropout_backward_op.register_fake
def _(grad, p, rng):
    return torch.empty_like(grad)


def _setup(ctx, inputs, output):
    _, ctx.p, rng = inputs
    ctx.save_for_backward(rng)


def _backward(ctx, grad):
    (rng,) = ctx.saved_tensors
    return dropout_backward_op(grad, ctx.p, rng), None, None


dropout_op.register_autograd(_backward, setup_context=_setup)


class _InPlace(torch.autograd.Function):
    """Dropout written over x under autograd (x marked dirty; the backward needs only p
    and rng)."""

    @staticmethod
    def forward(ctx, x, p, rng):
        dropout_inplace_op(x, p, rng)
        ctx.mark_dirty(x)
        ctx.save_for_backward(rng)
        ctx.p = p
        return x

    @staticmethod
    def backward(ctx, grad):
        (rng,) = ctx.saved_tensors
        return dropout_backward_op(grad, ctx.p, rng), None, None


# eager calls skip the dispatcher (_graphs.direct; the ops stay registered)
dropout_op, dropout_inplace_op, dropout_backward_op = map(
    _graphs.direct, (dropout_op, dropout_inplace_op, dropout_backward_op)
)


def dropout(
    input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
) -> torch.Tensor:
    """Zeroes each element with probability p and scales the others by 1 / (1 - p)
    (``training``); the identity otherwise."""
    check_input("dropout", input)
    p = _check_p("dropout", p)
    if not training or p == 0.0 or input.numel() == 0:
        return input
    rng = draw_rng(input.device)
    if not inplace:
        return dropout_op(input, p, rng)
    if torch.is_grad_enabled() and input.requires_grad:
        if input.is_leaf:
            raise BadParamError(
                "a leaf tensor that requires grad cannot be modified in place (inplace=True)",
                op="dropout",
                tensor="input",
                status=Status.BAD_PARAM,
            )
        return _InPlace.apply(input, p, rng)
    dropout_inplace_op(input, p, rng)
    return input


__all__ = ["dropout"]
