"""The NHWC fast path of ``conv_dgrad_implicit_gemm`` (CUDNN_CONVOLUTION_BWD_DATA_ALGO_1
style): dy slabs fetched as TMA boxes, strided problems split into dense stride phases,
persistent grid (kernel and math: ``_tma_dgrad_kernels``).

A config of engine 4 whose knobs name ``TMA_TH`` takes this path; the heuristics offer
such configs on Hopper for 2-D, one-group, half/bfloat16 problems with a packed NHWC dy
(K * element size a multiple of 16 bytes) and a KRSC filter, any stride (dilation 1 on
strided axes) and any dilation at stride 1. dx may have any strides: it is written
through the epilogue's pointers. The buffers read through descriptors (dy, and w unless C
* element size is not a multiple of 16) must be 16-byte aligned, checked at execute
(BAD_PARAM_MISALIGNED_POINTER).
"""
from __future__ import annotations

from ..base import Executable
from ..fusion import epilogue as fuse_epilogue
from . import _tma_dgrad_kernels as D
from . import tma


class DgradTmaPath(tma.TmaPath):
    """Backward data's TMA path: ``a`` is the ConvAnalysis of ``analyze(graph,
    "conv_dgrad")`` (x = dx, w = w, y = dy; geo.in_dims = dx's spatial dims)."""
    knob_space = D.KNOB_SPACE

    def unsupported(self, a) -> str | None:
        return D.unsupported(a.geo, a.x, a.w, a.y)

    def fits(self, a, kn) -> bool:
        return D.fits(kn, a.geo, a.y.data_type.itemsize)

    def check(self, a, kn) -> str | None:
        why = self.unsupported(a)
        if why is None and not self.fits(a, kn):
            why = f"TMA tiles {kn}: the pipeline stages exceed shared memory"
        return why

    def estimate_seconds(self, a, kn, peak: float, target) -> float:
        # the engine derives ``peak`` from a.x, which for dgrad is dx: a float32 dx (or a
        # float intermediate before a fused epilogue) would price these half-precision
        # dots at the CUDA-core rate
        return D.estimate_seconds(a.geo, kn, a.y.data_type.itemsize, target.peak_flops_fp16,
                                  target.bandwidth, target.num_sms)

    def build(self, graph, a, kn, target, params: list, body: str) -> Executable:
        return _DgradExecutable(graph, a, kn, target, params, body)


DGRAD = DgradTmaPath()


class _DgradExecutable(tma.TmaExecutable):
    """One persistent launch ``(DY, W, <epilogue buffers>)``; dx is an epilogue output."""

    def __init__(self, graph, a, kn, target, params: list, body: str):
        w_desc = D.filter_by_descriptor(a.geo, a.y.data_type.itemsize)
        super().__init__("conv_dgrad", (a.y.uid, a.w.uid) if w_desc else (a.y.uid,), target)
        name = f"conv_dgrad_tma_{graph.key()[:12]}"
        grid = D.grid(a.geo, kn, target.num_sms if target.is_cuda else 1)
        const = {"NUM_PROGS": grid[0], "num_warps": kn.num_warps, "num_stages": kn.num_stages}
        args = [("buf", a.y.uid), ("buf", a.w.uid)] + fuse_epilogue.launch_args(a.ep)
        self.add_generated(name, lambda interp: D.source(
            name, a.geo, kn, w_desc=w_desc, epilogue_params=params, epilogue_body=body,
            interpret=interp), grid, const, args, graph)
