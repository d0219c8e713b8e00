"""The NHWC fast path of ``conv_implicit_gemm`` (CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM):
image and filter slabs fetched as TMA boxes, persistent grid (kernel: ``_tma_kernels``).

A config of engine 3 whose knobs name ``TMA_TH`` takes this path; the heuristics offer
such configs on Hopper for 2-D, one-group, half/bfloat16 problems in packed NHWC with a
KRSC filter, stride 1 or 2, and epilogues without statistics or prologues. The buffers of
x and w must be 16-byte aligned (checked at execute: BAD_PARAM_MISALIGNED_POINTER).

Configs with ``PACK=1`` first repack the image and filter by stride phase into the
workspace (``tma_packed``): small-channel strided problems the boxes cannot read directly
(the stem, C = 3 at stride 2; any layout of x and w) become dense stride-1 ones.
"""

from __future__ import annotations

import dataclasses

import torch

from ....errors import BadParamError, Status
from ....runtime.launch import DualKernel, LaunchList, kernel_from_source
from ...base import Executable
from ...fusion import epilogue as fuse_epilogue
from ..analysis import tf32
from . import _flat_kernels as F
from . import _kernels as T
from . import packed as P

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

    def knob_items(self, kn) -> dict:
        """The knobs of config ``kn`` as its EngineConfig names them."""
        return dataclasses.asdict(kn)

    def knob_names(self) -> tuple:
        return tuple(f.name for f in dataclasses.fields(self.knob_class))

    def knob_values(self) -> dict:
        """Each knob's allowed values (for the engine's knob space)."""
        return {
            f.name: tuple(sorted({getattr(k, f.name) for k in self.knob_space} | {f.default}))
            for f in dataclasses.fields(self.knob_class)
        }

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
            why = (
                f"TMA tiles {kn}: the pipeline stages exceed shared memory, or BLOCK_K "
                "does not divide C on the stride-2 path"
            )
        return why

    def estimate_seconds(self, a, kn, peak: float, target) -> float:
        return T.estimate_seconds(
            a.geo, kn, a.x.data_type.itemsize, peak, target.bandwidth, target.num_sms
        )

    def workspace_size(self, a, kn) -> int:
        return 0

    def build(self, graph, a, kn, target, params: list, body: str) -> Executable:
        return _FpropExecutable(graph, a, kn, target, params, body)


@dataclasses.dataclass(frozen=True)
class FpropTmaKnobs(T.TmaKnobs):
    PACK: int = 0  # 1: phase-packed image and filter in the workspace (tma_packed)
    SPLIT: int = 1  # >1: the reduction in slices, float32 partials summed in order
    FLAT: int = 0  # 1: tiles of TMA_TW flat pixel rows (_tma_flat_kernels)


# big tiles with the reduction split: few tiles of a long reduction (7x7 images, C = 512:
# 64-pixel tiles re-read the 1.2 MB filter slice each and the run is L2-bound; 128-pixel
# tiles halve that, and the split keeps the SMs full)
SPLIT_KNOBS = tuple(
    FpropTmaKnobs(i, h, w, 128, 64, 8, 4, SPLIT=sp)
    for i, h, w in ((2, 8, 8), (1, 8, 16), (4, 4, 8))
    for sp in (2, 3, 4)
)


# packed stems: 16 channels, 4x4 taps -- 16 K steps of 16; the cost model orders them
PACKED_KNOBS = (
    FpropTmaKnobs(1, 8, 16, 64, 16, 4, 4, PACK=1),
    FpropTmaKnobs(1, 16, 16, 64, 16, 8, 4, PACK=1),
    FpropTmaKnobs(1, 8, 16, 64, 32, 4, 4, PACK=1),
    FpropTmaKnobs(2, 8, 16, 64, 16, 8, 4, PACK=1),
)


# float32 (TF32) boxes: the box configs with BLOCK_K = 32 channels -- a 128-byte row, as
# BLOCK_K = 64 is in half precision (256-byte rows are not used: 512-byte ones gave wrong
# results on the H100); for float32 problems only, which take no other box config. They
# compile to wgmma m64nNk8 tf32 from shared memory (GPU check:
# test_gpu_conv.py::test_fprop_tma_tf32_every_config).
TF32_KNOBS = tuple(
    dataclasses.replace(FpropTmaKnobs(**dataclasses.asdict(k)), BLOCK_K=32) for k in T.KNOB_SPACE
) + tuple(dataclasses.replace(k, BLOCK_K=32) for k in SPLIT_KNOBS)


def flat_knobs(cls) -> tuple:
    """Flat-row tiles (TMA_IMGS = TMA_TH = 1, TMA_TW rows): 128 x 128 and narrower, whole
    or split for the few tiles of 7x7 and 14x14 layers."""
    return tuple(
        cls(1, 1, bm, bn, 64, nw, st, SPLIT=sp, FLAT=1)
        for bm, bn, nw, st, sp in (
            (128, 128, 8, 4, 1),
            (128, 64, 4, 4, 1),
            (64, 128, 4, 4, 1),
            (128, 128, 8, 4, 2),
            (128, 128, 8, 4, 3),
            (64, 128, 4, 4, 2),
            (128, 64, 4, 4, 2),
        )
    )


def drop_defaults(d: dict) -> dict:
    """A config's knobs without PACK=0 / SPLIT=1 / FLAT=0 / PPS=1: box configs keep the
    names they had before those knobs."""
    default = {"PACK": 0, "SPLIT": 1, "FLAT": 0, "PPS": 1}
    return {k: v for k, v in d.items() if k not in default or v != default[k]}


class FpropTmaPath(TmaPath):
    """The forward's path: boxes of x itself, (PACK=1) of its phase-packed copy, or (FLAT=1)
    flat pixel rows."""

    knob_class = FpropTmaKnobs
    knob_space = (
        tuple(FpropTmaKnobs(**dataclasses.asdict(k)) for k in T.KNOB_SPACE)
        + PACKED_KNOBS
        + SPLIT_KNOBS
        + flat_knobs(FpropTmaKnobs)
        + TF32_KNOBS
    )

    def knob_items(self, kn) -> dict:
        return drop_defaults(dataclasses.asdict(kn))

    @staticmethod
    def _direct(a) -> str | None:
        """Why x itself cannot be read in boxes (float32 only as TF32)."""
        return T.unsupported(a.geo, a.x, a.w, a.y, tf32=tf32(a))

    @staticmethod
    def _flat(a) -> str | None:
        return F.unsupported(a.geo, "conv_fprop", a.x, a.w)

    @staticmethod
    def _fused_rule(a) -> str | None:
        if a.prologue is not None:
            return "the TMA path takes no prologue (it never touches the image in registers)"
        if a.ep.stats:
            return "the TMA path writes no batch-norm statistics"
        return None

    @staticmethod
    def _packing(a):
        why = T.common_unsupported(a.geo, a.x)
        return why if why else P.packing(a.geo, a.x.data_type.itemsize)

    def unsupported(self, a) -> str | None:
        why = self._fused_rule(a)
        if why:
            return why
        direct = self._direct(a)
        pk, flat = self._packing(a), self._flat(a)
        if direct is None or not isinstance(pk, str) or flat is None:
            return None
        return f"{direct}; phase packing: {pk}; flat rows: {flat}"

    def fits(self, a, kn) -> bool:
        if kn.FLAT:
            return (
                kn.block_m + kn.BLOCK_N
            ) * kn.BLOCK_K * a.x.data_type.itemsize * kn.num_stages <= 200 * 1024
        if kn.PACK:
            pk = self._packing(a)
            return not isinstance(pk, str) and T.fits(kn, pk.geo, pk.itemsize)
        return T.fits(kn, a.geo, a.x.data_type.itemsize)

    def knobs(self, a, target) -> list:
        """Direct boxes where x allows them, else the packed configs."""
        direct = self._direct(a) is None
        flat = self._flat(a) is None
        fp32 = a.x.data_type.itemsize == 4
        return [
            k
            for k in self.knob_space
            if self.fits(a, k)
            and (k in _TF32_SET) == fp32
            and (flat if k.FLAT else bool(k.PACK) != direct)
            and (k.FLAT or k.PACK or T.knob_rule(a.geo, k) is None)
        ]

    def check(self, a, kn) -> str | None:
        why = self._fused_rule(a)
        if why is None and kn.PACK and kn.SPLIT > 1:
            why = "SPLIT applies to the direct boxes, not to phase-packed images (PACK=1)"
        if why is None and kn.FLAT:
            why = (
                "FLAT and PACK are two layouts of the image: a config takes one"
                if kn.PACK
                else "FLAT tiles are runs of TMA_TW pixels: TMA_IMGS and TMA_TH must be 1"
                if (kn.TMA_IMGS, kn.TMA_TH) != (1, 1)
                else self._flat(a)
            )
        elif why is None:
            pk = self._packing(a)
            why = (
                pk
                if kn.PACK and isinstance(pk, str)
                else None
                if kn.PACK
                else self._direct(a) or T.knob_rule(a.geo, kn)
            )
            if why is None and not kn.PACK and a.x.data_type.itemsize == 4 and kn.BLOCK_K > 32:
                why = "float32 boxes take BLOCK_K <= 32 (128-byte rows)"
        if why is None and not self.fits(a, kn):
            why = (
                f"TMA tiles {kn}: the pipeline stages exceed shared memory, or BLOCK_K "
                "does not divide C on the stride-2 path"
            )
        return why

    def estimate_seconds(self, a, kn, peak: float, target) -> float:
        if kn.FLAT:
            return F.estimate_seconds(
                a.geo,
                kn,
                "conv_fprop",
                a.x.data_type.itemsize,
                peak,
                target.bandwidth,
                target.num_sms,
            )
        if not kn.PACK:
            return super().estimate_seconds(a, kn, peak, target)
        return P.estimate_seconds(
            self._packing(a), kn, peak, target.bandwidth, target.num_sms, a.x.size_in_bytes
        )

    def workspace_size(self, a, kn) -> int:
        if kn.FLAT:
            return F.partials_bytes(a.geo, kn, "conv_fprop")
        return self._packing(a).workspace_bytes if kn.PACK else T.partials_bytes(a.geo, kn)

    def build(self, graph, a, kn, target, params: list, body: str) -> Executable:
        if kn.PACK:
            return _PackedFpropExecutable(graph, a, kn, self._packing(a), target, params, body)
        if kn.FLAT:
            return FlatExecutable(graph, a, kn, "conv_fprop", target, params, body)
        return _FpropExecutable(graph, a, kn, target, params, body)


_TF32_SET = frozenset(TF32_KNOBS)
FPROP = FpropTmaPath()


class TmaExecutable(Executable, LaunchList):
    """Launches of kernels that read TMA descriptors: at execute, the buffers the
    descriptors cover must be 16-byte aligned, and Triton needs its descriptor allocator."""

    def __init__(self, op: str, aligned: tuple, target):
        LaunchList.__init__(self)
        self.workspace_size = 0
        self.op, self.aligned, self.cuda = op, aligned, target.is_cuda
        if self.cuda:
            from ...matmul._kernels import ensure_allocator

            ensure_allocator()

    def add_generated(self, name: str, make_source, grid, const: dict, args: list, graph):
        """Compile ``make_source(interpret)`` both ways and queue its launch."""
        src_c, src_i = make_source(False), make_source(True)
        kern = DualKernel(
            kernel_from_source(src_c, name).compiled, kernel_from_source(src_i, name).interpreted
        )
        self.source = getattr(self, "source", "") + src_c
        self.add_launch(kern, grid, const, args, graph, self.cuda)

    def add_persistent(
        self,
        graph,
        name: str,
        make_source,
        grid,
        kn,
        operands: tuple,
        ep_args: list,
        sum_source=None,
        sum_grid=None,
    ):
        """The persistent launch ``name`` of ``make_source(interpret)`` over buffers
        ``operands`` (uids). With ``sum_source`` (name -> source; a split reduction) the
        launch writes float32 partial tiles to the workspace, and a second one, on grid
        ``sum_grid``, sums them in slice order and runs the epilogue."""
        const = {"NUM_PROGS": grid[0], "num_warps": kn.num_warps, "num_stages": kn.num_stages}
        partials = [("ws", torch.float32)]
        args = [("buf", u) for u in operands] + (partials if sum_source else ep_args)
        self.add_generated(name, make_source, grid, const, args, graph)
        if sum_source:
            sname = f"{name}_sum"
            self.add_generated(
                sname,
                lambda interp: sum_source(sname),
                sum_grid,
                {"num_warps": 4},
                partials + ep_args,
                graph,
            )

    def run(self, buffers, workspace, stream=None):
        bufs = [buffers[u] for u in self.aligned]
        if self.reads_workspace and workspace is not None:
            bufs.append(workspace)
        if bufs[0].device.type == "cuda":
            ptr = 0
            for b in bufs:
                ptr |= b.data_ptr()
            if ptr % 16:
                raise BadParamError(
                    "a buffer read through TMA descriptors is not 16-byte "
                    "aligned; TMA plans need aligned buffers",
                    op=self.op,
                    status=Status.BAD_PARAM_MISALIGNED_POINTER,
                )
            from ...matmul._kernels import ensure_allocator

            ensure_allocator()
        self.run_launches(buffers, workspace, stream)

    reads_workspace = False  # True: descriptors cover the workspace too


class _FpropExecutable(TmaExecutable):
    """One persistent launch; with SPLIT > 1 it writes float32 partial tiles to the
    workspace and a second launch sums them in slice order and runs the epilogue."""

    def __init__(self, graph, a, kn: T.TmaKnobs, target, params: list, body: str):
        super().__init__("conv_fprop", (a.x.uid, a.w.uid), target)
        self.workspace_size = T.partials_bytes(a.geo, kn)
        name = f"conv_tma_{graph.key()[:12]}"
        self.add_persistent(
            graph,
            name,
            lambda interp: T.source(
                name, a.geo, kn, epilogue_params=params, epilogue_body=body, interpret=interp
            ),
            T.grid(a.geo, kn, target.num_sms if target.is_cuda else 1),
            kn,
            (a.x.uid, a.w.uid),
            fuse_epilogue.launch_args(a.ep),
            (
                lambda sname: T.sum_source(
                    sname, a.geo, kn, epilogue_params=params, epilogue_body=body
                )
            )
            if T.split_of(kn) > 1
            else None,
            T.sum_grid(a.geo, kn),
        )


class _PackedFpropExecutable(TmaExecutable):
    """Pack x and w into the workspace, then the TMA kernel on the packed problem."""

    reads_workspace = True

    def __init__(self, graph, a, kn, pk, target, params: list, body: str):
        super().__init__("conv_fprop", (), target)
        self.workspace_size = pk.workspace_bytes
        key = graph.key()[:12]
        P.pack_launches(self, graph, a, pk, key)
        name = f"conv_tma_packed_{key}"
        grid = T.grid(pk.geo, kn, target.num_sms if target.is_cuda else 1)
        const = {"NUM_PROGS": grid[0], "num_warps": kn.num_warps, "num_stages": kn.num_stages}
        ws = ("ws", a.x.torch_dtype)
        args = [ws, ws] + fuse_epilogue.launch_args(a.ep)
        self.add_generated(
            name,
            lambda interp: T.source(
                name,
                pk.geo,
                kn,
                epilogue_params=params,
                epilogue_body=body,
                interpret=interp,
                w_offset=pk.w_offset,
            ),
            grid,
            const,
            args,
            graph,
        )


class FlatExecutable(TmaExecutable):
    """Flat-row tiles of either direction (``kind``): one persistent launch, and with
    SPLIT > 1 the partials' sum with the epilogue. Arguments (A, W): x or dy, then w."""

    def __init__(self, graph, a, kn, kind: str, target, params: list, body: str):
        streamed = a.x if kind == "conv_fprop" else a.y
        super().__init__(kind, (streamed.uid, a.w.uid), target)
        self.workspace_size = F.partials_bytes(a.geo, kn, kind)
        name = f"{kind}_flat_{graph.key()[:12]}"
        self.add_persistent(
            graph,
            name,
            lambda interp: F.source(
                name, a.geo, kn, kind, epilogue_params=params, epilogue_body=body, interpret=interp
            ),
            F.grid(a.geo, kn, kind, target.num_sms if target.is_cuda else 1),
            kn,
            (streamed.uid, a.w.uid),
            fuse_epilogue.launch_args(a.ep),
            (
                lambda sname: F.sum_source(
                    sname, a.geo, kn, kind, epilogue_params=params, epilogue_body=body
                )
            )
            if T.split_of(kn) > 1
            else None,
            F.sum_grid(a.geo, kn, kind),
        )
