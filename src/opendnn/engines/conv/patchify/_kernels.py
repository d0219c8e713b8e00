"""Patchify convolution (stride = filter, no padding, no dilation): Triton source generation.

A convolution whose stride equals its filter along every axis -- ViT's 16x16/16 patch
embedding, ConvNeXt's 4x4/4 stem and 2x2/2 downsampling -- reads every input element at
most once: output pixel p = (n, o_0, ..) sees the patch x[n, :, o_i*f_i + r_i] and nothing
else. With the patch axes q = (c, r_0, ..) flattened into one index, all three directions
are plain GEMMs (one group):

    fprop   y[p, k]  = sum_q  X[p, q] W[k, q]
    dgrad   dX[p, q] = sum_k  dY[p, k] W[k, q]
    wgrad   dW[k, q] = sum_p  dY[p, k] X[p, q]

    X[p, q] = x[n, c, o_i * f_i + r_i],  W[k, q] = w[k, c, r'_i]  (r' = f - 1 - r in
    CONVOLUTION mode, else r),  Y[p, k] = y[n, k, o_i]

Each operand's address is separable, a row offset plus a column offset:

    x: (n*xs_n + sum_i o_i*f_i*xs_i) + (c*xs_c + sum_i r_i*xs_i)
    w: k*ws_k + (c*ws_c + sum_i r'_i*ws_i)
    y: (n*ys_n + sum_i o_i*ys_i) + k*ys_k

so a tile loads as two offset vectors, with no per-tap loop and no masks for padding. The
point is the reduction length: the implicit GEMM reduces over C per tap (C = 3 in an RGB
stem fills 3 of a 16-wide tensor-core step), here over C*prod(f) at once (48 for a 4x4
stem, 768 for ViT's 16x16). The backward data writes every dx element exactly once when
the patches tile the image (in_i = out_i * f_i); the backward filter splits the pixel
reduction into SPLIT slices whose float32 partials a second kernel sums in a fixed order.

q is enumerated with x's smallest-stride axis innermost (r_last for NCHW, c for NHWC), so
a BLOCK_K step walks x as contiguously as the layout allows.
"""

from __future__ import annotations

from ...fusion._codegen import COMBINE_HELPERS
from ..analysis import ConvGeometry
from ..implicit_gemm import _kernels as K


def q_order(geo: ConvGeometry) -> list:
    """The patch axes as (name, size, x stride, w stride) from outermost to innermost:
    c and r_0.. sorted by x's stride, largest first (ties keep c, r_0, .. order)."""
    d = len(geo.filt)
    axes = [("c", geo.c_per_group, geo.x_strides[1], 1)] + [
        (f"r{i}", geo.filt[i], geo.x_strides[2 + i], 2 + i) for i in range(d)
    ]
    return sorted(axes, key=lambda t: -t[2])


def _split_q(var: str, geo: ConvGeometry, ind: str, tmp: str) -> list:
    order = q_order(geo)
    return K._div_chain(var, [t[1] for t in order], [t[0] for t in order], ind, tmp)


def _q_offsets(geo: ConvGeometry, w_strides, x_strides=None) -> tuple[str, str]:
    """(x's, w's) column offsets of the patch index (c, r_0, ..) split into names."""
    d = len(geo.filt)
    xs = x_strides or geo.x_strides
    x = [f"c * {xs[1]}"] + [f"r{i} * {xs[2 + i]}" for i in range(d)]
    rr = [f"({geo.filt[i] - 1} - r{i})" if geo.flip else f"r{i}" for i in range(d)]
    w = [f"c * {w_strides[1]}"] + [f"{rr[i]} * {w_strides[2 + i]}" for i in range(d)]
    return " + ".join(x), " + ".join(w)


def _p_offsets(geo: ConvGeometry, x_strides, y_strides) -> tuple[str, str]:
    """(x's, y's) row offsets of the pixel index split into nb, o_0.."""
    d = len(geo.filt)
    x = [f"nb * {x_strides[0]}"] + [f"o{i} * {geo.filt[i] * x_strides[2 + i]}" for i in range(d)]
    y = [f"nb * {y_strides[0]}"] + [f"o{i} * {y_strides[2 + i]}" for i in range(d)]
    return " + ".join(x), " + ".join(y)


def patch_size(geo: ConvGeometry) -> int:
    return geo.c_per_group * K._prod(geo.filt)


def _pixel_tile_gemm(
    name: str, inputs: list, geo: ConvGeometry, kn: K.ConvKnobs, cols: int, kw: dict, head, loop
) -> str:
    """A kernel over (pixel tiles x ``cols`` column tiles): the pixel header, the ``head``
    lines, the float32 accumulator, the reduction ``loop`` (its ``for`` line and body, which
    load ``a`` and ``b``), the dot and the epilogue (``kw`` holds the source options)."""
    ind, ind2 = "    ", "        "
    L = K.pixel_tile_header(
        name,
        inputs,
        kw["epilogue_params"],
        ["BLOCK_M", "BLOCK_N", "BLOCK_K"],
        geo,
        geo.out_dims,
        cols,
        kn,
    )
    L += [ind + line for line in head]
    L.append(f"{ind}acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)")
    L += [ind + loop[0]] + [ind2 + line for line in loop[1:]]
    L.append(ind2 + K._dot_line(kw["allow_tf32"], kw["interpret"], kw["fp32_inputs"]))
    L += [ind + line for line in kw["epilogue_body"].strip("\n").split("\n")]
    return "\n".join(L) + "\n"


def fprop_source(name: str, geo: ConvGeometry, kn: K.ConvKnobs, **kw) -> str:
    """y tile [BLOCK_M pixels, BLOCK_N filters] = X[p, q] W[k, q]^T over BLOCK_K patch
    elements a step. ``kw``: epilogue_params, epilogue_body, allow_tf32, interpret,
    fp32_inputs. Grid: (pixel tiles x filter tiles, 1)."""
    x_row, _ = _p_offsets(geo, geo.x_strides, geo.x_strides)
    x_q, w_q = _q_offsets(geo, geo.w_strides)
    q = patch_size(geo)
    loop = [
        f"for q0 in range(0, {q}, BLOCK_K):",
        "qq = q0 + tl.arange(0, BLOCK_K)",
        f"mask_q = qq < {q}",
        *[line.strip() for line in _split_q("qq", geo, "", "_qq")],
        f"a = tl.load(X + x_row[:, None] + ({x_q})[None, :], "
        "mask=mask_m[:, None] & mask_q[None, :], other=0.0)",
        f"b = tl.load(W + ({w_q})[:, None] + w_col[None, :], "
        "mask=mask_q[:, None] & mask_n[None, :], other=0.0)",
    ]
    head = [f"x_row = {x_row}", f"w_col = offs_n * {geo.w_strides[0]}"]
    return _pixel_tile_gemm(name, ["X", "W"], geo, kn, geo.k_per_group, kw, head, loop)


def dgrad_source(name: str, geo: ConvGeometry, kn: K.ConvKnobs, *, dy_strides: tuple, **kw):
    """dx tile [BLOCK_M dy pixels, BLOCK_N patch elements] = dY[p, k] W[k, q] over
    BLOCK_K filters a step; the epilogue addresses dx by (nb, o_i) and (c, r_i). ``kw`` as
    ``fprop_source``'s. Grid: (pixel tiles x patch tiles, 1)."""
    _, dy_row = _p_offsets(geo, geo.x_strides, dy_strides)
    _, w_q = _q_offsets(geo, geo.w_strides)
    head = [line.strip() for line in _split_q("offs_n", geo, "", "_qn")]
    head += [f"dy_row = {dy_row}", f"w_col = {w_q}"]
    loop = [
        f"for k0 in range(0, {geo.k_per_group}, BLOCK_K):",
        "kk = k0 + tl.arange(0, BLOCK_K)",
        f"mask_k = kk < {geo.k_per_group}",
        f"a = tl.load(DY + dy_row[:, None] + (kk * {dy_strides[1]})[None, :], "
        "mask=mask_m[:, None] & mask_k[None, :], other=0.0)",
        f"b = tl.load(W + (kk * {geo.w_strides[0]})[:, None] + w_col[None, :], "
        "mask=mask_k[:, None] & mask_n[None, :], other=0.0)",
    ]
    return _pixel_tile_gemm(name, ["DY", "W"], geo, kn, patch_size(geo), kw, head, loop)


def wgrad_sources(
    name: str,
    geo: ConvGeometry,
    kn: K.ConvKnobs,
    *,
    split: int,
    dy_strides: tuple,
    dw_desc,
    allow_tf32: bool,
    interpret: bool,
    fp32_inputs: bool,
) -> tuple[str, str]:
    """(partial kernel, finishing kernel). Program (k tile x q tile, s) sums the pixels
    of slice s, [s*chunk, (s+1)*chunk) with chunk a multiple of BLOCK_K, into
    WS[s, k, q] (float32); ``{name}_finish(WS, DW, BLOCK)`` adds the SPLIT partials in
    order and writes dw in its type and strides. Grid: (k tiles x q tiles, SPLIT)."""
    from ...fusion import _codegen as cg

    ind, ind2 = "    ", "        "
    d = len(geo.filt)
    q = patch_size(geo)
    kt = geo.k_per_group
    pixels = geo.n * K._prod(geo.out_dims)
    chunk = wgrad_chunk(geo, kn, split)
    i64 = ".to(tl.int64)" if geo.int64 else ""
    x_row, dy_row = _p_offsets(geo, geo.x_strides, dy_strides)
    x_q, _ = _q_offsets(geo, geo.w_strides)
    L = [
        COMBINE_HELPERS,
        "@triton.jit",
        f"def {name}(X, DY, WS, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, "
        "BLOCK_K: tl.constexpr):",
        f"{ind}pid = tl.program_id(0)",
        f"{ind}s = tl.program_id(1){i64}",
        f"{ind}num_pid_n = {-(-q // kn.BLOCK_N)}",
        f"{ind}pid_m = pid // num_pid_n",
        f"{ind}pid_n = pid % num_pid_n",
        f"{ind}offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        f"{ind}mask_m = offs_m < {kt}",
        f"{ind}offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        f"{ind}mask_n = offs_n < {q}",
    ]
    L += _split_q("offs_n", geo, ind, "_qn")
    L += [
        f"{ind}x_col = {x_q}",
        f"{ind}dy_col = offs_m * {dy_strides[1]}",
        f"{ind}acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)",
        f"{ind}p_start = tl.program_id(1) * {chunk}",
        f"{ind}for p0 in range(0, {chunk}, BLOCK_K):",
    ]
    L += K.index_split(
        "pp",
        "p_start + p0 + tl.arange(0, BLOCK_K)",
        split * chunk,
        [geo.n, *geo.out_dims],
        ["nb"] + [f"o{i}" for i in range(d)],
        ind2,
        "_qp",
        geo.int64,
    )
    L += [
        f"{ind2}mask_p = pp < {pixels}",
        f"{ind2}a = tl.load(DY + dy_col[:, None] + ({dy_row})[None, :], "
        "mask=mask_m[:, None] & mask_p[None, :], other=0.0)",
        f"{ind2}b = tl.load(X + ({x_row})[:, None] + x_col[None, :], "
        "mask=mask_p[:, None] & mask_n[None, :], other=0.0)",
        ind2 + K._dot_line(allow_tf32, interpret, fp32_inputs),
        f"{ind}ws = (s * {kt} + offs_m)[:, None] * {q} + offs_n[None, :]",
        f"{ind}tl.store(WS + ws, acc, mask=mask_m[:, None] & mask_n[None, :])",
    ]
    part = "\n".join(L) + "\n"
    # finishing pass: element e = k * q + (patch index in q order) of dw
    st = dw_desc.strides
    _, w_q = _q_offsets(geo, st)
    F = K.split_sum_head(name, kt * q, split) + [
        f"{ind}kf = e // {q}",
        f"{ind}qf = e % {q}",
    ]
    F += _split_q("qf", geo, ind, "_qf")
    F.append(ind + cg.store_expr("DW", f"kf * {st[0]} + {w_q}", "acc", dw_desc, "mask"))
    return part, "\n".join(F) + "\n"


def wgrad_chunk(geo: ConvGeometry, kn: K.ConvKnobs, split: int) -> int:
    """Pixels per slice (a multiple of BLOCK_K)."""
    pixels = geo.n * K._prod(geo.out_dims)
    return -(-(-(-pixels // split)) // kn.BLOCK_K) * kn.BLOCK_K
