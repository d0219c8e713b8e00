"""Backward filter over flat pixel runs: dy through a 2-D TMA descriptor, the filter's
taps and channels flattened into the GEMM's N.

With P = N * OH * OW output pixels in row-major order and J = R * S * C filter columns
j = (r, s, c) (channels fastest, the KRSC order):

    dw[k, j] = sum_p dy[p, k] * xcol[p, j]
    xcol[p, j] = x[n, oh*stride_h + r*dil_h - pad_h, ow*stride_w + s*dil_w - pad_w, c]
                 (0 outside the image)

A program owns a [BLOCK_M x BLOCK_N] tile of (k, j) and walks runs of TMA_TW consecutive
pixels: dy's run is one box of the 2-D descriptor [P, K] (packed NHWC dy), so the
transposed operand feeds the tensor cores straight from shared memory (a 4-D box
reshaped to 2-D cannot, in Triton 3.6). xcol's run is either

- one box of the 2-D descriptor [P, C] over x, when the filter is 1x1 with stride 1 and
  no padding (then xcol = x and J = C), or
- a masked gather of the flattened columns, which is what small channel counts need
  (the ResNet stem: C = 3, J = 147): no column is padded to a tap's worth of channels.

Splitting, partials and their fixed-order sum are those of ``_tma_wgrad_kernels``.
The epilogue sees per-column taps: r0, r1 and offs_n (= c) are vectors over j.
"""

from __future__ import annotations

from ...fusion._codegen import COMBINE_HELPERS
from ._kernels import common_unsupported, is_packed_channels_last
from ._wgrad_kernels import roofline, step_and_finish, sum_source


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def columns(geo) -> int:
    return geo.filt[0] * geo.filt[1] * geo.c_per_group


def pixels(geo) -> int:
    return geo.n * geo.out_dims[0] * geo.out_dims[1]


# a gathered xcol run of TMA_TW x BLOCK_N elements lives in registers with its offsets and
# masks: at 128 elements per thread (64x128 tiles, 128-pixel runs, 4 warps) ptxas spilled
# 1.2 KB per thread and took 1.6-3.2 s (the stem's cold find); at 64 it spills <= 88 bytes
GATHER_PER_THREAD = 64
LIVE_PER_THREAD = 96  # accumulator + gathered run: above it, reads out of bounds (wgrad.py)


def gather_too_large(kn) -> bool:
    """Whether a config's gathered xcol run needs more registers than a thread has."""
    return kn.TMA_TW * kn.BLOCK_N > GATHER_PER_THREAD * 32 * kn.num_warps


def x_extent(geo, xs: tuple) -> int:
    """The largest element offset inside x [N, C, H, W] of strides ``xs``."""
    dims = (geo.n, geo.c_per_group, *geo.in_dims)
    return sum((d - 1) * st for d, st in zip(dims, xs))


def live_too_large(kn) -> bool:
    """Whether a gathered config keeps more accumulator + run elements per thread live
    than LIVE_PER_THREAD."""
    return (kn.BLOCK_M + kn.TMA_TW) * kn.BLOCK_N > LIVE_PER_THREAD * 32 * kn.num_warps


def x_by_descriptor(geo, x) -> bool:
    """Whether xcol is x itself, read through a 2-D descriptor."""
    n, c, h, wd = x.dims
    return (
        geo.filt == (1, 1)
        and geo.stride == (1, 1)
        and geo.pre == (0, 0)
        and geo.out_dims == (h, wd)
        and is_packed_channels_last(x)
        and (c * x.data_type.itemsize) % 16 == 0
    )


def unsupported(geo, x, dy) -> str | None:
    why = common_unsupported(geo, x)
    if why:
        return why
    k = dy.dims[1]
    if not is_packed_channels_last(dy):
        return "the flat TMA path needs a packed NHWC dy"
    if (k * dy.data_type.itemsize) % 16:
        return "TMA needs 16-byte aligned rows: K times the element size must be a multiple of 16"
    if geo.int64:
        return "the flat TMA path uses 32-bit offsets"
    return None


def tiles(geo, kn) -> int:
    return _cdiv(geo.k_per_group, kn.BLOCK_M) * _cdiv(columns(geo), kn.BLOCK_N)


def steps(geo, kn) -> int:
    return _cdiv(pixels(geo), kn.TMA_TW)


def ws_index(geo, sp: str = "sp") -> str:
    return f"({sp} * {geo.k_per_group} + offs_m)[:, None] * {columns(geo)} + offs_n_j[None, :]"


def _tile_lines(geo, bm: int, bn: int, ind: str) -> list:
    """Program id ``tile`` -> offs_m/mask_m over K; columns offs_n_j/mask_n over J split
    into the epilogue's per-column tap (r0, r1) and channel (offs_n); g = 0."""
    c = geo.c_per_group
    t_j = _cdiv(columns(geo), bn)
    return [
        f"{ind}jt = tile % {t_j}",
        f"{ind}kt = tile // {t_j}",
        f"{ind}offs_m = kt * {bm} + tl.arange(0, {bm})",
        f"{ind}mask_m = offs_m < {geo.k_per_group}",
        f"{ind}offs_n_j = jt * {bn} + tl.arange(0, {bn})",
        f"{ind}mask_n = offs_n_j < {columns(geo)}",
        f"{ind}offs_n = offs_n_j % {c}",
        f"{ind}_t = offs_n_j // {c}",
        f"{ind}r0 = _t // {geo.filt[1]}",
        f"{ind}r1 = _t % {geo.filt[1]}",
        f"{ind}g = 0",
    ]


def source(
    name: str,
    geo,
    kn,
    x_desc: bool,
    x_strides: tuple,
    *,
    epilogue_params: list,
    epilogue_body: str,
    interpret: bool,
) -> str:
    """Kernel ``name(X, DY, <WS or epilogue params>)``; grid (slices * tiles,)."""
    k, c = geo.k_per_group, geo.c_per_group
    oh, ow = geo.out_dims
    bp, bm, bn = kn.TMA_TW, kn.BLOCK_M, kn.BLOCK_N
    p_total = pixels(geo)
    ind, ind2 = "    ", "        "
    params = ["WS"] if kn.SPLIT > 1 else list(epilogue_params)
    L = [
        COMBINE_HELPERS,
        "@triton.jit",
        f"def {name}({', '.join(['X', 'DY'] + params)}):",
        f"{ind}dy_desc = tl.make_tensor_descriptor(DY, shape=[{p_total}, {k}], "
        f"strides=[{k}, 1], block_shape=[{bp}, {bm}])",
    ]
    if x_desc:
        L.append(
            f"{ind}x_desc = tl.make_tensor_descriptor(X, shape=[{p_total}, {c}], "
            f"strides=[{c}, 1], block_shape=[{bp}, {bn}])"
        )
    n_tiles = tiles(geo, kn)
    L += [
        f"{ind}pid = tl.program_id(0)",
        f"{ind}tile = pid % {n_tiles}",
        f"{ind}sp = pid // {n_tiles}",
    ]
    L += _tile_lines(geo, bm, bn, ind)
    if not x_desc:  # the gather's per-column offsets and tap coordinates, fixed per tile
        xs = x_strides
        L += [
            f"{ind}col_off = offs_n * {xs[1]} + r0 * {geo.dilation[0] * xs[2]} + "
            f"r1 * {geo.dilation[1] * xs[3]}",
            f"{ind}dr0 = r0 * {geo.dilation[0]} - {geo.pre[0]}",
            f"{ind}dr1 = r1 * {geo.dilation[1]} - {geo.pre[1]}",
        ]
    step = _cdiv(steps(geo, kn), kn.SPLIT)
    L += [
        f"{ind}acc = tl.full([{bm}, {bn}], 0.0, tl.float32)",
        f"{ind}for b in range(sp * {step}, tl.minimum(sp * {step} + {step}, {steps(geo, kn)})):",
        f"{ind2}d = dy_desc.load([b * {bp}, kt * {bm}])",
    ]
    if x_desc:
        L.append(f"{ind2}a = x_desc.load([b * {bp}, jt * {bn}])")
    else:
        xs = x_strides
        L += [
            f"{ind2}pp = b * {bp} + tl.arange(0, {bp})",
            f"{ind2}ow_ = pp % {ow}",
            f"{ind2}_p = pp // {ow}",
            f"{ind2}oh_ = _p % {oh}",
            f"{ind2}nb_ = _p // {oh}",
            f"{ind2}ih = (oh_ * {geo.stride[0]})[:, None] + dr0[None, :]",
            f"{ind2}iw = (ow_ * {geo.stride[1]})[:, None] + dr1[None, :]",
            f"{ind2}ok = (pp < {p_total})[:, None] & mask_n[None, :] & (ih >= 0) & "
            f"(ih < {geo.in_dims[0]}) & (iw >= 0) & (iw < {geo.in_dims[1]})",
            f"{ind2}off = (nb_ * {xs[0]} + oh_ * {geo.stride[0] * xs[2]} + "
            f"ow_ * {geo.stride[1] * xs[3]} - {geo.pre[0] * xs[2] + geo.pre[1] * xs[3]})"
            "[:, None] + col_off[None, :]",
            # every lane's address is clamped into x, the mask only zeroes: compute-sanitizer
            # (H100, Triton 3.6) saw masked-off padding lanes read before x, first with the
            # raw offset, then with tl.where(ok, off, 0) (folded into the masked load)
            f"{ind2}off = tl.minimum(tl.maximum(off, 0), {x_extent(geo, xs)})",
            f"{ind2}a = tl.load(X + off, mask=ok, other=0.0)",
        ]
    L += step_and_finish(interpret, kn.SPLIT > 1, ws_index(geo), epilogue_body)
    return "\n".join(L) + "\n"


def reduce_source(name: str, geo, kn, slices: int, **kw) -> str:
    """The ``slices`` partials summed in order, then the epilogue. Grid (tiles,)."""
    return sum_source(
        name,
        _tile_lines(geo, kn.BLOCK_M, kn.BLOCK_N, "    "),
        ws_index(geo, "0"),
        geo.k_per_group * columns(geo),
        kn.BLOCK_M,
        kn.BLOCK_N,
        slices,
        **kw,
    )


def workspace_bytes(geo, kn) -> int:
    return 0 if kn.SPLIT == 1 else 4 * kn.SPLIT * geo.k_per_group * columns(geo)


def slices(geo, kn) -> int:
    """Slices that hold at least one run (chunk rounding can leave the last ones empty)."""
    return _cdiv(steps(geo, kn), _cdiv(steps(geo, kn), kn.SPLIT))


def estimate_seconds(
    geo, kn, x_desc: bool, itemsize: int, peak: float, bandwidth: float, num_sms: int
) -> float:
    """As the box path's model (``_tma_wgrad_kernels.estimate_seconds``), plus the
    gathered columns served from L2 (assumed 4x DRAM's rate) when x is not a descriptor."""
    per = _cdiv(steps(geo, kn), kn.SPLIT)
    programs = tiles(geo, kn) * slices(geo, kn)
    flops = 2.0 * programs * per * kn.TMA_TW * kn.BLOCK_M * kn.BLOCK_N
    waves = _cdiv(programs, num_sms)
    fill = programs / (waves * num_sms)
    pipe = per / (per + kn.num_stages)
    eff = 0.8 * min(1.0, kn.BLOCK_M * kn.BLOCK_N / (128 * 128)) ** 0.45
    x_elems = geo.n * geo.in_dims[0] * geo.in_dims[1] * geo.c_per_group
    dram = itemsize * (x_elems + pixels(geo) * geo.k_per_group)
    ws = workspace_bytes(geo, kn)
    active = min(1.0, 1.5 * programs / num_sms)
    mem = (dram + ws * (1.0 if ws < 24e6 else 2.0)) / (bandwidth * active)
    if not x_desc:
        k_tiles = _cdiv(geo.k_per_group, kn.BLOCK_M)
        cols = _cdiv(columns(geo), kn.BLOCK_N) * kn.BLOCK_N
        mem += itemsize * pixels(geo) * cols * k_tiles / (4.0 * bandwidth * active)
    launch = 3e-6 if kn.SPLIT == 1 else 5e-6
    return roofline(flops / (peak * eff * fill * pipe), mem) + launch
