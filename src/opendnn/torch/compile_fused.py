"""The fused calls the ``opendnn`` torch.compile backend puts into FX graphs.

Each replaces a chain of nodes (``compile_fuse`` finds them) and decides at *call time*:

- when autograd needs the chain (grad mode on and an input requires grad: training, or
  an eval-mode model outside ``torch.no_grad``), it runs the chain unfused, each node
  through ``compile_ops.ROUTED`` (opendnn with its autograd, PyTorch where declined);
- otherwise (inference) it runs one opendnn graph, the activation in the producer's
  epilogue, and falls back to the unfused chain when opendnn declines the graph
  (``GraphNotSupportedError``, counted and logged once per reason).

Conv + batch-norm folding (BN in eval mode with running statistics): with
s = gamma / sqrt(running_var + eps),  W' = W * s[k],  b' = (b - running_mean) * s + beta,
so BN(conv(x, W) + b) = conv(x, W') + b'. The folded pair is computed in float32 (float64
for float64 weights), W' then rounded to W's data type (so bf16 / fp16 weights see one
extra rounding that eager BN, applied to the conv's output, does not); b' stays float32,
added to the float32 accumulator. It is kept per weight set and recomputed when any of
the six tensors changes (identity, storage pointer or version counter: an optimizer
step or a ``load_state_dict`` copy bumps the version; writes through ``.data``, which has
its own version counter, are not seen).

Autocast (read at call time): conv and linear operands are cast as autocast casts them
(floating tensors other than float64 to the autocast type, so b' is rounded too); norms
run in float32 on CUDA, as CUDA autocast runs them; on other devices a norm chain under
autocast runs unfused.

The graphs (``_graphs.built`` keys them by problem, each built once):
  conv:   Y = act(conv_fprop(X, W) + bias[1, K, 1, ...] [+ Z])  (conv engine's epilogue)
  linear: Y[M, N] = act(X[M, K] @ W^T[K, N] + bias[1, N])      (matmul engine's epilogue)
  norm:   Y = act(layernorm(X[rows, L]) | groupnorm(X))        (norm engine's epilogue, at
          INFERENCE: no statistics written)
  attention: ``functional.scaled_dot_product_attention`` (its own custom op and autograd).
"""

from __future__ import annotations

import math
import weakref

import torch

from ..enums import NormForwardPhase
from ..errors import GraphNotSupportedError
from ..runtime.lru import LRU, plan_cache_size
from . import _graphs
from . import functional as OF
from .compile_ops import ROUTED, note_fallback

ACTIVATIONS = ("relu", "gelu", "silu", "sigmoid", "tanh")


def needs_grad(*tensors) -> bool:
    """Whether the chain must run unfused: autograd records through these tensors now, or
    they are traced (fake / functional tensors under AOTAutograd: the fused graph runs
    only on real buffers; the unfused operations are custom ops that trace)."""
    if not _graphs.eager(*(t for t in tensors if isinstance(t, torch.Tensor))):
        return True
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in tensors
    )


def _autocast(*tensors, to=None):
    """The operands as autocast would give them to a lower-precision op (conv, linear:
    floating tensors other than float64 to the autocast type), or to ``to`` (norms, which
    CUDA autocast runs in float32); unchanged when autocast is off."""
    dev = next(t for t in tensors if t is not None).device.type
    if not torch.is_autocast_enabled(dev):
        return tensors
    dt = to or torch.get_autocast_dtype(dev)
    return tuple(
        t.to(dt) if t is not None and t.is_floating_point() and t.dtype != torch.float64 else t
        for t in tensors
    )


def _activate(y, act, act_kw):
    return y if act is None else ROUTED[act](y, **act_kw)


def _act_node(g, y, act, act_kw):
    if act is None:
        return y
    if act == "relu":
        return g.relu(y)
    if act == "gelu":
        approximate = act_kw.get("approximate", "none")
        return g.gelu_approx_tanh(y) if approximate == "tanh" else g.gelu(y)
    if act == "silu":
        return g.swish(y)
    return getattr(g, act)(y)  # sigmoid, tanh


def _tensor(g, t, name):
    """A graph tensor with t's dims, strides and type (never by value: the graph is kept
    and run again with other buffers)."""
    return g.tensor(list(t.shape) or [1], list(t.stride()) or [1], t.dtype, name=name)


def _mark_output(y_graph, out):
    y_graph.set_output(True).set_dim(list(out.shape)).set_stride(list(out.stride())).set_data_type(
        out.dtype
    )


def _act_key(act, act_kw):
    return (act, tuple(sorted(act_kw.items())) if act else ())


def _declined(rule: str, op: str):
    return GraphNotSupportedError(rule, op=op)


# ---- conv + bias + activation ----------------------------------------------------------------
def _ntuple(v, n):
    return tuple(v) * (n if len(v) == 1 else 1) if isinstance(v, list | tuple) else (v,) * n


def _conv_padding(padding, nd, w, dilation):
    if padding == "valid":
        return (0,) * nd, (0,) * nd
    if padding == "same":
        total = [d * (k - 1) for d, k in zip(dilation, w.shape[2:])]
        pre = tuple(t // 2 for t in total)
        return pre, tuple(t - p for t, p in zip(total, pre))
    pad = _ntuple(padding, nd)
    return pad, pad


def _conv_graph(x, w, b, z, spec):
    op = "fused conv+bias+activation"
    stride, padding, dilation = spec["stride"], spec["padding"], spec["dilation"]
    act, act_kw = spec["act"], spec["act_kw"]
    nd = x.dim() - 2
    if nd not in (2, 3) or w.dim() != x.dim():
        raise _declined(f"{nd}-D convolution: the fused path takes 2-D and 3-D", op)
    if x.shape[1] != w.shape[1] * spec["groups"]:
        raise _declined(
            f"{x.shape[1]} input channels, weight {list(w.shape)}, {spec['groups']} groups", op
        )
    if x.dtype != w.dtype:
        raise _declined(f"input {x.dtype} and weight {w.dtype} differ", op)
    if x.numel() == 0 or w.numel() == 0:
        raise _declined("zero-size convolution", op)
    if z is not None and z.dtype != x.dtype:
        raise _declined(
            f"residual {z.dtype} and input {x.dtype} differ (PyTorch would promote the sum)", op
        )
    stride, dilation = _ntuple(stride, nd), _ntuple(dilation, nd)
    if padding == "same" and any(s != 1 for s in stride):
        raise _declined("padding='same' with a stride other than 1", op)
    pre, post = _conv_padding(padding, nd, w, dilation)
    out = [
        (i + p + q - d * (k - 1) - 1) // s + 1
        for i, p, q, d, k, s in zip(x.shape[2:], pre, post, dilation, w.shape[2:], stride)
    ]
    if min(out) <= 0:
        raise _declined(f"output spatial size {out}", op)
    shape = (x.shape[0], w.shape[0], *out)
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}[x.dim()]
    last = x.is_contiguous(memory_format=fmt) and not x.is_contiguous()
    y = torch.empty(
        shape,
        dtype=x.dtype,
        device=x.device,
        memory_format=fmt if last else torch.contiguous_format,
    )
    if z is not None and z.shape != y.shape:
        raise _declined(f"residual {list(z.shape)} for output {list(y.shape)}", op)
    b4 = None if b is None else b.view(1, -1, *([1] * nd))
    key = (
        "opendnn.compile.conv_act",
        pre,
        post,
        stride,
        dilation,
        _act_key(act, act_kw),
        _graphs.meta(x),
        _graphs.meta(w),
        _graphs.meta(b4),
        _graphs.meta(z),
        _graphs.meta(y),
    )

    def build(g):
        tx, tw = _tensor(g, x, "x"), _tensor(g, w, "w")
        out = g.conv_fprop(
            tx,
            tw,
            pre_padding=list(pre),
            post_padding=list(post),
            stride=list(stride),
            dilation=list(dilation),
        )
        roles = {"x": tx, "w": tw}
        if b4 is not None:
            roles["b"] = _tensor(g, b4, "b")
            out = g.add(out, roles["b"])
        if z is not None:
            roles["z"] = _tensor(g, z, "z")
            out = g.add(out, roles["z"])
        roles["y"] = _act_node(g, out, act, act_kw)
        _mark_output(roles["y"], y)
        return roles

    built = _graphs.built(key, x.device, build)
    feeds = {"x": x, "w": w, "y": y, "b": b4, "z": z}
    _graphs.run(built, {k: v for k, v in feeds.items() if v is not None})
    return y


def conv_act(x, w, b, z, spec):
    """act(conv(x, w) + b [+ z]); ``spec``: conv (``conv2d``/``conv3d``), stride, padding,
    dilation, groups, act (an ACTIVATIONS name or None), act_kw."""
    if not needs_grad(x, w, b, z):
        try:
            return _conv_graph(*_autocast(x, w, b), z, spec)
        except GraphNotSupportedError as err:
            note_fallback("fused conv+activation", err)
    if b is not None and b.dtype != w.dtype:  # a folded bias (float32)
        b = b.to(w.dtype)
    y = ROUTED[spec["conv"]](
        x, w, b, spec["stride"], spec["padding"], spec["dilation"], spec["groups"]
    )
    return _activate(y if z is None else y + z, spec["act"], spec["act_kw"])


# ---- conv + batch norm folding ------------------------------------------------------------------
# ids of the six tensors -> (their states, W', b'): device tensors, so at most
# FOLD_CACHE_SIZE even when more plans are kept; least recently used dropped first
FOLD_CACHE_SIZE = 256
_folds = LRU(lambda: min(FOLD_CACHE_SIZE, plan_cache_size()))


def _state(t):
    return None if t is None else (weakref.ref(t), t.data_ptr(), t._version)


def _alive(state, t):
    return (
        state is None
        if t is None
        else (state is not None and state[0]() is t and state[1:] == (t.data_ptr(), t._version))
    )


def folded(w, b, mean, var, gamma, beta, eps):
    """(W', b') of conv + eval BN (module docstring), cached per weight set."""
    tensors = (w, b, mean, var, gamma, beta)
    key = tuple(id(t) for t in tensors) + (float(eps),)
    hit = _folds.get(key)
    if hit is not None and all(_alive(s, t) for s, t in zip(hit[0], tensors)):
        return hit[1], hit[2]
    with torch.no_grad():
        ct = torch.float64 if w.dtype == torch.float64 else torch.float32
        s = torch.rsqrt(var.to(ct) + eps)
        if gamma is not None:
            s = s * gamma.to(ct)
        shift = -mean.to(ct) * s
        if beta is not None:
            shift = shift + beta.to(ct)
        bias = shift if b is None else b.to(ct) * s + shift
        wf = (w.to(ct) * s.view(-1, *([1] * (w.dim() - 1)))).to(w.dtype)
    _folds[key] = (tuple(_state(t) for t in tensors), wf, bias)
    return wf, bias


def conv_bn_act(x, w, b, mean, var, gamma, beta, z, eps, momentum, spec):
    """act(batch_norm(conv(x, w) + b) [+ z]) with BN in eval mode; ``spec`` as
    conv_act's."""
    if not needs_grad(x, w, b, mean, var, gamma, beta, z):
        wf, bf = folded(w, b, mean, var, gamma, beta, eps)
        return conv_act(x, wf, bf, z, spec)
    y = ROUTED[spec["conv"]](
        x, w, b, spec["stride"], spec["padding"], spec["dilation"], spec["groups"]
    )
    y = ROUTED["batch_norm"](y, mean, var, gamma, beta, False, momentum, eps)
    return _activate(y if z is None else y + z, spec["act"], spec["act_kw"])


# ---- linear + bias + activation ----------------------------------------------------------------
def _linear_graph(x, w, b, act, act_kw):
    op = "fused linear+bias+activation"
    if x.dtype != w.dtype:
        raise _declined(f"input {x.dtype} and weight {w.dtype} differ", op)
    if x.dim() < 1 or w.dim() != 2 or x.numel() == 0 or w.numel() == 0:
        raise _declined(f"input {list(x.shape)} x weight {list(w.shape)}", op)
    n, k = w.shape
    x2 = x.reshape(-1, k)
    wt = w.t()
    b2 = None if b is None else b.view(1, n)
    y = torch.empty(x2.shape[0], n, dtype=x.dtype, device=x.device)
    key = (
        "opendnn.compile.linear_act",
        _act_key(act, act_kw),
        _graphs.meta(x2),
        _graphs.meta(wt),
        _graphs.meta(b2),
    )

    def build(g):
        tx, tw = _tensor(g, x2, "x"), _tensor(g, wt, "w")
        out, roles = g.matmul(tx, tw), {"x": tx, "w": tw}
        if b2 is not None:
            roles["b"] = _tensor(g, b2, "b")
            out = g.add(out, roles["b"])
        roles["y"] = _act_node(g, out, act, act_kw)
        _mark_output(roles["y"], y)
        return roles

    built = _graphs.built(key, x.device, build)
    _graphs.run(built, {"x": x2, "w": wt, "y": y, **({"b": b2} if b2 is not None else {})})
    return y.view(*x.shape[:-1], n)


def linear_act(x, w, b, spec):
    """act(linear(x, w, b)); ``spec``: act, act_kw."""
    if not needs_grad(x, w, b):
        try:
            return _linear_graph(*_autocast(x, w, b), spec["act"], spec["act_kw"])
        except GraphNotSupportedError as err:
            note_fallback("fused linear+activation", err)
    return _activate(ROUTED["linear"](x, w, b), spec["act"], spec["act_kw"])


# ---- norm + activation ---------------------------------------------------------------------
def _norm_graph(norm, x, weight, bias, eps, spec):
    op = f"fused {norm}+activation"
    if x.numel() == 0:
        raise _declined("zero-size input", op)
    if norm == "layer_norm":
        shape = tuple(spec["normalized_shape"])
        if tuple(x.shape[x.dim() - len(shape) :]) != shape:
            raise _declined(
                f"normalized_shape {list(shape)} is not the end of input's {list(x.shape)}", op
            )
        length = math.prod(shape)
        xs, pshape = x.reshape(-1, length), (1, length)
    else:
        groups = spec["num_groups"]
        if x.dim() < 2 or x.shape[1] % groups:
            raise _declined(f"{groups} groups for input {list(x.shape)}", op)
        xs, pshape = x, (1, x.shape[1]) + (1,) * (x.dim() - 2)
    if (weight is not None and weight.dtype != x.dtype) or (
        bias is not None and bias.dtype != x.dtype
    ):
        raise _declined("weight / bias data types differ from the input's", op)
    # the norm nodes take a scale and a bias always: ones / zeros stand in for None
    scale = (
        torch.ones(pshape, dtype=x.dtype, device=x.device)
        if weight is None
        else weight.reshape(pshape)
    )
    shift = (
        torch.zeros(pshape, dtype=x.dtype, device=x.device)
        if bias is None
        else bias.reshape(pshape)
    )
    y = torch.empty(xs.shape, dtype=x.dtype, device=x.device)
    eps = float(eps)
    key = (
        "opendnn.compile.norm_act",
        norm,
        spec.get("num_groups"),
        eps,
        _act_key(spec["act"], spec["act_kw"]),
        _graphs.meta(xs),
        _graphs.meta(scale),
        _graphs.meta(shift),
        _graphs.meta(y),
    )

    def build(g):
        roles = {
            "x": _tensor(g, xs, "x"),
            "s": _tensor(g, scale, "scale"),
            "b": _tensor(g, shift, "bias"),
        }
        if norm == "layer_norm":
            out = g.layernorm(NormForwardPhase.INFERENCE, roles["x"], roles["s"], roles["b"], eps)[
                0
            ]
        else:
            out = g.groupnorm(
                NormForwardPhase.INFERENCE,
                roles["x"],
                roles["s"],
                roles["b"],
                eps,
                groups=spec["num_groups"],
            )[0]
        roles["y"] = _act_node(g, out, spec["act"], spec["act_kw"])
        _mark_output(roles["y"], y)
        return roles

    built = _graphs.built(key, x.device, build)
    _graphs.run(built, {"x": xs, "s": scale, "b": shift, "y": y})
    return y.view(x.shape)


def norm_act(x, weight, bias, eps, spec):
    """act(layer_norm(x) | group_norm(x)); ``spec``: norm, normalized_shape or num_groups,
    act, act_kw."""
    norm = spec["norm"]
    # under autocast: CUDA runs layer / group norm in float32; other devices' lists
    # differ, so there the chain runs unfused (each operation's own autocast rule)
    autocast = torch.is_autocast_enabled(x.device.type)
    if not needs_grad(x, weight, bias) and (not autocast or x.is_cuda):
        try:
            return _norm_graph(norm, *_autocast(x, weight, bias, to=torch.float32), eps, spec)
        except GraphNotSupportedError as err:
            note_fallback(f"fused {norm}+activation", err)
    second = spec["normalized_shape"] if norm == "layer_norm" else spec["num_groups"]
    y = ROUTED[norm](x, second, weight, bias, eps)
    return _activate(y, spec["act"], spec["act_kw"])


# ---- attention --------------------------------------------------------------------------------
def attention(q, k, v, mask, spec):
    """softmax(q @ k^T (* or /) c [+ mask]) @ v as scaled-dot-product attention; the
    explicit PyTorch expression (the graph's own) where opendnn declines. ``spec``: scale
    (``("mul", c)``, ``("div", c)`` or None)."""
    how = spec["scale"]
    scale = 1.0 if how is None else (how[1] if how[0] == "mul" else 1.0 / how[1])
    try:
        return OF.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=False, scale=scale
        )
    except GraphNotSupportedError as err:
        note_fallback("fused attention", err)
    s = torch.matmul(q, k.transpose(-2, -1))
    if how is not None:
        s = s * how[1] if how[0] == "mul" else s / how[1]
    if mask is not None:
        s = s + mask
    return torch.matmul(torch.softmax(s, -1), v)
