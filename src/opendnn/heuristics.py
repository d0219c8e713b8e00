"""Heuristics: which plans to try, in which order.

- Mode A: every engine (but the reference) that takes the whole graph offers its configs;
  all are ranked by the engines' analytical cost models (``estimate_seconds``: a roofline
  from FLOPs, bytes and tile efficiency), each scaled on a GPU by the engine's measured
  calibration (``Engine.ranked_seconds``). If no engine takes the whole graph, the graph
  is cut into pieces (greedily: extend the current piece with the next node in
  topological order while some engine still takes it), and the plan chains each piece's
  best config.
- Mode B: mode A's list reordered by measured results from the autotune cache, when the
  problem has been tuned on this device with this library and Triton version.
- FALLBACK: the float64 reference engine on the whole graph.
"""

from __future__ import annotations

from . import backends, log
from .engines.base import Target
from .engines.registry import engines, reference
from .enums import HeurMode, NumericalNote
from .plan import ExecutionPlan
from .runtime import autotune
from .runtime.lru import LRU, plan_cache_size

CONFIGS_PER_ENGINE = 8  # an engine with several code paths leads with each path's best


def _fast_engines():
    return [e for e in engines() if e is not reference()]


def supporting(graph, target: Target) -> tuple[list, dict]:
    """(engines that take ``graph`` whole, {engine name: reason} for those that decline)."""
    ok, reasons = [], {}
    for e in engines():
        s = e.check_support(graph, target)
        if s.ok:
            ok.append(e)
        else:
            reasons[e.name] = s.reason
            log.dispatch(f"{e.name} declines {graph.describe()}: {s.reason}")
    return ok, reasons


# Memoized lists hold a problem's candidates (a few configs per engine, their support):
# twice as many problems as built plans are kept (backends.plan_cache_size), least
# recently used dropped first.
LISTS_PER_PLAN = 2

# mode A's ranking by (graph key, target, switches the engines read): a fresh graph of a
# problem seen before skips every engine's support checks and cost models
_ranked = LRU(lambda: LISTS_PER_PLAN * plan_cache_size())


def _ranked_plans(graph, target: Target) -> tuple[list, dict]:
    """Mode A: (configs best first, {engine name: reason} for the decliners)."""
    key = (graph.key(), target, backends.allow_tf32)
    hit = _ranked.get(key)
    if hit is None:
        ok, reasons = supporting(graph, target)
        fast = [e for e in ok if e is not reference()]
        hit = (
            [c for _, _, _, c in _ranked_configs(graph, target, fast)],
            reasons,
            reference() in ok,
        )
        _ranked[key] = hit
    elif log.dispatch_enabled():
        for name, why in hit[1].items():
            log.dispatch(f"{name} declines {graph.describe()}: {why}")
    return hit


def _ranked_configs(graph, target, engs) -> list:
    scored = []
    for rank, e in enumerate(engs):
        for i, c in enumerate(e.configs(graph, target)[:CONFIGS_PER_ENGINE]):
            scored.append((e.ranked_seconds(graph, c, target), rank, i, c))
    scored.sort(key=lambda t: t[:3])
    return scored


def partition(graph, target: Target) -> list | None:
    """Cut ``graph`` into pieces each taken whole by a non-reference engine, or pieces
    the reference must run. Returns [(subgraph, config)]."""
    nodes = list(graph.nodes)
    pieces, current = [], []

    sub = graph.piece

    def best(sg):
        ranked = _ranked_configs(
            sg, target, [e for e in _fast_engines() if e.check_support(sg, target).ok]
        )
        return ranked[0][3] if ranked else None

    for n in nodes:
        trial = current + [n]
        if best(sub(trial)) is not None:
            current = trial
            continue
        if current:
            pieces.append(current)
        current = [n]
    if current:
        pieces.append(current)
    out = []
    for ns in pieces:
        sg = sub(ns)
        cfg = best(sg)
        if cfg is None:
            if not reference().check_support(sg, target).ok:
                return None
            cfg = reference().configs(sg, target)[0]
        out.append((sg, cfg))
    return out


def plans_for_mode(graph, mode: HeurMode, target: Target) -> tuple[list, dict]:
    """Ranked ExecutionPlans for one mode, plus the reasons engines gave for declining."""
    configs, reasons, ref_ok = _ranked_plans(graph, target)
    reasons = dict(reasons)
    if mode == HeurMode.FALLBACK:
        ref = reference()
        if ref_ok:
            return [
                ExecutionPlan(graph, [(graph, ref.configs(graph, target)[0])], target, "FALLBACK")
            ], reasons
        return [], reasons
    plans = [ExecutionPlan(graph, [(graph, c)], target, mode.name) for c in configs]
    if not plans:
        pieces = partition(graph, target)
        fast_piece = pieces is not None and any(c.engine_id != reference().id for _, c in pieces)
        if pieces is not None and len(pieces) > 1 and fast_piece:
            plan = ExecutionPlan(graph, pieces, target, mode.name)
            log.info(
                f"no engine takes the whole graph; partitioned into {len(pieces)} pieces: "
                f"{plan.describe()}"
            )
            plans = [plan]
    if mode == HeurMode.B and plans:
        plans = reorder_by_cache(graph, plans, target)
    return plans, reasons


# create_execution_plans' candidate list by (graph key, target, modes, the switches and the
# autotune order it read), each plan's support included: a fresh graph of a problem seen
# before (benchmark mode's cache hit, a framework re-creating its graphs every step) gets
# its plans without ranking, filtering, reordering or re-checking them
_lists = LRU(lambda: LISTS_PER_PLAN * plan_cache_size())


def candidate_plans(
    graph, modes: tuple, target: Target, order: tuple | None, reorder: bool
) -> tuple:
    """(plans of ``modes`` concatenated without repeats, allowed by ``backends`` and, with
    ``reorder``, put in the autotune cache's ``order`` when there is one; {engine name:
    reason} for the decliners). Single-stage lists are memoized with each plan's support
    (see ``_lists``)."""
    key = (
        graph.key(),
        target,
        modes,
        backends.allow_tf32,
        backends.deterministic,
        backends.workspace_limit,
        order,
        reorder,
    )
    hit = _lists.get(key)
    if hit is not None:
        specs, reasons = hit
        if log.dispatch_enabled():
            for name, why in reasons.items():
                log.dispatch(f"{name} declines {graph.describe()}: {why}")
        return [
            ExecutionPlan(graph, [(graph, c)], target, origin, support)
            for origin, c, support in specs
        ], dict(reasons)
    plans, reasons, seen = [], {}, set()
    for m in modes:
        ps, rs = plans_for_mode(graph, m, target)
        reasons.update(rs)
        for p in ps:
            if p.name not in seen:
                seen.add(p.name)
                plans.append(p)
    plans = [p for p in plans if allowed(p)]
    if reorder and order is not None:
        plans = _in_order(plans, order)
    if all(len(p.stages) == 1 for p in plans):
        _lists[key] = (
            [(p.origin, p.stages[0].config, p.check_support()) for p in plans],
            dict(reasons),
        )
    return plans, reasons


def reorder_by_cache(graph, plans: list, target: Target) -> list:
    hit = autotune.lookup(graph.key(), target.name)
    return _in_order(plans, hit["order"]) if hit else plans


def _in_order(plans: list, order) -> list:
    """``plans`` with the names in ``order`` first, in that order; the rest keep theirs."""
    pos = {name: i for i, name in enumerate(order)}
    return sorted(plans, key=lambda p: pos.get(p.name, len(pos)))


def allowed(plan: ExecutionPlan) -> bool:
    """The global switches in ``opendnn.backends`` as a filter."""
    if backends.deterministic and NumericalNote.NONDETERMINISTIC in plan.numerical_notes():
        return False
    if backends.workspace_limit is not None and plan.workspace_size > backends.workspace_limit:
        return False
    return True
