"""Triton sources of the norm engine (the math is in ``ops/norm.py``).

A problem is R rows of L elements (``ops.norm.Geometry``): X is seen in the geometry's
view (group / instance norm insert the group axis), its axes split into row axes and
normalized (column) axes -- the columns ordered by X's strides, so that lanes walk
memory -- and adjacent axes merge where every tensor allows it. Every
tensor reaches element (row, column) through its own strides -- row part + column part,
literals of the generated source -- so any layout works, and a parameter (SCALE, BIAS)
or statistic broadcasts by stride 0.

Forward:
- ``rows`` (FWD rows in registers): a program holds BLOCK_ROWS whole rows
  ([BLOCK_ROWS, BLOCK_L], BLOCK_L >= L): mean (shifted by the row's first element, so a
  constant row's is exact), centered variance, output, one read.
- every forward path: a row whose statistics overflow float32 (|x - mean| beyond ~2^63,
  sums of values near 3.4e38) is redone in units of 2^-80 (``_rows_rescue``,
  ``_loop_rescue``, the split's flagged chunks); the common case pays one comparison.
- ``loop`` (long rows): one program per row streams it twice in BLOCK_L tiles: shifted
  sums (x - k, k = the row's first element, so the variance does not cancel), then the
  output, walking the row backwards so that the tiles read last in the first loop -- the
  ones still in L2 -- are read first.
- ``split`` (``_split_kernels``): SPLIT chunks per row over two kernels (partial sums,
  then the output), for few very long rows.
Backward (xh = (x - mean) r, g = dy scale, c1 = mean(g xh), c2 = mean(g)):
- ``rows``: NP persistent programs each take row tiles t = pid, pid + NP, ...: dx in
  registers, and DSCALE / DBIAS partials (column sums of dy xh and dy) kept in registers
  and stored once per program to the workspace [2, NP, L].
- ``cols`` (long rows, and group / instance norm): a statistics kernel (row, chunk) ->
  partial c1, c2 in the workspace; then a column-block kernel: program (column block,
  parameter group g, row group) walks its rows n (row = n G + g), writes dx and keeps
  DSCALE / DBIAS partials for its columns [2, NG, G, L].
- a finishing kernel sums the partials in a fixed order (deterministic, no atomics).
"""

from __future__ import annotations

import math

from ...ops import norm as N
from ...runtime.kernel_math import cast
from ..fusion._codegen import COMBINE_HELPERS, TL_TYPE, collapse, offset_expr, padded_strides

INT32_LIMIT = 2**31 - 1
IND, IND2 = "    ", "        "


class Problem:
    """Rows of one norm node and the strides of every tensor the kernels touch.

    ``descs`` maps a kernel parameter name (X, Y, SCALE, ..., E<uid> for fused tensors)
    to its TensorDesc; ``stats`` names the statistics tensors (their dims are
    ``geo.stats_dims``, not X-like)."""

    def __init__(self, geo: N.Geometry, norm: str, descs: dict, stats: set):
        self.geo, self.norm, self.descs = geo, norm, descs
        grouped = norm in (N.GROUP, N.INSTANCE)
        view = list(geo.view)
        rank = len(view) - (1 if grouped else 0)
        st = {}
        for name, d in descs.items():
            if name in stats and grouped:
                p = padded_strides(d, rank)
                s = [p[0], p[1]] + [0] * (len(view) - 2)
            else:
                p = padded_strides(d, rank)
                s = [p[0], p[1] * view[2], p[1]] + p[2:] if grouped else p
            st[name] = [0 if v == 1 else x for v, x in zip(view, s)]
        # columns walk X's memory order (the normalized axes by falling stride), so that
        # consecutive lanes read consecutive addresses in any layout (NHWC group norm);
        # rows keep the view's order (the backward's row = n G + g needs it)
        outer = [i for i in range(len(view)) if i not in geo.axes]
        inner = sorted(geo.axes, key=lambda i: -abs(st["X"][i]))
        order = outer + inner
        self.jstride = {}  # normalized view axis -> its stride in column space
        for k, i in enumerate(inner):
            self.jstride[i] = math.prod(view[j] for j in inner[k + 1 :])
        classes = [1 if i in geo.axes else 0 for i in order]
        st = {n: [v[i] for i in order] for n, v in st.items()}
        sizes, strides, cls, _ = collapse([view[i] for i in order], st, classes, set())
        self.outer = [s for s, c in zip(sizes, cls) if c == 0] or [1]
        self.inner = [s for s, c in zip(sizes, cls) if c == 1] or [1]
        self.row_strides = {
            n: [x for x, c in zip(v, cls) if c == 0] or [0] for n, v in strides.items()
        }
        self.col_strides = {
            n: [x for x, c in zip(v, cls) if c == 1] or [0] for n, v in strides.items()
        }
        self.R, self.L = math.prod(self.outer), math.prod(self.inner)
        self.G = geo.groups if grouped else 1  # parameter groups along the rows
        self.S = math.prod(geo.view[3:]) if grouped else 1  # elements per channel in a row
        self.big = (
            any(d.span >= INT32_LIMIT for d in descs.values()) or self.R * self.L >= INT32_LIMIT
        )
        self.types = {n: d.data_type for n, d in descs.items()}

    def row_dependent(self, name: str) -> bool:
        return any(self.row_strides[name])

    # ---- offsets ------------------------------------------------------------------------
    def row_offsets(self, var: str, names, indent: str) -> list[str]:
        """Lines setting ``off_<name>`` to each tensor's offset of row(s) ``var``."""
        lines = _decompose(var, self.outer, "ri", indent)
        idx = [f"ri{k}" for k in range(len(self.outer))]
        for n in names:
            off = offset_expr(idx, self.row_strides[n], f"{var} * 0")
            lines.append(f"{indent}off_{n} = {off}")
        return lines

    def col_offsets(self, var: str, names, indent: str) -> list[str]:
        """Lines setting ``coff_<name>`` to each tensor's offset of column(s) ``var``."""
        lines = _decompose(var, self.inner, "ci", indent)
        idx = [f"ci{k}" for k in range(len(self.inner))]
        for n in names:
            off = offset_expr(idx, self.col_strides[n], f"{var} * 0")
            lines.append(f"{indent}coff_{n} = {off}")
        return lines


def _decompose(var: str, sizes: list, prefix: str, indent: str) -> list[str]:
    """Lines splitting flat index ``var`` (row-major over ``sizes``) into ``{prefix}{k}``,
    through a temporary of its own: rows (scalars) and columns (vectors) are split in
    the same kernel, and a loop may not change a variable's type."""
    if len(sizes) == 1:
        return [f"{indent}{prefix}0 = {var}"]
    tmp = f"_{prefix}"
    lines = [f"{indent}{tmp} = {var}"]
    for k in range(len(sizes) - 1, 0, -1):
        lines += [
            f"{indent}{prefix}{k} = {tmp} % {sizes[k]}",
            f"{indent}{tmp} = {tmp} // {sizes[k]}",
        ]
    return lines + [f"{indent}{prefix}0 = {tmp}"]


def header(name: str, params: list) -> list[str]:
    return [COMBINE_HELPERS, "@triton.jit", f"def {name}({', '.join(params)}):"]


def pid_expr(p: Problem, axis: int = 0) -> str:
    return f"tl.program_id({axis}).to(tl.int64)" if p.big else f"tl.program_id({axis})"


def ptr(name: str, tile2d: bool, row_dep: bool = True) -> str:
    """The address expression of ``name`` at the current (rows, cols) tile."""
    if not tile2d:
        return f"{name} + off_{name} + coff_{name}"
    if not row_dep:
        return f"{name} + coff_{name}[None, :]"
    return f"{name} + off_{name}[:, None] + coff_{name}[None, :]"


def load(p: Problem, name: str, tile2d: bool, mask: str, last: bool = True) -> str:
    ev = ', eviction_policy="evict_first"' if last else ""
    return f"tl.load({ptr(name, tile2d)}, mask={mask}, other=0.0{ev}).to(tl.float32)"


def load_param(p: Problem, name: str, tile2d: bool, cmask: str, mask: str) -> str:
    """A parameter (SCALE / BIAS) tile: a [BLOCK_L] row broadcast over the rows when it
    does not depend on the row, else gathered per (row, column) (group norm)."""
    if p.row_dependent(name):
        return f"tl.load({ptr(name, tile2d)}, mask={mask}, other=0.0).to(tl.float32)"
    m = f"{cmask}[None, :]" if tile2d else cmask
    return f"tl.load({ptr(name, tile2d, False)}, mask={m}, other=0.0).to(tl.float32)"


def store(p: Problem, name: str, tile2d: bool, value: str, mask: str, stream: bool = False) -> str:
    """A store; ``stream`` (the long-row loops) asks L2 to drop the line first, so that
    the output does not push out the input rows the loop reads a second time."""
    ev = ', eviction_policy="evict_first"' if stream else ""
    return f"tl.store({ptr(name, tile2d)}, {cast(value, TL_TYPE[p.types[name]])}, mask={mask}{ev})"


def stat_store(p: Problem, name: str, value: str, mask: str | None) -> str:
    m = f", mask={mask}" if mask else ""
    return f"tl.store({name} + off_{name}, {cast(value, TL_TYPE[p.types[name]])}{m})"


def chunk(L: int, block: int, split: int) -> int:
    """Elements per (row, chunk) program of the statistics kernel: a BLOCK_L multiple."""
    per = -(-L // split)
    return -(-per // block) * block


# ---- forward ----------------------------------------------------------------------------------
class FwdSpec:
    """What a forward kernel computes: ``rms``; ``training`` (store MEAN unless RMS, and
    INV_VARIANCE); ``bias``; ``residual`` (X = X + R, the sum stored to XS when
    ``store_sum``); ``store_y`` (Y is an output the epilogue does not store); ``ep`` the
    fused pointwise epilogue (``fusion.epilogue.Epilogue``) and its graph."""

    def __init__(
        self,
        rms,
        training,
        bias,
        residual=False,
        store_sum=False,
        store_y=True,
        ep=None,
        graph=None,
    ):
        self.rms, self.training, self.bias = rms, training, bias
        self.residual, self.store_sum, self.store_y = residual, store_sum, store_y
        self.ep, self.graph = ep, graph

    def names(self) -> list[str]:
        """Tensor parameters of the kernel, in order (then EPS, then epilogue scalars)."""
        out = ["X"] + (["R"] if self.residual else []) + (["XS"] if self.store_sum else [])
        out += ["SCALE"] + (["BIAS"] if self.bias else []) + (["Y"] if self.store_y else [])
        if self.training:
            out += ([] if self.rms else ["MEAN"]) + ["INV_VARIANCE"]
        if self.ep is not None:
            out += [f"E{u}" for u in self.ep.inputs + self.ep.outputs]
        return out

    def params(self) -> list[str]:
        return self.names() + ["EPS"] + ([f"s{u}" for u in self.ep.scalars] if self.ep else [])

    def stats(self) -> list[str]:
        return [n for n in ("MEAN", "INV_VARIANCE") if n in self.names()]


def _epilogue(f: FwdSpec, tile2d: bool, indent: str) -> list[str]:
    if f.ep is None:
        return []
    from ..fusion import epilogue as fe

    def off(u):
        return f"off_E{u}[:, None] + coff_E{u}[None, :]" if tile2d else f"off_E{u} + coff_E{u}"

    _, body = fe.source(f.graph, f.ep, off, "mask")
    return [f"{indent}acc = y"] + [indent + line for line in body.splitlines() if line.strip()]


def _x_lines(
    p: Problem, f: FwdSpec, tile2d: bool, mask: str, last: bool, indent: str, store_sum: bool
) -> list[str]:
    lines = [f"{indent}x = {load(p, 'X', tile2d, mask, last)}"]
    if f.residual:
        lines.append(f"{indent}x = x + {load(p, 'R', tile2d, mask, last)}")
    if store_sum and f.store_sum:
        lines.append(indent + store(p, "XS", tile2d, "x", mask))
    return lines


def _y_lines(p: Problem, f: FwdSpec, tile2d: bool, xc: str, rstd: str, indent: str) -> list:
    lines = [f"{indent}w = {load_param(p, 'SCALE', tile2d, 'cmask', 'mask')}"]
    y = f"{xc} * {rstd} * w"
    if f.bias:
        lines.append(f"{indent}b = {load_param(p, 'BIAS', tile2d, 'cmask', 'mask')}")
        y += " + b"
    lines.append(f"{indent}y = {y}")
    lines += _epilogue(f, tile2d, indent)
    if f.store_y:
        lines.append(indent + store(p, "Y", tile2d, "y", "mask", not tile2d))
    return lines


def fwd_rows_source(name: str, p: Problem, kn, f: FwdSpec) -> str:
    """One program per BLOCK_ROWS whole rows in registers."""
    br, bl = kn.BLOCK_ROWS, kn.BLOCK_L
    names = f.names()
    cols = f"tl.arange(0, {bl})" + (".to(tl.int64)" if p.big else "")
    L = header(name, f.params()) + [
        f"{IND}rows = {pid_expr(p)} * {br} + tl.arange(0, {br})",
        f"{IND}cols = {cols}",
        f"{IND}rmask = rows < {p.R}",
        f"{IND}cmask = cols < {p.L}",
        f"{IND}mask = rmask[:, None] & cmask[None, :]",
    ]
    L += p.row_offsets("rows", names, IND)
    L += p.col_offsets("cols", [n for n in names if n not in f.stats()], IND)
    L += _x_lines(p, f, True, "mask", True, IND, True)
    if f.rms:
        L += [f"{IND}xc = x", f"{IND}ms = tl.reduce(x * x, 1, _add_combine) / {p.L}"]
    else:  # the mean shifted by the row's first element: exact for a constant row
        k = "tl.load(X + off_X, mask=rmask, other=0.0).to(tl.float32)"
        if f.residual:
            k += " + tl.load(R + off_R, mask=rmask, other=0.0).to(tl.float32)"
        L += [
            f"{IND}k = {finite_shift(k)}",
            f"{IND}mean = k + tl.reduce(tl.where(mask, x - k[:, None], 0.0), 1, "
            f"_add_combine) / {p.L}",
            f"{IND}xc = tl.where(mask, x - mean[:, None], 0.0)",
            f"{IND}ms = tl.reduce(xc * xc, 1, _add_combine) / {p.L}",
        ]
    L.append(f"{IND}rstd = 1.0 / tl.sqrt(ms + EPS)")
    L += _rows_rescue(p, f)
    L += _y_lines(p, f, True, "xc", "ry[:, None]", IND)
    if f.training:
        if not f.rms:
            L.append(IND + stat_store(p, "MEAN", "mean", "rmask"))
        L.append(IND + stat_store(p, "INV_VARIANCE", "rstd", "rmask"))
    return "\n".join(L) + "\n"


# ---- statistics beyond float32's range ---------------------------------------------------
# |x - mean| beyond ~2^63 overflows its square (and a sum of values near 3.4e38 the sum):
# a row whose statistics come out inf or NaN is redone in units of SCALE (2^-80, exact),
# where x^2 <= 2^98 and the variance's smallest terms (< 2^-46) are negligible. eps
# vanishes in those units (eps 2^-160 underflows): a constant row (variance 0) gets
# 1 / sqrt(eps) itself. A row holding inf or NaN is redone too and stays NaN.
SCALE, UNSCALE = "8.271806125530277e-25", "1.2089258196146292e+24"  # 2^-80, 2^80


def _scaled_stats(ms: str, indent: str) -> list[str]:
    """Lines turning ``ms``, the scaled variance, into ``ry`` (1 / sqrt(ms), applied to
    scaled centered values) and ``rstd`` (the statistic, in the data's units)."""
    return [
        f"{indent}ry_s = tl.where({ms} == 0, 0.0, 1.0 / tl.sqrt({ms}))",
        f"{indent}rstd_s = tl.where({ms} == 0, 1.0 / tl.sqrt(EPS + 0.0 * {ms}), ry_s * {SCALE})",
    ]


def finite_shift(k: str) -> str:
    """The shift ``k`` (a row's first element), 0 when it is inf or NaN: x - inf would
    make the mean NaN where PyTorch's is inf."""
    return f"tl.where(tl.abs({k}) < float('inf'), {k}, 0.0)"


def _rows_rescue(p: Problem, f: FwdSpec) -> list[str]:
    """The rows path: ``ry`` (the inverse deviation applied to ``xc``) and, for rows whose
    statistics overflowed, ``xc``, ``mean``, ``rstd`` recomputed from x in SCALE units."""
    I2 = IND2
    L = [
        f"{IND}ry = rstd",
        f"{IND}over = ~(ms < float('inf'))",
        f"{IND}if tl.reduce(over.to(tl.int32), 0, _max_combine) > 0:",
        f"{I2}xs = x * {SCALE}",
    ]
    if f.rms:
        L += [f"{I2}xcs = xs", f"{I2}ms_s = tl.reduce(xs * xs, 1, _add_combine) / {p.L}"]
    else:
        L += [
            f"{I2}ks = k * {SCALE}",
            f"{I2}mean_s = ks + tl.reduce(tl.where(mask, xs - ks[:, None], 0.0), 1, "
            f"_add_combine) / {p.L}",
            f"{I2}xcs = tl.where(mask, xs - mean_s[:, None], 0.0)",
            f"{I2}ms_s = tl.reduce(xcs * xcs, 1, _add_combine) / {p.L}",
            f"{I2}mean = tl.where(over, mean_s * {UNSCALE}, mean)",
        ]
    L += _scaled_stats("ms_s", I2)
    L += [
        f"{I2}xc = tl.where(over[:, None], xcs, xc)",
        f"{I2}ry = tl.where(over, ry_s, ry)",
        f"{I2}rstd = tl.where(over, rstd_s, rstd)",
    ]
    return L


def _loop_rescue(p: Problem, f: FwdSpec, bl: int, nt: int, ar: str, names) -> list[str]:
    """The long-row path: ``sc`` (1, or SCALE for a redone row) and ``ry`` (the inverse
    deviation applied to ``x sc - mean sc``); a row whose statistics overflowed is read
    once more, its shifted sums taken in SCALE units."""
    I2, I3 = IND2, IND2 + "    "
    L = [
        f"{IND}ry = rstd",
        f"{IND}sc = tl.where(rstd == rstd, 1.0, 1.0)",
        f"{IND}if ~(q < float('inf')):",
        f"{I2}acc_s = tl.full([{bl}], 0.0, tl.float32)",
        f"{I2}acc_q = tl.full([{bl}], 0.0, tl.float32)",
        f"{I2}for start in range(0, {nt * bl}, {bl}):",
        f"{I3}cols = start + {ar}",
        f"{I3}cmask = cols < {p.L}",
        f"{I3}mask = cmask",
    ]
    L += p.col_offsets("cols", [n for n in ("X", "R") if n in names], I3)
    L += _x_lines(p, f, False, "mask", False, I3, False)
    if f.rms:
        L += [
            f"{I3}xs = x * {SCALE}",
            f"{I3}acc_q += xs * xs",
            f"{I2}ms_s = tl.reduce(acc_q, 0, _add_combine) / {p.L}",
        ]
    else:
        L += [
            f"{I3}d = tl.where(cmask, x * {SCALE} - k * {SCALE}, 0.0)",
            f"{I3}acc_s += d",
            f"{I3}acc_q += d * d",
            f"{I2}q_s = tl.reduce(acc_q, 0, _add_combine) / {p.L}",
            f"{I2}s_s = tl.reduce(acc_s, 0, _add_combine) / {p.L}",
            f"{I2}mean = k + s_s * {UNSCALE}",
            f"{I2}ms_s = tl.maximum(q_s - s_s * s_s, 0.0, propagate_nan=tl.PropagateNan.ALL)",
        ]
    L += _scaled_stats("ms_s", I2)
    L += [f"{I2}ry = ry_s", f"{I2}rstd = rstd_s", f"{I2}sc = sc * {SCALE}"]
    return L


def fwd_loop_source(name: str, p: Problem, kn, f: FwdSpec) -> str:
    """One program per row, two loops over BLOCK_L tiles (the second one backwards)."""
    bl = kn.BLOCK_L
    nt = -(-p.L // bl)
    names = f.names()
    ar = f"tl.arange(0, {bl})" + (".to(tl.int64)" if p.big else "")
    L = header(name, f.params()) + [f"{IND}row = {pid_expr(p)}"]
    L += p.row_offsets("row", names, IND)
    if not f.rms:  # the shift: the row's first element (column 0 is at offset 0)
        k = "tl.load(X + off_X).to(tl.float32)"
        if f.residual:
            k += " + tl.load(R + off_R).to(tl.float32)"
        L.append(f"{IND}k = {finite_shift(k)}")
    L += [
        f"{IND}acc_s = tl.full([{bl}], 0.0, tl.float32)",
        f"{IND}acc_q = tl.full([{bl}], 0.0, tl.float32)",
        f"{IND}for start in range(0, {nt * bl}, {bl}):",
        f"{IND2}cols = start + {ar}",
        f"{IND2}cmask = cols < {p.L}",
        f"{IND2}mask = cmask",
    ]
    L += p.col_offsets("cols", [n for n in ("X", "R", "XS") if n in names], IND2)
    L += _x_lines(p, f, False, "mask", False, IND2, True)
    if f.rms:
        L.append(f"{IND2}acc_q += x * x")
    else:
        L += [
            f"{IND2}d = tl.where(cmask, x - k, 0.0)",
            f"{IND2}acc_s += d",
            f"{IND2}acc_q += d * d",
        ]
    L.append(f"{IND}q = tl.reduce(acc_q, 0, _add_combine) / {p.L}")
    if f.rms:
        L.append(f"{IND}ms = q")
    else:
        L += [
            f"{IND}s = tl.reduce(acc_s, 0, _add_combine) / {p.L}",
            f"{IND}mean = k + s",
            f"{IND}ms = tl.maximum(q - s * s, 0.0, propagate_nan=tl.PropagateNan.ALL)",
        ]
    L.append(f"{IND}rstd = 1.0 / tl.sqrt(ms + EPS)")
    L += _loop_rescue(p, f, bl, nt, ar, names)
    L += [
        f"{IND}for i in range(0, {nt}):",
        f"{IND2}cols = ({nt - 1} - i) * {bl} + {ar}",
        f"{IND2}cmask = cols < {p.L}",
        f"{IND2}mask = cmask",
    ]
    L += p.col_offsets("cols", [n for n in names if n not in f.stats()], IND2)
    L += _x_lines(p, f, False, "mask", True, IND2, False)
    L += _y_lines(p, f, False, "x * sc" if f.rms else "(x * sc - mean * sc)", "ry", IND2)
    if f.training:
        if not f.rms:
            L.append(IND + stat_store(p, "MEAN", "mean", None))
        L.append(IND + stat_store(p, "INV_VARIANCE", "rstd", None))
    return "\n".join(L) + "\n"
