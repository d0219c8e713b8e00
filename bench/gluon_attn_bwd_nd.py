"""Draft: the nondeterministic Gluon backward -- the engine's dK / dV kernel
(src/opendnn/engines/attention/_gluon_bwd_kernels.py) also computing dQ, so that P and dP
are computed once: 5 GEMMs of work instead of the deterministic pair's 7.

Session 16 layout (FlashAttention 3's): per (key tile, query tile) both consumer
warpgroups store their dS_w^T (64 keys x BLOCK_M queries, Q's type) into a double-buffered
shared ring and meet on an mbarrier (``ds_ready``, one arrive each); then each computes one
half of the step's dQ tile over all 128 keys,
    dQ_half = sum_w dS_w K_w   (A: the stored tiles transposed; B: the resident K tiles),
-- the rows WG*64.. when BLOCK_M = 128, the columns WG*D/2.. when BLOCK_M = 64 -- writes it
to a float32 shared tile and adds it into the float32 dQ workspace with one TMA reduce-add
(``cp.reduce.async.bulk.tensor ... add.f32``), asynchronous: the consumer goes on. Gluon
3.6 exposes no TMA reduce, but its builder has ``create_async_tma_reduce``
(``tma_reduce_add`` below). dQ = attn_scale x workspace, converted after.
Session 15's version (per-warpgroup partials by float32 atomics from registers) was
correct but slower than the deterministic pair: results/probes/gluon_attn_bwd_nd-s15.txt.

Double buffering of dS is what makes one barrier enough: a warpgroup writing stage s at
step it has passed ``ds_ready`` of step it-1, so the other warpgroup had arrived there, after
retiring its dQ wgmma of step it-2, the last reader of stage s.

    PYTHONPATH=src:bench python bench/gluon_attn_bwd_nd.py compile   # offline: ptxas report
    PYTHONPATH=src:bench python bench/gluon_attn_bwd_nd.py           # GPU: check and time

GPU mode: B=4 H=16, S in (1024, 4096, 8192), D in (64, 128), causal and not: gradients
against cuDNN's (relative error), time against cuDNN and the deterministic Gluon backward.
"""
import sys

import torch
import triton
from triton._C.libtriton import ir
from triton.experimental import gluon
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier,
                                                              tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from opendnn.engines.attention._gluon_bwd_kernels import (CONSUMER_REGS, LOG2E, MAXNREG,
                                                          PRODUCER_REGS, ROWS, WG_ROWS, Base,
                                                          _dkdv_producer, _dkdv_step, desc,
                                                          launcher, operand_layout,
                                                          wgmma_layout)


@builtin
def tma_reduce_add(tensor_desc, coord, src, _semantic=None):
    """global[coord .. + block] += src (shared), one TMA bulk reduce, asynchronous (waited
    for by ``tma.store_wait`` as a TMA store is)."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD,
                                              tensor_desc.handle, coord, src.handle)


@gluon.jit
def _nd_step(it, q_pos, q_row, key0, k_smem, k_tile, v_tile, ds_smem, ds_ready, dq_smem,
             dq_desc, q_smem, do_smem, lse_smem, dl_smem, q_ready, do_ready, empty, dk, dv,
             st, dpt, qk_scale, WG: gl.constexpr, NUM_STAGES: gl.constexpr,
             MASK: gl.constexpr, PAIR: gl.constexpr, s_layout: gl.constexpr,
             op_layout: gl.constexpr):
    """``_gluon_bwd_kernels._dkdv_step``, then dQ into the workspace by TMA reduce (query
    rows q_row.. of the 2-D [B H S, D] view). PAIR: this warpgroup's half of the columns of
    dS K over both warpgroups' keys (the two meet on ``ds_ready``); else its own keys'
    partial dS_w K_w, every column. A dQ accumulator of st's shape reuses st's registers (S^T
    and dP^T are issued with use_acc=False), and dP^T's for a second half."""
    BLOCK_M: gl.constexpr = st.shape[1]
    HEAD_D: gl.constexpr = dk.shape[1]
    dk, dv, st, dpt, ds_op = _dkdv_step(
        it, q_pos, key0, k_tile, v_tile, q_smem, do_smem, lse_smem, dl_smem, q_ready,
        do_ready, empty, dk, dv, st, dpt, qk_scale, NUM_STAGES, MASK, s_layout, op_layout)
    if PAIR:
        HALF: gl.constexpr = HEAD_D // 2
        s2 = it % 2
        ds_smem.index(2 * s2 + WG).store(ds_op)
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.arrive(ds_ready.index(s2), count=1)
        mbarrier.wait(ds_ready.index(s2), (it // 2) & 1)
        if HALF == BLOCK_M:
            acc = st
        else:
            acc = gl.zeros([64, HALF], gl.float32, wgmma_layout(HALF))
        dq = warpgroup_mma(ds_smem.index(2 * s2).permute((1, 0)),
                           k_smem.index(0).slice(WG * HALF, HALF, dim=1), acc, use_acc=False,
                           is_async=True)
        dq = warpgroup_mma(ds_smem.index(2 * s2 + 1).permute((1, 0)),
                           k_smem.index(1).slice(WG * HALF, HALF, dim=1), dq, is_async=True)
        dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq, ))
        tma.store_wait(pendings=0)          # the previous step's reduce has read dq_smem
        gl.thread_barrier()
        dq_smem.store(dq)
        if HALF == BLOCK_M:
            st = dq
        c0 = WG * HALF
    else:
        ds_tile = ds_smem.index(WG)
        ds_tile.store(ds_op)
        fence_async_shared()
        gl.thread_barrier()
        if HEAD_D == 2 * BLOCK_M:
            lo = warpgroup_mma(ds_tile.permute((1, 0)), k_tile.slice(0, BLOCK_M, dim=1), st,
                               use_acc=False, is_async=True)
            hi = warpgroup_mma(ds_tile.permute((1, 0)), k_tile.slice(BLOCK_M, BLOCK_M, dim=1),
                               dpt, use_acc=False, is_async=True)
            lo, hi = warpgroup_mma_wait(num_outstanding=0, deps=(lo, hi))
            tma.store_wait(pendings=0)
            gl.thread_barrier()
            dq_smem.slice(0, BLOCK_M, dim=1).store(lo)
            dq_smem.slice(BLOCK_M, BLOCK_M, dim=1).store(hi)
            st = lo
            dpt = hi
        else:
            gl.static_assert(HEAD_D == BLOCK_M, "PAIR=0 takes D = BLOCK_M or 2 BLOCK_M")
            dq = warpgroup_mma(ds_tile.permute((1, 0)), k_tile, st, use_acc=False,
                               is_async=True)
            dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq, ))
            tma.store_wait(pendings=0)
            gl.thread_barrier()
            dq_smem.store(dq)
            st = dq
        c0 = 0
    fence_async_shared()
    gl.thread_barrier()
    tma_reduce_add(dq_desc, [q_row, c0], dq_smem)
    return dk, dv, st, dpt


@gluon.jit
def _nd_consumer(dk_desc, dv_desc, dq_desc, q_smem, do_smem, lse_smem, dl_smem, k_smem,
                 v_smem, ds_smem, dq_smem, kv_bars, ds_ready, k_free, q_ready, do_ready,
                 empty, kv_row, k_pos, bh_kv, seq_len, kv_group, q_first, n_q, sm_scale,
                 WG: gl.constexpr, HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr,
                 CAUSAL: gl.constexpr, PAIR: gl.constexpr):
    """``_gluon_bwd_kernels._dkdv_consumer`` with ``_nd_step``."""
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
    dq_tile = dq_smem.index(WG)
    dk = gl.zeros([WG_N, HEAD_D], gl.float32, acc_layout)
    dv = gl.zeros([WG_N, HEAD_D], gl.float32, acc_layout)
    st = gl.zeros([WG_N, BLOCK_M], gl.float32, s_layout)
    dpt = gl.zeros([WG_N, BLOCK_M], gl.float32, s_layout)
    if PAIR:
        mbarrier.wait(kv_bars.index(0), 0)      # dQ reads both warpgroups' K tiles
        mbarrier.wait(kv_bars.index(1), 0)
    else:
        mbarrier.wait(kv_bars.index(WG), 0)
    it = 0
    for gi in range(kv_group):
        h_row = (bh_kv * kv_group + gi) * seq_len
        if CAUSAL:
            q_mid = gl.minimum(q_first + (2 * WG_N) // BLOCK_M, n_q)
            for qi in range(q_first, q_mid):
                dk, dv, st, dpt = _nd_step(
                    it, qi * BLOCK_M, h_row + qi * BLOCK_M, key0, k_smem, k_tile, v_tile,
                    ds_smem, ds_ready, dq_tile, dq_desc, q_smem, do_smem, lse_smem, dl_smem,
                    q_ready, do_ready, empty, dk, dv, st, dpt, qk_scale, WG, NUM_STAGES,
                    True, PAIR, s_layout, op_layout)
                it += 1
            for qi in range(q_mid, n_q):
                dk, dv, st, dpt = _nd_step(
                    it, qi * BLOCK_M, h_row + qi * BLOCK_M, key0, k_smem, k_tile, v_tile,
                    ds_smem, ds_ready, dq_tile, dq_desc, q_smem, do_smem, lse_smem, dl_smem,
                    q_ready, do_ready, empty, dk, dv, st, dpt, qk_scale, WG, NUM_STAGES,
                    False, PAIR, s_layout, op_layout)
                it += 1
        else:
            for qi in range(0, n_q):
                dk, dv, st, dpt = _nd_step(
                    it, qi * BLOCK_M, h_row + qi * BLOCK_M, key0, k_smem, k_tile, v_tile,
                    ds_smem, ds_ready, dq_tile, dq_desc, q_smem, do_smem, lse_smem, dl_smem,
                    q_ready, do_ready, empty, dk, dv, st, dpt, qk_scale, WG, NUM_STAGES,
                    False, PAIR, s_layout, op_layout)
                it += 1
    if PAIR:
        # The other warpgroup's last dQ wgmma reads this warpgroup's K tile: meet before
        # the tile takes dK.
        mbarrier.arrive(k_free, count=1)
        mbarrier.wait(k_free, 0)
    k_tile.store((dk * sm_scale).to(dtype))
    v_tile.store(dv.to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dk_desc, [kv_row + WG * WG_N, 0], k_tile)
    tma.async_copy_shared_to_global(dv_desc, [kv_row + WG * WG_N, 0], v_tile)
    tma.store_wait(pendings=0)


@gluon.jit
def _dq_flush(dq, dq_smem, dq_desc, row, col):
    """dQ tile ``dq`` (retired) -> dq_smem -> workspace[row.., col..] += by TMA reduce."""
    tma.store_wait(pendings=0)          # the previous reduce has read dq_smem
    gl.thread_barrier()
    dq_smem.store(dq)
    fence_async_shared()
    gl.thread_barrier()
    tma_reduce_add(dq_desc, [row, col], dq_smem)


@gluon.jit
def _nd_pipe_step(it, q_pos, q_row, prev_row, key0, k_smem, k_tile, v_tile, ds_smem,
                  ds_ready, dq_smem, dq_desc, q_smem, do_smem, lse_smem, dl_smem, q_ready,
                  do_ready, empty, dk, dv, st, dpt, dq, qk_scale, WG: gl.constexpr,
                  NUM_STAGES: gl.constexpr, MASK: gl.constexpr, PAIR: gl.constexpr,
                  s_layout: gl.constexpr, op_layout: gl.constexpr):
    """``_dkdv_step`` with dQ software-pipelined: the previous step's dQ wgmma (left in
    flight) is retired and flushed once this step's S^T and dP^T are issued; dS^T goes to
    shared memory while dK runs; this step's dQ wgmma is issued and left in flight."""
    BLOCK_M: gl.constexpr = st.shape[1]
    HEAD_D: gl.constexpr = dk.shape[1]
    dtype: gl.constexpr = k_tile.dtype
    col_s: gl.constexpr = gl.SliceLayout(0, s_layout)
    slot = it % NUM_STAGES
    phase = (it // NUM_STAGES) & 1
    q_tile = q_smem.index(slot)
    do_tile = do_smem.index(slot)
    if PAIR:
        c0: gl.constexpr = WG * (HEAD_D // 2)
    else:
        c0: gl.constexpr = 0
    mbarrier.wait(q_ready.index(slot), phase)
    st = warpgroup_mma(k_tile, q_tile.permute((1, 0)), st, use_acc=False, is_async=True)
    mbarrier.wait(do_ready.index(slot), phase)
    dpt = warpgroup_mma(v_tile, do_tile.permute((1, 0)), dpt, use_acc=False, is_async=True)
    dq = warpgroup_mma_wait(num_outstanding=2, deps=(dq, ))        # the previous dQ
    _dq_flush(dq, dq_smem, dq_desc, prev_row, c0)
    lse2 = lse_smem.index(slot).load(col_s) * LOG2E
    st = warpgroup_mma_wait(num_outstanding=1, deps=(st, ))
    if MASK:
        keys = key0 + gl.arange(0, st.shape[0], layout=gl.SliceLayout(1, s_layout))
        qrys = q_pos + gl.arange(0, BLOCK_M, layout=col_s)
        keep = gl.expand_dims(qrys, 0) >= gl.expand_dims(keys, 1)
        st = gl.where(keep, st, float("-inf"))
    pt = gl.exp2(st * qk_scale - gl.expand_dims(lse2, 0))
    p_op = gl.convert_layout(pt.to(dtype), op_layout)
    dv = warpgroup_mma(p_op, do_tile, dv, is_async=True)
    delta = dl_smem.index(slot).load(col_s)
    dpt = warpgroup_mma_wait(num_outstanding=1, deps=(dpt, ))      # dV stays in flight
    dst = pt * (dpt - gl.expand_dims(delta, 0))
    ds_op = gl.convert_layout(dst.to(dtype), op_layout)
    dk = warpgroup_mma(ds_op, q_tile, dk, is_async=True)
    if PAIR:
        s2 = it % 2
        ds_smem.index(2 * s2 + WG).store(ds_op)
    else:
        ds_smem.index(WG).store(ds_op)
    fence_async_shared()
    gl.thread_barrier()
    if PAIR:
        mbarrier.arrive(ds_ready.index(s2), count=1)
    dv, dk, p_op, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dv, dk, p_op, ds_op))
    mbarrier.arrive(empty.index(slot), count=1)
    if PAIR:
        HALF: gl.constexpr = HEAD_D // 2
        mbarrier.wait(ds_ready.index(s2), (it // 2) & 1)
        dq = warpgroup_mma(ds_smem.index(2 * s2).permute((1, 0)),
                           k_smem.index(0).slice(c0, HALF, dim=1), dq, use_acc=False,
                           is_async=True)
        dq = warpgroup_mma(ds_smem.index(2 * s2 + 1).permute((1, 0)),
                           k_smem.index(1).slice(c0, HALF, dim=1), dq, is_async=True)
    else:
        dq = warpgroup_mma(ds_smem.index(WG).permute((1, 0)), k_tile, dq, use_acc=False,
                           is_async=True)
    return dk, dv, st, dpt, dq


@gluon.jit
def _nd_pipe_consumer(dk_desc, dv_desc, dq_desc, q_smem, do_smem, lse_smem, dl_smem, k_smem,
                      v_smem, ds_smem, dq_smem, kv_bars, ds_ready, k_free, q_ready, do_ready,
                      empty, kv_row, k_pos, bh_kv, seq_len, kv_group, q_first, n_q, sm_scale,
                      WG: gl.constexpr, HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr,
                      CAUSAL: gl.constexpr, PAIR: gl.constexpr):
    """``_nd_consumer`` with ``_nd_pipe_step``. The first flush adds a zero tile (the
    carried dQ wgmma's initial value) to the first query tile's rows."""
    BLOCK_M: gl.constexpr = q_smem.type.shape[1]
    WG_N: gl.constexpr = k_smem.type.shape[1]
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = wgmma_layout(BLOCK_M)
    acc_layout: gl.constexpr = wgmma_layout(HEAD_D)
    op_layout: gl.constexpr = operand_layout(acc_layout)
    DQ_N: gl.constexpr = HEAD_D // 2 if PAIR else HEAD_D
    qk_scale = sm_scale * LOG2E
    key0 = k_pos + WG * WG_N
    k_tile = k_smem.index(WG)
    v_tile = v_smem.index(WG)
    dq_tile = dq_smem.index(WG)
    dk = gl.zeros([WG_N, HEAD_D], gl.float32, acc_layout)
    dv = gl.zeros([WG_N, HEAD_D], gl.float32, acc_layout)
    st = gl.zeros([WG_N, BLOCK_M], gl.float32, s_layout)
    dpt = gl.zeros([WG_N, BLOCK_M], gl.float32, s_layout)
    if PAIR:
        mbarrier.wait(kv_bars.index(0), 0)      # dQ reads both warpgroups' K tiles
        mbarrier.wait(kv_bars.index(1), 0)
    else:
        mbarrier.wait(kv_bars.index(WG), 0)
    # The loop carries dQ as an in-flight wgmma: start from one of zeros (0 x K).
    dq_layout: gl.constexpr = wgmma_layout(DQ_N)
    dq = gl.zeros([64, DQ_N], gl.float32, dq_layout)
    zero_op = gl.zeros([64, WG_N], dtype, operand_layout(dq_layout))
    dq = warpgroup_mma(zero_op, k_tile.slice(0, DQ_N, dim=1), dq, use_acc=False,
                       is_async=True)
    it = 0
    prev = (bh_kv * kv_group) * seq_len + q_first * BLOCK_M
    for gi in range(kv_group):
        h_row = (bh_kv * kv_group + gi) * seq_len
        if CAUSAL:
            q_mid = gl.minimum(q_first + (2 * WG_N) // BLOCK_M, n_q)
            for qi in range(q_first, q_mid):
                dk, dv, st, dpt, dq = _nd_pipe_step(
                    it, qi * BLOCK_M, h_row + qi * BLOCK_M, prev, key0, k_smem, k_tile,
                    v_tile, ds_smem, ds_ready, dq_tile, dq_desc, q_smem, do_smem, lse_smem,
                    dl_smem, q_ready, do_ready, empty, dk, dv, st, dpt, dq, qk_scale, WG,
                    NUM_STAGES, True, PAIR, s_layout, op_layout)
                prev = h_row + qi * BLOCK_M
                it += 1
            for qi in range(q_mid, n_q):
                dk, dv, st, dpt, dq = _nd_pipe_step(
                    it, qi * BLOCK_M, h_row + qi * BLOCK_M, prev, key0, k_smem, k_tile,
                    v_tile, ds_smem, ds_ready, dq_tile, dq_desc, q_smem, do_smem, lse_smem,
                    dl_smem, q_ready, do_ready, empty, dk, dv, st, dpt, dq, qk_scale, WG,
                    NUM_STAGES, False, PAIR, s_layout, op_layout)
                prev = h_row + qi * BLOCK_M
                it += 1
        else:
            for qi in range(0, n_q):
                dk, dv, st, dpt, dq = _nd_pipe_step(
                    it, qi * BLOCK_M, h_row + qi * BLOCK_M, prev, key0, k_smem, k_tile,
                    v_tile, ds_smem, ds_ready, dq_tile, dq_desc, q_smem, do_smem, lse_smem,
                    dl_smem, q_ready, do_ready, empty, dk, dv, st, dpt, dq, qk_scale, WG,
                    NUM_STAGES, False, PAIR, s_layout, op_layout)
                prev = h_row + qi * BLOCK_M
                it += 1
    dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq, ))
    _dq_flush(dq, dq_tile, dq_desc, prev, WG * DQ_N if PAIR else 0)
    if PAIR:
        mbarrier.arrive(k_free, count=1)
        mbarrier.wait(k_free, 0)
    k_tile.store((dk * sm_scale).to(dtype))
    v_tile.store(dv.to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dk_desc, [kv_row + WG * WG_N, 0], k_tile)
    tma.async_copy_shared_to_global(dv_desc, [kv_row + WG * WG_N, 0], v_tile)
    tma.store_wait(pendings=0)


@gluon.jit
def _nd_consumer_any(args, WG: gl.constexpr, HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr,
                     CAUSAL: gl.constexpr, PAIR: gl.constexpr, PIPE: gl.constexpr):
    if PIPE:
        _nd_pipe_consumer(*args, WG, HEAD_D, NUM_STAGES, CAUSAL, PAIR)
    else:
        _nd_consumer(*args, WG, HEAD_D, NUM_STAGES, CAUSAL, PAIR)


@gluon.jit
def _nd_consumer0(args, HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                  PAIR: gl.constexpr, PIPE: gl.constexpr):
    _nd_consumer_any(args, 0, HEAD_D, NUM_STAGES, CAUSAL, PAIR, PIPE)


@gluon.jit
def _nd_consumer1(args, HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                  PAIR: gl.constexpr, PIPE: gl.constexpr):
    _nd_consumer_any(args, 1, HEAD_D, NUM_STAGES, CAUSAL, PAIR, PIPE)


@gluon.jit
def attn_bwd_dkdvq(q_desc, do_desc, lse_desc, dl_desc, k_desc, v_desc, dk_desc, dv_desc,
                   dq_desc, seq_len, kv_group, sm_scale, HEAD_D: gl.constexpr,
                   NUM_STAGES: gl.constexpr, CAUSAL: gl.constexpr, PAIR: gl.constexpr,
                   PIPE: gl.constexpr, CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    """``_gluon_bwd_kernels.attn_bwd_dkdv`` plus dQ added into the float32 workspace of
    dq_desc (zeroed before; [B H S, D], block [64, D / 2] under PAIR, else [64, D]); grid (S / 128,
    B H_kv), num_warps=4."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    WG_N: gl.constexpr = k_desc.block_type.shape[0]
    gl.static_assert(WG_N == 64, "one consumer warpgroup = 64 keys")
    gl.static_assert((2 * WG_N) % BLOCK_M == 0, "query tiles must tile the key tile")
    dtype: gl.constexpr = q_desc.dtype
    k_pos = gl.program_id(0) * (2 * WG_N)
    bh_kv = gl.program_id(1)
    kv_row = bh_kv * seq_len + k_pos
    n_q = seq_len // BLOCK_M
    if CAUSAL:
        q_first = k_pos // BLOCK_M
    else:
        q_first = 0
    q_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_D], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, HEAD_D], do_desc.layout)
    lse_smem = gl.allocate_shared_memory(gl.float32, [NUM_STAGES, BLOCK_M], lse_desc.layout)
    dl_smem = gl.allocate_shared_memory(gl.float32, [NUM_STAGES, BLOCK_M], dl_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [2, WG_N, HEAD_D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [2, WG_N, HEAD_D], v_desc.layout)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([WG_N, BLOCK_M], dtype)
    ds_smem = gl.allocate_shared_memory(dtype, [4 if PAIR else 2, WG_N, BLOCK_M], ds_layout)
    dq_smem = gl.allocate_shared_memory(gl.float32, [2] + dq_desc.block_type.shape,
                                        dq_desc.layout)
    kv_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    ds_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    k_free = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    q_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    do_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(kv_bars.index(i), count=1)
        mbarrier.init(ds_ready.index(i), count=2)
    mbarrier.init(k_free.index(0), count=2)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(do_ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    cargs = (dk_desc, dv_desc, dq_desc, q_smem, do_smem, lse_smem, dl_smem, k_smem, v_smem,
             ds_smem, dq_smem, kv_bars, ds_ready, k_free.index(0), q_ready, do_ready, empty,
             kv_row, k_pos, bh_kv, seq_len, kv_group, q_first, n_q, sm_scale)
    gl.warp_specialize([
        (_nd_consumer0, (cargs, HEAD_D, NUM_STAGES, CAUSAL, PAIR, PIPE)),
        (_nd_consumer1, (cargs, HEAD_D, NUM_STAGES, CAUSAL, PAIR, PIPE)),
        (_dkdv_producer, (q_desc, do_desc, lse_desc, dl_desc, k_desc, v_desc, q_smem, do_smem,
                          lse_smem, dl_smem, k_smem, v_smem, kv_bars, q_ready, do_ready,
                          empty, kv_row, bh_kv, seq_len, kv_group, q_first, n_q,
                          NUM_STAGES)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


@gluon.jit
def attn_bwd_delta_zero(o_ptr, do_ptr, delta_ptr, acc_ptr, n_rows, HEAD_D: gl.constexpr,
                        BLOCK: gl.constexpr):
    """``attn_bwd_delta`` that also zeroes the rows' float32 dQ workspace."""
    TPW_D: gl.constexpr = HEAD_D // 8
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW_D, TPW_D], [4, 1], [1, 0])
    rows = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, layout))
    offs = gl.expand_dims(rows * HEAD_D, 1) + gl.expand_dims(cols, 0)
    mask = gl.expand_dims(rows < n_rows, 1)
    o = gl.load(o_ptr + offs, mask=mask, other=0.0).to(gl.float32)
    do = gl.load(do_ptr + offs, mask=mask, other=0.0).to(gl.float32)
    gl.store(delta_ptr + rows, gl.sum(o * do, axis=1), mask=rows < n_rows)
    gl.store(acc_ptr + offs, gl.zeros([BLOCK, HEAD_D], gl.float32, layout), mask=mask)


@gluon.jit
def attn_bwd_dq_convert(acc_ptr, dq_ptr, n_rows, scale, HEAD_D: gl.constexpr,
                        BLOCK: gl.constexpr):
    """dQ = scale x workspace in dQ's type, rows of the 2-D [B H S, D] view."""
    TPW_D: gl.constexpr = HEAD_D // 4
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [32 // TPW_D, TPW_D], [4, 1], [1, 0])
    rows = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, layout))
    offs = gl.expand_dims(rows * HEAD_D, 1) + gl.expand_dims(cols, 0)
    mask = gl.expand_dims(rows < n_rows, 1)
    acc = gl.load(acc_ptr + offs, mask=mask, other=0.0)
    gl.store(dq_ptr + offs, (acc * scale).to(dq_ptr.dtype.element_ty), mask=mask)


def prepare(q, k, v, o, do, stats, dq, dk, dv, delta, dq_acc, dims: tuple, scale: float,
            cfg: tuple, causal: bool, launch=launcher):
    """delta (+ zeroing), dK / dV / dQ-accumulate and the dQ conversion as one callable (q /
    o / do / dq [B, H, S, D], k / v / dk / dv [B, H_kv, S, D], stats / delta float32 [B, H,
    S], dq_acc float32 [B, H, S, D]); cfg = (BLOCK_M, stages, PAIR, PIPE)."""
    B, H, HKV, S, D, dtype = dims
    bm, stages, pair, pipe = cfg
    nq, nk, f32, wg = B * H * S, B * HKV * S, torch.float32, WG_ROWS
    dq_block = [64, D // 2] if pair else [64, D]
    args = (desc(q, [nq, D], [bm, D], dtype), desc(do, [nq, D], [bm, D], dtype),
            desc(stats, [nq], [bm], f32), desc(delta, [nq], [bm], f32),
            desc(k, [nk, D], [wg, D], dtype), desc(v, [nk, D], [wg, D], dtype),
            desc(dk, [nk, D], [wg, D], dtype), desc(dv, [nk, D], [wg, D], dtype),
            desc(dq_acc, [nq, D], dq_block, f32), S, H // HKV, scale)
    acc = Base(dq_acc.data_ptr(), f32)
    runs = [launch(attn_bwd_delta_zero, (triton.cdiv(nq, 64), ),
                   (Base(o.data_ptr(), dtype), Base(do.data_ptr(), dtype),
                    Base(delta.data_ptr(), f32), acc, nq),
                   dict(HEAD_D=D, BLOCK=64, num_warps=4)),
            launch(attn_bwd_dkdvq, (S // ROWS, B * HKV), args,
                   dict(HEAD_D=D, NUM_STAGES=stages, CAUSAL=causal, PAIR=pair, PIPE=pipe,
                        CONSUMER_REGS=CONSUMER_REGS, PRODUCER_REGS=PRODUCER_REGS, num_warps=4,
                        maxnreg=MAXNREG)),
            launch(attn_bwd_dq_convert, (triton.cdiv(nq, 64), ),
                   (acc, Base(dq.data_ptr(), dtype), nq, scale),
                   dict(HEAD_D=D, BLOCK=64, num_warps=4))]

    def run(stream=None):
        for r in runs:
            r(stream)
    run.kernel = runs[1]
    return run


# (BLOCK_M, stages, PAIR, PIPE) per head dim
CONFIGS = {64: ((64, 4, 1, 0), (64, 4, 1, 1), (64, 4, 0, 1), (64, 2, 0, 1)),
           128: ((64, 2, 1, 0), (64, 2, 1, 1))}


def compile_only():
    """Offline (no GPU): compile attn_bwd_dkdvq for sm_90a at both head dims and each
    config, causal and not; print shared memory and the ptxas report (spills)."""
    import os
    from probe_common import gluon_compile_offline, ptxas_report
    for D in (64, 128):
        for cfg in CONFIGS[D]:
            for causal in (False, True):
                B, H, S = 1, 4, 1024
                q = torch.empty(B, H, S, D, dtype=torch.bfloat16)
                st = torch.empty(B, H, S, dtype=torch.float32)
                captured = []
                prepare(q, q, q, q, q, st, q, q, q, st, q.float(), (B, H, H, S, D, q.dtype),
                        0.1, cfg, causal,
                        launch=lambda fn, grid, a, c: captured.append((fn, a, c)))
                fn, a, c = captured[1]
                opts = {k: c.pop(k) for k in ("num_warps", "maxnreg")}
                tag = f"D={D} cfg={cfg} causal={int(causal)}"
                try:
                    ck = gluon_compile_offline(fn, list(a), c, opts)
                    print(f"{tag}: smem={ck.metadata.shared} {ptxas_report(ck.asm['ptx'])}",
                          flush=True)
                    if os.environ.get("PTX_DUMP"):
                        with open(f"{os.environ['PTX_DUMP']}-{D}-{cfg[0]}-{cfg[1]}-"
                                  f"{int(causal)}.ptx", "w") as f:
                            f.write(ck.asm["ptx"])
                except Exception as e:  # noqa: BLE001 -- reported, the next config goes on
                    print(f"{tag}: FAILED {type(e).__name__}: {str(e)[:2000]}", flush=True)


def main(problems=None):
    """problems: (S, D, causal) triples (default: S in 1024 / 4096 / 8192, D 64 / 128,
    causal and not)."""
    from triton.testing import do_bench

    from gluon_attn_bwd_probe import _rel, cudnn_backward, gluon_backward
    from probe_common import lse_reference
    B, H = 4, 16
    problems = problems or [(S, D, c) for S in (1024, 4096, 8192) for D in (64, 128)
                            for c in (False, True)]
    for S, D, causal in problems:
        q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                       for _ in range(4))
        scale = D ** -0.5
        out, ref, cudnn_run = cudnn_backward(q, k, v, do, scale, causal)
        lse = lse_reference(q, k, scale, causal)
        delta = torch.empty(B, H, S, device="cuda")
        acc = torch.empty(B, H, S, D, device="cuda")
        # the engine's first choice of the deterministic Gluon backward
        dcfg = ((64, 2), (64, 3)) if D == 128 else ((64, 4), (128, 2))
        det, *_ = gluon_backward(q, k, v, out, do, lse, scale, causal, dcfg)
        fl = 2.5 * 4 * B * H * S * S * D * (0.5 if causal else 1) / 1e9
        t_det, t_c = do_bench(det), do_bench(cudnn_run)
        parts = "/".join(f"{do_bench(r):.3f}" for r in det.runs)
        print(f"S={S} D={D} causal={int(causal)}: det {fl / t_det:.0f}  "
              f"cudnn {fl / t_c:.0f} TFLOP/s; det delta/dkdv/dq {parts} ms", flush=True)
        for cfg in CONFIGS[D]:
            dq, dk, dv = (torch.full_like(t, float("nan")) for t in (q, k, v))
            acc.fill_(float("nan"))
            try:
                run = prepare(q, k, v, out, do, lse, dq, dk, dv, delta, acc,
                              (B, H, H, S, D, q.dtype), scale, cfg, causal)
                run()
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 -- reported, the next config goes on
                print(f"  cfg={cfg}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
                continue
            errs = [_rel(g, r)[0] for g, r in zip((dq, dk, dv), ref)]
            t_nd = do_bench(run)
            t_k = do_bench(run.kernel)
            print(f"  cfg={cfg}: rel err dq/dk/dv {errs[0]:.1e}/{errs[1]:.1e}/{errs[2]:.1e}"
                  f"  nondet {fl / t_nd:.0f} TFLOP/s ({t_nd:.3f} ms, kernel {t_k:.3f}, "
                  f"det {t_det:.3f})",
                  flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["compile"]:
        compile_only()
    else:   # optional problems "S,D,causal", e.g. 4096,64,1
        main([(int(a), int(b), bool(int(c))) for a, b, c in
              (x.split(",") for x in sys.argv[1:])] or None)
