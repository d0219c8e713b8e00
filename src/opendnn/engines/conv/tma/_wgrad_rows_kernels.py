"""Backward filter over channels-first rows: NCHW (NCW, NCDHW) x and dy, the reduction
over pixels contiguous in both operands.

In a channels-first tensor one output row -- TW consecutive ow of fixed (n, od, oh) --
is contiguous per channel, so for filter tap t = (q, r, s) the filter gradient

    dw[k, t, c] = sum_p dy[n, k, od, oh, ow] * x[n, c, od*sd + q*dd - pd,
                                                 oh*sh + r*dh - ph, ow + s*dw - pw]

is a GEMM over rows whose two operands are both reduction-contiguous:

    dy row  [BLOCK_M, TW]: channels k0.., row (n, od, oh), columns ow0 .. ow0 + TW
    x  row  [BLOCK_N, TW]: channels c0.., row (n, id, ih), columns ow0 + s*dw - pw ..
    acc[k, c] += dy_row @ x_row^T

TF32 tensor cores read both operands reduction-major and this is that order, so float32
runs at TF32 rate with no transposed copy; half and bfloat16 take the same path and skip
the NCHW -> NHWC transform. dy's row comes through a TMA descriptor over the view
[N, *outer, K, OW] (the channel axis second to last: TMA takes strides in any order)
when OW times the element size is a multiple of 16 bytes, else through masked pointers.
x's row always comes through masked pointers: it starts at any column ow0 + s*dw - pw,
and the copy engine faults on an innermost coordinate that is not 16-byte aligned
(measured: an illegal instruction on the H100). Zeros stand for everything outside x
or dy: padding on every axis, rows in a depth / height of padding, the last partial run
of a row. Depth and height take any stride, dilation and padding (their coordinates are
per row); the row axis needs stride 1 (a strided row is not contiguous).

Tiles, the split of the rows into SPLIT slices, the float32 partials and their
fixed-order sum are those of ``_tma_wgrad_kernels`` (same tile numbering and workspace).
"""

from __future__ import annotations

from ...fusion._codegen import COMBINE_HELPERS
from ._wgrad_kernels import _prod, _tile_lines, roofline, step_and_finish, taps, tiles, ws_index


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def channels_first_strides(dims) -> tuple:
    """Strides of a packed NCHW (NCW, NCDHW) tensor of ``dims``."""
    out, acc = [], 1
    for v in reversed(dims):
        out.append(acc)
        acc *= v
    return tuple(reversed(out))


def unsupported(geo, x, dy, tf32: bool) -> str | None:
    """Why the rows kernel cannot take this problem (None when it can)."""
    if geo.groups != 1:
        return "the TMA path takes one group"
    name = x.data_type.name
    if name == "FLOAT" and not tf32:
        return "channels-first rows take float32 only as TF32 (allow_tf32)"
    if name not in ("HALF", "BFLOAT16", "FLOAT"):
        return "channels-first rows take half, bfloat16 or float32 (TF32)"
    if x.strides != channels_first_strides(x.dims):
        return "channels-first rows need a packed NCHW image"
    if dy.strides != channels_first_strides(dy.dims):
        return "channels-first rows need a packed NCHW dy"
    if geo.stride[-1] != 1:
        return "channels-first rows need stride 1 along the row (width)"
    if geo.int64:
        return "channels-first rows use 32-bit coordinates"
    return None


def knob_unsupported(kn) -> str | None:
    """Why config ``kn`` cannot take an (otherwise supported) problem."""
    if kn.TMA_TW < 16:
        return f"a run of {kn.TMA_TW} is below the dot's shortest reduction (16)"
    return None


def rows(geo) -> int:
    """Output rows: N x every output axis but the last."""
    return geo.n * _prod(geo.out_dims[:-1])


def runs_per_row(geo, kn) -> int:
    return _cdiv(geo.out_dims[-1], kn.TMA_TW)


def steps(geo, kn) -> int:
    return rows(geo) * runs_per_row(geo, kn)


def chunk(geo, kn) -> int:
    return _cdiv(steps(geo, kn), kn.SPLIT)


def slices(geo, kn) -> int:
    """Slices that hold at least one run (chunk rounding can leave the last ones empty)."""
    return _cdiv(steps(geo, kn), chunk(geo, kn))


def workspace_bytes(geo, kn) -> int:
    return 0 if kn.SPLIT == 1 else 4 * kn.SPLIT * taps(geo) * geo.k_per_group * geo.c_per_group


def dy_by_descriptor(geo, itemsize: int) -> bool:
    """Whether dy's rows are read through a TMA descriptor: every stride of the
    channels-first view a multiple of 16 bytes (the width's, hence the others')."""
    return (geo.out_dims[-1] * itemsize) % 16 == 0


def _dy_descriptor(n: int, dims: tuple, k: int, bm: int, tw: int) -> str:
    """dy, packed channels-first, seen as [N, *dims[:-1], K, OW] (the channel axis second
    to last: TMA takes strides in any order, the innermost 1)."""
    d = len(dims)
    sp = [_prod(dims[i + 1 :]) for i in range(d)]
    size = _prod(dims)
    shape = [n, *dims[:-1], k, dims[-1]]
    strides = [k * size, *sp[:-1], size, 1]
    block = [1] * d + [bm, tw]
    return (
        f"    dy_desc = tl.make_tensor_descriptor(DY, shape={shape}, strides={strides}, "
        f"block_shape={block})"
    )


def _row_load(var, ptr, dims, ch, nch, block, tw, nb, coords, col0, ind) -> list:
    """``var`` = the [block, tw] row of channels ``ch * block + arange`` of image ``nb`` at
    outer coordinates ``coords`` and columns col0 + arange(tw) of a packed channels-first
    tensor, zero outside it (masked pointers)."""
    d = len(dims)
    size = _prod(dims)
    sp = [_prod(dims[i + 1 :]) for i in range(d)]
    L = [
        f"{ind}_cols = {col0} + tl.arange(0, {tw})",
        f"{ind}_ch = {ch} * {block} + tl.arange(0, {block})",
        f"{ind}_ok = (_ch < {nch})[:, None] & ((_cols >= 0) & (_cols < {dims[-1]}))[None, :]",
        f"{ind}_off = {nb} * {nch * size} + _cols[None, :] + _ch[:, None] * {size}",
    ]
    for i, crd in enumerate(coords):
        L += [
            f"{ind}_i{i} = {crd}",
            f"{ind}_ok = _ok & (_i{i} >= 0) & (_i{i} < {dims[i]})",
            f"{ind}_off += _i{i} * {sp[i]}",
        ]
    return L + [f"{ind}{var} = tl.load({ptr} + tl.where(_ok, _off, 0), mask=_ok, other=0.0)"]


def source(
    name: str, geo, kn, *, epilogue_params: list, epilogue_body: str, interpret: bool, tf32: bool
) -> str:
    """Kernel ``name(X, DY, <WS or epilogue params>)``; grid (slices * tiles,)."""
    d = len(geo.filt)
    c, k, n = geo.c_per_group, geo.k_per_group, geo.n
    tw, bm, bn = kn.TMA_TW, kn.BLOCK_M, kn.BLOCK_N
    ind, ind2 = "    ", "        "
    params = ["WS"] if kn.SPLIT > 1 else list(epilogue_params)
    by_desc = dy_by_descriptor(geo, 4 if tf32 else 2)
    L = [
        COMBINE_HELPERS,
        "@triton.jit",
        f"def {name}({', '.join(['X', 'DY'] + params)}):",
    ]
    if by_desc:
        L.append(_dy_descriptor(n, geo.out_dims, k, bm, tw))
    n_tiles = tiles(geo, kn)
    L += [
        f"{ind}pid = tl.program_id(0)",
        f"{ind}tile = pid % {n_tiles}",
        f"{ind}sp = pid // {n_tiles}",
    ]
    L += _tile_lines(geo, bm, bn, ind)
    step, total = chunk(geo, kn), steps(geo, kn)
    L += [
        f"{ind}acc = tl.full([{bm}, {bn}], 0.0, tl.float32)",
        f"{ind}for b in range(sp * {step}, tl.minimum(sp * {step} + {step}, {total})):",
        f"{ind2}wb = b % {runs_per_row(geo, kn)}",
        f"{ind2}_b = b // {runs_per_row(geo, kn)}",
    ]
    for i in reversed(range(d - 1)):  # the outer output axes, innermost first
        L += [f"{ind2}o{i} = _b % {geo.out_dims[i]}", f"{ind2}_b = _b // {geo.out_dims[i]}"]
    outer = [f"o{i}" for i in range(d - 1)]
    inner = [
        f"o{i} * {geo.stride[i]} + r{i} * {geo.dilation[i]} - {geo.pre[i]}" for i in range(d - 1)
    ]
    last = d - 1
    if by_desc:
        L.append(
            f"{ind2}dd = dy_desc.load([{', '.join(['_b', *outer, f'kt * {bm}', f'wb * {tw}'])}])"
            f".reshape({bm}, {tw})"
        )
    else:
        L += _row_load("dd", "DY", geo.out_dims, "kt", k, bm, tw, "_b", outer, f"wb * {tw}", ind2)
    col0 = f"wb * {tw} + r{last} * {geo.dilation[last]} - {geo.pre[last]}"
    L += _row_load("a", "X", geo.in_dims, "ct", c, bn, tw, "_b", inner, col0, ind2)
    if interpret:  # the 3.6 interpreter's dot is wrong on bfloat16: widen there only
        dot = (
            "        acc += tl.dot(dd.to(tl.float32), tl.trans(a.to(tl.float32)), "
            "input_precision='ieee')"
        )
    else:
        prec = ", input_precision='tf32'" if tf32 else ""
        dot = f"        acc = tl.dot(dd, tl.trans(a), acc{prec})"
    L += step_and_finish(interpret, kn.SPLIT > 1, ws_index(geo), epilogue_body, dot=dot)
    return "\n".join(L) + "\n"


def estimate_seconds(geo, kn, itemsize: int, peak: float, bandwidth: float, num_sms: int) -> float:
    """The box path's roofline (``_tma_wgrad_kernels.estimate_seconds``) over the padded
    runs, with each run a main-loop step of TW pixels: short runs are many small steps,
    bounded by the loop's per-step cost (``implicit_gemm._kernels.loop_seconds``)."""
    from ..implicit_gemm._kernels import loop_seconds

    per = chunk(geo, kn)
    programs = tiles(geo, kn) * slices(geo, kn)
    flops = 2.0 * programs * per * kn.TMA_TW * kn.BLOCK_M * kn.BLOCK_N
    waves = _cdiv(programs, num_sms)
    fill = programs / (waves * num_sms)
    pipe = per / (per + kn.num_stages)
    eff = 0.8 * min(1.0, kn.BLOCK_M * kn.BLOCK_N / (128 * 128)) ** 0.45
    x_px, y_px = (geo.n * _prod(v) for v in (geo.in_dims, geo.out_dims))
    dram = itemsize * (x_px * geo.c_per_group + y_px * geo.k_per_group)
    ws = workspace_bytes(geo, kn)
    active = min(1.0, 1.5 * programs / num_sms)
    mem = (dram + ws * (1.0 if ws < 24e6 else 2.0)) / (bandwidth * active)
    tile_bytes = itemsize * kn.TMA_TW * (kn.BLOCK_M + kn.BLOCK_N)
    loop = loop_seconds(programs * per, programs, tile_bytes, num_sms)
    launch = 3e-6 if kn.SPLIT == 1 else 5e-6
    return max(roofline(flops / (peak * eff * fill * pipe), mem), loop) + launch
