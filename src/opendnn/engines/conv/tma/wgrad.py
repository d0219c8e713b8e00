"""The NHWC fast path of ``conv_wgrad_implicit_gemm`` (CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1):
dy and x through TMA, the pixel reduction split into slices whose float32 partials are
summed in a fixed order (deterministic). Two kernels, chosen by the FLAT knob:

- boxes (``_tma_wgrad_kernels``): one tap per tile, pixel boxes of IMGS x TH x TW of a
  4-D dy and the shifted box of x (stride 1 or 2, C and K multiples of 8); 3-D problems
  as 2-D ones over N * OD images, one depth slice per box;
- flat runs (``_tma_wgrad_flat_kernels``): runs of consecutive pixels of a 2-D dy, taps
  and channels flattened into the columns, x through a 2-D descriptor (1x1 filters) or
  gathered (small C, any stride, padding and dilation).

The heuristics offer these configs on Hopper for 2-D (boxes: also 3-D), one-group,
half/bfloat16 problems with a packed NHWC dy. SPLIT is chosen per config by the cost model (1 = no workspace,
one launch).
"""

from __future__ import annotations

import dataclasses

import torch

from ...base import Executable
from ...fusion import epilogue as fuse_epilogue
from ..analysis import tf32
from . import _wgrad_flat_kernels as F
from . import _wgrad_kernels as T
from .engine import TmaExecutable, TmaPath

MAX_WS_ELEMENTS = 2**31  # int32 offsets into the partials
# the partials' sum runs on small tiles so that every SM shares it (a program per
# 128 x 128 tile left one SM summing 88 slices of l1_1x1_64_64: 40 us of a 50 us run);
# the smallest dw (64 x 64) still needs 8 x 16 tiles for two programs per SM
SUM_TILES = ((16, 32), (16, 16), (8, 16))


def sum_tile(elements: int, num_sms: int) -> dict:
    """The largest partials' sum tile giving every SM two programs (or the smallest)."""
    for bm, bn in SUM_TILES:
        if elements // (bm * bn) >= 2 * num_sms:
            break
    return dict(BLOCK_M=bm, BLOCK_N=bn)


def _boxes(a) -> str | None:
    """Why the box kernel cannot take the problem (float32 only as TF32)."""
    return T.unsupported(a.geo, a.x, a.w, a.y, tf32=tf32(a))


def _why(a, kn) -> str | None:
    if not kn.FLAT:
        return _boxes(a) or T.knob_unsupported(a.geo, kn, a.x.data_type.itemsize)
    why = F.unsupported(a.geo, a.x, a.y)
    gathered = why is None and not F.x_by_descriptor(a.geo, a.x)
    if gathered and F.gather_too_large(kn):
        why = (
            f"flat runs of {kn.TMA_TW} gathered pixels x {kn.BLOCK_N} columns need more "
            f"than {F.GATHER_PER_THREAD} registers per thread with {kn.num_warps} warps"
        )
    elif gathered and F.live_too_large(kn):
        # compute-sanitizer (H100, Triton 3.6): on the ResNet stem the 64 x 128 tile of
        # 64-pixel runs and the 128 x 64 tile of 128-pixel runs (64 accumulator + 64
        # gathered elements per thread) read up to 2.6 KB before x in padding lanes whose
        # mask was false and offset 0; every config at 96 or fewer ran clean
        why = (
            f"a {kn.BLOCK_M} x {kn.BLOCK_N} accumulator with gathered runs of {kn.TMA_TW} "
            f"pixels keeps more than {F.LIVE_PER_THREAD} elements per thread live"
        )
    return why


def _estimate(a, kn, peak: float, target) -> float:
    item = a.x.data_type.itemsize
    if kn.FLAT:
        return F.estimate_seconds(
            a.geo, kn, F.x_by_descriptor(a.geo, a.x), item, peak, target.bandwidth, target.num_sms
        )
    return T.estimate_seconds(a.geo, kn, item, peak, target.bandwidth, target.num_sms)


def _workspace(a, kn) -> int:
    return F.workspace_bytes(a.geo, kn) if kn.FLAT else T.workspace_bytes(a.geo, kn)


def _max_split(a, kn) -> int:
    if kn.FLAT:
        return F.steps(a.geo, kn)
    b = T.boxes(a.geo, kn)
    return b[0] * b[1] * b[2]


def _splits(total: int) -> list:
    """The smallest SPLIT giving each distinct slice length over ``total`` steps: a larger
    SPLIT with the same length runs the same programs with more workspace, so the cost
    model never prefers it (and pricing each of 256 splits cost ~80 ms per problem)."""
    seen, out = set(), []
    for s in T.SPLITS:
        if s > total:
            break
        if -(-total // s) not in seen:
            seen.add(-(-total // s))
            out.append(s)
    return out


class WgradTmaPath(TmaPath):
    knob_class = T.WgradTmaKnobs
    knob_space = T.KNOB_SPACE

    def knob_values(self) -> dict:
        return {**super().knob_values(), "SPLIT": T.SPLITS}

    def unsupported(self, a) -> str | None:
        """None when either kernel takes the problem (``check`` asks per config)."""
        box, flat = _boxes(a), F.unsupported(a.geo, a.x, a.y)
        return None if box is None or flat is None else f"{box}; flat runs: {flat}"

    def fits(self, a, kn) -> bool:
        return T.fits(kn, a.x.data_type.itemsize) and _workspace(a, kn) // 4 < MAX_WS_ELEMENTS

    def knobs(self, a, target) -> list:
        """The configs offered. Flat runs with gathered columns are for the problems the
        boxes cannot take (an RGB stem): where boxes can, the gathered runs measured up to
        6.5x their model (3x3 layers of 64-256 channels, whose runs the gather reads
        element by element) and the boxes within 1.05x of theirs; an explicit flat config
        is still built (``check``)."""
        peak, out = target.peak_flops_fp16, []
        gathered_only = _boxes(a) is not None
        item = a.x.data_type.itemsize
        if item == 4:  # TF32
            peak /= 2
        for kn in self.knob_space:
            if item == 4 and not kn.FLAT:  # the stages that fit 4-byte boxes
                st = T.SMEM // (kn.box * (kn.BLOCK_M + kn.BLOCK_N) * 4)
                if st < 2:
                    continue
                kn = dataclasses.replace(kn, num_stages=min(kn.num_stages, st))
            if _why(a, kn) is not None:
                continue
            if kn.BLOCK_N < 64 and a.geo.c_per_group > 32:
                continue  # the 64 x 32 tile is for 32-channel images (TILES)
            if kn.FLAT and not gathered_only and not F.x_by_descriptor(a.geo, a.x):
                continue
            cands = [dataclasses.replace(kn, SPLIT=s) for s in _splits(_max_split(a, kn))]
            kn = min(cands, key=lambda k: _estimate(a, k, peak, target))
            if self.fits(a, kn):
                out.append(kn)
        return out

    def check(self, a, kn) -> str | None:
        why = _why(a, kn)
        if why is None and not self.fits(a, kn):
            why = (
                f"TMA tiles {kn}: the pipeline stages exceed shared memory, or the "
                f"partials exceed {MAX_WS_ELEMENTS} elements"
            )
        return why

    def estimate_seconds(self, a, kn, peak: float, target) -> float:
        return _estimate(a, kn, peak, target)

    def workspace_size(self, a, kn) -> int:
        return _workspace(a, kn)

    def build(self, graph, a, kn, target, params: list, body: str) -> Executable:
        return _WgradExecutable(graph, a, kn, target, params, body)


WGRAD = WgradTmaPath()


class _WgradExecutable(TmaExecutable):
    def __init__(self, graph, a, kn: T.WgradTmaKnobs, target, params: list, body: str):
        x_desc = bool(kn.FLAT) and F.x_by_descriptor(a.geo, a.x)
        aligned = (a.y.uid, a.x.uid) if (x_desc or not kn.FLAT) else (a.y.uid,)
        super().__init__("conv_wgrad", aligned, target)
        tag = graph.key()[:12]
        self.workspace_size = _workspace(a, kn)
        if kn.FLAT:
            n_tiles, slices = F.tiles(a.geo, kn), F.slices(a.geo, kn)
        else:
            b = T.boxes(a.geo, kn)
            n_tiles, slices = T.tiles(a.geo, kn), -(-(b[0] * b[1] * b[2]) // T.chunk(a.geo, kn))
        const = {"num_warps": kn.num_warps, "num_stages": kn.num_stages}
        ep_args = fuse_epilogue.launch_args(a.ep)
        split = kn.SPLIT > 1
        name = f"wgrad_tma_{tag}"
        kw = dict(epilogue_params=params, epilogue_body=body)
        if kn.FLAT:

            def make(interp):
                return F.source(name, a.geo, kn, x_desc, a.x.strides, interpret=interp, **kw)
        else:
            halves = T.dy_halves(kn, a.x.data_type.itemsize)

            def make(interp):
                return T.source(name, a.geo, kn, interpret=interp, halves=halves, **kw)

        self.add_generated(
            name,
            make,
            (n_tiles * slices,),
            const,
            [("buf", a.x.uid), ("buf", a.y.uid)] + ([("ws", torch.float32)] if split else ep_args),
            graph,
        )
        if split:
            # chunk rounding can leave the last slices empty: only the others run and are summed
            rname = f"wgrad_tma_sum_{tag}"
            elements = a.geo.k_per_group * F.columns(a.geo) if kn.FLAT else T.slice_elements(a.geo)
            rkn = dataclasses.replace(
                kn, SPLIT=slices, **sum_tile(elements, target.num_sms if target.is_cuda else 1)
            )
            if kn.FLAT:

                def rmake(interp):
                    return F.reduce_source(rname, a.geo, rkn, slices, **kw)

                r_tiles = F.tiles(a.geo, rkn)
            else:

                def rmake(interp):
                    return T.reduce_source(rname, a.geo, rkn, **kw)

                r_tiles = T.tiles(a.geo, rkn)
            self.add_generated(
                rname, rmake, (r_tiles,), {"num_warps": 4}, [("ws", torch.float32)] + ep_args, graph
            )
