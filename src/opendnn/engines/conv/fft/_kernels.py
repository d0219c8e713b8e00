"""Triton sources of the FFT convolution engines (the algorithm is in ``fft.py``).

Every kernel is generated with the problem's sizes and strides baked in and carries its
own copy of ``_dft``, the in-register transform of a batch of rows:

    four-step Cooley-Tukey, n = n1 * n2, input index j = n2*j1 + j2, output k = k1 + n1*k2

    X[k1 + n1 k2] = sum_j2 w_n2^(j2 k2) * [ w_n^(j2 k1) * sum_j1 w_n1^(j1 k1) x[n2 j1 + j2] ]
                          \\ stage 2 /     \\ twiddle /   \\------ stage 1 -------/

with w_m = exp(SIGN * 2 pi i / m). A row lives in registers as an array [B, P1, P2]
(P = the next power of two of n1, n2; the padding lanes are masked to zero), the two
stages are small dense DFT products (a broadcast multiply and a sum over one axis), and
the output comes out in the order k = k1 + n1*k2, so a store scatters it straight to its
place without a transpose. Cost per row: n*(n1 + n2) complex multiply-adds instead of n^2.

Buffers in the workspace are float32, real and imaginary parts in two planes (the
imaginary plane follows the real one at a baked offset).
"""

from __future__ import annotations

import dataclasses

# elements of the largest broadcast product [B, P1, P1, P2] a program may hold
REGISTER_BUDGET = 4096


@dataclasses.dataclass(frozen=True)
class Transform:
    """One axis of the 2-D transform: length n = n1 * n2; p1, p2 the register extents."""

    n: int
    n1: int
    n2: int
    p1: int
    p2: int

    @property
    def flops_per_row(self) -> float:
        """Real float operations of one row as executed (padded lanes included): two dense
        stages of 8 flops per complex multiply-add, and the twiddle multiply."""
        return 8.0 * self.p1 * self.p2 * (self.p1 + self.p2) + 6.0 * self.p1 * self.p2

    def rows_per_program(self, cap: int) -> int:
        """Rows a program transforms at once: a power of two, within the register budget."""
        b = max(1, REGISTER_BUDGET // (self.p1 * self.p2 * max(self.p1, self.p2)))
        b = 1 << (b.bit_length() - 1)
        return max(1, min(b, next_pow2(cap)))


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def _smooth(n: int) -> bool:
    for f in (2, 3, 5):
        while n % f == 0:
            n //= f
    return n == 1


def transform(n: int) -> Transform:
    """The split n = n1 * n2 with the smallest register footprint p1 * p2 (then the most
    balanced one)."""
    best = None
    for n1 in range(1, n + 1):
        if n % n1:
            continue
        n2 = n // n1
        key = (next_pow2(n1) * next_pow2(n2), abs(n1 - n2), -n1)
        if best is None or key < best[0]:
            best = (key, n1, n2)
    _, n1, n2 = best
    return Transform(n, n1, n2, next_pow2(n1), next_pow2(n2))


def smooth_length(m: int) -> Transform:
    """The shortest 2,3,5-smooth transform length >= m, split for the registers."""
    n = max(1, m)
    while not _smooth(n):
        n += 1
    return transform(n)


# tl.sum is a @jit helper that the interpreter cannot call when the process did not start
# under it; tl.reduce with tl.sum's own combine function runs compiled as tl.sum does and,
# interpreted, takes the interpreter's NumPy fast path (np.sum) instead of an element loop.
DFT_SOURCE = '''
@triton.jit
def _dft(ar, ai, N: tl.constexpr, N1: tl.constexpr, N2: tl.constexpr, P1: tl.constexpr,
         P2: tl.constexpr, SIGN: tl.constexpr):
    """Rows [B, P1, P2], element (b, j1, j2) = x_b[N2*j1 + j2] (zero in padding lanes) ->
    (re, im) [B, P1, P2], element (b, k1, k2) = X_b[k1 + N1*k2] (SIGN -1 forward, +1 inverse,
    unnormalized)."""
    u1 = tl.arange(0, P1)
    u2 = tl.arange(0, P2)
    m1 = (u1[:, None] < N1) & (u1[None, :] < N1)
    a1 = ((u1[:, None] * u1[None, :]) % N1).to(tl.float32) * (6.283185307179586 / N1)
    f1r = tl.where(m1, tl.cos(a1), 0.0)[None, :, :, None]
    f1i = tl.where(m1, SIGN * tl.sin(a1), 0.0)[None, :, :, None]
    xr = ar[:, None, :, :]
    xi = ai[:, None, :, :]
    br = tl.reduce(f1r * xr - f1i * xi, 2, tl.standard._sum_combine)
    bi = tl.reduce(f1r * xi + f1i * xr, 2, tl.standard._sum_combine)
    at = ((u1[:, None] * u2[None, :]) % N).to(tl.float32) * (6.283185307179586 / N)
    tr = tl.cos(at)[None, :, :]
    ti = (SIGN * tl.sin(at))[None, :, :]
    ur = (br * tr - bi * ti)[:, :, :, None]
    ui = (br * ti + bi * tr)[:, :, :, None]
    m2 = (u2[:, None] < N2) & (u2[None, :] < N2)
    a2 = ((u2[:, None] * u2[None, :]) % N2).to(tl.float32) * (6.283185307179586 / N2)
    f2r = tl.where(m2, tl.cos(a2), 0.0)[None, None, :, :]
    f2i = tl.where(m2, SIGN * tl.sin(a2), 0.0)[None, None, :, :]
    cr = tl.reduce(ur * f2r - ui * f2i, 2, tl.standard._sum_combine)
    ci = tl.reduce(ur * f2i + ui * f2r, 2, tl.standard._sum_combine)
    return cr, ci

'''


def _dft_args(t: Transform, sign: int) -> str:
    return f"{t.n}, {t.n1}, {t.n2}, {t.p1}, {t.p2}, {sign}"


def _grid_lines(t: Transform, ind: str = "    ") -> list[str]:
    """Index grids of a row in registers: ``j`` the input index N2*j1 + j2, ``k`` the
    output index k1 + N1*k2, ``lane`` the non-padding lanes (all [1, P1, P2])."""
    return [
        f"{ind}u1 = tl.arange(0, {t.p1})[:, None]",
        f"{ind}u2 = tl.arange(0, {t.p2})[None, :]",
        f"{ind}j = ({t.n2} * u1 + u2)[None, :, :]",
        f"{ind}k = (u1 + {t.n1} * u2)[None, :, :]",
        f"{ind}lane = ((u1 < {t.n1}) & (u2 < {t.n2}))[None, :, :]",
    ]


def _row_header(name: str, params: list, rows: int, p0: bool) -> list[str]:
    deco = "@triton.jit(do_not_specialize=['P0'])" if p0 else "@triton.jit"
    return [
        deco,
        f"def {name}({', '.join(params)}, B: tl.constexpr):",
        "    b = (tl.program_id(0) * B + tl.arange(0, B)).to(tl.int64)",
        f"    row_ok = (b < {rows})[:, None, None]",
        "    b3 = b[:, None, None]",
    ]


@dataclasses.dataclass(frozen=True)
class ImageRows:
    """Where the rows of the (tiled) padded image come from.

    Plane p of a chunk is global plane P0 + p = (n, ty, tx) over ``tiles``; its row i,
    element j is x[n, c, ty*out_h - pre_h + i, tx*out_w - pre_w + j] (zero outside x)."""

    channels: int
    rows: int  # rows per plane that may hold data (LH)
    length: int  # elements per row that may hold data
    planes: int  # total planes N * TH * TW (the chunk's last planes may be past it)
    tiles: tuple  # (TH, TW)
    out_tile: tuple  # (OTH, OTW): output rows / cols per tile
    pre: tuple
    in_dims: tuple  # (H, W)
    strides: tuple  # x strides (n, c, h, w)


@dataclasses.dataclass(frozen=True)
class FilterRows:
    """Row i, element j of plane (k, c) is w[k, c, i, j], flipped in CONVOLUTION mode."""

    channels: int
    filt: tuple  # (R, S)
    strides: tuple
    flip: bool


def forward_rows_source(name: str, src, tw: Transform, half: int, rows: int) -> str:
    """Kernel (SRC, OUT[, P0]): the first half (``half`` = n//2 + 1 bins) of the forward
    DFT of each of ``rows`` real rows.

    SRC: the image x or the filter w, any strides, read as float32
    OUT: float32 [2][rows, half]   row b = (plane * C + c) * LH + i, bins in order
    P0:  (image only) the first plane of this chunk
    grid: (cdiv(rows, B),)"""
    image = isinstance(src, ImageRows)
    L = _row_header(name, ["SRC", "OUT"] + (["P0"] if image else []), rows, image)
    L += _grid_lines(tw)
    L.append(f"    i = b3 % {src.rows if image else src.filt[0]}")
    L.append(f"    pc = b3 // {src.rows if image else src.filt[0]}")
    L.append(f"    c = pc % {src.channels}")
    L.append(f"    p = pc // {src.channels}")
    st = src.strides
    if image:
        th, tw_ = src.tiles
        L += [
            "    pg = P0 + p",
            f"    nb = pg // {th * tw_}",
            f"    t = pg % {th * tw_}",
            f"    h = (t // {tw_}) * {src.out_tile[0]} - {src.pre[0]} + i",
            f"    w = (t % {tw_}) * {src.out_tile[1]} - {src.pre[1]} + j",
            f"    ok = row_ok & lane & (j < {src.length}) & (pg < {src.planes}) & (h >= 0) & "
            f"(h < {src.in_dims[0]}) & (w >= 0) & (w < {src.in_dims[1]})",
            f"    off = nb * {st[0]} + c * {st[1]} + h * {st[2]} + w * {st[3]}",
        ]
    else:
        r, s = src.filt
        hi = f"({r - 1} - i)" if src.flip else "i"
        wi = f"({s - 1} - j)" if src.flip else "j"
        L += [
            f"    ok = row_ok & lane & (j < {s})",
            f"    off = p * {st[0]} + c * {st[1]} + {hi} * {st[2]} + {wi} * {st[3]}",
        ]
    L += [
        "    xr = tl.load(SRC + off, mask=ok, other=0.0).to(tl.float32)",
        "    xi = xr * 0.0",
        f"    cr, ci = _dft(xr, xi, {_dft_args(tw, -1)})",
        f"    keep = row_ok & lane & (k < {half})",
        f"    dst = b3 * {half} + k",
        "    tl.store(OUT + dst, cr, mask=keep)",
        f"    tl.store(OUT + {rows * half} + dst, ci, mask=keep)",
    ]
    return DFT_SOURCE + "\n".join(L) + "\n"


def forward_cols_source(name: str, th: Transform, half: int, planes_c: int, in_rows: int) -> str:
    """Kernel (RX, OUT): the column transforms of the row spectra.

    RX:  float32 [2][planes_c, in_rows, half]   (rows past in_rows are zero padding)
    OUT: float32 [2][bins = th.n * half, planes_c]   bin f = kh * half + kw
    grid: (cdiv(planes_c * half, B),)   one program row per (plane, channel, kw)"""
    rows = planes_c * half
    L = _row_header(name, ["RX", "OUT"], rows, False)
    L += _grid_lines(th)
    L += [
        f"    kw = b3 % {half}",
        f"    pc = b3 // {half}",
        f"    ok = row_ok & lane & (j < {in_rows})",
        f"    src = (pc * {in_rows} + j) * {half} + kw",
        "    xr = tl.load(RX + src, mask=ok, other=0.0)",
        f"    xi = tl.load(RX + {planes_c * in_rows * half} + src, mask=ok, other=0.0)",
        f"    cr, ci = _dft(xr, xi, {_dft_args(th, -1)})",
        "    keep = row_ok & lane",
        f"    dst = (k * {half} + kw) * {planes_c} + pc",
        "    tl.store(OUT + dst, cr, mask=keep)",
        f"    tl.store(OUT + {th.n * half * planes_c} + dst, ci, mask=keep)",
    ]
    return DFT_SOURCE + "\n".join(L) + "\n"


def gemm_source(
    name: str, bins: int, p: int, c: int, k: int, blocks: tuple, interpret: bool
) -> str:
    """Kernel (X, W, Y): per frequency bin f, Y_f = X_f @ conj(W_f)^T, complex.

    X: float32 [2][bins, p, c]   W: float32 [2][bins, k, c]   Y: float32 [2][bins, p, k]
    blocks: (BLOCK_M, BLOCK_N, BLOCK_C), each >= 16 (tensor-core dots)
    grid: (bins, cdiv(p, BLOCK_M) * cdiv(k, BLOCK_N))

    (xr + i xi)(wr - i wi) = (xr wr + xi wi) + i (xi wr - xr wi): four real products per
    step. Compiled, the products are 3xTF32 tensor-core dots (float32-accurate); the
    interpreter multiplies in float32 directly."""
    prec = "" if interpret else ', input_precision="tf32x3"'
    bm, bn, bc = blocks
    return f"""@triton.jit
def {name}(X, W, Y):
    BLOCK_M: tl.constexpr = {bm}
    BLOCK_N: tl.constexpr = {bn}
    BLOCK_C: tl.constexpr = {bc}
    f = tl.program_id(0).to(tl.int64)
    pid = tl.program_id(1)
    num_n = {-(-k // bn)}
    offs_m = (pid // num_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = (pid % num_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_c = tl.arange(0, BLOCK_C)
    mask_m = offs_m < {p}
    mask_n = offs_n < {k}
    x_base = X + f * {p * c} + offs_m[:, None] * {c}
    w_base = W + f * {k * c} + offs_n[None, :] * {c}
    acc_r = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)
    acc_i = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)
    for c0 in range(0, {c}, BLOCK_C):
        cc = c0 + offs_c
        xm = mask_m[:, None] & (cc[None, :] < {c})
        wm = (cc[:, None] < {c}) & mask_n[None, :]
        xr = tl.load(x_base + cc[None, :], mask=xm, other=0.0)
        xi = tl.load(x_base + {bins * p * c} + cc[None, :], mask=xm, other=0.0)
        wr = tl.load(w_base + cc[:, None], mask=wm, other=0.0)
        wi = tl.load(w_base + {bins * k * c} + cc[:, None], mask=wm, other=0.0)
        acc_r = tl.dot(xr, wr, acc_r{prec})
        acc_r = tl.dot(xi, wi, acc_r{prec})
        acc_i = tl.dot(xi, wr, acc_i{prec})
        acc_i = tl.dot(-xr, wi, acc_i{prec})
    dst = f * {p * k} + offs_m[:, None] * {k} + offs_n[None, :]
    ym = mask_m[:, None] & mask_n[None, :]
    tl.store(Y + dst, acc_r, mask=ym)
    tl.store(Y + {bins * p * k} + dst, acc_i, mask=ym)
"""


def inverse_cols_source(name: str, th: Transform, half: int, planes_k: int, out_rows: int) -> str:
    """Kernel (Y, OUT): inverse column transforms, keeping the first ``out_rows`` rows.

    Y:   float32 [2][bins, planes_k]
    OUT: float32 [2][planes_k, out_rows, half]
    grid: (cdiv(planes_k * half, B),)"""
    rows = planes_k * half
    L = _row_header(name, ["Y", "OUT"], rows, False)
    L += _grid_lines(th)
    L += [
        f"    kw = b3 % {half}",
        f"    pk = b3 // {half}",
        "    ok = row_ok & lane",
        f"    src = (j * {half} + kw) * {planes_k} + pk",
        "    xr = tl.load(Y + src, mask=ok, other=0.0)",
        f"    xi = tl.load(Y + {th.n * half * planes_k} + src, mask=ok, other=0.0)",
        f"    cr, ci = _dft(xr, xi, {_dft_args(th, 1)})",
        f"    keep = row_ok & lane & (k < {out_rows})",
        f"    dst = (pk * {out_rows} + k) * {half} + kw",
        "    tl.store(OUT + dst, cr, mask=keep)",
        f"    tl.store(OUT + {planes_k * out_rows * half} + dst, ci, mask=keep)",
    ]
    return DFT_SOURCE + "\n".join(L) + "\n"


@dataclasses.dataclass(frozen=True)
class OutputTiles:
    """Output row o0 of plane p (global P0 + p = (n, ty, tx)) is y row ty*out_h + o0,
    its element o1 is y column tx*out_w + o1."""

    k: int
    planes: int  # total planes N * TH * TW
    chunk: int  # planes per pass (RY holds one chunk)
    tiles: tuple
    out_tile: tuple
    out_dims: tuple


def inverse_rows_source(
    name: str,
    tw: Transform,
    half: int,
    scale: float,
    dst: OutputTiles,
    epilogue_params: list,
    epilogue_body: str,
) -> str:
    """Kernel (RY, P0, epilogue...): inverse row transforms of ROWS output rows x BLOCK_N
    channels, rebuilding the upper bins from Hermitian symmetry, X[n - k] = conj(X[k]);
    the real part times ``scale`` goes through the fused epilogue as one tile
    acc[pixels = ROWS * P2 * P1, channels = BLOCK_N].

    RY: float32 [2][chunk planes, K, out_h, half]   (output row q = plane * out_h + o0)
    grid: (cdiv(chunk planes * out_h, ROWS), cdiv(K, BLOCK_N))"""
    oth, otw = dst.out_tile
    th, tw_ = dst.tiles
    row = tw.p1 * tw.p2
    q_total = dst.chunk * oth
    L = [
        "@triton.jit(do_not_specialize=['P0'])",
        f"def {name}({', '.join(['RY', 'P0'] + epilogue_params)}, ROWS: tl.constexpr, "
        "BLOCK_N: tl.constexpr):",
        "    g = 0",
        "    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)",
        f"    mask_n = offs_n < {dst.k}",
        # batch rows of the transform: (output row rr, channel nn), rr major
        "    bb = tl.arange(0, ROWS * BLOCK_N)",
        "    q = (tl.program_id(0) * ROWS + bb // BLOCK_N).to(tl.int64)[:, None, None]",
        "    ch = (tl.program_id(1) * BLOCK_N + bb % BLOCK_N)[:, None, None]",
    ]
    L += _grid_lines(tw)
    L += [
        f"    hs = (j < {half})",
        f"    kw = tl.where(hs, j, {tw.n} - j)",
        f"    ok = lane & (ch < {dst.k}) & (q < {q_total})",
        f"    src = (((q // {oth}) * {dst.k} + ch) * {oth} + q % {oth}) * {half} + kw",
        "    xr = tl.load(RY + src, mask=ok, other=0.0)",
        f"    xi = tl.load(RY + {dst.chunk * dst.k * oth * half} + src, mask=ok, other=0.0)",
        "    xi = tl.where(hs, xi, -xi)",
        f"    cr, ci = _dft(xr, xi, {_dft_args(tw, 1)})",
        f"    cr = tl.permute(tl.reshape(cr, [ROWS, BLOCK_N, {tw.p1}, {tw.p2}]), (0, 3, 2, 1))",
        f"    acc = tl.reshape(cr, [ROWS * {row}, BLOCK_N]) * {scale!r}",
        # pixel m of the tile: output row rr = m // row, lane (k1, k2) of the row transform
        f"    m = tl.arange(0, ROWS * {row})",
        f"    k1 = m % {tw.p1}",
        f"    o1l = k1 + {tw.n1} * ((m % {row}) // {tw.p1})",
        f"    qm = (tl.program_id(0) * ROWS + m // {row}).to(tl.int64)",
        f"    o0l = qm % {oth}",
        f"    pg = P0 + qm // {oth}",
        f"    t = pg % {th * tw_}",
        f"    nb = pg // {th * tw_}",
        f"    o0 = (t // {tw_}) * {oth} + o0l",
        f"    o1 = (t % {tw_}) * {otw} + o1l",
        f"    mask_m = (k1 < {tw.n1}) & (o1l < {otw}) & (qm < {q_total}) & "
        f"(o0 < {dst.out_dims[0]}) & (o1 < {dst.out_dims[1]}) & (pg < {dst.planes})",
    ]
    for line in epilogue_body.strip("\n").split("\n"):
        L.append("    " + line)
    return DFT_SOURCE + "\n".join(L) + "\n"
