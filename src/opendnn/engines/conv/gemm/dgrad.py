"""Pointwise backward data as one GEMM on the matmul engine (1x1 filter, stride 1, no
padding), with the backward data's epilogue fused there:

    dX[n, g, p, c] = sum_k dY[n, g, p, k] * W[g, k, c]      (per group, c < C/G, k < K/G)

dY is the A operand in place ([rows, K/G], rows = image pixels) and the filter the B
operand in place (W[k, c] of a KCRS or KRSC 1x1 filter is a [K, C] matrix, C fastest).
When dY, dX and every epilogue tensor walk (n, pixel) with one stride (channels-last) the
batch folds into the rows: one [N*P, K/G] x [K/G, C/G] GEMM per group instead of N GEMMs
of P rows (``engine.pixel_views``). An NCHW image is a batched GEMM with pixel-fastest
operands, which the matmul engine also takes (its cost model charges the transposed
float32 step).

This is what cuDNN's pointwise backward data does without an im2col: there is no tap to
gather, so the convolution is the matmul.
"""

from __future__ import annotations

import dataclasses
import functools
import math

from ...base import Executable
from ...matmul.delegate import MatmulDelegateEngine
from ..analysis import analyze
from .engine import (
    _rows,
    _uniform,
    columns_key,
    gemm_graph,
    gemm_key,
    pixel_views,
    with_column_views,
)


@dataclasses.dataclass(frozen=True)
class DgradGemmPlan:
    a: object  # ConvAnalysis of the conv_dgrad node (x: dX, y: dY)
    views: dict  # uid -> (dims, strides) of dX-shaped tensors as GEMM rows
    fold: bool  # the batch folded into the rows (see pixel_views)


@functools.lru_cache(maxsize=256)
def plan_dgrad(graph) -> DgradGemmPlan | str:
    a = analyze(graph, "conv_dgrad")
    if isinstance(a, str):
        return a
    geo = a.geo
    if math.prod(geo.filt) != 1:
        return f"the GEMM backward data takes 1x1 filters (this one is {list(geo.filt)})"
    if any(s != 1 for s in geo.stride) or any(geo.pre) or tuple(geo.out_dims) != tuple(geo.in_dims):
        return "the GEMM backward data takes stride 1 and no padding (dX is dY's pixels)"
    ds = a.y.strides
    sp = _uniform(geo.out_dims, ds[2:])
    if sp is None:
        return f"'{a.y.label()}' does not walk its pixels with one stride"
    p = math.prod(geo.out_dims)
    a_rows = _rows(ds[0] if geo.n > 1 else 0, sp if p != 1 else 0, p)
    pv = pixel_views(graph, [a.x.uid] + a.ep.inputs + a.ep.outputs, geo, p, geo.c_per_group, a_rows)
    if isinstance(pv, str):
        return pv
    return DgradGemmPlan(a, *pv)


def _synthetic(graph, dp: DgradGemmPlan) -> tuple:
    """The matmul graph of ``dp`` (see ``engine.gemm_graph``)."""
    a, geo = dp.a, dp.a.geo
    p, kg, cg = math.prod(geo.out_dims), geo.k_per_group, geo.c_per_group
    ds, ws, dt = a.y.strides, a.w.strides, a.y.data_type
    sp = _uniform(geo.out_dims, ds[2:]) if p != 1 else 0
    if dp.fold:
        a_spec = ([1, geo.groups, geo.n * p, kg], [0, kg * ds[1], _rows(ds[0], sp, p), ds[1]])
    else:
        a_spec = ([geo.n, geo.groups, p, kg], [ds[0], kg * ds[1], sp, ds[1]])
    b_spec = ([1, geo.groups, kg, cg], [0, kg * ws[0], ws[0], ws[1]], a.w.data_type)
    return gemm_graph(graph, a.ep, a.x.uid, (*a_spec, dt), b_spec, dp.views)


class GemmDgradEngine(MatmulDelegateEngine):
    """Pointwise backward data: dY times the filter on the matmul engine (epilogue fused)."""

    id = 53
    name = "conv_dgrad_gemm"

    def calibration_key(self, graph, config) -> str:
        """``conv_dgrad_gemm:rows`` when the batch folds into the rows, ``:nchw`` when dY's
        channels are not unit-stride (``engine.gemm_key``)."""
        return gemm_key(self.name, plan_dgrad(graph), "y")

    # the formulation: its plan (or reason) and its matmul graph, (graph, uid -> original
    # uid, dY's synthetic uid, the filter's); GemmColumnsDgradEngine swaps both
    def plan(self, graph):
        return plan_dgrad(graph)

    def synthetic(self, graph, dp) -> tuple:
        return _synthetic(graph, dp)

    def gemm_graph(self, graph):
        dp = self.plan(graph)
        return dp if isinstance(dp, str) else self.synthetic(graph, dp)[0]

    def build(self, graph, config, target) -> Executable:
        dp = self.plan(graph)
        _, mapping, dy_uid, w_uid = self.synthetic(graph, dp)
        return _DgradGemmExecutable(
            self.build_gemm(graph, config, target), mapping, dy_uid, w_uid, dp
        )


class GemmColumnsDgradEngine(GemmDgradEngine):
    """The pointwise backward data with dX's channels as the GEMM's rows and the pixels as
    its columns, one GEMM per image and group:

        dX[n, g, c, p] = sum_k W[g, k, c] * dY[n, g, k, p]       (A = W^T, B = dY[n])

    The pixel-fastest (NCHW) counterpart of ``conv_dgrad_gemm`` (see
    ``engine.GemmColumnsConvEngine``); both are offered and timed."""

    id = 55
    name = "conv_dgrad_gemm_nchw"

    def calibration_key(self, graph, config) -> str:
        return columns_key(self.name, plan_dgrad_columns(graph), "y")

    def plan(self, graph):
        return plan_dgrad_columns(graph)

    def synthetic(self, graph, dp) -> tuple:
        return _synthetic_columns(graph, dp)


@functools.lru_cache(maxsize=256)
def plan_dgrad_columns(graph) -> DgradGemmPlan | str:
    """``plan_dgrad``'s plan with the column views, or why not."""
    return with_column_views(graph, plan_dgrad(graph), "x", "conv_dgrad_gemm")


def _synthetic_columns(graph, dp: DgradGemmPlan) -> tuple:
    """The matmul graph W^T @ dY[n] of ``dp``: (graph, mapping, dY's synthetic uid, the
    filter's)."""
    a, geo = dp.a, dp.a.geo
    p, kg, cg = math.prod(geo.out_dims), geo.k_per_group, geo.c_per_group
    ds, ws, dt = a.y.strides, a.w.strides, a.y.data_type
    sp = _uniform(geo.out_dims, ds[2:]) if p != 1 else 0
    w_spec = ([1, geo.groups, cg, kg], [0, kg * ws[0], ws[1], ws[0]], a.w.data_type)
    dy_spec = ([geo.n, geo.groups, kg, p], [ds[0], kg * ds[1], ds[1], sp], dt)
    og, mapping, w_uid, dy_uid = gemm_graph(graph, a.ep, a.x.uid, w_spec, dy_spec, dp.views)
    return og, mapping, dy_uid, w_uid


class _DgradGemmExecutable(Executable):
    def __init__(self, inner, mapping, a_uid, b_uid, dp: DgradGemmPlan):
        self.inner, self.mapping = inner, mapping
        self.a_uid, self.b_uid = a_uid, b_uid
        self.dy_uid, self.w_uid = dp.a.y.uid, dp.a.w.uid
        self.workspace_size = inner.workspace_size

    def run(self, buffers, workspace, stream=None):
        bufs = {syn: buffers[orig] for syn, orig in self.mapping.items() if orig in buffers}
        bufs[self.a_uid] = buffers[self.dy_uid]
        bufs[self.b_uid] = buffers[self.w_uid]
        self.inner.run(bufs, workspace, stream)
