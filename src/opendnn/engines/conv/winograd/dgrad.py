"""Winograd backward data (CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED and
CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD) for 2-D 3x3 filters at stride 1.

At stride 1 the gradient of a convolution is a convolution: with r' = 2 - r,

    dx[n, c, i, j] = sum_{k, r, s} dy[n, k, i + pre_h - r, j + pre_w - s] w[k, c, r, s]
                   = sum_{k, r', s'} dy[n, k, i - (2 - pre_h) + r', j - (2 - pre_w) + s']
                                     * w[k, c, 2 - r', 2 - s']

a forward cross-correlation of dy (K channels in) with padding 2 - pre, producing dx's
H x W pixels (C channels out), whose filter is w with its K and C axes swapped and
rotated by 180 degrees (CONVOLUTION mode flips once more, so there it is not rotated).
Reads that fall outside dy (the post padding, or a pre padding above 2) are zeros.

So both engines run the forward Winograd machinery on a rewritten problem: the
non-fused one builds a forward ``WinoPlan`` whose image is dy and whose filter is a view
of w with the channel strides swapped (the filter, input and output transforms and the
16 GEMMs of ``winograd``), the fused one uses ``winograd_fused``'s kernel with a dgrad
geometry. Both fuse the dgrad's pointwise epilogue (e.g. relu_backward of the forward
input, a bias, a type conversion) into their output stage.
"""

from __future__ import annotations

import functools

from ..analysis import analyze, dgrad_as_forward
from .engine import WinogradNonfusedEngine, WinoPlan
from .fused import WinogradFusedEngine, winograd_rules


@functools.lru_cache(maxsize=512)
def plan_winograd_dgrad(graph) -> WinoPlan | str:
    """A forward F(2x2, 3x3) ``WinoPlan`` computing the graph's dx, or why not."""
    a = analyze(graph, "conv_dgrad")
    if isinstance(a, str):
        return a
    why = winograd_rules(a, a.y.data_type)
    if why:
        return why
    fwd = dgrad_as_forward(a)  # image dy, filter w_t, output dx (the dgrad's epilogue)
    g, geo = a.geo, fwd.geo
    th, tw = (-(-o // 2) for o in geo.out_dims)
    return WinoPlan(
        fwd, 2, (th, tw), g.n * th * tw, geo.k_per_group, geo.c_per_group, a.y.torch_dtype
    )


class WinogradNonfusedDgradEngine(WinogradNonfusedEngine):
    """dx by F(2x2, 3x3): filter, input (dy) and output transforms around 16 GEMMs."""

    id = 16
    name = "conv_dgrad_winograd_nonfused"
    tile = 2

    def _plan(self, graph):
        return plan_winograd_dgrad(graph)


class WinogradFusedDgradEngine(WinogradFusedEngine):
    """dx by the fused F(2x2, 3x3) kernel on the rewritten problem."""

    id = 18
    name = "conv_dgrad_winograd_fused"
    kind = "conv_dgrad"


__all__ = ["WinogradNonfusedDgradEngine", "WinogradFusedDgradEngine", "plan_winograd_dgrad"]
