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


class TmaPath:
    """The NHWC fast path of one implicit-GEMM direction, as its engine sees it: which
    problems it takes, its configs (a frozen knob dataclass), cost, workspace and build.
    This one is the forward's; ``tma_dgrad`` and ``tma_wgrad`` subclass it."""
    knob_class = T.TmaKnobs
    knob_space = T.KNOB_SPACE

    def is_tma(self, knobs: dict) -> bool:
        return is_tma(knobs)

    def knob_names(self) -> tuple:
        return tuple(f.name for f in dataclasses.fields(self.knob_class))

    def knob_values(self) -> dict:
        """Each knob's allowed values (for the engine's knob space)."""
        return {f.name: tuple(sorted({getattr(k, f.name) for k in self.knob_space} |
                                     {f.default}))
                for f in dataclasses.fields(self.knob_class)}

    def unsupported(self, a) -> str | None:
        """Why analysis ``a`` (a ConvAnalysis) cannot take the TMA path, or None."""
        if a.prologue is not None:
            return "the TMA path takes no prologue (it never touches the image in registers)"
        if a.ep.stats:
            return "the TMA path writes no batch-norm statistics"
        return T.unsupported(a.geo, a.x, a.w, a.y)

    def fits(self, a, kn) -> bool:
        return T.fits(kn, a.geo, a.x.data_type.itemsize)

    def knobs(self, a, target) -> list:
        return [k for k in self.knob_space if self.fits(a, k)]

    def check(self, a, kn) -> str | None:
        why = self.unsupported(a)
        if why is None and not self.fits(a, kn):
            why = (f"TMA tiles {kn}: the pipeline stages exceed shared memory, or BLOCK_K "
                   "does not divide C on the stride-2 path")
        return why

    def estimate_seconds(self, a, kn, peak: float, target) -> float:
        return T.estimate_seconds(a.geo, kn, a.x.data_type.itemsize, peak, target.bandwidth,
                                  target.num_sms)

    def workspace_size(self, a, kn) -> int:
        return 0

    def build(self, graph, a, kn, target, params: list, body: str) -> Executable:
        return _FpropExecutable(graph, a, kn, target, params, body)


FPROP = TmaPath()


class TmaExecutable(Executable, LaunchList):
    """Launches of kernels that read TMA descriptors: at execute, the buffers the
    descriptors cover must be 16-byte aligned, and Triton needs its descriptor allocator."""

    def __init__(self, op: str, aligned: tuple, target):
        LaunchList.__init__(self)
        self.workspace_size = 0
        self.op, self.aligned, self.cuda = op, aligned, target.is_cuda
        if self.cuda:
            from ..matmul._kernels import ensure_allocator
            ensure_allocator()

    def add_generated(self, name: str, make_source, grid, const: dict, args: list, graph):
        """Compile ``make_source(interpret)`` both ways and queue its launch."""
        src_c, src_i = make_source(False), make_source(True)
        kern = DualKernel(kernel_from_source(src_c, name).compiled,
                          kernel_from_source(src_i, name).interpreted)
        self.source = getattr(self, "source", "") + src_c
        self.add_launch(kern, grid, const, args, graph, self.cuda)

    def run(self, buffers, workspace, stream=None):
        bufs = [buffers[u] for u in self.aligned]
        if bufs[0].device.type == "cuda":
            ptr = 0
            for b in bufs:
                ptr |= b.data_ptr()
            if ptr % 16:
                raise BadParamError("a buffer read through TMA descriptors is not 16-byte "
                                    "aligned; TMA plans need aligned buffers", op=self.op,
                                    status=Status.BAD_PARAM_MISALIGNED_POINTER)
            from ..matmul._kernels import ensure_allocator
            ensure_allocator()
        self.run_launches(buffers, workspace, stream)


class _FpropExecutable(TmaExecutable):
    def __init__(self, graph, a, kn: T.TmaKnobs, target, params: list, body: str):
        super().__init__("conv_fprop", (a.x.uid, a.w.uid), target)
        name = f"conv_tma_{graph.key()[:12]}"
        grid = T.grid(a.geo, kn, target.num_sms if target.is_cuda else 1)
        const = {"NUM_PROGS": grid[0], "num_warps": kn.num_warps, "num_stages": kn.num_stages}
        args = [("buf", a.x.uid), ("buf", a.w.uid)] + fuse_epilogue.launch_args(a.ep)
        self.add_generated(name, lambda interp: T.source(
            name, a.geo, kn, epilogue_params=params, epilogue_body=body, interpret=interp),
            grid, const, args, graph)
