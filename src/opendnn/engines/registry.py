"""The one ordered engine registry: fastest families first, the reference last."""
from __future__ import annotations

import functools
import importlib

# (module under opendnn.engines, class): the order is the registry's order
ENGINE_CLASSES = (
    ("conv.implicit_gemm.engine", "ImplicitGemmEngine"),
    ("conv.implicit_gemm.precomp", "PrecompGemmEngine"),
    ("conv.gemm.engine", "GemmConvEngine"),
    ("conv.direct.engine", "DirectConvEngine"),
    ("conv.winograd.engine", "WinogradNonfusedEngine"),
    ("conv.winograd.engine", "Winograd4x4NonfusedEngine"),
    ("conv.fft.engine", "FftConvEngine"),
    ("conv.fft.engine", "FftTilingConvEngine"),
    ("conv.winograd.fused", "WinogradFusedEngine"),
    ("conv.implicit_gemm.engine", "ImplicitGemmDgradEngine"),
    ("conv.split_k.dgrad", "SplitKDgradEngine"),
    ("conv.winograd.dgrad", "WinogradNonfusedDgradEngine"),
    ("conv.winograd.dgrad", "WinogradFusedDgradEngine"),
    ("conv.fft.dgrad", "FftDgradEngine"),
    ("conv.fft.dgrad", "FftTilingDgradEngine"),
    ("conv.implicit_gemm.engine", "ImplicitGemmWgradEngine"),
    ("conv.split_k.wgrad", "SplitKWgradEngine"),
    ("conv.split_k.wgrad_precomp", "PrecompSplitKWgradEngine"),
    ("conv.gemm.wgrad", "GemmWgradEngine"),
    ("conv.fft.wgrad", "FftWgradEngine"),
    ("conv.fft.wgrad", "FftTilingWgradEngine"),
    ("conv.winograd.wgrad", "WinogradNonfusedWgradEngine"),
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
