"""The NHWC fast path of ``conv_implicit_gemm`` (CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM):
image and filter slabs fetched as TMA boxes, persistent grid (kernel: ``_tma_kernels``).

A config of engine 3 whose knobs name ``TMA_TH`` takes this path; the heuristics offer
such configs on Hopper for 2-D, one-group, half/bfloat16 problems in packed NHWC with a
KRSC filter, stride 1 or 2, and epilogues without statistics or prologues. The buffers of
x and w must be 16-byte aligned (checked at execute: BAD_PARAM_MISALIGNED_POINTER).
"""
from __future__ import annotations

import dataclasses

from ...errors import BadParamError, Status
from ...runtime.launch import DualKernel, LaunchList, kernel_from_source
from ..base import Executable
from ..fusion import epilogue as fuse_epilogue
from . import _tma_kernels as T

KNOB_NAMES = ("TMA_IMGS", "TMA_TH", "TMA_TW")


def is_tma(knobs: dict) -> bool:
    return any(n in knobs for n in KNOB_NAMES)


def unsupported(a) -> str | None:
    """Why analysis ``a`` (a ConvAnalysis) cannot take the TMA path, or None."""
    if a.prologue is not None:
        return "the TMA path takes no prologue (it never touches the image in registers)"
    if a.ep.stats:
        return "the TMA path writes no batch-norm statistics"
    return T.unsupported(a.geo, a.x, a.w, a.y)


def knobs(a) -> list:
    item = a.x.data_type.itemsize
    return [k for k in T.KNOB_SPACE if T.fits(k, a.geo, item)]


def check(a, kn: T.TmaKnobs) -> str | None:
    why = unsupported(a)
    if why is None and not T.fits(kn, a.geo, a.x.data_type.itemsize):
        why = (f"TMA tiles {kn}: the pipeline stages exceed shared memory, or BLOCK_K does "
               "not divide C on the stride-2 path")
    return why


def estimate_seconds(a, kn: T.TmaKnobs, peak: float, target) -> float:
    return T.estimate_seconds(a.geo, kn, a.x.data_type.itemsize, peak, target.bandwidth,
                              target.num_sms)


def knob_values() -> dict:
    """Each TMA knob's allowed values (for the engine's knob space)."""
    return {f.name: tuple(sorted({getattr(k, f.name) for k in T.KNOB_SPACE} | {f.default}))
            for f in dataclasses.fields(T.TmaKnobs)}


class TmaExecutable(Executable, LaunchList):
    def __init__(self, graph, a, kn: T.TmaKnobs, target, params: list, body: str):
        LaunchList.__init__(self)
        self.workspace_size = 0
        name = f"conv_tma_{graph.key()[:12]}"
        kw = dict(epilogue_params=params, epilogue_body=body)
        src_c = T.source(name, a.geo, kn, interpret=False, **kw)
        src_i = T.source(name, a.geo, kn, interpret=True, **kw)
        kern = DualKernel(kernel_from_source(src_c, name).compiled,
                          kernel_from_source(src_i, name).interpreted)
        self.source = src_c
        self.uids = (a.x.uid, a.w.uid)
        grid = T.grid(a.geo, kn, target.num_sms if target.is_cuda else 1)
        const = {"NUM_PROGS": grid[0], "num_warps": kn.num_warps, "num_stages": kn.num_stages}
        args = [("buf", a.x.uid), ("buf", a.w.uid)] + fuse_epilogue.launch_args(a.ep)
        self.cuda = target.is_cuda
        if self.cuda:
            from ..matmul._kernels import ensure_allocator
            ensure_allocator()
        self.add_launch(kern, grid, const, args, graph, target.is_cuda)

    def run(self, buffers, workspace, stream=None):
        x, w = buffers[self.uids[0]], buffers[self.uids[1]]
        if x.device.type == "cuda":
            if (x.data_ptr() | w.data_ptr()) % 16:
                raise BadParamError("image or filter is not 16-byte aligned; TMA plans need "
                                    "aligned buffers", op="conv_fprop",
                                    status=Status.BAD_PARAM_MISALIGNED_POINTER)
            from ..matmul._kernels import ensure_allocator
            ensure_allocator()
        self.run_launches(buffers, workspace, stream)
