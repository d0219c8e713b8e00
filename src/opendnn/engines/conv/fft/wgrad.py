"""FFT convolution backward filter: CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT and ..._FFT_TILING.

At stride 1 (no dilation, one group) the filter gradient is a cross-correlation of the
zero-padded image xp (the Hp x Wp = (Ho + R - 1) x (Wo + S - 1) positions the forward
read) with the output gradient dy, summed over the batch:

    dwc[k, c, r] = sum_n sum_o dy[n, k, o] xp[n, c, o + r]       r in [0, R) x [0, S)

and dw = dwc, or dwc rotated by 180 degrees in CONVOLUTION mode (dw[k, c, R-1-r, S-1-s]).
For any transform size F >= Hp, Wp the circular correlation agrees with it at the lags
0..R-1 (o + r <= Hp - 1 never wraps), and by the correlation theorem, per frequency bin f,

    DW[f, k, c] = sum_n conj(D[f, n, k]) X[f, n, c],       dwc = IDFT_2(DW)[:R, :S]

with X = DFT_2(xp) and D = DFT_2(dy zero-padded to F): dy takes the place the forward
gives the filter and the GEMM reduces over the batch instead of the channels (a K x C
result per bin). As in the forward (``fft``), the inputs are real, so the width axis keeps
bins 0..Fw/2 and the inverse rebuilds the rest from Hermitian symmetry. The pipeline, all
float32, every stage a Triton kernel, runs per chunk of planes (images, or image tiles):

    1 image rows      real rows of xp -> row spectra      chunk*C*LH rows of length Fw
    2 image columns   -> X[f, p, c]                       chunk*C*half columns of length Fh
    3 dy rows         real rows of dy -> row spectra      chunk*K*OTH rows
    4 dy columns      -> D[f, p, k]                       chunk*K*half columns
    5 per-bin GEMM    DW[f] (+)= D[f]^H X[f]              bins K x C GEMMs over the chunk's
                                                          planes (3xTF32 tensor cores)
and once, after the last chunk:
    6 inverse columns keep filter rows 0..R-1             K*C*half columns
    7 inverse rows    real part / (Fh*Fw), crop to S, rotate in CONVOLUTION mode, then the
                      fused epilogue (scale, bias, type conversion...) into dW's strides

Stages 1-4, 6 and 7 are the forward's generators (``_fft_kernels``: dy rows are image
rows with no padding, the inverse rows treat filter k as a plane of R output rows and
C channels); stage 5 is ``_fft_wgrad_kernels``. Chunks add into DW in order: the result
is deterministic (no atomics).

conv_wgrad_fft (engine 22) transforms whole padded images, as cuDNN's FFT does: Hp x Wp
up to 256 x 256. conv_wgrad_fft_tiling (engine 23) is overlap-save: dy is cut into tiles
of (T - R + 1) x (T - S + 1) pixels, each paired with the T x T image tile it reads, and
the GEMM reduces over (image, tile) pairs (knob TILE: 8, 16 or cuDNN's 32; the filter
must be at most T - 1). Both chunk the planes so that the per-chunk buffers stay within
the forward's ``fft.TILING_WORKSPACE_BUDGET`` bytes; the DW spectrum (8 bins K C bytes)
lives through all chunks. Workspace: 8 bins (K C + chunk (C + K)) bytes plus the largest
row-spectrum buffer (a chunk's image or dy rows, or the K C R inverse rows).

Operation count in real flops (complex multiply-add = 8), P planes:

    transforms  8 [ P C (LH Fw (n1+n2)_w + half Fh (n1+n2)_h)
                  + P K (OTH Fw (n1+n2)_w + half Fh (n1+n2)_h)
                  + K C (half Fh (n1+n2)_h + R Fw (n1+n2)_w) ]
    GEMM        8 bins P K C      direct: 2 N K C Ho Wo R S

The forward's measured rates price the stages (``estimate_seconds``), so FFT ranks after
the implicit GEMM engines except for large filters in float32.

Supported, as in cuDNN: 2-D, stride 1, dilation 1, one group, float / half / bfloat16
operands with float32 transforms, any strides of x, dy and dw, both modes, any padding,
any pointwise epilogue on dw. Numerical notes: FFT; TENSOR_CORE (the 3xTF32 GEMM);
DOWN_CONVERT_INPUTS for half types.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from ....runtime.launch import DualKernel, LaunchList, kernel_from_source
from ...base import Executable, Target
from ...fusion import epilogue as fuse_epilogue
from ..analysis import ConvAnalysis, analyze
from . import _kernels as FK
from . import engine as fft
from ._wgrad_kernels import wgrad_gemm_source
from .engine import (
    FFT_TYPES,
    LAUNCH_SECONDS,
    MAX_FFT_SIZE,
    NUM_WARPS,
    FftPlan,
    _al,
    _cdiv,
)


@dataclasses.dataclass(frozen=True)
class FftWgradPlan(FftPlan):
    """The forward's sizes (``fft.FftPlan``: transforms, tiles, chunk), read for the
    backward filter: ``out_tile`` is the dy pixels per tile, and the work buffers below
    replace the forward's."""

    def buffers(self) -> dict:
        """float32 element counts (real and imaginary planes) of the work buffers."""
        r, oth = self.a.geo.filt[0], self.out_tile[0]
        return {
            "DW": 2 * self.bins * self.k * self.c,
            "RX": 2 * self.chunk * self.c * self.in_rows * self.half,
            "RD": 2 * self.chunk * self.k * oth * self.half,
            "RY": 2 * self.k * self.c * r * self.half,
            "X": 2 * self.bins * self.chunk * self.c,
            "D": 2 * self.bins * self.chunk * self.k,
        }

    def regions(self) -> tuple:
        """Byte offsets (DW, A, B, C, end): the DW spectrum accumulates over all chunks; A
        holds a chunk's image row spectra, then its dy row spectra, and after the last
        chunk the inverse-column result RY; B the image spectrum X, C the dy spectrum D."""
        b = self.buffers()
        dw = _al(4 * b["DW"])
        a_ = _al(4 * max(b["RX"], b["RD"], b["RY"]))
        x, d = _al(4 * b["X"]), _al(4 * b["D"])
        return 0, dw, dw + a_, dw + a_ + x, dw + a_ + x + d

    @property
    def workspace_bytes(self) -> int:
        return self.regions()[4]

    def gemm_blocks(self) -> tuple:
        """(BLOCK_M over K, BLOCK_N over C, BLOCK_P over the chunk's planes)."""

        def blk(v, cap):
            return min(cap, max(16, FK.next_pow2(v)))

        return blk(self.k, 64), blk(self.c, 64), blk(self.chunk, 32)


def fft_wgrad_rules(a: ConvAnalysis) -> str | None:
    """Why the FFT backward-filter engines cannot take ``a``, or None: the forward's
    rules (``fft.fft_rules``), and a dW the inverse stage can write."""
    why = fft.fft_rules(a)
    if why is None and a.w.data_type not in FFT_TYPES:
        why = f"FFT takes float, half or bfloat16 dW, not {a.w.data_type.name}"
    return why


@functools.lru_cache(maxsize=512)
def plan_fft_wgrad(
    graph, tile: int = 0, budget: int = fft.TILING_WORKSPACE_BUDGET
) -> FftWgradPlan | str:
    """The plan of ``graph`` for conv_wgrad_fft (``tile`` 0) or conv_wgrad_fft_tiling
    (T x T tiles), planes chunked to ``budget`` bytes of buffers; or why not."""
    a = analyze(graph, "conv_wgrad")
    if isinstance(a, str):
        return a
    why = fft_wgrad_rules(a)
    if why:
        return why
    geo = a.geo
    (r, s), (ho, wo) = geo.filt, geo.out_dims
    hp, wp = ho + r - 1, wo + s - 1
    if tile == 0:
        if hp > MAX_FFT_SIZE or wp > MAX_FFT_SIZE:
            return (
                f"FFT transforms the whole padded image: {hp}x{wp} exceeds "
                f"{MAX_FFT_SIZE}x{MAX_FFT_SIZE} (FFT_TILING takes large images)"
            )
        one = FftWgradPlan(
            a,
            FK.smooth_length(hp),
            FK.smooth_length(wp),
            (1, 1),
            (ho, wo),
            max(1, min(hp, geo.pre[0] + geo.in_dims[0])),
            wp,
            1,
        )
    else:
        if r > tile - 1 or s > tile - 1:
            return (
                f"filter {r}x{s} does not fit a {tile}x{tile} FFT tile "
                f"(at most {tile - 1}x{tile - 1})"
            )
        oth, otw = tile - r + 1, tile - s + 1
        ax = FK.transform(tile)
        one = FftWgradPlan(a, ax, ax, (_cdiv(ho, oth), _cdiv(wo, otw)), (oth, otw), tile, tile, 1)
    b = one.buffers()
    per_plane = 4 * (max(b["RX"], b["RD"]) + b["X"] + b["D"])
    chunk = max(1, min(one.planes, budget // per_plane))
    return dataclasses.replace(one, chunk=chunk)


def estimate_seconds(fp: FftWgradPlan, target: Target) -> float:
    """Roofline per stage at the forward's measured rates (transforms ~10% of the float32
    peak while a row fits 32 register lanes, the 3xTF32 GEMM 45% of a third of the fp16
    tensor-core rate), or its bytes, whichever takes longer; plus the launches."""
    geo, isz = fp.a.geo, fp.a.x.data_type.itemsize
    n, c, k, half, bins = fp.n, fp.c, fp.k, fp.half, fp.bins
    (r, s), (h, w), (ho, wo) = geo.filt, geo.in_dims, geo.out_dims
    oth = fp.out_tile[0]
    fw, fh = fp.ax_w.flops_per_row, fp.ax_h.flops_per_row
    stage, dot = fft.stage_pricer(fp, target)
    pc = fp.chunks * fp.chunk  # planes actually processed
    x_read = isz * min(n * c * h * w, pc * c * fp.in_rows * fp.in_len)
    dy_read = isz * min(n * k * ho * wo, pc * k * oth * fp.out_tile[1])
    bm, bn, bp = fp.gemm_blocks()
    gemm_flops = (
        8.0
        * bins
        * fp.chunks
        * (_cdiv(k, bm) * bm)
        * (_cdiv(c, bn) * bn)
        * (_cdiv(fp.chunk, bp) * bp)
    )
    t = (
        stage(pc * c * fp.in_rows * fw, x_read + 8 * pc * c * fp.in_rows * half)
        + stage(pc * c * half * fh, 8 * pc * c * (fp.in_rows * half + bins))
        + stage(pc * k * oth * fw, dy_read + 8 * pc * k * oth * half)
        + stage(pc * k * half * fh, 8 * pc * k * (oth * half + bins))
        + stage(gemm_flops, 8 * bins * (pc * (c + k) + (2 * fp.chunks - 1) * k * c), dot)
        + stage(k * c * half * fh, 8 * k * c * (bins + r * half))
        + stage(k * c * r * fw, 8 * k * c * r * half + fp.a.w.data_type.itemsize * k * c * r * s)
    )
    return t + LAUNCH_SECONDS * (2 + 5 * fp.chunks)


class _WgradPlan:
    """The forward FFT engines' support, notes, configs and knobs, on the backward
    filter's plan, cost and executable."""

    def _plan_for(self, graph, tile: int):
        # the budget is read at call time, one switch for every FFT engine (tests lower it)
        return plan_fft_wgrad(graph, tile, fft.TILING_WORKSPACE_BUDGET)

    def estimate_seconds(self, graph, config, target) -> float:
        return estimate_seconds(self._plan(graph, config), target)

    def build(self, graph, config, target) -> Executable:
        return _FftWgradExecutable(graph, self._plan(graph, config), target)


class FftWgradEngine(_WgradPlan, fft.FftConvEngine):
    """CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT: whole-image 2-D FFTs of x and dy, one complex
    K x C GEMM per bin reducing over the batch."""

    id = 22
    name = "conv_wgrad_fft"


class FftTilingWgradEngine(_WgradPlan, fft.FftTilingConvEngine):
    """CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING: overlap-save over T x T image tiles
    (knob TILE), the GEMM reducing over (image, tile) pairs."""

    id = 23
    name = "conv_wgrad_fft_tiling"


def _epilogue(graph, fp: FftWgradPlan) -> tuple[list, str]:
    """The fused epilogue on the inverse-rows tile: in ``FK.inverse_rows_source`` filter k
    is plane ``nb``, tap (r, s) is output pixel (``o0``, ``o1``) and channel c is
    ``offs_n``; CONVOLUTION mode stores tap (r, s) at (R-1-r, S-1-s)."""
    a = fp.a
    r, s = a.geo.filt

    def off(u):
        st, dims = graph.tensors[u].strides, graph.tensors[u].dims
        st = [0 if d == 1 else v for d, v in zip(dims, st)]
        tr = f"({r - 1} - o0)" if a.geo.flip else "o0"
        ts = f"({s - 1} - o1)" if a.geo.flip else "o1"
        return (
            f"((nb * {st[0]} + {tr} * {st[2]} + {ts} * {st[3]})[:, None] + "
            f"(offs_n * {st[1]})[None, :])"
        )

    params, body = fuse_epilogue.source(graph, a.ep, off)
    return params, "ep_mask = mask_m[:, None] & mask_n[None, :]\n" + body


class _FftWgradExecutable(Executable, LaunchList):
    """Seven kernels: per chunk of planes the image rows / columns, the dy rows / columns
    and the accumulating per-bin GEMM; then the inverse columns and the inverse rows with
    the epilogue (see the module docstring)."""

    def __init__(self, graph, fp: FftWgradPlan, target: Target):
        LaunchList.__init__(self)
        self.fp = fp
        self.workspace_size = fp.workspace_bytes
        a, geo, cuda = fp.a, fp.a.geo, target.is_cuda
        tag = f"{graph.key()[:12]}_{fp.ax_h.n}x{fp.ax_w.n}"
        f32 = ("ws", torch.float32)
        half, c, k = fp.half, fp.c, fp.k
        (r, s), oth = geo.filt, fp.out_tile[0]

        def rows_launch(name, src, rows, ax, args):
            blk = ax.rows_per_program(rows)
            self.add_launch(
                kernel_from_source(src, name),
                (_cdiv(rows, blk),),
                {"B": blk, "num_warps": NUM_WARPS},
                args,
                graph,
                cuda,
            )

        # the image tile of plane (n, ty, tx) starts at padded row ty*OTH: the dy tile's
        # first row, so lag r of the tile pair is lag r of the whole problem
        img = FK.ImageRows(
            c,
            fp.in_rows,
            fp.in_len,
            fp.planes,
            fp.tiles,
            fp.out_tile,
            tuple(geo.pre),
            tuple(geo.in_dims),
            tuple(a.x.strides),
        )
        dyt = FK.ImageRows(
            k,
            oth,
            fp.out_tile[1],
            fp.planes,
            fp.tiles,
            fp.out_tile,
            (0, 0),
            tuple(geo.out_dims),
            tuple(a.y.strides),
        )
        for what, src, chans, in_rows, uid in (
            ("x", img, c, fp.in_rows, a.x.uid),
            ("dy", dyt, k, oth, a.y.uid),
        ):
            rows = fp.chunk * chans * in_rows
            name = f"fftw_{what}_rows_{tag}"
            rows_launch(
                name,
                FK.forward_rows_source(name, src, fp.ax_w, half, rows),
                rows,
                fp.ax_w,
                [("buf", uid), f32, ("int", 0)],
            )
            name = f"fftw_{what}_cols_{tag}"
            rows_launch(
                name,
                FK.forward_cols_source(name, fp.ax_h, half, fp.chunk * chans, in_rows),
                fp.chunk * chans * half,
                fp.ax_h,
                [f32, f32],
            )

        blocks = fp.gemm_blocks()
        name = f"fftw_gemm_{tag}"
        gemm = DualKernel(
            kernel_from_source(
                wgrad_gemm_source(name, fp.bins, fp.chunk, k, c, blocks, False), name
            ).compiled,
            kernel_from_source(
                wgrad_gemm_source(name, fp.bins, fp.chunk, k, c, blocks, True), name
            ).interpreted,
        )
        grid = (fp.bins, _cdiv(k, blocks[0]) * _cdiv(c, blocks[1]))
        for acc in (0, 1):  # the first chunk stores, the later ones add
            self.add_launch(
                gemm, grid, {"ACC": acc, "num_warps": NUM_WARPS}, [f32, f32, f32], graph, cuda
            )

        name = f"fftw_inverse_cols_{tag}"
        rows_launch(
            name,
            FK.inverse_cols_source(name, fp.ax_h, half, k * c, r),
            k * c * half,
            fp.ax_h,
            [f32, f32],
        )

        # filter k is a plane of R output rows (the taps r) by C channels, cropped to S
        params, body = _epilogue(graph, fp)
        dst = FK.OutputTiles(c, k, k, (1, 1), (r, s), (r, s))
        name = f"fftw_inverse_rows_{tag}"
        src = FK.inverse_rows_source(
            name, fp.ax_w, half, 1.0 / (fp.ax_h.n * fp.ax_w.n), dst, params, body
        )
        block_n = min(FK.next_pow2(c), fp.ax_w.rows_per_program(c))
        rows_out = fp.ax_w.rows_per_program(k * r * block_n) // block_n
        rows_out = max(1, min(rows_out, FK.next_pow2(k * r)))
        self.add_launch(
            kernel_from_source(src, name),
            (_cdiv(k * r, rows_out), _cdiv(c, block_n)),
            {"ROWS": rows_out, "BLOCK_N": block_n, "num_warps": NUM_WARPS},
            [f32, ("int", 0)] + fuse_epilogue.launch_args(a.ep),
            graph,
            cuda,
        )

    def run(self, buffers, workspace, stream=None):
        fp = self.fp
        o = fp.regions()
        spec_dw, reg_a, reg_b, reg_c = (
            workspace[o[i] : o[i + 1]].view(torch.float32) for i in range(4)
        )
        (xr, _), (xc, _), (dr, _), (dc, _), (gm0, _), (gm1, _), (yc, _), (yr, yargs) = self.launches
        x, dy = buffers[fp.a.x.uid], buffers[fp.a.y.uid]
        for q in range(fp.chunks):
            p0 = q * fp.chunk
            xr.launch([x, reg_a, p0], stream)
            xc.launch([reg_a, reg_b], stream)
            dr.launch([dy, reg_a, p0], stream)
            dc.launch([reg_a, reg_c], stream)
            (gm1 if q else gm0).launch([reg_c, reg_b, spec_dw], stream)
        yc.launch([spec_dw, reg_a], stream)
        yr.launch([reg_a, 0] + self.values(yargs[2:], buffers, None), stream)


__all__ = [
    "FftWgradEngine",
    "FftTilingWgradEngine",
    "plan_fft_wgrad",
    "FftWgradPlan",
    "fft_wgrad_rules",
]
