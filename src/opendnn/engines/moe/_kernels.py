"""Triton sources of the MoE grouped matmul engine (the math is in ``ops/moe.py``).

Sizes, strides and the offsets are runtime arguments: one source per (pass, mode, output
type, dot precision) serves every shape, and the offsets are read on the device.

Forward: program (p, n) of the grid (ceil(L / BLOCK_M) + G, ceil(N / BLOCK_N)) -- L the
routed rows -- computes the [BLOCK_M, BLOCK_N] tile n of row tile p of the list of every
group's row tiles, groups in order. Each program loads the G offsets as one vector,
clamps each group's range to [0, L] (an end below its start becomes the start), counts
its tiles ceil(rows / BLOCK_M), and finds its group g as the number of groups whose
running tile total is <= p (a prefix sum, ``tl.associative_scan``). Groups that do not cover a
whole tile waste at most a tile each, so ceil(L / BLOCK_M) + G programs cover every tile
of non-decreasing offsets; the programs past the last tile find no rows and exit. The
tile then runs a K loop of ``tl.dot`` on rows gathered through TokenIndex (GATHER) or
stored through TokenIndex * top_k + TokenKs (SCATTER), with expert g % E's weight read
through its strides (row- or column-major, or neither).

Backward: program (t, g) of the grid (ceil(K / BLOCK_K) ceil(N / BLOCK_N), G) owns the
[BLOCK_K, BLOCK_N] tile t of DWeight[g] and loops over the group's rows BLOCK_M at a time,
acc += Token[rows, k-tile]^T @ DOutput[rows, n-tile], float32; it stores the tile once
(zeros for a group without rows). No atomics: deterministic.

Interpreted (CPU), the dot's operands are float32 (``_COMPILED`` is False): Triton 3.6's
interpreter computes bfloat16 dots wrongly. Row offsets are int64 (a token buffer of
2**31 elements and more), as is the expert's base offset; offsets inside one row or one
expert's [K, N] are int32 (the engine declines an expert of 2**31 elements and more).
"""

from __future__ import annotations

from ...enums import DataType

_STORE = "_to_bf16({v})"
# the sums and the prefix sum of the group search: builtins over a combine function of the
# module (tl.sum / tl.cumsum are jit functions of triton.language, which the interpreted
# copy of a generated module cannot call)
_ADD = """@triton.jit
def _moe_add(a, b):
    return a + b

"""  # round to nearest even in both modes (the header's helper)


def _store(out_type: DataType, v: str, out: str) -> str:
    """``v`` (float32) converted to the element type of pointer ``out``."""
    if out_type == DataType.BFLOAT16:
        return _STORE.format(v=v)
    return f"{v}.to({out}.dtype.element_ty)"


def _dot(a: str, b: str, precision: str) -> list[str]:
    """Lines of ``acc += a @ b`` at one indent: float32 operands when interpreted."""
    return [
        "if _COMPILED:",
        f'    acc = tl.dot({a}, {b}, acc, input_precision="{precision}")',
        "else:",
        f"    acc = tl.dot({a}.to(tl.float32), {b}.to(tl.float32), acc)",
    ]


def _indent(lines: list[str], level: int) -> list[str]:
    return [" " * (4 * level) + line for line in lines]


def forward_name(mode: str, out_type: DataType, precision: str) -> str:
    return f"moe_fwd_{mode.lower()}_{out_type.name.lower()}_{precision}"


def forward_source(mode: str, out_type: DataType, precision: str) -> str:
    """The forward kernel for ``mode`` ("NONE", "GATHER", "SCATTER"), storing ``out_type``,
    with dots of ``precision`` ("ieee", "tf32"; 16-bit operands ignore it)."""
    name = forward_name(mode, out_type, precision)
    params = ["TOKEN", "WEIGHT", "OFF"]
    params += {"NONE": [], "GATHER": ["INDEX"], "SCATTER": ["INDEX", "KS"]}[mode]
    params += ["OUT", "L", "S", "M_OUT", "N", "K", "G", "E"]
    params += ["TOP_K"] if mode == "SCATTER" else []
    params += ["s_tm", "s_tk", "s_we", "s_wk", "s_wn", "s_off"]
    params += {"NONE": [], "GATHER": ["s_idx"], "SCATTER": ["s_idx", "s_ks"]}[mode]
    params += ["s_om", "s_on"]
    params += [f"{c}: tl.constexpr" for c in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "BLOCK_G")]
    if mode == "GATHER":
        route = [
            "src = tl.load(INDEX + rows.to(tl.int64) * s_idx, mask=ok, other=0)",
            "ok = ok & (src >= 0) & (src < S)",
            "dst = rows",
        ]
    elif mode == "SCATTER":
        route = [
            "src = rows",
            "tgt = tl.load(INDEX + rows.to(tl.int64) * s_idx, mask=ok, other=0)",
            "tgt = tgt.to(tl.int64) * TOP_K + tl.load(KS + rows.to(tl.int64) * s_ks, mask=ok, other=0)",
            "ok = ok & (tgt >= 0) & (tgt < M_OUT)",
            "dst = tgt",
        ]
    else:
        route = ["src = rows", "dst = rows"]
    body = [
        "rows = row0 + tl.arange(0, BLOCK_M)",
        "ok = rows < row_end",
        *route,
        "cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        "col_ok = cols < N",
        "a_ptr = TOKEN + src.to(tl.int64)[:, None] * s_tm",
        "b_ptr = WEIGHT + (g % E).to(tl.int64) * s_we + cols[None, :] * s_wn",
        "acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)",
        "for k0 in range(0, K, BLOCK_K):",
        "    ks = k0 + tl.arange(0, BLOCK_K)",
        "    k_ok = ks < K",
        "    a = tl.load(a_ptr + ks[None, :] * s_tk, mask=ok[:, None] & k_ok[None, :], other=0.0)",
        "    b = tl.load(b_ptr + ks[:, None] * s_wk, mask=k_ok[:, None] & col_ok[None, :], other=0.0)",
        *_indent(_dot("a", "b", precision), 1),
        "o_ptr = OUT + dst.to(tl.int64)[:, None] * s_om + cols[None, :] * s_on",
        f"tl.store(o_ptr, {_store(out_type, 'acc', 'OUT')}, mask=ok[:, None] & col_ok[None, :])",
    ]
    lines = [
        _ADD,
        "@triton.jit",
        f"def {name}({', '.join(params)}):",
        "    pid = tl.program_id(0)",
        "    pid_n = tl.program_id(1)",
        "    # every group's clamped row range [lo, hi) and its row tiles, then this tile's group",
        "    gs = tl.arange(0, BLOCK_G)",
        "    lo = tl.load(OFF + gs * s_off, mask=gs < G, other=0)",
        "    hi = tl.load(OFF + (gs + 1) * s_off, mask=gs + 1 < G, other=0)",
        "    hi = tl.where(gs + 1 < G, hi, L)",
        "    lo = tl.minimum(tl.maximum(lo, 0), L)",
        "    hi = tl.where(gs < G, tl.minimum(tl.maximum(hi, lo), L), lo)",
        "    tiles = (hi - lo + BLOCK_M - 1) // BLOCK_M",
        "    ends = tl.associative_scan(tiles, 0, _moe_add)",
        "    g = tl.reduce((ends <= pid).to(tl.int32), 0, _moe_add)",
        "    mine = gs == g",
        "    first = tl.reduce(tl.where(mine, ends - tiles, 0), 0, _moe_add)",
        "    row0 = tl.reduce(tl.where(mine, lo, 0), 0, _moe_add) + (pid - first) * BLOCK_M",
        "    row_end = tl.reduce(tl.where(mine, hi, 0), 0, _moe_add)",
        "    if row0 < row_end:",
        *_indent(body, 2),
    ]
    return "\n".join(lines) + "\n"


def backward_name(out_type: DataType, precision: str) -> str:
    return f"moe_bwd_{out_type.name.lower()}_{precision}"


def backward_source(out_type: DataType, precision: str) -> str:
    """The weight-gradient kernel, storing ``out_type``, dots of ``precision``."""
    name = backward_name(out_type, precision)
    params = ["DOUT", "TOKEN", "OFF", "DW", "M", "N", "K", "G"]
    params += ["s_dm", "s_dn", "s_tm", "s_tk", "s_off", "s_wg", "s_wk", "s_wn"]
    params += [f"{c}: tl.constexpr" for c in ("BLOCK_M", "BLOCK_N", "BLOCK_K")]
    lines = [
        "@triton.jit",
        f"def {name}({', '.join(params)}):",
        "    pid = tl.program_id(0)",
        "    g = tl.program_id(1)",
        "    tiles_n = (N + BLOCK_N - 1) // BLOCK_N",
        "    pid_k = pid // tiles_n",
        "    pid_n = pid % tiles_n",
        "    lo = tl.load(OFF + g * s_off)",
        "    hi = tl.load(OFF + tl.minimum(g + 1, G - 1) * s_off)",
        "    hi = tl.where(g + 1 < G, hi, M)",
        "    lo = tl.minimum(tl.maximum(lo, 0), M)",
        "    hi = tl.minimum(tl.maximum(hi, lo), M)",
        "    ks = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)",
        "    k_ok = ks < K",
        "    ns = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        "    n_ok = ns < N",
        "    acc = tl.full((BLOCK_K, BLOCK_N), 0.0, tl.float32)",
        "    for r0 in range(lo, hi, BLOCK_M):",
        "        rs = r0 + tl.arange(0, BLOCK_M)",
        "        r_ok = rs < hi",
        "        rw = rs.to(tl.int64)",
        "        a = tl.load(TOKEN + rw[None, :] * s_tm + ks[:, None] * s_tk,"
        " mask=k_ok[:, None] & r_ok[None, :], other=0.0)",
        "        b = tl.load(DOUT + rw[:, None] * s_dm + ns[None, :] * s_dn,"
        " mask=r_ok[:, None] & n_ok[None, :], other=0.0)",
        *_indent(_dot("a", "b", precision), 2),
        "    w_ptr = DW + g.to(tl.int64) * s_wg + ks[:, None] * s_wk + ns[None, :] * s_wn",
        f"    tl.store(w_ptr, {_store(out_type, 'acc', 'DW')}, mask=k_ok[:, None] & n_ok[None, :])",
    ]
    return "\n".join(lines) + "\n"
