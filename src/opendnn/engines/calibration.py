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
    "conv_depthwise": 2.09,  # 231 timings
    "conv_depthwise:strip": 2.04,  # 138 timings
    "conv_dgrad_depthwise": 2.17,  # 349 timings
    "conv_dgrad_grouped": 1.36,  # 62 timings
    "conv_dgrad_implicit_gemm:gather": 0.34,  # 190 timings
    "conv_dgrad_implicit_gemm:tma": 0.71,  # 31 timings
    "conv_dgrad_implicit_gemm:tma:flat": 0.73,  # 5 timings
    "conv_dgrad_implicit_gemm:tma:flat:split": 0.93,  # 1 timings
    "conv_dgrad_implicit_gemm:tma:split": 0.79,  # 3 timings
    "conv_dgrad_patchify": 0.98,  # 35 timings
    "conv_dgrad_splitk:gather": 0.75,  # 9 timings
    "conv_dgrad_winograd_nonfused": 0.80,  # 16 timings
    "conv_direct:gather": 4.52,  # 15 timings
    "conv_gemm": 1.36,  # 117 timings
    "conv_grouped": 2.22,  # 53 timings
    "conv_implicit_gemm:gather": 1.00,  # 168 timings
    "conv_implicit_gemm:tma": 1.53,  # 40 timings
    "conv_implicit_gemm:tma:flat": 1.04,  # 4 timings
    "conv_implicit_gemm:tma:flat:split": 1.08,  # 1 timings
    "conv_implicit_gemm:tma:split": 1.06,  # 2 timings
    "conv_implicit_precomp_gemm:gather": 0.95,  # 21 timings
    "conv_patchify": 1.05,  # 33 timings
    "conv_wgrad_depthwise": 2.07,  # 308 timings
    "conv_wgrad_depthwise:strip": 2.11,  # 138 timings
    "conv_wgrad_gemm": 0.84,  # 177 timings
    "conv_wgrad_grouped": 0.91,  # 95 timings
    "conv_wgrad_implicit_gemm:gather": 0.85,  # 29 timings
    "conv_wgrad_implicit_gemm:tma": 1.04,  # 44 timings
    "conv_wgrad_implicit_gemm:tma:flat": 1.04,  # 61 timings
    "conv_wgrad_patchify": 1.00,  # 25 timings
    "conv_wgrad_precomp:gather": 2.76,  # 15 timings
    "conv_wgrad_splitk:gather": 1.26,  # 5 timings
    "conv_wgrad_winograd_nonfused": 1.06,  # 40 timings
    "conv_winograd4x4_nonfused": 1.05,  # 25 timings
    "conv_winograd_nonfused": 0.90,  # 10 timings
}


def measured_scale(family: str, name: str) -> float:
    """The factor of code path ``family`` of engine ``name`` (1: not calibrated)."""
    return MEASURED_SCALES.get(family, MEASURED_SCALES.get(name, 1.0))
