"""Attention cases shared by the reference tests (and the engine tests to come): the
case table, inputs, the graphs, and the PyTorch ground truth.

The expected mask is written here from cudnn-frontend's documented statements, not
from ops/attention.py: the right bound "masks columns beyond row_idx + right_bound",
the left bound "masks columns at or before row_idx - left_bound", BOTTOM_RIGHT shifts
the diagonal by s_kv - s_q (per batch, the actual lengths, with the padding mask), and
the padding mask drops rows >= seq_len_q[b] and columns >= seq_len_kv[b].
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
import torch.nn.functional as F
from _util import TORCH_TO_DT, graph_tensor

import opendnn.frontend as cudnn
from opendnn.ops import dropout as dropout_ref

TL = cudnn.diagonal_alignment.TOP_LEFT
BR = cudnn.diagonal_alignment.BOTTOM_RIGHT


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    b: int = 2
    h_q: int = 4
    h_k: int = 2
    h_v: int | None = None  # default: h_k
    s_q: int = 17
    s_kv: int = 17
    d: int = 16
    d_v: int | None = None  # default: d
    align: object = TL
    left: int | None = None
    right: int | None = None
    lens: tuple | None = None  # (seq_len_q per batch, seq_len_kv per batch)
    bias: str | None = None  # "bh", "1h", "b1", "11": the bias's first two dims
    scale: float | None = 0.25
    layout: str = "bhsd"  # or "bshd": q/k/v stored [B, S, H, D]
    dtype: torch.dtype = torch.float32
    p: float | None = None  # dropout probability
    alibi: bool = False  # use_alibi_mask
    paged: int | None = None  # K / V in paged caches of this block size (forward only)
    packed_tables: bool = False  # paged: page tables packed by ragged offsets
    sink: bool = False  # an attention sink per head (sink_token; dSink_token backward)
    score_stats: bool = False  # the forward also writes score_max and score_sum_exp
    block_mask: bool = False  # a random uint8 block mask (a bit per 128 x 128 tile)
    ragged: bool = False  # Q, K, V, O (and the gradients) packed THD by the lengths
    ragged_stats: bool = False  # ragged: Stats too (cudnn-frontend's v2 tests pack it)

    @property
    def hv(self) -> int:
        return self.h_k if self.h_v is None else self.h_v

    @property
    def dv(self) -> int:
        return self.d if self.d_v is None else self.d_v


CASES = [
    Case("plain", h_k=4),
    Case("causal_tl", right=0),
    Case("causal_tl_rect", s_q=5, right=0),
    Case("causal_br", s_q=5, align=BR, right=0),
    Case("causal_br_sq_gt_skv", s_q=17, s_kv=5, align=BR, right=0),
    Case("band_tl", left=4, right=2),
    Case("band_br", s_q=9, s_kv=20, align=BR, left=3, right=1),
    Case("window_only", left=5),
    Case("empty_band", s_q=5, s_kv=7, left=0, right=0),
    Case("padding", lens=((17, 9), (12, 17))),
    Case("padding_br_causal", lens=((3, 17), (10, 0)), align=BR, right=0),
    Case("padding_br_band", lens=((5, 12), (9, 16)), align=BR, left=4, right=0),
    Case("padding_tl_causal_rect", s_q=6, s_kv=11, lens=((6, 2), (4, 11)), right=0),
    Case("gqa", h_q=6, h_k=2, right=0),
    Case("mqa", h_q=4, h_k=1),
    Case("kv_heads_differ", h_q=4, h_k=2, h_v=1),
    Case("bias_bh", bias="bh", right=0),
    Case("bias_1h", bias="1h"),
    Case("bias_b1", bias="b1", left=3),
    Case("bias_11", bias="11", lens=((9, 17), (17, 5))),
    Case("s1", b=1, s_q=1, s_kv=1),
    Case("decode_br", s_q=1, s_kv=100, align=BR, right=0, d=8),
    Case("s100_causal", b=1, h_q=2, s_q=100, s_kv=100, right=0, d=8),
    Case("d8", d=8, s_q=3, s_kv=9),
    Case("d24_dv40", d=24, d_v=40, right=0),
    Case("d128_dv64", b=1, h_q=2, d=128, d_v=64, s_q=5, s_kv=7),
    Case("d256", b=1, h_q=2, h_k=1, d=256, s_q=3, s_kv=5),
    Case("bshd", layout="bshd", h_q=6, h_k=3, right=0, bias="1h"),
    Case("bshd_padding", layout="bshd", lens=((4, 17), (17, 8)), align=BR, right=0),
    Case("no_scale", scale=None, s_q=7, s_kv=9),
    Case("neg_scale", scale=-0.3, s_q=33, s_kv=70),  # Q negated, |c| folded
    Case("zero_scale_causal", scale=0.0, s_q=20, s_kv=37, right=0),
    Case("fp16", dtype=torch.float16, right=0),
    Case("bf16", dtype=torch.bfloat16, s_q=9, s_kv=13, align=BR, right=0, bias="1h"),
    Case("window_only_br", h_q=6, h_k=2, s_q=9, s_kv=140, align=BR, left=33),
    Case("window_only_tl_rows_past_keys", s_q=30, s_kv=7, left=2),
    Case("alibi", h_q=6, h_k=3, right=0, alibi=True),  # 6 heads: 4 slopes + 2 more
    Case("alibi_padding_br", lens=((17, 9), (12, 17)), align=BR, right=0, alibi=True),
    Case("alibi_bias_rect", s_q=9, s_kv=13, bias="1h", alibi=True),
]

# ragged (packed variable-length, THD) tensors: Q, K, V, O and the gradients
RAGGED = [
    Case("ragged", lens=((17, 9), (12, 17)), ragged=True),
    Case(
        "ragged_gqa_causal_br",
        h_q=6,
        h_k=2,
        lens=((5, 17), (9, 17)),
        align=BR,
        right=0,
        ragged=True,
    ),
    Case(
        "ragged_rect_band",
        s_q=9,
        s_kv=20,
        lens=((9, 1), (20, 7)),
        left=3,
        right=1,
        ragged=True,
        bias="1h",
    ),
    Case("ragged_stats", lens=((17, 5), (11, 17)), right=0, ragged=True, ragged_stats=True),
]

# attention sinks and the score statistics outputs
SINK = [
    Case("sink", sink=True, score_stats=True),
    Case("sink_padding_band", sink=True, lens=((17, 9), (12, 17)), left=4, right=1),
    Case("sink_gqa_causal_bias", h_q=6, h_k=2, sink=True, right=0, bias="1h", score_stats=True),
    Case("scores_only_padding_br", lens=((5, 17), (9, 3)), align=BR, right=0, score_stats=True),
]

# block masks (forward only): tiles of 128 x 128, so sequences past 128
BLOCK = [
    Case("block_mask", b=1, h_q=2, h_k=1, s_q=150, s_kv=300, d=16, block_mask=True),
    Case(
        "block_mask_padding_causal",
        b=2,
        h_q=2,
        h_k=2,
        s_q=260,
        s_kv=260,
        d=8,
        lens=((260, 131), (200, 260)),
        right=0,
        block_mask=True,
    ),
]

# paged K / V caches (forward only): block sizes below, at and above the kernels' tiles
PAGED = [
    Case("paged_b4", paged=4, s_q=9, s_kv=23),
    Case("paged_b16_gqa_causal", paged=16, h_q=6, h_k=2, s_q=40, s_kv=40, right=0),
    Case(
        "paged_b32_padding_br", paged=32, s_q=7, s_kv=50, lens=((7, 3), (50, 17)), align=BR, right=0
    ),
    Case("paged_b8_bias_alibi", paged=8, s_q=5, s_kv=12, bias="1h", alibi=True),
    Case(
        "paged_b8_packed_tables",
        paged=8,
        s_q=6,
        s_kv=30,
        lens=((6, 2), (9, 30)),
        packed_tables=True,
    ),
]


def _stored(t: torch.Tensor, layout: str) -> torch.Tensor:
    """``t`` [B, H, S, D] as a view of [B, S, H, D] memory when layout is "bshd"."""
    return t.transpose(1, 2).contiguous().transpose(1, 2) if layout == "bshd" else t


def inputs(rng, c: Case) -> dict:
    """q, k, v (maybe BSHD-strided), bias, seq_len_q / seq_len_kv (int32 [B, 1, 1, 1])."""
    out = {
        "q": rng.rand((c.b, c.h_q, c.s_q, c.d), c.dtype),
        "k": rng.rand((c.b, c.h_k, c.s_kv, c.d), c.dtype),
        "v": rng.rand((c.b, c.hv, c.s_kv, c.dv), c.dtype),
    }
    out = {n: _stored(t, c.layout) for n, t in out.items()}
    if c.bias:
        out["bias"] = rng.rand(
            (c.b if c.bias[0] == "b" else 1, c.h_q if c.bias[1] == "h" else 1, c.s_q, c.s_kv),
            c.dtype,
        )
    if c.lens:
        for name, vals in zip(("seq_len_q", "seq_len_kv"), c.lens):
            out[name] = torch.tensor(vals, dtype=torch.int32).reshape(c.b, 1, 1, 1)
    if c.sink:
        out["sink"] = rng.rand((1, c.h_q, 1, 1)) - 1.0  # float32, either sign
    if c.block_mask:
        tiles = (-(-c.s_q // 128), -(-(-(-c.s_kv // 128)) // 8))
        out["block_mask"] = torch.randint(0, 256, (c.b, c.h_q) + tiles, generator=rng.gen).to(
            torch.uint8
        )
    return out


def block_keep(mask: torch.Tensor, s_q: int, s_kv: int) -> torch.Tensor:
    """keep [B, H, s_q, s_kv] of a uint8 block mask, expanded as cudnn-frontend's
    reference does: the bits of each byte, least significant first, one per 128 x 128
    tile, cut to the lengths."""
    bits = (mask.long()[..., None] & (1 << torch.arange(8))) != 0
    tiles = bits.reshape(mask.shape[:3] + (mask.shape[3] * 8,))
    full = tiles.repeat_interleave(128, 2).repeat_interleave(128, 3)
    return full[:, :, :s_q, :s_kv]


def expected_keep(c: Case) -> torch.Tensor:
    """keep [B, 1, Sq, Skv] (bool) from the documented rules (see the module docstring)."""
    rows = torch.arange(c.s_q).reshape(-1, 1)
    cols = torch.arange(c.s_kv).reshape(1, -1)
    out = torch.ones(c.b, 1, c.s_q, c.s_kv, dtype=torch.bool)
    for b in range(c.b):
        lq, lkv = (c.lens[0][b], c.lens[1][b]) if c.lens else (c.s_q, c.s_kv)
        keep = (rows < lq) & (cols < lkv)
        shift = lkv - lq if c.align == BR else 0
        if c.right is not None:
            keep &= ~(cols > rows + shift + c.right)
        if c.left is not None:
            keep &= ~(cols <= rows + shift - c.left)
        out[b, 0] = keep
    return out


def dropout_mask(seed: int, offset: int, p: float, shape) -> torch.Tensor:
    """1.0 / 0.0 [B, Hq, Sq, Skv] from the Philox stream at row-major indices."""
    u = dropout_ref.uniform_at(seed, offset, np.arange(math.prod(shape), dtype=np.int64))
    return torch.from_numpy((u >= np.float32(p)).astype(np.float64)).reshape(shape)


def alibi_bias(h_q: int, s_q: int, s_kv: int) -> torch.Tensor:
    """ALiBi's term [1, h_q, s_q, s_kv] in float64 as cudnn-frontend's test reference
    writes it: slopes m_0^(1..n) with m_0 = 2^(-8 / n), n the largest power of two <= h_q,
    then (h_q not a power of two) 2^(-4 / n) to the odd powers 1, 3, ...; times the
    distance column - row."""
    n = 2 ** math.floor(math.log2(h_q))
    m = torch.pow(torch.tensor(2.0 ** (-8.0 / n), dtype=torch.float64), torch.arange(1, 1 + n))
    if n < h_q:
        m_hat = torch.pow(
            torch.tensor(2.0 ** (-4.0 / n), dtype=torch.float64),
            torch.arange(1, 1 + 2 * (h_q - n), 2),
        )
        m = torch.cat([m, m_hat])
    dist = torch.arange(s_kv, dtype=torch.float64) - torch.arange(s_q, dtype=torch.float64)[:, None]
    return m.view(1, -1, 1, 1) * dist


def total_bias(c: Case, y: dict):
    """The additive score term of case ``c`` over float64 inputs ``y``: its bias (None
    without), plus ALiBi's with ``c.alibi``."""
    bias = y.get("bias")
    if not c.alibi:
        return bias
    a = alibi_bias(c.h_q, c.s_q, c.s_kv)
    return a if bias is None else bias + a


def _torch_scores(q, k, v, scale, bias):
    """(scale q k^T + bias [B, Hq, Sq, Skv], v with its heads repeated to Hq)."""
    h_q = q.shape[1]
    kk = k.repeat_interleave(h_q // k.shape[1], 1)
    s = scale * (q @ kk.transpose(-1, -2))
    return (s if bias is None else s + bias), v.repeat_interleave(h_q // v.shape[1], 1)


def torch_sdpa(q, k, v, keep, scale, bias=None, drop=None, p=0.0):
    """(O, Stats) in float64 with autograd: softmax(scale q k^T + bias, masked) with
    dropout, k / v heads repeated; rows without a kept key give O = 0, Stats = -inf
    (and zero gradients: they never reach the softmax)."""
    s, vv = _torch_scores(q, k, v, scale, bias)
    keep = keep.expand(s.shape)
    live = keep.any(-1, keepdim=True)
    s = torch.where(live, s.masked_fill(~keep, -math.inf), torch.zeros_like(s))
    lse = torch.logsumexp(s, -1, keepdim=True)
    prob = torch.where(live, torch.exp(s - lse), torch.zeros_like(s))
    if drop is not None:
        prob = prob * drop / (1.0 - p)
    return prob @ vv, torch.where(live, lse, torch.full_like(lse, -math.inf))


def torch_sdpa_sink(q, k, v, keep, scale, sink, bias=None, rows=None):
    """(O, Stats, score max, score sum-exp) in float64 with autograd (sink included) as
    cudnn-frontend's reference writes them: the sink [1, H, 1, 1] a logit joining each
    row's softmax without a value; ``rows`` [B, 1, Sq, 1]: the rows that exist (others:
    O = 0, Stats = -inf, max -inf, sum 0)."""
    s, vv = _torch_scores(q, k, v, scale, bias)
    s = s.masked_fill(~keep.expand(s.shape), -math.inf)
    m = torch.maximum(s.amax(-1, keepdim=True), sink.expand(s.shape[:3] + (1,)))
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # no key, no sink
    e = torch.exp(s - m_safe)
    total = e.sum(-1, keepdim=True) + torch.exp(sink - m_safe)
    prob = torch.where(total > 0, e / torch.where(total > 0, total, 1.0), 0.0)
    o, lse = prob @ vv, m_safe + torch.log(total)
    if rows is not None:
        r = rows.expand(lse.shape)
        o = torch.where(r, o, torch.zeros_like(o))
        lse = torch.where(r, lse, torch.full_like(lse, -math.inf))
        m = torch.where(r, m, torch.full_like(m, -math.inf))
        total = torch.where(r, total, torch.zeros_like(total))
    return o, lse, m, total


def torch_math_sdpa(q, k, v, keep, scale, bias=None):
    """O from torch.nn.functional.scaled_dot_product_attention (float64 math path, an
    explicit additive mask); rows without a kept key are set to 0 (PyTorch gives NaN)."""
    mask = torch.zeros(keep.shape, dtype=torch.float64).masked_fill(~keep, -math.inf)
    if bias is not None:
        mask = mask + bias
    gqa = k.shape[1] == v.shape[1]
    if not gqa:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], 1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], 1)
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)
    live = keep.expand(q.shape[0], q.shape[1], -1, -1).any(-1, keepdim=True)
    return torch.where(live, o, torch.zeros_like(o))


def _tensors(g, c: Case, x: dict) -> dict:
    names = ("q", "k", "v", "bias", "sink", "block_mask")
    t = {n: graph_tensor(g, x[n]).set_name(n) for n in names if n in x}
    for n in ("seq_len_q", "seq_len_kv"):
        if n in x:
            t[n] = g.tensor(list(x[n].shape), list(x[n].stride()), cudnn.data_type.INT32, name=n)
    return t


def _rng(g, v, name: str, feeds: dict):
    """A seed / offset: a Python int (pass-by-value) or a one-element int64 tensor (a
    graph tensor fed from the variant pack, as cudnn-frontend's samples pass them)."""
    if isinstance(v, int):
        return v
    t = g.tensor(list(v.shape), list(v.stride()), cudnn.data_type.INT64, name=name)
    feeds[t] = v
    return t


def _kwargs(c: Case, t: dict, seed, offset) -> dict:
    kw = dict(
        attn_scale=c.scale,
        bias=t.get("bias"),
        diagonal_alignment=c.align,
        diagonal_band_left_bound=c.left,
        diagonal_band_right_bound=c.right,
    )
    if c.alibi:
        kw["use_alibi_mask"] = True
    if c.sink:
        kw["sink_token"] = t["sink"]
    if c.block_mask:
        kw["block_mask"] = t["block_mask"]
    if c.lens:
        kw.update(use_padding_mask=True, seq_len_q=t["seq_len_q"], seq_len_kv=t["seq_len_kv"])
    if c.p is not None:
        kw["dropout"] = (c.p, seed, offset)
    return kw


def _dump(g, c: Case, feeds: dict, rng_dump: bool) -> dict:
    """{"rng_dump": a NaN-filled float32 [B, Hq, Sq, Skv] graph tensor} when asked."""
    if not rng_dump:
        return {}
    buf = torch.full((c.b, c.h_q, c.s_q, c.s_kv), float("nan"))
    t = g.tensor_like(buf, name="rng_dump")
    feeds[t] = buf
    return {"rng_dump": t}


def ragged_pack(t: torch.Tensor, lens) -> tuple:
    """(view, offsets): ``t`` [B, H, S, D] packed THD -- batch b's first lens[b] rows of
    (H, D) elements, one batch after another -- in a NaN-filled buffer of the full B S H D
    elements (rows past a batch's length are not the batch's: the next batch's follow),
    seen through the BSHD strides cuDNN's THD descriptors use; offsets [B + 1, 1, 1, 1]
    int64 in elements."""
    b, h, s, d = t.shape
    buf = torch.full((b * s * h * d,), float("nan"), dtype=t.dtype)
    starts = [0]
    for i, n in enumerate(lens):
        rows = t[i, :, :n].transpose(0, 1).reshape(-1)  # [n, H, D] row-major
        buf[starts[-1] : starts[-1] + rows.numel()] = rows
        starts.append(starts[-1] + rows.numel())
    view = buf.as_strided((b, h, s, d), (s * h * d, d, h * d, 1))
    return view, torch.tensor(starts, dtype=torch.int64).reshape(b + 1, 1, 1, 1)


def ragged_unpack(view: torch.Tensor, offsets: torch.Tensor, lens) -> torch.Tensor:
    """The logical [B, H, S, D] of a packed THD buffer; rows past a batch's length 0."""
    b, h, s, d = view.shape
    flat = view.as_strided((view.untyped_storage().nbytes() // view.element_size(),), (1,), 0)
    out = torch.zeros(view.shape, dtype=view.dtype)
    for i, n in enumerate(lens):
        o = int(offsets.reshape(-1)[i])
        out[i, :, :n] = flat[o : o + n * h * d].reshape(n, h, d).transpose(0, 1).cpu()
    return out


def thd_offsets(lens, h: int, d: int, device="cpu") -> torch.Tensor:
    """[B + 1, 1, 1, 1] int64: where each batch's rows begin in a THD buffer (elements)."""
    starts = [0]
    for n in lens:
        starts.append(starts[-1] + n * h * d)
    return torch.tensor(starts, dtype=torch.int64, device=device).reshape(-1, 1, 1, 1)


def _ragged_side(c: Case, role: str) -> tuple:
    """(lengths, heads, head dim) of tensor ``role`` of a ragged case."""
    lq, lkv = c.lens
    return {
        "q": (lq, c.h_q, c.d),
        "o": (lq, c.h_q, c.dv),
        "do": (lq, c.h_q, c.dv),
        "dq": (lq, c.h_q, c.d),
        "k": (lkv, c.h_k, c.d),
        "dk": (lkv, c.h_k, c.d),
        "v": (lkv, c.hv, c.dv),
        "dv": (lkv, c.hv, c.dv),
        "stats": (lq, c.h_q, 1),
    }[role]


def ragged_inputs(c: Case, x: dict) -> dict:
    """``x`` with q, k, v (and o, do when there) packed THD (ragged_pack)."""
    x = dict(x)
    for n in ("q", "k", "v", "o", "do", "stats"):
        if n in x:
            x[n] = ragged_pack(x[n].cpu(), _ragged_side(c, n)[0])[0].to(x[n].device)
    return x


def _set_ragged(g, c: Case, t, role: str, feeds: dict, output: bool = False) -> None:
    """Gives graph tensor ``t`` (``role``) its THD offsets (fed), and outputs their THD
    dims and strides."""
    lens, h, d = _ragged_side(c, role)
    s = c.s_q if role in ("q", "o", "do", "dq", "stats") else c.s_kv
    if output:
        t.set_dim([c.b, h, s, d]).set_stride([s * h * d, d, h * d, 1])
    off = thd_offsets(lens, h, d, device=next(iter(feeds.values())).device)
    ot = g.tensor_like(off, name=f"{role}_offsets")
    feeds[ot] = off
    t.set_ragged_offset(ot)


def pack_tables(table: torch.Tensor, lens, block: int) -> tuple:
    """(packed, offsets) of page table ``table`` [B, 1, pages, 1]: batch b's first
    ceil(lens[b] / block) entries back to back (cudnn-frontend's packed page tables), the
    rest of the [B, 1, pages, 1] buffer an out-of-range block index (never to be read);
    offsets [B + 1, 1, 1, 1] int64 in entries."""
    b, _, pages, _ = table.shape
    flat = torch.full((b * pages,), 2**30, dtype=torch.int32)
    starts = [0]
    for i, n in enumerate(lens):
        used = -(-n // block)
        flat[starts[-1] : starts[-1] + used] = table[i, 0, :used, 0]
        starts.append(starts[-1] + used)
    packed = flat.as_strided((b, 1, pages, 1), (pages, 1, 1, 1))
    return packed, torch.tensor(starts, dtype=torch.int64).reshape(b + 1, 1, 1, 1)


def paged_cache(t: torch.Tensor, block: int, gen: torch.Generator):
    """(container [blocks, H, block, D], table [B, 1, pages, 1] int32) holding ``t`` [B, H,
    S, D]: its pages in a shuffled order among as many spare blocks, the tail of the last
    page NaN (no key there is read), the table strided as cudnn-frontend's tests make it
    (pages outermost)."""
    b, h, s, d = t.shape
    pages = -(-s // block)
    padded = torch.full((b, h, pages * block, d), float("nan"), dtype=t.dtype)
    padded[:, :, :s] = t
    blocks = torch.randperm(2 * b * pages, generator=gen)[: b * pages].reshape(b, pages)
    container = torch.full((2 * b * pages, h, block, d), float("nan"), dtype=t.dtype)
    for i in range(b):
        for j in range(pages):
            container[blocks[i, j]] = padded[i, :, j * block : (j + 1) * block]
    table = torch.empty((pages, 1, b, 1), dtype=torch.int32).transpose(0, 2)
    table.copy_(blocks.reshape(b, 1, pages, 1))
    return container, table


def forward_graph(c: Case, x: dict, generate_stats=True, seed=1234, offset=0, rng_dump=False):
    """(graph, feeds, [O, Stats or None] (+ [RNG_DUMP])) of an sdpa node over ``x`` (from
    inputs)."""
    g = cudnn.pygraph()
    if c.ragged:
        x = ragged_inputs(c, x)
    t = _tensors(g, c, x)
    feeds = {t[n]: x[n] for n in t}
    seed, offset = _rng(g, seed, "seed", feeds), _rng(g, offset, "offset", feeds)
    dump = _dump(g, c, feeds, rng_dump)
    for n in ("q", "k", "v") if c.ragged else ():
        _set_ragged(g, c, t[n], n, feeds)
    if c.paged:  # K / V through paged caches holding x["k"] / x["v"]
        gen = torch.Generator().manual_seed(c.s_kv)
        for n in ("k", "v"):
            del feeds[t[n]]
            cont, table = paged_cache(x[n].cpu(), c.paged, gen)
            if c.packed_tables:  # each batch's used pages back to back, by ragged offsets
                table, toff = pack_tables(table, c.lens[1], c.paged)
            cont, table = cont.to(x[n].device), table.to(x[n].device)
            t[n], t[f"{n}_table"] = g.tensor_like(cont, name=n), g.tensor_like(table, name=f"{n}_t")
            feeds.update({t[n]: cont, t[f"{n}_table"]: table})
            if c.packed_tables:
                ot = g.tensor_like(toff, name=f"{n}_table_offsets")
                feeds[ot] = toff.to(x[n].device)
                t[f"{n}_table"].set_ragged_offset(ot)
        dump.update(
            paged_attention_k_table=t["k_table"],
            paged_attention_v_table=t["v_table"],
            paged_attention_max_seq_len_kv=c.s_kv,
        )
    scores = []
    if c.score_stats:  # tensors the caller makes, as with cuDNN
        scores = [
            g.tensor([c.b, c.h_q, c.s_q, 1], None, cudnn.data_type.FLOAT, name=n)
            for n in ("score_max", "score_sum_exp")
        ]
        dump.update(score_max=scores[0], score_sum_exp=scores[1])
    o, st = g.sdpa(
        t["q"],
        t["k"],
        t["v"],
        generate_stats=generate_stats,
        name="sdpa",
        **_kwargs(c, t, seed, offset),
        **dump,
    )
    o.set_output(True)
    if c.ragged:
        _set_ragged(g, c, o, "o", feeds, output=True)
    if st is not None:
        st.set_output(True)
        if c.ragged_stats:
            _set_ragged(g, c, st, "stats", feeds, output=True)
    return g, feeds, [o, st] + scores + ([dump["rng_dump"]] if "rng_dump" in dump else [])


def backward_graph(
    c: Case,
    x: dict,
    o,
    stats,
    do,
    with_dbias=False,
    seed=1234,
    offset=0,
    deterministic=False,
    rng_dump=False,
):
    """(graph, feeds, [dQ, dK, dV] + [dBias] + [RNG_DUMP]) of an sdpa_backward node."""
    g = cudnn.pygraph()
    if c.ragged:  # o (and Stats) come packed from the forward; q, k, v and do here
        x = ragged_inputs(c, {**x, "do": do})
        do = x.pop("do")
    t = _tensors(g, c, x)
    feeds = {t[n]: x[n] for n in t}
    seed, offset = _rng(g, seed, "seed", feeds), _rng(g, offset, "offset", feeds)
    to, tdo = graph_tensor(g, o).set_name("o"), graph_tensor(g, do).set_name("dO")
    tst = g.tensor(list(stats.shape), list(stats.stride()), cudnn.data_type.FLOAT, name="stats")
    for n, tt in (("q", t["q"]), ("k", t["k"]), ("v", t["v"]), ("o", to), ("do", tdo)):
        if c.ragged:
            _set_ragged(g, c, tt, n, feeds)
    if c.ragged_stats:
        _set_ragged(g, c, tst, "stats", feeds)
    dbias = g.tensor(name="dBias", data_type=TORCH_TO_DT[c.dtype]) if with_dbias else None
    dump = _dump(g, c, feeds, rng_dump)
    dsink = []
    if c.sink:
        dsink = [g.tensor([1, c.h_q, 1, 1], None, cudnn.data_type.FLOAT, name="dSink")]
        dump["dSink_token"] = dsink[0]
    grads = g.sdpa_backward(
        t["q"],
        t["k"],
        t["v"],
        to,
        tdo,
        tst,
        dBias=dbias,
        name="sdpa_backward",
        use_deterministic_algorithm=deterministic,
        **_kwargs(c, t, seed, offset),
        **dump,
    )
    for n, tt in zip(("dq", "dk", "dv"), grads):
        if c.ragged:
            _set_ragged(g, c, tt, n, feeds, output=True)
    outs = grads + ([dbias] if with_dbias else []) + dsink
    outs += [dump["rng_dump"]] if "rng_dump" in dump else []
    for o_ in outs:
        o_.set_output(True)
    feeds.update({to: o, tdo: do, tst: stats})
    return g, feeds, outs
