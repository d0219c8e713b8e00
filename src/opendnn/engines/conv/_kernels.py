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


@dataclasses.dataclass(frozen=True)
class ConvKnobs:
    BLOCK_M: int = 128
    BLOCK_N: int = 64
    BLOCK_K: int = 32
    num_warps: int = 4
    num_stages: int = 3


def knob_space() -> list[ConvKnobs]:
    out = []
    for bm, bn, bk, w, st in [(128, 128, 64, 8, 3), (128, 64, 64, 4, 4), (128, 128, 32, 8, 4),
                              (64, 128, 64, 4, 4), (128, 64, 32, 4, 3), (64, 64, 64, 4, 3),
                              (64, 32, 32, 4, 2), (32, 32, 16, 4, 2), (256, 128, 64, 8, 3),
                              (128, 256, 64, 8, 3)]:
        out.append(ConvKnobs(bm, bn, bk, w, st))
    return out


@dataclasses.dataclass(frozen=True)
class ConvGeometry:
    """Everything the kernel bakes in (element strides, sizes, padding...)."""
    n: int
    c_per_group: int
    k_per_group: int
    groups: int
    in_dims: tuple
    out_dims: tuple
    filt: tuple
    pre: tuple
    stride: tuple
    dilation: tuple
    flip: bool
    x_strides: tuple      # (n, c, spatial...)
    w_strides: tuple      # (k, c, spatial...)
    int64: bool


def _div_chain(var: str, sizes: list, names: list, ind: str, tmp: str) -> list[str]:
    """Row-major split of ``var`` over ``sizes`` into ``names`` (outermost first).
    ``tmp`` must be unique per use: Triton rejects a name that changes type in a loop."""
    lines = [f"{ind}{tmp} = {var}"]
    for name, size in zip(reversed(names[1:]), reversed(sizes[1:])):
        lines.append(f"{ind}{name} = {tmp} % {size}")
        lines.append(f"{ind}{tmp} = {tmp} // {size}")
    lines.append(f"{ind}{names[0]} = {tmp}")
    return lines


def fprop_source(name: str, geo: ConvGeometry, kn: ConvKnobs, *, epilogue_params: list[str],
                 epilogue_body: str, allow_tf32: bool, interpret: bool, fp32_inputs: bool) -> str:
    d = len(geo.out_dims)
    m_total = geo.n
    for o in geo.out_dims:
        m_total *= o
    taps = 1
    for f in geo.filt:
        taps *= f
    cb = -(-geo.c_per_group // kn.BLOCK_K)
    i64 = ".to(tl.int64)" if geo.int64 else ""
    ind, ind2 = "    ", "        "
    o = [f"o{i}" for i in range(d)]
    r = [f"r{i}" for i in range(d)]
    sig = ["X", "W"] + epilogue_params + ["BLOCK_M: tl.constexpr", "BLOCK_N: tl.constexpr",
                                           "BLOCK_K: tl.constexpr"]
    L = ["@triton.jit", f"def {name}({', '.join(sig)}):",
         f"{ind}pid = tl.program_id(0)",
         f"{ind}g = tl.program_id(1){i64}",
         f"{ind}num_pid_n = {-(-geo.k_per_group // kn.BLOCK_N)}",
         f"{ind}pid_m = pid // num_pid_n",
         f"{ind}pid_n = pid % num_pid_n",
         f"{ind}offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)){i64}",
         f"{ind}mask_m = offs_m < {m_total}",
         f"{ind}offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
         f"{ind}mask_n = offs_n < {geo.k_per_group}"]
    L += _div_chain("offs_m", [geo.n] + list(geo.out_dims), ["nb"] + o, ind, "_qm")
    xs = geo.x_strides
    L.append(f"{ind}x_row = nb * {xs[0]} + g * {geo.c_per_group * xs[1]}")
    for i in range(d):
        L.append(f"{ind}base{i} = {o[i]} * {geo.stride[i]} - {geo.pre[i]}")
    ws = geo.w_strides
    L.append(f"{ind}w_col = (g * {geo.k_per_group} + offs_n) * {ws[0]}")
    L.append(f"{ind}acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)")
    L.append(f"{ind}for it in range(0, {taps * cb}):")
    L.append(f"{ind2}t = it // {cb}")
    L.append(f"{ind2}c0 = (it % {cb}) * BLOCK_K")
    L += _div_chain("t", list(geo.filt), r, ind2, "_qt")
    valid = ["mask_m"]
    x_off = ["x_row"]
    w_off = []
    for i in range(d):
        L.append(f"{ind2}h{i} = base{i} + {r[i]} * {geo.dilation[i]}")
        valid.append(f"(h{i} >= 0) & (h{i} < {geo.in_dims[i]})")
        x_off.append(f"h{i} * {xs[2 + i]}")
        fr = f"({geo.filt[i] - 1} - {r[i]})" if geo.flip else r[i]
        w_off.append(f"{fr} * {ws[2 + i]}")
    L.append(f"{ind2}valid = " + " & ".join(valid))
    L.append(f"{ind2}cc = c0 + tl.arange(0, BLOCK_K)")
    L.append(f"{ind2}mask_c = cc < {geo.c_per_group}")
    L.append(f"{ind2}a = tl.load(X + ({' + '.join(x_off)})[:, None] + (cc * {xs[1]})[None, :], "
             f"mask=valid[:, None] & mask_c[None, :], other=0.0)")
    L.append(f"{ind2}b = tl.load(W + w_col[None, :] + (cc * {ws[1]})[:, None] + "
             f"{' + '.join(w_off)}, mask=mask_c[:, None] & mask_n[None, :], other=0.0)")
    if interpret:   # the 3.6 interpreter's dot is wrong on bfloat16: widen there only
        L.append(f"{ind2}acc += tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision='ieee')")
    elif fp32_inputs:
        prec = "tf32" if allow_tf32 else "ieee"
        L.append(f"{ind2}acc += tl.dot(a, b, input_precision='{prec}')")
    else:
        L.append(f"{ind2}acc += tl.dot(a, b)")
    for line in epilogue_body.strip("\n").split("\n"):
        L.append(ind + line)
    return "\n".join(L) + "\n"


def grid(geo: ConvGeometry, kn: ConvKnobs) -> tuple:
    m_total = geo.n
    for o in geo.out_dims:
        m_total *= o
    return (-(-m_total // kn.BLOCK_M) * -(-geo.k_per_group // kn.BLOCK_N), geo.groups)


def estimate_seconds(geo: ConvGeometry, kn: ConvKnobs, dtype_bytes: int, peak_flops: float,
                     bandwidth: float, num_sms: int) -> float:
    """Roofline with tile quantization: padded tiles do useless work, and the last wave of
    programs may leave SMs idle."""
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
    bytes_ = dtype_bytes * (m_total * geo.c_per_group * geo.groups +
                            geo.k_per_group * k_gemm * geo.groups +
                            m_total * geo.k_per_group * geo.groups)
    small_tile = 0.6 if kn.BLOCK_M * kn.BLOCK_N < 64 * 64 else 0.85
    return max(flops / (peak_flops * small_tile * max(fill, 1e-3)), bytes_ / bandwidth) + 4e-6
