"""Normalizations for PyTorch on opendnn graphs: ``layer_norm``, ``rms_norm``,
``group_norm``, ``instance_norm`` (and ``batch_norm``, from ``batchnorm``) with
``torch.nn.functional``'s signatures, their custom ops and autograd.

Each normalizes rows of X (the norm engine; math in ``opendnn/ops/norm.py``): with
r = 1 / sqrt(var + eps) (biased variance) and xh = (x - mean) r,

- layer norm: rows over the trailing ``normalized_shape`` dims; y = xh w + b, w and b of
  ``normalized_shape``; saved mean / rstd [*leading, 1, ...] (PyTorch's shapes);
- RMS norm: mean 0, r = 1 / sqrt(mean(x^2) + eps), y = x r w; eps None means
  ``torch.finfo(input.dtype).eps``; saved rstd;
- group norm: X [N, C, *spatial], rows (n, group) over C / G channels and the spatial
  axes, per-channel w, b; saved mean / rstd [N, G];
- instance norm: group norm with G = C; with running buffers they are updated in place
  as PyTorch does (it runs batch norm on X viewed as [1, N C, *spatial]): r <- (1 - m) r
  + m mean_n(s), with the unbiased variance var L / (L - 1) (L spatial elements, var =
  1 / rstd^2 - eps) for the running variance (``opendnn::instance_norm_update_running``,
  one fused graph). ``use_input_stats=False`` normalizes with the running statistics:
  batch norm's inference.

Backward (dx, dw, db) by the norm engine's backward nodes. A None weight / bias is a
kept tensor of ones / zeros (its gradient is not returned). Saved statistics are float32
(float64 for float64 input). Under CUDA autocast, layer and group norm run in float32
(``register_autocast``), as PyTorch's do; RMS and instance norm return their input's type
(PyTorch 2.11 on the H100 did the same for rms_norm; the kernels compute in float32).
Double backward is not implemented. Layer / RMS norm outputs are contiguous (PyTorch's);
group / instance norm keep the input's layout (channels_last in, channels_last out).
"""

from __future__ import annotations

import math

import torch

from ..errors import BadParamError, Status
from ._norm_ops import (
    group_norm_op,
    instance_norm_op,
    instance_norm_update_running,
    layer_norm_op,
    rms_norm_op,
)
from .batchnorm import batch_norm, batch_norm_eval


# ---- argument checks and the functional functions -----------------------------------------
def _need(
    cond: bool,
    op: str,
    tensor: str | None,
    rule: str,
    status: Status = Status.BAD_PARAM_SHAPE_MISMATCH,
) -> None:
    if not cond:
        raise BadParamError(rule, op=op, tensor=tensor, status=status)


def _check_input(op: str, x: torch.Tensor, min_rank: int) -> None:
    _need(x.dim() >= min_rank, op, "input", f"needs at least {min_rank} dims, has {x.dim()}")
    _need(
        x.is_floating_point(),
        op,
        "input",
        f"is {x.dtype}: a floating type is needed",
        Status.NOT_SUPPORTED_DATA_TYPE,
    )


def _check_params(op: str, x, shape, params: dict) -> None:
    for name, t in params.items():
        if t is None:
            continue
        _need(
            tuple(t.shape) == tuple(shape), op, name, f"shape {list(t.shape)} must be {list(shape)}"
        )
        _need(
            t.device == x.device,
            op,
            name,
            f"is on {t.device}, input on {x.device}",
            Status.BAD_PARAM,
        )
        _need(
            t.is_floating_point(),
            op,
            name,
            f"is {t.dtype}: a floating type is needed",
            Status.NOT_SUPPORTED_DATA_TYPE,
        )


def _check_normalized(op: str, x, normalized_shape) -> list:
    shape = (
        [normalized_shape]
        if isinstance(normalized_shape, int)
        else [int(d) for d in normalized_shape]
    )
    k = len(shape)
    _need(k >= 1, op, None, "normalized_shape must have at least one dim", Status.BAD_PARAM)
    _need(
        x.dim() >= k and list(x.shape[x.dim() - k :]) == shape,
        op,
        "input",
        f"normalized_shape {shape} must equal input's trailing dims (input shape {list(x.shape)})",
    )
    return shape


def layer_norm(
    input: torch.Tensor,
    normalized_shape,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``torch.nn.functional.layer_norm`` on opendnn."""
    _check_input("layer_norm", input, 1)
    shape = _check_normalized("layer_norm", input, normalized_shape)
    _check_params("layer_norm", input, shape, {"weight": weight, "bias": bias})
    return layer_norm_op(input, shape, weight, bias, float(eps))[0]


def rms_norm(
    input: torch.Tensor,
    normalized_shape,
    weight: torch.Tensor | None = None,
    eps: float | None = None,
) -> torch.Tensor:
    """``torch.nn.functional.rms_norm`` on opendnn (eps None: the input type's epsilon)."""
    _check_input("rms_norm", input, 1)
    shape = _check_normalized("rms_norm", input, normalized_shape)
    _check_params("rms_norm", input, shape, {"weight": weight})
    e = torch.finfo(input.dtype).eps if eps is None else float(eps)
    return rms_norm_op(input, shape, weight, e)[0]


def group_norm(
    input: torch.Tensor,
    num_groups: int,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``torch.nn.functional.group_norm`` on opendnn."""
    op = "group_norm"
    _check_input(op, input, 2)
    c = input.shape[1]
    _need(
        int(num_groups) >= 1 and c % int(num_groups) == 0,
        op,
        "input",
        f"number of channels {c} must be divisible by num_groups {num_groups}",
        Status.BAD_PARAM,
    )
    _check_params(op, input, (c,), {"weight": weight, "bias": bias})
    return group_norm_op(input, int(num_groups), weight, bias, float(eps))[0]


def instance_norm(
    input: torch.Tensor,
    running_mean: torch.Tensor | None = None,
    running_var: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``torch.nn.functional.instance_norm`` on opendnn: each (n, c) over the spatial axes;
    running buffers, when given with ``use_input_stats``, updated in place; without
    ``use_input_stats`` the running statistics normalize (batch norm's inference)."""
    op = "instance_norm"
    _check_input(op, input, 3)
    c = input.shape[1]
    _check_params(
        op,
        input,
        (c,),
        {"running_mean": running_mean, "running_var": running_var, "weight": weight, "bias": bias},
    )
    _need(
        (running_mean is None) == (running_var is None),
        op,
        "running_var",
        "give both running_mean and running_var, or neither",
        Status.BAD_PARAM,
    )
    if not use_input_stats:
        _need(
            running_mean is not None,
            op,
            "running_mean",
            "running_mean and running_var are needed when use_input_stats is False",
            Status.BAD_PARAM_NULL_POINTER,
        )
        return batch_norm_eval(input, weight, bias, running_mean, running_var, float(eps))
    count = math.prod(input.shape[2:])
    _need(
        count > 1,
        op,
        "input",
        f"expected more than 1 spatial element when training, got input size {list(input.shape)}",
    )
    y, mean, rstd = instance_norm_op(input, weight, bias, float(eps))
    if running_mean is not None:
        with torch.no_grad():
            instance_norm_update_running(
                running_mean, running_var, mean, rstd, float(momentum), float(eps), count
            )
    return y


__all__ = ["batch_norm", "layer_norm", "rms_norm", "group_norm", "instance_norm"]
