"""Winograd backward filter, non-fused (CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED).

For a 2-D 3x3 filter at stride 1 (cross-correlation; xp is x with its zero padding)

    dw[k, c, r, s] = sum_n sum_{i, j} dy[n, k, i, j] xp[n, c, i + r, j + s]

Cut dy into 2x2 tiles. A tile at (2 t_h, 2 t_w) reads the 4x4 patch
d = xp[n, c, 2 t_h : 2 t_h + 4, 2 t_w : 2 t_w + 4] and adds a 3x3 correlation of d with
the tile (a 2x2 "filter" g): the Winograd problem F(3x3, 2x2), alpha = 4.

Its matrices follow from the forward F(2x2, 3x3) (``winograd.MATRICES[2]``: B^T, G, A^T)
by the transposition principle. In 1-D, y_i = sum_e A^T[i, e] (G w)_e (B^T d)_e computes
y_i = sum_j w_j d_{i+j}; pairing with a gradient g_i:

    sum_i g_i y_i = sum_j w_j sum_e G[e, j] (A g)_e (B^T d)_e = sum_j w_j dw_j

so dw_j = sum_i g_i d_{i+j} = (G^T [ (A g) (.) (B^T d) ])_j. That is F(3, 2) with

    B'^T = B^T (4x4),    G' = A = (A^T)^T (4x2),    A'^T = G^T (3x4)

and in 2-D, per tile, dw_tile = A'^T [ (G' g G'^T) (.) (B'^T d B') ] A'. The dy transform
is adds and subtracts only, the input transform is the forward's, and the output
transform's coefficients are 0, 1/2 and 1 (exact scalings). Summing over tiles and batch
turns the elementwise product into 16 GEMMs, one per grid position e = (xi, nu):

    DYt[e, p, k] = (G' g_pk G'^T)[e]          dy transform,   p = (n, t_h, t_w)  (workspace)
    V[e, p, c]   = (B'^T d_pc B')[e]          input transform (the forward's)     (workspace)
    M[e, k, c]   = sum_p DYt[e, p, k] V[e, p, c]   16 GEMMs of reduction length P = N * tiles
    dw[k, c]     = A'^T M[:, k, c] A'         output transform + epilogue, any dw layout

Tiles that overhang dy's edge read zeros there, so they add nothing. The GEMMs run on the
matmul engine with float32 accumulation (a long P is where a split-K config pays; its
partial sums are reduced in a fixed order, so the engine is deterministic). The output
transform writes dw in its descriptor's type and strides, flipped in CONVOLUTION mode,
and runs the graph's pointwise epilogue (e.g. the alpha / beta blend of the descriptor
API). Supported: 2-D, 3x3, stride 1, dilation 1, one group, float / half / bfloat16.
The transforms add rounding (note WINOGRAD); for half types DYt and V are rounded to the
operand type before the GEMM (TENSOR_CORE, DOWN_CONVERT_INPUTS).
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from ....enums import DataType, NumericalNote
from ....graph.graph import Graph
from ....runtime.launch import LaunchList, kernel_from_source
from ...base import Executable
from ...fusion import epilogue as fuse_epilogue
from ...matmul.delegate import MatmulDelegateEngine
from ..analysis import ConvAnalysis, analyze, epilogue
from .engine import MATRICES, WinoPlan, _al, _input_source, _lin, _tile_split
from .fused import FLOAT_TYPES


def _transpose(mat) -> list:
    return [list(col) for col in zip(*mat)]


# F(3x3, 2x2) from the forward F(2x2, 3x3): B'^T = B^T, G' = A, A'^T = G^T
WGRAD_MATRICES = dict(
    BT=MATRICES[2]["BT"], G=_transpose(MATRICES[2]["AT"]), AT=_transpose(MATRICES[2]["G"])
)
ALPHA = 4  # transform grid (4x4: 16 GEMMs)
TILE = 2  # dy tile (the F(3x3, 2x2) "filter")
OUT_BLOCK = (32, 32)  # output transform tile over (K, C)


@dataclasses.dataclass
class WgradPlan(WinoPlan):
    """A ``WinoPlan`` over the wgrad analysis: m = 2 (dy tiles), tiles over dy's H x W,
    p = N * tiles, k = K, c = C, dt the GEMM operand type. ``_input_source`` of the
    forward reads it unchanged (x, its padding and the same tiles)."""

    def sizes(self) -> tuple:
        """Workspace bytes (aligned) of DYt [16, P, K], V [16, P, C] (operand type) and
        M [16, K, C] (float32)."""
        it = torch.empty((), dtype=self.dt).element_size()
        return (
            _al(self.e * self.p * self.k * it),
            _al(self.e * self.p * self.c * it),
            _al(self.e * self.k * self.c * 4),
        )


def wgrad_rules(a: ConvAnalysis) -> str | None:
    """Why F(3x3, 2x2) cannot compute this backward filter, or None."""
    geo = a.geo
    if len(geo.filt) != 2:
        return f"the Winograd backward filter needs a 2-D convolution, got {len(geo.filt)}-D"
    if tuple(geo.filt) != (3, 3):
        return f"the Winograd backward filter needs a 3x3 filter, got {list(geo.filt)}"
    if any(s != 1 for s in geo.stride):
        return f"the Winograd backward filter needs stride 1, got stride {list(geo.stride)}"
    if any(d != 1 for d in geo.dilation):
        return f"the Winograd backward filter needs dilation 1, got dilation {list(geo.dilation)}"
    if geo.groups != 1:
        return f"the Winograd backward filter takes one group, got {geo.groups}"
    if a.x.data_type not in FLOAT_TYPES:
        return (
            f"the Winograd backward filter needs float, half or bfloat16 x and dy, got "
            f"{a.x.data_type.name}"
        )
    return None


@functools.lru_cache(maxsize=512)
def plan_winograd_wgrad(graph) -> WgradPlan | str:
    """The F(3x3, 2x2) plan of the graph's dw (with its pointwise epilogue), or why not."""
    a = analyze(graph, "conv_wgrad")
    if isinstance(a, str):
        return a
    why = wgrad_rules(a)
    if why:
        return why
    geo = a.geo
    th, tw = (-(-o // TILE) for o in geo.out_dims)
    return WgradPlan(
        a, TILE, (th, tw), geo.n * th * tw, geo.k_per_group, geo.c_per_group, a.x.torch_dtype
    )


def _gemm_graph(wp: WgradPlan):
    """M[e] = DYt[e]^T @ V[e] ([K, P] x [P, C] -> [K, C], float32) as a matmul graph over
    the workspace."""
    dt, e, p, k, c = wp.a.x.data_type, wp.e, wp.p, wp.k, wp.c
    g = Graph(intermediate_data_type=DataType.FLOAT, compute_data_type=DataType.FLOAT)
    dyt = g.tensor([e, k, p], [p * k, 1, k], dt, name="DYt^T")
    v = g.tensor([e, p, c], [p * c, c, 1], dt, name="V")
    m = g.matmul(dyt, v, name="winograd_wgrad_gemm")
    m.set_output(True).set_data_type(DataType.FLOAT).set_stride([k * c, c, 1])
    g.validate()
    return g.op_graph, dyt.uid, v.uid, m.uid


def _dy_source(wp: WgradPlan, name: str) -> str:
    """DYt[e, p, k] = (G' g G'^T)[e] for the 2x2 dy tile g of (p, k); one lane per (p, k).
    DY: dy (any strides); DYT: workspace [16, P, K] in the operand type."""
    geo, ds = wp.a.geo, wp.a.y.strides
    G = WGRAD_MATRICES["G"]
    L = [
        "@triton.jit",
        f"def {name}(DY, DYT, BLOCK: tl.constexpr):",
        *_tile_split("i", "tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", wp, wp.k, "k"),
        f"    mask = i < {wp.p * wp.k}",
        f"    base = nb * {ds[0]} + k * {ds[1]}",
    ]
    for a in range(TILE):
        L.append(f"    h{a} = th_ * {TILE} + {a}")
        L.append(f"    w{a} = tw_ * {TILE} + {a}")
    for a in range(TILE):  # the last tile row / column may overhang dy: zeros there
        for b in range(TILE):
            L.append(
                f"    g{a}{b} = tl.load(DY + base + h{a} * {ds[2]} + w{b} * {ds[3]}, "
                f"mask=mask & (h{a} < {geo.out_dims[0]}) & (w{b} < {geo.out_dims[1]}), "
                "other=0.0).to(tl.float32)"
            )
    for xi in range(ALPHA):  # t = G' g  (4 x 2)
        for b in range(TILE):
            L.append(f"    t{xi}{b} = " + _lin(G[xi], [f"g{a}{b}" for a in range(TILE)]))
    for xi in range(ALPHA):
        for nu in range(ALPHA):
            e = xi * ALPHA + nu
            L.append(
                f"    tl.store(DYT + {e * wp.p * wp.k} + i, "
                f"{_lin(G[nu], [f't{xi}{b}' for b in range(TILE)])}"
                ".to(DYT.dtype.element_ty), mask=mask)"
            )
    return "\n".join(L) + "\n"


def _output_source(wp: WgradPlan, name: str, ep_params: list, ep_body: str) -> str:
    """dw[k, c, r, s] = (A'^T M[:, k, c] A')[r, s], then the epilogue, per (K, C) tile.
    M: workspace [16, K, C] float32; the epilogue's params address dw and its operands
    (``engine.epilogue``: rows offs_m = k, columns offs_n = c, window tap (r0, r1))."""
    AT, ind = WGRAD_MATRICES["AT"], "    "
    sig = ["M"] + ep_params + ["BLOCK_M: tl.constexpr", "BLOCK_N: tl.constexpr"]
    L = [
        "@triton.jit",
        f"def {name}({', '.join(sig)}):",
        f"{ind}g = 0",
        f"{ind}offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)",
        f"{ind}mask_m = offs_m < {wp.k}",
        f"{ind}offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)",
        f"{ind}mask_n = offs_n < {wp.c}",
        f"{ind}mm = mask_m[:, None] & mask_n[None, :]",
    ]
    for e in range(ALPHA * ALPHA):
        L.append(
            f"{ind}m{e} = tl.load(M + {e * wp.k * wp.c} + offs_m[:, None] * {wp.c} + "
            "offs_n[None, :], mask=mm, other=0.0)"
        )
    for r in range(3):  # t = A'^T m  (3 x 4)
        for nu in range(ALPHA):
            L.append(
                f"{ind}t{r}{nu} = " + _lin(AT[r], [f"m{xi * ALPHA + nu}" for xi in range(ALPHA)])
            )
    for r in range(3):
        for s in range(3):
            L.append(f"{ind}acc = " + _lin(AT[s], [f"t{r}{nu}" for nu in range(ALPHA)]))
            L.append(f"{ind}r0 = {r}")
            L.append(f"{ind}r1 = {s}")
            L += [ind + line for line in ep_body.strip("\n").split("\n")]
    return "\n".join(L) + "\n"


class WinogradNonfusedWgradEngine(MatmulDelegateEngine):
    """dw by F(3x3, 2x2): dy and input transforms, 16 GEMMs over N x tiles, output
    transform with the fused pointwise epilogue."""

    id = 24
    name = "conv_wgrad_winograd_nonfused"

    def gemm_graph(self, graph):
        wp = plan_winograd_wgrad(graph)
        return wp if isinstance(wp, str) else _gemm_graph(wp)[0]

    def extra_bytes(self, graph) -> int:
        return sum(plan_winograd_wgrad(graph).sizes())

    def extra_launches(self, graph) -> int:
        return 3  # dy transform, input transform, output transform

    def numerical_notes(self, graph, config) -> frozenset:
        wp = plan_winograd_wgrad(graph)
        if isinstance(wp, str):
            return frozenset()
        notes = set(super().numerical_notes(graph, config)) | {NumericalNote.WINOGRAD}
        if wp.a.x.data_type != DataType.FLOAT:
            notes |= {NumericalNote.TENSOR_CORE, NumericalNote.DOWN_CONVERT_INPUTS}
        return frozenset(notes)

    def estimate_seconds(self, graph, config, target) -> float:
        """The forward non-fused engine's model (the GEMMs' roofline, the workspace written
        and read back, a few microseconds per launch) plus the transforms' reads of x and
        dy and the output transform's write of dw."""
        a = plan_winograd_wgrad(graph).a
        io = sum(t.numel * t.data_type.itemsize for t in (a.x, a.y, a.w))
        return super().estimate_seconds(graph, config, target) + io / target.bandwidth

    def build(self, graph, config, target) -> Executable:
        wp = plan_winograd_wgrad(graph)
        _, dyt_uid, v_uid, m_uid = _gemm_graph(wp)
        return _WgradExecutable(
            graph, wp, self.build_gemm(graph, config, target), (dyt_uid, v_uid, m_uid), target
        )


class _WgradExecutable(Executable, LaunchList):
    """Four stages over one workspace: [DYt | V | M | the GEMM's own workspace]."""

    def __init__(self, graph, wp: WgradPlan, gemm, uids, target):
        LaunchList.__init__(self)
        self.wp, self.gemm = wp, gemm
        self.dyt_uid, self.v_uid, self.m_uid = uids
        sd, sv, sm = wp.sizes()
        self.offsets = (0, sd, sd + sv, sd + sv + sm)
        self.workspace_size = sd + sv + sm + gemm.workspace_size
        a, tag, cuda = wp.a, graph.key()[:12], target.is_cuda
        dname, iname, oname = (
            f"wino_wgrad_dy_{tag}",
            f"wino_wgrad_input_{tag}",
            f"wino_wgrad_output_{tag}",
        )
        blk = {"BLOCK": 256, "num_warps": 4}
        self.add_launch(
            kernel_from_source(_dy_source(wp, dname), dname),
            (-(-wp.p * wp.k // 256),),
            blk,
            [("buf", a.y.uid), ("ws", wp.dt)],
            graph,
            cuda,
        )
        self.add_launch(
            kernel_from_source(_input_source(wp, iname), iname),
            (-(-wp.p * wp.c // 256),),
            blk,
            [("buf", a.x.uid), ("ws", wp.dt)],
            graph,
            cuda,
        )
        params, body = epilogue(graph, a, "conv_wgrad")
        bm, bn = OUT_BLOCK
        self.add_launch(
            kernel_from_source(_output_source(wp, oname, params, body), oname),
            (-(-wp.k // bm), -(-wp.c // bn)),
            {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": 4},
            [("ws", torch.float32)] + fuse_epilogue.launch_args(a.ep),
            graph,
            cuda,
        )

    def run(self, buffers, workspace, stream=None):
        o, dt = self.offsets, self.wp.dt
        dyt = workspace[o[0] : o[1]].view(dt)
        v = workspace[o[1] : o[2]].view(dt)
        m = workspace[o[2] : o[3]].view(torch.float32)
        (dl, _), (il, _), (ol, oa) = self.launches
        dl.launch([buffers[self.wp.a.y.uid], dyt], stream)
        il.launch([buffers[self.wp.a.x.uid], v], stream)
        self.gemm.run({self.dyt_uid: dyt, self.v_uid: v, self.m_uid: m}, workspace[o[3] :], stream)
        ol.launch(self.values(oa, buffers, m), stream)


__all__ = ["WGRAD_MATRICES", "WinogradNonfusedWgradEngine", "plan_winograd_wgrad"]
