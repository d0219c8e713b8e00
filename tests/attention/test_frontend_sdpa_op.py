"""cudnn-frontend's ``cudnn.experimental.ops.sdpa.scaled_dot_product_attention`` on the
CPU (the attention kernels through the interpreter), forward and backward against a
float64 reference with cuDNN's band and padding masks."""

from __future__ import annotations

import math

import pytest
import torch

import opendnn.frontend as cudnn
from opendnn.errors import BadParamError, Status

OPS = cudnn.experimental.ops.sdpa
sdpa = OPS.scaled_dot_product_attention


def _reference(q, k, v, scale, is_causal=False, align=0, left=-1, right=-1, sq=None, skv=None):
    """float64 (o, dq, dk, dv) for loss = o.sum() (masked rows: zero output)."""
    qd, kd, vd = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    b, hq, lq, _ = q.shape
    hk, lk = k.shape[1], k.shape[2]
    kx = kd.repeat_interleave(hq // hk, 1)
    vx = vd.repeat_interleave(hq // hk, 1)
    s = scale * qd @ kx.transpose(-1, -2)
    i = torch.arange(lq)[:, None]
    j = torch.arange(lk)[None, :]
    keep = torch.ones(b, 1, lq, lk, dtype=torch.bool)
    for n in range(b):
        mq = int(sq[n]) if sq is not None else lq
        mk = int(skv[n]) if skv is not None else lk
        shift = (mk - mq) if align == 1 else 0  # BOTTOM_RIGHT: the diagonal ends at the corner
        m = (i < mq) & (j < mk)
        rb = right if right >= 0 else (0 if is_causal else None)
        if rb is not None:
            m &= j <= i + shift + rb
        if left >= 0:
            m &= j > i + shift - left
        keep[n, 0] = m
    s = s.masked_fill(~keep, -math.inf)
    p = torch.softmax(s, -1).nan_to_num(0.0)
    o = p @ vx
    o.sum().backward()
    return o, qd.grad, kd.grad, vd.grad


def _qkv(b=2, hq=2, hk=2, lq=12, lk=12, d=16, dt=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, lq, d, generator=g).to(dt).requires_grad_(True)
    k = torch.randn(b, hk, lk, d, generator=g).to(dt).requires_grad_(True)
    v = torch.randn(b, hk, lk, d, generator=g).to(dt).requires_grad_(True)
    return q, k, v


def _check(o, grads, ref, tol=2e-2):
    for got, want in zip((o, *grads), ref):
        assert not torch.isnan(got).any()
        err = (got.double() - want).abs().max().item()
        assert err <= tol * max(1.0, want.abs().max().item()), err


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(is_causal=True),
        dict(is_causal=True, diagonal_alignment=1),
        dict(diagonal_alignment=0, left_bound=4, right_bound=0),
    ],
    ids=["plain", "causal", "causal-bottom-right", "sliding-window"],
)
def test_forward_and_backward(kw):
    q, k, v = _qkv(lq=10, lk=14)
    o = sdpa(q, k, v, **kw)
    o.sum().backward()
    ref = _reference(
        q,
        k,
        v,
        1 / math.sqrt(16),
        kw.get("is_causal", False),
        kw.get("diagonal_alignment", 0),
        kw.get("left_bound", -1),
        kw.get("right_bound", -1),
    )
    _check(o, (q.grad, k.grad, v.grad), ref)


def test_padding_and_gqa():
    q, k, v = _qkv(hq=4, hk=2, lq=12, lk=16, seed=1)
    sq = torch.tensor([7, 12], dtype=torch.int32).reshape(2, 1, 1, 1)
    skv = torch.tensor([9, 16], dtype=torch.int32).reshape(2, 1, 1, 1)
    o = sdpa(q, k, v, enable_gqa=True, scale=0.3, seq_len_q=sq, seq_len_kv=skv)
    o.sum().backward()
    ref = _reference(q, k, v, 0.3, sq=sq.flatten(), skv=skv.flatten())
    rows = [slice(0, 7), slice(0, 12)]
    for n in range(2):  # rows past seq_len_q are cuDNN's to leave: compare the valid ones
        _check(
            o[n][:, rows[n]],
            (q.grad[n][:, rows[n]],),
            (ref[0][n][:, rows[n]], ref[1][n][:, rows[n]]),
        )
    _check(k.grad, (v.grad,), (ref[2], ref[3]))


def test_one_graph_per_configuration():
    q, k, v = _qkv(lq=8, lk=8, seed=2)
    before = len(OPS._fprop_cache)
    sdpa(q.detach(), k.detach(), v.detach())
    sdpa(q.detach() * 2, k.detach(), v.detach())
    assert len(OPS._fprop_cache) == before + 1
    q2, k2, v2 = _qkv(lq=16, lk=16, seed=3)
    sdpa(q2.detach(), k2.detach(), v2.detach())
    assert len(OPS._fprop_cache) == before + 2


def test_refusals():
    q, k, v = _qkv(hq=4, hk=2)
    with pytest.raises(NotImplementedError, match="attn_mask"):
        sdpa(q, k, v, attn_mask=torch.ones(1, 1, 12, 12), enable_gqa=True)
    with pytest.raises(NotImplementedError, match="dropout"):
        sdpa(q, k, v, dropout_p=0.1, enable_gqa=True)
    with pytest.raises(ValueError, match="enable_gqa"):
        sdpa(q, k, v)
    with pytest.raises(BadParamError, match="ragged") as e:
        sdpa(
            q,
            k,
            v,
            enable_gqa=True,
            cumulative_seq_len_q=torch.zeros(3, 1, 1, 1, dtype=torch.int32),
        )
    assert e.value.status == Status.NOT_SUPPORTED
