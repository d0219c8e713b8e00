"""Winograd F(2x2, 3x3), non-fused (CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED).

Each 2x2 output tile comes from a 4x4 input patch d with 16 multiplies per channel pair
instead of 36:

    Y_tile = A^T [ (G g G^T) (.) (B^T d B) ] A        ((.) elementwise over the 4x4 grid)

    B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]
    G   = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]
    A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]

Summing over input channels turns the elementwise product into 16 independent GEMMs,
one per grid position e = (xi, nu):

    U[e, k, c] = (G g_kc G^T)[e]            filter transform      (workspace)
    V[e, p, c] = (B^T d_pc B)[e]            input transform, p = (n, tile)   (workspace)
    M[e, p, k] = sum_c V[e, p, c] U[e, k, c]   16 batched GEMMs (the matmul engine)
    y[n, k, 2 t_h + i, 2 t_w + j] = (A^T M_pk A)[i, j]   output transform + epilogue

Supported: 2-D, 3x3 filters, stride 1, no dilation, one group (as in cuDNN). The
transforms add rounding (notes: WINOGRAD, and DOWN_CONVERT_INPUTS for half types).
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
from ..analysis import analyze, epilogue
from ..implicit_gemm import _kernels as IK

# Transform matrices per output tile size m (filter 3x3, input patch T = m + 2)
MATRICES = {
    2: dict(
        BT=[[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        G=[[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]],
        AT=[[1, 1, 1, 0], [0, 1, -1, -1]],
    ),
    4: dict(
        BT=[
            [4, 0, -5, 0, 1, 0],
            [0, -4, -4, 1, 1, 0],
            [0, 4, -4, -1, 1, 0],
            [0, -2, -1, 2, 1, 0],
            [0, 2, -1, -2, 1, 0],
            [0, 4, 0, -5, 0, 1],
        ],
        G=[
            [1 / 4, 0, 0],
            [-1 / 6, -1 / 6, -1 / 6],
            [-1 / 6, 1 / 6, -1 / 6],
            [1 / 24, 1 / 12, 1 / 6],
            [1 / 24, -1 / 12, 1 / 6],
            [0, 0, 1],
        ],
        AT=[[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
    ),
}
ALIGN = 256
OUTPUT_BLOCK_N = 32  # output channels per output-transform program


def _al(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@dataclasses.dataclass
class WinoPlan:
    a: object
    m: int  # output tile size (2 or 4)
    tiles: tuple  # (tiles_h, tiles_w)
    p: int  # N * tiles_h * tiles_w
    k: int
    c: int
    dt: torch.dtype

    @property
    def t(self) -> int:  # input patch size
        return self.m + 2

    @property
    def e(self) -> int:  # GEMMs (grid positions)
        return self.t * self.t

    def sizes(self) -> tuple:
        it = torch.empty((), dtype=self.dt).element_size()
        return (
            _al(self.e * self.k * self.c * it),
            _al(self.e * self.p * self.c * it),
            _al(self.e * self.p * self.k * 4),
        )


@functools.lru_cache(maxsize=512)
def plan_winograd(graph, m: int = 2) -> WinoPlan | str:
    a = analyze(graph, "conv_fprop")
    if isinstance(a, str):
        return a
    geo = a.geo
    if len(geo.filt) != 2 or tuple(geo.filt) != (3, 3):
        return f"Winograd F(2x2,3x3) needs a 2-D 3x3 filter, got {list(geo.filt)}"
    if any(s != 1 for s in geo.stride) or any(d != 1 for d in geo.dilation):
        return "Winograd needs stride 1 and dilation 1"
    if geo.groups != 1:
        return "Winograd here takes one group"
    if a.prologue is not None or a.ep.stats:
        return "the Winograd engine fuses no prologue or statistics"
    th, tw = (-(-o // m) for o in geo.out_dims)
    return WinoPlan(
        a, m, (th, tw), geo.n * th * tw, geo.k_per_group, geo.c_per_group, a.x.torch_dtype
    )


def _gemm_graph(wp: WinoPlan):
    """M[e] = V[e] @ U[e]^T as a matmul graph over workspace matrices."""
    dt = wp.a.x.data_type
    g = Graph(intermediate_data_type=DataType.FLOAT, compute_data_type=DataType.FLOAT)
    v = g.tensor([wp.e, wp.p, wp.c], [wp.p * wp.c, wp.c, 1], dt, name="V")
    u = g.tensor([wp.e, wp.c, wp.k], [wp.k * wp.c, 1, wp.c], dt, name="U")
    m = g.matmul(v, u, name="winograd_gemm")
    m.set_output(True).set_data_type(DataType.FLOAT).set_stride([wp.p * wp.k, wp.k, 1])
    g.validate()
    return g.op_graph, v.uid, u.uid, m.uid


class WinogradNonfusedEngine(MatmulDelegateEngine):
    """F(2x2, 3x3): 16 GEMMs; exact up to the transforms' rounding."""

    id = 8
    name = "conv_winograd_nonfused"
    tile = 2

    def extra_launches(self, graph) -> int:
        return 3  # filter transform, input transform, output transform

    def _plan(self, graph):
        return plan_winograd(graph, self.tile)

    def gemm_graph(self, graph):
        wp = self._plan(graph)
        return wp if isinstance(wp, str) else _gemm_graph(wp)[0]

    def extra_bytes(self, graph) -> int:
        return sum(self._plan(graph).sizes())

    def numerical_notes(self, graph, config) -> frozenset:
        notes = {NumericalNote.WINOGRAD}
        if self.tile == 4:
            notes.add(NumericalNote.WINOGRAD_TILE_4x4)
        wp = self._plan(graph)
        if not isinstance(wp, str) and wp.a.x.data_type != DataType.FLOAT:
            notes |= {NumericalNote.TENSOR_CORE, NumericalNote.DOWN_CONVERT_INPUTS}
        return frozenset(notes)

    def build(self, graph, config, target) -> Executable:
        wp = self._plan(graph)
        _, v_uid, u_uid, m_uid = _gemm_graph(wp)
        return _WinoExecutable(
            graph, wp, self.build_gemm(graph, config, target), (v_uid, u_uid, m_uid), target
        )


class Winograd4x4NonfusedEngine(WinogradNonfusedEngine):
    """F(4x4, 3x3): 36 GEMMs on 6x6 patches, 4x fewer multiplies; larger transform
    coefficients round more (note WINOGRAD_TILE_4x4)."""

    id = 9
    name = "conv_winograd4x4_nonfused"
    tile = 4


def _lin(coeffs, names) -> str:
    terms = []
    for c, n in zip(coeffs, names):
        if c == 0:
            continue
        terms.append(n if c == 1 else f"-{n}" if c == -1 else f"{float(c)!r} * {n}")
    return "(" + " + ".join(terms).replace("+ -", "- ") + ")" if terms else "0.0"


def _filter_source(wp: WinoPlan, name: str) -> str:
    ws = wp.a.w.strides
    flip = wp.a.geo.flip
    L = [
        "@triton.jit",
        f"def {name}(W, U, BLOCK: tl.constexpr):",
        "    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
        f"    mask = i < {wp.k * wp.c}",
        f"    k = i // {wp.c}",
        f"    c = i % {wp.c}",
    ]
    for r in range(3):
        for s in range(3):
            rr, ss = (2 - r, 2 - s) if flip else (r, s)
            L.append(
                f"    g{r}{s} = tl.load(W + k * {ws[0]} + c * {ws[1]} + {rr * ws[2] + ss * ws[3]}"
                ", mask=mask, other=0.0).to(tl.float32)"
            )
    G, T = MATRICES[wp.m]["G"], wp.t
    for xi in range(T):  # t = G g  (T x 3)
        for s in range(3):
            L.append(f"    t{xi}{s} = " + _lin(G[xi], [f"g{r}{s}" for r in range(3)]))
    for xi in range(T):
        for nu in range(T):
            e = xi * T + nu
            L.append(
                f"    tl.store(U + {e * wp.k * wp.c} + i, "
                f"{_lin(G[nu], [f't{xi}{s}' for s in range(3)])}.to(U.dtype.element_ty), "
                "mask=mask)"
            )
    return "\n".join(L) + "\n"


def _tile_split(var: str, expr: str, wp, inner: int = 1, name: str = "") -> list:
    """``var = expr`` split row-major into the tile (nb, th_, tw_) and, with ``inner`` > 1,
    the channel ``name``; all int64 in the end, the divisions in int32 while they fit
    (``implicit_gemm._kernels.index_split``)."""
    th, tw = wp.tiles
    sizes = [wp.p // (th * tw), th, tw] + ([inner] if inner > 1 or name else [])
    names = ["nb", "th_", "tw_"] + ([name] if inner > 1 or name else [])
    total = wp.p * inner + 2**16  # the grid's last block runs past (masked)
    return IK.index_split(var, expr, total, sizes, names, "    ", "_qw", True)


def _input_source(wp: WinoPlan, name: str) -> str:
    geo, xs = wp.a.geo, wp.a.x.strides
    L = [
        "@triton.jit",
        f"def {name}(X, V, BLOCK: tl.constexpr):",
        *_tile_split("i", "tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", wp, wp.c, "c"),
        f"    mask = i < {wp.p * wp.c}",
        f"    base = nb * {xs[0]} + c * {xs[1]}",
    ]
    BT, T, m = MATRICES[wp.m]["BT"], wp.t, wp.m
    for a in range(T):
        L.append(f"    h{a} = th_ * {m} - {geo.pre[0]} + {a}")
        L.append(f"    w{a} = tw_ * {m} - {geo.pre[1]} + {a}")
    for a in range(T):
        for b in range(T):
            L.append(
                f"    d{a}{b} = tl.load(X + base + h{a} * {xs[2]} + w{b} * {xs[3]}, mask=mask "
                f"& (h{a} >= 0) & (h{a} < {geo.in_dims[0]}) & (w{b} >= 0) & "
                f"(w{b} < {geo.in_dims[1]}), other=0.0).to(tl.float32)"
            )
    for xi in range(T):  # t = B^T d
        for b in range(T):
            L.append(f"    t{xi}{b} = " + _lin(BT[xi], [f"d{a}{b}" for a in range(T)]))
    for xi in range(T):
        for nu in range(T):
            e = xi * T + nu
            L.append(
                f"    tl.store(V + {e * wp.p * wp.c} + i, "
                f"{_lin(BT[nu], [f't{xi}{b}' for b in range(T)])}.to(V.dtype.element_ty), "
                "mask=mask)"
            )
    return "\n".join(L) + "\n"


def output_block_m(m: int) -> int:
    """Pixel rows of the output transform's [BLOCK_M, 32] tiles. The transform streams
    over the T columns of M: a column's T tiles, then its m rows of A^T M, are live beside
    the m * m float32 output accumulators; with 4 warps a tile costs BLOCK_M / 4
    registers per thread. F(4x4): 22-26 tiles of 16 rows (~100 registers); F(2x2): ~10
    of 32. (All 36 tiles of 64 rows at once spilled 13-20 KB per thread and took ptxas
    3-5 s: docs/design/conv.md.)"""
    return 16 if m == 4 else 32


def _output_source(graph, wp: WinoPlan, name: str, ep_params: list, ep_body: str) -> str:
    geo = wp.a.geo
    ind = "    "
    sig = ["M"] + ep_params + ["BLOCK_M: tl.constexpr", "BLOCK_N: tl.constexpr"]
    L = [
        "@triton.jit",
        f"def {name}({', '.join(sig)}):",
        f"{ind}pid = tl.program_id(0)",
        f"{ind}g = 0",
        f"{ind}num_pid_n = {-(-wp.k // OUTPUT_BLOCK_N)}",
        f"{ind}pid_m = pid // num_pid_n",
        f"{ind}pid_n = pid % num_pid_n",
        *_tile_split("pp", "pid_m * BLOCK_M + tl.arange(0, BLOCK_M)", wp),
        f"{ind}mask_p = pp < {wp.p}",
        f"{ind}offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        f"{ind}mask_n = offs_n < {wp.k}",
        f"{ind}mm = mask_p[:, None] & mask_n[None, :]",
    ]
    AT, T, m = MATRICES[wp.m]["AT"], wp.t, wp.m
    started = set()
    for nu in range(T):  # column nu of M: t = A^T M[:, nu], then Y += t A[nu, :]
        for xi in range(T):
            L.append(
                f"{ind}m{xi} = tl.load(M + {(xi * T + nu) * wp.p * wp.k} + "
                "pp[:, None] * "
                f"{wp.k} + offs_n[None, :], mask=mm, other=0.0)"
            )
        for i in range(m):
            L.append(f"{ind}t{i} = " + _lin(AT[i], [f"m{xi}" for xi in range(T)]))
        for i in range(m):
            for j in range(m):
                if AT[j][nu] == 0:
                    continue
                term = _lin([AT[j][nu]], [f"t{i}"])
                L.append(f"{ind}y{i}{j} = " + (f"y{i}{j} + {term}" if (i, j) in started else term))
                started.add((i, j))
    for i in range(m):
        for j in range(m):
            L.append(f"{ind}acc = y{i}{j}")
            L.append(f"{ind}o0 = th_ * {m} + {i}")
            L.append(f"{ind}o1 = tw_ * {m} + {j}")
            L.append(f"{ind}mask_m = mask_p & (o0 < {geo.out_dims[0]}) & (o1 < {geo.out_dims[1]})")
            for line in ep_body.strip("\n").split("\n"):
                L.append(ind + line)
    return "\n".join(L) + "\n"


class _WinoExecutable(Executable, LaunchList):
    def __init__(self, graph, wp: WinoPlan, gemm, uids, target):
        LaunchList.__init__(self)
        self.wp, self.gemm = wp, gemm
        self.v_uid, self.u_uid, self.m_uid = uids
        su, sv, sm = wp.sizes()
        self.offsets = (0, su, su + sv, su + sv + sm)
        self.workspace_size = sum(wp.sizes()) + gemm.workspace_size
        a, tag = wp.a, graph.key()[:12]
        cuda = target.is_cuda
        fname, iname, oname = f"wino_filter_{tag}", f"wino_input_{tag}", f"wino_output_{tag}"
        blk = {"BLOCK": 256, "num_warps": 4}
        self.add_launch(
            kernel_from_source(_filter_source(wp, fname), fname),
            (-(-wp.k * wp.c // 256),),
            blk,
            [("buf", a.w.uid), ("ws", wp.dt)],
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
        params, body = epilogue(graph, a, "conv_fprop")
        osrc = _output_source(graph, wp, oname, params, body)
        bm = output_block_m(wp.m)
        self.add_launch(
            kernel_from_source(osrc, oname),
            (-(-wp.p // bm) * -(-wp.k // OUTPUT_BLOCK_N),),
            {"BLOCK_M": bm, "BLOCK_N": OUTPUT_BLOCK_N, "num_warps": 4},
            [("ws", torch.float32)] + fuse_epilogue.launch_args(a.ep),
            graph,
            cuda,
        )

    def run(self, buffers, workspace, stream=None):
        o = self.offsets
        u = workspace[o[0] : o[1]].view(self.wp.dt)
        v = workspace[o[1] : o[2]].view(self.wp.dt)
        m = workspace[o[2] : o[3]].view(torch.float32)
        (fl, fa), (il, ia), (ol, oa) = self.launches
        fl.launch([buffers[self.wp.a.w.uid], u], stream)
        il.launch([buffers[self.wp.a.x.uid], v], stream)
        self.gemm.run({self.v_uid: v, self.u_uid: u, self.m_uid: m}, workspace[o[3] :], stream)
        ol.launch(self.values(oa, buffers, m), stream)


__all__ = ["WinogradNonfusedEngine", "Winograd4x4NonfusedEngine"]
