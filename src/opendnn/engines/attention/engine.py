"""The attention engine: scaled-dot-product attention forward and backward as Triton
flash-attention kernels (``_kernels``, ``_bwd_kernels``; the math is in
``ops/attention.py``).

It takes a graph of one ``sdpa`` or ``sdpa_backward`` node alone, Q / K / V half or
bfloat16 of any strides (BHSD, BSHD), every mask the node offers (causal and bands in
either alignment, padding by per-batch lengths, an additive bias), grouped-query heads
(K and V with one head count), dropout from the dropout engine's Philox stream and
Stats. The backward's default is deterministic (no atomics): dK / dV by key tile, dQ by
query tile, and dBias (when asked) by (query tile, key tile), each recomputing P from
Stats; dBias sums dS over the batches / heads the bias broadcasts over in a fixed order.
Nothing of size S_q x S_kv is stored but dBias itself.

Knobs: BLOCK_M (query rows per program), BLOCK_N (keys per step), num_warps,
num_stages, TMA (forward: Q / K / V tiles through tensor descriptors), DQ_ATOMIC (backward:
dQ accumulated with float32 atomics by the dK / dV kernel, note NONDETERMINISTIC; refused
when the node sets use_deterministic_algorithm; the Triton form measured half as fast as
the split, so only on request; the Gluon form below is the faster at head dim 128).

GLUON=1 (Hopper): the FlashAttention-3-style kernels of ``_gluon_kernels`` (forward) and
``_gluon_bwd_kernels`` (backward) -- a TMA producer warp and two consumer warpgroups with
asynchronous wgmma, written in Gluon -- for packed BHSD half / bfloat16, head dims 64 and
128, no mask or a causal one, GQA; the forward any length (PINGPONG alternates its
warpgroups' GEMM issues; PERSIST, lengths a multiple of 128: one program per SM over the
query tiles, ``_gluon_persist_kernels``), the backward lengths a multiple of 128
(deterministic: dK / dV by key tile, dQ by query tile; with DQ_ATOMIC=1 nondeterministic,
``_gluon_bwd_nd_kernels``: dQ added by TMA reductions from the dK / dV kernel, listed
first, 1.02-1.16x the deterministic pair; refused under use_deterministic_algorithm).
Listed first where they apply (H100: forward 0.92-1.13x cuDNN, backward 0.94-1.08x,
deterministic 0.89-1.04x; docs/design/attention.md); the Triton kernels cover everything
else and the CPU.

Not offered: Triton 3.6's automatic Hopper warp specialization (``tl.range(...,
warp_specialize=True)``). On the H100 it gave wrong outputs at 4 warps (max abs error
0.24-0.54 against cuDNN, NaN with 3 stages) and was slower than the plain loop at 8 warps
(docs/design/attention.md).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ...enums import BehaviorNote, DataType, DiagonalAlignment, NumericalNote
from ...errors import BadParamError, Status
from ...graph.attention_nodes import paged_length
from ...runtime.launch import LaunchList, kernel_from_source
from ..base import SUPPORTED, Engine, EngineConfig, Executable, Knob, Support, Target, decline
from . import _bwd_kernels as KB
from . import _kernels as K

TORCH_TYPES = {DataType.HALF: torch.float16, DataType.BFLOAT16: torch.bfloat16}

TYPES = (DataType.HALF, DataType.BFLOAT16)
# the Gluon launches' buffers in their order (``_gluon_kernels.prepare``,
# ``_gluon_bwd_kernels.prepare``); DELTA (and STATS when not asked for) is the workspace
GLUON_FWD_ROLES = ("Q", "K", "V", "O", "STATS")
GLUON_BWD_ROLES = ("Q", "K", "V", "O", "DO", "STATS", "DQ", "DK", "DV", "DELTA")
KINDS = ("sdpa", "sdpa_backward")


@dataclasses.dataclass(frozen=True)
class AttnKnobs:
    BLOCK_M: int = 64
    BLOCK_N: int = 64
    num_warps: int = 4
    num_stages: int = 3
    TMA: int = 0
    DQ_ATOMIC: int = 0  # backward: dQ by atomics from the dK / dV kernel (nondeterministic)
    DQ_BLOCK_M: int = 0  # backward, split: the dQ kernel's own tiles, warps and stages
    DQ_BLOCK_N: int = 0  # (0: those of the dK / dV kernel)
    DQ_WARPS: int = 0
    DQ_STAGES: int = 0
    GLUON: int = 0  # the warp-specialized Gluon kernels (Hopper only; forward BLOCK_M
    PINGPONG: int = 0  # 128, backward 64 x 128 and dQ 128); forward: warpgroups alternate
    LPT: int = 0  # Gluon forward, causal: query tiles longest first across heads
    PERSIST: int = 0  # Gluon forward: one program per SM over a list of query tiles

    def dq(self) -> "AttnKnobs":
        """The knobs the dQ kernel runs with."""
        return dataclasses.replace(
            self,
            BLOCK_M=self.DQ_BLOCK_M or self.BLOCK_M,
            BLOCK_N=self.DQ_BLOCK_N or self.BLOCK_N,
            num_warps=self.DQ_WARPS or self.num_warps,
            num_stages=self.DQ_STAGES or self.num_stages,
        )


def _forward_tiles(p: K.Problem) -> list[AttnKnobs]:
    """The forward's configs, first choice first. Measured on the H100 (D=128 bf16): 128
    x 64 with 8 warps best for long non-causal rows (504 TFLOP/s at S=4096), 64 x 64 with
    4 warps for short or masked ones (457 causal at 4096, 400 at 1024). Head dim 64, timed
    with Stats written: from S=8192 128 x 64 tiles, non-causal with 8 warps (427 / 433
    TFLOP/s at 8192 / 16384 against 387 for 64 x 64), causal with 4 warps and 4 stages (383
    / 405 against 376 / 377; 8 warps: 317 / 342); below 8192 64 x 64 stays best (419 / 362
    at 4096)."""
    causal = p.right is not None
    if max(p.D, p.DV) <= 64 and p.SQ >= 8192:
        first = AttnKnobs(128, 64, 4, 4) if causal else AttnKnobs(128, 64, 8, 3)
        return [first, AttnKnobs(64, 64, 4, 3)]
    out = [AttnKnobs(128, 64, 8, 3), AttnKnobs(64, 64, 4, 3)]
    return out if p.SQ >= 2048 and not causal and p.D > 64 else out[::-1]


def _backward_tiles(p: K.Problem) -> list[AttnKnobs]:
    """The backward's configs, first choice first. Measured on the H100 (S=4096, D=128):
    dK / dV on 64 x 64 tiles with 4 warps, 2 stages, dQ on 128 x 64 with 8 warps, 3
    stages: 400-402 / 351 TFLOP/s non-causal / causal (399 / 340 with dQ on the 64 x 64
    tiles). At S=4096 and 16384 (head dims 64 and 128, two runs): 32-row query tiles
    pay where the dK / dV accumulators leave room -- causal, 32 x 64 with 4 stages (head
    dim 128: 362 / 415 against 357 / 406; 64: 295-305 / 332-345 against 276-277 /
    315-328); head dim 64 non-causal, 32 x 128 with dQ on 4 warps (360-364 / 370-384
    against 333-335 / 351-352). The atomic-dQ variant is not listed: 197 with per-element
    atomics, 384 with TMA bulk reductions (64 x 128, 8 warps, 3 stages)."""
    dq8 = dict(DQ_BLOCK_M=128, DQ_BLOCK_N=64, DQ_WARPS=8, DQ_STAGES=3)
    out = [AttnKnobs(64, 64, 4, 2, **dq8), AttnKnobs(64, 64, 4, 2), AttnKnobs(64, 64, 4, 3)]
    if p.right is not None and max(p.D, p.DV) <= 128:
        out.insert(0, AttnKnobs(32, 64, 4, 4, **dq8))
    elif max(p.D, p.DV) <= 64:
        out.insert(0, AttnKnobs(32, 128, 4, 3, **{**dq8, "DQ_WARPS": 4}))
    return out


def _gluon():
    """The Gluon forward's module, imported on first use (Gluon's import is not free)."""
    from . import _gluon_kernels

    return _gluon_kernels


def _gluon_persist():
    """The persistent Gluon forward's module, imported on first use."""
    from . import _gluon_persist_kernels

    return _gluon_persist_kernels


def _gluon_bwd():
    """The Gluon backward's module, imported on first use."""
    from . import _gluon_bwd_kernels

    return _gluon_bwd_kernels


def _gluon_bwd_nd():
    """The nondeterministic Gluon backward's module, imported on first use."""
    from . import _gluon_bwd_nd_kernels

    return _gluon_bwd_nd_kernels


def _gluon_first(p: K.Problem) -> AttnKnobs:
    """The Gluon forward's config: 128-key tiles, 2 stages; ping-pong where it won (head dim
    128 at S=8192 without a mask: 634 against 600 TFLOP/s). From S=16384 without a mask, 3
    stages and no ping-pong (H100, two runs under the power cap: 663 / 638 TFLOP/s at head
    dim 128 against 651 / 585 with ping-pong; 476 / 441 at 64 against 454 / 395); head dim
    64 without a mask takes 3 stages from S=4096 too (450-452 against 434-435 at 4096).
    Causal up to S=2048: the persistent forward (PERSIST): at S=1024 on 64-key tiles with 3
    stages, 224-228 / 314-315 TFLOP/s at head dims 64 / 128 against 206-209 / 302-306 for
    the per-tile grid with LPT; at S=2048 head dim 128 the same (452-454 against 427-431),
    head dim 64 on 128-key tiles (312 against 302-308). From S=4096 the per-tile grid wins
    (head dim 128: 540-554 against 510-512; 64 at 8192: 420 against 371-375)."""
    if p.right is not None and p.SQ <= 2048:
        n = 128 if p.SQ > 1024 and max(p.D, p.DV) <= 64 else 64
        return AttnKnobs(128, n, 4, 3, GLUON=1, PERSIST=1)
    if (p.SQ >= 16384 or (p.SQ >= 4096 and max(p.D, p.DV) <= 64)) and p.right is None:
        return AttnKnobs(128, 128, 4, 3, GLUON=1)
    pp = int(max(p.D, p.DV) > 64 and p.SQ >= 8192 and p.right is None)
    return AttnKnobs(128, 128, 4, 2, GLUON=1, PINGPONG=pp)


def _gluon_backward_first(p: K.Problem) -> AttnKnobs:
    """The Gluon backward's config (H100, the best of three configs at S 1024-8192): head
    dim 128, dQ on 64-key tiles with 3 stages, dK / dV with 2 stages (3 for causal masks:
    0.934 against 0.914 of cuDNN at 8192); head dim 64, dQ on 128-key tiles with 2 stages,
    dK / dV with 4 (0.917 against 0.836-0.893 at 8192)."""
    if max(p.D, p.DV) > 64:
        return AttnKnobs(
            64,
            128,
            4,
            3 if p.right is not None else 2,
            DQ_BLOCK_M=128,
            DQ_BLOCK_N=64,
            DQ_WARPS=4,
            DQ_STAGES=3,
            GLUON=1,
        )
    return AttnKnobs(
        64, 128, 4, 4, DQ_BLOCK_M=128, DQ_BLOCK_N=128, DQ_WARPS=4, DQ_STAGES=2, GLUON=1
    )


def _gluon_nd_first(p: K.Problem) -> AttnKnobs:
    """The nondeterministic Gluon backward's config (H100): 2 stages at head dim 128 (3
    barely fit), 4 at head dim 64."""
    return AttnKnobs(64, 128, 4, 2 if max(p.D, p.DV) > 64 else 4, DQ_ATOMIC=1, GLUON=1)


def _gluon_knob_rule(fwd: bool, p: K.Problem, kn: AttnKnobs) -> str:
    """Why the Gluon kernels do not take knobs ``kn`` ('' when they do)."""
    D = p.D
    if fwd:
        if (
            (kn.BLOCK_M, kn.num_warps) != (128, 4)
            or kn.BLOCK_N not in (64, 128)
            or kn.num_stages not in (2, 3)
            or kn.TMA
            or kn.DQ_ATOMIC
            or kn.dq() != kn
        ):
            return (
                "GLUON: BLOCK_M=128, num_warps=4, BLOCK_N 64 or 128, num_stages 2 or 3, "
                "no TMA / DQ knobs"
            )
        if kn.PERSIST and (kn.PINGPONG or kn.LPT):
            return (
                "PERSIST: no PINGPONG, and no LPT (the persistent programs take the "
                "longest query tiles first themselves)"
            )
        mod = _gluon_persist() if kn.PERSIST else _gluon()
        need = mod.smem_bytes(D, kn.BLOCK_N, kn.num_stages) if D in (64, 128) else 0
        what = f"{kn.num_stages} stages of {kn.BLOCK_N} keys"
    elif kn.DQ_ATOMIC:
        if kn.PINGPONG or kn.LPT or kn.PERSIST:
            return "PINGPONG, LPT and PERSIST are knobs of the Gluon forward"
        if (
            (kn.BLOCK_M, kn.BLOCK_N, kn.num_warps) != (64, 128, 4)
            or kn.num_stages not in (2, 3, 4)
            or kn.TMA
            or (kn.DQ_BLOCK_M, kn.DQ_BLOCK_N, kn.DQ_WARPS, kn.DQ_STAGES) != (0, 0, 0, 0)
        ):
            return (
                "GLUON backward, DQ_ATOMIC=1: BLOCK_M=64, BLOCK_N=128, num_warps=4, "
                "num_stages 2-4; no TMA or DQ_BLOCK_M / DQ_BLOCK_N / DQ_WARPS / "
                "DQ_STAGES (no dQ kernel)"
            )
        need = _gluon_bwd_nd().smem_bytes(D, kn.num_stages) if D in (64, 128) else 0
        what = f"DQ_ATOMIC=1 with {kn.num_stages} stages"
    else:
        if kn.PINGPONG or kn.LPT or kn.PERSIST:
            return "PINGPONG, LPT and PERSIST are knobs of the Gluon forward"
        if (
            (kn.BLOCK_M, kn.BLOCK_N, kn.num_warps, kn.DQ_BLOCK_M, kn.DQ_WARPS)
            != (64, 128, 4, 128, 4)
            or kn.num_stages not in (2, 3, 4)
            or kn.TMA
            or kn.DQ_ATOMIC
            or kn.DQ_BLOCK_N not in (64, 128)
            or kn.DQ_STAGES not in (2, 3)
        ):
            return (
                "GLUON backward: BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages 2-4 "
                "(dK / dV); DQ_BLOCK_M=128, DQ_WARPS=4, DQ_BLOCK_N 64 or 128, DQ_STAGES 2 "
                "or 3 (dQ); no TMA / DQ_ATOMIC"
            )
        need = (
            _gluon_bwd().smem_bytes(D, kn.BLOCK_M, kn.num_stages, kn.DQ_BLOCK_N, kn.DQ_STAGES)
            if D in (64, 128)
            else 0
        )
        what = f"{kn.num_stages} / {kn.DQ_STAGES} stages"
    if need > SMEM_LIMIT:
        return (
            f"GLUON: {what} at head dim {D} need {need // 1024} KB of shared memory "
            f"(limit {SMEM_LIMIT // 1024})"
        )
    return ""


def _check_gluon(graph, p: K.Problem, kn: AttnKnobs, target: Target) -> Support:
    """The rules of the Gluon kernels (GLUON=1): what they cover today."""
    n = graph.nodes[0]
    fwd = n.kind == "sdpa"
    t = {r: graph.tensors[u] for r, u in {**n.inputs, **n.outputs}.items()}
    H, HKV, S, D = p.H, p.HKV, p.SQ, p.D
    packed, packed_kv = (H * S * D, S * D, D, 1), (HKV * S * D, S * D, D, 1)
    if not kn.GLUON:
        return decline("PINGPONG, LPT and PERSIST are knobs of the Gluon forward (GLUON=1)")
    if not (target.is_cuda and target.is_hopper):
        return decline("GLUON: a Hopper GPU (sm_90: TMA, wgmma, warp specialization)")
    why = _gluon_knob_rule(fwd, p, kn)
    if why:
        return decline(why)
    types = (
        {p.dtype, p.out_dtype}
        if fwd
        else {t[r].data_type for r in ("Q", "K", "V", "O", "DO", "DQ", "DK", "DV")}
    )
    if len(types) != 1 or p.dtype not in TYPES:
        return decline("GLUON: Q, K, V and O (and the gradients) of one type, half or bfloat16")
    if D != p.DV or D not in (64, 128) or S != p.SKV:
        return decline(
            f"GLUON: head dims 64 or 128 (Q / K {D}, V {p.DV}) and as many keys "
            f"as queries ({S} / {p.SKV})"
        )
    if not fwd and S % 128:
        return decline(f"GLUON backward: sequence lengths a multiple of 128 ({S})")
    if kn.DQ_ATOMIC and n.use_deterministic_algorithm:
        return decline(
            "DQ_ATOMIC adds dQ by TMA reductions (nondeterministic); the node asks "
            "for a deterministic algorithm"
        )
    if kn.PERSIST and S % 128:
        return decline(f"PERSIST: sequence lengths a multiple of 128 ({S})")
    rows = ("Q", "O") + (() if fwd else ("DO", "DQ"))
    kv = ("K", "V") + (() if fwd else ("DK", "DV"))
    if (
        any(tuple(t[r].strides) != packed for r in rows)
        or any(tuple(t[r].strides) != packed_kv for r in kv)
        or (
            p.stats
            and p.stats[:3] != tuple(st * (n > 1) for st, n in ((H * S, p.B), (S, H), (1, S)))
        )
    ):
        return decline(
            f"GLUON: {', '.join(rows + kv)} (and Stats) packed B, H, S, D (one 2-D TMA view)"
        )
    if (
        p.bias
        or p.alibi
        or p.paged
        or p.ragged
        or p.sink is not None
        or p.block_mask
        or p.smax
        or p.ssum
        or p.dropout
        or p.padding
        or p.left is not None
        or p.right not in (None, 0)
    ):
        return decline(
            "GLUON: no bias, ALiBi, paged K / V, ragged offsets, sink, block mask, score "
            "outputs, dropout, padding or band; a causal mask (right bound 0) or none"
        )
    if kn.LPT and p.right is None:
        return decline("LPT orders causal query tiles (longest first); this node has no mask")
    if "ATTN_SCALE" in t and not t["ATTN_SCALE"].is_pass_by_value:
        return decline("GLUON: ATTN_SCALE passed by value")
    if max(p.H, p.HKV) * p.B * S * D >= K.INT32_LIMIT:  # row offsets times D, in int32
        return decline("GLUON: Q / K / V / O of 2^31 elements or more")
    return SUPPORTED


def _strides(d, n: int = 4) -> tuple:
    """Strides of ``d`` with 0 for size-one dims (a broadcast bias / statistic)."""
    return tuple(0 if size == 1 else st for size, st in zip(d.dims, d.strides))[:n]


def _ragged_align(t: dict, roles: list) -> tuple:
    """(role, n) for the ragged Q / K / V / O (and gradients) whose rows are 16-byte
    aligned -- d contiguous, row and head strides 16-byte multiples -- so that their
    offsets are taken as multiples of n = 16 / itemsize elements too (as packed rows of
    such strides are); the kernels' loads and stores then vectorize along d."""
    out = []
    for r in roles:
        x = t.get(r)
        if r not in ("Q", "K", "V", "O", "DO", "DQ", "DK", "DV") or x is None:
            continue
        n = 16 // x.data_type.itemsize
        if n and x.strides[3] == 1 and x.strides[2] % n == 0 and x.strides[1] % n == 0:
            out.append((r, n))
    return tuple(out)


def _ragged_v_cap(p: K.Problem) -> int | None:
    """The widest key tile (BLOCK_N) the forward takes with a ragged V whose rows are not
    16-byte aligned (its tile then loads element by element, and Triton 3.6 miscompiled
    P V on sm_90 with such a tile under wider key tiles; _kernels' docstring); None
    where any width is taken."""
    if "V" in p.ragged and "V" not in dict(p.ragged_align):
        return max(32, K._pow2(p.DV))
    return None


def _problem(graph) -> K.Problem:
    n = graph.nodes[0]
    t = {r: graph.tensors[u] for r, u in {**n.inputs, **n.outputs}.items()}
    q, k, v = t["Q"], t["K"], t["V"]
    o = t["O"]
    stats = t.get("STATS")
    bias = t.get("BIAS")
    seed, off = t.get("SEED"), t.get("OFFSET")
    p = n.dropout_probability or 0.0
    s_kv, paged = k.dims[2], None
    ragged = n.ragged_roles()
    if n.kind == "sdpa" and n.paged:  # K / V are containers [blocks, H, block_size, D]
        tk, tv = t["PAGE_TABLE_K"], t["PAGE_TABLE_V"]
        s_kv = paged_length(n, tk.dims[2], k.dims[2])
        paged = (
            k.dims[2],
            v.dims[2],
            (tk.strides[0], tk.strides[2]),
            (tv.strides[0], tv.strides[2]),
        )
    return K.Problem(
        q.dims[0],
        q.dims[1],
        k.dims[1],
        q.dims[2],
        s_kv,
        q.dims[3],
        v.dims[3],
        _strides(q),  # a size-one dim's stride addresses nothing: 0 (cuDNN ignores it,
        _strides(k),  # and a huge one would overflow the masked rows' int32 offsets)
        _strides(v),
        _strides(o),
        q.data_type,
        o.data_type,
        stats=None if stats is None else _strides(stats),
        bias=None if bias is None else _strides(bias),
        bias_dtype=bias and bias.data_type,
        right=n.diagonal_band_right_bound,
        left=n.diagonal_band_left_bound,
        bottom_right=n.diagonal_alignment == DiagonalAlignment.BOTTOM_RIGHT,
        padding=n.use_padding_mask,
        seq_strides=(t["SEQ_LEN_Q"].strides[0], t["SEQ_LEN_KV"].strides[0])
        if n.use_padding_mask
        else (1, 1),
        dropout=p > 0.0,
        p_drop=p,
        seed_host=bool(seed is not None and seed.is_pass_by_value),
        offset_host=bool(off is not None and off.is_pass_by_value),
        alibi=bool(n.use_alibi_mask),
        paged=paged,
        ragged=tuple(ragged),
        ragged_align=_ragged_align(t, ragged),
        block_mask=tuple(t["BLOCK_MASK"].strides) if "BLOCK_MASK" in t else None,
        sink=t["SINK_TOKEN"].strides[1] if "SINK_TOKEN" in t else None,
        smax=_strides(t["SCORE_MAX"], 3) if "SCORE_MAX" in t else None,
        ssum=_strides(t["SCORE_SUM_EXP"], 3) if "SCORE_SUM_EXP" in t else None,
    )


def _grads(graph) -> KB.Grads:
    n = graph.nodes[0]
    t = {r: graph.tensors[u] for r, u in {**n.inputs, **n.outputs}.items()}
    db = t.get("DBIAS")
    extra = (
        {}
        if db is None
        else dict(
            dbias=tuple(db.strides), dbias_dtype=db.data_type, bias_b=db.dims[0], bias_h=db.dims[1]
        )
    )
    return KB.Grads(
        *(_strides(t[r]) for r in ("DO", "DQ", "DK", "DV")),
        *(t[r].data_type for r in ("DO", "DQ", "DK", "DV")),
        **extra,
    )


SMEM_LIMIT = 227 * 1024  # bytes of shared memory a program may use (H100)
MAX_KERNEL_HEAD_DIM = 256  # the kernels' largest head dim (tiles of whole rows)


def _smem(p: K.Problem, kn: AttnKnobs, fwd: bool, dq_only: bool = False) -> int:
    """Shared memory estimate of 2-byte tiles: num_stages buffered streamed tiles plus the
    resident ones. Forward: K / V of BLOCK_N rows streamed, Q resident. Backward, the
    larger of its kernels (``dq_only``: the dQ kernel's): dK / dV streams Q / dO (BLOCK_M
    rows) past resident K / V (BLOCK_N rows); dQ (with DQ_ATOMIC=0) the other way round."""
    bd = max(16, K._pow2(p.D))
    bdv = K.v_cols(p) if fwd else max(16, K._pow2(p.DV))
    row = (bd + bdv) * 2
    if fwd:  # calibrated: D = 256, 64 x 64, 3 stages asked for 262144 bytes (H100)
        return kn.num_stages * kn.BLOCK_N * row + max(kn.BLOCK_M, kn.BLOCK_N) * row
    # measured to fit (H100, D = 128): dK / dV 64 x 128 and dQ 128 x 64, 3 stages
    dkdv = kn.num_stages * kn.BLOCK_M * row + 2 * kn.BLOCK_N * row
    dq = kn.num_stages * kn.BLOCK_N * row + 2 * kn.BLOCK_M * row
    if dq_only:
        return dq
    return dkdv if kn.DQ_ATOMIC or kn.dq() != kn else max(dkdv, dq)


def _fit(p: K.Problem, kn: AttnKnobs, fwd: bool, dq_only: bool = False) -> AttnKnobs:
    """``kn`` with fewer stages, then narrower tiles, until its shared memory fits (head
    dims 192-256: a 64 x 64 tile with 3 stages needed 262 KB, the H100 has 227)."""
    while _smem(p, kn, fwd, dq_only) > SMEM_LIMIT and kn.num_stages > 1:
        kn = dataclasses.replace(kn, num_stages=kn.num_stages - 1)
    while _smem(p, kn, fwd, dq_only) > SMEM_LIMIT and max(kn.BLOCK_M, kn.BLOCK_N) > 16:
        kn = dataclasses.replace(
            kn, BLOCK_M=max(16, kn.BLOCK_M // 2), BLOCK_N=max(16, kn.BLOCK_N // 2)
        )
    return kn


def _fit_dq(p: K.Problem, kn: AttnKnobs) -> AttnKnobs:
    """``kn`` with its dQ kernel's tiles / stages fitted as ``_fit`` does."""
    d = _fit(p, kn.dq(), False, True)
    return dataclasses.replace(
        kn, DQ_BLOCK_M=d.BLOCK_M, DQ_BLOCK_N=d.BLOCK_N, DQ_STAGES=d.num_stages
    )


class AttentionEngine(Engine):
    """Flash attention, forward and backward."""

    id = 40
    name = "attention"
    behavior_notes = frozenset({BehaviorNote.RUNTIME_COMPILATION})

    def check_support(self, graph, target: Target) -> Support:
        if len(graph.nodes) != 1 or graph.nodes[0].kind not in KINDS:
            return decline("takes one sdpa or sdpa_backward node alone")
        n = graph.nodes[0]
        t = {r: graph.tensors[u] for r, u in {**n.inputs, **n.outputs}.items()}
        if "SCORES" in t:
            return decline(
                "scores from a score_mod subgraph (given, not computed) run on the reference"
            )
        if "DROPOUT_MASK" in t:
            return decline("a caller's dropout mask (mask, scale) runs on the reference")
        for r in ("Q", "K", "V", "O") + (("DO", "DQ", "DK", "DV") if n.kind != "sdpa" else ()):
            if t[r].data_type not in TYPES:
                return decline(
                    f"tensor {t[r].label()} is {t[r].data_type.name}: half or "
                    "bfloat16 only (float32 runs on the reference)"
                )
        if t["K"].dims[1] != t["V"].dims[1]:
            return decline("K and V with different head counts run on the reference")
        if max(t["Q"].dims[3], t["V"].dims[3]) > MAX_KERNEL_HEAD_DIM:
            return decline(
                f"head dims above {MAX_KERNEL_HEAD_DIM} (Q / K {t['Q'].dims[3]}, V "
                f"{t['V'].dims[3]}) run on the reference: the kernels hold a row of Q, K "
                "and V per tile"
            )
        if n.kind == "sdpa_backward" and "ATTN_SCALE" in t and not t["ATTN_SCALE"].is_pass_by_value:
            return decline("ATTN_SCALE must be passed by value")
        for r in ("Q", "K", "V", "O", "DO", "DQ", "DK", "DV"):
            d = t.get(r)
            st = _strides(d) if d is not None else ()
            if any(s * size >= K.INT32_LIMIT for s, size in zip(st[2:], d.dims[2:] if st else ())):
                return decline(
                    f"tensor {d.label()}: a row or head-dim stride times its length reaches "
                    "2^31 elements (the kernels' offsets within a head are int32; batch and "
                    "head offsets are widened): runs on the reference"
                )
        return SUPPORTED

    def knob_space(self, graph=None) -> list[Knob]:
        return [
            Knob("BLOCK_M", (16, 32, 64, 128), 64),
            Knob("BLOCK_N", (16, 32, 64, 128), 64),
            Knob("num_warps", (1, 2, 4, 8), 4),
            Knob("num_stages", (1, 2, 3, 4), 3),
            Knob("TMA", (0, 1), 0),
            Knob("DQ_ATOMIC", (0, 1), 0),
            Knob("DQ_BLOCK_M", (0, 16, 32, 64, 128), 0),
            Knob("DQ_BLOCK_N", (0, 16, 32, 64, 128), 0),
            Knob("DQ_WARPS", (0, 1, 2, 4, 8), 0),
            Knob("DQ_STAGES", (0, 1, 2, 3, 4), 0),
            Knob("GLUON", (0, 1), 0),
            Knob("PINGPONG", (0, 1), 0),
            Knob("LPT", (0, 1), 0),
            Knob("PERSIST", (0, 1), 0),
        ]

    def check_config(self, graph, config: EngineConfig, target: Target) -> Support:
        sup = super().check_config(graph, config, target)
        if not sup.ok:
            return sup
        kn, p = AttnKnobs(**config.knob_dict), _problem(graph)
        fwd = graph.nodes[0].kind == "sdpa"
        if kn.GLUON or kn.PINGPONG or kn.LPT or kn.PERSIST:
            return _check_gluon(graph, p, kn, target)
        if kn.DQ_ATOMIC and fwd:
            return decline("DQ_ATOMIC is a backward knob")
        if kn.DQ_ATOMIC and graph.nodes[0].use_deterministic_algorithm:
            return decline(
                "DQ_ATOMIC adds dQ with atomics (nondeterministic); the node asks "
                "for a deterministic algorithm"
            )
        dq_set = kn.DQ_BLOCK_M or kn.DQ_BLOCK_N or kn.DQ_WARPS or kn.DQ_STAGES
        if dq_set and (fwd or kn.DQ_ATOMIC):
            return decline(
                "DQ_BLOCK_M / DQ_BLOCK_N / DQ_WARPS / DQ_STAGES set the split "
                "backward's dQ kernel (DQ_ATOMIC=0)"
            )
        for what, k, only in (("", kn, False),) + (
            (("dQ kernel: ", kn.dq(), True),) if dq_set else ()
        ):
            need = _smem(p, k, fwd, only)
            if target.is_cuda and need > SMEM_LIMIT:
                return decline(
                    f"{what}{k.num_stages} stages of {k.BLOCK_M} x {k.BLOCK_N} tiles "
                    f"at head dims {p.D} / {p.DV} need ~{need // 1024} KB "
                    f"of shared memory (limit {SMEM_LIMIT // 1024} KB)"
                )
        if kn.TMA and not target.is_cuda:
            return decline("TMA: on a GPU only")
        if kn.TMA and (p.paged or p.ragged):
            return decline(
                "TMA: Q / K / V in one strided view each (not paged caches or ragged offsets)"
            )
        cap = _ragged_v_cap(p) if target.is_cuda and fwd else None
        if cap is not None and kn.BLOCK_N > cap:
            return decline(
                f"a ragged V with rows not 16-byte aligned takes BLOCK_N <= {cap} at head "
                f"dim V {p.DV} (Triton 3.6 miscompiles wider tiles on sm_90)"
            )
        if kn.DQ_ATOMIC and p.ragged:
            return decline("DQ_ATOMIC: a dense dQ accumulator (not ragged offsets)")
        if (
            kn.TMA
            and fwd
            and any(t[3] != 1 or (t[2] * 2) % 16 or not t[2] for t in (p.q, p.k, p.v))
        ):
            return decline("TMA: Q, K and V need unit head-dim strides and 16-byte rows")
        if kn.TMA and not fwd and not kn.DQ_ATOMIC:
            return decline("TMA in the backward: the atomic dQ's bulk reduction (DQ_ATOMIC=1)")
        return SUPPORTED

    def configs(self, graph, target: Target) -> list[EngineConfig]:
        p = _problem(graph)
        fwd = graph.nodes[0].kind == "sdpa"
        if not target.is_cuda:
            out = [AttnKnobs(16, 16, 4, 1)]
        elif fwd:
            out = _forward_tiles(p)
        else:
            out = _backward_tiles(p)
        if target.is_cuda:
            out = [_fit(p, kn, fwd) for kn in out]
            out = [kn if kn.dq() == kn else _fit_dq(p, kn) for kn in out]
        cap = _ragged_v_cap(p) if target.is_cuda and fwd else None
        if cap is not None:
            out = [dataclasses.replace(kn, BLOCK_N=min(kn.BLOCK_N, cap)) for kn in out]
        if fwd and target.is_cuda:
            g = _gluon_first(p)
            if _check_gluon(graph, p, g, target).ok:
                # H100: 0.90-1.10x cuDNN at head dim 128, 0.91-0.99x at 64 from S=4096.
                # At S=1024 it wins at head dim 128 (0.92x against the Triton kernel's
                # 0.69x; causal 0.89-0.91x against 0.76x) and causal at 64 (0.92-0.93x
                # against 0.88x), but not at 64 without a mask (0.85x against 0.93x);
                # docs/design/attention.md
                first = p.SQ >= 2048 or max(p.D, p.DV) > 64 or p.right is not None
                out = [g] + out if first else out[:1] + [g] + out[1:]
        elif target.is_cuda:
            g = _gluon_backward_first(p)
            if _check_gluon(graph, p, g, target).ok:
                # H100: 0.87-1.85x cuDNN at S 1024-8192 against 0.76-0.98x for the
                # Triton split
                out = [g] + out
            nd = _gluon_nd_first(p)
            if _check_gluon(graph, p, nd, target).ok:
                # H100: 1.02-1.09x the deterministic pair at head dim 64, 1.05-1.16x at
                # 128 (0.97x at S=1024 causal)
                out = [nd] + out
        return [EngineConfig.make(self, **dataclasses.asdict(kn)) for kn in dict.fromkeys(out)]

    def numerical_notes(self, graph, config) -> frozenset:
        if config.knob_dict.get("DQ_ATOMIC"):
            return frozenset({NumericalNote.NONDETERMINISTIC})
        return frozenset()

    def estimate_seconds(self, graph, config, target) -> float:
        p = _problem(graph)
        frac = 0.5 if p.right is not None else 1.0
        flops = 4.0 * p.B * p.H * p.SQ * p.SKV * max(p.D, p.DV) * frac
        if graph.nodes[0].kind != "sdpa":  # measured: the Triton atomic dQ, half as fast
            kd = config.knob_dict
            flops *= 2.5 * (2.0 if kd.get("DQ_ATOMIC") and not kd.get("GLUON") else 1.0)
        return flops / (0.6 * target.peak_flops_fp16) + 5e-6

    def workspace_size(self, graph, config, target) -> int:
        if graph.nodes[0].kind == "sdpa":
            p = _problem(graph)  # the Gluon kernel always writes Stats: here when not asked
            return p.B * p.H * p.SQ * 4 if config.knob_dict.get("GLUON") and not p.stats else 0
        # delta = rowsum(dO o O), and the atomic variant's float32 dQ accumulator
        return KB.workspace_floats(_problem(graph), AttnKnobs(**config.knob_dict)) * 4

    def build(self, graph, config, target) -> Executable:
        return _AttnExecutable(
            graph, AttnKnobs(**config.knob_dict), target, self.workspace_size(graph, config, target)
        )


class _AttnExecutable(Executable, LaunchList):
    def __init__(self, graph, kn: AttnKnobs, target, workspace: int):
        LaunchList.__init__(self)
        self.workspace_size = workspace
        n, p = graph.nodes[0], _problem(graph)
        if p.B * p.H * p.SQ == 0 or (n.kind != "sdpa" and p.B * p.HKV * p.SKV == 0):
            return
        uids = {**n.inputs, **n.outputs}
        if kn.GLUON:
            # The buffers in the order the Gluon launch takes them, None for the workspace
            # (the backward's delta; the forward's Stats when not asked for)
            roles = GLUON_BWD_ROLES if n.kind != "sdpa" else GLUON_FWD_ROLES
            self.gluon, self.op = (p, kn, tuple(uids.get(r) for r in roles)), n.kind
            self.labels = tuple(
                graph.tensors[uids[r]].label() if r in uids else None for r in roles
            )
            self.scale_uid = uids.get("ATTN_SCALE")
            self.num_sms = target.num_sms
            return
        tag = f"attn_{graph.key()[:12]}"
        const = {"num_warps": kn.num_warps, "num_stages": kn.num_stages}
        cuda = target.is_cuda
        if kn.TMA and cuda:
            from ..matmul._kernels import ensure_allocator

            ensure_allocator()
        extra = [("buf", uids["BIAS"])] if p.bias else []
        extra += [("buf", uids["BLOCK_MASK"])] if p.block_mask else []
        extra += [("buf", uids["SEQ_LEN_Q"]), ("buf", uids["SEQ_LEN_KV"])] if p.padding else []
        extra += [("buf", uids["SEED"]), ("buf", uids["OFFSET"])] if p.dropout else []
        extra += [("buf", uids["PAGE_TABLE_K"]), ("buf", uids["PAGE_TABLE_V"])] if p.paged else []
        if p.sink is not None and n.kind == "sdpa":  # the backward's kernels need no sink
            extra.append(("buf", uids["SINK_TOKEN"]))
        extra += [("buf", uids[f"RAGGED_{r}"]) for r in p.ragged]  # the ragged offsets
        extra.append(("buf", uids["ATTN_SCALE"]) if "ATTN_SCALE" in uids else ("int", 1.0))
        buf = {r: ("buf", uids[r]) for r in uids}
        gq = (math.ceil(p.SQ / kn.BLOCK_M), p.B * p.H)
        if "RNG_DUMP" in uids and p.SKV:  # the dropout mask, for the caller (rng_dump)
            d = graph.tensors[uids["RNG_DUMP"]]
            grid = (math.ceil(p.B * p.H * p.SQ * p.SKV / K.DUMP_BLOCK),)
            src = K.dump_source(f"{tag}_dump", p, tuple(d.strides), d.data_type)
            dump = [buf["RNG_DUMP"], ("buf", uids["SEED"]), ("buf", uids["OFFSET"])]
            self.add_launch(
                kernel_from_source(src, f"{tag}_dump"), grid, {"num_warps": 4}, dump, graph, cuda
            )
        if n.kind == "sdpa":
            args = (
                [buf["Q"], buf["K"], buf["V"], buf["O"]]
                + ([buf["STATS"]] if p.stats else [])
                + ([buf["SCORE_MAX"]] if p.smax else [])
                + ([buf["SCORE_SUM_EXP"]] if p.ssum else [])
                + extra
            )
            # the interpreter's source differs (float32 dots): built for the plan's device
            src = K.fwd_source(tag, p, kn, interpret=not cuda)
            self.add_launch(kernel_from_source(src, tag), gq, const, args, graph, cuda)
            return
        g, ws = _grads(graph), ("ws", torch.float32)
        gk = (math.ceil(p.SKV / kn.BLOCK_N), p.B * p.HKV)
        delta = [buf["O"], buf["DO"], ws]
        if len(KB.delta_params(p)) > 3:  # a ragged O / dO: the lengths and their offsets
            delta += [buf["SEQ_LEN_Q"]] + [buf[f"RAGGED_{r}"] for r in ("O", "DO") if r in p.ragged]
        launches = [
            ("delta", KB.delta_source(f"{tag}_delta", p, g, kn), gq, delta, 4),
            (
                "dkdv",
                KB.dkdv_source(f"{tag}_dkdv", p, g, kn, not cuda),
                gk,
                [buf[r] for r in ("Q", "K", "V", "DO", "STATS", "DK", "DV")] + [ws] + extra,
                kn.num_warps,
            ),
        ]
        if kn.DQ_ATOMIC:
            launches.append(
                (
                    "dqconv",
                    KB.dq_convert_source(f"{tag}_dqconv", p, g, kn),
                    gq,
                    [buf["DQ"], ws, extra[-1]],
                    4,
                )
            )
        else:
            kq = kn.dq()
            launches.append(
                (
                    "dq",
                    KB.dq_source(f"{tag}_dq", p, g, kq, not cuda),
                    (math.ceil(p.SQ / kq.BLOCK_M), p.B * p.H),
                    [buf[r] for r in ("Q", "K", "V", "DO", "STATS", "DQ")] + [ws] + extra,
                    (kq.num_warps, kq.num_stages),
                )
            )
        if "DSINK_TOKEN" in uids:  # the sink's gradient, from Stats and delta
            dsink = [buf["STATS"], ws, buf["SINK_TOKEN"], buf["DSINK_TOKEN"]]
            dsink += [buf["SEQ_LEN_Q"]] if p.padding else []
            dsink += [buf["RAGGED_STATS"]] if "STATS" in p.ragged else []
            st = graph.tensors[uids["DSINK_TOKEN"]].strides[1]
            launches.append(("dsink", KB.dsink_source(f"{tag}_dsink", p, st), (p.H,), dsink, 4))
        if g.dbias is not None:  # dS summed over the bias's broadcast axes
            launches.append(
                (
                    "dbias",
                    KB.dbias_source(f"{tag}_dbias", p, g, kn, not cuda),
                    (gq[0], math.ceil(p.SKV / kn.BLOCK_N), g.bias_b * g.bias_h),
                    [buf[r] for r in ("Q", "K", "V", "DO", "STATS", "DBIAS")] + [ws] + extra,
                    8 if cuda else kn.num_warps,
                )
            )  # ptxas: 1 KB of spills with 4 warps
        for name, src, grid, args, warps in launches:
            if 0 in grid:
                continue
            c = (
                dict(const, num_warps=warps)
                if isinstance(warps, int)
                else dict(num_warps=warps[0], num_stages=warps[1])
            )
            self.add_launch(kernel_from_source(src, f"{tag}_{name}"), grid, c, args, graph, cuda)

    gluon = _gluon_key = _gluon_launch = None

    def _gluon_prepare(self, bufs: list, scale: float):
        """The Gluon launch for ``bufs`` (in the launch's order): each must be 16-byte
        aligned (a TMA descriptor's base), checked here, once per set of addresses."""
        p, kn, _ = self.gluon
        for x, label in zip(bufs, self.labels):
            if x.data_ptr() % 16:
                what = "the buffer" if label else "the workspace"
                raise BadParamError(
                    f"{what} is not 16-byte aligned; the Gluon kernels read it "
                    "through TMA descriptors",
                    op=self.op,
                    tensor=label,
                    status=Status.BAD_PARAM_MISALIGNED_POINTER,
                )
        dims = (p.B, p.H, p.HKV, p.SQ, p.D, TORCH_TYPES[p.dtype])
        causal = p.right is not None
        if self.op != "sdpa" and kn.DQ_ATOMIC:
            # the workspace: delta, then dQ's float32 accumulator (128-byte aligned)
            ws = bufs[-1].data_ptr()
            delta = _gluon_bwd().Base(ws, torch.float32)
            acc = _gluon_bwd().Base(ws + 4 * KB.dq_base(p), torch.float32)
            return _gluon_bwd_nd().prepare(
                *bufs[:-1], delta, acc, dims, scale, kn.num_stages, causal
            )
        if self.op != "sdpa":
            cfg = ((kn.BLOCK_M, kn.num_stages), (kn.DQ_BLOCK_N, kn.DQ_STAGES))
            return _gluon_bwd().prepare(*bufs, dims, scale, cfg, causal)
        if kn.PERSIST:
            return _gluon_persist().prepare(
                *bufs, dims, scale, kn.BLOCK_N, kn.num_stages, causal, self.num_sms
            )
        return _gluon().prepare(
            *bufs, dims, scale, kn.BLOCK_N, kn.num_stages, bool(kn.PINGPONG), causal, bool(kn.LPT)
        )

    def run(self, buffers, workspace, stream=None):
        if self.gluon is None:
            self.run_launches(buffers, workspace, stream)
            return
        bufs = [workspace if u is None else buffers[u] for u in self.gluon[2]]
        scale = 1.0 if self.scale_uid is None else float(buffers[self.scale_uid])
        key = tuple(x.data_ptr() for x in bufs) + (scale,)
        if self._gluon_key != key:  # TMA descriptors for these addresses, built once
            self._gluon_launch = self._gluon_prepare(bufs, scale)
            self._gluon_key = key
        self._gluon_launch(stream)
