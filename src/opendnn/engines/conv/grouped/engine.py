"""Grouped convolution forward, several groups per program (``conv_grouped``, engine 47):
block-diagonal tensor-core tiles for groups of 2-64 channels (ResNeXt's 32 groups of 4-32,
RegNet's and other grouped 3x3 layers). The kernel and its math are in ``_kernels.py``.

Configs: GB groups per program such that GB * K/G (the N tile) is a power of two from 16
to 128 and GB * C/G (the K step, rounded up to a power of two) at most 128, with the
pixel tiles of the gather path. The cost model is the plain implicit GEMM's roofline with
the zero blocks counted as work (GB times the useful FLOPs) and the bytes of x, w and y
read once; it competes with the one-group-per-program implicit GEMM, which wins where the
groups are wide (C/G >= 64) and pads the K and N steps where they are narrow.
"""

from __future__ import annotations

import dataclasses

import torch

from ....enums import DataType
from ....runtime.launch import DualKernel, LaunchList, kernel_from_source
from ...base import SUPPORTED, EngineConfig, Executable, Knob, Support, decline
from ...fusion import epilogue as fuse_epilogue
from ..analysis import epilogue, peak_flops, tf32
from ..depthwise.engine import _one_group
from ..implicit_gemm import _kernels as K
from ..implicit_gemm.engine import ImplicitGemmEngine, nchw_gather, transposed_step
from ._kernels import grouped_dgrad_source, grouped_source, grouped_wgrad_sources

# (BLOCK_M, num_warps, num_stages) of the pixel tiles; the interpreter's one config
PIXEL_TILES = ((128, 4, 3), (64, 4, 3), (128, 8, 3))
INTERPRETER_PIXELS = (16, 4, 1)
MAX_TILE = 128
# the backward filter's rows (GB * K/G output channels) per step: ResNeXt-50's layers ran
# 1.8-2x slower on 16-row tiles than on 32-row ones with the same steps and bytes (H100),
# so the main loop counts a shorter tile's step as a 32-row one
MMA_ROWS = 32
# the backward filter's pixel step (BLOCK_K): within a layer, the find's timings over this
# model grew with it -- 0.82 / 0.94 / 1.19 at 32 / 64 / 128 (93 timings over ResNeXt-50's
# layers, H100): the wide steps' transposed x tile is not the free lunch the roofline says
WGRAD_STEP_EXPONENT = 0.27
# the pipelined operand tiles of one program (num_stages x (A + B) tiles) stay under this
# on a GPU, below the H100's 227 KB with room for the epilogue's layout conversion
SHARED_BYTES = 200 * 1024


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def stage_bytes(kn: K.ConvKnobs, itemsize: int) -> int:
    """Shared memory of one pipeline stage: the [BLOCK_M, BLOCK_K] and [BLOCK_K, BLOCK_N]
    operand tiles in the loaded data type."""
    return (kn.BLOCK_M + kn.BLOCK_N) * kn.BLOCK_K * itemsize


def fit_stages(kn: K.ConvKnobs, itemsize: int, stages: int) -> int:
    """The most pipeline stages, up to ``stages``, whose tiles fit ``SHARED_BYTES``
    (0: not even one)."""
    return min(stages, SHARED_BYTES // stage_bytes(kn, itemsize))


def group_blocks(cg: int, kg: int, groups: int, interpret: bool = False) -> list:
    """GB values (groups per program): 2 or more (one group per program is the implicit
    GEMM's tiling), GB divides the group count, GB * kg (the tile's output channels) is a
    power of two from 16 (8 for the interpreter) to 128, and GB * cg (the channels a tap
    reduces over) fits a K step of at most 128. Backward data passes (kg, cg)."""
    lo = 8 if interpret else 16
    out = []
    for gb in range(2, groups + 1):
        n = gb * kg
        if groups % gb or n & (n - 1) or not lo <= n <= MAX_TILE:
            continue
        if _pow2_at_least(gb * cg) > MAX_TILE:
            continue
        out.append(gb)
    return out


class GroupedConvEngine(ImplicitGemmEngine):
    """Grouped fprop with GB groups per program and block-diagonal filter tiles."""

    id = 47
    name = "conv_grouped"
    kind = "conv_fprop"
    tma_path = None

    def calibration_key(self, graph, config) -> str:
        """The implicit GEMM's key, with ``:fp32`` after ``:nchw`` for float32 (TF32) data:
        the model charges the NCHW gather in half precision only, and TF32 plans on NCHW
        images measured apart from half-precision ones (backward data: 0.80 against 1.12
        of the shared factor)."""
        key = super().calibration_key(graph, config)
        a = self._analyze(graph)
        if key.endswith(":nchw") and a.x.data_type == DataType.FLOAT:
            return key + ":fp32"
        return key

    def check_support(self, graph, target) -> Support:
        a = self._analyze(graph)
        if isinstance(a, str):
            return decline(a)
        g = a.geo
        if g.groups < 2 or g.c_per_group < 2:
            return decline(
                f"{g.groups} group(s) of {g.c_per_group} channel(s): the grouped engine takes "
                "2 or more groups of 2 or more channels (one channel per group is depthwise)"
            )
        if a.x.data_type == DataType.INT8:
            return decline("int8 grouped convolution is not supported")
        if target.is_cuda and a.x.data_type == DataType.FLOAT and not tf32(a):
            # IEEE float32 dots run on the CUDA cores, where the block-diagonal tile's zero
            # blocks cost GB times the work (the interpreter still takes it: the math is
            # the same)
            return decline(
                "float32 without TF32: the block-diagonal dot's zeros would run on the CUDA "
                "cores (the one-group implicit GEMM takes it)"
            )
        if a.prologue is not None or a.ep.stats:
            return decline("the grouped kernel fuses neither a prologue nor batch-norm statistics")
        red, out = self._dims(g)
        if not group_blocks(red, out, g.groups, not target.is_cuda):
            return decline(
                f"no group block fits: GB * {out} (the tile's channels per group) must be a "
                f"power of two in 16..{MAX_TILE} with GB >= 2 dividing {g.groups} and "
                f"GB * {red} <= {MAX_TILE}"
            )
        return SUPPORTED

    def _dims(self, geo) -> tuple[int, int]:
        """(channels per group a tap reduces over, channels per group the tile writes)."""
        return geo.c_per_group, geo.k_per_group

    def _tile_space(self, geo) -> tuple[int, int]:
        """(pixels, channels) of the output tiles: y's for the forward."""
        return geo.n * K._prod(geo.out_dims), geo.k_per_group * geo.groups

    def knob_space(self, graph=None) -> list:
        return [
            Knob("BLOCK_M", (16, 32, 64, 128, 256), 64),
            Knob("GB", tuple(range(1, 129)), 1),
            Knob("num_warps", (1, 2, 4, 8), 4),
            Knob("num_stages", (1, 2, 3, 4), 3),
        ]

    def complete_knobs(self, graph, knobs: dict) -> dict:
        return {**{k.name: k.default for k in self.knob_space(graph)}, **knobs}

    def family(self, config) -> str:
        return self.name

    def check_config(self, graph, config, target) -> Support:
        s = self.check_support(graph, target)
        if not s.ok:
            return s
        kd = self.complete_knobs(graph, config.knob_dict)
        unknown = sorted(set(kd) - {k.name for k in self.knob_space(graph)})
        if unknown:
            return decline(f"unknown knobs {', '.join(unknown)}")
        a = self._analyze(graph)
        g = a.geo
        ok = group_blocks(*self._dims(g), g.groups, not target.is_cuda)
        if kd["GB"] not in ok:
            return decline(f"GB={kd['GB']!r} is not one of the group blocks that fit: {ok}")
        bm = kd["BLOCK_M"]
        if not isinstance(bm, int) or bm < 1 or bm & (bm - 1):
            return decline(f"BLOCK_M={bm!r}: a power of two")
        kn = self._conv_knobs(a, kd)
        size = a.x.data_type.itemsize
        if target.is_cuda and kn.num_stages * stage_bytes(kn, size) > SHARED_BYTES:
            return decline(
                f"num_stages={kn.num_stages} x {stage_bytes(kn, size)} bytes of operand tiles "
                f"exceed the {SHARED_BYTES} bytes of shared memory a program may take"
            )
        return SUPPORTED

    def _conv_knobs(self, a, kd) -> K.ConvKnobs:
        gb, (red, out) = kd["GB"], self._dims(a.geo)
        return K.ConvKnobs(
            BLOCK_M=kd["BLOCK_M"],
            BLOCK_N=gb * out,
            BLOCK_K=max(16, _pow2_at_least(gb * red)),
            num_warps=kd["num_warps"],
            num_stages=kd["num_stages"],
        )

    def configs(self, graph, target) -> list:
        if not self.check_support(graph, target).ok:
            return []
        a = self._analyze(graph)
        g = a.geo
        tiles = PIXEL_TILES if target.is_cuda else (INTERPRETER_PIXELS,)
        out = []
        for gb in group_blocks(*self._dims(g), g.groups, not target.is_cuda):
            for m, w, st in tiles:
                kd = dict(BLOCK_M=m, GB=gb, num_warps=w, num_stages=st)
                st = fit_stages(self._conv_knobs(a, kd), a.x.data_type.itemsize, st)
                if st:
                    out.append(EngineConfig.make(self, **{**kd, "num_stages": st}))
        out.sort(key=lambda c: self.estimate_seconds(graph, c, target))
        return out

    def workspace_size(self, graph, config, target) -> int:
        return 0

    def estimate_seconds(self, graph, config, target) -> float:
        """Roofline: the tensor cores' FLOPs with the block-diagonal tile's zeros counted
        (a BLOCK_K-wide reduction per tap for every output), against x, w and y moved once,
        and the main loop (one step per tap and program, ``K.loop_seconds``: fewer, wider
        group blocks take fewer steps); the binding bound plus a tenth of the others."""
        a = self._analyze(graph)
        kd = self.complete_knobs(graph, config.knob_dict)
        kn = self._conv_knobs(a, kd)
        g = a.geo
        peak = peak_flops(a, target)
        pixels, channels = self._tile_space(g)
        m_pad = -(-pixels // kn.BLOCK_M) * kn.BLOCK_M
        flops = 2.0 * m_pad * channels * K._prod(g.filt) * kn.BLOCK_K  # zero blocks included
        size = a.x.data_type.itemsize
        moved = size * (a.x.numel + a.w.numel + a.y.numel)
        compute = flops / (peak * (0.6 if kn.BLOCK_M * kn.BLOCK_N < 64 * 64 else 0.85))
        memory = moved / target.bandwidth
        programs = -(-pixels // kn.BLOCK_M) * -(-channels // kn.BLOCK_N)
        steps = programs * K._prod(g.filt)
        tile = (kn.BLOCK_M + kn.BLOCK_N) * kn.BLOCK_K * size
        gathered = a.y if self.kind == "conv_dgrad" else a.x  # its channels are the reduction
        scale = transposed_step(a, gathered.strides[1] != 1)
        loop = K.loop_seconds(steps, programs, tile, target.num_sms, scale)
        return K.combine_bounds(compute, memory, loop)

    def build(self, graph, config, target) -> Executable:
        a = self._analyze(graph)
        kd = self.complete_knobs(graph, config.knob_dict)
        return _GroupedExecutable(graph, a, self._conv_knobs(a, kd), kd["GB"], target)


class GroupedDgradEngine(GroupedConvEngine):
    """Grouped backward data with GB groups per program: the transposed block-diagonal
    filter tile (see ``_kernels.grouped_dgrad_source``); deterministic, no workspace."""

    id = 48
    name = "conv_dgrad_grouped"
    kind = "conv_dgrad"

    def _dims(self, geo) -> tuple[int, int]:
        return geo.k_per_group, geo.c_per_group

    def _tile_space(self, geo) -> tuple[int, int]:
        return geo.n * K._prod(geo.in_dims), geo.c_per_group * geo.groups

    def build(self, graph, config, target) -> Executable:
        a = self._analyze(graph)
        kd = self.complete_knobs(graph, config.knob_dict)
        return _GroupedExecutable(graph, a, self._conv_knobs(a, kd), kd["GB"], target, "conv_dgrad")


class GroupedWgradEngine(GroupedConvEngine):
    """Grouped backward filter with GB groups per program: per (group block, tap, pixel
    slice) the [GB*kg, GB*cg] product dy^T x on the tensor cores, the diagonal blocks kept
    as float32 partials, summed in a fixed order by a second kernel (deterministic)."""

    id = 49
    name = "conv_wgrad_grouped"
    kind = "conv_wgrad"

    def check_support(self, graph, target) -> Support:
        s = super().check_support(graph, target)
        if not s.ok:
            return s
        if self._analyze(graph).ep.nodes:
            return decline("the grouped backward filter writes dw only (no fused epilogue)")
        return SUPPORTED

    def knob_space(self, graph=None) -> list:
        return super().knob_space(graph) + [
            Knob("BLOCK_K", (8, 16, 32, 64, 128), 32),
            Knob("SPLIT", (1, 2, 4, 8, 16, 32, 64, 128, 256), 1),
        ]

    def check_config(self, graph, config, target) -> Support:
        kd = self.complete_knobs(graph, config.knob_dict)
        for knob in ("BLOCK_K", "SPLIT"):
            v = kd[knob]
            if not isinstance(v, int) or v < 1 or (knob == "BLOCK_K" and v & (v - 1)):
                return decline(f"{knob}={v!r}: a positive integer (BLOCK_K a power of two)")
        s = super().check_config(graph, config, target)
        if s.ok and kd["BLOCK_M"] != kd["GB"] * self._analyze(graph).geo.k_per_group:
            return decline(
                f"BLOCK_M={kd['BLOCK_M']!r}: the rows are the group block's output channels, "
                f"GB * K/G = {kd['GB'] * self._analyze(graph).geo.k_per_group}"
            )
        return s

    def _tile_space(self, geo) -> tuple[int, int]:
        return geo.n * K._prod(geo.out_dims), geo.k_per_group * geo.groups

    def _split(self, a, bm, bk, target) -> int:
        """Pixel slices: about four programs per SM over (group blocks x taps), none empty."""
        g = a.geo
        tiles = -(-g.n * K._prod(g.out_dims) // bk)
        blocks = -(-g.k_per_group * g.groups // bm) * K._prod(g.filt)
        want = max(1, round(4 * target.num_sms / blocks)) if target.is_cuda else 2
        return max(1, min(tiles, want, 256))

    def configs(self, graph, target) -> list:
        if not self.check_support(graph, target).ok:
            return []
        a = self._analyze(graph)
        g = a.geo
        interp = not target.is_cuda
        steps = ((32, 4, 1),) if interp else ((64, 4, 3), (32, 4, 3), (128, 8, 3))
        out = []
        for gb in group_blocks(*self._dims(g), g.groups, interp):
            for bk, w, st in steps:
                kd = dict(
                    BLOCK_M=gb * g.k_per_group,
                    GB=gb,
                    BLOCK_K=bk,
                    SPLIT=self._split(a, gb * g.k_per_group, bk, target),
                    num_warps=w,
                    num_stages=st,
                )
                st = fit_stages(self._conv_knobs(a, kd), a.x.data_type.itemsize, st)
                if st:
                    out.append(EngineConfig.make(self, **{**kd, "num_stages": st}))
        out.sort(key=lambda c: self.estimate_seconds(graph, c, target))
        return out

    def _conv_knobs(self, a, kd) -> K.ConvKnobs:
        gb, g = kd["GB"], a.geo
        return K.ConvKnobs(
            BLOCK_M=gb * g.k_per_group,
            BLOCK_N=max(16, _pow2_at_least(gb * g.c_per_group)),
            BLOCK_K=kd["BLOCK_K"],
            num_warps=kd["num_warps"],
            num_stages=kd["num_stages"],
        )

    def workspace_size(self, graph, config, target) -> int:
        a = self._analyze(graph)
        if isinstance(a, str):
            return 0
        kd = self.complete_knobs(graph, config.knob_dict)
        g = a.geo
        return 4 * kd["SPLIT"] * K._prod(g.filt) * g.k_per_group * g.groups * g.c_per_group

    def estimate_seconds(self, graph, config, target) -> float:
        """The tensor cores' FLOPs with the zero blocks (every output row against BLOCK_N
        channels) against x, dy, dw and the partials moved once (the taps re-read x from
        L2), and the main loop (each (group block, tap, slice) program walks its pixels
        BLOCK_K at a time); the binding bound plus a tenth of the others, plus a second
        launch."""
        a = self._analyze(graph)
        kd = self.complete_knobs(graph, config.knob_dict)
        kn = self._conv_knobs(a, kd)
        g = a.geo
        peak = peak_flops(a, target)
        pixels = g.n * K._prod(g.out_dims)
        taps = K._prod(g.filt)
        k_total = g.k_per_group * g.groups
        flops = 2.0 * pixels * taps * k_total * kn.BLOCK_N
        size = a.x.data_type.itemsize
        moved = size * (a.x.numel + a.y.numel + a.w.numel)
        moved += 8.0 * kd["SPLIT"] * taps * k_total * g.c_per_group
        compute = flops / (peak * 0.6)
        memory = moved / target.bandwidth
        programs = -(-k_total // kn.BLOCK_M) * taps * kd["SPLIT"]
        steps = programs * -(-(-(-pixels // kd["SPLIT"])) // kn.BLOCK_K)
        tile = (kn.BLOCK_M + kn.BLOCK_N) * kn.BLOCK_K * size
        # a step of fewer than MMA_ROWS rows costs as much as one of MMA_ROWS
        scale = max(1.0, MMA_ROWS / kn.BLOCK_M) * transposed_step(a, a.x.strides[1] == 1)
        loop = K.loop_seconds(steps, programs, tile, target.num_sms, scale)
        # half precision on an NCHW image: the gather's uncoalesced loads (ResNeXt-50's
        # 32x32-channel layers ran 2.5-3x slower native than through the transform)
        nchw = nchw_gather(a, self.kind, target) if not tf32(a) else 1.0
        step = (kd["BLOCK_K"] / 64) ** WGRAD_STEP_EXPONENT
        return K.combine_bounds(compute, memory, loop) * nchw * step + 4e-6

    def build(self, graph, config, target) -> Executable:
        a = self._analyze(graph)
        kd = self.complete_knobs(graph, config.knob_dict)
        return _GroupedWgradExecutable(
            graph, a, self._conv_knobs(a, kd), kd["GB"], kd["SPLIT"], target
        )


class _GroupedWgradExecutable(Executable, LaunchList):
    def __init__(self, graph, a, kn, gb, split, target):
        LaunchList.__init__(self)
        g = a.geo
        k_total = g.k_per_group * g.groups
        taps = K._prod(g.filt)
        self.workspace_size = 4 * split * taps * k_total * g.c_per_group
        name = f"conv_wgrad_grouped_{graph.key()[:12]}"
        kw = dict(
            gb=gb,
            split=split,
            dy_strides=tuple(a.y.strides),
            dw_desc=a.w,
            allow_tf32=tf32(a),
            fp32_inputs=a.x.data_type == DataType.FLOAT,
        )
        part_c, fin = grouped_wgrad_sources(name, g, kn, interpret=False, **kw)
        part_i, _ = grouped_wgrad_sources(name, g, kn, interpret=True, **kw)
        kp = DualKernel(
            kernel_from_source(part_c, name).compiled, kernel_from_source(part_i, name).interpreted
        )
        kf = kernel_from_source(fin, f"{name}_finish")
        self.source = part_c + fin
        self.add_launch(
            kp,
            (-(-k_total // kn.BLOCK_M), taps, split),
            _consts(kn),
            [("buf", a.x.uid), ("buf", a.y.uid), ("ws", torch.float32)],
            graph,
            target.is_cuda,
        )
        self.add_launch(
            DualKernel(kf.compiled, kf.interpreted),
            *K.split_sum_launch(taps * k_total * g.c_per_group, split, target.num_sms),
            [("ws", torch.float32), ("buf", a.w.uid)],
            graph,
            target.is_cuda,
        )

    def run(self, buffers, workspace, stream=None):
        self.run_launches(buffers, workspace, stream)


def _consts(kn: K.ConvKnobs) -> dict:
    return {
        "BLOCK_M": kn.BLOCK_M,
        "BLOCK_N": kn.BLOCK_N,
        "BLOCK_K": kn.BLOCK_K,
        "num_warps": kn.num_warps,
        "num_stages": kn.num_stages,
    }


class _GroupedExecutable(Executable, LaunchList):
    """One kernel over (pixel tiles x group blocks): the forward over y's pixels, the
    backward data over dx's; the epilogue sees one group of all the output channels."""

    def __init__(self, graph, a, kn, gb, target, kind="conv_fprop"):
        LaunchList.__init__(self)
        self.workspace_size = 0
        g = a.geo
        kw = dict(gb=gb, allow_tf32=tf32(a), fp32_inputs=a.x.data_type == DataType.FLOAT)
        if kind == "conv_fprop":
            flat, gen, first = _one_group(a), grouped_source, a.x.uid
            pixels, cols = g.n * K._prod(g.out_dims), g.k_per_group * g.groups
        else:
            cols = g.c_per_group * g.groups
            flat = dataclasses.replace(a, geo=dataclasses.replace(g, c_per_group=cols, groups=1))
            gen, first = grouped_dgrad_source, a.y.uid
            pixels = g.n * K._prod(g.in_dims)
            kw["dy_strides"] = tuple(a.y.strides)
        kw["epilogue_params"], kw["epilogue_body"] = epilogue(graph, flat, kind)
        name = f"{kind.replace('_fprop', '')}_grouped_{graph.key()[:12]}"
        src_c = gen(name, g, kn, interpret=False, **kw)
        src_i = gen(name, g, kn, interpret=True, **kw)
        kern = DualKernel(
            kernel_from_source(src_c, name).compiled, kernel_from_source(src_i, name).interpreted
        )
        self.source = src_c
        args = [("buf", first), ("buf", a.w.uid)] + fuse_epilogue.launch_args(a.ep)
        grid = (-(-pixels // kn.BLOCK_M) * -(-cols // kn.BLOCK_N), 1)
        self.add_launch(kern, grid, _consts(kn), args, graph, target.is_cuda)

    def run(self, buffers, workspace, stream=None):
        self.run_launches(buffers, workspace, stream)


__all__ = ["GroupedConvEngine", "GroupedDgradEngine", "GroupedWgradEngine"]
