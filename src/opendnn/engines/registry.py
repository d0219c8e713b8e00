"""The one ordered engine registry: fastest families first, the reference last."""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def engines() -> tuple:
    from .conv.engine import (ImplicitGemmDgradEngine, ImplicitGemmEngine,
                              ImplicitGemmWgradEngine)
    from .conv.direct import DirectConvEngine
    from .conv.gemm import GemmConvEngine
    from .conv.gemm_wgrad import GemmWgradEngine
    from .conv.precomp import PrecompGemmEngine
    from .conv.wgrad_split import SplitKWgradEngine
    from .conv.winograd import Winograd4x4NonfusedEngine, WinogradNonfusedEngine
    from .fusion.engine import FusionEngine
    from .matmul.engine import MatmulEngine
    from .reference.engine import ReferenceEngine
    return (ImplicitGemmEngine(), PrecompGemmEngine(), GemmConvEngine(), DirectConvEngine(), WinogradNonfusedEngine(),
            Winograd4x4NonfusedEngine(),
            ImplicitGemmDgradEngine(),
            ImplicitGemmWgradEngine(), SplitKWgradEngine(), GemmWgradEngine(), MatmulEngine(), FusionEngine(),
            ReferenceEngine())


def by_id(engine_id: int):
    for e in engines():
        if e.id == engine_id:
            return e
    return None


def reference():
    return engines()[-1]
