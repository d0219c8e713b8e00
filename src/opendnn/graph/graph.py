"""``Graph``: build an operation graph, validate it, pick and build plans, execute.

Lifecycle (cudnn-frontend's names): ``validate`` -> ``build_operation_graph`` ->
``create_execution_plans([modes])`` -> ``check_support`` -> ``build_plans(policy)`` ->
``execute(variant_pack, workspace)``; ``build([modes])`` runs the whole chain.

Validation rules (each raises a typed error naming the node, the tensor and the rule):
dataflow is by uid (node order does not matter); a uid has one producer; no cycles; a
multi-node graph may not be in-place; a virtual tensor must be produced by a node; an
output may not have overlapping strides; every property a node needs is set or inferable.
A tensor that no node consumes is a graph output even without ``set_output``.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import time

import torch

from .. import backends, heuristics, log
from ..engines.base import EngineConfig
from ..engines.registry import by_id, engines
from ..enums import BehaviorNote, BuildPlanPolicy, DataType, HeurMode, NumericalNote
from ..errors import BadParamError, GraphNotSupportedError, Status
from ..handle import Handle, default_handle, target_for
from ..plan import ExecutionPlan
from ..runtime import autotune
from ..runtime.buffers import bind, check_no_aliasing, check_workspace
from ..tensor import TensorDesc, as_data_type, packed_strides
from .builders import BuilderMixin
from .nodes import infer_strides_like
from .opgraph import OpGraph
from .tensor import Tensor

FORMAT = "opendnn-graph-v1"


class _Context:
    """Graph-level defaults used while inferring properties."""

    def __init__(self, io_type, intermediate_type, consumed: set):
        self.io_type, self.intermediate_type, self.consumed = io_type, intermediate_type, consumed
        self.hint: dict = {}   # uid -> data type of the first real input it derives from

    def fill_type(self, t: Tensor, like: Tensor | None):
        if like is not None and t.uid not in self.hint:
            self.hint[t.uid] = self.hint.get(like.uid, like.data_type)
        if t.data_type != DataType.NOT_SET:
            return
        if like is not None and like.is_virtual and not t.is_virtual and \
                self.io_type == DataType.NOT_SET:
            t.data_type = self.hint.get(like.uid, DataType.FLOAT)  # e.g. gelu(matmul(bf16))
            return
        if t.is_virtual:
            t.data_type = (self.intermediate_type if self.intermediate_type != DataType.NOT_SET
                           else DataType.FLOAT)
        elif self.io_type != DataType.NOT_SET:
            t.data_type = self.io_type
        elif like is not None and like.data_type != DataType.NOT_SET:
            t.data_type = like.data_type
        else:
            t.data_type = DataType.FLOAT

    def fill_strides(self, t: Tensor, like: Tensor | None):
        if t.stride is None and t.dim is not None:
            t.stride = infer_strides_like(t.dim, like)


class Graph(BuilderMixin):
    """An operation graph (cudnn-frontend's ``pygraph``)."""

    def __init__(self, name: str = "", io_data_type=DataType.NOT_SET,
                 intermediate_data_type=DataType.NOT_SET, compute_data_type=DataType.NOT_SET,
                 handle: Handle | None = None):
        self.name = name
        self.io_data_type = as_data_type(io_data_type)
        self.intermediate_data_type = as_data_type(intermediate_data_type)
        self.compute_data_type = as_data_type(compute_data_type)
        self.handle = handle
        self._nodes: list = []
        self._tensors: list[Tensor] = []
        self._op_graph: OpGraph | None = None
        self._plans: list[ExecutionPlan] = []
        self._reasons: dict = {}
        self._selected: int | None = None
        self._filters: list = []

    # ---- tensors --------------------------------------------------------------------------
    def tensor(self, dim=None, stride=None, data_type=DataType.NOT_SET, is_virtual=False,
               is_pass_by_value=False, name="", uid=-1) -> Tensor:
        """A graph tensor; ``dim``/``stride`` in elements (strides default to packed)."""
        t = Tensor(self, dim, stride, data_type, is_virtual, is_pass_by_value, name, uid)
        self._tensors.append(t)
        self._invalidate()
        return t

    def tensor_like(self, t, name: str = "") -> Tensor:
        """A tensor with the dims, strides and type of a graph tensor, torch tensor or DLPack
        object. CPU single-element tensors become pass-by-value when the graph runs on a
        GPU; on a CPU graph every single-element tensor does."""
        if isinstance(t, Tensor):
            return self.tensor(t.dim, t.stride, t.data_type, False, t.is_pass_by_value,
                               name or t.name)
        if not isinstance(t, torch.Tensor):
            if hasattr(t, "__dlpack__"):
                t = torch.from_dlpack(t)
            else:
                raise BadParamError(f"tensor_like needs a tensor, got {type(t).__name__}",
                                    op="tensor_like", tensor=name or None,
                                    status=Status.BAD_PARAM_ATTRIBUTE_TYPE)
        dims = list(t.shape) or [1]
        strides = list(t.stride()) or [1]
        by_value = t.numel() == 1 and t.device.type == "cpu" and (
            t.dim() == 0 or self._device().type == "cpu")
        out = self.tensor(dims, strides, t.dtype, False, by_value, name)
        if by_value:
            out.value = t.item()
        return out

    def _device(self) -> torch.device:
        return (self.handle or default_handle()).device

    def _invalidate(self):
        self._op_graph = None
        self._plans = []
        self._selected = None

    # ---- validation -----------------------------------------------------------------------
    def validate(self) -> "Graph":
        """Check every rule, infer unset properties, freeze the graph."""
        if self._op_graph is not None:
            return self
        op = f"graph '{self.name}'" if self.name else "graph"
        nodes = list(self._nodes)
        if not nodes:
            raise BadParamError("has no operations", op=op, status=Status.BAD_PARAM_NOT_FINALIZED)
        used = [t for n in nodes for t in n.input_tensors() + n.output_tensors()]
        self._assign_uids(used)
        by_uid: dict = {}
        for t in used:
            by_uid.setdefault(t.uid, [])
            if all(t is not o for o in by_uid[t.uid]):
                by_uid[t.uid].append(t)
        producer: dict = {}
        for n in nodes:
            for t in n.output_tensors():
                if t.uid in producer and producer[t.uid] is not n:
                    raise BadParamError(f"is produced by both {producer[t.uid].label()} and "
                                        f"{n.label()}", op=op, tensor=t.label(),
                                        status=Status.BAD_PARAM_DUPLICATED_ENTRIES)
                producer[t.uid] = n
        for n in nodes:
            ins = {t.uid for t in n.input_tensors()}
            outs = {t.uid for t in n.output_tensors()}
            if ins & outs:
                u = next(iter(ins & outs))
                if len(nodes) > 1:
                    raise BadParamError("is both read and written by one node: a multi-node "
                                        "graph may not be in-place", op=n.label(),
                                        tensor=by_uid[u][0].label(), status=Status.BAD_PARAM)
                if n.kind not in ("pointwise",):
                    raise BadParamError(f"in-place {n.kind} is not allowed (output overwrites "
                                        "an input it still reads)", op=n.label(),
                                        tensor=by_uid[u][0].label(), status=Status.BAD_PARAM)
        order = self._toposort(nodes, producer, op)
        consumed = {t.uid for n in nodes for t in n.input_tensors()}
        # virtual-ness: unconsumed node outputs are graph outputs
        for n in nodes:
            for t in n.output_tensors():
                t.is_virtual = not (t.is_output or t.uid not in consumed)
        for t in used:
            if t.uid not in producer and t.is_virtual:
                raise BadParamError("is virtual but no node produces it", op=op,
                                    tensor=t.label(), status=Status.BAD_PARAM)
        ctx = _Context(self.io_data_type, self.intermediate_data_type, consumed)
        for t in used:
            if t.uid not in producer:
                if t.dim is None:
                    raise BadParamError("input dims are not set", op=op, tensor=t.label(),
                                        status=Status.BAD_PARAM_NOT_FINALIZED)
                ctx.fill_strides(t, None)
                ctx.fill_type(t, None)
                ctx.hint[t.uid] = t.data_type
        for n in order:
            if n.compute_data_type == DataType.NOT_SET:
                n.compute_data_type = (self.compute_data_type
                                       if self.compute_data_type != DataType.NOT_SET
                                       else DataType.FLOAT)
            n.infer_properties(ctx)
            for t in n.output_tensors():
                for twin in by_uid[t.uid]:
                    if twin is not t:
                        twin.dim = twin.dim or t.dim
                        twin.stride = twin.stride or t.stride
                        if twin.data_type == DataType.NOT_SET:
                            twin.data_type = t.data_type
        descs = self._freeze(by_uid, op)
        frozen = []
        for n in order:
            f = copy.copy(n)
            f.inputs = {r: ([t.uid for t in v] if isinstance(v, list) else v.uid)
                        for r, v in n.inputs.items() if v is not None}
            f.outputs = {r: v.uid for r, v in n.outputs.items() if v is not None}
            f.validate(lambda uid: descs[uid])
            frozen.append(f)
        self._op_graph = OpGraph(descs, tuple(frozen), self.name)
        return self

    def _assign_uids(self, used):
        taken = {t.uid for t in used if t._uid_assigned and t.uid >= 0}
        nxt = max(taken, default=0) + 1
        for t in used:
            if not (t._uid_assigned and t.uid >= 0):
                while nxt in taken:
                    nxt += 1
                t.uid = nxt
                t._uid_assigned = True
                taken.add(nxt)

    @staticmethod
    def _toposort(nodes, producer, op):
        """Kahn's order; among ready nodes the one with the smallest signature (kind,
        attributes, where each input comes from) goes first, so the order -- and the
        graph key -- does not depend on the order nodes were added in."""
        deps = {id(n): {id(producer[t.uid]) for t in n.input_tensors()
                        if t.uid in producer and producer[t.uid] is not n} for n in nodes}
        done, order, position = set(), [], {}

        def signature(n):
            ins = []
            for t in n.input_tensors():
                p = producer.get(t.uid)
                ins.append(["node", position[id(p)], list(p.outputs).index(
                    next(r for r, v in p.outputs.items() if v is not None and v.uid == t.uid))]
                           if p is not None and p is not n else
                           ["input", t.dim, t.stride, int(t.data_type), t.is_pass_by_value])
            return json.dumps([n.kind, n.attrs(), ins], default=str)

        pending = list(nodes)
        while pending:
            ready = [n for n in pending if deps[id(n)] <= done]
            if not ready:
                names = ", ".join(n.label() for n in pending)
                raise BadParamError(f"has a cycle through {names}", op=op,
                                    status=Status.BAD_PARAM)
            n = min(ready, key=signature)
            done.add(id(n))
            position[id(n)] = len(order)
            order.append(n)
            pending.remove(n)
        return order

    def _freeze(self, by_uid, op) -> dict:
        descs = {}
        for uid, ts in by_uid.items():
            t = ts[0]
            for other in ts[1:]:
                if (other.dim or t.dim) != (t.dim or other.dim):
                    raise BadParamError(f"uid {uid} is shared by tensors with dims {t.dim} and "
                                        f"{other.dim}", op=op, tensor=other.label(),
                                        status=Status.BAD_PARAM_DUPLICATED_ENTRIES)
            stride = t.stride if t.stride is not None else list(packed_strides(t.dim))
            try:
                d = TensorDesc(tuple(t.dim), tuple(stride), t.data_type, uid, t.name,
                               t.is_virtual, t.is_pass_by_value)
            except BadParamError as e:
                raise BadParamError(e.rule, op=op, tensor=t.label(), status=e.status) from None
            if d.is_pass_by_value and d.numel != 1:
                raise BadParamError(f"pass-by-value tensor must have one element, has dims "
                                    f"{list(d.dims)}", op=op, tensor=d.label(),
                                    status=Status.BAD_PARAM_SHAPE_MISMATCH)
            descs[uid] = d
        for n in self._nodes:
            for t in n.output_tensors():
                d = descs[t.uid]
                if not d.is_virtual and d.has_overlap():
                    raise BadParamError(f"output strides {list(d.strides)} for dims "
                                        f"{list(d.dims)} overlap (two elements, one address)",
                                        op=n.label(), tensor=d.label(),
                                        status=Status.BAD_PARAM_SHAPE_MISMATCH)
        return descs

    @property
    def op_graph(self) -> OpGraph:
        self.validate()
        return self._op_graph

    def key(self) -> str:
        """Hash of everything that decides how the graph runs (for caches)."""
        return self.op_graph.key()

    # ---- plans ------------------------------------------------------------------------------
    def _target(self):
        return target_for(str(self._device()))

    def build_operation_graph(self) -> "Graph":
        self.validate()
        return self

    def create_execution_plans(self, modes) -> "Graph":
        """Candidate plans from the heuristic modes, concatenated in the order given."""
        g = self.op_graph
        if isinstance(modes, HeurMode) or not isinstance(modes, (list, tuple)):
            modes = [modes]
        plans, reasons, seen = [], {}, set()
        for m in modes:
            m = HeurMode(m) if not isinstance(m, HeurMode) else m
            ps, rs = heuristics.plans_for_mode(g, m, self._target())
            reasons.update(rs)
            for p in ps:
                if p.name not in seen:
                    seen.add(p.name)
                    plans.append(p)
        self._plans = [p for p in plans if heuristics.allowed(p)]
        self._reasons = reasons
        for f in self._filters:
            self._plans = [p for p in self._plans if f(p)]
        self._selected = None
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
        for i, p in enumerate(self._plans):
            try:
                p.build()
            except GraphNotSupportedError as e:
                errors[p.name] = e.rule
                continue
            if self._selected is None:
                self._selected = i
                log.info(f"selected plan {p.name} ({p.origin}): {p.describe()}")
            if BuildPlanPolicy(policy) == BuildPlanPolicy.HEURISTICS_CHOICE:
                break
        if self._selected is None:
            raise GraphNotSupportedError("no candidate plan could be built", reasons=errors,
                                         status=Status.NOT_SUPPORTED)
        return self

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
        base = {k.name: k.default for k in e.knob_space(g)}
        base.update(knobs or {})
        cfg = EngineConfig.make(e, **base)
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
        if backends.benchmark and not getattr(self, "_tuned", False) and len(self._plans) > 1:
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
                             self._scalar_defaults())
        check_no_aliasing(g, bound, op)
        ws = check_workspace(workspace, plan.workspace_size, device, op)
        stream = h.cuda_stream() if (h is not None and device.type == "cuda") else None
        plan.run(bound, ws, stream)

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
        Returns [(plan name, median ms)] fastest first."""
        timings = []
        for i, p in enumerate(self._plans):
            try:
                p.build()
            except GraphNotSupportedError:
                continue
            if p.workspace_size > _nbytes(workspace):
                continue
            timings.append((_time_plan(lambda: self._run(p, variant_pack, workspace, handle),
                                       variant_pack, warmup, iters), i))
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
        log.info("autotune: " + ", ".join(f"{n} {t:.4f} ms" for n, (t, _) in zip(names, timings)))
        return [(n, t) for n, (t, _) in zip(names, timings)]

    def _benchmark_once(self, variant_pack, workspace, handle) -> None:
        hit = autotune.lookup(self.key(), self._target().name)
        self._tuned = True
        if hit:
            self._plans = heuristics.reorder_by_cache(self.op_graph, self._plans, self._target())
            self._selected = None
            self.build_plans()
            return
        limit = backends.benchmark_limit or len(self._plans)
        keep = self._plans[limit:]
        self._plans = self._plans[:limit]
        self.autotune(variant_pack, workspace, handle)
        self._plans += keep

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


def _nbytes(workspace) -> int:
    if workspace is None:
        return 0
    return workspace.numel() * workspace.element_size() if isinstance(workspace, torch.Tensor) \
        else len(workspace)


def _time_plan(fn, variant_pack, warmup, iters) -> float:
    """Median milliseconds of ``fn`` (CUDA events on GPU buffers, wall clock on CPU)."""
    on_cuda = any(isinstance(v, torch.Tensor) and v.is_cuda for v in variant_pack.values())
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if on_cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]
