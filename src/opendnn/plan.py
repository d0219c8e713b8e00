"""Execution plans: one or more (subgraph, engine config) stages plus their workspace.

A plan for a graph that one engine takes whole has one stage. When no engine takes the
whole graph, the heuristics cut it into pieces; tensors that cross a cut become real
buffers carved out of the workspace (their space comes first, 256-byte aligned), and the
stages run in order. The workspace is ``boundary tensors + max(stage workspaces)``.
"""

from __future__ import annotations

import dataclasses
import time

import torch

from . import log
from .engines.base import SUPPORTED, EngineConfig, Target
from .engines.registry import by_id
from .errors import BadParamError, GraphNotSupportedError, InternalError, Status
from .runtime.launch import parallel_compile
from .runtime.lru import LRU, plan_cache_size

ALIGN = 256
# engine facts kept per built plan: a problem has a support fact per engine and one
# (support, workspace) fact per candidate config
FACTS_PER_PLAN = 16


class _Rebound:
    """A built executable of an identical graph (same key) whose tensors carry other
    uids: buffers are handed to it under the uids it was built with."""

    def __init__(self, inner, pairs: list):
        self.inner, self.pairs = inner, pairs
        self.workspace_size = inner.workspace_size

    def run(self, buffers: dict, workspace, stream=None) -> None:
        b = dict(buffers)
        for old, new in self.pairs:
            if new in buffers:
                b[old] = buffers[new]
        self.inner.run(b, workspace, stream)


# built executables of this process by (graph key, config, target, switches read at
# build): a fresh graph of a problem already built (the benchmark cache's winner, a
# framework re-creating its graphs) reuses the compiled kernels and launch set-up. At
# most ``backends.plan_cache_size``, least recently used dropped first.
_built = LRU(plan_cache_size)


def _built_key(graph, config, target) -> tuple:
    from . import backends

    return (graph.key(), config, target, backends.allow_tf32)


def _build_cached(engine, graph, config, target):
    key = _built_key(graph, config, target)
    hit = _built.get(key)
    if hit is None:
        exe = engine.build(graph, config, target)
        _built[key] = (exe, graph.canonical_uids)
        return exe
    exe, uids = hit
    pairs = [(o, n) for o, n in zip(uids, graph.canonical_uids) if o != n]
    return _Rebound(exe, pairs) if pairs else exe


# what an engine says about one stage -- its support (graph, then config) and its workspace
# -- by (graph key, config, target, switches): pure functions of the problem, so a fresh
# graph of a problem seen before (a framework re-creating its graphs each step) skips the
# engines' checks and workspace models. At most FACTS_PER_PLAN x plan_cache_size, least
# recently used dropped first.
_facts = LRU(lambda: FACTS_PER_PLAN * plan_cache_size())


def _stage_facts(engine, graph, config, target) -> tuple:
    """(Support, workspace bytes or None when unsupported) of one stage, memoized."""
    from . import backends

    key = (graph.key(), config, target, backends.allow_tf32)
    hit = _facts.get(key)
    if hit is None:
        sup = engine.check_support(graph, target)
        if sup.ok:
            sup = engine.check_config(graph, config, target)
        hit = (sup, engine.workspace_size(graph, config, target) if sup.ok else None)
        _facts[key] = hit
    return hit


def _graph_support(engine, graph, target):
    """The engine's support of the whole stage graph (config aside), memoized as above."""
    from . import backends

    key = (graph.key(), None, target, backends.allow_tf32, engine.id)
    hit = _facts.get(key)
    if hit is None:
        hit = _facts[key] = engine.check_support(graph, target)
    return hit


def role_error(
    rule: str, node_index: int, role: str, kind: str, status: Status = Status.BAD_PARAM
) -> BadParamError:
    """The error a built executable raises about tensor ``role`` of node ``node_index`` of
    the graph it was built for. An executable serves every graph of one key, whatever
    its names, so it names neither: ``ExecutionPlan.run`` names the node and the tensor
    of the plan's own graph."""
    e = BadParamError(rule, op=kind, tensor=role, status=status)
    e.node_index, e.role = node_index, role
    return e


def _relabel(e: BadParamError, graph) -> BadParamError:
    """``e`` (from ``role_error``) naming the node and tensor of ``graph``."""
    n = graph.nodes[e.node_index]
    uid = n.inputs.get(e.role, n.outputs.get(e.role))
    tensor = graph.tensors[uid].label() if isinstance(uid, int) else e.role
    return BadParamError(e.rule, op=n.label(), tensor=tensor, status=e.status)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclasses.dataclass
class Stage:
    graph: object  # OpGraph of this piece
    config: EngineConfig
    executable: object = None


class ExecutionPlan:
    """A ranked candidate, then (after ``build``) a runnable plan."""

    def __init__(self, graph, pieces: list, target: Target, origin: str = "A", support=None):
        self.graph = graph
        self.target = target
        self.origin = origin
        self._support = support  # known already (a memoized candidate list)
        self.stages = [Stage(g, c) for g, c in pieces]
        # one stage whose engine reads an element's inputs before writing its outputs
        # (Engine.single_pass_pointwise): the in-place rule execute checks reads it
        self.single_pass = (
            len(self.stages) == 1 and by_id(self.stages[0].config.engine_id).single_pass_pointwise
        )
        self.boundaries = []  # (uid, offset, nbytes)
        offset = 0
        if len(self.stages) > 1:
            for u, d in self._boundary_descs():
                self.boundaries.append((u, offset, d.size_in_bytes))
                offset += _align(d.size_in_bytes)
        self._stage_ws_offset = offset
        self._workspace = None
        self.built = False
        self.build_seconds = None

    def _boundary_descs(self) -> list:
        """(uid, descriptor) of each virtual tensor that crosses a cut, as its stages see
        it (packed by ``OpGraph.subgraph``)."""
        seen = {}
        for s in self.stages:
            for u, d in s.graph.tensors.items():
                if self.graph.tensors[u].is_virtual and u not in seen:
                    seen[u] = d
        return list(seen.items())

    @property
    def workspace_size(self) -> int:
        """Boundary tensors plus the largest stage workspace (computed on first use)."""
        if self._workspace is None:
            sizes = []
            for s in self.stages:
                sup, ws = _stage_facts(self._engine(s), s.graph, s.config, self.target)
                sizes.append(
                    ws
                    if ws is not None
                    else self._engine(s).workspace_size(s.graph, s.config, self.target)
                )
            self._workspace = self._stage_ws_offset + max(sizes or [0])
        return self._workspace

    @staticmethod
    def _engine(stage: Stage):
        e = by_id(stage.config.engine_id)
        if e is None:
            raise InternalError(f"engine id {stage.config.engine_id} is not registered")
        return e

    # ---- description ---------------------------------------------------------------
    @property
    def name(self) -> str:
        if len(self.stages) == 1:
            return self.stages[0].config.label()
        return "partition[" + " | ".join(s.config.label() for s in self.stages) + "]"

    @property
    def engine_names(self) -> list:
        return [s.config.engine_name for s in self.stages]

    def numerical_notes(self) -> frozenset:
        out = set()
        for s in self.stages:
            out |= self._engine(s).numerical_notes(s.graph, s.config)
        return frozenset(out)

    def behavior_notes(self) -> frozenset:
        out = set()
        for s in self.stages:
            out |= self._engine(s).behavior_notes
        return frozenset(out)

    def describe(self) -> str:
        if len(self.stages) == 1:
            return self.name
        return "; ".join(
            f"piece {i}: {s.config.label()} takes [{s.graph.describe()}]"
            for i, s in enumerate(self.stages)
        )

    def to_json(self) -> dict:
        return {
            "stages": [
                {
                    "nodes": [n.name for n in s.graph.nodes],
                    "node_index": [self.graph.nodes.index(n) for n in s.graph.nodes],
                    "config": s.config.to_json(),
                }
                for s in self.stages
            ]
        }

    # ---- build and run ---------------------------------------------------------------
    def check_support(self):
        if self._support is not None:
            return self._support
        for s in self.stages:
            sup, _ = _stage_facts(self._engine(s), s.graph, s.config, self.target)
            if not sup.ok:
                return sup
        return SUPPORTED

    def build(self) -> "ExecutionPlan":
        if self.built:
            return self
        t0 = time.perf_counter()
        for s in self.stages:
            e = self._engine(s)
            sup = _graph_support(e, s.graph, self.target)
            if not sup.ok:
                raise GraphNotSupportedError(
                    f"plan {self.name} cannot be built",
                    reasons={e.name: sup.reason},
                    status=Status.NOT_SUPPORTED,
                )
        if all(_built_key(s.graph, s.config, self.target) in _built for s in self.stages):
            for s in self.stages:  # built before in this process: nothing to compile
                s.executable = _build_cached(self._engine(s), s.graph, s.config, self.target)
        else:
            with parallel_compile():  # the stages' kernels compile side by side
                for s in self.stages:
                    s.executable = _build_cached(self._engine(s), s.graph, s.config, self.target)
        self.built = True
        self.build_seconds = time.perf_counter() - t0
        if log.info_enabled():
            log.info(
                f"built plan {self.name} in {self.build_seconds * 1e3:.2f} ms "
                f"(workspace {self.workspace_size} B)"
            )
        return self

    def run(self, buffers: dict, workspace, stream=None) -> None:
        if len(self.stages) == 1:
            try:
                self.stages[0].executable.run(buffers, workspace, stream)
            except BadParamError as e:
                if not hasattr(e, "role"):
                    raise
                raise _relabel(e, self.stages[0].graph) from None
            return
        bufs = dict(buffers)
        for uid, off, nbytes in self.boundaries:
            d = self.graph.tensors[uid]
            if nbytes == 0:  # an empty tensor crossing the cut: no workspace needed
                device = next(b.device for b in buffers.values() if hasattr(b, "device"))
                bufs[uid] = torch.empty(0, dtype=d.torch_dtype, device=device)
            else:
                bufs[uid] = workspace[off : off + nbytes].view(d.torch_dtype)
        ws = workspace[self._stage_ws_offset :] if workspace is not None else None
        for s in self.stages:
            try:
                s.executable.run(bufs, ws, stream)
            except BadParamError as e:
                if not hasattr(e, "role"):
                    raise
                raise _relabel(e, s.graph) from None
