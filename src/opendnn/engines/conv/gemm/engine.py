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
    views = {}
    for u in [a.y.uid] + a.ep.inputs + a.ep.outputs:
        d = graph.tensors[u]
        sp = _uniform(d.dims[2:], d.strides[2:])
        if sp is None:
            return f"'{d.label()}' does not walk its output pixels with one stride"
        sn = d.strides[0] if d.dims[0] != 1 else 0
        sk = d.strides[1] if d.dims[1] != 1 else 0
        sp = sp if math.prod(d.dims[2:]) != 1 else 0
        views[u] = ([geo.n, geo.groups, math.prod(geo.out_dims), kg], [sn, kg * sk, sp, sk])
    direct = (
        taps == 1
        and all(s == 1 for s in geo.stride)
        and not any(geo.pre)
        and tuple(geo.out_dims) == tuple(geo.in_dims)
        and _uniform(geo.in_dims, a.x.strides[2:]) is not None
    )
    return GemmPlan(a, order, kk_stride, direct, views)


def _synthetic(graph, gp: GemmPlan) -> tuple:
    """The matmul graph that does the convolution's work, and its uid -> original uid map."""
    a, geo = gp.a, gp.a.geo
    p, taps = math.prod(geo.out_dims), math.prod(geo.filt)
    kgemm = taps * geo.c_per_group
    dt = a.x.data_type
    g = Graph(intermediate_data_type=DataType.FLOAT, compute_data_type=DataType.FLOAT)
    if gp.direct:
        xs = a.x.strides
        a_strides = [xs[0], geo.c_per_group * xs[1], _uniform(geo.in_dims, xs[2:]), xs[1]]
    else:
        a_strides = [geo.groups * p * kgemm, p * kgemm, kgemm, 1]  # the workspace matrix
    ta = g.tensor([geo.n, geo.groups, p, kgemm], a_strides, dt, name="A")
    ws = a.w.strides
    tb = g.tensor(
        [1, geo.groups, kgemm, geo.k_per_group],
        [0, geo.k_per_group * ws[0], gp.kk_stride, ws[0]],
        dt,
        name="B",
    )
    mapping = {}
    tens = {}

    def view(uid):
        if uid not in tens:
            d = graph.tensors[uid]
            dims, strides = gp.views[uid] if uid in gp.views else ([1], [1])
            tens[uid] = g.tensor(
                dims, strides, d.data_type, name=d.name, is_pass_by_value=d.is_pass_by_value
            )
        return tens[uid]

    c = g.matmul(ta, tb, name="conv_as_gemm")
    tens[a.y.uid] = c
    for n in a.ep.nodes:
        ins = [view(u) for u in n.inputs.values()]
        out = g._pointwise(n.mode, ins, n.name, n.compute_data_type, **n.op_attrs())
        tens[n.outputs["OUT_0"]] = out
    for u in a.ep.outputs:
        d = graph.tensors[u]
        dims, strides = gp.views[u]
        tens[u].set_output(True).set_dim(dims).set_stride(strides).set_data_type(d.data_type)
    g.validate()
    for orig, t in tens.items():
        mapping[t.uid] = orig
    return g.op_graph, mapping, ta.uid, tb.uid


class GemmConvEngine(MatmulDelegateEngine):
    """im2col into the workspace + the Triton matmul engine (epilogue fused there)."""

    id = 6
    name = "conv_gemm"

    def gemm_graph(self, graph):
        gp = plan_gemm(graph)
        return gp if isinstance(gp, str) else _synthetic(graph, gp)[0]

    def extra_bytes(self, graph) -> int:
        gp = plan_gemm(graph)
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
        gp = plan_gemm(graph)
        _, mapping, a_uid, b_uid = _synthetic(graph, gp)
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


class _GemmExecutable(Executable, LaunchList):
    def __init__(self, graph, gp, inner, mapping, a_uid, b_uid, col_bytes, target):
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
    L = [
        "@triton.jit",
        f"def {name}(X, COL, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):",
        f"{ind}rr = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)",
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
    L.append(f"{ind}nb = _q")
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
    off = [f"(nb * {xs[0]} + gg * {cg * xs[1]})[:, None]", f"(c * {xs[1]})[None, :]"]
    for i in range(d):
        fr = f"({geo.filt[i] - 1} - {rn[i]})" if geo.flip else rn[i]
        L.append(
            f"{ind}h{i} = (o{i} * {geo.stride[i]} - {geo.pre[i]})[:, None] + "
            f"({fr} * {geo.dilation[i]})[None, :]"
        )
        valid.append(f"(h{i} >= 0) & (h{i} < {geo.in_dims[i]})")
        off.append(f"h{i} * {xs[2 + i]}")
    L.append(f"{ind}v = tl.load(X + {' + '.join(off)}, mask={' & '.join(valid)}, other=0.0)")
    col = (
        f"kk[None, :] * {rows} + rr[:, None]"
        if transposed
        else f"rr[:, None] * {kgemm} + kk[None, :]"
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
