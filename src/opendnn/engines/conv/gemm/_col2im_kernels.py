"""The gather of ``conv_dgrad_col2im`` (layout: ``col2im``): dX from the GEMM's columns.

The workspace holds, per image n, the matrix

    COL[n, kk, p] = sum_k W[k, kk] dY[n, k, p]        (kk = (c, filter tap), p = dY pixel)

and the backward data is its col2im: each dX pixel sums the entries of the (pixel, tap)
pairs whose window covers it,

    dX[n, c, h] = sum_r COL[n, kk(c, tap(r)), o(h, r)],   o_i = (h_i + pre_i - r_i dil_i) / s_i

over the window offsets r whose o_i is a whole number inside dY (tap(r) = r, or
filt - 1 - r in CONVOLUTION mode). No atomics: every dX element is one program's sum in a
fixed tap order, so the result is deterministic.

Stride phases: on an axis with stride s > 1 and dilation 1, dX pixels h = q s + phi of
one phase phi are covered by the offsets r = r0 + j s (r0 = (phi + pre) mod s) and no
others, with o = q + (phi + pre - r) / s. A program takes one phase of every such axis
(program axis 2), so its loop runs ceil(filt / s) offsets per axis with every lane live --
a 7x7 stride-2 stem sums 16 offsets instead of testing 49. Other axes (stride 1, or a
dilated strided axis) loop over every offset and test o per pixel.

Tiles: rows are (n, q_0, ..., q_{d-1}) of one phase (the last axis fastest: a tap's
reads run along dY's row), columns BLOCK_N input channels; the sum then goes through the
backward data's epilogue (``analysis.epilogue``: nb, o_0.. are dX's coordinates).
"""

from __future__ import annotations

import math

from ...fusion._codegen import COMBINE_HELPERS
from .. import analysis
from ..implicit_gemm._kernels import index_split

ELEMENTS = 1024  # tile elements per program (BLOCK_M x BLOCK_N), four warps


def block_n(c_per_group: int) -> int:
    """Channel columns of a tile: C/G rounded up to a power of two (the engine takes C/G
    below 16)."""
    return max(1, 1 << (c_per_group - 1).bit_length())


def _phased(geo, i: int) -> bool:
    """Whether axis ``i`` is split into stride phases (stride > 1, dilation 1)."""
    return geo.stride[i] > 1 and geo.dilation[i] == 1


def _rows_per_axis(geo) -> list:
    """Tile-row extent of each spatial axis: ceil(in / s) on a phased axis, else in."""
    return [
        -(-geo.in_dims[i] // geo.stride[i]) if _phased(geo, i) else geo.in_dims[i]
        for i in range(len(geo.filt))
    ]


def phases(geo) -> int:
    return math.prod(geo.stride[i] for i in range(len(geo.filt)) if _phased(geo, i))


def grid(geo) -> tuple:
    bn = block_n(geo.c_per_group)
    bm = ELEMENTS // bn
    rows = geo.n * math.prod(_rows_per_axis(geo))
    return (-(-rows // bm), -(-geo.c_per_group // bn), phases(geo))


def col_int64(geo) -> bool:
    """Whether COL's offsets need int64: N * kk * P elements reach ``analysis.INT64_SPAN``
    (2**31; tests lower it to run this path on small problems)."""
    kk = math.prod(geo.filt) * geo.c_per_group
    return geo.n * kk * math.prod(geo.out_dims) >= analysis.INT64_SPAN


def source(name: str, geo, order: str, *, epilogue_params: list, epilogue_body: str) -> str:
    """Kernel ``name(COL, <epilogue params>)`` on grid ``grid(geo)``; ``order`` is how kk
    enumerates (channel, tap): "ct" (KCRS filters) or "tc" (KRSC)."""
    d = len(geo.filt)
    cg = geo.c_per_group
    taps = math.prod(geo.filt)
    kgemm = taps * cg
    p_out = math.prod(geo.out_dims)
    bn = block_n(cg)
    bm = ELEMENTS // bn
    q_ext = _rows_per_axis(geo)
    rows = geo.n * math.prod(q_ext)
    wide = col_int64(geo)
    ind = "    "
    L = [
        COMBINE_HELPERS,
        "@triton.jit",
        f"def {name}({', '.join(['COL'] + list(epilogue_params))}):",
        f"{ind}offs_n = tl.program_id(1) * {bn} + tl.arange(0, {bn})",
        f"{ind}mask_n = offs_n < {cg}",
        f"{ind}g = 0",
        f"{ind}_ph = tl.program_id(2)",
    ]
    # rows -> (n, q_0..q_{d-1}), the last axis fastest (split in int32: nb is widened for
    # the epilogue below); the phase id -> phi_i (last fastest)
    qs = [f"q{i}" for i in range(d)]
    rr = f"tl.program_id(0) * {bm} + tl.arange(0, {bm})"
    L += index_split("rr", rr, rows, [geo.n, *q_ext], ["nb", *qs], ind, "_q", False)
    L.append(f"{ind}mask_m = rr < {rows}")
    for i in reversed(range(d)):
        if _phased(geo, i):
            L += [f"{ind}phi{i} = _ph % {geo.stride[i]}", f"{ind}_ph = _ph // {geo.stride[i]}"]
            L.append(f"{ind}o{i} = q{i} * {geo.stride[i]} + phi{i}")
            L.append(f"{ind}mask_m = mask_m & (o{i} < {geo.in_dims[i]})")
        else:
            L.append(f"{ind}o{i} = q{i}")
    L.append(f"{ind}acc = tl.full([{bm}, {bn}], 0.0, tl.float32)")
    col_n = f"nb.to(tl.int64) * {kgemm * p_out}" if wide else f"nb * {kgemm * p_out}"
    L.append(f"{ind}_colrow = {col_n}")
    # one loop per axis over its window offsets r{i}; y{i}: the dY coordinate, valid where
    # every term of _ok holds (on a phased axis r{i} < filt is a scalar test)
    depth = ind
    pos_stride = [math.prod(geo.out_dims[i + 1 :]) for i in range(d)]
    ok = ["mask_m"]
    for i in range(d):
        s, dl, f, pre, out = (
            geo.stride[i],
            geo.dilation[i],
            geo.filt[i],
            geo.pre[i],
            geo.out_dims[i],
        )
        if _phased(geo, i):
            L += [
                f"{depth}for j{i} in range({-(-f // s)}):",
                f"{depth}    r{i} = (phi{i} + {pre}) % {s} + j{i} * {s}",
                f"{depth}    y{i} = q{i} + (phi{i} + {pre} - r{i}) // {s}",
            ]
            ok.append(f"(r{i} < {f})")
        elif s == 1:
            L += [
                f"{depth}for r{i} in range({f}):",
                f"{depth}    y{i} = o{i} + {pre} - r{i} * {dl}",
            ]
        else:  # strided and dilated: test divisibility per pixel
            L += [
                f"{depth}for r{i} in range({f}):",
                f"{depth}    _num{i} = o{i} + {pre} - r{i} * {dl}",
                f"{depth}    y{i} = _num{i} // {s}",
            ]
            ok.append(f"(_num{i} >= 0) & (_num{i} % {s} == 0)")
        ok.append(f"(y{i} >= 0) & (y{i} < {out})")
        depth += ind
    tap_terms = []
    for i in range(d):
        fr = f"({geo.filt[i] - 1} - r{i})" if geo.flip else f"r{i}"
        tap_terms.append(f"{fr} * {math.prod(geo.filt[i + 1 :])}")
    L.append(f"{depth}_t = {' + '.join(tap_terms)}")
    kk = f"offs_n * {taps} + _t" if order == "ct" else f"_t * {cg} + offs_n"
    if wide:
        kk = f"({kk}).to(tl.int64)"
    # clamped positions: a lane whose mask is false still addresses inside COL
    pos = " + ".join(
        f"tl.minimum(tl.maximum(y{i}, 0), {geo.out_dims[i] - 1}) * {pos_stride[i]}"
        for i in range(d)
    )
    L += [
        f"{depth}_ok = {' & '.join(ok)}",
        f"{depth}_off = _colrow + ({pos}) + 0 * rr",
        f"{depth}acc += tl.load(COL + _off[:, None] + (({kk}) * {p_out})[None, :], "
        f"mask=_ok[:, None] & mask_n[None, :], other=0.0)",
    ]
    if geo.int64:
        L.append(f"{ind}nb = nb.to(tl.int64)")
    L += [ind + line for line in epilogue_body.strip("\n").split("\n")]
    return "\n".join(L) + "\n"
