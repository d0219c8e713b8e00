"""Backward filter, NHWC fast path: pixel boxes through TMA, split over the pixels.

Per filter tap t = (r, s) the filter gradient is a GEMM whose reduction runs over the
output pixels p = (n, oh, ow):

    dw[k, t, c] = sum_p dy[p, k] * x[n, oh*stride + r*dil - pad_h, ow*stride + s*dil - pad_w, c]

    M = K (filter rows), N = C (channels of tap t), reduction = N * OH * OW pixels

A 3-D problem (NDHWC, taps t = (q, r, s)) is the 2-D one over N * OD images: output
image i = (n, od) of dy [N * OD, OH, OW, K] meets input image n * D + dz of x
[N * D, H, W, C] at depth dz = od*stride_d + q*dil_d - pad_d. A depth outside [0, D) is
padding: its box is read at image coordinate -1, which the copy engine fills with zeros
(the boxes hold one image, TMA_IMGS = 1, so no box straddles two samples). Depth takes
any stride, dilation and padding; height and width keep the 2-D rules.

A program owns one [BLOCK_M x BLOCK_N] tile of one tap and walks pixel boxes of
IMGS x TH x TW output pixels. Each step is two tensor-memory copies: the box of dy,
[IMGS, TH, TW, BLOCK_M] of a 4-D descriptor over dy [N, OH, OW, K], and the box of the
image the tap shifts it to, [IMGS, TH, TW, BLOCK_N] at (n0, oh0 + r*dil - pad_h, ow0 +
s*dil - pad_w, c0). The copy engine zero-fills coordinates outside a tensor (negative
ones too), which is both the convolution's padding and the masking of partial boxes;
the step is then ``acc += dy_box^T @ x_box``. For stride 2 the image is read through the
5-D phase view [N, H/2, 2, W/2, 2C] as in the forward path (``_tma_kernels``); a box
that runs past C there reads the other phase's channels into columns c >= C, which are
never stored.

The pixel reduction is long (25k-400k pixels for ResNet-50 at N=32) while K x C per tap
is small, so the boxes are cut into SPLIT contiguous slices: program (slice, tap, tile).
With SPLIT = 1 each program runs the epilogue on its own tile. Otherwise it stores a
float32 partial to WS[slice, tap, K, C] and a second kernel sums the slices in a fixed
order -- deterministic -- before the epilogue.
"""

from __future__ import annotations

import dataclasses
import math

from ...fusion._codegen import COMBINE_HELPERS
from ._kernels import common_unsupported, is_packed_channels_last


@dataclasses.dataclass(frozen=True)
class WgradTmaKnobs:
    TMA_IMGS: int = 1
    TMA_TH: int = 8
    TMA_TW: int = 16
    BLOCK_M: int = 128
    BLOCK_N: int = 128
    SPLIT: int = 1
    num_warps: int = 8
    num_stages: int = 4
    FLAT: int = 0  # 1: runs of TMA_TW flat pixels (_tma_wgrad_flat_kernels)

    @property
    def box(self) -> int:
        return self.TMA_IMGS * self.TMA_TH * self.TMA_TW


# pixel boxes of 64 or 128 pixels shaped to divide the ResNet images (56, 28, 14, 7)
BOXES = (
    (1, 8, 8),
    (1, 8, 16),
    (2, 8, 8),
    (2, 4, 8),
    (4, 4, 4),
    (8, 4, 4),
    (32, 2, 2),
    (16, 2, 2),
    (16, 1, 8),
    (8, 1, 8),
)
# BLOCK_M and BLOCK_N are the boxes' inner (channel) extents: 256 of them (512 bytes) gave
# wrong results on the H100 (Triton 3.6), as the forward path's 256-wide box store did
# (64, 32): 32-channel images (3-D UNets' first levels) without half the tile zero-filled
TILES = ((128, 128, 8, 4), (128, 64, 4, 4), (64, 128, 4, 4), (64, 64, 4, 4), (64, 32, 4, 4))
SPLITS = tuple(range(1, 257))
SMEM = 200 * 1024


def _stages(box: int, bm: int, bn: int, most: int) -> int:
    """The most pipeline stages (up to ``most``) whose 16-bit boxes fit in shared memory."""
    return min(most, SMEM // (box * (bm + bn) * 2))


KNOB_SPACE = tuple(
    WgradTmaKnobs(i, h, w, bm, bn, 1, nw, _stages(i * h * w, bm, bn, st))
    for (i, h, w) in BOXES
    for (bm, bn, nw, st) in TILES
) + tuple(
    WgradTmaKnobs(1, 1, run, bm, bn, 1, nw, _stages(run, bm, bn, st), FLAT=1)
    for run in (64, 128)
    for (bm, bn, nw, st) in TILES
)


def unsupported(geo, x, dw, dy, tf32: bool = False) -> str | None:
    """Why the TMA path cannot take this problem (None when it can); ``tf32``: float32
    operands may run as TF32 (both boxes are pixel-major, so their transposes reach the
    tensor cores through a layout conversion)."""
    why = common_unsupported(geo, x, dims=(2, 3), tf32=tf32)
    if why:
        return why
    c, k = x.dims[1], dy.dims[1]
    if not is_packed_channels_last(x):
        return "the TMA path needs a packed NHWC image"
    if not is_packed_channels_last(dy):
        return "the TMA path needs a packed NHWC dy"
    item = x.data_type.itemsize
    if (c * item) % 16 or (k * item) % 16:
        return (
            "TMA needs 16-byte aligned rows: C and K times the element size must be multiples of 16"
        )
    h, wd = geo.in_dims[-2:]
    if geo.stride[-2:] == (1, 1):
        return None
    if geo.stride[-2:] != (2, 2) or geo.dilation[-2:] != (1, 1):
        return "the TMA path takes stride 1, or stride 2 without dilation (height and width)"
    if h % 2 or wd % 2:
        return "stride 2 on the TMA path needs an even image height and width"
    return None


def knob_unsupported(geo, kn: WgradTmaKnobs, itemsize: int = 2) -> str | None:
    """Why config ``kn`` cannot take the (otherwise supported) problem."""
    if itemsize == 4 and kn.BLOCK_N > 64:
        return "float32 x boxes take at most 64 channels (256-byte rows)"
    if len(geo.filt) == 3 and kn.TMA_IMGS != 1:
        return "3-D boxes hold one depth slice of one sample (TMA_IMGS = 1)"
    return None


def images(geo) -> tuple:
    """(dy images, x images): N and N for 2-D; N * OD and N * D for 3-D."""
    if len(geo.filt) == 2:
        return geo.n, geo.n
    return geo.n * geo.out_dims[0], geo.n * geo.in_dims[0]


def taps(geo) -> int:
    return math.prod(geo.filt)


def fits(kn: WgradTmaKnobs, itemsize: int) -> bool:
    return kn.box * (kn.BLOCK_M + kn.BLOCK_N) * itemsize * kn.num_stages <= SMEM


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def boxes(geo, kn: WgradTmaKnobs) -> tuple:
    """(boxes along the images, oh, ow) covering the output pixels."""
    oh, ow = geo.out_dims[-2:]
    return _cdiv(images(geo)[0], kn.TMA_IMGS), _cdiv(oh, kn.TMA_TH), _cdiv(ow, kn.TMA_TW)


def tiles(geo, kn: WgradTmaKnobs) -> int:
    """Programs per slice: taps x K tiles x C tiles."""
    return taps(geo) * _cdiv(geo.k_per_group, kn.BLOCK_M) * _cdiv(geo.c_per_group, kn.BLOCK_N)


def chunk(geo, kn: WgradTmaKnobs) -> int:
    bn, bh, bw = boxes(geo, kn)
    return _cdiv(bn * bh * bw, kn.SPLIT)


def workspace_bytes(geo, kn: WgradTmaKnobs) -> int:
    if kn.SPLIT == 1:
        return 0
    return 4 * kn.SPLIT * taps(geo) * geo.k_per_group * geo.c_per_group


def estimate_seconds(
    geo, kn: WgradTmaKnobs, itemsize: int, peak: float, bandwidth: float, num_sms: int
) -> float:
    """Roofline over the padded boxes and tiles, with the last wave's idle SMs, the
    pipeline's fill and the tile's tensor-core efficiency (64 x 64: ~0.55 of 128 x 128,
    measured), plus the partials' round trip and the second launch when split. Few
    programs cannot pull the full bandwidth: one SM streams ~1.5x its share."""
    bn, bh, bw = boxes(geo, kn)
    steps = chunk(geo, kn)
    programs = tiles(geo, kn) * _cdiv(bn * bh * bw, steps)
    flops = 2.0 * programs * steps * kn.box * kn.BLOCK_M * kn.BLOCK_N
    waves = _cdiv(programs, num_sms)
    fill = programs / (waves * num_sms)
    pipe = steps / (steps + kn.num_stages)
    # x 0.85: the transposed dy box reaches the tensor cores through registers (Triton 3.6
    # folds a 4-D box's reshape or its transpose into shared-memory views, not both)
    eff = 0.85 * 0.8 * min(1.0, kn.BLOCK_M * kn.BLOCK_N / (128 * 128)) ** 0.45
    x_px, y_px = (geo.n * math.prod(d) for d in (geo.in_dims, geo.out_dims))
    dram = itemsize * (x_px * geo.c_per_group + y_px * geo.k_per_group)
    ws = workspace_bytes(geo, kn)
    active = min(1.0, 1.5 * programs / num_sms)
    # partials that fit in L2 (50 MB on the H100) round-trip at about twice DRAM's rate
    mem = (dram + ws * (1.0 if ws < 24e6 else 2.0)) / (bandwidth * active)
    launch = 3e-6 if kn.SPLIT == 1 else 5e-6
    return roofline(flops / (peak * eff * fill * pipe), mem) + launch


def roofline(compute: float, memory: float) -> float:
    """max(compute, memory), plus a tenth of the smaller: overlap is never perfect, and
    among memory-bound configs the one wasting fewer tensor-core cycles ranks first."""
    return max(compute, memory) + 0.1 * min(compute, memory)


def best_split(
    geo, kn: WgradTmaKnobs, itemsize: int, peak: float, bandwidth: float, num_sms: int
) -> WgradTmaKnobs:
    """``kn`` with the SPLIT the cost model likes best."""
    bn, bh, bw = boxes(geo, kn)
    cands = [dataclasses.replace(kn, SPLIT=s) for s in SPLITS if s <= bn * bh * bw]
    return min(cands, key=lambda k: estimate_seconds(geo, k, itemsize, peak, bandwidth, num_sms))


def ws_index(geo, sp: str = "sp") -> str:
    """Element offset of the tile (tap t, rows offs_m, cols offs_n) of slice ``sp``."""
    k, c = geo.k_per_group, geo.c_per_group
    return f"(({sp} * {taps(geo)} + t) * {k} + offs_m)[:, None] * {c} + offs_n[None, :]"


def slice_elements(geo) -> int:
    """Elements of one slice's partials (all taps, K x C)."""
    return taps(geo) * geo.k_per_group * geo.c_per_group


def _tile_lines(geo, bm: int, bn: int, ind: str) -> list:
    """From program id ``tile`` (within a slice): tap t -> r0, r1 (, r2: one per spatial
    axis, the last fastest); offs_m/mask_m over K, offs_n/mask_n over C; g = 0."""
    t_k, t_c = _cdiv(geo.k_per_group, bm), _cdiv(geo.c_per_group, bn)
    d = len(geo.filt)
    L = [
        f"{ind}ct = tile % {t_c}",
        f"{ind}_q = tile // {t_c}",
        f"{ind}kt = _q % {t_k}",
        f"{ind}t = _q // {t_k}",
        f"{ind}_t = t",
    ]
    for i in reversed(range(d)):
        L.append(f"{ind}r{i} = _t % {geo.filt[i]}")
        if i:
            L.append(f"{ind}_t = _t // {geo.filt[i]}")
    return L + [
        f"{ind}offs_m = kt * {bm} + tl.arange(0, {bm})",
        f"{ind}mask_m = offs_m < {geo.k_per_group}",
        f"{ind}offs_n = ct * {bn} + tl.arange(0, {bn})",
        f"{ind}mask_n = offs_n < {geo.c_per_group}",
        f"{ind}g = 0",
    ]


def _dot(interpret: bool, acc: str, d: str) -> str:
    if interpret:  # the 3.6 interpreter's dot is wrong on bfloat16: widen there only
        return (
            f"        {acc} += tl.dot(tl.trans({d}.to(tl.float32)), a.to(tl.float32), "
            "input_precision='ieee')"
        )
    return f"        {acc} = tl.dot(tl.trans({d}), a, {acc})"


def step_and_finish(
    interpret: bool, split: bool, ws_index: str, epilogue_body: str, halves: int = 0
) -> list:
    """The loop's last line, acc += d^T a (d: the dy run or box, a: x's), then after the
    loop the partial's store (split) or the epilogue. ``halves`` (rows per half): dy came
    as halves d0, d1 into accumulators acc0, acc1, joined into acc after the loop."""
    if halves:
        out = [_dot(interpret, "acc0", "d0"), _dot(interpret, "acc1", "d1")]
        out.append(
            f"    acc = tl.join(acc0, acc1).permute(2, 0, 1).reshape({2 * halves}, acc0.shape[1])"
        )
    else:
        out = [_dot(interpret, "acc", "d")]
    if split:
        return out + [f"    tl.store(WS + {ws_index}, acc, mask=mask_m[:, None] & mask_n[None, :])"]
    return out + ["    " + line for line in epilogue_body.strip("\n").split("\n")]


def dy_halves(kn, itemsize: int) -> int:
    """Rows of each half when dy's box comes as two loads (0: one load): its rows of
    BLOCK_M channels would span more than 256 bytes, which TMA boxes through Triton 3.6
    got wrong on the H100 (float32 tiles of 128 rows: two boxes of 64 channels)."""
    return kn.BLOCK_M // 2 if kn.BLOCK_M * itemsize > 256 else 0


def source(
    name: str,
    geo,
    kn: WgradTmaKnobs,
    *,
    epilogue_params: list,
    epilogue_body: str,
    interpret: bool,
    halves: int = 0,
) -> str:
    """Kernel ``name(X, DY, <WS or epilogue params>)``; grid (SPLIT * tiles,). ``halves``
    (``dy_halves``): dy's box as two loads of that many channels."""
    (h, wd), c, k = geo.in_dims[-2:], geo.c_per_group, geo.k_per_group
    oh, ow = geo.out_dims[-2:]
    n_dy, n_x = images(geo)
    imgs, th, tw, bm, bn = kn.TMA_IMGS, kn.TMA_TH, kn.TMA_TW, kn.BLOCK_M, kn.BLOCK_N
    b_n, b_h, b_w = boxes(geo, kn)
    ph, pw = geo.pre[-2:]
    dh, dw = geo.dilation[-2:]
    rh, rw = (f"r{i}" for i in range(len(geo.filt) - 2, len(geo.filt)))
    ind, ind2 = "    ", "        "
    params = ["WS"] if kn.SPLIT > 1 else list(epilogue_params)
    L = [
        COMBINE_HELPERS,
        "@triton.jit",
        f"def {name}({', '.join(['X', 'DY'] + params)}):",
        f"{ind}dy_desc = tl.make_tensor_descriptor(DY, shape=[{n_dy}, {oh}, {ow}, {k}], "
        f"strides=[{oh * ow * k}, {ow * k}, {k}, 1], "
        f"block_shape=[{imgs}, {th}, {tw}, {halves or bm}])",
    ]
    stride1 = geo.stride[-2:] == (1, 1)
    n_tiles = tiles(geo, kn)
    L += [
        f"{ind}pid = tl.program_id(0)",
        f"{ind}tile = pid % {n_tiles}",
        f"{ind}sp = pid // {n_tiles}",
    ]
    L += _tile_lines(geo, bm, bn, ind)
    # x's descriptor ends where this tap's rows and columns stop meeting dy: past it the
    # copy engine fills zeros, as it does for dy's partial boxes, so a box's dead pixels
    # add 0 * 0 -- never 0 * x (an inf or NaN in x that no output of this tap reads
    # would otherwise turn the sum into NaN)
    if stride1:
        L += [
            f"{ind}xh = tl.minimum({h}, {oh} + {rh} * {dh} - {ph})",
            f"{ind}xw = tl.minimum({wd}, {ow} + {rw} * {dw} - {pw})",
        ]
    else:
        L += [
            f"{ind}xh = tl.minimum({h // 2}, {oh} + ({rh} + {ph}) // 2 - {ph})",
            f"{ind}xw = tl.minimum({wd // 2}, {ow} + ({rw} + {pw}) // 2 - {pw})",
        ]
    L += [
        f"{ind}live = (xh > 0) & (xw > 0)",  # else every pixel of this tap is padding
        f"{ind}xh = tl.maximum(xh, 1)",
        f"{ind}xw = tl.maximum(xw, 1)",
    ]
    if stride1:
        L.append(
            f"{ind}x_desc = tl.make_tensor_descriptor(X, shape=[{n_x}, xh, xw, {c}], "
            f"strides=[{h * wd * c}, {wd * c}, {c}, 1], "
            f"block_shape=[{imgs}, {th}, {tw}, {bn}])"
        )
    else:
        L.append(
            f"{ind}x_desc = tl.make_tensor_descriptor(X, shape=[{n_x}, xh, 2, "
            f"xw, {2 * c}], strides=[{h * wd * c}, {2 * wd * c}, {wd * c}, "
            f"{2 * c}, 1], block_shape=[{imgs}, {th}, 1, {tw}, {bn}])"
        )
    step = chunk(geo, kn)
    accs = ("acc0", "acc1") if halves else ("acc",)
    L += [f"{ind}{acc} = tl.full([{halves or bm}, {bn}], 0.0, tl.float32)" for acc in accs]
    L += [
        f"{ind}for b in range(sp * {step}, tl.minimum(sp * {step} + {step}, {b_n * b_h * b_w})):",
        f"{ind2}wb = b % {b_w}",
        f"{ind2}_b = b // {b_w}",
        f"{ind2}hb = _b % {b_h}",
        f"{ind2}nbx = _b // {b_h}",
    ]
    if halves:
        L += [
            f"{ind2}d{i} = dy_desc.load([nbx * {imgs}, hb * {th}, wb * {tw}, kt * {bm} + "
            f"{i * halves}]).reshape({kn.box}, {halves})"
            for i in (0, 1)
        ]
    else:
        L.append(
            f"{ind2}d = dy_desc.load([nbx * {imgs}, hb * {th}, wb * {tw}, kt * {bm}])"
            f".reshape({kn.box}, {bm})"
        )
    if len(geo.filt) == 2:
        L.append(f"{ind2}xi = tl.where(live, nbx * {imgs}, -{imgs})")
    else:  # dy image (n, od) -> x image n * D + dz; a depth in the padding reads image -1
        od, dd = geo.out_dims[0], geo.in_dims[0]
        L += [
            f"{ind2}dz = (nbx % {od}) * {geo.stride[0]} + r0 * {geo.dilation[0]} - {geo.pre[0]}",
            f"{ind2}xi = tl.where(live & (dz >= 0) & (dz < {dd}), (nbx // {od}) * {dd} + dz, -1)",
        ]
    if stride1:
        L.append(
            f"{ind2}a = x_desc.load([xi, hb * {th} + {rh} * {dh} - {ph}, "
            f"wb * {tw} + {rw} * {dw} - {pw}, ct * {bn}])"
        )
    else:  # tap offset e = r - pad = 2 * (e // 2) + e % 2; r + 2*pad keeps it non-negative
        L += [
            f"{ind2}eh = {rh} + {ph}",
            f"{ind2}ew = {rw} + {pw}",
            f"{ind2}a = x_desc.load([xi, hb * {th} + eh // 2 - {ph}, eh % 2, "
            f"wb * {tw} + ew // 2 - {pw}, (ew % 2) * {c} + ct * {bn}])",
        ]
    L.append(f"{ind2}a = a.reshape({kn.box}, {bn})")
    L += step_and_finish(interpret, kn.SPLIT > 1, ws_index(geo), epilogue_body, halves)
    return "\n".join(L) + "\n"


def sum_group(bm: int, bn: int, slices: int) -> int:
    """Slices loaded at once by the partials' sum: a [G, bm, bn] block per step keeps
    G loads in flight (one slice per step waited on L2 once per slice: 88 slices of a
    64 x 64 dw took 21 us against 7.7 us of streaming)."""
    return max(1, min(8192 // (bm * bn), _pow2(slices)))


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def sum_source(
    name: str,
    tile_lines: list,
    base_index: str,
    slice_stride: int,
    bm: int,
    bn: int,
    slices: int,
    *,
    epilogue_params: list,
    epilogue_body: str,
) -> str:
    """Kernel ``name(WS, <epilogue params>)``: the tile (``tile_lines`` define it from
    program id ``tile``; ``base_index`` its offsets in slice 0) is the sum of ``slices``
    partials ``slice_stride`` elements apart, then the epilogue. Each step adds the tree
    sum of the next G slices (``sum_group``): a fixed order, deterministic. Grid (tiles,)."""
    ind = "    "
    grp = sum_group(bm, bn, slices)
    L = [
        COMBINE_HELPERS,
        "@triton.jit",
        f"def {name}({', '.join(['WS'] + epilogue_params)}):",
        f"{ind}tile = tl.program_id(0)",
    ] + tile_lines
    L += [
        f"{ind}ws_mask = mask_m[:, None] & mask_n[None, :]",
        f"{ind}ws_base = {base_index}",
        f"{ind}acc = tl.full([{bm}, {bn}], 0.0, tl.float32)",
        f"{ind}for s0 in range(0, {slices}, {grp}):",
        f"{ind}    sp = s0 + tl.arange(0, {grp})",
        f"{ind}    blk = tl.load(WS + sp[:, None, None] * {slice_stride} + ws_base[None, :, :],"
        f" mask=(sp < {slices})[:, None, None] & ws_mask[None, :, :], other=0.0)",
        f"{ind}    acc += tl.reduce(blk, 0, _add_combine)",
    ]
    L += [ind + line for line in epilogue_body.strip("\n").split("\n")]
    return "\n".join(L) + "\n"


def reduce_source(name: str, geo, kn: WgradTmaKnobs, **kw) -> str:
    """The partials' sum for the box kernel (kn.SPLIT slices, kn's tile)."""
    return sum_source(
        name,
        _tile_lines(geo, kn.BLOCK_M, kn.BLOCK_N, "    "),
        ws_index(geo, "0"),
        slice_elements(geo),
        kn.BLOCK_M,
        kn.BLOCK_N,
        kn.SPLIT,
        **kw,
    )
