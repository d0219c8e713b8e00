"""Explicit-GEMM backward filter: im2col of x into the workspace, then one GEMM on the
matmul engine (deterministic: the matmul reduces in a fixed order):

    dW[k, kk] = sum_q dY[q, k] * A[q, kk]      q = (n, output pixel), kk = (channel, tap)

dY must walk (n, pixel) with one stride (packed NHWC does; NCHW with K > 1 does not) and
the filter gradient must be a KCRS- or KRSC-packed matrix; one group. The epilogue may
scale or cast dW (host scalars only).
"""

from __future__ import annotations

import functools
import math

from ....enums import DataType
from ....graph.graph import Graph
from ....runtime.launch import LaunchList, kernel_from_source
from ...base import Executable
from ...matmul.delegate import MatmulDelegateEngine
from ..analysis import analyze
from .engine import GemmPlan, _im2col_source, _uniform


@functools.lru_cache(maxsize=256)
def plan_wgrad(graph) -> tuple | str:
    a = analyze(graph, "conv_wgrad")
    if isinstance(a, str):
        return a
    geo = a.geo
    if geo.groups != 1:
        return "the GEMM backward filter takes one group"
    if a.ep.inputs:
        return "the GEMM backward filter's epilogue takes host scalars only"
    taps, cg = math.prod(geo.filt), geo.c_per_group
    ws = a.w.strides  # dW's strides
    tap_stride = _uniform(geo.filt, ws[2:]) if taps > 1 else 0
    if taps == 1:
        order, kk_stride = "ct", ws[1]
    elif tap_stride == 1 and ws[1] == taps:
        order, kk_stride = "ct", 1
    elif ws[1] == 1 and tap_stride == cg:
        order, kk_stride = "tc", 1
    else:
        return "dW is neither KCRS- nor KRSC-packed: it is not a GEMM matrix"
    ds = a.y.strides  # dY's strides
    q_stride = _uniform([geo.n] + list(geo.out_dims), [ds[0]] + list(ds[2:]))
    if q_stride is None:
        return "dY does not walk (n, pixel) with one stride (NHWC-packed needed)"
    gp = GemmPlan(a, order, kk_stride, False, {})
    return gp, q_stride


def _gemm_graph(graph, gp: GemmPlan, q_stride: int):
    a, geo = gp.a, gp.a.geo
    q = geo.n * math.prod(geo.out_dims)
    kgemm = math.prod(geo.filt) * geo.c_per_group
    dt = a.x.data_type
    g = Graph(intermediate_data_type=DataType.FLOAT, compute_data_type=DataType.FLOAT)
    ta = g.tensor([geo.k_per_group, q], [a.y.strides[1], q_stride], a.y.data_type, name="dY^T")
    tb = g.tensor([q, kgemm], [kgemm, 1], dt, name="im2col")
    t = g.matmul(ta, tb, name="wgrad_as_gemm")
    tens = {a.y.uid: ta, a.ep.acc_uid: t}
    for n in a.ep.nodes:
        ins = []
        for u in n.inputs.values():
            if u not in tens:
                d = graph.tensors[u]
                tens[u] = g.tensor([1], [1], d.data_type, is_pass_by_value=True, name=d.name)
            ins.append(tens[u])
        tens[n.outputs["OUT_0"]] = g._pointwise(
            n.mode, ins, n.name, n.compute_data_type, **n.op_attrs()
        )
    for u in a.ep.outputs:
        tens[u].set_output(True).set_dim([geo.k_per_group, kgemm]).set_stride(
            [a.w.strides[0], gp.kk_stride]
        ).set_data_type(graph.tensors[u].data_type)
    g.validate()
    mapping = {t_.uid: orig for orig, t_ in tens.items()}
    return g.op_graph, mapping, tb.uid


class GemmWgradEngine(MatmulDelegateEngine):
    id = 12
    name = "conv_wgrad_gemm"

    def gemm_graph(self, graph):
        p = plan_wgrad(graph)
        return p if isinstance(p, str) else _gemm_graph(graph, *p)[0]

    def extra_bytes(self, graph) -> int:
        gp = plan_wgrad(graph)[0]
        geo = gp.a.geo
        return (
            geo.n
            * math.prod(geo.out_dims)
            * math.prod(geo.filt)
            * geo.c_per_group
            * gp.a.x.data_type.itemsize
        )

    def build(self, graph, config, target) -> Executable:
        gp, q_stride = plan_wgrad(graph)
        _, mapping, b_uid = _gemm_graph(graph, gp, q_stride)
        return _Exec(
            graph,
            gp,
            self.build_gemm(graph, config, target),
            mapping,
            b_uid,
            self.workspace_prefix(graph),
            target,
        )


class _Exec(Executable, LaunchList):
    def __init__(self, graph, gp, inner, mapping, b_uid, col_bytes, target):
        LaunchList.__init__(self)
        self.inner, self.mapping, self.b_uid, self.col_bytes = inner, mapping, b_uid, col_bytes
        self.col_dtype = gp.a.x.torch_dtype
        self.workspace_size = col_bytes + inner.workspace_size
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
        self.run_launches(buffers, workspace, stream)  # im2col into the workspace
        bufs = {syn: buffers[orig] for syn, orig in self.mapping.items() if orig in buffers}
        bufs[self.b_uid] = workspace[: self.col_bytes].view(self.col_dtype)
        self.inner.run(bufs, workspace[self.col_bytes :], stream)
