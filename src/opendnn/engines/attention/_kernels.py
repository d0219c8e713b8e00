"""Triton source of the attention engine's forward (flash attention; the math is in
``ops/attention.py``).

One program per (BLOCK_M query rows, batch x head). It holds its Q tile, walks the K / V
tiles of its key range in BLOCK_N steps and keeps the online softmax in registers, in
base 2 (c = attn_scale log2 e):

    s_ij = c q_i . k_j (+ log2 e bias_ij) (+ log2 e slope_h (j - i): ALiBi), masked to -inf
    m' = max(m, max_j s_ij),  p_ij = 2^(s_ij - m'),  alpha = 2^(m - m')
    l <- alpha l + sum_j p_ij,  acc <- alpha acc + P' V,  m <- m'
    O = acc / l,   Stats = (m + log2 l) / log2 e   (natural-log logsumexp)

Tiles without masked keys or bias (the bulk) take the row maximum on raw scores and fold
c into the exponent, p_ij = 2^(q_i . k_j c - m'), one FMA per score (c > 0: a negative
attn_scale negates Q, exactly, and uses |c|).

P' is P with dropout applied (kept elements scaled by 1 / (1 - p)); l sums P itself.
Grouped-query heads: head h reads K / V head h // (H / H_kv). A row with no key left
(padding, a band that excludes every key) writes O = 0 and Stats = -inf.

Masks, key j of query i kept when (shift = kv_len - q_len for bottom-right alignment,
else 0; kv_len, q_len the batch's lengths with a padding mask, else S_kv, S_q):
    j < kv_len,   j - (i + shift) <= RIGHT,   (i + shift) - j < LEFT
(RIGHT = 0: causal.) Key tiles wholly outside the band are not visited.

Ragged (packed variable-length) Q / K / V / O: batch b's rows start at element RAG_X[b]
(the batch stride unused) and only its q_len (kv_len) rows are read or written. Where a
ragged tensor's row and head strides are 16-byte multiples with d contiguous, its offsets
are taken to be 16-byte multiples too (as packed rows of such strides are; an offset that
is not faults with a misaligned address): its tiles then load and store in 16-byte
vectors. Without that hint Triton 3.6 miscompiled on sm_90 the element-wise V tile of
P V when head dim V (16, 32) was below BLOCK_N (wrong O; the interpreter is exact); the
engine keeps BLOCK_N <= max(32, head dim V) for such a V, and V tiles are 64 columns at
least (``v_cols``).

Block mask (BLOCK_MASK, uint8): key j of query i is kept only when bit (j // 128) % 8 of
byte [b, h, i // 128, j // 1024] is set; every tile then takes the masked path.

Attention sink (SINK, a logit per head): the online softmax starts from it, m = sink log2 e
and l = 1 with nothing added to acc, so Stats and l include it and O's weights do not.
SMAX / SSUM (score_max / score_sum_exp) receive m / log2 e and l.

Paged K / V: key j of batch b is row j % block_size of the container's block
PT[b, j // block_size] (one gathered block index per key of the tile).

Dropout: element (b, h, i, j) takes the Philox stream of ``ops/dropout.py`` at logical
index ((b H + h) S_q + i) S_kv + j: word idx mod 4 of Philox(SEED, OFFSET + idx // 4),
kept when its float32 uniform is >= p (a literal of the source, as 1 / (1 - p)).
"""

from __future__ import annotations

import dataclasses

from ..dropout._kernels import PHILOX_HELPER
from ..fusion._codegen import COMBINE_HELPERS, TL_TYPE

LOG2E = 1.4426950408889634
INT32_LIMIT = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class Problem:
    """Shapes, strides and options of one sdpa forward. Strides are (b, h, s, d) for Q,
    K, V, O, (b, h, s_q, s_kv) for BIAS (0 where it broadcasts), (b, h, s_q) for STATS."""

    B: int
    H: int
    HKV: int
    SQ: int
    SKV: int
    D: int
    DV: int
    q: tuple
    k: tuple
    v: tuple
    o: tuple
    dtype: object  # DataType of Q / K / V (P is cast to it for P V)
    out_dtype: object  # DataType of O
    stats: tuple | None = None
    bias: tuple | None = None
    bias_dtype: object = None
    right: int | None = None  # band bounds (None: unbounded)
    left: int | None = None
    bottom_right: bool = False
    padding: bool = False  # SEQ_Q / SEQ_KV tensors [B] (any int type)
    seq_strides: tuple = (1, 1)  # their batch strides
    dropout: bool = False  # SEED, OFFSET (device tensors or host values)
    p_drop: float = 0.0
    seed_host: bool = False  # SEED / OFFSET passed by value (a kernel scalar)
    offset_host: bool = False
    alibi: bool = False  # ALiBi's slope_h (j - i) added to the scores
    # paged K / V: (block_size of K, of V, PT_K strides (b, page), PT_V strides); K / V
    # strides are then the containers' (block, h, row, d)
    paged: tuple | None = None
    # ragged (packed variable-length) tensors by role: batch b's rows of X start at
    # element RAG_X[b] (the batch stride unused); the padding mask gives their count
    ragged: tuple = ()
    # (role, n) for ragged roles whose offsets are taken as multiples of n elements (16
    # bytes): a row stride and head stride of 16-byte multiples and a unit d stride
    ragged_align: tuple = ()
    block_mask: tuple | None = None  # BLOCK_MASK strides: a keep bit per 128 x 128 tile
    sink: int | None = None  # SINK_TOKEN's head stride: an attention sink per head
    smax: tuple | None = None  # SCORE_MAX / SCORE_SUM_EXP strides (b, h, s): the row
    ssum: tuple | None = None  # maxima and sums of exponentials, written by the forward

    @property
    def big(self) -> bool:
        return self.B * self.H * max(self.SQ, 1) * max(self.SKV, 1) >= INT32_LIMIT or any(
            s * n >= INT32_LIMIT
            for t in (self.q, self.k, self.v, self.o)
            for s, n in zip(t, (self.B, self.H, max(self.SQ, self.SKV), self.DV))
        )

    def params(self) -> list[str]:
        out = ["Q", "K", "V", "O"] + (["STATS"] if self.stats else [])
        out += (["SMAX"] if self.smax else []) + (["SSUM"] if self.ssum else [])
        out += ["BIAS"] if self.bias else []
        out += ["BLOCK_MASK"] if self.block_mask else []
        out += ["SEQ_Q", "SEQ_KV"] if self.padding else []
        out += ["SEED", "OFFSET"] if self.dropout else []
        out += ["PT_K", "PT_V"] if self.paged else []
        out += ["SINK"] if self.sink is not None else []
        out += [f"RAG_{r}" for r in self.ragged]
        return out + ["SCALE"]


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def v_cols(p: Problem) -> int:
    """Columns of the forward's V tile and O accumulator: head dim V rounded up to a power
    of two, and at least 64 (the padding masked). Narrower V tiles -- 16 or 32 columns,
    32- or 64-byte swizzled wgmma operands -- gave wrong O on sm_90 under Triton 3.6 with
    64-key tiles: head dim V 8, 16 and 24 at any alignment, 32 loaded element by element
    (64 x 16 tiles were exact, and 32-column tiles loaded as 16-byte vectors are); the
    64-column tile is the 128-byte-swizzled operand every head dim from 33 up uses."""
    return max(64, _pow2(p.DV))


def _off(var_b: str, var_h: str, st: tuple) -> str:
    return f"{var_b} * {st[0]} + {var_h} * {st[1]}"


def base(p: Problem, role: str, var_b: str, var_h: str, st: tuple) -> str:
    """Element offset of (batch, head) of tensor ``role``: by its strides, or for a
    ragged tensor from its offsets (RAG_<role>[b]) plus the head's stride."""
    if role in p.ragged:
        off = f"tl.load(RAG_{role} + {var_b}).to(tl.int64)"
        n = dict(p.ragged_align).get(role)
        if n:  # rows 16-byte aligned: loads / stores vectorize along d
            off = f"tl.multiple_of({off}, {n})"
        return f"{off} + {var_h} * {st[1]}"
    return _off(var_b, var_h, st)


def rows_mask(p: Problem, role: str, offs: str, full: int, length: str) -> str:
    """Rows of ``role`` a store may write: within the tensor (``offs < full``), and for a
    ragged one within the batch's length (the next batch's rows follow)."""
    return f"({offs} < {length})" if role in p.ragged else f"({offs} < {full})"


def lengths(p: Problem, I: str) -> list[str]:
    """Lines setting q_len, kv_len (the batch's, with a padding mask) and the diagonal's
    shift (bottom-right alignment: kv_len - q_len)."""
    if p.padding:
        sq, skv = p.seq_strides
        L = [
            f"{I}q_len = tl.load(SEQ_Q + b * {sq}).to(tl.int32)",
            f"{I}kv_len = tl.load(SEQ_KV + b * {skv}).to(tl.int32)",
        ]
    else:
        L = [f"{I}q_len = {p.SQ}", f"{I}kv_len = {p.SKV}"]
    return L + [f"{I}shift = kv_len - q_len" if p.bottom_right else f"{I}shift = 0"]


def bias_term(p: Problem, m: str, n: str, key_mask: bool = True) -> str:
    """The bias tile over offs_m / offs_n broadcast by ``m`` / ``n``, in base 2 (x log2 e);
    ``key_mask``: keys past kv_len are masked too (the tile may cross it)."""
    bs = p.bias
    mask = f"rmask{m} & nmask{n}" if key_mask else f"rmask{m}"
    return (
        f"tl.load(BIAS + {_off('b', 'h', bs)} + offs_m{m} * {bs[2]} + offs_n{n} * {bs[3]}, "
        f"mask={mask}, other=0.0).to(tl.float32) * {LOG2E}"
    )


def alibi_term(p: Problem, m: str, n: str) -> str:
    """ALiBi's slope_h (j - i) over offs_m / offs_n broadcast by ``m`` / ``n``, in base 2
    (x log2 e); the slope of head ``h`` (ops/attention.alibi_slopes) computed in place."""
    top = 1 << (p.H.bit_length() - 1)  # the largest power of two <= H
    hf = "h.to(tl.float32)"
    slope = (
        f"tl.where(h < {top}, tl.exp2({-8.0 / top!r} * ({hf} + 1.0)), "
        f"tl.exp2({-4.0 / top!r} * (2.0 * ({hf} - {top}.0) + 1.0)))"
    )
    return f"{slope} * {LOG2E} * (offs_n{n} - offs_m{m}).to(tl.float32)"


def keep_expr(p: Problem, m: str, n: str) -> str:
    """The kept-(query, key) predicate over offs_m / offs_n broadcast by ``m`` / ``n``
    (``[:, None]``, ``[None, :]`` or swapped for a transposed tile)."""
    keep = f"nmask{n} & rmask{m}"
    if p.block_mask:  # bit (j // 128) % 8 of byte [i // 128, j // 1024]
        st = p.block_mask
        byte = (
            f"tl.load(BLOCK_MASK + {_off('b', 'h', st)} + (offs_m{m} // 128) * {st[2]} + "
            f"(offs_n{n} // 1024) * {st[3]}, mask=rmask{m} & nmask{n}, other=0).to(tl.int32)"
        )
        keep += f" & (((({byte}) >> ((offs_n{n} // 128) % 8)) & 1) != 0)"
    if p.right is not None:
        keep += f" & (offs_n{n} - (offs_m{m} + shift) <= {p.right})"
    if p.left is not None:
        keep += f" & ((offs_m{m} + shift) - offs_n{n} < {p.left})"
    return keep


def rng_setup(p: Problem, I: str) -> list[str]:
    """Lines setting ``seed`` and ``doff`` (the Philox key and counter base)."""
    seed = "SEED" if p.seed_host else "tl.load(SEED)"
    off = "OFFSET" if p.offset_host else "tl.load(OFFSET)"
    return [f"{I}seed = {seed}.to(tl.int64)", f"{I}doff = {off}.to(tl.int64)"]


def dropout_setup(p: Problem, I: str) -> list[str]:
    return rng_setup(p, I) + [
        f"{I}keep_scale = {1.0 / (1.0 - p.p_drop)!r}",
        f"{I}bh64 = (b * {p.H} + h).to(tl.int64)",
    ]


def dropout_keep(p: Problem, I: str, m: str, n: str) -> list[str]:
    """Lines setting ``kept`` for the tile (element (b, h, i, j): Philox word idx mod 4 at
    counter OFFSET + idx // 4, idx = ((b H + h) S_q + i) S_kv + j)."""
    return [
        f"{I}idx = (bh64 * {p.SQ} + offs_m.to(tl.int64)){m} * {p.SKV} + offs_n.to(tl.int64){n}",
        f"{I}u0, u1, u2, u3 = _philox4_uniform(seed, doff + (idx >> 2))",
        f"{I}sel = idx & 3",
        f"{I}u = tl.where(sel == 0, u0, tl.where(sel == 1, u1, tl.where(sel == 2, u2, u3)))",
        f"{I}kept = u >= {float(p.p_drop)!r}",
    ]


def _fwd_step(
    p: Problem, kn, masked: bool, interpret: bool, tma: bool, dt: str, I2: str
) -> list[str]:
    """One key tile of the forward loop; ``masked``: the tile may hold masked keys."""
    bn = kn.BLOCK_N
    ks, vs = p.k, p.v
    bd, bdv = max(16, _pow2(p.D)), v_cols(p)
    kmask = (
        "nmask[None, :] & dmask[:, None]" if masked else ("dmask[:, None]" if bd != p.D else None)
    )
    vmask = (
        "nmask[:, None] & dvmask[None, :]"
        if masked
        else ("dvmask[None, :]" if bdv != p.DV else None)
    )
    L = [f"{I2}offs_n = start + tl.arange(0, {bn})"]
    if masked:
        L.append(f"{I2}nmask = offs_n < kv_len")
    # the rows of the keys: offs_n itself, or in a paged cache (block, row in block)
    krow, vrow = (f"offs_n[None, :] * {ks[2]}", f"offs_n[:, None] * {vs[2]}")
    if p.paged:
        bsk, bsv, ptk, ptv = p.paged
        # a packed table (ragged offsets): batch b's pages start at its offset
        tk, tv = (
            f"tl.load(RAG_PAGE_TABLE_{x} + b).to(tl.int64)"
            if f"PAGE_TABLE_{x}" in p.ragged
            else f"b * {st[0]}"
            for x, st in (("K", ptk), ("V", ptv))
        )
        L += [
            f"{I2}pk = tl.load(PT_K + {tk} + (offs_n // {bsk}) * {ptk[1]}, "
            f"mask=offs_n < {p.SKV}, other=0).to(tl.int64)",
            f"{I2}pv = tl.load(PT_V + {tv} + (offs_n // {bsv}) * {ptv[1]}, "
            f"mask=offs_n < {p.SKV}, other=0).to(tl.int64)",
        ]
        krow = f"(pk * {ks[0]} + (offs_n % {bsk}) * {ks[2]})[None, :]"
        vrow = f"(pv * {vs[0]} + (offs_n % {bsv}) * {vs[2]})[:, None]"
    if tma:
        L.append(f"{I2}kt = tl.trans(k_desc.load([start, 0]))")
    else:
        m = f", mask={kmask}, other=0.0" if kmask else ""
        L.append(f"{I2}kt = tl.load(k_base + {krow} + offs_d[:, None] * {ks[3]}{m})")
    if interpret:
        L.append(f"{I2}kt = kt.to(tl.float32)")
    fold = not masked and not p.bias and not p.alibi  # scale folded in the exponent: 1 FMA
    L.append(f"{I2}s = tl.dot(q, kt)" if fold else f"{I2}s = tl.dot(q, kt) * c")
    if p.bias:
        L.append(f"{I2}s += {bias_term(p, '[:, None]', '[None, :]', masked)}")
    if p.alibi:
        L.append(f"{I2}s += {alibi_term(p, '[:, None]', '[None, :]')}")
    if masked:
        L.append(f'{I2}s = tl.where({keep_expr(p, "[:, None]", "[None, :]")}, s, float("-inf"))')
    L.append(f"{I2}m_new = tl.maximum(m_i, tl.reduce(s, 1, _max_combine){' * c' if fold else ''})")
    # a row's maximum may be -inf where keys are masked or a bias holds -inf (an additive
    # mask); where every key is kept and there is no bias it is finite
    L.append(
        f'{I2}m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)'
        if masked or p.bias or p.alibi
        else f"{I2}m_safe = m_new"
    )
    L += [
        f"{I2}pr = tl.exp2({'s * c' if fold else 's'} - m_safe[:, None])",
        f"{I2}alpha = tl.exp2(m_i - m_safe)",
        f"{I2}l_i = l_i * alpha + tl.reduce(pr, 1, _add_combine)",
        f"{I2}m_i = m_new",
    ]
    if p.dropout:
        L += dropout_keep(p, I2, "[:, None]", "[None, :]")
        L.append(f"{I2}pr = tl.where(kept, pr * keep_scale, 0.0)")
    if tma:
        L.append(f"{I2}vt = v_desc.load([start, 0])")
    else:
        m = f", mask={vmask}, other=0.0" if vmask else ""
        L.append(f"{I2}vt = tl.load(v_base + {vrow} + offs_dv[None, :] * {vs[3]}{m})")
    if interpret:
        L.append(f"{I2}acc = acc * alpha[:, None] + tl.dot(pr, vt.to(tl.float32))")
    else:
        L.append(f"{I2}acc = acc * alpha[:, None] + tl.dot(pr.to({dt}), vt)")
    return L


def query_tile(p: Problem) -> str:
    """The program's query tile. With a right band bound (causal) a later tile sees more
    keys, so the grid runs tiles last to first: the longest start first and the wave's
    tail is short ones."""
    return (
        "tl.num_programs(0) - 1 - tl.program_id(0)" if p.right is not None else "tl.program_id(0)"
    )


def fwd_source(name: str, p: Problem, kn, interpret: bool) -> str:
    """The forward kernel (grid: (ceil(S_q / BLOCK_M), B H)). ``interpret``: dots in
    float32 (Triton 3.6's interpreter gets low-precision dots wrong). ``kn.TMA``: Q / K / V
    tiles through tensor descriptors (compiled only)."""
    tma = bool(getattr(kn, "TMA", 0)) and not interpret
    bm, bn = kn.BLOCK_M, kn.BLOCK_N
    bd, bdv = max(16, _pow2(p.D)), v_cols(p)  # tl.dot: K, N >= 16
    I, I2 = "    ", "        "
    dt = TL_TYPE[p.dtype]
    # (b, h) split in int32 and widened after: Triton 3.6 miscompiles on sm_90 the int64
    # split of an index by constant // and % (docs/design/conv.md)
    wide = [f"{I}{v} = {v}.to(tl.int64)" for v in ("b", "h", "hk")] if p.big else []
    L = [
        COMBINE_HELPERS,
        PHILOX_HELPER if p.dropout else "",
        "@triton.jit",
        f"def {name}({', '.join(p.params())}):",
        f"{I}pid_m = {query_tile(p)}",
        f"{I}bh = tl.program_id(1)",
        f"{I}b = bh // {p.H}",
        f"{I}h = bh % {p.H}",
        f"{I}hk = h // {p.H // p.HKV}",
        *wide,
        f"{I}offs_m = pid_m * {bm} + tl.arange(0, {bm})",
        f"{I}offs_d = tl.arange(0, {bd})",
        f"{I}offs_dv = tl.arange(0, {bdv})",
        f"{I}dmask = offs_d < {p.D}",
        f"{I}dvmask = offs_dv < {p.DV}",
    ]
    L += lengths(p, I)
    qs, ks, vs, os_ = p.q, p.k, p.v, p.o
    L.append(f"{I}rmask = offs_m < q_len")
    if tma:
        L += [
            f"{I}q_desc = tl.make_tensor_descriptor(Q + {base(p, 'Q', 'b', 'h', qs)}, "
            f"shape=[{p.SQ}, {p.D}], strides=[{qs[2]}, 1], block_shape=[{kn.BLOCK_M}, {bd}])",
            f"{I}q = q_desc.load([pid_m * {kn.BLOCK_M}, 0])",
        ]
    else:
        L.append(
            f"{I}q = tl.load(Q + {base(p, 'Q', 'b', 'h', qs)} + offs_m[:, None] * {qs[2]} + "
            f"offs_d[None, :] * {qs[3]}, mask=rmask[:, None] & dmask[None, :], other=0.0)"
        )
    if interpret:
        L.append(f"{I}q = q.to(tl.float32)")
    # the key range: [lo, hi), whole BLOCK_N tiles, clipped to the band of the tile's rows
    L += [f"{I}lo = 0", f"{I}hi = kv_len"]
    if p.right is not None:
        L.append(
            f"{I}hi = tl.minimum(hi, tl.minimum(pid_m * {bm} + {bm}, q_len) + shift + {p.right})"
        )
    if p.left is not None:
        L.append(f"{I}lo = tl.maximum(0, pid_m * {bm} + shift - {p.left} + 1) // {bn} * {bn}")
    # [mid_lo, mid_hi): tiles every row keeps whole -- no mask arithmetic there (none
    # with a block mask: any tile may hold masked keys)
    whole = "lo" if p.block_mask else f"tl.maximum(lo, kv_len // {bn} * {bn})"
    L += [f"{I}mid_lo = lo", f"{I}mid_hi = {whole}"]
    if p.right is not None:
        L.append(
            f"{I}mid_hi = tl.maximum(lo, tl.minimum(mid_hi, (pid_m * {bm} + shift + "
            f"{p.right} + 1) // {bn} * {bn}))"
        )
    if p.left is not None:
        L.append(
            f"{I}mid_lo = tl.minimum(mid_hi, tl.maximum(lo, (pid_m * {bm} + {bm} - 1 + "
            f"shift - {p.left} + {bn}) // {bn} * {bn}))"
        )
    # c = |scale| log2(e) > 0 with Q negated (exactly) for a negative scale: the row
    # maximum of raw scores times c is then the maximum of scaled ones (the folded tiles)
    L += [
        f"{I}q = tl.where(SCALE < 0, -q, q)",
        f"{I}c = tl.abs(SCALE * {LOG2E})",
        f'{I}m_i = tl.full([{bm}], float("-inf"), tl.float32)'
        if p.sink is None  # an attention sink: a first column of weight 1 and no value
        else f"{I}m_i = tl.full([{bm}], 0.0, tl.float32) + tl.load(SINK + h * {p.sink}) * {LOG2E}",
        f"{I}l_i = tl.full([{bm}], {0.0 if p.sink is None else 1.0}, tl.float32)",
        f"{I}acc = tl.full([{bm}, {bdv}], 0.0, tl.float32)",
        f"{I}k_base = K + {base(p, 'K', 'b', 'hk', ks) if not p.paged else f'hk * {ks[1]}'}",
        f"{I}v_base = V + {base(p, 'V', 'b', 'hk', vs) if not p.paged else f'hk * {vs[1]}'}",
    ]
    if tma:
        L += [
            f"{I}k_desc = tl.make_tensor_descriptor(k_base, shape=[{p.SKV}, {p.D}], "
            f"strides=[{ks[2]}, 1], block_shape=[{bn}, {bd}])",
            f"{I}v_desc = tl.make_tensor_descriptor(v_base, shape=[{p.SKV}, {p.DV}], "
            f"strides=[{vs[2]}, 1], block_shape=[{bn}, {bdv}])",
        ]
    if p.dropout:
        L += dropout_setup(p, I)
    for lo_, hi_, masked in (
        ("lo", "mid_lo", True),
        ("mid_lo", "mid_hi", False),
        ("mid_hi", "hi", True),
    ):
        if masked and lo_ == "lo" and p.left is None:
            continue  # no lower band: nothing below mid_lo
        L.append(f"{I}for start in range({lo_}, {hi_}, {bn}):")
        L += _fwd_step(p, kn, masked, interpret, tma, dt, I2)
    L += [
        f"{I}l_i = tl.where(rmask, l_i, 0.0)",  # rows past the batch's q_len: O = 0
        f"{I}acc = tl.where(rmask[:, None], acc, 0.0)",
    ]
    L += [
        f"{I}l_safe = tl.where(l_i == 0.0, 1.0, l_i)",
        f"{I}o = acc / l_safe[:, None]",
        f"{I}tl.store(O + {base(p, 'O', 'b', 'h', os_)} + offs_m[:, None] * {os_[2]} + "
        f"offs_dv[None, :] * {os_[3]}, o.to({TL_TYPE[p.out_dtype]}), "
        f"mask={rows_mask(p, 'O', 'offs_m', p.SQ, 'q_len')}[:, None] & dvmask[None, :])",
    ]
    if p.stats:
        st = p.stats
        L += [
            f'{I}lse = tl.where(l_i == 0.0, float("-inf"), (m_i + tl.log2(l_safe)) / {LOG2E})',
            f"{I}tl.store(STATS + {base(p, 'STATS', 'b', 'h', st)} + offs_m * {st[2]}, lse, "
            f"mask={rows_mask(p, 'STATS', 'offs_m', p.SQ, 'q_len')})",
        ]
    for role, name, st, val in (
        ("SCORE_MAX", "SMAX", p.smax, f'tl.where(rmask, m_i / {LOG2E}, float("-inf"))'),
        ("SCORE_SUM_EXP", "SSUM", p.ssum, "l_i"),
    ):
        if st:  # the row's maximum (natural units) and sum of exponentials
            L.append(
                f"{I}tl.store({name} + {base(p, role, 'b', 'h', st)} + offs_m * {st[2]}, {val}, "
                f"mask={rows_mask(p, role, 'offs_m', p.SQ, 'q_len')})"
            )
    return "\n".join(L) + "\n"


DUMP_BLOCK = 1024


def dump_source(name: str, p: Problem, st: tuple, out_dtype) -> str:
    """The dropout mask written to RNG_DUMP [B, H, S_q, S_kv] (strides ``st``): 1 where
    the attention kernels keep element (b, h, i, j), 0 where they drop it -- the same
    Philox stream (``dropout_keep``), one element per lane; grid
    (ceil(B H S_q S_kv / DUMP_BLOCK),)."""
    I = "    "
    total = p.B * p.H * p.SQ * p.SKV
    L = [
        PHILOX_HELPER,
        "@triton.jit",
        f"def {name}(RNG_DUMP, SEED, OFFSET):",
        f"{I}idx = tl.program_id(0).to(tl.int64) * {DUMP_BLOCK} + tl.arange(0, {DUMP_BLOCK})",
        f"{I}live = idx < {total}",
    ]
    L += rng_setup(p, I)
    L += [
        f"{I}u0, u1, u2, u3 = _philox4_uniform(seed, doff + (idx >> 2))",
        f"{I}sel = idx & 3",
        f"{I}u = tl.where(sel == 0, u0, tl.where(sel == 1, u1, tl.where(sel == 2, u2, u3)))",
        f"{I}j = idx % {p.SKV}",
        f"{I}i = idx // {p.SKV} % {p.SQ}",
        f"{I}h = idx // {p.SKV * p.SQ} % {p.H}",
        f"{I}b = idx // {p.SKV * p.SQ * p.H}",
        f"{I}off = b * {st[0]} + h * {st[1]} + i * {st[2]} + j * {st[3]}",
        f"{I}kept = (u >= {float(p.p_drop)!r}).to(tl.float32)",
        f"{I}tl.store(RNG_DUMP + off, kept.to({TL_TYPE[out_dtype]}), mask=live)",
    ]
    return "\n".join(L) + "\n"
