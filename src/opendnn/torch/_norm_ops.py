"""The custom ops behind ``norm``'s layer, RMS, group and instance norm (forward and
backward on the norm engine's nodes, the instance-norm running update) with their fake
implementations, autograd and autocast registrations; see ``norm`` for the math."""

from __future__ import annotations

import torch

from ..enums import NormForwardPhase, ReductionMode
from ..legacy.common import SCALAR
from . import _graphs
from ._bind import constant, desc, output, stats_dtype

TRAINING = NormForwardPhase.TRAINING


# ---- one forward / backward for the four kinds --------------------------------------------
def _geometry(kind: str, x: torch.Tensor, shape_or_groups) -> tuple:
    """(parameter shape, scale dims in X's rank, statistics buffer shape, statistics dims
    in X's rank) for norm ``kind`` of ``x``."""
    r = x.dim()
    if kind in ("layer", "rms"):
        k = len(shape_or_groups)
        stats = tuple(x.shape[: r - k]) + (1,) * k
        return tuple(shape_or_groups), [1] * (r - k) + list(shape_or_groups), stats, list(stats)
    c = x.shape[1]
    g = c if kind == "instance" else int(shape_or_groups)
    sp = [1] * (r - 2)
    return (c,), [1, c] + sp, (x.shape[0], g), [x.shape[0], g] + sp


def _forward(kind, x, w, b, eps, attr):
    """(y, mean or None, rstd) of norm ``kind``; ``attr``: normalized_shape or groups."""
    pshape, sdims, stats, stdims = _geometry(kind, x, attr)
    st = stats_dtype(x)
    y = (
        torch.empty(x.shape, dtype=x.dtype, device=x.device)
        if kind in ("layer", "rms")
        else torch.empty_like(x)
    )
    mean = None if kind == "rms" else torch.empty(stats, dtype=st, device=x.device)
    rstd = torch.empty(stats, dtype=st, device=x.device)
    if x.numel() == 0:
        return y, None if mean is None else mean.zero_(), rstd.zero_()
    w = w if w is not None else constant(1.0, pshape, x.dtype, x.device)
    if b is None and kind != "rms":
        b = constant(0.0, pshape, x.dtype, x.device)
    key = (
        f"opendnn.{kind}_norm",
        _graphs.meta(x),
        _graphs.meta(w),
        _graphs.meta(b),
        tuple(sdims),
        stats,
    )

    def build(g):
        t = {
            "x": desc(g, x, "x"),
            "w": desc(g, w, "weight", sdims),
            "eps": g.tensor(name="eps", **SCALAR),
        }
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
    key = (
        f"opendnn.{kind}_norm_backward",
        _graphs.meta(dy),
        _graphs.meta(x),
        _graphs.meta(w),
        _graphs.meta(mean),
        _graphs.meta(rstd),
        tuple(sdims),
    )

    def build(g):
        t = {
            "dy": desc(g, dy, "dy"),
            "x": desc(g, x, "x"),
            "w": desc(g, w, "weight", sdims),
            "rstd": desc(g, rstd, "rstd", stdims),
        }
        if mean is not None:
            t["mean"] = desc(g, mean, "mean", stdims)
        if kind == "rms":
            out = g.rmsnorm_backward(t["dy"], t["x"], t["w"], t["rstd"], has_dbias=False)
        elif kind == "layer":
            out = g.layernorm_backward(t["dy"], t["x"], t["w"], t["mean"], t["rstd"])
        elif kind == "instance":
            out = g.instancenorm_backward(t["dy"], t["x"], t["w"], t["mean"], t["rstd"])
        else:
            out = g.groupnorm_backward(
                t["dy"], t["x"], t["w"], t["mean"], t["rstd"], groups=stats[1]
            )
        t["dx"] = output(out[0], dx, "dx")
        t["dw"] = output(out[1], dw, "dweight", sdims)
        if db is not None:
            t["db"] = output(out[2], db, "dbias", sdims)
        return t

    bufs = {
        "dy": dy,
        "x": x,
        "w": w.view(sdims),
        "rstd": rstd.view(stdims),
        "dx": dx,
        "dw": dw.view(sdims),
    }
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
    if register is not None:  # PyTorch >= 2.5; before it, the input's type is kept
        register(op, "cuda", torch.float32)
        _graphs.AUTOCAST[op._qualname] = _graphs.to("cuda", torch.float32)


# ---- layer norm ---------------------------------------------------------------------------
@torch.library.custom_op("opendnn::layer_norm", mutates_args=())
def layer_norm_op(
    input: torch.Tensor,
    normalized_shape: list[int],
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean, rstd) of layer norm over the trailing ``normalized_shape`` dims."""
    return _forward("layer", input, weight, bias, eps, normalized_shape)


@layer_norm_op.register_fake
def _(input, normalized_shape, weight, bias, eps):
    return _fake_forward("layer", input, normalized_shape)


@torch.library.custom_op("opendnn::layer_norm_backward", mutates_args=())
def layer_norm_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    normalized_shape: list[int],
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor | None,
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
def rms_norm_op(
    input: torch.Tensor, normalized_shape: list[int], weight: torch.Tensor | None, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, rstd) of RMS norm over the trailing ``normalized_shape`` dims."""
    y, _, rstd = _forward("rms", input, weight, None, eps, normalized_shape)
    return y, rstd


@rms_norm_op.register_fake
def _(input, normalized_shape, weight, eps):
    return _fake_forward("rms", input, normalized_shape)[::2]


@torch.library.custom_op("opendnn::rms_norm_backward", mutates_args=())
def rms_norm_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    normalized_shape: list[int],
    rstd: torch.Tensor,
    weight: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
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
# not float32 under autocast: PyTorch 2.11's CUDA autocast returns rms_norm in the input's
# type (measured on the H100); the kernel computes in float32 either way


# ---- group and instance norm --------------------------------------------------------------
@torch.library.custom_op("opendnn::group_norm", mutates_args=())
def group_norm_op(
    input: torch.Tensor,
    num_groups: int,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean [N, G], rstd [N, G]) of group norm."""
    return _forward("group", input, weight, bias, eps, num_groups)


@group_norm_op.register_fake
def _(input, num_groups, weight, bias, eps):
    return _fake_forward("group", input, num_groups)


@torch.library.custom_op("opendnn::group_norm_backward", mutates_args=())
def group_norm_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    num_groups: int,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor | None,
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
def instance_norm_op(
    input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean [N, C], rstd [N, C]) of instance norm (input statistics)."""
    return _forward("instance", input, weight, bias, eps, None)


@instance_norm_op.register_fake
def _(input, weight, bias, eps):
    return _fake_forward("instance", input, None)


@torch.library.custom_op("opendnn::instance_norm_backward", mutates_args=())
def instance_norm_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor | None,
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


@torch.library.custom_op(
    "opendnn::instance_norm_update_running", mutates_args=("running_mean", "running_var")
)
def instance_norm_update_running(
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    momentum: float,
    eps: float,
    count: int,
) -> None:
    """running <- (1 - momentum) running + momentum mean over N of the instance statistics
    (mean, rstd [N, C]; ``count`` spatial elements each; the unbiased variance)."""
    n, c = mean.shape
    if n == 0:
        return
    key = (
        "opendnn.instance_norm_update_running",
        _graphs.meta(running_mean),
        _graphs.meta(running_var),
        _graphs.meta(mean),
        _graphs.meta(rstd),
    )

    def build(g):
        t = {
            "rm": desc(g, running_mean, "old_running_mean", [1, c]),
            "rv": desc(g, running_var, "old_running_var", [1, c]),
            "mean": desc(g, mean, "mean"),
            "rstd": desc(g, rstd, "rstd"),
        }
        for s in ("keep", "take", "take_var", "eps"):
            t[s] = g.tensor(name=s, **SCALAR)
        # sum over n of ((1 - m) / N) r + (m / N) s: the average of N updates of r
        new_m = g.add(g.scale(t["rm"], t["keep"]), g.scale(t["mean"], t["take"]))
        var = g.sub(g.reciprocal(g.mul(t["rstd"], t["rstd"])), t["eps"])
        new_v = g.add(g.scale(t["rv"], t["keep"]), g.scale(var, t["take_var"]))
        t["new_mean"] = output(
            g.reduction(new_m, ReductionMode.ADD), running_mean, "running_mean", [1, c]
        )
        t["new_var"] = output(
            g.reduction(new_v, ReductionMode.ADD), running_var, "running_var", [1, c]
        )
        return t

    b = _graphs.built(key, mean.device, build)
    _graphs.run(
        b,
        {
            "rm": running_mean.clone().view(1, c),
            "rv": running_var.clone().view(1, c),
            "mean": mean,
            "rstd": rstd,
            "keep": (1.0 - momentum) / n,
            "take": momentum / n,
            "take_var": momentum * count / ((count - 1) * n),
            "eps": eps,
            "new_mean": running_mean.view(1, c),
            "new_var": running_var.view(1, c),
        },
    )


@instance_norm_update_running.register_fake
def _(running_mean, running_var, mean, rstd, momentum, eps, count):
    return None


# eager calls skip the dispatcher (_graphs.direct; the ops stay registered)
(
    layer_norm_op,
    layer_norm_backward,
    rms_norm_op,
    rms_norm_backward,
    group_norm_op,
    group_norm_backward,
    instance_norm_op,
    instance_norm_backward,
    instance_norm_update_running,
) = map(
    _graphs.direct,
    (
        layer_norm_op,
        layer_norm_backward,
        rms_norm_op,
        rms_norm_backward,
        group_norm_op,
        group_norm_backward,
        instance_norm_op,
        instance_norm_backward,
        instance_norm_update_running,
    ),
)
