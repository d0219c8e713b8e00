"""The one ordered engine registry: fastest families first, the reference last."""
from __future__ import annotations

import functools
import importlib

# (module under opendnn.engines, class): the order is the registry's order
ENGINE_CLASSES = (
    ("conv.engine", "ImplicitGemmEngine"),
    ("conv.precomp", "PrecompGemmEngine"),
    ("conv.gemm", "GemmConvEngine"),
    ("conv.direct", "DirectConvEngine"),
    ("conv.winograd", "WinogradNonfusedEngine"),
    ("conv.winograd", "Winograd4x4NonfusedEngine"),
    ("conv.fft", "FftConvEngine"),
    ("conv.fft", "FftTilingConvEngine"),
    ("conv.winograd_fused", "WinogradFusedEngine"),
    ("conv.engine", "ImplicitGemmDgradEngine"),
    ("conv.dgrad_split", "SplitKDgradEngine"),
    ("conv.winograd_dgrad", "WinogradNonfusedDgradEngine"),
    ("conv.winograd_dgrad", "WinogradFusedDgradEngine"),
    ("conv.fft_dgrad", "FftDgradEngine"),
    ("conv.fft_dgrad", "FftTilingDgradEngine"),
    ("conv.engine", "ImplicitGemmWgradEngine"),
    ("conv.wgrad_split", "SplitKWgradEngine"),
    ("conv.wgrad_precomp", "PrecompSplitKWgradEngine"),
    ("conv.gemm_wgrad", "GemmWgradEngine"),
    ("conv.fft_wgrad", "FftWgradEngine"),
    ("conv.fft_wgrad", "FftTilingWgradEngine"),
    ("conv.winograd_wgrad", "WinogradNonfusedWgradEngine"),
    ("matmul.engine", "MatmulEngine"),
    ("softmax.engine", "SoftmaxEngine"),
    ("batchnorm.engine", "BatchNormEngine"),
    ("lrn.engine", "LrnEngine"),
    ("dropout.engine", "DropoutEngine"),
    ("pool.engine", "PoolEngine"),                # pooling (resample) forward
    ("pool.engine", "PoolBackwardEngine"),        # pooling (resample) backward
    ("norm.engine", "NormEngine"),
    ("attention.engine", "AttentionEngine"),
    ("fusion.engine", "FusionEngine"),
    ("reference.engine", "ReferenceEngine"),
)


@functools.lru_cache(maxsize=None)
def engines() -> tuple:
    return tuple(getattr(importlib.import_module(f"{__package__}.{mod}"), cls)()
                 for mod, cls in ENGINE_CLASSES)


def by_id(engine_id: int):
    for e in engines():
        if e.id == engine_id:
            return e
    return None


def reference():
    return engines()[-1]
