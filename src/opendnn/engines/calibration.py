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
towards 1. A layout-transform plan is ranked by its inner engine's factor. Rerun it when a cost model or an engine's kernels change.
"""

from __future__ import annotations

# family (or engine name) -> measured / modelled time, H100, fitted by bench/calibrate.py
MEASURED_SCALES: dict[str, float] = {
    "conv_depthwise": 0.75,  # 31 timings
    "conv_depthwise:nchw": 1.41,  # 96 timings
    "conv_depthwise:strip": 0.74,  # 138 timings
    "conv_depthwise:taps25:nchw": 2.25,  # 104 timings
    "conv_dgrad_depthwise": 1.14,  # 149 timings
    "conv_dgrad_depthwise:nchw": 1.28,  # 96 timings
    "conv_dgrad_depthwise:taps25:nchw": 2.27,  # 104 timings
    "conv_dgrad_grouped": 0.82,  # 21 timings
    "conv_dgrad_grouped:nchw": 1.55,  # 41 timings
    "conv_dgrad_implicit_gemm:gather": 0.71,  # 105 timings
    "conv_dgrad_implicit_gemm:gather:nchw": 0.52,  # 66 timings
    "conv_dgrad_implicit_gemm:gather:phases": 0.98,  # 1 timings
    "conv_dgrad_implicit_gemm:tma": 0.99,  # 44 timings
    "conv_dgrad_implicit_gemm:tma:flat": 0.94,  # 5 timings
    "conv_dgrad_implicit_gemm:tma:flat:split": 1.01,  # 1 timings
    "conv_dgrad_implicit_gemm:tma:split": 0.98,  # 3 timings
    "conv_dgrad_gemm:nchw": 1.21,  # 14 timings
    "conv_dgrad_gemm:nchw:fp32": 1.08,  # 13 timings
    "conv_dgrad_gemm:rows": 0.88,  # 13 timings
    "conv_dgrad_gemm_nchw": 1.25,  # 15 timings
    "conv_dgrad_gemm_nchw:fp32": 0.94,  # 24 timings
    "conv_dgrad_patchify": 0.91,  # 12 timings
    "conv_dgrad_patchify:nchw": 1.10,  # 23 timings
    "conv_dgrad_splitk:gather": 1.16,  # 13 timings
    "conv_dgrad_splitk:gather:nchw": 2.03,  # 11 timings
    "conv_dgrad_winograd_nonfused": 0.80,  # 16 timings
    "conv_direct:gather": 1.47,  # 1 timings
    "conv_direct:gather:nchw": 3.65,  # 14 timings
    "conv_gemm": 1.24,  # 116 timings
    "conv_gemm:nchw": 1.07,  # 25 timings
    "conv_gemm:nchw:fp32": 0.97,  # 21 timings
    "conv_gemm:rows": 0.96,  # 39 timings
    "conv_gemm_nchw": 1.14,  # 65 timings
    "conv_gemm_nchw:fp32": 0.88,  # 39 timings
    "conv_grouped": 0.95,  # 20 timings
    "conv_grouped:nchw": 2.04,  # 33 timings
    "conv_implicit_gemm:gather": 1.00,  # 127 timings
    "conv_implicit_gemm:gather:nchw": 0.82,  # 49 timings
    "conv_implicit_gemm:tma": 1.12,  # 25 timings
    "conv_implicit_gemm:tma:flat": 0.98,  # 4 timings
    "conv_implicit_gemm:tma:flat:split": 1.03,  # 1 timings
    "conv_implicit_gemm:tma:nchw": 1.57,  # 15 timings
    "conv_implicit_gemm:tma:split": 0.96,  # 2 timings
    "conv_implicit_precomp_gemm:gather": 1.18,  # 13 timings
    "conv_implicit_precomp_gemm:gather:nchw": 0.55,  # 9 timings
    "conv_patchify": 0.92,  # 9 timings
    "conv_patchify:nchw": 0.97,  # 24 timings
    "conv_wgrad_depthwise": 0.91,  # 13 timings
    "conv_wgrad_depthwise:nchw": 1.25,  # 142 timings
    "conv_wgrad_depthwise:strip": 0.91,  # 138 timings
    "conv_wgrad_depthwise:taps25:nchw": 2.02,  # 153 timings
    "conv_wgrad_gemm": 0.81,  # 154 timings
    "conv_wgrad_grouped": 0.69,  # 36 timings
    "conv_wgrad_grouped:nchw": 1.00,  # 59 timings
    "conv_wgrad_implicit_gemm:gather": 0.81,  # 18 timings
    "conv_wgrad_implicit_gemm:gather:nchw": 0.78,  # 7 timings
    "conv_wgrad_implicit_gemm:tma": 0.89,  # 71 timings
    "conv_wgrad_implicit_gemm:tma:flat": 0.89,  # 61 timings
    "conv_wgrad_patchify": 0.97,  # 2 timings
    "conv_wgrad_patchify:nchw": 0.86,  # 23 timings
    "conv_wgrad_precomp:gather": 2.13,  # 12 timings
    "conv_wgrad_precomp:gather:nchw": 1.34,  # 1 timings
    "conv_wgrad_splitk:gather": 1.28,  # 4 timings
    "conv_wgrad_splitk:gather:nchw": 0.68,  # 2 timings
    "conv_wgrad_winograd_nonfused": 1.01,  # 40 timings
    "conv_winograd4x4_nonfused": 1.01,  # 25 timings
    "conv_winograd_nonfused": 0.88,  # 10 timings
}


def measured_scale(key: str, name: str) -> float:
    """The factor of calibration ``key`` (a code path, ``Engine.calibration_key``) of engine
    ``name``: the key's own, else its code path's without a ``:nchw`` qualifier, else the
    engine's (1: not calibrated)."""
    for k in (key, key.removesuffix(":nchw"), name):
        if k in MEASURED_SCALES:
            return MEASURED_SCALES[k]
    return 1.0
