"""Engines whose heavy lifting is a GEMM on the matmul engine over a synthetic graph
(explicit-GEMM convolution, Winograd, GEMM backward filter). A subclass says how a graph
becomes that GEMM (``gemm_graph``: the synthetic OpGraph, or the reason it cannot), how
many workspace bytes its own kernels move (``extra_bytes``) and how many launches they
add; support, knobs, configs, workspace and cost come from the matmul engine here, once.
"""

from __future__ import annotations

import dataclasses
import functools

from ...enums import BehaviorNote
from ...errors import BadParamError, GraphNotSupportedError
from ..base import SUPPORTED, Engine, Support, Target, decline
from .engine import MatmulEngine

ALIGN = 256


@functools.lru_cache(maxsize=512)
def _synthetic(engine, graph):
    """One synthetic graph per (engine, frozen graph): support, cost and build share it.
    A GEMM the matmul graph's own rules refuse (an int8 operand: the matmul takes
    floating types) is the engine's reason to decline, not an error of the search."""
    try:
        return engine.gemm_graph(graph)
    except (BadParamError, GraphNotSupportedError) as e:
        return f"its GEMM cannot be built: {e.rule}"


class MatmulDelegateEngine(Engine):
    behavior_notes = frozenset({BehaviorNote.RUNTIME_COMPILATION})
    _inner = MatmulEngine()

    # ---- what a subclass provides -------------------------------------------------------------
    def gemm_graph(self, graph):
        """The synthetic matmul OpGraph for ``graph``, or a reason string."""
        raise NotImplementedError

    def extra_bytes(self, graph) -> int:
        """Workspace bytes of this engine's own buffers (before the GEMM's workspace)."""
        return 0

    def extra_launches(self, graph) -> int:
        """Kernels this engine launches besides the GEMM's."""
        return 1 if self.extra_bytes(graph) else 0

    # ---- shared ---------------------------------------------------------------------------------
    def workspace_prefix(self, graph) -> int:
        return -(-self.extra_bytes(graph) // ALIGN) * ALIGN

    def check_support(self, graph, target: Target) -> Support:
        sg = _synthetic(self, graph)
        if isinstance(sg, str):
            return decline(sg)
        s = self._inner.check_support(sg, target)
        return s if not s.ok else SUPPORTED

    def numerical_notes(self, graph, config) -> frozenset:
        sg = _synthetic(self, graph)
        return frozenset() if isinstance(sg, str) else self._inner.numerical_notes(sg, config)

    def knob_space(self, graph=None):
        return self._inner.knob_space()

    def configs(self, graph, target):
        sg = _synthetic(self, graph)
        if isinstance(sg, str):
            return []
        return [
            dataclasses.replace(c, engine_id=self.id, engine_name=self.name)
            for c in self._inner.configs(sg, target)
        ]

    def check_config(self, graph, config, target) -> Support:
        return self._inner.check_config(_synthetic(self, graph), config, target)

    def workspace_size(self, graph, config, target) -> int:
        return self.workspace_prefix(graph) + self._inner.workspace_size(
            _synthetic(self, graph), config, target
        )

    def estimate_seconds(self, graph, config, target) -> float:
        # own kernels write their buffers once and the GEMM reads them back: 2x the bytes
        return (
            self._inner.estimate_seconds(_synthetic(self, graph), config, target)
            + 2 * self.extra_bytes(graph) / target.bandwidth
            + 3e-6 * self.extra_launches(graph)
        )

    def build_gemm(self, graph, config, target):
        return self._inner.build(_synthetic(self, graph), config, target)
