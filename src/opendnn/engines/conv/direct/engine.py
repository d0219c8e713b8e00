"""Direct convolution forward (CUDNN_CONVOLUTION_FWD_ALGO_DIRECT) for depthwise and
small-channel problems, where a tensor-core GEMM would spend most of each K step on
padding (C/G = 1 for depthwise, 3 for an RGB first layer).

A program owns BLOCK_M output pixels x BLOCK_N output channels and accumulates rank-1
updates in float32 on the CUDA cores, one (tap, input channel) pair at a time:

    acc[p, j] += x[n, g*C/G + c, o_p * stride - pre + r * dil] * w[g*K/G + j, c, r]

No tensor cores, no workspace; the epilogue is the same fused pointwise code.
"""

from __future__ import annotations

from ....runtime.launch import DualKernel, LaunchList, kernel_from_source
from ...base import SUPPORTED, EngineConfig, Executable, Knob, Support, decline
from ...fusion import epilogue as fuse_epilogue
from ..analysis import epilogue
from ..implicit_gemm import _kernels as K
from ..implicit_gemm.engine import ImplicitGemmEngine

MAX_CHANNELS = 16


def direct_source(
    name: str, geo: K.ConvGeometry, kn: K.ConvKnobs, *, epilogue_params: list, epilogue_body: str
) -> str:
    d = len(geo.out_dims)
    ind, ind2, ind3 = "    ", "        ", "            "
    o = [f"o{i}" for i in range(d)]
    L = K.pixel_tile_header(
        name,
        ["X", "W"],
        epilogue_params,
        ["BLOCK_M", "BLOCK_N"],
        geo,
        geo.out_dims,
        geo.k_per_group,
        kn,
    )
    xs, ws = geo.x_strides, geo.w_strides
    L.append(f"{ind}x_row = nb * {xs[0]} + g * {geo.c_per_group * xs[1]}")
    for i in range(d):
        L.append(f"{ind}base{i} = {o[i]} * {geo.stride[i]} - {geo.pre[i]}")
    L.append(f"{ind}w_col = (g * {geo.k_per_group} + offs_n) * {ws[0]}")
    L.append(f"{ind}acc = tl.full([BLOCK_M, BLOCK_N], 0.0, tl.float32)")
    L.append(f"{ind}for t in range(0, {K._prod(geo.filt)}):")
    valid, x_off, w_off = ["mask_m"], ["x_row"], []
    L += K.tap_lines(geo, ind2, valid, x_off, w_off)
    L.append(f"{ind2}valid = " + " & ".join(valid))
    L.append(f"{ind2}xp = X + {' + '.join(x_off)}")
    L.append(f"{ind2}wp = W + w_col + {' + '.join(w_off)}")
    L.append(f"{ind2}for c in range(0, {geo.c_per_group}):")
    L.append(f"{ind3}xv = tl.load(xp + c * {xs[1]}, mask=valid, other=0.0).to(tl.float32)")
    L.append(f"{ind3}wv = tl.load(wp + c * {ws[1]}, mask=mask_n, other=0.0).to(tl.float32)")
    L.append(f"{ind3}acc += xv[:, None] * wv[None, :]")
    for line in epilogue_body.strip("\n").split("\n"):
        L.append(ind + line)
    return "\n".join(L) + "\n"


class DirectConvEngine(ImplicitGemmEngine):
    """Rank-1 updates on CUDA cores: depthwise and C/G <= 16 convolutions."""

    id = 7
    name = "conv_direct"
    kind = "conv_fprop"
    tma_path = None

    def check_support(self, graph, target) -> Support:
        a = self._analyze(graph)
        if isinstance(a, str):
            return decline(a)
        if a.prologue is not None:
            return decline("the direct kernel has no prologue")
        if a.geo.c_per_group > MAX_CHANNELS:
            return decline(
                f"direct convolution is for depthwise and small-channel problems "
                f"(C/G = {a.geo.c_per_group} > {MAX_CHANNELS}); tensor cores win "
                "there"
            )
        return SUPPORTED

    def numerical_notes(self, graph, config) -> frozenset:
        return frozenset()

    def knob_space(self, graph=None):
        return [
            Knob("BLOCK_M", (32, 64, 128, 256), 128),
            Knob("BLOCK_N", (16, 32, 64), 32),
            Knob("BLOCK_K", (16,), 16),
            Knob("num_warps", (4, 8), 4),
            Knob("num_stages", (1, 2), 1),
        ]

    def configs(self, graph, target):
        if not self.check_support(graph, target).ok:
            return []
        cands = [(128, 32, 4), (256, 64, 8), (64, 16, 4)] if target.is_cuda else [(32, 16, 4)]
        out = [
            EngineConfig.make(self, BLOCK_M=m, BLOCK_N=n, BLOCK_K=16, num_warps=w, num_stages=1)
            for m, n, w in cands
        ]
        out.sort(key=lambda c: self.estimate_seconds(graph, c, target))
        return out

    def estimate_seconds(self, graph, config, target) -> float:
        a = self._analyze(graph)
        geo = a.geo
        flops = (
            2.0
            * geo.n
            * K._prod(geo.out_dims)
            * geo.k_per_group
            * geo.groups
            * K._prod(geo.filt)
            * geo.c_per_group
        )
        moved = a.x.data_type.itemsize * (a.x.numel + a.y.numel + a.w.numel)
        # a program's BLOCK_N columns are one group's output channels: a depthwise layer
        # (K/G = 1) uses one of them, and the FMAs of the others are spent all the same
        bn = config.knob_dict.get("BLOCK_N", 32)
        fill = geo.k_per_group / (-(-geo.k_per_group // bn) * bn)
        # CUDA-core FMA rate: about a fifteenth of the dense tensor-core rate
        return max(flops / fill / (target.peak_flops_fp16 / 15), moved / target.bandwidth) + 4e-6

    def build(self, graph, config, target) -> Executable:
        return _DirectExecutable(
            graph, self._analyze(graph), K.ConvKnobs(**config.knob_dict), target
        )


class _DirectExecutable(Executable, LaunchList):
    def __init__(self, graph, a, kn, target):
        LaunchList.__init__(self)
        self.workspace_size = 0
        params, body = epilogue(graph, a, "conv_fprop")
        name = f"conv_direct_{graph.key()[:12]}"
        src = direct_source(name, a.geo, kn, epilogue_params=params, epilogue_body=body)
        kern = kernel_from_source(src, name)
        self.source = src
        args = [("buf", a.x.uid), ("buf", a.w.uid)] + fuse_epilogue.launch_args(a.ep)
        const = {"BLOCK_M": kn.BLOCK_M, "BLOCK_N": kn.BLOCK_N, "num_warps": kn.num_warps}
        self.add_launch(
            DualKernel(kern.compiled, kern.interpreted),
            K.grid(a.geo, kn),
            const,
            args,
            graph,
            target.is_cuda,
        )

    def run(self, buffers, workspace, stream=None):
        self.run_launches(buffers, workspace, stream)


__all__ = ["DirectConvEngine"]
