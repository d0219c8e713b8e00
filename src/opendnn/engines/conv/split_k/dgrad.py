"""Split-K backward data (CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, "sum of matrix products").

The implicit GEMM of ``conv_dgrad_implicit_gemm`` -- dx pixels x input channels, reduced
over R = prod(filt) * ceil(K/G / BLOCK_K) (tap, output-channel block) steps -- with the
reduction cut into SPLIT slices that run as separate programs:

    ACC = 0                                         (float32 [N * prod(in), C], workspace)
    ACC[m, c] += sum of slice s's steps             (atomics, one program per tile and s)
    dx = epilogue(ACC)                              (casts, scale, relu_backward, ...; any
                                                     strides and type of dx)

Worth it when dx has too few tiles to fill the GPU (small images, few channels, long
reductions over many taps or output channels). Atomic float32 additions land in a
different order on every run, so dx's last bits can change (note NONDETERMINISTIC:
``backends.deterministic`` keeps it out of the heuristics' plans). Kernels: ``_split_kernels``.
"""

from __future__ import annotations

import dataclasses

import torch

from ....enums import DataType, NumericalNote
from ....runtime.launch import DualKernel, LaunchList, kernel_from_source
from ...base import EngineConfig, Executable, Knob, decline
from ...fusion import epilogue as fuse_epilogue
from ..analysis import epilogue, peak_flops, tf32
from ..implicit_gemm import _kernels as K
from ..implicit_gemm.engine import ImplicitGemmDgradEngine, nchw_gather
from . import _kernels as S

SPLITS = (1, 2, 4, 8, 16, 32, 64)
FINISH_KNOBS = K.ConvKnobs(BLOCK_M=64, BLOCK_N=64, BLOCK_K=16, num_warps=4, num_stages=1)


def _knobs(config) -> tuple:
    d = dict(config.knob_dict)
    split = d.pop("SPLIT", 2)
    return K.ConvKnobs(**d), split


def choose_split(programs: int, steps: int, num_sms: int) -> int:
    """The smallest power of two giving two waves of programs on ``num_sms`` SMs, with at
    least one reduction step per slice (and at most SPLITS[-1] slices)."""
    split = 1
    while split < SPLITS[-1] and programs * split < 2 * num_sms and split * 2 <= steps:
        split *= 2
    return split


class SplitKDgradEngine(ImplicitGemmDgradEngine):
    """Nondeterministic split-K implicit-GEMM backward data, float32 atomic accumulation."""

    id = 17
    name = "conv_dgrad_splitk"
    kind = "conv_dgrad"
    tma_path = None
    stride_phases = False

    def numerical_notes(self, graph, config) -> frozenset:
        return super().numerical_notes(graph, config) | {NumericalNote.NONDETERMINISTIC}

    def knob_space(self, graph=None):
        return super().knob_space(graph) + [Knob("SPLIT", SPLITS, 2)]

    def configs(self, graph, target):
        a = self._analyze(graph)
        if isinstance(a, str):
            return []
        out = []
        for c in super().configs(graph, target):
            kn = K.ConvKnobs(**c.knob_dict)
            steps = S.dgrad_steps(a.geo, kn)
            split = (
                choose_split(K._prod(K.dgrad_grid(a.geo, kn)), steps, target.num_sms)
                if target.is_cuda
                else min(2, steps)
            )
            out.append(EngineConfig.make(self, **c.knob_dict, SPLIT=split))
        out.sort(key=lambda c: self.estimate_seconds(graph, c, target))
        return out

    def check_config(self, graph, config, target):
        kn, split = _knobs(config)
        if split not in SPLITS:
            return decline(f"SPLIT={split} not in {list(SPLITS)}")
        return super().check_config(
            graph, EngineConfig.make(self, **dataclasses.asdict(kn)), target
        )

    def workspace_size(self, graph, config, target) -> int:
        geo = self._analyze(graph).geo
        return 4 * geo.n * K._prod(geo.in_dims) * geo.c_per_group * geo.groups

    def estimate_seconds(self, graph, config, target) -> float:
        """Roofline of the split GEMM (tile quantization, waves of tiles x SPLIT programs)
        plus the float32 traffic: zeroing ACC, SPLIT atomic read-modify-writes of it, and
        the finishing pass reading it and writing dx."""
        kn, split = _knobs(config)
        a = self._analyze(graph)
        geo = a.geo
        peak = peak_flops(a, target)
        m_total = geo.n * K._prod(geo.in_dims)
        tiles = K._prod(K.dgrad_grid(geo, kn))
        flops = 2.0 * tiles * kn.BLOCK_M * kn.BLOCK_N * S.dgrad_steps(geo, kn) * kn.BLOCK_K
        programs = tiles * split
        waves = -(-programs // target.num_sms)
        fill = programs / (waves * target.num_sms)
        small_tile = 0.6 if kn.BLOCK_M * kn.BLOCK_N < 64 * 64 else 0.85
        itemsize = a.x.data_type.itemsize
        dx_elems = m_total * geo.c_per_group * geo.groups
        operands = itemsize * (K._prod(a.y.dims) + K._prod(a.w.dims))
        gemm = max(
            flops / (peak * small_tile * fill), (operands + 8 * split * dx_elems) / target.bandwidth
        ) * nchw_gather(a, self.kind, target)
        passes = (4 * dx_elems + (4 + itemsize) * dx_elems) / target.bandwidth
        return gemm + passes + 3 * 3e-6

    def build(self, graph, config, target) -> Executable:
        kn, split = _knobs(config)
        return _DgradSplitExecutable(graph, self._analyze(graph), kn, split, target)


class _DgradSplitExecutable(Executable, LaunchList):
    """Three launches: zero ACC, the split GEMM, the finishing epilogue."""

    def __init__(self, graph, a, kn: K.ConvKnobs, split: int, target):
        LaunchList.__init__(self)
        geo = a.geo
        total = geo.n * K._prod(geo.in_dims) * geo.c_per_group * geo.groups
        self.workspace_size = 4 * total
        tag = graph.key()[:12]
        cuda = target.is_cuda
        ws = [("ws", torch.float32)]
        zname = f"dgrad_zero_{tag}"
        self.add_launch(
            kernel_from_source(S.zero_source(zname, total), zname),
            (-(-total // 1024),),
            {"BLOCK": 1024, "num_warps": 4},
            ws,
            graph,
            cuda,
        )
        name = f"dgrad_split_{tag}"
        kw = dict(
            split=split,
            dy_strides=a.y.strides,
            allow_tf32=tf32(a),
            fp32_inputs=a.x.data_type == DataType.FLOAT,
        )
        src_c = S.dgrad_split_source(name, geo, kn, interpret=False, **kw)
        src_i = S.dgrad_split_source(name, geo, kn, interpret=True, **kw)
        kern = DualKernel(
            kernel_from_source(src_c, name).compiled, kernel_from_source(src_i, name).interpreted
        )
        const = {
            "BLOCK_M": kn.BLOCK_M,
            "BLOCK_N": kn.BLOCK_N,
            "BLOCK_K": kn.BLOCK_K,
            "num_warps": kn.num_warps,
            "num_stages": kn.num_stages,
        }
        self.add_launch(
            kern,
            K.dgrad_grid(geo, kn) + (split,),
            const,
            [("buf", a.y.uid), ("buf", a.w.uid)] + ws,
            graph,
            cuda,
        )
        params, body = epilogue(graph, a, "conv_dgrad")
        fname = f"dgrad_finish_{tag}"
        fsrc = S.dgrad_finish_source(fname, geo, FINISH_KNOBS, params, body)
        self.add_launch(
            kernel_from_source(fsrc, fname),
            K.dgrad_grid(geo, FINISH_KNOBS),
            {
                "BLOCK_M": FINISH_KNOBS.BLOCK_M,
                "BLOCK_N": FINISH_KNOBS.BLOCK_N,
                "num_warps": FINISH_KNOBS.num_warps,
            },
            ws + fuse_epilogue.launch_args(a.ep),
            graph,
            cuda,
        )
        self.source = src_c

    def run(self, buffers, workspace, stream=None):
        # a larger workspace than asked for is fine: view only our bytes as float32
        self.run_launches(buffers, workspace[: self.workspace_size], stream)


__all__ = ["SplitKDgradEngine", "choose_split"]
