"""Tensor and filter descriptors (cudnnTensorDescriptor_t, cudnnFilterDescriptor_t)."""

from __future__ import annotations

import math

from ..enums import DataType
from ..tensor import TensorDesc, nchw_strides, nhwc_strides
from .common import TensorFormat, as_dtype, as_enum, as_int, as_ints, check


class TensorDescriptor:
    """Mutable, as in C: create, then set; ``desc()`` gives the frozen TensorDesc."""

    def __init__(self):
        self.data_type = None
        self.dims: tuple = ()
        self.strides: tuple = ()

    def is_set(self) -> bool:
        return self.data_type is not None

    def desc(self, uid: int = 1, name: str = "") -> TensorDesc:
        check(self.is_set(), "descriptor was never set", "tensor descriptor", name or None)
        return TensorDesc(self.dims, self.strides, self.data_type, uid, name)


class FilterDescriptor(TensorDescriptor):
    """A filter is a tensor [K, C/groups, spatial...] with a format."""

    format = TensorFormat.NCHW


def create_tensor_descriptor() -> TensorDescriptor:
    return TensorDescriptor()


def destroy_tensor_descriptor(desc) -> None:
    desc.data_type = None


# cuDNN's descriptors hold int dims and strides; sizes in bytes are 64-bit
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1


def _strides_for(op, format, dims) -> tuple:
    fmt = as_enum(op, "format", TensorFormat, format)
    return nhwc_strides(dims) if fmt == TensorFormat.NHWC else nchw_strides(dims)


def _set(desc, op, data_type, dims, strides=None, format=TensorFormat.NCHW):
    """Check and store dims, strides (packed in ``format`` when None) and the data type."""
    dims = as_ints(op, "dims", dims)
    check(all(d > 0 for d in dims), f"dims {list(dims)} must be positive", op)
    check(
        all(d <= INT32_MAX for d in dims),
        f"dims {list(dims)} exceed the int32 range of a descriptor ({INT32_MAX})",
        op,
    )
    strides = _strides_for(op, format, dims) if strides is None else as_ints(op, "strides", strides)
    check(len(strides) == len(dims), f"{len(strides)} strides for {len(dims)} dims", op)
    check(all(s > 0 for s in strides), f"strides {list(strides)} must be positive", op)
    check(
        all(s <= INT32_MAX for s in strides),
        f"strides {list(strides)} exceed the int32 range of a descriptor ({INT32_MAX})",
        op,
    )
    data_type = as_dtype(op, "data_type", data_type)
    check(data_type != DataType.NOT_SET, "data type must be set", op)
    span = 1 + sum((d - 1) * s for d, s in zip(dims, strides))
    check(
        math.prod(dims) <= INT64_MAX and span * data_type.itemsize <= INT64_MAX,
        f"dims {list(dims)} with strides {list(strides)} address more than 2^63 bytes",
        op,
    )
    desc.data_type, desc.dims, desc.strides = data_type, dims, strides


def set_tensor_4d_descriptor(desc, format, data_type, n, c, h, w) -> None:
    _set(desc, "set_tensor_4d_descriptor", data_type, (n, c, h, w), format=format)


def set_tensor_4d_descriptor_ex(
    desc, data_type, n, c, h, w, n_stride, c_stride, h_stride, w_stride
) -> None:
    _set(
        desc,
        "set_tensor_4d_descriptor_ex",
        data_type,
        (n, c, h, w),
        (n_stride, c_stride, h_stride, w_stride),
    )


def _nb_dims(op, nb_dims, dims, low, high) -> None:
    n = as_int(op, "nb_dims", nb_dims)
    dims = as_ints(op, "dims", dims)
    check(
        low <= n <= high and len(dims) == n,
        f"nb_dims {n} must be {low}..{high} and match {len(dims)} dims",
        op,
    )


def set_tensor_nd_descriptor(desc, data_type, nb_dims, dims, strides) -> None:
    op = "set_tensor_nd_descriptor"
    _nb_dims(op, nb_dims, dims, 3, 8)
    _set(desc, op, data_type, dims, strides)


def set_tensor_nd_descriptor_ex(desc, format, data_type, nb_dims, dims) -> None:
    op = "set_tensor_nd_descriptor_ex"
    _nb_dims(op, nb_dims, dims, 3, 8)
    _set(desc, op, data_type, dims, format=format)


def get_tensor_4d_descriptor(desc) -> tuple:
    """(data_type, n, c, h, w, n_stride, c_stride, h_stride, w_stride)."""
    check(len(desc.dims) == 4, "not a 4-D descriptor", "get_tensor_4d_descriptor")
    return (desc.data_type,) + desc.dims + desc.strides


def get_tensor_nd_descriptor(desc) -> tuple:
    """(data_type, nb_dims, dims, strides)."""
    return desc.data_type, len(desc.dims), list(desc.dims), list(desc.strides)


def get_tensor_size_in_bytes(desc) -> int:
    return desc.desc().size_in_bytes


def create_filter_descriptor() -> FilterDescriptor:
    return FilterDescriptor()


def destroy_filter_descriptor(desc) -> None:
    desc.data_type = None


def set_filter_4d_descriptor(desc, data_type, format, k, c, h, w) -> None:
    op = "set_filter_4d_descriptor"
    _set(desc, op, data_type, (k, c, h, w), format=format)
    desc.format = as_enum(op, "format", TensorFormat, format)


def set_filter_nd_descriptor(desc, data_type, format, nb_dims, dims) -> None:
    op = "set_filter_nd_descriptor"
    _nb_dims(op, nb_dims, dims, 3, 5)
    _set(desc, op, data_type, dims, format=format)
    desc.format = as_enum(op, "format", TensorFormat, format)


def get_filter_4d_descriptor(desc) -> tuple:
    """(data_type, format, k, c, h, w)."""
    check(len(desc.dims) == 4, "not a 4-D filter", "get_filter_4d_descriptor")
    return (desc.data_type, desc.format) + desc.dims


def get_filter_nd_descriptor(desc) -> tuple:
    return desc.data_type, desc.format, len(desc.dims), list(desc.dims)
