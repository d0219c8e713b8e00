"""The mixture-of-experts grouped matmul (cuDNN's MoE Grouped Matmul), forward and
backward: the math and its float64 reference.

Tensors (cuDNN's): Token [1, M, K] (GATHER: [1, S, K]), Weight [E, K, N],
FirstTokenOffset [G, 1, 1] (G = B * E, B the batch), TokenIndex and TokenKs [1, R, 1],
top_k a number; Output [1, M_out, N] with M_out = R in GATHER and M otherwise.

Routed rows r = 0 .. L-1 (L = R in GATHER, M otherwise) fall into groups by the offsets:
group g owns rows [off[g], off[g+1]), the last one ending at L, and multiplies by expert
``g % E``. The three modes differ only in where a routed row reads and writes:

    NONE:     Output[r]                            = Token[r]             @ Weight[g % E]
    GATHER:   Output[r]                            = Token[TokenIndex[r]] @ Weight[g % E]
    SCATTER:  Output[TokenIndex[r] * top_k + TokenKs[r]] = Token[r]       @ Weight[g % E]

Backward gives the weight gradient of each group (the NONE layout: rows already routed):

    DWeight[g] = Token[off[g]:off[g+1]]^T @ DOutput[off[g]:off[g+1]]     [K, N], g < G

Offsets are data (read at run time), so their rules are enforced by masking, the same in
the reference and the kernels:

- each group's range is clamped to [0, L] and an end below its start is the start (a
  group of offsets that decrease is empty): no row outside [0, L) is read or written;
- rows before off[0] belong to no group: their Output rows are not written (backward:
  they add to no DWeight);
- a routed row whose TokenIndex is outside [0, S) (GATHER), or whose scatter target is
  outside [0, M_out) (SCATTER), is skipped: nothing read or written for it;
- rows two groups claim (offsets that are not non-decreasing) hold one of the groups'
  products in the kernels (which, is undefined); here the later group's.

Backward: a group without rows gets a zero DWeight.
"""

from __future__ import annotations

import numpy as np


def group_ranges(offsets, rows: int) -> list[tuple[int, int]]:
    """[(start, end)] of each group: offsets[g] to offsets[g + 1] (the last to ``rows``),
    clamped to [0, rows], an end below its start raised to the start."""
    off = [int(v) for v in np.asarray(offsets).reshape(-1)]
    out = []
    for g, lo in enumerate(off):
        hi = off[g + 1] if g + 1 < len(off) else rows
        lo = min(max(lo, 0), rows)
        out.append((lo, min(max(hi, lo), rows)))
    return out


def forward(
    token: np.ndarray,
    weight: np.ndarray,
    offsets: np.ndarray,
    mode: str,
    out: np.ndarray,
    token_index: np.ndarray | None = None,
    token_ks: np.ndarray | None = None,
    top_k: int = 0,
) -> np.ndarray:
    """Output [1, M_out, N] in float64: ``out`` (the rows no group writes keep its values)
    with every routed row's product written (see the module docstring). ``mode`` is
    "NONE", "GATHER" or "SCATTER"; index arrays are [1, R, 1] (any float or int type)."""
    tok = np.asarray(token, dtype=np.float64)[0]
    w = np.asarray(weight, dtype=np.float64)
    res = np.array(out, dtype=np.float64, copy=True)
    experts = w.shape[0]
    m_out = res.shape[1]
    idx = None if token_index is None else np.asarray(token_index).reshape(-1).astype(np.int64)
    kss = None if token_ks is None else np.asarray(token_ks).reshape(-1).astype(np.int64)
    routed = idx.shape[0] if mode == "GATHER" else tok.shape[0]
    for g, (lo, hi) in enumerate(group_ranges(offsets, routed)):
        if hi <= lo:
            continue
        rows = np.arange(lo, hi)
        if mode == "GATHER":
            src = idx[rows]
            ok = (src >= 0) & (src < tok.shape[0])
            src, dst = src[ok], rows[ok]
        elif mode == "SCATTER":
            dst = idx[rows] * int(top_k) + kss[rows]
            ok = (dst >= 0) & (dst < m_out)
            src, dst = rows[ok], dst[ok]
        else:
            src = dst = rows
        res[0, dst] = tok[src] @ w[g % experts]
    return res


def backward(doutput: np.ndarray, token: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """DWeight [G, K, N] in float64: group g's Token rows transposed times its DOutput rows
    (zeros for a group without rows)."""
    dy = np.asarray(doutput, dtype=np.float64)[0]
    tok = np.asarray(token, dtype=np.float64)[0]
    ranges = group_ranges(offsets, tok.shape[0])
    dw = np.zeros((len(ranges), tok.shape[1], dy.shape[1]), dtype=np.float64)
    for g, (lo, hi) in enumerate(ranges):
        if hi > lo:
            dw[g] = tok[lo:hi].T @ dy[lo:hi]
    return dw


def flops(routed_rows: int, k: int, n: int) -> float:
    """Multiply-adds times two of one pass (forward or backward): every routed row once."""
    return 2.0 * routed_rows * k * n
