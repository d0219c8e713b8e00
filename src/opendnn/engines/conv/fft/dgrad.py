"""FFT backward data: CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT and ..._FFT_TILING.

At stride 1, dilation 1 and one group the gradient of a cross-correlation is a
cross-correlation. The forward pass reads y[o] = sum_r x[o - pre + r] w[r] (per spatial
axis, channels omitted), so with r' = R - 1 - r:

    dx[n, c, i] = sum_{k, r} dy[n, k, i + pre - r] w[k, c, r]
                = sum_{k, r'} dy[n, k, i - (R - 1 - pre) + r'] w[k, c, R - 1 - r']

a forward cross-correlation of dy (K channels in) with pre padding R - 1 - pre,
producing dx's H x W pixels (C channels out), whose filter is w with its K and C axes
swapped and rotated by 180 degrees. CONVOLUTION mode reads w rotated already, so there
the rewritten filter is w itself: the rewrite toggles the mode. Reads outside dy are
zeros: the dgrad's post padding, and, when pre > R - 1, a negative forward padding (the
FFT image loads mask any row or column outside dy, so it needs no special case).

Both engines run ``fft``'s seven-kernel pipeline on that rewritten problem: the padded
image is dy, of Hp x Wp = (H + R - 1) x (W + S - 1) positions, the filter spectrum is
taken of a strided view of w (the channel strides swapped, no copy), the per-bin GEMM is
Y[f, n, c] = sum_k DY[f, n, k] conj(W'[f, c, k]), and the inverse rows crop to H x W and
run the dgrad's own pointwise epilogue (e.g. relu_backward of the forward input, a scale,
a type conversion) on the float32 tile before the store.

conv_dgrad_fft (engine 20) transforms the whole padded dy (up to 256 x 256, as cuDNN);
conv_dgrad_fft_tiling (engine 21) is overlap-save over T x T tiles of dx (knob TILE:
8, 16, 32; the filter at most T - 1 on each axis). Sizes, workspace, cost model and
declines are the forward's on the rewritten problem, which keeps the dgrad's rank,
stride, dilation and groups (the rules: 2-D, stride 1, dilation 1, one group, float /
half / bfloat16 dy and w); the rewrite only relabels, so it is safe to build first.
Numerical notes: FFT, TENSOR_CORE, and DOWN_CONVERT_INPUTS for half types.
"""

from __future__ import annotations

import functools

from ..analysis import analyze, dgrad_as_forward
from . import engine as fft
from .engine import (
    FftConvEngine,
    FftPlan,
    FftTilingConvEngine,
    fft_rules,
    plan_from_analysis,
)


@functools.lru_cache(maxsize=512)
def plan_fft_dgrad(
    graph, tile: int = 0, budget: int = fft.TILING_WORKSPACE_BUDGET
) -> FftPlan | str:
    """The forward ``FftPlan`` computing the graph's dx, whole image (``tile`` 0) or in
    T x T tiles, or the reason the engine declines."""
    a = analyze(graph, "conv_dgrad")
    if isinstance(a, str):
        return a
    fwd = dgrad_as_forward(a)
    return fft_rules(fwd) or plan_from_analysis(fwd, tile, budget)


class _DgradPlan:
    """Plans the dgrad's rewritten problem instead of a forward convolution."""

    def _plan_for(self, graph, tile: int):
        # the budget is read at call time, as the forward engines do (tests lower it)
        return plan_fft_dgrad(graph, tile, fft.TILING_WORKSPACE_BUDGET)


class FftDgradEngine(_DgradPlan, FftConvEngine):
    """CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT: whole-image 2-D FFTs of dy, one complex GEMM
    per bin, dx cropped from the inverse transform."""

    id = 20
    name = "conv_dgrad_fft"


class FftTilingDgradEngine(_DgradPlan, FftTilingConvEngine):
    """CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING: overlap-save over T x T tiles of dx
    (knob TILE)."""

    id = 21
    name = "conv_dgrad_fft_tiling"


__all__ = ["FftDgradEngine", "FftTilingDgradEngine", "plan_fft_dgrad"]
