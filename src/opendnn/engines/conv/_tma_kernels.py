"""Implicit-GEMM convolution forward, NHWC fast path: image slabs as TMA boxes.

The GEMM is the one of ``_kernels.py`` (M = output pixels, N = output channels, K = taps x
input channels). Here the M tile is a spatial box -- ``IMGS`` images x ``TH`` rows x
``TW`` columns of output pixels -- so for tap (r, s) the slab it needs is itself a box of
the NHWC image:

    stride 1:  x[n0:n0+IMGS, oh0 + r*dil - pad_h : +TH, ow0 + s*dil - pad_w : +TW, c0:c0+BK]

fetched by one tensor-memory-accelerator copy of a 4-D descriptor over x. The copy engine
fills coordinates outside the image (negative ones included) with zeros, which is exactly
the convolution's zero padding: no masks and no per-element index arithmetic. For stride
2 the image is seen as the 5-D tensor [N, H/2, 2, W/2, 2C] (needs H, W even): input row
2*oh + d (d = r - pad) is (oh + floor(d/2), d mod 2), so each tap is again a box,
[IMGS, TH, 1, TW, BK] at (n0, oh0 + floor(d/2), d mod 2, ow0 + floor(e/2), (e mod 2)*C +
c0). The filter, KRSC-packed, is the 3-D descriptor [K, R*S, C]; a BK-wide box past C is
zero-filled, so C need not divide by BK for stride 1.

The grid is persistent (one program per SM walking tiles, output channels innermost so
programs in flight share the image box in L2). The float32 tile goes through the same
epilogue as every conv engine (bias, activations, residual, casts), with pixel indices
(nb, o0, o1) rebuilt from the box coordinates.
"""
from __future__ import annotations

import dataclasses

from ..fusion._codegen import COMBINE_HELPERS


@dataclasses.dataclass(frozen=True)
class TmaKnobs:
    TMA_IMGS: int = 1
    TMA_TH: int = 8
    TMA_TW: int = 16
    BLOCK_N: int = 128
    BLOCK_K: int = 64
    num_warps: int = 8
    num_stages: int = 4

    @property
    def block_m(self) -> int:
        return self.TMA_IMGS * self.TMA_TH * self.TMA_TW


# measured on the H100 (bench/conv_tma_probe.py, ResNet-50 layers at N=32): every entry
# won at least one layer; the cost model orders them per problem
KNOB_SPACE = (TmaKnobs(1, 8, 16, 64, 64, 4, 4), TmaKnobs(4, 4, 8, 128, 64, 4, 4),
              TmaKnobs(1, 16, 16, 128, 64, 8, 3), TmaKnobs(2, 8, 8, 128, 64, 8, 4),
              TmaKnobs(1, 8, 8, 128, 64, 4, 4), TmaKnobs(1, 8, 16, 128, 64, 8, 4),
              TmaKnobs(1, 4, 16, 128, 64, 4, 4), TmaKnobs(2, 8, 8, 64, 64, 4, 4),
              TmaKnobs(1, 8, 16, 128, 128, 8, 3),
              # small-M layers (7x7 images): more, narrower tiles fill the 132 SMs
              TmaKnobs(1, 8, 8, 64, 64, 4, 4), TmaKnobs(1, 8, 8, 64, 128, 4, 3))


def common_unsupported(geo, operand) -> str | None:
    """The rules every TMA path (forward, dgrad, wgrad) shares: 2-D, one group, 16-bit
    operands (``operand``: the descriptor whose type decides)."""
    if len(geo.filt) != 2:
        return "the TMA path is 2-D"
    if geo.groups != 1:
        return "the TMA path takes one group"
    if operand.data_type.name not in ("HALF", "BFLOAT16"):
        return "the TMA path takes half or bfloat16 operands"
    return None


def unsupported(geo, x, w, y) -> str | None:
    """Why the TMA path cannot take this problem (None when it can). ``geo`` is the
    ConvGeometry, x/w/y the descriptors."""
    why = common_unsupported(geo, x)
    if why:
        return why
    n, c, h, wd = x.dims
    if x.strides != (h * wd * c, 1, wd * c, c):
        return "the TMA path needs a packed NHWC image"
    k, _, r, s = w.dims
    if w.strides != (r * s * c, 1, s * c, c):
        return "the TMA path needs a packed KRSC (NHWC) filter"
    if (c * x.data_type.itemsize) % 16:
        return "TMA needs 16-byte aligned rows: C * element size must be a multiple of 16"
    if geo.stride == (1, 1):
        return None
    if geo.stride != (2, 2) or geo.dilation != (1, 1):
        return "the TMA path takes stride 1, or stride 2 without dilation"
    if h % 2 or wd % 2:
        return "stride 2 on the TMA path needs an even image height and width"
    if c % 64:
        return "stride 2 on the TMA path needs C to be a multiple of 64"
    return None


def fits(kn: TmaKnobs, geo, itemsize: int) -> bool:
    if geo.stride != (1, 1) and geo.c_per_group % kn.BLOCK_K:
        return False            # the merged (phase, C) axis would run into the next pixel
    smem = (kn.block_m + kn.BLOCK_N) * kn.BLOCK_K * itemsize * kn.num_stages
    return smem <= 200 * 1024


def tiles(geo, kn: TmaKnobs) -> int:
    oh, ow = geo.out_dims
    return (-(-geo.n // kn.TMA_IMGS) * -(-oh // kn.TMA_TH) * -(-ow // kn.TMA_TW) *
            -(-geo.k_per_group // kn.BLOCK_N))


def grid(geo, kn: TmaKnobs, num_sms: int) -> tuple:
    return (max(1, min(num_sms, tiles(geo, kn))),)


def estimate_seconds(geo, kn: TmaKnobs, itemsize: int, peak: float, bandwidth: float,
                     num_sms: int) -> float:
    """Roofline over the padded spatial boxes, with the last wave's idle SMs; the copy
    engine's boxes run at ~0.9 of the tensor-core rate the gather path reaches (probe)."""
    oh, ow = geo.out_dims
    rs = geo.filt[0] * geo.filt[1]
    cb = -(-geo.c_per_group // kn.BLOCK_K)
    n_tiles = tiles(geo, kn)
    flops = 2.0 * n_tiles * kn.block_m * kn.BLOCK_N * rs * cb * kn.BLOCK_K
    waves = -(-n_tiles // num_sms)
    fill = n_tiles / (waves * num_sms)
    steps = rs * cb                      # short reductions cannot hide the pipeline's fill
    pipe = steps / (steps + kn.num_stages)
    bytes_ = itemsize * (geo.n * geo.in_dims[0] * geo.in_dims[1] * geo.c_per_group +
                         geo.k_per_group * rs * geo.c_per_group +
                         geo.n * oh * ow * geo.k_per_group)
    return max(flops / (peak * 0.9 * fill * pipe), bytes_ / bandwidth) + 3e-6


def source(name: str, geo, kn: TmaKnobs, *, epilogue_params: list, epilogue_body: str,
           interpret: bool, w_offset: int = 0) -> str:
    """Kernel ``name(X, W, <epilogue params>, NUM_PROGS: constexpr)``; the filter starts
    ``w_offset`` elements after W (a packed filter in the workspace)."""
    n, (h, wd), c = geo.n, geo.in_dims, geo.c_per_group
    oh, ow = geo.out_dims
    r_, s_ = geo.filt
    k = geo.k_per_group
    imgs, th, tw, bn, bk = kn.TMA_IMGS, kn.TMA_TH, kn.TMA_TW, kn.BLOCK_N, kn.BLOCK_K
    bm = kn.block_m
    cb = -(-c // bk)
    t_h, t_w, t_n, t_k = -(-oh // th), -(-ow // tw), -(-n // imgs), -(-k // bn)
    ph, pw = geo.pre
    dh, dw = geo.dilation
    ind, ind2, ind3 = "    ", "        ", "            "
    sig = ["X", "W"] + list(epilogue_params) + ["NUM_PROGS: tl.constexpr"]
    L = [COMBINE_HELPERS, "@triton.jit", f"def {name}({', '.join(sig)}):"]
    if geo.stride == (1, 1):
        L.append(f"{ind}x_desc = tl.make_tensor_descriptor(X, shape=[{n}, {h}, {wd}, {c}], "
                 f"strides=[{h * wd * c}, {wd * c}, {c}, 1], "
                 f"block_shape=[{imgs}, {th}, {tw}, {bk}])")
    else:
        L.append(f"{ind}x_desc = tl.make_tensor_descriptor(X, shape=[{n}, {h // 2}, 2, "
                 f"{wd // 2}, {2 * c}], strides=[{h * wd * c}, {2 * wd * c}, {wd * c}, "
                 f"{2 * c}, 1], block_shape=[{imgs}, {th}, 1, {tw}, {bk}])")
    w_ptr = f"W + {w_offset}" if w_offset else "W"
    L.append(f"{ind}w_desc = tl.make_tensor_descriptor({w_ptr}, shape=[{k}, {r_ * s_}, {c}], "
             f"strides=[{r_ * s_ * c}, {c}, 1], block_shape=[{bn}, 1, {bk}])")
    L.append(f"{ind}g = 0")
    L.append(f"{ind}for tile in tl.range(tl.program_id(0), {t_n * t_h * t_w * t_k}, "
             "NUM_PROGS):")
    L += [f"{ind2}kt = tile % {t_k}", f"{ind2}_pt = tile // {t_k}",
          f"{ind2}wt = _pt % {t_w}", f"{ind2}_pt = _pt // {t_w}",
          f"{ind2}ht = _pt % {t_h}", f"{ind2}nt = _pt // {t_h}",
          f"{ind2}acc = tl.full([{bm}, {bn}], 0.0, tl.float32)",
          f"{ind2}for it in range(0, {r_ * s_ * cb}):",
          f"{ind3}t = it // {cb}", f"{ind3}c0 = (it % {cb}) * {bk}",
          f"{ind3}r = t // {s_}", f"{ind3}s = t % {s_}"]
    if geo.stride == (1, 1):
        L.append(f"{ind3}a = x_desc.load([nt * {imgs}, ht * {th} + r * {dh} - {ph}, "
                 f"wt * {tw} + s * {dw} - {pw}, c0])")
    else:   # d + 2*pad >= 0 keeps // and % on non-negative values
        L += [f"{ind3}eh = r + {ph}", f"{ind3}ew = s + {pw}",
              f"{ind3}a = x_desc.load([nt * {imgs}, ht * {th} + eh // 2 - {ph}, eh % 2, "
              f"wt * {tw} + ew // 2 - {pw}, (ew % 2) * {c} + c0])"]
    L.append(f"{ind3}a = a.reshape({bm}, {bk})")
    wtap = f"{r_ * s_ - 1} - t" if geo.flip else "t"
    L.append(f"{ind3}b = w_desc.load([kt * {bn}, {wtap}, c0]).reshape({bn}, {bk})")
    if interpret:   # the 3.6 interpreter's dot is wrong on bfloat16: widen there only
        L.append(f"{ind3}acc += tl.dot(a.to(tl.float32), tl.trans(b.to(tl.float32)), "
                 "input_precision='ieee')")
    else:
        L.append(f"{ind3}acc = tl.dot(a, tl.trans(b), acc)")
    # the epilogue's pixel and channel indices, rebuilt from the box coordinates
    L += [f"{ind2}_i = tl.arange(0, {bm})",
          f"{ind2}nb = nt * {imgs} + _i // {th * tw}",
          f"{ind2}o0 = ht * {th} + (_i // {tw}) % {th}",
          f"{ind2}o1 = wt * {tw} + _i % {tw}",
          f"{ind2}mask_m = (nb < {n}) & (o0 < {oh}) & (o1 < {ow})",
          f"{ind2}offs_n = kt * {bn} + tl.arange(0, {bn})",
          f"{ind2}mask_n = offs_n < {k}"]
    if geo.int64:
        L.append(f"{ind2}nb = nb.to(tl.int64)")
    for line in epilogue_body.strip("\n").split("\n"):
        L.append(ind2 + line)
    return "\n".join(L) + "\n"
