"""The persistent Gluon forward (``GLUON=1, PERSIST=1``; GPU only, Hopper): the kernel of
``_gluon_kernels`` turned into one program per SM that walks a list of query tiles.

Same math, partitions and ring as ``_gluon_kernels`` (read it first). What changes:
- Grid: min(tiles, SMs) programs. Tile t (of B H x cdiv(S, 128)) is query tile
  n_m - 1 - t // (B H) of head t % (B H): every head's longest tile first (LPT). Program p
  takes tiles p, 2P - 1 - p, 2P + p, 4P - 1 - p, ... (P programs; a snake over the rounds,
  so the program with a round's longest tile gets the next round's shortest).
- The producer warp moves to the next tile as soon as it has queued this tile's K / V:
  it waits on ``q_empty`` (both consumers past their last Q K^T) and loads the next Q
  while the consumers finish P V and the epilogue; the next tile's first K / V land in the
  ring slots as they free up. The ring's use count (``base``) runs on across tiles.
- O goes out through its own shared buffer (not Q's), so the next Q can land during the
  epilogue; a warpgroup waits for its previous TMA store only before it reuses the buffer.
Rules (``engine._check_gluon``): no key / query tail (S % 128 == 0), no PINGPONG.
"""

from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from ._gluon_kernels import (
    CONSUMER_REGS,
    LN2,
    LOG2E,
    MAXNREG,
    ROWS,
    Base,
    _ws_last_pv,
    _ws_tile,
    fwd_descs,
    kv_ring,
    launcher,
    operand_layout,
    stream_kv,
    wgmma_layout,
)


def smem_bytes(d: int, block_n: int, stages: int) -> int:
    """Shared memory of one program: Q and O tiles of both warpgroups and the K / V ring."""
    return 2 * (2 * ROWS * d + 2 * stages * block_n * d)


@gluon.jit
def _tile(r, n_m, BH, BLOCK_M: gl.constexpr, CAUSAL: gl.constexpr, seq_len, BLOCK_N: gl.constexpr):
    """This program's r-th tile: (valid, bh, q_pos, n_tiles) -- see the module docstring."""
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    t = r * nprog + pid + (r % 2) * (nprog - 1 - 2 * pid)
    bh = t % BH
    q_pos = (n_m - 1 - t // BH) * BLOCK_M
    if CAUSAL:
        n_tiles = gl.cdiv(gl.minimum(q_pos + BLOCK_M, seq_len), BLOCK_N)
    else:
        n_tiles = gl.cdiv(seq_len, BLOCK_N)
    return t < n_m * BH, bh, q_pos, n_tiles


@gluon.jit
def _p_producer(
    q_desc,
    k_desc,
    v_desc,
    q_smem,
    k_smem,
    v_smem,
    q_bars,
    q_empty,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    seq_len,
    kv_group,
    n_m,
    BH,
    BLOCK_N: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
):
    """Producer warp: per tile, both Q halves (each once its consumer released the last
    one), then the tile's K_j, V_j into the ring."""
    WG_M: gl.constexpr = q_desc.block_type.shape[0]
    base = 0
    count = 0
    for r in range(gl.cdiv(n_m * BH, gl.num_programs(0))):
        valid, bh, q_pos, n_tiles = _tile(r, n_m, BH, 2 * WG_M, CAUSAL, seq_len, BLOCK_N)
        if valid:
            q_row = bh * seq_len + q_pos
            for wg in gl.static_range(2):
                mbarrier.wait(q_empty.index(wg), (count & 1) ^ 1)
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
                (bh // kv_group) * seq_len,
                n_tiles,
                BLOCK_N,
                NUM_STAGES,
                base,
            )
            base += n_tiles
            count += 1


@gluon.jit
def _p_consumer(
    o_desc,
    q_smem,
    o_smem,
    k_smem,
    v_smem,
    q_bars,
    q_empty,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    lse_ptr,
    seq_len,
    n_m,
    BH,
    sm_scale,
    WG: gl.constexpr,
    BLOCK_N: gl.constexpr,
    HEAD_D: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
):
    """Consumer warpgroup WG: ``_gluon_kernels._ws_consumer`` per tile (no PINGPONG, no
    TAIL), Q released after the last Q K^T, O stored through o_smem[WG]."""
    WG_M: gl.constexpr = q_smem.type.shape[1]
    dtype: gl.constexpr = o_desc.dtype
    s_layout: gl.constexpr = wgmma_layout(BLOCK_N)
    o_layout: gl.constexpr = wgmma_layout(HEAD_D)
    p_layout: gl.constexpr = operand_layout(o_layout)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    qk_scale = sm_scale * LOG2E
    q_tile = q_smem.index(WG)
    o_tile = o_smem.index(WG)
    base = 0
    count = 0
    for r in range(gl.cdiv(n_m * BH, gl.num_programs(0))):
        valid, bh, q_pos, n_tiles = _tile(r, n_m, BH, 2 * WG_M, CAUSAL, seq_len, BLOCK_N)
        if valid:
            my_pos = q_pos + WG * WG_M
            my_row = bh * seq_len + my_pos
            m_i = gl.full([WG_M], float("-inf"), gl.float32, row_s)
            l_i = gl.zeros([WG_M], gl.float32, row_s)
            acc = gl.zeros([WG_M, HEAD_D], gl.float32, o_layout)
            s = gl.zeros([WG_M, BLOCK_N], gl.float32, s_layout)
            mbarrier.wait(q_bars.index(WG), count & 1)
            s, acc, p_op, m_i, l_i, n_own = _ws_tile(
                q_tile,
                k_smem,
                v_smem,
                k_ready,
                v_ready,
                k_empty,
                v_empty,
                q_bars,
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
                False,
                CAUSAL,
                False,
                s_layout,
                row_o,
                p_layout,
                base,
            )
            # every Q K^T of this tile has retired: the producer may load the next Q
            mbarrier.arrive(q_empty.index(WG), count=1)
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
                CAUSAL and BLOCK_N < 2 * WG_M,
                base,
            )
            l_o = gl.convert_layout(l_i, row_o)
            o = acc / gl.expand_dims(l_o, 1)
            rows = gl.arange(0, WG_M, layout=row_s)
            gl.store(lse_ptr + my_row + rows, (m_i + gl.log2(l_i)) * LN2)
            tma.store_wait(pendings=0)  # the previous tile's O has left o_tile
            o_tile.store(o.to(dtype))
            fence_async_shared()
            tma.async_copy_shared_to_global(o_desc, [my_row, 0], o_tile)
            base += n_tiles
            count += 1
    tma.store_wait(pendings=0)


@gluon.jit
def _p_consumer0(
    args,
    BLOCK_N: gl.constexpr,
    HEAD_D: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
):
    """Default partition: consumer warpgroup 0."""
    _p_consumer(*args, 0, BLOCK_N, HEAD_D, NUM_STAGES, CAUSAL)


@gluon.jit
def _p_consumer1(
    args,
    BLOCK_N: gl.constexpr,
    HEAD_D: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
):
    """Worker partition 0: consumer warpgroup 1."""
    _p_consumer(*args, 1, BLOCK_N, HEAD_D, NUM_STAGES, CAUSAL)


@gluon.jit
def attn_fwd_persistent(
    q_desc,
    k_desc,
    v_desc,
    o_desc,
    lse_ptr,
    seq_len,
    kv_group,
    sm_scale,
    n_m,
    BH,
    BLOCK_N: gl.constexpr,
    HEAD_D: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
    CONSUMER_REGS: gl.constexpr,
):
    """Persistent warp-specialized forward: grid (min(n_m B H, SMs),), num_warps=4; q_desc /
    o_desc blocks [64, D]; n_m = S / 128 query tiles per head, BH = B H."""
    WG_M: gl.constexpr = q_desc.block_type.shape[0]
    gl.static_assert(WG_M == 64, "one consumer warpgroup = 64 query rows")
    gl.static_assert((2 * WG_M) % BLOCK_N == 0, "the diagonal must fall on key-tile edges")
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [2, WG_M, HEAD_D], q_desc.layout)
    o_smem = gl.allocate_shared_memory(dtype, [2, WG_M, HEAD_D], o_desc.layout)
    k_smem, v_smem, k_ready, v_ready, k_empty, v_empty = kv_ring(k_desc, v_desc, NUM_STAGES)
    q_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(q_bars.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=1)
    cargs = (
        o_desc,
        q_smem,
        o_smem,
        k_smem,
        v_smem,
        q_bars,
        q_empty,
        k_ready,
        v_ready,
        k_empty,
        v_empty,
        lse_ptr,
        seq_len,
        n_m,
        BH,
        sm_scale,
    )
    gl.warp_specialize(
        [
            (_p_consumer0, (cargs, BLOCK_N, HEAD_D, NUM_STAGES, CAUSAL)),
            (_p_consumer1, (cargs, BLOCK_N, HEAD_D, NUM_STAGES, CAUSAL)),
            (
                _p_producer,
                (
                    q_desc,
                    k_desc,
                    v_desc,
                    q_smem,
                    k_smem,
                    v_smem,
                    q_bars,
                    q_empty,
                    k_ready,
                    v_ready,
                    k_empty,
                    v_empty,
                    seq_len,
                    kv_group,
                    n_m,
                    BH,
                    BLOCK_N,
                    NUM_STAGES,
                    CAUSAL,
                ),
            ),
        ],
        [4, 1],
        [CONSUMER_REGS, 24],
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
    causal: bool,
    num_sms: int,
):
    """As ``_gluon_kernels.prepare`` (S a multiple of 128), on min(tiles, num_sms)
    persistent programs."""
    B, H, HKV, S, D, dtype = dims
    n_m = triton.cdiv(S, ROWS)
    args = fwd_descs(q, k, v, o, dims, block_n) + (
        Base(stats.data_ptr(), torch.float32),
        S,
        H // HKV,
        scale,
        n_m,
        B * H,
    )
    consts = dict(
        BLOCK_N=block_n,
        HEAD_D=D,
        NUM_STAGES=stages,
        CAUSAL=causal,
        CONSUMER_REGS=CONSUMER_REGS,
        num_warps=4,
        maxnreg=MAXNREG,
    )
    return launcher(attn_fwd_persistent, (min(n_m * B * H, num_sms),), args, consts)
