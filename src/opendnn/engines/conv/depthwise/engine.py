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
from ._kernels import (
    depthwise_dgrad_source,
    depthwise_source,
    depthwise_strip_source,
    depthwise_wgrad_sources,
    strip_dims,
)

# (BLOCK_M pixels, BLOCK_N channels, warps): channels-innermost images take wide channel
# tiles (one vector load per pixel row), channel-planar ones wide pixel tiles
# the list order is the measured one (H100, the benchmark's depthwise layers: the 4096-element
# tiles lead, 32 elements per thread amortise the filter loads and the tap masks); the cost
# model's fill decides first, this order breaks its ties
NHWC_TILES = ((128, 32, 4), (64, 64, 4), (32, 64, 4), (16, 128, 4), (128, 16, 4), (128, 64, 8))
NCHW_TILES = ((256, 8, 4), (128, 16, 4), (512, 4, 4), (64, 32, 4))
INTERPRETER_TILES = ((16, 8, 4),)
# register strips (STRIP outputs along the last spatial axis per tile row, see
# ``_kernels.depthwise_strip_source``): the strip lengths a config may name, and the forward's
# channels-last (strip, BLOCK_M strips, BLOCK_N, warps); the backward filter's first
# STRIP_WGRAD_TILES of ``wgrad_tiles`` per strip length (8 spilled at stride 2)
STRIPS = (1, 2, 4, 8)
STRIP_TILES = (
    (4, 32, 32, 4),
    (4, 64, 32, 4),
    (2, 16, 64, 4),
    (4, 16, 64, 4),
    (2, 32, 64, 4),
    (2, 64, 32, 4),
)
STRIP_WGRAD_TILES = 3
# the forward's register strips on NCHW images, where a strip runs along W and its loads
# are strided by STRIP * stride elements (L1 serves the window's reuse): measured on the
# H100 against the plain NCHW tiles, 2.0-2.3x on MobileNetV3 / EfficientNet-B0 3x3 and 5x5
# layers (float32 and half, stride 1 and 2: `dw5_72_56s2` TF32 57.1 -> 26.2 us, cuDNN
# 32.7) and 2.7x on ConvNeXt's 7x7; STRIP 2 led on every layer, STRIP 4 within 10% on most
NCHW_STRIP_TILES = ((2, 256, 2, 4), (2, 128, 4, 4), (2, 64, 8, 4), (4, 256, 1, 4), (4, 128, 2, 4))
# the backward data unrolls one pass per multiplier value
MAX_MULTIPLIER = 8
# the backward filter keeps one float32 sum per tap and channel in registers (unrolled)
MAX_TAPS = 81
# the backward filter's per-tap sums: float32 registers per thread for all taps together
WGRAD_SUM_REGISTERS = 112
# programs per SM the backward filter's SPLIT aims at, by layout (NCHW, channels-last): in
# channels-last, half the slices of four per SM ran 10-25% faster on every MobileNetV3 /
# EfficientNet-B0 5x5 and 3x3 layer swept (H100, bf16: dw5_672_14s2 24.4 -> 19.7 us,
# dw3_144_56 51 -> 38 us); each program's taps x tile sums already hold the SM's
# registers at about three programs, and fewer, longer slices add fewer partials
WGRAD_PROGRAMS_PER_SM = (4, 2)
# the cost of a place down the measured order of the config lists (``_place``): a few
# percent of channel fill does not put a slow tile first
PLACE_COST = 0.05
# fp32 FMA rate of the CUDA cores against the dense fp16 tensor-core peak
CUDA_CORE_FRACTION = 1 / 15


class DepthwiseConvEngine(ImplicitGemmEngine):
    """Depthwise fprop on CUDA cores: pixels x channels tiles across all groups. The
    backward engines below differ only in their tile space, declines, configs and kernel."""

    id = 41
    name = "conv_depthwise"
    kind = "conv_fprop"
    tma_path = None
    DEFAULT_TILE = (64, 64)  # (BLOCK_M, BLOCK_N) of a config that names neither

    def check_support(self, graph, target) -> Support:
        a = self._analyze(graph)
        if isinstance(a, str):
            return decline(a)
        if a.geo.c_per_group != 1:
            return decline(
                f"depthwise convolution needs one input channel per group (C/G = "
                f"{a.geo.c_per_group}, {a.geo.groups} groups)"
            )
        if a.ep.stats:
            return decline("the depthwise kernel does not fuse batch-norm statistics")
        why = self._decline(a)
        return decline(why) if why else SUPPORTED

    def _decline(self, a) -> str | None:
        """What this direction does not take, past the checks every depthwise engine makes."""
        if a.x.data_type == DataType.INT8:
            return "int8 depthwise convolution is not supported"
        if a.prologue is not None:
            return "the depthwise kernel has no prologue"
        return None

    def numerical_notes(self, graph, config) -> frozenset:
        return frozenset()

    def _all_tiles(self) -> tuple:
        return NHWC_TILES + NCHW_TILES + INTERPRETER_TILES

    def knob_space(self, graph=None):
        tiles = self._all_tiles()
        return [
            Knob("BLOCK_M", tuple(sorted({m for m, _, _ in tiles})), self.DEFAULT_TILE[0]),
            Knob("BLOCK_N", tuple(sorted({n for _, n, _ in tiles})), self.DEFAULT_TILE[1]),
            Knob("num_warps", (1, 2, 4, 8), 4),
            Knob("STRIP", STRIPS, 1),
        ]

    def complete_knobs(self, graph, knobs: dict) -> dict:
        return {**{k.name: k.default for k in self.knob_space(graph)}, **knobs}

    def family(self, config) -> str:
        """Register strips are a code path of their own: benchmark mode times the best
        strip config next to the best plain one."""
        return f"{self.name}:strip" if config.knob_dict.get("STRIP", 1) > 1 else self.name

    def calibration_key(self, graph, config) -> str:
        """The implicit GEMM's key (``:nchw`` for an NCHW image), with ``:taps25`` before it
        when the filter has 25 taps or more and ``:taps49`` from 49: on an NCHW image every
        tap is a gather of its own, and the 5x5 / 7x7 layers ran 2-4x further over the
        roofline than the 3x3 ones (ConvNeXt-T's 7x7 forward in fp16: 290 us measured, 44 us
        modelled); against the transform around the strips, the native 7x7 ran 1.1-2.3x
        where the native 5x5 ran 0.55-1.16x (every direction, TF32 and fp16)."""
        key = super().calibration_key(graph, config)
        a = self._analyze(graph)
        taps = 0 if isinstance(a, str) else K._prod(a.geo.filt)
        if not key.endswith(":nchw") or taps < 25:
            return key
        return key.removesuffix(":nchw") + (":taps49:nchw" if taps >= 49 else ":taps25:nchw")

    def _tiles(self, a, target) -> tuple:
        """(BLOCK_M, BLOCK_N, warps) candidates: the layout of the tensor the tile walks
        (y, or dx) decides the vector axis."""
        if not target.is_cuda:
            return INTERPRETER_TILES
        return NHWC_TILES if a.geo.x_strides[1] == 1 else NCHW_TILES

    def _knobs(self, a, m, n, w, target) -> dict:
        return dict(BLOCK_M=m, BLOCK_N=n, num_warps=w)

    def _strip_tiles(self, a, target) -> tuple:
        """(strip, BLOCK_M strips, BLOCK_N, warps) of the register-strip configs on a GPU:
        channel-wide tiles for channels-innermost images (the strip's loads stay vectors
        along C), pixel-wide ones otherwise."""
        if not target.is_cuda:
            return ()
        return STRIP_TILES if a.geo.x_strides[1] == 1 else NCHW_STRIP_TILES

    def configs(self, graph, target):
        if not self.check_support(graph, target).ok:
            return []
        out = self._listed(graph, target)
        out.sort(key=lambda c: self.estimate_seconds(graph, c, target))
        return out

    def _listed(self, graph, target) -> list:
        """The configs offered for ``graph``, in the order measured best-first."""
        a = self._analyze(graph)
        # register strips lead where offered (measured on the H100-class GPUs: 1.2-1.6x the
        # plain tiles on 7x7 and stride-2 layers); the channel fill still sends a layer
        # with few channels to the narrow plain tiles
        out = [
            EngineConfig.make(self, **self._knobs(a, m, n, w, target), STRIP=st)
            for st, m, n, w in self._strip_tiles(a, target)
        ]
        out += [
            EngineConfig.make(self, **self._knobs(a, m, n, w, target))
            for m, n, w in self._tiles(a, target)
        ]
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
        unknown = sorted(set(kd) - {k.name for k in self.knob_space(graph)})
        if unknown:
            return decline(f"unknown knobs {', '.join(unknown)}")
        strip = kd.get("STRIP", 1)
        if strip not in STRIPS:
            return decline(f"STRIP={strip!r}: one of {list(STRIPS)}")
        why = self._strip_rule(self._analyze(graph), kd) if strip > 1 else None
        return decline(why) if why else SUPPORTED

    def _strip_rule(self, a, kd) -> str | None:
        """Why this direction cannot run register strips with ``kd`` (None: it can)."""
        return None

    def workspace_size(self, graph, config, target) -> int:
        return 0

    def _tile_space(self, a) -> tuple[int, int]:
        """(pixels, channels) the programs' tiles cover, every tap tried on each pixel: y's
        for the forward and the backward filter."""
        return a.geo.n * K._prod(a.geo.out_dims), a.geo.k_per_group * a.geo.groups

    def _extra(self, a, kd) -> tuple[float, float]:
        """(bytes, seconds) a direction adds to the roofline: none for one kernel."""
        return 0.0, 0.0

    def estimate_seconds(self, graph, config, target) -> float:
        """x, w and y moved once at the bandwidth, or the taps' FMAs on the CUDA cores when
        longer (every tap is tried for every element the tile covers), divided by the share
        of the tiles inside the tensor; plus a launch and what the direction adds."""
        a = self._analyze(graph)
        geo = a.geo
        kd = self.complete_knobs(graph, config.knob_dict)
        pixels, channels = self._tile_space(a)
        flops = 2.0 * pixels * geo.k_per_group * geo.groups * K._prod(geo.filt)
        extra_bytes, extra_s = self._extra(a, kd)
        moved = a.x.data_type.itemsize * (a.x.numel + a.y.numel + a.w.numel) + extra_bytes
        fill = self._fill(pixels, channels, kd["BLOCK_M"] * kd["STRIP"], kd["BLOCK_N"])
        rate = target.peak_flops_fp16 * CUDA_CORE_FRACTION
        t = max(flops / rate, moved / target.bandwidth) / fill
        if target.is_cuda and self._grid_programs(a, kd) is not None:
            # fewer than four programs per SM leave latency unhidden (small images)
            t *= max(1.0, 4 * target.num_sms / self._grid_programs(a, kd)) ** 0.5
        return (t + 4e-6 + extra_s) * (1 + PLACE_COST * self._place(graph, config, target))

    def _place(self, graph, config, target) -> int:
        """``config``'s place in the measured order of the offered configs (the roofline
        cannot tell the tiles apart: they differ in L1 traffic and per-program work it does
        not model); a config not offered comes last."""
        listed = [c.knob_dict for c in self._listed(graph, target)]
        kd = self.complete_knobs(graph, config.knob_dict)
        return next(
            (i for i, c in enumerate(listed) if self.complete_knobs(graph, c) == kd), len(listed)
        )

    def _grid_programs(self, a, kd) -> int | None:
        """Programs of the launch (None where a direction sizes its grid otherwise)."""
        pixels, channels = self._tile_space(a)
        return -(-pixels // (kd["BLOCK_M"] * kd["STRIP"])) * -(-channels // kd["BLOCK_N"])

    def _fill(self, pixels, channels, bm, bn) -> float:
        """The share of the tiles' elements inside the tensor."""
        return pixels * channels / (-(-pixels // bm) * bm * -(-channels // bn) * bn)

    def build(self, graph, config, target) -> Executable:
        kd = self.complete_knobs(graph, config.knob_dict)
        kn = K.ConvKnobs(BLOCK_M=kd["BLOCK_M"], BLOCK_N=kd["BLOCK_N"], num_warps=kd["num_warps"])
        return self._executable(graph, self._analyze(graph), kn, kd, target)

    def _executable(self, graph, a, kn, kd, target) -> Executable:
        return _DepthwiseExecutable(graph, a, kn, target, kd["STRIP"])


class DepthwiseDgradEngine(DepthwiseConvEngine):
    """Depthwise backward data on CUDA cores: each dx element gathered by one program from
    the dy elements its taps hit (deterministic, no atomics, no workspace). Its tiles walk
    dx; every tap is tried for every dx element (at stride s only 1 in s^d hits dy, but the
    misses cost only their masks)."""

    id = 42
    name = "conv_dgrad_depthwise"
    kind = "conv_dgrad"

    def _decline(self, a) -> str | None:
        if a.geo.k_per_group > MAX_MULTIPLIER:
            return (
                f"channel multiplier {a.geo.k_per_group} > {MAX_MULTIPLIER}: each is a pass "
                "of the kernel's unrolled loop"
            )
        return None

    def _tile_space(self, a) -> tuple[int, int]:
        return a.geo.n * K._prod(a.geo.in_dims), a.geo.groups

    def _strip_tiles(self, a, target) -> tuple:
        return ()

    def _strip_rule(self, a, kd) -> str | None:
        return "the depthwise backward data has no register strips (STRIP 1)"

    def _executable(self, graph, a, kn, kd, target) -> Executable:
        return _DepthwiseDgradExecutable(graph, a, kn, target)


class DepthwiseWgradEngine(DepthwiseConvEngine):
    """Depthwise backward filter on CUDA cores: a pixel reduction per (tap, channel), split
    over programs whose float32 partials a second kernel sums in a fixed order. x and dy are
    read once (each tap's x tile is its neighbours' from L1/L2); the partials' round trip
    and the second launch come on top."""

    id = 43
    name = "conv_wgrad_depthwise"
    kind = "conv_wgrad"
    DEFAULT_TILE = (32, 64)

    def _decline(self, a) -> str | None:
        taps = K._prod(a.geo.filt)
        if taps > MAX_TAPS:
            return f"{taps} filter taps > {MAX_TAPS}: one register sum per tap"
        if a.ep.nodes:
            return "the depthwise backward filter writes dw only (no fused epilogue)"
        return None

    def _all_tiles(self) -> tuple:
        pairs = {
            (m, n, w)
            for t in (1, 9, 25, 49)
            for nhwc in (True, False)
            for it in (2, 4)
            for m, n, w, _ in wgrad_tiles(t, 1, nhwc, it)
        }
        return tuple(sorted(pairs)) + INTERPRETER_TILES

    def knob_space(self, graph=None):
        return super().knob_space(graph) + [
            Knob("SPLIT", (1, 2, 4, 8, 16, 32, 64, 128, 256), 1),
            Knob("ROWS", (0, 1, 2, 3, 4, 5, 6, 7, 8), 0),
        ]

    def check_config(self, graph, config, target) -> Support:
        kd = config.knob_dict
        split, rows = kd.get("SPLIT", 1), kd.get("ROWS", 0)
        if not isinstance(split, int) or split < 1:
            return decline(f"SPLIT={split!r}: a positive integer")
        if not isinstance(rows, int) or rows < 0:
            return decline(f"ROWS={rows!r}: 0 (every filter row) or a positive integer")
        return super().check_config(graph, config, target)

    def _tiles(self, a, target, strip: int = 1) -> tuple:
        if not target.is_cuda:
            return tuple(t + (0,) for t in INTERPRETER_TILES) if strip == 1 else ()
        nhwc = a.geo.x_strides[1] == 1
        if strip > 1 and not nhwc:
            return ()
        tiles = wgrad_tiles(K._prod(a.geo.filt), a.geo.filt[0], nhwc, a.x.data_type.itemsize, strip)
        if strip > 1 and len(a.geo.filt) == 1:  # the row groups would split the strip's axis
            tiles = tuple(t for t in tiles if t[3] == 0)
        return tiles if strip == 1 else tiles[:STRIP_WGRAD_TILES]

    def _strip_rule(self, a, kd) -> str | None:
        rows = kd.get("ROWS", 0)
        if len(a.geo.filt) == 1 and 0 < rows < a.geo.filt[0]:
            return (
                f"STRIP={kd['STRIP']} with ROWS={rows} on a 1-D filter: the row groups would "
                "split the strip's axis (ROWS 0)"
            )
        return None

    def _listed(self, graph, target) -> list:
        a = self._analyze(graph)
        return [
            EngineConfig.make(
                self, **self._knobs(a, m, n, w, target, rows, st), ROWS=rows, STRIP=st
            )
            for st in (4, 2, 1)  # register strips first, as measured (docs/design/conv.md)
            for m, n, w, rows in self._tiles(a, target, st)
        ]

    def _knobs(self, a, m, n, w, target, rows=0, strip=1) -> dict:
        """With SPLIT slices of the pixels: about WGRAD_PROGRAMS_PER_SM programs per SM
        (channel blocks x filter-row groups x slices; two for channels-last images, four
        for NCHW), none empty."""
        tiles = -(-a.geo.n * K._prod(strip_dims(a.geo, strip)) // m)
        groups = -(-a.geo.filt[0] // rows) if 0 < rows < a.geo.filt[0] else 1
        blocks = -(-a.geo.k_per_group * a.geo.groups // n) * groups
        per_sm = WGRAD_PROGRAMS_PER_SM[a.geo.x_strides[1] == 1]
        want = max(1, round(per_sm * target.num_sms / blocks)) if target.is_cuda else 2
        return dict(BLOCK_M=m, BLOCK_N=n, num_warps=w, SPLIT=max(1, min(tiles, want, 256)))

    def workspace_size(self, graph, config, target) -> int:
        a = self._analyze(graph)
        if isinstance(a, str):
            return 0
        kd = self.complete_knobs(graph, config.knob_dict)
        return 4 * kd["SPLIT"] * K._prod(a.geo.filt) * a.geo.k_per_group * a.geo.groups

    def _grid_programs(self, a, kd) -> int | None:
        return None  # SPLIT sizes the grid for WGRAD_PROGRAMS_PER_SM programs per SM

    def _fill(self, pixels, channels, bm, bn) -> float:
        # the pixel tiles are walked in slices, so only the channel blocks go to waste
        return channels / (-(-channels // bn) * bn)

    def _extra(self, a, kd) -> tuple[float, float]:
        partials = K._prod(a.geo.filt) * a.geo.k_per_group * a.geo.groups * kd["SPLIT"]
        return 8.0 * partials, 4e-6

    def _executable(self, graph, a, kn, kd, target) -> Executable:
        return _DepthwiseWgradExecutable(graph, a, kn, kd["SPLIT"], kd["ROWS"], target, kd["STRIP"])


class _DepthwiseWgradExecutable(Executable, LaunchList):
    def __init__(self, graph, a, kn, split, rows, target, strip=1):
        LaunchList.__init__(self)
        geo = a.geo
        k_total = geo.k_per_group * geo.groups
        taps = K._prod(geo.filt)
        self.workspace_size = 4 * split * taps * k_total
        name = f"conv_wgrad_depthwise_{graph.key()[:12]}"
        part, fin = depthwise_wgrad_sources(
            name,
            geo,
            kn,
            split=split,
            dy_strides=tuple(a.y.strides),
            dw_desc=a.w,
            rows=rows,
            strip=strip,
        )
        groups = 1 if rows <= 0 or rows >= geo.filt[0] else -(-geo.filt[0] // rows)
        self.source = part + fin
        kp, kf = kernel_from_source(part, name), kernel_from_source(fin, f"{name}_finish")
        args = [("buf", a.x.uid), ("buf", a.y.uid), ("ws", torch.float32)]
        self.add_launch(
            DualKernel(kp.compiled, kp.interpreted),
            (-(-k_total // kn.BLOCK_N), split, groups),
            {"BLOCK_M": kn.BLOCK_M, "BLOCK_N": kn.BLOCK_N, "num_warps": kn.num_warps},
            args,
            graph,
            target.is_cuda,
        )
        self.add_launch(
            DualKernel(kf.compiled, kf.interpreted),
            *K.split_sum_launch(taps * k_total, split, target.num_sms),
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
    def __init__(self, graph, a, kn, target, strip=1):
        LaunchList.__init__(self)
        self.workspace_size = 0
        params, body = epilogue(graph, _one_group(a), "conv_fprop")
        name = f"conv_depthwise_{graph.key()[:12]}"
        ep = dict(epilogue_params=params, epilogue_body=body)
        if strip > 1:
            src = depthwise_strip_source(name, a.geo, kn, strip, **ep)
        else:
            src = depthwise_source(name, a.geo, kn, **ep)
        kern = kernel_from_source(src, name)
        self.source = src
        args = [("buf", a.x.uid), ("buf", a.w.uid)] + fuse_epilogue.launch_args(a.ep)
        const = {"BLOCK_M": kn.BLOCK_M, "BLOCK_N": kn.BLOCK_N, "num_warps": kn.num_warps}
        geo = _one_group(a).geo
        grid = K.grid(dataclasses.replace(geo, out_dims=tuple(strip_dims(geo, strip))), kn)
        self.add_launch(
            DualKernel(kern.compiled, kern.interpreted), grid, const, args, graph, target.is_cuda
        )

    def run(self, buffers, workspace, stream=None):
        self.run_launches(buffers, workspace, stream)


def wgrad_tiles(taps: int, rows: int, nhwc: bool, itemsize: int, strip: int = 1) -> tuple:
    """Backward filter configs (BLOCK_M pixels, BLOCK_N channels, warps, ROWS) for a filter
    of ``taps`` taps in ``rows`` rows (first spatial axis). A tile holds ``e`` elements per
    thread, at least one load vector (16 bytes: Triton lays a tile out in whole vectors, so
    a smaller tile repeats itself across threads) and twice that for the wider tiles. Every
    tap's [BLOCK_M, BLOCK_N] float32 sum is live, taps x e registers per thread: ROWS is the
    most filter rows a program keeps within WGRAD_SUM_REGISTERS (the rest go to other
    programs). NHWC tiles are wide along the channels, NCHW tiles along the pixels. The
    one-warp tiles sum over their pixels without a barrier (the reduction stays in the
    warp). With register strips the strip's ``strip`` dy tiles take their registers from
    the same budget."""
    vec = 16 // itemsize
    inner = taps // rows
    out = []
    # in the order measured best-first on the H100 over the benchmark's depthwise layers
    # (docs/design/conv.md): wide tiles with one filter row per program lead
    shapes = [(64, 2 * vec, 4), (32, vec, 4), (16, vec, 4), (32, vec, 1), (8, vec, 4)]
    shapes += [(64, vec, 4), (64, vec, 1), (128, vec, 4)]
    if not nhwc:  # on NCHW images the one-warp tiles measured 1.4x the four-warp ones'
        shapes = [t for t in shapes if t[2] != 1] + [t for t in shapes if t[2] == 1]
    for n, e, w in shapes:
        if not nhwc:
            n = max(1, n // 8)  # the channels of an NCHW tile: 1..16
        m = max(1, e * 32 * w // n)
        budget = WGRAD_SUM_REGISTERS - (strip * e if strip > 1 else 0)
        keep = max(1, min(rows, budget // (inner * e)))
        out.append((m, n, w, 0 if keep >= rows else keep))
    if strip == 1 and out[1][3] == 0:
        # every row fits the one-vector tiles (3x3): the wide tile, which would split the
        # rows, measured last there (with register strips it stays first: measured best)
        out.append(out.pop(0))
    return tuple(dict.fromkeys(out))


def _one_group(a):
    """The analysis seen as one group of all K output channels: the tile's channel index
    ``offs_n`` is then the output channel itself (what the epilogue addresses)."""
    k_total = a.geo.k_per_group * a.geo.groups
    return dataclasses.replace(a, geo=dataclasses.replace(a.geo, k_per_group=k_total, groups=1))


__all__ = ["DepthwiseConvEngine", "DepthwiseDgradEngine", "DepthwiseWgradEngine"]
