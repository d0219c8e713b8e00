"""The graph's tensor handle: a mutable builder with cudnn-frontend's chainable setters.

A ``Tensor`` belongs to one graph. Properties left unset (dims, strides, data type) are
inferred by ``Graph.validate()``, which then freezes every tensor into a ``TensorDesc``.
"""
from __future__ import annotations

import json

from ..enums import DataType
from ..tensor import as_data_type


class Tensor:
    """A tensor of an operation graph (cudnn-frontend's ``Tensor_attributes``)."""

    __slots__ = ("_graph", "dim", "stride", "data_type", "uid", "name", "is_virtual",
                 "is_pass_by_value", "is_output", "value", "_uid_assigned", "__weakref__")

    def __init__(self, graph, dim=None, stride=None, data_type=DataType.NOT_SET,
                 is_virtual=False, is_pass_by_value=False, name="", uid=-1, value=None):
        self._graph = graph
        self.dim = list(dim) if dim is not None else None
        self.stride = list(stride) if stride is not None else None
        self.data_type = as_data_type(data_type)
        self.uid = int(uid)
        self._uid_assigned = self.uid >= 0
        self.name = name
        self.is_virtual = bool(is_virtual)
        self.is_pass_by_value = bool(is_pass_by_value)
        self.is_output = False
        self.value = value  # the host scalar of a pass-by-value tensor, when known

    # -- cudnn-frontend setters (chainable) and getters --------------------------------
    def set_output(self, flag: bool = True) -> "Tensor":
        self.is_output = bool(flag)
        self.is_virtual = not flag
        return self

    def set_data_type(self, data_type) -> "Tensor":
        self.data_type = as_data_type(data_type)
        return self

    def set_dim(self, dim) -> "Tensor":
        self.dim = [int(d) for d in dim]
        return self

    def set_stride(self, stride) -> "Tensor":
        self.stride = [int(s) for s in stride]
        return self

    def set_uid(self, uid: int) -> "Tensor":
        self.uid = int(uid)
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
        return json.dumps({"name": self.name, "uid": self.uid, "dim": self.dim,
                           "stride": self.stride, "data_type": self.data_type.name,
                           "is_virtual": self.is_virtual,
                           "is_pass_by_value": self.is_pass_by_value})

    # Tensors are keys of variant packs: identity semantics.
    __hash__ = object.__hash__
