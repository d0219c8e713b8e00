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
towards 1. A layout-transform plan counts for its inner engine's key (``:tf32`` when the
inner problem is float32 on a TMA path). Rerun it when a cost model or an engine's kernels
change.
"""

from __future__ import annotations

# family (or engine name) -> measured / modelled time, H100, fitted by bench/calibrate.py
MEASURED_SCALES: dict[str, float] = {
    "conv_depthwise": 0.63,  # 34 timings
    "conv_depthwise:nchw": 1.22,  # 92 timings
    "conv_depthwise:strip": 0.61,  # 229 timings
    "conv_depthwise:taps25:nchw": 1.95,  # 104 timings
    "conv_dgrad_depthwise": 1.29,  # 241 timings
    "conv_dgrad_depthwise:nchw": 1.49,  # 92 timings
    "conv_dgrad_depthwise:taps25:nchw": 2.54,  # 104 timings
    "conv_dgrad_gemm": 1.01,  # 2 timings
    "conv_dgrad_gemm:nchw": 1.19,  # 16 timings
    "conv_dgrad_gemm:nchw:fp32": 1.01,  # 14 timings
    "conv_dgrad_gemm:rows": 0.85,  # 22 timings
    "conv_dgrad_gemm_nchw": 1.18,  # 10 timings
    "conv_dgrad_gemm_nchw:fp32": 0.90,  # 28 timings
    "conv_dgrad_grouped": 1.07,  # 43 timings
    "conv_dgrad_grouped:nchw": 1.99,  # 41 timings
    "conv_dgrad_implicit_gemm:gather": 0.94,  # 146 timings
    "conv_dgrad_implicit_gemm:gather:nchw": 0.57,  # 67 timings
    "conv_dgrad_implicit_gemm:gather:phases": 1.01,  # 15 timings
    "conv_dgrad_implicit_gemm:tma": 0.93,  # 84 timings
    "conv_dgrad_implicit_gemm:tma:flat": 0.88,  # 20 timings
    "conv_dgrad_implicit_gemm:tma:flat:split": 0.93,  # 4 timings
    "conv_dgrad_implicit_gemm:tma:split": 1.01,  # 8 timings
    "conv_dgrad_implicit_gemm:tma:split:tf32": 1.13,  # 7 timings
    "conv_dgrad_implicit_gemm:tma:tf32": 0.99,  # 20 timings
    "conv_dgrad_patchify": 0.94,  # 13 timings
    "conv_dgrad_patchify:nchw": 1.22,  # 23 timings
    "conv_dgrad_splitk:gather": 1.62,  # 79 timings
    "conv_dgrad_splitk:gather:nchw": 1.29,  # 4 timings
    "conv_dgrad_winograd_nonfused": 1.02,  # 10 timings
    "conv_direct:gather": 2.37,  # 13 timings
    "conv_direct:gather:nchw": 2.98,  # 11 timings
    "conv_gemm:nchw": 1.34,  # 48 timings
    "conv_gemm:nchw:fp32": 0.95,  # 28 timings
    "conv_gemm:rows": 0.96,  # 51 timings
    "conv_gemm_nchw": 1.38,  # 26 timings
    "conv_gemm_nchw:fp32": 0.81,  # 23 timings
    "conv_grouped": 0.83,  # 44 timings
    "conv_grouped:nchw": 2.01,  # 33 timings
    "conv_implicit_gemm:gather": 1.00,  # 155 timings
    "conv_implicit_gemm:gather:nchw": 0.84,  # 39 timings
    "conv_implicit_gemm:tma": 1.20,  # 77 timings
    "conv_implicit_gemm:tma:flat": 0.95,  # 19 timings
    "conv_implicit_gemm:tma:flat:split": 0.97,  # 3 timings
    "conv_implicit_gemm:tma:nchw": 1.64,  # 7 timings
    "conv_implicit_gemm:tma:split": 0.98,  # 11 timings
    "conv_implicit_gemm:tma:split:tf32": 0.98,  # 9 timings
    "conv_implicit_gemm:tma:tf32": 1.25,  # 25 timings
    "conv_implicit_precomp_gemm:gather": 1.30,  # 33 timings
    "conv_implicit_precomp_gemm:gather:nchw": 0.51,  # 27 timings
    "conv_patchify": 0.94,  # 9 timings
    "conv_patchify:nchw": 1.06,  # 24 timings
    "conv_wgrad_depthwise": 0.63,  # 55 timings
    "conv_wgrad_depthwise:nchw": 0.91,  # 100 timings
    "conv_wgrad_depthwise:strip": 0.58,  # 174 timings
    "conv_wgrad_depthwise:taps25:nchw": 1.61,  # 114 timings
    "conv_wgrad_gemm": 1.04,  # 210 timings
    "conv_wgrad_grouped": 0.85,  # 45 timings
    "conv_wgrad_grouped:nchw": 1.27,  # 59 timings
    "conv_wgrad_implicit_gemm:gather": 1.18,  # 50 timings
    "conv_wgrad_implicit_gemm:gather:nchw": 1.21,  # 5 timings
    "conv_wgrad_implicit_gemm:tma": 1.06,  # 109 timings
    "conv_wgrad_implicit_gemm:tma:flat": 1.03,  # 47 timings
    "conv_wgrad_implicit_gemm:tma:tf32": 1.43,  # 52 timings
    "conv_wgrad_patchify": 1.03,  # 9 timings
    "conv_wgrad_patchify:nchw": 1.15,  # 18 timings
    "conv_wgrad_precomp:gather": 2.69,  # 5 timings
    "conv_wgrad_precomp:gather:nchw": 2.04,  # 8 timings
    "conv_wgrad_splitk:gather": 1.56,  # 6 timings
    "conv_wgrad_splitk:gather:nchw": 0.80,  # 20 timings
    "conv_wgrad_winograd_nonfused": 1.16,  # 9 timings
    "conv_winograd4x4_nonfused": 1.02,  # 5 timings
    "conv_winograd_nonfused": 0.88,  # 7 timings
}


def measured_scale(key: str, name: str) -> float:
    """The factor of calibration ``key`` (a code path, ``Engine.calibration_key``) of engine
    ``name``: the key's own, else its code path's without a ``:nchw`` qualifier, else the
    engine's (1: not calibrated)."""
    for k in (key, key.removesuffix(":nchw"), name):
        if k in MEASURED_SCALES:
            return MEASURED_SCALES[k]
    return 1.0
