"""Backward data as a GEMM and a col2im gather (``conv_dgrad_col2im``), for images with few
channels: the stem of an image model (C = 3), a mono audio or 1-channel volume input.

An implicit-GEMM backward data makes dX's channels its tile's columns, so with C = 3 a
16-wide channel tile is 81% padding and every dY pixel is re-read once per tap. Here the
GEMM has the other orientation, over (channel, tap) pairs, which keeps the tensor cores
busy whatever C is:

    COL[n, kk, p] = sum_k W[k, kk] dY[n, k, p]      (A = the filter as a [K, C*taps]
                                                      matrix, transposed; B = dY[n])

(kk = (c, tap) in the filter's memory order, KCRS or KRSC), M = C * taps, N = dY pixels,
K = the output channels, on the matmul engine into a float32 workspace; then the gather
(``_col2im_kernels``) sums, for each dX pixel, the COL entries of the taps whose window
covers it, in a fixed order, and runs the backward data's epilogue on the sum. The
7x7 stride-2 stem of ResNet-50 at N = 32: a 147 x 401k x 64 GEMM writing 236 MB of
float32 columns, then the gather reading them once -- memory-bound; measured on the H100
237 us in NHWC bf16 (the implicit GEMM's boxes: 472 us) and 256 us in NCHW TF32 (805 us),
about half of cuDNN's time in each. The workspace is the whole COL matrix.

Declines: more than one group; 16 or more channels per group (the implicit GEMM's
channel tiles are full there, and COL's taps x C rows of float32 would outgrow dY);
filters neither KCRS- nor KRSC-packed (the A operand is the filter in place); dY whose
pixels do not walk with one stride.
"""

from __future__ import annotations

import functools
import math

import torch

from ....enums import DataType
from ....graph.graph import Graph
from ....runtime.launch import LaunchList, kernel_from_source
from ...base import Executable
from ...fusion import epilogue as fuse_epilogue
from ...matmul.delegate import MatmulDelegateEngine
from ..analysis import analyze, epilogue
from . import _col2im_kernels as C
from .engine import _uniform

MAX_CHANNELS = 16  # C/G below this: the implicit GEMM's channel tile is mostly padding


@functools.lru_cache(maxsize=256)
def plan_col2im(graph):
    """(analysis, kk order) of a backward data the engine takes, or why not: the filter is
    the GEMM's A matrix in place, kk unit-stride within a filter row (KCRS: kk = c * taps
    + t, "ct"; KRSC: kk = t * C + c, "tc")."""
    a = analyze(graph, "conv_dgrad")
    if isinstance(a, str):
        return a
    geo = a.geo
    if geo.groups != 1:
        return "the col2im backward data takes one group"
    if geo.c_per_group >= MAX_CHANNELS:
        return (
            f"the col2im backward data is for images with few channels (C < {MAX_CHANNELS}; "
            f"this one has {geo.c_per_group}): the implicit GEMM's channel tiles are full"
        )
    if geo.n == 0 or 0 in geo.in_dims or 0 in geo.out_dims or geo.k_per_group == 0:
        return "a zero-size problem has no GEMM"
    taps, ws = math.prod(geo.filt), a.w.strides
    tap_stride = _uniform(geo.filt, ws[2:]) if taps > 1 else 1
    if taps == 1 and ws[1] != 1 and geo.c_per_group > 1:
        return "a 1x1 filter's channels must be unit-stride (it is the GEMM's A matrix)"
    if taps == 1 or (tap_stride == 1 and ws[1] == taps):
        order = "ct"
    elif ws[1] == 1 and tap_stride == geo.c_per_group:
        order = "tc"
    else:
        return "the filter is neither KCRS- nor KRSC-packed: it is not a GEMM matrix"
    if _uniform(geo.out_dims, a.y.strides[2:]) is None:
        return f"'{a.y.label()}' does not walk its pixels with one stride"
    return a, order


def col_bytes(geo) -> int:
    """The float32 COL matrix: N x (C * taps) x dY pixels."""
    return 4 * geo.n * geo.c_per_group * math.prod(geo.filt) * math.prod(geo.out_dims)


def _gemm(graph, plan) -> tuple:
    """The matmul graph COL[n] = W^T dY[n]: (op graph, A's uid, B's uid, C's uid)."""
    a = plan[0]
    geo = a.geo
    kk, k, p = math.prod(geo.filt) * geo.c_per_group, geo.k_per_group, math.prod(geo.out_dims)
    ds, ws = a.y.strides, a.w.strides
    sp = _uniform(geo.out_dims, ds[2:]) if p != 1 else 0
    g = Graph(intermediate_data_type=DataType.FLOAT, compute_data_type=DataType.FLOAT)
    ta = g.tensor([1, 1, kk, k], [0, 0, 1, ws[0]], a.w.data_type, name="W_T")
    tb = g.tensor([geo.n, 1, k, p], [ds[0], 0, ds[1], sp], a.y.data_type, name="dY")
    c = g.matmul(ta, tb, name="col2im_gemm")
    c.set_output(True).set_dim([geo.n, 1, kk, p]).set_stride([kk * p, kk * p, p, 1])
    c.set_data_type(DataType.FLOAT)
    g.validate()
    return g.op_graph, ta.uid, tb.uid, c.uid


class Col2imDgradEngine(MatmulDelegateEngine):
    """Few-channel backward data: W^T dY on the matmul engine into float32 columns, then a
    deterministic col2im gather with the epilogue (module docstring)."""

    id = 57
    name = "conv_dgrad_col2im"

    def gemm_graph(self, graph):
        plan = plan_col2im(graph)
        return plan if isinstance(plan, str) else _gemm(graph, plan)[0]

    def extra_bytes(self, graph) -> int:
        return col_bytes(plan_col2im(graph)[0].geo)

    def build(self, graph, config, target) -> Executable:
        plan = plan_col2im(graph)
        _, a_uid, b_uid, c_uid = _gemm(graph, plan)
        inner = self.build_gemm(graph, config, target)
        prefix = self.workspace_prefix(graph)
        return _Col2imExecutable(graph, plan, inner, (a_uid, b_uid, c_uid), prefix, target)


class _Col2imExecutable(Executable, LaunchList):
    """The GEMM into the workspace's first ``col_bytes``, then the gather over them; the
    GEMM's own workspace starts at ``prefix`` (the engine's aligned ``extra_bytes``)."""

    def __init__(self, graph, plan, inner, uids: tuple, prefix: int, target):
        LaunchList.__init__(self)
        a, order = plan
        self.inner, self.uids = inner, uids
        self.dy_uid, self.w_uid = a.y.uid, a.w.uid
        self.col_bytes = col_bytes(a.geo)
        self.prefix = prefix
        self.workspace_size = self.prefix + inner.workspace_size
        params, body = epilogue(graph, a, "conv_dgrad")
        name = f"col2im_{graph.key()[:12]}"
        src = C.source(name, a.geo, order, epilogue_params=params, epilogue_body=body)
        self.source = src
        self.add_launch(
            kernel_from_source(src, name),
            C.grid(a.geo),
            {"num_warps": 4},
            [("ws", torch.float32)] + fuse_epilogue.launch_args(a.ep),
            graph,
            target.is_cuda,
        )

    def run(self, buffers, workspace, stream=None):
        a_uid, b_uid, c_uid = self.uids
        col = workspace[: self.col_bytes]
        bufs = {
            a_uid: buffers[self.w_uid],
            b_uid: buffers[self.dy_uid],
            c_uid: col.view(torch.float32),
        }
        rest = workspace[self.prefix :] if self.inner.workspace_size else None
        self.inner.run(bufs, rest, stream)
        self.run_launches(buffers, col, stream)
