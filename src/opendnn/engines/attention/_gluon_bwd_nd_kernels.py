"""Gluon kernels of the attention engine's nondeterministic backward (``GLUON=1,
DQ_ATOMIC=1`` on an ``sdpa_backward`` node; GPU only, Hopper): the deterministic dK / dV
kernel of ``_gluon_bwd_kernels`` also computing dQ, so that P and dP are computed once --
5 GEMMs of work where the deterministic pair does 7 (FlashAttention 3's layout).

Math (as ``_gluon_bwd_kernels``; c = attn_scale log2 e):
    dQ_i = attn_scale sum_j dS_ij K_j   over every key tile j, each program adding its own
the key tiles' share into a float32 workspace W ([B H S, D], zeroed by the delta kernel);
``attn_bwd_dq_convert`` writes dQ = attn_scale W in Q's type after. The order of the adds
across programs is the hardware's: dQ's bits may differ between runs (NONDETERMINISTIC);
dK and dV are deterministic.

``attn_bwd_dkdvq``: grid (S / 128, B H_kv), two consumer warpgroups of 64 keys and a TMA
producer warp (``_dkdv_producer``). Per query tile (64 rows), each consumer warpgroup w:
    dK / dV step issued (``_dkdv_issue``); dS_w^T (64 keys x 64 queries, Q's type) stored
    into a double-buffered shared ring while dK runs; arrive on ``ds_ready``; retire;
    wait for the other warpgroup's arrive; then its half of the tile's dQ columns over all
    128 keys: dQ[:, w D/2 ..] = dS_0 K_0[:, w D/2 ..] + dS_1 K_1[:, w D/2 ..]
    (A: the stored tiles transposed; B: the resident K tiles), through a float32 shared
    tile into W by one TMA reduce-add (``cp.reduce.async.bulk.tensor .add.f32``),
    asynchronous: the next step starts while it drains.
Double buffering dS makes one barrier enough: a warpgroup writing buffer s at step it has
passed ``ds_ready`` of step it-1, which the other warpgroup arrived on after retiring its
dQ wgmma of step it-2, the buffer's last reader. At head dim 128 the dQ accumulator reuses
S^T's registers (S^T is issued with use_acc=False). Before a warpgroup's K tile takes its
dK, the two meet once more (``k_free``): the other's last dQ wgmma reads it.

H100, B=4 H=16 bf16, S 1024-16384 (docs/design/attention.md): 1.02-1.09x
the deterministic pair at head dim 64 (4 stages), 1.05-1.16x at 128 (2 stages; 0.97x at
S=1024 causal). Storing dS^T while dK runs, rather than after, turned head dim 64 from
0.97-0.99x into a gain: the dQ step's chain (barrier, wgmma, shared store, reduce) is
latency on a ~1 us step there.
W costs 4 B H S D bytes of workspace (512 MiB at S=16384, D=128; the pair needs 4 MiB).
Gluon 3.6 exposes no TMA reduce; its builder does (``_gluon_bwd_kernels.tma_reduce_add``).
The per-step work (``_nd_step``) and the consumer are ``_gluon_bwd_kernels``' (ND=True).
"""

from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

from ._gluon_bwd_kernels import (
    CONSUMER_REGS,
    MAXNREG,
    PRODUCER_REGS,
    ROWS,
    WG_ROWS,
    Base,
    _dkdv_buffers,
    _dkdv_consumer0,
    _dkdv_consumer1,
    _dkdv_producer,
    attn_bwd_delta,
    desc,
    launcher,
)


@gluon.jit
def attn_bwd_dq_convert(acc_ptr, dq_ptr, n_rows, scale, HEAD_D: gl.constexpr, BLOCK: gl.constexpr):
    """dQ = scale x W in dQ's type, BLOCK rows of the 2-D [B H S, D] views a program."""
    TPW_D: gl.constexpr = HEAD_D // 4
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [32 // TPW_D, TPW_D], [4, 1], [1, 0])
    rows = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, layout))
    offs = gl.expand_dims(rows * HEAD_D, 1) + gl.expand_dims(cols, 0)
    mask = gl.expand_dims(rows < n_rows, 1)
    acc = gl.load(acc_ptr + offs, mask=mask, other=0.0)
    gl.store(dq_ptr + offs, (acc * scale).to(dq_ptr.dtype.element_ty), mask=mask)


@gluon.jit
def attn_bwd_dkdvq(
    q_desc,
    do_desc,
    lse_desc,
    dl_desc,
    k_desc,
    v_desc,
    dk_desc,
    dv_desc,
    dq_desc,
    seq_len,
    kv_group,
    sm_scale,
    HEAD_D: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
    CONSUMER_REGS: gl.constexpr,
    PRODUCER_REGS: gl.constexpr,
):
    """dK, dV of 128 keys of one K / V head and their dQ share added into W (grid (S / 128,
    B H_kv), num_warps=4). q / do blocks [64, D], lse / delta [64], k / v / dk / dv
    [64, D], dq_desc: W, float32 blocks [64, D / 2]."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    WG_N: gl.constexpr = k_desc.block_type.shape[0]
    gl.static_assert(WG_N == 64, "one consumer warpgroup = 64 keys")
    gl.static_assert(BLOCK_M == 64, "one query tile = one wgmma M of dQ")
    dtype: gl.constexpr = q_desc.dtype
    k_pos = gl.program_id(0) * (2 * WG_N)
    bh_kv = gl.program_id(1)
    kv_row = bh_kv * seq_len + k_pos
    n_q = seq_len // BLOCK_M
    if CAUSAL:
        q_first = k_pos // BLOCK_M
    else:
        q_first = 0
    q_smem, do_smem, lse_smem, dl_smem, k_smem, v_smem, kv_bars, q_ready, do_ready, empty = (
        _dkdv_buffers(q_desc, do_desc, lse_desc, dl_desc, k_desc, v_desc, NUM_STAGES)
    )
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([WG_N, BLOCK_M], dtype)
    ds_smem = gl.allocate_shared_memory(dtype, [4, WG_N, BLOCK_M], ds_layout)
    dq_smem = gl.allocate_shared_memory(gl.float32, [2] + dq_desc.block_type.shape, dq_desc.layout)
    ds_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    k_free = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(ds_ready.index(i), count=2)
    mbarrier.init(k_free.index(0), count=2)
    nd = (dq_desc, ds_smem, dq_smem, ds_ready, k_free.index(0), bh_kv, seq_len)
    cargs = (
        dk_desc,
        dv_desc,
        q_smem,
        do_smem,
        lse_smem,
        dl_smem,
        k_smem,
        v_smem,
        kv_bars,
        q_ready,
        do_ready,
        empty,
        kv_row,
        k_pos,
        kv_group,
        q_first,
        n_q,
        sm_scale,
        nd,
    )
    gl.warp_specialize(
        [
            (_dkdv_consumer0, (cargs, HEAD_D, NUM_STAGES, CAUSAL, True)),
            (_dkdv_consumer1, (cargs, HEAD_D, NUM_STAGES, CAUSAL, True)),
            (
                _dkdv_producer,
                (
                    q_desc,
                    do_desc,
                    lse_desc,
                    dl_desc,
                    k_desc,
                    v_desc,
                    q_smem,
                    do_smem,
                    lse_smem,
                    dl_smem,
                    k_smem,
                    v_smem,
                    kv_bars,
                    q_ready,
                    do_ready,
                    empty,
                    kv_row,
                    bh_kv,
                    seq_len,
                    kv_group,
                    q_first,
                    n_q,
                    NUM_STAGES,
                ),
            ),
        ],
        [4, 1],
        [CONSUMER_REGS, PRODUCER_REGS],
    )


def smem_bytes(d: int, stages: int) -> int:
    """Shared memory of ``attn_bwd_dkdvq`` (2-byte types, 64-row query tiles): the Q / dO
    ring with its Stats / delta rows, K / V, the dS ring, the two float32 dQ tiles and the
    barriers (ptxas: 116160 bytes at head dim 64 with 2 stages, 198080 at 128)."""
    return (
        stages * WG_ROWS * (4 * d + 8)
        + 8 * WG_ROWS * d
        + 8 * WG_ROWS * WG_ROWS
        + 4 * WG_ROWS * d
        + 512
    )


def prepare(
    q,
    k,
    v,
    o,
    do,
    stats,
    dq,
    dk,
    dv,
    delta,
    acc,
    dims: tuple,
    scale: float,
    stages: int,
    causal: bool,
    launch=launcher,
):
    """The nondeterministic backward's three launches (delta + zeroing W, dK / dV / dQ into
    W, dQ from W) as one callable on a stream, their TMA descriptors built once. q / o / do
    / dq packed [B, H, S, D], k / v / dk / dv packed [B, H_kv, S, D] buffers of torch type
    dims[5]; stats (read), delta (written) float32 [B, H, S]; acc: W, float32 [B H S, D],
    128-byte aligned; dims = (B, H, H_kv, S, D, dtype). Holds addresses, not buffers."""
    B, H, HKV, S, D, dtype = dims
    nq, nk, f32, wg = B * H * S, B * HKV * S, torch.float32, WG_ROWS

    def rows(t, n, block):
        return desc(t, [n, D], [block, D], dtype)

    args = (
        rows(q, nq, wg),
        rows(do, nq, wg),
        desc(stats, [nq], [wg], f32),
        desc(delta, [nq], [wg], f32),
        rows(k, nk, wg),
        rows(v, nk, wg),
        rows(dk, nk, wg),
        rows(dv, nk, wg),
        desc(acc, [nq, D], [wg, D // 2], f32),
        S,
        H // HKV,
        scale,
    )
    w = Base(acc.data_ptr(), f32)
    runs = [
        launch(
            attn_bwd_delta,
            (triton.cdiv(nq, 64),),
            (
                Base(o.data_ptr(), dtype),
                Base(do.data_ptr(), dtype),
                Base(delta.data_ptr(), f32),
                w,
                nq,
            ),
            dict(HEAD_D=D, BLOCK=64, ZERO=True, num_warps=4),
        ),
        launch(
            attn_bwd_dkdvq,
            (S // ROWS, B * HKV),
            args,
            dict(
                HEAD_D=D,
                NUM_STAGES=stages,
                CAUSAL=causal,
                CONSUMER_REGS=CONSUMER_REGS,
                PRODUCER_REGS=PRODUCER_REGS,
                num_warps=4,
                maxnreg=MAXNREG,
            ),
        ),
        launch(
            attn_bwd_dq_convert,
            (triton.cdiv(nq, 64),),
            (w, Base(dq.data_ptr(), dtype), nq, scale),
            dict(HEAD_D=D, BLOCK=64, num_warps=4),
        ),
    ]

    def run(stream=None):
        for r in runs:
            r(stream)

    run.runs = runs  # each launch on its own, to time the kernels apart
    return run
