"""Linear and matmul for PyTorch on opendnn graphs, and the helpers the convolution
family shares with them.

Custom ops (namespace ``opendnn``), each with a fake implementation and autograd:

- ``linear(x [..., in], weight [out, in], bias [out]?) -> y [..., out]``: one graph,
  ``y = bias(matmul(x2 [M, in], weight^T [in, out]), bias [1, out])`` with ``M`` the
  product of x's leading dims; the bias add is the matmul's epilogue and ``weight^T`` is a
  strided view (no copy). Backward: ``dx = dy2 @ weight``, ``dw = dy2^T @ x2`` (matmul
  ops on views), ``db = sum_to_size(dy2, [out])``.
- ``matmul(a [..., M, K], b [..., K, N]) -> c [..., M, N]``: ``torch.matmul`` for inputs of
  two or more dims, batch dims broadcast (1-D inputs are views in the functional layer).
  Backward: ``da = sum_to_size(dc @ b^T, a.shape)``, ``db = sum_to_size(a^T @ dc, b.shape)``;
  when one side has no batch the batch folds into the GEMM's M instead of a reduction.
- ``sum_to_size(x, size) -> Tensor.sum_to_size(size)`` as a reduction graph (float32
  accumulation): every bias gradient here and in ``conv``.

float32 GEMMs follow ``opendnn.backends.allow_tf32`` (the engines read it; it is part of
every kept graph's key). Under autocast (CUDA and CPU) ``linear`` and ``matmul`` cast
their floating inputs to the autocast dtype, as PyTorch does for its own ops.
"""

import math
from typing import Optional, Sequence

import torch
from torch._prims_common import suggest_memory_format

from ..enums import DataType
from ..errors import BadParamError, GraphNotSupportedError, Status
from . import _graphs
from ._bind import graph_tensor, mark_output  # noqa: F401  (conv.py uses them too)

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_lib = torch.library.Library("opendnn", "FRAGMENT")


# ---- helpers shared with conv.py ------------------------------------------------------------
def compute_type(dtype: torch.dtype) -> dict:
    """Builder keywords for a node on ``dtype`` operands: float64 computes in float64 (the
    graph's default intermediate and compute type is float32)."""
    return {"compute_data_type": DataType.DOUBLE} if dtype == torch.float64 else {}


def keep_precision(t, dtype: torch.dtype):
    """A virtual intermediate ``t`` of a float64 graph stays float64 (not float32)."""
    return t.set_data_type(DataType.DOUBLE) if dtype == torch.float64 else t


def check_inputs(op: str, tensors: dict) -> None:
    """Every tensor of ``tensors`` ({role: tensor or None}) has one floating type opendnn
    runs and all are on one device; the first is the reference."""
    first = None
    for role, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise BadParamError(
                f"{role} must be a tensor, got {type(t).__name__}",
                op=op,
                tensor=role,
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )
        if t.dtype not in DTYPES:
            raise GraphNotSupportedError(
                f"data type {t.dtype}: opendnn runs float32, float16, bfloat16 and float64",
                op=op,
                tensor=role,
                status=Status.NOT_SUPPORTED_DATA_TYPE,
            )
        if first is None:
            first = (role, t)
            continue
        if t.dtype != first[1].dtype:
            raise BadParamError(
                f"data type {t.dtype} differs from {first[0]}'s {first[1].dtype} "
                "(they must be the same)",
                op=op,
                tensor=role,
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )
        if t.device != first[1].device:
            raise BadParamError(
                f"device {t.device} differs from {first[0]}'s {first[1].device}",
                op=op,
                tensor=role,
                status=Status.BAD_PARAM,
            )


def run_graph(op: str, key: tuple, device, build, buffers: dict) -> None:
    """Build (once per key) and execute a graph; an unsupported problem is re-raised as a
    GraphNotSupportedError naming ``op`` with every engine's reason."""
    try:
        b = _graphs.built(key, device, build)
    except GraphNotSupportedError as e:
        err = GraphNotSupportedError(
            f"no opendnn plan for this problem ({e})", op=op, status=e.status
        )
        err.reasons = e.reasons
        raise err from e
    _graphs.run(b, buffers)


def memory_format(a: torch.Tensor, b: torch.Tensor) -> torch.memory_format:
    """PyTorch's convolution layout rule (cudnn_conv_suggest_memory_format): channels-last
    when either tensor suggests it (4-D or 5-D), except float64 on CUDA."""
    if a.dim() not in (4, 5) or (a.is_cuda and a.dtype == torch.float64):
        return torch.contiguous_format
    fa, fb = suggest_memory_format(a), suggest_memory_format(b)
    if torch.contiguous_format != fa:
        return fa
    return fb


def register_lower_precision_autocast(name: str) -> None:
    """Under ``torch.autocast`` (CUDA or CPU) cast the floating inputs of ``opendnn::name``
    (float64 excepted) to the autocast dtype in force, then run it with autocast off --
    PyTorch's rule for conv, linear and matmul (``torch.library.register_autocast`` would
    fix one dtype at registration)."""
    for dev, key in (("cuda", "AutocastCUDA"), ("cpu", "AutocastCPU")):

        def kernel(*args, _dev=dev):
            dtype = torch.get_autocast_dtype(_dev)
            cast = [
                a.to(dtype)
                if isinstance(a, torch.Tensor)
                and a.is_floating_point()
                and a.dtype != torch.float64
                and a.device.type == _dev
                else a
                for a in args
            ]
            with torch.autocast(_dev, enabled=False):
                return getattr(torch.ops.opendnn, name).default(*cast)

        _lib.impl(name, kernel, key)
    _graphs.AUTOCAST[f"opendnn::{name}"] = _graphs.lower


# ---- sum_to_size ----------------------------------------------------------------------------
@torch.library.custom_op("opendnn::sum_to_size", mutates_args=())
def sum_to_size(x: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    """``x.sum_to_size(size)`` (a new tensor, contiguous) as one reduction graph."""
    op = "sum_to_size"
    keep = _sum_shape(op, x, size)
    out = torch.empty(list(size), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    if x.numel() == 0:
        return out.zero_()
    if tuple(keep) == tuple(x.shape):
        return x.clone(memory_format=torch.contiguous_format)
    check_inputs(op, {"x": x})
    view = out.view(keep)

    def build(g):
        tx = graph_tensor(g, x, "x")
        return {"x": tx, "y": mark_output(g.reduction(tx, "ADD", **compute_type(x.dtype)), view)}

    run_graph(
        op,
        ("opendnn.sum_to_size", _graphs.meta(x), tuple(keep)),
        x.device,
        build,
        {"x": x, "y": view},
    )
    return out


@sum_to_size.register_fake
def _(x, size):
    _sum_shape("sum_to_size", x, size)
    return x.new_empty(list(size))


def _sum_shape(op, x, size) -> list:
    """x's rank with ``size`` right-aligned (reduced dims are 1); checks expandability."""
    lead = x.dim() - len(size)
    keep = [1] * lead + list(size)
    if lead < 0 or any(k != 1 and k != d for k, d in zip(keep, x.shape)):
        raise BadParamError(
            f"size {list(size)} is not expandable to {list(x.shape)}",
            op=op,
            tensor="x",
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    return keep


def _sum_setup(ctx, inputs, output):
    ctx.shape = inputs[0].shape


def _sum_backward(ctx, dy):
    return dy.expand(ctx.shape), None


sum_to_size.register_autograd(_sum_backward, setup_context=_sum_setup)


# ---- matmul ----------------------------------------------------------------------------------
def _matmul_shape(op, a, b) -> list:
    if a.dim() < 2 or b.dim() < 2:
        raise BadParamError(
            f"needs tensors of 2 or more dims, got {list(a.shape)} and "
            f"{list(b.shape)} (1-D inputs: the functional matmul)",
            op=op,
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    check_inputs(op, {"a": a, "b": b})
    if a.shape[-1] != b.shape[-2]:
        raise BadParamError(
            f"inner dimensions differ: a is {list(a.shape)}, b is "
            f"{list(b.shape)} ({a.shape[-1]} != {b.shape[-2]})",
            op=op,
            tensor="b",
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    try:
        batch = list(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except RuntimeError:
        raise BadParamError(
            f"batch dims {list(a.shape[:-2])} and {list(b.shape[:-2])} do not broadcast",
            op=op,
            tensor="b",
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        ) from None
    return batch + [a.shape[-2], b.shape[-1]]


def _no_batch(t) -> bool:
    return math.prod(t.shape[:-2]) == 1


@torch.library.custom_op("opendnn::matmul", mutates_args=())
def matmul_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.matmul(a, b)`` for a, b of >= 2 dims (batch dims broadcast); contiguous."""
    op = "matmul"
    c = torch.empty(_matmul_shape(op, a, b), dtype=a.dtype, device=a.device)
    if c.numel() == 0:
        return c
    if a.shape[-1] == 0:
        return c.zero_()
    k, n = b.shape[-2], b.shape[-1]
    if _no_batch(b):  # fold a's batch into M: one GEMM (x @ W)
        a2, b2, c2 = a.reshape(-1, k), b.reshape(k, n), c.view(-1, n)
    else:  # same rank for every tensor: size-1 batch dims broadcast
        r = c.dim()
        a2, b2, c2 = a[(None,) * (r - a.dim())], b[(None,) * (r - b.dim())], c
    _gemm(op, a2, b2, None, c2)
    return c


@matmul_op.register_fake
def _(a, b):
    return a.new_empty(_matmul_shape("matmul", a, b))


def _gemm(op, a, b, bias, c) -> None:
    """c = a @ b (+ bias, broadcast over c's rows, fused into the GEMM's epilogue)."""

    def build(g):
        ta, tb = graph_tensor(g, a, "a"), graph_tensor(g, b, "b")
        t = {"a": ta, "b": tb}
        out = g.matmul(ta, tb, **compute_type(a.dtype))
        if bias is not None:
            t["bias"] = graph_tensor(g, bias, "bias")
            out = g.bias(keep_precision(out, a.dtype), t["bias"], **compute_type(a.dtype))
        t["c"] = mark_output(out, c)
        return t

    key = ("opendnn.gemm", _graphs.meta(a), _graphs.meta(b), _graphs.meta(bias), _graphs.meta(c))
    bufs = {"a": a, "b": b, "c": c}
    if bias is not None:
        bufs["bias"] = bias
    run_graph(op, key, a.device, build, bufs)


def _matmul_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _matmul_backward(ctx, dc):
    a, b = ctx.saved_tensors
    da = db = None
    if ctx.needs_input_grad[0]:
        da = matmul_op(dc, b.transpose(-1, -2))
        if da.shape != a.shape:
            da = sum_to_size(da, list(a.shape))
    if ctx.needs_input_grad[1]:
        if _no_batch(b) and a.dim() >= 2:  # b was broadcast over every batch: fold it
            k, n = b.shape[-2], b.shape[-1]
            db = matmul_op(a.reshape(-1, k).t(), dc.reshape(-1, n)).view(b.shape)
        else:
            db = matmul_op(a.transpose(-1, -2), dc)
            if db.shape != b.shape:
                db = sum_to_size(db, list(b.shape))
    return da, db


matmul_op.register_autograd(_matmul_backward, setup_context=_matmul_setup)
register_lower_precision_autocast("matmul")


# ---- linear ---------------------------------------------------------------------------------
def _linear_shape(op, x, weight, bias) -> list:
    check_inputs(op, {"input": x, "weight": weight, "bias": bias})
    if x.dim() < 1 or weight.dim() != 2:
        raise BadParamError(
            f"input {list(x.shape)} must have >= 1 dims and weight "
            f"{list(weight.shape)} 2 dims [out, in]",
            op=op,
            tensor="weight",
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    if x.shape[-1] != weight.shape[1]:
        raise BadParamError(
            f"input features {x.shape[-1]} (input {list(x.shape)}) differ from "
            f"weight's {weight.shape[1]} (weight {list(weight.shape)})",
            op=op,
            tensor="weight",
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != weight.shape[0]):
        raise BadParamError(
            f"bias {list(bias.shape)} must be 1-D with {weight.shape[0]} elements (out features)",
            op=op,
            tensor="bias",
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    return list(x.shape[:-1]) + [weight.shape[0]]


@torch.library.custom_op("opendnn::linear", mutates_args=())
def linear_op(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """``x [..., in] @ weight[out, in]^T + bias`` -> [..., out] (contiguous): one matmul
    graph with the bias in its epilogue."""
    op = "linear"
    y = torch.empty(_linear_shape(op, x, weight, bias), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    if x.shape[-1] == 0:  # no input features: y = bias (or zeros), as PyTorch
        return y.copy_(bias.expand_as(y)) if bias is not None else y.zero_()
    n = weight.shape[0]
    _gemm(
        op,
        x.reshape(-1, x.shape[-1]),
        weight.t(),
        None if bias is None else bias.unsqueeze(0),
        y.view(-1, n),
    )
    return y


@linear_op.register_fake
def _(x, weight, bias):
    return x.new_empty(_linear_shape("linear", x, weight, bias))


def _linear_setup(ctx, inputs, output):
    x, w, b = inputs
    ctx.save_for_backward(x, w)
    ctx.has_bias = b is not None


def _linear_backward(ctx, dy):
    x, w = ctx.saved_tensors
    dy2 = dy.reshape(-1, w.shape[0])
    dx = dw = db = None
    if ctx.needs_input_grad[0]:
        dx = matmul_op(dy2, w).view(x.shape)
    if ctx.needs_input_grad[1]:
        dw = matmul_op(dy2.t(), x.reshape(-1, w.shape[1]))
    if ctx.has_bias and ctx.needs_input_grad[2]:
        db = sum_to_size(dy2, [w.shape[0]])
    return dx, dw, db


linear_op.register_autograd(_linear_backward, setup_context=_linear_setup)
register_lower_precision_autocast("linear")


# ---- functional ----------------------------------------------------------------------------
def _tensors(op, **ts) -> None:
    """Tensor arguments are tensors (dtypes are the op's to check: autocast casts them)."""
    for role, t in ts.items():
        if not isinstance(t, torch.Tensor):
            raise BadParamError(
                f"{role} must be a tensor, got {type(t).__name__}",
                op=op,
                tensor=role,
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )


def linear(input, weight, bias=None):
    """``torch.nn.functional.linear``: y [..., out] = input [..., in] @ weight[out, in]^T
    + bias [out]."""
    _tensors("linear", input=input, weight=weight)
    return linear_op(input, weight, bias)


def matmul(input, other, *, out=None):
    """``torch.matmul``: 1-D operands become a row (left) or a column (right) and the
    added dim is dropped from the result, as PyTorch does; ``out=`` is not supported."""
    if out is not None:
        raise GraphNotSupportedError(
            "out= is not supported (opendnn returns a new tensor)",
            op="matmul",
            status=Status.NOT_SUPPORTED,
        )
    _tensors("matmul", input=input, other=other)
    if input.dim() == 0 or other.dim() == 0:
        raise BadParamError(
            f"both arguments need at least 1 dim, got {list(input.shape)} and {list(other.shape)}",
            op="matmul",
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    a = input.unsqueeze(0) if input.dim() == 1 else input
    b = other.unsqueeze(-1) if other.dim() == 1 else other
    c = matmul_op(a, b)
    if other.dim() == 1:
        c = c.squeeze(-1)
    if input.dim() == 1:
        c = c.squeeze(-2 if other.dim() > 1 else -1)
    return c


# eager calls that need no dispatcher skip it (_graphs.direct; the ops stay registered)
linear_op, matmul_op, sum_to_size = map(_graphs.direct, (linear_op, matmul_op, sum_to_size))
