"""Triton sources of the norm engine's backward kernels (layout and paths: ``_kernels``).

With xh = (x - mean) r (RMS: x r), g = dy * scale, c1 = mean_j(g xh), c2 = mean_j(g):

    dx = r (g - c2 - xh c1)          (RMS: r (g - xh c1))
    DSCALE = sum dy xh,  DBIAS = sum dy   over the rows (and a channel's positions)

Workspace (float32): the ``cols`` path keeps the statistics partials [R, SPLIT, 2] first,
then the parameter partials [2, NG, G, L]; the ``rows`` path only [2, NP, 1, L].
"""

from __future__ import annotations

from . import _kernels as K
from ._kernels import IND, IND2, Problem, chunk, header, load, load_param, pid_expr, store

TERMS = ("DY", "X", "SCALE", "MEAN", "INV_VARIANCE", "DX")
FINISH_PARTS = 64  # at most this many partial rows per step of the finishing kernel


def _names(rms: bool) -> list[str]:
    return [n for n in TERMS if not (rms and n == "MEAN")]


def _stats(rms: bool, mask: str | None, indent: str) -> list[str]:
    m = f"mask={mask}, other=0.0" if mask else ""
    lines = [f"{indent}rstd = tl.load(INV_VARIANCE + off_INV_VARIANCE, {m}).to(tl.float32)"]
    if not rms:  # RMS norm: no mean at all (x is xh / rstd)
        lines.append(f"{indent}mean = tl.load(MEAN + off_MEAN, {m}).to(tl.float32)")
    return lines


def _centered(rms: bool, e: str = "") -> str:
    return "x" if rms else f"(x - mean{e})"


def _dx(p: Problem, rms: bool, tile2d: bool, indent: str, between=()) -> list[str]:
    """Lines from dy, x, w, mean, rstd (row vectors broadcast when tile2d) to the stored
    dx, with ``between`` (defining c1, c2) after xh and g; leave xh."""
    e = "[:, None]" if tile2d else ""
    c2 = "" if rms else f" - c2{e}"
    return [
        f"{indent}xh = tl.where(mask, {_centered(rms, e)} * rstd{e}, 0.0)",
        f"{indent}g = dy * w",
        *between,
        f"{indent}dx = rstd{e} * (g{c2} - xh * c1{e})",
        indent + store(p, "DX", tile2d, "dx", "mask"),
    ]


def rows_source(name: str, p: Problem, kn, rms: bool, programs: int) -> str:
    """NP persistent programs over tiles of BLOCK_ROWS whole rows (layer / RMS norm)."""
    br, bl = kn.BLOCK_ROWS, kn.BLOCK_L
    nt = -(-p.R // br)
    names = _names(rms)
    cols = f"tl.arange(0, {bl})" + (".to(tl.int64)" if p.big else "")
    L = header(name, names + ["WS"]) + [
        f"{IND}pid = {pid_expr(p)}",
        f"{IND}cols = {cols}",
        f"{IND}cmask = cols < {p.L}",
    ]
    L += p.col_offsets("cols", ["DY", "X", "SCALE", "DX"], IND)
    # SCALE is loaded in the loop (an L1 / L2 hit), not held: with dw and db carried
    # through the loop a held copy made 8192-wide rows spill (ptxas, sm_90, 16 warps)
    L += [
        f"{IND}dw = tl.full([{bl}], 0.0, tl.float32)",
        f"{IND}db = tl.full([{bl}], 0.0, tl.float32)",
    ]
    if kn.PREFETCH:  # the next tile's dy and x load while this one is computed
        L += _tile_fetch(p, "pid", br, "n", "_raw", IND)
    L += [
        f"{IND}for t in range(pid, {nt}, {programs}):",
        f"{IND2}rows = t * {br} + tl.arange(0, {br})",
        f"{IND2}rmask = rows < {p.R}",
        f"{IND2}mask = rmask[:, None] & cmask[None, :]",
    ]
    L += p.row_offsets("rows", [n for n in names if n != "SCALE"], IND2)
    if kn.PREFETCH:
        L += [f"{IND2}dy = dy_raw.to(tl.float32)", f"{IND2}x = x_raw.to(tl.float32)"]
        L += _tile_fetch(p, f"t + {programs}", br, "n", "_next", IND2)
    else:
        L += [
            f"{IND2}dy = {load(p, 'DY', True, 'mask')}",
            f"{IND2}x = {load(p, 'X', True, 'mask')}",
        ]
    L += [f"{IND2}w = {load_param(p, 'SCALE', True, 'cmask', 'cmask')}"]
    L += _stats(rms, "rmask", IND2)
    L += _dx(
        p,
        rms,
        True,
        IND2,
        [
            f"{IND2}c1 = tl.reduce(g * xh, 1, _add_combine) / {p.L}",
            f"{IND2}c2 = tl.reduce(g, 1, _add_combine) / {p.L}",
        ],
    )
    if kn.PREFETCH:
        L += [f"{IND2}dy_raw = dy_next", f"{IND2}x_raw = x_next"]
    L += [
        f"{IND2}dw += tl.reduce(dy * xh, 0, _add_combine)",
        f"{IND2}db += tl.reduce(dy, 0, _add_combine)",
        f"{IND}tl.store(WS + pid * {p.L} + cols, dw, mask=cmask)",
        f"{IND}tl.store(WS + ({programs} + pid) * {p.L} + cols, db, mask=cmask)",
    ]
    return "\n".join(L) + "\n"


def _tile_fetch(p: Problem, tile: str, br: int, prefix: str, suffix: str, indent: str) -> list[str]:
    """Lines loading dy and x of row tile ``tile`` in their storage type as
    ``dy{suffix}``, ``x{suffix}`` (offsets ``{prefix}off_*``; zero past the last row)."""
    L = [
        f"{indent}nrows = ({tile}) * {br} + tl.arange(0, {br})",
        f"{indent}nmask = (nrows < {p.R})[:, None] & cmask[None, :]",
    ]
    L += [
        ln.replace(f"{indent}off_", f"{indent}{prefix}off_")
        for ln in p.row_offsets("nrows", ["DY", "X"], indent)
    ]
    for n in ("DY", "X"):
        L.append(
            f"{indent}{n.lower()}{suffix} = tl.load({n} + {prefix}off_{n}[:, None] + "
            f'coff_{n}[None, :], mask=nmask, other=0.0, eviction_policy="evict_first")'
        )
    return L


def stats_source(name: str, p: Problem, kn, rms: bool) -> str:
    """Per (row, chunk): the chunk's sums of g xh and g -> WS[(row SPLIT + chunk) 2 + 0/1]."""
    bl, sp = kn.BLOCK_L, kn.SPLIT
    ch = chunk(p.L, bl, sp)
    names = _names(rms)
    ar = f"tl.arange(0, {bl})" + (".to(tl.int64)" if p.big else "")
    L = header(name, [n for n in names if n != "DX"] + ["WS"]) + [
        f"{IND}row = {pid_expr(p)}",
        f"{IND}sl = tl.program_id(1)",
    ]
    L += p.row_offsets("row", [n for n in names if n != "DX"], IND)
    L += _stats(rms, None, IND)
    L += [
        f"{IND}acc1 = tl.full([{bl}], 0.0, tl.float32)",
        f"{IND}acc2 = tl.full([{bl}], 0.0, tl.float32)",
        f"{IND}for start in range(sl * {ch}, sl * {ch} + {ch}, {bl}):",
        f"{IND2}cols = start + {ar}",
        f"{IND2}cmask = cols < {p.L}",
        f"{IND2}mask = cmask",
    ]
    L += p.col_offsets("cols", ["DY", "X", "SCALE"], IND2)
    L += [
        f"{IND2}dy = {load(p, 'DY', False, 'mask')}",
        f"{IND2}x = {load(p, 'X', False, 'mask')}",
        f"{IND2}w = {load_param(p, 'SCALE', False, 'cmask', 'mask')}",
        f"{IND2}xh = tl.where(mask, {_centered(rms)} * rstd, 0.0)",
        f"{IND2}acc1 += dy * w * xh",
        f"{IND2}acc2 += dy * w",
        f"{IND}tl.store(WS + (row * {sp} + sl) * 2, tl.reduce(acc1, 0, _add_combine))",
        f"{IND}tl.store(WS + (row * {sp} + sl) * 2 + 1, tl.reduce(acc2, 0, _add_combine))",
    ]
    return "\n".join(L) + "\n"


def cols_source(name: str, p: Problem, kn, rms: bool, groups_n: int) -> str:
    """Program (column block, parameter group, row group): dx of its columns over the
    group's rows, and the DSCALE / DBIAS partials of those columns."""
    bl, sp, G, NG = kn.BLOCK_L, kn.SPLIT, p.G, groups_n
    sp2 = 1 << max(0, (sp - 1).bit_length())
    nr = p.R // G
    per = -(-nr // NG)
    names = _names(rms)
    ar = f"tl.arange(0, {bl})" + (".to(tl.int64)" if p.big else "")
    base = p.R * sp * 2
    L = header(name, names + ["WS"]) + [
        f"{IND}cb = {pid_expr(p)}",
        f"{IND}grp = tl.program_id(1)",
        f"{IND}ng = tl.program_id(2)",
        f"{IND}cols = cb * {bl} + {ar}",
        f"{IND}cmask = cols < {p.L}",
        f"{IND}mask = cmask",
        f"{IND}k = tl.arange(0, {sp2})",
        f"{IND}kmask = k < {sp}",
    ]
    L += p.col_offsets("cols", ["DY", "X", "SCALE", "DX"], IND)
    L += [
        f"{IND}dw = tl.full([{bl}], 0.0, tl.float32)",
        f"{IND}db = tl.full([{bl}], 0.0, tl.float32)",
        f"{IND}for n in range(ng * {per}, tl.minimum(ng * {per} + {per}, {nr})):",
        f"{IND2}row = n * {G} + grp",
    ]
    L += p.row_offsets("row", names, IND2)
    L += _stats(rms, None, IND2)
    L += [
        f"{IND2}part = WS + (row * {sp} + k) * 2",
        f"{IND2}c1 = tl.reduce(tl.load(part, mask=kmask, other=0.0), 0, _add_combine) / {p.L}",
        f"{IND2}c2 = tl.reduce(tl.load(part + 1, mask=kmask, other=0.0), 0, _add_combine) / {p.L}",
        f"{IND2}dy = {load(p, 'DY', False, 'mask')}",
        f"{IND2}x = {load(p, 'X', False, 'mask')}",
        f"{IND2}w = {load_param(p, 'SCALE', False, 'cmask', 'mask')}",
    ]
    L += _dx(p, rms, False, IND2)
    L += [
        f"{IND2}dw += dy * xh",
        f"{IND2}db += dy",
        f"{IND}out = WS + {base} + (ng * {G} + grp) * {p.L} + cols",
        f"{IND}tl.store(out, dw, mask=cmask)",
        f"{IND}tl.store(out + {NG * G * p.L}, db, mask=cmask)",
    ]
    return "\n".join(L) + "\n"


def finish_source(name: str, p: Problem, block: int, parts: int, base: int, outs: list[str]) -> str:
    """DSCALE (and DBIAS) from the partials WS[base + (i G + g) L + column], i < parts,
    summed in order. Layer / RMS norm (G = 1): a program per BLOCK columns; group /
    instance norm: a program per channel c = g C/G + p, summing columns p S .. p S + S."""
    ar = f"tl.arange(0, {block})"
    L = header(name, outs + ["WS"])
    total = parts * p.G * p.L
    if p.G == 1 and p.S == 1:
        L += [f"{IND}cols = {pid_expr(p)} * {block} + {ar}", f"{IND}cmask = cols < {p.L}"]
        L += p.col_offsets("cols", outs, IND)
        # [PARTS_BLOCK x block] tiles of partials, summed down the tile: a handful of
        # dependent steps instead of one load latency per partial row (at 8192 x 8192 the
        # one-row loop over 132-264 partials cost 30-50% of the backward's time)
        pb = min(FINISH_PARTS, 1 << max(0, (parts - 1).bit_length()))
        L += [
            f"{IND}acc_w = tl.full([{block}], 0.0, tl.float32)",
            f"{IND}acc_b = tl.full([{block}], 0.0, tl.float32)",
            f"{IND}for i0 in range(0, {parts}, {pb}):",
            f"{IND2}ii = i0 + tl.arange(0, {pb})",
            f"{IND2}m = (ii < {parts})[:, None] & cmask[None, :]",
            f"{IND2}at = WS + {base} + ii[:, None] * {p.L} + cols[None, :]",
            f"{IND2}acc_w += tl.reduce(tl.load(at, mask=m, other=0.0), 0, _add_combine)",
            f"{IND2}acc_b += tl.reduce(tl.load(at + {total}, mask=m, other=0.0), 0, _add_combine)",
        ]
        vals = {"DSCALE": "acc_w", "DBIAS": "acc_b"}
        for o in outs:
            L.append(f"{IND}tl.store({o} + coff_{o}, {vals[o]}.to({_tl(p, o)}), mask=cmask)")
        return "\n".join(L) + "\n"
    # the partials are indexed by the kernels' column j: channel pch and spatial position
    # s (canonical order) sit at j = pch jstride[2] + sum_k s_k jstride[3 + k]
    cg = p.L // p.S
    spatial = list(p.geo.view[3:]) or [1]
    sdec = [ln.replace(IND, IND2 + "    ", 1) for ln in K._decompose("s", spatial, "si", IND)]
    sj = " + ".join([f"si{k} * {p.jstride.get(3 + k, 0)}" for k in range(len(spatial))])
    L += (
        [
            f"{IND}q = {pid_expr(p)}",
            f"{IND}grp = q // {cg}",
            f"{IND}pch = q % {cg}",
            f"{IND}acc_w = tl.full([{block}], 0.0, tl.float32)",
            f"{IND}acc_b = tl.full([{block}], 0.0, tl.float32)",
            f"{IND}for i in range(0, {parts}):",
            f"{IND2}for s0 in range(0, {p.S}, {block}):",
            f"{IND2}    s = s0 + {ar}",
            f"{IND2}    smask = s < {p.S}",
        ]
        + sdec
        + [
            f"{IND2}    at = WS + {base} + (i * {p.G} + grp) * {p.L} + pch * "
            f"{p.jstride.get(2, 0)} + {sj}",
            f"{IND2}    acc_w += tl.load(at, mask=smask, other=0.0)",
            f"{IND2}    acc_b += tl.load(at + {total}, mask=smask, other=0.0)",
        ]
    )
    vals = {"DSCALE": "acc_w", "DBIAS": "acc_b"}
    for o in outs:
        stride = p.descs[o].strides[1]
        L.append(
            f"{IND}tl.store({o} + q * {stride}, tl.reduce({vals[o]}, 0, _add_combine)"
            f".to({_tl(p, o)}))"
        )
    return "\n".join(L) + "\n"


def _tl(p: Problem, name: str) -> str:
    from ..fusion._codegen import TL_TYPE

    return TL_TYPE[p.types[name]]
