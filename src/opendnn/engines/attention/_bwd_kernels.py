"""Triton sources of the attention engine's backward (flash attention, deterministic: no
atomics; layout and masks: ``_kernels``).

With P = softmax(S) recomputed from the forward's Stats (P_ij = exp(s_ij - lse_i)), Z the
dropout mask and r = 1 / (1 - p) (Z = 1, r = 1 without dropout):

    dV = (r Z o P)^T dO,   dP = r Z o (dO V^T),   delta_i = sum_d dO_id O_id
    dS = P o (dP - delta),   dQ = scale dS K,   dK = scale dS^T Q

Three kernels: ``delta`` (a program per query tile) stores delta to the workspace;
``dkdv`` (a program per key tile of one K / V head) walks the query tiles of every query
head of its group that the mask lets see the tile, summing dK and dV in registers (the
group's heads in order: deterministic); ``dq`` (a program per query tile) walks the key
tiles as the forward does. Tiles are computed in base 2 like the forward.

DQ_ATOMIC=1 (nondeterministic: P and dP are computed once, not twice): the dK / dV
kernel also adds each tile's dS K into a float32 dQ accumulator in the workspace (the
order of the additions varies run to run), zeroed by the delta kernel, and a small kernel
scales and converts it to DQ. With TMA=1 the addition is one bulk reduction per tile
through a tensor descriptor (cp.reduce.async.bulk on Hopper); without, float32 atomics per
element.
"""

from __future__ import annotations

import dataclasses

from ..dropout._kernels import PHILOX_HELPER
from ..fusion._codegen import COMBINE_HELPERS, TL_TYPE
from ._kernels import (
    INT32_LIMIT,
    LOG2E,
    Problem,
    _off,
    _pow2,
    alibi_term,
    base,
    bias_term,
    dropout_keep,
    dropout_setup,
    keep_expr,
    lengths,
    query_tile,
    rows_mask,
)


@dataclasses.dataclass(frozen=True)
class Grads:
    """Strides (b, h, s, d) of dO, dQ, dK, dV and their data types."""

    do: tuple
    dq: tuple
    dk: tuple
    dv: tuple
    do_dtype: object
    dq_dtype: object
    dk_dtype: object
    dv_dtype: object
    dbias: tuple | None = None  # DBIAS strides (b, h, s_q, s_kv), its type and the
    dbias_dtype: object = None  # bias's batch / head sizes (1: broadcast, summed)
    bias_b: int = 1
    bias_h: int = 1


def big(p: Problem, g: Grads) -> bool:
    """Whether an offset may pass int32: the forward's ``Problem.big``, a gradient's
    extent, or the workspace's float32 dQ accumulator [B, H, S_q, pow2(D)]."""
    dims = (p.B, p.H, max(p.SQ, p.SKV), max(p.D, p.DV))
    return (
        p.big
        or p.B * p.H * max(p.SQ, 1) * max(16, _pow2(p.D)) >= INT32_LIMIT
        or any(st * n >= INT32_LIMIT for t in (g.do, g.dq, g.dk, g.dv) for st, n in zip(t, dims))
    )


def _wide(names, I: str, on: bool) -> list[str]:
    """Lines widening ``names`` to int64 when ``on``: done after the program id's split
    (Triton 3.6 miscompiles the int64 split by constant // and % on sm_90), so every
    offset built from them is int64."""
    return [f"{I}{v} = {v}.to(tl.int64)" for v in names] if on else []


def _params(p: Problem, names: list) -> list[str]:
    out = list(names)
    out += ["BIAS"] if p.bias else []
    out += ["SEQ_Q", "SEQ_KV"] if p.padding else []
    out += ["SEED", "OFFSET"] if p.dropout else []
    out += [f"RAG_{r}" for r in p.ragged]
    return out + ["SCALE"]


def _head(name: str, p: Problem, g: Grads, params: list, kv_program: bool) -> list[str]:
    I = "    "
    bd, bdv = max(16, _pow2(p.D)), max(16, _pow2(p.DV))
    L = [
        COMBINE_HELPERS,
        PHILOX_HELPER if p.dropout else "",
        "@triton.jit",
        f"def {name}({', '.join(params)}):",
        f"{I}pid = {'tl.program_id(0)' if kv_program else query_tile(p)}",
        f"{I}bh = tl.program_id(1)",
    ]
    if kv_program:  # bh indexes (b, K / V head)
        L += [f"{I}b = bh // {p.HKV}", f"{I}hk = bh % {p.HKV}"]
        L += _wide(("bh", "b", "hk"), I, big(p, g))
    else:
        L += [f"{I}b = bh // {p.H}", f"{I}h = bh % {p.H}", f"{I}hk = h // {p.H // p.HKV}"]
        L += _wide(("bh", "b", "h", "hk"), I, big(p, g))
    L += [
        f"{I}offs_d = tl.arange(0, {bd})",
        f"{I}offs_dv = tl.arange(0, {bdv})",
        f"{I}dmask = offs_d < {p.D}",
        f"{I}dvmask = offs_dv < {p.DV}",
        f"{I}c = SCALE * {LOG2E}",
    ]
    return L + lengths(p, I)


def delta_source(name: str, p: Problem, g: Grads, kn) -> str:
    """WS[(b H + h) S_q + i] = sum_d dO O (float32); grid (ceil(S_q / BLOCK_M), B H)."""
    I, bm = "    ", kn.BLOCK_M
    bdv = max(16, _pow2(p.DV))
    L = [
        COMBINE_HELPERS,
        "@triton.jit",
        f"def {name}({', '.join(delta_params(p))}):",
        f"{I}bh = tl.program_id(1)",
        f"{I}b = bh // {p.H}",
        f"{I}h = bh % {p.H}",
        *_wide(("bh", "b", "h"), I, big(p, g)),
        f"{I}offs_dv = tl.arange(0, {bdv})",
        f"{I}dvmask = offs_dv < {p.DV}",
        f"{I}offs_m = tl.program_id(0) * {bm} + tl.arange(0, {bm})",
    ]
    # a ragged O / dO: only the batch's rows are read (the next batch's follow them)
    q_len = "tl.load(SEQ_Q + b * {}).to(tl.int32)".format(p.seq_strides[0])
    rows = f"(offs_m < {q_len})" if {"O", "DO"} & set(p.ragged) else f"(offs_m < {p.SQ})"
    L += [
        f"{I}m2 = {rows}[:, None] & dvmask[None, :]",
        f"{I}o = tl.load(O + {base(p, 'O', 'b', 'h', p.o)} + offs_m[:, None] * {p.o[2]} + "
        f"offs_dv[None, :] * {p.o[3]}, mask=m2, other=0.0).to(tl.float32)",
        f"{I}do = tl.load(DO + {base(p, 'DO', 'b', 'h', g.do)} + offs_m[:, None] * {g.do[2]} + "
        f"offs_dv[None, :] * {g.do[3]}, mask=m2, other=0.0).to(tl.float32)",
        f"{I}tl.store(WS + bh * {p.SQ} + offs_m, tl.reduce(o * do, 1, _add_combine), "
        f"mask=offs_m < {p.SQ})",
    ]
    if getattr(kn, "DQ_ATOMIC", 0):  # this tile's rows of the float32 dQ accumulator
        bd = max(16, _pow2(p.D))
        L += [
            f"{I}offs_d = tl.arange(0, {bd})",
            f"{I}at = WS + {dq_base(p)} + (bh * {p.SQ} + offs_m)[:, None] * {bd} + offs_d[None, :]",
            f"{I}tl.store(at, tl.full([{bm}, {bd}], 0.0, tl.float32), "
            f"mask=(offs_m < {p.SQ})[:, None])",
        ]
    return "\n".join(L) + "\n"


def delta_params(p: Problem) -> list:
    """The delta kernel's parameters: O, dO, the workspace, and for a ragged O / dO the
    lengths and their offsets."""
    if not {"O", "DO"} & set(p.ragged):
        return ["O", "DO", "WS"]
    return ["O", "DO", "WS", "SEQ_Q"] + [f"RAG_{r}" for r in ("O", "DO") if r in p.ragged]


def dq_base(p: Problem) -> int:
    """Float32 index of the atomic variant's dQ accumulator [B, H, S_q, pow2(D)] in the
    workspace (after delta; 128-byte aligned for the TMA unit)."""
    return (p.B * p.H * p.SQ + 31) // 32 * 32


def workspace_floats(p: Problem, kn) -> int:
    n = dq_base(p)
    if getattr(kn, "DQ_ATOMIC", 0):
        n += p.B * p.H * p.SQ * max(16, _pow2(p.D))
    return n


def dq_convert_source(name: str, p: Problem, g: Grads, kn) -> str:
    """DQ = SCALE x the float32 accumulator, in DQ's type; grid (ceil(S_q / BLOCK_M), B H)."""
    I, bm = "    ", kn.BLOCK_M
    bd = max(16, _pow2(p.D))
    return (
        "\n".join(
            [
                "@triton.jit",
                f"def {name}(DQ, WS, SCALE):",
                f"{I}bh = tl.program_id(1)",
                f"{I}b = bh // {p.H}",
                f"{I}h = bh % {p.H}",
                *_wide(("bh", "b", "h"), I, big(p, g)),
                f"{I}offs_m = tl.program_id(0) * {bm} + tl.arange(0, {bm})",
                f"{I}offs_d = tl.arange(0, {bd})",
                f"{I}m2 = (offs_m < {p.SQ})[:, None] & (offs_d < {p.D})[None, :]",
                f"{I}acc = tl.load(WS + {dq_base(p)} + (bh * {p.SQ} + offs_m)[:, None] * {bd} + "
                "offs_d[None, :], mask=m2, other=0.0)",
                f"{I}tl.store(DQ + {_off('b', 'h', g.dq)} + offs_m[:, None] * {g.dq[2]} + "
                f"offs_d[None, :] * {g.dq[3]}, (acc * SCALE).to({TL_TYPE[g.dq_dtype]}), mask=m2)",
            ]
        )
        + "\n"
    )


def _loads_q_side(p: Problem, g: Grads, I: str, interpret: bool) -> list[str]:
    """Q, dO tiles of head h at offs_m, their lse (base 2) and delta."""
    L = [
        f"{I}rmask = offs_m < q_len",
        f"{I}q = tl.load(Q + {base(p, 'Q', 'b', 'h', p.q)} + offs_m[:, None] * {p.q[2]} + "
        f"offs_d[None, :] * {p.q[3]}, mask=rmask[:, None] & dmask[None, :], other=0.0)",
        f"{I}do = tl.load(DO + {base(p, 'DO', 'b', 'h', g.do)} + offs_m[:, None] * {g.do[2]} + "
        f"offs_dv[None, :] * {g.do[3]}, mask=rmask[:, None] & dvmask[None, :], other=0.0)",
        f"{I}lse = tl.load(STATS + {base(p, 'STATS', 'b', 'h', p.stats)} + offs_m * {p.stats[2]}, "
        f"mask=rmask, other=0.0) * {LOG2E}",
        f'{I}lse = tl.where(lse == float("-inf"), 0.0, lse)',
        f"{I}dl = tl.load(WS + (b * {p.H} + h) * {p.SQ} + offs_m, mask=rmask, other=0.0)",
    ]
    if interpret:
        L += [f"{I}q = q.to(tl.float32)", f"{I}do = do.to(tl.float32)"]
    return L


def _loads_kv_side(p: Problem, I: str, interpret: bool) -> list[str]:
    L = [
        f"{I}nmask = offs_n < kv_len",
        f"{I}k = tl.load(K + {base(p, 'K', 'b', 'hk', p.k)} + offs_n[:, None] * {p.k[2]} + "
        f"offs_d[None, :] * {p.k[3]}, mask=nmask[:, None] & dmask[None, :], other=0.0)",
        f"{I}v = tl.load(V + {base(p, 'V', 'b', 'hk', p.v)} + offs_n[:, None] * {p.v[2]} + "
        f"offs_dv[None, :] * {p.v[3]}, mask=nmask[:, None] & dvmask[None, :], other=0.0)",
    ]
    if interpret:
        L += [f"{I}k = k.to(tl.float32)", f"{I}v = v.to(tl.float32)"]
    return L


def _scores_t(p: Problem, I: str) -> list[str]:
    """pT [BLOCK_N, BLOCK_M] = P^T of the tile (0 where masked)."""
    L = [f"{I}st = tl.dot(k, tl.trans(q)) * c"]
    if p.bias:
        L.append(f"{I}st += {bias_term(p, '[None, :]', '[:, None]')}")
    if p.alibi:
        L.append(f"{I}st += {alibi_term(p, '[None, :]', '[:, None]')}")
    return L + [
        f"{I}pt = tl.where({keep_expr(p, '[None, :]', '[:, None]')}, "
        "tl.exp2(st - lse[None, :]), 0.0)"
    ]


def _p_and_dp(p: Problem, I: str) -> list[str]:
    """pr = P and dp = dP (dropout applied) of the [BLOCK_M, BLOCK_N] tile, recomputed
    from q, k, v, dO and Stats (the dQ and dBias kernels)."""
    L = [f"{I}s = tl.dot(q, tl.trans(k)) * c"]
    if p.bias:
        L.append(f"{I}s += {bias_term(p, '[:, None]', '[None, :]')}")
    if p.alibi:
        L.append(f"{I}s += {alibi_term(p, '[:, None]', '[None, :]')}")
    L += [
        f"{I}pr = tl.where({keep_expr(p, '[:, None]', '[None, :]')}, "
        "tl.exp2(s - lse[:, None]), 0.0)",
        f"{I}dp = tl.dot(do, tl.trans(v))",
    ]
    if p.dropout:
        L += dropout_keep(p, I, "[:, None]", "[None, :]")
        L.append(f"{I}dp = tl.where(kept, dp * keep_scale, 0.0)")
    return L


def dkdv_source(name: str, p: Problem, g: Grads, kn, interpret: bool) -> str:
    """dK, dV of one key tile of K / V head hk; grid (ceil(S_kv / BLOCK_N), B H_kv)."""
    I, I2, I3 = "    ", "        ", "            "
    bm, bn = kn.BLOCK_M, kn.BLOCK_N
    bdv = max(16, _pow2(p.DV))
    bd = max(16, _pow2(p.D))
    dt = TL_TYPE[p.dtype]
    L = _head(name, p, g, _params(p, ["Q", "K", "V", "DO", "STATS", "DK", "DV", "WS"]), True)
    L += [f"{I}offs_n = pid * {bn} + tl.arange(0, {bn})"]
    L += _loads_kv_side(p, I, interpret)
    L += [
        f"{I}dk = tl.full([{bn}, {bd}], 0.0, tl.float32)",
        f"{I}dv = tl.full([{bn}, {bdv}], 0.0, tl.float32)",
        # the query rows that may see this key tile: i >= j - shift - RIGHT,
        # i < j - shift + LEFT
        f"{I}lo = 0",
        f"{I}hi = q_len",
    ]
    if p.right is not None:
        L.append(f"{I}lo = tl.maximum(0, pid * {bn} - shift - {p.right}) // {bm} * {bm}")
    if p.left is not None:
        L.append(f"{I}hi = tl.minimum(hi, pid * {bn} + {bn} - 1 - shift + {p.left})")
    tma = bool(getattr(kn, "TMA", 0)) and not interpret
    if getattr(kn, "DQ_ATOMIC", 0) and tma:  # rows past S_q are clipped by the TMA unit
        L.append(
            f"{I}dq_desc = tl.make_tensor_descriptor(WS + {dq_base(p)}, shape=[{p.B * p.H}"
            f", {p.SQ}, {bd}], strides=[{p.SQ * bd}, {bd}, 1], block_shape=[1, {bm}, {bd}])"
        )
    L.append(f"{I}for gi in range(0, {p.H // p.HKV}):")
    L.append(f"{I2}h = hk * {p.H // p.HKV} + gi")
    if p.dropout:
        L += dropout_setup(p, I2)
    L.append(f"{I2}for start in range(lo, hi, {bm}):")
    L.append(f"{I3}offs_m = start + tl.arange(0, {bm})")
    L += _loads_q_side(p, g, I3, interpret)
    L += _scores_t(p, I3)
    pdrop = "pt"
    if p.dropout:
        L += dropout_keep(p, I3, "[None, :]", "[:, None]")
        L.append(f"{I3}pdt = tl.where(kept, pt * keep_scale, 0.0)")
        pdrop = "pdt"
    cast = "" if interpret else f".to({dt})"
    L += [f"{I3}dv += tl.dot({pdrop}{cast}, do)", f"{I3}dpt = tl.dot(v, tl.trans(do))"]
    if p.dropout:
        L.append(f"{I3}dpt = tl.where(kept, dpt * keep_scale, 0.0)")
    L += [f"{I3}dst = pt * (dpt - dl[None, :])", f"{I3}dk += tl.dot(dst{cast}, q)"]
    if getattr(kn, "DQ_ATOMIC", 0) and tma:  # dQ += dS K: one bulk reduction (TMA)
        L += [
            f"{I3}dqp = tl.dot(tl.trans(dst{cast}), k)",
            f"{I3}dq_desc.atomic_add([b * {p.H} + h, start, 0], dqp.reshape(1, {bm}, {bd}))",
        ]
    elif getattr(kn, "DQ_ATOMIC", 0):  # dQ += dS K, float32 atomics per element
        L += [
            f"{I3}dqp = tl.dot(tl.trans(dst{cast}), k)",
            f"{I3}tl.atomic_add(WS + {dq_base(p)} + ((b * {p.H} + h) * {p.SQ} + "
            f"offs_m)[:, None] * {bd} + offs_d[None, :], dqp, "
            'mask=rmask[:, None] & dmask[None, :], sem="relaxed")',
        ]
    L += [
        f"{I}dk = dk * SCALE",
        f"{I}tl.store(DK + {base(p, 'DK', 'b', 'hk', g.dk)} + offs_n[:, None] * {g.dk[2]} + "
        f"offs_d[None, :] * {g.dk[3]}, dk.to({TL_TYPE[g.dk_dtype]}), "
        f"mask={rows_mask(p, 'DK', 'offs_n', p.SKV, 'kv_len')}[:, None] & dmask[None, :])",
        f"{I}tl.store(DV + {base(p, 'DV', 'b', 'hk', g.dv)} + offs_n[:, None] * {g.dv[2]} + "
        f"offs_dv[None, :] * {g.dv[3]}, dv.to({TL_TYPE[g.dv_dtype]}), "
        f"mask={rows_mask(p, 'DV', 'offs_n', p.SKV, 'kv_len')}[:, None] & dvmask[None, :])",
    ]
    return "\n".join(L) + "\n"


def dq_source(name: str, p: Problem, g: Grads, kn, interpret: bool) -> str:
    """dQ of one query tile of head h; grid (ceil(S_q / BLOCK_M), B H)."""
    I, I2 = "    ", "        "
    bm, bn = kn.BLOCK_M, kn.BLOCK_N
    bd = max(16, _pow2(p.D))
    dt = TL_TYPE[p.dtype]
    L = _head(name, p, g, _params(p, ["Q", "K", "V", "DO", "STATS", "DQ", "WS"]), False)
    L += [f"{I}offs_m = pid * {bm} + tl.arange(0, {bm})"]
    L += _loads_q_side(p, g, I, interpret)
    L += [f"{I}dq = tl.full([{bm}, {bd}], 0.0, tl.float32)", f"{I}lo = 0", f"{I}hi = kv_len"]
    if p.right is not None:
        L.append(
            f"{I}hi = tl.minimum(hi, tl.minimum(pid * {bm} + {bm}, q_len) + shift + {p.right})"
        )
    if p.left is not None:
        L.append(f"{I}lo = tl.maximum(0, pid * {bm} + shift - {p.left} + 1) // {bn} * {bn}")
    if p.dropout:
        L += dropout_setup(p, I)
    L += [f"{I}for start in range(lo, hi, {bn}):", f"{I2}offs_n = start + tl.arange(0, {bn})"]
    L += _loads_kv_side(p, I2, interpret)
    L += _p_and_dp(p, I2)
    cast = "" if interpret else f".to({dt})"
    L += [
        f"{I2}ds = pr * (dp - dl[:, None])",
        f"{I2}dq += tl.dot(ds{cast}, k)",
        f"{I}dq = dq * SCALE",
        f"{I}tl.store(DQ + {base(p, 'DQ', 'b', 'h', g.dq)} + offs_m[:, None] * {g.dq[2]} + "
        f"offs_d[None, :] * {g.dq[3]}, dq.to({TL_TYPE[g.dq_dtype]}), "
        f"mask={rows_mask(p, 'DQ', 'offs_m', p.SQ, 'q_len')}[:, None] & dmask[None, :])",
    ]
    return "\n".join(L) + "\n"


def dbias_source(name: str, p: Problem, g: Grads, kn, interpret: bool) -> str:
    """DBIAS = dS summed over the batches / heads the bias broadcasts over (in a fixed
    order: deterministic), one program per (query tile, key tile, bias batch x head);
    P and dP recomputed from Stats. Grid (ceil(S_q / BLOCK_M), ceil(S_kv / BLOCK_N),
    bias_b bias_h)."""
    I, I2, I3 = "    ", "        ", "            "
    bm, bn = kn.BLOCK_M, kn.BLOCK_N
    bd, bdv = max(16, _pow2(p.D)), max(16, _pow2(p.DV))
    nb, nh = (p.B if g.bias_b == 1 else 1), (p.H if g.bias_h == 1 else 1)
    params = _params(p, ["Q", "K", "V", "DO", "STATS", "DBIAS", "WS"])
    L = [
        COMBINE_HELPERS,
        PHILOX_HELPER if p.dropout else "",
        "@triton.jit",
        f"def {name}({', '.join(params)}):",
        f"{I}offs_m = tl.program_id(0) * {bm} + tl.arange(0, {bm})",
        f"{I}offs_n = tl.program_id(1) * {bn} + tl.arange(0, {bn})",
        f"{I}bb = tl.program_id(2) // {g.bias_h}",
        f"{I}hh = tl.program_id(2) % {g.bias_h}",
        *_wide(("bb", "hh"), I, big(p, g)),
        f"{I}offs_d = tl.arange(0, {bd})",
        f"{I}offs_dv = tl.arange(0, {bdv})",
        f"{I}dmask = offs_d < {p.D}",
        f"{I}dvmask = offs_dv < {p.DV}",
        f"{I}c = SCALE * {LOG2E}",
        f"{I}acc = tl.full([{bm}, {bn}], 0.0, tl.float32)",
        f"{I}for bi in range(0, {nb}):",
        f"{I2}b = {'bi' if g.bias_b == 1 else 'bb'}",
        *_wide(("b",), I2, big(p, g)),
        f"{I2}for hi_ in range(0, {nh}):",
        f"{I3}h = {'hi_' if g.bias_h == 1 else 'hh'}",
        f"{I3}hk = h // {p.H // p.HKV}",
        *_wide(("h", "hk"), I3, big(p, g)),
    ]
    L += lengths(p, I3) + _loads_q_side(p, g, I3, interpret) + _loads_kv_side(p, I3, interpret)
    if p.dropout:
        L += dropout_setup(p, I3)
    L += _p_and_dp(p, I3)
    db = g.dbias
    L += [
        f"{I3}acc += pr * (dp - dl[:, None])",
        f"{I}tl.store(DBIAS + bb * {db[0]} + hh * {db[1]} + offs_m[:, None] * {db[2]} + "
        f"offs_n[None, :] * {db[3]}, acc.to({TL_TYPE[g.dbias_dtype]}), "
        f"mask=(offs_m < {p.SQ})[:, None] & (offs_n < {p.SKV})[None, :])",
    ]
    return "\n".join(L) + "\n"


DSINK_BLOCK = 128


def dsink_source(name: str, p: Problem, dsink_stride: int) -> str:
    """dSink[h] = -sum_{b, i} exp(sink_h - lse_bi) delta_bi over the rows that exist
    (lse = -inf: none), from Stats and the delta kernel's workspace; one program per head
    walking every batch in order (deterministic); grid (H,)."""
    I, I2, I3 = "    ", "        ", "            "
    st = p.stats
    params = ["STATS", "WS", "SINK", "DSINK"] + (["SEQ_Q"] if p.padding else [])
    params += ["RAG_STATS"] if "STATS" in p.ragged else []
    q_len = f"tl.load(SEQ_Q + b * {p.seq_strides[0]}).to(tl.int32)" if p.padding else str(p.SQ)
    # Stats and the workspace's delta hold B H S_q floats: past int32 (within ``big``), or
    # Stats strided past it, b and h widened
    wide = p.big or any(s_ * n >= INT32_LIMIT for s_, n in zip(st, (p.B, p.H, p.SQ)))
    L = [
        COMBINE_HELPERS,
        "@triton.jit",
        f"def {name}({', '.join(params)}):",
        f"{I}h = tl.program_id(0)",
        *_wide(("h",), I, wide),
        f"{I}sk = tl.load(SINK + h * {p.sink})",
        f"{I}acc = tl.full([{DSINK_BLOCK}], 0.0, tl.float32)",
        f"{I}for b_ in range(0, {p.B}):",
        f"{I2}b = b_",
        *_wide(("b",), I2, wide),
        f"{I2}q_len = {q_len}",
        f"{I2}for start in range(0, {p.SQ}, {DSINK_BLOCK}):",
        f"{I3}offs = start + tl.arange(0, {DSINK_BLOCK})",
        f"{I3}live = offs < q_len",
        f"{I3}lse = tl.load(STATS + {base(p, 'STATS', 'b', 'h', st)} + offs * {st[2]}, "
        'mask=live, other=float("-inf"))',
        f"{I3}dl = tl.load(WS + (b * {p.H} + h) * {p.SQ} + offs, mask=live, other=0.0)",
        f'{I3}w = tl.where(lse == float("-inf"), 0.0, tl.exp(sk - lse))',
        f"{I3}acc += w * dl",
        f"{I}tl.store(DSINK + h * {dsink_stride}, -tl.reduce(acc, 0, _add_combine))",
    ]
    return "\n".join(L) + "\n"
