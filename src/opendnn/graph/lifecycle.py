"""The plan half of a graph's lifecycle, with cudnn-frontend's names: heuristics ->
candidate plans -> support check -> build -> execute; plan queries, filters, autotuning
and serialization. ``Graph`` (graph.py) mixes this in and owns construction and
validation; the mixin works on what the host provides (``validate()``, ``op_graph``,
``handle``, the tensors and the data types) and never imports graph.py, so the dependency
runs one way: graph.py -> lifecycle.py -> plans, engines, runtime."""

from __future__ import annotations

import contextlib
import json
import operator
import time
import warnings
from collections.abc import Iterable, Mapping
from typing import Self

import torch

from .. import backends, heuristics, log
from ..engines.base import EngineConfig, Knob
from ..engines.registry import by_id, engines
from ..enums import BehaviorNote, BuildPlanPolicy, DataType, HeurMode, KnobType, NumericalNote
from ..errors import BadParamError, GraphNotSupportedError, OpenDNNError, Status
from ..handle import Handle, target_for
from ..plan import ExecutionPlan
from ..runtime import autotune, timing
from ..runtime.buffers import as_bytes, bind, check_no_aliasing, check_workspace, mark_written
from ..runtime.launch import parallel_compile, start_compile_workers
from ..runtime.scratch import timing_buffers
from .opgraph import OpGraph
from .tensor import Tensor

FORMAT = "opendnn-graph-v1"


class LifecycleMixin:
    # ---- plans ------------------------------------------------------------------------------
    def _target(self):
        props = self._aot.device_property
        if props is not None:
            target = props.target
        else:
            _check_handle(self.handle, self._label())
            target = target_for(str(self._device()))
        self._aot.check(target, self._label())
        return target

    def _label(self) -> str:
        return f"graph '{self.name}'" if self.name else "graph"

    def build_operation_graph(self) -> Self:
        self.validate()
        return self

    def create_execution_plans(self, modes) -> Self:
        """Candidate plans from the heuristic modes, concatenated in the order given."""
        g, target = self.op_graph, self._target()
        if isinstance(modes, HeurMode) or not isinstance(modes, (list, tuple)):
            modes = [modes]
        op = "create_execution_plans"
        if not modes:
            raise BadParamError("needs at least one heur_mode", op=op, status=Status.BAD_PARAM)
        modes = self._modes = tuple(_as_enum(HeurMode, m, op, "heur_mode") for m in modes)
        # benchmark mode, problem already timed: the winner goes first, so that
        # build_plans builds it and the first execute times nothing (mode B reads the
        # same ranking for its own order)
        hit = (
            autotune.lookup(g.key(), target.name)
            if backends.benchmark or HeurMode.B in modes
            else None
        )
        # a kernel cache's plan for this structure goes first (after a benchmark winner)
        cache = self._aot.kernel_cache
        cached = cache.lookup(g.key(), target.name) if cache is not None else None
        order = tuple(hit["order"]) if hit else ((cached,) if cached else None)
        self._plans, self._reasons = heuristics.candidate_plans(
            g, modes, target, order, reorder=bool(backends.benchmark) or bool(cached and not hit)
        )
        hit = hit if backends.benchmark else None
        for f in self._filters:
            self._plans = [p for p in self._plans if f(p)]
        self._stale = bool(hit) and not _names_a_candidate(hit, self._plans)
        if self._stale:
            _warn_stale(g, target, hit)
            hit = None
        self._selected = None
        self._tuned = bool(hit)
        if not hit and backends.benchmark and target.is_cuda:
            start_compile_workers()  # the find will compile many plans: warm them up now
        if log.info_enabled():
            log.info(
                f"{len(self._plans)} candidate plans for {g.describe()}: "
                + ", ".join(p.name for p in self._plans[:8])
            )
        return self

    def check_support(self) -> Self:
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
                f"no engine supports {self.op_graph.describe()}",
                reasons=self._reasons,
                op=f"graph '{self.name}'" if self.name else "graph",
                status=Status.NOT_SUPPORTED_GRAPH_PATTERN,
            )
        return self

    def build_plans(self, policy=BuildPlanPolicy.HEURISTICS_CHOICE) -> Self:
        policy = _as_enum(BuildPlanPolicy, policy, "build_plans", "build_plan_policy")
        if not self._plans:
            self.check_support()
        errors = {}
        every = policy == BuildPlanPolicy.ALL
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
                if policy == BuildPlanPolicy.HEURISTICS_CHOICE:
                    break
        if self._selected is None:
            raise GraphNotSupportedError(
                "no candidate plan could be built", reasons=errors, status=Status.NOT_SUPPORTED
            )
        cache = self._aot.kernel_cache
        if cache is not None:
            target = self._target()
            cache.record(self.op_graph.key(), target.name, self._plans[self._selected].name)
        return self

    def _will_benchmark(self) -> bool:
        """Benchmark mode, a CUDA device, and no timed winner cached for the problem."""
        return bool(backends.benchmark) and not self._tuned and self._target().is_cuda

    def tunes_at_execute(self) -> bool:
        """Whether the next ``execute`` times the candidate plans first (benchmark mode,
        not yet tuned, more than one plan)."""
        return (
            bool(backends.benchmark) and not getattr(self, "_tuned", False) and len(self._plans) > 1
        )

    def build_plan_at_index(self, index: int) -> Self:
        index = self._plan_index(index)
        self._plans[index].build()
        if self._selected is None:
            self._selected = index
        return self

    def build(self, modes=None) -> Self:
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
        return self._plans[self._plan_index(index)]

    def _plan_index(self, index) -> int:
        """``index`` checked: an integer (not a bool) within the candidate list."""
        if type(index) is not int:
            index = _as_int(index, self._label(), "plan index")
        if not 0 <= index < len(self._plans):
            raise BadParamError(
                f"plan index {index} out of range (0..{len(self._plans) - 1})",
                op=self._label(),
                status=Status.BAD_PARAM_OUT_OF_BOUND,
            )
        return index

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
        """One past the largest engine id (cuDNN's global engine count: code walks
        ``range(get_engine_count())``); ids in the registry's gaps have no engine."""
        return max((e.id for e in engines()), default=-1) + 1

    def get_knobs_for_engine(self, engine_id: int) -> list:
        """The engine's named knobs and, when it takes this graph, KERNEL_CFG: the index of
        one of its listed configs (0 .. count - 1), which ``create_execution_plan`` takes
        as cuDNN code passes it, ``{knob_type.KERNEL_CFG: index}``."""
        if _is_gap(engine_id, self.get_engine_count()):
            return []  # an id in the registry's gaps: no engine, no knobs
        e = _engine(engine_id, "get_knobs_for_engine")
        g = self.op_graph
        knobs = list(e.knob_space(g))
        target = self._target()
        if e.check_support(g, target).ok:
            n = len(e.configs(g, target))
            if n:
                knobs.append(Knob("KERNEL_CFG", tuple(range(n)), 0, KnobType.KERNEL_CFG))
        return knobs

    def get_behavior_notes(self) -> list:
        """The selected (built) plan's behavior notes."""
        return sorted(self._selected_plan().behavior_notes())

    def get_numerical_notes(self) -> list:
        """The selected (built) plan's numerical notes."""
        return sorted(self._selected_plan().numerical_notes())

    def create_execution_plan(self, engine_id: int, knobs: dict | None = None) -> Self:
        """Add (and select) a plan for a specific engine and knob values."""
        op = "create_execution_plan"
        e = _engine(engine_id, op)
        if knobs is None:
            knobs = {}
        if not isinstance(knobs, Mapping) or not all(isinstance(k, (str, KnobType)) for k in knobs):
            raise BadParamError(
                f"knobs must map knob names (str) or cudnn.knob_type members to values, "
                f"got {knobs!r:.60}",
                op=op,
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )
        g, target = self.op_graph, self._target()
        s = e.check_support(g, target)
        knobs = _kernel_cfg(e, g, target, dict(knobs), s.ok, op)
        cfg = EngineConfig.make(e, **e.complete_knobs(g, knobs))
        if s.ok:
            s = e.check_config(g, cfg, target)
        if not s.ok:
            raise GraphNotSupportedError(
                "engine cannot run this graph",
                reasons={e.name: s.reason},
                op="create_execution_plan",
                status=Status.NOT_SUPPORTED,
            )
        plan = ExecutionPlan(g, [(g, cfg)], target, "user")
        self._plans.insert(0, plan)
        self._selected = None
        plan.build()
        self._selected = 0
        return self

    def build_plan_for_engine(self, engine_id: int) -> Self:
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
        raise GraphNotSupportedError(
            f"{e.name} does not support this problem: {reason}",
            op=f"graph '{self.name}'" if self.name else "graph",
            status=Status.NOT_SUPPORTED,
        )

    def selected_plan(self) -> ExecutionPlan:
        """The plan ``execute`` runs (after build)."""
        return self._selected_plan()

    def _selected_plan(self) -> ExecutionPlan:
        if self._selected is None:
            raise BadParamError(
                "no plan is built: call build([heur_mode.A]) or build_plans() first",
                op="graph",
                status=Status.BAD_PARAM_NOT_FINALIZED,
            )
        return self._plans[self._selected]

    # ---- filters ----------------------------------------------------------------------------
    def _filter(self, pred) -> Self:
        """Keep the candidates ``pred`` accepts, now and after every later
        create_execution_plans (callers check their arguments first: a filter that
        raised would break every later build)."""
        self._filters.append(pred)
        self._plans = [p for p in self._plans if pred(p)]
        built = [i for i, p in enumerate(self._plans) if p.built]
        self._selected = built[0] if built else None
        return self

    def select_numeric_notes(self, notes) -> Self:
        want = _notes(NumericalNote, notes, "select_numeric_notes")
        return self._filter(lambda p: want <= p.numerical_notes())

    def deselect_numeric_notes(self, notes) -> Self:
        bad = _notes(NumericalNote, notes, "deselect_numeric_notes")
        return self._filter(lambda p: not (bad & p.numerical_notes()))

    def select_behavior_notes(self, notes) -> Self:
        want = _notes(BehaviorNote, notes, "select_behavior_notes")
        return self._filter(lambda p: want <= p.behavior_notes())

    def deselect_behavior_notes(self, notes) -> Self:
        bad = _notes(BehaviorNote, notes, "deselect_behavior_notes")
        return self._filter(lambda p: not (bad & p.behavior_notes()))

    def deselect_engines(self, names) -> Self:
        op = "deselect_engines"
        names = [names] if isinstance(names, str) else _items(names, op, "engine names")
        if not all(isinstance(s, str) for s in names):
            raise BadParamError(
                f"engine names must be strings, got {names!r:.60}",
                op=op,
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )
        return self._filter(
            lambda p: not any(s in e for s in names for e in p.engine_names)
            and not any(s in p.name for s in names)
        )

    def deselect_workspace_greater_than(self, nbytes: int) -> Self:
        op = "deselect_workspace_greater_than"
        nbytes = _as_int(nbytes, op, "workspace limit")
        if nbytes < 0:
            raise BadParamError(
                f"workspace limit {nbytes} is negative", op=op, status=Status.BAD_PARAM_OUT_OF_BOUND
            )
        return self._filter(lambda p: p.workspace_size <= nbytes)

    # ---- execution --------------------------------------------------------------------------
    def execute(
        self,
        variant_pack: dict,
        workspace=None,
        handle: Handle | None = None,
        override_uids=None,
        override_shapes=None,
        override_strides=None,
    ) -> None:
        """Run the selected plan. ``variant_pack`` maps graph tensors or uids to buffers.
        cudnn-frontend's ``override_*`` (other shapes than the graph's at execute) are
        NOT_SUPPORTED: plans are specialized on the graph's shapes."""
        _no_overrides(self._op("execute"), override_uids, override_shapes, override_strides)
        if type(variant_pack) is not dict:
            _check_pack(variant_pack, self._op("execute"))
        plan = self._selected_plan()
        if self.tunes_at_execute():
            self._benchmark_once(variant_pack, workspace, handle)
            plan = self._selected_plan()
        self._run(plan, variant_pack, workspace, handle)

    def execute_plan_at_index(
        self,
        variant_pack: dict,
        workspace,
        index: int,
        handle: Handle | None = None,
        override_uids=None,
        override_shapes=None,
        override_strides=None,
    ) -> None:
        op = self._op("execute_plan_at_index")
        _no_overrides(op, override_uids, override_shapes, override_strides)
        if type(variant_pack) is not dict:
            _check_pack(variant_pack, self._op("execute_plan_at_index"))
        plan = self._plan(index)
        if not plan.built:
            plan.build()
        self._run(plan, variant_pack, workspace, handle)

    def _op(self, what: str) -> str:
        return f"{what} '{self.name}'" if self.name else what

    def _run(
        self, plan: ExecutionPlan, variant_pack, workspace, handle, op: str | None = None
    ) -> None:
        op = op or (f"execute '{self.name}'" if self.name else "execute")
        bound, ws, stream = self._prepare(plan, variant_pack, workspace, handle, op)
        plan.run(bound, ws, stream)

    def _prepare(self, plan: ExecutionPlan, variant_pack, workspace, handle, op: str):
        """(bound buffers, workspace, stream) for running ``plan``: the pack bound and
        checked against the plan's graph, the workspace against the plan's need."""
        g = plan.graph
        h = handle if handle is not None else self.handle
        if h is not None and (type(h) is not Handle or h.device.type == "meta"):
            _check_handle(h, op)
        bound, device = bind(
            g,
            variant_pack,
            op,
            (h.device if h else self._device()),
            self._scalar_defaults_cached(),
            explicit=h is not None,
            unused=self._unused_uids_cached(),
        )
        check_no_aliasing(g, bound, op, plan.single_pass)
        ws = check_workspace(workspace, plan.workspace_size, device, op, g, bound)
        mark_written(g, bound)  # autograd sees the outputs' raw writes
        stream = h.cuda_stream() if (h is not None and device.type == "cuda") else None
        return bound, ws, stream

    def _scalar_defaults_cached(self) -> dict:
        cache = getattr(self, "_scalars_cache", None)
        if cache is None or cache[0] is not self._op_graph:
            cache = (self._op_graph, self._scalar_defaults())
            self._scalars_cache = cache
        return cache[1]

    def _unused_uids_cached(self) -> frozenset:
        """uids of tensors made on this graph that no operation uses: a pack naming one
        by its uid is accepted and the entry ignored, as cuDNN does (cudnn-frontend's
        tests bind every uid they declared, used or not)."""
        cache = getattr(self, "_unused_cache", None)
        if cache is None or cache[0] is not self._op_graph:
            used = self._op_graph.tensors
            unused = frozenset(t.uid for t in self._tensors if t.uid >= 0 and t.uid not in used)
            cache = (self._op_graph, unused)
            self._unused_cache = cache
        return cache[1]

    def _scalar_defaults(self) -> dict:
        """Values of pass-by-value tensors known at build time (tensor_like of a CPU
        scalar, Python numbers given to an operation): used when the pack omits them."""
        return {t.uid: t.value for t in self._tensors if t.is_pass_by_value and t.value is not None}

    # ---- tuning -----------------------------------------------------------------------------
    def autotune(
        self, variant_pack: dict, workspace=None, handle=None, warmup: int = 3, iters: int = 10
    ) -> list:
        """Time every candidate plan on the given buffers, reorder fastest first, persist.
        Returns [(plan name, ms)] fastest first (ms: the least of the rounds' medians).
        Plans that need more workspace than given are not timed; when none fits, the
        workspace is refused as ``execute`` would refuse it."""
        op = self._op("autotune")
        _check_pack(variant_pack, op)
        _check_handle(handle, op)
        if not self._plans:
            raise BadParamError(
                "there are no candidate plans: call build([heur_mode...]) or "
                "create_execution_plans first",
                op=op,
                status=Status.BAD_PARAM_NOT_FINALIZED,
            )
        have = 0 if workspace is None else as_bytes(workspace, op).numel()
        t0 = time.perf_counter()
        with parallel_compile(workers=True):  # every candidate's kernels side by side
            for p in self._plans:
                try:
                    p.build()
                except GraphNotSupportedError:
                    continue
        t1 = time.perf_counter()
        built = [p for p in self._plans if p.built]
        runnable = [
            (i, p) for i, p in enumerate(self._plans) if p.built and p.workspace_size <= have
        ]
        if built and not runnable:
            # the smallest need is more than ``have``: this raises SIZE_INSUFFICIENT
            check_workspace(workspace, min(p.workspace_size for p in built), None, op)
        # the candidates run on the caller's inputs, and on scratch outputs wherever an
        # output overlaps an input (in place, or blending with beta): timing must not apply
        # the graph to the caller's data once per run (runtime/scratch.py)
        runs = {i: self._timing_run(p, variant_pack, workspace, handle, op) for i, p in runnable}
        # TIMING_ROUNDS passes over the candidates, each plan's time the least of its
        # rounds' medians: a disturbance (another process on the GPU, a clock change)
        # during one plan's samples costs that plan one round, not its place
        best: dict = {}
        for r in range(TIMING_ROUNDS):
            for i, p in runnable:
                ms = _time_plan(
                    runs[i], variant_pack, warmup if r == 0 else 1, max(1, iters // TIMING_ROUNDS)
                )
                best[i] = min(best.get(i, ms), ms)
        timings = [(ms, i) for i, ms in best.items()]
        if not timings:
            raise GraphNotSupportedError(
                "no plan could be timed", op="autotune", status=Status.NOT_SUPPORTED
            )
        timings.sort()
        order = [i for _, i in timings] + [
            i for i in range(len(self._plans)) if i not in {j for _, j in timings}
        ]
        self._plans = [self._plans[i] for i in order]
        self._selected = 0
        self._tuned = True
        names = [self._plans[k].name for k in range(len(timings))]
        autotune.store(self.key(), self._target().name, names, [t for t, _ in timings])
        log.info(
            f"autotune: built {len(self._plans)} candidates in {t1 - t0:.2f} s, timed them "
            f"(first launches included) in {time.perf_counter() - t1:.2f} s: "
            + ", ".join(f"{n} {t:.4f} ms" for n, (t, _) in zip(names, timings))
        )
        return [(n, t) for n, (t, _) in zip(names, timings)]

    def _timing_run(self, plan: ExecutionPlan, variant_pack, workspace, handle, op: str):
        """A call running ``plan`` once as timing runs it: the pack bound and checked as
        ``execute`` checks it, outputs that overlap an input replaced by scratch."""
        bound, ws, stream = self._prepare(plan, variant_pack, workspace, handle, op)
        scratch = timing_buffers(plan.graph, bound)
        return lambda: plan.run(scratch, ws, stream)

    def _benchmark_once(self, variant_pack, workspace, handle) -> None:
        hit = autotune.lookup(self.key(), self._target().name)
        self._tuned = True
        if hit and not _names_a_candidate(hit, self._plans):
            if not getattr(self, "_stale", False):  # warned when the plans were made
                _warn_stale(self.op_graph, self._target(), hit)
            hit = None
        if hit:
            self._plans = heuristics.reorder_by_cache(self.op_graph, self._plans, self._target())
            self._selected = None
            self.build_plans()
            return
        have = None if workspace is None else as_bytes(workspace, self._op("autotune")).numel()
        timed, rest = self._benchmark_candidates(have)
        self._plans = timed
        self.autotune(variant_pack, workspace, handle)
        self._plans += rest
        modes = getattr(self, "_modes", None)
        hit = autotune.lookup(self.key(), self._target().name)
        if modes and hit and not self._filters:
            # the candidate list a fresh graph of this problem will ask for, made now (the
            # find has the time) so that its create_execution_plans is a lookup
            heuristics.candidate_plans(
                self.op_graph, modes, self._target(), tuple(hit["order"]), reorder=True
            )

    def _benchmark_candidates(self, have: int | None = None) -> tuple[list, list]:
        """(plans benchmark mode times, the others) from the ranked candidates. With
        ``have`` (the caller's workspace bytes), plans that need more are passed over, so
        the plans that fit are timed (the cost model's favourite may need an im2col buffer
        of gigabytes); when none fits, the first ones are kept for autotune to refuse."""
        limit = backends.benchmark_limit or len(self._plans)
        if have is not None:
            fits = [p for p in self._plans if p.workspace_size <= have]
            if fits:
                order = fits + [p for p in self._plans if p.workspace_size > have]
                self._plans = order

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
            return sum(
                by_id(s.config.engine_id).ranked_seconds(s.graph, s.config, p.target)
                for s in p.stages
            )

        # ... and no code path takes more than half of the `limit` slots: two engines whose
        # configs tie in the model (a GEMM's twenty tiles on a memory-bound layer) would
        # otherwise crowd out a third path that is really twice as fast
        cap = max(1, -(-limit // 2))
        top, held, count = [], [], {}
        for p in self._plans:
            if len(top) == limit:
                break
            f = family(p)
            if count.get(f, 0) < cap:
                top.append(p)
                count[f] = count.get(f, 0) + 1
            else:
                held.append(p)
        top += held[: limit - len(top)]  # too few paths to fill the slots: the runners-up
        chosen = {id(p) for p in top}
        pos = {id(p): i for i, p in enumerate(self._plans)}
        top.sort(key=lambda p: pos[id(p)])
        seen = {family(p) for p in top}
        extra, far = [], []
        best = estimate(top[0]) if top else 0.0
        for p in self._plans:
            if id(p) not in chosen and family(p) not in seen:
                seen.add(family(p))
                (extra if estimate(p) <= EXTRA_MARGIN * best else far).append(p)
        if far:
            log.info(
                f"benchmark: not timing {', '.join(p.name for p in far)}: estimated "
                f"beyond {EXTRA_MARGIN}x the best plan"
            )
        timed = chosen | {id(p) for p in extra}
        rest = [p for p in self._plans if id(p) not in timed]
        return top + extra, rest

    # ---- serialization ----------------------------------------------------------------------
    def serialize(self) -> bytes:
        """JSON bytes of the validated graph and its built plans' configs."""
        g = self.op_graph
        doc = {
            "format": FORMAT,
            "graph": g.to_json(),
            "types": [
                self.io_data_type.name,
                self.intermediate_data_type.name,
                self.compute_data_type.name,
            ],
            "plans": [p.to_json() for p in self._plans if p.built],
            "scalars": {str(k): v for k, v in self._scalar_defaults().items()},
            "selected": 0 if self._selected is not None else None,
        }
        return json.dumps(doc).encode()

    def deserialize(self, *args, **kwargs) -> Self:
        """``deserialize(blob)`` or cudnn-frontend's ``deserialize(handle, blob)`` (the
        handle the restored graph runs on; its keywords ``handle_`` and ``pyobj`` too).
        Restore a graph serialized by ``serialize`` and rebuild its plans. The graph is
        validated as ``build`` validates one (dataflow by uid, no cycle, every node's
        rules against its tensors); each plan's stages must cover the graph in dataflow
        order. A malformed document is SERIALIZATION_VERSION_MISMATCH, a graph that breaks
        a rule the rule's error; either way this graph is left as it was."""
        unknown = sorted(set(kwargs) - {"handle_", "pyobj"})
        if unknown:
            raise BadParamError(
                f"unknown keyword(s) {', '.join(unknown)}: takes handle_ and pyobj",
                op="deserialize",
                status=Status.BAD_PARAM,
            )
        if "handle_" in kwargs:
            args = (kwargs["handle_"],) + args
        if "pyobj" in kwargs:
            args = args + (kwargs["pyobj"],)
        if len(args) not in (1, 2):
            raise BadParamError(
                f"takes (blob) or (handle, blob), got {len(args)} arguments",
                op="deserialize",
                status=Status.BAD_PARAM,
            )
        blob = args[-1]
        if len(args) == 2:
            _check_handle(args[0], "deserialize")
        types, og, scalars, plans = _parse_document(blob)
        saved = dict(self.__dict__)
        if len(args) == 2:
            self.handle = args[0]
        try:
            self._restore(types, og, scalars, plans)
        except BaseException as e:
            self.__dict__.clear()
            self.__dict__.update(saved)
            if isinstance(e, BadParamError) and e.op != "deserialize":
                raise BadParamError(
                    e.rule,
                    op=f"deserialize: {e.op}" if e.op else "deserialize",
                    tensor=e.tensor,
                    status=e.status,
                ) from None
            if isinstance(e, _MALFORMED) and not isinstance(e, OpenDNNError):
                raise BadParamError(
                    f"malformed graph: {_reason(e)}",
                    op="deserialize",
                    status=Status.SERIALIZATION_VERSION_MISMATCH,
                ) from None
            raise
        return self

    def _restore(self, types, og: OpGraph, scalars: dict, plans: list) -> None:
        """Make this graph the document's: its tensors and nodes as builder objects, then
        ``validate`` (the checks ``build`` runs), then the plans on the validated graph."""
        tensors = {
            u: Tensor(
                self,
                d.dims,
                d.strides,
                d.data_type,
                d.is_virtual,
                d.is_pass_by_value,
                d.name,
                u,
                scalars.get(u) if d.is_pass_by_value else None,
            )
            for u, d in og.tensors.items()
        }
        nodes = []
        for f in og.nodes:
            n = object.__new__(type(f))  # the builder node: roles hold Tensors
            n.__dict__.update(f.__dict__)
            n.inputs = {
                r: [tensors[u] for u in v] if isinstance(v, list) else tensors[v]
                for r, v in f.inputs.items()
            }
            n.outputs = {r: tensors[u] for r, u in f.outputs.items()}
            for t in n.outputs.values():
                t.is_output = not t.is_virtual
            nodes.append(n)
        self._nodes, self._tensors = nodes, list(tensors.values())
        self.io_data_type, self.intermediate_data_type, self.compute_data_type = types
        self._invalidate()
        self._reasons = {}
        self.validate()
        g = self._op_graph
        # the document's node i in the validated graph (its order may differ): a node is
        # known by its outputs, each of which one node alone produces
        at = {tuple(sorted(OpGraph.node_uids(n, "outputs"))): i for i, n in enumerate(g.nodes)}
        order = [at[tuple(sorted(OpGraph.node_uids(f, "outputs")))] for f in og.nodes]
        target = self._target()
        self._plans = [_restore_plan(g, order, stages, k, target) for k, stages in enumerate(plans)]
        self._selected = 0 if self._plans else None


TIMING_ROUNDS = 2  # autotune's passes over the candidates (see autotune)

# benchmark mode times other engines' best plans within this of the best estimate: in the
# ResNet-50 runs every winner's estimate was within 1.57x of the best estimate (mostly
# within 1.35x: split tiles, wgrad's explicit GEMM); the multi-kernel Winograd / FFT
# pipelines beyond 2x never won and cost the find seconds of compiling (their F(4x4)
# transforms 1.5-2.5 s each). Measured on the H100's ResNet-50 finds: docs/design/runtime.md
EXTRA_MARGIN = 2.0


def _names_a_candidate(hit: dict, plans: list) -> bool:
    """Whether an autotune cache entry names at least one of the candidate plans."""
    names = set(hit["order"])
    return any(p.name in names for p in plans)


def _warn_stale(graph, target, hit: dict) -> None:
    warnings.warn(
        f"opendnn: the autotune cache entry for {graph.describe()} on {target.name} "
        f"names no plan among the candidates ({', '.join(hit['order'][:3])}): "
        "tuning again",
        RuntimeWarning,
        stacklevel=4,
    )


def _check_pack(variant_pack, op: str) -> None:
    if not isinstance(variant_pack, Mapping):
        raise BadParamError(
            f"variant pack must be a mapping (graph tensor or uid -> buffer), "
            f"got {type(variant_pack).__name__}",
            op=op,
            status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
        )


def _no_overrides(op: str, *overrides) -> None:
    """cudnn-frontend's execute-time shape overrides: NOT_SUPPORTED when any is given."""
    if any(o is not None for o in overrides):
        raise GraphNotSupportedError(
            "override_uids / override_shapes / override_strides (other shapes at execute) "
            "are not supported: plans are specialized on the graph's shapes",
            op=op,
            status=Status.NOT_SUPPORTED,
        )


def _is_gap(engine_id, count: int) -> bool:
    """An integer id below ``count`` that no registered engine has."""
    return type(engine_id) is int and 0 <= engine_id < count and by_id(engine_id) is None


def _kernel_cfg(e, g, target, knobs: dict, supported: bool, op: str) -> dict:
    """``knobs`` with a ``knob_type.KERNEL_CFG: index`` entry replaced by the named knobs
    of the engine's index-th listed config; other cuDNN knob kinds have no counterpart."""
    kinds = [k for k in knobs if isinstance(k, KnobType)]
    for k in kinds:
        if k != KnobType.KERNEL_CFG:
            raise GraphNotSupportedError(
                f"knob_type.{k.name} has no opendnn counterpart (knobs are named: "
                "get_knobs_for_engine)",
                op=op,
                status=Status.NOT_SUPPORTED,
            )
    if not kinds:
        return knobs
    index = knobs.pop(KnobType.KERNEL_CFG)
    configs = e.configs(g, target) if supported else []
    if type(index) is not int or not 0 <= index < len(configs):
        raise BadParamError(
            f"KERNEL_CFG {index!r:.20} is not a config index of {e.name} on this graph "
            f"(0 .. {len(configs) - 1})",
            op=op,
            status=Status.BAD_PARAM_OUT_OF_BOUND,
        )
    return {**configs[index].knob_dict, **knobs}


def _check_handle(handle, op: str) -> None:
    """None, or a Handle on a device kernels can run on."""
    if handle is None:
        return
    if not isinstance(handle, Handle):
        raise BadParamError(
            f"handle must be an opendnn Handle (cudnn.create_handle()), got "
            f"{type(handle).__name__}",
            op=op,
            status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
        )
    if handle.device.type == "meta":
        raise BadParamError(
            "handle is on the meta device, where nothing can run", op=op, status=Status.BAD_PARAM
        )


def _as_int(value, op: str, what: str) -> int:
    """``value`` as an int: Python and NumPy integers; bool, float and str are refused."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise BadParamError(
        f"{what} must be an integer, got {type(value).__name__} {value!r:.40}",
        op=op,
        status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
    )


def _as_enum(cls, value, op: str, what: str):
    """``value`` as a member of ``cls`` (a member or its integer value, not a bool)."""
    if isinstance(value, cls):
        return value
    if not isinstance(value, bool):
        try:
            return cls(operator.index(value))
        except (TypeError, ValueError):
            pass
    names = ", ".join(m.name for m in cls)
    raise BadParamError(
        f"{value!r:.40} is not a {what} (one of {names})",
        op=op,
        status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
    )


def _items(values, op: str, what: str) -> list:
    """A list of ``values`` (any iterable but a string)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise BadParamError(
            f"{what} must be a list, got {type(values).__name__}",
            op=op,
            status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
        )
    return list(values)


def _notes(cls, notes, op: str) -> frozenset:
    """A note filter's argument: one note or a list of them."""
    if isinstance(notes, cls):
        return frozenset([notes])
    return frozenset(_as_enum(cls, n, op, cls.__name__) for n in _items(notes, op, "notes"))


def _engine(engine_id, op: str):
    """The registered engine with id ``engine_id`` (an integer, not a bool)."""
    try:
        e = None if isinstance(engine_id, bool) else by_id(operator.index(engine_id))
    except TypeError:
        e = None
    if e is None:
        raise BadParamError(
            f"no engine with id {engine_id!r:.40}", op=op, status=Status.BAD_PARAM_OUT_OF_BOUND
        )
    return e


# what a malformed document raises while it is read
_MALFORMED = (ValueError, KeyError, IndexError, TypeError, AttributeError)


def _json_kind(value) -> str:
    kinds = {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }
    return kinds.get(type(value), type(value).__name__)


def _data_type(name) -> DataType:
    if not isinstance(name, str) or name not in DataType.__members__:
        raise ValueError(f"{name!r:.40} is not a data type name")
    return DataType[name]


def _reason(e: BaseException) -> str:
    if isinstance(e, KeyError):
        return f"missing or unknown key {e}"
    return str(e) or type(e).__name__


def _parse_document(blob) -> tuple:
    """(data types, OpGraph, {uid: scalar}, [[(node indices, EngineConfig)] per plan]) of a
    serialized graph; SERIALIZATION_VERSION_MISMATCH naming what is malformed."""
    where = "document"
    try:
        doc = json.loads(bytes(blob).decode())
        if not isinstance(doc, dict):
            raise ValueError(f"{_json_kind(doc)}, not an object")
        if doc.get("format") != FORMAT:
            raise ValueError(f"format {doc.get('format')!r} is not {FORMAT!r}")
        where = "'types'"
        names = doc["types"]
        if not isinstance(names, list) or len(names) != 3:
            raise ValueError(f"{names!r:.60} is not a list of 3 data type names")
        types = tuple(_data_type(n) for n in names)
        where = "'graph'"
        og = OpGraph.from_json(doc["graph"])
        where = "'scalars'"
        scalars = {}
        raw = doc.get("scalars", {})
        if not isinstance(raw, dict):
            raise ValueError(f"{_json_kind(raw)}, not an object")
        for k, v in raw.items():
            if not k.isdigit():
                raise ValueError(f"key {k!r:.40} is not a uid")
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(f"the value of uid {k} is {v!r:.40}, not a number")
            scalars[int(k)] = v
        where = "'plans'"
        plans = doc.get("plans", [])
        if not isinstance(plans, list):
            raise ValueError(f"{_json_kind(plans)}, not a list")
        out = []
        for k, pj in enumerate(plans):
            where = f"plan {k}"
            stages = []
            for st in pj["stages"]:
                index = st["node_index"]
                if not isinstance(index, list) or not all(type(i) is int for i in index):
                    raise ValueError(f"node_index {index!r:.60} is not a list of integers")
                cfg = EngineConfig.from_json(st["config"])
                if type(cfg.engine_id) is not int or by_id(cfg.engine_id) is None:
                    raise ValueError(f"engine id {cfg.engine_id!r:.40} is not registered")
                for name, value in cfg.knobs:
                    if not isinstance(name, str) or not isinstance(
                        value, (int, float, str, type(None))
                    ):
                        raise ValueError(
                            f"knob {name!r:.40} = {value!r:.40} is not a name and a number"
                        )
                stages.append((index, cfg))
            if not stages:
                raise ValueError("has no stages")
            out.append(stages)
    except OpenDNNError as e:  # a descriptor's own rule (a negative dimension)
        raise BadParamError(e.rule, op="deserialize", tensor=e.tensor, status=e.status) from None
    except _MALFORMED as e:
        raise BadParamError(
            f"malformed {where}: {_reason(e)}",
            op="deserialize",
            status=Status.SERIALIZATION_VERSION_MISMATCH,
        ) from None
    return types, og, scalars, out


def _restore_plan(g: OpGraph, order: list, stages: list, k: int, target) -> ExecutionPlan:
    """Plan ``k`` of a document on the validated graph ``g`` (``order[i]``: the position
    of the document's node i in ``g``), checked and built."""

    def malformed(rule):
        return BadParamError(
            f"plan {k}: {rule}", op="deserialize", status=Status.SERIALIZATION_VERSION_MISMATCH
        )

    stage_of: dict = {}
    for j, (index, _) in enumerate(stages):
        for i in index:
            if not 0 <= i < len(order):
                raise malformed(f"node index {i} out of range (0..{len(order) - 1})")
            if order[i] in stage_of:
                raise malformed(f"node index {i} is in two stages")
            stage_of[order[i]] = j
    if len(stage_of) != len(order):
        raise malformed(f"its stages take {len(stage_of)} of the graph's {len(order)} nodes")
    position = {id(n): i for i, n in enumerate(g.nodes)}
    for n in g.nodes:  # a stage reads only what earlier stages wrote
        for u in OpGraph.node_uids(n, "inputs"):
            p = g.producers.get(u)
            if p is not None and stage_of[position[id(p)]] > stage_of[position[id(n)]]:
                raise malformed(
                    f"{n.label()} runs in a stage before the one that "
                    f"produces its input '{g.tensors[u].label()}'"
                )
    pieces = []
    for index, cfg in stages:  # each piece's nodes in the graph's (dataflow) order
        nodes = [g.nodes[i] for i in sorted(order[i] for i in index)]
        pieces.append((g if len(stages) == 1 else g.piece(nodes), cfg))
    plan = ExecutionPlan(g, pieces, target, "deserialized")
    sup = plan.check_support()
    if not sup.ok:
        raise GraphNotSupportedError(
            f"plan {plan.name} cannot run here",
            reasons={plan.name: sup.reason},
            op="deserialize",
            status=Status.NOT_SUPPORTED,
        )
    return plan.build()


def _time_plan(fn, variant_pack, warmup, iters) -> float:
    """Median milliseconds of ``fn`` (see runtime.timing: kernel time on the GPU)."""
    on_cuda = any(isinstance(v, torch.Tensor) and v.is_cuda for v in variant_pack.values())
    return timing.median_ms(fn, on_cuda, warmup, iters)
