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

from ....enums import DataType
from ....runtime.launch import DualKernel, LaunchList, kernel_from_source
from ...base import SUPPORTED, EngineConfig, Executable, Knob, Support, decline
from ...fusion import epilogue as fuse_epilogue
from ..analysis import epilogue, tf32
from ..depthwise.engine import _one_group
from ..implicit_gemm import _kernels as K
from ..implicit_gemm.engine import ImplicitGemmEngine
from ._kernels import grouped_source

# (BLOCK_M, num_warps, num_stages) of the pixel tiles; the interpreter's one config
PIXEL_TILES = ((128, 4, 3), (64, 4, 3), (128, 8, 3))
INTERPRETER_PIXELS = (16, 4, 1)
MAX_TILE = 128


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def group_blocks(cg: int, kg: int, groups: int, interpret: bool = False) -> list:
    """GB values (groups per program): 2 or more (one group per program is the implicit
    GEMM's tiling), GB divides the group count, GB * kg is a power of two from 16 (8 for
    the interpreter) to 128, and GB * cg fits a K step of at most 128."""
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
        if a.prologue is not None or a.ep.stats:
            return decline("the grouped kernel fuses neither a prologue nor batch-norm statistics")
        if not group_blocks(g.c_per_group, g.k_per_group, g.groups, not target.is_cuda):
            return decline(
                f"no group block fits: GB * K/G ({g.k_per_group}) must be a power of two in "
                f"16..{MAX_TILE} with GB dividing {g.groups} and GB * C/G <= {MAX_TILE}"
            )
        return SUPPORTED

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
        ok = group_blocks(g.c_per_group, g.k_per_group, g.groups, not target.is_cuda)
        if kd["GB"] not in ok:
            return decline(f"GB={kd['GB']!r} is not one of the group blocks that fit: {ok}")
        bm = kd["BLOCK_M"]
        if not isinstance(bm, int) or bm < 1 or bm & (bm - 1):
            return decline(f"BLOCK_M={bm!r}: a power of two")
        return SUPPORTED

    def _conv_knobs(self, a, kd) -> K.ConvKnobs:
        gb, g = kd["GB"], a.geo
        return K.ConvKnobs(
            BLOCK_M=kd["BLOCK_M"],
            BLOCK_N=gb * g.k_per_group,
            BLOCK_K=max(16, _pow2_at_least(gb * g.c_per_group)),
            num_warps=kd["num_warps"],
            num_stages=kd["num_stages"],
        )

    def configs(self, graph, target) -> list:
        if not self.check_support(graph, target).ok:
            return []
        a = self._analyze(graph)
        g = a.geo
        tiles = PIXEL_TILES if target.is_cuda else (INTERPRETER_PIXELS,)
        out = [
            EngineConfig.make(self, BLOCK_M=m, GB=gb, num_warps=w, num_stages=st)
            for gb in group_blocks(g.c_per_group, g.k_per_group, g.groups, not target.is_cuda)
            for m, w, st in tiles
        ]
        out.sort(key=lambda c: self.estimate_seconds(graph, c, target))
        return out

    def workspace_size(self, graph, config, target) -> int:
        return 0

    def estimate_seconds(self, graph, config, target) -> float:
        """Roofline: the tensor cores' FLOPs with the block-diagonal tile's zeros counted
        (a BLOCK_K-wide reduction per tap for every output), against x, w and y moved once;
        a tenth of the lesser bound added to the greater, plus a launch."""
        a = self._analyze(graph)
        kd = self.complete_knobs(graph, config.knob_dict)
        kn = self._conv_knobs(a, kd)
        g = a.geo
        peak = (
            target.peak_flops_fp16
            if a.x.data_type != DataType.FLOAT
            else (target.peak_flops_fp16 / 2 if tf32(a) else target.peak_flops_fp32)
        )
        pixels = g.n * K._prod(g.out_dims)
        m_pad = -(-pixels // kn.BLOCK_M) * kn.BLOCK_M
        k_total = g.k_per_group * g.groups
        flops = 2.0 * m_pad * k_total * K._prod(g.filt) * kn.BLOCK_K  # zero blocks included
        moved = a.x.data_type.itemsize * (a.x.numel + a.w.numel + a.y.numel)
        compute = flops / (peak * (0.6 if kn.BLOCK_M * kn.BLOCK_N < 64 * 64 else 0.85))
        memory = moved / target.bandwidth
        return max(compute, memory) + 0.1 * min(compute, memory) + 4e-6

    def build(self, graph, config, target) -> Executable:
        a = self._analyze(graph)
        kd = self.complete_knobs(graph, config.knob_dict)
        return _GroupedExecutable(graph, a, self._conv_knobs(a, kd), kd["GB"], target)


class _GroupedExecutable(Executable, LaunchList):
    def __init__(self, graph, a, kn, gb, target):
        LaunchList.__init__(self)
        self.workspace_size = 0
        params, body = epilogue(graph, _one_group(a), "conv_fprop")
        name = f"conv_grouped_{graph.key()[:12]}"
        kw = dict(
            gb=gb,
            epilogue_params=params,
            epilogue_body=body,
            allow_tf32=tf32(a),
            fp32_inputs=a.x.data_type == DataType.FLOAT,
        )
        src_c = grouped_source(name, a.geo, kn, interpret=False, **kw)
        src_i = grouped_source(name, a.geo, kn, interpret=True, **kw)
        kern = DualKernel(
            kernel_from_source(src_c, name).compiled, kernel_from_source(src_i, name).interpreted
        )
        self.source = src_c
        args = [("buf", a.x.uid), ("buf", a.w.uid)] + fuse_epilogue.launch_args(a.ep)
        const = {
            "BLOCK_M": kn.BLOCK_M,
            "BLOCK_N": kn.BLOCK_N,
            "BLOCK_K": kn.BLOCK_K,
            "num_warps": kn.num_warps,
            "num_stages": kn.num_stages,
        }
        grid = K.grid(_one_group(a).geo, kn)
        self.add_launch(kern, grid, const, args, graph, target.is_cuda)

    def run(self, buffers, workspace, stream=None):
        self.run_launches(buffers, workspace, stream)


__all__ = ["GroupedConvEngine"]
