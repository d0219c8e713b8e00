"""Gluon FlashAttention forward probe for Hopper (sm_90a): TMA + mbarriers + async wgmma.

Run on a GPU machine:      PYTHONPATH=src python bench/gluon_attn_probe.py
Compile only (no GPU):     PYTHONPATH=src python bench/gluon_attn_probe.py compile

Problem
-------
Q: bf16 [B, H, S, D], K, V: bf16 [B, H_kv, S, D] contiguous (BHSD), H_kv dividing H
(grouped-query attention: query head h reads K/V head h // G, G = H / H_kv). Optionally
causal, top-left aligned (S_q == S_kv: key j is kept for query i iff j <= i). Outputs O
[B, H, S, D] bf16 and LSE [B, H, S] fp32 = natural-log logsumexp over the kept keys of the
scaled scores ``sm_scale * q . k``. The kernels view Q/O as 2-D [B*H*S, D] and K/V as 2-D
[B*H_kv*S, D] tensors so one rank-2 TMA descriptor covers every head; a tile of query head bh
starts at row ``bh * S + offset``, its K/V at ``(bh // G) * S + offset`` (bh = b * H + h, so
bh // G = b * H_kv + h // G). Stage 1 needs S % BLOCK_M == 0 and S % BLOCK_N == 0 and is
non-causal; stage 2 also handles causal masks and tails (see below).

Online softmax (base 2, scale folded into one FMA)
--------------------------------------------------
With ``c = sm_scale * log2(e)`` and, for one query row, running max ``m`` (in base-2 units,
i.e. of ``c * s``) and running denominator ``l``, a new tile of raw scores ``s_j``
(fp32 out of wgmma) is folded in as::

    m_new = max(m, c * rowmax(s_j))
    p     = exp2(c * s_j - m_new)            # one FFMA + one MUFU.EX2 per element
    alpha = exp2(m - m_new)                  # rescales history; exp2(-inf) = 0 at start
    l     = alpha * l + rowsum(p)
    acc   = alpha * acc + bf16(p) @ V_j      # fp32 accumulator in registers (wgmma)

At the end ``O = acc / l`` and ``LSE = (m + log2(l)) * ln(2)`` (natural log).

Stage 1: ``attn_fwd_pipelined`` (no warp specialization)
-------------------------------------------------------
One CTA = BLOCK_M query rows (128 rows with 8 warps = 2 warpgroups, or 64 rows with 4 warps;
wgmma splits M across warps, 16 rows per warp). Shared memory: Q tile [BLOCK_M, D]; a ring
of NUM_STAGES K tiles and NUM_STAGES V tiles, each [BLOCK_N, D] with the 128B-swizzled
NVMMASharedLayout that both TMA and wgmma understand. Barriers (all count=1, completed by
the TMA transaction count set with ``mbarrier.expect``):

* ``q_bar``            -- Q tile landed (waited once, phase 0).
* ``k_bars[slot]``     -- K tile of that ring slot landed.  Tile j uses slot j % NUM_STAGES
* ``v_bars[slot]``     -- V tile of that ring slot landed.  and phase (j // NUM_STAGES) & 1.

No "empty" barriers are needed: the same warps that consume a slot also refill it, and they
only do so after ``warpgroup_mma_wait`` has retired the wgmma that read it (wgmma and TMA are
both async-proxy accesses, so no ``fence_async_shared`` is needed between them; the compiler's
membar pass orders the warps of the CTA around the shared buffer).

The loop is the FA3 "intra-warpgroup overlap" schedule. Before the loop, S_0 = Q K_0^T is
computed and its softmax gives P_0. Iteration j (1 <= j < n) then does::

    issue  S_j  = Q @ K_j^T                   (async wgmma, A and B from smem)
    issue  acc += P_{j-1} @ V_{j-1}           (async wgmma, A = P from registers)
    wait(num_outstanding=1)                   -> S_j done (wgmma groups retire in order)
    refill K slot of tile j with tile j + NUM_STAGES
    softmax(S_j) -> P_j, alpha_j              <- overlaps the P V wgmma on the tensor cores
    wait(num_outstanding=0)                   -> acc done
    refill V slot of tile j-1 with tile j-1+NUM_STAGES
    acc *= alpha_j

and a final P_{n-1} V_{n-1} after the loop. TMA loads for NUM_STAGES tiles ahead hide the
global-memory latency. The epilogue writes O through shared memory (re-using the Q buffer)
with a TMA store, and LSE with a plain ``gl.store``.

Stage 2: ``attn_fwd_ws`` (warp specialized, FA3 structure)
---------------------------------------------------------
``gl.warp_specialize`` forks three partitions:

* default partition (``num_warps`` = 4 warps = consumer warpgroup 0) and worker partition 0
  (4 warps, consumer warpgroup 1, many registers): each owns its own 64-row Q tile (so a CTA
  covers BLOCK_M = 128 rows) and runs the same schedule as stage 1 on it; they share the
  K/V ring.
* worker partition 1 (1 warp, 24 registers): the producer. Loads both Q tiles, then streams
  K_j, V_j (j = 0 .. n_tiles - 1, the CTA's key range) into the ring.

Barriers of stage 2:

* ``q_bars[wg]``       -- Q tile of consumer wg landed (producer -> consumer wg).
* ``k_ready[slot]``, ``v_ready[slot]`` (count 1, TMA tx-count) -- producer -> consumers.
* ``k_empty[slot]``, ``v_empty[slot]`` (count 2: one arrive per consumer warpgroup) --
  consumers -> producer; a consumer arrives once its wgmma reading that slot has retired.
  The producer waits on an empty barrier with the inverted phase, so the first pass over
  the ring does not block (a fresh mbarrier counts as having completed phase "-1").

With ``PINGPONG=True`` the two consumer warpgroups additionally hand a token back and forth
through two more mbarriers (``pp_bars``) so that warpgroup 0 issues its GEMMs while
warpgroup 1 does its softmax and vice versa (FA3 "ping-pong" / inter-warpgroup overlap).

Stage 2: causal mask, key-tile ranges and the shared ring
---------------------------------------------------------
Grid (cdiv(S, 128), B * H). With ``CAUSAL`` the query tiles run longest first: program
``pid`` of a head takes query tile ``num_programs(0) - 1 - pid`` (blocks are dispatched with
program_id(0) fastest, so this is longest first within each head, a sawtooth over heads).
A CTA's query rows are q_pos .. q_pos + 127 (warpgroup WG: my_pos = q_pos + 64 * WG ..
+ 63). Key tiles (BLOCK_N divides 128, so the diagonal falls on tile edges):

* the CTA's range: tiles 0 .. n_tiles - 1, n_tiles = cdiv(min(q_pos + 128, S), BLOCK_N)
  under CAUSAL (the tile of key min(q_pos + 128, S) - 1 is the last any stored row keeps),
  cdiv(S, BLOCK_N) otherwise. The producer loads exactly these tiles, in order.
* per warpgroup, tiles 0 .. n_full - 1 are kept entirely by all its rows: n_full =
  (my_pos + 1) // BLOCK_N under CAUSAL (last key (n + 1) * BLOCK_N - 1 <= my_pos), capped
  at S // BLOCK_N with a tail; S // BLOCK_N without CAUSAL. They run a loop with no mask
  arithmetic. Tiles n_full .. n_tiles - 1 (the diagonal tile(s), the partial last key tile)
  run a second copy of the loop body that sets dropped scores to -inf with a select before
  the row max. Tile 0 (peeled before the loop) is always masked when a mask is possible.

Both consumer warpgroups iterate over the same n_tiles tiles, the CTA's union: with
BLOCK_N = 64 and CAUSAL, the last key tile lies entirely above the diagonal for warpgroup 0
(its rows end at q_pos + 63 < first key q_pos + 64); warpgroup 0 still waits for it,
issues both wgmmas on it with every score masked (p = exp2(-inf) = 0, alpha = 1: no effect
on m, l, acc) and arrives on its empty barriers. This wastes one 64 x 64 tile of work per
warpgroup-0 row block but keeps the protocol identical to the non-causal one: every ring
slot's k_empty / v_empty (count 2) gets exactly one arrive per consumer per tile, so a phase
can never be completed by two arrives of the same consumer for different tiles (which is
what would happen if a consumer skipped a tile's arrive or arrived without first waiting for
the tile's ready barrier), and both consumers take the same n_tiles ping-pong turns, so the
pp_bars parities stay in lockstep. With BLOCK_N = 128 both warpgroups need the same tiles
anyway (one diagonal tile each). No row sees an all -inf prefix: every row keeps key 0 and
tile 0 is folded in first, so the running max is finite from tile 0 on and a fully masked
later tile gives p = 0; the masked softmax step still guards m = -inf (subtracts 0) so a
fully masked row would yield zeros, never NaN.

Tails (``TAIL``: S % 128 != 0; host-chosen): the last query tile covers rows past S, the last
key tile keys past S. TMA loads past the end of the 2-D view are zero-filled; loads that run
into the next head's rows read finite data that is never used for stored rows: keys >= S
are masked (non-causal: key < S test; causal: key <= query < S implies it), and P = 0 there
times finite V adds nothing. Rows >= S must not be stored: in the [B*H*S, D] view they are
the next head's first rows, where a TMA store would not clip, so with TAIL the epilogue
writes O and LSE with row-masked ``gl.store`` (from the wgmma register layout; slower than
the smem + TMA store but only the TAIL kernels take it). Without TAIL the unmasked TMA store
path is unchanged.

Offline compilation
-------------------
``compile_only()`` compiles every config (stage 2: causal and not, S = 1024 and S = 1000
(tail), all with kv_group = 4) for sm_90a without a GPU: it builds a
``GluonASTSource`` (triton.experimental.gluon._runtime; same as ``ASTSource`` but with the
Gluon language/ttgir front-end) by hand. A host ``TensorDescriptor`` argument is typed in the
signature by the string ``triton.runtime.jit.mangle_type(desc)`` gives, e.g.
``tensordesc<bf16[128, 128],NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16,
rank=2, transposed=False, fp4_padded=False, cga_layout=[])>`` -- descriptors can be built on
CPU tensors for that (only dtype, block shape and layout matter). ptxas from the Triton
wheel then reports registers / spills.
"""
import math
import os
import re
import subprocess
import sys
import tempfile
import traceback

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

# Module-level constants must be gl.constexpr to be visible inside @gluon.jit code.
LOG2E = gl.constexpr(1.4426950408889634)
LN2 = gl.constexpr(0.6931471805599453)


# --------------------------------------------------------------------------------------------
# Shared device helpers
# --------------------------------------------------------------------------------------------
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
def _epilogue(acc, m_i, l_i, o_smem, o_desc, o_ptr, lse_ptr, q_row, q_pos, seq_len,
              BLOCK_M: gl.constexpr, HEAD_D: gl.constexpr, TAIL: gl.constexpr,
              o_layout: gl.constexpr, s_layout: gl.constexpr):
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


# --------------------------------------------------------------------------------------------
# Stage 1: software-pipelined kernel, all warps do everything
# --------------------------------------------------------------------------------------------
@gluon.jit
def attn_fwd_pipelined(q_desc, k_desc, v_desc, o_desc, o_ptr, lse_ptr, seq_len, kv_group,
                       sm_scale,
                       BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr,
                       NUM_STAGES: gl.constexpr, NUM_WARPS: gl.constexpr):
    """One CTA computes BLOCK_M query rows of one (batch, head); see the module docstring.
    Non-causal, no tails; GQA through kv_group (o_ptr is unused, kept for a common
    argument list with stage 2)."""
    gl.static_assert(BLOCK_M == 16 * NUM_WARPS, "wgmma: 16 rows per warp along M")
    dtype: gl.constexpr = q_desc.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, HEAD_D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    pid_m = gl.program_id(0)
    bh = gl.program_id(1)
    q_pos = pid_m * BLOCK_M
    q_row = bh * seq_len + q_pos
    kv_row = (bh // kv_group) * seq_len
    n_tiles = seq_len // BLOCK_N
    qk_scale = sm_scale * LOG2E

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_D], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_D], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(k_bars.index(i), count=1)
        mbarrier.init(v_bars.index(i), count=1)

    # Prologue: Q and the first NUM_STAGES K/V tiles.
    kv_bytes: gl.constexpr = k_desc.block_type.nbytes
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_smem)
    for i in gl.static_range(NUM_STAGES):
        ok = i < n_tiles
        mbarrier.expect(k_bars.index(i), kv_bytes, pred=ok)
        tma.async_copy_global_to_shared(k_desc, [kv_row + i * BLOCK_N, 0], k_bars.index(i),
                                        k_smem.index(i), pred=ok)
        mbarrier.expect(v_bars.index(i), kv_bytes, pred=ok)
        tma.async_copy_global_to_shared(v_desc, [kv_row + i * BLOCK_N, 0], v_bars.index(i),
                                        v_smem.index(i), pred=ok)

    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, row_s)
    l_i = gl.zeros([BLOCK_M], gl.float32, row_s)
    acc = gl.zeros([BLOCK_M, HEAD_D], gl.float32, o_layout)
    s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)

    # S_0 and its softmax.
    mbarrier.wait(q_bar, 0)
    mbarrier.wait(k_bars.index(0), 0)
    s = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), s, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
    ok = NUM_STAGES < n_tiles
    mbarrier.expect(k_bars.index(0), kv_bytes, pred=ok)
    tma.async_copy_global_to_shared(k_desc, [kv_row + NUM_STAGES * BLOCK_N, 0], k_bars.index(0),
                                    k_smem.index(0), pred=ok)
    p, alpha, m_i, l_i = _softmax_step(s, m_i, l_i, qk_scale)
    p_op = gl.convert_layout(p.to(dtype), p_layout)

    for j in range(1, n_tiles):
        slot = j % NUM_STAGES
        phase = (j // NUM_STAGES) & 1
        pj = j - 1
        pslot = pj % NUM_STAGES
        pphase = (pj // NUM_STAGES) & 1
        # S_j = Q K_j^T, then acc += P_{j-1} V_{j-1}, both in flight together.
        mbarrier.wait(k_bars.index(slot), phase)
        s = warpgroup_mma(q_smem, k_smem.index(slot).permute((1, 0)), s, use_acc=False,
                          is_async=True)
        mbarrier.wait(v_bars.index(pslot), pphase)
        acc = warpgroup_mma(p_op, v_smem.index(pslot), acc, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s, ))
        # K slot of tile j is free again: prefetch tile j + NUM_STAGES into it.
        nk = j + NUM_STAGES
        ok = nk < n_tiles
        mbarrier.expect(k_bars.index(slot), kv_bytes, pred=ok)
        tma.async_copy_global_to_shared(k_desc, [kv_row + nk * BLOCK_N, 0], k_bars.index(slot),
                                        k_smem.index(slot), pred=ok)
        # Softmax of tile j overlaps the P V wgmma.
        p, alpha, m_i, l_i = _softmax_step(s, m_i, l_i, qk_scale)
        acc, p_op = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p_op))
        # V slot of tile j-1 is free again.
        nv = pj + NUM_STAGES
        ok = nv < n_tiles
        mbarrier.expect(v_bars.index(pslot), kv_bytes, pred=ok)
        tma.async_copy_global_to_shared(v_desc, [kv_row + nv * BLOCK_N, 0], v_bars.index(pslot),
                                        v_smem.index(pslot), pred=ok)
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
        p_op = gl.convert_layout(p.to(dtype), p_layout)

    # Last P V.
    lj = n_tiles - 1
    mbarrier.wait(v_bars.index(lj % NUM_STAGES), (lj // NUM_STAGES) & 1)
    acc = warpgroup_mma(p_op, v_smem.index(lj % NUM_STAGES), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))

    mbarrier.invalidate(q_bar)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(k_bars.index(i))
        mbarrier.invalidate(v_bars.index(i))
    _epilogue(acc, m_i, l_i, q_smem, o_desc, o_ptr, lse_ptr, q_row, q_pos, seq_len, BLOCK_M,
              HEAD_D, False, o_layout, s_layout)


# --------------------------------------------------------------------------------------------
# Stage 2: warp-specialized kernel (1 producer warp + 2 consumer warpgroups)
# --------------------------------------------------------------------------------------------
@gluon.jit
def _ws_producer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bars,
                 k_ready, v_ready, k_empty, v_empty, q_row, kv_row, n_tiles,
                 BLOCK_N: gl.constexpr, NUM_STAGES: gl.constexpr):
    """Producer warp: Q tiles of both consumers, then K_j, V_j for key tiles 0..n_tiles-1
    (the CTA's key range: the same n_tiles both consumers iterate over)."""
    WG_M: gl.constexpr = q_desc.block_type.shape[0]
    kv_bytes: gl.constexpr = k_desc.block_type.nbytes
    for wg in gl.static_range(2):
        mbarrier.expect(q_bars.index(wg), q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [q_row + wg * WG_M, 0], q_bars.index(wg),
                                        q_smem.index(wg))
    for j in range(n_tiles):
        slot = j % NUM_STAGES
        phase = (j // NUM_STAGES) & 1
        row = kv_row + j * BLOCK_N
        # Inverted phase: the first pass over a fresh ring does not wait.
        mbarrier.wait(k_empty.index(slot), phase ^ 1)
        mbarrier.expect(k_ready.index(slot), kv_bytes)
        tma.async_copy_global_to_shared(k_desc, [row, 0], k_ready.index(slot), k_smem.index(slot))
        mbarrier.wait(v_empty.index(slot), phase ^ 1)
        mbarrier.expect(v_ready.index(slot), kv_bytes)
        tma.async_copy_global_to_shared(v_desc, [row, 0], v_ready.index(slot), v_smem.index(slot))


@gluon.jit
def _ws_step(j, q_tile, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, pp_bars,
             s, acc, p_op, m_i, l_i, qk_scale, q_pos, seq_len,
             WG: gl.constexpr, NUM_STAGES: gl.constexpr, PINGPONG: gl.constexpr,
             MASK: gl.constexpr, CAUSAL: gl.constexpr, s_layout: gl.constexpr,
             row_o: gl.constexpr, p_layout: gl.constexpr):
    """One main-loop iteration j >= 1 of a consumer: S_j = Q K_j^T and acc += P_{j-1} V_{j-1}
    in flight together, softmax of S_j (masked when MASK) overlapping the P V wgmma."""
    slot = j % NUM_STAGES
    phase = (j // NUM_STAGES) & 1
    pslot = (j - 1) % NUM_STAGES
    pphase = ((j - 1) // NUM_STAGES) & 1
    if PINGPONG:
        # Warpgroup WG's k-th turn (k = j here) completes phase j of pp_bars[WG].
        mbarrier.wait(pp_bars.index(WG), j & 1)
    mbarrier.wait(k_ready.index(slot), phase)
    s = warpgroup_mma(q_tile, k_smem.index(slot).permute((1, 0)), s, use_acc=False,
                      is_async=True)
    mbarrier.wait(v_ready.index(pslot), pphase)
    acc = warpgroup_mma(p_op, v_smem.index(pslot), acc, is_async=True)
    if PINGPONG:
        mbarrier.arrive(pp_bars.index(1 - WG), count=1)
    s = warpgroup_mma_wait(num_outstanding=1, deps=(s, ))
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
def _ws_consumer(o_desc, o_ptr, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty,
                 v_empty, pp_bars, lse_ptr, q_row, q_pos, seq_len, n_tiles, sm_scale,
                 WG: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr,
                 NUM_STAGES: gl.constexpr, PINGPONG: gl.constexpr, CAUSAL: gl.constexpr,
                 TAIL: gl.constexpr):
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
    dtype: gl.constexpr = o_desc.dtype
    HAS_MASK: gl.constexpr = CAUSAL or TAIL
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
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
    # Tile 0: S_0 and its softmax (masked whenever any tile can be: it is the diagonal tile
    # of the first query tile; the mask is exact on a fully kept tile).
    if PINGPONG:
        mbarrier.wait(pp_bars.index(WG), 0)
    mbarrier.wait(k_ready.index(0), 0)
    s = warpgroup_mma(q_tile, k_smem.index(0).permute((1, 0)), s, use_acc=False, is_async=True)
    if PINGPONG:
        mbarrier.arrive(pp_bars.index(1 - WG), count=1)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
    mbarrier.arrive(k_empty.index(0), count=1)
    if HAS_MASK:
        sm = _apply_mask(s, 0, my_pos, seq_len, CAUSAL, s_layout)
        p, alpha, m_i, l_i = _softmax_step(sm, m_i, l_i, qk_scale, True)
    else:
        p, alpha, m_i, l_i = _softmax_step(s, m_i, l_i, qk_scale)
    p_op = gl.convert_layout(p.to(dtype), p_layout)

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
                j, q_tile, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, pp_bars,
                s, acc, p_op, m_i, l_i, qk_scale, my_pos, seq_len,
                WG, NUM_STAGES, PINGPONG, False, CAUSAL, s_layout, row_o, p_layout)
        for j in range(gl.maximum(n_full, 1), n_tiles):
            s, acc, p_op, m_i, l_i = _ws_step(
                j, q_tile, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, pp_bars,
                s, acc, p_op, m_i, l_i, qk_scale, my_pos, seq_len,
                WG, NUM_STAGES, PINGPONG, True, CAUSAL, s_layout, row_o, p_layout)
    else:
        for j in range(1, n_tiles):
            s, acc, p_op, m_i, l_i = _ws_step(
                j, q_tile, k_smem, v_smem, k_ready, v_ready, k_empty, v_empty, pp_bars,
                s, acc, p_op, m_i, l_i, qk_scale, my_pos, seq_len,
                WG, NUM_STAGES, PINGPONG, False, CAUSAL, s_layout, row_o, p_layout)

    lj = n_tiles - 1
    lslot = lj % NUM_STAGES
    mbarrier.wait(v_ready.index(lslot), (lj // NUM_STAGES) & 1)
    acc = warpgroup_mma(p_op, v_smem.index(lslot), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    mbarrier.arrive(v_empty.index(lslot), count=1)
    # (PINGPONG: the last P V is issued without a turn; the other warpgroup's last turn only
    # needs our arrive from turn n_tiles - 1, which already happened.)
    _epilogue(acc, m_i, l_i, q_tile, o_desc, o_ptr, lse_ptr, my_row, my_pos, seq_len, WG_M,
              HEAD_D, TAIL, o_layout, s_layout)


@gluon.jit
def _ws_consumer0(args, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr,
                  NUM_STAGES: gl.constexpr, PINGPONG: gl.constexpr, CAUSAL: gl.constexpr,
                  TAIL: gl.constexpr):
    """Default partition: consumer warpgroup 0."""
    _ws_consumer(*args, 0, BLOCK_N, HEAD_D, NUM_STAGES, PINGPONG, CAUSAL, TAIL)


@gluon.jit
def _ws_consumer1(args, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr,
                  NUM_STAGES: gl.constexpr, PINGPONG: gl.constexpr, CAUSAL: gl.constexpr,
                  TAIL: gl.constexpr):
    """Worker partition 0: consumer warpgroup 1."""
    _ws_consumer(*args, 1, BLOCK_N, HEAD_D, NUM_STAGES, PINGPONG, CAUSAL, TAIL)


@gluon.jit
def attn_fwd_ws(q_desc, k_desc, v_desc, o_desc, o_ptr, lse_ptr, seq_len, kv_group, sm_scale,
                BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr,
                PINGPONG: gl.constexpr, CAUSAL: gl.constexpr, TAIL: gl.constexpr,
                CONSUMER_REGS: gl.constexpr):
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
    pid_m = gl.program_id(0)
    if CAUSAL:
        # Longest first: program 0 of every head takes the last (largest) query tile.
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
    k_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_D], v_desc.layout)
    q_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    pp_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(q_bars.index(i), count=1)
        mbarrier.init(pp_bars.index(i), count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)
        mbarrier.init(v_empty.index(i), count=2)
    if PINGPONG:
        # Warpgroup 0 gets the first turn on the tensor cores.
        mbarrier.arrive(pp_bars.index(0), count=1)

    cargs = (o_desc, o_ptr, q_smem, k_smem, v_smem, q_bars, k_ready, v_ready, k_empty, v_empty,
             pp_bars, lse_ptr, q_row, q_pos, seq_len, n_tiles, sm_scale)
    gl.warp_specialize([
        (_ws_consumer0, (cargs, BLOCK_N, HEAD_D, NUM_STAGES, PINGPONG, CAUSAL, TAIL)),
        (_ws_consumer1, (cargs, BLOCK_N, HEAD_D, NUM_STAGES, PINGPONG, CAUSAL, TAIL)),
        (_ws_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bars, k_ready,
                        v_ready, k_empty, v_empty, q_row, kv_row, n_tiles, BLOCK_N,
                        NUM_STAGES)),
    ], [4, 1], [CONSUMER_REGS, 24])


# --------------------------------------------------------------------------------------------
# Host side
# --------------------------------------------------------------------------------------------
# name -> (kernel kind, constexprs, launch options)
CONFIGS = {
    "s1_m128_n128_st2_w8": ("pipelined", dict(BLOCK_M=128, BLOCK_N=128, NUM_STAGES=2), 8),
    "s1_m128_n64_st3_w8": ("pipelined", dict(BLOCK_M=128, BLOCK_N=64, NUM_STAGES=3), 8),
    "s1_m128_n128_st3_w8": ("pipelined", dict(BLOCK_M=128, BLOCK_N=128, NUM_STAGES=3), 8),
    "s1_m64_n128_st2_w4": ("pipelined", dict(BLOCK_M=64, BLOCK_N=128, NUM_STAGES=2), 4),
    "s2_ws_n128_st2": ("ws", dict(BLOCK_N=128, NUM_STAGES=2, PINGPONG=False), 4),
    "s2_ws_n128_st2_pp": ("ws", dict(BLOCK_N=128, NUM_STAGES=2, PINGPONG=True), 4),
    "s2_ws_n64_st3": ("ws", dict(BLOCK_N=64, NUM_STAGES=3, PINGPONG=False), 4),
}
# Timed by main(): the stage-2 configs plus the best stage-1 one (non-causal only).
BENCH_S1 = "s1_m128_n128_st3_w8"
BENCH_S2 = [n for n, c in CONFIGS.items() if c[0] == "ws"]
WS_CONSUMER_REGS = 240
WS_MAXNREG = 168   # 12 warps (3 warpgroups) x 128 threads x 168 regs <= 64K registers


def _make_args(q, k, v, o, lse, sm_scale, kind, cfg):
    """Build the kernel argument list (2-D TMA descriptors over [B*H*S, D] for Q/O and
    [B*H_kv*S, D] for K/V) + grid. Returns (args, grid, tail)."""
    B, H, S, D = q.shape
    H_kv = k.shape[1]
    assert H % H_kv == 0 and k.shape == v.shape == (B, H_kv, S, D)
    bn = cfg["BLOCK_N"]
    bm = cfg["BLOCK_M"] if kind == "pipelined" else 128
    q_blk = bm if kind == "pipelined" else 64
    tail = S % bm != 0
    if kind == "pipelined":
        assert S % bm == 0 and S % bn == 0, "stage 1 has no tail handling"
    lay_q = gl.NVMMASharedLayout.get_default_for([q_blk, D], gl.bfloat16)
    lay_kv = gl.NVMMASharedLayout.get_default_for([bn, D], gl.bfloat16)

    def desc(t, blk, lay):
        return TensorDescriptor.from_tensor(t.view(-1, D), [blk, D], lay)

    args = [desc(q, q_blk, lay_q), desc(k, bn, lay_kv), desc(v, bn, lay_kv),
            desc(o, q_blk, lay_q), o, lse, S, H // H_kv, sm_scale]
    grid = (triton.cdiv(S, bm), B * H)
    return args, grid, tail


def _kernel_and_consts(kind, cfg, D, num_warps, causal=False, tail=False):
    """The Gluon kernel, its constexpr kwargs and its launch options for one config."""
    if kind == "pipelined":
        assert not causal and not tail, "stage 1 is non-causal without tails"
        consts = dict(cfg, HEAD_D=D, NUM_WARPS=num_warps)
        return attn_fwd_pipelined, consts, dict(num_warps=num_warps)
    consts = dict(cfg, HEAD_D=D, CAUSAL=causal, TAIL=tail, CONSUMER_REGS=WS_CONSUMER_REGS)
    return attn_fwd_ws, consts, dict(num_warps=num_warps, maxnreg=WS_MAXNREG)


def prepare(q, k, v, sm_scale, name, causal=False):
    """Allocate O / LSE and build descriptors once for config ``name`` (CUDA tensors; K/V
    may have fewer heads than Q).

    Returns (launch, o, lse): ``launch()`` runs the kernel, writing o and lse, so timing it
    measures the kernel plus the bare launch cost (no host-side descriptor building)."""
    kind, cfg, num_warps = CONFIGS[name]
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    lse = torch.empty(B, H, S, device=q.device, dtype=torch.float32)
    args, grid, tail = _make_args(q, k, v, o, lse, sm_scale, kind, cfg)
    fn, consts, opts = _kernel_and_consts(kind, cfg, D, num_warps, causal, tail)

    def launch():
        fn[grid](*args, **consts, **opts)

    return launch, o, lse


# --------------------------------------------------------------------------------------------
# Offline compilation (no GPU)
# --------------------------------------------------------------------------------------------
PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")


def _compile_offline(fn, args, consts, opts):
    """Compile a Gluon kernel for sm_90a without a GPU; returns the CompiledKernel."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    names = fn.arg_names
    sig, constexprs, attrs = {}, {}, {}
    pos = 0
    for i, name in enumerate(names):
        if name in consts:
            sig[name] = "constexpr"
            constexprs[(i, )] = consts[name]
            continue
        a = args[pos]
        pos += 1
        sig[name] = mangle_type(a)
        if isinstance(a, torch.Tensor):
            attrs[(i, )] = [["tt.divisibility", 16]]
    src = GluonASTSource(fn, sig, constexprs, attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


def _ptxas_report(ptx):
    """Registers / spill stores / spill loads / smem of every entry in ``ptx``."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        r = subprocess.run([PTXAS, "-arch=sm_90a", "-v", path, "-o", os.devnull],
                           capture_output=True, text=True)
    out = r.stdout + r.stderr
    if r.returncode != 0:
        return "ptxas failed: " + out.strip()[-2000:]
    regs = re.findall(r"Used (\d+) registers", out)
    spill = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", out)
    spill = ",".join(f"{a}/{b}" for a, b in spill)
    # Warp-specialized kernels: ptxas reports the launch bound (maxnreg); the per-partition
    # budgets are the setmaxnreg.{inc,dec} values Triton emitted.
    setmax = sorted({int(n) for n in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)",
                                                ptx)})
    extra = f" setmaxnreg={setmax}" if setmax else ""
    return f"ptxas regs={','.join(regs)} spill st/ld bytes={spill}{extra}"


def compile_only():
    """Compile every config for sm_90a and print the ptxas report: D=128 and D=64; stage 2
    also causal / non-causal, with and without a key/query tail (S=1000 instead of 1024), and
    with GQA (kv_group=4 is a runtime argument, so the non-GQA kernels are the same code up to
    Triton's value-1 specialization)."""
    for D in (128, 64):
        B = 1
        for name, (kind, cfg, num_warps) in CONFIGS.items():
            variants = [(False, 1024)]
            if kind == "ws":
                variants = [(c, S) for c in (False, True) for S in (1024, 1000)]
            for causal, S in variants:
                H, H_kv = 8, 2
                q = torch.empty(B, H, S, D, dtype=torch.bfloat16)
                kv = torch.empty(B, H_kv, S, D, dtype=torch.bfloat16)
                lse = torch.empty(B, H, S, dtype=torch.float32)
                tag = f"D={D:3d} {name:20s} causal={int(causal)} S={S:4d} gqa={H // H_kv}"
                try:
                    args, _, tail = _make_args(q, kv, kv, q, lse, 0.1, kind, cfg)
                    fn, consts, opts = _kernel_and_consts(kind, cfg, D, num_warps, causal,
                                                          tail)
                    ck = _compile_offline(fn, args, consts, opts)
                    print(f"{tag} smem={ck.metadata.shared:6d} "
                          f"{_ptxas_report(ck.asm['ptx'])}", flush=True)
                except Exception as e:  # noqa: BLE001 - report and go on
                    print(f"{tag} FAILED: {type(e).__name__}: {e}"[:3000], flush=True)
                    traceback.print_exc()


# --------------------------------------------------------------------------------------------
# GPU harness
# --------------------------------------------------------------------------------------------
def lse_reference(q, k, sm_scale, causal=False, chunk=1024):
    """fp32 natural-log LSE, computed over chunks of `chunk` query rows (all heads at once);
    k must already have q's heads (repeat_interleave for GQA). Top-left causal mask."""
    B, H, S, D = q.shape
    out = torch.empty(B, H, S, device=q.device, dtype=torch.float32)
    kf = k.float()
    cols = torch.arange(S, device=q.device)
    for i in range(0, S, chunk):
        s = torch.matmul(q[:, :, i:i + chunk].float(), kf.transpose(-1, -2)) * sm_scale
        if causal:
            rows = torch.arange(i, min(i + chunk, S), device=q.device)
            s.masked_fill_(cols[None, :] > rows[:, None], float("-inf"))
        out[:, :, i:i + chunk] = torch.logsumexp(s, dim=-1)
        del s
    return out


def _check(q, k, v, sm_scale, causal, name, ref, lse_ref):
    """Run config ``name`` once; returns (launch, text with errors and OK/WRONG)."""
    launch, o, lse = prepare(q, k, v, sm_scale, name, causal)
    launch()
    torch.cuda.synchronize()
    err = (o.float() - ref.float()).abs().max().item()
    lse_err = (lse - lse_ref).abs().max().item()
    ok = "OK" if err < 2e-2 and lse_err < 1e-2 else "WRONG"
    return launch, f"max|dO|={err:.2e} max|dLSE|={lse_err:.2e} {ok:5s}"


def _references(q, k, v, sm_scale, causal):
    """SDPA (default backend) output and the chunked LSE; K/V repeated to q's heads."""
    import torch.nn.functional as F
    G = q.shape[1] // k.shape[1]
    if G > 1:
        k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)
    return ref, lse_reference(q, k, sm_scale, causal)


def main():
    """Correctness of GQA / tails, then correctness + TFLOP/s vs cuDNN SDPA for D=64/128,
    causal and not (needs an sm_90 GPU)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    B = 4
    print(f"device: {torch.cuda.get_device_name()}  triton {triton.__version__}")
    # Correctness only: GQA (H=16, H_kv=4) and tails (S % 128 != 0), stage-2 configs.
    for H, H_kv, S, D in ((16, 4, 1024, 128), (16, 16, 1000, 128), (16, 4, 1000, 64),
                          (16, 16, 80, 128)):
        q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, H_kv, S, D, device="cuda", dtype=torch.bfloat16)
                for _ in range(2))
        sm_scale = 1.0 / math.sqrt(D)
        for causal in (False, True):
            ref, lse_ref = _references(q, k, v, sm_scale, causal)
            for name in BENCH_S2:
                tag = f"H={H:2d} H_kv={H_kv:2d} S={S:5d} D={D:3d} causal={int(causal)} {name:20s}"
                try:
                    _, res = _check(q, k, v, sm_scale, causal, name, ref, lse_ref)
                    print(f"{tag} {res}", flush=True)
                except Exception as e:  # noqa: BLE001 - report and go on
                    print(f"{tag} FAILED: {type(e).__name__}: {e}"[:2000], flush=True)
    # Correctness + speed, H = H_kv = 16.
    H = 16
    for S in (1024, 4096, 8192, 16384):
        for D in (64, 128):
            q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                       for _ in range(3))
            sm_scale = 1.0 / math.sqrt(D)
            for causal in (False, True):
                flops = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
                ref, lse_ref = _references(q, k, v, sm_scale, causal)
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    ms_cudnn = triton.testing.do_bench(
                        lambda q=q, k=k, v=v, c=causal: F.scaled_dot_product_attention(
                            q, k, v, is_causal=c, scale=sm_scale))
                tf_cudnn = flops / ms_cudnn * 1e-9
                tag = f"S={S:5d} D={D:3d} causal={int(causal)}"
                print(f"{tag} cudnn SDPA: {ms_cudnn:.3f} ms  {tf_cudnn:.1f} TFLOP/s", flush=True)
                names = BENCH_S2 if causal else [BENCH_S1] + BENCH_S2
                for name in names:
                    try:
                        launch, res = _check(q, k, v, sm_scale, causal, name, ref, lse_ref)
                        ms = triton.testing.do_bench(launch)
                        tf = flops / ms * 1e-9
                        print(f"{tag} {name:20s} {res} {ms:.3f} ms {tf:6.1f} TFLOP/s  "
                              f"ratio vs cudnn {tf / tf_cudnn:.3f}", flush=True)
                    except Exception as e:  # noqa: BLE001 - report and go on
                        print(f"{tag} {name:20s} FAILED: {type(e).__name__}: {e}"[:2000],
                              flush=True)
                del ref, lse_ref
            del q, k, v
            torch.cuda.empty_cache()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "compile":
        compile_only()
    else:
        main()
