"""Tensor descriptors: frozen, self-validating descriptions of a buffer.

A ``TensorDesc`` says how a block of memory is read as an N-D tensor (N <= 8):
element ``(i0, ..., iN-1)`` lives at ``sum(i_k * strides[k])`` elements from the base.
Strides may be any non-negative values (non-packed layouts are allowed); a zero stride
broadcasts. A virtual tensor lives only inside a fused kernel; a pass-by-value tensor is
a host scalar passed to the kernel by value.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from .enums import DataType
from .errors import BadParamError, Status

MAX_DIMS = 8

_TO_TORCH = {
    DataType.FLOAT: torch.float32,
    DataType.DOUBLE: torch.float64,
    DataType.HALF: torch.float16,
    DataType.BFLOAT16: torch.bfloat16,
    DataType.INT8: torch.int8,
    DataType.INT32: torch.int32,
    DataType.INT64: torch.int64,
    DataType.UINT8: torch.uint8,
    DataType.BOOLEAN: torch.bool,
}
if hasattr(torch, "float8_e4m3fn"):
    _TO_TORCH[DataType.FP8_E4M3] = torch.float8_e4m3fn
    _TO_TORCH[DataType.FP8_E5M2] = torch.float8_e5m2
_FROM_TORCH = {v: k for k, v in _TO_TORCH.items()}


def to_torch_dtype(data_type: DataType) -> torch.dtype:
    if data_type not in _TO_TORCH:
        raise BadParamError(
            f"data type {DataType(data_type).name} has no torch equivalent here",
            status=Status.NOT_SUPPORTED_DATA_TYPE,
        )
    return _TO_TORCH[data_type]


def as_data_type(value) -> DataType:
    """Accept a DataType, its name, or a torch dtype."""
    if isinstance(value, DataType):
        return value
    if isinstance(value, torch.dtype):
        if value not in _FROM_TORCH:
            raise BadParamError(
                f"torch dtype {value} is not a supported data type",
                status=Status.NOT_SUPPORTED_DATA_TYPE,
            )
        return _FROM_TORCH[value]
    if isinstance(value, str):
        try:
            return DataType[value.upper()]
        except KeyError:
            raise BadParamError(f"unknown data type name {value!r}") from None
    if hasattr(value, "name") and hasattr(value, "value"):  # another enum with our names
        try:
            return DataType[str(value.name).upper()]
        except KeyError:
            raise BadParamError(
                f"{type(value).__name__}.{value.name} names no data type "
                f"(one of {', '.join(DataType.__members__)})"
            ) from None
    try:
        return DataType(int(value))
    except (TypeError, ValueError):
        raise BadParamError(f"cannot interpret {value!r} as a data type") from None


def packed_strides(dims, order=None) -> tuple[int, ...]:
    """Packed strides for ``dims``. ``order`` lists dimension indices from the
    outermost (largest stride) to the innermost; default is row-major."""
    n = len(dims)
    order = list(range(n)) if order is None else list(order)
    strides = [0] * n
    running = 1
    for d in reversed(order):
        strides[d] = running
        running *= max(int(dims[d]), 1)
    return tuple(strides)


def nchw_strides(dims) -> tuple[int, ...]:
    """Packed NCHW (NCDHW, ...) strides: row-major."""
    return packed_strides(dims)


def nhwc_strides(dims) -> tuple[int, ...]:
    """Packed NHWC (NDHWC, ...) strides: channel innermost."""
    n = len(dims)
    if n < 3:
        return packed_strides(dims)
    return packed_strides(dims, [0] + list(range(2, n)) + [1])


def stride_order(strides) -> list[int]:
    """Dimension indices sorted from largest stride to smallest (ties keep order)."""
    return sorted(range(len(strides)), key=lambda d: -strides[d])


@dataclasses.dataclass(frozen=True)
class TensorDesc:
    """Frozen tensor descriptor.

    dims, strides: tuples of equal length (1..8), strides in elements.
    """

    dims: tuple[int, ...]
    strides: tuple[int, ...]
    data_type: DataType
    uid: int
    name: str = ""
    is_virtual: bool = False
    is_pass_by_value: bool = False

    def __post_init__(self):
        put = object.__setattr__
        dims, strides = tuple(map(int, self.dims)), tuple(map(int, self.strides))
        dt = self.data_type if type(self.data_type) is DataType else DataType(self.data_type)
        put(self, "dims", dims)
        put(self, "strides", strides)
        put(self, "data_type", dt)
        if not 1 <= len(dims) <= MAX_DIMS:
            raise BadParamError(
                f"has {len(dims)} dimensions; 1 to {MAX_DIMS} allowed",
                tensor=self.label(),
                status=Status.BAD_PARAM_OUT_OF_BOUND,
            )
        if len(strides) != len(dims):
            raise BadParamError(
                f"{len(strides)} strides for {len(dims)} dimensions",
                tensor=self.label(),
                status=Status.BAD_PARAM_SHAPE_MISMATCH,
            )
        if min(dims) < 0:
            raise BadParamError(
                f"negative dimension in {dims}",
                tensor=self.label(),
                status=Status.BAD_PARAM_OUT_OF_BOUND,
            )
        if min(strides) < 0:
            raise BadParamError(
                f"negative stride in {strides}",
                tensor=self.label(),
                status=Status.BAD_PARAM_OUT_OF_BOUND,
            )
        if dt == DataType.NOT_SET:
            raise BadParamError(
                "data type is not set and could not be inferred",
                tensor=self.label(),
                status=Status.BAD_PARAM_NOT_FINALIZED,
            )
        # derived values read on every execute: computed once (the descriptor is frozen)
        span = 0
        if 0 not in dims:
            span = 1
            for d, s in zip(dims, strides):
                span += (d - 1) * s
        put(self, "_span", span)
        put(self, "_nbytes", span * dt.itemsize)
        put(self, "_torch", _TO_TORCH.get(dt))

    @property
    def numel(self) -> int:
        return math.prod(self.dims)

    @property
    def ndim(self) -> int:
        return len(self.dims)

    @property
    def torch_dtype(self) -> torch.dtype:
        t = self._torch
        return t if t is not None else to_torch_dtype(self.data_type)

    @property
    def span(self) -> int:
        """Elements from the first to one past the last addressed element."""
        return self._span

    @property
    def size_in_bytes(self) -> int:
        return self._nbytes

    def is_packed(self) -> bool:
        """True when elements occupy exactly numel distinct, dense positions."""
        pairs = sorted((s, d) for d, s in zip(self.dims, self.strides) if d != 1)
        running = 1
        for s, d in pairs:
            if s != running:
                return False
            running *= d
        return True

    def has_overlap(self) -> bool:
        """True when two distinct indices address the same element (e.g. zero strides)."""
        known = self.__dict__.get("_overlap")
        if known is not None:
            return known
        pairs = sorted((s, d) for d, s in zip(self.dims, self.strides) if d > 1)
        extent, overlap = 1, False
        for s, d in pairs:
            if s < extent:
                overlap = True
                break
            extent = s * (d - 1) + extent
        object.__setattr__(self, "_overlap", overlap)  # frozen: computed once
        return overlap

    def label(self) -> str:
        return self.name or f"uid {self.uid}"

    def to_json(self) -> dict:
        return {
            "uid": self.uid,
            "name": self.name,
            "dim": list(self.dims),
            "stride": list(self.strides),
            "data_type": self.data_type.name,
            "is_virtual": self.is_virtual,
            "is_pass_by_value": self.is_pass_by_value,
        }

    @classmethod
    def from_json(cls, d: dict) -> "TensorDesc":
        return cls(
            tuple(d["dim"]),
            tuple(d["stride"]),
            DataType[d["data_type"]],
            d["uid"],
            d.get("name", ""),
            d.get("is_virtual", False),
            d.get("is_pass_by_value", False),
        )
