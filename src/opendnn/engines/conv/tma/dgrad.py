"""The NHWC fast path of ``conv_dgrad_implicit_gemm`` (CUDNN_CONVOLUTION_BWD_DATA_ALGO_1
style), two tilings:

- boxes (``_tma_dgrad_kernels``): dy slabs fetched as TMA boxes, strided problems split
  into dense stride phases, a persistent grid of one or two (knob PPS) programs per SM;
- flat rows (``FLAT=1``, ``_tma_flat_kernels``): stride 1 with dx the size of dy, tiles
  of consecutive dx pixels, the reduction optionally split (knob SPLIT).

A config of engine 4 whose knobs name ``TMA_TH`` takes this path; the heuristics offer
such configs on Hopper for 2-D (boxes: also 3-D), one-group, half/bfloat16 problems with
a packed NHWC dy
(K * element size a multiple of 16 bytes) and a KRSC filter, any stride (dilation 1 on
strided axes) and any dilation at stride 1. dx may have any strides: it is written
through the epilogue's pointers. The buffers read through descriptors (dy, and w unless C
* element size is not a multiple of 16) must be 16-byte aligned, checked at execute
(BAD_PARAM_MISALIGNED_POINTER).
"""

from __future__ import annotations

import dataclasses

from .... import backends
from ....enums import DataType
from ...base import Executable
from ...fusion import epilogue as fuse_epilogue
from . import _dgrad_kernels as D
from . import _flat_kernels as F
from . import _kernels as T
from . import engine as tma


def _tf32(a) -> bool:
    """float32 dy (and filter) with TF32 allowed: the dots run as TF32."""
    return a.y.data_type == DataType.FLOAT and bool(backends.allow_tf32)


# float32 (TF32) boxes: the box configs with BLOCK_K = 32 (128-byte rows of dy and of the
# K-innermost filter); for float32 problems only. The narrow channel blocks (16, 32) are
# the stem's (C = 3): its K-innermost filter is always a descriptor
TF32_KNOBS = tuple(dict.fromkeys(dataclasses.replace(k, BLOCK_K=32) for k in D.KNOB_SPACE))
_TF32_SET = frozenset(TF32_KNOBS)


class DgradTmaPath(tma.TmaPath):
    """Backward data's TMA path: ``a`` is the ConvAnalysis of ``analyze(graph,
    "conv_dgrad")`` (x = dx, w = w, y = dy; geo.in_dims = dx's spatial dims). Box tiles
    by stride phase, or (FLAT=1, stride 1 and dx the size of dy) flat pixel rows."""

    knob_class = D.DgradTmaKnobs
    knob_space = D.KNOB_SPACE + tma.flat_knobs(D.DgradTmaKnobs) + TF32_KNOBS

    def knob_items(self, kn) -> dict:
        return tma.drop_defaults(dataclasses.asdict(kn))

    @staticmethod
    def _flat(a) -> str | None:
        return F.unsupported(a.geo, "conv_dgrad", a.y, a.w)

    @staticmethod
    def _boxes(a) -> str | None:
        return D.unsupported(a.geo, a.x, a.w, a.y, tf32=_tf32(a))

    def unsupported(self, a) -> str | None:
        boxes, flat = self._boxes(a), self._flat(a)
        return None if boxes is None or flat is None else f"{boxes}; flat rows: {flat}"

    def fits(self, a, kn) -> bool:
        return D.fits(kn, a.geo, a.y.data_type.itemsize)

    def knobs(self, a, target) -> list:
        flat = self._flat(a) is None
        boxes = self._boxes(a) is None
        fp32 = a.y.data_type == DataType.FLOAT
        return [
            k
            for k in self.knob_space
            if self.fits(a, k)
            and (k in _TF32_SET) == fp32
            and (
                flat
                if k.FLAT
                else boxes and D.split_rule(a.geo, k) is None and D.knob_rule(a.geo, k) is None
            )
        ]

    def check(self, a, kn) -> str | None:
        if kn.FLAT:
            why = (
                "FLAT tiles are runs of TMA_TW pixels: TMA_IMGS and TMA_TH must be 1"
                if (kn.TMA_IMGS, kn.TMA_TH) != (1, 1)
                else "PPS applies to the box tiles"
                if kn.PPS != 1
                else self._flat(a)
            )
        else:
            why = self._boxes(a) or D.knob_rule(a.geo, kn) or D.split_rule(a.geo, kn)
            if why is None and a.y.data_type == DataType.FLOAT and kn.BLOCK_K > 32:
                why = "float32 boxes take BLOCK_K <= 32 (128-byte rows)"
        if why is None and not self.fits(a, kn):
            why = f"TMA tiles {kn}: the pipeline stages exceed shared memory"
        return why

    def estimate_seconds(self, a, kn, peak: float, target) -> float:
        # the engine derives ``peak`` from a.x, which for dgrad is dx: a float32 dx (or a
        # float intermediate before a fused epilogue) would price these half-precision
        # dots at the CUDA-core rate
        if kn.FLAT:
            return F.estimate_seconds(
                a.geo,
                kn,
                "conv_dgrad",
                a.y.data_type.itemsize,
                target.peak_flops_fp16,
                target.bandwidth,
                target.num_sms,
            )
        return D.estimate_seconds(
            a.geo,
            kn,
            a.y.data_type.itemsize,
            target.peak_flops_fp16 / (2 if _tf32(a) else 1),
            target.bandwidth,
            target.num_sms,
        )

    def workspace_size(self, a, kn) -> int:
        return F.partials_bytes(a.geo, kn, "conv_dgrad") if kn.FLAT else D.partials_bytes(a.geo, kn)

    def build(self, graph, a, kn, target, params: list, body: str) -> Executable:
        if kn.FLAT:
            return tma.FlatExecutable(graph, a, kn, "conv_dgrad", target, params, body)
        return _DgradExecutable(graph, a, kn, target, params, body)


DGRAD = DgradTmaPath()


class _DgradExecutable(tma.TmaExecutable):
    """One persistent launch ``(DY, W, <epilogue buffers>)``; dx is an epilogue output. With
    SPLIT > 1 the launch writes float32 partial tiles to the workspace and the forward's
    sum kernel (over dx's geometry) adds them in slice order and runs the epilogue."""

    def __init__(self, graph, a, kn, target, params: list, body: str):
        w_k_major = D.w_k_major(a.w, a.y)
        w_desc = w_k_major or D.filter_by_descriptor(a.geo, a.y.data_type.itemsize)
        super().__init__("conv_dgrad", (a.y.uid, a.w.uid) if w_desc else (a.y.uid,), target)
        self.workspace_size = D.partials_bytes(a.geo, kn)
        name = f"conv_dgrad_tma_{graph.key()[:12]}"
        view = D.output_view(a.geo)
        self.add_persistent(
            graph,
            name,
            lambda interp: D.source(
                name,
                a.geo,
                kn,
                w_desc=w_desc,
                w_k_major=w_k_major,
                epilogue_params=params,
                epilogue_body=body,
                interpret=interp,
            ),
            D.grid(a.geo, kn, target.num_sms if target.is_cuda else 1),
            kn,
            (a.y.uid, a.w.uid),
            fuse_epilogue.launch_args(a.ep),
            (
                lambda sname: T.sum_source(
                    sname, view, kn, epilogue_params=params, epilogue_body=body
                )
            )
            if kn.SPLIT > 1
            else None,
            T.sum_grid(view, kn) if kn.SPLIT > 1 else None,
        )
