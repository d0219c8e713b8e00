"""cudnn-frontend's ``cudnn.experimental.ops.sdpa``: ``scaled_dot_product_attention``
with PyTorch's signature and cuDNN's masking extensions, a custom operator (autograd,
``torch.compile`` through its fake kernels) over opendnn's ``sdpa`` / ``sdpa_backward``
graph nodes.

Tensors are BHSD: q [B, Hq, Sq, D], k [B, Hk, Skv, D], v [B, Hk, Skv, Dv] -> o [B, Hq,
Sq, Dv], with Hk dividing Hq (grouped-query attention when ``enable_gqa``). The masks
are cuDNN's diagonal band: ``is_causal`` keeps key j <= query i (right bound 0),
``left_bound`` / ``right_bound`` (-1: none) the band around the diagonal, which
``diagonal_alignment`` (0 TOP_LEFT, 1 BOTTOM_RIGHT) anchors at the top-left corner or
at the bottom-right one; ``seq_len_q`` / ``seq_len_kv`` [B, 1, 1, 1] int32 are each
batch's valid lengths (padding mask). One graph is built per configuration (shapes,
strides, types, scale, masks) and kept: ``_fprop_cache`` / ``_bprop_cache`` hold them.

Refused as cudnn-frontend refuses: ``attn_mask`` and ``dropout_p`` (NotImplementedError),
Hq != Hk without ``enable_gqa`` (ValueError). Ragged layouts (``cumulative_seq_len_q`` /
``_kv``) are NOT_SUPPORTED here.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from ....enums import DiagonalAlignment
from ....errors import BadParamError, Status
from ....torch import _graphs
from ....torch.activation import graph_tensor, mark_output
from ....torch.attention import forward_outputs

OP = "cudnn.experimental.ops.sdpa"

# one built graph per configuration (cudnn-frontend's caches, by the same names)
_fprop_cache: dict = {}
_bprop_cache: dict = {}


def _mask_options(ts: dict, is_causal, alignment, left, right) -> dict:
    """The sdpa keywords of cuDNN's band and padding masks."""
    rb = right if right >= 0 else (0 if is_causal else None)
    return dict(
        use_padding_mask="seq_len_q" in ts or "seq_len_kv" in ts,
        seq_len_q=ts.get("seq_len_q"),
        seq_len_kv=ts.get("seq_len_kv"),
        diagonal_alignment=DiagonalAlignment.BOTTOM_RIGHT
        if alignment
        else DiagonalAlignment.TOP_LEFT,
        diagonal_band_left_bound=left if left >= 0 else None,
        diagonal_band_right_bound=rb,
    )


def _inputs(q, k, v, seq_len_q, seq_len_kv) -> dict:
    t = {"q": q, "k": k, "v": v}
    for name, s in (("seq_len_q", seq_len_q), ("seq_len_kv", seq_len_kv)):
        if s is not None:
            t[name] = s
    return t


def _config(kind, tensors, scale, is_causal, alignment, left, right) -> tuple:
    return (kind, float(scale), bool(is_causal), int(alignment), int(left), int(right)) + tuple(
        (r, _graphs.meta(t)) for r, t in tensors.items()
    )


def _kept(cache: dict, key: tuple, device, builder):
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = _graphs.built(key, device, builder)
    return hit


@torch.library.custom_op("opendnn_frontend::sdpa", mutates_args=())
def _sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    is_causal: bool,
    diagonal_alignment: int,
    left_bound: int,
    right_bound: int,
    seq_len_q: Optional[torch.Tensor],
    seq_len_kv: Optional[torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """(o [B, Hq, Sq, Dv], stats [B, Hq, Sq, 1] float32: each row's logsumexp)."""
    out, stats = forward_outputs(q, v)
    tensors = _inputs(q, k, v, seq_len_q, seq_len_kv)
    masks = (is_causal, diagonal_alignment, left_bound, right_bound)

    def builder(g):
        ts = {r: graph_tensor(g, t, r) for r, t in tensors.items()}
        o, st = g.sdpa(
            ts["q"],
            ts["k"],
            ts["v"],
            attn_scale=float(scale),
            generate_stats=True,
            **_mask_options(ts, *masks),
        )
        mark_output(o, out)
        mark_output(st, stats)
        return {**ts, "out": o, "stats": st}

    key = _config("fprop", tensors, scale, *masks)
    _graphs.run(
        _kept(_fprop_cache, key, q.device, builder), {**tensors, "out": out, "stats": stats}
    )
    return out, stats


@_sdpa.register_fake
def _(q, k, v, scale, is_causal, diagonal_alignment, left_bound, right_bound, sq_len, skv_len):
    return forward_outputs(q, v)


@torch.library.custom_op("opendnn_frontend::sdpa_backward", mutates_args=())
def _sdpa_backward(
    grad: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    stats: torch.Tensor,
    scale: float,
    is_causal: bool,
    diagonal_alignment: int,
    left_bound: int,
    right_bound: int,
    seq_len_q: Optional[torch.Tensor],
    seq_len_kv: Optional[torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv), laid out as q, k, v."""
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
    tensors = _inputs(q, k, v, seq_len_q, seq_len_kv)
    tensors.update({"out": out, "grad": grad.contiguous(), "stats": stats})
    masks = (is_causal, diagonal_alignment, left_bound, right_bound)

    def builder(g):
        ts = {r: graph_tensor(g, t, r) for r, t in tensors.items()}
        grads = g.sdpa_backward(
            ts["q"],
            ts["k"],
            ts["v"],
            ts["out"],
            ts["grad"],
            ts["stats"],
            attn_scale=float(scale),
            **_mask_options(ts, *masks),
        )
        named = dict(zip(("dq", "dk", "dv"), grads))
        for r, buf in (("dq", dq), ("dk", dk), ("dv", dv)):
            mark_output(named[r], buf)
        return {**ts, **named}

    key = _config("bprop", tensors, scale, *masks)
    built = _kept(_bprop_cache, key, q.device, builder)
    _graphs.run(built, {**tensors, "dq": dq, "dk": dk, "dv": dv})
    return dq, dk, dv


@_sdpa_backward.register_fake
def _(grad, q, k, v, out, stats, scale, is_causal, alignment, left, right, sq_len, skv_len):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup(ctx, inputs, output):
    q, k, v, ctx.scale, ctx.is_causal, ctx.alignment, ctx.left, ctx.right, sq, skv = inputs
    out, stats = output
    ctx.save_for_backward(q, k, v, out, stats, sq, skv)


def _backward(ctx, grad, _grad_stats):
    q, k, v, out, stats, sq, skv = ctx.saved_tensors
    dq, dk, dv = _sdpa_backward(
        grad,
        q,
        k,
        v,
        out,
        stats,
        ctx.scale,
        ctx.is_causal,
        ctx.alignment,
        ctx.left,
        ctx.right,
        sq,
        skv,
    )
    return dq, dk, dv, None, None, None, None, None, None, None


_sdpa.register_autograd(_backward, setup_context=_setup)


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: Optional[torch.Tensor] = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: Optional[float] = None,
    enable_gqa: bool = False,
    *,
    diagonal_alignment: int = 0,
    left_bound: int = -1,
    right_bound: int = -1,
    seq_len_q: Optional[torch.Tensor] = None,
    seq_len_kv: Optional[torch.Tensor] = None,
    cumulative_seq_len_q: Optional[torch.Tensor] = None,
    cumulative_seq_len_kv: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """o [B, Hq, Sq, Dv] = softmax(scale q k^T, masked) v for BHSD q, k, v (see the
    module docstring); ``scale`` None is 1 / sqrt(D). Differentiable in q, k, v."""
    if attn_mask is not None:
        raise NotImplementedError("attn_mask is not supported by this SDPA operator")
    if dropout_p != 0.0:
        raise NotImplementedError("dropout is not supported by this SDPA operator")
    if not enable_gqa and query.shape[1] != key.shape[1]:
        raise ValueError(
            f"query has {query.shape[1]} heads but key has {key.shape[1]}: set "
            "enable_gqa=True for grouped-query attention"
        )
    if cumulative_seq_len_q is not None or cumulative_seq_len_kv is not None:
        raise BadParamError(
            "ragged layouts (cumulative_seq_len_q / cumulative_seq_len_kv) are not supported",
            op=OP,
            status=Status.NOT_SUPPORTED,
        )
    if diagonal_alignment not in (0, 1):
        raise BadParamError(
            f"diagonal_alignment must be 0 (TOP_LEFT) or 1 (BOTTOM_RIGHT), got {diagonal_alignment}",
            op=OP,
        )
    s = float(scale) if scale is not None else 1.0 / math.sqrt(query.shape[-1])
    out, _ = _sdpa(
        query,
        key,
        value,
        s,
        bool(is_causal),
        int(diagonal_alignment),
        int(left_bound),
        int(right_bound),
        seq_len_q,
        seq_len_kv,
    )
    return out
