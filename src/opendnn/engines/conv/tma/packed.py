"""Phase-packed images for the forward TMA path: small-channel, strided convolutions (the
ResNet stem: C = 3, 7x7, stride 2) as dense stride-1 convolutions over TMA boxes.

A TMA box needs rows of at least 16 bytes (C * size a multiple of 16) and stride 1 or 2
with C a multiple of 64; the stem has 6-byte pixels and stride 2, and its gather path
moves 2-byte elements one by one. Packing rewrites it. Split each filter tap by the
stride, r = s_h * a + p (and s = s_w * b + q), and the image by phase:

    xp[n, i, j, (p, q, c)] = x[n, c, s_h * i + p - P_h, s_w * j + q - P_w]   (0 outside)
    wp[k, a, b, (p, q, c)] = w[k, c, s_h * a + p - D_h, s_w * b + q - D_w]   (0 outside)

with P = s * ceil(pre / s) the padding rounded up to a whole stride and D = P - pre.
Then, for every output pixel,

    y[n, k, o_h, o_w] = sum_{a, b, (p, q, c)} xp[n, o_h + a, o_w + b, (p, q, c)] wp[k, a, b, (p, q, c)]

a stride-1, unpadded convolution with s_h * s_w * C channels (rounded up to a 16-byte row)
and an R' x S' filter, R' = floor((R - 1 + D_h) / s_h) + 1 (7x7 stride 2: 4x4 taps over
16 channels, 12 of them real: 256 products per pixel for the stem's 147, on tensor
cores fed by boxes). The packed image has (O_h + R' - 1) x (O_w + S' - 1) pixels.

Two small kernels write xp and wp into the workspace (any strides of x and w: NCHW as
well as NHWC; CONVOLUTION mode's flip is applied while packing w), then the forward TMA
kernel (``_tma_kernels``) runs on the rewritten geometry with the problem's own epilogue.
"""

from __future__ import annotations

import dataclasses

from ....runtime.launch import kernel_from_source
from . import _kernels as T

MAX_PACKED_CHANNELS = 64  # beyond this the zero taps cost more than the gather saves
ALIGN = 256
PACK_BLOCK = 1024


@dataclasses.dataclass(frozen=True)
class Packing:
    geo: object  # the rewritten stride-1 ConvGeometry (xp, wp, the same y)
    shift: tuple  # (D_h, D_w)
    pad: tuple  # (P_h, P_w)
    real_channels: int  # s_h * s_w * C (the rest of geo.c_per_group is zeros)
    itemsize: int

    @property
    def x_elements(self) -> int:
        g = self.geo
        return g.n * g.in_dims[0] * g.in_dims[1] * g.c_per_group

    @property
    def w_offset(self) -> int:
        """Elements from the workspace start to wp (256-byte aligned)."""
        return -(-self.x_elements * self.itemsize // ALIGN) * ALIGN // self.itemsize

    @property
    def w_elements(self) -> int:
        g = self.geo
        return g.k_per_group * g.filt[0] * g.filt[1] * g.c_per_group

    @property
    def workspace_bytes(self) -> int:
        return (self.w_offset + self.w_elements) * self.itemsize


def packing(geo, itemsize: int) -> Packing | str:
    """The packed problem of forward geometry ``geo``, or why it cannot be packed."""
    if len(geo.filt) != 2 or geo.groups != 1:
        return "phase packing takes 2-D convolutions with one group"
    if geo.dilation != (1, 1):
        return "phase packing takes no dilation"
    (sh, sw), c = geo.stride, geo.c_per_group
    real = sh * sw * c
    row = 16 // itemsize
    cp = -(-real // row) * row
    if cp > MAX_PACKED_CHANNELS:
        return (
            f"phase packing makes {real} channels (stride {sh}x{sw} x C = {c}); it "
            f"pays only up to {MAX_PACKED_CHANNELS}"
        )
    pad = tuple(s * -(-p // s) for s, p in zip(geo.stride, geo.pre))
    shift = tuple(p2 - p for p2, p in zip(pad, geo.pre))
    filt = tuple((f - 1 + d) // s + 1 for f, d, s in zip(geo.filt, shift, geo.stride))
    oh, ow = geo.out_dims
    hp, wp = oh + filt[0] - 1, ow + filt[1] - 1
    new = dataclasses.replace(
        geo,
        c_per_group=cp,
        in_dims=(hp, wp),
        filt=filt,
        pre=(0, 0),
        stride=(1, 1),
        flip=False,
        x_strides=(hp * wp * cp, 1, wp * cp, cp),
        w_strides=(filt[0] * filt[1] * cp, 1, filt[1] * cp, cp),
    )
    return Packing(new, shift, pad, real, itemsize)


def pack_x_source(name: str, geo, pk: Packing) -> str:
    """``name(X, XP)``: xp[n, i, j, ch] for PACK_BLOCK flat elements per program."""
    g = pk.geo
    c, (h, w) = geo.c_per_group, geo.in_dims
    sn, sc, shh, sww = geo.x_strides
    (sh, sw), (ph, pw) = geo.stride, pk.pad
    cp, (hp, wp) = g.c_per_group, g.in_dims
    idx = "tl.int64" if pk.x_elements >= 2**31 or geo.int64 else "tl.int32"
    return "\n".join(
        [
            "@triton.jit",
            f"def {name}(X, XP, BLOCK: tl.constexpr):",
            f"    e = tl.program_id(0).to({idx}) * BLOCK + tl.arange(0, BLOCK)",
            f"    live = e < {pk.x_elements}",
            f"    ch = e % {cp}",
            f"    t = e // {cp}",
            f"    j = t % {wp}",
            f"    t = t // {wp}",
            f"    i = t % {hp}",
            "    n = t // " + str(hp),
            f"    c = ch % {c}",
            f"    q = (ch // {c}) % {sw}",
            f"    p = ch // {c * sw}",
            f"    hi = i * {sh} + p - {ph}",
            f"    wi = j * {sw} + q - {pw}",
            f"    ok = live & (ch < {pk.real_channels}) & (hi >= 0) & (hi < {h}) & (wi >= 0) "
            f"& (wi < {w})",
            f"    v = tl.load(X + n * {sn} + c * {sc} + hi * {shh} + wi * {sww}, mask=ok, "
            "other=0.0)",
            "    tl.store(XP + e, v, mask=live)",
            "",
        ]
    )


def pack_w_source(name: str, geo, pk: Packing) -> str:
    """``name(W, WS)``: wp[k, a, b, ch] at element ``w_offset`` of the workspace WS."""
    g = pk.geo
    c, (r_, s_) = geo.c_per_group, geo.filt
    sk, sc, srr, sss = geo.w_strides
    (sh, sw), (dh, dw) = geo.stride, pk.shift
    cp, (ra, sb) = g.c_per_group, g.filt
    rr = f"{r_ - 1} - r" if geo.flip else "r"
    ss = f"{s_ - 1} - s" if geo.flip else "s"
    return "\n".join(
        [
            "@triton.jit",
            f"def {name}(W, WS, BLOCK: tl.constexpr):",
            "    e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
            f"    live = e < {pk.w_elements}",
            f"    ch = e % {cp}",
            f"    t = e // {cp}",
            f"    b = t % {sb}",
            f"    t = t // {sb}",
            f"    a = t % {ra}",
            f"    k = t // {ra}",
            f"    c = ch % {c}",
            f"    q = (ch // {c}) % {sw}",
            f"    p = ch // {c * sw}",
            f"    r = a * {sh} + p - {dh}",
            f"    s = b * {sw} + q - {dw}",
            f"    ok = live & (ch < {pk.real_channels}) & (r >= 0) & (r < {r_}) & (s >= 0) "
            f"& (s < {s_})",
            f"    v = tl.load(W + k * {sk} + c * {sc} + ({rr}) * {srr} + ({ss}) * {sss}, "
            "mask=ok, other=0.0)",
            f"    tl.store(WS + {pk.w_offset} + e, v, mask=live)",
            "",
        ]
    )


def estimate_seconds(
    pk: Packing, kn, peak: float, bandwidth: float, num_sms: int, x_bytes: int
) -> float:
    """The stride-1 TMA kernel on the packed problem, plus the packing passes (the image
    read once, xp written once) and their two launches."""
    pack = (x_bytes + pk.x_elements * pk.itemsize) / bandwidth + 2 * 3e-6
    return T.estimate_seconds(pk.geo, kn, pk.itemsize, peak, bandwidth, num_sms) + pack


def pack_launches(exe, graph, a, pk: Packing, key: str) -> None:
    """Queue the two packing kernels on ``exe`` (a LaunchList)."""
    dt = a.x.torch_dtype
    for what, src, total, buf in (
        ("x", pack_x_source, pk.x_elements, a.x.uid),
        ("w", pack_w_source, pk.w_elements, a.w.uid),
    ):
        name = f"conv_pack_{what}_{key}"
        kern = kernel_from_source(src(name, a.geo, pk), name)
        exe.add_launch(
            kern,
            (-(-total // PACK_BLOCK),),
            {"BLOCK": PACK_BLOCK},
            [("buf", buf), ("ws", dt)],
            graph,
            exe.cuda,
        )
