"""Implicit GEMM over flat pixel rows, forward and backward data of 1x1 unpadded stride-1
convolutions: the streamed operand (x, or dy) through a 2-D TMA descriptor.

Such a convolution is a plain GEMM over the row-major pixel index m = (n * H + h) * W + w,
M = N * H * W:

    fprop  y[m, k]  = sum_c x[m, c] * w[k, c]
    dgrad  dx[m, c] = sum_k dy[m, k] * w[k, c]

so the A slab of a tile is the box of BM consecutive rows of the 2-D descriptor
[M, channels]: unlike the spatial boxes of ``_tma_kernels`` (8 x 8 boxes hold a 7 x 7
image's 49 pixels in 64 rows), every row but the last tile's tail is a real pixel.

Larger "same"-padded filters fit the same scheme -- tap (r, s) reads row m + dr * W + ds
-- but rows whose shifted pixel leaves the image must then be zeroed, and the mask sends
A through registers: tried on the H100 (2026-11-22), 1.6-1.8x slower than the boxes on
ResNet's 3x3 layers, and wrong in some split configs where the interpreter agreed with
the reference. The path therefore takes 1x1 unpadded filters only.

B is the 1x1 filter as the 2-D descriptor [K, C]: box [BN, BK] at (n0, c0) transposed
for the forward, [BK, BN] at (k0, c0) as is for dgrad. The grid is
persistent, output channel blocks innermost; with SPLIT > 1 each tile's reduction runs in
slices whose float32 partials a second kernel sums in slice order (deterministic) before
the epilogue, as on the box path.
"""

from __future__ import annotations

from ...fusion._codegen import COMBINE_HELPERS
from ._kernels import common_unsupported, is_packed_channels_last, split_of


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _roles(geo, kind: str) -> tuple:
    """(reduction channels, output channels) of direction ``kind``."""
    if kind == "conv_fprop":
        return geo.c_per_group, geo.k_per_group
    return geo.k_per_group, geo.c_per_group


def unsupported(geo, kind: str, streamed, w) -> str | None:
    """Why the flat path cannot take this problem (None when it can). ``streamed`` is the
    descriptor read in flat rows: x for the forward, dy for dgrad."""
    why = common_unsupported(geo, streamed)
    if why:
        return why
    if tuple(geo.filt) != (1, 1) or any(geo.pre) or geo.stride != (1, 1):
        return (
            "the flat path takes 1x1 unpadded stride-1 filters (larger ones need masked "
            "rows, measured slower than the box tiles)"
        )
    ch, c = streamed.dims[1], w.dims[1]
    if not is_packed_channels_last(streamed):
        return f"the flat path needs a packed NHWC {streamed.name or 'image'}"
    if not is_packed_channels_last(w):
        return "the flat path needs a packed KRSC (NHWC) filter"
    if (ch * streamed.data_type.itemsize) % 16 or (c * w.data_type.itemsize) % 16:
        return "TMA needs 16-byte aligned rows: channels * element size a multiple of 16"
    if geo.int64:
        return "the flat path indexes pixels with 32-bit integers"
    return None


def pixels(geo) -> int:
    return geo.n * geo.in_dims[0] * geo.in_dims[1]


def tiles(geo, kn, kind: str) -> int:
    return _cdiv(pixels(geo), kn.block_m) * _cdiv(_roles(geo, kind)[1], kn.BLOCK_N)


def grid(geo, kn, kind: str, num_sms: int) -> tuple:
    return (max(1, min(num_sms, tiles(geo, kn, kind) * split_of(kn))),)


def partials_bytes(geo, kn, kind: str) -> int:
    s = split_of(kn)
    return 0 if s == 1 else 4 * s * tiles(geo, kn, kind) * kn.block_m * kn.BLOCK_N


def estimate_seconds(
    geo, kn, kind: str, itemsize: int, peak: float, bandwidth: float, num_sms: int
) -> float:
    """The box path's roofline (``_tma_kernels.estimate_seconds``) over flat tiles: no
    spatial padding, the last tile's tail only."""
    rc, oc = _roles(geo, kind)
    split = split_of(kn)
    jobs = tiles(geo, kn, kind) * split
    steps = _cdiv(_cdiv(rc, kn.BLOCK_K), split)
    flops = 2.0 * jobs * kn.block_m * kn.BLOCK_N * steps * kn.BLOCK_K
    fill = jobs / (_cdiv(jobs, num_sms) * num_sms)
    pipe = steps / (steps + kn.num_stages)
    bytes_ = itemsize * (pixels(geo) * (rc + oc) + rc * oc)
    t = max(flops / (peak * 0.9 * fill * pipe), bytes_ / bandwidth) + 3e-6
    if split > 1:
        ws = partials_bytes(geo, kn, kind)
        t += ws * (1.0 if ws < 24e6 else 2.0) / bandwidth + 3e-6
    return t


def _coords(t_n: int, ind: str) -> list:
    """Tile id ``tile`` -> (mt, nt): output channel blocks innermost."""
    return [f"{ind}nt = tile % {t_n}", f"{ind}mt = tile // {t_n}"]


def _epilogue_lines(geo, kind: str, rows: str, ind: str, body: str, bn: int) -> list:
    """Pixel (nb, o0, o1) and channel indices of rows ``rows`` of tile (mt, nt), then the
    epilogue."""
    h, wd = geo.in_dims
    L = [
        f"{ind}_m = {rows}",
        f"{ind}nb = _m // {h * wd}",
        f"{ind}o0 = (_m // {wd}) % {h}",
        f"{ind}o1 = _m % {wd}",
        f"{ind}mask_m = _m < {pixels(geo)}",
        f"{ind}offs_n = nt * {bn} + tl.arange(0, {bn})",
        f"{ind}mask_n = offs_n < {_roles(geo, kind)[1]}",
    ]
    return L + [ind + line for line in body.strip("\n").split("\n")]


def source(
    name: str, geo, kn, kind: str, *, epilogue_params: list, epilogue_body: str, interpret: bool
) -> str:
    """Kernel ``name(A, W, <epilogue params> | WS, NUM_PROGS: constexpr)``: A is x (fprop)
    or dy (dgrad), packed NHWC; W the KRSC filter. SPLIT > 1 writes partials to WS."""
    rc, oc = _roles(geo, kind)
    bm, bn, bk = kn.block_m, kn.BLOCK_N, kn.BLOCK_K
    its, m_all = _cdiv(rc, bk), pixels(geo)
    t_n = _cdiv(oc, bn)
    n_tiles, split = tiles(geo, kn, kind), split_of(kn)
    per = _cdiv(its, split)
    ind, ind2, ind3 = "    ", "        ", "            "
    fprop = kind == "conv_fprop"
    sig = (
        ["A", "W"] + (["WS"] if split > 1 else list(epilogue_params)) + ["NUM_PROGS: tl.constexpr"]
    )
    k_all, c_all = (oc, rc) if fprop else (rc, oc)
    wblock = f"[{bn}, {bk}]" if fprop else f"[{bk}, {bn}]"
    L = [
        COMBINE_HELPERS,
        "@triton.jit",
        f"def {name}({', '.join(sig)}):",
        f"{ind}a_desc = tl.make_tensor_descriptor(A, shape=[{m_all}, {rc}], "
        f"strides=[{rc}, 1], block_shape=[{bm}, {bk}])",
        f"{ind}w_desc = tl.make_tensor_descriptor(W, shape=[{k_all}, {c_all}], "
        f"strides=[{c_all}, 1], block_shape={wblock})",
        f"{ind}g = 0",
        f"{ind}for job in tl.range(tl.program_id(0), {n_tiles * split}, NUM_PROGS):",
    ]
    if split > 1:
        L += [
            f"{ind2}sl = job % {split}",
            f"{ind2}tile = job // {split}",
            f"{ind2}it0 = sl * {per}",
            f"{ind2}it1 = tl.minimum(it0 + {per}, {its})",
        ]
    else:
        L += [f"{ind2}tile = job", f"{ind2}it0 = 0", f"{ind2}it1 = {its}"]
    L += _coords(t_n, ind2)
    L += [
        f"{ind2}acc = tl.full([{bm}, {bn}], 0.0, tl.float32)",
        f"{ind2}for it in range(it0, it1):",
        f"{ind3}c0 = it * {bk}",
        f"{ind3}a = a_desc.load([mt * {bm}, c0])",
    ]
    L.append(
        f"{ind3}b = tl.trans(w_desc.load([nt * {bn}, c0]))"
        if fprop
        else f"{ind3}b = w_desc.load([c0, nt * {bn}])"
    )
    if interpret:  # the 3.6 interpreter's dot is wrong on bfloat16: widen there only
        L.append(f"{ind3}acc += tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision='ieee')")
    else:
        L.append(f"{ind3}acc = tl.dot(a, b, acc)")
    if split > 1:
        L += [
            f"{ind2}_i = tl.arange(0, {bm})",
            f"{ind2}_j = tl.arange(0, {bn})",
            f"{ind2}tl.store(WS + ((sl * {n_tiles} + tile) * {bm} + _i)[:, None] * {bn} + "
            f"_j[None, :], acc)",
        ]
        return "\n".join(L) + "\n"
    L += _epilogue_lines(geo, kind, f"mt * {bm} + tl.arange(0, {bm})", ind2, epilogue_body, bn)
    return "\n".join(L) + "\n"


SUM_ROWS = 32


def sum_source(name: str, geo, kn, kind: str, *, epilogue_params: list, epilogue_body: str) -> str:
    """Kernel ``name(WS, <epilogue params>)``: rows of one tile summed over the SPLIT
    partials in slice order, then the epilogue. Grid ``sum_grid``."""
    bm, bn = kn.block_m, kn.BLOCK_N
    rows = min(SUM_ROWS, bm)
    n_tiles, t_n = tiles(geo, kn, kind), _cdiv(_roles(geo, kind)[1], bn)
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
    L += _coords(t_n, ind)
    L += [f"{ind}_j = tl.arange(0, {bn})", f"{ind}acc = tl.full([{rows}, {bn}], 0.0, tl.float32)"]
    for sl in range(split_of(kn)):
        L.append(
            f"{ind}acc += tl.load(WS + (({sl * n_tiles} + tile) * {bm} + _r)[:, None] * "
            f"{bn} + _j[None, :])"
        )
    L += _epilogue_lines(geo, kind, f"mt * {bm} + _r", ind, epilogue_body, bn)
    return "\n".join(L) + "\n"


def sum_grid(geo, kn, kind: str) -> tuple:
    return (tiles(geo, kn, kind) * (kn.block_m // min(SUM_ROWS, kn.block_m)),)
