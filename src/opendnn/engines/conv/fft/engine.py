"""FFT convolution forward: CUDNN_CONVOLUTION_FWD_ALGO_FFT and ..._FFT_TILING.

Cross-correlation (stride 1, no dilation) of the zero-padded image xp (rows i = h + pre_h,
the Hp x Wp = (Ho + R - 1) x (Wo + S - 1) positions the output reads) with w,

    y[n, k, o] = sum_c sum_r xp[n, c, o + r] w[k, c, r],

is, for any transform size F >= Hp, Wp, a circular correlation whose first Ho x Wo
outputs never wrap around. By the correlation theorem, per frequency bin f:

    Y[f, n, k] = sum_c X[f, n, c] * conj(W[f, k, c]),     y = IDFT_2(Y)[:Ho, :Wo]

with X = DFT_2(xp) and W = DFT_2(w zero-padded to F); CONVOLUTION mode reads w flipped.
The images are real, so only the bins 0..Fw/2 of the width axis are kept
(half = Fw//2 + 1, bins = Fh * half) and the inverse rebuilds the rest from Hermitian
symmetry X[Fw - k] = conj(X[k]). Summing over channels makes the product one complex
GEMM per bin, [N x C] x [C x K]. The pipeline, all float32, every stage a Triton kernel
(``_fft_kernels``):

    1 filter rows      real rows of w -> row spectra      K*C*R rows of length Fw
    2 filter columns   -> W[f, k, c]                      K*C*half columns of length Fh
    3 image rows       real rows of xp -> row spectra     N*C*Hp rows
    4 image columns    -> X[f, n, c]                      N*C*half columns
    5 per-bin GEMM     Y[f] = X[f] conj(W[f])^T           bins GEMMs (3xTF32 tensor cores)
    6 inverse columns  keep output rows 0..Ho-1           N*K*half columns
    7 inverse rows     real part / (Fh*Fw), crop to Wo, then the fused epilogue (bias,
                       activation, scale, residual, type conversion) on the float32 tile

Each 1-D transform is a four-step Cooley-Tukey FFT, n = n1 * n2 (see ``_fft_kernels``):
two small dense DFT stages with a twiddle multiply between them, n*(n1 + n2) complex
multiply-adds per row rather than the dense DFT's n^2 (256 = 16*16: 8192 instead of
65536). Transform lengths are the shortest 2,3,5-smooth sizes >= Hp, Wp, split so the
register extents (next powers of two of n1, n2) stay small.

Operation count, in real flops (complex multiply-add = 8):

    transforms  8 [ C (K + N) (R_rows * Fw (n1+n2)_w + half * Fh (n1+n2)_h)
                  + N K (half * Fh (n1+n2)_h + Ho * Fw (n1+n2)_w) ]
    GEMM        8 * bins * N * C * K  ~=  4 Fh Fw N C K
    direct      2 * N * C * K * Ho * Wo * R * S

so the spectral GEMM beats the direct product when R*S is large against
2 Fh Fw / (Ho Wo). Here the transforms dominate: on the H100 their broadcast-and-sum
stages run at ~5 TFLOP/s (less for transforms longer than 32), the 3xTF32 GEMM at
45-70 TFLOP/s, and the complex float32 spectra cost 8 bytes a bin. Measured (N=32,
C=K=64, 56x56, 3x3, fp16): conv_fft_tiling 0.40 ms, conv_fft 2.2 ms, implicit GEMM 0.06
ms; (N=8, C=K=64, 64x64, 15x15, fp32): conv_fft_tiling 0.72 ms against cuDNN's 0.33 ms.
The cost model is fitted to those timings, so FFT ranks first only for large filters in
float32, where the implicit GEMM has no tensor cores.

conv_fft (engine 13) transforms the whole padded image, as cuDNN's FFT does: padded
images up to 256 x 256, workspace ~ 8 bins (N C + C K + N K) bytes.

conv_fft_tiling (engine 14) is overlap-save: the output is cut into tiles of
(T - R + 1) x (T - S + 1) pixels, each computed from a T x T input tile with T x T
transforms (knob TILE: 8, 16 or cuDNN's 32; the filter must be at most T - 1). The
filter spectrum shrinks to K*C*T*(T/2+1) bins whatever the image size, and the tiles
are processed in chunks whose buffers stay within ``TILING_WORKSPACE_BUDGET`` bytes, so
large images need far less workspace than conv_fft; the price is the overlap (each tile
transforms R - 1 rows and S - 1 columns it shares with its neighbours).

Supported, as in cuDNN: 2-D, stride 1, dilation 1, one group, float / half / bfloat16
operands with float32 transforms, any strides (NCHW, NHWC, non-packed), both modes, any
padding. Numerical notes: FFT; TENSOR_CORE (the 3xTF32 GEMM); DOWN_CONVERT_INPUTS for
half types (the half-type data goes through float32 spectra and is rounded back).
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from ....enums import BehaviorNote, DataType, NumericalNote
from ....runtime.launch import DualKernel, LaunchList, kernel_from_source
from ...base import (
    SUPPORTED,
    Engine,
    EngineConfig,
    Executable,
    Knob,
    Support,
    Target,
    decline,
)
from ...fusion import epilogue as fuse_epilogue
from ..analysis import ConvAnalysis, analyze, epilogue
from . import _kernels as FK

MAX_FFT_SIZE = 256  # cuDNN's FFT: padded image at most 256 x 256
TILES = (8, 16, 32)  # FFT_TILING transform sizes; cuDNN uses 32
DEFAULT_TILE = 32
TILING_WORKSPACE_BUDGET = 1 << 28  # bytes of per-chunk buffers before tiles are chunked
ALIGN = 256
NUM_WARPS = 4
LAUNCH_SECONDS = 4e-6
# Measured on the H100 (each of the seven kernels timed alone, 2026-11-22): the transforms'
# broadcast-and-sum stages reach about 10% of the float32 rate (~5 TFLOP/s) while a row
# fits p1*p2 <= 32 register lanes, and fall in proportion beyond (n = 72, 8x16 lanes:
# ~1.5 TFLOP/s); the per-bin 3xTF32 GEMM ran at 45-70 TFLOP/s.
DFT_EFFICIENCY = 0.10
DFT_LANES = 32
GEMM_EFFICIENCY = 0.45
FFT_TYPES = (DataType.FLOAT, DataType.HALF, DataType.BFLOAT16)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _al(nbytes: int) -> int:
    return _cdiv(nbytes, ALIGN) * ALIGN


@dataclasses.dataclass(frozen=True)
class FftPlan:
    """Sizes of one FFT convolution (whole image: one tile per image)."""

    a: ConvAnalysis
    ax_h: FK.Transform  # transform of the height axis (length Fh)
    ax_w: FK.Transform  # transform of the width axis (length Fw)
    tiles: tuple  # (TH, TW) tiles per image
    out_tile: tuple  # (OTH, OTW) output pixels per tile
    in_rows: int  # image rows per tile that may hold data (LH)
    in_len: int  # image columns per tile that may hold data
    chunk: int  # planes (image tiles) per pass

    n = property(lambda self: self.a.geo.n)
    c = property(lambda self: self.a.geo.c_per_group)
    k = property(lambda self: self.a.geo.k_per_group)
    half = property(lambda self: self.ax_w.n // 2 + 1)
    bins = property(lambda self: self.ax_h.n * self.half)
    planes = property(lambda self: self.n * self.tiles[0] * self.tiles[1])
    chunks = property(lambda self: _cdiv(self.planes, self.chunk))

    def buffers(self) -> dict:
        """float32 element counts (real and imaginary planes) of the work buffers."""
        r = self.a.geo.filt[0]
        return {
            "W": 2 * self.bins * self.k * self.c,
            "RW": 2 * self.k * self.c * r * self.half,
            "RX": 2 * self.chunk * self.c * self.in_rows * self.half,
            "X": 2 * self.bins * self.chunk * self.c,
            "Y": 2 * self.bins * self.chunk * self.k,
            "RY": 2 * self.chunk * self.k * self.out_tile[0] * self.half,
        }

    def regions(self) -> tuple:
        """Byte offsets (W, A, B, end): the filter spectrum W lives through all chunks;
        A holds the filter's row spectra, then per chunk the image's row spectra and
        later the GEMM result Y; B holds the image spectrum X, later the inverse-column
        result RY (each buffer is dead before the next one takes its region)."""
        b = self.buffers()
        w = _al(4 * b["W"])
        a_ = _al(4 * max(b["RW"], b["RX"], b["Y"]))
        b_ = _al(4 * max(b["X"], b["RY"]))
        return 0, w, w + a_, w + a_ + b_

    @property
    def workspace_bytes(self) -> int:
        return self.regions()[3]

    def gemm_blocks(self) -> tuple:
        def blk(v, cap):
            return min(cap, max(16, FK.next_pow2(v)))

        return blk(self.chunk, 64), blk(self.k, 64), blk(self.c, 32)


def _chunk_planes(planes: int, per_plane_bytes: int, budget: int) -> int:
    return max(1, min(planes, budget // max(1, per_plane_bytes)))


@functools.lru_cache(maxsize=512)
def plan_fft(graph, tile: int = 0, budget: int = TILING_WORKSPACE_BUDGET) -> FftPlan | str:
    """The plan of ``graph`` for conv_fft (``tile`` 0) or conv_fft_tiling (T x T tiles),
    or the reason the engine declines."""
    a = analyze(graph, "conv_fprop")
    if isinstance(a, str):
        return a
    return fft_rules(a) or plan_from_analysis(a, tile, budget)


def fft_rules(a: ConvAnalysis) -> str | None:
    """Why the FFT engines cannot take the analysed convolution, or None. The rules hold
    for any direction: the backward rewrites need stride 1 and dilation 1 too."""
    geo = a.geo
    if len(geo.filt) != 2:
        return f"the FFT engines take 2-D convolutions, not {len(geo.filt)}-D"
    if a.x.data_type not in FFT_TYPES:
        return f"FFT takes float, half or bfloat16 operands, not {a.x.data_type.name}"
    if any(s != 1 for s in geo.stride):
        return f"FFT needs stride 1, got {list(geo.stride)}"
    if any(d != 1 for d in geo.dilation):
        return f"FFT needs dilation 1, got {list(geo.dilation)}"
    if geo.groups != 1:
        return f"FFT takes one group, got {geo.groups}"
    if a.prologue is not None or a.ep.stats:
        return "the FFT engines fuse no prologue or statistics"
    return None


def plan_from_analysis(a: ConvAnalysis, tile: int, budget: int) -> FftPlan | str:
    """The sizes of the forward cross-correlation ``a`` (which passed ``fft_rules``; pre
    padding may be negative, the image reads past x being zeros) for ``tile`` 0 (whole
    image) or T, with chunks of at most ``budget`` bytes of buffers; or why not."""
    geo = a.geo
    (r, s), (ho, wo) = geo.filt, geo.out_dims
    hp, wp = ho + r - 1, wo + s - 1  # >= r, s: analyze declines empty outputs
    if tile == 0:
        if hp > MAX_FFT_SIZE or wp > MAX_FFT_SIZE:
            return (
                f"FFT transforms the whole padded image: {hp}x{wp} exceeds "
                f"{MAX_FFT_SIZE}x{MAX_FFT_SIZE} (FFT_TILING takes large images)"
            )
        return FftPlan(
            a,
            FK.smooth_length(hp),
            FK.smooth_length(wp),
            (1, 1),
            (ho, wo),
            min(hp, geo.pre[0] + geo.in_dims[0]),
            wp,
            geo.n,
        )
    if r > tile - 1 or s > tile - 1:
        return (
            f"filter {r}x{s} does not fit a {tile}x{tile} FFT tile (at most {tile - 1}x{tile - 1})"
        )
    oth, otw = tile - r + 1, tile - s + 1
    ax = FK.transform(tile)
    one = FftPlan(a, ax, ax, (_cdiv(ho, oth), _cdiv(wo, otw)), (oth, otw), tile, tile, 1)
    b = one.buffers()
    per_plane = 4 * (max(b["RX"], b["Y"]) + max(b["X"], b["RY"]))
    return dataclasses.replace(one, chunk=_chunk_planes(one.planes, per_plane, budget))


def stage_pricer(fp: FftPlan, target: Target) -> tuple:
    """(stage(flops, bytes, peak=transform rate) -> seconds, the 3xTF32 GEMM rate): each
    stage costs its flops at the measured rate or its bytes, whichever takes longer."""
    lanes = max(fp.ax_w.p1 * fp.ax_w.p2, fp.ax_h.p1 * fp.ax_h.p2)
    core = target.peak_flops_fp32 * DFT_EFFICIENCY * min(1.0, DFT_LANES / lanes)
    dot = (
        target.peak_flops_fp16 / 6 if target.is_cuda else target.peak_flops_fp32
    ) * GEMM_EFFICIENCY

    def stage(flops, nbytes, peak=core):
        return max(flops / peak, nbytes / target.bandwidth)

    return stage, dot


def estimate_seconds(fp: FftPlan, target: Target) -> float:
    """Roofline per stage (its flops at the measured transform or 3xTF32 GEMM rate, or its
    bytes, whichever takes longer), summed over the stages, plus the launches. Within
    1.3x of the H100 timings for 8..32-point tiles; the transforms, not the GEMM, are
    what make FFT lose to implicit GEMM on small filters here."""
    geo, isz = fp.a.geo, fp.a.x.data_type.itemsize
    n, c, k, half, bins = fp.n, fp.c, fp.k, fp.half, fp.bins
    (r, s), (h, w), oth = geo.filt, geo.in_dims, fp.out_tile[0]
    fw, fh = fp.ax_w.flops_per_row, fp.ax_h.flops_per_row
    stage, dot = stage_pricer(fp, target)
    pc = fp.chunks * fp.chunk  # planes actually processed
    x_read = isz * min(n * c * h * w, pc * c * fp.in_rows * fp.in_len)
    bm, bn, bc = fp.gemm_blocks()
    gemm_flops = (
        8.0
        * bins
        * fp.chunks
        * (_cdiv(fp.chunk, bm) * bm)
        * (_cdiv(k, bn) * bn)
        * (_cdiv(c, bc) * bc)
    )
    t = (
        stage(k * c * r * fw, isz * k * c * r * s + 8 * k * c * r * half)
        + stage(k * c * half * fh, 8 * k * c * (r * half + bins))
        + stage(pc * c * fp.in_rows * fw, x_read + 8 * pc * c * fp.in_rows * half)
        + stage(pc * c * half * fh, 8 * pc * c * (fp.in_rows * half + bins))
        + stage(gemm_flops, 8 * bins * (pc * c + fp.chunks * k * c + pc * k), dot)
        + stage(pc * k * half * fh, 8 * pc * k * (bins + oth * half))
        + stage(
            pc * k * oth * fw,
            8 * pc * k * oth * half + 4 * n * k * geo.out_dims[0] * geo.out_dims[1],
        )
    )
    return t + LAUNCH_SECONDS * (2 + 5 * fp.chunks)


class FftConvEngine(Engine):
    """CUDNN_CONVOLUTION_FWD_ALGO_FFT: whole-image 2-D FFTs, one complex GEMM per bin."""

    id = 13
    name = "conv_fft"
    behavior_notes = frozenset({BehaviorNote.RUNTIME_COMPILATION})

    def _plan_for(self, graph, tile: int):
        """The plan (or reason) for ``tile`` (0: the whole image); the backward FFT
        engines override it with their rewritten problem."""
        return plan_fft(graph, tile, TILING_WORKSPACE_BUDGET)

    def _plan(self, graph, config: EngineConfig | None = None):
        return self._plan_for(graph, 0)

    def check_support(self, graph, target: Target) -> Support:
        p = self._plan(graph)
        return decline(p) if isinstance(p, str) else SUPPORTED

    def numerical_notes(self, graph, config) -> frozenset:
        p = self._plan(graph)
        if isinstance(p, str):
            return frozenset()
        notes = {NumericalNote.FFT, NumericalNote.TENSOR_CORE}
        if p.a.x.data_type != DataType.FLOAT:
            notes.add(NumericalNote.DOWN_CONVERT_INPUTS)
        return frozenset(notes)

    def configs(self, graph, target: Target) -> list[EngineConfig]:
        return [] if isinstance(self._plan(graph), str) else [EngineConfig.make(self)]

    def workspace_size(self, graph, config, target) -> int:
        return self._plan(graph, config).workspace_bytes

    def estimate_seconds(self, graph, config, target) -> float:
        return estimate_seconds(self._plan(graph, config), target)

    def build(self, graph, config, target) -> Executable:
        return _FftExecutable(graph, self._plan(graph, config), target)


class FftTilingConvEngine(FftConvEngine):
    """CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: overlap-save over T x T tiles (knob TILE)."""

    id = 14
    name = "conv_fft_tiling"

    def _plan(self, graph, config: EngineConfig | None = None):
        tile = config.knob_dict.get("TILE", DEFAULT_TILE) if config else max(TILES)
        return self._plan_for(graph, tile)

    def knob_space(self, graph=None) -> list[Knob]:
        return [Knob("TILE", TILES, DEFAULT_TILE)]

    def configs(self, graph, target: Target) -> list[EngineConfig]:
        out = [EngineConfig.make(self, TILE=t) for t in TILES]
        out = [cfg for cfg in out if not isinstance(self._plan(graph, cfg), str)]
        out.sort(key=lambda cfg: self.estimate_seconds(graph, cfg, target))
        return out

    def check_config(self, graph, config, target) -> Support:
        s = super().check_config(graph, config, target)
        if not s.ok:
            return s
        p = self._plan(graph, config)
        return decline(p) if isinstance(p, str) else SUPPORTED


class _FftExecutable(Executable, LaunchList):
    """Seven kernels: filter rows / columns once, then per chunk of image tiles the image
    rows / columns, the per-bin GEMM, the inverse columns and the inverse rows with the
    epilogue (see the module docstring)."""

    def __init__(self, graph, fp: FftPlan, target: Target):
        LaunchList.__init__(self)
        self.fp = fp
        self.workspace_size = fp.workspace_bytes
        a, geo, cuda = fp.a, fp.a.geo, target.is_cuda
        tag = f"{graph.key()[:12]}_{fp.ax_w.n}"
        f32 = ("ws", torch.float32)
        half, c, k = fp.half, fp.c, fp.k
        r = geo.filt[0]

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

        filt = FK.FilterRows(c, tuple(geo.filt), tuple(a.w.strides), geo.flip)
        rows = k * c * r
        name = f"fft_filter_rows_{tag}"
        rows_launch(
            name,
            FK.forward_rows_source(name, filt, fp.ax_w, half, rows),
            rows,
            fp.ax_w,
            [("buf", a.w.uid), f32],
        )
        name = f"fft_filter_cols_{tag}"
        rows_launch(
            name,
            FK.forward_cols_source(name, fp.ax_h, half, k * c, r),
            k * c * half,
            fp.ax_h,
            [f32, f32],
        )

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
        rows = fp.chunk * c * fp.in_rows
        name = f"fft_image_rows_{tag}"
        rows_launch(
            name,
            FK.forward_rows_source(name, img, fp.ax_w, half, rows),
            rows,
            fp.ax_w,
            [("buf", a.x.uid), f32, ("int", 0)],
        )
        name = f"fft_image_cols_{tag}"
        rows_launch(
            name,
            FK.forward_cols_source(name, fp.ax_h, half, fp.chunk * c, fp.in_rows),
            fp.chunk * c * half,
            fp.ax_h,
            [f32, f32],
        )

        bm, bn, bc = fp.gemm_blocks()
        name = f"fft_gemm_{tag}"
        gemm = _dual(
            FK.gemm_source(name, fp.bins, fp.chunk, c, k, (bm, bn, bc), interpret=False),
            FK.gemm_source(name, fp.bins, fp.chunk, c, k, (bm, bn, bc), interpret=True),
            name,
        )
        self.add_launch(
            gemm,
            (fp.bins, _cdiv(fp.chunk, bm) * _cdiv(k, bn)),
            {"num_warps": NUM_WARPS},
            [f32, f32, f32],
            graph,
            cuda,
        )

        oth = fp.out_tile[0]
        name = f"fft_inverse_cols_{tag}"
        rows_launch(
            name,
            FK.inverse_cols_source(name, fp.ax_h, half, fp.chunk * k, oth),
            fp.chunk * k * half,
            fp.ax_h,
            [f32, f32],
        )

        params, body = epilogue(graph, a, "conv_fprop")
        dst = FK.OutputTiles(k, fp.planes, fp.chunk, fp.tiles, fp.out_tile, tuple(geo.out_dims))
        name = f"fft_inverse_rows_{tag}"
        src = FK.inverse_rows_source(
            name, fp.ax_w, half, 1.0 / (fp.ax_h.n * fp.ax_w.n), dst, params, body
        )
        block_n = min(FK.next_pow2(k), fp.ax_w.rows_per_program(k))
        rows_out = fp.ax_w.rows_per_program(fp.chunk * oth * block_n) // block_n
        rows_out = max(1, min(rows_out, FK.next_pow2(fp.chunk * oth)))
        self.add_launch(
            kernel_from_source(src, name),
            (_cdiv(fp.chunk * oth, rows_out), _cdiv(k, block_n)),
            {"ROWS": rows_out, "BLOCK_N": block_n, "num_warps": NUM_WARPS},
            [f32, ("int", 0)] + fuse_epilogue.launch_args(a.ep),
            graph,
            cuda,
        )

    def run(self, buffers, workspace, stream=None):
        fp = self.fp
        o = fp.regions()
        spec_w, reg_a, reg_b = (workspace[o[i] : o[i + 1]].view(torch.float32) for i in range(3))
        (fr, _), (fc, _), (xr, _), (xc, _), (gm, _), (yc, _), (yr, yargs) = self.launches
        x, w = buffers[fp.a.x.uid], buffers[fp.a.w.uid]
        ep_values = self.values(yargs[2:], buffers, None)
        fr.launch([w, reg_a], stream)
        fc.launch([reg_a, spec_w], stream)
        for q in range(fp.chunks):
            p0 = q * fp.chunk
            xr.launch([x, reg_a, p0], stream)
            xc.launch([reg_a, reg_b], stream)
            gm.launch([reg_b, spec_w, reg_a], stream)
            yc.launch([reg_a, reg_b], stream)
            yr.launch([reg_b, p0] + ep_values, stream)


def _dual(src_compiled: str, src_interpreted: str, name: str) -> DualKernel:
    """One kernel whose compiled and interpreted sources differ (the GEMM's dot
    precision: 3xTF32 compiled, plain float32 in the interpreter)."""
    return DualKernel(
        kernel_from_source(src_compiled, name).compiled,
        kernel_from_source(src_interpreted, name).interpreted,
    )


__all__ = [
    "FftConvEngine",
    "FftTilingConvEngine",
    "plan_fft",
    "FftPlan",
    "fft_rules",
    "plan_from_analysis",
]
