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
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# The shared device helpers, the constants and the warp-specialized kernel (stage 2) live
# in the engine (src/opendnn/engines/attention/_gluon_kernels.py); stage 1 stays here.
from probe_common import compile_report, lse_reference  # noqa: E402 (bench/)
from opendnn.engines.attention._gluon_kernels import (  # noqa: E402
    LOG2E, _epilogue, _softmax_step, attn_fwd_ws)

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
                args, _, tail = _make_args(q, kv, kv, q, lse, 0.1, kind, cfg)
                fn, consts, opts = _kernel_and_consts(kind, cfg, D, num_warps, causal, tail)
                compile_report(tag, fn, args, consts, opts)


# --------------------------------------------------------------------------------------------
# GPU harness
# --------------------------------------------------------------------------------------------
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
