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
    "conv_depthwise": 1.04,  # 293 timings
    "conv_depthwise:strip": 0.88,  # 27 timings
    "conv_dgrad_depthwise": 1.53,  # 313 timings
    "conv_dgrad_grouped": 1.51,  # 87 timings
    "conv_dgrad_implicit_gemm:gather": 0.57,  # 234 timings
    "conv_dgrad_implicit_gemm:tma": 1.00,  # 42 timings
    "conv_dgrad_implicit_gemm:tma:flat": 0.93,  # 5 timings
    "conv_dgrad_implicit_gemm:tma:flat:split": 1.02,  # 1 timings
    "conv_dgrad_implicit_gemm:tma:split": 0.99,  # 3 timings
    "conv_dgrad_splitk:gather": 2.71,  # 50 timings
    "conv_direct:gather": 3.81,  # 112 timings
    "conv_gemm": 1.18,  # 25 timings
    "conv_grouped": 2.30,  # 80 timings
    "conv_implicit_gemm:gather": 1.00,  # 241 timings
    "conv_implicit_gemm:tma": 1.42,  # 30 timings
    "conv_implicit_gemm:tma:flat": 1.00,  # 4 timings
    "conv_implicit_gemm:tma:flat:split": 1.05,  # 1 timings
    "conv_implicit_gemm:tma:split": 1.02,  # 2 timings
    "conv_implicit_precomp_gemm:gather": 0.92,  # 23 timings
    "conv_wgrad_depthwise": 1.86,  # 403 timings
    "conv_wgrad_depthwise:strip": 1.15,  # 25 timings
    "conv_wgrad_gemm": 0.97,  # 12 timings
    "conv_wgrad_grouped": 0.74,  # 75 timings
    "conv_wgrad_implicit_gemm:gather": 0.72,  # 107 timings
    "conv_wgrad_implicit_gemm:tma": 1.00,  # 31 timings
    "conv_wgrad_implicit_gemm:tma:flat": 1.01,  # 57 timings
    "conv_wgrad_precomp:gather": 2.56,  # 40 timings
    "conv_wgrad_splitk:gather": 1.92,  # 20 timings
    "conv_wgrad_winograd_nonfused": 0.84,  # 2 timings
    "conv_winograd4x4_nonfused": 0.77,  # 1 timings
    "conv_winograd_nonfused": 0.76,  # 1 timings
}


def measured_scale(family: str, name: str) -> float:
    """The factor of code path ``family`` of engine ``name`` (1: not calibrated)."""
    return MEASURED_SCALES.get(family, MEASURED_SCALES.get(name, 1.0))
