"""Explicit-GEMM backward filter: im2col of x into the workspace, then one GEMM on the
matmul engine (deterministic: the matmul reduces in a fixed order):

    dW[k, kk] = sum_q dY[q, k] * A[q, kk]      q = (n, output pixel), kk = (channel, tap)

The reduction runs over q. In the direct form dY is read in place (it must walk (n, pixel)
with one stride: packed NHWC) and A is written [q, kk] (kk fastest). That suits half
precision, where the tensor cores take either operand order. The K-major form writes both
operands q-fastest: A^T [kk, q] and a copy of dY^T [k, q] (NCHW's images are [K, pixels]
blocks, so the copy only interleaves the images). TF32 tensor cores read both operands
reduction-contiguous (a transposed float32 step costs ~6x), and an NCHW dY has no single
(n, pixel) stride, so float32 and NCHW take the K-major form. The filter gradient must be a
KCRS- or KRSC-packed matrix; one group. The epilogue may scale or cast dW (host scalars
only).

A pointwise layer (1x1, stride 1, no padding) on packed NCHW tensors needs no copy at all:
its images are the matrices dY_n [K, P] and x_n [C, P], both pixel-fastest (K-major in any
precision), and

    dW[k, c] = sum_n (dY_n x_n^T)[k, c]

is one batched GEMM over n whose float32 products [N, K, C] a second kernel sums in order
(the batched form; it takes no epilogue nodes).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import torch

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
    if geo.n * math.prod(geo.out_dims) >= 2**31:
        return "the im2col matrix's rows (n, pixel) are indexed in int32: 2**31 or more"
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
    kmajor = q_stride is None or a.x.data_type == DataType.FLOAT
    pixel_stride = _uniform(list(geo.out_dims), list(ds[2:]))
    if kmajor and pixel_stride is None:
        return "dY walks neither (n, pixel) nor an image's pixels with one stride"
    gp = GemmPlan(a, order, kk_stride, False, {})
    batched = (
        taps == 1
        and all(v == 1 for v in geo.stride)
        and not any(geo.pre)
        and tuple(geo.out_dims) == tuple(geo.in_dims)
        and pixel_stride == 1
        and _uniform(list(geo.in_dims), list(a.x.strides[2:])) == 1
        and not a.ep.nodes
    )
    return WgradPlan(gp, q_stride, pixel_stride, kmajor and not batched, batched)


@dataclasses.dataclass(frozen=True)
class WgradPlan:
    gp: GemmPlan
    q_stride: int | None  # dY's stride over (n, pixel), None if there is none
    pixel_stride: int | None  # dY's stride over one image's pixels
    kmajor: bool  # both operands q-fastest copies (see the module docstring)
    batched: bool = False  # pointwise NCHW: one GEMM per image, products summed

    def products_bytes(self) -> int:
        """The batched form's float32 products [N, K, C]."""
        _, kk, k = self.sizes()
        return 4 * self.gp.a.geo.n * k * kk if self.batched else 0

    def sizes(self) -> tuple[int, int, int]:
        """(q, kk, K): the GEMM's reduction, columns and rows."""
        geo = self.gp.a.geo
        return (
            geo.n * math.prod(geo.out_dims),
            math.prod(geo.filt) * geo.c_per_group,
            geo.k_per_group,
        )

    def col_bytes(self) -> int:
        q, kk, _ = self.sizes()
        return -(-q * kk * self.gp.a.x.data_type.itemsize // 256) * 256

    def dyt_bytes(self) -> int:
        q, _, k = self.sizes()
        return q * k * self.gp.a.y.data_type.itemsize if self.kmajor else 0


def _batched_graph(wp: WgradPlan):
    """dY_n [K, P] times x_n^T [P, C] per image n, float32 products [N, K, C]."""
    a, geo = wp.gp.a, wp.gp.a.geo
    _, c, k = wp.sizes()
    p = math.prod(geo.out_dims)
    ys, xs = a.y.strides, a.x.strides
    g = Graph(intermediate_data_type=DataType.FLOAT, compute_data_type=DataType.FLOAT)
    ta = g.tensor([geo.n, k, p], [ys[0], ys[1], 1], a.y.data_type, name="dY_n")
    tb = g.tensor([geo.n, p, c], [xs[0], 1, xs[1]], a.x.data_type, name="x_n^T")
    t = g.matmul(ta, tb, name="wgrad_per_image")
    t.set_output(True).set_dim([geo.n, k, c]).set_stride([k * c, c, 1])
    t.set_data_type(DataType.FLOAT)
    g.validate()
    return g.op_graph, {ta.uid: a.y.uid, tb.uid: a.x.uid}, t.uid


def _sum_source(wp: WgradPlan):
    """A kernel writing dW[k, c] = sum over n of the products WS[n, k, c], in n order."""
    from ...fusion import _codegen as cg

    a, geo = wp.gp.a, wp.gp.a.geo
    _, c, k = wp.sizes()
    st = a.w.strides
    name = f"wgrad_sum_{abs(hash((geo, st))) % 10**12}"
    src = (
        "@triton.jit\n"
        f"def {name}(WS, DW, BLOCK: tl.constexpr):\n"
        "    e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        f"    mask = e < {k * c}\n"
        "    acc = tl.full([BLOCK], 0.0, tl.float32)\n"
        f"    for n in range(0, {geo.n}):\n"
        f"        acc += tl.load(WS + n * {k * c} + e, mask=mask, other=0.0)\n"
        "    "
        + cg.store_expr("DW", f"e // {c} * {st[0]} + e % {c} * {st[1]}", "acc", a.w, "mask")
        + "\n"
    )
    return src, name, (-(-k * c // 256),), {"BLOCK": 256, "num_warps": 4}


def _gemm_graph(graph, wp: WgradPlan):
    a, geo = wp.gp.a, wp.gp.a.geo
    if wp.batched:
        og, mapping, t_uid = _batched_graph(wp)
        return og, mapping, t_uid, None
    q, kgemm, kt = wp.sizes()
    dt = a.x.data_type
    g = Graph(intermediate_data_type=DataType.FLOAT, compute_data_type=DataType.FLOAT)
    if wp.kmajor:
        ta = g.tensor([kt, q], [q, 1], a.y.data_type, name="dY^T")
        tb = g.tensor([q, kgemm], [1, q], dt, name="im2col^T")
        tens = {a.ep.acc_uid: None}
    else:
        ta = g.tensor([kt, q], [a.y.strides[1], wp.q_stride], a.y.data_type, name="dY^T")
        tb = g.tensor([q, kgemm], [kgemm, 1], dt, name="im2col")
        tens = {a.y.uid: ta}
    t = g.matmul(ta, tb, name="wgrad_as_gemm")
    tens[a.ep.acc_uid] = t
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
            [a.w.strides[0], wp.gp.kk_stride]
        ).set_data_type(graph.tensors[u].data_type)
    g.validate()
    mapping = {t_.uid: orig for orig, t_ in tens.items()}
    return g.op_graph, mapping, tb.uid, ta.uid


def _dyt_source(wp: WgradPlan, offset: int):
    """A kernel copying dY into WS[offset:] as the [K, q] matrix, q = (n, pixel) fastest."""
    a, geo = wp.gp.a, wp.gp.a.geo
    q, _, kt = wp.sizes()
    pixels = math.prod(geo.out_dims)
    ds = a.y.strides
    name = f"wgrad_dyt_{abs(hash((geo, ds, offset))) % 10**12}"
    src = (
        "@triton.jit\n"
        f"def {name}(DY, WS, BLOCK_K: tl.constexpr, BLOCK_Q: tl.constexpr):\n"
        # (n, pixel) split in int32, widened to address (see engine._im2col_source)
        "    qq = tl.program_id(0) * BLOCK_Q + tl.arange(0, BLOCK_Q)\n"
        "    kk = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)\n"
        f"    mask = (kk < {kt})[:, None] & (qq < {q})[None, :]\n"
        f"    src = ((qq // {pixels}).to(tl.int64) * {ds[0]}"
        f" + (qq % {pixels}).to(tl.int64) * {wp.pixel_stride})[None, :]"
        f" + (kk.to(tl.int64) * {ds[1]})[:, None]\n"
        "    v = tl.load(DY + src, mask=mask)\n"
        f"    tl.store(WS + {offset} + kk[:, None].to(tl.int64) * {q} + qq[None, :].to(tl.int64),"
        " v, mask=mask)\n"
    )
    bk, bq = 32, 128
    return src, name, (-(-q // bq), -(-kt // bk)), {"BLOCK_K": bk, "BLOCK_Q": bq, "num_warps": 4}


class GemmWgradEngine(MatmulDelegateEngine):
    id = 12
    name = "conv_wgrad_gemm"

    def gemm_graph(self, graph):
        p = plan_wgrad(graph)
        return p if isinstance(p, str) else _gemm_graph(graph, p)[0]

    def extra_bytes(self, graph) -> int:
        wp = plan_wgrad(graph)
        if wp.batched:
            return wp.products_bytes()
        return wp.col_bytes() + wp.dyt_bytes()

    def extra_launches(self, graph) -> int:
        return 2 if plan_wgrad(graph).kmajor else 1

    def build(self, graph, config, target) -> Executable:
        wp = plan_wgrad(graph)
        _, mapping, b_uid, a_uid = _gemm_graph(graph, wp)
        return _Exec(
            graph,
            wp,
            self.build_gemm(graph, config, target),
            mapping,
            (b_uid, a_uid),
            self.workspace_prefix(graph),
            target,
        )


class _Exec(Executable, LaunchList):
    def __init__(self, graph, wp: WgradPlan, inner, mapping, uids, prefix, target):
        LaunchList.__init__(self)
        gp = wp.gp
        self.inner, self.mapping, (self.b_uid, self.a_uid) = inner, mapping, uids
        self.wp, self.prefix = wp, prefix
        self.workspace_size = prefix + inner.workspace_size
        if wp.batched:  # the products' ordered sum runs after the GEMM
            self.sum = LaunchList()
            src, name, grid, const = _sum_source(wp)
            self.sum.add_launch(
                kernel_from_source(src, name),
                grid,
                const,
                [("ws", torch.float32), ("buf", gp.a.w.uid)],
                graph,
                target.is_cuda,
            )
            return
        src, name, grid, const = _im2col_source(gp, transposed=wp.kmajor)
        ws = [("ws", gp.a.x.torch_dtype)]
        self.add_launch(
            kernel_from_source(src, name),
            grid,
            const,
            [("buf", gp.a.x.uid)] + ws,
            graph,
            target.is_cuda,
        )
        if wp.kmajor:
            offset = wp.col_bytes() // gp.a.y.data_type.itemsize
            src, name, grid, const = _dyt_source(wp, offset)
            self.add_launch(
                kernel_from_source(src, name),
                grid,
                const,
                [("buf", gp.a.y.uid), ("ws", gp.a.y.torch_dtype)],
                graph,
                target.is_cuda,
            )

    def run(self, buffers, workspace, stream=None):
        wp = self.wp
        bufs = {syn: buffers[orig] for syn, orig in self.mapping.items() if orig in buffers}
        if wp.batched:
            products = workspace[: wp.products_bytes()].view(torch.float32)
            bufs[self.b_uid] = products
            self.inner.run(bufs, workspace[self.prefix :], stream)
            self.sum.run_launches(buffers, products, stream)
            return
        self.run_launches(buffers, workspace, stream)  # im2col (and dY^T) into the workspace
        col = wp.col_bytes()
        bufs[self.b_uid] = workspace[:col].view(wp.gp.a.x.torch_dtype)
        if wp.kmajor:
            bufs[self.a_uid] = workspace[col : col + wp.dyt_bytes()].view(wp.gp.a.y.torch_dtype)
        self.inner.run(bufs, workspace[self.prefix :], stream)
