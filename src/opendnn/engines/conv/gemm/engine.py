"""Explicit-GEMM convolution forward (CUDNN_CONVOLUTION_FWD_ALGO_GEMM): im2col into the
workspace, then the matmul engine (with the convolution's epilogue fused into it).

The convolution is a batched GEMM over (n, g):

    A[n, g, p, kk]  = x[n, g*C/G + c, o_p * stride - pre + r * dil]   (the im2col matrix)
    B[g, kk, j]     = w[g*K/G + j, c, r]
    Y[n, g, p, j]   = sum_kk A B            (Y = y viewed as [N, G, prod(out), K/G])

kk enumerates (tap, channel) in the order the filter is laid out in memory -- (c, t) for
KCRS filters, (t, c) for KRSC -- so B is the filter itself viewed as a matrix. y (and
every epilogue tensor) must walk its output pixels with one stride (true for packed NCHW
and NHWC). A 1x1, stride-1, unpadded convolution needs no im2col: A is x itself.
"""

from __future__ import annotations

import dataclasses
import functools
import math

from ....enums import DataType
from ....graph.graph import Graph
from ....runtime.launch import LaunchList, kernel_from_source
from ...base import Executable
from ...matmul.delegate import MatmulDelegateEngine
from ..analysis import analyze


def _uniform(sizes, strides):
    """The single stride that walks ``sizes`` row-major with ``strides``, or None."""
    run = None
    expect = None
    for size, st in reversed(list(zip(sizes, strides))):
        if size == 1:
            continue
        if run is None:
            run, expect = st, st * size
        elif st != expect:
            return None
        else:
            expect = st * size
    return run if run is not None else 0


@dataclasses.dataclass
class GemmPlan:
    a: object  # ConvAnalysis
    order: str  # "ct" or "tc": how kk enumerates (channel, tap)
    kk_stride: int  # B's row stride (filter elements per kk step)
    direct: bool  # 1x1/s1/p0: A is x itself, no im2col
    views: dict  # uid -> (dims, strides) of y-shaped tensors as [N, G, P, K/G]
    # the batch folded into the rows: every operand walks (n, p) with one stride, so
    # the GEMM is one [N*P, kgemm] x [kgemm, K/G] per group (views are [1, G, N*P, K/G])
    # instead of N GEMMs of P rows each -- a 7x7 image's 49 rows would fill a 128-row
    # tile to 38%
    fold: bool = False


@functools.lru_cache(maxsize=256)
def plan_gemm(graph) -> GemmPlan | str:
    a = analyze(graph, "conv_fprop")
    if isinstance(a, str):
        return a
    if a.prologue is not None:
        return "the explicit GEMM has no prologue (im2col would have to apply it)"
    geo = a.geo
    taps, cg, kg = math.prod(geo.filt), geo.c_per_group, geo.k_per_group
    ws = a.w.strides
    tap_stride = _uniform(geo.filt, ws[2:]) if taps > 1 else 0
    if taps == 1:
        order, kk_stride = "ct", ws[1]  # kk = c
    elif cg == 1 and tap_stride is not None:
        order, kk_stride = "tc", tap_stride  # depthwise: kk = t
    elif tap_stride == 1 and ws[1] == taps:
        order, kk_stride = "ct", 1  # KCRS: kk = c * taps + t
    elif ws[1] == 1 and tap_stride == cg:
        order, kk_stride = "tc", 1  # KRSC: kk = t * C/G + c
    else:
        return "the filter is neither KCRS- nor KRSC-packed: it is not a GEMM matrix"
    direct = (
        taps == 1
        and all(s == 1 for s in geo.stride)
        and not any(geo.pre)
        and tuple(geo.out_dims) == tuple(geo.in_dims)
        and _uniform(geo.in_dims, a.x.strides[2:]) is not None
    )
    p = math.prod(geo.out_dims)
    if not direct and geo.n * geo.groups * p >= 2**31:
        return "the im2col matrix's rows (n, g, pixel) are indexed in int32: 2**31 or more"
    if direct:
        xs = a.x.strides
        a_rows = _rows(xs[0] if geo.n > 1 else 0, _uniform(geo.in_dims, xs[2:]), p)
    else:  # the im2col workspace [N, G, P, kgemm], packed: rows fold with one group
        a_rows = 0 if geo.groups == 1 else None
    pv = pixel_views(graph, [a.y.uid] + a.ep.inputs + a.ep.outputs, geo, p, kg, a_rows)
    if isinstance(pv, str):
        return pv
    views, fold = pv
    return GemmPlan(a, order, kk_stride, direct, views, fold)


def _rows(sn: int, sp: int, p: int) -> int | None:
    """The one stride that walks a tensor's (n, pixel) rows, batch stride ``sn`` and pixel
    stride ``sp`` over ``p`` pixels (0: broadcast over both), or None when there is none."""
    if sn == 0 and sp == 0:
        return 0
    if p == 1:
        return sn
    return sp if sn == p * sp else None


def pixel_views(graph, uids, geo, p: int, cols: int, a_rows) -> tuple[dict, bool] | str:
    """The GEMM views of the output-shaped tensors ``uids`` ([N, G*cols, pixels...], ``p``
    pixels): ({uid: (dims, strides)}, fold), or why a tensor cannot be one. ``fold`` when
    the A operand's rows (``a_rows``, None: no single stride) and every tensor walk
    (n, pixel) with one stride; the views are then [1, G, N*p, cols], else
    [N, G, p, cols]."""
    parts = {}
    for u in uids:
        d = graph.tensors[u]
        sp = _uniform(d.dims[2:], d.strides[2:])
        if sp is None:
            return f"'{d.label()}' does not walk its pixels with one stride"
        sn = d.strides[0] if d.dims[0] != 1 else 0
        sk = d.strides[1] if d.dims[1] != 1 else 0
        sp = sp if math.prod(d.dims[2:]) != 1 else 0
        parts[u] = (sn, sk, sp)
    fold = (
        geo.n > 1
        and a_rows is not None
        and all(_rows(sn, sp, p) is not None for sn, _, sp in parts.values())
    )
    views = {}
    for u, (sn, sk, sp) in parts.items():
        if fold:
            views[u] = ([1, geo.groups, geo.n * p, cols], [0, cols * sk, _rows(sn, sp, p), sk])
        else:
            views[u] = ([geo.n, geo.groups, p, cols], [sn, cols * sk, sp, sk])
    return views, fold


def gemm_key(name: str, plan, image: str) -> str:
    """The calibration key of a GEMM plan ``plan`` (a reason string: ``name``) whose
    image operand is attribute ``image`` of its analysis: ``name:rows`` when folded,
    ``name:nchw`` when that image has more than one channel and a channel stride other
    than 1 (``:nchw:fp32`` for float32 data, whose pixel-fastest operand the tensor cores
    cannot read in place under TF32), else ``name``."""
    if isinstance(plan, str):
        return name
    if plan.fold:
        return f"{name}:rows"
    t = getattr(plan.a, image)
    if t.dims[1] > 1 and t.strides[1] != 1:
        return f"{name}:nchw" + (":fp32" if t.data_type == DataType.FLOAT else "")
    return name


def columns_key(name: str, plan, image: str) -> str:
    """The calibration key of a column GEMM (``GemmColumnsConvEngine``): ``name``, with
    ``:fp32`` for float32 data (see ``gemm_key``)."""
    if isinstance(plan, str):
        return name
    return name + (":fp32" if getattr(plan.a, image).data_type == DataType.FLOAT else "")


def gemm_graph(graph, ep, out_uid: int, a_spec: tuple, b_spec: tuple, views: dict) -> tuple:
    """The matmul graph C = A @ B whose C stands for tensor ``out_uid`` of ``graph``, with
    epilogue ``ep`` replayed on it; ``a_spec`` / ``b_spec``: (dims, strides, data type) of
    the operands, ``views``: the GEMM views of ``out_uid`` and the epilogue's tensors.
    Returns (op graph, synthetic uid -> original uid, A's uid, B's uid)."""
    g = Graph(intermediate_data_type=DataType.FLOAT, compute_data_type=DataType.FLOAT)
    ta = g.tensor(a_spec[0], a_spec[1], a_spec[2], name="A")
    tb = g.tensor(b_spec[0], b_spec[1], b_spec[2], name="B")
    mapping = {}
    tens = {}

    def view(uid):
        if uid not in tens:
            d = graph.tensors[uid]
            dims, strides = views[uid] if uid in views else ([1], [1])
            tens[uid] = g.tensor(
                dims, strides, d.data_type, name=d.name, is_pass_by_value=d.is_pass_by_value
            )
        return tens[uid]

    c = g.matmul(ta, tb, name="conv_as_gemm")
    tens[out_uid] = c
    for n in ep.nodes:
        ins = [view(u) for u in n.inputs.values()]
        out = g._pointwise(n.mode, ins, n.name, n.compute_data_type, **n.op_attrs())
        tens[n.outputs["OUT_0"]] = out
    for u in ep.outputs:
        d = graph.tensors[u]
        dims, strides = views[u]
        tens[u].set_output(True).set_dim(dims).set_stride(strides).set_data_type(d.data_type)
    g.validate()
    for orig, t in tens.items():
        mapping[t.uid] = orig
    return g.op_graph, mapping, ta.uid, tb.uid


def _synthetic(graph, gp: GemmPlan) -> tuple:
    """The matmul graph that does the convolution's work, and its uid -> original uid map."""
    a, geo = gp.a, gp.a.geo
    p, taps = math.prod(geo.out_dims), math.prod(geo.filt)
    kgemm = taps * geo.c_per_group
    dt = a.x.data_type
    rows = geo.n * p if gp.fold else p
    if gp.direct:
        xs = a.x.strides
        sp = _uniform(geo.in_dims, xs[2:])
        sp = _rows(xs[0] if geo.n > 1 else 0, sp, p) if gp.fold else sp
        a_strides = [0 if gp.fold else xs[0], geo.c_per_group * xs[1], sp, xs[1]]
    else:
        a_strides = [geo.groups * p * kgemm, p * kgemm, kgemm, 1]  # the workspace matrix
    a_dims = [1 if gp.fold else geo.n, geo.groups, rows, kgemm]
    ws = a.w.strides
    b_spec = (
        [1, geo.groups, kgemm, geo.k_per_group],
        [0, geo.k_per_group * ws[0], gp.kk_stride, ws[0]],
        dt,
    )
    return gemm_graph(graph, a.ep, a.y.uid, (a_dims, a_strides, dt), b_spec, gp.views)


class GemmConvEngine(MatmulDelegateEngine):
    """im2col into the workspace + the Triton matmul engine (epilogue fused there)."""

    id = 6
    name = "conv_gemm"

    def calibration_key(self, graph, config) -> str:
        """``conv_gemm:rows`` when the batch folds into the GEMM's rows (``GemmPlan.fold``:
        one tall GEMM, which ran at 0.6-0.85 of the matmul model on ResNet-50's and the
        depthwise sets' 1x1 layers in NHWC); ``conv_gemm:nchw`` when x's channels are not
        unit-stride (the direct GEMM's A operand is then pixel-fastest, which the
        matmul model does not charge); else the engine's name."""
        return gemm_key(self.name, plan_gemm(graph), "x")

    # the formulation: its plan (or reason) and its matmul graph, (graph, uid -> original
    # uid, x's synthetic uid, the filter's); GemmColumnsConvEngine swaps both
    def plan(self, graph):
        return plan_gemm(graph)

    def synthetic(self, graph, gp) -> tuple:
        return _synthetic(graph, gp)

    def gemm_graph(self, graph):
        gp = self.plan(graph)
        return gp if isinstance(gp, str) else self.synthetic(graph, gp)[0]

    def extra_bytes(self, graph) -> int:
        gp = self.plan(graph)
        if gp.direct:
            return 0
        geo = gp.a.geo
        return (
            geo.n
            * geo.groups
            * math.prod(geo.out_dims)
            * math.prod(geo.filt)
            * geo.c_per_group
            * gp.a.x.data_type.itemsize
        )

    def build(self, graph, config, target) -> Executable:
        gp = self.plan(graph)
        _, mapping, a_uid, b_uid = self.synthetic(graph, gp)
        return _GemmExecutable(
            graph,
            gp,
            self.build_gemm(graph, config, target),
            mapping,
            a_uid,
            b_uid,
            self.workspace_prefix(graph),
            target,
        )


class GemmColumnsConvEngine(GemmConvEngine):
    """The pointwise forward with the output channels as the GEMM's rows and the pixels as
    its columns, one GEMM per image and group:

        Y[n, g, j, p] = sum_c W[g, j, c] * X[n, g, c, p]        (A = W, B = X[n])

    The formulation of a pixel-fastest (NCHW) y: C's rows are y's channel planes, so the
    tile's stores run along pixels, and a float32 x is a B operand read along its pixels.
    Which of the two formulations is faster depends on the layer (a few output channels
    over many pixels: this one; many output channels: the row GEMM), so both are offered
    and timed. Channels-last tensors fold the batch into the row GEMM instead."""

    id = 54
    name = "conv_gemm_nchw"

    def calibration_key(self, graph, config) -> str:
        return columns_key(self.name, plan_columns(graph), "x")

    def plan(self, graph):
        return plan_columns(graph)

    def synthetic(self, graph, gp) -> tuple:
        return _synthetic_columns(graph, gp)


def column_views(graph, views: dict, out_uid: int) -> dict | str:
    """The [N, G, cols, p] views of the tensors of ``views`` (row views [N, G, p, cols]),
    or why the column GEMM does not suit the output ``out_uid`` (its pixels not
    unit-stride: not a pixel-fastest layout, where the row GEMM reads and writes along
    channels)."""
    dims, strides = views[out_uid]
    if dims[2] > 1 and strides[2] != 1:
        label = graph.tensors[out_uid].label()
        return f"'{label}' is not pixel-fastest (pixel stride {strides[2]}, not 1)"
    return {u: ([d[0], d[1], d[3], d[2]], [s[0], s[1], s[3], s[2]]) for u, (d, s) in views.items()}


@functools.lru_cache(maxsize=256)
def plan_columns(graph) -> GemmPlan | str:
    """``plan_gemm``'s plan with the column views (``GemmColumnsConvEngine``), or why not."""
    gp = plan_gemm(graph)
    if not isinstance(gp, str) and not gp.direct:
        return "the column GEMM takes 1x1, stride-1, unpadded convolutions (x is its B operand)"
    return with_column_views(graph, gp, "y", "conv_gemm")


def with_column_views(graph, plan, out: str, rows_engine: str):
    """``plan`` (a row-GEMM plan with ``views`` and ``fold``, or a reason) with the column
    views of its output (attribute ``out`` of its analysis), or why the column GEMM does
    not take it: a folded batch is ``rows_engine``'s."""
    if isinstance(plan, str):
        return plan
    if plan.fold:
        return f"the batch folds into the rows (channels-last): {rows_engine} takes it"
    views = column_views(graph, plan.views, getattr(plan.a, out).uid)
    return views if isinstance(views, str) else dataclasses.replace(plan, views=views)


def _synthetic_columns(graph, gp: GemmPlan) -> tuple:
    """The matmul graph W @ X[n] of ``gp`` (a ``plan_columns`` plan): (graph, mapping, x's
    synthetic uid, the filter's)."""
    a, geo = gp.a, gp.a.geo
    p, kg, cg = math.prod(geo.out_dims), geo.k_per_group, geo.c_per_group
    xs, ws, dt = a.x.strides, a.w.strides, a.x.data_type
    sp = _uniform(geo.in_dims, xs[2:]) if p != 1 else 0
    w_spec = ([1, geo.groups, kg, cg], [0, kg * ws[0], ws[0], gp.kk_stride], dt)
    x_spec = ([geo.n, geo.groups, cg, p], [xs[0], cg * xs[1], xs[1], sp], dt)
    og, mapping, w_uid, x_uid = gemm_graph(graph, a.ep, a.y.uid, w_spec, x_spec, gp.views)
    return og, mapping, x_uid, w_uid


class _GemmExecutable(Executable, LaunchList):
    def __init__(self, graph, gp, inner, mapping, a_uid, b_uid, col_bytes, target):
        """``a_uid`` / ``b_uid``: the synthetic uids that take x (or its im2col matrix)
        and the filter."""
        LaunchList.__init__(self)
        self.inner, self.mapping, self.col_bytes = inner, mapping, col_bytes
        self.a_uid, self.b_uid = a_uid, b_uid
        self.gp = gp
        self.workspace_size = col_bytes + inner.workspace_size
        self.x_uid, self.w_uid = gp.a.x.uid, gp.a.w.uid
        self.col_dtype = gp.a.x.torch_dtype
        if not gp.direct:
            src, name, grid, const = _im2col_source(gp)
            self.add_launch(
                kernel_from_source(src, name),
                grid,
                const,
                [("buf", gp.a.x.uid), ("ws", gp.a.x.torch_dtype)],
                graph,
                target.is_cuda,
            )

    def run(self, buffers, workspace, stream=None):
        bufs = {syn: buffers[orig] for syn, orig in self.mapping.items() if orig in buffers}
        bufs[self.b_uid] = buffers[self.w_uid]
        if self.gp.direct:
            bufs[self.a_uid] = buffers[self.x_uid]
        else:
            self.run_launches(buffers, workspace, stream)  # im2col into the workspace
            bufs[self.a_uid] = workspace[: self.col_bytes].view(self.col_dtype)
        rest = workspace[self.col_bytes :] if workspace is not None else None
        self.inner.run(bufs, rest, stream)


def _im2col_source(gp: GemmPlan, transposed: bool = False):
    """A kernel writing A[n, g, p, kk] (row-major, kk fastest) from x; ``transposed``:
    A^T [kk, (n, g, p)] (the rows fastest)."""
    a, geo = gp.a, gp.a.geo
    d = len(geo.out_dims)
    p_total, taps, cg = math.prod(geo.out_dims), math.prod(geo.filt), geo.c_per_group
    kgemm = taps * cg
    rows = geo.n * geo.groups * p_total
    xs = a.x.strides
    name = f"im2col{'_t' if transposed else ''}_{abs(hash((geo, gp.order))) % 10**12}"
    ind = "    "
    # The row and column indices are split into (n, g, pixel) and (channel, tap) in
    # int32 (the plan declines 2**31 rows or more) and widened to int64 only where they
    # address memory: Triton 3.6 compiles this chain of int64 divisions and remainders
    # by constants wrongly for sm_90 (the interpreter gets it right), e.g. a 5x3 filter
    # at stride (3, 1) read the wrong taps.
    L = [
        "@triton.jit",
        f"def {name}(X, COL, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):",
        f"{ind}rr = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)",
        f"{ind}kk = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)",
        f"{ind}mask_r = rr < {rows}",
        f"{ind}mask_k = kk < {kgemm}",
    ]
    # rr -> (n, g, o_0..): row-major over [N, G, out...]
    names = ["nb", "gg"] + [f"o{i}" for i in range(d)]
    sizes = [geo.n, geo.groups] + list(geo.out_dims)
    L.append(f"{ind}_q = rr")
    for nm, sz in zip(reversed(names[1:]), reversed(sizes[1:])):
        L += [f"{ind}{nm} = _q % {sz}", f"{ind}_q = _q // {sz}"]
    L.append(f"{ind}nb = _q.to(tl.int64)")
    if gp.order == "ct":
        L += [f"{ind}c = kk // {taps}", f"{ind}t = kk % {taps}"]
    else:
        L += [f"{ind}t = kk // {cg}", f"{ind}c = kk % {cg}"]
    L.append(f"{ind}_qt = t")
    rn = [f"r{i}" for i in range(d)]
    for i in reversed(range(1, d)):
        L += [f"{ind}{rn[i]} = _qt % {geo.filt[i]}", f"{ind}_qt = _qt // {geo.filt[i]}"]
    L.append(f"{ind}{rn[0]} = _qt")
    valid = ["mask_r[:, None] & mask_k[None, :]"]
    off = [f"(nb * {xs[0]} + gg * {cg * xs[1]})[:, None]", f"(c.to(tl.int64) * {xs[1]})[None, :]"]
    for i in range(d):
        fr = f"({geo.filt[i] - 1} - {rn[i]})" if geo.flip else rn[i]
        L.append(
            f"{ind}h{i} = (o{i} * {geo.stride[i]} - {geo.pre[i]})[:, None] + "
            f"({fr} * {geo.dilation[i]})[None, :]"
        )
        valid.append(f"(h{i} >= 0) & (h{i} < {geo.in_dims[i]})")
        off.append(f"h{i}.to(tl.int64) * {xs[2 + i]}")
    L.append(f"{ind}v = tl.load(X + {' + '.join(off)}, mask={' & '.join(valid)}, other=0.0)")
    col = (
        f"kk[None, :].to(tl.int64) * {rows} + rr[:, None]"
        if transposed
        else f"rr[:, None].to(tl.int64) * {kgemm} + kk[None, :]"
    )
    L.append(f"{ind}tl.store(COL + {col}, v, mask=mask_r[:, None] & mask_k[None, :])")
    src = "\n".join(L) + "\n"
    br, bk = 64, 64
    return (
        src,
        name,
        (-(-rows // br), -(-kgemm // bk)),
        {"BLOCK_R": br, "BLOCK_K": bk, "num_warps": 4},
    )
