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
    "conv_depthwise": 1.20,  # 286 timings
    "conv_dgrad_depthwise": 2.12,  # 282 timings
    "conv_dgrad_grouped": 1.72,  # 87 timings
    "conv_dgrad_implicit_gemm:gather": 0.63,  # 206 timings
    "conv_dgrad_implicit_gemm:tma": 1.11,  # 42 timings
    "conv_dgrad_implicit_gemm:tma:flat": 0.99,  # 5 timings
    "conv_dgrad_implicit_gemm:tma:flat:split": 1.06,  # 1 timings
    "conv_dgrad_implicit_gemm:tma:split": 1.06,  # 3 timings
    "conv_dgrad_splitk:gather": 3.30,  # 55 timings
    "conv_direct:gather": 3.98,  # 125 timings
    "conv_gemm": 1.30,  # 23 timings
    "conv_grouped": 2.39,  # 80 timings
    "conv_implicit_gemm:gather": 1.00,  # 206 timings
    "conv_implicit_gemm:tma": 1.45,  # 30 timings
    "conv_implicit_gemm:tma:flat": 1.02,  # 4 timings
    "conv_implicit_gemm:tma:flat:split": 1.06,  # 1 timings
    "conv_implicit_gemm:tma:split": 1.04,  # 2 timings
    "conv_implicit_precomp_gemm:gather": 0.94,  # 23 timings
    "conv_wgrad_depthwise": 3.21,  # 390 timings
    "conv_wgrad_gemm": 0.94,  # 4 timings
    "conv_wgrad_grouped": 0.90,  # 75 timings
    "conv_wgrad_implicit_gemm:gather": 0.93,  # 84 timings
    "conv_wgrad_implicit_gemm:tma": 1.16,  # 31 timings
    "conv_wgrad_implicit_gemm:tma:flat": 1.18,  # 57 timings
    "conv_wgrad_precomp:gather": 3.05,  # 40 timings
    "conv_wgrad_splitk:gather": 2.26,  # 20 timings
    "conv_wgrad_winograd_nonfused": 0.89,  # 2 timings
    "conv_winograd4x4_nonfused": 0.78,  # 1 timings
    "conv_winograd_nonfused": 0.77,  # 1 timings
}


def measured_scale(family: str, name: str) -> float:
    """The factor of code path ``family`` of engine ``name`` (1: not calibrated)."""
    return MEASURED_SCALES.get(family, MEASURED_SCALES.get(name, 1.0))
