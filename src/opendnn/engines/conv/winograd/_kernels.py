"""Fused Winograd F(2x2, 3x3): Triton source generation.

One program owns BLOCK_P output tiles (2x2 pixels each, p -> n, t_h, t_w row-major) and
BLOCK_K output channels, and keeps the 16 transformed-domain accumulators in registers:

    for each block of BLOCK_C reduction channels c:
        d[a][b]  = x[n, c, 2 t_h - pre_h + a, 2 t_w - pre_w + b]     a, b in 0..3 (0 outside)
        V[e]     = (B^T d B)[xi][nu]       e = 4 xi + nu            adds only, float32
        U[e]     = (G g G^T)[xi][nu]       from the workspace, or computed here from g
        M[e]    += V[e] @ U[e]             [BLOCK_P, BLOCK_C] x [BLOCK_C, BLOCK_K], 16 dots
    y[n, k, 2 t_h + i, 2 t_w + j] = epilogue((A^T M A)[i][j])       i, j in 0..1

with B^T, G, A^T the F(2x2, 3x3) matrices of ``winograd.MATRICES[2]``. With PASSES > 1 the
channel loop runs once per group of 4 / PASSES rows xi of M (gathering only the patch rows
that row of B^T touches) and folds those rows into four output tiles y_ij right after:
fewer live accumulators for more gathers. In-bounds flags of a tile's 16 patch positions
are one int32 bit mask, and its gathers add scalars to one offset tensor, so that the
loop holds no per-position row vectors (measured: kilobytes of spills otherwise). V and
U are rounded to the operand type before the dot (for half types: one rounding more
than a direct convolution), the dots accumulate in float32.

The same kernel computes the backward data pass at stride 1: with r' = 2 - r,

    dx[n, c, i] = sum_{k, r} dy[n, k, i + pre - r] w[k, c, r]
                = sum_{k, r'} dy[n, k, i - (2 - pre) + r'] w[k, c, 2 - r']

a forward cross-correlation of dy with padding 2 - pre and the filter read with its two
channel axes swapped and flipped (so ``WinogradGeometry`` names the filter's axes by role,
not by position). A negative padding (pre > 2) only shifts the window; every read is
bounds-checked on both sides.
"""

from __future__ import annotations

import dataclasses

from .engine import MATRICES, _lin

BT, G, AT = MATRICES[2]["BT"], MATRICES[2]["G"], MATRICES[2]["AT"]


@dataclasses.dataclass(frozen=True)
class WinogradGeometry:
    """What the kernels bake in. The image is read as [n, c, h, w] through ``x_strides``;
    the filter tap (r, s) of (output channel k, reduction channel c) is at
    ``k * w_strides[0] + c * w_strides[1] + r' * w_strides[2] + s' * w_strides[3]`` with
    (r', s') = (2 - r, 2 - s) when ``flip``."""

    n: int
    c: int  # reduction channels
    k: int  # output channels
    in_dims: tuple  # (H, W) of the image read
    out_dims: tuple  # (OH, OW) of the output written
    pre: tuple  # top/left padding (may be negative)
    x_strides: tuple  # image (n, c, h, w)
    w_strides: tuple  # filter (output channel, reduction channel, r, s)
    flip: bool
    int64: bool

    @property
    def tiles(self) -> tuple:
        return tuple(-(-o // 2) for o in self.out_dims)

    @property
    def p(self) -> int:
        """Output tiles over the batch."""
        th, tw = self.tiles
        return self.n * th * tw


@dataclasses.dataclass(frozen=True)
class WinogradKnobs:
    BLOCK_P: int = 64  # output tiles per program (16 per warp: see knob_space)
    BLOCK_K: int = 16  # output channels per program
    BLOCK_C: int = 16  # reduction channels per step
    num_warps: int = 4
    FILTER_IN_REGISTERS: int = 0  # 1: transform g in the loop (no workspace, no pre-kernel)
    PASSES: int = 1  # sweeps over the channels, each for 4 / PASSES rows of M


def knob_space() -> list[WinogradKnobs]:
    """Tiles that neither replicate nor overflow the accumulators. Triton lays the MMA
    warps of a loop holding several dots all along M (its chained-dot rule), so a tile
    of fewer than 16 * num_warps rows is computed twice or more; hence BLOCK_P = 16 *
    num_warps. Then each [BLOCK_P, BLOCK_K] float32 accumulator costs BLOCK_K / 2
    registers per thread, and 16 of them (or 16 / PASSES + 4 output tiles with PASSES
    sweeps) must stay near 128. Measured with ptxas for sm_90 (bench/compile_check.py winograd)
    these still reach the 255-register limit with a few bytes to a few hundred bytes of
    spills; BLOCK_C = 32 spills kilobytes."""
    out = []
    for bp, bk, w, ps in [
        (64, 16, 4, 1),
        (128, 16, 8, 1),
        (32, 16, 2, 1),
        (64, 32, 4, 4),
        (32, 32, 2, 4),
    ]:
        for reg in (0, 1):
            out.append(WinogradKnobs(bp, bk, 16, w, reg, ps))
    return out


def accumulator_registers(kn: WinogradKnobs) -> int:
    """float32 accumulator registers per thread (with the warp replication of short tiles)."""
    tiles = 16 if kn.PASSES == 1 else 16 // kn.PASSES + 4
    rows_per_warp = max(kn.BLOCK_P // kn.num_warps, 16)
    return tiles * rows_per_warp * kn.BLOCK_K // 32


def filter_source(name: str, geo: WinogradGeometry, operand: str) -> str:
    """U[e, c, k] = (G g_kc G^T)[e] in the operand type: one lane per (c, k), k fastest so
    the main kernel's [BLOCK_C, BLOCK_K] slabs are contiguous rows whatever the filter's
    layout. Launch over cdiv(C * K, BLOCK) programs."""
    ck = geo.c * geo.k
    L = [
        "@triton.jit",
        f"def {name}(W, U, BLOCK: tl.constexpr):",
        "    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
        f"    mask = i < {ck}",
        f"    c = i // {geo.k}",
        f"    k = i % {geo.k}",
        f"    w_base = k * {geo.w_strides[0]} + c * {geo.w_strides[1]}",
    ]
    L += _filter_transform_lines(geo, "    ", "W", "w_base", "mask")
    for e in range(16):
        L.append(f"    tl.store(U + {e * ck} + i, wu{e}.to({operand}), mask=mask)")
    return "\n".join(L) + "\n"


def _filter_transform_lines(
    geo: WinogradGeometry, ind: str, ptr: str, base: str, mask: str, emit_u: bool = True
) -> list:
    """Filter pointer ``ptr`` + ``base`` -> gt (t = G g, 4 x 3) and, with ``emit_u``,
    wu0..wu15 = t G^T (float32)."""
    ws = geo.w_strides
    L = []
    for r in range(3):
        for s in range(3):
            rr, ss = (2 - r, 2 - s) if geo.flip else (r, s)
            L.append(
                f"{ind}wg{r}{s} = tl.load({ptr} + {base} + {rr * ws[2] + ss * ws[3]}, "
                f"mask={mask}, other=0.0).to(tl.float32)"
            )
    for xi in range(4):
        for s in range(3):
            L.append(f"{ind}gt{xi}{s} = " + _lin(G[xi], [f"wg{r}{s}" for r in range(3)]))
    for xi in range(4 if emit_u else 0):
        for nu in range(4):
            L.append(f"{ind}wu{4 * xi + nu} = " + _lin(G[nu], [f"gt{xi}{s}" for s in range(3)]))
    return L


def fused_source(
    name: str,
    geo: WinogradGeometry,
    kn: WinogradKnobs,
    *,
    operand: str,
    epilogue_params: list,
    epilogue_body: str,
    interpret: bool,
    fp32_inputs: bool,
    allow_tf32: bool,
) -> str:
    """The fused kernel ``name(X, F, *epilogue_params, BLOCK_P, BLOCK_K, BLOCK_C)``:

    X: the image [n, c, H, W] (any strides); F: U [16, C, K] in the operand type (the
    workspace filled by ``filter_source``), or with ``kn.FILTER_IN_REGISTERS`` the filter
    itself. ``operand``: the Triton type the dots take (tl.float32 / float16 / bfloat16).
    The epilogue sees ``acc`` [BLOCK_P, BLOCK_K] float32 for one of the four pixels of
    each tile, with ``nb``, ``o0``, ``o1``, ``offs_n``, ``g`` (= 0), ``mask_m``,
    ``mask_n`` set. Grid: (cdiv(P, BLOCK_P) * cdiv(K, BLOCK_K),)."""
    th, tw = geo.tiles
    xs = geo.x_strides
    i64 = ".to(tl.int64)" if geo.int64 else ""
    ind, ind2 = "    ", "        "
    sig = (
        ["X", "F"]
        + list(epilogue_params)
        + ["BLOCK_P: tl.constexpr", "BLOCK_K: tl.constexpr", "BLOCK_C: tl.constexpr"]
    )
    L = [
        "@triton.jit",
        f"def {name}({', '.join(sig)}):",
        f"{ind}pid = tl.program_id(0)",
        f"{ind}g = 0",
        f"{ind}num_pid_n = {-(-geo.k // kn.BLOCK_K)}",
        f"{ind}pid_m = pid // num_pid_n",
        f"{ind}pid_n = pid % num_pid_n",
        f"{ind}pp = (pid_m * BLOCK_P + tl.arange(0, BLOCK_P)){i64}",
        f"{ind}mask_p = pp < {geo.p}",
        f"{ind}offs_n = pid_n * BLOCK_K + tl.arange(0, BLOCK_K)",
        f"{ind}mask_n = offs_n < {geo.k}",
        f"{ind}tw_ = pp % {tw}",
        f"{ind}q_ = pp // {tw}",
        f"{ind}th_ = q_ % {th}",
        f"{ind}nb = q_ // {th}",
        f"{ind}x_row = nb * {xs[0]}",
    ]
    # one offset tensor for the whole patch (the loads add scalars to it) and one bit mask
    # per tile for the patch's in-bounds positions: sixteen hoisted row vectors instead
    # would hold 16 * BLOCK_P / (threads per row) registers through the loop
    L.append(f"{ind}h_ = th_ * 2 - {geo.pre[0]}")
    L.append(f"{ind}w_ = tw_ * 2 - {geo.pre[1]}")
    L.append(
        f"{ind}x_off = (x_row + h_ * {xs[2]} + w_ * {xs[3]})[:, None] + "
        f"(tl.arange(0, BLOCK_C) * {xs[1]})[None, :]"
    )
    bits = []
    for a in range(4):
        for b in range(4):
            bits.append(
                f"((h_ >= {-a}) & (h_ < {geo.in_dims[0] - a}) & (w_ >= {-b}) & "
                f"(w_ < {geo.in_dims[1] - b})).to(tl.int32) * {1 << (4 * a + b)}"
            )
    L.append(f"{ind}inb = tl.where(mask_p, " + " + ".join(bits) + ", 0)")
    if kn.FILTER_IN_REGISTERS:
        L.append(f"{ind}w_col = offs_n * {geo.w_strides[0]}")
    cast = "tl.float32" if interpret else operand  # the interpreter's bf16 dot is wrong
    widen = f".to({cast})" if cast != operand else ""
    fmask = "mask_c[:, None] & mask_n[None, :]"
    if interpret or not fp32_inputs:
        prec = ", input_precision='ieee'" if interpret else ""
    else:
        prec = f", input_precision='{'tf32' if allow_tf32 else 'ieee'}'"
    rows_per_pass = 4 // kn.PASSES
    for ps in range(kn.PASSES):
        xis = range(ps * rows_per_pass, (ps + 1) * rows_per_pass)
        L += _pass_lines(geo, xis, ind, ind2, kn.FILTER_IN_REGISTERS, operand, widen, fmask, prec)
        for i in range(2):  # fold this pass's rows into the output: y += A^T[:, xi] (M A)
            for j in range(2):
                rows = [
                    (AT[i][xi], _lin(AT[j], [f"wm{4 * xi + nu}" for nu in range(4)]))
                    for xi in xis
                    if AT[i][xi]
                ]
                part = _lin([c for c, _ in rows], [r for _, r in rows]) if rows else None
                if ps == 0:
                    L.append(
                        f"{ind}y{i}{j} = {part or 'tl.full([BLOCK_P, BLOCK_K], 0.0, tl.float32)'}"
                    )
                elif part:
                    L.append(f"{ind}y{i}{j} = y{i}{j} + {part}")
    for i in range(2):  # the epilogue on each of the four pixels of a tile
        for j in range(2):
            L.append(f"{ind}acc = y{i}{j}")
            L.append(f"{ind}o0 = th_ * 2 + {i}")
            L.append(f"{ind}o1 = tw_ * 2 + {j}")
            L.append(f"{ind}mask_m = mask_p & (o0 < {geo.out_dims[0]}) & (o1 < {geo.out_dims[1]})")
            L += [ind + line for line in epilogue_body.strip("\n").split("\n")]
    return "\n".join(L) + "\n"


def _pass_lines(
    geo: WinogradGeometry,
    xis,
    ind: str,
    ind2: str,
    in_registers: int,
    operand: str,
    widen: str,
    fmask: str,
    prec: str,
) -> list:
    """One sweep over the reduction channels accumulating the grid rows ``xis`` of M
    (wm[4 xi + nu], float32): gathers the patch rows those rows of B^T need, transforms,
    and does one dot per position, one position at a time (one V and one U slab live)."""
    xs = geo.x_strides
    rows = sorted({a for xi in xis for a in range(4) if BT[xi][a]})
    L = [
        f"{ind}wm{4 * xi + nu} = tl.full([BLOCK_P, BLOCK_K], 0.0, tl.float32)"
        for xi in xis
        for nu in range(4)
    ]
    L.append(f"{ind}for c0 in range(0, {geo.c}, BLOCK_C):")
    L.append(f"{ind2}cc = c0 + tl.arange(0, BLOCK_C)")
    L.append(f"{ind2}mask_c = cc < {geo.c}")
    L.append(f"{ind2}c_ok = (cc < {geo.c}).to(tl.int32)[None, :]")
    for b in range(4):  # column by column: t = B^T d (rows xis), then d is dead
        for a in rows:
            L.append(
                f"{ind2}d{a}{b} = tl.load(X + (c0 * {xs[1]} + {a * xs[2] + b * xs[3]}) + "
                f"x_off, mask=(((inb >> {4 * a + b})[:, None] & c_ok) != 0), other=0.0)"
                ".to(tl.float32)"
            )
        for xi in xis:
            L.append(f"{ind2}dt{xi}{b} = " + _lin(BT[xi], [f"d{a}{b}" for a in range(4)]))
    if in_registers:
        L.append(f"{ind2}w_off = w_col[None, :] + (cc * {geo.w_strides[1]})[:, None]")
        L += _filter_transform_lines(geo, ind2, "F", "w_off", fmask, emit_u=False)
    else:
        L.append(f"{ind2}u_off = (cc * {geo.k})[:, None] + offs_n[None, :]")
    for xi in xis:
        for nu in range(4):
            e = 4 * xi + nu
            L.append(
                f"{ind2}wv{e} = "
                f"{_lin(BT[nu], [f'dt{xi}{b}' for b in range(4)])}.to({operand}){widen}"
            )
            if in_registers:
                L.append(
                    f"{ind2}wu{e} = "
                    f"{_lin(G[nu], [f'gt{xi}{s}' for s in range(3)])}.to({operand}){widen}"
                )
            else:
                L.append(
                    f"{ind2}wu{e} = tl.load(F + {e * geo.c * geo.k} + u_off, mask={fmask}, "
                    f"other=0.0){widen}"
                )
            L.append(f"{ind2}wm{e} += tl.dot(wv{e}, wu{e}{prec})")
    return L


# the fused kernel's dots run at 15-26 TFLOP/s on the H100 -- 2-4% of the tensor-core
# peak -- on the ResNet-50 3x3 layers (117-232 us
# where the implicit GEMMs take 19-27 us); the model said 35% until then and had
# benchmark mode compile these kernels (3-4 s each) for every 3x3 layer
DOT_EFFICIENCY = 0.03


def grid(geo: WinogradGeometry, kn: WinogradKnobs) -> tuple:
    return (-(-geo.p // kn.BLOCK_P) * -(-geo.k // kn.BLOCK_K),)


def estimate_seconds(
    geo: WinogradGeometry,
    kn: WinogradKnobs,
    itemsize: int,
    peak_dot: float,
    peak_fp32: float,
    bandwidth: float,
    num_sms: int,
) -> float:
    """Roofline of the fused kernel (the filter pre-kernel is counted by the engine):

    - tensor cores: 16 dots per tile and channel, 2 * 16 * P * K * C = 2.25x fewer than
      the 2 * 36 * P * K * C of a direct 3x3, padded to the blocks; each dot is a small
      [BLOCK_P, BLOCK_C] x [BLOCK_C, BLOCK_K] whose operands come from registers (the
      transform), chained sixteen deep, with nothing hiding the gathers and the kernel at
      255 registers with spills: DOT_EFFICIENCY of peak (measured);
    - CUDA cores (float32 adds): the input transform (32 adds per patch and channel) is
      redone by every channel-block program, the output transform (24 per tile and output
      channel) once, the in-register filter transform (28 per channel pair) by every
      pixel-block program, plus the conversions of V and U to the operand type; with
      PASSES > 1 each sweep gathers and transforms the patch rows its grid rows need again;
    - memory: the image and the output once, U (or the filter) once per pixel block from
      L2 (counted at a quarter of its bytes), the 4x overlapping patch gathers from L1.
    Programs fill whole waves only if there are enough of them."""
    tiles_p, tiles_k = -(-geo.p // kn.BLOCK_P), -(-geo.k // kn.BLOCK_K)
    c_pad = -(-geo.c // kn.BLOCK_C) * kn.BLOCK_C
    pp, kk = tiles_p * kn.BLOCK_P, tiles_k * kn.BLOCK_K
    dot = 2.0 * 16 * pp * kk * c_pad
    reload = 1.0 if kn.PASSES == 1 else 2.0 * (1 - 1 / kn.PASSES)  # rows gathered again
    adds = (32 * reload + 16) * pp * c_pad * tiles_k + 24 * pp * kk
    if kn.FILTER_IN_REGISTERS:
        adds += (28 + 16) * kk * c_pad * tiles_p
    else:
        adds += 16 * kk * c_pad * tiles_p
    programs = tiles_p * tiles_k
    fill = programs / (-(-programs // num_sms) * num_sms)
    image = geo.n * geo.c * geo.in_dims[0] * geo.in_dims[1]
    out = geo.n * geo.k * geo.out_dims[0] * geo.out_dims[1]
    filt = (9 if kn.FILTER_IN_REGISTERS else 16) * geo.k * geo.c
    bytes_ = itemsize * (image + out + filt + filt * (tiles_p - 1) / 4)
    compute = dot / (peak_dot * DOT_EFFICIENCY) + adds / peak_fp32
    return max(compute / max(fill, 1e-3), bytes_ / bandwidth) + 4e-6
