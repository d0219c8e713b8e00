"""Triton sources of the norm engine's split forward (``PATH=3``; layout: ``_kernels``).

For few, very long rows: each row is cut into SPLIT chunks, one program per (row,
chunk). The statistics kernel stores the chunk's sums of (x - k) and (x - k)^2, k the
row's first element (the shift keeps the variance from cancelling; RMS norm: the sum of
x^2 alone), to WS[(row SPLIT + chunk) 3 + 0/1]; the output kernel adds the row's SPLIT
pairs, mean = k + S / L, var = Q / L - (S / L)^2, and writes its chunk (the chunk's
first program also the statistics). A chunk whose sums overflow float32 (|x - k| beyond
~2^63) takes them again in units of 2^-80 and says so in WS[... 3 + 2]; when any chunk
of a row did, the output kernel brings every chunk's sums to those units
(``_kernels.SCALE``, the rows path's rescue). The input is read twice, the second time mostly
from DRAM: the softmax engine's measured alternative to one program per row.
"""

from __future__ import annotations

from ._kernels import (
    IND,
    IND2,
    SCALE,
    UNSCALE,
    FwdSpec,
    Problem,
    _scaled_stats,
    _x_lines,
    _y_lines,
    chunk,
    finite_shift,
    header,
    pid_expr,
    stat_store,
)


def _head(name: str, p: Problem, kn, params: list, names: list) -> list[str]:
    L = header(name, params) + [f"{IND}row = {pid_expr(p)}", f"{IND}sl = tl.program_id(1)"]
    return L + p.row_offsets("row", names, IND)


def _shift(f: FwdSpec) -> str:
    k = "tl.load(X + off_X).to(tl.float32)"
    return finite_shift(k + (" + tl.load(R + off_R).to(tl.float32)" if f.residual else ""))


def _loop(p: Problem, kn, names: list, indent: str = IND) -> list[str]:
    bl, ch = kn.BLOCK_L, chunk(p.L, kn.BLOCK_L, kn.SPLIT)
    ar = f"tl.arange(0, {bl})" + (".to(tl.int64)" if p.big else "")
    I2 = indent + "    "
    return [
        f"{indent}for start in range(sl * {ch}, sl * {ch} + {ch}, {bl}):",
        f"{I2}cols = start + {ar}",
        f"{I2}cmask = cols < {p.L}",
        f"{I2}mask = cmask",
    ] + p.col_offsets("cols", names, I2)


def stats_source(name: str, p: Problem, kn, f: FwdSpec) -> str:
    names = [n for n in ("X", "R", "XS") if n in f.names()]
    L = _head(name, p, kn, names + ["WS"], names)
    if not f.rms:
        L.append(f"{IND}k = {_shift(f)}")
    L += [
        f"{IND}acc_s = tl.full([{kn.BLOCK_L}], 0.0, tl.float32)",
        f"{IND}acc_q = tl.full([{kn.BLOCK_L}], 0.0, tl.float32)",
    ]
    L += _loop(p, kn, names)
    L += _x_lines(p, f, False, "mask", False, IND2, True)
    L += _accumulate(f, "", IND2)
    L += [
        f"{IND}s = tl.reduce(acc_s, 0, _add_combine)",
        f"{IND}q = tl.reduce(acc_q, 0, _add_combine)",
        f"{IND}flag = tl.where(q == q, 0.0, 0.0)",
        f"{IND}if ~(q < float('inf')):       # the chunk again, in units of 2^-80",
        f"{IND2}acc_s = tl.full([{kn.BLOCK_L}], 0.0, tl.float32)",
        f"{IND2}acc_q = tl.full([{kn.BLOCK_L}], 0.0, tl.float32)",
    ]
    L += _loop(p, kn, [n for n in ("X", "R") if n in names], IND2)
    L += _x_lines(p, f, False, "mask", False, IND2 + "    ", False)
    L += _accumulate(f, SCALE, IND2 + "    ")
    L += [
        f"{IND2}s = tl.reduce(acc_s, 0, _add_combine)",
        f"{IND2}q = tl.reduce(acc_q, 0, _add_combine)",
        f"{IND2}flag = flag + 1.0",
    ]
    sp = kn.SPLIT
    L += [
        f"{IND}tl.store(WS + (row * {sp} + sl) * 3, s)",
        f"{IND}tl.store(WS + (row * {sp} + sl) * 3 + 1, q)",
        f"{IND}tl.store(WS + (row * {sp} + sl) * 3 + 2, flag)",
    ]
    return "\n".join(L) + "\n"


def _accumulate(f: FwdSpec, scale: str, indent: str) -> list[str]:
    """Lines adding the tile's (x - k) and (x - k)^2 (RMS: x^2), times ``scale``."""
    if f.rms:
        xs = f"x * {scale}" if scale else "x"
        return [f"{indent}xs = {xs}", f"{indent}acc_q += xs * xs"]
    d = f"x * {scale} - k * {scale}" if scale else "x - k"
    return [
        f"{indent}d = tl.where(cmask, {d}, 0.0)",
        f"{indent}acc_s += d",
        f"{indent}acc_q += d * d",
    ]


def _ms(f: FwdSpec, indent: str, unscale: str = "") -> list[str]:
    """Lines setting ``ms`` (and ``mean``) from the row's mean shifted sum ``s`` and mean
    square ``q``; ``unscale`` takes ``s`` back to the data's units for the mean."""
    if f.rms:
        return [f"{indent}ms = q"]
    shift = f"s * {unscale}" if unscale else "s"
    return [
        f"{indent}mean = k + {shift}",
        f"{indent}ms = tl.maximum(q - s * s, 0.0, propagate_nan=tl.PropagateNan.ALL)",
    ]


def write_source(name: str, p: Problem, kn, f: FwdSpec) -> str:
    sp = kn.SPLIT
    sp2 = 1 << max(0, (sp - 1).bit_length())
    names = f.names()
    params = f.params()
    params = params[: len(names)] + ["WS"] + params[len(names) :]
    L = _head(name, p, kn, params, names)
    L += [
        f"{IND}kk = tl.arange(0, {sp2})",
        f"{IND}part = WS + (row * {sp} + kk) * 3",
        f"{IND}s_c = tl.load(part, mask=kk < {sp}, other=0.0)",
        f"{IND}q_c = tl.load(part + 1, mask=kk < {sp}, other=0.0)",
        f"{IND}f_c = tl.load(part + 2, mask=kk < {sp}, other=0.0)",
        f"{IND}s = tl.reduce(s_c, 0, _add_combine) / {p.L}",
        f"{IND}q = tl.reduce(q_c, 0, _add_combine) / {p.L}",
    ]
    if not f.rms:
        L.append(f"{IND}k = {_shift(f)}")
    L += _ms(f, IND)
    L += [
        f"{IND}rstd = 1.0 / tl.sqrt(ms + EPS)",
        f"{IND}ry = rstd",
        f"{IND}sc = tl.where(rstd == rstd, 1.0, 1.0)",
        f"{IND}if tl.reduce(f_c, 0, _max_combine) > 0:    # some chunk is in 2^-80 units",
        f"{IND2}s = tl.reduce(tl.where(f_c > 0, s_c, s_c * {SCALE}), 0, _add_combine) / {p.L}",
        f"{IND2}q = tl.reduce(tl.where(f_c > 0, q_c, q_c * {SCALE} * {SCALE}), 0, "
        f"_add_combine) / {p.L}",
    ]
    L += _ms(f, IND2, UNSCALE)
    L += _scaled_stats("ms", IND2)
    L += [f"{IND2}ry = ry_s", f"{IND2}rstd = rstd_s", f"{IND2}sc = sc * {SCALE}"]
    L += _loop(p, kn, [n for n in names if n not in f.stats()])
    L += _x_lines(p, f, False, "mask", True, IND2, False)
    L += _y_lines(p, f, False, "x * sc" if f.rms else "(x * sc - mean * sc)", "ry", IND2)
    if f.training:
        if not f.rms:
            L.append(IND + stat_store(p, "MEAN", "mean", "sl == 0"))
        L.append(IND + stat_store(p, "INV_VARIANCE", "rstd", "sl == 0"))
    return "\n".join(L) + "\n"
