"""Depthwise convolution forward, backward data and backward filter: one group per input
channel (C/G = 1), any channel multiplier K/G (up to 8 for backward data), 1-3 spatial dims, any layout of x, w and y (NHWC loads vectorise along
the channels, NCHW along the pixels), float / half / bfloat16, with the fused pointwise
epilogue. The kernel and its math are in ``_kernels.py``.

MobileNet, EfficientNet and ConvNeXt spend most of their convolution time in these
layers. They are memory-bound (a 7x7 depthwise layer does 49 multiply-adds per output
element, against a GEMM's thousands), so the engine's cost model is the time to move x,
w and y once at the device's bandwidth, or the CUDA cores' rate for the taps when that is
longer; ``docs/design/conv.md`` gives the floors of the benchmark's depthwise layers.
"""

from __future__ import annotations

import dataclasses

import torch

from ....enums import DataType
from ....runtime.launch import DualKernel, LaunchList, kernel_from_source
from ...base import SUPPORTED, EngineConfig, Executable, Knob, Support, decline
from ...fusion import epilogue as fuse_epilogue
from ..analysis import epilogue
from ..implicit_gemm import _kernels as K
from ..implicit_gemm.engine import ImplicitGemmEngine
from ._kernels import depthwise_dgrad_source, depthwise_source, depthwise_wgrad_sources

# (BLOCK_M pixels, BLOCK_N channels, warps): channels-innermost images take wide channel
# tiles (one vector load per pixel row), channel-planar ones wide pixel tiles
NHWC_TILES = ((32, 64, 4), (64, 64, 4), (16, 128, 4), (128, 32, 4), (128, 16, 4))
NCHW_TILES = ((256, 8, 4), (128, 16, 4), (512, 4, 4), (64, 32, 4))
INTERPRETER_TILES = ((16, 8, 4),)
# the backward data unrolls one pass per multiplier value
MAX_MULTIPLIER = 8
# the backward filter keeps one float32 sum per tap and channel in registers (unrolled)
MAX_TAPS = 81
# backward filter tiles (BLOCK_M pixels, BLOCK_N channels, warps). With more than 9 taps
# the unrolled taps keep more tiles live: ptxas for sm_90 spills 0.1-12 KB per thread on
# 5x5 / 7x7 layers with the wide tiles, none (NHWC bf16) or ~0.5 KB (NCHW float32, 7x7)
# with these smaller ones
WGRAD_NHWC_TILES = ((32, 64, 4), (64, 32, 4), (16, 128, 4))
WGRAD_NCHW_TILES = ((128, 16, 4), (256, 8, 4))
WGRAD_MANY_TAPS_NHWC_TILES = ((16, 64, 4), (32, 32, 4), (32, 64, 8))
WGRAD_MANY_TAPS_NCHW_TILES = ((32, 16, 4), (16, 32, 4))
# fp32 FMA rate of the CUDA cores against the dense fp16 tensor-core peak
CUDA_CORE_FRACTION = 1 / 15


class DepthwiseConvEngine(ImplicitGemmEngine):
    """Depthwise fprop on CUDA cores: pixels x channels tiles across all groups."""

    id = 41
    name = "conv_depthwise"
    kind = "conv_fprop"
    tma_path = None

    def check_support(self, graph, target) -> Support:
        a = self._analyze(graph)
        if isinstance(a, str):
            return decline(a)
        if a.geo.c_per_group != 1:
            return decline(
                f"depthwise convolution needs one input channel per group (C/G = "
                f"{a.geo.c_per_group}, {a.geo.groups} groups)"
            )
        if a.x.data_type == DataType.INT8:
            return decline("int8 depthwise convolution is not supported")
        if a.prologue is not None:
            return decline("the depthwise kernel has no prologue")
        if a.ep.stats:
            return decline("the depthwise kernel does not fuse batch-norm statistics")
        return SUPPORTED

    def numerical_notes(self, graph, config) -> frozenset:
        return frozenset()

    def knob_space(self, graph=None):
        tiles = NHWC_TILES + NCHW_TILES + INTERPRETER_TILES
        return [
            Knob("BLOCK_M", tuple(sorted({m for m, _, _ in tiles})), 64),
            Knob("BLOCK_N", tuple(sorted({n for _, n, _ in tiles})), 64),
            Knob("num_warps", (4, 8), 4),
        ]

    def complete_knobs(self, graph, knobs: dict) -> dict:
        return {**{k.name: k.default for k in self.knob_space(graph)}, **knobs}

    def configs(self, graph, target):
        if not self.check_support(graph, target).ok:
            return []
        a = self._analyze(graph)
        if not target.is_cuda:
            tiles = INTERPRETER_TILES
        else:
            tiles = NHWC_TILES if a.geo.x_strides[1] == 1 else NCHW_TILES
        out = [EngineConfig.make(self, BLOCK_M=m, BLOCK_N=n, num_warps=w) for m, n, w in tiles]
        out.sort(key=lambda c: self.estimate_seconds(graph, c, target))
        return out

    def check_config(self, graph, config, target) -> Support:
        s = self.check_support(graph, target)
        if not s.ok:
            return s
        kd = config.knob_dict
        for name in ("BLOCK_M", "BLOCK_N"):
            v = kd.get(name)
            if not isinstance(v, int) or v < 1 or v & (v - 1):
                return decline(f"{name}={v!r}: a power of two")
        unknown = sorted(set(kd) - {"BLOCK_M", "BLOCK_N", "num_warps"})
        if unknown:
            return decline(f"unknown knobs {', '.join(unknown)}")
        return SUPPORTED

    def workspace_size(self, graph, config, target) -> int:
        return 0

    def estimate_seconds(self, graph, config, target) -> float:
        a = self._analyze(graph)
        geo, kd = a.geo, config.knob_dict
        k_total = geo.k_per_group * geo.groups
        pixels = geo.n * K._prod(geo.out_dims)
        flops = 2.0 * pixels * k_total * K._prod(geo.filt)
        moved = a.x.data_type.itemsize * (a.x.numel + a.y.numel + a.w.numel)
        # tiles past the edges move and compute nothing useful
        bm, bn = kd["BLOCK_M"], kd["BLOCK_N"]
        fill = pixels * k_total / (-(-pixels // bm) * bm * -(-k_total // bn) * bn)
        rate = target.peak_flops_fp16 * CUDA_CORE_FRACTION
        return max(flops / rate, moved / target.bandwidth) / fill + 4e-6

    def build(self, graph, config, target) -> Executable:
        kd = self.complete_knobs(graph, config.knob_dict)
        kn = K.ConvKnobs(BLOCK_M=kd["BLOCK_M"], BLOCK_N=kd["BLOCK_N"], num_warps=kd["num_warps"])
        return _DepthwiseExecutable(graph, self._analyze(graph), kn, target)


class DepthwiseDgradEngine(DepthwiseConvEngine):
    """Depthwise backward data on CUDA cores: each dx element gathered by one program from
    the dy elements its taps hit (deterministic, no atomics, no workspace)."""

    id = 42
    name = "conv_dgrad_depthwise"
    kind = "conv_dgrad"

    def check_support(self, graph, target) -> Support:
        a = self._analyze(graph)
        if isinstance(a, str):
            return decline(a)
        if a.geo.c_per_group != 1:
            return decline(
                f"depthwise convolution needs one input channel per group (C/G = "
                f"{a.geo.c_per_group}, {a.geo.groups} groups)"
            )
        if a.geo.k_per_group > MAX_MULTIPLIER:
            return decline(
                f"channel multiplier {a.geo.k_per_group} > {MAX_MULTIPLIER}: each is a pass "
                "of the kernel's unrolled loop"
            )
        if a.ep.stats:
            return decline("the depthwise kernel does not fuse batch-norm statistics")
        return SUPPORTED

    def configs(self, graph, target):
        if not self.check_support(graph, target).ok:
            return []
        a = self._analyze(graph)
        if not target.is_cuda:
            tiles = INTERPRETER_TILES
        else:  # the tile is over dx, whose layout decides the vector axis
            tiles = NHWC_TILES if a.geo.x_strides[1] == 1 else NCHW_TILES
        out = [EngineConfig.make(self, BLOCK_M=m, BLOCK_N=n, num_warps=w) for m, n, w in tiles]
        out.sort(key=lambda c: self.estimate_seconds(graph, c, target))
        return out

    def estimate_seconds(self, graph, config, target) -> float:
        """The forward's model over dx: every tap is tried for every dx element (at stride s
        only 1 in s^d hits dy, but the misses cost only their masks)."""
        a = self._analyze(graph)
        geo, kd = a.geo, config.knob_dict
        c_total = geo.groups
        pixels = geo.n * K._prod(geo.in_dims)
        flops = 2.0 * pixels * c_total * geo.k_per_group * K._prod(geo.filt)
        moved = a.x.data_type.itemsize * (a.x.numel + a.y.numel + a.w.numel)
        bm, bn = kd["BLOCK_M"], kd["BLOCK_N"]
        fill = pixels * c_total / (-(-pixels // bm) * bm * -(-c_total // bn) * bn)
        rate = target.peak_flops_fp16 * CUDA_CORE_FRACTION
        return max(flops / rate, moved / target.bandwidth) / fill + 4e-6

    def build(self, graph, config, target) -> Executable:
        kd = self.complete_knobs(graph, config.knob_dict)
        kn = K.ConvKnobs(BLOCK_M=kd["BLOCK_M"], BLOCK_N=kd["BLOCK_N"], num_warps=kd["num_warps"])
        return _DepthwiseDgradExecutable(graph, self._analyze(graph), kn, target)


class DepthwiseWgradEngine(DepthwiseConvEngine):
    """Depthwise backward filter on CUDA cores: a pixel reduction per (tap, channel), split
    over programs whose float32 partials a second kernel sums in a fixed order."""

    id = 43
    name = "conv_wgrad_depthwise"
    kind = "conv_wgrad"

    def check_support(self, graph, target) -> Support:
        a = self._analyze(graph)
        if isinstance(a, str):
            return decline(a)
        if a.geo.c_per_group != 1:
            return decline(
                f"depthwise convolution needs one input channel per group (C/G = "
                f"{a.geo.c_per_group}, {a.geo.groups} groups)"
            )
        taps = K._prod(a.geo.filt)
        if taps > MAX_TAPS:
            return decline(f"{taps} filter taps > {MAX_TAPS}: one register sum per tap")
        if a.ep.nodes or a.ep.stats:
            return decline("the depthwise backward filter writes dw only (no fused epilogue)")
        return SUPPORTED

    def knob_space(self, graph=None):
        tiles = (
            WGRAD_NHWC_TILES
            + WGRAD_NCHW_TILES
            + WGRAD_MANY_TAPS_NHWC_TILES
            + WGRAD_MANY_TAPS_NCHW_TILES
            + INTERPRETER_TILES
        )
        return [
            Knob("BLOCK_M", tuple(sorted({m for m, _, _ in tiles})), 32),
            Knob("BLOCK_N", tuple(sorted({n for _, n, _ in tiles})), 64),
            Knob("num_warps", (4, 8), 4),
            Knob("SPLIT", (1, 2, 4, 8, 16, 32, 64, 128, 256), 1),
        ]

    def check_config(self, graph, config, target) -> Support:
        kd = dict(config.knob_dict)
        split = kd.pop("SPLIT", 1)
        if not isinstance(split, int) or split < 1:
            return decline(f"SPLIT={split!r}: a positive integer")
        return super().check_config(graph, EngineConfig.make(self, **kd), target)

    def _split(self, a, bm, bn, target) -> int:
        """Slices of the pixels: about two programs per SM, never an empty slice."""
        tiles = -(-a.geo.n * K._prod(a.geo.out_dims) // bm)
        blocks = -(-a.geo.k_per_group * a.geo.groups // bn)
        want = max(1, round(2 * target.num_sms / blocks)) if target.is_cuda else 2
        return max(1, min(tiles, want, 256))

    def configs(self, graph, target):
        if not self.check_support(graph, target).ok:
            return []
        a = self._analyze(graph)
        nhwc, many = a.geo.x_strides[1] == 1, K._prod(a.geo.filt) > 9
        if not target.is_cuda:
            tiles = INTERPRETER_TILES
        elif many:
            tiles = WGRAD_MANY_TAPS_NHWC_TILES if nhwc else WGRAD_MANY_TAPS_NCHW_TILES
        else:
            tiles = WGRAD_NHWC_TILES if nhwc else WGRAD_NCHW_TILES
        out = [
            EngineConfig.make(
                self, BLOCK_M=m, BLOCK_N=n, num_warps=w, SPLIT=self._split(a, m, n, target)
            )
            for m, n, w in tiles
        ]
        out.sort(key=lambda c: self.estimate_seconds(graph, c, target))
        return out

    def complete_knobs(self, graph, knobs: dict) -> dict:
        out = {**{k.name: k.default for k in self.knob_space(graph)}, **knobs}
        return out

    def workspace_size(self, graph, config, target) -> int:
        a = self._analyze(graph)
        if isinstance(a, str):
            return 0
        kd = self.complete_knobs(graph, config.knob_dict)
        return 4 * kd["SPLIT"] * K._prod(a.geo.filt) * a.geo.k_per_group * a.geo.groups

    def estimate_seconds(self, graph, config, target) -> float:
        """x and dy read once (each tap's x tile is the neighbours' from L1/L2), the taps'
        FMAs on the CUDA cores, the partials' round trip and a second launch."""
        a = self._analyze(graph)
        geo = a.geo
        kd = self.complete_knobs(graph, config.knob_dict)
        k_total = geo.k_per_group * geo.groups
        pixels = geo.n * K._prod(geo.out_dims)
        flops = 2.0 * pixels * k_total * K._prod(geo.filt)
        moved = a.x.data_type.itemsize * (a.x.numel + a.y.numel) + 8 * kd["SPLIT"] * (
            K._prod(geo.filt) * k_total
        )
        bn = kd["BLOCK_N"]
        fill = k_total / (-(-k_total // bn) * bn)
        rate = target.peak_flops_fp16 * CUDA_CORE_FRACTION
        return max(flops / rate, moved / target.bandwidth) / fill + 8e-6

    def build(self, graph, config, target) -> Executable:
        kd = self.complete_knobs(graph, config.knob_dict)
        kn = K.ConvKnobs(BLOCK_M=kd["BLOCK_M"], BLOCK_N=kd["BLOCK_N"], num_warps=kd["num_warps"])
        return _DepthwiseWgradExecutable(graph, self._analyze(graph), kn, kd["SPLIT"], target)


class _DepthwiseWgradExecutable(Executable, LaunchList):
    def __init__(self, graph, a, kn, split, target):
        LaunchList.__init__(self)
        geo = a.geo
        k_total = geo.k_per_group * geo.groups
        taps = K._prod(geo.filt)
        self.workspace_size = 4 * split * taps * k_total
        name = f"conv_wgrad_depthwise_{graph.key()[:12]}"
        part, fin = depthwise_wgrad_sources(
            name, geo, kn, split=split, dy_strides=tuple(a.y.strides), dw_desc=a.w
        )
        self.source = part + fin
        kp, kf = kernel_from_source(part, name), kernel_from_source(fin, f"{name}_finish")
        args = [("buf", a.x.uid), ("buf", a.y.uid), ("ws", torch.float32)]
        self.add_launch(
            DualKernel(kp.compiled, kp.interpreted),
            (-(-k_total // kn.BLOCK_N), split),
            {"BLOCK_M": kn.BLOCK_M, "BLOCK_N": kn.BLOCK_N, "num_warps": kn.num_warps},
            args,
            graph,
            target.is_cuda,
        )
        self.add_launch(
            DualKernel(kf.compiled, kf.interpreted),
            (-(-taps * k_total // 256),),
            {"BLOCK": 256, "num_warps": 4},
            [("ws", torch.float32), ("buf", a.w.uid)],
            graph,
            target.is_cuda,
        )

    def run(self, buffers, workspace, stream=None):
        self.run_launches(buffers, workspace, stream)


class _DepthwiseDgradExecutable(Executable, LaunchList):
    def __init__(self, graph, a, kn, target):
        LaunchList.__init__(self)
        self.workspace_size = 0
        flat = dataclasses.replace(
            a, geo=dataclasses.replace(a.geo, c_per_group=a.geo.groups, groups=1)
        )
        params, body = epilogue(graph, flat, "conv_dgrad")
        name = f"conv_dgrad_depthwise_{graph.key()[:12]}"
        src = depthwise_dgrad_source(
            name,
            a.geo,
            kn,
            dy_strides=tuple(a.y.strides),
            epilogue_params=params,
            epilogue_body=body,
        )
        kern = kernel_from_source(src, name)
        self.source = src
        args = [("buf", a.y.uid), ("buf", a.w.uid)] + fuse_epilogue.launch_args(a.ep)
        const = {"BLOCK_M": kn.BLOCK_M, "BLOCK_N": kn.BLOCK_N, "num_warps": kn.num_warps}
        pixels = a.geo.n * K._prod(a.geo.in_dims)
        grid = (-(-pixels // kn.BLOCK_M) * -(-a.geo.groups // kn.BLOCK_N), 1)
        self.add_launch(
            DualKernel(kern.compiled, kern.interpreted), grid, const, args, graph, target.is_cuda
        )

    def run(self, buffers, workspace, stream=None):
        self.run_launches(buffers, workspace, stream)


class _DepthwiseExecutable(Executable, LaunchList):
    def __init__(self, graph, a, kn, target):
        LaunchList.__init__(self)
        self.workspace_size = 0
        params, body = epilogue(graph, _one_group(a), "conv_fprop")
        name = f"conv_depthwise_{graph.key()[:12]}"
        src = depthwise_source(name, a.geo, kn, epilogue_params=params, epilogue_body=body)
        kern = kernel_from_source(src, name)
        self.source = src
        args = [("buf", a.x.uid), ("buf", a.w.uid)] + fuse_epilogue.launch_args(a.ep)
        const = {"BLOCK_M": kn.BLOCK_M, "BLOCK_N": kn.BLOCK_N, "num_warps": kn.num_warps}
        grid = K.grid(_one_group(a).geo, kn)
        self.add_launch(
            DualKernel(kern.compiled, kern.interpreted), grid, const, args, graph, target.is_cuda
        )

    def run(self, buffers, workspace, stream=None):
        self.run_launches(buffers, workspace, stream)


def _one_group(a):
    """The analysis seen as one group of all K output channels: the tile's channel index
    ``offs_n`` is then the output channel itself (what the epilogue addresses)."""
    k_total = a.geo.k_per_group * a.geo.groups
    return dataclasses.replace(a, geo=dataclasses.replace(a.geo, k_per_group=k_total, groups=1))


__all__ = ["DepthwiseConvEngine", "DepthwiseDgradEngine", "DepthwiseWgradEngine"]
