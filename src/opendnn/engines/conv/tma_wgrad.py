"""The NHWC fast path of ``conv_wgrad_implicit_gemm`` (CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1):
pixel boxes of dy and x through TMA, the pixel reduction split into slices whose float32
partials are summed in a fixed order (deterministic). Kernels: ``_tma_wgrad_kernels``.

A config of engine 5 naming ``TMA_TH`` takes this path; the heuristics offer such configs
on Hopper for 2-D, one-group, half/bfloat16 problems with packed NHWC x and dy, stride 1
or 2. SPLIT is chosen per problem by the cost model (1 = no workspace, one launch).
"""
from __future__ import annotations

import dataclasses

import torch

from ..base import Executable
from ..fusion import epilogue as fuse_epilogue
from . import _tma_wgrad_kernels as T
from .tma import TmaExecutable, TmaPath

MAX_WS_ELEMENTS = 2 ** 31     # int32 offsets into the partials


class WgradTmaPath(TmaPath):
    knob_class = T.WgradTmaKnobs
    knob_space = T.KNOB_SPACE

    def knob_values(self) -> dict:
        return {**super().knob_values(), "SPLIT": T.SPLITS}

    def unsupported(self, a) -> str | None:
        return T.unsupported(a.geo, a.x, a.w, a.y)

    def fits(self, a, kn) -> bool:
        return T.fits(kn, a.x.data_type.itemsize) and \
            T.workspace_bytes(a.geo, kn) // 4 < MAX_WS_ELEMENTS

    def knobs(self, a, target) -> list:
        item, peak = a.x.data_type.itemsize, target.peak_flops_fp16
        out = []
        for kn in self.knob_space:
            kn = T.best_split(a.geo, kn, item, peak, target.bandwidth, target.num_sms)
            if self.fits(a, kn):
                out.append(kn)
        return out

    def check(self, a, kn) -> str | None:
        why = self.unsupported(a)
        if why is None and not self.fits(a, kn):
            why = (f"TMA tiles {kn}: the pipeline stages exceed shared memory, or the "
                   f"partials exceed {MAX_WS_ELEMENTS} elements")
        return why

    def estimate_seconds(self, a, kn, peak: float, target) -> float:
        return T.estimate_seconds(a.geo, kn, a.x.data_type.itemsize, peak, target.bandwidth,
                                  target.num_sms)

    def workspace_size(self, a, kn) -> int:
        return T.workspace_bytes(a.geo, kn)

    def build(self, graph, a, kn, target, params: list, body: str) -> Executable:
        return _WgradExecutable(graph, a, kn, target, params, body)


WGRAD = WgradTmaPath()


class _WgradExecutable(TmaExecutable):
    def __init__(self, graph, a, kn: T.WgradTmaKnobs, target, params: list, body: str):
        super().__init__("conv_wgrad", (a.x.uid, a.y.uid), target)
        tag = graph.key()[:12]
        self.workspace_size = T.workspace_bytes(a.geo, kn)
        n_tiles = T.tiles(a.geo, kn)
        b = T.boxes(a.geo, kn)
        slices = -(-(b[0] * b[1] * b[2]) // T.chunk(a.geo, kn))
        const = {"num_warps": kn.num_warps, "num_stages": kn.num_stages}
        ep_args = fuse_epilogue.launch_args(a.ep)
        split = kn.SPLIT > 1
        name = f"wgrad_tma_{tag}"
        self.add_generated(name, lambda interp: T.source(
            name, a.geo, kn, epilogue_params=params, epilogue_body=body, interpret=interp),
            (n_tiles * slices,), const,
            [("buf", a.x.uid), ("buf", a.y.uid)] + ([("ws", torch.float32)] if split
                                                      else ep_args), graph)
        if split:
            # chunk rounding can leave the last slices empty: only the others run and are summed
            rname = f"wgrad_tma_sum_{tag}"
            rkn = dataclasses.replace(kn, SPLIT=slices)
            self.add_generated(rname, lambda interp: T.reduce_source(
                rname, a.geo, rkn, epilogue_params=params, epilogue_body=body),
                (n_tiles,), {"num_warps": 4}, [("ws", torch.float32)] + ep_args, graph)
