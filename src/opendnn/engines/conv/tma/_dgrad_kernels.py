"""Implicit-GEMM backward data, NHWC fast path: dy slabs as TMA boxes, one dense
sub-convolution per stride phase.

The GEMM is the one of ``_kernels.dgrad_source`` (M = dx pixels, N = C, reduction = taps x
K): with a packed NHWC dy [N, OH, OW, K] and a KRSC filter w [K, R, S, C],

    dx[n, h, w, c] = sum_{r, s, k} dy[n, (h + ph - r*dh) / sh, (w + pw - s*dw) / sw, k]
                                   * w[k, r', s', c]

where a term counts only when both divisions are exact and land inside dy, and (r', s') =
(R-1-r, S-1-s) in CONVOLUTION mode, else (r, s).

Stride phases. Write a dx row as h = sh*i + a (phase a in [0, sh)). Tap r contributes to
phase a only when (a + ph - r) % sh == 0 (dilation 1 on strided axes), i.e. for
r = r_a + sh*u, u = 0 .. taps_a - 1, with

    r_a = (a + ph) % sh,   taps_a = ceil((R - r_a) / sh),   dy row = i + (a + ph) // sh - u

so each phase is a dense stride-1 correlation of dy with a sub-filter (taps_a may be 0:
e.g. 1x1 stride 2 leaves dx = 0 on three of its four phases). Stride 1 is the single phase
a = 0 with r_a = 0, taps_a = R and dy row = h + ph - r*dh (any dilation).

Tiles. The M tile is a box of ``IMGS`` images x ``TH`` x ``TW`` phase pixels (i, j); for
tap step (u, v) the slab it needs is the dy box at

    (n0, i0 + (a + ph) // sh - u*dh, j0 + (b + pw) // sw - v*dw, k0)   [IMGS, TH, TW, BK]

one copy of a 4-D TMA descriptor over dy; coordinates outside dy (negative ones included)
come back as zeros, exactly the terms that do not exist. The filter operand [BK, BN] is
the box (k0, tap, c0) of the 3-D descriptor w[K, R*S, C] (no transpose: dgrad's B is
already [k, c]). When C * itemsize is not a multiple of 16 (C = 3: the ResNet stem) TMA
cannot describe w; it comes through masked pointer loads instead, issued one step ahead
into registers (such narrow rows are too poorly aligned for cp.async, so Triton's
pipeliner would leave the load waiting in front of each dot).

3-D (NDHWC): the tiles' images are the N * D dx depth slices (``TMA_IMGS=1``: a box
holds one). Slice (n, id) walks only the depth taps q that reach it -- all of them at
depth stride 1 (dy depth od = id + pd - q*dd), those with (id + pd - q) % sd == 0
otherwise (od = (id + pd) // sd - u, as a strided axis's phase above) -- and reads dy
image n * OD + od of the 4-D descriptor [N * OD, OH, OW, K], or image -1 (zero-filled)
when od falls outside dy. The filter is [K, Q*R*S, C].

The grid is persistent; tiles run (image box, row box, column box, phase, channel block)
with channel blocks innermost, so programs in flight share the dy box in L2. The float32
tile goes through the conv epilogue at dx pixel (sh*i + a, sw*j + b), masked to dx's
extent.
"""

from __future__ import annotations

import dataclasses
import math

from ...fusion._codegen import COMBINE_HELPERS
from ._kernels import TmaKnobs, common_unsupported, is_packed_channels_last, strides_match

# L2 feeds the SMs at roughly this multiple of the DRAM rate: it bounds tiles whose slab
# reuse is low (narrow BLOCK_N, e.g. C = 3). Fitted, not measured directly: at 2.5 the
# model orders the H100's box configs on ResNet-50's stride-1 3x3 layers as measured
# (256 x 128 tiles of three stages ahead of 128 x 128 on l2_3x3_128, 19.0 against
# 20.3-22.2 us), where 4 ranked the smaller tiles first
L2_RATE = 2.5
# the steady rate of a tile's reduction with this many pipeline stages, relative to four
STAGE_RATE = {1: 0.5, 2: 0.7, 3: 0.93}


@dataclasses.dataclass(frozen=True)
class DgradTmaKnobs(TmaKnobs):
    PPS: int = 1  # persistent programs per SM: 2 lets one tile's fill and epilogue run
    #                  under another's dots (the reductions here are short: 2-18 steps)
    FLAT: int = 0  # 1: tiles of TMA_TW flat dx pixel rows (_tma_flat_kernels)
    SPLIT: int = 1  # >1 (stride 1): the reduction in slices, float32 partials summed in
    #                  slice order by a second kernel that runs the epilogue


# chosen for the ResNet-50 dgrad layers (C 64..1024, K 64..2048, dx 56x56 .. 7x7), after
# the forward's winners with the roles of C and K swapped, then PPS=2 variants of the
# winners on layers with more tiles than SMs (bench/conv_sweep.py: l2_3x3_128
# 20.9 -> 18.2 us, l2_3x3_128s2 34.8 -> 32.1 us); the cost model orders them
KNOB_SPACE = (
    DgradTmaKnobs(1, 8, 16, 128, 64, 8, 4),  # C >= 128 on 28x28 and larger
    DgradTmaKnobs(1, 8, 16, 64, 64, 4, 4),  # C = 64 (layer 1)
    DgradTmaKnobs(1, 16, 16, 64, 64, 8, 3),  # C = 64, short reductions: big boxes
    DgradTmaKnobs(1, 16, 16, 128, 64, 8, 3),  # C = 128 on 28x28 (l2_3x3_128: 19.0 us)
    DgradTmaKnobs(4, 4, 8, 128, 64, 8, 4),  # 14x14 and 7x7 images: several per tile
    DgradTmaKnobs(1, 8, 16, 128, 128, 8, 3),  # long reductions (K x taps) on 14x14
    DgradTmaKnobs(1, 8, 8, 128, 64, 4, 4),  # 7x7 images: more, smaller tiles
    DgradTmaKnobs(1, 8, 8, 64, 128, 4, 3),  # 7x7, K = 2048
    # two programs per SM, two stages each (three raced: see knob_rule): the winners on
    # layers with more tiles than SMs (l2_3x3_128, l2_3x3_128s2) and on the 3-D UNet
    # levels of 32 and 64 channels, thousands of tiles of 2-6 steps (a stride-2 depth
    # slice meets 1-2 depth taps), where a second program hides one tile's fill and
    # epilogue under the other's dots
    DgradTmaKnobs(4, 4, 8, 128, 64, 8, 2, PPS=2),
    DgradTmaKnobs(4, 4, 8, 128, 64, 4, 2, PPS=2),
    DgradTmaKnobs(1, 8, 16, 128, 64, 8, 2, PPS=2),
    DgradTmaKnobs(2, 8, 8, 128, 64, 8, 2, PPS=2),
    DgradTmaKnobs(4, 4, 8, 64, 64, 4, 2, PPS=2),
    DgradTmaKnobs(1, 8, 16, 32, 64, 4, 2, PPS=2),
    DgradTmaKnobs(1, 16, 16, 64, 64, 8, 2, PPS=2),
    # stride 1 with few tiles of a long reduction (7x7 images, K = 512): 128-pixel tiles
    # split 2 or 3 ways (the forward's SPLIT_KNOBS: 8% on l4_3x3_512)
    DgradTmaKnobs(4, 4, 8, 128, 64, 8, 4, SPLIT=2),
    DgradTmaKnobs(4, 4, 8, 128, 64, 8, 4, SPLIT=3),
    DgradTmaKnobs(2, 8, 8, 128, 64, 8, 4, SPLIT=2),
    DgradTmaKnobs(2, 8, 8, 128, 64, 8, 4, SPLIT=3),
    # tiny C (the stem, C = 3): the filter through pointers, N = 16 or 32
    DgradTmaKnobs(1, 16, 16, 16, 64, 4, 4),
    DgradTmaKnobs(1, 8, 16, 16, 64, 4, 4),
    DgradTmaKnobs(1, 8, 16, 32, 64, 4, 4),
)


def filter_k_major(w) -> bool:
    """Whether filter ``w`` (K, C, R1, ..) is packed with K innermost, then C, then the taps
    (``layout.engine.k_innermost_strides``; size-1 axes free): the dgrad GEMM's B operand
    [K, C] reduction-major, as TF32 needs it."""
    from ..layout.engine import k_innermost_strides

    return strides_match(w, k_innermost_strides(tuple(w.dims)))


def w_k_major(w, dy) -> bool:
    """Whether the kernel reads filter ``w`` K-innermost ([taps, C, K] boxes, transposed
    in shared memory into the K-major B operand): always for float32 (TF32 takes K-major
    operands only), for 16-bit types when ``w`` comes so (a KRSC filter is read as
    [K, taps, C] boxes, the MN-major B operand)."""
    return dy.data_type.name == "FLOAT" or (filter_k_major(w) and not is_packed_channels_last(w))


def unsupported(geo, dx, w, dy, tf32: bool = False) -> str | None:
    """Why dgrad's TMA path cannot take this problem (None when it can); ``geo`` is the
    ConvGeometry, dx / w / dy the descriptors. ``tf32``: float32 runs as TF32 when the
    filter comes K-innermost (``filter_k_major``: the channels-last transform copies it so);
    dy's box already has K, the reduction, innermost."""
    why = common_unsupported(geo, dy, dims=(2, 3), tf32=tf32)
    if why:
        return why
    k = dy.dims[1]
    if not is_packed_channels_last(dy):
        return "dgrad's TMA path needs a packed NHWC dy"
    if dy.data_type.name == "FLOAT":
        if not filter_k_major(w):
            return "dgrad's TMA path in TF32 needs the filter K-innermost (K-major operand)"
        if (k * 4) % 16:
            return "TMA needs 16-byte aligned rows: K * 4 bytes must be a multiple of 16"
    elif not (is_packed_channels_last(w) or filter_k_major(w)):
        return "dgrad's TMA path needs a packed KRSC (NHWC) or a K-innermost filter"
    if (k * dy.data_type.itemsize) % 16:
        return (
            "TMA needs 16-byte aligned rows: K (dy's channels) * element size must be a "
            "multiple of 16"
        )
    for st, dil in zip(geo.stride, geo.dilation):
        if st > 1 and dil > 1:
            return "dgrad's TMA path takes stride > 1 only without dilation"
    return None


def knob_rule(geo, kn) -> str | None:
    """Why config ``kn`` cannot take this (otherwise supported) problem."""
    if kn.PPS != 1 and kn.num_stages > 2:
        # two programs per SM with three stages each wrote wrong dx values on sm_90,
        # varying from run to run (a race), on cudnn-frontend's conv fuzzer problems
        # (stride (2, 1) 2-D, strided or dilated 3-D; 0.03-1% of the elements); the same
        # tiles with two stages, or with one program per SM, are exact (design note)
        return (
            "PPS=2 (two persistent programs per SM) with more than 2 stages races on "
            "sm_90: declined"
        )
    if len(geo.filt) == 3 and (kn.TMA_IMGS != 1 or kn.SPLIT != 1):
        return "3-D boxes hold one dx depth slice (TMA_IMGS = 1) and do not split (SPLIT = 1)"
    return None


def depth_taps(geo) -> int:
    """Depth taps summed over the dx depth slices (1 for 2-D): each slice id walks the
    taps q with (id + pd - q) % sd == 0, all Q at depth stride 1."""
    if len(geo.filt) == 2:
        return 1
    q, sd, pd = geo.filt[0], geo.stride[0], geo.pre[0]
    if sd == 1:
        return q * geo.in_dims[0]
    return sum(_cdiv(q - (i + pd) % sd, sd) for i in range(geo.in_dims[0]))


def filter_by_descriptor(geo, itemsize: int) -> bool:
    """Whether w [K, R*S, C] can be a TMA descriptor (16-byte rows); else pointer loads.
    (A K-innermost float32 filter is always a descriptor, [R*S, C, K]: ``unsupported``.)"""
    return itemsize == 4 or (geo.c_per_group * itemsize) % 16 == 0


def fits(kn: DgradTmaKnobs, geo, itemsize: int) -> bool:
    smem = (kn.block_m + kn.BLOCK_N) * kn.BLOCK_K * itemsize * kn.num_stages
    return smem <= 200 * 1024


def phase_taps(geo) -> list[int]:
    """How many taps (r, s) each stride phase (a, b) has, phases row-major; sums to R * S
    (a tap r serves exactly the phase a = (r - ph) mod sh)."""

    def axis(st, pre, f):
        return [_cdiv(f - (a + pre) % st, st) for a in range(st)]

    rows = axis(geo.stride[-2], geo.pre[-2], geo.filt[-2])
    cols = axis(geo.stride[-1], geo.pre[-1], geo.filt[-1])
    return [tr * tc for tr in rows for tc in cols]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _tile_counts(geo, kn: TmaKnobs) -> tuple:
    """(image boxes, row boxes, column boxes, phases, channel blocks); a phase has at most
    ceil(H / sh) x ceil(W / sw) pixels. 3-D: the images are the N * D depth slices."""
    (h, wd), (sh, sw) = geo.in_dims[-2:], geo.stride[-2:]
    images = geo.n * (geo.in_dims[0] if len(geo.filt) == 3 else 1)
    return (
        _cdiv(images, kn.TMA_IMGS),
        _cdiv(_cdiv(h, sh), kn.TMA_TH),
        _cdiv(_cdiv(wd, sw), kn.TMA_TW),
        sh * sw,
        _cdiv(geo.c_per_group, kn.BLOCK_N),
    )


def tiles(geo, kn: TmaKnobs) -> int:
    out = 1
    for t in _tile_counts(geo, kn):
        out *= t
    return out


def grid(geo, kn: DgradTmaKnobs, num_sms: int) -> tuple:
    return (max(1, min(num_sms * kn.PPS, tiles(geo, kn) * kn.SPLIT)),)


def split_rule(geo, kn: DgradTmaKnobs) -> str | None:
    """Why box config ``kn`` cannot split this problem's reduction (None when it can)."""
    if kn.SPLIT == 1:
        return None
    if geo.stride != (1, 1):
        return "SPLIT on the box tiles takes stride 1 (one phase per tile)"
    if not filter_by_descriptor(geo, 2):
        return "SPLIT on the box tiles needs the filter through its TMA descriptor"
    return None


def output_view(geo):
    """dx's geometry as the forward's split sum (``_tma_kernels.sum_source``) reads it: the
    tiles' pixels are dx's (in_dims) and their channels C."""
    return dataclasses.replace(geo, out_dims=geo.in_dims, k_per_group=geo.c_per_group)


def partials_bytes(geo, kn: DgradTmaKnobs) -> int:
    return 0 if kn.SPLIT == 1 else 4 * kn.SPLIT * tiles(geo, kn) * kn.block_m * kn.BLOCK_N


def estimate_seconds(
    geo, kn: DgradTmaKnobs, itemsize: int, peak: float, bandwidth: float, num_sms: int
) -> float:
    """Roofline over the padded boxes and only the real taps of each phase, with the last
    wave's idle SMs, the pipeline's fill on short reductions (hidden in part when PPS
    programs share an SM), and the slabs' L2 traffic (each step reads (BM + BN) x BK
    elements from L2)."""
    n_tiles, taps = tiles(geo, kn), phase_taps(geo)
    jobs = n_tiles * kn.SPLIT
    steps = n_tiles // len(taps) * _cdiv(geo.k_per_group, kn.BLOCK_K) * sum(taps)  # all tiles
    if len(geo.filt) == 3:  # the tiles ran over depth slices: their mean depth taps
        steps = steps * depth_taps(geo) // geo.in_dims[0]
    flops = 2.0 * steps * kn.block_m * kn.BLOCK_N * kn.BLOCK_K
    waves = _cdiv(jobs, num_sms)
    fill = jobs / (waves * num_sms)
    per_job = steps / jobs
    sharing = max(1.0, min(kn.PPS, jobs / num_sms))
    # each step's boxes are issued num_stages - 1 steps ahead: with fewer stages the copy
    # latency shows in every step, unless a second program on the SM runs its dots
    # meanwhile (H100, 3x3 stride 1 at 36-72 steps a tile, one tile per SM: two stages
    # take 1.42x and three 1.08x the four-stage time; at 1.7 tiles per SM two programs of
    # two stages match one of four)
    steady = min(1.0, STAGE_RATE.get(kn.num_stages, 1.0) * sharing)
    pipe = steady * per_job / (per_job + 2 / sharing) if per_job else 1.0
    slabs = steps * (kn.block_m + kn.BLOCK_N) * kn.BLOCK_K * itemsize
    bytes_ = itemsize * (
        geo.n * math.prod(geo.out_dims) * geo.k_per_group
        + geo.k_per_group * math.prod(geo.filt) * geo.c_per_group
        + geo.n * math.prod(geo.in_dims) * geo.c_per_group
    )
    t = (
        max(
            flops / (peak * 0.9 * fill * pipe),
            bytes_ / bandwidth,
            slabs / (L2_RATE * bandwidth * fill),
        )
        + 3e-6
    )
    ws = partials_bytes(geo, kn)  # the partials' round trip and the second launch
    return t + (ws * (1.0 if ws < 24e6 else 2.0) / bandwidth + 3e-6 if ws else 0.0)


def _axis_lines(ind: str, name: str, phase: str, st: int, pre: int, f: int) -> tuple:
    """(lines, first tap, tap count, dy offset) of one spatial axis: literals for stride 1,
    runtime values of the phase otherwise."""
    if st == 1:
        return [], "0", str(f), str(pre)
    first, taps, off = f"{name}_first", f"{name}_taps", f"{name}_off"
    return (
        [
            f"{ind}{first} = ({phase} + {pre}) % {st}",
            f"{ind}{taps} = ({f} - {first} + {st - 1}) // {st}",
            f"{ind}{off} = ({phase} + {pre}) // {st}",
        ],
        first,
        taps,
        off,
    )


def source(
    name: str,
    geo,
    kn: TmaKnobs,
    *,
    w_desc: bool,
    w_k_major: bool = False,
    epilogue_params: list,
    epilogue_body: str,
    interpret: bool,
) -> str:
    """Kernel ``name(DY, W, <epilogue params>, NUM_PROGS: constexpr)``; DY is the packed
    NHWC dy [N, OH, OW, K], W the KRSC filter [K, R, S, C] (a TMA descriptor when
    ``w_desc``, else masked pointer loads). The epilogue writes dx [N, C, H, W]."""
    n, (h, wd), c, k = geo.n, geo.in_dims[-2:], geo.c_per_group, geo.k_per_group
    oh, ow = geo.out_dims[-2:]
    r_, s_ = geo.filt[-2:]
    (sh, sw), (ph, pw), (dh, dw) = geo.stride[-2:], geo.pre[-2:], geo.dilation[-2:]
    three = len(geo.filt) == 3
    q_ = geo.filt[0] if three else 1
    n_dy = n * geo.out_dims[0] if three else n
    imgs, th, tw, bn, bk = kn.TMA_IMGS, kn.TMA_TH, kn.TMA_TW, kn.BLOCK_N, kn.BLOCK_K
    bm, kb = kn.block_m, _cdiv(k, bk)
    t_n, t_h, t_w, n_ph, t_c = _tile_counts(geo, kn)
    ind, ind2, ind3 = "    ", "        ", "            "
    split = kn.SPLIT
    sig = (
        ["DY", "W"] + (["WS"] if split > 1 else list(epilogue_params)) + ["NUM_PROGS: tl.constexpr"]
    )
    L = [
        COMBINE_HELPERS,
        "@triton.jit",
        f"def {name}({', '.join(sig)}):",
        f"{ind}dy_desc = tl.make_tensor_descriptor(DY, shape=[{n_dy}, {oh}, {ow}, {k}], "
        f"strides=[{oh * ow * k}, {ow * k}, {k}, 1], block_shape=[{imgs}, {th}, {tw}, {bk}])",
    ]
    taps_all = q_ * r_ * s_
    if w_k_major:  # the filter K-innermost: [taps, C, K], a [1, BN, BK] box per step
        L.append(
            f"{ind}w_desc = tl.make_tensor_descriptor(W, shape=[{taps_all}, {c}, {k}], "
            f"strides=[{c * k}, {k}, 1], block_shape=[1, {bn}, {bk}])"
        )
    elif w_desc:
        L.append(
            f"{ind}w_desc = tl.make_tensor_descriptor(W, shape=[{k}, {taps_all}, {c}], "
            f"strides=[{taps_all * c}, {c}, 1], block_shape=[{bk}, 1, {bn}])"
        )
    n_tiles = t_n * t_h * t_w * n_ph * t_c
    L += [
        f"{ind}g = 0",
        f"{ind}for job in tl.range(tl.program_id(0), {n_tiles * split}, NUM_PROGS):",
    ]
    if split > 1:  # stride 1: slice sl of the tile's r_ * s_ * kb steps
        per = _cdiv(r_ * s_ * kb, split)
        L += [
            f"{ind2}sl = job % {split}",
            f"{ind2}tile = job // {split}",
            f"{ind2}it0 = sl * {per}",
            f"{ind2}it1 = tl.minimum(it0 + {per}, {r_ * s_ * kb})",
        ]
    else:
        L += [f"{ind2}tile = job"]
    L += [f"{ind2}ct = tile % {t_c}", f"{ind2}_pt = tile // {t_c}"]
    if n_ph > 1:
        L += [
            f"{ind2}phase = _pt % {n_ph}",
            f"{ind2}_pt = _pt // {n_ph}",
            f"{ind2}pa = phase // {sw}",
            f"{ind2}pb = phase % {sw}",
        ]
    L += [
        f"{ind2}wt = _pt % {t_w}",
        f"{ind2}_pt = _pt // {t_w}",
        f"{ind2}ht = _pt % {t_h}",
        f"{ind2}nt = _pt // {t_h}",
    ]
    rows, r_first, r_taps, r_off = _axis_lines(ind2, "r", "pa", sh, ph, r_)
    cols, s_first, s_taps, s_off = _axis_lines(ind2, "s", "pb", sw, pw, s_)
    L += rows + cols
    if three:  # image tile nt is dx depth slice (n_, id_); its depth taps as a phase's
        od_dims, (sd, pd, dd) = geo.out_dims[0], (geo.stride[0], geo.pre[0], geo.dilation[0])
        depth, q_first, q_taps, q_off = _axis_lines(ind2, "q", "id_", sd, pd, q_)
        L += [f"{ind2}id_ = nt % {geo.in_dims[0]}", f"{ind2}n_ = nt // {geo.in_dims[0]}"]
        L += depth
        od0 = f"id_ + {pd}" if sd == 1 else q_off
    else:
        q_first, q_taps = "0", "1"

    if w_k_major and not w_desc:
        raise ValueError("a K-innermost filter is read through its descriptor")

    def step(it: str, sfx: str, ind_: str) -> list:
        """Reduction step ``it`` -> its k block k0, tap step (tq,) tu, tv, filter tap rs."""
        out = [
            f"{ind_}tap{sfx} = ({it}) // {kb}",
            f"{ind_}k0{sfx} = (({it}) % {kb}) * {bk}",
            f"{ind_}tv{sfx} = tap{sfx} % {s_taps}",
            f"{ind_}tu{sfx} = (tap{sfx} // {s_taps}) % {r_taps}",
            f"{ind_}tq{sfx} = tap{sfx} // ({s_taps} * {r_taps})",
            f"{ind_}rs{sfx} = (({q_first} + tq{sfx} * {geo.stride[0] if three else 1}) * {r_} + "
            f"{r_first} + tu{sfx} * {sh}) * {s_} + {s_first} + tv{sfx} * {sw}",
        ]
        return out + ([f"{ind_}rs{sfx} = {taps_all - 1} - rs{sfx}"] if geo.flip else [])

    def w_load(sfx: str, live: str) -> str:
        # KRSC by pointers: k stride taps*C, tap stride C, c contiguous
        return (
            f"tl.load(W + ((k0{sfx} + kr) * {taps_all * c})[:, None] + rs{sfx} * {c} + "
            f"cc[None, :], mask=((k0{sfx} + kr) < {k})[:, None] & (cc < {c})[None, :] & "
            f"({live}), other=0.0)"
        )

    L += [
        f"{ind2}cc = ct * {bn} + tl.arange(0, {bn})",
        f"{ind2}steps = {q_taps} * {r_taps} * {s_taps} * {kb}",
        f"{ind2}acc = tl.full([{bm}, {bn}], 0.0, tl.float32)",
    ]
    if not w_desc:  # too small for cp.async, so prefetch one step ahead into registers
        L += [f"{ind2}kr = tl.arange(0, {bk})"] + step("0", "_0", ind2)
        L.append(f"{ind2}b_next = {w_load('_0', 'steps > 0')}")
    L.append(
        f"{ind2}for it in range(it0, it1):" if split > 1 else f"{ind2}for it in range(0, steps):"
    )
    L += step("it", "", ind3)
    img = f"nt * {imgs}"
    if three:  # dy depth od; outside dy: image -1, zero-filled
        L += [
            f"{ind3}od = {od0} - tq * {dd}",
            f"{ind3}dyi = tl.where((od >= 0) & (od < {od_dims}), n_ * {od_dims} + od, -1)",
        ]
        img = "dyi"
    L.append(
        f"{ind3}a = dy_desc.load([{img}, ht * {th} + {r_off} - tu * {dh}, "
        f"wt * {tw} + {s_off} - tv * {dw}, k0]).reshape({bm}, {bk})"
    )
    if w_k_major:  # [BN, BK] with K contiguous: its transpose is the K-major B operand
        L.append(f"{ind3}b = tl.trans(w_desc.load([rs, ct * {bn}, k0]).reshape({bn}, {bk}))")
    elif w_desc:
        L.append(f"{ind3}b = w_desc.load([k0, rs, ct * {bn}]).reshape({bk}, {bn})")
    else:
        L += [f"{ind3}b = b_next"] + step("it + 1", "_n", ind3)
        L.append(f"{ind3}b_next = {w_load('_n', 'it + 1 < steps')}")
    if interpret:  # the 3.6 interpreter's dot is wrong on bfloat16: widen there only
        L.append(f"{ind3}acc += tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision='ieee')")
    else:
        L.append(f"{ind3}acc = tl.dot(a, b, acc)")
    if split > 1:  # the float32 partial tile; _tma_kernels.sum_source finishes
        L += [
            f"{ind2}_i = tl.arange(0, {bm})",
            f"{ind2}_j = tl.arange(0, {bn})",
            f"{ind2}tl.store(WS + ((sl * {n_tiles} + tile) * {bm} + _i)[:, None] * {bn} + "
            f"_j[None, :], acc)",
        ]
        return "\n".join(L) + "\n"
    # the epilogue's dx pixel and channel indices, rebuilt from the box and the phase
    o_h = f"ht * {th} + (_i // {tw}) % {th}"
    o_w = f"wt * {tw} + _i % {tw}"
    ha, wa = ("o1", "o2") if three else ("o0", "o1")
    L += [f"{ind2}_i = tl.arange(0, {bm})"]
    if three:  # one depth slice per tile: nb and o0 are the tile's (n_, id_)
        L += [f"{ind2}nb = n_ + _i * 0", f"{ind2}o0 = id_ + _i * 0"]
    else:
        L += [f"{ind2}nb = nt * {imgs} + _i // {th * tw}"]
    L += [
        f"{ind2}{ha} = " + (f"({o_h}) * {sh} + pa" if sh > 1 else o_h),
        f"{ind2}{wa} = " + (f"({o_w}) * {sw} + pb" if sw > 1 else o_w),
        f"{ind2}mask_m = (nb < {n}) & ({ha} < {h}) & ({wa} < {wd})",
        f"{ind2}offs_n = cc",
        f"{ind2}mask_n = offs_n < {c}",
    ]
    if geo.int64:
        L += [f"{ind2}{v} = {v}.to(tl.int64)" for v in ("nb", "o0", "o1", "o2")[: 2 + three]]
    for line in epilogue_body.strip("\n").split("\n"):
        L.append(ind2 + line)
    return "\n".join(L) + "\n"
