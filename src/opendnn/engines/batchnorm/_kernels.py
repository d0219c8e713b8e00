"""Triton sources of the batch-norm engine (the math is in ``ops/batchnorm.py``).

Every data tensor (X, Y, DY, DX, the residual Z) is seen as an [R, K] matrix: K "kept"
elements (one per statistic: the channels, or C x H x W per activation) by R "reduced"
rows (N x spatial, or N). Each tensor reaches element (r, k) through its own strides:
``ro_T[r] + ko_T[k]``, where r and k are split into the original axes (adjacent axes
merge when every tensor is contiguous across them, so packed NHWC is one row axis of
stride C and one kept axis of stride 1). Shapes and strides are literals of the source.

Training forward, three launches:
  1. statistics: program (k block, slice s) walks the row blocks s, s + SPLIT, ...
     (interleaved slices: all programs stream the same band of rows at once) and sums
     d = x - shift and d^2 per column into a [BLOCK_R, BLOCK_K] tile, folded once at the
     end into the workspace ([2, SPLIT, K] float32). The shift (x of row 0, per column)
     keeps sum(d^2) / m - (sum(d) / m)^2 from cancelling when |mean| >> std.
  2. finish: per column, the SPLIT partials are summed in a fixed order (deterministic);
     it writes mean, inv_var, the running statistics, and the per-column coefficients
     a = scale * inv_var, b = bias - mean * a to the workspace.
  Sums beyond float32's range (|x - shift| beyond ~2^63): a statistics program whose
  column sums come out inf or NaN takes its slice again in units of 2^-80 and flags those
  columns (WS[2, SPLIT, K], after the two partial rows); the finish brings a flagged
  column's other partials to those units (the norm engine's rescue, ``norm._kernels``).
  3. normalize: y = a x + b, then the fused epilogue (+ z, relu), stored once. With
     REUSE it walks the row blocks last-first: its first reads are what the statistics
     pass read last, still in L2 (the statistics loads then skip evict_first).
Inference is the normalize kernel alone, its coefficients computed per program. Backward
is the same three steps (dy through a fused relu_backward where the graph has one, in
both passes): partial sums of dy and dy (x - mean); the finish writes
dbias = sum dy, dscale = inv_var sum dy (x - mean) and dx = a dy + b x + c with
a = scale inv_var, b = -a inv_var dscale / m, c = -a dbias / m - b mean.
"""

from __future__ import annotations

from ..fusion._codegen import COMBINE_HELPERS, TL_TYPE, index_decomposition, offset_expr
from ..norm._kernels import SCALE, UNSCALE, finite_shift

INT32_LIMIT = 2**31 - 1
STREAM_BYTES = 30e6  # x larger than this does not stay in L2 between the passes


def merge_axes(sizes: list, strides: dict) -> tuple:
    """Drop size-one axes and merge adjacent axes (outer i, inner i+1) when every tensor
    has st[i] == st[i+1] * sizes[i+1]. Returns (sizes, {role: strides}), never empty."""
    keep = [i for i, s in enumerate(sizes) if s != 1]
    out_sizes = [sizes[i] for i in keep]
    out = {r: [st[i] for i in keep] for r, st in strides.items()}
    k = len(out_sizes) - 2
    while k >= 0:
        if all(st[k] == st[k + 1] * out_sizes[k + 1] for st in out.values()):
            out_sizes[k] *= out_sizes[k + 1]
            for st in out.values():
                st[k] = st[k + 1]
                del st[k + 1]
            del out_sizes[k + 1]
        k -= 1
    if not out_sizes:
        return [1], {r: [0] for r in strides}
    return out_sizes, out


class Problem:
    """One batch-norm node (plus its fused epilogue) as [R, K] matrices.

    ``roles``: role -> uid of every tensor the kernels touch (OUT is the final output,
    YPRE the batch norm's own Y when it is stored besides a fused epilogue). ``data``
    roles have R x K elements, ``stats`` roles K; ``scalars`` (EPSILON, MOMENTUM) are
    pass-by-value floats or one-element tensors; ``epilogue`` lists (mode, attrs)."""

    def __init__(self, graph, node, roles: dict, data: tuple, stats: tuple, epilogue: list):
        self.kind = node.kind
        self.roles, self.data, self.stats, self.epilogue = roles, data, stats, epilogue
        t = graph.tensors
        x, s = t[roles["X"]], t[roles["SCALE"]]
        kept = [i for i, d in enumerate(s.dims) if d != 1]
        red = [i for i, (a, b) in enumerate(zip(x.dims, s.dims)) if b == 1 and a != 1]
        self.count = 1
        for i in red:
            self.count *= x.dims[i]
        self.ksizes, self.kstr = merge_axes(
            [x.dims[i] for i in kept],
            {r: [t[roles[r]].strides[i] for i in kept] for r in data + stats},
        )
        self.rsizes, self.rstr = merge_axes(
            [x.dims[i] for i in red], {r: [t[roles[r]].strides[i] for i in red] for r in data}
        )
        self.K = 1  # zero when a kept dim is (nothing to compute)
        for d in self.ksizes:
            self.K *= d
        self.R = self.count  # zero for an empty batch
        self.types = {r: t[u].data_type for r, u in roles.items()}
        self.by_value = {
            r: t[roles[r]].is_pass_by_value for r in ("EPSILON", "MOMENTUM") if r in roles
        }
        self.big = any(t[roles[r]].span >= INT32_LIMIT for r in data)
        self.columns = self.kstr["X"][-1] == 1 and self.K > 1  # kept axis contiguous
        self.stream = x.size_in_bytes > STREAM_BYTES

    def has(self, role: str) -> bool:
        return role in self.roles


# ---- shared pieces ---------------------------------------------------------------------------
def _head(name: str, params: list) -> list:
    return [COMBINE_HELPERS, "@triton.jit", f"def {name}({', '.join(params)}):"]


def _kept(p: Problem, var: str, roles, ind: str) -> list:
    """Lines giving ``ko_<role>``, each tensor's offset of kept index vector ``var``."""
    lines = index_decomposition(var, p.ksizes, "kk", ind)
    names = [f"kk{i}" for i in range(len(p.ksizes))]
    for r in roles:
        lines.append(f"{ind}ko_{r} = {offset_expr(names, p.kstr[r], f'{var} * 0')}")
    return lines


def _reduced(p: Problem, var: str, roles, ind: str) -> list:
    lines = index_decomposition(var, p.rsizes, "rr", ind)
    names = [f"rr{i}" for i in range(len(p.rsizes))]
    for r in roles:
        lines.append(f"{ind}ro_{r} = {offset_expr(names, p.rstr[r], f'{var} * 0')}")
    return lines


def _masks(p: Problem, br: int, bk: int) -> tuple:
    """(row mask, column mask, tile mask) expressions; None where the tile provably fits."""
    rm = f"(rows < {p.R})" if p.R % br else None
    km = f"(cols < {p.K})" if p.K % bk else None
    if rm and km:
        tile = f"{rm}[:, None] & {km}[None, :]"
    elif rm:
        tile = f"{rm}[:, None]"
    elif km:
        tile = f"{km}[None, :]"
    else:
        tile = None
    return rm, km, tile


def _ld(ptr: str, off: str, mask, evict: bool = False) -> str:
    m = f", mask={mask}, other=0.0" if mask else ""
    e = ', eviction_policy="evict_first"' if evict else ""
    return f"tl.load({ptr} + {off}{m}{e}).to(tl.float32)"


def _st(p: Problem, role: str, off: str, value: str, mask) -> str:
    m = f", mask={mask}" if mask else ""
    return f"tl.store({role} + {off}, ({value}).to({TL_TYPE[p.types[role]]}){m})"


def _tile(role: str) -> str:
    return f"ro_{role}[:, None] + ko_{role}[None, :]"


def _scalar(p: Problem, role: str) -> str:
    return role if p.by_value[role] else f"tl.load({role}).to(tl.float32)"


def _rows(p: Problem, start: str, br: int) -> str:
    base = f"({start}).to(tl.int64)" if p.big else f"({start})"
    return f"{base} * {br} + tl.arange(0, {br})"


def _dy(p: Problem, tile, evict: bool, ind: str) -> list:
    """Lines loading ``dy`` (backward); through the fused relu_backward when there is one."""
    from ...ops.pointwise import DEFAULT_ATTRS, MODES

    lines = [f"{ind}dy = {_ld('DY', _tile('DY'), tile, evict)}"]
    if p.has("YACT"):
        mode, attrs = p.epilogue[0]
        lines += [
            f"{ind}ya = {_ld('YACT', _tile('YACT'), tile, evict)}",
            f"{ind}dy = {MODES[mode].triton('dy', 'ya', {**DEFAULT_ATTRS, **attrs})}",
        ]
    return lines


# ---- 1. statistics ---------------------------------------------------------------------------
def stats_params(p: Problem) -> list:
    if p.kind == "batchnorm_backward":
        return ["DY", "X", "MEAN"] + (["YACT"] if p.has("YACT") else []) + ["WS"]
    return ["X", "WS"]


def stats_source(name: str, p: Problem, kn) -> str:
    """Per (column block, slice): partial column sums into WS[2, SPLIT, K] (and, for the
    forward, overflow flags into WS[2, SPLIT, K] after them)."""
    ind, ind2 = "    ", "        "
    bk, br, sp = kn.BLOCK_K, kn.BLOCK_R, kn.SPLIT
    backward = p.kind == "batchnorm_backward"
    params = stats_params(p)
    data = tuple(r for r in params if r in ("DY", "X", "YACT"))
    nrb = -(-p.R // br)
    _, km, tile = _masks(p, br, bk)
    L = _head(name, params)
    L += [
        f"{ind}cols = tl.program_id(0) * {bk} + tl.arange(0, {bk})",
        f"{ind}sl = tl.program_id(1)",
    ]
    L += _kept(p, "cols", data + (("MEAN",) if backward else ()), ind)
    if backward:
        L.append(f"{ind}shift = {_ld('MEAN', 'ko_MEAN', km)}")
    else:  # x of row 0 (reduced offset 0) per column; 0 where inf or NaN
        L.append(f"{ind}shift = {finite_shift(_ld('X', 'ko_X', km))}")
    L += [
        f"{ind}acc1 = tl.full([{br}, {bk}], 0.0, tl.float32)",
        f"{ind}acc2 = tl.full([{br}, {bk}], 0.0, tl.float32)",
        f"{ind}for rb in range(sl, {nrb}, {sp}):",
        f"{ind2}rows = {_rows(p, 'rb', br)}",
    ]
    L += _reduced(p, "rows", data, ind2)
    evict = p.stream and not kn.REUSE
    L.append(f"{ind2}x = {_ld('X', _tile('X'), tile, evict)}")
    d = "x - shift[None, :]"
    L.append(f"{ind2}d = {f'tl.where({tile}, {d}, 0.0)' if tile else d}")
    if backward:
        L += _dy(p, tile, evict, ind2) + [f"{ind2}acc1 += dy", f"{ind2}acc2 += dy * d"]
    else:
        L += [f"{ind2}acc1 += d", f"{ind2}acc2 += d * d"]
    m = f", mask={km}" if km else ""
    L += [
        f"{ind}s1 = tl.reduce(acc1, 0, _add_combine)",
        f"{ind}s2 = tl.reduce(acc2, 0, _add_combine)",
    ]
    if not backward:
        ind3 = ind2 + "    "
        L += [
            f"{ind}over = ~(s2 < float('inf'))",
            f"{ind}flag = tl.where(over, 0.0, 0.0)",
            f"{ind}if tl.reduce(over.to(tl.int32), 0, _max_combine) > 0:",
            f"{ind2}acc1 = tl.full([{br}, {bk}], 0.0, tl.float32)",
            f"{ind2}acc2 = tl.full([{br}, {bk}], 0.0, tl.float32)",
            f"{ind2}for rb in range(sl, {nrb}, {sp}):",
            f"{ind3}rows = {_rows(p, 'rb', br)}",
        ]
        L += _reduced(p, "rows", data, ind3)
        L.append(f"{ind3}x = {_ld('X', _tile('X'), tile, evict)}")
        d = f"x * {SCALE} - shift[None, :] * {SCALE}"
        L += [
            f"{ind3}d = {f'tl.where({tile}, {d}, 0.0)' if tile else d}",
            f"{ind3}acc1 += d",
            f"{ind3}acc2 += d * d",
            f"{ind2}s1 = tl.where(over, tl.reduce(acc1, 0, _add_combine), s1)",
            f"{ind2}s2 = tl.where(over, tl.reduce(acc2, 0, _add_combine), s2)",
            f"{ind2}flag = tl.where(over, 1.0, 0.0)",
            f"{ind}tl.store(WS + ({2 * sp} + sl) * {p.K} + cols, flag{m})",
        ]
    L += [
        f"{ind}tl.store(WS + sl * {p.K} + cols, s1{m})",
        f"{ind}tl.store(WS + ({sp} + sl) * {p.K} + cols, s2{m})",
    ]
    return "\n".join(L) + "\n"


# ---- 2. finish -------------------------------------------------------------------------------
FINISH_COLS = 16  # columns per finishing program: many programs share the partials
FINISH_ROWS = 32  # partial rows summed per step ([FINISH_ROWS, FINISH_COLS] tiles)


def finish_params(p: Problem) -> list:
    if p.kind == "batchnorm_backward":
        return ["SCALE", "MEAN", "INV_VARIANCE", "DSCALE", "DBIAS", "WS"]
    out = ["X", "SCALE", "BIAS", "EPSILON", "MEAN", "INV_VARIANCE"]
    if p.has("PREV_RUNNING_MEAN"):
        out += [
            "PREV_RUNNING_MEAN",
            "PREV_RUNNING_VAR",
            "MOMENTUM",
            "NEXT_RUNNING_MEAN",
            "NEXT_RUNNING_VAR",
        ]
    return out + ["WS"]


def finish_source(name: str, p: Problem, kn) -> str:
    """Per block of columns: sum the partials, write the statistics and coefficients."""
    ind, ind2 = "    ", "        "
    bf, sp, K, m = FINISH_COLS, kn.SPLIT, p.K, p.count
    sb = min(FINISH_ROWS, 1 << max(0, (sp - 1).bit_length()))
    params = finish_params(p)
    tensors = [r for r in params if r not in ("WS", "EPSILON", "MOMENTUM")]
    km = f"(cols < {K})" if K % bf else None
    L = _head(name, params)
    L += [
        f"{ind}cols = tl.program_id(0) * {bf} + tl.arange(0, {bf})",
        f"{ind}sk = tl.arange(0, {sb})",
    ]
    L += _kept(p, "cols", tensors, ind)
    # partial rows s0 + sk, in a fixed order: the sums are deterministic
    tile = f"(s0 + sk < {sp})[:, None]" + (f" & {km}[None, :]" if km else "")
    L += [
        f"{ind}acc1 = tl.full([{sb}, {bf}], 0.0, tl.float32)",
        f"{ind}acc2 = tl.full([{sb}, {bf}], 0.0, tl.float32)",
        f"{ind}for s0 in range(0, {sp}, {sb}):",
        f"{ind2}acc1 += {_ld('WS', f'(s0 + sk)[:, None] * {K} + cols[None, :]', tile)}",
        f"{ind2}acc2 += {_ld('WS', f'({sp} + s0 + sk)[:, None] * {K} + cols[None, :]', tile)}",
        f"{ind}s1 = tl.reduce(acc1, 0, _add_combine)",
        f"{ind}s2 = tl.reduce(acc2, 0, _add_combine)",
    ]
    coef = f"{3 * sp * K}"
    inv_m = repr(1.0 / m) if m else "0.0"
    mk = f", mask={km}" if km else ""
    if p.kind == "batchnorm_backward":
        L += [
            f"{ind}mean = {_ld('MEAN', 'ko_MEAN', km)}",
            f"{ind}inv = {_ld('INV_VARIANCE', 'ko_INV_VARIANCE', km)}",
            f"{ind}a = {_ld('SCALE', 'ko_SCALE', km)} * inv",
            f"{ind}dscale = s2 * inv",
            ind + _st(p, "DSCALE", "ko_DSCALE", "dscale", km),
            ind + _st(p, "DBIAS", "ko_DBIAS", "s1", km),
            f"{ind}b = -a * inv * dscale * {inv_m}",
            f"{ind}c = -a * s1 * {inv_m} - b * mean",
            f"{ind}tl.store(WS + {coef} + cols, a{mk})",
            f"{ind}tl.store(WS + {coef} + {K} + cols, b{mk})",
            f"{ind}tl.store(WS + {coef} + {2 * K} + cols, c{mk})",
        ]
        return "\n".join(L) + "\n"
    flags = f"(s0 + sk)[:, None] * {K} + {2 * sp * K} + cols[None, :]"
    L += [
        f"{ind}shift = {finite_shift(_ld('X', 'ko_X', km))}",
        f"{ind}m1 = s1 * {inv_m}",
        f"{ind}mean = shift + m1",
        f"{ind}var = tl.maximum(s2 * {inv_m} - m1 * m1, 0.0, propagate_nan=tl.PropagateNan.ALL)",
        f"{ind}inv = 1.0 / tl.sqrt_rn(var + {_scalar(p, 'EPSILON')})",
        # columns some slice took in 2^-80 units: every partial brought to them
        f"{ind}accf = tl.full([{sb}, {bf}], 0.0, tl.float32)",
        f"{ind}for s0 in range(0, {sp}, {sb}):",
        f"{ind2}accf = tl.maximum(accf, {_ld('WS', flags, tile)})",
        f"{ind}fl = tl.reduce(accf, 0, _max_combine) > 0",
        f"{ind}if tl.reduce(fl.to(tl.int32), 0, _max_combine) > 0:",
        f"{ind2}acc1 = tl.full([{sb}, {bf}], 0.0, tl.float32)",
        f"{ind2}acc2 = tl.full([{sb}, {bf}], 0.0, tl.float32)",
        f"{ind2}for s0 in range(0, {sp}, {sb}):",
        f"{ind2}    f = {_ld('WS', flags, tile)} > 0",
        f"{ind2}    v1 = {_ld('WS', f'(s0 + sk)[:, None] * {K} + cols[None, :]', tile)}",
        f"{ind2}    v2 = {_ld('WS', f'({sp} + s0 + sk)[:, None] * {K} + cols[None, :]', tile)}",
        f"{ind2}    acc1 += tl.where(f, v1, v1 * {SCALE})",
        f"{ind2}    acc2 += tl.where(f, v2, v2 * {SCALE} * {SCALE})",
        f"{ind2}m1s = tl.reduce(acc1, 0, _add_combine) * {inv_m}",
        f"{ind2}var_s = tl.maximum(tl.reduce(acc2, 0, _add_combine) * {inv_m} - m1s * m1s, "
        f"0.0, propagate_nan=tl.PropagateNan.ALL)",
        f"{ind2}mean = tl.where(fl, shift + m1s * {UNSCALE}, mean)",
        f"{ind2}inv = tl.where(fl, tl.where(var_s == 0, 1.0 / tl.sqrt_rn("
        f"{_scalar(p, 'EPSILON')} + 0.0 * var_s), {SCALE} / tl.sqrt_rn(var_s)), inv)",
        f"{ind2}var = tl.where(fl, var_s * {UNSCALE} * {UNSCALE}, var)",
        ind + _st(p, "MEAN", "ko_MEAN", "mean", km),
        ind + _st(p, "INV_VARIANCE", "ko_INV_VARIANCE", "inv", km),
    ]
    if p.has("PREV_RUNNING_MEAN"):
        unbias = repr(m / (m - 1))
        L += [
            f"{ind}mom = {_scalar(p, 'MOMENTUM')}",
            f"{ind}rm = {_ld('PREV_RUNNING_MEAN', 'ko_PREV_RUNNING_MEAN', km)}",
            f"{ind}rv = {_ld('PREV_RUNNING_VAR', 'ko_PREV_RUNNING_VAR', km)}",
            ind
            + _st(
                p, "NEXT_RUNNING_MEAN", "ko_NEXT_RUNNING_MEAN", "(1.0 - mom) * rm + mom * mean", km
            ),
            ind
            + _st(
                p,
                "NEXT_RUNNING_VAR",
                "ko_NEXT_RUNNING_VAR",
                f"(1.0 - mom) * rv + mom * (var * {unbias})",
                km,
            ),
        ]
    L += [
        f"{ind}a = {_ld('SCALE', 'ko_SCALE', km)} * inv",
        f"{ind}b = {_ld('BIAS', 'ko_BIAS', km)} - mean * a",
        f"{ind}tl.store(WS + {coef} + cols, a{mk})",
        f"{ind}tl.store(WS + {coef} + {K} + cols, b{mk})",
    ]
    return "\n".join(L) + "\n"


# ---- 3. normalize (training and inference) / dx (backward) -----------------------------------
def apply_params(p: Problem) -> list:
    if p.kind == "batchnorm_backward":
        return ["DY", "X", "DX"] + (["YACT"] if p.has("YACT") else []) + ["WS"]
    out = ["X"] + (["Z"] if p.has("Z") else []) + (["YPRE"] if p.has("YPRE") else []) + ["OUT"]
    if p.kind == "batchnorm_inference":
        return out + ["MEAN", "INV_VARIANCE", "SCALE", "BIAS"]
    return out + ["WS"]


def apply_source(name: str, p: Problem, kn, split: int) -> str:
    """Program (row block, column block): the output tile from x (and dy) with the
    per-column coefficients; ``split`` locates the coefficients in the workspace."""
    from ...ops.pointwise import DEFAULT_ATTRS, MODES

    ind = "    "
    ar, bk, K = kn.APPLY_R, kn.BLOCK_K, p.K
    params = apply_params(p)
    data = [r for r in params if r in ("X", "DY", "DX", "Z", "YPRE", "OUT", "YACT")]
    _, km, tile = _masks(p, ar, bk)
    L = _head(name, params)
    block = f"{-(-p.R // ar) - 1} - tl.program_id(0)" if kn.REUSE else "tl.program_id(0)"
    L += [
        f"{ind}rows = {_rows(p, block, ar)}",
        f"{ind}cols = tl.program_id(1) * {bk} + tl.arange(0, {bk})",
    ]
    stats = ("MEAN", "INV_VARIANCE", "SCALE", "BIAS") if p.kind == "batchnorm_inference" else ()
    L += _kept(p, "cols", tuple(data) + stats, ind)
    L += _reduced(p, "rows", data, ind)
    coef = 3 * split * K
    if p.kind == "batchnorm_inference":
        L += [
            f"{ind}a = {_ld('SCALE', 'ko_SCALE', km)} * "
            f"{_ld('INV_VARIANCE', 'ko_INV_VARIANCE', km)}",
            f"{ind}b = {_ld('BIAS', 'ko_BIAS', km)} - {_ld('MEAN', 'ko_MEAN', km)} * a",
        ]
    else:
        L += [
            f"{ind}a = {_ld('WS', f'{coef} + cols', km)}",
            f"{ind}b = {_ld('WS', f'{coef + K} + cols', km)}",
        ]
    L.append(f"{ind}x = {_ld('X', _tile('X'), tile, True)}")
    if p.kind == "batchnorm_backward":
        L.append(f"{ind}c = {_ld('WS', f'{coef + 2 * K} + cols', km)}")
        L += _dy(p, tile, True, ind)
        L += [
            f"{ind}v = a[None, :] * dy + b[None, :] * x + c[None, :]",
            ind + _st(p, "DX", _tile("DX"), "v", tile),
        ]
        return "\n".join(L) + "\n"
    L.append(f"{ind}v = x * a[None, :] + b[None, :]")
    if p.has("YPRE"):
        L.append(ind + _st(p, "YPRE", _tile("YPRE"), "v", tile))
    for mode, attrs in p.epilogue:
        if mode.name == "ADD":
            L.append(f"{ind}v = v + {_ld('Z', _tile('Z'), tile, True)}")
        else:
            L.append(f"{ind}v = {MODES[mode].triton('v', {**DEFAULT_ATTRS, **attrs})}")
    L.append(ind + _st(p, "OUT", _tile("OUT"), "v", tile))
    return "\n".join(L) + "\n"
