"""Shared builders for the norm tests: graphs of each norm kind, forward and backward,
from torch tensors, and the PyTorch ground truth (F.layer_norm, F.rms_norm,
F.instance_norm, F.group_norm; autograd for the backward)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from _util import TORCH_TO_DT

import opendnn.frontend as cudnn

KINDS = ("layernorm", "rmsnorm", "instancenorm", "groupnorm")
TRAINING, INFERENCE = cudnn.norm_forward_phase.TRAINING, cudnn.norm_forward_phase.INFERENCE


def tensor(g, t):
    return g.tensor(list(t.shape), list(t.stride()), TORCH_TO_DT[t.dtype])


def param_shape(kind: str, shape, axes=None) -> tuple:
    """SCALE's dims: layer / RMS norm over ``axes`` (default: every axis but the first),
    instance / group norm per channel."""
    if kind in ("layernorm", "rmsnorm"):
        axes = range(1, len(shape)) if axes is None else axes
        return tuple(d if i in axes else 1 for i, d in enumerate(shape))
    return (1, shape[1]) + (1,) * (len(shape) - 2)


def forward_graph(kind, x, w, b, eps=1e-5, groups=1, phase=TRAINING, stats_type=None):
    """(graph, feeds, outputs [Y, MEAN?, INV_VARIANCE?])."""
    g = cudnn.pygraph()
    tx, tw = tensor(g, x), tensor(g, w)
    tb = tensor(g, b) if b is not None else None
    feeds = {tx: x, tw: w, **({tb: b} if b is not None else {})}
    if kind == "layernorm":
        outs = g.layernorm(phase, tx, tw, tb, eps)
    elif kind == "rmsnorm":
        outs = g.rmsnorm(phase, tx, tw, bias=tb, epsilon=eps)
    elif kind == "instancenorm":
        outs = g.instancenorm(phase, tx, tw, tb, eps)
    else:
        outs = g.groupnorm(phase, tx, tw, tb, eps, groups=groups)
    outs = [t for t in outs if t is not None]
    for t in outs:
        t.set_output(True)
    if stats_type is not None:
        for t in outs[1:]:
            t.set_data_type(TORCH_TO_DT[stats_type])
    return g, feeds, outs


def backward_graph(kind, dy, x, w, mean, inv, groups=1, has_dbias=True):
    """(graph, feeds, outputs [DX, DSCALE, DBIAS?])."""
    g = cudnn.pygraph()
    tdy, tx, tw, tv = tensor(g, dy), tensor(g, x), tensor(g, w), tensor(g, inv)
    feeds = {tdy: dy, tx: x, tw: w, tv: inv}
    if kind != "rmsnorm":
        tm = tensor(g, mean)
        feeds[tm] = mean
    if kind == "layernorm":
        outs = g.layernorm_backward(tdy, tx, tw, tm, tv)
    elif kind == "rmsnorm":
        outs = g.rmsnorm_backward(tdy, tx, tw, tv, has_dbias=has_dbias)
    elif kind == "instancenorm":
        outs = g.instancenorm_backward(tdy, tx, tw, tm, tv)
    else:
        outs = g.groupnorm_backward(tdy, tx, tw, tm, tv, groups=groups)
    outs = [t for t in outs if t is not None]
    for t in outs:
        t.set_output(True)
    return g, feeds, outs


def torch_forward(kind, x, w, b, eps=1e-5, groups=1):
    """PyTorch's result (float64 in, float64 out) for the same parameters."""
    if kind in ("layernorm", "rmsnorm"):
        axes = [i for i, d in enumerate(w.shape) if d != 1]
        if not axes:  # every element its own row: normalized over a new axis of size one
            xs, wv = x.unsqueeze(-1), w.reshape(1)
            bv = b.reshape(1) if b is not None else None
            if kind == "layernorm":
                return F.layer_norm(xs, (1,), wv, bv, eps).squeeze(-1)
            y = F.rms_norm(xs, (1,), wv, eps).squeeze(-1)
            return y + bv if bv is not None else y
        perm = [i for i in range(x.dim()) if i not in axes] + axes
        xp = x.permute(perm)
        norm_shape = [x.shape[i] for i in axes]
        wp = w.permute(perm).reshape(norm_shape)
        bp = b.permute(perm).reshape(norm_shape) if b is not None else None
        if kind == "layernorm":
            y = F.layer_norm(xp, norm_shape, wp, bp, eps)
        else:
            y = F.rms_norm(xp, norm_shape, wp, eps)
            y = y + bp if bp is not None else y
        return y.permute([perm.index(i) for i in range(x.dim())])
    c = x.shape[1]
    if kind == "instancenorm":
        return F.instance_norm(x, weight=w.reshape(c), bias=b.reshape(c), eps=eps)
    return F.group_norm(x, groups, w.reshape(c), b.reshape(c), eps)


def torch_stats(kind, x, w, eps=1e-5, groups=1):
    """(mean, inv_var) in the graph's statistics dims, float64."""
    from opendnn.ops import norm as N

    norm = {
        "layernorm": N.LAYER,
        "rmsnorm": N.RMS,
        "instancenorm": N.INSTANCE,
        "groupnorm": N.GROUP,
    }[kind]
    geo = N.geometry(norm, x.shape, w.shape, groups)
    xv = x.double().reshape(geo.view)

    def avg(t):  # torch reduces every axis for dim=(): rows of one element need none
        return t.mean(geo.axes, keepdim=True) if geo.axes else t

    mean = torch.zeros(geo.stats_view, dtype=torch.float64) if norm == N.RMS else avg(xv)
    var = avg((xv - mean) ** 2)
    return mean.reshape(geo.stats_dims), (1 / torch.sqrt(var + eps)).reshape(geo.stats_dims)
