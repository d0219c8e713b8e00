"""The graph's tensor handle: a mutable builder with cudnn-frontend's chainable setters.

A ``Tensor`` belongs to one graph. Properties left unset (dims, strides, data type) are
inferred by ``Graph.validate()``, which then freezes every tensor into a ``TensorDesc``.

Also the argument coercions every builder shares (``as_int``, ``as_ints``, ``as_float``,
``as_enum``, ``as_type``): each takes exactly what its parameter means -- no ``int()``
truncating 3.5 to 3 or parsing '3', no bool standing for 0 / 1 -- and raises a typed
error naming the operation, the tensor and the parameter.
"""

from __future__ import annotations

import collections.abc
import enum
import json
import operator

import torch

from ..enums import DataType, TensorReordering
from ..errors import BadParamError, Status
from ..tensor import as_data_type


def _type_error(rule, op, tensor):
    return BadParamError(rule, op=op, tensor=tensor, status=Status.BAD_PARAM_ATTRIBUTE_TYPE)


def as_int(v, op: str, what: str, tensor: str | None = None) -> int:
    """``v`` as an int: an int or an integer with ``__index__`` (numpy, 0-d torch); a
    bool, a float or a string is refused."""
    if not isinstance(v, bool):
        try:
            return operator.index(v)
        except TypeError:
            pass
    raise _type_error(f"{what} must be an int, got {v!r} ({type(v).__name__})", op, tensor)


def as_ints(v, op: str, what: str, tensor: str | None = None) -> list[int]:
    """``v`` (a list, tuple, torch.Size, ...) as a list of ints, each as ``as_int``."""
    if isinstance(v, (str, bytes)) or not isinstance(v, collections.abc.Iterable):
        raise _type_error(
            f"{what} must be a sequence of ints, got {v!r} ({type(v).__name__})", op, tensor
        )
    return [as_int(a, op, f"{what}[{i}]", tensor) for i, a in enumerate(v)]


def as_float(v, op: str, what: str, tensor: str | None = None) -> float:
    """``v`` as a float: a real number (int, float, numpy or one-element torch); a bool
    or a string is refused."""
    if not isinstance(v, (bool, str, bytes)):
        try:
            return float(v)
        except (TypeError, ValueError, RuntimeError):
            pass
    raise _type_error(f"{what} must be a number, got {v!r} ({type(v).__name__})", op, tensor)


def as_enum(cls, v, op: str, what: str, tensor: str | None = None, ints: bool = True):
    """``v`` as a member of enum ``cls``: a member, its name (any case), a member of
    another enum with the same name, or (with ``ints``) its value."""
    if isinstance(v, cls):
        return v
    try:
        if isinstance(v, str):
            return cls[v.upper()]
        if isinstance(v, enum.Enum):
            return cls[v.name]
        if ints and not isinstance(v, bool):
            return cls(operator.index(v))
    except (KeyError, ValueError, TypeError):
        pass
    raise _type_error(
        f"{what} {v!r} is not a {cls.__name__} (one of {', '.join(cls.__members__)})", op, tensor
    )


def as_type(v, op: str, what: str = "data type", tensor: str | None = None) -> DataType:
    """``as_data_type`` naming the operation and the tensor; a float or a bool, which
    ``int()`` would truncate to some type (3.7 to INT8, True to DOUBLE), is refused."""
    known = isinstance(v, (DataType, torch.dtype, str)) or (
        hasattr(v, "name") and hasattr(v, "value")
    )
    if not known and not isinstance(v, bool):
        try:
            v, known = operator.index(v), True
        except TypeError:
            pass
    if not known:
        raise BadParamError(
            f"cannot interpret {v!r} as a {what} (a DataType, its name or a torch dtype)",
            op=op,
            tensor=tensor,
            status=Status.BAD_PARAM,
        )
    try:
        return as_data_type(v)
    except BadParamError as e:
        rule = e.rule if what == "data type" else f"{what}: {e.rule}"
        raise BadParamError(rule, op=op, tensor=tensor, status=e.status) from None
    except (KeyError, ValueError, TypeError):  # an enum member of names not ours
        raise BadParamError(
            f"cannot interpret {v!r} as a {what}", op=op, tensor=tensor, status=Status.BAD_PARAM
        ) from None


class Tensor:
    """A tensor of an operation graph (cudnn-frontend's ``Tensor_attributes``)."""

    __slots__ = (
        "_graph",
        "dim",
        "stride",
        "data_type",
        "uid",
        "name",
        "is_virtual",
        "is_pass_by_value",
        "is_output",
        "value",
        "_uid_assigned",
        "ragged_offset",
        "reordering_type",
        "__weakref__",
    )

    def __init__(
        self,
        graph,
        dim=None,
        stride=None,
        data_type=DataType.NOT_SET,
        is_virtual=False,
        is_pass_by_value=False,
        name="",
        uid=-1,
        value=None,
    ):
        self._graph = graph
        self.name, self.uid = name, -1
        self.dim = self._ints(dim, "dim") if dim is not None else None
        self.stride = self._ints(stride, "stride") if stride is not None else None
        self.data_type = as_type(data_type, self._op(), tensor=self.label())
        self.uid = as_int(uid, self._op(), "uid", self.label())
        self._uid_assigned = self.uid >= 0
        self.is_virtual = bool(is_virtual)
        self.is_pass_by_value = bool(is_pass_by_value)
        self.is_output = False
        self.value = value  # the host scalar of a pass-by-value tensor, when known
        self.ragged_offset = None  # cudnn-frontend's ragged (THD) offsets: NOT_SUPPORTED
        self.reordering_type = TensorReordering.NONE

    def _op(self) -> str:
        name = getattr(self._graph, "name", "")
        return f"graph '{name}'" if name else "graph"

    def _ints(self, v, what: str) -> list[int]:
        return as_ints(v, self._op(), what, self.label())

    # -- cudnn-frontend setters (chainable) and getters --------------------------------
    def set_output(self, flag: bool = True) -> "Tensor":
        self.is_output = bool(flag)
        self.is_virtual = not flag
        return self

    def set_data_type(self, data_type) -> "Tensor":
        self.data_type = as_type(data_type, self._op(), tensor=self.label())
        return self

    def set_dim(self, dim) -> "Tensor":
        self.dim = self._ints(dim, "dim")
        return self

    def set_stride(self, stride) -> "Tensor":
        self.stride = self._ints(stride, "stride")
        return self

    def set_ragged_offset(self, offset) -> "Tensor":
        """cudnn-frontend's ragged (packed variable-length) offsets tensor; graphs holding
        one are NOT_SUPPORTED at validate."""
        if offset is not None and not isinstance(offset, Tensor):
            raise BadParamError(
                f"ragged_offset must be a graph tensor, got {type(offset).__name__}",
                op=self._op(),
                tensor=self.label(),
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            )
        self.ragged_offset = offset
        return self

    def get_reordering_type(self):
        return self.reordering_type

    def set_reordering_type(self, reordering) -> "Tensor":
        """cudnn-frontend's ``tensor_reordering``; anything but NONE is NOT_SUPPORTED at
        validate (tensors are plain strided memory)."""
        try:
            self.reordering_type = TensorReordering(reordering)
        except ValueError:
            raise BadParamError(
                f"reordering_type {reordering!r:.40} is not a cudnn.tensor_reordering",
                op=self._op(),
                tensor=self.label(),
                status=Status.BAD_PARAM_ATTRIBUTE_TYPE,
            ) from None
        return self

    def set_uid(self, uid: int) -> "Tensor":
        self.uid = as_int(uid, self._op(), "uid", self.label())
        self._uid_assigned = True
        return self

    def set_name(self, name: str) -> "Tensor":
        self.name = name
        return self

    def set_is_virtual(self, flag: bool) -> "Tensor":
        self.is_virtual = bool(flag)
        self.is_output = not flag
        return self

    def set_is_pass_by_value(self, flag: bool) -> "Tensor":
        self.is_pass_by_value = bool(flag)
        return self

    def get_dim(self):
        return list(self.dim) if self.dim is not None else []

    def get_stride(self):
        return list(self.stride) if self.stride is not None else []

    def get_data_type(self) -> DataType:
        return self.data_type

    def get_uid(self) -> int:
        return self.uid

    def get_name(self) -> str:
        return self.name

    def get_is_virtual(self) -> bool:
        return self.is_virtual

    def get_is_pass_by_value(self) -> bool:
        return self.is_pass_by_value

    def _mark_created(self) -> "Tensor":
        self._uid_assigned = False
        return self

    def _with_value(self, value) -> "Tensor":
        self.value = value
        return self

    def label(self) -> str:
        return self.name or (f"uid {self.uid}" if self.uid >= 0 else "unnamed tensor")

    def __repr__(self) -> str:
        return json.dumps(
            {
                "name": self.name,
                "uid": self.uid,
                "dim": self.dim,
                "stride": self.stride,
                "data_type": self.data_type.name,
                "is_virtual": self.is_virtual,
                "is_pass_by_value": self.is_pass_by_value,
            }
        )

    # Tensors are keys of variant packs: identity semantics.
    __hash__ = object.__hash__
