"""Batch normalization for PyTorch on opendnn graphs: ``batch_norm`` with
``torch.nn.functional.batch_norm``'s signature, its custom ops and their autograd.

X is [N, C, *spatial] (2-D to 5-D, any strides: NCHW, channels_last, non-contiguous);
statistics are per channel over N and the spatial axes, m values each (graph shape
S = [1, C, 1, ...]; PyTorch's parameters and buffers are [C], bound as views).

- training (``opendnn::batch_norm_train``, the batchnorm node): mean, biased variance
  var, invstd = 1 / sqrt(var + eps), y = (x - mean) invstd w + b; the running buffers are
  updated in place, r <- (1 - momentum) r + momentum s, with the UNBIASED variance
  var m / (m - 1) for the running variance, as PyTorch does. The op mutates
  ``running_mean`` / ``running_var`` (declared in its schema), so it is defined with
  ``torch.library.Library`` and its autograd is an ``Autograd`` kernel
  (``torch.library.custom_op`` refuses autograd formulas for mutating ops). The graph may
  not read what it writes: the old running values are read from a copy.
- inference (``opendnn::batch_norm_eval``, one fused pointwise kernel):
  y = (x - running_mean) (w rsqrt(running_var + eps)) + b.
- backward of training (``opendnn::batch_norm_backward``, the batchnorm_backward node),
  with xh = (x - mean) invstd: db = sum dy, dw = sum dy xh,
  dx = w invstd (dy - db / m - xh dw / m).
- backward of inference (``opendnn::batch_norm_eval_backward``, one fused graph): the
  statistics are constants, so dx = dy w rsqrt(running_var + eps), dw = sum dy xh, db = sum dy.

Saved statistics are float32 (float64 for float64 input). Double backward is not
implemented (the backward ops have no autograd). Under CUDA autocast batch norm runs in
its input's data type, as PyTorch's does (no autocast registration).
"""

from __future__ import annotations

import torch

from ..enums import ReductionMode
from ..errors import BadParamError, Status
from ..legacy.common import SCALAR
from . import _graphs
from ._bind import constant, desc, output, stats_dtype

_lib = torch.library.Library("opendnn", "FRAGMENT")  # kept: the op lives while it does


def _sd(x) -> list:
    return [1, x.shape[1]] + [1] * (x.dim() - 2)


def _check(op: str, x, params: dict) -> None:
    """PyTorch's argument rules for batch norm, as typed errors."""
    if x.dim() < 2:
        raise BadParamError(
            f"input needs at least 2 dims (N, C, ...), has {x.dim()}",
            op=op,
            tensor="input",
            status=Status.BAD_PARAM_SHAPE_MISMATCH,
        )
    if not x.is_floating_point():
        raise BadParamError(
            f"input is {x.dtype}: a floating type is needed",
            op=op,
            tensor="input",
            status=Status.NOT_SUPPORTED_DATA_TYPE,
        )
    c = x.shape[1]
    for name, t in params.items():
        if t is None:
            continue
        if t.dim() != 1 or t.shape[0] != c:
            raise BadParamError(
                f"shape {list(t.shape)} must be [{c}] (input's channels)",
                op=op,
                tensor=name,
                status=Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        if t.device != x.device:
            raise BadParamError(
                f"is on {t.device}, input on {x.device}",
                op=op,
                tensor=name,
                status=Status.BAD_PARAM,
            )


# ---- training forward: a mutating op (Library) with an Autograd kernel --------------------
_lib.define(
    "batch_norm_train(Tensor input, Tensor? weight, Tensor? bias, "
    "Tensor(a!)? running_mean, Tensor(b!)? running_var, float momentum, float eps) "
    "-> (Tensor, Tensor, Tensor)"
)


def _train_impl(x, weight, bias, running_mean, running_var, momentum, eps):
    c, sd, st = x.shape[1], _sd(x), stats_dtype(x)
    y = torch.empty_like(x)
    mean = torch.empty(c, dtype=st, device=x.device)
    invstd = torch.empty(c, dtype=st, device=x.device)
    if x.numel() == 0:  # PyTorch: empty output, running buffers untouched
        return y, mean.zero_(), invstd.zero_()
    w = weight if weight is not None else constant(1.0, (c,), st, x.device)
    b = bias if bias is not None else constant(0.0, (c,), st, x.device)
    running = running_mean is not None
    key = (
        "opendnn.batch_norm_train",
        _graphs.meta(x),
        _graphs.meta(w),
        _graphs.meta(b),
        _graphs.meta(running_mean),
        _graphs.meta(running_var),
    )

    def build(g):
        t = {
            "x": desc(g, x, "x"),
            "w": desc(g, w, "weight", sd),
            "b": desc(g, b, "bias", sd),
            "eps": g.tensor(name="eps", **SCALAR),
        }
        if running:
            t["old_mean"] = desc(g, running_mean, "old_running_mean", sd)
            t["old_var"] = desc(g, running_var, "old_running_var", sd)
            t["momentum"] = g.tensor(name="momentum", **SCALAR)
        out = g.batchnorm(
            t["x"], t["w"], t["b"], t.get("old_mean"), t.get("old_var"), t["eps"], t.get("momentum")
        )
        t["y"] = output(out[0], y, "y")
        t["mean"] = output(out[1], mean, "save_mean", sd)
        t["invstd"] = output(out[2], invstd, "save_invstd", sd)
        if running:
            t["new_mean"] = output(out[3], running_mean, "running_mean", sd)
            t["new_var"] = output(out[4], running_var, "running_var", sd)
        return t

    b_ = _graphs.built(key, x.device, build)
    bufs = {
        "x": x,
        "w": w.view(sd),
        "b": b.view(sd),
        "eps": eps,
        "y": y,
        "mean": mean.view(sd),
        "invstd": invstd.view(sd),
    }
    if running:
        bufs.update(
            old_mean=running_mean.clone().view(sd),
            old_var=running_var.clone().view(sd),
            momentum=momentum,
            new_mean=running_mean.view(sd),
            new_var=running_var.view(sd),
        )
    _graphs.run(b_, bufs)
    return y, mean, invstd


def _train_fake(x, weight, bias, running_mean, running_var, momentum, eps):
    st = stats_dtype(x)
    return (
        torch.empty_like(x),
        x.new_empty(x.shape[1], dtype=st),
        x.new_empty(x.shape[1], dtype=st),
    )


_lib.impl("batch_norm_train", _train_impl, "CompositeExplicitAutograd")
torch.library.register_fake("opendnn::batch_norm_train", _train_fake, lib=_lib)


def _saved(ctx, x, weight, bias, out):
    y, mean, invstd = out
    ctx.save_for_backward(x, weight, mean, invstd)
    ctx.has_bias = bias is not None
    ctx.mark_non_differentiable(mean, invstd)
    return y, mean, invstd


class _TrainFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, momentum, eps):
        with torch._C._AutoDispatchBelowAutograd():
            return _saved(
                ctx,
                x,
                weight,
                bias,
                torch.ops.opendnn.batch_norm_train(
                    x, weight, bias, running_mean, running_var, momentum, eps
                ),
            )

    @staticmethod
    def backward(ctx, dy, _dmean, _dinvstd):
        x, weight, mean, invstd = ctx.saved_tensors
        dx, dw, db = batch_norm_backward(dy, x, weight, mean, invstd)
        return (
            dx,
            dw if weight is not None else None,
            db if ctx.has_bias else None,
            None,
            None,
            None,
            None,
        )


class _TrainEager(_TrainFunction):
    """_TrainFunction calling the implementation itself (eager: no dispatcher)."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, momentum, eps):
        return _saved(
            ctx,
            x,
            weight,
            bias,
            _train_impl(x, weight, bias, running_mean, running_var, momentum, eps),
        )


def _train_autograd(x, weight, bias, running_mean, running_var, momentum, eps, eager: bool = False):
    """The Autograd kernel of batch_norm_train; ``eager``: the same without the
    dispatcher (``_graphs.direct``'s rule: not compiling, plain tensors)."""
    if running_mean is not None:  # the version counters of the mutated buffers
        torch.autograd.graph.increment_version(running_mean)
        torch.autograd.graph.increment_version(running_var)
    args = (x, weight, bias, running_mean, running_var, momentum, eps)
    if torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (x, weight, bias)
    ):
        return (_TrainEager if eager else _TrainFunction).apply(*args)
    if eager:
        return _train_impl(*args)
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.opendnn.batch_norm_train(*args)


_lib.impl("batch_norm_train", _train_autograd, "Autograd")


# ---- training backward --------------------------------------------------------------------
@torch.library.custom_op("opendnn::batch_norm_backward", mutates_args=())
def batch_norm_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor | None,
    save_mean: torch.Tensor,
    save_invstd: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx [like input], dweight [C], dbias [C]) of training batch norm from the saved
    statistics; dweight / dbias have weight's type (the statistics' without a weight)."""
    x, dy = input, grad_output
    c, sd = x.shape[1], _sd(x)
    w = weight if weight is not None else constant(1.0, (c,), save_mean.dtype, x.device)
    dx = torch.empty_like(x)
    dw = torch.empty(c, dtype=w.dtype, device=x.device)
    db = torch.empty(c, dtype=w.dtype, device=x.device)
    if x.numel() == 0:
        return dx, dw.zero_(), db.zero_()
    key = (
        "opendnn.batch_norm_backward",
        _graphs.meta(dy),
        _graphs.meta(x),
        _graphs.meta(w),
        _graphs.meta(save_mean),
        _graphs.meta(save_invstd),
    )

    def build(g):
        t = {
            "dy": desc(g, dy, "dy"),
            "x": desc(g, x, "x"),
            "w": desc(g, w, "weight", sd),
            "mean": desc(g, save_mean, "save_mean", sd),
            "invstd": desc(g, save_invstd, "save_invstd", sd),
        }
        out = g.batchnorm_backward(t["dy"], t["x"], t["w"], t["mean"], t["invstd"])
        t["dx"] = output(out[0], dx, "dx")
        t["dw"] = output(out[1], dw, "dweight", sd)
        t["db"] = output(out[2], db, "dbias", sd)
        return t

    b = _graphs.built(key, x.device, build)
    _graphs.run(
        b,
        {
            "dy": dy,
            "x": x,
            "w": w.view(sd),
            "mean": save_mean.view(sd),
            "invstd": save_invstd.view(sd),
            "dx": dx,
            "dw": dw.view(sd),
            "db": db.view(sd),
        },
    )
    return dx, dw, db


@batch_norm_backward.register_fake
def _(grad_output, input, weight, save_mean, save_invstd):
    dt = weight.dtype if weight is not None else save_mean.dtype
    c = input.shape[1]
    return torch.empty_like(input), input.new_empty(c, dtype=dt), input.new_empty(c, dtype=dt)


# ---- inference forward and backward -------------------------------------------------------
def _eval_graph(op, x, weight, bias, rm, rv, dy=None):
    """The fused inference graph (``dy`` None) or its backward's."""
    sd = _sd(x)
    key = (
        op,
        _graphs.meta(x),
        _graphs.meta(weight),
        _graphs.meta(bias),
        _graphs.meta(rm),
        _graphs.meta(rv),
        _graphs.meta(dy),
    )

    def build(g):
        t = {
            "x": desc(g, x, "x"),
            "rm": desc(g, rm, "running_mean", sd),
            "rv": desc(g, rv, "running_var", sd),
            "eps": g.tensor(name="eps", **SCALAR),
        }
        if weight is not None:
            t["w"] = desc(g, weight, "weight", sd)
        if bias is not None:
            t["b"] = desc(g, bias, "bias", sd)
        inv = g.rsqrt(g.add(t["rv"], t["eps"]))
        k = g.mul(inv, t["w"]) if weight is not None else inv
        if dy is None:
            y = g.mul(g.sub(t["x"], t["rm"]), k)
            t["y"] = g.add(y, t["b"]) if bias is not None else y
            return t
        t["dy"] = desc(g, dy, "dy")
        t["dx"] = g.mul(t["dy"], k)
        xh = g.mul(g.sub(t["x"], t["rm"]), inv)
        t["dw"] = g.reduction(g.mul(t["dy"], xh), ReductionMode.ADD)
        t["db"] = g.reduction(t["dy"], ReductionMode.ADD)
        return t

    return key, build


@torch.library.custom_op("opendnn::batch_norm_eval", mutates_args=())
def batch_norm_eval(
    input: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    """y = (x - running_mean) w rsqrt(running_var + eps) + b (one fused kernel)."""
    x = input
    y = torch.empty_like(x)
    if x.numel() == 0:
        return y
    key, make = _eval_graph("opendnn.batch_norm_eval", x, weight, bias, running_mean, running_var)

    def build(g):
        t = make(g)
        output(t["y"], y, "y")
        return t

    b = _graphs.built(key, x.device, build)
    sd = _sd(x)
    bufs = {"x": x, "rm": running_mean.view(sd), "rv": running_var.view(sd), "eps": eps, "y": y}
    if weight is not None:
        bufs["w"] = weight.view(sd)
    if bias is not None:
        bufs["b"] = bias.view(sd)
    _graphs.run(b, bufs)
    return y


@batch_norm_eval.register_fake
def _(input, weight, bias, running_mean, running_var, eps):
    return torch.empty_like(input)


@torch.library.custom_op("opendnn::batch_norm_eval_backward", mutates_args=())
def batch_norm_eval_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dweight, dbias) of inference batch norm (the statistics are constants)."""
    x, dy = input, grad_output
    c, sd = x.shape[1], _sd(x)
    dt = weight.dtype if weight is not None else running_var.dtype
    dx = torch.empty_like(x)
    dw = torch.empty(c, dtype=dt, device=x.device)
    db = torch.empty(c, dtype=dt, device=x.device)
    if x.numel() == 0:
        return dx, dw.zero_(), db.zero_()
    key, make = _eval_graph(
        "opendnn.batch_norm_eval_backward", x, weight, None, running_mean, running_var, dy
    )

    def build(g):
        t = make(g)
        output(t["dx"], dx, "dx")
        output(t["dw"], dw, "dweight", sd)
        output(t["db"], db, "dbias", sd)
        return t

    b = _graphs.built(key, x.device, build)
    bufs = {
        "x": x,
        "dy": dy,
        "rm": running_mean.view(sd),
        "rv": running_var.view(sd),
        "eps": eps,
        "dx": dx,
        "dw": dw.view(sd),
        "db": db.view(sd),
    }
    if weight is not None:
        bufs["w"] = weight.view(sd)
    _graphs.run(b, bufs)
    return dx, dw, db


@batch_norm_eval_backward.register_fake
def _(grad_output, input, weight, running_mean, running_var, eps):
    dt = weight.dtype if weight is not None else running_var.dtype
    c = input.shape[1]
    return torch.empty_like(input), input.new_empty(c, dtype=dt), input.new_empty(c, dtype=dt)


def _eval_setup(ctx, inputs, output):
    x, weight, bias, rm, rv, eps = inputs
    ctx.save_for_backward(x, weight, rm, rv)
    ctx.eps, ctx.has_bias = eps, bias is not None


def _eval_backward(ctx, dy):
    x, weight, rm, rv = ctx.saved_tensors
    dx, dw, db = batch_norm_eval_backward(dy, x, weight, rm, rv, ctx.eps)
    return (dx, dw if weight is not None else None, db if ctx.has_bias else None, None, None, None)


batch_norm_eval.register_autograd(_eval_backward, setup_context=_eval_setup)


# ---- the functional function --------------------------------------------------------------
def batch_norm(
    input: torch.Tensor,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``torch.nn.functional.batch_norm`` on opendnn: batch statistics in training (the
    running buffers, when given, updated in place), the running statistics otherwise."""
    op = "batch_norm"
    _check(
        op,
        input,
        {"running_mean": running_mean, "running_var": running_var, "weight": weight, "bias": bias},
    )
    if (running_mean is None) != (running_var is None):
        raise BadParamError(
            "give both running_mean and running_var, or neither",
            op=op,
            tensor="running_var",
            status=Status.BAD_PARAM,
        )
    if training:
        size = input.numel() // input.shape[1] if input.shape[1] else 0
        if size == 1:
            raise BadParamError(
                "expected more than 1 value per channel when training, got "
                f"input size {list(input.shape)}",
                op=op,
                tensor="input",
                status=Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        if running_mean is not None and momentum is None:
            raise BadParamError(
                "momentum must be a number when running statistics are updated",
                op=op,
                status=Status.BAD_PARAM,
            )
        args = (
            input,
            weight,
            bias,
            running_mean,
            running_var,
            float(momentum) if momentum is not None else 0.0,
            float(eps),
        )
        if _graphs.eager(input, weight, bias, running_mean, running_var):
            return _train_autograd(*args, eager=True)[0]
        return torch.ops.opendnn.batch_norm_train(*args)[0]
    if running_mean is None:
        raise BadParamError(
            "running_mean and running_var must be given in evaluation mode (training=False)",
            op=op,
            tensor="running_mean",
            status=Status.BAD_PARAM_NULL_POINTER,
        )
    return batch_norm_eval(input, weight, bias, running_mean, running_var, float(eps))


# eager calls that need no dispatcher skip it (_graphs.direct; the ops stay registered)
batch_norm_eval, batch_norm_eval_backward, batch_norm_backward = map(
    _graphs.direct, (batch_norm_eval, batch_norm_eval_backward, batch_norm_backward)
)


__all__ = ["batch_norm"]
