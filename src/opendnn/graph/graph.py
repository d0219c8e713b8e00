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

import json

import torch

from ..enums import NAMED_ONLY_TYPES, DataType, PointwiseMode, ScalarType, TensorReordering
from ..errors import BadParamError, GraphNotSupportedError, InternalError, Status
from ..handle import Handle, default_handle
from ..plan import ExecutionPlan
from ..runtime.lru import LRU, plan_cache_size
from ..tensor import TensorDesc, packed_strides
from . import memo
from .aot import AotOptions
from .builders import BuilderMixin
from .lifecycle import LifecycleMixin
from .nodes import check_compute_type, infer_strides_like
from .opgraph import OpGraph
from .tensor import Tensor, as_enum, as_float, as_int, as_type

# frozen descriptors by their fields: a graph re-created with the same tensors (a
# framework's every step, benchmark mode's cached find) shares them, and what they derive
# once (span, bytes, overlap) with them. At most DESCS_PER_PLAN x plan_cache_size, least
# recently used dropped first.
DESCS_PER_PLAN = 16
_DESCS = LRU(lambda: DESCS_PER_PLAN * plan_cache_size())


class _Context:
    """Graph-level defaults used while inferring properties."""

    def __init__(self, io_type, intermediate_type, consumed: set):
        self.io_type, self.intermediate_type, self.consumed = io_type, intermediate_type, consumed
        self.hint: dict = {}  # uid -> data type of the first real input it derives from

    def fill_type(self, t: Tensor, like: Tensor | None):
        if like is not None and t.uid not in self.hint:
            self.hint[t.uid] = self.hint.get(like.uid, like.data_type)
        if t.data_type != DataType.NOT_SET:
            return
        if (
            like is not None
            and like.is_virtual
            and not t.is_virtual
            and self.io_type == DataType.NOT_SET
        ):
            t.data_type = self.hint.get(like.uid, DataType.FLOAT)  # e.g. gelu(matmul(bf16))
            return
        if t.is_virtual:
            t.data_type = (
                self.intermediate_type
                if self.intermediate_type != DataType.NOT_SET
                else DataType.FLOAT
            )
        elif self.io_type != DataType.NOT_SET:
            t.data_type = self.io_type
        elif like is not None and like.data_type != DataType.NOT_SET:
            t.data_type = like.data_type
        else:
            t.data_type = DataType.FLOAT

    def fill_strides(self, t: Tensor, like: Tensor | None):
        if t.stride is None and t.dim is not None:
            t.stride = infer_strides_like(t.dim, like)

    def fill_like(self, t: Tensor, like: Tensor, type_like: Tensor | None = None):
        """An output shaped as ``like``: its dims (unless set) and layout, and the type of
        ``type_like`` (default: ``like``)."""
        if t.dim is None:
            t.dim = list(like.dim)
        self.fill_type(t, type_like if type_like is not None else like)
        self.fill_strides(t, like)


class Graph(BuilderMixin, LifecycleMixin):
    """An operation graph (cudnn-frontend's ``pygraph``)."""

    def __init__(
        self,
        name: str = "",
        io_data_type=DataType.NOT_SET,
        intermediate_data_type=DataType.NOT_SET,
        compute_data_type=DataType.NOT_SET,
        handle: Handle | None = None,
        sm_count: int | None = None,
        sm_version: int | None = None,
        kernel_cache=None,
        device_property=None,
        is_dynamic_shape_enabled: bool = False,
        is_override_shape_enabled: bool = False,
    ):
        """cudnn-frontend's ``pygraph`` arguments, in its order. ``sm_version`` (major * 10
        + minor) and ``sm_count`` describe the GPU the plans are for: they must match the
        device present (or ``device_property``'s) -- plans for another architecture, or
        kernels confined to fewer SMs than the device has, are NOT_SUPPORTED when the
        plans are created. ``kernel_cache`` / ``device_property``: see
        ``graph/aot.py``. ``is_dynamic_shape_enabled`` is accepted (kernels are
        specialized per shape, so it changes no result); ``is_override_shape_enabled``
        (other shapes at execute) is NOT_SUPPORTED."""
        self.name = name
        op = f"graph '{name}'" if name else "graph"
        self._aot = AotOptions.checked(
            op,
            sm_count,
            sm_version,
            kernel_cache,
            device_property,
            is_dynamic_shape_enabled,
            is_override_shape_enabled,
        )
        self.io_data_type = as_type(io_data_type, op, "io_data_type")
        self.intermediate_data_type = as_type(intermediate_data_type, op, "intermediate_data_type")
        self.compute_data_type = as_type(compute_data_type, op, "compute_data_type")
        if handle is not None and not isinstance(handle, Handle):
            raise BadParamError(
                f"handle must be an opendnn Handle (cudnn.create_handle()), "
                f"got {type(handle).__name__}",
                op=op,
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )
        self.handle = handle
        self._nodes: list = []
        self._tensors: list[Tensor] = []
        self._op_graph: OpGraph | None = None
        self._plans: list[ExecutionPlan] = []
        self._reasons: dict = {}
        self._selected: int | None = None
        self._filters: list = []

    # ---- tensors --------------------------------------------------------------------------
    def tensor(
        self,
        dim=None,
        stride=None,
        data_type=DataType.NOT_SET,
        is_virtual=False,
        is_pass_by_value=False,
        ragged_offset=None,
        reordering_type=None,
        name="",
        uid=-1,
    ) -> Tensor:
        """A graph tensor; ``dim``/``stride`` in elements (strides default to packed).
        cudnn-frontend's argument order; ``ragged_offset`` and a ``reordering_type`` other
        than NONE are NOT_SUPPORTED at validate."""
        t = Tensor(self, dim, stride, data_type, is_virtual, is_pass_by_value, name, uid)
        if ragged_offset is not None:
            t.set_ragged_offset(ragged_offset)
        if reordering_type is not None:
            t.set_reordering_type(reordering_type)
        self._tensors.append(t)
        self._invalidate()
        return t

    def tensor_like(self, input, name: str = "") -> Tensor:
        """A tensor with the dims, strides and type of a graph tensor, torch tensor or DLPack
        object. A single-element CPU tensor becomes pass-by-value (a host scalar, as
        cudnn-frontend makes of CPU tensors), whatever device the graph runs on."""
        t = input
        if isinstance(t, Tensor):
            return self.tensor(
                t.dim, t.stride, t.data_type, False, t.is_pass_by_value, name=name or t.name
            )
        if not isinstance(t, torch.Tensor):
            if hasattr(t, "__dlpack__"):
                t = torch.from_dlpack(t)
            else:
                raise BadParamError(
                    f"tensor_like needs a tensor, got {type(t).__name__}",
                    op="tensor_like",
                    tensor=name or None,
                    status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
                )
        dims = list(t.shape) or [1]
        strides = list(t.stride()) or [1]
        # cudnn-frontend makes every CPU tensor pass-by-value; a scalar is one element
        by_value = t.numel() == 1 and t.device.type == "cpu"
        out = self.tensor(dims, strides, t.dtype, False, by_value, name=name)
        if by_value:
            out.value = t.item()
        return out

    def tensor_scalar(self, value, scalar_type=ScalarType.RUNTIME_PARAM) -> Tensor:
        """cudnn-frontend's ``tensor_scalar``: a rank-1 FLOAT pass-by-value tensor holding
        ``value``. RUNTIME_PARAM: the variant pack may give another value at execute (the
        one here is used when it does not); COMPILE_TIME_CONST: the value is the plan's."""
        op = "tensor_scalar"
        as_enum(ScalarType, scalar_type, op, "scalar_type")  # either kind: a known value
        t = self.tensor([1], [1], DataType.FLOAT, False, True)
        t.value = as_float(value, op, "value")
        return t

    def query_tensor_attributes_of_uid(self, uid) -> Tensor:
        """The tensor of this graph with ``uid`` (cudnn-frontend's query); BAD_PARAM when
        none has it (uids are given at validate to tensors without one)."""
        u = as_int(uid, "query_tensor_attributes_of_uid", "uid")
        for t in self._tensors:
            if t.uid == u and u >= 0:
                return t
        raise BadParamError(
            f"no tensor of this graph has uid {u}",
            op="query_tensor_attributes_of_uid",
            status=Status.BAD_PARAM,
        )

    def _device(self) -> torch.device:
        return (self.handle or default_handle()).device

    def _invalidate(self):
        self._op_graph = None
        self._plans = []
        self._selected = None

    # ---- validation -----------------------------------------------------------------------
    def validate(self) -> "Graph":
        """Check every rule, infer unset properties, freeze the graph.

        A graph built exactly as one validated before in this process (the same nodes,
        attributes and tensor properties, tensor for tensor: a framework re-creating its
        graph every step, benchmark mode's cached find) takes that validation's outcome
        -- the inferred properties and the frozen graph -- without redoing it."""
        if self._op_graph is not None:
            return self
        for n in self._nodes:  # ragged offsets become inputs of the nodes that read them
            attach = getattr(n, "attach_ragged_offsets", None)
            if attach is not None:
                attach()
        fp, tensors = memo.fingerprint(self)
        hit = memo.lookup(fp)
        if hit is not None and not memo.CHECK:
            memo.apply(hit, self, tensors)
            return self
        self._validate()
        if hit is not None:  # memo.CHECK: the outcome must be the one recorded
            now = memo.record(self, tensors)
            if now[:2] != hit[:2] or now[2].key() != hit[2].key():
                raise InternalError(
                    f"validation memo of {self._op_graph.describe()} differs "
                    f"from a fresh validation: {hit[:2]} vs {now[:2]}"
                )
            return self
        memo.store(fp, self, tensors)
        return self

    def _validate(self) -> None:
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
                    raise BadParamError(
                        f"is produced by both {producer[t.uid].label()} and {n.label()}",
                        op=op,
                        tensor=t.label(),
                        status=Status.BAD_PARAM_DUPLICATED_ENTRIES,
                    )
                producer[t.uid] = n
        for n in nodes:
            ins = {t.uid for t in n.input_tensors()}
            outs = {t.uid for t in n.output_tensors()}
            if ins & outs:
                u = next(iter(ins & outs))
                if len(nodes) > 1:
                    raise BadParamError(
                        "is both read and written by one node: a multi-node "
                        "graph may not be in-place",
                        op=n.label(),
                        tensor=by_uid[u][0].label(),
                        status=Status.BAD_PARAM,
                    )
                if n.kind not in ("pointwise",):
                    raise BadParamError(
                        f"in-place {n.kind} is not allowed (output overwrites "
                        "an input it still reads)",
                        op=n.label(),
                        tensor=by_uid[u][0].label(),
                        status=Status.BAD_PARAM,
                    )
        self._check_pass_by_value(producer, used)
        _check_memory_layouts(used, nodes)
        order = self._toposort(nodes, producer, op)
        consumed = {t.uid for n in nodes for t in n.input_tensors()}
        # virtual-ness: unconsumed node outputs are graph outputs
        for n in nodes:
            for t in n.output_tensors():
                t.is_virtual = not (t.is_output or t.uid not in consumed)
        for t in used:
            if t.uid not in producer and t.is_virtual:
                raise BadParamError(
                    "is virtual but no node produces it",
                    op=op,
                    tensor=t.label(),
                    status=Status.BAD_PARAM,
                )
        ctx = _Context(self.io_data_type, self.intermediate_data_type, consumed)
        for t in used:
            if t.uid not in producer:
                if t.dim is None:
                    raise BadParamError(
                        "input dims are not set",
                        op=op,
                        tensor=t.label(),
                        status=Status.BAD_PARAM_NOT_FINALIZED,
                    )
                ctx.fill_strides(t, None)
                ctx.fill_type(t, None)
                ctx.hint[t.uid] = t.data_type
        # the graph's inputs, checked before a node reads them: handles of one uid agree;
        # rank, dims and strides; a pass-by-value tensor has one element
        for uid, ts in by_uid.items():
            if uid in producer:
                continue
            for other in ts[1:]:
                self._check_twins(uid, ts[0], other, op)
            d = self._desc(ts[0], op)
            if d.is_pass_by_value and d.numel != 1:
                reader = next(
                    n.label() for n in nodes if any(t.uid == uid for t in n.input_tensors())
                )
                raise BadParamError(
                    f"pass-by-value tensor must have one element, has dims {list(d.dims)}",
                    op=reader,
                    tensor=d.label(),
                    status=Status.BAD_PARAM_SHAPE_MISMATCH,
                )
        check_compute_type(self.compute_data_type, op)
        for n in order:
            if n.compute_data_type == DataType.NOT_SET:
                n.compute_data_type = (
                    self.compute_data_type
                    if self.compute_data_type != DataType.NOT_SET
                    else DataType.FLOAT
                )
            check_compute_type(n.compute_data_type, n.label(), n.kind, getattr(n, "mode", None))
            for t in n.output_tensors():  # what a twin declares, the node's output has
                for twin in by_uid[t.uid]:
                    _adopt(t, twin)
            n.infer_properties(ctx)
            for t in n.output_tensors():  # and what was inferred, every twin has
                for twin in by_uid[t.uid]:
                    _adopt(twin, t)
        descs = self._freeze(by_uid, op)
        frozen = []
        for n in order:
            f = object.__new__(type(n))  # a shallow copy (copy.copy, without its
            f.__dict__.update(n.__dict__)  # reduce protocol: validate runs per graph)
            f.inputs = {
                r: ([t.uid for t in v] if isinstance(v, list) else v.uid)
                for r, v in n.inputs.items()
                if v is not None
            }
            f.outputs = {r: v.uid for r, v in n.outputs.items() if v is not None}
            f.validate(lambda uid: descs[uid])
            frozen.append(f)
        _check_int32_compute(frozen, descs)
        self._op_graph = OpGraph(descs, tuple(frozen), self.name)

    @staticmethod
    def _check_pass_by_value(producer, used) -> None:
        """A pass-by-value tensor is a host scalar the caller supplies: no node writes one
        (an output is written to memory; a host number cannot be)."""
        for t in used:
            if t.is_pass_by_value and t.uid in producer:
                raise BadParamError(
                    "a node output cannot be pass-by-value (a host scalar is "
                    "an input the caller supplies)",
                    op=producer[t.uid].label(),
                    tensor=t.label(),
                    status=Status.BAD_PARAM,
                )

    def _assign_uids(self, used):
        # every uid the caller set is kept clear, used or not: a pack may name a tensor
        # made on the graph that no operation uses (cuDNN ignores that entry)
        taken = {t.uid for t in (*self._tensors, *used) if t._uid_assigned and t.uid >= 0}
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
        deps = {
            id(n): {
                id(producer[t.uid])
                for t in n.input_tensors()
                if t.uid in producer and producer[t.uid] is not n
            }
            for n in nodes
        }
        done, order, position = set(), [], {}

        def signature(n):
            ins = []
            for t in n.input_tensors():
                p = producer.get(t.uid)
                ins.append(
                    [
                        "node",
                        position[id(p)],
                        list(p.outputs).index(
                            next(
                                r for r, v in p.outputs.items() if v is not None and v.uid == t.uid
                            )
                        ),
                    ]
                    if p is not None and p is not n
                    else ["input", t.dim, t.stride, int(t.data_type), t.is_pass_by_value]
                )
            return json.dumps([n.kind, n.attrs(), ins], default=str)

        pending = list(nodes)
        while pending:
            ready = [n for n in pending if deps[id(n)] <= done]
            if not ready:
                names = ", ".join(n.label() for n in pending)
                raise BadParamError(f"has a cycle through {names}", op=op, status=Status.BAD_PARAM)
            n = ready[0] if len(ready) == 1 else min(ready, key=signature)
            done.add(id(n))
            position[id(n)] = len(order)
            order.append(n)
            pending.remove(n)
        return order

    @staticmethod
    def _desc(t: Tensor, op) -> TensorDesc:
        """The frozen descriptor of ``t`` (shared by equal fields); its rules (rank 1 to 8,
        dims and strides non-negative, one stride per dim) raise naming ``t``."""
        stride = t.stride if t.stride is not None else packed_strides(t.dim)
        fields = (
            tuple(t.dim),
            tuple(stride),
            t.data_type,
            t.uid,
            t.name,
            t.is_virtual,
            t.is_pass_by_value,
        )
        d = _DESCS.get(fields)
        if d is None:
            try:
                d = TensorDesc(*fields)
            except BadParamError as e:
                raise BadParamError(e.rule, op=op, tensor=t.label(), status=e.status) from None
            _DESCS[fields] = d
        return d

    @staticmethod
    def _check_twins(uid, t: Tensor, other: Tensor, op) -> None:
        """Two handles of one uid are one tensor: every property set on both must agree."""

        def seq(v):
            return None if v is None else list(v)

        for what, a, b in (
            ("dims", seq(t.dim), seq(other.dim)),
            ("strides", seq(t.stride), seq(other.stride)),
            ("data type", t.data_type.name, other.data_type.name),
            ("pass-by-value", t.is_pass_by_value, other.is_pass_by_value),
        ):
            if a is not None and b is not None and a != b:
                raise BadParamError(
                    f"uid {uid} is shared by tensors '{t.label()}' and "
                    f"'{other.label()}' with {what} {a} and {b}",
                    op=op,
                    tensor=other.label(),
                    status=Status.BAD_PARAM_DUPLICATED_ENTRIES,
                )

    def _freeze(self, by_uid, op) -> dict:
        descs = {}
        for uid, ts in by_uid.items():
            t = ts[0]
            for other in ts[1:]:
                self._check_twins(uid, t, other, op)
            descs[uid] = self._desc(t, op)
        for n in self._nodes:
            for t in n.output_tensors():
                d = descs[t.uid]
                if not d.is_virtual and d.has_overlap():
                    raise BadParamError(
                        f"output strides {list(d.strides)} for dims "
                        f"{list(d.dims)} overlap (two elements, one address)",
                        op=n.label(),
                        tensor=d.label(),
                        status=Status.BAD_PARAM_SHAPE_MISMATCH,
                    )
        return descs

    @property
    def op_graph(self) -> OpGraph:
        self.validate()
        return self._op_graph

    def key(self) -> str:
        """Hash of everything that decides how the graph runs (for caches)."""
        return self.op_graph.key()


def _adopt(t, twin) -> None:
    """``t`` takes the dims, strides and data type ``twin`` (a graph tensor of the same uid)
    declares where ``t`` leaves them unset."""
    if twin is not t:
        t.dim = t.dim or twin.dim
        t.stride = t.stride or twin.stride
        if t.data_type == DataType.NOT_SET:
            t.data_type = twin.data_type


def _check_int32_compute(nodes, descs) -> None:
    """INT32 compute belongs to an int8 convolution (its operands int8), to pointwise nodes
    downstream of one, only through pointwise nodes (its exact epilogue), and to generated
    indices and pointwise arithmetic on them (cudnn-frontend's mask subgraphs: values
    bounded by the dims, exact in float32)."""
    producer = {u: n for n in nodes for u in OpGraph.node_uids(n, "outputs")}

    def from_int8_conv(n, seen) -> bool:
        for u in OpGraph.node_uids(n, "inputs"):
            p = producer.get(u)
            if p is None or id(p) in seen:
                continue
            seen.add(id(p))
            if p.kind == "conv_fprop" and descs[p.inputs["X"]].data_type == DataType.INT8:
                return True
            if p.kind == "pointwise" and from_int8_conv(p, seen):
                return True
        return False

    def from_indices(n, seen) -> bool:
        """Every operand a generated index (gen_index, or integer arithmetic on such) or a
        pass-by-value scalar: values bounded by the dims, exact in float32."""
        for u in OpGraph.node_uids(n, "inputs"):
            if descs[u].is_pass_by_value:
                continue
            p = producer.get(u)
            if p is None or p.kind != "pointwise" or id(p) in seen:
                return False
            seen.add(id(p))
            if getattr(p, "mode", None) != PointwiseMode.GEN_INDEX and not (
                p.compute_data_type == DataType.INT32 and from_indices(p, seen)
            ):
                return False
        return True

    for n in nodes:
        if n.compute_data_type != DataType.INT32:
            continue
        if n.kind == "conv_fprop":
            if descs[n.inputs["X"]].data_type != DataType.INT8:
                raise GraphNotSupportedError(
                    "compute_data_type INT32 is int8 convolution's (image and filter INT8)",
                    op=n.label(),
                    status=Status.NOT_SUPPORTED_DATA_TYPE,
                )
        elif getattr(n, "mode", None) == PointwiseMode.GEN_INDEX or from_indices(n, set()):
            continue  # generated indices and their arithmetic: exact in float32
        elif not from_int8_conv(n, set()):
            raise GraphNotSupportedError(
                "compute_data_type INT32 on a pointwise operation is taken in an int8 "
                "convolution's epilogue only (exact integer arithmetic)",
                op=n.label(),
                status=Status.NOT_SUPPORTED_DATA_TYPE,
            )


def _check_memory_layouts(used, nodes) -> None:
    """cudnn-frontend's named-only data types, ragged offsets and reordered layouts:
    tensors here are plain strided memory of the types the engines take, so a graph
    holding any of these is NOT_SUPPORTED, naming the feature -- but for ragged offsets
    on the attention tensors that take them (their nodes' RAGGED_<role> inputs)."""
    ragged = {
        id(t)
        for n in nodes
        for r, t in {**n.inputs, **n.outputs}.items()
        if f"RAGGED_{r}" in n.inputs and t is not None
    }
    for t in used:
        if id(t) in ragged:
            continue
        if t.data_type in NAMED_ONLY_TYPES:
            raise GraphNotSupportedError(
                f"data type {t.data_type.name} is not supported (cuDNN's vectorized, "
                "block-scale and sub-byte types are named only)",
                op="validate",
                tensor=t.label(),
                status=Status.NOT_SUPPORTED_DATA_TYPE,
            )
        if t.ragged_offset is not None:
            raise GraphNotSupportedError(
                "ragged offsets (packed variable-length / THD layouts) are supported on "
                "attention's Q, K, V, O and gradients only",
                op="validate",
                tensor=t.label(),
                status=Status.NOT_SUPPORTED,
            )
        if t.reordering_type != TensorReordering.NONE:
            raise GraphNotSupportedError(
                f"tensor reordering {t.reordering_type.name} is not supported (tensors are "
                "plain strided memory)",
                op="validate",
                tensor=t.label(),
                status=Status.NOT_SUPPORTED,
            )


# cudnn-frontend methods whose operation opendnn does not provide: each exists and raises
# NOT_SUPPORTED naming the feature (code written for cuDNN fails with cuDNN's status, not
# with an AttributeError)
NOT_SUPPORTED_METHODS = {
    "adalayernorm": "adaptive layer norm",
    "adalayernorm_backward": "adaptive layer norm backward",
    "block_scale_quantize": "block-scaled (MX) quantization",
    "block_scale_dequantize": "block-scaled (MX) dequantization",
    "sdpa_fp8": "FP8 attention",
    "sdpa_fp8_backward": "FP8 attention backward",
    "sdpa_mxfp8": "MXFP8 attention",
    "sdpa_mxfp8_backward": "MXFP8 attention backward",
    "populate_cuda_graph": "populating a caller's CUDA graph with the plan's kernels",
    "update_cuda_graph": "updating a caller's CUDA graph with new buffers",
}


def _refusal(method: str, feature: str):
    def call(self, *args, **kwargs):
        raise BadParamError(f"{feature} is not supported", op=method, status=Status.NOT_SUPPORTED)

    call.__name__ = method
    call.__doc__ = f"cudnn-frontend's ``{method}``: {feature} is not supported (NOT_SUPPORTED)."
    return call


for _method, _feature in NOT_SUPPORTED_METHODS.items():
    setattr(Graph, _method, _refusal(_method, _feature))
