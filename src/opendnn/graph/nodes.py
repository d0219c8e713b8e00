"""Operation nodes: one dataclass per operation kind.

Each node names its tensors by role (``inputs``/``outputs`` map role -> tensor; while
the graph is being built the values are ``Tensor`` handles, in a validated graph they
are uids). ``infer_properties`` fills in what the user left unset on the outputs;
``validate`` checks the node against the frozen descriptors and raises a typed error
naming the node, the tensor and the rule.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import ClassVar

from ..enums import DataType, PointwiseMode, ReductionMode, ReshapeMode
from ..errors import BadParamError, Status, UnsupportedParamError
from ..ops.pointwise import DEFAULT_ATTRS, MODES
from ..tensor import TensorDesc, packed_strides, stride_order


def broadcast_dims(shapes: list[list[int]]) -> list[int] | None:
    """NumPy-style broadcast of dims lists (left-padded with 1); None if incompatible."""
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        sizes = {s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return out


def broadcastable(dims, to_dims) -> bool:
    if len(dims) > len(to_dims):
        return False
    pad = [1] * (len(to_dims) - len(dims)) + list(dims)
    return all(d == t or d == 1 for d, t in zip(pad, to_dims))


_ATTR_NAMES: dict = {}  # node class -> its attribute fields (attrs() runs per validate)

# compute types some engine honours: every engine computes in float32 (float64 for DOUBLE);
# HALF and BFLOAT16 ask for no more precision than that
COMPUTE_TYPES = (
    DataType.NOT_SET,
    DataType.FLOAT,
    DataType.DOUBLE,
    DataType.HALF,
    DataType.BFLOAT16,
)


# INT32 compute: an int8 convolution's exact int32 accumulation, and the pointwise nodes
# of its epilogue (the graph checks that they follow one, ``check_int32_compute``)
INT32_COMPUTE_KINDS = ("conv_fprop", "pointwise")


# BOOLEAN compute on a comparison, a logical operation or a select (cudnn-frontend's
# masks): float32 computes them exactly, so it is taken and means that
BOOLEAN_COMPUTE_MODES = frozenset(
    {
        PointwiseMode.CMP_EQ,
        PointwiseMode.CMP_NEQ,
        PointwiseMode.CMP_GT,
        PointwiseMode.CMP_GE,
        PointwiseMode.CMP_LT,
        PointwiseMode.CMP_LE,
        PointwiseMode.LOGICAL_AND,
        PointwiseMode.LOGICAL_OR,
        PointwiseMode.LOGICAL_NOT,
        PointwiseMode.BINARY_SELECT,
    }
)


def check_compute_type(ct, op: str, kind: str | None = None, mode=None) -> None:
    """Refuse a compute type no engine honours (boolean outside comparisons, logic and
    selects; fp8; integer outside an int8 convolution or integer operands: ``kind`` is the
    node's, None for the graph's default; ``mode`` a pointwise node's)."""
    if ct == DataType.INT32 and (kind is None or kind in INT32_COMPUTE_KINDS):
        return
    if ct == DataType.BOOLEAN and mode in BOOLEAN_COMPUTE_MODES:
        return
    if ct not in COMPUTE_TYPES:
        raise BadParamError(
            f"compute_data_type {ct.name} is not honoured by any engine (they "
            "compute in float32, or float64 for DOUBLE; INT32 is an int8 convolution's): "
            "use FLOAT, DOUBLE, HALF or BFLOAT16",
            op=op,
            status=Status.NOT_SUPPORTED_DATA_TYPE,
        )


def is_real(v) -> bool:
    """A number an attribute can hold (not a bool, a string or a sequence)."""
    if isinstance(v, (bool, str, bytes)):
        return False
    try:
        float(v)
    except (TypeError, ValueError, RuntimeError):
        return False
    return True


@dataclasses.dataclass(eq=False)
class Node:
    """Base of all nodes. ``kind`` names the operation family."""

    name: str = ""
    compute_data_type: DataType = DataType.NOT_SET
    inputs: dict = dataclasses.field(default_factory=dict)
    outputs: dict = dataclasses.field(default_factory=dict)
    kind: ClassVar[str] = "node"
    # pass-by-value roles whose host values validation checks (in the memo's fingerprint)
    VALUE_ROLES: ClassVar[tuple] = ()

    # ---- identity -------------------------------------------------------------------
    def label(self) -> str:
        return f"{self.kind} '{self.name}'" if self.name else self.kind

    def error(self, rule, tensor=None, status=Status.BAD_PARAM):
        """The typed error of a broken rule: BadParamError, or for a NOT_SUPPORTED* status
        UnsupportedParamError (also the graph-not-supported error cuDNN raises there)."""
        label = tensor.label() if hasattr(tensor, "label") else tensor
        cls = UnsupportedParamError if status.name.startswith("NOT_SUPPORTED") else BadParamError
        return cls(rule, op=self.label(), tensor=label, status=status)

    def need_dims(self, tensors) -> None:
        """Every given tensor (None skipped) has its dims set, else NOT_FINALIZED."""
        for t in tensors:
            if t is not None and t.dim is None:
                raise self.error("input dims are not set", t, Status.BAD_PARAM_NOT_FINALIZED)

    def need_shape(self, d, want, role: str) -> None:
        """Descriptor ``d`` (tensor ``role``) has dims ``want``, else SHAPE_MISMATCH."""
        if d.dims != tuple(want):
            raise self.error(
                f"{role} dims {list(d.dims)} must be {list(want)}",
                d.label(),
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )

    def need_floating(self, descs) -> None:
        """Every given descriptor (None skipped) has a floating type."""
        for d in descs:
            if d is not None and not d.data_type.is_floating:
                raise self.error(
                    f"data type {d.data_type.name} is not a floating type",
                    d.label(),
                    Status.NOT_SUPPORTED_DATA_TYPE,
                )

    def input_tensors(self) -> list:
        out = []
        for v in self.inputs.values():
            if isinstance(v, (list, tuple)):
                out.extend(v)
            elif v is not None:
                out.append(v)
        return out

    def output_tensors(self) -> list:
        return [v for v in self.outputs.values() if v is not None]

    def attrs(self) -> dict:
        """Operation attributes (JSON-able), everything but name, types and tensors."""
        names = _ATTR_NAMES.get(type(self))
        if names is None:
            skip = {"name", "compute_data_type", "inputs", "outputs"}
            names = _ATTR_NAMES[type(self)] = tuple(
                f.name for f in dataclasses.fields(self) if f.name not in skip
            )
        out = {}
        for name in names:
            v = getattr(self, name)
            out[name] = v.name if isinstance(v, enum.Enum) else v
        return out

    # ---- inference (builder tensors) -------------------------------------------------
    def infer_properties(self, ctx) -> None:
        """Fill unset output dims/strides/types. ``ctx`` gives the graph's defaults."""
        like = self.first_input()
        for out in self.output_tensors():
            ctx.fill_type(out, like)
            ctx.fill_strides(out, like)

    def first_input(self):
        for t in self.input_tensors():
            if not t.is_pass_by_value:
                return t
        ts = self.input_tensors()
        return ts[0] if ts else None

    # ---- validation (frozen descriptors) ---------------------------------------------
    def validate(self, desc) -> None:
        """``desc(role_value)`` maps a uid to its TensorDesc."""


# ======================================================================================
@dataclasses.dataclass(eq=False)
class Pointwise(Node):
    """Elementwise ``OUT_0 = f(IN_0[, IN_1[, IN_2]])`` with broadcasting of inputs."""

    mode: PointwiseMode = PointwiseMode.IDENTITY
    relu_lower_clip: float | None = None
    relu_upper_clip: float | None = None
    relu_lower_clip_slope: float | None = None
    elu_alpha: float | None = None
    softplus_beta: float | None = None
    swish_beta: float | None = None
    axis: int | None = None
    kind: ClassVar[str] = "pointwise"

    def label(self) -> str:
        return (
            f"pointwise {self.mode.name} '{self.name}'"
            if self.name
            else f"pointwise {self.mode.name}"
        )

    def op_attrs(self) -> dict:
        """Mode attributes with None meaning the cuDNN default."""
        return {k: v for k, v in self.attrs().items() if k != "mode" and v is not None}

    def infer_properties(self, ctx) -> None:
        out = self.outputs["OUT_0"]
        ins = [t for t in self.input_tensors()]
        self.need_dims(ins)
        if out.dim is None:
            dims = broadcast_dims([t.dim for t in ins])
            if dims is None:
                raise self.error(
                    f"input dims {[t.dim for t in ins]} do not broadcast",
                    ins[-1],
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )
            out.dim = dims
        full = [t for t in ins if not t.is_pass_by_value and t.dim == out.dim]
        like = full[0] if full else self.first_input()
        ctx.fill_type(out, like)
        if out.stride is None and full and _distinct(like):
            # cudnn-frontend's rule: the output takes the strides of the first input of its
            # dims as they are (a slice's gapped strides included: code that binds that
            # slice as the output, e.g. RoPE written in place, relies on it)
            out.stride = list(like.stride)
        ctx.fill_strides(out, like)

    def validate(self, desc) -> None:
        for name in FLOAT_ATTRS:
            v = getattr(self, name)
            if v is not None and not is_real(v):
                raise self.error(
                    f"{name} must be a number, got {v!r} ({type(v).__name__})",
                    status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
                )
        if self.axis is not None and (
            isinstance(self.axis, bool) or not isinstance(self.axis, int)
        ):
            raise self.error(
                f"axis must be an int, got {self.axis!r}", status=Status.BAD_PARAM_ATTRIBUTE_TYPE
            )
        spec = MODES[self.mode]
        n_in = len([k for k in self.inputs if self.inputs[k] is not None])
        if n_in != spec.arity:
            raise self.error(f"needs {spec.arity} inputs, got {n_in}")
        out = desc(self.outputs["OUT_0"])
        for role, uid in self.inputs.items():
            d = desc(uid)
            if not broadcastable(d.dims, out.dims):
                raise self.error(
                    f"input dims {list(d.dims)} do not broadcast to output dims "
                    f"{list(out.dims)} (of '{out.label()}')",
                    d.label(),
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )
        if self.mode == PointwiseMode.GEN_INDEX:
            if self.axis is None or not 0 <= self.axis < len(out.dims):
                raise self.error(
                    f"axis {self.axis} out of range for {len(out.dims)} dims",
                    out.label(),
                    Status.BAD_PARAM_OUT_OF_BOUND,
                )
        if self.softplus_beta is not None and self.softplus_beta == 0:
            raise self.error("softplus_beta must be nonzero")
        if (
            self.relu_lower_clip is not None
            and self.relu_upper_clip is not None
            and self.relu_upper_clip < self.relu_lower_clip
        ):
            raise self.error(
                f"relu upper clip {self.relu_upper_clip} < lower clip {self.relu_lower_clip}"
            )


# ======================================================================================
@dataclasses.dataclass(eq=False)
class Reduction(Node):
    """``Y = reduce_mode(X)`` over the axes where Y's dim is 1 and X's is not."""

    mode: ReductionMode = ReductionMode.ADD
    kind: ClassVar[str] = "reduction"

    def infer_properties(self, ctx) -> None:
        x, y = self.inputs["X"], self.outputs["Y"]
        if y.dim is None:
            raise self.error(
                "output dims must be set: they say which axes are reduced "
                "(reduced axes have size 1)",
                y,
                Status.BAD_PARAM_NOT_FINALIZED,
            )
        ctx.fill_type(y, x)
        ctx.fill_strides(y, x)

    def validate(self, desc) -> None:
        x, y = desc(self.inputs["X"]), desc(self.outputs["Y"])
        if len(x.dims) != len(y.dims) or any(b != a and b != 1 for a, b in zip(x.dims, y.dims)):
            raise self.error(
                f"output dims {list(y.dims)} must equal input dims {list(x.dims)} "
                "or be 1 on reduced axes",
                y.label(),
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )


# ======================================================================================
@dataclasses.dataclass(eq=False)
class GenStats(Node):
    """Per-channel ``SUM = sum(X)`` and ``SQ_SUM = sum(X^2)`` over all axes but axis 1."""

    kind: ClassVar[str] = "genstats"

    def infer_properties(self, ctx) -> None:
        x = self.inputs["X"]
        if len(x.dim) < 2:
            raise self.error(
                "input needs at least 2 dims (N, C, ...)", x, Status.BAD_PARAM_SHAPE_MISMATCH
            )
        for role in ("SUM", "SQ_SUM"):
            t = self.outputs[role]
            if t.dim is None:
                t.dim = [1, x.dim[1]] + [1] * (len(x.dim) - 2)
            if t.data_type == DataType.NOT_SET:
                t.data_type = DataType.FLOAT if ctx.io_type == DataType.NOT_SET else ctx.io_type
            ctx.fill_strides(t, None)

    def validate(self, desc) -> None:
        x = desc(self.inputs["X"])
        want = (1, x.dims[1]) + (1,) * (len(x.dims) - 2)
        for role in ("SUM", "SQ_SUM"):
            d = desc(self.outputs[role])
            if d.dims != want:
                raise self.error(
                    f"{role} dims {list(d.dims)} must be {list(want)}",
                    d.label(),
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )


# ======================================================================================
@dataclasses.dataclass(eq=False)
class Matmul(Node):
    """``C[..., m, n] = sum_k A[..., m, k] B[..., k, n]``; batch dims broadcast."""

    padding: float = 0.0
    kind: ClassVar[str] = "matmul"

    def infer_properties(self, ctx) -> None:
        a, b, c = self.inputs["A"], self.inputs["B"], self.outputs["C"]
        for t in (a, b):
            if t.dim is None or len(t.dim) < 2:
                raise self.error("needs at least 2 dims", t, Status.BAD_PARAM_SHAPE_MISMATCH)
        if c.dim is None:
            batch = broadcast_dims([a.dim[:-2] or [1], b.dim[:-2] or [1]])
            if batch is None:
                raise self.error(
                    f"batch dims {a.dim[:-2]} and {b.dim[:-2]} do not broadcast",
                    b,
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )
            rank = max(len(a.dim), len(b.dim))
            c.dim = (batch + [a.dim[-2], b.dim[-1]])[-rank:] if rank > 2 else [a.dim[-2], b.dim[-1]]
        ctx.fill_type(c, a)
        ctx.fill_strides(c, None)

    def validate(self, desc) -> None:
        a, b, c = desc(self.inputs["A"]), desc(self.inputs["B"]), desc(self.outputs["C"])
        if a.dims[-1] != b.dims[-2]:
            raise self.error(
                f"inner dimensions differ: A is {list(a.dims)}, B is {list(b.dims)} "
                f"(A[-1]={a.dims[-1]} != B[-2]={b.dims[-2]})",
                b.label(),
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        if c.dims[-2:] != (a.dims[-2], b.dims[-1]):
            raise self.error(
                f"output dims {list(c.dims)} must end in [{a.dims[-2]}, {b.dims[-1]}]",
                c.label(),
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        for t in (a, b):
            if not broadcastable(t.dims[:-2], c.dims[:-2]):
                raise self.error(
                    f"batch dims {list(t.dims[:-2])} do not broadcast to {list(c.dims[:-2])}",
                    t.label(),
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )
        for t in (a, b, c):
            if not t.data_type.is_floating:
                raise self.error(
                    f"data type {t.data_type.name} is not a floating type",
                    t.label(),
                    Status.NOT_SUPPORTED_DATA_TYPE,
                )


# ======================================================================================
@dataclasses.dataclass(eq=False)
class Reshape(Node):
    """``Y`` holds X's elements in row-major order under new dims (same count).

    ``mode`` is cudnn-frontend's ``reshape_mode``: LOGICAL is that row-major reshape;
    VIEW_ONLY (cudnn-frontend's default) reads X's memory through Y's strides, which is
    the same wherever X and Y are both row-major packed; a VIEW_ONLY reshape of any other
    layout is NOT_SUPPORTED (it would need X's memory order, not its logical one)."""

    mode: ReshapeMode = ReshapeMode.VIEW_ONLY
    kind: ClassVar[str] = "reshape"

    def infer_properties(self, ctx) -> None:
        x, y = self.inputs["X"], self.outputs["Y"]
        if y.dim is None:
            raise self.error(
                "output dims must be set for a reshape", y, Status.BAD_PARAM_NOT_FINALIZED
            )
        ctx.fill_type(y, x)
        ctx.fill_strides(y, None)

    def validate(self, desc) -> None:
        x, y = desc(self.inputs["X"]), desc(self.outputs["Y"])
        if x.numel != y.numel:
            raise self.error(
                f"element count changes from {x.numel} {list(x.dims)} to {y.numel} {list(y.dims)}",
                y.label(),
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        if self.mode == ReshapeMode.VIEW_ONLY:
            for t in (x, y):
                if not _row_major(t):
                    raise self.error(
                        f"a VIEW_ONLY reshape reads memory as laid out, and {t.label()} "
                        f"(dims {list(t.dims)}, strides {list(t.strides)}) is not row-major "
                        "packed: only the row-major case is supported (reshape_mode=LOGICAL "
                        "reshapes in logical order)",
                        t.label(),
                        Status.NOT_SUPPORTED,
                    )


@dataclasses.dataclass(eq=False)
class Transpose(Node):
    """``Y[i_p0, ..., i_pn] = X[i_0, ..., i_n]``: Y.dims[k] = X.dims[permutation[k]]."""

    permutation: tuple = ()
    kind: ClassVar[str] = "transpose"

    def infer_properties(self, ctx) -> None:
        x, y = self.inputs["X"], self.outputs["Y"]
        perm = list(self.permutation)
        if sorted(perm) != list(range(len(x.dim))):
            raise self.error(
                f"permutation {perm} is not a permutation of {len(x.dim)} axes",
                x,
                Status.BAD_PARAM_OUT_OF_BOUND,
            )
        if y.dim is None:
            y.dim = [x.dim[p] for p in perm]
        ctx.fill_type(y, x)
        ctx.fill_strides(y, None)

    def validate(self, desc) -> None:
        x, y = desc(self.inputs["X"]), desc(self.outputs["Y"])
        want = tuple(x.dims[p] for p in self.permutation)
        if y.dims != want:
            raise self.error(
                f"output dims {list(y.dims)} must be {list(want)}",
                y.label(),
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )


@dataclasses.dataclass(eq=False)
class Slice(Node):
    """``Y = X[start_0:end_0, ..., start_n:end_n]`` (unit step), copied. An end of None
    (a ``slice`` given before X's dims were set) is X's dim."""

    starts: tuple = ()
    ends: tuple = ()
    kind: ClassVar[str] = "slice"

    def infer_properties(self, ctx) -> None:
        x, y = self.inputs["X"], self.outputs["Y"]
        if len(self.starts) != len(x.dim):
            raise self.error(
                f"{len(self.starts)} slices for {len(x.dim)} dims",
                x,
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        self.ends = tuple(d if e is None else e for e, d in zip(self.ends, x.dim))
        for s, e, d in zip(self.starts, self.ends, x.dim):
            if not 0 <= s <= e <= d:
                raise self.error(
                    f"slice [{s}:{e}] out of range for dim {d}", x, Status.BAD_PARAM_OUT_OF_BOUND
                )
        if y.dim is None:
            y.dim = [e - s for s, e in zip(self.starts, self.ends)]
        ctx.fill_type(y, x)
        ctx.fill_strides(y, x)

    def validate(self, desc) -> None:
        y = desc(self.outputs["Y"])
        want = tuple(e - s for s, e in zip(self.starts, self.ends))
        if y.dims != want:
            raise self.error(
                f"output dims {list(y.dims)} must be {list(want)}",
                y.label(),
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )


@dataclasses.dataclass(eq=False)
class Concatenate(Node):
    """``Y`` = inputs joined along ``axis``; ``in_place_index`` names an input already
    stored in Y's memory (cuDNN's in-place concatenation)."""

    axis: int = 0
    in_place_index: int | None = None
    kind: ClassVar[str] = "concatenate"

    def infer_properties(self, ctx) -> None:
        xs, y = self.inputs["X"], self.outputs["Y"]
        if not xs:
            raise self.error("needs at least one input")
        rank = len(xs[0].dim)
        if not 0 <= self.axis < rank:
            raise self.error(
                f"axis {self.axis} out of range for {rank} dims",
                xs[0],
                Status.BAD_PARAM_OUT_OF_BOUND,
            )
        for t in xs:
            if len(t.dim) != rank or any(
                a != b for i, (a, b) in enumerate(zip(t.dim, xs[0].dim)) if i != self.axis
            ):
                raise self.error(
                    f"dims {t.dim} differ from {xs[0].dim} off the axis {self.axis}",
                    t,
                    Status.BAD_PARAM_SHAPE_MISMATCH,
                )
        if y.dim is None:
            y.dim = list(xs[0].dim)
            y.dim[self.axis] = sum(t.dim[self.axis] for t in xs)
        ctx.fill_type(y, xs[0])
        ctx.fill_strides(y, xs[0])

    def validate(self, desc) -> None:
        xs = [desc(u) for u in self.inputs["X"]]
        y = desc(self.outputs["Y"])
        want = list(xs[0].dims)
        want[self.axis] = sum(x.dims[self.axis] for x in xs)
        if list(y.dims) != want:
            raise self.error(
                f"output dims {list(y.dims)} must be {want}",
                y.label(),
                Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        ipi = self.in_place_index
        if ipi is not None and (isinstance(ipi, bool) or not isinstance(ipi, int)):
            raise self.error(
                f"in_place_index must be an int or None, got {ipi!r}",
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )
        if ipi is not None and not 0 <= ipi < len(xs):
            raise self.error(
                f"in_place_index {ipi} out of range", status=Status.BAD_PARAM_OUT_OF_BOUND
            )


FLOAT_ATTRS = tuple(k for k in DEFAULT_ATTRS if k != "axis")  # Pointwise's number attributes

NODE_TYPES: dict[str, type[Node]] = {
    cls.kind: cls
    for cls in (Pointwise, Reduction, GenStats, Matmul, Reshape, Transpose, Slice, Concatenate)
}


def register_node_type(cls: type[Node]) -> type[Node]:
    """Make the node class ``cls`` known by its ``kind`` in ``NODE_TYPES``, the table
    ``Graph.deserialize`` rebuilds nodes from, and return it (so it serves as a class
    decorator). For node kinds defined outside this package; the built-in kinds register
    at the end of their modules. A kind another class holds is refused (BadParamError,
    BAD_PARAM_DUPLICATED_ENTRIES) unless that class has the same module and qualified
    name (the same definition run again, as when a module is reloaded)."""
    if not (isinstance(cls, type) and issubclass(cls, Node)) or cls.kind == Node.kind:
        raise BadParamError(
            f"needs a Node subclass with its own kind, got {cls!r:.60}",
            op="register_node_type",
            status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
        )
    old = NODE_TYPES.get(cls.kind)
    if (
        old is not None
        and old is not cls
        and (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__)
    ):
        raise BadParamError(
            f"kind {cls.kind!r} is {old.__module__}.{old.__qualname__}'s",
            op="register_node_type",
            status=Status.BAD_PARAM_DUPLICATED_ENTRIES,
        )
    NODE_TYPES[cls.kind] = cls
    return cls


def _row_major(t: TensorDesc) -> bool:
    """``t``'s strides are the packed row-major ones of its dims (size-1 dims aside)."""
    want = packed_strides(t.dims)
    return all(a == b for a, b, d in zip(t.strides, want, t.dims) if d != 1)


def _distinct(t) -> bool:
    """``t`` has strides and no two of its elements share an address by a zero stride
    (a broadcast input's strides would make an output overwrite itself)."""
    return t.stride is not None and all(s != 0 for s, d in zip(t.stride, t.dim) if d > 1)


def infer_strides_like(dims, like: TensorDesc | None):
    """Packed strides for ``dims`` in the stride order of ``like`` when ranks agree."""
    if like is not None and like.stride is not None and len(like.stride) == len(dims) and like.dim:
        # order from the reference tensor; broadcast (stride 0 / size 1) dims keep their place
        order = stride_order(like.stride)
        return list(packed_strides(dims, order))
    return list(packed_strides(dims))


def element_count(dims) -> int:
    return math.prod(dims)
