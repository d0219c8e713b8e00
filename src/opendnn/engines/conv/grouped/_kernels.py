"""Grouped convolution forward with several groups per tile: Triton source generation (the
engine is ``engine.py``).

With G groups of C/G = cg input and K/G = kg output channels, group g's output is its own
small GEMM over (tap, cg). A program of the plain implicit GEMM owns one group, so for
cg, kg in 4..16 its tensor-core tiles are mostly padding (a 16-wide K step over 4
channels) and, in NHWC, each pixel's load is cg * 2 bytes out of a C-wide row. Here a
program owns GB consecutive groups: its A tile holds the GB * cg channels those groups read
(one contiguous run per pixel), its B tile is block diagonal,

    B[(t, kk), nn] = w[gb*GB*kg + nn, kk - grp*cg, r(t)]   where grp = kk // cg == nn // kg
                   = 0                                     otherwise,

and one tensor-core dot per tap yields all GB groups' outputs:

    y[n, gb*GB*kg + nn, o] = sum_t sum_kk x[n, gb*GB*cg + kk, o*stride - pre + r(t)*dil] B[(t, kk), nn]

The dot multiplies GB times the useful FLOPs (the zero blocks), which the tensor cores
absorb on these memory-bound layers; x is read in wide contiguous runs. The epilogue sees
one group of K channels (``offs_n`` is the output channel).

Backward data is the same tiling over dx: a program owns GB groups' GB * cg channels of a
dx pixel tile and reduces, per tap, over their GB * kg dy channels with the transposed
block-diagonal filter,

    dx[n, gb*GB*cg + nn, i] = sum_t sum_kk dy[n, gb*GB*kg + kk, (i + pre - r(t)*dil) / stride]
                                         * w[gb*GB*kg + kk, nn - grp*cg, r(t)]   (kk // kg == nn // cg)

where a term exists only when the division is exact and lands inside dy.
"""

from __future__ import annotations

import dataclasses

from ..analysis import ConvGeometry
from ..implicit_gemm import _kernels as K


def _block_diagonal_source(
    name: str,
    geo: ConvGeometry,
    kn: K.ConvKnobs,
    *,
    gb: int,
    dgrad: bool,
    dy_strides: tuple,
    epilogue_params: list,
    epilogue_body: str,
    allow_tf32: bool,
    interpret: bool,
    fp32_inputs: bool,
) -> str:
    """The forward (``dgrad`` False: X, W; tiles over y's pixels and K) or the backward
    data (DY, W; tiles over dx's pixels and C): per tap one [BLOCK_M, BLOCK_K] load of the
    GB groups' input channels (x's, or dy's) and one block-diagonal [BLOCK_K, BLOCK_N]
    filter tile, one dot. ``red`` channels per group are reduced, ``out`` written."""
    d = len(geo.filt)
    cg, kg = geo.c_per_group, geo.k_per_group
    red, out = (kg, cg) if dgrad else (cg, kg)
    cols = out * geo.groups
    if dgrad:
        flat = dataclasses.replace(geo, c_per_group=cols, groups=1)
        pixel_dims, src, src_strides = geo.in_dims, "DY", dy_strides
    else:
        flat = dataclasses.replace(geo, k_per_group=cols, groups=1)
        pixel_dims, src, src_strides = geo.out_dims, "X", geo.x_strides
    ind, ind2 = "    ", "        "
    L = K.pixel_tile_header(
        name,
        [src, "W"],
        epilogue_params,
        ["BLOCK_M", "BLOCK_N", "BLOCK_K"],
        flat,
        pixel_dims,
        cols,
        kn,
    )
    ws = geo.w_strides
    i64 = ".to(tl.int64)" if geo.int64 else ""
    L.append(f"{ind}first = pid_n{i64} * {gb * red}")  # the block's first reduced channel
    L.append(f"{ind}kk = tl.arange(0, BLOCK_K)")
    L.append(f"{ind}mask_k = kk < {gb * red}")
    # block diagonal: row kk belongs to group kk // red, column nn to nn // out
    L.append(f"{ind}diag = (kk // {red})[:, None] == (tl.arange(0, BLOCK_N) // {out})[None, :]")
    L.append(f"{ind}b_mask = diag & mask_k[:, None] & mask_n[None, :]")
    L.append(f"{ind}a_row = nb * {src_strides[0]}")
    L.append(f"{ind}a_col = (first + kk) * {src_strides[1]}")
    if dgrad:  # w[k, c, r]: rows are dy channels k, columns dx channels (c within its group)
        L.append(
            f"{ind}w_off = ((first + kk) * {ws[0]})[:, None] + ((offs_n % {cg}) * {ws[1]})[None, :]"
        )
    else:  # rows are x channels (c within its group), columns output channels k
        L.append(f"{ind}w_off = (offs_n * {ws[0]})[None, :] + ((kk % {cg}) * {ws[1]})[:, None]")
        for i in range(d):
            L.append(f"{ind}base{i} = o{i} * {geo.stride[i]} - {geo.pre[i]}")
    L.append(f"{ind}acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)")
    L.append(f"{ind}for t in range(0, {K._prod(geo.filt)}):")
    valid, a_off, w_off = ["mask_m"], ["a_row"], []
    if dgrad:
        L += K._div_chain("t", list(geo.filt), [f"r{i}" for i in range(d)], ind2, "_qt")
        L += K.dgrad_tap_lines(geo, dy_strides, ind2, valid, a_off, w_off)
    else:
        L += K.tap_lines(geo, ind2, valid, a_off, w_off)
    L.append(f"{ind2}valid = " + " & ".join(valid))
    L.append(
        f"{ind2}a = tl.load({src} + ({' + '.join(a_off)})[:, None] + a_col[None, :], "
        "mask=valid[:, None] & mask_k[None, :], other=0.0)"
    )
    L.append(f"{ind2}b = tl.load(W + w_off + {' + '.join(w_off)}, mask=b_mask, other=0.0)")
    L.append(ind2 + K._dot_line(allow_tf32, interpret, fp32_inputs))
    for line in epilogue_body.strip("\n").split("\n"):
        L.append(ind + line)
    return "\n".join(L) + "\n"


def grouped_source(name: str, geo: ConvGeometry, kn: K.ConvKnobs, **kw) -> str:
    """The forward: X, W, the epilogue's parameters; BLOCK_M, BLOCK_N (= gb * kg), BLOCK_K
    (a power of two >= gb * cg) constexpr."""
    return _block_diagonal_source(name, geo, kn, dgrad=False, dy_strides=(), **kw)


def grouped_dgrad_source(name: str, geo: ConvGeometry, kn: K.ConvKnobs, **kw) -> str:
    """Backward data: DY, W, the epilogue's parameters; BLOCK_N = gb * cg, BLOCK_K a power
    of two >= gb * kg. ``geo`` is the dgrad's geometry (in_dims = dx, out_dims = dy,
    x_strides = dx's); ``dy_strides`` in ``kw``."""
    return _block_diagonal_source(name, geo, kn, dgrad=True, **kw)


def grouped_wgrad_sources(
    name: str,
    geo: ConvGeometry,
    kn: K.ConvKnobs,
    *,
    gb: int,
    split: int,
    dy_strides: tuple,
    dw_desc,
    allow_tf32: bool,
    interpret: bool,
    fp32_inputs: bool,
) -> tuple[str, str]:
    """Backward filter of a grouped convolution, GB groups per program, as two kernels.
    With p = (n, o) over the N * prod(out) output pixels and r(t) tap t,

        dw[k, c, r(t)] = sum_p dy[n, k, o] x[n, grp(k)*cg + c, o*stride - pre + r(t)*dil]

    ``{name}``: program (group block, tap, slice s of ``split``) walks the pixel tiles s,
    s + split, ... and accumulates the [GB*kg, GB*cg] product dy^T x of its groups' channels
    on the tensor cores (BLOCK_M = GB*kg rows, BLOCK_N a power of two >= GB*cg, BLOCK_K
    pixels a step); only the diagonal blocks (a channel of the output's own group) are
    kept, written to WS[s, t, k, c]. ``{name}_finish``: each dw element sums its ``split``
    partials in order and is stored (CONVOLUTION mode: tap r at R - 1 - r). Deterministic."""
    d = len(geo.filt)
    cg, kg = geo.c_per_group, geo.k_per_group
    k_total = kg * geo.groups
    taps = K._prod(geo.filt)
    pixels = geo.n * K._prod(geo.out_dims)
    xs, ws = geo.x_strides, dw_desc.strides
    i64 = ".to(tl.int64)" if geo.int64 else ""
    ind, ind2 = "    ", "        "
    L = [
        "@triton.jit",
        f"def {name}(X, DY, WS, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, "
        "BLOCK_K: tl.constexpr):",
        f"{ind}blk = tl.program_id(0)",
        f"{ind}t = tl.program_id(1)",
        f"{ind}s = tl.program_id(2)",
        f"{ind}rows = blk * BLOCK_M + tl.arange(0, BLOCK_M)",  # output channels k
        f"{ind}mask_r = rows < {k_total}",
        f"{ind}cols = tl.arange(0, BLOCK_N)",  # the block's input channels
        f"{ind}mask_c = cols < {gb * cg}",
        f"{ind}c_abs = (blk * {gb * cg} + cols){i64}",
        f"{ind}dy_col = rows{i64} * {dy_strides[1]}",
        f"{ind}x_col = c_abs * {xs[1]}",
    ]
    r = [f"r{i}" for i in range(d)]
    L += K._div_chain("t", list(geo.filt), r, ind, "_qt")
    L.append(f"{ind}acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)")
    L.append(f"{ind}for p0 in range(s * BLOCK_K, {pixels}, {split} * BLOCK_K):")
    o = [f"o{i}" for i in range(d)]
    L += K.index_split(
        "pp",
        "p0 + tl.arange(0, BLOCK_K)",
        pixels + split * 1024,
        [geo.n] + list(geo.out_dims),
        ["nb"] + o,
        ind2,
        "_qp",
        geo.int64,
    )
    L.append(f"{ind2}mask_p = pp < {pixels}")
    dy_off = " + ".join(
        [f"nb * {dy_strides[0]}"] + [f"{o[i]} * {dy_strides[2 + i]}" for i in range(d)]
    )
    valid, x_off = ["mask_p"], [f"nb * {xs[0]}"]
    for i in range(d):
        h = f"h{i}"
        L.append(
            f"{ind2}{h} = {o[i]} * {geo.stride[i]} - {geo.pre[i]} + {r[i]} * {geo.dilation[i]}"
        )
        valid.append(f"({h} >= 0) & ({h} < {geo.in_dims[i]})")
        x_off.append(f"{h} * {xs[2 + i]}")
    # dy^T tile [BLOCK_M channels, BLOCK_K pixels] and x tile [BLOCK_K pixels, BLOCK_N]
    L.append(
        f"{ind2}a = tl.load(DY + dy_col[:, None] + ({dy_off})[None, :], "
        "mask=mask_r[:, None] & mask_p[None, :], other=0.0)"
    )
    L.append(
        f"{ind2}b = tl.load(X + ({' + '.join(x_off)})[:, None] + x_col[None, :], "
        f"mask=({' & '.join(valid)})[:, None] & mask_c[None, :], other=0.0)"
    )
    L.append(ind2 + K._dot_line(allow_tf32, interpret, fp32_inputs))
    # keep the diagonal blocks: row k (group k // kg) with the channels of that group
    L.append(f"{ind}grp_r = rows // {kg}")
    L.append(f"{ind}grp_c = c_abs // {cg}")
    L.append(f"{ind}keep = mask_r[:, None] & mask_c[None, :] & (grp_r[:, None] == grp_c[None, :])")
    L.append(
        f"{ind}off = ((s * {taps} + t) * {k_total} + rows{i64})[:, None] * {cg} "
        f"+ (c_abs % {cg})[None, :]"
    )
    L.append(f"{ind}tl.store(WS + off, acc, mask=keep)")
    part = "\n".join(L) + "\n"

    from ...fusion import _codegen as cg_

    n_out = taps * k_total * cg
    F = K.split_sum_head(name, n_out, split) + [
        f"{ind}c = e % {cg}",
        f"{ind}k = (e // {cg}) % {k_total}",
        f"{ind}t = e // {cg * k_total}",
    ]
    F += K._div_chain("t", list(geo.filt), r, ind, "_qt")
    w_off = [f"k{i64} * {ws[0]}", f"c * {ws[1]}"]
    for i in range(d):
        fr = f"({geo.filt[i] - 1} - {r[i]})" if geo.flip else r[i]
        w_off.append(f"{fr} * {ws[2 + i]}")
    F.append(ind + cg_.store_expr("DW", " + ".join(w_off), "acc", dw_desc, "mask"))
    return part, "\n".join(F) + "\n"
