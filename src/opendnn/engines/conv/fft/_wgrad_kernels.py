"""Triton source of the FFT backward-filter engines' one new stage (the algorithm is in
``fft_wgrad.py``; the transforms are the forward's, from ``_fft_kernels``).

The per-bin GEMM of the forward reduces over channels, the contiguous last axis of both
spectra. The filter gradient reduces over the planes (images, or image tiles) instead,
the middle axis of both spectra, and produces a K x C matrix per bin:

    DW[f, k, c] = sum_p conj(D[f, p, k]) X[f, p, c]

    (dr - i di)(xr + i xi) = (dr xr + di xi) + i (dr xi - di xr)

so the operand tiles are D_f^T [BLOCK_M (k), BLOCK_P (p)] and X_f [BLOCK_P, BLOCK_N (c)].
The planes come in chunks; each chunk's launch adds its partial product to DW in place
(ACC), in chunk order, so the result does not depend on scheduling (no atomics).
"""

from __future__ import annotations


def wgrad_gemm_source(
    name: str, bins: int, p: int, k: int, c: int, blocks: tuple, interpret: bool
) -> str:
    """Kernel (D, X, DW, ACC: constexpr): per frequency bin f, DW_f (+)= D_f^H X_f, complex.

    D:  float32 [2][bins, p, k]   dy spectra of one chunk of p planes
    X:  float32 [2][bins, p, c]   x spectra of the same planes
    DW: float32 [2][bins, k, c]   overwritten (ACC 0, the first chunk) or added to (ACC 1)
    blocks: (BLOCK_M, BLOCK_N, BLOCK_P), each >= 16 (tensor-core dots)
    grid: (bins, cdiv(k, BLOCK_M) * cdiv(c, BLOCK_N))

    Compiled, the four real products per step are 3xTF32 tensor-core dots (float32-
    accurate); the interpreter multiplies in float32 directly."""
    prec = "" if interpret else ', input_precision="tf32x3"'
    bm, bn, bp = blocks
    return f"""@triton.jit
def {name}(D, X, DW, ACC: tl.constexpr):
    BLOCK_M: tl.constexpr = {bm}
    BLOCK_N: tl.constexpr = {bn}
    BLOCK_P: tl.constexpr = {bp}
    f = tl.program_id(0).to(tl.int64)
    pid = tl.program_id(1)
    num_n = {-(-c // bn)}
    offs_m = (pid // num_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = (pid % num_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_p = tl.arange(0, BLOCK_P)
    mask_m = offs_m < {k}
    mask_n = offs_n < {c}
    d_base = D + f * {p * k} + offs_m[:, None]
    x_base = X + f * {p * c} + offs_n[None, :]
    acc_r = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)
    acc_i = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)
    for p0 in range(0, {p}, BLOCK_P):
        pp = p0 + offs_p
        dm = mask_m[:, None] & (pp[None, :] < {p})
        xm = (pp[:, None] < {p}) & mask_n[None, :]
        dr = tl.load(d_base + pp[None, :] * {k}, mask=dm, other=0.0)
        di = tl.load(d_base + {bins * p * k} + pp[None, :] * {k}, mask=dm, other=0.0)
        xr = tl.load(x_base + pp[:, None] * {c}, mask=xm, other=0.0)
        xi = tl.load(x_base + {bins * p * c} + pp[:, None] * {c}, mask=xm, other=0.0)
        acc_r = tl.dot(dr, xr, acc_r{prec})
        acc_r = tl.dot(di, xi, acc_r{prec})
        acc_i = tl.dot(dr, xi, acc_i{prec})
        acc_i = tl.dot(-di, xr, acc_i{prec})
    dst = f * {k * c} + offs_m[:, None] * {c} + offs_n[None, :]
    om = mask_m[:, None] & mask_n[None, :]
    if ACC:
        acc_r += tl.load(DW + dst, mask=om, other=0.0)
        acc_i += tl.load(DW + {bins * k * c} + dst, mask=om, other=0.0)
    tl.store(DW + dst, acc_r, mask=om)
    tl.store(DW + {bins * k * c} + dst, acc_i, mask=om)
"""


__all__ = ["wgrad_gemm_source"]
