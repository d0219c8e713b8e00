"""Implicit-GEMM convolution forward: Triton source generation.

Per group g the convolution is a GEMM that is never materialized:

    M = N * prod(out)          (output pixels m -> n, o_0, ..., o_{d-1}, row-major)
    N_gemm = K / G             (output channels j of the group)
    K_gemm = prod(filt) * C/G  (filter taps t -> r_0..r_{d-1}, then input channels c)

    A[m, (t, c)] = x[n, g*C/G + c, o_i * stride_i - pre_i + r_i * dil_i]   (0 outside)
    B[(t, c), j] = w[g*K/G + j, c, r]          (r flipped in CONVOLUTION mode)
    y[n, g*K/G + j, o] = sum A B

One program owns a BLOCK_M x BLOCK_N tile of (pixels x channels) and walks a single
flattened loop over (tap, channel block): each step gathers a BLOCK_M x BLOCK_K slab of
the image at the tap's shifted coordinates (masked where they fall into the padding) and a
BLOCK_K x BLOCK_N slab of the filter, and issues one tensor-core dot. Channels are the
innermost reduction index, so in NHWC both slabs are contiguous along BLOCK_K. Shapes and
strides are literals in the source. The epilogue (bias, activation, residual, casts) runs
on the float32 tile with the same emitter as the matmul engine.
"""

from __future__ import annotations

import dataclasses

from ...fusion._codegen import COMBINE_HELPERS
from ..analysis import ConvGeometry


@dataclasses.dataclass(frozen=True)
class ConvKnobs:
    BLOCK_M: int = 128
    BLOCK_N: int = 64
    BLOCK_K: int = 32
    num_warps: int = 4
    num_stages: int = 3


def knob_space() -> list[ConvKnobs]:
    out = []
    for bm, bn, bk, w, st in [
        (128, 128, 64, 8, 3),
        (128, 64, 64, 4, 4),
        (128, 128, 32, 8, 4),
        (64, 128, 64, 4, 4),
        (128, 64, 32, 4, 3),
        (64, 64, 64, 4, 3),
        (64, 32, 32, 4, 2),
        (32, 32, 16, 4, 2),
        (256, 128, 64, 8, 3),
        (128, 256, 64, 8, 3),
        (64, 64, 16, 4, 3),
    ]:
        out.append(ConvKnobs(bm, bn, bk, w, st))
    return out


def _div_chain(var: str, sizes: list, names: list, ind: str, tmp: str) -> list[str]:
    """Row-major split of ``var`` over ``sizes`` into ``names`` (outermost first).
    ``tmp`` must be unique per use: Triton rejects a name that changes type in a loop."""
    lines = [f"{ind}{tmp} = {var}"]
    for name, size in zip(reversed(names[1:]), reversed(sizes[1:])):
        lines.append(f"{ind}{name} = {tmp} % {size}")
        lines.append(f"{ind}{tmp} = {tmp} // {size}")
    lines.append(f"{ind}{names[0]} = {tmp}")
    return lines


def index_split(
    var: str, expr: str, total: int, sizes: list, names: list, ind: str, tmp: str, wide: bool
) -> list[str]:
    """``var = expr`` (an index below ``total``) split row-major over ``sizes`` into
    ``names``. With ``wide`` (int64 addressing) ``var`` and the names end up int64, but the
    split itself runs in int32 whenever ``total`` < 2**31: Triton 3.6 on sm_90 miscompiled
    constant divisions and remainders of int64 indices (wrong taps in the explicit GEMM's
    im2col, found by cudnn-frontend's conv fuzzer; the interpreter was exact), so only the
    address terms are widened."""
    if not wide:
        return [f"{ind}{var} = {expr}"] + _div_chain(var, sizes, names, ind, tmp)
    if total >= 2**31:  # an index past int32: the split must be int64
        return [f"{ind}{var} = ({expr}).to(tl.int64)"] + _div_chain(var, sizes, names, ind, tmp)
    lines = [f"{ind}{var} = {expr}"] + _div_chain(var, sizes, names, ind, tmp)
    return lines + [f"{ind}{n} = {n}.to(tl.int64)" for n in [var, *names]]


def pixel_tile_header(
    name: str,
    inputs: list,
    params: list,
    constexprs: list,
    geo: ConvGeometry,
    pixel_dims,
    n_cols: int,
    kn: ConvKnobs,
) -> list[str]:
    """The opening of a kernel whose tile is (output-like pixels x channels): signature,
    program ids (axis 0 tiles, axis 1 the group), ``offs_m``/``mask_m`` over the pixels,
    ``offs_n``/``mask_n`` over ``n_cols`` channels, and pixels split into nb, o_0.."""
    i64 = ".to(tl.int64)" if geo.int64 else ""
    ind = "    "
    m_total = geo.n * _prod(pixel_dims)
    sig = inputs + params + [f"{c}: tl.constexpr" for c in constexprs]
    lines = [
        COMBINE_HELPERS,
        "@triton.jit",
        f"def {name}({', '.join(sig)}):",
        f"{ind}pid = tl.program_id(0)",
        f"{ind}g = tl.program_id(1){i64}",
        f"{ind}num_pid_n = {-(-n_cols // kn.BLOCK_N)}",
        f"{ind}num_pid_m = {-(-m_total // kn.BLOCK_M)}",
        f"{ind}pid_m = pid // num_pid_n",
        f"{ind}pid_n = pid % num_pid_n",
        f"{ind}offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        f"{ind}mask_n = offs_n < {n_cols}",
    ]
    names = ["nb"] + [f"o{i}" for i in range(len(pixel_dims))]
    lines += index_split(
        "offs_m",
        "pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        m_total + 1024,  # the last tile's lanes run past m_total (masked)
        [geo.n] + list(pixel_dims),
        names,
        ind,
        "_qm",
        geo.int64,
    )
    return lines + [f"{ind}mask_m = offs_m < {m_total}"]


def tap_lines(geo: ConvGeometry, ind: str, valid: list, x_off: list, w_off: list) -> list:
    """Lines splitting tap ``t`` into r_0.. and computing the image coordinates h_i of that
    tap for the tile's pixels (``base_i`` = o_i * stride - pre). Appends each axis's bounds
    check to ``valid`` and its x / w offsets (filter flipped in CONVOLUTION mode)."""
    d = len(geo.filt)
    r = [f"r{i}" for i in range(d)]
    lines = _div_chain("t", list(geo.filt), r, ind, "_qt")
    for i in range(d):
        lines.append(f"{ind}h{i} = base{i} + {r[i]} * {geo.dilation[i]}")
        valid.append(f"(h{i} >= 0) & (h{i} < {geo.in_dims[i]})")
        x_off.append(f"h{i} * {geo.x_strides[2 + i]}")
        fr = f"({geo.filt[i] - 1} - {r[i]})" if geo.flip else r[i]
        w_off.append(f"{fr} * {geo.w_strides[2 + i]}")
    return lines


def dgrad_tap_lines(
    geo: ConvGeometry, dy_strides, ind: str, valid: list, a_off: list, w_off: list
) -> list:
    """For tap (r_0, ..) of dx pixels (o_0, ..): the dy coordinates q_i = (o_i + pre_i -
    r_i*dil_i) / stride_i the tap reads. Appends each axis's check (the division exact, q_i
    inside dy) to ``valid`` and its dy / w offsets (filter flipped in CONVOLUTION mode)."""
    lines = []
    for i in range(len(geo.filt)):
        lines.append(f"{ind}num{i} = o{i} + {geo.pre[i]} - r{i} * {geo.dilation[i]}")
        lines.append(f"{ind}q{i} = num{i} // {geo.stride[i]}")
        if geo.stride[i] > 1:
            valid.append(f"(num{i} % {geo.stride[i]} == 0)")
        valid.append(f"(num{i} >= 0) & (q{i} < {geo.out_dims[i]})")
        a_off.append(f"q{i} * {dy_strides[2 + i]}")
        fr = f"({geo.filt[i] - 1} - r{i})" if geo.flip else f"r{i}"
        w_off.append(f"{fr} * {geo.w_strides[2 + i]}")
    return lines


def fprop_source(
    name: str,
    geo: ConvGeometry,
    kn: ConvKnobs,
    *,
    epilogue_params: list[str],
    epilogue_body: str,
    allow_tf32: bool,
    interpret: bool,
    fp32_inputs: bool,
    prologue_body: str = "",
    precomp: bool = False,
    int8: bool = False,
    exact_int: bool = False,
) -> str:
    """``precomp``: read each pixel's base offset and coordinates from table PIX and each
    tap's offsets from table TAP (see ``precomp_tables``) instead of computing them.
    ``int8``: int8 operands, int32 accumulation (exact), float32 into the epilogue --
    float64 with ``exact_int`` (an INT32-compute epilogue: every int32 exact)."""
    d = len(geo.out_dims)
    taps = _prod(geo.filt)
    cb = -(-geo.c_per_group // kn.BLOCK_K)
    ind, ind2 = "    ", "        "
    o = [f"o{i}" for i in range(d)]
    [f"r{i}" for i in range(d)]
    inputs = ["X", "W", "PIX", "TAP"] if precomp else ["X", "W"]
    L = pixel_tile_header(
        name,
        inputs,
        epilogue_params,
        ["BLOCK_M", "BLOCK_N", "BLOCK_K"],
        geo,
        geo.out_dims,
        geo.k_per_group,
        kn,
    )
    xs = geo.x_strides
    if precomp:
        L.append(f"{ind}pix = offs_m * {1 + d}")
        L.append(
            f"{ind}x_row = tl.load(PIX + pix, mask=mask_m, other=0) + g * {geo.c_per_group * xs[1]}"
        )
        for i in range(d):
            L.append(f"{ind}base{i} = tl.load(PIX + pix + {1 + i}, mask=mask_m, other=0)")
    else:
        L.append(f"{ind}x_row = nb * {xs[0]} + g * {geo.c_per_group * xs[1]}")
        for i in range(d):
            L.append(f"{ind}base{i} = {o[i]} * {geo.stride[i]} - {geo.pre[i]}")
    ws = geo.w_strides
    L.append(f"{ind}w_col = (g * {geo.k_per_group} + offs_n) * {ws[0]}")
    L.append(
        f"{ind}acc = tl.full([BLOCK_M, BLOCK_N], 0, tl.int32)"
        if int8
        else f"{ind}acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)"
    )
    L.append(f"{ind}for it in range(0, {taps * cb}):")
    L.append(f"{ind2}t = it // {cb}")
    L.append(f"{ind2}c0 = (it % {cb}) * BLOCK_K")
    valid = ["mask_m"]
    x_off = ["x_row"]
    w_off = []
    if precomp:
        L.append(f"{ind2}tp = t * {2 + d}")
        L.append(f"{ind2}xd = tl.load(TAP + tp)")
        L.append(f"{ind2}wd = tl.load(TAP + tp + 1)")
        x_off.append("xd")
        w_off.append("wd")
        for i in range(d):
            L.append(f"{ind2}h{i} = base{i} + tl.load(TAP + tp + {2 + i})")
            valid.append(f"(h{i} >= 0) & (h{i} < {geo.in_dims[i]})")
    else:
        L += tap_lines(geo, ind2, valid, x_off, w_off)
    L.append(f"{ind2}valid = " + " & ".join(valid))
    L.append(f"{ind2}cc = c0 + tl.arange(0, BLOCK_K)")
    L.append(f"{ind2}mask_c = cc < {geo.c_per_group}")
    L.append(
        f"{ind2}a = tl.load(X + ({' + '.join(x_off)})[:, None] + (cc * {xs[1]})[None, :], "
        f"mask=valid[:, None] & mask_c[None, :], other=0.0)"
    )
    for line in prologue_body.strip("\n").split("\n") if prologue_body else []:
        L.append(ind2 + line)
    L.append(
        f"{ind2}b = tl.load(W + w_col[None, :] + (cc * {ws[1]})[:, None] + "
        f"{' + '.join(w_off)}, mask=mask_c[:, None] & mask_n[None, :], other=0.0)"
    )
    if int8:
        # per step |sum| <= BLOCK_K * 128^2 < 2^24: the interpreter's float32 dot is exact
        L.append(
            ind2
            + (
                "acc += tl.dot(a.to(tl.float32), b.to(tl.float32), "
                "input_precision='ieee').to(tl.int32)"
                if interpret
                else "acc += tl.dot(a, b, out_dtype=tl.int32)"
            )
        )
        L.append(f"{ind}acc = acc.to({'tl.float64' if exact_int else 'tl.float32'})")
    else:
        L.append(ind2 + _dot_line(allow_tf32, interpret, fp32_inputs))
    for line in epilogue_body.strip("\n").split("\n"):
        L.append(ind + line)
    return "\n".join(L) + "\n"


def precomp_tables(geo: ConvGeometry):
    """(PIX, TAP) as int64 NumPy arrays: per output pixel m its x offset
    nb*s_n + sum_i base_i*s_i and coordinates base_i = o_i*stride_i - pre_i; per filter tap
    the x offset sum_i r_i*dil_i*s_i, the w offset (flipped in CONVOLUTION mode) and the
    coordinate steps r_i*dil_i."""
    import itertools

    import numpy as np

    d = len(geo.out_dims)
    xs, ws = geo.x_strides, geo.w_strides
    idx = np.indices([geo.n] + list(geo.out_dims)).reshape(d + 1, -1)
    base = [idx[1 + i] * geo.stride[i] - geo.pre[i] for i in range(d)]
    pix = np.stack([idx[0] * xs[0] + sum(b * xs[2 + i] for i, b in enumerate(base))] + base, 1)
    taps = []
    for r in itertools.product(*[range(f) for f in geo.filt]):
        fr = [geo.filt[i] - 1 - r[i] if geo.flip else r[i] for i in range(d)]
        taps.append(
            [
                sum(r[i] * geo.dilation[i] * xs[2 + i] for i in range(d)),
                sum(fr[i] * ws[2 + i] for i in range(d)),
            ]
            + [r[i] * geo.dilation[i] for i in range(d)]
        )
    return pix.astype(np.int64).reshape(-1), np.asarray(taps, dtype=np.int64).reshape(-1)


def grid(geo: ConvGeometry, kn: ConvKnobs) -> tuple:
    m_total = geo.n
    for o in geo.out_dims:
        m_total *= o
    return (-(-m_total // kn.BLOCK_M) * -(-geo.k_per_group // kn.BLOCK_N), geo.groups)


def estimate_seconds(
    geo: ConvGeometry,
    kn: ConvKnobs,
    dtype_bytes: int,
    peak_flops: float,
    bandwidth: float,
    num_sms: int,
    loop: bool = True,
    step_scale: float = 1.0,
) -> float:
    """Roofline with tile quantization: padded tiles do useless work, and the last wave of
    programs may leave SMs idle; with ``loop``, the main loop's steps are a third bound
    (``loop_seconds``, each step ``step_scale`` times its usual cost); the binding bound
    plus a tenth of the others."""
    m_total = geo.n
    for o in geo.out_dims:
        m_total *= o
    taps = 1
    for f in geo.filt:
        taps *= f
    k_gemm = taps * geo.c_per_group
    tiles_m, tiles_n = -(-m_total // kn.BLOCK_M), -(-geo.k_per_group // kn.BLOCK_N)
    padded_k = taps * -(-geo.c_per_group // kn.BLOCK_K) * kn.BLOCK_K
    flops = 2.0 * tiles_m * kn.BLOCK_M * tiles_n * kn.BLOCK_N * padded_k * geo.groups
    programs = tiles_m * tiles_n * geo.groups
    waves = -(-programs // num_sms)
    fill = programs / (waves * num_sms)
    bytes_ = dtype_bytes * (
        m_total * geo.c_per_group * geo.groups
        + geo.k_per_group * k_gemm * geo.groups
        + m_total * geo.k_per_group * geo.groups
    )
    small_tile = 0.6 if kn.BLOCK_M * kn.BLOCK_N < 64 * 64 else 0.85
    compute = flops / (peak_flops * small_tile * max(fill, 1e-3))
    memory = bytes_ / bandwidth
    if not loop:
        return combine_bounds(compute, memory)
    steps = programs * taps * -(-geo.c_per_group // kn.BLOCK_K)
    tile = (kn.BLOCK_M + kn.BLOCK_N) * kn.BLOCK_K * dtype_bytes
    return combine_bounds(compute, memory, loop_seconds(steps, programs, tile, num_sms, step_scale))


# One main-loop step of a gather program (address math, masked loads, dot) costs the SM
# about STEP_FIXED + STEP_PER_BYTE per byte of its two operand tiles when enough programs
# share the SM to hide latency; a program alone waits STEP_LATENCY per step (its loads
# depend on the previous step's buffers), and about RESIDENT programs overlap per SM.
# Fitted on the H100 to grouped ResNeXt layers (32x32x16 to 128x128x32 tiles: 75-200 ns a
# step at 4+ programs per SM) and the one-program-per-tap backward filter (0.3-0.5 us a
# step at 2 programs per SM); see docs/design/conv.md, "How engines and configs are chosen".
STEP_FIXED = 45e-9
STEP_PER_BYTE = 30e-9 / 4096
STEP_LATENCY = 500e-9
RESIDENT = 4
# TF32 tensor cores read both operands K-major (the reduction axis contiguous); a float32
# operand stored the other way round (NCHW x in the forward, NHWC x in the backward
# filter) is transposed on its way to shared memory, and a step cost 1.6-2.1 us on the
# H100 (ResNet-50's 1x1 layers in NCHW, 128x128x32 and 64x64x64 tiles) against the 0.3 us
# of the same bytes in half precision
TF32_TRANSPOSED_STEP = 6.0


def loop_seconds(
    steps: int, programs: int, tile_bytes: int, num_sms: int, step_scale: float = 1.0
) -> float:
    """Time of ``steps`` main-loop steps spread over ``programs`` programs on ``num_sms``
    SMs, each step moving ``tile_bytes`` of operand tiles (see STEP_FIXED) at
    ``step_scale`` times the usual cost."""
    busy = (STEP_FIXED + STEP_PER_BYTE * tile_bytes) * step_scale
    if programs < num_sms:  # one program on each of ``programs`` SMs, the rest idle
        return steps / max(programs, 1) * max(busy, STEP_LATENCY)
    resident = min(programs / num_sms, RESIDENT)
    return steps / num_sms * max(busy, STEP_LATENCY / resident)


def combine_bounds(*bounds: float) -> float:
    """The binding bound plus a tenth of the others (they never overlap perfectly: a
    memory-bound layer then prefers the tiles that pad least -- 1x1 dgrad with C = 64 on
    128-wide tiles: 9.8 us against 7.0-7.4 us for 64-wide ones, which tied before), plus
    a launch."""
    top = max(bounds)
    return top + 0.1 * (sum(bounds) - top) + 4e-6


# ---- backward data -------------------------------------------------------------------------
def dgrad_source(
    name: str,
    geo: ConvGeometry,
    kn: ConvKnobs,
    *,
    dy_strides: tuple,
    epilogue_params: list[str],
    epilogue_body: str,
    allow_tf32: bool,
    interpret: bool,
    fp32_inputs: bool,
) -> str:
    """dx as an implicit GEMM over dx's pixels (see the module docstring):

    M = N * prod(in), N_gemm = C/G, K_gemm = prod(filt) * K/G
    A[m, (t, k)] = dy[n, g*K/G + k, o],  o_i = (i_i + pre_i - r_i*dil_i) / stride_i
                   (0 unless that division is exact and o_i is inside dy)
    B[(t, k), c] = w[g*K/G + k, c, r]
    """
    d = len(geo.in_dims)
    geo.n * _prod(geo.in_dims)
    taps = _prod(geo.filt)
    kb = -(-geo.k_per_group // kn.BLOCK_K)
    ind, ind2 = "    ", "        "
    r = [f"r{i}" for i in range(d)]
    L = pixel_tile_header(
        name,
        ["DY", "W"],
        epilogue_params,
        ["BLOCK_M", "BLOCK_N", "BLOCK_K"],
        geo,
        geo.in_dims,
        geo.c_per_group,
        kn,
    )
    ds, ws = dy_strides, geo.w_strides
    L.append(f"{ind}dy_row = nb * {ds[0]} + g * {geo.k_per_group * ds[1]}")
    L.append(f"{ind}w_col = offs_n * {ws[1]}")  # the filter's C axis is per group already
    L.append(f"{ind}acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)")
    L.append(f"{ind}for it in range(0, {taps * kb}):")
    L.append(f"{ind2}t = it // {kb}")
    L.append(f"{ind2}k0 = (it % {kb}) * BLOCK_K")
    L += _div_chain("t", list(geo.filt), r, ind2, "_qt")
    valid, a_off, w_off = ["mask_m"], ["dy_row"], []
    L += dgrad_tap_lines(geo, ds, ind2, valid, a_off, w_off)
    L += _dgrad_step_lines(geo, ds, valid, a_off, w_off, clamp=False)
    L.append(ind2 + _dot_line(allow_tf32, interpret, fp32_inputs))
    for line in epilogue_body.strip("\n").split("\n"):
        L.append(ind + line)
    return "\n".join(L) + "\n"


def _dgrad_step_lines(geo, ds, valid: list, a_off: list, w_off: list, clamp: bool) -> list:
    """A backward-data step's loads: the [BLOCK_M, BLOCK_K] dy slab of the tap (rows where
    ``valid`` fails are zeros; ``clamp`` also points them at element 0) and the
    [BLOCK_K, BLOCK_N] filter slab; ``w_col`` and ``k0`` come from the caller."""
    ind2 = "        "
    rows = f"({' + '.join(a_off)})[:, None]"
    if clamp:
        rows = f"tl.where(valid[:, None], {rows}, 0)"
    ws = geo.w_strides
    return [
        f"{ind2}valid = " + " & ".join(valid),
        f"{ind2}kk = k0 + tl.arange(0, BLOCK_K)",
        f"{ind2}mask_k = kk < {geo.k_per_group}",
        f"{ind2}a = tl.load(DY + {rows} + (kk * {ds[1]})[None, :], "
        "mask=valid[:, None] & mask_k[None, :], other=0.0)",
        f"{ind2}b = tl.load(W + w_col[None, :] + ((g * {geo.k_per_group} + kk) * {ws[0]})"
        f"[:, None] + {' + '.join(w_off)}, mask=mask_k[:, None] & mask_n[None, :], "
        "other=0.0)",
    ]


def dgrad_grid(geo: ConvGeometry, kn: ConvKnobs, phases: bool = False) -> tuple:
    if phases:
        return (
            -(-geo.n * _prod(phase_dims(geo)) // kn.BLOCK_M) * -(-geo.c_per_group // kn.BLOCK_N),
            geo.groups * _prod(geo.stride),
        )
    return (
        -(-geo.n * _prod(geo.in_dims) // kn.BLOCK_M) * -(-geo.c_per_group // kn.BLOCK_N),
        geo.groups,
    )


# ---- backward data by stride phases -------------------------------------------------------
def phase_dims(geo: ConvGeometry) -> tuple:
    """dx pixels per stride phase along each axis (the largest phase: ceil(in / s))."""
    return tuple(-(-i // s) for i, s in zip(geo.in_dims, geo.stride))


def phase_taps(geo: ConvGeometry) -> tuple:
    """Taps a phase walks per axis: ceil(R / s) on a strided axis, R otherwise."""
    return tuple(-(-f // s) if s > 1 else f for f, s in zip(geo.filt, geo.stride))


def phases_reason(geo: ConvGeometry) -> str | None:
    """Why the stride-phase backward data cannot take ``geo`` (None: it can)."""
    if all(s == 1 for s in geo.stride):
        return "stride 1: one phase, the plain backward data"
    if any(s > 1 and d != 1 for s, d in zip(geo.stride, geo.dilation)):
        return "dilation on a strided axis: the phases' taps are not an arithmetic run"
    return None


def dgrad_phase_source(
    name: str,
    geo: ConvGeometry,
    kn: ConvKnobs,
    *,
    dy_strides: tuple,
    epilogue_params: list[str],
    epilogue_body: str,
    allow_tf32: bool,
    interpret: bool,
    fp32_inputs: bool,
) -> str:
    """dx by stride phases (``dgrad_source``'s GEMM, split by dx pixel parity). Along a
    strided axis write a dx coordinate i = s*j + a (phase a in [0, s)); tap r reaches it
    only when (a + pre - r) % s == 0, i.e. for r = ra + s*u with ra = (a + pre) % s and
    u = 0 .. ceil(R / s) - 1 (r < R), and then reads dy at q = j + (a + pre - ra) / s - u.
    Program axis 1 is (group, phase); the tile is the phase's dx pixels (n, j_0, ..), and
    each walks ceil(R/s) taps per strided axis instead of R, of which the plain kernel
    finds only 1/s useful. Axes of stride 1 keep q = i + pre - r*dil over all R taps."""
    d = len(geo.in_dims)
    strided = [s > 1 for s in geo.stride]
    taps = phase_taps(geo)
    kb = -(-geo.k_per_group // kn.BLOCK_K)
    ind, ind2 = "    ", "        "
    L = pixel_tile_header(
        name,
        ["DY", "W"],
        epilogue_params,
        ["BLOCK_M", "BLOCK_N", "BLOCK_K"],
        geo,
        phase_dims(geo),
        geo.c_per_group,
        kn,
    )
    nph = _prod(geo.stride)
    L += [f"{ind}ph = g % {nph}", f"{ind}g = g // {nph}"]
    L += _div_chain("ph", list(geo.stride), [f"a{i}" for i in range(d)], ind, "_qph")
    for i in range(d):
        s_, pre = geo.stride[i], geo.pre[i]
        L.append(f"{ind}j{i} = o{i}")
        if strided[i]:
            L += [
                f"{ind}o{i} = j{i} * {s_} + a{i}",
                f"{ind}ra{i} = (a{i} + {pre}) % {s_}",
                f"{ind}qb{i} = (a{i} + {pre} - ra{i}) // {s_}",
            ]
        L.append(f"{ind}mask_m = mask_m & (o{i} < {geo.in_dims[i]})")
    ds, ws = dy_strides, geo.w_strides
    L.append(f"{ind}dy_row = nb * {ds[0]} + g * {geo.k_per_group * ds[1]}")
    L.append(f"{ind}w_col = offs_n * {ws[1]}")
    L.append(f"{ind}acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)")
    L.append(f"{ind}for it in range(0, {_prod(taps) * kb}):")
    L.append(f"{ind2}t = it // {kb}")
    L.append(f"{ind2}k0 = (it % {kb}) * BLOCK_K")
    L += _div_chain("t", list(taps), [f"u{i}" for i in range(d)], ind2, "_qt")
    valid, a_off, w_off = ["mask_m"], ["dy_row"], []
    for i in range(d):
        f = geo.filt[i]
        if strided[i]:
            L += [
                f"{ind2}r{i} = ra{i} + u{i} * {geo.stride[i]}",
                f"{ind2}q{i} = j{i} + qb{i} - u{i}",
                # a phase's last tap can fall past the filter: masked, addressed in bounds
                f"{ind2}rc{i} = tl.minimum(r{i}, {f - 1})",
            ]
            valid.append(f"(r{i} < {f}) & (q{i} >= 0) & (q{i} < {geo.out_dims[i]})")
        else:
            L += [
                f"{ind2}r{i} = u{i}",
                f"{ind2}q{i} = o{i} + {geo.pre[i]} - r{i} * {geo.dilation[i]}",
                f"{ind2}rc{i} = r{i}",
            ]
            valid.append(f"(q{i} >= 0) & (q{i} < {geo.out_dims[i]})")
        a_off.append(f"q{i} * {ds[2 + i]}")
        fr = f"({f - 1} - rc{i})" if geo.flip else f"rc{i}"
        w_off.append(f"{fr} * {ws[2 + i]}")
    L += _dgrad_step_lines(geo, ds, valid, a_off, w_off, clamp=True)
    L.append(ind2 + _dot_line(allow_tf32, interpret, fp32_inputs))
    for line in epilogue_body.strip("\n").split("\n"):
        L.append(ind + line)
    return "\n".join(L) + "\n"


# ---- backward filter -----------------------------------------------------------------------
def wgrad_source(
    name: str,
    geo: ConvGeometry,
    kn: ConvKnobs,
    *,
    dy_strides: tuple,
    epilogue_params: list[str],
    epilogue_body: str,
    allow_tf32: bool,
    interpret: bool,
    fp32_inputs: bool,
    split: int = 1,
) -> str:
    """dw per filter tap as a GEMM over the output pixels (deterministic: each dw element
    is summed by one program in a fixed order):

        M = K/G, N_gemm = C/G, K_gemm = N * prod(out)   (one program per tap and tile)
        A[k, (n, o)] = dy[n, g*K/G + k, o]
        B[(n, o), c] = x[n, g*C/G + c, o*stride - pre + r*dil]   (0 in the padding)
    """
    d = len(geo.out_dims)
    p_total = geo.n * _prod(geo.out_dims)
    i64 = ".to(tl.int64)" if geo.int64 else ""
    ind, ind2 = "    ", "        "
    o = [f"o{i}" for i in range(d)]
    r = [f"r{i}" for i in range(d)]
    sig = (
        ["X", "DY"]
        + epilogue_params
        + ["BLOCK_M: tl.constexpr", "BLOCK_N: tl.constexpr", "BLOCK_K: tl.constexpr"]
    )
    tiles_n = -(-geo.c_per_group // kn.BLOCK_N)
    L = [
        "@triton.jit",
        f"def {name}({', '.join(sig)}):",
        f"{ind}pid = tl.program_id(0)",
        f"{ind}t = tl.program_id(1)",
        f"{ind}g = tl.program_id(2){i64}",
        f"{ind}pid_m = pid // {tiles_n}",
        f"{ind}pid_n = pid % {tiles_n}",
        f"{ind}offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        f"{ind}mask_m = offs_m < {geo.k_per_group}",
        f"{ind}offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        f"{ind}mask_n = offs_n < {geo.c_per_group}",
    ]
    L += _div_chain("t", list(geo.filt), r, ind, "_qt")
    ds, xs = dy_strides, geo.x_strides
    L.append(f"{ind}dy_k = (g * {geo.k_per_group} + offs_m) * {ds[1]}")
    L.append(f"{ind}x_c = (g * {geo.c_per_group} + offs_n) * {xs[1]}")
    L.append(f"{ind}acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)")
    if split > 1:  # this program's slice of the pixels (programs along axis 0 by split)
        chunk = -(-(-(-p_total // split)) // kn.BLOCK_K) * kn.BLOCK_K
        L.append(f"{ind}sp = pid % {split}")
        L.append(f"{ind}pid = pid // {split}")
        L.append(f"{ind}pid_m = pid // {tiles_n}")
        L.append(f"{ind}pid_n = pid % {tiles_n}")
        L.append(f"{ind}offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)")
        L.append(f"{ind}mask_m = offs_m < {geo.k_per_group}")
        L.append(f"{ind}offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)")
        L.append(f"{ind}mask_n = offs_n < {geo.c_per_group}")
        L.append(f"{ind}dy_k = (g * {geo.k_per_group} + offs_m) * {ds[1]}")
        L.append(f"{ind}x_c = (g * {geo.c_per_group} + offs_n) * {xs[1]}")
        L.append(f"{ind}for p0 in range(sp * {chunk}, sp * {chunk} + {chunk}, BLOCK_K):")
    else:
        L.append(f"{ind}for p0 in range(0, {p_total}, BLOCK_K):")
    L += index_split(
        "pp",
        "p0 + tl.arange(0, BLOCK_K)",
        p_total + 1024,
        [geo.n] + list(geo.out_dims),
        ["nb"] + o,
        ind2,
        "_qp",
        geo.int64,
    )
    L.append(f"{ind2}mask_p = pp < {p_total}")
    valid, b_off, a_off = ["mask_p"], [f"nb * {xs[0]}"], [f"nb * {ds[0]}"]
    for i in range(d):
        L.append(
            f"{ind2}h{i} = {o[i]} * {geo.stride[i]} - {geo.pre[i]} + {r[i]} * {geo.dilation[i]}"
        )
        valid.append(f"(h{i} >= 0) & (h{i} < {geo.in_dims[i]})")
        b_off.append(f"h{i} * {xs[2 + i]}")
        a_off.append(f"{o[i]} * {ds[2 + i]}")
    L.append(f"{ind2}valid = " + " & ".join(valid))
    L.append(
        f"{ind2}a = tl.load(DY + dy_k[:, None] + ({' + '.join(a_off)})[None, :], "
        f"mask=mask_m[:, None] & mask_p[None, :], other=0.0)"
    )
    L.append(
        f"{ind2}b = tl.load(X + ({' + '.join(b_off)})[:, None] + x_c[None, :], "
        f"mask=valid[:, None] & mask_n[None, :], other=0.0)"
    )
    L.append(ind2 + _dot_line(allow_tf32, interpret, fp32_inputs))
    for line in epilogue_body.strip("\n").split("\n"):
        L.append(ind + line)
    return "\n".join(L) + "\n"


def wgrad_grid(geo: ConvGeometry, kn: ConvKnobs) -> tuple:
    return (
        -(-geo.k_per_group // kn.BLOCK_M) * -(-geo.c_per_group // kn.BLOCK_N),
        _prod(geo.filt),
        geo.groups,
    )


def _dot_line(allow_tf32: bool, interpret: bool, fp32_inputs: bool) -> str:
    if interpret:  # the 3.6 interpreter's dot is wrong on bfloat16: widen there only
        return "acc += tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision='ieee')"
    if fp32_inputs:
        return f"acc += tl.dot(a, b, input_precision='{'tf32' if allow_tf32 else 'ieee'}')"
    return "acc += tl.dot(a, b)"


def _prod(v) -> int:
    out = 1
    for a in v:
        out *= a
    return out


# ---- the finishing sum of split partials ---------------------------------------------------
def chunk_sum_lines(acc: str, base: str, n_out: int, split: int, ind: str = "    ") -> list[str]:
    """Lines summing WS[base + s * n_out + e] over s < ``split`` into float32 ``acc`` for
    the program's elements ``e`` (``mask``: e < n_out), CHUNK slices per step as one
    [CHUNK, BLOCK] tile reduced across the slices -- not a serial walk of ``split``
    dependent loads (144 elements of 256 slices: 47 us one slice at a time, against 15 us
    for the kernel that wrote them). Deterministic: fixed chunks, a fixed reduction tree,
    chunks summed in order. Needs ``COMBINE_HELPERS`` in the module."""
    ind2 = ind + "    "
    return [
        f"{ind}{acc} = tl.full([BLOCK], 0.0, tl.float32)",
        f"{ind}for s0 in range(0, {split}, CHUNK):",
        f"{ind2}ss = s0 + tl.arange(0, CHUNK)",
        f"{ind2}v = tl.load(WS + {base} + (ss * {n_out})[:, None] + e[None, :], "
        f"mask=(ss < {split})[:, None] & mask[None, :], other=0.0)",
        f"{ind2}{acc} += tl.reduce(v, 0, _add_combine)",
    ]


def split_sum_head(name: str, n_out: int, split: int) -> list[str]:
    """The opening lines of ``{name}_finish(WS, DW, BLOCK, CHUNK)``: element e < ``n_out``
    of the result sums its ``split`` float32 partials WS[s, e] into ``acc``
    (``chunk_sum_lines``), with ``e`` and ``mask`` defined for the caller's store."""
    ind = "    "
    return [
        COMBINE_HELPERS,
        "@triton.jit",
        f"def {name}_finish(WS, DW, BLOCK: tl.constexpr, CHUNK: tl.constexpr):",
        f"{ind}e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
        f"{ind}mask = e < {n_out}",
    ] + chunk_sum_lines("acc", "0", n_out, split)


def split_sum_launch(n_out: int, split: int, num_sms: int = 132) -> tuple[tuple, dict]:
    """(grid, constexprs) of a ``chunk_sum_lines`` kernel: CHUNK up to 32 slices, BLOCK
    elements sized to give about one program per SM (at least 32, at most a 4096-element
    tile)."""
    chunk = min(32, 1 << max(0, (split - 1).bit_length()))
    want = 1 << max(0, (-(-n_out // max(num_sms, 1)) - 1).bit_length())
    block = max(32, min(want, 4096 // chunk))
    return (-(-n_out // block),), {"BLOCK": block, "CHUNK": chunk, "num_warps": 4}
