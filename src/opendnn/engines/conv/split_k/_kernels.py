"""Split-reduction backward convolution: Triton source generation for the nondeterministic
backward-data (``dgrad_split``) and table-driven backward-filter (``wgrad_precomp``)
engines.

Backward data as a split-K implicit GEMM (per group g, see ``_kernels.dgrad_source``):

    M = N * prod(in), N_gemm = C/G, R = prod(filt) * ceil(K/G / BLOCK_K) reduction steps
    dx[m, g*C/G + c] = sum over steps (t, k-block) of dy[n, g*K/G + k, o(i, t)] w[g*K/G + k, c, r(t)]
    o_i = (i_i + pre_i - r_i*dil_i) / stride_i   (a term only when exact and inside dy)

Program (tile, g, s) sums steps [s*ceil(R/S), min((s+1)*ceil(R/S), R)) and adds its
float32 partial tile into ACC[m, g*C/G + c] with atomics; ACC is zeroed first and a
finishing pass applies the epilogue and writes dx in its type and strides. Float32
additions in an arbitrary order: the last bits change from run to run.

Backward filter from index tables (one tap t per program, as in ``_kernels.wgrad_source``):

    dw[g*K/G + k, c, r] = sum over pixels p = (n, s) of
                          dy[n, g*K/G + k, s] * x[n, g*C/G + c, o(s)*stride - pre + r*dil]

Instead of splitting every pixel index p into (n, o_0, ..., o_{d-1}) and recomputing the
offsets in the inner loop, the kernel splits p once into (n, s) and reads two tables that
a first kernel writes into the workspace at execute time:

    PIX[s] = (sum_i o_i dy_stride_i,  sum_i base_i x_stride_i,  base_0, ..., base_{d-1})
             with base_i = o_i * stride_i - pre_i, for s over the prod(out) output positions
    TAP[t] = (sum_i r_i dil_i x_stride_i,  sum_i r'_i dw_stride_i,  r_0 dil_0, ..., r_{d-1} dil_{d-1})
             with r' = filt - 1 - r in CONVOLUTION mode, r otherwise

so x's address is n*x_stride_n + PIX[s][1] + TAP[t][0] + c*x_stride_c, valid iff
0 <= PIX[s][2+i] + TAP[t][2+i] < in_i on every axis. The pixel reduction is split into S
slices (programs along axis 0) whose partials go with atomics straight into dw when dw
is float32 with no epilogue (workspace: the tables only), or into a float32 ACC after the
tables, finished by an epilogue pass.
"""

from __future__ import annotations

import dataclasses

from ..implicit_gemm import _kernels as K


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def zero_source(name: str, total: int) -> str:
    """Kernel ``name(ACC, BLOCK)``: ACC[0:total] = 0 (float32). Grid: cdiv(total, BLOCK)."""
    i64 = ".to(tl.int64)" if total >= 2**31 else ""
    return (
        f"@triton.jit\ndef {name}(ACC, BLOCK: tl.constexpr):\n"
        f"    i = tl.program_id(0){i64} * BLOCK + tl.arange(0, BLOCK)\n"
        f"    tl.store(ACC + i, tl.full([BLOCK], 0.0, tl.float32), mask=i < {total})\n"
    )


# ---- backward data ---------------------------------------------------------------------------
def dgrad_steps(geo: K.ConvGeometry, kn: K.ConvKnobs) -> int:
    """R: the (tap, output-channel block) steps of one dx tile's reduction."""
    return K._prod(geo.filt) * _cdiv(geo.k_per_group, kn.BLOCK_K)


def dgrad_acc_index(geo: K.ConvGeometry) -> str:
    """ACC offset of tile element (offs_m, offs_n) of group g: ACC is [N*prod(in), C]."""
    return (
        f"offs_m[:, None] * {geo.c_per_group * geo.groups} + "
        f"(g * {geo.c_per_group} + offs_n)[None, :]"
    )


def dgrad_split_source(
    name: str,
    geo: K.ConvGeometry,
    kn: K.ConvKnobs,
    *,
    split: int,
    dy_strides: tuple,
    allow_tf32: bool,
    interpret: bool,
    fp32_inputs: bool,
) -> str:
    """Kernel ``name(DY, W, ACC, BLOCK_M, BLOCK_N, BLOCK_K)`` adding the partial dx tile of
    reduction slice ``program_id(2)`` into ACC (float32 [N*prod(in), C]).

    DY: [N, K, out...] any strides (``dy_strides``); W: [K, C/G, filt...] (geo.w_strides).
    Grid: (tiles of dx pixels x C/G channels, G, split) = dgrad_grid + (split,).
    """
    d = len(geo.in_dims)
    steps = dgrad_steps(geo, kn)
    chunk = _cdiv(steps, split)
    kb = _cdiv(geo.k_per_group, kn.BLOCK_K)
    ind, ind2 = "    ", "        "
    r = [f"r{i}" for i in range(d)]
    L = K.pixel_tile_header(
        name,
        ["DY", "W", "ACC"],
        [],
        ["BLOCK_M", "BLOCK_N", "BLOCK_K"],
        geo,
        geo.in_dims,
        geo.c_per_group,
        kn,
    )
    ds, ws = dy_strides, geo.w_strides
    L += [
        f"{ind}sp = tl.program_id(2)",
        f"{ind}dy_row = nb * {ds[0]} + g * {geo.k_per_group * ds[1]}",
        f"{ind}w_col = offs_n * {ws[1]}",
        f"{ind}acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)",
        f"{ind}it_lo = sp * {chunk}",
        f"{ind}it_hi = tl.minimum(it_lo + {chunk}, {steps})",
        f"{ind}for it in range(it_lo, it_hi):",
        f"{ind2}t = it // {kb}",
        f"{ind2}k0 = (it % {kb}) * BLOCK_K",
    ]
    L += K._div_chain("t", list(geo.filt), r, ind2, "_qt")
    valid, a_off, w_off = ["mask_m"], ["dy_row"], []
    for i in range(d):
        L.append(f"{ind2}num{i} = o{i} + {geo.pre[i]} - {r[i]} * {geo.dilation[i]}")
        L.append(f"{ind2}q{i} = num{i} // {geo.stride[i]}")
        if geo.stride[i] > 1:
            valid.append(f"(num{i} % {geo.stride[i]} == 0)")
        valid.append(f"(num{i} >= 0) & (q{i} < {geo.out_dims[i]})")
        a_off.append(f"q{i} * {ds[2 + i]}")
        fr = f"({geo.filt[i] - 1} - {r[i]})" if geo.flip else r[i]
        w_off.append(f"{fr} * {ws[2 + i]}")
    L += [
        f"{ind2}valid = " + " & ".join(valid),
        f"{ind2}kk = k0 + tl.arange(0, BLOCK_K)",
        f"{ind2}mask_k = kk < {geo.k_per_group}",
        f"{ind2}a = tl.load(DY + ({' + '.join(a_off)})[:, None] + (kk * {ds[1]})[None, :], "
        f"mask=valid[:, None] & mask_k[None, :], other=0.0)",
        f"{ind2}b = tl.load(W + w_col[None, :] + ((g * {geo.k_per_group} + kk) * {ws[0]})"
        f"[:, None] + {' + '.join(w_off)}, mask=mask_k[:, None] & mask_n[None, :], other=0.0)",
        ind2 + K._dot_line(allow_tf32, interpret, fp32_inputs),
        f"{ind}tl.atomic_add(ACC + {dgrad_acc_index(geo)}, acc, "
        "mask=mask_m[:, None] & mask_n[None, :], sem='relaxed')",
    ]
    return "\n".join(L) + "\n"


def dgrad_finish_source(
    name: str, geo: K.ConvGeometry, kn: K.ConvKnobs, epilogue_params: list[str], epilogue_body: str
) -> str:
    """Kernel ``name(ACC, *epilogue_params, BLOCK_M, BLOCK_N)``: load the float32 dx tile
    from ACC and run the epilogue (which stores dx and any other output).
    Grid: dgrad_grid(geo, kn)."""
    L = K.pixel_tile_header(
        name,
        ["ACC"],
        epilogue_params,
        ["BLOCK_M", "BLOCK_N"],
        geo,
        geo.in_dims,
        geo.c_per_group,
        kn,
    )
    L.append(
        f"    acc = tl.load(ACC + {dgrad_acc_index(geo)}, "
        "mask=mask_m[:, None] & mask_n[None, :], other=0.0)"
    )
    L += ["    " + ln for ln in epilogue_body.strip("\n").split("\n")]
    return "\n".join(L) + "\n"


# ---- backward filter from index tables -----------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TableLayout:
    """Where things sit in the backward-filter workspace (offsets in elements of each
    region's own type: index entries for the tables, float32 for ACC)."""

    index_bytes: int  # 4 (int32) or 8 (int64 when a tensor spans 2^31 elements)
    pix_width: int  # entries per PIX row: 2 + d
    tap_width: int  # entries per TAP row: 2 + d
    tap_offset: int  # first TAP entry
    acc_offset: int  # first ACC float (0 and unused when accumulating into dw)
    acc_elems: int  # 0 when accumulating straight into dw
    size: int  # bytes, a multiple of 256

    @property
    def index_dtype(self) -> str:
        return "tl.int64" if self.index_bytes == 8 else "tl.int32"


def table_layout(geo: K.ConvGeometry, direct: bool) -> TableLayout:
    d = len(geo.filt)
    spatial, taps = K._prod(geo.out_dims), K._prod(geo.filt)
    ib = 8 if geo.int64 else 4
    tap_offset = spatial * (2 + d)
    table_bytes = (tap_offset + taps * (2 + d)) * ib
    acc_start = _cdiv(table_bytes, 256) * 256
    acc_elems = 0 if direct else geo.groups * geo.k_per_group * geo.c_per_group * taps
    return TableLayout(
        ib,
        2 + d,
        2 + d,
        tap_offset,
        acc_start // 4,
        acc_elems,
        _cdiv(acc_start + 4 * acc_elems, 256) * 256,
    )


def wgrad_acc_index(geo: K.ConvGeometry, lay: TableLayout) -> str:
    """ACC offset of tile element (offs_m, offs_n) of tap t, group g: ACC is
    [taps, K, C/G], channels innermost so that a tile's atomics are coalesced."""
    return (
        f"{lay.acc_offset} + (t * {geo.groups * geo.k_per_group} + g * {geo.k_per_group} "
        f"+ offs_m)[:, None] * {geo.c_per_group} + offs_n[None, :]"
    )


def wgrad_tables_source(
    name: str, geo: K.ConvGeometry, lay: TableLayout, *, dy_strides: tuple, direct: bool
) -> tuple[str, int]:
    """Kernel ``name(TAB, OUT, BLOCK)`` writing PIX and TAP (see the module docstring) into
    TAB (the workspace as int32 / int64) and zeroing the accumulation target: OUT is dw
    itself (float32, its own strides) when ``direct``, else the workspace as float32 whose
    ACC region is zeroed. Returns (source, number of elements the grid must cover)."""
    d = len(geo.filt)
    spatial, taps = K._prod(geo.out_dims), K._prod(geo.filt)
    k_total = geo.groups * geo.k_per_group
    zero_count = k_total * geo.c_per_group * taps
    cover = max(spatial, taps, zero_count)
    ity = lay.index_dtype
    ind = "    "
    ds, xs, ws = dy_strides, geo.x_strides, geo.w_strides
    o = [f"o{i}" for i in range(d)]
    r = [f"r{i}" for i in range(d)]
    L = ["@triton.jit", f"def {name}(TAB, OUT, BLOCK: tl.constexpr):"]
    if cover + 4096 >= 2**31:  # an index past int32: every split in int64
        L.append(f"{ind}i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)")
        iv, widen = "i", lambda names: []
    else:  # split i32 (int64 constant divisions miscompile on sm_90), widen the parts
        L.append(f"{ind}i32 = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)")
        L.append(f"{ind}i = i32" + (".to(tl.int64)" if geo.int64 else ""))
        iv = "i32"

        def widen(names):
            return [f"{ind}{v} = {v}.to(tl.int64)" for v in names] if geo.int64 else []

    L.append(f"{ind}mask_s = i < {spatial}")
    L += K._div_chain(iv, list(geo.out_dims), o, ind, "_qs") + widen(o)
    for j in range(d):
        L.append(f"{ind}base{j} = {o[j]} * {geo.stride[j]} - {geo.pre[j]}")
    pix = [
        " + ".join(f"{o[j]} * {ds[2 + j]}" for j in range(d)),
        " + ".join(f"base{j} * {xs[2 + j]}" for j in range(d)),
    ] + [f"base{j}" for j in range(d)]
    for col, expr in enumerate(pix):
        L.append(
            f"{ind}tl.store(TAB + i * {lay.pix_width} + {col}, ({expr}).to({ity}), mask=mask_s)"
        )
    L.append(f"{ind}mask_t = i < {taps}")
    L += K._div_chain(iv, list(geo.filt), r, ind, "_qr") + widen(r)
    fr = [f"({geo.filt[j] - 1} - {r[j]})" if geo.flip else r[j] for j in range(d)]
    tap = [
        " + ".join(f"{r[j]} * {geo.dilation[j] * xs[2 + j]}" for j in range(d)),
        " + ".join(f"{fr[j]} * {ws[2 + j]}" for j in range(d)),
    ] + [f"{r[j]} * {geo.dilation[j]}" for j in range(d)]
    for col, expr in enumerate(tap):
        L.append(
            f"{ind}tl.store(TAB + {lay.tap_offset} + i * {lay.tap_width} + {col}, "
            f"({expr}).to({ity}), mask=mask_t)"
        )
    L.append(f"{ind}mask_z = i < {zero_count}")
    zeros = "tl.full([BLOCK], 0.0, tl.float32)"
    if direct:  # dw in its own strides: split i into (k, c, r_0, ...)
        zr = [f"zr{j}" for j in range(d)]
        L += K._div_chain(
            iv, [k_total, geo.c_per_group] + list(geo.filt), ["zk", "zc"] + zr, ind, "_qz"
        ) + widen(["zk", "zc"] + zr)
        off = " + ".join(
            [f"zk * {ws[0]}", f"zc * {ws[1]}"] + [f"{zr[j]} * {ws[2 + j]}" for j in range(d)]
        )
        L.append(f"{ind}tl.store(OUT + {off}, {zeros}, mask=mask_z)")
    else:
        L.append(f"{ind}tl.store(OUT + {lay.acc_offset} + i, {zeros}, mask=mask_z)")
    return "\n".join(L) + "\n", cover


def wgrad_precomp_source(
    name: str,
    geo: K.ConvGeometry,
    kn: K.ConvKnobs,
    lay: TableLayout,
    *,
    split: int,
    dy_strides: tuple,
    direct: bool,
    allow_tf32: bool,
    interpret: bool,
    fp32_inputs: bool,
) -> str:
    """Kernel ``name(X, DY, TAB, OUT, BLOCK_M, BLOCK_N, BLOCK_K)``: for tap
    ``program_id(1)`` and group ``program_id(2)``, the (K/G x C/G) tile
    ``program_id(0) % tiles`` summed over pixel slice ``program_id(0) // tiles`` and added
    atomically into OUT (dw when ``direct``, else ACC in the float32 workspace).

    X: [N, C, in...], DY: [N, K, out...], any strides; TAB: the tables (``lay``).
    Grid: (tiles * split, prod(filt), G).
    """
    d = len(geo.filt)
    spatial = K._prod(geo.out_dims)
    p_total = geo.n * spatial
    tiles_n = _cdiv(geo.c_per_group, kn.BLOCK_N)
    tiles = _cdiv(geo.k_per_group, kn.BLOCK_M) * tiles_n
    chunk = _cdiv(_cdiv(p_total, split), kn.BLOCK_K) * kn.BLOCK_K
    i64 = ".to(tl.int64)" if geo.int64 else ""
    ind, ind2 = "    ", "        "
    ds, xs, ws = dy_strides, geo.x_strides, geo.w_strides
    sig = [
        "X",
        "DY",
        "TAB",
        "OUT",
        "BLOCK_M: tl.constexpr",
        "BLOCK_N: tl.constexpr",
        "BLOCK_K: tl.constexpr",
    ]
    L = [
        "@triton.jit",
        f"def {name}({', '.join(sig)}):",
        f"{ind}pid = tl.program_id(0)",
        f"{ind}t = tl.program_id(1)",
        f"{ind}g = tl.program_id(2){i64}",
        f"{ind}sp = pid // {tiles}",  # slices outermost: concurrent programs hit
        f"{ind}tile = pid % {tiles}",  # different tiles, not the same addresses
        f"{ind}pid_m = tile // {tiles_n}",
        f"{ind}pid_n = tile % {tiles_n}",
        f"{ind}offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        f"{ind}mask_m = offs_m < {geo.k_per_group}",
        f"{ind}offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        f"{ind}mask_n = offs_n < {geo.c_per_group}",
        f"{ind}tap = TAB + {lay.tap_offset} + t * {lay.tap_width}",
        f"{ind}x_delta = tl.load(tap)",
        f"{ind}w_off = tl.load(tap + 1)",
    ]
    for i in range(d):
        L.append(f"{ind}step{i} = tl.load(tap + {2 + i})")
    L += [
        f"{ind}dy_k = (g * {geo.k_per_group} + offs_m) * {ds[1]}",
        f"{ind}x_c = (g * {geo.c_per_group} + offs_n) * {xs[1]} + x_delta",
        f"{ind}acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)",
        f"{ind}p_lo = sp * {chunk}",
        f"{ind}p_hi = tl.minimum(p_lo + {chunk}, {p_total})",
        f"{ind}for p0 in range(p_lo, p_hi, BLOCK_K):",
    ]
    L += K.index_split(
        "pp",
        "p0 + tl.arange(0, BLOCK_K)",
        p_total + 1024,
        [geo.n, spatial],
        ["nb", "pix"],
        ind2,
        "_qp",
        geo.int64,
    )
    L += [
        f"{ind2}mask_p = pp < p_hi",
        f"{ind2}row = TAB + pix * {lay.pix_width}",
        f"{ind2}dy_off = tl.load(row, mask=mask_p, other=0)",
        f"{ind2}x_off = tl.load(row + 1, mask=mask_p, other=0)",
    ]
    valid = ["mask_p"]
    for i in range(d):
        L.append(f"{ind2}h{i} = tl.load(row + {2 + i}, mask=mask_p, other=0) + step{i}")
        valid.append(f"(h{i} >= 0) & (h{i} < {geo.in_dims[i]})")
    L += [
        f"{ind2}valid = " + " & ".join(valid),
        f"{ind2}a = tl.load(DY + dy_k[:, None] + (nb * {ds[0]} + dy_off)[None, :], "
        "mask=mask_m[:, None] & mask_p[None, :], other=0.0)",
        f"{ind2}b = tl.load(X + (nb * {xs[0]} + x_off)[:, None] + x_c[None, :], "
        "mask=valid[:, None] & mask_n[None, :], other=0.0)",
        ind2 + K._dot_line(allow_tf32, interpret, fp32_inputs),
    ]
    if direct:
        target = (
            f"((g * {geo.k_per_group} + offs_m) * {ws[0]})[:, None] + "
            f"(offs_n * {ws[1]})[None, :] + w_off"
        )
    else:
        target = wgrad_acc_index(geo, lay)
    L.append(
        f"{ind}tl.atomic_add(OUT + {target}, acc, mask=mask_m[:, None] & mask_n[None, :], "
        "sem='relaxed')"
    )
    return "\n".join(L) + "\n"


def wgrad_finish_source(
    name: str,
    geo: K.ConvGeometry,
    kn: K.ConvKnobs,
    lay: TableLayout,
    epilogue_params: list[str],
    epilogue_body: str,
) -> str:
    """Kernel ``name(ACC, *epilogue_params, BLOCK_M, BLOCK_N)``: load tap t's float32
    (K/G x C/G) tile from ACC and run the epilogue. Grid: wgrad_grid(geo, kn)."""
    tiles_n = _cdiv(geo.c_per_group, kn.BLOCK_N)
    L = [
        "@triton.jit",
        f"def {name}({', '.join(['ACC'] + epilogue_params)}, BLOCK_M: tl.constexpr, "
        "BLOCK_N: tl.constexpr):",
        "    pid = tl.program_id(0)",
        "    t = tl.program_id(1)",
        f"    g = tl.program_id(2){'.to(tl.int64)' if geo.int64 else ''}",
        f"    pid_m = pid // {tiles_n}",
        f"    pid_n = pid % {tiles_n}",
        "    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        f"    mask_m = offs_m < {geo.k_per_group}",
        "    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        f"    mask_n = offs_n < {geo.c_per_group}",
    ]
    L += K._div_chain("t", list(geo.filt), [f"r{i}" for i in range(len(geo.filt))], "    ", "_qt")
    L.append(
        f"    acc = tl.load(ACC + {wgrad_acc_index(geo, lay)}, "
        "mask=mask_m[:, None] & mask_n[None, :], other=0.0)"
    )
    L += ["    " + ln for ln in epilogue_body.strip("\n").split("\n")]
    return "\n".join(L) + "\n"
