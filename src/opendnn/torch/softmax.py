"""Softmax and log-softmax for PyTorch (``torch.nn.functional.softmax`` / ``log_softmax``
with their signatures) on opendnn's softmax graph nodes (the softmax engine; float64 on
the reference engine).

Custom ops (namespace ``opendnn``):

- ``softmax(x, dim, log, dtype) -> y``: y = softmax(x) along ``dim`` (log-softmax with
  ``log``), in ``dtype`` (None: x's type) -- x is read in its own type and the result
  written in ``dtype``, as PyTorch's ``dtype=`` casts first; y is contiguous, as
  PyTorch's softmax output is for every input layout;
- ``softmax_backward(grad, y, dim, log, input_dtype) -> dx`` (contiguous, input_dtype):

      softmax:      dx = y (dy - sum_dim(dy y))
      log-softmax:  dx = dy - exp(y) sum_dim(dy)

Autograd saves y (not x). Under CUDA autocast a half / bfloat16 input gives a float32
result (read in its own type, computed and written in float32), PyTorch's autocast policy
for softmax and log_softmax (an AutocastCUDA kernel: ``autocast_kernel``). A 0-dim input
is one element (softmax 1, log-softmax 0); zero-size inputs give empty outputs without
a graph.
"""

from __future__ import annotations

import warnings
from typing import Optional

import torch

from ..errors import BadParamError, GraphNotSupportedError, Status
from . import _graphs
from .activation import FLOATING, check_input, graph_tensor, mark_output


def _check_dim(op: str, x: torch.Tensor, dim) -> int:
    rank = max(x.dim(), 1)
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise BadParamError(
            f"dim must be an int, got {type(dim).__name__}",
            op=op,
            status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
        )
    if not -rank <= dim < rank:
        raise BadParamError(
            f"dim {dim} is out of range for {x.dim()} dims (allowed: {-rank} to {rank - 1})",
            op=op,
            tensor="input",
            status=Status.BAD_PARAM_OUT_OF_BOUND,
        )
    return dim % rank


def _check_dtype(op: str, dtype) -> None:
    if dtype is not None and dtype not in FLOATING:
        raise GraphNotSupportedError(
            f"dtype {dtype}: opendnn's softmax writes float16, bfloat16, float32 or float64",
            op=op,
            status=Status.NOT_SUPPORTED_DATA_TYPE,
        )


def _one_dim(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(1) if t.dim() == 0 else t


def _run(kind: str, dim: int, log: bool, inputs: dict, out: torch.Tensor, build) -> None:
    """The kept one-node graph ``build(g, {role: graph tensor})`` into ``out``."""
    inputs = {r: _one_dim(t) for r, t in inputs.items()}
    out = _one_dim(out)
    key = (kind, dim, log) + tuple(_graphs.meta(t) for t in inputs.values()) + (_graphs.meta(out),)

    def builder(g):
        ts = {r: graph_tensor(g, t, r) for r, t in inputs.items()}
        return {**ts, "out": mark_output(build(g, ts), out)}

    b = _graphs.built(key, out.device, builder)
    _graphs.run(b, {**inputs, "out": out})


@torch.library.custom_op("opendnn::softmax", mutates_args=())
def softmax_op(x: torch.Tensor, dim: int, log: bool, dtype: Optional[torch.dtype]) -> torch.Tensor:
    """y [x's shape, contiguous, ``dtype`` or x's type] = (log-)softmax(x) along dim."""
    op = "opendnn::softmax"
    check_input(op, x)
    _check_dtype(op, dtype)
    dim = _check_dim(op, x, dim)
    y = torch.empty(x.shape, dtype=dtype or x.dtype, device=x.device)
    if x.numel():
        _run(
            "opendnn.softmax",
            dim,
            log,
            {"x": x},
            y,
            lambda g, t: g.softmax(t["x"], axis=dim, log=log),
        )
    return y


@softmax_op.register_fake
def _(x, dim, log, dtype):
    return torch.empty(x.shape, dtype=dtype or x.dtype, device=x.device)


@torch.library.custom_op("opendnn::softmax_backward", mutates_args=())
def softmax_backward_op(
    grad: torch.Tensor, y: torch.Tensor, dim: int, log: bool, input_dtype: torch.dtype
) -> torch.Tensor:
    """dx [y's shape, contiguous, input_dtype] from dy = ``grad`` and the forward's y."""
    op = "opendnn::softmax_backward"
    check_input(op, grad, "grad")
    check_input(op, y, "y")
    _check_dtype(op, input_dtype)
    dim = _check_dim(op, y, dim)
    if grad.shape != y.shape:
        raise BadParamError(
            f"grad shape {list(grad.shape)} differs from y's {list(y.shape)}",
            op=op,
            tensor="grad",
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    dx = torch.empty(y.shape, dtype=input_dtype, device=y.device)
    if y.numel():
        _run(
            "opendnn.softmax_backward",
            dim,
            log,
            {"dy": grad, "y": y},
            dx,
            lambda g, t: g.softmax_backward(t["dy"], t["y"], axis=dim, log=log),
        )
    return dx


@softmax_backward_op.register_fake
def _(grad, y, dim, log, input_dtype):
    return torch.empty(y.shape, dtype=input_dtype, device=y.device)


def _setup(ctx, inputs, output):
    x, dim, log, _ = inputs
    ctx.save_for_backward(output)
    ctx.dim, ctx.log, ctx.input_dtype = dim, log, x.dtype


def _backward(ctx, grad):
    (y,) = ctx.saved_tensors
    dx = softmax_backward_op(grad, y, ctx.dim, ctx.log, ctx.input_dtype)
    return dx, None, None, None


softmax_op.register_autograd(_backward, setup_context=_setup)


def autocast_kernel(device_type: str):
    """PyTorch's autocast policy for softmax / log_softmax ("fp32_set_opt_dtype"): with
    no ``dtype``, a float16 / bfloat16 input is read as it is and the result computed and
    written in float32 (no cast of the input)."""
    key = getattr(torch._C.DispatchKey, "Autocast" + torch._C._dispatch_key_for_device(device_type))

    def kernel(x, dim, log, dtype):
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(key)):
            return torch.ops.opendnn.softmax(
                *_autocast_rule((x, dim, log, dtype), device_type, (device_type,))
            )

    return kernel


def _autocast_rule(args: tuple, dev: str, on: tuple = ("cuda",)) -> tuple:
    """The kernel's policy as ``_graphs.direct`` applies it (on devices ``on``)."""
    x, dim, log, dtype = args
    if dtype is None and x.dtype in (torch.float16, torch.bfloat16) and dev in on:
        dtype = torch.float32
    return x, dim, log, dtype


if torch._C._is_autocast_available("cuda"):  # CPU autocast leaves softmax alone
    torch.library.impl("opendnn::softmax", "AutocastCUDA")(autocast_kernel("cuda"))
    _graphs.AUTOCAST["opendnn::softmax"] = _autocast_rule
# eager calls skip the dispatcher (_graphs.direct; the ops stay registered)
softmax_op, softmax_backward_op = map(_graphs.direct, (softmax_op, softmax_backward_op))


def _implicit_dim(name: str, ndim: int, stacklevel: int) -> int:
    """PyTorch's legacy choice when dim is None (with its deprecation warning)."""
    warnings.warn(
        f"Implicit dimension choice for {name} has been deprecated. Change the "
        "call to include dim=X as an argument.",
        stacklevel=stacklevel,
    )
    return 0 if ndim in (0, 1, 3) else 1


def _apply(name: str, log: bool, input, dim, stacklevel: int, dtype) -> torch.Tensor:
    check_input(name, input)
    _check_dtype(name, dtype)
    if dim is None:
        dim = _implicit_dim(name, input.dim(), stacklevel + 1)
    _check_dim(name, input, dim)
    return softmax_op(input, dim, log, dtype)


def softmax(
    input: torch.Tensor,
    dim: int | None = None,
    _stacklevel: int = 3,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """exp(input) / sum_dim exp(input), in ``dtype`` when given."""
    return _apply("softmax", False, input, dim, _stacklevel, dtype)


def log_softmax(
    input: torch.Tensor,
    dim: int | None = None,
    _stacklevel: int = 3,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """input - log sum_dim exp(input), in ``dtype`` when given."""
    return _apply("log_softmax", True, input, dim, _stacklevel, dtype)


__all__ = ["softmax", "log_softmax"]
