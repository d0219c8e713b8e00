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
import math

from ...fusion._codegen import COMBINE_HELPERS


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


# measured on the H100 (ResNet-50 layers at N=32, bench/conv_sweep.py): every entry
# won at least one layer; the cost model orders them per problem
KNOB_SPACE = (
    TmaKnobs(1, 8, 16, 64, 64, 4, 4),
    TmaKnobs(4, 4, 8, 128, 64, 4, 4),
    TmaKnobs(1, 16, 16, 128, 64, 8, 3),
    TmaKnobs(2, 8, 8, 128, 64, 8, 4),
    TmaKnobs(1, 8, 8, 128, 64, 4, 4),
    TmaKnobs(1, 8, 16, 128, 64, 8, 4),
    TmaKnobs(1, 4, 16, 128, 64, 4, 4),
    TmaKnobs(2, 8, 8, 64, 64, 4, 4),
    TmaKnobs(1, 8, 16, 128, 128, 8, 3),
    # small-M layers (7x7 images): more, narrower tiles fill the 132 SMs
    TmaKnobs(1, 8, 8, 64, 64, 4, 4),
    TmaKnobs(1, 8, 8, 64, 128, 4, 3),
)


def packed_channels_last(dims) -> tuple:
    """The strides of a packed channels-last (NHWC, NDHWC) tensor of NCHW-order ``dims``."""
    n, c, *sp = dims
    out, acc = [], c
    for v in reversed(sp):
        out.append(acc)
        acc *= v
    return (acc, 1, *reversed(out))


def strides_match(desc, want) -> bool:
    """Whether tensor descriptor ``desc`` has the strides ``want``. The stride of a size-1
    axis addresses nothing, so any value passes there (a 1x1 filter [K, C, 1, 1] may come
    as (C, 1, C, C) or (C, 1, 1, 1): the same memory)."""
    return all(d == 1 or s == w for d, s, w in zip(desc.dims, desc.strides, want))


def is_packed_channels_last(desc) -> bool:
    """Whether tensor descriptor ``desc`` is packed channels-last (``strides_match``)."""
    return strides_match(desc, packed_channels_last(desc.dims))


def common_unsupported(geo, operand, dims: tuple = (2,), tf32: bool = False) -> str | None:
    """The rules every TMA path (forward, dgrad, wgrad) shares: 2-D (or the spatial ranks
    ``dims``), one group, 16-bit operands (``operand``: the descriptor whose type decides;
    with ``tf32``, float32 too, for a path whose operands land K-major)."""
    if len(geo.filt) not in dims:
        return "the TMA path is " + " or ".join(f"{d}-D" for d in dims)
    if geo.groups != 1:
        return "the TMA path takes one group"
    if tf32 and operand.data_type.name == "FLOAT":
        return None
    if operand.data_type.name not in ("HALF", "BFLOAT16"):
        return "the TMA path takes half or bfloat16 operands (the forward: float32 as TF32)"
    return None


def unsupported(geo, x, w, y, tf32: bool = False) -> str | None:
    """Why the TMA path cannot take this problem (None when it can). ``geo`` is the
    ConvGeometry, x/w/y the descriptors; ``tf32``: float32 operands may run as TF32 (both
    land K-major: x's box has its channels, the reduction, innermost, and so has the KRSC
    filter's)."""
    why = common_unsupported(geo, x, dims=(2, 3), tf32=tf32)
    if why:
        return why
    c, (h, wd) = x.dims[1], x.dims[-2:]
    if not is_packed_channels_last(x):
        return "the TMA path needs a packed NHWC image"
    if not is_packed_channels_last(w):
        return "the TMA path needs a packed KRSC (NHWC) filter"
    if (c * x.data_type.itemsize) % 16:
        return "TMA needs 16-byte aligned rows: C * element size must be a multiple of 16"
    if geo.stride[-2:] == (1, 1):
        return None
    if geo.stride[-2:] != (2, 2) or geo.dilation[-2:] != (1, 1):
        return "the TMA path takes stride 1, or stride 2 without dilation (height and width)"
    if h % 2 or wd % 2:
        return "stride 2 on the TMA path needs an even image height and width"
    if c % 64:
        return "stride 2 on the TMA path needs C to be a multiple of 64"
    return None


def knob_rule(geo, kn) -> str | None:
    """Why box config ``kn`` cannot take this (otherwise supported) problem."""
    if len(geo.filt) == 3 and (kn.TMA_IMGS != 1 or split_of(kn) != 1):
        return "3-D boxes hold one output depth slice (TMA_IMGS = 1) and do not split"
    return None


def _images(geo) -> tuple:
    """(output images, input images): N and N in 2-D; the N * OD and N * D depth slices
    in 3-D (an output slice meets input slice n * D + od*sd + q*dd - pd for depth tap q)."""
    if len(geo.filt) == 2:
        return geo.n, geo.n
    return geo.n * geo.out_dims[0], geo.n * geo.in_dims[0]


def fits(kn: TmaKnobs, geo, itemsize: int) -> bool:
    if geo.stride[-2:] != (1, 1) and geo.c_per_group % kn.BLOCK_K:
        return False  # the merged (phase, C) axis would run into the next pixel
    smem = (kn.block_m + kn.BLOCK_N) * kn.BLOCK_K * itemsize * kn.num_stages
    return smem <= 200 * 1024


def tiles(geo, kn: TmaKnobs) -> int:
    oh, ow = geo.out_dims[-2:]
    return (
        -(-_images(geo)[0] // kn.TMA_IMGS)
        * -(-oh // kn.TMA_TH)
        * -(-ow // kn.TMA_TW)
        * -(-geo.k_per_group // kn.BLOCK_N)
    )


def split_of(kn) -> int:
    """Slices of the reduction (knob SPLIT of the forward's configs; 1 elsewhere)."""
    return getattr(kn, "SPLIT", 1)


def grid(geo, kn: TmaKnobs, num_sms: int) -> tuple:
    return (max(1, min(num_sms, tiles(geo, kn) * split_of(kn))),)


def partials_bytes(geo, kn: TmaKnobs) -> int:
    """float32 partial tiles of a split reduction: [SPLIT, tiles, block_m, BLOCK_N]."""
    s = split_of(kn)
    return 0 if s == 1 else 4 * s * tiles(geo, kn) * kn.block_m * kn.BLOCK_N


def estimate_seconds(
    geo, kn: TmaKnobs, itemsize: int, peak: float, bandwidth: float, num_sms: int
) -> float:
    """Roofline over the padded spatial boxes, with the last wave's idle SMs; the copy
    engine's boxes run at ~0.9 of the tensor-core rate the gather path reaches (measured).
    A split reduction adds its partials' round trip (through L2 when they fit) and a
    second launch. Not modelled: the boxes every program pulls from L2 -- 64-pixel tiles
    on l4_3x3_512 move 226 MB in 24 us, which is why 128-pixel tiles split 2 ways win
    there (22.7 us) though this model ranks them behind."""
    rs = math.prod(geo.filt)
    cb = -(-geo.c_per_group // kn.BLOCK_K)
    split = split_of(kn)
    jobs = tiles(geo, kn) * split
    steps = -(-rs * cb // split)  # short reductions cannot hide the pipeline's fill
    flops = 2.0 * jobs * kn.block_m * kn.BLOCK_N * steps * kn.BLOCK_K
    waves = -(-jobs // num_sms)
    fill = jobs / (waves * num_sms)
    pipe = steps / (steps + kn.num_stages)
    x_px, y_px = (geo.n * math.prod(d) for d in (geo.in_dims, geo.out_dims))
    bytes_ = itemsize * (
        x_px * geo.c_per_group + geo.k_per_group * rs * geo.c_per_group + y_px * geo.k_per_group
    )
    t = max(flops / (peak * 0.9 * fill * pipe), bytes_ / bandwidth) + 3e-6
    if split > 1:
        ws = partials_bytes(geo, kn)
        t += ws * (1.0 if ws < 24e6 else 2.0) / bandwidth + 3e-6
    return t


def source(
    name: str,
    geo,
    kn: TmaKnobs,
    *,
    epilogue_params: list,
    epilogue_body: str,
    interpret: bool,
    w_offset: int = 0,
) -> str:
    """Kernel ``name(X, W, <epilogue params>, NUM_PROGS: constexpr)``; the filter starts
    ``w_offset`` elements after W (a packed filter in the workspace)."""
    (h, wd), c = geo.in_dims[-2:], geo.c_per_group
    oh, ow = geo.out_dims[-2:]
    r_, s_ = geo.filt[-2:]
    three = len(geo.filt) == 3
    q_ = geo.filt[0] if three else 1
    n_y, n_x = _images(geo)
    k = geo.k_per_group
    imgs, th, tw, bn, bk = kn.TMA_IMGS, kn.TMA_TH, kn.TMA_TW, kn.BLOCK_N, kn.BLOCK_K
    bm = kn.block_m
    cb = -(-c // bk)
    t_h, t_w, t_n, t_k = -(-oh // th), -(-ow // tw), -(-n_y // imgs), -(-k // bn)
    ph, pw = geo.pre[-2:]
    dh, dw = geo.dilation[-2:]
    ind, ind2, ind3 = "    ", "        ", "            "
    split = split_of(kn)
    its = q_ * r_ * s_ * cb
    per = -(-its // split)
    n_tiles = t_n * t_h * t_w * t_k
    sig = (
        ["X", "W"] + (["WS"] if split > 1 else list(epilogue_params)) + ["NUM_PROGS: tl.constexpr"]
    )
    L = [COMBINE_HELPERS, "@triton.jit", f"def {name}({', '.join(sig)}):"]
    stride1 = geo.stride[-2:] == (1, 1)
    if stride1:
        L.append(
            f"{ind}x_desc = tl.make_tensor_descriptor(X, shape=[{n_x}, {h}, {wd}, {c}], "
            f"strides=[{h * wd * c}, {wd * c}, {c}, 1], "
            f"block_shape=[{imgs}, {th}, {tw}, {bk}])"
        )
    else:
        L.append(
            f"{ind}x_desc = tl.make_tensor_descriptor(X, shape=[{n_x}, {h // 2}, 2, "
            f"{wd // 2}, {2 * c}], strides=[{h * wd * c}, {2 * wd * c}, {wd * c}, "
            f"{2 * c}, 1], block_shape=[{imgs}, {th}, 1, {tw}, {bk}])"
        )
    w_ptr = f"W + {w_offset}" if w_offset else "W"
    L.append(
        f"{ind}w_desc = tl.make_tensor_descriptor({w_ptr}, shape=[{k}, {q_ * r_ * s_}, {c}], "
        f"strides=[{q_ * r_ * s_ * c}, {c}, 1], block_shape=[{bn}, 1, {bk}])"
    )
    L.append(f"{ind}g = 0")
    L.append(f"{ind}for job in tl.range(tl.program_id(0), {n_tiles * split}, NUM_PROGS):")
    if split > 1:  # slices of one tile on neighbouring jobs; slice sl takes steps
        L += [
            f"{ind2}sl = job % {split}",
            f"{ind2}tile = job // {split}",  # [sl*per, +per)
            f"{ind2}it0 = sl * {per}",
            f"{ind2}it1 = tl.minimum(it0 + {per}, {its})",
        ]
    else:
        L += [f"{ind2}tile = job", f"{ind2}it0 = 0", f"{ind2}it1 = {its}"]
    L += _tile_coords(kn, t_k, t_w, t_h, ind2)
    L += [
        f"{ind2}acc = tl.full([{bm}, {bn}], 0.0, tl.float32)",
        f"{ind2}for it in range(it0, it1):",
        f"{ind3}t = it // {cb}",
        f"{ind3}c0 = (it % {cb}) * {bk}",
        f"{ind3}r = (t // {s_}) % {r_}",
        f"{ind3}s = t % {s_}",
    ]
    img = f"nt * {imgs}"
    if three:  # output slice nt = (n, od); depth tap q; a depth in the padding: image -1
        od_, d_ = geo.out_dims[0], geo.in_dims[0]
        sd, dd, pd = geo.stride[0], geo.dilation[0], geo.pre[0]
        L += [
            f"{ind3}dz = (nt % {od_}) * {sd} + (t // {r_ * s_}) * {dd} - {pd}",
            f"{ind3}xi = tl.where((dz >= 0) & (dz < {d_}), (nt // {od_}) * {d_} + dz, -1)",
        ]
        img = "xi"
    if stride1:
        L.append(
            f"{ind3}a = x_desc.load([{img}, ht * {th} + r * {dh} - {ph}, "
            f"wt * {tw} + s * {dw} - {pw}, c0])"
        )
    else:  # d + 2*pad >= 0 keeps // and % on non-negative values
        L += [
            f"{ind3}eh = r + {ph}",
            f"{ind3}ew = s + {pw}",
            f"{ind3}a = x_desc.load([{img}, ht * {th} + eh // 2 - {ph}, eh % 2, "
            f"wt * {tw} + ew // 2 - {pw}, (ew % 2) * {c} + c0])",
        ]
    L.append(f"{ind3}a = a.reshape({bm}, {bk})")
    wtap = f"{q_ * r_ * s_ - 1} - t" if geo.flip else "t"
    L.append(f"{ind3}b = w_desc.load([kt * {bn}, {wtap}, c0]).reshape({bn}, {bk})")
    if interpret:  # the 3.6 interpreter's dot is wrong on bfloat16: widen there only
        L.append(
            f"{ind3}acc += tl.dot(a.to(tl.float32), tl.trans(b.to(tl.float32)), "
            "input_precision='ieee')"
        )
    else:
        L.append(f"{ind3}acc = tl.dot(a, tl.trans(b), acc)")
    if split > 1:  # the float32 partial tile; sum_source adds the slices, epilogue
        L += [
            f"{ind2}_i = tl.arange(0, {bm})",
            f"{ind2}_j = tl.arange(0, {bn})",
            f"{ind2}tl.store(WS + ((sl * {n_tiles} + tile) * {bm} + _i)[:, None] * {bn} + "
            f"_j[None, :], acc)",
        ]
        return "\n".join(L) + "\n"
    L += _epilogue_lines(geo, kn, "tl.arange(0, {})".format(bm), ind2, epilogue_body)
    return "\n".join(L) + "\n"


def _tile_coords(kn, t_k: int, t_w: int, t_h: int, ind: str) -> list:
    """Tile id ``tile`` -> (nt, ht, wt) box and kt channel block (channels innermost)."""
    return [
        f"{ind}kt = tile % {t_k}",
        f"{ind}_pt = tile // {t_k}",
        f"{ind}wt = _pt % {t_w}",
        f"{ind}_pt = _pt // {t_w}",
        f"{ind}ht = _pt % {t_h}",
        f"{ind}nt = _pt // {t_h}",
    ]


def _epilogue_lines(geo, kn, rows: str, ind: str, epilogue_body: str) -> list:
    """The epilogue's pixel and channel indices, rebuilt from the box coordinates (rows
    ``rows`` of the tile), then the epilogue."""
    th, tw, bn = kn.TMA_TH, kn.TMA_TW, kn.BLOCK_N
    oh, ow = geo.out_dims[-2:]
    o_h, o_w = f"ht * {th} + (_i // {tw}) % {th}", f"wt * {tw} + _i % {tw}"
    L = [f"{ind}_i = {rows}"]
    if len(geo.filt) == 3:  # one output depth slice nt = (n, od) per tile
        od_ = geo.out_dims[0]
        L += [
            f"{ind}nb = nt // {od_} + _i * 0",
            f"{ind}o0 = nt % {od_} + _i * 0",
            f"{ind}o1 = {o_h}",
            f"{ind}o2 = {o_w}",
            f"{ind}mask_m = (o1 < {oh}) & (o2 < {ow})",
        ]
    else:
        L += [
            f"{ind}nb = nt * {kn.TMA_IMGS} + _i // {th * tw}",
            f"{ind}o0 = {o_h}",
            f"{ind}o1 = {o_w}",
            f"{ind}mask_m = (nb < {geo.n}) & (o0 < {oh}) & (o1 < {ow})",
        ]
    L += [
        f"{ind}offs_n = kt * {bn} + tl.arange(0, {bn})",
        f"{ind}mask_n = offs_n < {geo.k_per_group}",
    ]
    if geo.int64:
        L.append(f"{ind}nb = nb.to(tl.int64)")
    return L + [ind + line for line in epilogue_body.strip("\n").split("\n")]


SUM_ROWS = 32  # partial-tile rows per program of the split sum


def sum_source(name: str, geo, kn: TmaKnobs, *, epilogue_params: list, epilogue_body: str) -> str:
    """Kernel ``name(WS, <epilogue params>)``: rows [ch * SUM_ROWS, +SUM_ROWS) of one
    output tile are the sum of its SPLIT partials (all loads issued at once, added in slice
    order: deterministic), then the epilogue. Grid (tiles * block_m / SUM_ROWS,)."""
    oh, ow = geo.out_dims
    t_h, t_w = -(-oh // kn.TMA_TH), -(-ow // kn.TMA_TW)
    t_n, t_k = -(-geo.n // kn.TMA_IMGS), -(-geo.k_per_group // kn.BLOCK_N)
    n_tiles, bm, bn, rows = t_n * t_h * t_w * t_k, kn.block_m, kn.BLOCK_N, min(SUM_ROWS, kn.block_m)
    ind = "    "
    L = [
        COMBINE_HELPERS,
        "@triton.jit",
        f"def {name}({', '.join(['WS'] + list(epilogue_params))}):",
        f"{ind}pid = tl.program_id(0)",
        f"{ind}tile = pid // {bm // rows}",
        f"{ind}_r = (pid % {bm // rows}) * {rows} + tl.arange(0, {rows})",
        f"{ind}g = 0",
    ]
    L += _tile_coords(kn, t_k, t_w, t_h, ind)
    L += [f"{ind}_j = tl.arange(0, {bn})", f"{ind}acc = tl.full([{rows}, {bn}], 0.0, tl.float32)"]
    for sl in range(split_of(kn)):
        L.append(
            f"{ind}acc += tl.load(WS + (({sl * n_tiles} + tile) * {bm} + _r)[:, None] * "
            f"{bn} + _j[None, :])"
        )
    return "\n".join(L + _epilogue_lines(geo, kn, "_r", ind, epilogue_body)) + "\n"


def sum_grid(geo, kn: TmaKnobs) -> tuple:
    return (tiles(geo, kn) * (kn.block_m // min(SUM_ROWS, kn.block_m)),)
