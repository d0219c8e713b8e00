"""Scaled-dot-product attention, forward and backward: the float64 reference.

Shapes: q [B, Hq, Sq, Dqk], k [B, Hk, Skv, Dqk], v [B, Hv, Skv, Dv], with Hk and Hv
dividing Hq (grouped-query / multi-query attention: q head h reads k head
h // (Hq / Hk) and v head h // (Hq / Hv), i.e. k and v heads repeated in place);
bias broadcastable as [B or 1, Hq or 1, Sq, Skv]. Forward, per (b, h):

    S = scale * q k^T + bias (+ alibi)                              [Sq, Skv]
    S[i, j] = -inf where keep(b)[i, j] is False                     (the mask below)
    Stats_i = m_i + log(sum_j exp(S_ij - m_i)),  m_i = max_j S_ij   (natural log)
    P = exp(S - Stats)                                              (softmax of S)
    O = (P * M / (1 - p)) v                                         (dropout on P)

ALiBi (``use_alibi_mask``) adds slope_h (j - i) to S_ij, row i a query and column j a
key, whatever the alignment: with n = 2^floor(log2 Hq) the slopes of heads h < n are
2^(-8 (h + 1) / n), those of the remaining heads (Hq not a power of two)
2^(-4 (2 (h - n) + 1) / n) (Press et al.; cuDNN's and cudnn-frontend's reference's).

An attention sink (``sink_token``, one logit per head) joins each row's softmax without a
value: Stats_i = log(sum_j exp(S_ij) + exp(sink_h)), P = exp(S - Stats) (its weights sum
to less than one), and dSink_h = -sum_{b, i} exp(sink_h - Stats_bi) delta_bi.

A block mask (``block_mask``, uint8 [B, Hq, ceil(Sq / 128), ceil(ceil(Skv / 128) / 8)])
keeps key tile j of query tile i (128 x 128 tiles) when bit j % 8 of byte [i, j // 8]
is set; it joins keep(b) per head.

Stats is the logsumexp of the scaled, biased, masked scores -- before dropout, which
the backward needs to rebuild P. A row with no kept key (a padded query row, a band
that excludes every key) has Stats = -inf and O = 0: what cuDNN's kernels write for
padded rows (its own reference divides by max(l, 1); its kernels store LSE = -inf),
rather than the NaN of softmax over nothing. Its gradients are 0.

The mask keep(b) [Sq, Skv] (heads share it), with row i (query) and column j (key):

    shift  = 0 (TOP_LEFT) or Lkv - Lq (BOTTOM_RIGHT: the last query row meets the
             last key column), where Lq, Lkv are batch b's actual lengths
             seq_len_q[b], seq_len_kv[b] with the padding mask, else Sq, Skv
    right bound R:  keep j <= i + shift + R      (cuDNN: "masks columns beyond
                                                  row_idx + right_bound"; R = 0: causal)
    left bound L:   keep j >  i + shift - L      (cuDNN: "masks columns at or before
                                                  row_idx - left_bound": a window of
                                                  L keys ending at the diagonal)
    padding:        keep i < Lq and j < Lkv

Dropout with the caller's mask (``dropout=(mask, scale)``): M = [mask != 0] and the kept
elements' factor is ``scale`` instead of 1 / (1 - p).

Dropout: element (b, h, i, j) has the row-major index n = ((b Hq + h) Sq + i) Skv + j
over [B, Hq, Sq, Skv] (the maximum lengths, padding or not) and the uniform
u_n = ops.dropout.uniform_at(seed, offset, n): word n mod 4 of Philox-4x32-10 of
(seed, offset + n // 4). M_n = [u_n >= p] (float32 compare). The Triton kernels
generate exactly this stream, forward and backward, so the backward sees the
forward's mask without storing it.

Backward (FlashAttention-2's, from the forward's O and Stats), per (b, h):

    P   = exp(S - Stats) on kept entries, 0 elsewhere (and on rows with Stats = -inf)
    dP  = (dO v^T) * M / (1 - p)
    D_i = sum_d dO_id O_id                    (= sum_j P_ij dP_ij)
    dS  = P * (dP - D)
    dBias = dS summed over the axes the bias broadcasts over
    dQ  = scale * dS k,   dK = scale * dS^T q,   dV = (P * M / (1 - p))^T dO
    (dK, dV summed over the q heads that share a k / v head)
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..enums import DiagonalAlignment
from . import dropout as _dropout


@dataclasses.dataclass(frozen=True)
class Masking:
    """What decides keep(b): the diagonal alignment, the band bounds (None: unbounded)
    and whether per-batch sequence lengths apply (the padding mask)."""

    alignment: DiagonalAlignment = DiagonalAlignment.TOP_LEFT
    left_bound: int | None = None
    right_bound: int | None = None
    padding: bool = False


def score_mask(
    masking: Masking, s_q: int, s_kv: int, len_q: int | None = None, len_kv: int | None = None
) -> np.ndarray:
    """keep(b) [s_q, s_kv] (bool) of one batch entry whose actual lengths are
    ``len_q`` / ``len_kv`` (used with ``masking.padding``; default: s_q, s_kv)."""
    lq = s_q if len_q is None or not masking.padding else int(len_q)
    lkv = s_kv if len_kv is None or not masking.padding else int(len_kv)
    i = np.arange(s_q, dtype=np.int64)[:, None]
    j = np.arange(s_kv, dtype=np.int64)[None, :]
    keep = np.ones((s_q, s_kv), dtype=bool)
    if masking.padding:
        keep &= (i < lq) & (j < lkv)
    shift = lkv - lq if masking.alignment == DiagonalAlignment.BOTTOM_RIGHT else 0
    if masking.right_bound is not None:
        keep &= j <= i + shift + masking.right_bound
    if masking.left_bound is not None:
        keep &= j > i + shift - masking.left_bound
    return keep


def batch_mask(
    masking: Masking, batch: int, s_q: int, s_kv: int, seq_len_q=None, seq_len_kv=None
) -> np.ndarray:
    """keep [batch, 1, s_q, s_kv] (bool); ``seq_len_q`` / ``seq_len_kv``: per-batch
    lengths (any shape with ``batch`` elements), needed with the padding mask."""
    lq = [None] * batch if seq_len_q is None else np.asarray(seq_len_q).reshape(-1)
    lkv = [None] * batch if seq_len_kv is None else np.asarray(seq_len_kv).reshape(-1)
    out = np.empty((batch, 1, s_q, s_kv), dtype=bool)
    for b in range(batch):
        out[b, 0] = score_mask(masking, s_q, s_kv, lq[b], lkv[b])
    return out


def dropout_keep(seed: int, offset: int, p: float, shape) -> np.ndarray:
    """M [B, Hq, Sq, Skv]: 1.0 where the element is kept, 0.0 where dropped (the
    row-major Philox stream of ops.dropout)."""
    return _dropout.mask(seed, offset, tuple(shape), p)


def paged_gather(container: np.ndarray, table: np.ndarray, s_kv: int) -> np.ndarray:
    """Logical K or V [B, H, s_kv, D] from a paged cache: ``container`` [blocks, H,
    block_size, D] and ``table`` [B, 1, pages, 1] of block indices; key j of batch b is
    row j % block_size of block table[b, 0, j // block_size, 0]."""
    bs = container.shape[2]
    j = np.arange(s_kv)
    blocks = np.asarray(table)[:, 0, j // bs, 0].astype(np.int64)  # [B, s_kv]
    return np.transpose(container[blocks, :, (j % bs)[None, :], :], (0, 2, 1, 3))


BLOCK_MASK_TILE = 128  # a block mask's bit covers 128 queries x 128 keys


def block_keep(mask: np.ndarray, s_q: int, s_kv: int) -> np.ndarray:
    """keep [B, Hq, s_q, s_kv] (bool) of a block mask [B, Hq, ceil(s_q / 128),
    ceil(ceil(s_kv / 128) / 8)] of bytes: key tile j of query tile i is kept when bit
    j % 8 (least significant first) of byte [i, j // 8] is set."""
    m = np.asarray(mask).astype(np.uint8)
    bits = (m[..., None] >> np.arange(8, dtype=np.uint8)) & 1  # [..., bytes, 8]
    tiles = bits.reshape(m.shape[:3] + (m.shape[3] * 8,)).astype(bool)
    rows = np.arange(s_q) // BLOCK_MASK_TILE
    cols = np.arange(s_kv) // BLOCK_MASK_TILE
    return tiles[:, :, rows][:, :, :, cols]


def alibi_slopes(h_q: int) -> np.ndarray:
    """The ALiBi slope of each of ``h_q`` heads [h_q] (float64)."""
    n = 1 << (int(h_q).bit_length() - 1)  # the largest power of two <= h_q
    h = np.arange(h_q, dtype=np.float64)
    return np.where(h < n, 2.0 ** (-8.0 * (h + 1) / n), 2.0 ** (-4.0 * (2 * (h - n) + 1) / n))


def alibi_bias(h_q: int, s_q: int, s_kv: int) -> np.ndarray:
    """The ALiBi term [1, h_q, s_q, s_kv]: slope_h (j - i)."""
    dist = np.arange(s_kv, dtype=np.float64)[None, :] - np.arange(s_q, dtype=np.float64)[:, None]
    return alibi_slopes(h_q)[None, :, None, None] * dist[None, None]


def _repeat_heads(x: np.ndarray, h_q: int) -> np.ndarray:
    """[B, H, S, D] -> [B, Hq, S, D]: each head repeated Hq / H times in place."""
    return np.repeat(x, h_q // x.shape[1], axis=1) if x.shape[1] != h_q else x


def _sum_groups(x: np.ndarray, h: int) -> np.ndarray:
    """[B, Hq, S, D] -> [B, h, S, D]: the sum over each group of Hq / h heads."""
    b, h_q, s, d = x.shape
    return x.reshape(b, h, h_q // h, s, d).sum(axis=2) if h != h_q else x


def scores(q, k, scale: float = 1.0, bias=None) -> np.ndarray:
    """scale q k^T (+ bias) [B, Hq, Sq, Skv], k's heads repeated: what a score_mod
    subgraph receives."""
    return _scores(q, k, None, scale, bias)


def _scores(q, k, keep, scale, bias) -> np.ndarray:
    """S [B, Hq, Sq, Skv] with masked entries at -inf."""
    s = scale * np.matmul(q, np.swapaxes(_repeat_heads(k, q.shape[1]), -1, -2))
    if bias is not None:
        s = s + bias
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    return s


def forward(q, k, v, keep=None, scale: float = 1.0, bias=None, drop=None, p: float = 0.0) -> tuple:
    """(O [B, Hq, Sq, Dv], Stats [B, Hq, Sq, 1]) in float64. ``keep``: bool,
    broadcastable to [B, Hq, Sq, Skv] (None: everything kept); ``drop``: the dropout
    keep mask M [B, Hq, Sq, Skv] (None: no dropout) with probability ``p``."""
    return forward_full(q, k, v, keep, scale, bias, drop, p)[:2]


def forward_full(
    q,
    k,
    v,
    keep=None,
    scale=1.0,
    bias=None,
    drop=None,
    p=0.0,
    sink=None,
    rows=None,
    scores=None,
    drop_scale=None,
) -> tuple:
    """(O, Stats, score max, score sum-exp) in float64; the last two [B, Hq, Sq, 1]:
    m_i = max_j S_ij and sum_j exp(S_ij - m_i). ``sink`` [1, Hq, 1, 1]: a per-head logit
    that joins each row's softmax without a value (an attention sink): m_i is the larger of
    it and the scores, the sum and Stats include exp(sink - m_i), O's weights do not (a row
    with no kept key has O = 0 and Stats = sink). ``rows`` [B, 1, Sq, 1] (bool): the rows
    that exist (the padding mask's i < seq_len_q); the others get O = 0, Stats = -inf,
    max -inf, sum 0 whatever the sink (None: every row). ``scores``: S given (a score_mod
    subgraph's result), masked here, instead of scale q k^T + bias. ``drop_scale``: the
    kept elements' factor (a caller's dropout mask), else 1 / (1 - p)."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if scores is None:
            s = _scores(q, k, keep, scale, bias)
        else:
            s = (
                np.broadcast_to(scores, scores.shape)
                if keep is None
                else np.where(keep, scores, -np.inf)
            )
        m = s.max(axis=-1, keepdims=True, initial=-np.inf)
        if sink is not None:
            m = np.maximum(m, sink)
        m_safe = np.where(np.isfinite(m), m, 0.0)  # an all -inf row: exp(-inf) = 0
        e = np.exp(s - m_safe)
        total = e.sum(axis=-1, keepdims=True)
        if sink is not None:
            total = total + np.exp(sink - m_safe)
        if rows is not None:
            total = np.where(rows, total, 0.0)
            m = np.where(rows, m, -np.inf)
        stats = m_safe + np.log(total)  # total = 0: -inf
        prob = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
        if drop is not None:
            prob = prob * drop * (_dropout.scale(p) if drop_scale is None else drop_scale)
        o = np.matmul(prob, _repeat_heads(v, q.shape[1]))
    return o, stats, m, total


def backward_from_scores(s, v, o, do, stats, keep=None, drop=None, p=0.0, drop_scale=None) -> tuple:
    """(dV, dS') of an attention whose scores S' were given (a score_mod subgraph's
    result): P = exp(S' - Stats) on kept entries, dS' = P (dP - delta) as ``backward``
    computes it; the caller's score_mod_bprop maps dS' to dS, and ``scores_backward``
    turns dS into dQ, dK."""
    h_kv = v.shape[1]
    h_q = s.shape[1]
    with np.errstate(invalid="ignore", over="ignore"):
        if keep is not None:
            s = np.where(keep, s, -np.inf)
        live = np.isfinite(stats) | np.isnan(stats)
        prob = np.where(live, np.exp(s - np.where(live, stats, 0.0)), 0.0)
        dp = np.matmul(do, np.swapaxes(_repeat_heads(v, h_q), -1, -2))
        kept = prob
        if drop is not None:
            r = _dropout.scale(p) if drop_scale is None else drop_scale
            dp, kept = dp * drop * r, prob * drop * r
        delta = (do * o).sum(axis=-1, keepdims=True)
        ds = prob * (dp - delta)
        dv = _sum_groups(np.matmul(np.swapaxes(kept, -1, -2), do), h_kv)
    return dv, ds


def scores_backward(ds, q, k, scale: float = 1.0) -> tuple:
    """(dQ, dK) of S = scale q k^T from dS: dQ = scale dS k, dK = scale dS^T q (summed over
    the q heads sharing a k head)."""
    h_q = q.shape[1]
    dq = scale * np.matmul(ds, _repeat_heads(k, h_q))
    dk = _sum_groups(scale * np.matmul(np.swapaxes(ds, -1, -2), q), k.shape[1])
    return dq, dk


def sink_grad(stats, o, do, sink) -> np.ndarray:
    """dSink [1, Hq, 1, 1]: -sum_{b, i} P_sink(b, h, i) delta(b, h, i), with P_sink =
    exp(sink_h - Stats_bi) the sink's softmax weight and delta = sum_d dO O (rows with
    Stats = -inf, which do not exist, add nothing)."""
    with np.errstate(invalid="ignore", over="ignore"):
        live = np.isfinite(stats)
        w = np.where(live, np.exp(sink - np.where(live, stats, 0.0)), 0.0)
        delta = (do * o).sum(axis=-1, keepdims=True)
        return -(w * delta).sum(axis=(0, 2), keepdims=True)


def backward(
    q,
    k,
    v,
    o,
    do,
    stats,
    keep=None,
    scale: float = 1.0,
    bias=None,
    drop=None,
    p: float = 0.0,
    bias_shape=None,
    drop_scale=None,
) -> tuple:
    """(dQ, dK, dV, dBias) in float64 from the forward's inputs, its O and Stats and
    the gradient dO [B, Hq, Sq, Dv]; dBias (of ``bias_shape``, default the bias's
    shape) is None without a bias."""
    h_q = q.shape[1]
    with np.errstate(invalid="ignore", over="ignore"):
        s = _scores(q, k, keep, scale, bias)
        live = np.isfinite(stats) | np.isnan(stats)  # Stats = -inf: a row with no key
        prob = np.where(live, np.exp(s - np.where(live, stats, 0.0)), 0.0)
        v_rep = _repeat_heads(v, h_q)
        dp = np.matmul(do, np.swapaxes(v_rep, -1, -2))
        kept = prob
        if drop is not None:
            r = _dropout.scale(p) if drop_scale is None else drop_scale
            dp, kept = dp * drop * r, prob * drop * r
        delta = (do * o).sum(axis=-1, keepdims=True)
        ds = prob * (dp - delta)
        dq = scale * np.matmul(ds, _repeat_heads(k, h_q))
        dk = _sum_groups(scale * np.matmul(np.swapaxes(ds, -1, -2), q), k.shape[1])
        dv = _sum_groups(np.matmul(np.swapaxes(kept, -1, -2), do), v.shape[1])
    dbias = None
    if bias is not None:
        shape = tuple(bias_shape if bias_shape is not None else np.shape(bias))
        axes = tuple(a for a in range(4) if shape[a] == 1 and ds.shape[a] != 1)
        dbias = ds.sum(axis=axes, keepdims=True) if axes else ds
    return dq, dk, dv, dbias
