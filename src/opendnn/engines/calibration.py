"""Measured calibration of the engines' cost models on a GPU.

An engine's ``estimate_seconds`` is a roofline: FLOPs, bytes, tile quantization and the
main loop's step latency. Engines that share a roofline still differ by what it leaves
out -- index tables, atomics, transposed operand loads, a second kernel -- and that shows
as a steady ratio between an engine's measured times and its model. ``MEASURED_SCALES``
holds that ratio per code path (``Engine.family``; an engine's name covers all its
paths), relative to the forward implicit GEMM's gather path (1.0). The heuristics rank by
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
    "conv_depthwise": 2.88,  # 231 timings
    "conv_depthwise:strip": 2.66,  # 138 timings
    "conv_dgrad_depthwise": 2.51,  # 349 timings
    "conv_dgrad_grouped": 1.40,  # 62 timings
    "conv_dgrad_implicit_gemm:gather": 0.58,  # 190 timings
    "conv_dgrad_implicit_gemm:tma": 0.96,  # 31 timings
    "conv_dgrad_implicit_gemm:tma:flat": 0.91,  # 5 timings
    "conv_dgrad_implicit_gemm:tma:flat:split": 1.01,  # 1 timings
    "conv_dgrad_implicit_gemm:tma:split": 0.95,  # 3 timings
    "conv_dgrad_patchify": 1.04,  # 35 timings
    "conv_dgrad_splitk:gather": 1.08,  # 9 timings
    "conv_dgrad_winograd_nonfused": 0.68,  # 16 timings
    "conv_direct:gather": 5.06,  # 15 timings
    "conv_gemm": 1.37,  # 117 timings
    "conv_grouped": 2.20,  # 53 timings
    "conv_implicit_gemm:gather": 1.00,  # 168 timings
    "conv_implicit_gemm:tma": 1.53,  # 40 timings
    "conv_implicit_gemm:tma:flat": 1.03,  # 4 timings
    "conv_implicit_gemm:tma:flat:split": 1.07,  # 1 timings
    "conv_implicit_gemm:tma:split": 1.05,  # 2 timings
    "conv_implicit_precomp_gemm:gather": 0.95,  # 21 timings
    "conv_patchify": 1.03,  # 33 timings
    "conv_wgrad_depthwise": 2.72,  # 308 timings
    "conv_wgrad_depthwise:strip": 2.41,  # 138 timings
    "conv_wgrad_gemm": 0.82,  # 177 timings
    "conv_wgrad_grouped": 1.04,  # 95 timings
    "conv_wgrad_implicit_gemm:gather": 0.85,  # 29 timings
    "conv_wgrad_implicit_gemm:tma": 1.02,  # 44 timings
    "conv_wgrad_implicit_gemm:tma:flat": 1.02,  # 61 timings
    "conv_wgrad_patchify": 0.99,  # 25 timings
    "conv_wgrad_precomp:gather": 2.72,  # 15 timings
    "conv_wgrad_splitk:gather": 1.25,  # 5 timings
    "conv_wgrad_winograd_nonfused": 1.08,  # 40 timings
    "conv_winograd4x4_nonfused": 1.08,  # 25 timings
    "conv_winograd_nonfused": 0.93,  # 10 timings
}


def measured_scale(family: str, name: str) -> float:
    """The factor of code path ``family`` of engine ``name`` (1: not calibrated)."""
    return MEASURED_SCALES.get(family, MEASURED_SCALES.get(name, 1.0))
