"""Measured calibration of the engines' cost models on a GPU.

An engine's ``estimate_seconds`` is a roofline: FLOPs, bytes, tile quantization and the
main loop's step latency. Engines that share a roofline still differ by what it leaves
out -- index tables, atomics, transposed operand loads, a second kernel -- and that shows
as a steady ratio between an engine's measured times and its model. ``MEASURED_SCALES``
holds that ratio per code path (``Engine.family``; an engine's name covers all its
paths; a convolution engine's key adds ``:nchw`` when its image has NCHW strides, since
its model leaves out how much a strided layout costs each path), relative to the forward
implicit GEMM's gather path (1.0). The heuristics rank by
the model times this factor (``Engine.ranked_seconds``).

The factors come from ``bench/calibrate.py``: it rebuilds every row of the committed conv
results (the find's timings of its top candidates per layer, H100), and fits
log(measured) = log(model) + row + family by least squares (a row's own offset absorbs
what the model gets wrong about the whole layer), shrinking families seen in few rows
towards 1. A layout-transform plan has a key of its own, outer/inner (the inner engine's
key after the slash, ``:tf32`` when the inner problem is float32 on a TMA path): its model
already holds the inner factor, so its factor is what the copies and the strided epilogue
add. Rerun it when a cost model or an engine's kernels change.
"""

from __future__ import annotations

# family (or engine name) -> measured / modelled time, H100, fitted by bench/calibrate.py
MEASURED_SCALES: dict[str, float] = {
    "conv_depthwise": 0.68,  # 33 timings
    "conv_depthwise:nchw": 0.90,  # 82 timings
    "conv_depthwise:strip": 0.68,  # 132 timings
    "conv_depthwise:strip:nchw": 0.93,  # 30 timings
    "conv_depthwise:strip:taps25:nchw": 0.94,  # 27 timings
    "conv_depthwise:taps25:nchw": 1.21,  # 46 timings
    "conv_depthwise:taps49:nchw": 1.59,  # 28 timings
    "conv_dgrad_channels_last/conv_dgrad_col2im": 0.97,  # 1 timings
    "conv_dgrad_channels_last/conv_dgrad_depthwise": 0.93,  # 67 timings
    "conv_dgrad_channels_last/conv_dgrad_gemm:rows": 0.88,  # 7 timings
    "conv_dgrad_channels_last/conv_dgrad_grouped": 0.92,  # 22 timings
    "conv_dgrad_channels_last/conv_dgrad_implicit_gemm:gather": 0.87,  # 50 timings
    "conv_dgrad_channels_last/conv_dgrad_implicit_gemm:gather:phases": 0.89,  # 5 timings
    "conv_dgrad_channels_last/conv_dgrad_implicit_gemm:tma": 0.78,  # 13 timings
    "conv_dgrad_channels_last/conv_dgrad_implicit_gemm:tma:flat": 0.88,  # 3 timings
    "conv_dgrad_channels_last/conv_dgrad_implicit_gemm:tma:flat:split": 0.93,  # 1 timings
    "conv_dgrad_channels_last/conv_dgrad_implicit_gemm:tma:split": 0.98,  # 2 timings
    "conv_dgrad_channels_last/conv_dgrad_implicit_gemm:tma:split:tf32": 0.99,  # 1 timings
    "conv_dgrad_channels_last/conv_dgrad_implicit_gemm:tma:tf32": 0.87,  # 11 timings
    "conv_dgrad_channels_last/conv_dgrad_patchify": 0.86,  # 1 timings
    "conv_dgrad_channels_last/conv_dgrad_splitk:gather": 0.86,  # 22 timings
    "conv_dgrad_channels_last:direct/conv_dgrad_col2im": 0.95,  # 2 timings
    "conv_dgrad_channels_last:direct/conv_dgrad_depthwise": 1.60,  # 69 timings
    "conv_dgrad_channels_last:direct/conv_dgrad_gemm": 0.93,  # 7 timings
    "conv_dgrad_channels_last:direct/conv_dgrad_gemm_nchw:fp32": 0.99,  # 8 timings
    "conv_dgrad_channels_last:direct/conv_dgrad_implicit_gemm:gather": 0.92,  # 34 timings
    "conv_dgrad_channels_last:direct/conv_dgrad_implicit_gemm:gather:phases": 1.02,  # 5 timings
    "conv_dgrad_channels_last:direct/conv_dgrad_implicit_gemm:tma": 0.89,  # 15 timings
    "conv_dgrad_channels_last:direct/conv_dgrad_implicit_gemm:tma:flat": 0.93,  # 4 timings
    "conv_dgrad_channels_last:direct/conv_dgrad_implicit_gemm:tma:flat:split": 0.98,  # 1 timings
    "conv_dgrad_channels_last:direct/conv_dgrad_implicit_gemm:tma:split": 1.00,  # 2 timings
    "conv_dgrad_channels_last:direct/conv_dgrad_implicit_gemm:tma:split:tf32": 0.98,  # 4 timings
    "conv_dgrad_channels_last:direct/conv_dgrad_implicit_gemm:tma:tf32": 0.97,  # 18 timings
    "conv_dgrad_channels_last:direct/conv_dgrad_patchify": 1.00,  # 6 timings
    "conv_dgrad_channels_last:direct/conv_dgrad_splitk:gather": 0.84,  # 24 timings
    "conv_dgrad_channels_last:direct/conv_dgrad_winograd_nonfused": 0.98,  # 1 timings
    "conv_dgrad_col2im": 0.76,  # 9 timings
    "conv_dgrad_depthwise": 0.71,  # 143 timings
    "conv_dgrad_depthwise:nchw": 1.10,  # 82 timings
    "conv_dgrad_depthwise:taps25:nchw": 1.42,  # 63 timings
    "conv_dgrad_depthwise:taps49:nchw": 2.58,  # 28 timings
    "conv_dgrad_gemm:nchw": 1.21,  # 12 timings
    "conv_dgrad_gemm:nchw:fp32": 1.06,  # 17 timings
    "conv_dgrad_gemm:rows": 0.94,  # 15 timings
    "conv_dgrad_gemm_nchw": 1.20,  # 15 timings
    "conv_dgrad_gemm_nchw:fp32": 0.84,  # 23 timings
    "conv_dgrad_grouped": 1.02,  # 21 timings
    "conv_dgrad_grouped:nchw": 2.05,  # 32 timings
    "conv_dgrad_grouped:nchw:fp32": 1.04,  # 9 timings
    "conv_dgrad_implicit_gemm:gather": 1.02,  # 58 timings
    "conv_dgrad_implicit_gemm:gather:nchw": 0.62,  # 61 timings
    "conv_dgrad_implicit_gemm:gather:phases": 1.06,  # 3 timings
    "conv_dgrad_implicit_gemm:tma": 1.08,  # 58 timings
    "conv_dgrad_implicit_gemm:tma:flat": 1.03,  # 14 timings
    "conv_dgrad_implicit_gemm:tma:flat:split": 1.05,  # 2 timings
    "conv_dgrad_implicit_gemm:tma:split": 1.02,  # 7 timings
    "conv_dgrad_patchify": 0.98,  # 12 timings
    "conv_dgrad_patchify:nchw": 1.42,  # 17 timings
    "conv_dgrad_splitk:gather": 1.75,  # 22 timings
    "conv_dgrad_splitk:gather:nchw": 1.35,  # 5 timings
    "conv_dgrad_winograd_nonfused": 0.95,  # 8 timings
    "conv_direct:gather": 2.40,  # 4 timings
    "conv_direct:gather:nchw": 2.44,  # 10 timings
    "conv_fprop_channels_last/conv_depthwise:strip": 0.66,  # 70 timings
    "conv_fprop_channels_last/conv_direct:gather": 1.13,  # 5 timings
    "conv_fprop_channels_last/conv_gemm:rows": 0.83,  # 13 timings
    "conv_fprop_channels_last/conv_grouped": 0.77,  # 24 timings
    "conv_fprop_channels_last/conv_implicit_gemm:gather": 0.90,  # 60 timings
    "conv_fprop_channels_last/conv_implicit_gemm:tma": 0.92,  # 17 timings
    "conv_fprop_channels_last/conv_implicit_gemm:tma:flat": 0.84,  # 6 timings
    "conv_fprop_channels_last/conv_implicit_gemm:tma:flat:split": 0.94,  # 1 timings
    "conv_fprop_channels_last/conv_implicit_gemm:tma:split": 0.94,  # 3 timings
    "conv_fprop_channels_last/conv_implicit_gemm:tma:split:tf32": 0.93,  # 4 timings
    "conv_fprop_channels_last/conv_implicit_gemm:tma:tf32": 1.19,  # 17 timings
    "conv_fprop_channels_last/conv_implicit_precomp_gemm:gather": 0.84,  # 14 timings
    "conv_fprop_channels_last:direct/conv_depthwise:strip": 0.97,  # 17 timings
    "conv_fprop_channels_last:direct/conv_gemm": 0.93,  # 12 timings
    "conv_fprop_channels_last:direct/conv_gemm_nchw:fp32": 1.10,  # 11 timings
    "conv_fprop_channels_last:direct/conv_implicit_gemm:gather": 1.01,  # 26 timings
    "conv_fprop_channels_last:direct/conv_implicit_gemm:tma": 0.99,  # 11 timings
    "conv_fprop_channels_last:direct/conv_implicit_gemm:tma:flat": 0.88,  # 4 timings
    "conv_fprop_channels_last:direct/conv_implicit_gemm:tma:split": 0.96,  # 3 timings
    "conv_fprop_channels_last:direct/conv_implicit_gemm:tma:split:tf32": 0.99,  # 5 timings
    "conv_fprop_channels_last:direct/conv_implicit_gemm:tma:tf32": 1.18,  # 14 timings
    "conv_fprop_channels_last:direct/conv_implicit_precomp_gemm:gather": 1.12,  # 7 timings
    "conv_fprop_channels_last:direct/conv_patchify": 1.07,  # 4 timings
    "conv_fprop_channels_last:direct/conv_winograd4x4_nonfused": 0.96,  # 2 timings
    "conv_fprop_channels_last:direct/conv_winograd_nonfused": 0.93,  # 3 timings
    "conv_gemm:nchw": 1.15,  # 44 timings
    "conv_gemm:nchw:fp32": 0.88,  # 28 timings
    "conv_gemm:rows": 0.97,  # 40 timings
    "conv_gemm_nchw": 1.16,  # 24 timings
    "conv_gemm_nchw:fp32": 0.76,  # 19 timings
    "conv_grouped": 0.97,  # 20 timings
    "conv_grouped:nchw": 2.07,  # 31 timings
    "conv_grouped:nchw:fp32": 0.95,  # 2 timings
    "conv_implicit_gemm:gather": 1.00,  # 76 timings
    "conv_implicit_gemm:gather:nchw": 0.95,  # 35 timings
    "conv_implicit_gemm:tma": 1.21,  # 47 timings
    "conv_implicit_gemm:tma:flat": 0.98,  # 11 timings
    "conv_implicit_gemm:tma:flat:split": 1.00,  # 2 timings
    "conv_implicit_gemm:tma:nchw": 1.49,  # 7 timings
    "conv_implicit_gemm:tma:split": 1.01,  # 5 timings
    "conv_implicit_precomp_gemm:gather": 1.31,  # 7 timings
    "conv_implicit_precomp_gemm:gather:nchw": 0.64,  # 27 timings
    "conv_patchify": 0.93,  # 9 timings
    "conv_patchify:nchw": 1.32,  # 18 timings
    "conv_wgrad_channels_last/conv_wgrad_depthwise:strip": 0.75,  # 77 timings
    "conv_wgrad_channels_last/conv_wgrad_gemm": 0.95,  # 37 timings
    "conv_wgrad_channels_last/conv_wgrad_grouped": 0.91,  # 9 timings
    "conv_wgrad_channels_last/conv_wgrad_implicit_gemm:gather": 0.76,  # 12 timings
    "conv_wgrad_channels_last/conv_wgrad_implicit_gemm:tma": 0.91,  # 25 timings
    "conv_wgrad_channels_last/conv_wgrad_implicit_gemm:tma:flat": 0.97,  # 10 timings
    "conv_wgrad_channels_last/conv_wgrad_implicit_gemm:tma:tf32": 1.31,  # 28 timings
    "conv_wgrad_channels_last/conv_wgrad_patchify": 1.09,  # 2 timings
    "conv_wgrad_channels_last/conv_wgrad_precomp:gather": 1.25,  # 1 timings
    "conv_wgrad_channels_last/conv_wgrad_winograd_nonfused": 0.97,  # 3 timings
    "conv_wgrad_channels_last:direct/conv_wgrad_depthwise:strip": 0.80,  # 25 timings
    "conv_wgrad_channels_last:direct/conv_wgrad_gemm": 1.08,  # 20 timings
    "conv_wgrad_channels_last:direct/conv_wgrad_implicit_gemm:tma": 0.96,  # 12 timings
    "conv_wgrad_channels_last:direct/conv_wgrad_implicit_gemm:tma:flat": 1.03,  # 4 timings
    "conv_wgrad_channels_last:direct/conv_wgrad_implicit_gemm:tma:tf32": 1.35,  # 25 timings
    "conv_wgrad_channels_last:direct/conv_wgrad_patchify": 1.11,  # 3 timings
    "conv_wgrad_channels_last:direct/conv_wgrad_precomp:gather": 1.26,  # 1 timings
    "conv_wgrad_channels_last:direct/conv_wgrad_splitk:gather": 1.03,  # 1 timings
    "conv_wgrad_channels_last:direct/conv_wgrad_winograd_nonfused": 1.04,  # 3 timings
    "conv_wgrad_depthwise": 0.62,  # 54 timings
    "conv_wgrad_depthwise:nchw": 0.88,  # 100 timings
    "conv_wgrad_depthwise:strip": 0.57,  # 75 timings
    "conv_wgrad_depthwise:taps25:nchw": 1.40,  # 78 timings
    "conv_wgrad_depthwise:taps49:nchw": 1.75,  # 34 timings
    "conv_wgrad_gemm": 0.96,  # 148 timings
    "conv_wgrad_grouped": 0.84,  # 36 timings
    "conv_wgrad_grouped:nchw": 0.99,  # 23 timings
    "conv_wgrad_grouped:nchw:fp32": 1.03,  # 36 timings
    "conv_wgrad_implicit_gemm:gather": 1.26,  # 33 timings
    "conv_wgrad_implicit_gemm:gather:nchw": 0.91,  # 4 timings
    "conv_wgrad_implicit_gemm:tma": 1.04,  # 75 timings
    "conv_wgrad_implicit_gemm:tma:flat": 0.97,  # 34 timings
    "conv_wgrad_patchify": 0.90,  # 6 timings
    "conv_wgrad_patchify:nchw": 1.06,  # 18 timings
    "conv_wgrad_precomp:gather": 1.98,  # 3 timings
    "conv_wgrad_precomp:gather:nchw": 1.28,  # 3 timings
    "conv_wgrad_splitk:gather": 1.50,  # 6 timings
    "conv_wgrad_splitk:gather:nchw": 0.71,  # 24 timings
    "conv_wgrad_winograd_nonfused": 1.04,  # 13 timings
    "conv_winograd4x4_nonfused": 0.99,  # 5 timings
    "conv_winograd_nonfused": 0.86,  # 6 timings
}


def measured_scale(key: str, name: str) -> float:
    """The factor of calibration ``key`` (a code path, ``Engine.calibration_key``) of engine
    ``name``: the key's own, else its code path's without a ``:nchw`` qualifier, else the
    engine's (1: not calibrated)."""
    for k in (key, key.removesuffix(":nchw"), name):
        if k in MEASURED_SCALES:
            return MEASURED_SCALES[k]
    return 1.0
