"""Gluon kernel of the attention engine's warp-specialized forward (``GLUON=1``; GPU only,
Hopper; layout: ``_kernels``). Gluon (``triton.experimental.gluon``, Triton 3.6) states
layouts, shared memory, mbarriers, TMA and Hopper's asynchronous wgmma explicitly, and
splits a program into warp partitions -- FlashAttention-3's structure, which plain Triton
3.6 could not express correctly: its automatic warp specialization gave wrong outputs,
and without it the Triton kernel stops near 0.8x cuDNN (docs/design/attention.md).

Math (one query row; base 2, c = attn_scale log2 e, scores s = q . k in float32):
    m' = max(m, c max_j s_j),  p_j = 2^(c s_j - m'),  alpha = 2^(m - m')
    l' = alpha l + sum_j p_j,  acc' = alpha acc + bf16(p) V
    O = acc / l,  Stats = (m + log2 l) ln 2   (natural-log logsumexp, as ``_kernels``)

A program covers 128 query rows of one (batch, head): Q / K / V / O are viewed as 2-D
[B H S, D] tensors (contiguous BHSD), one TMA descriptor each; K / V head = head //
kv_group (grouped-query heads). ``gl.warp_specialize`` forks
- a producer warp (24 registers): TMA loads of the two 64-row Q tiles, then K_j, V_j into
  a ring of NUM_STAGES slots; ``k_ready`` / ``v_ready`` barriers complete on the bytes
  landed, the producer waits on ``k_empty`` / ``v_empty`` (inverted phase: a fresh ring
  is free) before refilling a slot;
- two consumer warpgroups (240 registers), 64 query rows each, sharing the ring: per key
  tile, S_j = Q K_j^T and acc += P_{j-1} V_{j-1} are issued together (async wgmma), the
  softmax of S_j runs while P V is on the tensor cores; a slot goes back with one arrive
  per consumer on its empty barrier (count 2) once the wgmma reading it retired.
  PINGPONG passes a turn token through two mbarriers so the warpgroups alternate their
  GEMM issues (one's softmax overlaps the other's GEMMs).
CAUSAL (top-left, S_q = S_kv): query tiles run longest first (LPT: across heads); both
consumers take every key tile of the program (so every empty barrier gets both arrives):
unmasked tiles first, then the diagonal ones masked, and (without PINGPONG) the tiles past
a warpgroup's last row -- warpgroup 0's half of the diagonal with 64-key tiles -- handed
back unread. TAIL (S % 128 != 0): keys past S masked (TMA
zero-fills them), O / Stats written with masked stores (a TMA store would spill into the
next head's rows of the 2-D view).
"""

from __future__ import annotations

from contextlib import nullcontext as _nullcontext

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# module-level constants must be gl.constexpr to be seen inside @gluon.jit code
LOG2E = gl.constexpr(1.4426950408889634)
LN2 = gl.constexpr(0.6931471805599453)
CONSUMER_REGS = 240  # per consumer thread; the producer warp gets 24
MAXNREG = 168  # launch limit: 12 warps x 128 threads x 168 <= 64K registers
ROWS = 128  # query rows per program (two consumer warpgroups of 64)
GL_TYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float32: gl.float32}


@gluon.constexpr_function
def wgmma_layout(n):
    """The register layout of one warpgroup's [64, n] float32 wgmma accumulator."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, n, 16])


@gluon.constexpr_function
def operand_layout(acc_layout):
    """The layout of a 2-byte wgmma A operand held in registers, for accumulator layout
    ``acc_layout`` (P or dS entering the second GEMM)."""
    return gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)


def smem_bytes(d: int, block_n: int, stages: int) -> int:
    """Shared memory of one program: the two Q tiles and the K / V ring (2-byte types)."""
    return 2 * (ROWS * d + 2 * stages * block_n * d)


@gluon.jit
def _softmax_step(s, m_i, l_i, qk_scale, GUARD: gl.constexpr = False):
    """Fold one fp32 score tile ``s`` into the running (m_i, l_i) state (base 2).

    Returns (p, alpha, m_new, l_new); p = exp2(qk_scale * s - m_new) in the layout of s,
    alpha = exp2(m_i - m_new) is the rescale factor for the history (row vector).
    GUARD (masked tiles only): a row whose max is still -inf (every key so far masked)
    subtracts 0 instead, so it gets p = 0, alpha = 0 rather than exp2(-inf + inf) = NaN.
    With top-left causal / key tails this never triggers (every row keeps key 0 and tile 0
    is folded in first), it costs two row-vector selects per masked tile.
    """
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
    if GUARD:
        m_sub = gl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_sub = m_new
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_sub, 1))
    alpha = gl.exp2(m_i - m_sub)
    l_new = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_new


@gluon.jit
def _apply_mask(s, j, q_pos, seq_len, CAUSAL: gl.constexpr, s_layout: gl.constexpr):
    """Scores of key tile j for query rows q_pos.. set to -inf where the key is dropped:
    key > query (CAUSAL, top-left aligned) or, without CAUSAL, key >= seq_len (tail).

    With CAUSAL the key-tail test is implied for every row that is stored (key <= query <
    seq_len); rows >= seq_len of a tail tile are computed on padding and never stored."""
    BLOCK_M: gl.constexpr = s.shape[0]
    BLOCK_N: gl.constexpr = s.shape[1]
    cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    if CAUSAL:
        rows = q_pos + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
        keep = gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1)
    else:
        keep = gl.expand_dims(cols < seq_len, 0)
    return gl.where(keep, s, float("-inf"))


@gluon.jit
def _epilogue(
    acc,
    m_i,
    l_i,
    o_smem,
    o_desc,
    o_ptr,
    lse_ptr,
    q_row,
    q_pos,
    seq_len,
    BLOCK_M: gl.constexpr,
    HEAD_D: gl.constexpr,
    TAIL: gl.constexpr,
    o_layout: gl.constexpr,
    s_layout: gl.constexpr,
):
    """O = acc / l, LSE = (m + log2 l) * ln2 for the rows q_row.. (= position q_pos.. of the
    head). Without TAIL: O via smem (o_smem must be free) + TMA store. With TAIL: rows at
    positions >= seq_len must not be written (in the [B*H*S, D] view they are the next head's
    first rows, where a TMA store would not clip), so O and LSE use masked gl.store."""
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    o = acc / gl.expand_dims(l_o, 1)
    rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    lse = (m_i + gl.log2(l_i)) * LN2
    if TAIL:
        gl.store(lse_ptr + q_row + rows, lse, mask=q_pos + rows < seq_len)
        rows_o = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, o_layout))
        cols_o = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, o_layout))
        offs = gl.expand_dims((q_row + rows_o) * HEAD_D, 1) + gl.expand_dims(cols_o, 0)
        mask = gl.expand_dims(q_pos + rows_o < seq_len, 1) & gl.expand_dims(cols_o < HEAD_D, 0)
        gl.store(o_ptr + offs, o.to(o_desc.dtype), mask=mask)
    else:
        o_smem.store(o.to(o_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(o_desc, [q_row, 0], o_smem)
        gl.store(lse_ptr + q_row + rows, lse)
        tma.store_wait(pendings=0)


@gluon.jit
def _ws_producer(
    q_desc,
    k_desc,
    v_desc,
    q_smem,
    k_smem,
    v_smem,
    q_bars,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    q_row,
    kv_row,
    n_tiles,
    BLOCK_N: gl.constexpr,
    NUM_STAGES: gl.constexpr,
):
    """Producer warp: Q tiles of both consumers, then K_j, V_j for key tiles 0..n_tiles-1
    (the CTA's key range: the same n_tiles both consumers iterate over)."""
    WG_M: gl.constexpr = q_desc.block_type.shape[0]
    for wg in gl.static_range(2):
        mbarrier.expect(q_bars.index(wg), q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(
            q_desc, [q_row + wg * WG_M, 0], q_bars.index(wg), q_smem.index(wg)
        )
    stream_kv(
        k_desc,
        v_desc,
        k_smem,
        v_smem,
        k_ready,
        v_ready,
        k_empty,
        v_empty,
        kv_row,
        n_tiles,
        BLOCK_N,
        NUM_STAGES,
    )


@gluon.jit
def kv_ring(k_desc, v_desc, NUM_STAGES: gl.constexpr):
    """The K / V ring of NUM_STAGES slots of the descriptors' blocks and its barriers:
    (k_smem, v_smem, k_ready, v_ready, k_empty, v_empty); ready barriers take the producer's
    TMA bytes (count 1), empty ones one arrive per consumer warpgroup (count 2)."""
    k_smem = gl.allocate_shared_memory(
        k_desc.dtype, [NUM_STAGES] + k_desc.block_type.shape, k_desc.layout
    )
    v_smem = gl.allocate_shared_memory(
        v_desc.dtype, [NUM_STAGES] + v_desc.block_type.shape, v_desc.layout
    )
    k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)
        mbarrier.init(v_empty.index(i), count=2)
    return k_smem, v_smem, k_ready, v_ready, k_empty, v_empty


@gluon.jit
def stream_kv(
    k_desc,
    v_desc,
    k_smem,
    v_smem,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    kv_row,
    n_tiles,
    BLOCK_N: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    base=0,
):
    """A producer's K_j, V_j (rows kv_row + j BLOCK_N, j < n_tiles) into the ring: each slot
    waited empty (inverted phase: the first pass over a fresh ring does not wait), then
    loaded against its ready barrier's byte count. ``base``: the ring uses before these
    (a persistent program's earlier query tiles)."""
    kv_bytes: gl.constexpr = k_desc.block_type.nbytes
    for j in range(n_tiles):
        slot = (base + j) % NUM_STAGES
        phase = ((base + j) // NUM_STAGES) & 1
        row = kv_row + j * BLOCK_N
        mbarrier.wait(k_empty.index(slot), phase ^ 1)
        mbarrier.expect(k_ready.index(slot), kv_bytes)
        tma.async_copy_global_to_shared(k_desc, [row, 0], k_ready.index(slot), k_smem.index(slot))
        mbarrier.wait(v_empty.index(slot), phase ^ 1)
        mbarrier.expect(v_ready.index(slot), kv_bytes)
        tma.async_copy_global_to_shared(v_desc, [row, 0], v_ready.index(slot), v_smem.index(slot))


@gluon.jit
def _ws_step(
    j,
    q_tile,
    k_smem,
    v_smem,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    pp_bars,
    s,
    acc,
    p_op,
    m_i,
    l_i,
    qk_scale,
    q_pos,
    seq_len,
    WG: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    PINGPONG: gl.constexpr,
    MASK: gl.constexpr,
    CAUSAL: gl.constexpr,
    s_layout: gl.constexpr,
    row_o: gl.constexpr,
    p_layout: gl.constexpr,
    base=0,
):
    """One main-loop iteration j >= 1 of a consumer: S_j = Q K_j^T and acc += P_{j-1} V_{j-1}
    in flight together, softmax of S_j (masked when MASK) overlapping the P V wgmma. Key
    tile j sits in ring use base + j (``base``: a persistent program's earlier uses)."""
    slot = (base + j) % NUM_STAGES
    phase = ((base + j) // NUM_STAGES) & 1
    pslot = (base + j - 1) % NUM_STAGES
    pphase = ((base + j - 1) // NUM_STAGES) & 1
    if PINGPONG:
        # Warpgroup WG's k-th turn (k = j here) completes phase j of pp_bars[WG].
        mbarrier.wait(pp_bars.index(WG), j & 1)
    mbarrier.wait(k_ready.index(slot), phase)
    s = warpgroup_mma(q_tile, k_smem.index(slot).permute((1, 0)), s, use_acc=False, is_async=True)
    mbarrier.wait(v_ready.index(pslot), pphase)
    acc = warpgroup_mma(p_op, v_smem.index(pslot), acc, is_async=True)
    if PINGPONG:
        mbarrier.arrive(pp_bars.index(1 - WG), count=1)
    s = warpgroup_mma_wait(num_outstanding=1, deps=(s,))
    mbarrier.arrive(k_empty.index(slot), count=1)
    if MASK:
        sm = _apply_mask(s, j, q_pos, seq_len, CAUSAL, s_layout)
        p, alpha, m_i, l_i = _softmax_step(sm, m_i, l_i, qk_scale, True)
    else:
        p, alpha, m_i, l_i = _softmax_step(s, m_i, l_i, qk_scale)
    acc, p_op = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p_op))
    mbarrier.arrive(v_empty.index(pslot), count=1)
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
    p_op = gl.convert_layout(p.to(p_op.dtype), p_layout)
    return s, acc, p_op, m_i, l_i


@gluon.jit
def _ws_tile(
    q_tile,
    k_smem,
    v_smem,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    pp_bars,
    s,
    acc,
    m_i,
    l_i,
    qk_scale,
    my_pos,
    seq_len,
    n_tiles,
    WG: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    PINGPONG: gl.constexpr,
    CAUSAL: gl.constexpr,
    TAIL: gl.constexpr,
    s_layout: gl.constexpr,
    row_o: gl.constexpr,
    p_layout: gl.constexpr,
    base=0,
):
    """A consumer's pass over one query tile's key tiles up to the last P V: S_0 and its
    softmax, then ``_ws_step`` for tiles 1.. (unmasked ones first). Key tile j sits in
    ring use base + j. Returns (s, acc, p_op, m_i, l_i, n_own): n_own key tiles were read;
    the last P V (``_ws_last_pv``) is still to do."""
    WG_M: gl.constexpr = s.shape[0]
    BLOCK_N: gl.constexpr = s.shape[1]
    HAS_MASK: gl.constexpr = CAUSAL or TAIL
    # Tile 0: S_0 and its softmax (masked whenever any tile can be: it is the diagonal tile
    # of the first query tile; the mask is exact on a fully kept tile).
    slot0 = base % NUM_STAGES
    if PINGPONG:
        mbarrier.wait(pp_bars.index(WG), 0)
    mbarrier.wait(k_ready.index(slot0), (base // NUM_STAGES) & 1)
    s = warpgroup_mma(q_tile, k_smem.index(slot0).permute((1, 0)), s, use_acc=False, is_async=True)
    if PINGPONG:
        mbarrier.arrive(pp_bars.index(1 - WG), count=1)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    mbarrier.arrive(k_empty.index(slot0), count=1)
    if HAS_MASK:
        sm = _apply_mask(s, 0, my_pos, seq_len, CAUSAL, s_layout)
        p, alpha, m_i, l_i = _softmax_step(sm, m_i, l_i, qk_scale, True)
    else:
        p, alpha, m_i, l_i = _softmax_step(s, m_i, l_i, qk_scale)
    p_op = gl.convert_layout(p.to(q_tile.dtype), p_layout)

    # Key tiles this warpgroup reads: the CTA's, or (CAUSAL without PINGPONG, whose turns
    # need both warpgroups on every tile) up to the one holding its own last row's key.
    # (With 128-key tiles both warpgroups need every tile: the plain loop is compiled.)
    SKIP: gl.constexpr = CAUSAL and not PINGPONG and BLOCK_N < 2 * WG_M
    n_own = n_tiles
    if SKIP:
        n_own = gl.cdiv(gl.minimum(my_pos + WG_M, seq_len), BLOCK_N)
        n_own = gl.minimum(gl.maximum(n_own, 1), n_tiles)
    if HAS_MASK:
        # Key tiles every row of this warpgroup keeps entirely: below the diagonal (CAUSAL:
        # last key (n+1)*BLOCK_N - 1 <= first row my_pos) and inside the sequence (TAIL).
        if CAUSAL:
            n_full = (my_pos + 1) // BLOCK_N
            if TAIL:
                n_full = gl.minimum(n_full, seq_len // BLOCK_N)
        else:
            n_full = seq_len // BLOCK_N
        for j in range(1, n_full):
            s, acc, p_op, m_i, l_i = _ws_step(
                j,
                q_tile,
                k_smem,
                v_smem,
                k_ready,
                v_ready,
                k_empty,
                v_empty,
                pp_bars,
                s,
                acc,
                p_op,
                m_i,
                l_i,
                qk_scale,
                my_pos,
                seq_len,
                WG,
                NUM_STAGES,
                PINGPONG,
                False,
                CAUSAL,
                s_layout,
                row_o,
                p_layout,
                base,
            )
        for j in range(gl.maximum(n_full, 1), n_own):
            s, acc, p_op, m_i, l_i = _ws_step(
                j,
                q_tile,
                k_smem,
                v_smem,
                k_ready,
                v_ready,
                k_empty,
                v_empty,
                pp_bars,
                s,
                acc,
                p_op,
                m_i,
                l_i,
                qk_scale,
                my_pos,
                seq_len,
                WG,
                NUM_STAGES,
                PINGPONG,
                True,
                CAUSAL,
                s_layout,
                row_o,
                p_layout,
                base,
            )
    else:
        for j in range(1, n_tiles):
            s, acc, p_op, m_i, l_i = _ws_step(
                j,
                q_tile,
                k_smem,
                v_smem,
                k_ready,
                v_ready,
                k_empty,
                v_empty,
                pp_bars,
                s,
                acc,
                p_op,
                m_i,
                l_i,
                qk_scale,
                my_pos,
                seq_len,
                WG,
                NUM_STAGES,
                PINGPONG,
                False,
                CAUSAL,
                s_layout,
                row_o,
                p_layout,
                base,
            )
    return s, acc, p_op, m_i, l_i, n_own


@gluon.jit
def _ws_last_pv(
    v_smem,
    v_ready,
    v_empty,
    k_ready,
    k_empty,
    p_op,
    acc,
    n_own,
    n_tiles,
    NUM_STAGES: gl.constexpr,
    SKIP: gl.constexpr,
    base=0,
):
    """The last P V of a consumer's query tile (key tile n_own - 1), then (SKIP) the key
    tiles past its last row handed back unread; returns acc."""
    lj = base + n_own - 1
    lslot = lj % NUM_STAGES
    mbarrier.wait(v_ready.index(lslot), (lj // NUM_STAGES) & 1)
    acc = warpgroup_mma(p_op, v_smem.index(lslot), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    mbarrier.arrive(v_empty.index(lslot), count=1)
    # (PINGPONG: the last P V is issued without a turn; the other warpgroup's last turn only
    # needs our arrive from turn n_tiles - 1, which already happened.)
    if SKIP:
        for j in range(n_own, n_tiles):
            # Key tiles past this warpgroup's last row (causal, 64-key tiles: warpgroup 0's half
            # of the diagonal) are handed back unread. Waiting for them to land first keeps the
            # arrive on the use the other warpgroup reads, not on the slot's previous one.
            slot = (base + j) % NUM_STAGES
            phase = ((base + j) // NUM_STAGES) & 1
            mbarrier.wait(k_ready.index(slot), phase)
            mbarrier.arrive(k_empty.index(slot), count=1)
            mbarrier.wait(v_ready.index(slot), phase)
            mbarrier.arrive(v_empty.index(slot), count=1)
    return acc


@gluon.jit
def _ws_consumer(
    o_desc,
    o_ptr,
    q_smem,
    k_smem,
    v_smem,
    q_bars,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    pp_bars,
    lse_ptr,
    q_row,
    q_pos,
    seq_len,
    n_tiles,
    sm_scale,
    WG: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_D: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    PINGPONG: gl.constexpr,
    CAUSAL: gl.constexpr,
    TAIL: gl.constexpr,
):
    """Consumer warpgroup WG (0 or 1): 64 query rows, S = Q K^T, softmax, O += P V.

    Same schedule as stage 1 but the ring is filled by the producer warp; a slot is handed
    back with ``mbarrier.arrive`` on k_empty / v_empty once the wgmma reading it retired.
    With PINGPONG, warpgroup WG waits for pp_bars[WG] before issuing its GEMMs of a tile and
    signals pp_bars[1 - WG] right after issuing them, so the two warpgroups alternate on the
    tensor cores (one does softmax while the other's GEMMs run).

    Both warpgroups iterate over the CTA's key tiles 0..n_tiles-1 (so both arrive once per
    tile on every empty barrier and take the same number of ping-pong turns); only the split
    between unmasked tiles [0, n_full) and masked tiles [n_full, n_tiles) is per warpgroup.
    """
    WG_M: gl.constexpr = q_smem.type.shape[1]
    s_layout: gl.constexpr = wgmma_layout(BLOCK_N)
    o_layout: gl.constexpr = wgmma_layout(HEAD_D)
    p_layout: gl.constexpr = operand_layout(o_layout)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    my_row = q_row + WG * WG_M
    my_pos = q_pos + WG * WG_M
    qk_scale = sm_scale * LOG2E
    q_tile = q_smem.index(WG)

    m_i = gl.full([WG_M], float("-inf"), gl.float32, row_s)
    l_i = gl.zeros([WG_M], gl.float32, row_s)
    acc = gl.zeros([WG_M, HEAD_D], gl.float32, o_layout)
    s = gl.zeros([WG_M, BLOCK_N], gl.float32, s_layout)

    mbarrier.wait(q_bars.index(WG), 0)
    s, acc, p_op, m_i, l_i, n_own = _ws_tile(
        q_tile,
        k_smem,
        v_smem,
        k_ready,
        v_ready,
        k_empty,
        v_empty,
        pp_bars,
        s,
        acc,
        m_i,
        l_i,
        qk_scale,
        my_pos,
        seq_len,
        n_tiles,
        WG,
        NUM_STAGES,
        PINGPONG,
        CAUSAL,
        TAIL,
        s_layout,
        row_o,
        p_layout,
    )
    acc = _ws_last_pv(
        v_smem,
        v_ready,
        v_empty,
        k_ready,
        k_empty,
        p_op,
        acc,
        n_own,
        n_tiles,
        NUM_STAGES,
        CAUSAL and not PINGPONG and BLOCK_N < 2 * WG_M,
    )
    _epilogue(
        acc,
        m_i,
        l_i,
        q_tile,
        o_desc,
        o_ptr,
        lse_ptr,
        my_row,
        my_pos,
        seq_len,
        WG_M,
        HEAD_D,
        TAIL,
        o_layout,
        s_layout,
    )


@gluon.jit
def _ws_consumer0(
    args,
    BLOCK_N: gl.constexpr,
    HEAD_D: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    PINGPONG: gl.constexpr,
    CAUSAL: gl.constexpr,
    TAIL: gl.constexpr,
):
    """Default partition: consumer warpgroup 0."""
    _ws_consumer(*args, 0, BLOCK_N, HEAD_D, NUM_STAGES, PINGPONG, CAUSAL, TAIL)


@gluon.jit
def _ws_consumer1(
    args,
    BLOCK_N: gl.constexpr,
    HEAD_D: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    PINGPONG: gl.constexpr,
    CAUSAL: gl.constexpr,
    TAIL: gl.constexpr,
):
    """Worker partition 0: consumer warpgroup 1."""
    _ws_consumer(*args, 1, BLOCK_N, HEAD_D, NUM_STAGES, PINGPONG, CAUSAL, TAIL)


@gluon.jit
def attn_fwd_ws(
    q_desc,
    k_desc,
    v_desc,
    o_desc,
    o_ptr,
    lse_ptr,
    seq_len,
    kv_group,
    sm_scale,
    BLOCK_N: gl.constexpr,
    HEAD_D: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    PINGPONG: gl.constexpr,
    CAUSAL: gl.constexpr,
    TAIL: gl.constexpr,
    CONSUMER_REGS: gl.constexpr,
    LPT: gl.constexpr = False,
):
    """Warp-specialized FA3-style forward; q_desc/o_desc blocks are [64, D] (one per
    consumer warpgroup), a CTA covers 128 query rows. Launch with num_warps=4 on the grid
    (cdiv(S, 128), B * H). Query head bh reads K/V head bh // kv_group (GQA). CAUSAL: top-left
    aligned mask, query tiles longest first. TAIL: S % 128 != 0 (masked keys, masked O/LSE
    stores; o_ptr is only used then)."""
    WG_M: gl.constexpr = q_desc.block_type.shape[0]
    BLOCK_M: gl.constexpr = 2 * WG_M
    gl.static_assert(WG_M == 64, "one consumer warpgroup = 64 query rows")
    gl.static_assert(BLOCK_M % BLOCK_N == 0, "the diagonal must fall on key-tile edges")
    dtype: gl.constexpr = q_desc.dtype
    if LPT:
        # Grid (B H, tiles): the hardware dispatches x fastest, so every head's longest
        # query tile goes first, the one-tile ones last (longest processing time first).
        bh = gl.program_id(0)
        pid_m = gl.num_programs(1) - 1 - gl.program_id(1)
    else:
        pid_m = gl.program_id(0)
        if CAUSAL:
            # Longest first within a head: program 0 takes the last (largest) query tile.
            pid_m = gl.num_programs(0) - 1 - pid_m
        bh = gl.program_id(1)
    q_pos = pid_m * BLOCK_M
    q_row = bh * seq_len + q_pos
    kv_row = (bh // kv_group) * seq_len
    # Key tiles of this CTA: all of them, or (CAUSAL) up to the one holding key
    # min(q_pos + BLOCK_M, seq_len) - 1 (the last key its last stored row keeps).
    if CAUSAL:
        n_tiles = gl.cdiv(gl.minimum(q_pos + BLOCK_M, seq_len), BLOCK_N)
    else:
        n_tiles = gl.cdiv(seq_len, BLOCK_N)

    q_smem = gl.allocate_shared_memory(dtype, [2, WG_M, HEAD_D], q_desc.layout)
    k_smem, v_smem, k_ready, v_ready, k_empty, v_empty = kv_ring(k_desc, v_desc, NUM_STAGES)
    q_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    pp_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(q_bars.index(i), count=1)
        mbarrier.init(pp_bars.index(i), count=1)
    if PINGPONG:
        # Warpgroup 0 gets the first turn on the tensor cores.
        mbarrier.arrive(pp_bars.index(0), count=1)

    cargs = (
        o_desc,
        o_ptr,
        q_smem,
        k_smem,
        v_smem,
        q_bars,
        k_ready,
        v_ready,
        k_empty,
        v_empty,
        pp_bars,
        lse_ptr,
        q_row,
        q_pos,
        seq_len,
        n_tiles,
        sm_scale,
    )
    gl.warp_specialize(
        [
            (_ws_consumer0, (cargs, BLOCK_N, HEAD_D, NUM_STAGES, PINGPONG, CAUSAL, TAIL)),
            (_ws_consumer1, (cargs, BLOCK_N, HEAD_D, NUM_STAGES, PINGPONG, CAUSAL, TAIL)),
            (
                _ws_producer,
                (
                    q_desc,
                    k_desc,
                    v_desc,
                    q_smem,
                    k_smem,
                    v_smem,
                    q_bars,
                    k_ready,
                    v_ready,
                    k_empty,
                    v_empty,
                    q_row,
                    kv_row,
                    n_tiles,
                    BLOCK_N,
                    NUM_STAGES,
                ),
            ),
        ],
        [4, 1],
        [CONSUMER_REGS, 24],
    )


class Base:
    """A bound buffer (raw pointer or DLPack object) as TMA descriptors and Triton's launcher
    take it: an address and a torch type."""

    def __init__(self, ptr: int, dtype):
        self._ptr, self.dtype = ptr, dtype

    def data_ptr(self) -> int:
        return self._ptr


def desc(t, shape: list, block: list, dtype) -> TensorDescriptor:
    """A TMA descriptor over the packed 2-D [rows, D] (or 1-D [n]) view of buffer ``t``."""
    layout = gl.NVMMASharedLayout.get_default_for(block, GL_TYPES[dtype])
    strides = [shape[1], 1] if len(shape) == 2 else [1]
    return TensorDescriptor(Base(t.data_ptr(), dtype), shape, strides, block, layout)


def _encoded(k, args: tuple):
    """A launch of compiled kernel ``k`` on arguments ``args`` with its TMA descriptors
    encoded once (Triton's launcher encodes every descriptor on every call: ~2-3 us each,
    5-8 per kernel here), or None where Triton's launcher is not laid out as in 3.6 (then
    ``k.run`` does the work)."""
    try:
        from triton.backends.nvidia.driver import make_tensordesc_arg

        run = k.run
        cells = dict(
            zip(run.launch.__code__.co_freevars, (c.cell_contents for c in run.launch.__closure__))
        )
        raw, idx, meta = cells["launcher"], cells["tensordesc_indices"], cells["tensordesc_meta"]
        if run.global_scratch_size or run.profile_scratch_size or run.num_ctas != 1:
            return None
    except (ImportError, AttributeError, KeyError, TypeError):
        return None
    final, t = [], 0
    for i, a in enumerate(args):
        if i in idx:
            final.extend(make_tensordesc_arg(a, meta[t]))
            t += 1
        else:
            final.append(a)
    head = (
        k.function,
        run.launch_cooperative_grid,
        run.launch_pdl,
        None,
        None,
        k.packed_metadata,
        None,
        None,
        None,
    )

    def launch(g, stream):
        raw(*g, stream, *head, *final)

    return launch


def launcher(fn, grid: tuple, args: tuple, consts: dict):
    """``fn[grid](*args, **consts)`` as a callable on a stream. The first call goes through
    Triton's JIT entry (compiling, or finding the kernel in its cache); later ones call the
    compiled kernel's C launcher directly with the TMA descriptors encoded once -- the JIT's
    binder and its descriptor handling cost more than the kernel at S=1024 (H100: 16.9 us
    per forward launch through the JIT, 5.6 us direct; docs/design/attention.md)."""
    tail = tuple(consts[n] for n in fn.arg_names if n in consts)
    g = tuple(grid) + (1,) * (3 - len(grid))
    compiled = []

    def launch(stream=None):
        if not compiled:
            with torch.cuda.ExternalStream(stream) if stream else _nullcontext():
                k = fn[grid](*args, **consts)
            direct = _encoded(k, tuple(args) + tail)
            compiled.append(
                direct
                or (
                    lambda g, stream: k.run(
                        *g, stream, k.function, k.packed_metadata, None, None, None, *args, *tail
                    )
                )
            )
            return
        if stream is None:
            stream = torch._C._cuda_getCurrentRawStream(torch.cuda.current_device())
        compiled[0](g, stream)

    return launch


def fwd_descs(q, k, v, o, dims: tuple, block_n: int) -> tuple:
    """The forward's TMA descriptors: Q and O in [64, D] blocks (one per consumer
    warpgroup), K and V in [block_n, D] blocks, over the packed 2-D [rows, D] views."""
    B, H, HKV, S, D, dtype = dims
    nq, nk = B * H * S, B * HKV * S
    return (
        desc(q, [nq, D], [ROWS // 2, D], dtype),
        desc(k, [nk, D], [block_n, D], dtype),
        desc(v, [nk, D], [block_n, D], dtype),
        desc(o, [nq, D], [ROWS // 2, D], dtype),
    )


def prepare(
    q,
    k,
    v,
    o,
    stats,
    dims: tuple,
    scale: float,
    block_n: int,
    stages: int,
    pingpong: bool,
    causal: bool,
    lpt: bool = False,
):
    """The forward's launch as a callable (on a stream), its TMA descriptors built once: q /
    k / v / o contiguous [B, H(kv), S, D] buffers of torch type ``dims[5]``, stats float32
    [B, H, S] (written); dims = (B, H, H_kv, S, D, dtype). It holds the buffers' addresses,
    not the buffers."""
    B, H, HKV, S, D, dtype = dims
    args = fwd_descs(q, k, v, o, dims, block_n) + (
        Base(o.data_ptr(), dtype),
        Base(stats.data_ptr(), torch.float32),
        S,
        H // HKV,
        scale,
    )
    consts = dict(
        BLOCK_N=block_n,
        HEAD_D=D,
        NUM_STAGES=stages,
        PINGPONG=pingpong,
        CAUSAL=causal,
        TAIL=S % ROWS != 0,
        CONSUMER_REGS=CONSUMER_REGS,
        LPT=lpt,
        num_warps=4,
        maxnreg=MAXNREG,
    )
    tiles = triton.cdiv(S, ROWS)
    return launcher(attn_fwd_ws, (B * H, tiles) if lpt else (tiles, B * H), args, consts)
