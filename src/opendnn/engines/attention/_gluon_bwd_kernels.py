"""Gluon kernels of the attention engine's warp-specialized backward (``GLUON=1`` on an
``sdpa_backward`` node; GPU only, Hopper), deterministic: no atomics. The forward's
structure (``_gluon_kernels``): a TMA producer warp, two consumer warpgroups of 64 rows with
asynchronous wgmma, mbarrier rings.

Math (base 2, c = attn_scale log2 e, lse2 = Stats log2 e; P recomputed, never stored):
    delta_i = sum_d dO_id O_id                                  (``attn_bwd_delta``)
    P_ij = 2^(c s_ij - lse2_i)  (0 where masked),  dP = dO V^T,  dS = P o (dP - delta)
    dV = P^T dO,   dK = attn_scale dS^T Q,   dQ = attn_scale dS K
P and dS enter the second GEMMs in Q's type (as ``_bwd_kernels`` and FlashAttention 2/3).

Every tensor is a 2-D [rows, D] view of a packed B, H, S, D buffer (one rank-2 TMA
descriptor each), Stats and delta flat float32 [B H S] vectors (rank-1 descriptors: a query
tile's row vector is one [BLOCK_M] box). S % 128 == 0: no tails (the engine's rule).

``attn_bwd_dkdv``: one program per 128 keys of one K / V head, grid (S / 128, B H_kv). Two
consumer warpgroups own 64 keys each (their dK, dV accumulators, 2 x 64 fp32 registers per
thread at head dim 128, stay in registers; 128 keys would need 256) and walk the same query
tiles of every head of the GQA group, per tile:
    S^T = K Q^T and dP^T = V dO^T (async, together); P^T while dP^T runs;
    dV += P^T dO issued before dP^T is waited for; dS^T; dK += dS^T Q; retire, free slot.
The producer warp loads K / V once, then Q + its Stats row (``q_ready``) and dO + its delta
row (``do_ready``) into a ring; ``empty`` (count 2) takes one arrive per consumer. Causal
(top-left): query tiles from the key tile's diagonal on; the 128 / BLOCK_M tiles across the
diagonal masked, the rest unmasked. With ND=True (``_gluon_bwd_nd_kernels.attn_bwd_dkdvq``,
nondeterministic) each step also adds dQ into a float32 workspace: ``_nd_step`` stores dS^T
to shared memory, and after both warpgroups have, each adds half the dQ columns by a TMA
reduce-add (``tma_reduce_add``).

``attn_bwd_dq``: one program per 128 query rows of one head, grid (S / 128, B H): the
forward's kernel with dQ += dS K_j in place of O += P V_j; K_j, V_j streamed through the
ring by ``stream_kv``; the dQ wgmma of tile j stays in flight while S_{j+1}, dP_{j+1} are
issued. It recomputes P and dP as the deterministic split does (3.5 x 4 B H S^2 D FLOPs of
work for the 2.5 x counted). Causal query tiles run longest first.
"""

from __future__ import annotations

import torch
import triton
from triton._C.libtriton import ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ._gluon_kernels import (
    CONSUMER_REGS,
    LOG2E,
    MAXNREG,
    ROWS,
    Base,
    desc,
    kv_ring,
    launcher,
    operand_layout,
    stream_kv,
    wgmma_layout,
)

PRODUCER_REGS = 24  # per producer thread (2 x 128 x 240 + 128 x 24 <= 64K)
WG_ROWS = 64  # keys (dK / dV) or query rows (dQ) per consumer warpgroup


# --------------------------------------------------------------------------------------------
# Delta kernel: delta[r] = sum_d dO[r, d] O[r, d] (fp32), rows of the 2-D [B H S, D] view
# --------------------------------------------------------------------------------------------
@gluon.jit
def attn_bwd_delta(
    o_ptr,
    do_ptr,
    delta_ptr,
    acc_ptr,
    n_rows,
    HEAD_D: gl.constexpr,
    BLOCK: gl.constexpr,
    ZERO: gl.constexpr,
):
    """ZERO: also zero the rows' float32 [rows, D] dQ accumulator at acc_ptr (the
    nondeterministic backward's; unused otherwise)."""
    TPW_D: gl.constexpr = HEAD_D // 8
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW_D, TPW_D], [4, 1], [1, 0])
    rows = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, layout))
    offs = gl.expand_dims(rows * HEAD_D, 1) + gl.expand_dims(cols, 0)
    mask = gl.expand_dims(rows < n_rows, 1)
    o = gl.load(o_ptr + offs, mask=mask, other=0.0).to(gl.float32)
    do = gl.load(do_ptr + offs, mask=mask, other=0.0).to(gl.float32)
    gl.store(delta_ptr + rows, gl.sum(o * do, axis=1), mask=rows < n_rows)
    if ZERO:
        gl.store(acc_ptr + offs, gl.zeros([BLOCK, HEAD_D], gl.float32, layout), mask=mask)


# --------------------------------------------------------------------------------------------
# Kernel A: dK, dV
# --------------------------------------------------------------------------------------------
@gluon.jit
def _dkdv_producer(
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
    NUM_STAGES: gl.constexpr,
):
    """Producer warp: own K / V tiles of both consumers, then (head gi of the group, query
    tile qi) for qi in [q_first, n_q): Q + lse row -> q_ready, dO + delta row -> do_ready."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    WG_N: gl.constexpr = k_desc.block_type.shape[0]
    kv_bytes: gl.constexpr = k_desc.block_type.nbytes + v_desc.block_type.nbytes
    q_bytes: gl.constexpr = q_desc.block_type.nbytes + lse_desc.block_type.nbytes
    do_bytes: gl.constexpr = do_desc.block_type.nbytes + dl_desc.block_type.nbytes
    for wg in gl.static_range(2):
        mbarrier.expect(kv_bars.index(wg), kv_bytes)
        tma.async_copy_global_to_shared(
            k_desc, [kv_row + wg * WG_N, 0], kv_bars.index(wg), k_smem.index(wg)
        )
        tma.async_copy_global_to_shared(
            v_desc, [kv_row + wg * WG_N, 0], kv_bars.index(wg), v_smem.index(wg)
        )
    it = 0
    for gi in range(kv_group):
        h_row = (bh_kv * kv_group + gi) * seq_len  # first row of query head h
        for qi in range(q_first, n_q):
            slot = it % NUM_STAGES
            phase = (it // NUM_STAGES) & 1
            # Inverted phase: the first pass over a fresh ring does not wait.
            mbarrier.wait(empty.index(slot), phase ^ 1)
            mbarrier.expect(q_ready.index(slot), q_bytes)
            tma.async_copy_global_to_shared(
                q_desc, [h_row + qi * BLOCK_M, 0], q_ready.index(slot), q_smem.index(slot)
            )
            tma.async_copy_global_to_shared(
                lse_desc, [h_row + qi * BLOCK_M], q_ready.index(slot), lse_smem.index(slot)
            )
            mbarrier.expect(do_ready.index(slot), do_bytes)
            tma.async_copy_global_to_shared(
                do_desc, [h_row + qi * BLOCK_M, 0], do_ready.index(slot), do_smem.index(slot)
            )
            tma.async_copy_global_to_shared(
                dl_desc, [h_row + qi * BLOCK_M], do_ready.index(slot), dl_smem.index(slot)
            )
            it += 1


@gluon.jit
def _dkdv_issue(
    it,
    q_pos,
    key0,
    k_tile,
    v_tile,
    q_smem,
    do_smem,
    lse_smem,
    dl_smem,
    q_ready,
    do_ready,
    dk,
    dv,
    st,
    dpt,
    qk_scale,
    NUM_STAGES: gl.constexpr,
    MASK: gl.constexpr,
    s_layout: gl.constexpr,
    op_layout: gl.constexpr,
):
    """One query tile (ring iteration ``it``, query rows q_pos..) for this warpgroup's 64
    keys key0..: S^T, dP^T async together; P^T while dP^T runs; dV += P^T dO issued before
    dP^T is waited for; dS^T; dK += dS^T Q issued. Returns (dk, dv, st, dpt, p_op, ds_op)
    with dV and dK in flight (``_dkdv_retire``); ds_op is dS^T in Q's type."""
    BLOCK_M: gl.constexpr = st.shape[1]
    dtype: gl.constexpr = k_tile.dtype
    col_s: gl.constexpr = gl.SliceLayout(0, s_layout)
    slot = it % NUM_STAGES
    phase = (it // NUM_STAGES) & 1
    q_tile = q_smem.index(slot)
    do_tile = do_smem.index(slot)
    mbarrier.wait(q_ready.index(slot), phase)
    st = warpgroup_mma(k_tile, q_tile.permute((1, 0)), st, use_acc=False, is_async=True)
    mbarrier.wait(do_ready.index(slot), phase)
    dpt = warpgroup_mma(v_tile, do_tile.permute((1, 0)), dpt, use_acc=False, is_async=True)
    lse2 = lse_smem.index(slot).load(col_s) * LOG2E
    st = warpgroup_mma_wait(num_outstanding=1, deps=(st,))
    if MASK:
        keys = key0 + gl.arange(0, st.shape[0], layout=gl.SliceLayout(1, s_layout))
        qrys = q_pos + gl.arange(0, BLOCK_M, layout=col_s)
        keep = gl.expand_dims(qrys, 0) >= gl.expand_dims(keys, 1)
        st = gl.where(keep, st, float("-inf"))
    pt = gl.exp2(st * qk_scale - gl.expand_dims(lse2, 0))
    p_op = gl.convert_layout(pt.to(dtype), op_layout)
    dv = warpgroup_mma(p_op, do_tile, dv, is_async=True)
    delta = dl_smem.index(slot).load(col_s)
    dpt = warpgroup_mma_wait(num_outstanding=1, deps=(dpt,))  # dV stays in flight
    dst = pt * (dpt - gl.expand_dims(delta, 0))
    ds_op = gl.convert_layout(dst.to(dtype), op_layout)
    dk = warpgroup_mma(ds_op, q_tile, dk, is_async=True)
    return dk, dv, st, dpt, p_op, ds_op


@gluon.jit
def _dkdv_retire(it, empty, dk, dv, p_op, ds_op, NUM_STAGES: gl.constexpr):
    """Retire step ``it``'s dV and dK and hand its ring slot back."""
    dv, dk, p_op, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dv, dk, p_op, ds_op))
    mbarrier.arrive(empty.index(it % NUM_STAGES), count=1)
    return dk, dv


@gluon.jit
def _dkdv_step(
    it,
    q_pos,
    key0,
    k_tile,
    v_tile,
    q_smem,
    do_smem,
    lse_smem,
    dl_smem,
    q_ready,
    do_ready,
    empty,
    dk,
    dv,
    st,
    dpt,
    qk_scale,
    NUM_STAGES: gl.constexpr,
    MASK: gl.constexpr,
    s_layout: gl.constexpr,
    op_layout: gl.constexpr,
):
    """``_dkdv_issue`` then ``_dkdv_retire``: one query tile, every wgmma retired."""
    dk, dv, st, dpt, p_op, ds_op = _dkdv_issue(
        it,
        q_pos,
        key0,
        k_tile,
        v_tile,
        q_smem,
        do_smem,
        lse_smem,
        dl_smem,
        q_ready,
        do_ready,
        dk,
        dv,
        st,
        dpt,
        qk_scale,
        NUM_STAGES,
        MASK,
        s_layout,
        op_layout,
    )
    dk, dv = _dkdv_retire(it, empty, dk, dv, p_op, ds_op, NUM_STAGES)
    return dk, dv, st, dpt


@builtin
def tma_reduce_add(tensor_desc, coord, src, _semantic=None):
    """global[coord .. + block] += src (a shared tile), one TMA bulk reduction, asynchronous:
    ``tma.store_wait`` waits for it as for a TMA store."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(
        ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord, src.handle
    )


@gluon.jit
def _nd_step(
    it,
    q_pos,
    q_row,
    key0,
    k_smem,
    k_tile,
    v_tile,
    ds_smem,
    ds_ready,
    dq_smem,
    dq_desc,
    q_smem,
    do_smem,
    lse_smem,
    dl_smem,
    q_ready,
    do_ready,
    empty,
    dk,
    dv,
    st,
    dpt,
    qk_scale,
    WG: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    MASK: gl.constexpr,
    s_layout: gl.constexpr,
    op_layout: gl.constexpr,
):
    """One query tile (rows q_row.. of the 2-D view): the dK / dV step, then this
    warpgroup's half of the tile's dQ columns into W (module docstring)."""
    BLOCK_M: gl.constexpr = st.shape[1]
    HALF: gl.constexpr = dk.shape[1] // 2
    dk, dv, st, dpt, p_op, ds_op = _dkdv_issue(
        it,
        q_pos,
        key0,
        k_tile,
        v_tile,
        q_smem,
        do_smem,
        lse_smem,
        dl_smem,
        q_ready,
        do_ready,
        dk,
        dv,
        st,
        dpt,
        qk_scale,
        NUM_STAGES,
        MASK,
        s_layout,
        op_layout,
    )
    buf = it % 2
    ds_smem.index(2 * buf + WG).store(ds_op)
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(ds_ready.index(buf), count=1)
    dk, dv = _dkdv_retire(it, empty, dk, dv, p_op, ds_op, NUM_STAGES)
    mbarrier.wait(ds_ready.index(buf), (it // 2) & 1)
    if HALF == BLOCK_M:
        acc = st
    else:
        acc = gl.zeros([BLOCK_M, HALF], gl.float32, wgmma_layout(HALF))
    dq = warpgroup_mma(
        ds_smem.index(2 * buf).permute((1, 0)),
        k_smem.index(0).slice(WG * HALF, HALF, dim=1),
        acc,
        use_acc=False,
        is_async=True,
    )
    dq = warpgroup_mma(
        ds_smem.index(2 * buf + 1).permute((1, 0)),
        k_smem.index(1).slice(WG * HALF, HALF, dim=1),
        dq,
        is_async=True,
    )
    dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq,))
    tma.store_wait(pendings=0)  # the previous step's reduction has read dq_smem
    gl.thread_barrier()
    dq_smem.store(dq)
    fence_async_shared()
    gl.thread_barrier()
    tma_reduce_add(dq_desc, [q_row, WG * HALF], dq_smem)
    if HALF == BLOCK_M:
        st = dq
    return dk, dv, st, dpt


@gluon.jit
def _consumer_step(
    it,
    qi,
    h_row,
    key0,
    k_smem,
    k_tile,
    v_tile,
    q_smem,
    do_smem,
    lse_smem,
    dl_smem,
    q_ready,
    do_ready,
    empty,
    dk,
    dv,
    st,
    dpt,
    qk_scale,
    nd,
    WG: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    MASK: gl.constexpr,
    ND: gl.constexpr,
    s_layout: gl.constexpr,
    op_layout: gl.constexpr,
):
    """Query tile qi: ``_dkdv_step``, or under ND ``_nd_step`` (its buffers in ``nd``)."""
    BLOCK_M: gl.constexpr = st.shape[1]
    if ND:
        dq_desc, ds_smem, dq_smem, ds_ready = nd[0], nd[1], nd[2], nd[3]
        return _nd_step(
            it,
            qi * BLOCK_M,
            h_row + qi * BLOCK_M,
            key0,
            k_smem,
            k_tile,
            v_tile,
            ds_smem,
            ds_ready,
            dq_smem.index(WG),
            dq_desc,
            q_smem,
            do_smem,
            lse_smem,
            dl_smem,
            q_ready,
            do_ready,
            empty,
            dk,
            dv,
            st,
            dpt,
            qk_scale,
            WG,
            NUM_STAGES,
            MASK,
            s_layout,
            op_layout,
        )
    else:
        return _dkdv_step(
            it,
            qi * BLOCK_M,
            key0,
            k_tile,
            v_tile,
            q_smem,
            do_smem,
            lse_smem,
            dl_smem,
            q_ready,
            do_ready,
            empty,
            dk,
            dv,
            st,
            dpt,
            qk_scale,
            NUM_STAGES,
            MASK,
            s_layout,
            op_layout,
        )


@gluon.jit
def _dkdv_consumer(
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
    WG: gl.constexpr,
    HEAD_D: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
    ND: gl.constexpr,
):
    """Consumer warpgroup WG: keys k_pos + 64 WG .. +63 of the program's key tile. ND (the
    nondeterministic kernel, ``_gluon_bwd_nd_kernels``): also dQ into W each step, nd =
    (dq_desc, ds_smem, dq_smem, ds_ready, k_free, bh_kv, seq_len)."""
    BLOCK_M: gl.constexpr = q_smem.type.shape[1]
    WG_N: gl.constexpr = k_smem.type.shape[1]
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = wgmma_layout(BLOCK_M)
    acc_layout: gl.constexpr = wgmma_layout(HEAD_D)
    op_layout: gl.constexpr = operand_layout(acc_layout)
    qk_scale = sm_scale * LOG2E
    key0 = k_pos + WG * WG_N
    k_tile = k_smem.index(WG)
    v_tile = v_smem.index(WG)
    dk = gl.zeros([WG_N, HEAD_D], gl.float32, acc_layout)
    dv = gl.zeros([WG_N, HEAD_D], gl.float32, acc_layout)
    st = gl.zeros([WG_N, BLOCK_M], gl.float32, s_layout)
    dpt = gl.zeros([WG_N, BLOCK_M], gl.float32, s_layout)
    if ND:
        mbarrier.wait(kv_bars.index(0), 0)  # dQ reads both warpgroups' K tiles
        mbarrier.wait(kv_bars.index(1), 0)
    else:
        mbarrier.wait(kv_bars.index(WG), 0)
    it = 0
    q_mid = q_first
    if CAUSAL:
        # query tiles holding queries k_pos .. k_pos + 127 (the diagonal band): masked
        q_mid = gl.minimum(q_first + (2 * WG_N) // BLOCK_M, n_q)
    for gi in range(kv_group):
        if ND:
            h_row = (nd[5] * kv_group + gi) * nd[6]  # first row of query head h
        else:
            h_row = 0
        if CAUSAL:
            for qi in range(q_first, q_mid):
                dk, dv, st, dpt = _consumer_step(
                    it,
                    qi,
                    h_row,
                    key0,
                    k_smem,
                    k_tile,
                    v_tile,
                    q_smem,
                    do_smem,
                    lse_smem,
                    dl_smem,
                    q_ready,
                    do_ready,
                    empty,
                    dk,
                    dv,
                    st,
                    dpt,
                    qk_scale,
                    nd,
                    WG,
                    NUM_STAGES,
                    True,
                    ND,
                    s_layout,
                    op_layout,
                )
                it += 1
        for qi in range(q_mid, n_q):
            dk, dv, st, dpt = _consumer_step(
                it,
                qi,
                h_row,
                key0,
                k_smem,
                k_tile,
                v_tile,
                q_smem,
                do_smem,
                lse_smem,
                dl_smem,
                q_ready,
                do_ready,
                empty,
                dk,
                dv,
                st,
                dpt,
                qk_scale,
                nd,
                WG,
                NUM_STAGES,
                False,
                ND,
                s_layout,
                op_layout,
            )
            it += 1
    if ND:
        # The other warpgroup's last dQ wgmma reads this warpgroup's K tile: meet first.
        mbarrier.arrive(nd[4], count=1)
        mbarrier.wait(nd[4], 0)
    # Epilogue: every wgmma of this warpgroup retired (wait(0) in the last step), and the
    # other warpgroup never reads this warpgroup's K / V tiles -> reuse them for dK / dV.
    k_tile.store((dk * sm_scale).to(dtype))
    v_tile.store(dv.to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dk_desc, [kv_row + WG * WG_N, 0], k_tile)
    tma.async_copy_shared_to_global(dv_desc, [kv_row + WG * WG_N, 0], v_tile)
    tma.store_wait(pendings=0)


@gluon.jit
def _dkdv_consumer0(
    args, HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, ND: gl.constexpr
):
    _dkdv_consumer(*args, 0, HEAD_D, NUM_STAGES, CAUSAL, ND)


@gluon.jit
def _dkdv_consumer1(
    args, HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, ND: gl.constexpr
):
    _dkdv_consumer(*args, 1, HEAD_D, NUM_STAGES, CAUSAL, ND)


@gluon.jit
def _dkdv_buffers(q_desc, do_desc, lse_desc, dl_desc, k_desc, v_desc, NUM_STAGES: gl.constexpr):
    """The dK / dV program's shared memory and barriers, initialized: the Q / dO ring
    (with Stats / delta rows), both warpgroups' K / V tiles, ``kv_bars`` (one per
    warpgroup), ``q_ready`` / ``do_ready`` (the producer's TMA) and ``empty`` (one arrive
    per consumer)."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    HEAD_D: gl.constexpr = q_desc.block_type.shape[1]
    WG_N: gl.constexpr = k_desc.block_type.shape[0]
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_D], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_D], do_desc.layout)
    lse_smem = gl.allocate_shared_memory(gl.float32, [NUM_STAGES, BLOCK_M], lse_desc.layout)
    dl_smem = gl.allocate_shared_memory(gl.float32, [NUM_STAGES, BLOCK_M], dl_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [2, WG_N, HEAD_D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [2, WG_N, HEAD_D], v_desc.layout)
    kv_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    q_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    do_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(kv_bars.index(i), count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(do_ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    return q_smem, do_smem, lse_smem, dl_smem, k_smem, v_smem, kv_bars, q_ready, do_ready, empty


@gluon.jit
def attn_bwd_dkdv(
    q_desc,
    do_desc,
    lse_desc,
    dl_desc,
    k_desc,
    v_desc,
    dk_desc,
    dv_desc,
    seq_len,
    kv_group,
    sm_scale,
    HEAD_D: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
    CONSUMER_REGS: gl.constexpr,
    PRODUCER_REGS: gl.constexpr,
):
    """dK, dV of 128 keys of one K/V head (grid (S / 128, B H_kv), num_warps=4). q/do
    blocks [BLOCK_M, D], lse / delta rank-1 blocks [BLOCK_M] over flat fp32 [B H S],
    k/v/dk/dv blocks [64, D]."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    WG_N: gl.constexpr = k_desc.block_type.shape[0]
    gl.static_assert(WG_N == 64, "one consumer warpgroup = 64 keys")
    gl.static_assert((2 * WG_N) % BLOCK_M == 0, "query tiles must tile the key tile")
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
        (),
    )
    gl.warp_specialize(
        [
            (_dkdv_consumer0, (cargs, HEAD_D, NUM_STAGES, CAUSAL, False)),
            (_dkdv_consumer1, (cargs, HEAD_D, NUM_STAGES, CAUSAL, False)),
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


# --------------------------------------------------------------------------------------------
# Kernel B: dQ
# --------------------------------------------------------------------------------------------
@gluon.jit
def _dq_producer(
    q_desc,
    do_desc,
    k_desc,
    v_desc,
    q_smem,
    do_smem,
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
    NUM_STAGES: gl.constexpr,
):
    """Producer warp: Q and dO tiles of both consumers, then K_j, V_j, j < n_tiles."""
    WG_M: gl.constexpr = q_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    for wg in gl.static_range(2):
        mbarrier.expect(q_bars.index(wg), 2 * q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(
            q_desc, [q_row + wg * WG_M, 0], q_bars.index(wg), q_smem.index(wg)
        )
        tma.async_copy_global_to_shared(
            do_desc, [q_row + wg * WG_M, 0], q_bars.index(wg), do_smem.index(wg)
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
def _dq_step(
    j,
    q_tile,
    do_tile,
    k_smem,
    v_smem,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    dq,
    s,
    dp,
    ds_op,
    lse2,
    delta,
    qk_scale,
    q_pos,
    NUM_STAGES: gl.constexpr,
    MASK: gl.constexpr,
    HAS_PREV: gl.constexpr,
    s_layout: gl.constexpr,
    op_layout: gl.constexpr,
):
    """Key tile j: issue S_j, dP_j; retire dQ_{j-1} (HAS_PREV) and free its K slot; P_j while
    dP_j runs; free V slot; dS_j; issue dQ += dS_j K_j (left in flight)."""
    BLOCK_N: gl.constexpr = s.shape[1]
    dtype: gl.constexpr = q_tile.dtype
    slot = j % NUM_STAGES
    phase = (j // NUM_STAGES) & 1
    k_tile = k_smem.index(slot)
    mbarrier.wait(k_ready.index(slot), phase)
    s = warpgroup_mma(q_tile, k_tile.permute((1, 0)), s, use_acc=False, is_async=True)
    mbarrier.wait(v_ready.index(slot), phase)
    dp = warpgroup_mma(
        do_tile, v_smem.index(slot).permute((1, 0)), dp, use_acc=False, is_async=True
    )
    if HAS_PREV:
        # groups in flight: dQ_{j-1}, S_j, dP_j -> wait(2) retires dQ_{j-1}
        dq, ds_op = warpgroup_mma_wait(num_outstanding=2, deps=(dq, ds_op))
        mbarrier.arrive(k_empty.index((j - 1) % NUM_STAGES), count=1)
    s = warpgroup_mma_wait(num_outstanding=1, deps=(s,))
    if MASK:
        rows = q_pos + gl.arange(0, s.shape[0], layout=gl.SliceLayout(1, s_layout))
        cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        keep = gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1)
        s = gl.where(keep, s, float("-inf"))
    p = gl.exp2(s * qk_scale - gl.expand_dims(lse2, 1))
    dp = warpgroup_mma_wait(num_outstanding=0, deps=(dp,))
    mbarrier.arrive(v_empty.index(slot), count=1)
    ds = p * (dp - gl.expand_dims(delta, 1))
    ds_op = gl.convert_layout(ds.to(dtype), op_layout)
    dq = warpgroup_mma(ds_op, k_tile, dq, is_async=True)
    return dq, s, dp, ds_op


@gluon.jit
def _dq_consumer(
    dq_desc,
    q_smem,
    do_smem,
    k_smem,
    v_smem,
    q_bars,
    k_ready,
    v_ready,
    k_empty,
    v_empty,
    lse_ptr,
    delta_ptr,
    q_row,
    q_pos,
    n_tiles,
    sm_scale,
    WG: gl.constexpr,
    HEAD_D: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
):
    """Consumer warpgroup WG: query rows q_pos + 64 WG .. +63; all n_tiles key tiles of the
    CTA (unmasked [0, n_full), masked [n_full, n_tiles) under CAUSAL)."""
    WG_M: gl.constexpr = q_smem.type.shape[1]
    BLOCK_N: gl.constexpr = k_smem.type.shape[1]
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = wgmma_layout(BLOCK_N)
    acc_layout: gl.constexpr = wgmma_layout(HEAD_D)
    op_layout: gl.constexpr = operand_layout(acc_layout)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    my_row = q_row + WG * WG_M
    my_pos = q_pos + WG * WG_M
    qk_scale = sm_scale * LOG2E
    q_tile = q_smem.index(WG)
    do_tile = do_smem.index(WG)
    rows = my_row + gl.arange(0, WG_M, layout=row_s)
    lse2 = gl.load(lse_ptr + rows) * LOG2E
    delta = gl.load(delta_ptr + rows)
    dq = gl.zeros([WG_M, HEAD_D], gl.float32, acc_layout)
    s = gl.zeros([WG_M, BLOCK_N], gl.float32, s_layout)
    dp = gl.zeros([WG_M, BLOCK_N], gl.float32, s_layout)
    ds_op = gl.zeros([WG_M, BLOCK_N], dtype, op_layout)
    mbarrier.wait(q_bars.index(WG), 0)
    # tile 0 (masked whenever a mask is possible: the mask is exact on a fully kept tile)
    dq, s, dp, ds_op = _dq_step(
        0,
        q_tile,
        do_tile,
        k_smem,
        v_smem,
        k_ready,
        v_ready,
        k_empty,
        v_empty,
        dq,
        s,
        dp,
        ds_op,
        lse2,
        delta,
        qk_scale,
        my_pos,
        NUM_STAGES,
        CAUSAL,
        False,
        s_layout,
        op_layout,
    )
    if CAUSAL:
        n_full = (my_pos + 1) // BLOCK_N
        for j in range(1, n_full):
            dq, s, dp, ds_op = _dq_step(
                j,
                q_tile,
                do_tile,
                k_smem,
                v_smem,
                k_ready,
                v_ready,
                k_empty,
                v_empty,
                dq,
                s,
                dp,
                ds_op,
                lse2,
                delta,
                qk_scale,
                my_pos,
                NUM_STAGES,
                False,
                True,
                s_layout,
                op_layout,
            )
        for j in range(gl.maximum(n_full, 1), n_tiles):
            dq, s, dp, ds_op = _dq_step(
                j,
                q_tile,
                do_tile,
                k_smem,
                v_smem,
                k_ready,
                v_ready,
                k_empty,
                v_empty,
                dq,
                s,
                dp,
                ds_op,
                lse2,
                delta,
                qk_scale,
                my_pos,
                NUM_STAGES,
                True,
                True,
                s_layout,
                op_layout,
            )
    else:
        for j in range(1, n_tiles):
            dq, s, dp, ds_op = _dq_step(
                j,
                q_tile,
                do_tile,
                k_smem,
                v_smem,
                k_ready,
                v_ready,
                k_empty,
                v_empty,
                dq,
                s,
                dp,
                ds_op,
                lse2,
                delta,
                qk_scale,
                my_pos,
                NUM_STAGES,
                False,
                True,
                s_layout,
                op_layout,
            )
    dq, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dq, ds_op))
    mbarrier.arrive(k_empty.index((n_tiles - 1) % NUM_STAGES), count=1)
    # Every wgmma of this warpgroup retired; its Q tile is read by no one else any more.
    q_tile.store((dq * sm_scale).to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dq_desc, [my_row, 0], q_tile)
    tma.store_wait(pendings=0)


@gluon.jit
def _dq_consumer0(args, HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    _dq_consumer(*args, 0, HEAD_D, NUM_STAGES, CAUSAL)


@gluon.jit
def _dq_consumer1(args, HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    _dq_consumer(*args, 1, HEAD_D, NUM_STAGES, CAUSAL)


@gluon.jit
def attn_bwd_dq(
    q_desc,
    do_desc,
    k_desc,
    v_desc,
    dq_desc,
    lse_ptr,
    delta_ptr,
    seq_len,
    kv_group,
    sm_scale,
    HEAD_D: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
    CONSUMER_REGS: gl.constexpr,
    PRODUCER_REGS: gl.constexpr,
):
    """dQ of 128 query rows of one query head (grid (S / 128, B H), num_warps=4). q/do/dq
    blocks [64, D], k/v blocks [BLOCK_N, D]; lse / delta flat fp32 [B H S]."""
    WG_M: gl.constexpr = q_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    gl.static_assert(WG_M == 64, "one consumer warpgroup = 64 query rows")
    gl.static_assert((2 * WG_M) % BLOCK_N == 0, "the diagonal must fall on key-tile edges")
    # K slot of tile j is handed back in step j + 1 after waiting for tile j + 1's K: with a
    # single slot the producer could never load tile j + 1 (deadlock).
    gl.static_assert(NUM_STAGES >= 2, "kernel B needs a ring of at least 2 slots")
    dtype: gl.constexpr = q_desc.dtype
    pid_m = gl.program_id(0)
    if CAUSAL:
        pid_m = gl.num_programs(0) - 1 - pid_m  # longest first
    bh = gl.program_id(1)
    q_pos = pid_m * (2 * WG_M)
    q_row = bh * seq_len + q_pos
    kv_row = (bh // kv_group) * seq_len
    if CAUSAL:
        n_tiles = (q_pos + 2 * WG_M) // BLOCK_N
    else:
        n_tiles = seq_len // BLOCK_N

    q_smem = gl.allocate_shared_memory(dtype, [2, WG_M, HEAD_D], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [2, WG_M, HEAD_D], do_desc.layout)
    k_smem, v_smem, k_ready, v_ready, k_empty, v_empty = kv_ring(k_desc, v_desc, NUM_STAGES)
    q_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(q_bars.index(i), count=1)

    cargs = (
        dq_desc,
        q_smem,
        do_smem,
        k_smem,
        v_smem,
        q_bars,
        k_ready,
        v_ready,
        k_empty,
        v_empty,
        lse_ptr,
        delta_ptr,
        q_row,
        q_pos,
        n_tiles,
        sm_scale,
    )
    gl.warp_specialize(
        [
            (_dq_consumer0, (cargs, HEAD_D, NUM_STAGES, CAUSAL)),
            (_dq_consumer1, (cargs, HEAD_D, NUM_STAGES, CAUSAL)),
            (
                _dq_producer,
                (
                    q_desc,
                    do_desc,
                    k_desc,
                    v_desc,
                    q_smem,
                    do_smem,
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
                    NUM_STAGES,
                ),
            ),
        ],
        [4, 1],
        [CONSUMER_REGS, PRODUCER_REGS],
    )


def smem_bytes(d: int, block_m: int, stages: int, dq_block_n: int, dq_stages: int) -> int:
    """Shared memory of the larger of the two programs (2-byte types): dK / dV streams Q and
    dO (and float32 Stats / delta rows) past its resident K / V; dQ streams K and V past its
    resident Q and dO."""
    dkdv = stages * block_m * (4 * d + 8) + 8 * WG_ROWS * d
    dq = 4 * dq_stages * dq_block_n * d + 8 * WG_ROWS * d
    return max(dkdv, dq)


def prepare(
    q, k, v, o, do, stats, dq, dk, dv, delta, dims: tuple, scale: float, cfg: tuple, causal: bool
):
    """The backward's three launches (delta, dK / dV, dQ) as one callable on a stream, their
    TMA descriptors built once. q / o / do / dq packed [B, H, S, D], k / v / dk / dv packed
    [B, H_kv, S, D] buffers of torch type dims[5]; stats (read) and delta (written) float32
    [B, H, S]; dims = (B, H, H_kv, S, D, dtype); cfg = ((BLOCK_M, NUM_STAGES) of the dK / dV
    kernel, (BLOCK_N, NUM_STAGES) of the dQ kernel). Holds addresses, not buffers."""
    B, H, HKV, S, D, dtype = dims
    (bm, sa), (bn, sb) = cfg
    nq, nk, f32, wg = B * H * S, B * HKV * S, torch.float32, WG_ROWS

    def rows(t, n, block):
        return desc(t, [n, D], [block, D], dtype)

    args_a = (
        rows(q, nq, bm),
        rows(do, nq, bm),
        desc(stats, [nq], [bm], f32),
        desc(delta, [nq], [bm], f32),
        rows(k, nk, wg),
        rows(v, nk, wg),
        rows(dk, nk, wg),
        rows(dv, nk, wg),
        S,
        H // HKV,
        scale,
    )
    args_b = (
        rows(q, nq, wg),
        rows(do, nq, wg),
        rows(k, nk, bn),
        rows(v, nk, bn),
        rows(dq, nq, wg),
        Base(stats.data_ptr(), f32),
        Base(delta.data_ptr(), f32),
        S,
        H // HKV,
        scale,
    )
    regs = dict(
        CAUSAL=causal,
        CONSUMER_REGS=CONSUMER_REGS,
        PRODUCER_REGS=PRODUCER_REGS,
        num_warps=4,
        maxnreg=MAXNREG,
    )
    runs = [
        launcher(
            attn_bwd_delta,
            (triton.cdiv(nq, 64),),
            (
                Base(o.data_ptr(), dtype),
                Base(do.data_ptr(), dtype),
                Base(delta.data_ptr(), f32),
                Base(delta.data_ptr(), f32),
                nq,
            ),
            dict(HEAD_D=D, BLOCK=64, ZERO=False, num_warps=4),
        ),
        launcher(
            attn_bwd_dkdv, (S // ROWS, B * HKV), args_a, dict(HEAD_D=D, NUM_STAGES=sa, **regs)
        ),
        launcher(attn_bwd_dq, (S // ROWS, B * H), args_b, dict(HEAD_D=D, NUM_STAGES=sb, **regs)),
    ]

    def launch(stream=None):
        for run in runs:
            run(stream)

    launch.runs = runs  # each launch on its own, to time the kernels apart
    return launch
