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

With a register strip (``depthwise_strip_source``; the backward filter likewise) a tile row
is S consecutive outputs along the last axis, and an input element of the strip's window,
loaded once, meets every (output j, tap s) with j * stride + s * dil equal to its offset:
x is read from L1 about (S - 1) * stride + F for S * F products along that axis, not S * F.
"""

from __future__ import annotations

import dataclasses
import itertools

from ...fusion._codegen import COMBINE_HELPERS
from ..analysis import ConvGeometry
from ..implicit_gemm import _kernels as K


def _taps(filt) -> list:
    """Every filter offset (r_0, .., r_{d-1}) in row-major order."""
    return list(itertools.product(*(range(f) for f in filt)))


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
    ind = "    "
    L = K.pixel_tile_header(
        name, ["X", "W"], epilogue_params, ["BLOCK_M", "BLOCK_N"], flat, geo.out_dims, k_total, kn
    )
    xs, ws = geo.x_strides, geo.w_strides
    chan = "offs_n.to(tl.int64)" if geo.int64 else "offs_n"
    src = chan if mult == 1 else f"({chan} // {mult})"
    # the taps unrolled: per axis one bounds mask per filter offset (shared by the taps on
    # that offset), and each tap's x address is the tile's base plus a constant
    L.append(
        f"{ind}x_base = nb * {xs[0]} + "
        + " + ".join(f"(o{i} * {geo.stride[i]} - {geo.pre[i]}) * {xs[2 + i]}" for i in range(d))
    )
    L.append(f"{ind}x_col = {src} * {xs[1]}")
    L.append(f"{ind}w_col = {chan} * {ws[0]}")
    L += _bounds_masks(geo, range(d), ind)
    L.append(f"{ind}acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)")
    for rs in _taps(geo.filt):
        valid = " & ".join(["mask_m"] + [f"ok{i}_{r}" for i, r in enumerate(rs)])
        x_const = sum(r * geo.dilation[i] * xs[2 + i] for i, r in enumerate(rs))
        w_const = sum(
            ((geo.filt[i] - 1 - r) if geo.flip else r) * ws[2 + i] for i, r in enumerate(rs)
        )
        L.append(
            f"{ind}xv = tl.load(X + (x_base + {x_const})[:, None] + x_col[None, :], "
            f"mask=({valid})[:, None] & mask_n[None, :], other=0.0).to(tl.float32)"
        )
        L.append(f"{ind}wv = tl.load(W + w_col + {w_const}, mask=mask_n, other=0.0).to(tl.float32)")
        L.append(f"{ind}acc += xv * wv[None, :]")
    for line in epilogue_body.strip("\n").split("\n"):
        L.append(ind + line)
    return "\n".join(L) + "\n"


def _bounds_masks(geo: ConvGeometry, axes, ind: str) -> list:
    """``ok{i}_{r}``: whether filter offset r of axis i lands inside x for the tile's
    output pixels, one mask per (axis, offset), shared by every tap on that offset."""
    lines = []
    for i in axes:
        for r in range(geo.filt[i]):
            h = f"(o{i} * {geo.stride[i]} + {r * geo.dilation[i] - geo.pre[i]})"
            lines.append(f"{ind}ok{i}_{r} = ({h} >= 0) & ({h} < {geo.in_dims[i]})")
    return lines


def strip_pairs(filt: int, stride: int, dil: int, strip: int) -> list:
    """Per offset u along the last axis of a strip's input window (u = 0 ..
    (strip - 1) * stride + (filt - 1) * dil): the (output j, tap s) pairs with
    j * stride + s * dil = u, i.e. which outputs of the strip that input element meets."""
    span = (strip - 1) * stride + (filt - 1) * dil + 1
    out = [[] for _ in range(span)]
    for j in range(strip):
        for t in range(filt):
            out[j * stride + t * dil].append((j, t))
    return out


def strip_dims(geo: ConvGeometry, strip: int) -> list:
    """The output dims a strip tile walks: the last axis counted in strips of ``strip``."""
    return list(geo.out_dims[:-1]) + [-(-geo.out_dims[-1] // strip)]


def depthwise_strip_source(
    name: str,
    geo: ConvGeometry,
    kn: K.ConvKnobs,
    strip: int,
    *,
    epilogue_params: list,
    epilogue_body: str,
) -> str:
    """The forward with a register strip: a tile row is ``strip`` consecutive outputs along
    the last spatial axis (``o_last = q * strip + j``), each with its own float32 sum.
    Per filter offset of the leading axes the strip's input window along the last axis,
    (strip - 1) * stride + (F - 1) * dil + 1 elements, is loaded once, and each element
    meets every (output j, tap s) with j * stride + s * dil = its offset (``strip_pairs``):
    a 7-wide filter at stride 1 and strip 4 loads 10 x vectors for 28 products, where the
    plain kernel loads 28. The epilogue runs once per j. Same signature as
    ``depthwise_source``; BLOCK_M counts strips."""
    d = len(geo.out_dims)
    last = d - 1
    mult = geo.k_per_group
    k_total = mult * geo.groups
    flat = dataclasses.replace(geo, k_per_group=k_total, groups=1)
    ind = "    "
    L = K.pixel_tile_header(
        name,
        ["X", "W"],
        epilogue_params,
        ["BLOCK_M", "BLOCK_N"],
        flat,
        strip_dims(geo, strip),
        k_total,
        kn,
    )
    xs, ws = geo.x_strides, geo.w_strides
    chan = "offs_n.to(tl.int64)" if geo.int64 else "offs_n"
    src = chan if mult == 1 else f"({chan} // {mult})"
    L.append(f"{ind}q = o{last}")
    L.append(f"{ind}strip_mask = mask_m")
    lead = [f"(o{i} * {geo.stride[i]} - {geo.pre[i]}) * {xs[2 + i]}" for i in range(last)]
    L.append(
        f"{ind}x_base = nb * {xs[0]} + "
        + " + ".join(
            lead + [f"(q * {strip * geo.stride[last]} - {geo.pre[last]}) * {xs[2 + last]}"]
        )
    )
    L.append(f"{ind}x_col = {src} * {xs[1]}")
    L.append(f"{ind}w_col = {chan} * {ws[0]}")
    L += _bounds_masks(geo, range(last), ind)
    pairs = strip_pairs(geo.filt[last], geo.stride[last], geo.dilation[last], strip)
    for u in range(len(pairs)):
        h = f"(q * {strip * geo.stride[last]} + {u - geo.pre[last]})"
        L.append(f"{ind}okl_{u} = ({h} >= 0) & ({h} < {geo.in_dims[last]})")
    for j in range(strip):
        L.append(f"{ind}acc{j} = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)")

    def w_pos(i, r):
        return ((geo.filt[i] - 1 - r) if geo.flip else r) * ws[2 + i]

    for rs in _taps(geo.filt[:last]):
        x_row = sum(r * geo.dilation[i] * xs[2 + i] for i, r in enumerate(rs))
        w_row = sum(w_pos(i, r) for i, r in enumerate(rs))
        row_ok = ["mask_m"] + [f"ok{i}_{r}" for i, r in enumerate(rs)]
        for t in range(geo.filt[last]):
            L.append(
                f"{ind}w{t} = tl.load(W + w_col + {w_row + w_pos(last, t)}, mask=mask_n, "
                "other=0.0).to(tl.float32)"
            )
        for u, meets in enumerate(pairs):
            if not meets:
                continue
            valid = " & ".join(row_ok + [f"okl_{u}"])
            L.append(
                f"{ind}xv = tl.load(X + (x_base + {x_row + u * xs[2 + last]})[:, None] + "
                f"x_col[None, :], mask=({valid})[:, None] & mask_n[None, :], other=0.0)"
                ".to(tl.float32)"
            )
            for j, t in meets:
                L.append(f"{ind}acc{j} += xv * w{t}[None, :]")
    for j in range(strip):
        L.append(f"{ind}o{last} = q * {strip} + {j}")
        L.append(f"{ind}mask_m = strip_mask & (o{last} < {geo.out_dims[last]})")
        L.append(f"{ind}acc = acc{j}")
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
    ind = "    "
    L = K.pixel_tile_header(
        name, ["DY", "W"], epilogue_params, ["BLOCK_M", "BLOCK_N"], flat, geo.in_dims, c_total, kn
    )
    ws = geo.w_strides
    chan = "offs_n.to(tl.int64)" if geo.int64 else "offs_n"
    # the taps unrolled: per axis and filter offset r one mask (the tap lands on a dy
    # element) and one dy offset, shared by the taps on that offset
    L.append(f"{ind}dy_row = nb * {dy_strides[0]}")
    for i in range(d):
        s_ = geo.stride[i]
        for r in range(geo.filt[i]):
            u = f"(o{i} + {geo.pre[i] - r * geo.dilation[i]})"
            if s_ == 1:
                L.append(f"{ind}ok{i}_{r} = ({u} >= 0) & ({u} < {geo.out_dims[i]})")
                L.append(f"{ind}off{i}_{r} = {u} * {dy_strides[2 + i]}")
            else:
                L.append(f"{ind}u{i}_{r} = {u}")
                L.append(
                    f"{ind}ok{i}_{r} = (u{i}_{r} >= 0) & (u{i}_{r} % {s_} == 0) & "
                    f"(u{i}_{r} // {s_} < {geo.out_dims[i]})"
                )
                L.append(f"{ind}off{i}_{r} = (u{i}_{r} // {s_}) * {dy_strides[2 + i]}")
    L.append(f"{ind}acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)")
    for q in range(mult):
        j = f"({chan} * {mult} + {q})" if mult > 1 else chan
        L.append(f"{ind}dy_col = {j} * {dy_strides[1]}")
        L.append(f"{ind}w_col = {j} * {ws[0]}")
        for rs in _taps(geo.filt):
            valid = " & ".join(["mask_m"] + [f"ok{i}_{r}" for i, r in enumerate(rs)])
            off = " + ".join(["dy_row"] + [f"off{i}_{r}" for i, r in enumerate(rs)])
            w_const = sum(
                ((geo.filt[i] - 1 - r) if geo.flip else r) * ws[2 + i] for i, r in enumerate(rs)
            )
            L.append(
                f"{ind}dv = tl.load(DY + ({off})[:, None] + dy_col[None, :], "
                f"mask=({valid})[:, None] & mask_n[None, :], other=0.0).to(tl.float32)"
            )
            L.append(
                f"{ind}wv = tl.load(W + w_col + {w_const}, mask=mask_n, other=0.0).to(tl.float32)"
            )
            L.append(f"{ind}acc += dv * wv[None, :]")
    for line in epilogue_body.strip("\n").split("\n"):
        L.append(ind + line)
    return "\n".join(L) + "\n"


def depthwise_wgrad_sources(
    name: str,
    geo: ConvGeometry,
    kn: K.ConvKnobs,
    *,
    split: int,
    dy_strides: tuple,
    dw_desc,
    rows: int = 0,
    strip: int = 1,
) -> tuple[str, str]:
    """Backward filter of a depthwise convolution, as two kernels. With M the channel
    multiplier and p = (n, o) over the N * prod(out) output pixels,

        dw[j, 0, r] = sum_p dy[n, j, o] x[n, j // M, o * stride - pre + r * dil]

    ``{name}``: program (channel block, slice s of ``split``) walks the pixel tiles
    s, s + split, ... and keeps one [BLOCK_M, BLOCK_N] float32 sum per tap (the taps
    unrolled: each dy tile is loaded once and meets every tap's shifted x tile); only after
    the walk does it reduce each tap's sum over the pixels (once: a reduction across threads
    per tile and tap would cost a shared-memory round trip and a barrier each in NHWC, where
    the pixels lie across warps), then writes them to WS[s, tap, j]. The sums' registers,
    taps x BLOCK_M x BLOCK_N / threads, bound the tile (``engine.wgrad_tiles``). ``{name}_finish``: each (tap, j) sums its ``split`` partials in order
    and stores dw (cast to its type; CONVOLUTION mode stores tap r at R - 1 - r);
    ``K.split_sum_head``.
    With ``rows`` (0 < rows < filt[0]) a program keeps the sums of ``rows`` filter rows of
    the first spatial axis only, the grid's third axis picks the row group: fewer live sums
    (registers) for more reads of dy (one per group, from L2).
    With ``strip`` > 1 a tile row is ``strip`` consecutive output pixels along the last
    axis (as ``depthwise_strip_source``): their dy vectors are loaded once, and each x
    element of the strip's window is loaded once per leading filter offset and meets every
    (output j, tap s) pair that uses it. ``strip`` > 1 on a 1-D filter needs every row
    (``rows`` 0): the row groups split the first axis, which is then the last.
    Deterministic: fixed tiles, fixed order, no atomics."""
    d = len(geo.filt)
    mult = geo.k_per_group
    k_total = mult * geo.groups
    taps = K._prod(geo.filt)
    rows = geo.filt[0] if rows <= 0 or rows >= geo.filt[0] else rows
    inner = taps // geo.filt[0]  # taps per filter row
    mine = rows * inner  # taps a program sums
    xs, ws = geo.x_strides, dw_desc.strides
    i64 = ".to(tl.int64)" if geo.int64 else ""
    ind = "    "
    # tl.reduce with a generated combine, not tl.sum: a library @jit function called from a
    # generated module fails in Triton 3.6's interpreter
    L = [
        COMBINE_HELPERS,
        "@triton.jit",
        f"def {name}(X, DY, WS, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):",
        f"{ind}offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)",
        f"{ind}mask_n = offs_n < {k_total}",
        f"{ind}s = tl.program_id(1)",
        f"{ind}row0 = tl.program_id(2) * {rows}",
    ]
    chan = f"offs_n{i64}"
    src = chan if mult == 1 else f"({chan} // {mult})"
    L.append(f"{ind}dy_col = {chan} * {dy_strides[1]}")
    L.append(f"{ind}x_col = {src} * {xs[1]}")
    for t in range(mine):
        L.append(f"{ind}acc{t} = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)")
    if strip > 1:
        L += _wgrad_strip_loop(geo, strip, split, rows, dy_strides, i64)
    else:
        L += _wgrad_loop(geo, split, rows, dy_strides, i64)
    for t in range(mine):
        # tap index: the program's first row's taps start at row0 * inner
        tap, keep = f"(row0 * {inner} + {t})", "mask_n"
        if rows < geo.filt[0]:
            keep = f"mask_n & (row0 + {t // inner} < {geo.filt[0]})"
        L.append(
            f"{ind}tl.store(WS + (s * {taps} + {tap}) * {k_total} + offs_n, "
            f"tl.reduce(acc{t}, 0, _add_combine), mask={keep})"
        )
    part = "\n".join(L) + "\n"

    from ...fusion import _codegen as cg

    F = K.split_sum_head(name, taps * k_total, split) + [
        f"{ind}j = e % {k_total}",
        f"{ind}t = e // {k_total}",
    ]
    r = [f"r{i}" for i in range(d)]
    F += K._div_chain("t", list(geo.filt), r, ind, "_qt")
    w_off = [f"j{i64} * {ws[0]}"]
    for i in range(d):
        fr = f"({geo.filt[i] - 1} - {r[i]})" if geo.flip else r[i]
        w_off.append(f"{fr} * {ws[2 + i]}")
    F.append(ind + cg.store_expr("DW", " + ".join(w_off), "acc", dw_desc, "mask"))
    return part, "\n".join(F) + "\n"


def _wgrad_pixel_walk(geo: ConvGeometry, dims: list, split: int, i64: str) -> list:
    """The backward filter's walk over the pixel tiles s, s + split, ... of ``dims``
    (output dims, the last maybe counted in strips): offs_m, mask_m, nb, o_0.."""
    ind2 = "        "
    total = geo.n * K._prod(dims)
    o = [f"o{i}" for i in range(len(dims))]
    return (
        [f"    for p0 in range(s * BLOCK_M, {total}, {split} * BLOCK_M):"]
        + K.index_split(
            "offs_m",
            "p0 + tl.arange(0, BLOCK_M)",
            total + 4096,
            [geo.n] + list(dims),
            ["nb"] + o,
            ind2,
            "_qm",
            bool(i64),
        )
        + [f"{ind2}mask_m = offs_m < {total}"]
    )


def _lead_offset(geo: ConvGeometry, i: int, r: int, rows: int) -> tuple[str, list]:
    """(image coordinate, validity terms) of leading filter offset ``r`` on axis ``i`` for
    the tile's pixels; axis 0's offset is relative to the program's row group ``row0``
    when the rows are split."""
    if i == 0 and rows < geo.filt[0]:
        h = f"(o0 * {geo.stride[0]} + (row0 + {r}) * {geo.dilation[0]} - {geo.pre[0]})"
        return h, [f"(row0 + {r} < {geo.filt[0]})", f"({h} >= 0) & ({h} < {geo.in_dims[0]})"]
    h = f"(o{i} * {geo.stride[i]} + {r * geo.dilation[i] - geo.pre[i]})"
    return h, [f"({h} >= 0) & ({h} < {geo.in_dims[i]})"]


def _local_taps(geo: ConvGeometry, rows: int) -> list:
    """The program's taps in order (local index t): filter offsets with axis 0 counted
    from the row group's first row."""
    return _taps([rows] + list(geo.filt[1:]))


def _wgrad_loop(geo: ConvGeometry, split: int, rows: int, dy_strides, i64: str) -> list:
    """Per pixel tile: one dy tile, then each tap's shifted x tile into that tap's sum."""
    d, xs, ind2 = len(geo.filt), geo.x_strides, "        "
    L = _wgrad_pixel_walk(geo, list(geo.out_dims), split, i64)
    dy_off = " + ".join(
        [f"nb * {dy_strides[0]}"] + [f"o{i} * {dy_strides[2 + i]}" for i in range(d)]
    )
    L.append(
        f"{ind2}dyv = tl.load(DY + ({dy_off})[:, None] + dy_col[None, :], "
        "mask=mask_m[:, None] & mask_n[None, :], other=0.0).to(tl.float32)"
    )
    for t, rs in enumerate(_local_taps(geo, rows)):
        valid, off = ["mask_m"], [f"nb * {xs[0]}"]
        for i, r in enumerate(rs):
            h, ok = _lead_offset(geo, i, r, rows)
            valid += ok
            off.append(f"{h} * {xs[2 + i]}")
        L.append(
            f"{ind2}xv = tl.load(X + ({' + '.join(off)})[:, None] + x_col[None, :], "
            f"mask=({' & '.join(valid)})[:, None] & mask_n[None, :], other=0.0)"
            ".to(tl.float32)"
        )
        L.append(f"{ind2}acc{t} += dyv * xv")
    return L


def _wgrad_strip_loop(
    geo: ConvGeometry, strip: int, split: int, rows: int, dy_strides, i64: str
) -> list:
    """Per tile of strips: the strip's ``strip`` dy tiles, then per leading filter offset
    each x element of the window once, into the sums of every (output j, tap s) it meets
    (``strip_pairs``)."""
    d, xs, ind2 = len(geo.filt), geo.x_strides, "        "
    last = d - 1
    L = _wgrad_pixel_walk(geo, strip_dims(geo, strip), split, i64)
    L.append(f"{ind2}q = o{last}")
    lead = [f"nb * {dy_strides[0]}"] + [f"o{i} * {dy_strides[2 + i]}" for i in range(last)]
    for j in range(strip):
        ol = f"(q * {strip} + {j})"
        L.append(
            f"{ind2}dy{j} = tl.load(DY + ({' + '.join(lead + [f'{ol} * {dy_strides[2 + last]}'])})"
            f"[:, None] + dy_col[None, :], mask=(mask_m & ({ol} < {geo.out_dims[last]}))"
            "[:, None] & mask_n[None, :], other=0.0).to(tl.float32)"
        )
    pairs = strip_pairs(geo.filt[last], geo.stride[last], geo.dilation[last], strip)
    taps = _local_taps(geo, rows)
    index = {rs: t for t, rs in enumerate(taps)}
    lead_rows = _taps([rows] + list(geo.filt[1:last])) if last else [()]
    base = f"(q * {strip * geo.stride[last]} - {geo.pre[last]})"
    for u in range(len(pairs)):
        L.append(f"{ind2}okl_{u} = ({base} + {u} >= 0) & ({base} + {u} < {geo.in_dims[last]})")
    for rl in lead_rows:
        valid, off = ["mask_m"], [f"nb * {xs[0]}"]
        for i, r in enumerate(rl):
            h, ok = _lead_offset(geo, i, r, rows)
            valid += ok
            off.append(f"{h} * {xs[2 + i]}")
        for u, meets in enumerate(pairs):
            if not meets:
                continue
            L.append(
                f"{ind2}xv = tl.load(X + ({' + '.join(off + [f'({base} + {u}) * {xs[2 + last]}'])})"
                f"[:, None] + x_col[None, :], mask=({' & '.join(valid + [f'okl_{u}'])})[:, None] "
                "& mask_n[None, :], other=0.0).to(tl.float32)"
            )
            for j, t in meets:
                L.append(f"{ind2}acc{index[rl + (t,)]} += dy{j} * xv")
    return L
