"""Scaled-dot-product attention for PyTorch (``torch.nn.functional.
scaled_dot_product_attention`` with its signature) on opendnn's ``sdpa`` /
``sdpa_backward`` graph nodes (the flash-attention engine; math in ``ops/attention.py``).

Custom ops (namespace ``opendnn``), on 4-D tensors q [B, Hq, L, E], k [B, Hk, S, E],
v [B, Hk, S, Ev]:

- ``sdpa(q, k, v, bias, dropout_p, is_causal, scale, rng) -> (out, stats)``:
  out [B, Hq, L, Ev] (contiguous, q's type) = softmax(scale q k^T + bias, masked) v with
  dropout on the probabilities; stats [B, Hq, L, 1] float32 is the row logsumexp the
  backward needs. bias: None or [B or 1, Hq or 1, L, S] in q's type, any strides (zero
  strides for broadcast rows / columns); rng: None or (seed, offset) int64 as dropout's;
- ``sdpa_backward(grad, q, k, v, out, stats, bias, dropout_p, is_causal, scale, rng,
  bias_grad) -> (dq, dk, dv, dbias)``: dq / dk / dv laid out as q / k / v; dbias (bias's
  dims, contiguous) when ``bias_grad``, else an empty tensor. The dropout mask is
  regenerated from rng (nothing stored).

The functional layer maps PyTorch's arguments onto those:

- q (..., L, E), k (..., S, E), v (..., S, Ev) of one rank >= 2 with equal leading dims:
  dim -3 is the head dim (rank 3: q's dim 0), the others are flattened into B;
- attn_mask: bool (True = take part) becomes the additive bias 0 / -inf in q's type; a
  float mask (q's type) is the bias itself; either broadcast to [B|1, H|1, L, S] by views
  (a float mask that requires grad gets its gradient through them: dBias summed over
  the broadcast axes); is_causal keeps key j <= query i (top-left, right bound 0); both
  given is an error, as documented (PyTorch's math path raises; its CPU flash path
  applies both). A query row with no key left gives 0 (and zero gradients), as
  PyTorch's math path gives;
- enable_gqa: Hk = Hv dividing Hq, query head h reading key head h // (Hq / Hk);
- dropout_p > 0: (seed, offset) drawn from PyTorch's generator of the device, as in
  ``opendnn.torch.dropout``; scale None: 1 / sqrt(E).

Declined (GraphNotSupportedError, for ``enable()`` to hand to PyTorch): float32 / float64
inputs (the attention engines take half and bfloat16; float32 would run on the float64
host reference), head dims E / Ev not multiples of 8 in [8, 256], Hk != Hv, dropout_p = 1,
ranks or leading dims that differ between q, k and v (broadcast batches). Under autocast (CPU
or CUDA) q, k, v and a float mask are cast to the autocast type, as PyTorch's autocast
runs sdpa in lower precision (in the functional layer, and for direct calls of the op by
an Autocast kernel, ``autocast_kernel``).
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from ..errors import BadParamError, GraphNotSupportedError, Status
from . import _graphs
from .activation import graph_tensor, mark_output
from .dropout import draw_rng

OP = "scaled_dot_product_attention"
TYPES = (torch.float16, torch.bfloat16)
MAX_HEAD_DIM = 256


def _bad(rule: str, tensor=None, status=Status.BAD_PARAM, op=OP):
    return BadParamError(rule, op=op, tensor=tensor, status=status)


def _declined(rule: str, tensor=None, status=Status.NOT_SUPPORTED, op=OP):
    return GraphNotSupportedError(rule, op=op, tensor=tensor, status=status)


def check_qkv(q, k, v, op: str = OP) -> None:
    """PyTorch's rules on q / k / v (BadParamError) and opendnn's limits
    (GraphNotSupportedError) on tensors of equal rank (4 inside the ops)."""
    for t, r in ((q, "query"), (k, "key"), (v, "value")):
        if not isinstance(t, torch.Tensor):
            raise _bad(
                f"{r} must be a torch.Tensor, got {type(t).__name__}",
                r,
                Status.BAD_PARAM_ATTRIBUTE_TYPE,
                op,
            )
        if t.dim() < 2:
            raise _bad(
                f"{r} has {t.dim()} dims; at least 2 (..., S, D)",
                r,
                Status.BAD_PARAM_SHAPE_MISMATCH,
                op,
            )
        if t.dim() != q.dim():
            raise _declined(
                f"{r} has {t.dim()} dims, query {q.dim()}: ranks that broadcast are not supported",
                r,
                Status.NOT_SUPPORTED_SHAPE,
                op,
            )
        if t.device != q.device:
            raise _bad(f"{r} is on {t.device}, query on {q.device}", r, op=op)
    if not q.dtype == k.dtype == v.dtype:
        raise _bad(
            f"query, key and value need one dtype, got {q.dtype}, {k.dtype}, {v.dtype}",
            "key",
            op=op,
        )
    if q.dtype not in TYPES:
        raise _declined(
            f"query is {q.dtype}: the attention engines take float16 and "
            "bfloat16 (float32 would run on the float64 host reference)",
            "query",
            Status.NOT_SUPPORTED_DATA_TYPE,
            op,
        )
    if k.shape[-1] != q.shape[-1]:
        raise _bad(
            f"key head dim {k.shape[-1]} differs from query's {q.shape[-1]}",
            "key",
            Status.BAD_PARAM_SHAPE_MISMATCH,
            op,
        )
    if v.shape[-2] != k.shape[-2]:
        raise _bad(
            f"value length {v.shape[-2]} differs from key's {k.shape[-2]}",
            "value",
            Status.BAD_PARAM_SHAPE_MISMATCH,
            op,
        )
    for t, r in ((q, "query"), (v, "value")):
        e = t.shape[-1]
        if e % 8 or not 8 <= e <= MAX_HEAD_DIM:
            raise _declined(
                f"{r} head dim {e}: the attention engines take multiples of 8 "
                f"in [8, {MAX_HEAD_DIM}]",
                r,
                Status.NOT_SUPPORTED_SHAPE,
                op,
            )


def _check_heads(q, k, v, enable_gqa: bool, op: str = OP) -> None:
    hq, hk, hv = (t.shape[-3] if t.dim() > 2 else 1 for t in (q, k, v))
    if not enable_gqa and (hk != hq or hv != hq):
        raise _bad(
            f"head counts differ (query {hq}, key {hk}, value {hv}); grouped-query "
            "attention needs enable_gqa=True",
            "key",
            Status.BAD_PARAM_SHAPE_MISMATCH,
            op,
        )
    if hq % hk or hq % hv:
        raise _bad(
            f"number of heads in key ({hk}) and value ({hv}) must divide the number "
            f"of heads in query ({hq})",
            "key",
            Status.BAD_PARAM_SHAPE_MISMATCH,
            op,
        )
    if hk != hv:
        raise _declined(
            f"key and value head counts differ ({hk}, {hv}): the attention "
            "engine groups one head count",
            "value",
            Status.NOT_SUPPORTED_SHAPE,
            op,
        )


def _dropout_p(p, op: str = OP) -> float:
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise _bad(
            f"dropout probability has to be between 0 and 1, but got {p}",
            None,
            Status.BAD_PARAM_OUT_OF_BOUND,
            op,
        )
    if p == 1.0:
        raise _declined(
            "dropout_p = 1 leaves no scale 1 / (1 - p) for the attention engine",
            None,
            Status.NOT_SUPPORTED,
            op,
        )
    return p


# ---- graphs --------------------------------------------------------------------------------
def _key(kind, tensors: dict, p, is_causal, scale, extra=()) -> tuple:
    return (
        (kind, float(p), bool(is_causal), float(scale))
        + tuple(extra)
        + tuple((r, _graphs.meta(t)) for r, t in tensors.items())
    )


def _options(ts: dict, p: float, is_causal: bool, scale: float) -> dict:
    """The sdpa / sdpa_backward keyword arguments shared by forward and backward."""
    kw = dict(
        attn_scale=float(scale),
        bias=ts.get("bias"),
        diagonal_band_right_bound=0 if is_causal else None,
    )
    if p > 0.0:
        kw["dropout"] = (p, ts["seed"], ts["offset"])
    return kw


def _inputs(q, k, v, bias, rng, p) -> dict:
    t = {"q": q, "k": k, "v": v}
    if bias is not None:
        t["bias"] = bias
    if p > 0.0:
        t["seed"], t["offset"] = rng[0:1], rng[1:2]
    return t


def _check_op_args(op, q, k, v, bias, p, rng) -> float:
    check_qkv(q, k, v, op)
    if q.dim() != 4:
        raise _bad(
            f"the op takes 4-D [B, H, S, D] tensors, got {q.dim()} dims",
            "query",
            Status.BAD_PARAM_SHAPE_MISMATCH,
            op,
        )
    _check_heads(q, k, v, True, op)
    p = _dropout_p(p, op)
    if p > 0.0 and (rng is None or rng.dtype != torch.int64 or rng.shape != (2,)):
        raise _bad("dropout needs rng, a two-element int64 tensor (seed, offset)", "rng", op=op)
    if bias is not None and bias.dtype != q.dtype:
        raise _bad(f"bias is {bias.dtype}, query {q.dtype}", "bias", op=op)
    return p


@torch.library.custom_op("opendnn::sdpa", mutates_args=())
def sdpa_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: Optional[torch.Tensor],
    dropout_p: float,
    is_causal: bool,
    scale: float,
    rng: Optional[torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [B, Hq, L, Ev], stats [B, Hq, L, 1] float32)."""
    p = _check_op_args("opendnn::sdpa", q, k, v, bias, dropout_p, rng)
    out, stats = forward_outputs(q, v)
    if out.numel() == 0:
        return out, stats
    if k.shape[2] == 0:  # no keys at all: every row is empty
        return out.zero_(), stats.fill_(-math.inf)
    tensors = _inputs(q, k, v, bias, rng, p)

    def builder(g):
        ts = {r: graph_tensor(g, t, r) for r, t in tensors.items()}
        o, st = g.sdpa(
            ts["q"], ts["k"], ts["v"], generate_stats=True, **_options(ts, p, is_causal, scale)
        )
        mark_output(o, out)
        mark_output(st, stats)
        return {**ts, "out": o, "stats": st}

    built = _graphs.built(_key("opendnn.sdpa", tensors, p, is_causal, scale), q.device, builder)
    _graphs.run(built, {**tensors, "out": out, "stats": stats})
    return out, stats


def forward_outputs(q: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Empty (out [B, Hq, L, Ev] in q's type, stats [B, Hq, L, 1] float32) for q, v."""
    b, hq, length, _ = q.shape
    return (
        q.new_empty((b, hq, length, v.shape[-1])),
        q.new_empty((b, hq, length, 1), dtype=torch.float32),
    )


@sdpa_op.register_fake
def _(q, k, v, bias, dropout_p, is_causal, scale, rng):
    return forward_outputs(q, v)


@torch.library.custom_op("opendnn::sdpa_backward", mutates_args=())
def sdpa_backward_op(
    grad: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    stats: torch.Tensor,
    bias: Optional[torch.Tensor],
    dropout_p: float,
    is_causal: bool,
    scale: float,
    rng: Optional[torch.Tensor],
    bias_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv, dbias) -- dbias empty unless ``bias_grad``."""
    op = "opendnn::sdpa_backward"
    p = _check_op_args(op, q, k, v, bias, dropout_p, rng)
    if bias_grad and bias is None:
        raise _bad("bias_grad needs a bias", "bias", Status.BAD_PARAM_NULL_POINTER, op)
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
    dbias = torch.empty(bias.shape if bias_grad else (0,), dtype=q.dtype, device=q.device)
    if q.shape[2] == 0 or k.shape[2] == 0 or q.numel() == 0 or v.numel() == 0:
        return dq.zero_(), dk.zero_(), dv.zero_(), dbias.zero_()
    tensors = _inputs(q, k, v, bias, rng, p)
    tensors.update({"out": out, "grad": grad, "stats": stats})

    def builder(g):
        ts = {r: graph_tensor(g, t, r) for r, t in tensors.items()}
        tdb = g.tensor(name="dbias", data_type=q.dtype) if bias_grad else None
        grads = g.sdpa_backward(
            ts["q"],
            ts["k"],
            ts["v"],
            ts["out"],
            ts["grad"],
            ts["stats"],
            dBias=tdb,
            **_options(ts, p, is_causal, scale),
        )
        named = dict(zip(("dq", "dk", "dv"), grads))
        for r, buf in (("dq", dq), ("dk", dk), ("dv", dv)):
            mark_output(named[r], buf)
        if bias_grad:
            named["dbias"] = mark_output(tdb, dbias)
        return {**ts, **named}

    key = _key(
        "opendnn.sdpa_backward",
        tensors,
        p,
        is_causal,
        scale,
        (_graphs.meta(t) for t in (dq, dk, dv, dbias)),
    )
    built = _graphs.built(key, q.device, builder)
    pack = {**tensors, "dq": dq, "dk": dk, "dv": dv}
    if bias_grad:
        pack["dbias"] = dbias
    _graphs.run(built, pack)
    return dq, dk, dv, dbias


@sdpa_backward_op.register_fake
def _(grad, q, k, v, out, stats, bias, dropout_p, is_causal, scale, rng, bias_grad):
    return (
        torch.empty_like(q),
        torch.empty_like(k),
        torch.empty_like(v),
        torch.empty(bias.shape if bias_grad else (0,), dtype=q.dtype, device=q.device),
    )


def _setup(ctx, inputs, output):
    q, k, v, bias, ctx.p, ctx.is_causal, ctx.scale, rng = inputs
    out, stats = output
    ctx.has_bias, ctx.has_rng = bias is not None, rng is not None
    ctx.save_for_backward(q, k, v, out, stats, bias, rng)


def _backward(ctx, grad, _grad_stats):
    q, k, v, out, stats, bias, rng = ctx.saved_tensors
    bias_grad = bool(ctx.has_bias and ctx.needs_input_grad[3])
    dq, dk, dv, dbias = sdpa_backward_op(
        grad, q, k, v, out, stats, bias, ctx.p, ctx.is_causal, ctx.scale, rng, bias_grad
    )
    return dq, dk, dv, dbias if bias_grad else None, None, None, None, None


sdpa_op.register_autograd(_backward, setup_context=_setup)


def _autocast_cast(device_type: str, tensors) -> list:
    """Floating tensors of ``device_type`` in the autocast type (None stays None)."""
    dt = torch.get_autocast_dtype(device_type)
    return [
        t.to(dt)
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.device.type == device_type
        else t
        for t in tensors
    ]


def autocast_kernel(device_type: str):
    """sdpa under autocast (PyTorch's lower-precision list on CPU and CUDA): q, k, v and
    a float bias in the autocast type."""
    key = getattr(torch._C.DispatchKey, "Autocast" + torch._C._dispatch_key_for_device(device_type))

    def kernel(q, k, v, bias, dropout_p, is_causal, scale, rng):
        q, k, v, bias = _autocast_cast(device_type, (q, k, v, bias))
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(key)):
            return torch.ops.opendnn.sdpa(q, k, v, bias, dropout_p, is_causal, scale, rng)

    return kernel


for _device in ("cpu", "cuda"):
    if torch._C._is_autocast_available(_device):
        torch.library.impl(
            "opendnn::sdpa", "Autocast" + torch._C._dispatch_key_for_device(_device)
        )(autocast_kernel(_device))
_graphs.AUTOCAST["opendnn::sdpa"] = lambda args, dev: (*_autocast_cast(dev, args[:4]), *args[4:])
# eager calls skip the dispatcher (_graphs.direct; the ops stay registered)
sdpa_op, sdpa_backward_op = map(_graphs.direct, (sdpa_op, sdpa_backward_op))


# ---- torch.nn.functional.scaled_dot_product_attention ----------------------------------------
def _as_4d(t: torch.Tensor) -> torch.Tensor:
    """(..., H, S, D) -> [B, H, S, D] (the leading dims flattened into B)."""
    if t.dim() == 2:
        return t.reshape(1, 1, *t.shape)
    if t.dim() == 3:
        return t.unsqueeze(0)
    return t.reshape(math.prod(t.shape[:-3]), *t.shape[-3:])


def _bias(mask, q, q4, s: int) -> torch.Tensor:
    """attn_mask -> the bias [B or 1, Hq or 1, L, S] (views where it broadcasts)."""
    if not isinstance(mask, torch.Tensor):
        raise _bad(
            f"attn_mask must be a torch.Tensor, got {type(mask).__name__}",
            "attn_mask",
            Status.BAD_PARAM_ATTRIBUTE_TYPE,
        )
    if mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=q.dtype, device=mask.device).masked_fill(
            mask.logical_not(), -math.inf
        )
    elif mask.dtype != q.dtype:
        raise _bad(f"attn_mask is {mask.dtype}: it must be bool or query's {q.dtype}", "attn_mask")
    if mask.device != q.device:
        raise _bad(f"attn_mask is on {mask.device}, query on {q.device}", "attn_mask")
    full = (*q.shape[:-1], s)
    try:
        if torch.broadcast_shapes(mask.shape, full) != full:
            raise RuntimeError
    except RuntimeError:
        raise _bad(
            f"attn_mask shape {list(mask.shape)} does not broadcast to the scores' {list(full)}",
            "attn_mask",
            Status.BAD_PARAM_SHAPE_MISMATCH,
        ) from None
    m = mask.reshape((1,) * (len(full) - mask.dim()) + tuple(mask.shape))
    if m.dim() > 4:  # flattened batch dims: broadcast them, keep the head dim's size
        m = m.expand(*full[:-3], *m.shape[-3:]).reshape(math.prod(full[:-3]), *m.shape[-3:])
    elif m.dim() < 4:
        m = m.reshape((1,) * (4 - m.dim()) + tuple(m.shape))
    return m.expand(m.shape[0], m.shape[1], q4.shape[2], s)


def scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
) -> torch.Tensor:
    """softmax(query key^T * scale + mask) value, with dropout on the probabilities."""
    dev = getattr(query, "device", None)
    if dev is not None and dev.type in ("cpu", "cuda") and torch.is_autocast_enabled(dev.type):
        query, key, value, attn_mask = _autocast_cast(dev.type, (query, key, value, attn_mask))
    check_qkv(query, key, value)
    lead = [t.shape[:-3] for t in (query, key, value)]
    if not lead[0] == lead[1] == lead[2]:
        raise _declined(
            f"leading dims differ ({[list(x) for x in lead]}): broadcast batches are not supported",
            "key",
            Status.NOT_SUPPORTED_SHAPE,
        )
    _check_heads(query, key, value, bool(enable_gqa))
    p = _dropout_p(dropout_p)
    if attn_mask is not None and is_causal:
        raise _bad("explicit attn_mask should not be set when is_causal=True", "attn_mask")
    e = query.shape[-1]
    scale = 1.0 / math.sqrt(e) if scale is None else float(scale)
    q4, k4, v4 = (_as_4d(t) for t in (query, key, value))
    bias = None if attn_mask is None else _bias(attn_mask, query, q4, key.shape[-2])
    rng = draw_rng(query.device) if p > 0.0 else None
    out, _ = sdpa_op(q4, k4, v4, bias, p, bool(is_causal), scale, rng)
    return out.reshape(*query.shape[:-1], value.shape[-1])


__all__ = ["scaled_dot_product_attention"]
