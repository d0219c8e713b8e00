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
"""

from __future__ import annotations

import dataclasses

from ..analysis import ConvGeometry
from ..implicit_gemm import _kernels as K


def grouped_source(
    name: str,
    geo: ConvGeometry,
    kn: K.ConvKnobs,
    *,
    gb: int,
    epilogue_params: list,
    epilogue_body: str,
    allow_tf32: bool,
    interpret: bool,
    fp32_inputs: bool,
) -> str:
    """The kernel ``name``: X, W, the epilogue's parameters; BLOCK_M, BLOCK_N (= gb * kg),
    BLOCK_K (a power of two >= gb * cg) constexpr."""
    d = len(geo.out_dims)
    cg, kg = geo.c_per_group, geo.k_per_group
    k_total = kg * geo.groups
    flat = dataclasses.replace(geo, k_per_group=k_total, groups=1)
    ind, ind2 = "    ", "        "
    L = K.pixel_tile_header(
        name,
        ["X", "W"],
        epilogue_params,
        ["BLOCK_M", "BLOCK_N", "BLOCK_K"],
        flat,
        geo.out_dims,
        k_total,
        kn,
    )
    xs, ws = geo.x_strides, geo.w_strides
    i64 = ".to(tl.int64)" if geo.int64 else ""
    L.append(f"{ind}c_first = pid_n{i64} * {gb * cg}")  # the block's first input channel
    L.append(f"{ind}kk = tl.arange(0, BLOCK_K)")
    L.append(f"{ind}mask_k = kk < {gb * cg}")
    L.append(f"{ind}local = kk % {cg}")  # the channel within its group
    # block diagonal: row kk belongs to group kk // cg, column nn to nn // kg
    L.append(f"{ind}diag = (kk // {cg})[:, None] == (tl.arange(0, BLOCK_N) // {kg})[None, :]")
    L.append(f"{ind}b_mask = diag & mask_k[:, None] & mask_n[None, :]")
    L.append(f"{ind}x_row = nb * {xs[0]}")
    L.append(f"{ind}x_col = (c_first + kk) * {xs[1]}")
    L.append(f"{ind}w_off = (offs_n * {ws[0]})[None, :] + (local * {ws[1]})[:, None]")
    for i in range(d):
        L.append(f"{ind}base{i} = o{i} * {geo.stride[i]} - {geo.pre[i]}")
    L.append(f"{ind}acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)")
    L.append(f"{ind}for t in range(0, {K._prod(geo.filt)}):")
    valid, x_off, w_off = ["mask_m"], ["x_row"], []
    L += K.tap_lines(geo, ind2, valid, x_off, w_off)
    L.append(f"{ind2}valid = " + " & ".join(valid))
    L.append(
        f"{ind2}a = tl.load(X + ({' + '.join(x_off)})[:, None] + x_col[None, :], "
        "mask=valid[:, None] & mask_k[None, :], other=0.0)"
    )
    L.append(f"{ind2}b = tl.load(W + w_off + {' + '.join(w_off)}, mask=b_mask, other=0.0)")
    L.append(ind2 + K._dot_line(allow_tf32, interpret, fp32_inputs))
    for line in epilogue_body.strip("\n").split("\n"):
        L.append(ind + line)
    return "\n".join(L) + "\n"
