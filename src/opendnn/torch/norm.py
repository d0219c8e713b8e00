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
(float64 for float64 input). Under CUDA autocast, layer, RMS and group norm run in
float32 (``register_autocast``), as PyTorch's do; instance norm runs in its input's type.
Double backward is not implemented. Layer / RMS norm outputs are contiguous (PyTorch's);
group / instance norm keep the input's layout (channels_last in, channels_last out).
"""
from __future__ import annotations

import math

import torch

from ..enums import NormForwardPhase, ReductionMode
from ..errors import BadParamError, Status
from ..legacy.common import SCALAR
from . import _graphs
from .batchnorm import batch_norm, batch_norm_eval, constant, desc, output, stats_dtype

TRAINING = NormForwardPhase.TRAINING


# ---- one forward / backward for the four kinds --------------------------------------------
def _geometry(kind: str, x: torch.Tensor, shape_or_groups) -> tuple:
    """(parameter shape, scale dims in X's rank, statistics buffer shape, statistics dims
    in X's rank) for norm ``kind`` of ``x``."""
    r = x.dim()
    if kind in ("layer", "rms"):
        k = len(shape_or_groups)
        stats = tuple(x.shape[:r - k]) + (1,) * k
        return tuple(shape_or_groups), [1] * (r - k) + list(shape_or_groups), stats, \
            list(stats)
    c = x.shape[1]
    g = c if kind == "instance" else int(shape_or_groups)
    sp = [1] * (r - 2)
    return (c,), [1, c] + sp, (x.shape[0], g), [x.shape[0], g] + sp


def _forward(kind, x, w, b, eps, attr):
    """(y, mean or None, rstd) of norm ``kind``; ``attr``: normalized_shape or groups."""
    pshape, sdims, stats, stdims = _geometry(kind, x, attr)
    st = stats_dtype(x)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device) if kind in ("layer", "rms") \
        else torch.empty_like(x)
    mean = None if kind == "rms" else torch.empty(stats, dtype=st, device=x.device)
    rstd = torch.empty(stats, dtype=st, device=x.device)
    if x.numel() == 0:
        return y, None if mean is None else mean.zero_(), rstd.zero_()
    w = w if w is not None else constant(1.0, pshape, x.dtype, x.device)
    if b is None and kind != "rms":
        b = constant(0.0, pshape, x.dtype, x.device)
    key = (f"opendnn.{kind}_norm", _graphs.meta(x), _graphs.meta(w), _graphs.meta(b),
           tuple(sdims), stats)

    def build(g):
        t = {"x": desc(g, x, "x"), "w": desc(g, w, "weight", sdims),
             "eps": g.tensor(name="eps", **SCALAR)}
        if b is not None:
            t["b"] = desc(g, b, "bias", sdims)
        args = (TRAINING, t["x"], t["w"], t.get("b"), t["eps"])
        if kind == "rms":
            ty, tr = g.rmsnorm(*args)
            tm = None
        elif kind == "layer":
            ty, tm, tr = g.layernorm(*args)
        elif kind == "instance":
            ty, tm, tr = g.instancenorm(*args)
        else:
            ty, tm, tr = g.groupnorm(*args, groups=stats[1])
        t["y"] = output(ty, y, "y")
        t["rstd"] = output(tr, rstd, "rstd", stdims)
        if tm is not None:
            t["mean"] = output(tm, mean, "mean", stdims)
        return t
    bufs = {"x": x, "w": w.view(sdims), "eps": eps, "y": y, "rstd": rstd.view(stdims)}
    if b is not None:
        bufs["b"] = b.view(sdims)
    if mean is not None:
        bufs["mean"] = mean.view(stdims)
    _graphs.run(_graphs.built(key, x.device, build), bufs)
    return y, mean, rstd


def _backward(kind, dy, x, w, mean, rstd, attr):
    """(dx, dw, db or None) of norm ``kind``; dw / db have the weight's type (x's without
    a weight)."""
    pshape, sdims, stats, stdims = _geometry(kind, x, attr)
    w = w if w is not None else constant(1.0, pshape, x.dtype, x.device)
    dx = torch.empty_like(x)
    dw = torch.empty(pshape, dtype=w.dtype, device=x.device)
    db = None if kind == "rms" else torch.empty(pshape, dtype=w.dtype, device=x.device)
    if x.numel() == 0:
        return dx, dw.zero_(), None if db is None else db.zero_()
    key = (f"opendnn.{kind}_norm_backward", _graphs.meta(dy), _graphs.meta(x),
           _graphs.meta(w), _graphs.meta(mean), _graphs.meta(rstd), tuple(sdims))

    def build(g):
        t = {"dy": desc(g, dy, "dy"), "x": desc(g, x, "x"), "w": desc(g, w, "weight", sdims),
             "rstd": desc(g, rstd, "rstd", stdims)}
        if mean is not None:
            t["mean"] = desc(g, mean, "mean", stdims)
        if kind == "rms":
            out = g.rmsnorm_backward(t["dy"], t["x"], t["w"], t["rstd"], has_dbias=False)
        elif kind == "layer":
            out = g.layernorm_backward(t["dy"], t["x"], t["w"], t["mean"], t["rstd"])
        elif kind == "instance":
            out = g.instancenorm_backward(t["dy"], t["x"], t["w"], t["mean"], t["rstd"])
        else:
            out = g.groupnorm_backward(t["dy"], t["x"], t["w"], t["mean"], t["rstd"],
                                       groups=stats[1])
        t["dx"] = output(out[0], dx, "dx")
        t["dw"] = output(out[1], dw, "dweight", sdims)
        if db is not None:
            t["db"] = output(out[2], db, "dbias", sdims)
        return t
    bufs = {"dy": dy, "x": x, "w": w.view(sdims), "rstd": rstd.view(stdims), "dx": dx,
            "dw": dw.view(sdims)}
    if mean is not None:
        bufs["mean"] = mean.view(stdims)
    if db is not None:
        bufs["db"] = db.view(sdims)
    _graphs.run(_graphs.built(key, x.device, build), bufs)
    return dx, dw, db


def _fake_forward(kind, x, attr):
    pshape, sdims, stats, stdims = _geometry(kind, x, attr)
    st = stats_dtype(x)
    y = x.new_empty(x.shape) if kind in ("layer", "rms") else torch.empty_like(x)
    return y, x.new_empty(stats, dtype=st), x.new_empty(stats, dtype=st)


def _fake_backward(kind, x, w, attr):
    pshape = _geometry(kind, x, attr)[0]
    dt = w.dtype if w is not None else x.dtype
    return torch.empty_like(x), x.new_empty(pshape, dtype=dt), x.new_empty(pshape, dtype=dt)


def _grads(ctx, dx, dw, db):
    """The gradients autograd gets: none for an absent weight / bias."""
    return dx, dw if ctx.has_weight else None, db if ctx.has_bias else None


def _autocast_float32(op) -> None:
    register = getattr(torch.library, "register_autocast", None)
    if register is not None:       # PyTorch >= 2.5; before it, the input's type is kept
        register(op, "cuda", torch.float32)


# ---- layer norm ---------------------------------------------------------------------------
@torch.library.custom_op("opendnn::layer_norm", mutates_args=())
def layer_norm_op(input: torch.Tensor, normalized_shape: list[int],
                  weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean, rstd) of layer norm over the trailing ``normalized_shape`` dims."""
    return _forward("layer", input, weight, bias, eps, normalized_shape)


@layer_norm_op.register_fake
def _(input, normalized_shape, weight, bias, eps):
    return _fake_forward("layer", input, normalized_shape)


@torch.library.custom_op("opendnn::layer_norm_backward", mutates_args=())
def layer_norm_backward(grad_output: torch.Tensor, input: torch.Tensor,
                        normalized_shape: list[int], mean: torch.Tensor, rstd: torch.Tensor,
                        weight: torch.Tensor | None
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dweight, dbias) of layer norm."""
    return _backward("layer", grad_output, input, weight, mean, rstd, normalized_shape)


@layer_norm_backward.register_fake
def _(grad_output, input, normalized_shape, mean, rstd, weight):
    return _fake_backward("layer", input, weight, normalized_shape)


def _ln_setup(ctx, inputs, output):
    out = output
    x, shape, w, b, _ = inputs
    ctx.save_for_backward(x, w, out[1], out[2])
    ctx.shape, ctx.has_weight, ctx.has_bias = shape, w is not None, b is not None
    ctx.mark_non_differentiable(out[1], out[2])


def _ln_backward(ctx, dy, _dmean, _drstd):
    x, w, mean, rstd = ctx.saved_tensors
    dx, dw, db = _grads(ctx, *layer_norm_backward(dy, x, ctx.shape, mean, rstd, w))
    return dx, None, dw, db, None


layer_norm_op.register_autograd(_ln_backward, setup_context=_ln_setup)
_autocast_float32(layer_norm_op)


# ---- RMS norm -----------------------------------------------------------------------------
@torch.library.custom_op("opendnn::rms_norm", mutates_args=())
def rms_norm_op(input: torch.Tensor, normalized_shape: list[int], weight: torch.Tensor | None,
                eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, rstd) of RMS norm over the trailing ``normalized_shape`` dims."""
    y, _, rstd = _forward("rms", input, weight, None, eps, normalized_shape)
    return y, rstd


@rms_norm_op.register_fake
def _(input, normalized_shape, weight, eps):
    return _fake_forward("rms", input, normalized_shape)[::2]


@torch.library.custom_op("opendnn::rms_norm_backward", mutates_args=())
def rms_norm_backward(grad_output: torch.Tensor, input: torch.Tensor,
                      normalized_shape: list[int], rstd: torch.Tensor,
                      weight: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dweight) of RMS norm."""
    return _backward("rms", grad_output, input, weight, None, rstd, normalized_shape)[:2]


@rms_norm_backward.register_fake
def _(grad_output, input, normalized_shape, rstd, weight):
    return _fake_backward("rms", input, weight, normalized_shape)[:2]


def _rms_setup(ctx, inputs, output):
    out = output
    x, shape, w, _ = inputs
    ctx.save_for_backward(x, w, out[1])
    ctx.shape, ctx.has_weight, ctx.has_bias = shape, w is not None, False
    ctx.mark_non_differentiable(out[1])


def _rms_backward(ctx, dy, _drstd):
    x, w, rstd = ctx.saved_tensors
    dx, dw = rms_norm_backward(dy, x, ctx.shape, rstd, w)
    return dx, None, dw if ctx.has_weight else None, None


rms_norm_op.register_autograd(_rms_backward, setup_context=_rms_setup)
_autocast_float32(rms_norm_op)


# ---- group and instance norm --------------------------------------------------------------
@torch.library.custom_op("opendnn::group_norm", mutates_args=())
def group_norm_op(input: torch.Tensor, num_groups: int, weight: torch.Tensor | None,
                  bias: torch.Tensor | None, eps: float
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean [N, G], rstd [N, G]) of group norm."""
    return _forward("group", input, weight, bias, eps, num_groups)


@group_norm_op.register_fake
def _(input, num_groups, weight, bias, eps):
    return _fake_forward("group", input, num_groups)


@torch.library.custom_op("opendnn::group_norm_backward", mutates_args=())
def group_norm_backward(grad_output: torch.Tensor, input: torch.Tensor, num_groups: int,
                        mean: torch.Tensor, rstd: torch.Tensor, weight: torch.Tensor | None
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dweight [C], dbias [C]) of group norm."""
    return _backward("group", grad_output, input, weight, mean, rstd, num_groups)


@group_norm_backward.register_fake
def _(grad_output, input, num_groups, mean, rstd, weight):
    return _fake_backward("group", input, weight, num_groups)


def _gn_setup(ctx, inputs, output):
    out = output
    x, groups, w, b, _ = inputs
    ctx.save_for_backward(x, w, out[1], out[2])
    ctx.groups, ctx.has_weight, ctx.has_bias = groups, w is not None, b is not None
    ctx.mark_non_differentiable(out[1], out[2])


def _gn_backward(ctx, dy, _dmean, _drstd):
    x, w, mean, rstd = ctx.saved_tensors
    dx, dw, db = _grads(ctx, *group_norm_backward(dy, x, ctx.groups, mean, rstd, w))
    return dx, None, dw, db, None


group_norm_op.register_autograd(_gn_backward, setup_context=_gn_setup)
_autocast_float32(group_norm_op)


@torch.library.custom_op("opendnn::instance_norm", mutates_args=())
def instance_norm_op(input: torch.Tensor, weight: torch.Tensor | None,
                     bias: torch.Tensor | None, eps: float
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean [N, C], rstd [N, C]) of instance norm (input statistics)."""
    return _forward("instance", input, weight, bias, eps, None)


@instance_norm_op.register_fake
def _(input, weight, bias, eps):
    return _fake_forward("instance", input, None)


@torch.library.custom_op("opendnn::instance_norm_backward", mutates_args=())
def instance_norm_backward(grad_output: torch.Tensor, input: torch.Tensor, mean: torch.Tensor,
                           rstd: torch.Tensor, weight: torch.Tensor | None
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dweight [C], dbias [C]) of instance norm."""
    return _backward("instance", grad_output, input, weight, mean, rstd, None)


@instance_norm_backward.register_fake
def _(grad_output, input, mean, rstd, weight):
    return _fake_backward("instance", input, weight, None)


def _in_setup(ctx, inputs, output):
    out = output
    x, w, b, _ = inputs
    ctx.save_for_backward(x, w, out[1], out[2])
    ctx.has_weight, ctx.has_bias = w is not None, b is not None
    ctx.mark_non_differentiable(out[1], out[2])


def _in_backward(ctx, dy, _dmean, _drstd):
    x, w, mean, rstd = ctx.saved_tensors
    dx, dw, db = _grads(ctx, *instance_norm_backward(dy, x, mean, rstd, w))
    return dx, dw, db, None


instance_norm_op.register_autograd(_in_backward, setup_context=_in_setup)


@torch.library.custom_op("opendnn::instance_norm_update_running",
                         mutates_args=("running_mean", "running_var"))
def instance_norm_update_running(running_mean: torch.Tensor, running_var: torch.Tensor,
                                 mean: torch.Tensor, rstd: torch.Tensor, momentum: float,
                                 eps: float, count: int) -> None:
    """running <- (1 - momentum) running + momentum mean over N of the instance statistics
    (mean, rstd [N, C]; ``count`` spatial elements each; the unbiased variance)."""
    n, c = mean.shape
    if n == 0:
        return
    key = ("opendnn.instance_norm_update_running", _graphs.meta(running_mean),
           _graphs.meta(running_var), _graphs.meta(mean), _graphs.meta(rstd))

    def build(g):
        t = {"rm": desc(g, running_mean, "old_running_mean", [1, c]),
             "rv": desc(g, running_var, "old_running_var", [1, c]),
             "mean": desc(g, mean, "mean"), "rstd": desc(g, rstd, "rstd")}
        for s in ("keep", "take", "take_var", "eps"):
            t[s] = g.tensor(name=s, **SCALAR)
        # sum over n of ((1 - m) / N) r + (m / N) s: the average of N updates of r
        new_m = g.add(g.scale(t["rm"], t["keep"]), g.scale(t["mean"], t["take"]))
        var = g.sub(g.reciprocal(g.mul(t["rstd"], t["rstd"])), t["eps"])
        new_v = g.add(g.scale(t["rv"], t["keep"]), g.scale(var, t["take_var"]))
        t["new_mean"] = output(g.reduction(new_m, ReductionMode.ADD), running_mean,
                               "running_mean", [1, c])
        t["new_var"] = output(g.reduction(new_v, ReductionMode.ADD), running_var,
                              "running_var", [1, c])
        return t
    b = _graphs.built(key, mean.device, build)
    _graphs.run(b, {"rm": running_mean.clone().view(1, c), "rv": running_var.clone().view(1, c),
                    "mean": mean, "rstd": rstd, "keep": (1.0 - momentum) / n,
                    "take": momentum / n, "take_var": momentum * count / ((count - 1) * n),
                    "eps": eps, "new_mean": running_mean.view(1, c),
                    "new_var": running_var.view(1, c)})


@instance_norm_update_running.register_fake
def _(running_mean, running_var, mean, rstd, momentum, eps, count):
    return None


# ---- argument checks and the functional functions -----------------------------------------
def _need(cond: bool, op: str, tensor: str | None, rule: str,
          status: Status = Status.BAD_PARAM_SHAPE_MISMATCH) -> None:
    if not cond:
        raise BadParamError(rule, op=op, tensor=tensor, status=status)


def _check_input(op: str, x: torch.Tensor, min_rank: int) -> None:
    _need(x.dim() >= min_rank, op, "input", f"needs at least {min_rank} dims, has {x.dim()}")
    _need(x.is_floating_point(), op, "input", f"is {x.dtype}: a floating type is needed",
          Status.NOT_SUPPORTED_DATA_TYPE)


def _check_params(op: str, x, shape, params: dict) -> None:
    for name, t in params.items():
        if t is None:
            continue
        _need(tuple(t.shape) == tuple(shape), op, name,
              f"shape {list(t.shape)} must be {list(shape)}")
        _need(t.device == x.device, op, name, f"is on {t.device}, input on {x.device}",
              Status.BAD_PARAM)
        _need(t.is_floating_point(), op, name, f"is {t.dtype}: a floating type is needed",
              Status.NOT_SUPPORTED_DATA_TYPE)


def _check_normalized(op: str, x, normalized_shape) -> list:
    shape = [normalized_shape] if isinstance(normalized_shape, int) else \
        [int(d) for d in normalized_shape]
    k = len(shape)
    _need(k >= 1, op, None, "normalized_shape must have at least one dim", Status.BAD_PARAM)
    _need(x.dim() >= k and list(x.shape[x.dim() - k:]) == shape, op, "input",
          f"normalized_shape {shape} must equal input's trailing dims (input shape "
          f"{list(x.shape)})")
    return shape


def layer_norm(input: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """``torch.nn.functional.layer_norm`` on opendnn."""
    _check_input("layer_norm", input, 1)
    shape = _check_normalized("layer_norm", input, normalized_shape)
    _check_params("layer_norm", input, shape, {"weight": weight, "bias": bias})
    return layer_norm_op(input, shape, weight, bias, float(eps))[0]


def rms_norm(input: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None,
             eps: float | None = None) -> torch.Tensor:
    """``torch.nn.functional.rms_norm`` on opendnn (eps None: the input type's epsilon)."""
    _check_input("rms_norm", input, 1)
    shape = _check_normalized("rms_norm", input, normalized_shape)
    _check_params("rms_norm", input, shape, {"weight": weight})
    e = torch.finfo(input.dtype).eps if eps is None else float(eps)
    return rms_norm_op(input, shape, weight, e)[0]


def group_norm(input: torch.Tensor, num_groups: int, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """``torch.nn.functional.group_norm`` on opendnn."""
    op = "group_norm"
    _check_input(op, input, 2)
    c = input.shape[1]
    _need(int(num_groups) >= 1 and c % int(num_groups) == 0, op, "input",
          f"number of channels {c} must be divisible by num_groups {num_groups}",
          Status.BAD_PARAM)
    _check_params(op, input, (c,), {"weight": weight, "bias": bias})
    return group_norm_op(input, int(num_groups), weight, bias, float(eps))[0]


def instance_norm(input: torch.Tensor, running_mean: torch.Tensor | None = None,
                  running_var: torch.Tensor | None = None, weight: torch.Tensor | None = None,
                  bias: torch.Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> torch.Tensor:
    """``torch.nn.functional.instance_norm`` on opendnn: each (n, c) over the spatial axes;
    running buffers, when given with ``use_input_stats``, updated in place; without
    ``use_input_stats`` the running statistics normalize (batch norm's inference)."""
    op = "instance_norm"
    _check_input(op, input, 3)
    c = input.shape[1]
    _check_params(op, input, (c,), {"running_mean": running_mean, "running_var": running_var,
                                    "weight": weight, "bias": bias})
    _need((running_mean is None) == (running_var is None), op, "running_var",
          "give both running_mean and running_var, or neither", Status.BAD_PARAM)
    if not use_input_stats:
        _need(running_mean is not None, op, "running_mean", "running_mean and running_var "
              "are needed when use_input_stats is False", Status.BAD_PARAM_NULL_POINTER)
        return batch_norm_eval(input, weight, bias, running_mean, running_var, float(eps))
    count = math.prod(input.shape[2:])
    _need(count > 1, op, "input", "expected more than 1 spatial element when training, got "
          f"input size {list(input.shape)}")
    y, mean, rstd = instance_norm_op(input, weight, bias, float(eps))
    if running_mean is not None:
        with torch.no_grad():
            instance_norm_update_running(running_mean, running_var, mean, rstd,
                                         float(momentum), float(eps), count)
    return y


__all__ = ["batch_norm", "layer_norm", "rms_norm", "group_norm", "instance_norm"]
