"""Triton sources of the norm engine's split forward (``PATH=3``; layout: ``_kernels``).

For few, very long rows: each row is cut into SPLIT chunks, one program per (row,
chunk). The statistics kernel stores the chunk's sums of (x - k) and (x - k)^2, k the
row's first element (the shift keeps the variance from cancelling; RMS norm: the sum of
x^2 alone), to WS[(row SPLIT + chunk) 2 + 0/1]; the output kernel adds the row's SPLIT
pairs, mean = k + S / L, var = Q / L - (S / L)^2, and writes its chunk (the chunk's
first program also the statistics). The input is read twice, the second time mostly
from DRAM: the softmax engine's measured alternative to one program per row.
"""
from __future__ import annotations

from ._kernels import (IND, IND2, FwdSpec, Problem, _x_lines, _y_lines, chunk, header,
                       pid_expr, stat_store)


def _head(name: str, p: Problem, kn, params: list, names: list) -> list[str]:
    L = header(name, params) + [f"{IND}row = {pid_expr(p)}", f"{IND}sl = tl.program_id(1)"]
    return L + p.row_offsets("row", names, IND)


def _shift(f: FwdSpec) -> str:
    k = "tl.load(X + off_X).to(tl.float32)"
    return k + (" + tl.load(R + off_R).to(tl.float32)" if f.residual else "")


def _loop(p: Problem, kn, names: list) -> list[str]:
    bl, ch = kn.BLOCK_L, chunk(p.L, kn.BLOCK_L, kn.SPLIT)
    ar = f"tl.arange(0, {bl})" + (".to(tl.int64)" if p.big else "")
    return [f"{IND}for start in range(sl * {ch}, sl * {ch} + {ch}, {bl}):",
            f"{IND2}cols = start + {ar}",
            f"{IND2}cmask = cols < {p.L}",
            f"{IND2}mask = cmask"] + p.col_offsets("cols", names, IND2)


def stats_source(name: str, p: Problem, kn, f: FwdSpec) -> str:
    names = [n for n in ("X", "R", "XS") if n in f.names()]
    L = _head(name, p, kn, names + ["WS"], names)
    if not f.rms:
        L.append(f"{IND}k = {_shift(f)}")
    L += [f"{IND}acc_s = tl.full([{kn.BLOCK_L}], 0.0, tl.float32)",
          f"{IND}acc_q = tl.full([{kn.BLOCK_L}], 0.0, tl.float32)"]
    L += _loop(p, kn, names)
    L += _x_lines(p, f, False, "mask", False, IND2, True)
    if f.rms:
        L.append(f"{IND2}acc_q += x * x")
    else:
        L += [f"{IND2}d = tl.where(cmask, x - k, 0.0)", f"{IND2}acc_s += d",
              f"{IND2}acc_q += d * d"]
    sp = kn.SPLIT
    L += [f"{IND}tl.store(WS + (row * {sp} + sl) * 2, tl.reduce(acc_s, 0, _add_combine))",
          f"{IND}tl.store(WS + (row * {sp} + sl) * 2 + 1, tl.reduce(acc_q, 0, _add_combine))"]
    return "\n".join(L) + "\n"


def write_source(name: str, p: Problem, kn, f: FwdSpec) -> str:
    sp = kn.SPLIT
    sp2 = 1 << max(0, (sp - 1).bit_length())
    names = f.names()
    params = f.params()
    params = params[:len(names)] + ["WS"] + params[len(names):]
    L = _head(name, p, kn, params, names)
    L += [f"{IND}kk = tl.arange(0, {sp2})",
          f"{IND}part = WS + (row * {sp} + kk) * 2",
          f"{IND}s = tl.reduce(tl.load(part, mask=kk < {sp}, other=0.0), 0, _add_combine)"
          f" / {p.L}",
          f"{IND}q = tl.reduce(tl.load(part + 1, mask=kk < {sp}, other=0.0), 0, _add_combine)"
          f" / {p.L}"]
    if f.rms:
        L.append(f"{IND}ms = q")
    else:
        L += [f"{IND}mean = {_shift(f)} + s", f"{IND}ms = tl.maximum(q - s * s, 0.0)"]
    L.append(f"{IND}rstd = 1.0 / tl.sqrt(ms + EPS)")
    L += _loop(p, kn, [n for n in names if n not in f.stats()])
    L += _x_lines(p, f, False, "mask", True, IND2, False)
    L += _y_lines(p, f, False, "x" if f.rms else "(x - mean)", "rstd", IND2)
    if f.training:
        if not f.rms:
            L.append(IND + stat_store(p, "MEAN", "mean", "sl == 0"))
        L.append(IND + stat_store(p, "INV_VARIANCE", "rstd", "sl == 0"))
    return "\n".join(L) + "\n"
