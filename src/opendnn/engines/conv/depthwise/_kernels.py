"""Depthwise convolution forward: Triton source generation (the engine is ``engine.py``).

One group per input channel (C/G = 1) and ``M = K/G`` output channels per group (the channel
multiplier, 1 in MobileNet / EfficientNet / ConvNeXt). Output channel j reads input
channel j // M only, so there is no reduction over channels: each output element is a dot
of length prod(filt),

    y[n, j, o] = sum_r x[n, j // M, o * stride - pre + r * dil] * w[j, 0, r]

A program owns BLOCK_M output pixels x BLOCK_N output channels of *all* groups (the
grid's second axis is one group of K channels): per tap it loads one [BLOCK_M, BLOCK_N]
tile of x -- a vector load along the channels in NHWC, along the pixels in NCHW -- and the
tap's [BLOCK_N] filter column, and accumulates x * w in float32 on the CUDA cores. The
taps' overlapping windows are re-read from L1/L2, so DRAM sees x about once. No tensor
cores (there is no reduction for them), no workspace; the fused epilogue is the shared
pointwise code with the channel index ``offs_n``.
"""

from __future__ import annotations

import dataclasses

from ..analysis import ConvGeometry
from ..implicit_gemm import _kernels as K


def depthwise_source(
    name: str,
    geo: ConvGeometry,
    kn: K.ConvKnobs,
    *,
    epilogue_params: list,
    epilogue_body: str,
) -> str:
    """The kernel ``name``: X, W, then the epilogue's parameters; BLOCK_M, BLOCK_N
    constexpr. ``geo`` is the problem's geometry (groups = C); the tile header and the
    epilogue see it as one group of K channels (``flat``), so ``g`` is 0 and ``offs_n``
    the output channel."""
    d = len(geo.out_dims)
    mult = geo.k_per_group
    k_total = mult * geo.groups
    flat = dataclasses.replace(geo, k_per_group=k_total, groups=1)
    ind, ind2 = "    ", "        "
    L = K.pixel_tile_header(
        name, ["X", "W"], epilogue_params, ["BLOCK_M", "BLOCK_N"], flat, geo.out_dims, k_total, kn
    )
    xs, ws = geo.x_strides, geo.w_strides
    chan = "offs_n.to(tl.int64)" if geo.int64 else "offs_n"
    src = chan if mult == 1 else f"({chan} // {mult})"
    L.append(f"{ind}x_row = nb * {xs[0]}")
    L.append(f"{ind}x_col = {src} * {xs[1]}")
    L.append(f"{ind}w_col = {chan} * {ws[0]}")
    for i in range(d):
        L.append(f"{ind}base{i} = o{i} * {geo.stride[i]} - {geo.pre[i]}")
    L.append(f"{ind}acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)")
    L.append(f"{ind}for t in range(0, {K._prod(geo.filt)}):")
    valid, x_off, w_off = ["mask_m"], ["x_row"], []
    L += K.tap_lines(geo, ind2, valid, x_off, w_off)
    L.append(f"{ind2}valid = " + " & ".join(valid))
    L.append(
        f"{ind2}xv = tl.load(X + ({' + '.join(x_off)})[:, None] + x_col[None, :], "
        "mask=valid[:, None] & mask_n[None, :], other=0.0).to(tl.float32)"
    )
    L.append(
        f"{ind2}wv = tl.load(W + w_col + {' + '.join(w_off)}, mask=mask_n, other=0.0)"
        ".to(tl.float32)"
    )
    L.append(f"{ind2}acc += xv * wv[None, :]")
    for line in epilogue_body.strip("\n").split("\n"):
        L.append(ind + line)
    return "\n".join(L) + "\n"


def depthwise_dgrad_source(
    name: str,
    geo: ConvGeometry,
    kn: K.ConvKnobs,
    *,
    dy_strides: tuple,
    epilogue_params: list,
    epilogue_body: str,
) -> str:
    """Backward data of a depthwise convolution, gathered per dx element: with M the
    channel multiplier,

        dx[n, c, i] = sum_{q < M} sum_r dy[n, c*M + q, (i + pre - r*dil) / stride] w[c*M + q, 0, r]

    where a term exists only when the division is exact and lands inside dy. A program
    owns BLOCK_M dx pixels x BLOCK_N channels; per (q, tap) it loads one dy tile (masked
    where the tap does not hit a dy element) and one filter column. Deterministic: every
    dx element is summed by one program in a fixed order. ``geo`` is the dgrad's geometry
    (in_dims = dx, out_dims = dy, x_strides = dx's); ``dy_strides`` dy's."""
    d = len(geo.in_dims)
    mult = geo.k_per_group
    c_total = geo.groups
    flat = dataclasses.replace(geo, c_per_group=c_total, groups=1)
    ind, ind2 = "    ", "        "
    L = K.pixel_tile_header(
        name, ["DY", "W"], epilogue_params, ["BLOCK_M", "BLOCK_N"], flat, geo.in_dims, c_total, kn
    )
    ws = geo.w_strides
    chan = "offs_n.to(tl.int64)" if geo.int64 else "offs_n"
    L.append(f"{ind}dy_row = nb * {dy_strides[0]}")
    L.append(f"{ind}acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)")
    for q in range(mult):
        j = f"({chan} * {mult} + {q})" if mult > 1 else chan
        L.append(f"{ind}dy_col = {j} * {dy_strides[1]}")
        L.append(f"{ind}w_col = {j} * {ws[0]}")
        L.append(f"{ind}for t in range(0, {K._prod(geo.filt)}):")
        r = [f"r{i}" for i in range(d)]
        L += K._div_chain("t", list(geo.filt), r, ind2, f"_qt{q}")
        valid, off, w_off = ["mask_m"], ["dy_row"], []
        for i in range(d):
            s = geo.stride[i]
            L.append(f"{ind2}u{i} = o{i} + {geo.pre[i]} - {r[i]} * {geo.dilation[i]}")
            if s == 1:
                L.append(f"{ind2}v{i} = u{i}")
                valid.append(f"(u{i} >= 0) & (u{i} < {geo.out_dims[i]})")
            else:
                L.append(f"{ind2}v{i} = u{i} // {s}")
                valid.append(f"(u{i} >= 0) & (u{i} % {s} == 0) & (v{i} < {geo.out_dims[i]})")
            off.append(f"v{i} * {dy_strides[2 + i]}")
            fr = f"({geo.filt[i] - 1} - {r[i]})" if geo.flip else r[i]
            w_off.append(f"{fr} * {ws[2 + i]}")
        L.append(f"{ind2}valid = " + " & ".join(valid))
        L.append(
            f"{ind2}dv = tl.load(DY + ({' + '.join(off)})[:, None] + dy_col[None, :], "
            "mask=valid[:, None] & mask_n[None, :], other=0.0).to(tl.float32)"
        )
        L.append(
            f"{ind2}wv = tl.load(W + w_col + {' + '.join(w_off)}, mask=mask_n, other=0.0)"
            ".to(tl.float32)"
        )
        L.append(f"{ind2}acc += dv * wv[None, :]")
    for line in epilogue_body.strip("\n").split("\n"):
        L.append(ind + line)
    return "\n".join(L) + "\n"
