"""The plan half of a graph's lifecycle, with cudnn-frontend's names: heuristics ->
candidate plans -> support check -> build -> execute; plan queries, filters, autotuning
and serialization. ``Graph`` mixes this in; validation and building live in graph.py."""
from __future__ import annotations

import contextlib
import json
import time

import torch

from .. import backends, heuristics, log
from ..engines.base import EngineConfig
from ..engines.registry import by_id, engines
from ..enums import BehaviorNote, BuildPlanPolicy, DataType, HeurMode, NumericalNote
from ..errors import BadParamError, GraphNotSupportedError, Status
from ..handle import Handle, target_for
from ..plan import ExecutionPlan
from ..runtime import autotune, timing
from ..runtime.buffers import bind, check_no_aliasing, check_workspace
from ..runtime.launch import parallel_compile, start_compile_workers
from .opgraph import OpGraph

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .graph import Graph

FORMAT = "opendnn-graph-v1"


class LifecycleMixin:
    # ---- plans ------------------------------------------------------------------------------
    def _target(self):
        return target_for(str(self._device()))

    def build_operation_graph(self) -> "Graph":
        self.validate()
        return self

    def create_execution_plans(self, modes) -> "Graph":
        """Candidate plans from the heuristic modes, concatenated in the order given."""
        g, target = self.op_graph, self._target()
        if isinstance(modes, HeurMode) or not isinstance(modes, (list, tuple)):
            modes = [modes]
        modes = self._modes = tuple(m if isinstance(m, HeurMode) else HeurMode(m)
                                    for m in modes)
        # benchmark mode, problem already timed: the winner goes first, so that
        # build_plans builds it and the first execute times nothing (mode B reads the
        # same ranking for its own order)
        hit = (autotune.lookup(g.key(), target.name)
               if backends.benchmark or HeurMode.B in modes else None)
        self._plans, self._reasons = heuristics.candidate_plans(
            g, modes, target, tuple(hit["order"]) if hit else None,
            reorder=bool(backends.benchmark))
        hit = hit if backends.benchmark else None
        for f in self._filters:
            self._plans = [p for p in self._plans if f(p)]
        self._selected = None
        self._tuned = bool(hit)
        if not hit and backends.benchmark and target.is_cuda:
            start_compile_workers()   # the find will compile many plans: warm them up now
        if log.info_enabled():
            log.info(f"{len(self._plans)} candidate plans for {g.describe()}: "
                     + ", ".join(p.name for p in self._plans[:8]))
        return self

    def check_support(self) -> "Graph":
        """Drop candidates whose engines decline; raise if none is left."""
        keep = []
        for p in self._plans:
            s = p.check_support()
            if s.ok:
                keep.append(p)
            else:
                self._reasons[p.name] = s.reason
                log.dispatch(f"plan {p.name} not supported: {s.reason}")
        self._plans = keep
        if not keep:
            raise GraphNotSupportedError(
                f"no engine supports {self.op_graph.describe()}", reasons=self._reasons,
                op=f"graph '{self.name}'" if self.name else "graph",
                status=Status.NOT_SUPPORTED_GRAPH_PATTERN)
        return self

    def build_plans(self, policy=BuildPlanPolicy.HEURISTICS_CHOICE) -> "Graph":
        if not self._plans:
            self.check_support()
        errors = {}
        every = BuildPlanPolicy(policy) == BuildPlanPolicy.ALL
        # many plans at once go to the compile workers; one plan compiles its own kernels
        # side by side (ExecutionPlan.build), or nothing at all when it was built before
        many = every or self._will_benchmark()
        with parallel_compile(workers=True) if many else contextlib.nullcontext():
            if not every and self._will_benchmark():
                # the first execute will time these: their compiles start now, side by
                # side with this build, and run while the caller prepares its buffers
                timed, _ = self._benchmark_candidates()
                for p in timed:
                    try:
                        p.build()
                    except GraphNotSupportedError:
                        continue
            for i, p in enumerate(self._plans):
                try:
                    p.build()
                except GraphNotSupportedError as e:
                    errors[p.name] = e.rule
                    continue
                if self._selected is None:
                    self._selected = i
                    if log.info_enabled():
                        log.info(f"selected plan {p.name} ({p.origin}): {p.describe()}")
                if BuildPlanPolicy(policy) == BuildPlanPolicy.HEURISTICS_CHOICE:
                    break
        if self._selected is None:
            raise GraphNotSupportedError("no candidate plan could be built", reasons=errors,
                                         status=Status.NOT_SUPPORTED)
        return self

    def _will_benchmark(self) -> bool:
        """Benchmark mode, a CUDA device, and no timed winner cached for the problem."""
        return bool(backends.benchmark) and not self._tuned and self._target().is_cuda

    def tunes_at_execute(self) -> bool:
        """Whether the next ``execute`` times the candidate plans first (benchmark mode,
        not yet tuned, more than one plan)."""
        return bool(backends.benchmark) and not getattr(self, "_tuned", False) and \
            len(self._plans) > 1

    def build_plan_at_index(self, index: int) -> "Graph":
        p = self._plan(index)
        p.build()
        if self._selected is None:
            self._selected = index
        return self

    def build(self, modes=None) -> "Graph":
        """The whole chain; with no modes, only validate (as cudnn-frontend)."""
        self.validate()
        if modes is None:
            return self
        self.build_operation_graph()
        self.create_execution_plans(modes)
        self.check_support()
        self.build_plans(BuildPlanPolicy.HEURISTICS_CHOICE)
        return self

    def _plan(self, index: int) -> ExecutionPlan:
        if not 0 <= index < len(self._plans):
            raise BadParamError(f"plan index {index} out of range (0..{len(self._plans) - 1})",
                                op="graph", status=Status.BAD_PARAM_OUT_OF_BOUND)
        return self._plans[index]

    # ---- plan queries -----------------------------------------------------------------------
    def get_execution_plan_count(self) -> int:
        return len(self._plans)

    def get_workspace_size(self) -> int:
        return self._selected_plan().workspace_size

    def get_workspace_size_plan_at_index(self, index: int) -> int:
        return self._plan(index).workspace_size

    def get_plan_name_at_index(self, index: int) -> str:
        return self._plan(index).name

    def get_behavior_notes_for_plan_at_index(self, index: int) -> list:
        return sorted(self._plan(index).behavior_notes())

    def get_numerical_notes_for_plan_at_index(self, index: int) -> list:
        return sorted(self._plan(index).numerical_notes())

    def get_engine_count(self) -> int:
        return len(engines())

    def get_knobs_for_engine(self, engine_id: int) -> list:
        e = by_id(engine_id)
        if e is None:
            raise BadParamError(f"no engine with id {engine_id}", op="get_knobs_for_engine",
                                status=Status.BAD_PARAM_OUT_OF_BOUND)
        return e.knob_space(self.op_graph)

    def create_execution_plan(self, engine_id: int, knobs: dict | None = None) -> "Graph":
        """Add (and select) a plan for a specific engine and knob values."""
        e = by_id(engine_id)
        if e is None:
            raise BadParamError(f"no engine with id {engine_id}", op="create_execution_plan",
                                status=Status.BAD_PARAM_OUT_OF_BOUND)
        g, target = self.op_graph, self._target()
        s = e.check_support(g, target)
        cfg = EngineConfig.make(e, **e.complete_knobs(g, dict(knobs or {})))
        if s.ok:
            s = e.check_config(g, cfg, target)
        if not s.ok:
            raise GraphNotSupportedError("engine cannot run this graph", reasons={e.name: s.reason},
                                         op="create_execution_plan",
                                         status=Status.NOT_SUPPORTED)
        plan = ExecutionPlan(g, [(g, cfg)], target, "user")
        self._plans.insert(0, plan)
        self._selected = None
        plan.build()
        self._selected = 0
        return self

    def build_plan_for_engine(self, engine_id: int) -> "Graph":
        """Build and select the heuristics' best plan that one engine runs whole (what a
        legacy call with an explicit algorithm asks for). NOT_SUPPORTED carries the
        engine's reason."""
        if not self._plans:
            self.create_execution_plans([HeurMode.A])
        for i, p in enumerate(self._plans):
            if len(p.stages) == 1 and p.stages[0].config.engine_id == engine_id:
                p.build()
                self._selected = i
                return self
        e = by_id(engine_id)
        reason = self._reasons.get(e.name, "the engine offers no plan for this graph")
        raise GraphNotSupportedError(f"{e.name} does not support this problem: {reason}",
                                     op=f"graph '{self.name}'" if self.name else "graph",
                                     status=Status.NOT_SUPPORTED)

    def selected_plan(self) -> ExecutionPlan:
        """The plan ``execute`` runs (after build)."""
        return self._selected_plan()

    def _selected_plan(self) -> ExecutionPlan:
        if self._selected is None:
            raise BadParamError("no plan is built: call build([heur_mode.A]) or build_plans() "
                                "first", op="graph", status=Status.BAD_PARAM_NOT_FINALIZED)
        return self._plans[self._selected]

    # ---- filters ----------------------------------------------------------------------------
    def _filter(self, pred) -> "Graph":
        self._filters.append(pred)
        self._plans = [p for p in self._plans if pred(p)]
        built = [i for i, p in enumerate(self._plans) if p.built]
        self._selected = built[0] if built else None
        return self

    def select_numeric_notes(self, notes) -> "Graph":
        want = {NumericalNote(n) if not isinstance(n, NumericalNote) else n for n in notes}
        return self._filter(lambda p: want <= p.numerical_notes())

    def deselect_numeric_notes(self, notes) -> "Graph":
        bad = {NumericalNote(n) if not isinstance(n, NumericalNote) else n for n in notes}
        return self._filter(lambda p: not (bad & p.numerical_notes()))

    def select_behavior_notes(self, notes) -> "Graph":
        want = {BehaviorNote(n) if not isinstance(n, BehaviorNote) else n for n in notes}
        return self._filter(lambda p: want <= p.behavior_notes())

    def deselect_behavior_notes(self, notes) -> "Graph":
        bad = {BehaviorNote(n) if not isinstance(n, BehaviorNote) else n for n in notes}
        return self._filter(lambda p: not (bad & p.behavior_notes()))

    def deselect_engines(self, names) -> "Graph":
        names = [names] if isinstance(names, str) else list(names)
        return self._filter(lambda p: not any(s in e for s in names for e in p.engine_names)
                            and not any(s in p.name for s in names))

    def deselect_workspace_greater_than(self, nbytes: int) -> "Graph":
        return self._filter(lambda p: p.workspace_size <= nbytes)

    # ---- execution --------------------------------------------------------------------------
    def execute(self, variant_pack: dict, workspace=None, handle: Handle | None = None) -> None:
        """Run the selected plan. ``variant_pack`` maps graph tensors or uids to buffers."""
        plan = self._selected_plan()
        if self.tunes_at_execute():
            self._benchmark_once(variant_pack, workspace, handle)
            plan = self._selected_plan()
        self._run(plan, variant_pack, workspace, handle)

    def execute_plan_at_index(self, variant_pack: dict, workspace, index: int,
                              handle: Handle | None = None) -> None:
        plan = self._plan(index)
        if not plan.built:
            plan.build()
        self._run(plan, variant_pack, workspace, handle)

    def _run(self, plan: ExecutionPlan, variant_pack, workspace, handle) -> None:
        g = plan.graph
        h = handle or self.handle
        op = f"execute '{self.name}'" if self.name else "execute"
        bound, device = bind(g, variant_pack, op, (h.device if h else self._device()),
                             self._scalar_defaults_cached())
        check_no_aliasing(g, bound, op)
        ws = check_workspace(workspace, plan.workspace_size, device, op)
        stream = h.cuda_stream() if (h is not None and device.type == "cuda") else None
        plan.run(bound, ws, stream)

    def _scalar_defaults_cached(self) -> dict:
        cache = getattr(self, "_scalars_cache", None)
        if cache is None or cache[0] is not self._op_graph:
            cache = (self._op_graph, self._scalar_defaults())
            self._scalars_cache = cache
        return cache[1]

    def _scalar_defaults(self) -> dict:
        """Values of pass-by-value tensors known at build time (tensor_like of a CPU
        scalar, Python numbers given to an operation): used when the pack omits them."""
        out = dict(getattr(self, "_restored_scalars", {}))
        out.update({t.uid: t.value for t in self._tensors if t.is_pass_by_value and
                    t.value is not None})
        return out

    # ---- tuning -----------------------------------------------------------------------------
    def autotune(self, variant_pack: dict, workspace=None, handle=None, warmup: int = 3,
                 iters: int = 10) -> list:
        """Time every candidate plan on the given buffers, reorder fastest first, persist.
        Returns [(plan name, ms)] fastest first (ms: the least of the rounds' medians)."""
        t0 = time.perf_counter()
        with parallel_compile(workers=True):   # every candidate's kernels side by side
            for p in self._plans:
                try:
                    p.build()
                except GraphNotSupportedError:
                    continue
        t1 = time.perf_counter()
        runnable = [(i, p) for i, p in enumerate(self._plans)
                    if p.built and p.workspace_size <= _nbytes(workspace)]
        # TIMING_ROUNDS passes over the candidates, each plan's time the least of its
        # rounds' medians: a disturbance (another process on the GPU, a clock change)
        # during one plan's samples costs that plan one round, not its place
        best: dict = {}
        for r in range(TIMING_ROUNDS):
            for i, p in runnable:
                ms = _time_plan(lambda: self._run(p, variant_pack, workspace, handle),
                                variant_pack, warmup if r == 0 else 1,
                                max(1, iters // TIMING_ROUNDS))
                best[i] = min(best.get(i, ms), ms)
        timings = [(ms, i) for i, ms in best.items()]
        if not timings:
            raise GraphNotSupportedError("no plan could be timed", op="autotune",
                                         status=Status.NOT_SUPPORTED)
        timings.sort()
        order = [i for _, i in timings] + [i for i in range(len(self._plans))
                                           if i not in {j for _, j in timings}]
        self._plans = [self._plans[i] for i in order]
        self._selected = 0
        self._tuned = True
        names = [self._plans[k].name for k in range(len(timings))]
        autotune.store(self.key(), self._target().name, names, [t for t, _ in timings])
        log.info(f"autotune: built {len(self._plans)} candidates in {t1 - t0:.2f} s, timed them "
                 f"(first launches included) in {time.perf_counter() - t1:.2f} s: "
                 + ", ".join(f"{n} {t:.4f} ms" for n, (t, _) in zip(names, timings)))
        return [(n, t) for n, (t, _) in zip(names, timings)]

    def _benchmark_once(self, variant_pack, workspace, handle) -> None:
        hit = autotune.lookup(self.key(), self._target().name)
        self._tuned = True
        if hit:
            self._plans = heuristics.reorder_by_cache(self.op_graph, self._plans, self._target())
            self._selected = None
            self.build_plans()
            return
        timed, rest = self._benchmark_candidates()
        self._plans = timed
        self.autotune(variant_pack, workspace, handle)
        self._plans += rest
        modes = getattr(self, "_modes", None)
        hit = autotune.lookup(self.key(), self._target().name)
        if modes and hit and not self._filters:
            # the candidate list a fresh graph of this problem will ask for, made now (the
            # find has the time) so that its create_execution_plans is a lookup
            heuristics.candidate_plans(self.op_graph, modes, self._target(),
                                       tuple(hit["order"]), reorder=True)

    def _benchmark_candidates(self) -> tuple[list, list]:
        """(plans benchmark mode times, the others) from the ranked candidates."""
        limit = backends.benchmark_limit or len(self._plans)
        # the cost model's top `limit` plans, plus the best plan of every engine not among
        # them: one engine's model being off (its configs ranked ahead of everything else)
        # must not keep the other engines from being timed at all, nor crowd out the
        # runners-up of the engine that is really fastest
        # (an engine with several code paths -- gather, TMA boxes, TMA flat runs -- has
        # each path's best timed: Engine.family)
        def family(p):
            return tuple(by_id(s.config.engine_id).family(s.config) for s in p.stages)
        # ... unless the model puts them beyond EXTRA_MARGIN times the best estimate:
        # compiling a hopeless engine (an FFT pipeline for a 3x3 layer: seven kernels)
        # would cost the find seconds and never win
        def estimate(p):
            return sum(by_id(s.config.engine_id).estimate_seconds(s.graph, s.config,
                                                                  p.target) for s in p.stages)
        top = self._plans[:limit]
        seen = {family(p) for p in top}
        extra, far = [], []
        best = estimate(top[0]) if top else 0.0
        for p in self._plans[limit:]:
            if family(p) not in seen:
                seen.add(family(p))
                (extra if estimate(p) <= EXTRA_MARGIN * best else far).append(p)
        if far:
            log.info(f"benchmark: not timing {', '.join(p.name for p in far)}: estimated "
                     f"beyond {EXTRA_MARGIN}x the best plan")
        rest = [p for p in self._plans[limit:] if all(p is not q for q in extra)]
        return top + extra, rest

    # ---- serialization ----------------------------------------------------------------------
    def serialize(self) -> bytes:
        """JSON bytes of the validated graph and its built plans' configs."""
        g = self.op_graph
        doc = {"format": FORMAT, "graph": g.to_json(),
               "types": [self.io_data_type.name, self.intermediate_data_type.name,
                         self.compute_data_type.name],
               "plans": [p.to_json() for p in self._plans if p.built],
               "scalars": {str(k): v for k, v in self._scalar_defaults().items()},
               "selected": 0 if self._selected is not None else None}
        return json.dumps(doc).encode()

    def deserialize(self, blob: bytes) -> "Graph":
        """Restore a graph serialized by ``serialize`` and rebuild its plans."""
        try:
            doc = json.loads(bytes(blob).decode())
            if doc.get("format") != FORMAT:
                raise ValueError(f"format {doc.get('format')!r}")
            g = OpGraph.from_json(doc["graph"])
        except (ValueError, KeyError, TypeError) as e:
            raise BadParamError(f"not a serialized opendnn graph: {e}", op="deserialize",
                                status=Status.SERIALIZATION_VERSION_MISMATCH) from None
        self._nodes, self._tensors = [], []
        self._restored_scalars = {int(k): v for k, v in doc.get("scalars", {}).items()}
        self.io_data_type, self.intermediate_data_type, self.compute_data_type = (
            DataType[n] for n in doc["types"])
        self._op_graph = g
        target = self._target()
        self._plans = []
        for pj in doc.get("plans", []):
            pieces = []
            for st in pj["stages"]:
                nodes = [g.nodes[i] for i in st["node_index"]]
                sub = g if len(pj["stages"]) == 1 else g.piece(nodes)
                pieces.append((sub, EngineConfig.from_json(st["config"])))
            self._plans.append(ExecutionPlan(g, pieces, target, "deserialized").build())
        self._selected = 0 if self._plans else None
        return self


TIMING_ROUNDS = 2   # autotune's passes over the candidates (see autotune)

# benchmark mode times other engines' best plans within this of the best estimate: in the
# ResNet-50 runs every winner's estimate was within 1.57x of the best estimate (mostly
# within 1.35x: split tiles, wgrad's explicit GEMM); the multi-kernel Winograd / FFT
# pipelines beyond 2x never won and cost the find seconds of compiling (their F(4x4)
# transforms 1.5-2.5 s each). bench/results/h100-2026-11-22-s6b.json, bench/notes/conv.md
EXTRA_MARGIN = 2.0


def _nbytes(workspace) -> int:
    if workspace is None:
        return 0
    return workspace.numel() * workspace.element_size() if isinstance(workspace, torch.Tensor) \
        else len(workspace)


def _time_plan(fn, variant_pack, warmup, iters) -> float:
    """Median milliseconds of ``fn`` (see runtime.timing: kernel time on the GPU)."""
    on_cuda = any(isinstance(v, torch.Tensor) and v.is_cuda for v in variant_pack.values())
    return timing.median_ms(fn, on_cuda, warmup, iters)
